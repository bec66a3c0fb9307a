"""No import cycles between the project's modules, and pure modules stay pure.

Two modules that import each other (directly or through others) can be neither read nor
tested one without the other, and a lazy import inside a function only hides such a
cycle from Python, so imports inside functions count here. Pure modules (plans, models,
table arithmetic) must run anywhere, without root: they may not reach Mininet, os-ken,
subprocesses or sockets, not even through the project modules they import. And every name
has one home: a module's ``__all__`` lists only what it defines, and no module imports
another's ``_private`` name. Imports sit at the top of their module: one inside a function
is deliberate and says why in a ``# lazy: why`` comment on the line before its run of
imports (a heavy library such as matplotlib or Scapy, or a measured CLI start-up cost).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("astral_lab", "benchmarks", "controllers", "ops", "scenarios", "testbed", "traffic",
            "vocab")
#: The layers, bottom first: a package may import only packages before it. The vocabulary
#: every layer shares (wiring plan, flow records, plug-in discovery, validation rules) is the
#: bottom; the controller's decisions are pure; traffic models and puts packets on the wire;
#: testbed builds fabrics, models them and runs them (the root shell); ops watches them;
#: scenarios use all of it; the CLI and the benchmarks are the top.
LAYERS = ("vocab", "controllers", "traffic", "testbed", "ops", "scenarios", "benchmarks",
          "astral_lab")
#: What a pure module may not import, directly or through the project's modules.
IMPURE = ("mininet", "os_ken", "subprocess", "socket")
#: Modules that hold plain data and arithmetic (each checked; add new ones as they come).
PURE = (
    "vocab.plan", "vocab.plugins", "vocab.flows", "vocab.validate", "vocab.evidence",
    "vocab.lanemark",
    "controllers.policies", "controllers.policies.ecmp",
    "controllers.policies.ecmp_fluid", "controllers.policies.planned",
    "controllers.policies.adaptive", "controllers.policies.spray",
    "controllers.policies.qp_scaling", "controllers.policies.flowlet",
    "controllers.policies.plb", "traffic.hostlb", "traffic.iterations",
    "testbed.topologies.astral3",
    "testbed.topologies.rail3",
    "testbed.topologies.railonly", "testbed.topologies.fattree",
    "testbed.topologies", "testbed.fabricspec", "testbed.shuffle", "testbed.draw",
    "testbed.models.cost",
    "testbed.models.flowmodel", "testbed.models.maxmin", "testbed.faultmarks",
    "testbed.faultspec", "testbed.datapath",
    "testbed.shaping", "testbed.reachability", "testbed.faultkinds",
    "testbed.faultkinds.link_down", "testbed.faultkinds.link_flap",
    "testbed.faultkinds.link_degrade", "testbed.faultkinds.nic_loss",
    "testbed.faultkinds.switch_down", "testbed.faultkinds.controller_kill",
    "testbed.faultkinds.controller_restart", "testbed.faultkinds.hot_receiver",
    "testbed.faultkinds.partial_blackhole", "testbed.faultkinds.mtu_mismatch",
    "testbed.faultkinds.gray_loss", "testbed.faultkinds.corruption",
    "testbed.faultkinds._loss", "testbed.faultkinds._ports",
    "controllers.paths", "controllers.routing", "controllers.lb",
    "controllers.flowtable", "controllers.lbscore", "traffic.workload", "traffic.kernels",
    "scenarios.link_failure_metrics", "testbed.capture", "ops.dashboard", "ops.metrics",
    "ops.detectors", "ops.evaluate", "ops.baselines", "ops.questions", "ops.replay",
)

Graph = dict[str, set[str]]


def _literal_import(node: ast.Call) -> str | None:
    """The module a call ``importlib.import_module("a.b")``, ``import_module("a.b")`` or
    ``__import__("a.b")`` imports, when it is named by a literal string (else None)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else \
        func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and \
            not arg.value.startswith("."):
        return arg.value
    return None


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every name an import statement anywhere in ``tree`` imports, made absolute
    (``from a import b`` yields ``a.b``: a module, or a name in module ``a``), and every
    module an ``importlib.import_module`` or ``__import__`` call names by a literal string:
    those hide an import from the statements, not from the graph."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            literal = _literal_import(node)
            if literal is not None:
                names.append(literal)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts[:len(parts) - node.level + int(is_package)]
                base = ".".join(parts + ([node.module] if node.module else []))
            names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def import_graph(root: Path, packages: Iterable[str]) -> tuple[Graph, Graph]:
    """``(project graph, external imports)`` of every .py file in ``packages`` under ``root``.

    The project graph maps a module to the project modules it imports: an imported name
    resolves to the longest module it starts with, so ``from pkg import module`` is an
    import of that module and ``from module import name`` one of the module. The second
    graph maps a module to the top-level names of everything else it imports.
    """
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: Graph = {}
    external: Graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[module], external[module] = set(), set()
        for name in _imported(tree, module, path.name == "__init__.py"):
            parts = name.split(".")
            found = next((".".join(parts[:n]) for n in range(len(parts), 0, -1)
                          if ".".join(parts[:n]) in files), None)
            if found is None:
                external[module].add(parts[0])
            elif found != module:
                graph[module].add(found)
    return graph, external


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def package_cycles(graph: Graph) -> list[list[str]]:
    """Cycles between top-level packages (``testbed`` importing ``controllers`` and back)."""
    top: Graph = {}
    for module, targets in graph.items():
        top.setdefault(module.split(".")[0], set()).update(
            t.split(".")[0] for t in targets if t.split(".")[0] != module.split(".")[0])
    return cycles(top)


