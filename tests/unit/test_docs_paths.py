"""The README and docs/ name modules where they are.

Every path into a package (``testbed/shell/lab.py``, ``controllers/policies/``,
``testbed/shell/lab`` for the module) and every dotted
module name in backticks (``testbed.models.bounds``, ``vocab.paths.PathFinder``) the docs
give must exist in the tree, so a reader sent to a module finds it.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("vocab", "controllers", "testbed", "traffic", "ops", "scenarios", "astral_lab",
            "benchmarks", "examples")
#: packages the docs also name as dotted modules (``testbed.models.bounds``)
DOTTED = ("vocab", "controllers", "testbed", "traffic", "ops", "scenarios")


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def module_file(dotted: str) -> Path | None:
    """The file of the longest importable prefix of ``dotted`` (a module, or module.attr)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:n])
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.exists():
                return cand
    return None


def test_docs_name_real_module_paths() -> None:
    pkgs = "|".join(PACKAGES)
    bad = []
    for doc in docs():
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(rf"(?<![\w./-])((?:{pkgs})/[\w/]+?)(\.[A-Za-z]\w*)?(?![\w/])",
                             text):
            if m[2]:  # a file: testbed/shell/lab.py, traffic/csrc/pktio.c
                if not (REPO / m[0]).is_file():
                    bad.append(f"{doc.name}: {m[0]} does not exist")
            elif not (REPO / (m[1] + ".py")).is_file() and not (REPO / m[1]).is_dir():
                bad.append(f"{doc.name}: {m[0]} is neither a module nor a folder")
        for m in re.finditer(rf"`((?:{'|'.join(DOTTED)})\.[\w.]+)`", text):
            if module_file(m[1]) is None:
                bad.append(f"{doc.name}: `{m[1]}` names no module")
    assert not bad, "\n".join(bad)
