"""The models package keeps its layering: what the split of the flow and cost models promised.

Reading guide. The old module paths (``testbed.flowmodel``, ``testbed.cost``,
``testbed.maxmin``) hand out the very objects of the new modules, the component cache
included, so the rest of the suite, which imports them through those paths, tests the new
code. Then the layering, read from the source (imports inside functions count): no module
of ``testbed/models/`` is over 800 lines, imports argparse, ``astral_lab`` or an old path,
or takes part in an import cycle with its siblings.
"""

from __future__ import annotations

import ast
import importlib
import os

import pytest

import testbed.models

MODELS = os.path.dirname(testbed.models.__file__)
TESTBED = os.path.dirname(MODELS)
MODULES = sorted(f[:-3] for f in os.listdir(MODELS) if f.endswith(".py"))
SHIMS = {"flowmodel": "testbed.models.flowmodel", "cost": "testbed.models.cost",
         "maxmin": "testbed.models.maxmin"}


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


@pytest.mark.parametrize("old, new", sorted(SHIMS.items()))
def test_old_paths_hand_out_the_new_objects(old: str, new: str) -> None:
    shim, mod = importlib.import_module(f"testbed.{old}"), importlib.import_module(new)
    assert shim.__all__
    for name in shim.__all__:
        assert getattr(shim, name) is getattr(mod, name), name


def test_the_flow_model_shim_shares_the_component_cache() -> None:
    from testbed import flowmodel
    from testbed.models import maxmin, solver

    assert flowmodel._COMPONENT_CACHE is solver._COMPONENT_CACHE
    assert flowmodel._never_binding is solver._never_binding
    assert flowmodel.maxmin is maxmin


@pytest.mark.parametrize("name", MODULES)
def test_a_models_module_stays_in_its_layer(name: str) -> None:
    path = os.path.join(MODELS, f"{name}.py")
    with open(path, encoding="utf-8") as f:
        assert sum(1 for _ in f) <= 800
    bad = {m for m in imports(path) if m == "argparse" or m.split(".")[0] == "astral_lab"
           or m in {f"testbed.{s}" for s in SHIMS}}
    assert not bad, f"testbed/models/{name}.py imports {sorted(bad)}"


@pytest.mark.parametrize("shim", sorted(SHIMS))
def test_the_old_paths_import_no_command_line(shim: str) -> None:
    bad = {m for m in imports(os.path.join(TESTBED, f"{shim}.py"))
           if m == "argparse" or m.split(".")[0] == "astral_lab"}
    assert not bad


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