def reach(graph: Graph, start: str) -> set[str]:
    """``start`` and every project module it imports, directly or through others."""
    seen, todo = {start}, [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def impure(graph: Graph, external: Graph, module: str) -> list[str]:
    """``"via -> lib"`` for each forbidden library ``module`` reaches (empty when pure)."""
    return sorted(f"{via} -> {lib}" for via in reach(graph, module)
                  for lib in external.get(via, ()) if lib in IMPURE)


def test_no_module_imports_itself_through_others() -> None:
    graph, _ = import_graph(REPO, PACKAGES)
    found = cycles(graph)
    assert not found, ("modules that import each other, directly or through the others:\n"
                       + "\n".join(", ".join(c) for c in found))


def test_packages_import_only_the_layers_below_them() -> None:
    graph, _ = import_graph(REPO, PACKAGES)
    assert sorted(LAYERS) == sorted(PACKAGES)
    assert package_cycles(graph) == []
    rank = {p: i for i, p in enumerate(LAYERS)}
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                    if rank[t.split(".")[0]] > rank[m.split(".")[0]])
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


#: Packages whose pure code and shell are in separate folders: every module outside
#: ``<package>/shell/`` runs without root.
SPLIT = ("controllers", "testbed", "traffic", "ops")


def test_only_the_shell_folders_reach_mininet_os_ken_subprocess_or_socket() -> None:
    graph, external = import_graph(REPO, PACKAGES)
    bad = {}
    for module in graph:
        parts = module.split(".")
        if parts[0] in SPLIT and "shell" not in parts and impure(graph, external, module):
            bad[module] = impure(graph, external, module)
    assert not bad, bad
    assert all(any(m.startswith(f"{p}.shell.") for m in graph) for p in SPLIT)


def test_the_vocabulary_is_pure() -> None:
    graph, external = import_graph(REPO, PACKAGES)
    vocab = [m for m in graph if m.split(".")[0] == "vocab"]
    bad = {m: impure(graph, external, m) for m in vocab if impure(graph, external, m)}
    assert vocab and not bad, bad


def stand_ins(root: Path, packages: Iterable[str]) -> list[str]:
    """``"path: how"`` for each module that stands in for another: it replaces itself in
    ``sys.modules``, re-exports another wholesale (``import *``) or forwards attribute
    lookups (a module ``__getattr__``)."""
    bad = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            rel = path.relative_to(root).as_posix()
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                    bad.append(f"{rel}: module __getattr__")
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                    bad.append(f"{rel}: import *")
                elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                        and ast.unparse(node.value) == "sys.modules":
                    bad.append(f"{rel}: assigns sys.modules[...]")
    return bad


