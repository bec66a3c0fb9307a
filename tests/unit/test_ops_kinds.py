"""Kind classification in ops-eval: did the alert source say *what* is wrong.

Each alert declares the evidence it gives and the parts it points at (``AlertKind`` for a
detector, ``ops.baselines.SHOWS`` for a baseline rule), each fault kind the evidence it
produces; the kinds an alert is evidence of are derived from both
(``testbed.faultkinds.shown_by``), and ``ops.evaluate.score`` reads the guess from the
alert the source's top answer rests on. The checks run over the registries (every
detector, rule and kind there is); then hand-made faults, alerts and answers, right for
some and wrong for others, whose accuracy and confusion matrix are known.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from test_ops_detectors import LANE, NIC

from ops.baselines import SHOWS, StaticThresholds
from ops.detectors import DETECTORS, AlertKind
from ops.evaluate import GroundTruth, fault_kinds, kind_label, score, summarize
from ops.telemetry import CONTROLLER, History
from testbed.faultkinds import FAULT_KINDS as KINDS
from testbed.faultkinds import TARGETS, FaultKind
from testbed.topologies import build
from vocab.evidence import EVIDENCE, Evidence


@pytest.fixture(scope="module")
def plan():  # noqa: ANN201
    return build("astral3", servers=2, gpus=2)


def _alert(detector: str, comp: str, t: float) -> dict[str, Any]:
    return {"detector": detector, "component": comp, "opened": t, "first_seen": t}


def declared() -> dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    """Every alert a detector or a baseline rule raises: its evidence, its parts, the fault
    kinds derived from them."""
    out = {a: (k.evidence, k.parts, k.fault_kinds)
           for d in DETECTORS.all().values() for a, k in d.alerts.items()}
    out.update({a: (s.evidence, s.parts, s.fault_kinds) for a, s in SHOWS.items()})
    return out


def test_an_alert_is_evidence_of_the_kinds_that_produce_its_evidence_where_it_points() -> None:
    kinds = KINDS.all()
    for alert, (evidence, parts, derived) in declared().items():
        assert set(evidence) <= set(EVIDENCE) and set(parts) <= set(TARGETS), alert
        assert derived == tuple(n for n, k in kinds.items()  # in listing order, each once
                                if set(k.evidence) & set(evidence) and k.target in parts)
    # every kind is classified by some detector's alert, whatever kinds there are
    by_detectors = {k for d in DETECTORS.all().values() for a in d.alerts.values()
                    for k in a.fault_kinds}
    assert set(KINDS.names()) <= by_detectors
    # an alert that gives no evidence (a symptom, ECMP hash polarization) names no kind
    assert fault_kinds("job-slow") == fault_kinds("ecmp-imbalance") == ()
    assert fault_kinds("static:nic_drops") == fault_kinds("loss")
    assert fault_kinds("counters") == () and kind_label(()) == "none"
    with pytest.raises(ValueError, match="alert: evidence must be distinct words of loss"):
        AlertKind(50, "x", evidence=("lossy",))
    with pytest.raises(ValueError, match="alert parts must be some of link"):
        AlertKind(50, "x", evidence=(Evidence.LOSS,), parts=("cable",))


def test_a_kind_declaring_new_evidence_is_classified_by_the_alerts_already_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind added to the registry (a notebook's, a new module) is evidence-matched at
    once: no detector or baseline names it."""
    spec = types.ModuleType("testbed.faultkinds.slow_optic")
    spec.__doc__ = "A slow optic."
    spec.TARGET, spec.EVIDENCE, spec.EFFECT = "link", ("slow",), "slows"
    KINDS.add("slow-optic", FaultKind("slow-optic", spec))
    try:
        assert "slow-optic" in fault_kinds("degraded") and "slow-optic" in fault_kinds(
            "static:backlog_ab")
        assert "slow-optic" not in fault_kinds("hot-receiver")  # it points at a host
    finally:
        KINDS.remove("slow-optic")


