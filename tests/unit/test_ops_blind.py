"""No ground truth in the loop: nothing the agent or a detector sees may depend on the
injector's log, its marks or the schedule. Only the scorer (ops/evaluate.py) and the
experiment's harness (ops/shell/experiment.py, and ops/questions.py, which draws the
operator's questions from the injection log and whose answers are scored, never fed back)
may import them."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the modules that may know the truth, relative to the repository
HARNESS = {"ops/evaluate.py", "ops/shell/experiment.py", "ops/questions.py"}
#: where the truth lives: the injector (and its event log), its port marks, the schedule
#: and fault specs, and the scorer that reads the log back
TRUTH = ("testbed.shell.faults", "testbed.faultmarks", "testbed.faultspec", "ops.evaluate")
#: names that carry it wherever they are imported from
TRUTH_NAMES = {"random_schedule", "ground_truth", "live_faults", "GroundTruth",
               "FaultInjector"}


def truth_imports(source: str) -> list[str]:
    """The imports of ``source`` (module level or inside functions) that reach the truth."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [(a.name, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [(node.module, a.name) for a in node.names]
            names += [(f"{node.module}.{a.name}", a.name) for a in node.names]
        else:
            continue
        for module, name in names:
            if any(module == t or module.startswith(t + ".") for t in TRUTH) \
                    or name in TRUTH_NAMES:
                found.append(f"{module}:{name}")
    return found


def test_the_check_catches_each_way_in() -> None:
    assert truth_imports("from testbed.shell import faults") == ["testbed.shell.faults:faults"]
    assert truth_imports("def f():\n    import testbed.faultmarks\n")
    assert truth_imports("from ops.evaluate import credit")
    assert truth_imports("from somewhere import random_schedule")
    assert truth_imports("from ops.detectors import Engine\nimport json\n") == []


def test_no_module_the_agent_or_detectors_run_imports_the_truth() -> None:
    bad = {}
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "ops")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT)
            with open(path, encoding="utf-8") as f:
                found = truth_imports(f.read())
            if found and rel not in HARNESS:
                bad[rel] = found
    assert bad == {}, f"these ops modules reach the ground truth: {bad}"