def package(root: Path) -> Path:
    """A throwaway package ``pkg`` under ``root`` (its ``__init__`` empty), for a rule's
    self-test to write its modules into."""
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    return pkg


def test_no_module_stands_in_for_another() -> None:
    """Every module name is the module that holds the code: a name that does not exist
    fails at the import that names it, and no reader or patch lands on a stand-in."""
    bad = stand_ins(REPO, PACKAGES)
    assert not bad, bad


def test_the_stand_in_rule_finds_each_kind(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    (pkg / "real.py").write_text("def __getattr__x():\n    pass\n")
    (pkg / "alias.py").write_text("import sys\nfrom pkg import real\n"
                                  "sys.modules[__name__] = real\n")
    (pkg / "star.py").write_text("from pkg.real import *\n")
    (pkg / "fwd.py").write_text("def __getattr__(name):\n    return name\n")
    assert stand_ins(tmp_path, ["pkg"]) == [
        "pkg/alias.py: assigns sys.modules[...]", "pkg/fwd.py: module __getattr__",
        "pkg/star.py: import *"]


def test_pure_modules_reach_no_mininet_os_ken_subprocess_or_socket() -> None:
    graph, external = import_graph(REPO, PACKAGES)
    assert set(PURE) <= set(graph), sorted(set(PURE) - set(graph))
    bad = {m: impure(graph, external, m) for m in PURE if impure(graph, external, m)}
    assert not bad, bad


#: the most lines one module may have: past it, a module holds more than one idea
MAX_LINES = 800


def test_no_module_is_over_800_lines() -> None:
    long = {}
    for package in (*PACKAGES, "examples"):
        for path in sorted((REPO / package).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > MAX_LINES:
                long[str(path.relative_to(REPO))] = n
    assert not long, long


def test_the_graph_finds_a_cycle_through_a_lazy_relative_import(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")
    (pkg / "c.py").write_text("import subprocess\nimport pkg.a\n")
    (pkg / "d.py").write_text("from pkg.c import g\n")
    (pkg / "f.py").write_text("import importlib\n\ndef f():\n"
                              "    return importlib.import_module('pkg.c'), __import__('pkg.d')\n"
                              "\ndef g(name):\n    return importlib.import_module(name)\n")
    graph, external = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"}  # module, not package
    # an import by a literal name counts; one by a computed name cannot be followed
    assert graph["pkg.f"] == {"pkg.c", "pkg.d"} and external["pkg.f"] == {"importlib"}
    assert impure(graph, external, "pkg.f") == ["pkg.c -> subprocess"]
    assert graph["pkg.d"] == {"pkg.c"} and external["pkg.c"] == {"subprocess"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert impure(graph, external, "pkg.d") == ["pkg.c -> subprocess"]
    assert package_cycles(graph) == []
    (tmp_path / "top").mkdir()
    (tmp_path / "top" / "__init__.py").write_text("import pkg.d\n")
    (pkg / "e.py").write_text("def f():\n    import top\n")
    graph, _ = import_graph(tmp_path, ["pkg", "top"])
    assert package_cycles(graph) == [["pkg", "top"]]


def _top_level_names(tree: ast.Module) -> tuple[set[str], list[str]]:
    """``(names the module defines, its __all__)``: what its top-level ``def``, ``class`` and
    assignments bind (imports do not count: an imported name is defined elsewhere)."""
    defined: set[str] = set()
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in (n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                defined.add(name.id)
                if name.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                    exported = [e.value for e in node.value.elts
                                if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return defined, exported


def facades(root: Path, packages: Iterable[str], project: Iterable[str]) -> list[str]:
    """``"path: ..."`` for each name a module of ``packages`` under ``root`` exports without
    defining it (``__all__`` naming an imported name: a second way to import it) and each
    ``_private`` name it imports from another module of the ``project`` packages."""
    top = set(project)
    bad = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            rel = path.relative_to(root).as_posix()
            defined, exported = _top_level_names(tree)
            bad += [f"{rel}: __all__ names {name}, defined elsewhere"
                    for name in exported if name not in defined]
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                        and node.module.split(".")[0] in top and node.module != module:
                    bad += [f"{rel}: imports {node.module}.{alias.name}, private there"
                            for alias in node.names
                            if alias.name.startswith("_") and not alias.name.startswith("__")]
    return bad


def test_every_name_is_imported_from_the_module_that_defines_it() -> None:
    """One name, one module: ``__all__`` lists only what its module defines (no facade
    re-exports another module's names) and no module reaches for another's ``_private``
    name (one another module needs is public, or lives where both can import it)."""
    bad = facades(REPO, (*PACKAGES, "examples"), PACKAGES)
    assert not bad, "\n".join(bad)


def test_the_facade_rule_finds_each_kind(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    (pkg / "real.py").write_text("X = 1\n_HIDDEN = 2\n\n\ndef f():\n    pass\n")
    (pkg / "facade.py").write_text("from pkg.real import X, f\n\nY: int = 2\n"
                                   "__all__ = ['X', 'Y', 'f']\n")
    (pkg / "nosy.py").write_text("def g():\n    from pkg.real import _HIDDEN\n"
                                 "    from os import _exit\n    return _HIDDEN, _exit\n")
    (pkg / "own.py").write_text("import pkg.real\n\n__all__ = ['Z', '__version__']\n"
                                "Z = pkg.real.X + 1\n__version__ = '1'\n")
    assert facades(tmp_path, ["pkg"], ["pkg"]) == [
        "pkg/facade.py: __all__ names X, defined elsewhere",
        "pkg/facade.py: __all__ names f, defined elsewhere",
        "pkg/nosy.py: imports pkg.real._HIDDEN, private there"]


def second_lists(root: Path, packages: Iterable[str],
                 families: dict[str, Iterable[str]]) -> list[str]:
    """``"path:line: ..."`` for each literal list, tuple or set of strings in ``packages``
    under ``root`` that names most of one plug-in family (at least three of its names and
    three quarters of them): a second list of the plug-ins beside their registry, which a
    new plug-in would be missing from. A deliberate choice of some (the designs a paper
    compares) says so on its line: ``# chosen: why``."""
    fams = {kind: set(names) for kind, names in families.items()}
    bad = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            tree = ast.parse(text, str(path))
            rel = path.relative_to(root).as_posix()
            for node in ast.walk(tree):
                if not isinstance(node, (ast.List, ast.Tuple, ast.Set)) \
                        or "# chosen: " in lines[node.lineno - 1]:
                    continue
                words = {e.value for e in node.elts
                         if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                for kind, names in fams.items():
                    hits = words & names
                    if len(hits) >= 3 and len(hits) >= 0.75 * len(names):
                        bad.append(f"{rel}:{node.lineno}: lists {len(hits)} of the "
                                   f"{len(names)} {kind} plug-ins")
    return bad


def _families() -> dict[str, tuple[str, ...]]:
    # imported here, not at the top: every other rule reads the source alone
    from controllers.policies import POLICIES
    from ops.detectors import DETECTORS
    from scenarios.experiments import SCENARIOS
    from testbed.faultkinds import FAULT_KINDS
    from testbed.topologies import TOPOLOGIES

    return {"policy": POLICIES.names(), "topology": TOPOLOGIES.names(),
            "fault kind": FAULT_KINDS.names(), "detector": DETECTORS.names(),
            "scenario": SCENARIOS.names()}


def test_the_registries_are_the_only_lists_of_plug_ins() -> None:
    """A family's registry is its one list: code that needs every policy, kind, detector,
    scenario or topology asks the registry, so a plug-in copied in is never left out."""
    bad = second_lists(REPO, (*PACKAGES, "examples"), _families())
    assert not bad, "\n".join(bad)


def test_the_second_list_rule_finds_one(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    (pkg / "m.py").write_text("ALL = ('a', 'b', 'c', 'd')\nSOME = ['a', 'b']\n"
                              "MIX = {'a', 'b', 'c', 'x', 'y'}\n"
                              "PICK = ('a', 'b', 'c')  # chosen: the three a paper compares\n")
    assert second_lists(tmp_path, ["pkg"], {"thing": ("a", "b", "c", "d")}) == [
        "pkg/m.py:1: lists 4 of the 4 thing plug-ins",
        "pkg/m.py:3: lists 3 of the 4 thing plug-ins"]


def _statement_lists(node: ast.AST, inside: bool = False
                     ) -> Iterator[tuple[list[ast.stmt], bool]]:
    """Every block of statements under ``node`` (a body, an ``else``, a handler's body),
    and whether it is inside a function (at any depth: a class or an ``if`` in one too)."""
    inside = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    for _, value in ast.iter_fields(node):
        children = value if isinstance(value, list) else [value]
        block = [c for c in children if isinstance(c, ast.stmt)]
        if block:
            yield block, inside
        for child in children:
            if isinstance(child, ast.AST):
                yield from _statement_lists(child, inside)


def _says_lazy(line: str) -> bool:
    """The line has a ``# lazy: why`` comment, with a why."""
    return "# lazy:" in line and bool(line.split("# lazy:", 1)[1].strip())


def bare_lazy_imports(root: Path, packages: Iterable[str]) -> list[str]:
    """``"path:line: ..."`` for each import statement inside a function of ``packages`` under
    ``root`` that does not say why it is not at the top of its module: ``# lazy: why`` on
    its line, or on the line before the first of its run (import statements one after the
    other in one block; a blank line or a comment between them does not end the run)."""
    bad = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            rel = path.relative_to(root).as_posix()
            for block, inside in _statement_lists(ast.parse(text, str(path))):
                if not inside:
                    continue
                said = False
                for i, node in enumerate(block):
                    if not isinstance(node, (ast.Import, ast.ImportFrom)):
                        continue
                    if i == 0 or not isinstance(block[i - 1], (ast.Import, ast.ImportFrom)):
                        said = node.lineno > 1 and \
                            lines[node.lineno - 2].strip().startswith("#") and \
                            _says_lazy(lines[node.lineno - 2])
                    if not said and not _says_lazy(lines[node.lineno - 1]):
                        bad.append(f"{rel}:{node.lineno}: import inside a function without "
                                   "'# lazy: why' (move it to the top of the module)")
    return sorted(bad, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def test_imports_are_at_the_top_unless_they_say_why_they_are_lazy() -> None:
    """A module's imports are at its top, where a reader sees what it needs and a test's
    patch of a name lands on the module that uses it. One inside a function is deliberate
    and says why (a heavy or optional library, a CLI start-up cost) in one ``# lazy:``
    comment: on the line before its run of imports, or at the end of its line."""
    bad = bare_lazy_imports(REPO, (*PACKAGES, "examples"))
    assert not bad, "\n".join(bad)


def test_the_lazy_import_rule_finds_a_bare_one(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    (pkg / "m.py").write_text(
        "import csv\n"                                                   # 1: module level
        "\n\ndef bare():\n    import json\n    return json\n"           # 5: bare
        "\n\ndef said():\n    # lazy: heavy, and only said() needs it\n"
        "    import json\n\n    from os import path\n    return json, path\n"  # 11, 13: said
        "\n\ndef inline():\n    import json  # lazy: heavy\n    return json\n"  # 18: said
        "\n\ndef split():\n    # lazy: heavy\n    import json\n    x = 1\n"  # 24: said
        "    import re\n    return json, re, x\n"                       # 26: a new run
        "\n\ndef empty():\n    # lazy:\n    import json\n    return json\n"  # 32: no why
        "\n\nclass C:\n    def method(self):\n        if self:\n"
        "            import json\n        return json\n")               # 39: nested
    assert bare_lazy_imports(tmp_path, ["pkg"]) == [
        f"pkg/m.py:{n}: import inside a function without '# lazy: why' (move it to the top "
        "of the module)" for n in (5, 26, 32, 39)]
