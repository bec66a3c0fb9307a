"""The strict operations score (ops.evaluate.score) on hand-made runs: what detects a fault
and what does not, and that sources which alert at random or on everything score badly."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ops.evaluate import (
    GroundTruth,
    any_alert_score,
    credit,
    ground_truth,
    neighbourhood,
    score,
    score_run,
    summaries,
    uncovered_s,
)
from ops.telemetry import CONTROLLER
from testbed.topologies import build
from vocab.plan import link_components

LANE = "lf0r0~spine2#0"
NIC = "s1g1"  # under lf0r1


@pytest.fixture(scope="module")
def plan():  # noqa: ANN201
    return build("astral3", servers=2, gpus=2)


@pytest.fixture(scope="module")
def default():  # noqa: ANN201
    """ops-eval's fabric: 4 servers of 8 GPUs."""
    return build("astral3", servers=4, gpus=8)


def alert(det: str, comp: str, t: float, first: float | None = None) -> dict[str, Any]:
    return {"detector": det, "component": comp, "opened": t,
            "first_seen": t if first is None else first}


def test_the_neighbourhood_is_the_fault_and_what_touches_it(plan) -> None:  # noqa: ANN001
    def near(kind: str, comp: str, also: tuple[str, ...] = ()) -> set[str]:
        return neighbourhood(GroundTruth(kind, comp, 0.0, 1.0, also=also), plan)

    assert near("gray-loss", LANE) == {LANE, "lf0r0", "spine2"}
    assert near("nic-loss", NIC) == {NIC, "lf0r1"}  # its cable is the NIC itself
    assert near("nic-loss", "s1g1~lf0r1#0") == {NIC, "lf0r1"}
    assert near("switch-down", "spine2") == {"spine2", "lf0r0~spine2#0", "lf0r1~spine2#0"}
    assert near("switch-down", "lf0r1") == {"lf0r1", "s0g1", "s1g1", *(
        f"lf0r1~spine{i}#0" for i in range(4))}
    assert near("shuffle-miswiring", LANE, ("lf0r0~spine3",)) == {
        LANE, "lf0r0~spine3#0", "lf0r0", "spine2", "spine3"}
    assert near("controller-kill", CONTROLLER) == {CONTROLLER}


def test_an_alert_before_the_injection_detects_nothing(plan) -> None:  # noqa: ANN001
    """Raised half a second before the apply began, on the fault's own lane: the lenient
    window (one interval early) counted it with a negative time to detect; strictly it is
    a false alarm."""
    truth = [GroundTruth("gray-loss", LANE, 100.0, 110.0)]
    early = [alert("loss", LANE, 99.5)]
    s = score(truth, early, None, span=(90.0, 200.0), interval=1.0, plan=plan)
    assert (s["detected"], s["recall"], s["false_alarms"]) == (0, 0.0, 1)
    lenient = any_alert_score(truth, early, None, run_s=110.0, interval=1.0, plan=plan)
    assert lenient["detected"] == 1 and lenient["per_fault"][0]["detect_s"] == -0.5


def test_a_random_lane_source_that_misses_detects_nothing(plan) -> None:  # noqa: ANN001
    """One alert per poll on a random lane, none near the faulty NIC: the lenient score
    said every fault detected; strictly none is."""
    rng = random.Random(7)
    lanes = [c for c in link_components(plan) if c.startswith("lf")]
    truth = [GroundTruth("nic-loss", NIC, 100.0, 110.0),
             GroundTruth("corruption", "s0g0", 200.0, 210.0)]
    noise = [alert("loss", rng.choice(lanes), float(t)) for t in range(90, 230)]
    s = score(truth, noise, None, span=(90.0, 230.0), interval=1.0, plan=plan)
    assert s["detected"] == 0 and s["credited"] == 0 and s["f1"] == 0.0
    assert s["false_alarms"] + s["astray"] == len(noise)
    assert any_alert_score(truth, noise, None, run_s=140.0, interval=1.0,
                           plan=plan)["recall"] == 1.0


