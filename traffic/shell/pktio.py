"""Build and find ``astral-pktio``, the compiled sender/receiver of the replay.

``make setup`` builds it once into the venv's ``bin/`` (next to the Python that runs the lab);
``build()`` rebuilds it when the C source is newer than the binary. The compiler and zlib's
headers come from the apt packages ``scripts/setup.sh`` installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from traffic.shell import programs

SOURCE = Path(__file__).resolve().parents[1] / "csrc" / "pktio.c"
NAME = programs.PKTIO
CFLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-format-truncation"]


class HelperMissing(RuntimeError):
    """The compiled traffic plane is not built here."""


def default_path() -> Path:
    """Where ``make setup`` puts the helper: beside the running interpreter."""
    return Path(sys.executable).parent / NAME


def path() -> str:
    """The helper to run (``ASTRAL_PKTIO`` overrides); raise ``HelperMissing`` with the fix."""
    env = os.environ.get("ASTRAL_PKTIO")
    if env:
        return env
    here = default_path()
    if here.exists() and not stale(here):
        return str(here)
    found = shutil.which(NAME)
    if found and not stale(Path(found)):
        return found
    why = "is older than its source" if here.exists() else "is not built"
    raise HelperMissing(f"the compiled traffic plane ({here}) {why}: run 'sudo make setup' "
                        "(or use the Python plane: plane='python', --plane python)")


def stale(binary: Path) -> bool:
    """Whether ``binary`` predates the C source (a pull changed it)."""
    try:
        return binary.stat().st_mtime < SOURCE.stat().st_mtime
    except OSError:
        return True


def build(out: Path | None = None, force: bool = False) -> Path:
    """Compile the helper to ``out`` (default: beside the interpreter) unless it is current."""
    out = out or default_path()
    if not force and out.exists() and not stale(out):
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise HelperMissing("no C compiler: install gcc (sudo make setup does)")
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    proc = subprocess.run([cc, *CFLAGS, "-o", str(tmp), str(SOURCE), "-lz"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise HelperMissing(f"building {NAME} failed (is zlib1g-dev installed?):\n"
                            f"{proc.stderr.strip()[-2000:]}")
    os.replace(tmp, out)
    return out
