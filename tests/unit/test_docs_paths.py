"""The README and docs/ name modules where they are.

A reader sent to a module path or dotted name that does not exist is lost, and a moved
module leaves no name behind to catch them, so every module path the docs give must exist,
and every dotted name must be a module or a name defined at the top of one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("vocab", "controllers", "testbed", "traffic", "ops", "scenarios", "astral_lab",
            "benchmarks", "examples")
#: packages the docs also name as dotted modules (``testbed.models.bounds``)
DOTTED = ("vocab", "controllers", "testbed", "traffic", "ops", "scenarios")


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def module_file(dotted: str) -> tuple[Path, list[str]] | None:
    """The file of the longest importable prefix of ``dotted`` and the parts after it."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:n])
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.exists():
                return cand, parts[n:]
    return None


def top_level_names(path: Path) -> set[str]:
    """The names a module binds at its top: functions, classes, assignments, imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def names_a_module(dotted: str) -> bool:
    """``dotted`` is a module, or a module followed by a name that module defines."""
    found = module_file(dotted)
    if found is None:
        return False
    path, rest = found
    return not rest or rest[0] in top_level_names(path)


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
            elif not (REPO / (m[1] + ".py")).is_file() and not (REPO / m[1]).is_dir() \
                    and not m[1].endswith("__pycache__"):  # made by a run, not shipped
                bad.append(f"{doc.name}: {m[0]} is neither a module nor a folder")
        for m in re.finditer(rf"`((?:{'|'.join(DOTTED)})\.[\w.]+)`", text):
            if not names_a_module(m[1]):
                bad.append(f"{doc.name}: `{m[1]}` names no module, nor a name in one")
    assert not bad, "\n".join(bad)


def test_a_name_under_a_package_must_be_one_of_its_modules() -> None:
    assert names_a_module("testbed.shell.lab.Lab") and names_a_module("vocab.plan")
    assert not names_a_module("testbed.nosuch") and not names_a_module("testbed.shell.lab.Nope")
