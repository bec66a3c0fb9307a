"""The deterministic planner localizes faults from telemetry alone (synthetic series)."""

from __future__ import annotations

import random

import pytest

from ops.agent import Tools, diagnose, parse_question
from ops.detectors import Alert, AlertBook, Engine
from ops.telemetry import History, Store
from testbed.topologies import build
from tests.unit.test_ops_detectors import clean_poll

LANE = "lf0r0~spine2#0"


@pytest.fixture(scope="module")
def plan():  # noqa: ANN201
    return build("astral3", servers=2, gpus=2)


def feed(plan, fault, polls: int = 60):  # noqa: ANN001, ANN201
    rng = random.Random(3)
    hist, eng = History(), Engine(plan)
    for i in range(polls):
        v = clean_poll(plan, rng)
        fault(i, v)
        hist.add(1000.0 + i, v)
        eng.step(hist)
    return hist, eng


def degrade(i: int, v: dict) -> None:
    if i >= 40:
        v[(LANE, "mbps_ab")] = 5.0
        v[(LANE, "backlog_ab")] = 375_000.0 * (i - 39)


def test_degraded_lane_is_top_suspect_with_evidence_and_action(plan) -> None:  # noqa: ANN001
    hist, eng = feed(plan, degrade)
    d = diagnose(Tools(plan, history=hist, engine=eng), "why is job slow?")
    top = d.suspects[0]
    assert top.component == LANE and top.detector == "degraded"
    assert "25%" in top.evidence[0]
    assert top.action.startswith(f"drain lane {LANE}")
    assert d.steps[0]["tool"] == "alerts"


def test_down_link_is_top_suspect(plan) -> None:  # noqa: ANN001
    def down(i: int, v: dict) -> None:
        if i >= 50:
            v[("lf0r1~spine3#0", "up")] = 0.0
        degrade(i, v)  # a second, lesser problem elsewhere

    hist, eng = feed(plan, down)
    d = diagnose(Tools(plan, history=hist, engine=eng))
    assert d.components()[:2] == ["lf0r1~spine3#0", LANE]


def test_path_counters_find_an_unalerted_anomaly_on_the_asked_path(plan) -> None:  # noqa: ANN001
    # only 1 poll of the fault: no detector has fired yet, the counters already show it
    hist, eng = feed(plan, degrade, polls=41)
    assert eng.active == {}
    d = diagnose(Tools(plan, history=hist, engine=eng), "why is s0g0 -> s1g1 slow?")
    assert d.suspects and d.suspects[0].component == LANE
    assert any(s["tool"] == "path_counters" for s in d.steps)


def test_clean_fabric_has_no_suspect(plan) -> None:  # noqa: ANN001
    hist, eng = feed(plan, lambda i, v: None)
    d = diagnose(Tools(plan, history=hist, engine=eng), "why is s0g0 slow?")
    assert d.suspects == [] and "no suspect" in d.text()


def test_tools_read_a_store_too(plan, tmp_path) -> None:  # noqa: ANN001
    hist, eng = feed(plan, degrade)
    with Store(str(tmp_path / "t.sqlite")) as st:
        for i, t in enumerate(hist.times):
            st.add_samples(t, {k: hist.values(*k)[i] for k in list(hist.keys())
                               if hist.values(*k)[i] is not None})
        for a in eng.all_alerts():
            st.save_alert(a)
        tools = Tools(plan, store=st, baseline=st, now=hist.now)
        d = diagnose(tools)
        assert d.suspects[0].component == LANE
        assert tools.call("counters", {"component": "spine2~lf0r0"})["configured_mbps"] == 20
        assert tools.call("series", {"component": LANE, "metric": "mbps_ab",
                                     "seconds": 3})[-1] == [1059.0, 5.0]
        b = tools.call("baseline", {"component": LANE})
        assert b["metrics"]["mbps_ab"]["now"] == 5.0


def test_tool_errors_are_answers_not_crashes(plan) -> None:  # noqa: ANN001
    hist, eng = feed(plan, lambda i, v: None, polls=3)
    tools = Tools(plan, history=hist, engine=eng)
    assert "error" in tools.call("counters", {"component": "nosuch"})
    assert "error" in tools.call("probe", {"src": "s0g0", "dst": "s1g1"})
    p = tools.call("paths", {"src": "s0g0", "dst": "s1g1"})
    assert p["source"] == "plan" and len(p["paths"]) == 4
    assert all(path[0] == "s0g0~lf0r0#0" for path in p["paths"])
    with pytest.raises(ValueError, match="unknown tool"):
        tools.call("rm -rf")
    with pytest.raises(ValueError, match="unknown argument"):
        tools.call("alerts", {"x": 1})


def test_parse_question(plan) -> None:  # noqa: ANN001
    q = parse_question("why is s0g0 -> s1g1 slow, is spine2~lf0r0 or spine3 bad?", plan)
    assert q == {"hosts": ["s0g0", "s1g1"], "components": [LANE], "switches": ["spine3"]}