def test_knock_on_alerts_of_a_concurrent_hard_fault_do_not_detect_a_gray_one(plan) -> None:  # noqa: ANN001
    """spine2 dies while s1g1 drops 0.1%: its links go down, the job slows and loses
    packets under lf0r0; none of that is the NIC's, so the gray fault is missed."""
    truth = [GroundTruth("switch-down", "spine2", 100.0, 110.0),
             GroundTruth("nic-loss", NIC, 100.5, 110.5)]
    knock = [alert("link-down", "lf0r0~spine2#0", 101.0), alert("link-down", "lf0r1~spine2#0",
                                                               101.0),
             alert("job-slow", "job", 102.0), alert("job-loss-switch", "lf0r0", 103.0)]
    s = score(truth, knock, None, span=(90.0, 200.0), interval=1.0, plan=plan)
    rows = {r["kind"]: r for r in s["per_fault"]}
    assert rows["switch-down"]["detected"] and not rows["nic-loss"]["detected"]
    assert s["astray"] == 1  # the leaf's job loss: inside a window, nobody's
    lenient = any_alert_score(truth[1:], knock, None, run_s=110.0, interval=1.0, plan=plan)
    assert lenient["detected"] == 1  # what the lenient score said


def test_the_kind_guessed_for_a_fault_is_that_of_its_own_suspect_not_a_concurrent_one(
        plan) -> None:  # noqa: ANN001
    """Two faults at once: the agent's answer ranks the link-flap's lane above the NIC;
    the NIC is still its top-1 (the other live fault skipped), and the kind it is said to
    be is the NIC's alert's, not the flap's."""
    truth = [GroundTruth("link-flap", LANE, 100.0, 110.0),
             GroundTruth("nic-loss", NIC, 100.5, 110.5)]
    alerts = [alert("link-down", LANE, 101.0), alert("job-loss", NIC, 102.0)]
    diag = [(104.0, [LANE, NIC], "link-down"), (105.0, [LANE, NIC], "link-down")]
    s = score(truth, alerts, diag, span=(90.0, 200.0), interval=1.0, plan=plan)
    rows = {r["kind"]: r for r in s["per_fault"]}
    assert rows["nic-loss"]["top1"] and "nic-loss" in rows["nic-loss"]["kind_guess"].split("/")
    assert rows["nic-loss"]["kind_correct"] and rows["link-flap"]["kind_correct"], rows


def test_the_answer_is_the_one_two_polls_after_the_alert_though_polls_jitter(
        plan) -> None:  # noqa: ANN001
    """Polls come a few ms early or late: the answer given at the second poll after the
    first alert is the one scored, though that poll came 3 ms short of two intervals
    (the third poll's answer, here a later fault's, is not)."""
    truth = [GroundTruth("link-flap", LANE, 100.0, 102.0)]
    alerts = [alert("link-down", LANE, 100.5)]
    diag = [(100.5, [LANE], "link-down"), (101.498, [LANE], "link-down"),
            (102.497, [LANE], "link-down"), (103.5, [NIC, LANE], "job-loss")]
    for d in (diag, [(t + 0.006, r, k) for t, r, k in diag]):  # early, then late
        s = score(truth, alerts, d, span=(90.0, 200.0), interval=1.0, plan=plan)
        assert s["per_fault"][0]["top1"], d


def test_symptoms_never_detect_and_an_alert_detects_one_fault(plan) -> None:  # noqa: ANN001
    truth = [GroundTruth("partial-blackhole", "lf0r1", 100.0, 110.0),
             GroundTruth("nic-loss", NIC, 101.0, 111.0)]
    alerts = [alert("job-slow", "job", 101.5), alert("job-loss-switch", "lf0r1", 102.0)]
    # the leaf's alert is both faults' (a NIC's leaf; a switch itself): the exact name wins
    assert credit(truth, alerts, 1.0, plan) == [None, 0]
    s = score(truth, alerts, None, span=(90.0, 200.0), interval=1.0, plan=plan)
    assert [r["detected"] for r in s["per_fault"]] == [True, False]
    assert (s["alerts"], s["credited"], s["alert_precision"]) == (1, 1, 1.0)
    # same component, two faults: the one whose kind the alert is evidence of
    two = [GroundTruth("link-degrade", LANE, 100.0, 110.0),
           GroundTruth("gray-loss", LANE, 100.0, 110.0)]
    assert credit(two, [alert("loss", LANE, 101.0)], 1.0, plan) == [1]
    assert credit(two, [alert("degraded", LANE, 101.0)], 1.0, plan) == [0]


