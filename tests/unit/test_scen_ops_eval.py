"""ops-eval without a fabric: the flow model's steady rate, and a run on a canned evaluation
whose report and summary.json are checked (scores with their N, the rate beside the model)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from scen_fakes import check_entry, install, read_json, read_text

from scenarios.experiments import ops_eval as oe
from testbed.topologies import build


def test_steady_model_carries_the_paced_streams() -> None:
    plan = build("astral3", servers=2, gpus=2)
    m = oe.steady_model(plan, 20.0, 10)
    # 4 hosts x 20 Mb/s of payload, plus 42 header bytes per 1000-byte datagram
    assert m["offered_mbps"] == pytest.approx(4 * 20 * 1042 / 1000)
    assert m["draws"] == 10 and m["median"] == pytest.approx(m["offered_mbps"])
    # paced far above what the fabric carries, the model says so
    assert oe.steady_model(plan, 400.0, 3)["median"] < 4 * 400


def _canned(lab: Any, **kw: Any) -> dict[str, Any]:
    faults = [{"kind": k, "component": f"c{i}", "detected": True, "detect_s": 1.0 + 0.1 * i,
               "first_alert": "x", "lead_s": None, "top1": i not in (2, 5), "top3": True,
               "ranked": ["a", "b"]} for i, k in enumerate(oe.KINDS)]
    score = {"faults": len(faults), "detected": len(faults), "detection_rate": 1.0,
             "false_alarms": 0, "false_alarms_per_hour": 0.0, "false_alarm_list": [],
             "detect_polls_median": 1.35, "detect_polls_max": 1.7, "within_3_polls": 1.0,
             "lead_s_median": None, "lead_n": 0, "top1": (len(faults) - 2) / len(faults),
             "top3": 1.0,
             "by_kind": {}, "per_fault": faults}
    clean = dict(score, faults=0, per_fault=[])
    return {"clean": clean, "faults": score, "baseline_mbps": 83.3, "interval_s": 1.0,
            "telemetry": {"polls": 10, "poll_s_median": 0.1, "poll_s_max": 0.2, "rows": 5}}


def test_a_run_quotes_scores_with_their_n_and_the_rate_beside_the_model(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ops.shell.experiment

    install(monkeypatch, oe)
    monkeypatch.setattr(ops.shell.experiment, "eval_on_lab", _canned)
    out = os.path.join(str(tmp_path), "run")
    oe.ops_eval(quick=True, output=out, log=lambda _m: None, model_draws=5)
    s = read_json(out, "summary.json")
    check_entry(s["baseline_mbps"], draws=1)
    assert s["baseline_mbps"]["model"]["draws"] == 5
    assert s["detect_polls"]["draws"] == len(oe.KINDS)
    assert s["detect_polls"]["p25"] <= s["detect_polls"]["median"] <= s["detect_polls"]["p75"]
    report = read_text(out, "REPORT.md")
    n = len(oe.KINDS)
    assert f"{n}/{n} faults" in report and f"{n - 2}/{n}" in report
    assert "N=5 over hash draws" in report