def test_the_agents_guess_is_its_top_suspects_detector(plan) -> None:  # noqa: ANN001
    """Six faults: right (a set holding the kind, a single kind, a right kind on the wrong
    component, a detector read from the alert on the top suspect), wrong (a loss called a
    degraded lane, a counter anomaly naming no kind) and missed."""
    truth = [GroundTruth("link-flap", LANE, 100.0, 110.0),
             GroundTruth("corruption", NIC, 200.0, 210.0),
             GroundTruth("controller-restart", CONTROLLER, 300.0, 305.0),
             GroundTruth("gray-loss", LANE, 400.0, 410.0),
             GroundTruth("nic-loss", NIC, 500.0, 510.0),
             GroundTruth("partial-blackhole", "spine1", 600.0, 610.0),
             GroundTruth("switch-down", "spine2", 700.0, 710.0)]
    alerts = [_alert("link-down", LANE, 101.0), _alert("loss", NIC, 201.0),
              _alert("controller-down", CONTROLLER, 301.0), _alert("degraded", LANE, 401.0),
              _alert("loss", NIC, 501.0), _alert("job-slow", "job", 601.0)]
    diagnoses = [(103.0, [LANE], "link-down"),
                 (203.0, ["lf0r0~spine1#0", NIC], "loss"),  # wrong place, right kind
                 (303.0, [CONTROLLER]),  # no detector recorded: the alert on its top
                 (403.0, [LANE], "degraded"),  # a lossy lane called degraded
                 (503.0, [NIC], "loss"),
                 (603.0, ["spine1"], "counters")]  # a counter anomaly: no kind
    s = score(truth, alerts, diagnoses, span=(0.0, 3600.0), interval=1.0, plan=plan)
    pf = [(r["kind_alert"], r["kind_guess"], r["kind_correct"]) for r in s["per_fault"]]
    assert pf == [("link-down", "link-down/link-flap", True),
                  ("loss", "nic-loss/gray-loss/corruption", True),
                  ("controller-down", "controller-kill/controller-restart", True),
                  ("degraded", "link-degrade", False),
                  ("loss", "nic-loss/gray-loss/corruption", True),
                  (None, "none", False),  # only job-slow in its window: a symptom
                  (None, "none", False)]  # switch-down: missed
    assert s["per_fault"][1]["top1"] is False  # localization is scored apart
    assert s["kind_accuracy"] == round(4 / 7, 4)  # over all faults, missed ones wrong
    assert s["confusion"] == {
        "controller-restart": {"controller-kill/controller-restart": 1},
        "corruption": {"nic-loss/gray-loss/corruption": 1},
        "gray-loss": {"link-degrade": 1}, "link-flap": {"link-down/link-flap": 1},
        "nic-loss": {"nic-loss/gray-loss/corruption": 1},
        "partial-blackhole": {"none": 1}, "switch-down": {"none": 1}}
    assert s["per_kind"]["gray-loss"]["kind_accuracy"] == 0.0
    assert s["per_kind"]["corruption"]["kind_accuracy"] == 1.0
    assert s["by_kind"]["link-flap"]["kind_correct"] == 1