def test_false_alarms_are_timed_where_no_window_runs(plan) -> None:  # noqa: ANN001
    """Interval 1 s: grace 3 + 5 = 8 s after each undo. Phase 0-1000 s, two windows
    100-118 and 300-318 (36 s): 964 s fault-free."""
    truth = [GroundTruth("gray-loss", LANE, 100.0, 110.0),
             GroundTruth("nic-loss", NIC, 300.0, 310.0)]
    assert uncovered_s(truth, (0.0, 1000.0), 1.0) == 964.0
    assert uncovered_s([GroundTruth("x", "a", 100.0, 110.0)] * 2, (0.0, 1000.0), 1.0) == 982.0
    alerts = [alert("loss", LANE, 103.0),  # detects the first
              alert("loss", "spine0", 104.0),  # astray: in a window, not near it
              alert("loss", NIC, 315.0),  # late, in the grace: detects the second
              alert("loss", "lf0r1", 500.0), alert("degraded", LANE, 700.0)]  # false
    s = score(truth, alerts, None, span=(0.0, 1000.0), interval=1.0, plan=plan)
    assert (s["detected"], s["credited"], s["astray"], s["false_alarms"]) == (2, 2, 1, 2)
    assert s["alert_precision"] == 0.4 and s["recall"] == 1.0
    assert s["false_alarms_per_hour"] == round(2 * 3600 / 964, 2)
    assert s["ttd_s"] == {"p50": 9.0, "p95": 14.4}
    clean = score([], [alert("loss", LANE, 10.0)], None, span=(0.0, 1000.0), interval=1.0)
    assert clean["false_alarms_per_hour"] == 3.6 and clean["fault_free_s"] == 1000.0


def test_a_miswiring_is_named_by_either_crossed_lane(plan) -> None:  # noqa: ANN001
    events = [{"time": 100.4, "apply_start": 100.0, "kind": "shuffle-miswiring",
               "component": LANE, "action": "inject", "fault_id": 1,
               "detail": {"partner": "lf0r0~spine3", "affects": ["lf0r0~spine3#0"]}},
              {"time": 110.0, "kind": "shuffle-miswiring", "component": LANE,
               "action": "undo", "fault_id": 1}]
    truth = ground_truth(events, 200.0)
    assert truth == [GroundTruth("shuffle-miswiring", LANE, 100.0, 110.0, injected=100.4,
                                 also=("lf0r0~spine3#0",))]
    alerts = [alert("miswired", "lf0r0~spine3#0", 104.0)]
    s = score(truth, alerts, [(106.0, ["lf0r0~spine3#0", LANE], "miswired")],
              span=(90.0, 200.0), interval=1.0, plan=plan)
    r = s["per_fault"][0]
    assert r["detected"] and r["top1"] and r["kind_correct"] and r["detect_s"] == 4.0
    assert s["pairs"]["right"] == 1 and s["pairs"]["f1"] == 1.0


def test_pair_f1_counts_each_fault_found_once_and_each_wrong_pair_once(plan) -> None:  # noqa: ANN001
    truth = [GroundTruth("gray-loss", LANE, 100.0, 110.0),
             GroundTruth("link-degrade", "lf0r1~spine0#0", 200.0, 210.0)]
    alerts = [alert("loss", LANE, 101.0), alert("loss", "lf0r1~spine0#0", 201.0)]
    diag = [(103.0, [LANE], "loss"), (104.0, [LANE], "loss"),  # right, once
            (203.0, ["lf0r1~spine0#0"], "loss"),  # right place, wrong kind
            (204.0, ["lf0r1~spine0#0"], "loss"),  # the same wrong pair: counted once
            (205.0, ["spine1"], "degraded"),  # wrong place
            (500.0, ["spine1"], "degraded")]  # no fault live: not a statement
    p = score(truth, alerts, diag, span=(0.0, 1000.0), interval=1.0, plan=plan)["pairs"]
    assert (p["stated"], p["right"], p["wrong"]) == (5, 1, 2)
    assert (p["precision"], p["recall"]) == (round(1 / 3, 4), 0.5)


#: a run's faults on the 2x2 fabric: every kind of target, 20 s apart
def _campaign(plan, n: int = 24) -> list[GroundTruth]:  # noqa: ANN001
    rng = random.Random(3)
    comps = [("gray-loss", c) for c in link_components(plan) if c.startswith("lf")] + \
        [("nic-loss", h.name) for h in plan.hosts] + [("switch-down", "spine1"),
                                                     ("controller-kill", CONTROLLER)]
    return [GroundTruth(*rng.choice(comps), 100.0 + 20 * i, 108.0 + 20 * i) for i in range(n)]


