"""``ops.evaluate.EvalSpec``: the ops-eval campaign as one checked value. Its defaults are
the scenario's (so a spec from nothing is the documented campaign), a bad field is named
in the error before any fabric, and the scenario hands ``eval_on_lab`` the spec its
parameters describe."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from scen_fakes import install
from test_scen_ops_eval import _canned

from ops.evaluate import EvalSpec
from scenarios.experiments import ops_eval as oe
from testbed.faultspec import KINDS, schedule_kinds


def test_defaults_are_the_scenarios_where_they_overlap() -> None:
    spec = EvalSpec()
    params = {p.name: p.default for p in oe.ops_eval.params}
    shared = [f.name for f in dataclasses.fields(EvalSpec) if f.name in params]
    assert len(shared) >= 9
    for name in shared:
        if name == "kinds":  # the scenario lists every kind; the spec says None for it
            assert list(params[name]) == list(KINDS) and spec.kinds is None
        elif name == "clean_s":  # the scenario's 0 is the spec's None: as long as the faults
            assert params[name] == 0 and spec.clean_s is None
        else:
            assert getattr(spec, name) == params[name], name


def test_a_spec_is_frozen_and_keeps_kinds_as_a_tuple() -> None:
    spec = EvalSpec(kinds=["link-down"])  # type: ignore[arg-type]
    assert spec.kinds == ("link-down",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.per_kind = 2  # type: ignore[misc]


@pytest.mark.parametrize("field, value, message", [
    ("per_kind", 0, "per_kind must be >= 1"),
    ("per_kind", 1.5, "per_kind must be an integer"),
    ("per_kind", True, "per_kind must be an integer"),
    ("concurrent", 0, "concurrent must be >= 1"),
    ("decode_every", 0, "decode_every must be >= 1"),
    ("questions", -1, "questions must be >= 0"),
    ("healthy_questions", -1, "healthy_questions must be >= 0"),
    ("seed", "1", "seed must be an integer"),
    ("fault_s", 0.0, "fault_s must be > 0"),
    ("interval", -1.0, "interval must be > 0"),
    ("interval", float("nan"), "interval must be a number"),
    ("mbps_per_host", 0, "mbps_per_host must be > 0"),
    ("gap_s", -1.0, "gap_s must be >= 0"),
    ("controls", -0.1, "controls must be >= 0"),
    ("calibrate_s", -1.0, "calibrate_s must be >= 0"),
    ("clean_s", -1.0, "clean_s must be >= 0"),
    ("ask_delay_s", -1.0, "ask_delay_s must be >= 0"),
    ("job_mbps", 0.0, "job_mbps must be > 0"),
    ("severity", "soft", "severity must be one of"),
    ("kinds", ("no-such-kind",), "kinds: "),
    ("fault_params", {"link-degrade": 0.25}, "fault_params: link-degrade"),
])
def test_a_bad_field_is_named(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EvalSpec(**{field: value})


def test_kinds_without_the_severity_are_refused() -> None:
    with pytest.raises(ValueError, match="kinds: link-down has no gray faults"):
        EvalSpec(kinds=("link-down",), severity="gray")


def test_the_scenario_builds_the_spec_from_its_params(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, oe)
    seen: list[tuple[EvalSpec, dict[str, Any]]] = []

    def canned(lab: Any, spec: EvalSpec, **kw: Any) -> dict[str, Any]:
        seen.append((spec, kw))
        return _canned(lab, spec, **kw)

    monkeypatch.setattr(oe, "eval_on_lab", canned)
    out = os.path.join(str(tmp_path), "run")
    oe.ops_eval(quick=True, output=out, log=lambda _m: None, model_draws=2, per_kind=3,
                concurrent=1, seed=7, clean_s=30.0, job="probes")
    (spec, kw), = seen
    p = oe.ops_eval.resolve(True, {"per_kind": 3, "concurrent": 1, "seed": 7,
                                   "clean_s": 30.0, "job": "probes"})
    assert spec == EvalSpec(per_kind=3, kinds=tuple(schedule_kinds(None, "hard")),
                            severity="hard", concurrent=1, fault_s=p["fault_s"],
                            gap_s=p["gap_s"], seed=7, interval=p["interval"],
                            mbps_per_host=p["mbps_per_host"], clean_s=30.0,
                            job_mbps=p["job_mbps"])
    assert spec.fault_s == 8.0 and spec.mbps_per_host == 20.0  # the quick values
    # the live objects stay keywords: no MoE job here, the telemetry file in the run
    assert kw["job"] is None and kw["store_path"].endswith("telemetry.sqlite")
    assert set(kw) == {"job", "store_path", "log", "on_faults"}
