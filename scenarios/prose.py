"""A report's words, kept apart from the code that computes its figures.

Each scenario's prose lives in ``scenarios/templates/<report>.md`` as named snippets; the
report builder picks the snippets (a finding that depends on the evidence chooses between
two of them in code) and fills each with its figures through ``str.format``: ``{name}``, or
``{name:.2f}`` where the template decides how a figure reads.

A template file is Markdown cut into snippets by marker lines ``<!-- snippet-name -->``
(text before the first marker is a note for the reader). Inside a snippet, lines are joined
by one space, so prose can be wrapped freely; a blank line is a paragraph break; the
snippet's leading and trailing whitespace is dropped. A marker ``<!-- name keep-lines -->``
keeps the snippet's line breaks as written (for a report whose paragraph is wrapped).
``{{`` and ``}}`` are literal braces.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

_MARK = re.compile(r"^<!-- ([a-z0-9_]+)( keep-lines)? -->[ \t]*$", re.M)


@cache
def snippets(report: str, folder: str | None = None) -> dict[str, str]:
    """The named snippets of ``templates/<report>.md``, unwrapped: in ``folder``, or (None)
    the scenarios package's ``templates/``."""
    where = resources.files("scenarios") / "templates" if folder is None else Path(folder)
    text = (where / f"{report}.md").read_text(encoding="utf-8")
    parts = _MARK.split(text)
    out: dict[str, str] = {}
    for name, keep, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in out:
            raise ValueError(f"templates/{report}.md: snippet {name!r} twice")
        if keep:
            out[name] = body.strip()
            continue
        paras = (" ".join(ln.strip() for ln in p.splitlines() if ln.strip())
                 for p in re.split(r"\n[ \t]*\n", body.strip()))
        out[name] = "\n\n".join(p for p in paras if p)
    return out


class Prose:
    """One report's template: ``words("setup", servers=2)`` fills the snippet ``setup``."""

    def __init__(self, report: str, folder: str | None = None) -> None:
        self.report = report
        self.folder = folder

    @classmethod
    def of_module(cls, module: str) -> Prose:
        """The template named as the module ``module`` (a dotted name) is, in the
        ``templates/`` folder beside the module's own folder: a scenario's ``WORDS =
        Prose.of_module(__name__)`` reads ``scenarios/templates/<its file name>.md``, and a
        scenario copied under a new name, its template copied with it, needs no edit."""
        file = getattr(sys.modules.get(module), "__file__", None)
        folder = None if file is None else str(Path(file).resolve().parent.parent / "templates")
        return cls(module.rpartition(".")[2], folder)

    def __call__(self, name: str, /, **values: Any) -> str:
        try:
            text = snippets(self.report, self.folder)[name]
        except KeyError:
            raise KeyError(f"templates/{self.report}.md has no snippet {name!r}") from None
        return text.format(**values)