def test_a_source_alerting_at_random_scores_badly(default) -> None:  # noqa: ANN001
    """One alert a poll on a random component of ops-eval's fabric, five seeds."""
    plan = default
    truth = _campaign(plan)
    span = (0.0, 100.0 + 20 * len(truth))
    names = [*link_components(plan), *(s.name for s in plan.switches), CONTROLLER]
    scores = []
    for seed in range(5):
        rng = random.Random(seed)
        noise = [alert(rng.choice(["loss", "degraded", "link-down"]), rng.choice(names),
                       float(t)) for t in range(int(span[1]))]
        scores.append(score(truth, noise, None, span=span, interval=1.0, plan=plan))
    for s in scores:
        assert s["recall"] < 0.5  # the lenient score gave it 1.0
        assert s["f1"] < 0.1 and s["alert_precision"] < 0.05
        assert s["false_alarms_per_hour"] > 1000
        assert s["pairs"]["f1"] < 0.35


def test_a_source_alerting_on_everything_scores_badly(default) -> None:  # noqa: ANN001
    """Every component, every poll: it detects every fault and names it, but its alerts are
    almost all wrong and it rings all the time between faults."""
    plan = default
    truth = _campaign(plan, 8)
    span = (0.0, 100.0 + 20 * len(truth))
    names = [*link_components(plan), *(s.name for s in plan.switches), CONTROLLER]
    flood = [alert("loss", c, float(t)) for t in range(int(span[1])) for c in names]
    s = score(truth, flood, None, span=span, interval=1.0, plan=plan)
    assert s["recall"] == 1.0
    assert s["f1"] < 0.05 and s["alert_precision"] < 0.02
    assert s["false_alarms_per_hour"] > 10_000
    assert s["pairs"]["precision"] < 0.05


def test_a_run_is_scored_again_from_its_file(plan) -> None:  # noqa: ANN001
    """``score_run`` reads only what ops_eval.json keeps: events, phases, raw alerts."""
    events = [{"time": 300.2, "apply_start": 300.0, "kind": "gray-loss", "component": LANE,
               "action": "inject", "fault_id": 1},
              {"time": 310.0, "kind": "gray-loss", "component": LANE, "action": "undo",
               "fault_id": 1}]
    res = {"interval_s": 1.0, "phases": {"clean": 0.0, "faults": 200.0, "end": 400.0},
           "events": events,
           "alerts": [alert("loss", "lf0r1", 50.0), alert("loss", LANE, 302.0),
                      alert("job-slow", "job", 303.0)],
           "diagnoses": [[304.0, [LANE], "loss"]],
           "baseline_alerts": {"static-thresholds": [alert("static:nic_drops", NIC, 301.0)]}}
    sc = score_run(res, plan)
    out = summaries(sc)
    assert out["recall"] == 1.0 and out["top1"] == 1.0 and out["precision"] == 0.5
    assert out["false_alarms_clean"] == 1 and out["lead_s_median"] == 1.0
    assert out["any_alert_recall"] == 1.0
    st = out["baselines"]["static-thresholds"]
    assert st["recall"] == 0.0 and st["any_alert_recall"] == 1.0
    assert st["false_alarms_per_hour_fault_phase"] is not None


def test_healthy_slots_stand_among_the_faults_and_the_faults_keep_their_order() -> None:
    from ops.shell.experiment import healthy_slots, shifted

    slots = healthy_slots(8, 0.25, seed=1)
    assert len(slots) == 2 and 0 not in slots and max(slots) < 10
    assert slots == healthy_slots(8, 0.25, seed=1)  # the seed draws them
    assert len({tuple(healthy_slots(8, 0.25, seed=s)) for s in range(6)}) > 1
    assert healthy_slots(8, 0.0, seed=1) == []
    # 22 s slots, slots 2 and 5 healthy: fault slots 0 1 3 4 6 7 8 9
    moved = [shifted(22.0 * k + 3.0, 22.0, [2, 5]) for k in range(8)]
    assert moved == [3.0, 25.0, 69.0, 91.0, 135.0, 157.0, 179.0, 201.0]
    assert shifted(10.0, 22.0, []) == 10.0