def test_a_baseline_guesses_by_its_first_alerts_rule(plan) -> None:  # noqa: ANN001
    """A baseline names no kind: its first alert in the window does, by its rule; the
    matrix adds up faults of one kind guessed alike or not."""
    truth = [GroundTruth("link-flap", LANE, 100.0, 110.0),
             GroundTruth("link-flap", LANE, 200.0, 210.0),
             GroundTruth("corruption", NIC, 300.0, 310.0),
             GroundTruth("link-degrade", LANE, 400.0, 410.0),
             GroundTruth("controller-kill", CONTROLLER, 500.0, 505.0),
             GroundTruth("mtu-mismatch", LANE, 600.0, 610.0)]
    alerts = [_alert("static:carrier_changes", LANE, 100.5), _alert("static:up", LANE, 101.0),
              _alert("peer-outlier", NIC, 202.0),  # first in the window: a host, wrong
              _alert("static:nic_drops", NIC, 300.5),
              _alert("peer-outlier", NIC, 402.0), _alert("static:mbps_ab", LANE, 403.0),
              _alert("static:controller_up", CONTROLLER, 500.5),
              _alert("static:port_drops", "spine2", 601.0)]  # an end
    s = score(truth, alerts, None, span=(0.0, 3600.0), interval=1.0, plan=plan)
    assert [r["kind_correct"] for r in s["per_fault"]] == [True, False, True, False, True,
                                                            True]
    assert s["kind_accuracy"] == round(4 / 6, 4)
    # the second flap: only a host's alert in its window, not its neighbour: missed
    assert s["confusion"]["link-flap"] == {"link-down/link-flap/switch-down": 1, "none": 1}
    assert s["confusion"]["link-degrade"] == {"nic-loss/hot-receiver": 1}
    assert s["per_kind"]["link-flap"]["kind_accuracy"] == 0.5
    both = summarize(score([], [], None, span=(0.0, 3600.0), interval=1.0), s)
    assert both["kind_accuracy"] == s["kind_accuracy"] and both["confusion"] == s["confusion"]
    assert {"precision", "recall", "f1", "top1", "top3", "kind_accuracy",
            "false_alarms_per_hour", "ttd_s", "faults", "per_kind"} <= set(both)
    assert both["faults"] == 6 and set(both["ttd_s"]) == {"p50", "p95"}
    assert set(both["per_kind"]["link-flap"]) >= {"kind_accuracy", "top1", "faults"}


def test_static_thresholds_name_the_controller_rule_apart_from_a_links(plan) -> None:  # noqa: ANN001
    hist = History()
    hist.add(1000.0, {(CONTROLLER, "up"): 0.0, (LANE, "up"): 0.0})
    found = {(f.detector, f.component) for f in StaticThresholds(plan).findings(hist)}
    assert {("static:controller_up", CONTROLLER), ("static:up", LANE)} <= found


def test_two_faults_at_once_are_each_scored_as_if_the_other_were_known(plan) -> None:  # noqa: ANN001
    """Concurrent faults: the other fault's alerts do not detect this one, and its component
    is skipped in this one's ranking (else the first fault named would fail the second)."""
    truth = [GroundTruth("link-down", LANE, 100.0, 110.0),
             GroundTruth("nic-loss", NIC, 101.0, 111.0),
             GroundTruth("switch-down", "spine2", 102.0, 112.0)]
    alerts = [_alert("link-down", LANE, 101.0), _alert("loss", NIC, 103.0)]
    diagnoses = [(103.0, [LANE, NIC], "link-down"), (105.0, [LANE, NIC], "link-down")]
    s = score(truth, alerts, diagnoses, span=(0.0, 3600.0), interval=1.0, plan=plan)
    rows = {r["kind"]: r for r in s["per_fault"]}
    assert rows["link-down"]["detected"] and rows["link-down"]["top1"]
    assert rows["nic-loss"]["detected"] and rows["nic-loss"]["top1"]  # LANE skipped
    assert rows["nic-loss"]["first_alert"] == f"loss:{NIC}"
    assert not rows["switch-down"]["detected"]  # only the others' alerts in its window
    assert s["false_alarms"] == 0
    # time to localize: the first answer naming it first (the other faults skipped)
    assert [r["localize_s"] for r in s["per_fault"]] == [3.0, 2.0, None]
    assert s["ttl_s"] == {"p50": 2.5, "p95": 2.95}
    # a source without an agent: its first alert on the component
    b = score(truth, alerts + [_alert("static:up", NIC, 104.5)], None, span=(0.0, 3600.0),
              interval=1.0, plan=plan)
    assert [r["localize_s"] for r in b["per_fault"]] == [1.0, 2.0, None]
