"""Each scenario's REPORT.md, built on the fake lab from fixed inputs, read word for word
against the copy kept in tests/unit/golden/: moving a report's prose into its template (or
any other change to a report builder) must leave the report reading the same.

Regenerate the copies only when a report is meant to change:
``ASTRAL_GOLDEN_WRITE=1 pytest tests/unit/test_report_golden.py``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def _normalise(text: str, out: str) -> str:
    """Drop what differs between two builds of the same report: the output path, the run's
    wall-clock stamps and durations."""
    text = text.replace(out, "<out>")
    text = re.sub(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?", "<time>", text)
    text = re.sub(r"\b\d{8}-\d{6}\b", "<stamp>", text)
    return re.sub(r"(quick|full) mode, \d+(\.\d+)? s,", r"\1 mode, <took> s,", text)


def _check(name: str, report: str, out: str) -> None:
    text = _normalise(report, out)
    path = os.path.join(GOLDEN, f"{name}.md")
    if os.environ.get("ASTRAL_GOLDEN_WRITE"):
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    with open(path, encoding="utf-8") as f:
        want = f.read()
    assert text == want, f"{name}: REPORT.md no longer reads as {path}"


def _link_failure(out: str, mp: pytest.MonkeyPatch, **kw: Any) -> None:
    from test_scen_link_failure import _fake_run

    from scenarios import link_failure_report as lr
    from scenarios.experiments import link_failure as lf

    mp.setattr(lr, "bench_failover", lambda: "the lab's failover benchmark (fixed)")
    mp.setattr(lf, "one_run", _fake_run)
    lf.link_failure(quick=True, output=out, log=lambda _m: None, **kw)


def _paper_shapes(out: str, _mp: pytest.MonkeyPatch) -> None:
    from test_scen_paper_shapes import fake_measurements

    from scenarios import base
    from scenarios.experiments import paper_shapes
    from testbed.topologies import build

    ps = paper_shapes.paper_shapes
    sc = base.Scenario("paper-shapes", ps.description, ps.params, lambda _run: None)
    run = base.Run(sc, ps.resolve(True, {}), quick=True, output=out,
                   log=lambda _m: None)
    plan = build("astral3", servers=2, gpus=4, scale=1e-5)
    paper_shapes.publish(run, fake_measurements(skip_ep32=True), plan, {"a replay": {"x": 1}})
    run.finish()


def _demo(out: str, mp: pytest.MonkeyPatch) -> None:
    from scen_fakes import FakeLab

    from scenarios.experiments import demo as dm
    from testbed.reachability import Reachability

    mp.setattr(FakeLab, "reachability", lambda self: Reachability(
        pairs=12, received=12, first_try_lost=0), raising=False)
    dm.demo(quick=True, output=out, log=lambda _m: None, model_draws=20, draws=2,
            decode_draws=1)


def _ops_eval(out: str, mp: pytest.MonkeyPatch) -> None:
    from test_scen_ops_eval import _canned

    from scenarios.experiments import ops_eval as oe

    mp.setattr(oe, "eval_on_lab", _canned)
    oe.ops_eval(quick=True, output=out, log=lambda _m: None, model_draws=5)


def _simple(module: str, **kw: Any) -> Callable[[str, pytest.MonkeyPatch], None]:
    def go(out: str, _mp: pytest.MonkeyPatch) -> None:
        import importlib

        mod = importlib.import_module(f"scenarios.experiments.{module}")
        getattr(mod, module)(quick=True, output=out, log=lambda _m: None, **kw)
    return go


CASES: dict[str, tuple[str, Callable[[str, pytest.MonkeyPatch], None]]] = {
    "link_failure": ("link_failure", lambda out, mp: _link_failure(
        out, mp, model_draws=6, modes=["ecmp", "planned", "adaptive"])),
    "link_failure_spray": ("link_failure", lambda out, mp: _link_failure(
        out, mp, model_draws=4, modes=["ecmp", "spray"], draws=1)),
    "expert_skew": ("expert_skew", _simple("expert_skew", model_draws=8, tokens_per_gpu=16)),
    "paper_shapes": ("paper_shapes", _paper_shapes),
    "demo": ("demo", _demo),
    "decode_latency": ("decode_latency", _simple("decode_latency", model_draws=4)),
    "lb_compare": ("lb_compare", _simple("lb_compare", model_draws=30,
                                         modes=["ecmp", "planned", "adaptive"])),
    "topology_compare": ("topology_compare", _simple("topology_compare", model_draws=8)),
    "ops_eval": ("ops_eval", _ops_eval),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_report_reads_as_its_golden_copy(name: str, tmp_path: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from scen_fakes import install, read_text

    module, go = CASES[name]
    install(monkeypatch, importlib.import_module(f"scenarios.experiments.{module}"))
    out = os.path.join(str(tmp_path), "run")
    go(out, monkeypatch)
    _check(name, read_text(out, "REPORT.md"), out)