# --- scoring (ops.evaluate.score is pure) -------------------------------------------------------
def test_score_counts_detection_false_alarms_and_localization(plan) -> None:  # noqa: ANN001
    from ops.evaluate import GroundTruth, any_alert_score, ground_truth, live_faults

    events = [{"time": 100.0, "kind": "link-degrade", "component": LANE, "action": "inject",
               "fault_id": 1},
              {"time": 110.0, "kind": "link-degrade", "component": LANE, "action": "undo",
               "fault_id": 1},
              {"time": 200.0, "kind": "nic-loss", "component": "s1g1", "action": "inject",
               "fault_id": 2},
              {"time": 210.0, "kind": "nic-loss", "component": "s1g1", "action": "undo",
               "fault_id": 2},
              {"time": 300.0, "kind": "link-down", "component": "lf0r1~spine0#0",
               "action": "inject", "fault_id": 3}]
    truth = ground_truth(events, end_of_run=320.0)
    assert truth[2] == GroundTruth("link-down", "lf0r1~spine0#0", 300.0, 320.0)
    # what the live view lists at a moment: injected and not yet undone
    assert live_faults(events, 105.0) == [{"kind": "link-degrade", "component": LANE,
                                           "since": 100.0}]
    assert live_faults(events, 110.0) == [] and live_faults(events, 150.0) == []
    assert [f["kind"] for f in live_faults(events, 1e9)] == ["link-down"]

    def alert(detector: str, comp: str, opened: float, first: float | None = None) -> dict:
        return {"detector": detector, "component": comp, "opened": opened,
                "first_seen": first or opened}

    alerts = [alert("degraded", LANE, 102.0, 100.5), alert("job-slow", "job", 104.5, 103.0),
              alert("loss", "s1g1", 202.0),
              alert("ecmp-imbalance", "lf0r0~spine1#0", 250.0)]  # outside every window
    diagnoses = [(102.0, ["s1g0"]), (104.0, [LANE, "s1g0"]),  # asked 2 s after detection
                 (204.0, ["lf0r1~spine0#0", "s1g1~lf0r1#0"])]
    s = any_alert_score(truth, alerts, diagnoses, run_s=3600.0, interval=1.0, plan=plan)
    assert (s["faults"], s["detected"], s["detection_rate"]) == (3, 2, 0.6667)
    assert s["false_alarms"] == 1 and s["false_alarms_per_hour"] == 1.0
    assert s["detect_s_median"] == 2.0 and s["detect_polls_max"] == 2.0
    assert s["lead_s_median"] == 1.0  # job first suffered at 103, warned at 102
    pf = {r["kind"]: r for r in s["per_fault"]}
    assert pf["link-degrade"]["top1"] and pf["link-degrade"]["ranked"][0] == LANE
    assert not pf["nic-loss"]["top1"] and pf["nic-loss"]["top3"]  # NIC link == NIC
    assert not pf["link-down"]["detected"]
    # what it said is wrong: the answers carry no detector, so the alert on their top
    # suspect says it (degraded on LANE); nothing was raised on the wrong lane it put first
    assert pf["link-degrade"]["kind_alert"] == "degraded" and pf["link-degrade"]["kind_correct"]
    assert (pf["nic-loss"]["kind_guess"], pf["link-down"]["kind_guess"]) == ("none", "none")
    assert s["by_kind"]["nic-loss"] == {"faults": 1, "detected": 1, "top1": 0, "top3": 1,
                                        "kind_correct": 0, "median_detect_s": 2.0}
    # a baseline has no job detector: its lead is against when the agent saw the job suffer
    assert [r["suffered_at"] for r in s["per_fault"]] == [103.0, None, None]
    static = [alert("static:loss", LANE, 101.5), alert("static:loss", "s1g1", 203.0)]
    b = any_alert_score(truth, static, None, run_s=3600.0, interval=1.0, plan=plan,
              suffered=[r["suffered_at"] for r in s["per_fault"]])
    assert b["lead_s_median"] == 1.5 and b["lead_n"] == 1
    assert any_alert_score(truth, static, None, run_s=3600.0, interval=1.0,
                 plan=plan)["lead_s_median"] is None  # its own alerts never say the job


def test_a_fresh_fault_outranks_the_last_faults_lingering_alerts(plan) -> None:  # noqa: ANN001
    def two_faults(i: int, v: dict) -> None:
        if 20 <= i < 30:  # an earlier switch-down, repaired 10 s before the next fault
            for c in [c for c in v if c[1] == "up" and "spine1" in c[0]]:
                v[c] = 0.0
        degrade(i, v)

    hist, eng = feed(plan, two_faults, polls=43)
    d = diagnose(Tools(plan, history=hist, engine=eng))
    assert d.components()[0] == LANE and "spine1" in d.components()


def test_of_two_ended_faults_the_one_that_ended_last_ranks_first(plan) -> None:  # noqa: ANN001
    """A link went down and came back a moment ago (a flap, before the flapping alert); a
    miswiring repaired 11 s earlier weighs more as an alert, but the link that was down a
    moment ago is what the operator looks at first."""
    book = AlertBook()
    book.closed = [Alert("miswired", LANE, "warning", "crossed", {}, 80.0, 88.0,
                         cleared=89.0, opened=80.0),
                   Alert("link-down", "lf0r0~spine0#0", "warning", "down", {}, 98.0, 98.0,
                         cleared=100.0, opened=98.0)]
    hist = History()
    for t in range(90, 101):
        hist.add(float(t), {})
    d = diagnose(Tools(plan, history=hist, engine=book), probe=False)
    assert d.components() == ["lf0r0~spine0#0", LANE]
