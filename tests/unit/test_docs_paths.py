"""The README and docs/ name modules where they are, not by the names kept for old imports.

Moved modules keep their old name for one release (``testbed/lab.py`` hands out
``testbed/shell/lab.py``, ``testbed/plan.py`` re-exports ``controllers/plan.py``); a reader
sent to the old name finds a stub, and the stubs go away. So every module path or dotted
name the docs give must exist and must not be such a stub, except in the one paragraph that
lists the old names on purpose.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("controllers", "testbed", "traffic", "ops", "scenarios", "astral_lab",
            "benchmarks", "examples")
#: packages the docs also name as dotted modules (``testbed.models.bounds``)
DOTTED = ("controllers", "testbed", "traffic", "ops", "scenarios")
#: the paragraph that names the old module paths on purpose
OLD_NAMES = "still import, as aliases"


def is_stub(path: Path) -> bool:
    """A module kept under an old name: it aliases or re-exports the moved one."""
    text = path.read_text(encoding="utf-8")
    return "sys.modules[__name__] = _moved" in text or "Kept for one release" in text or \
        "kept for one release" in text


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def paragraphs(path: Path) -> list[str]:
    return [p for p in path.read_text(encoding="utf-8").split("\n\n") if OLD_NAMES not in p]


def module_file(dotted: str) -> Path | None:
    """The file of the longest importable prefix of ``dotted`` (a module, or module.attr)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:n])
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.exists():
                return cand
    return None


def test_the_stub_rule_finds_the_stubs() -> None:
    for stub in ("lab.py", "plan.py"):  # while the old names are kept
        path = REPO / "testbed" / stub
        assert not path.exists() or is_stub(path)
    assert not is_stub(REPO / "testbed" / "shell" / "lab.py")
    assert not is_stub(REPO / "controllers" / "plan.py")


def test_docs_name_real_module_paths() -> None:
    pkgs = "|".join(PACKAGES)
    bad = []
    for doc in docs():
        for para in paragraphs(doc):
            for m in re.finditer(rf"(?<![\w./-])((?:{pkgs})/[\w/]+?)(\.py)?(?![\w/])", para):
                path = REPO / (m[1] + ".py")
                if m[2] and not path.exists():
                    bad.append(f"{doc.name}: {m[0]} does not exist")
                elif path.exists() and is_stub(path):
                    bad.append(f"{doc.name}: {m[0]} is a stub kept for old imports")
            for m in re.finditer(rf"`((?:{'|'.join(DOTTED)})\.[\w.]+)`", para):
                found = module_file(m[1])
                if found is None:
                    bad.append(f"{doc.name}: `{m[1]}` names no module")
                elif is_stub(found):
                    bad.append(f"{doc.name}: `{m[1]}` is a stub kept for old imports")
    assert not bad, "\n".join(bad)


def test_the_old_names_paragraph_names_only_stubs() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    para = next((p for p in text.split("\n\n") if OLD_NAMES in p), None)
    if para is None:  # the old names are gone, and the paragraph with them
        return
    old, new = para.split("as aliases", 1)
    for name in re.findall(r"`([\w.]+)`", old):
        found = module_file(name)
        assert found is not None and is_stub(found), name
        assert importlib.util.find_spec(name) is not None, name
    for name in re.findall(r"`([\w.]+)`", new):
        found = module_file(name)
        assert found is not None and not is_stub(found), name
