"""The examples/ scripts: short, documented, public API only; the one without root runs.

The three that build fabrics run in tests/integration/test_examples_live.py (a basename of
its own: these folders are not packages, so pytest would take two test_examples.py for one).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from controllers import policies

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
#: Short enough to read in one sitting, long enough to do something worth reading.
MIN_LINES, MAX_LINES = 30, 60


def run_example(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python examples/NAME args`` from the repository, importing this checkout's code.

    A script's own folder, not the working directory, starts its ``sys.path``, so without
    PYTHONPATH it would import whatever checkout the interpreter's venv has installed.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run([sys.executable, str(REPO / "examples" / name), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_the_four_examples_are_there() -> None:
    assert {p.name for p in EXAMPLES} >= {"ping_all.py", "replay_decode.py",
                                          "compare_policies.py", "fault_diagnose.py"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_short_documented_and_runnable_as_a_script(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert MIN_LINES <= lines <= MAX_LINES, f"{path.name} has {lines} lines"
    tree = ast.parse(text)
    doc = ast.get_docstring(tree)
    assert doc, f"{path.name} has no module docstring"
    assert f"examples/{path.name}" in doc, "the docstring should say how to run it"
    assert 'if __name__ == "__main__":' in text and "sys.exit(main(" in text


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_uses_only_public_names(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    def hidden(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    private = [f"{node.module}.{a.name}" for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) for a in node.names
               if hidden(a.name) or any(hidden(p) for p in (node.module or "").split("."))]
    private += [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and hidden(n.attr)]
    assert not private, f"{path.name} uses private names: {private}"


def test_compare_policies_reports_every_policy_and_hash_draws_as_a_distribution() -> None:
    names = policies.POLICIES.names()
    out = run_example("compare_policies.py", *names)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for name in names:
        assert re.search(rf"^{re.escape(name)}: bound [\d.]+ ms", text, re.M), (name, text)
    draws = re.findall(r"median ([\d.]+).* \[p25 ([\d.]+) - p75 ([\d.]+)\], N=(\d+)", text)
    random = policies.random_names(names)
    assert len(draws) == 2 * len(random), text  # completion and completion / bound
    for med, p25, p75, n in draws:
        assert float(p25) <= float(med) <= float(p75) and int(n) > 1
    # a deterministic policy (planned) is one run, and reaches the bound here
    assert re.search(r"^planned:.*\n.*\n  / bound     1\.00x \(deterministic", text, re.M), text


def test_compare_policies_default_and_unknown_policy() -> None:
    out = run_example("compare_policies.py")
    assert out.returncode == 0, out.stderr
    assert re.search(r"^ecmp: ", out.stdout, re.M) and re.search(r"^planned: ", out.stdout, re.M)
    bad = run_example("compare_policies.py", "ecmp", "nosuch")
    assert bad.returncode == 2 and bad.stdout == ""
    names = ", ".join(policies.POLICIES.names())
    assert f"unknown policy 'nosuch'; choose from {names}" in bad.stderr
    bad = run_example("compare_policies.py", "qp-scaling:qps=1e9")
    assert bad.returncode == 2 and "qp-scaling:qps must be a whole number in 1..1024" in bad.stderr


def test_compare_policies_takes_policy_options() -> None:
    """``NAME:KEY=VALUE`` as everywhere else (``model --lb``, ``up --lb``)."""
    out = run_example("compare_policies.py", "ecmp", "qp-scaling:qps=8")
    assert out.returncode == 0, out.stderr
    assert re.search(r"^qp-scaling:qps=8: bound [\d.]+ ms", out.stdout, re.M), out.stdout
