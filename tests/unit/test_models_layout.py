"""The models package keeps its layering: what the split of the flow and cost models promised.

Read from the source (imports inside functions count): no module of ``testbed/models/`` is
over 800 lines, imports argparse or ``astral_lab`` (the command-line glue lives there), or
takes part in an import cycle with its siblings.
"""

from __future__ import annotations

import ast
import os

import pytest

import testbed.models

MODELS = os.path.dirname(testbed.models.__file__)
MODULES = sorted(f[:-3] for f in os.listdir(MODELS) if f.endswith(".py"))


def imports(path: str) -> set[str]:
    """Every module ``path`` imports, anywhere in it (``from a import b`` gives a and a.b)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


@pytest.mark.parametrize("name", MODULES)
def test_a_models_module_stays_in_its_layer(name: str) -> None:
    path = os.path.join(MODELS, f"{name}.py")
    with open(path, encoding="utf-8") as f:
        assert sum(1 for _ in f) <= 800
    bad = {m for m in imports(path) if m == "argparse" or m.split(".")[0] == "astral_lab"}
    assert not bad, f"testbed/models/{name}.py imports {sorted(bad)}"


def test_the_models_modules_import_no_cycle() -> None:
    deps = {name: {m.split(".")[2] for m in imports(os.path.join(MODELS, f"{name}.py"))
                   if m.startswith("testbed.models.") and m.split(".")[2] in MODULES}
            for name in MODULES}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name in done:
            return
        for d in sorted(deps[name]):
            visit(d, (*path, name))
        done.add(name)

    for name in MODULES:
        visit(name, ())
