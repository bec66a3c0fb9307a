"""loss-sweep without a fabric: its schedule, and a run on a canned evaluation scored and
reported per loss rate."""

from __future__ import annotations

import os
from typing import Any

import pytest
from scen_fakes import install, read_json, read_text

from ops.evaluate import EvalSpec
from scenarios.experiments import loss_sweep as ls
from testbed.faultspec import sweep_schedule, traffic_links
from testbed.topologies import build

PLAN = build("astral3", servers=2, gpus=2)


def test_a_sweep_is_tries_lanes_per_rate_one_per_slot_lowest_rate_first() -> None:
    faults = sweep_schedule(PLAN, "gray-loss", (0.01, 0.001), 3, 26.0, 20.0, seed=4)
    assert [f.settings.probability for f in faults] == [0.001] * 3 + [0.01] * 3
    assert [f.at for f in faults] == [26.0 * i for i in range(6)]
    assert {f.duration for f in faults} == {20.0}
    lanes = {ln.a for ln in traffic_links(PLAN)} | {ln.b for ln in traffic_links(PLAN)}
    assert all(set(f.target.split("#")[0].split("~")) <= lanes for f in faults)
    assert all(a.target != b.target for a, b in zip(faults, faults[1:], strict=False))
    again = sweep_schedule(PLAN, "gray-loss", (0.01, 0.001), 3, 26.0, 20.0, seed=4)
    assert [f.target for f in again] == [f.target for f in faults]
    for bad, why in ((("nic-loss", 1, 26.0), "kind"), (("gray-loss", 0, 26.0), "tries"),
                     (("gray-loss", 1, 20.0), "slot_s")):
        with pytest.raises(ValueError, match=why):
            sweep_schedule(PLAN, bad[0], (0.01,), bad[1], bad[2], 20.0)


#: when the canned agent names a fault first, by its rate (None: never)
NAMED_AFTER = {0.0005: None, 0.001: 12.0, 0.002: 6.0, 0.005: 3.0, 0.01: 2.0}


def _canned(lab: Any, spec: EvalSpec, **kw: Any) -> dict[str, Any]:
    """The sweep's faults as ``eval_on_lab`` would report them: each named first by the
    agent NAMED_AFTER its rate after its injection (the fault phase starts at 100 s), and
    one 0.01 try named only after 8 s; the job's iterations end every 2 s."""
    assert spec.faults is not None and spec.concurrent == 1 and spec.questions == 0
    events, alerts, diag = [], [], []
    for i, f in enumerate(spec.faults):
        start = 100.0 + f.at
        events += [{"action": "inject", "kind": f.kind, "component": f.target, "time": start,
                    "apply_start": start, "fault_id": i + 1},
                   {"action": "undo", "kind": f.kind, "component": f.target,
                    "time": start + f.duration, "fault_id": i + 1}]
        after = NAMED_AFTER[f.settings.probability]
        if f.settings.probability == 0.01 and i == len(spec.faults) - 1:
            after = 8.0
        if after is not None:
            alerts.append({"detector": "lane-loss", "component": f.target,
                           "opened": start + after - 0.5, "first_seen": start + after - 0.5})
            diag.append([start + after, [f.target, "spine0"], "lane-loss"])
    end = 100.0 + len(spec.faults) * (spec.fault_s + spec.gap_s)
    its = [{"index": k, "started": 2.0 * k - 1.0, "ended": 2.0 * k, "iter_s": 1.0,
            "phases": {}, "lost_packets": 0, "error": None} for k in range(int(end / 2))]
    return {"interval_s": 1.0, "plan": PLAN.to_dict(), "events": events,
            "phases": {"calibrate": 0.0, "clean": 40.0, "faults": 100.0, "end": end},
            "alerts": alerts, "diagnoses": diag, "baseline_alerts": {}, "job": its,
            "schedule": [{**f.to_dict(), "component": f.target} for f in spec.faults]}


def test_a_run_reports_each_rate_against_the_goals(tmp_path: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, ls)
    monkeypatch.setattr(ls, "eval_on_lab", _canned)
    out = os.path.join(str(tmp_path), "run")
    ls.loss_sweep(quick=True, output=out, log=lambda _m: None, tries=3)
    s = read_json(out, "summary.json")
    rows = {r["rate"]: r for r in s["rates"]}
    assert sorted(rows) == sorted(ls.RATES) and {r["tries"] for r in rows.values()} == {3}
    assert rows[0.0005]["localized"] == 0 and rows[0.0005]["localize_s"] is None
    assert (rows[0.001]["within_20s"], rows[0.001]["within_5s"]) == (3, 0)
    assert rows[0.001]["localize_s"]["median"] == pytest.approx(12.0)
    assert rows[0.001]["iterations"]["median"] == 6  # iterations end every 2 s
    assert (rows[0.01]["within_5s"], rows[0.01]["within_20s"]) == (2, 3)
    goals = {g["rate"]: g for g in s["goals"]}
    assert goals[0.001]["met"] is True and goals[0.01]["met"] is False
    assert s["false_alarms_clean"] == 0
    assert s["probe_budget"]["lane_directions"] == 2 * len(traffic_links(PLAN))
    report = read_text(out, "REPORT.md")
    assert "Time to localize, per loss rate" in report and "SprayCheck" in report
    assert "0.1% within 20 s" in report and "| 2/3 |" in report
