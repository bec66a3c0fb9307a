"""The examples that build real fabrics, each run as a newcomer would run it (root).

``python examples/NAME.py`` in a subprocess from the repository: exit status, the lines a
reader is told to look for, and nothing left behind (each example's own ``make_plan()``
is the plan checked). How close the emulation comes to the flow model is measured by
test_model_crosscheck.py and the scenarios; here the bound on that is loose on purpose.
"""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import Callable
from types import ModuleType

from tests.unit.test_examples import REPO, run_example
from vocab.plan import WiringPlan

TIMEOUT = 600  # generous: a fabric already up elsewhere is waited for (ASTRAL_LAB_WAIT)


def example(name: str) -> ModuleType:
    """Import examples/NAME.py without running it (``main`` is behind ``__name__``)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                  REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(name: str, *args: str) -> str:
    t0 = time.monotonic()
    out = run_example(f"{name}.py", *args, timeout=TIMEOUT)
    print(f"{name}: exit {out.returncode} in {time.monotonic() - t0:.1f} s\n{out.stdout}")
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr[-3000:]}"
    return out.stdout


def test_ping_all(assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = example("ping_all").make_plan()
    text = run("ping_all")
    n = len(plan.hosts)
    assert f"{plan.topology}: {n} GPUs on " in text
    assert re.search(r"^s0g0 -> \S+ \([\d.]+\): rtt min/avg/max/mdev = ", text, re.M), text
    assert f"all-pairs ping: {n * (n - 1)}/{n * (n - 1)} pairs reached, 0.0% loss" in text
    assert "unreachable" not in text
    assert_clean(plan)


def test_replay_decode(assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = example("replay_decode").make_plan()
    text = run("replay_decode")
    for phase in ("dispatch", "combine"):
        assert re.search(rf"^{phase}: \d+ flows, \d+ messages, 0 packets lost, policy planned$",
                         text, re.M), text
    lat = re.findall(r"message latency p50/p99  measured +(\d+) / +(\d+) ms", text)
    fin = re.findall(r"flow finish     p50/p99  measured +(\d+) / +(\d+) ms   "
                     r"model +(\d+) / +(\d+) ms", text)
    assert len(lat) == 2 and len(fin) == 2, text
    for (p50, p99), (m50, m99, i50, i99) in zip(lat, fin, strict=True):
        assert 0 < int(p50) <= int(p99) and 0 < int(m50) <= int(m99)
        for measured, ideal in ((m50, i50), (m99, i99)):  # measured beside the model's ideal
            assert 0.5 <= int(measured) / int(ideal) <= 2.0, text
    assert_clean(plan)


def test_fault_diagnose(assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = example("fault_diagnose").make_plan()
    text = run("fault_diagnose")
    lane = "lf0r0~spine1#0"
    assert f"injected link-degrade on {lane}" in text
    assert re.search(rf"^alerts: .*\bdegraded:{re.escape(lane)}", text, re.M), text
    assert re.search(rf"^1\. {re.escape(lane)}  \[degraded, score \d+\]", text, re.M), text
    assert f"{lane} is among the top 3 suspects" in text
    assert_clean(plan)
