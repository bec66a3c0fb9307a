"""Where a user's results go: ``results/<timestamp>-<name>/``, written as ``.partial`` first.

Every command that produces results asks ``results_dir`` for a pair of paths,
writes into the ``.partial`` folder and renames it to the final name when done,
so a folder without the suffix is always complete, and an interrupted run leaves
a marked partial folder (which ``astral-lab clean`` keeps: it is the user's).
``ASTRAL_LAB_RESULTS`` moves the root (tests use it).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence

from vocab.validate import RESULTS_ROOM, out_dir


def results_root() -> str:
    return os.environ.get("ASTRAL_LAB_RESULTS", "results")


def check_output(output: str | None = None, files: Sequence[str] | None = None) -> None:
    """Refuse, before any work, a results folder that cannot be written: ``output`` (a
    command's ``-o DIR``, with the ``files`` it will hold; None: whatever it holds now) or
    else the results root, with room for the folder made in it. Nothing is created."""
    if output:
        out_dir(output, "-o", files=files)
        return
    root = results_root()
    out_dir(root, "ASTRAL_LAB_RESULTS:" if "ASTRAL_LAB_RESULTS" in os.environ
            else "results folder:", room=RESULTS_ROOM)


def results_dir(name: str, root: str | None = None) -> tuple[str, str]:
    """``(partial, final)``: a fresh ``.partial`` folder made now, and its final name."""
    if root is None:
        check_output()
        root = results_root()
    else:
        out_dir(root, "results folder:", room=RESULTS_ROOM)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    final = os.path.join(root, f"{stamp}-{name}")
    n = 1
    while os.path.exists(final) or os.path.exists(final + ".partial"):
        n += 1
        final = os.path.join(root, f"{stamp}-{name}-{n}")
    partial = final + ".partial"
    os.makedirs(partial)
    return partial, final


def output_dir(name: str, output: str | None, files: Sequence[str] | None = None
               ) -> tuple[str, str]:
    """``(write here, final)`` for a command with ``-o DIR``: that folder as is (checked
    with the ``files`` it will hold, as ``check_output``), else ``results_dir(name)``
    (write into the partial folder, then ``os.replace`` it)."""
    if output:
        check_output(output, files)
        os.makedirs(output, exist_ok=True)
        return output, output
    return results_dir(name)
