"""The baselines (ops.baselines) on synthetic telemetry, and the scores (ops.evaluate) on
hand-made faults and alerts whose precision, recall and F1 are known."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from test_ops_detectors import LANE, NIC, Values, clean_poll

from ops.baselines import PeerOutlier, StaticThresholds
from ops.detectors import AlertBook
from ops.evaluate import GroundTruth, score, summarize
from ops.telemetry import History
from testbed.topologies import build


@pytest.fixture(scope="module")
def plan():  # noqa: ANN201
    return build("astral3", servers=2, gpus=2)


def feed(plan, book: AlertBook, polls: int,  # noqa: ANN001
         fault: Callable[[int, Values], None] | None = None, seed: int = 1
         ) -> dict[int, list[tuple[str, str]]]:
    """Poll i at t = 1000 + i through ``book``; the (rule, component) opened at each poll."""
    rng = random.Random(seed)
    hist = History()
    opened = {}
    for i in range(polls):
        v = clean_poll(plan, rng)
        if fault is not None:
            fault(i, v)
        hist.add(1000.0 + i, v)
        got = book.step(hist)
        if got:
            opened[i] = [(a.detector, a.component) for a in got]
    return opened


def test_a_clean_fabric_raises_nothing(plan) -> None:  # noqa: ANN001
    for seed in range(4):
        assert feed(plan, StaticThresholds(plan), 60, seed=seed) == {}
        assert feed(plan, PeerOutlier(plan), 60, seed=seed) == {}


def test_thresholds_flag_gray_loss_on_its_nic_at_once(plan) -> None:  # noqa: ANN001
    def gray(i: int, v: Values) -> None:
        if i >= 20:
            v[(NIC, "in_drop_pps")] = 0.005 * v[(NIC, "in_pps")]  # 0.5%: 10 packets/s

    assert feed(plan, StaticThresholds(plan), 30, gray) == {20: [("static:nic_drops", NIC)]}
    # one slow lane among its siblings is the lane's alarm, in the direction it is slow
    def slow_lane(i: int, v: Values) -> None:
        if i >= 20:
            v[(LANE, "mbps_ab")] *= 0.3

    assert feed(plan, StaticThresholds(plan), 30, slow_lane) == {20: [("static:mbps_ab", LANE)]}


def test_peer_outlier_flags_a_slow_host_after_m_polls_only(plan) -> None:  # noqa: ANN001
    def slow(start: int, stop: int) -> Callable[[int, Values], None]:
        def edit(i: int, v: Values) -> None:
            if start <= i < stop:
                v[(NIC, "rx_mbps")] *= 0.5
        return edit

    m = PeerOutlier.M
    assert feed(plan, PeerOutlier(plan), 40, slow(20, 40)) == {
        20 + m - 1: [("peer-outlier", "s1g1~lf0r1#0")]}  # the host's NIC link
    assert feed(plan, PeerOutlier(plan), 40, slow(20, 20 + m - 1)) == {}  # a transient


def test_peer_outlier_cannot_name_a_switch(plan) -> None:  # noqa: ANN001
    """spine2 drops a share of the flows through it (a partial blackhole): every host
    loses a little, s1g1 (whose flows hash there) much. Peer-outlier sees hosts only: it
    names s1g1, never the switch; spread evenly, the fault raises nothing at all."""
    def blackhole(worst: float) -> Callable[[int, Values], None]:
        def edit(i: int, v: Values) -> None:
            if i >= 20:
                for h in ("s0g0", "s0g1", "s1g0", "s1g1"):
                    v[(h, "rx_mbps")] *= worst if h == NIC else 0.9
        return edit

    book = PeerOutlier(plan)
    assert feed(plan, book, 40, blackhole(0.5)) == {22: [("peer-outlier", "s1g1~lf0r1#0")]}
    s = score([GroundTruth("partial-blackhole", "spine2", 1020.0, 1039.0)],
              [a.to_dict() for a in book.all_alerts()], None, run_s=40.0, interval=1.0,
              plan=plan)
    assert s["recall"] == 1.0 and s["top1"] == 0.0 and s["top3"] == 0.0
    assert feed(plan, PeerOutlier(plan), 40, blackhole(0.9)) == {}


def test_scores_count_faults_once_and_alerts_outside_windows_as_false(plan) -> None:  # noqa: ANN001
    """Interval 0.5 s, so the grace is 3 x 0.5 + 5 = 6.5 s after each undo."""
    truth = [GroundTruth("link-down", LANE, 100.0, 110.0),
             GroundTruth("nic-loss", NIC, 200.0, 210.0),
             GroundTruth("switch-down", "spine1", 300.0, 310.0)]

    def alert(comp: str, t: float) -> dict:
        return {"detector": "static:up", "component": comp, "opened": t, "first_seen": t}

    alerts = [alert(LANE, 101.0),
              alert("lf0r0", 103.0),  # a wrong component inside a window: not a false alarm
              alert("s1g1~lf0r1#0", 215.0),  # late (after the undo, inside the grace)
              alert("lf0r1", 250.0),  # outside every window: false
              alert("spine1", 317.0)]  # after the grace: false, and spine1 missed
    s = score(truth, alerts, None, run_s=1800.0, interval=0.5, plan=plan)
    assert (s["detected"], s["false_alarms"], s["false_alarms_per_hour"]) == (2, 2, 4.0)
    assert (s["recall"], s["precision"], s["f1"]) == (0.6667, 0.5, 0.5714)
    assert s["ttd_s"] == {"p50": 8.0, "p95": 14.3}
    assert s["ttd_polls"] == {"p50": 16.0, "p95": 28.6}
    # no agent: the answer is the alerts so far (asked two polls after the first)
    assert [r["ranked"] for r in s["per_fault"]] == [[LANE], ["s1g1"], []]
    assert s["top1"] == 0.6667 and s["per_kind"]["switch-down"]["recall"] == 0.0
    assert s["per_kind"]["nic-loss"]["ttd_polls"] == {"p50": 30.0, "p95": 30.0}
    # both phases: the fault-free phase's false alarm lowers precision, not recall
    clean = score([], [alert("lf0r1", 10.0)], None, run_s=1800.0, interval=0.5)
    both = summarize(clean, s)
    assert (both["precision"], both["recall"], both["false_alarms_per_hour"]) == \
        (0.4, 0.6667, 2.0)
    assert both["f1"] == round(2 * 0.4 * 0.6667 / (0.4 + 0.6667), 4)


def test_ops_eval_monitor_steps_the_baselines_on_the_engines_polls(plan) -> None:  # noqa: ANN001
    """The experiment's Monitor feeds every poll to the engine and to each baseline (no
    second run): the gray loss the lab's loss detector ignores (0.5% < its 1%) is the
    static thresholds' alarm."""
    from types import SimpleNamespace

    from ops.shell.experiment import Monitor

    mon = Monitor(SimpleNamespace(plan=plan, rest_port=None, hosts={}), None, 1.0)
    rng = random.Random(1)
    for i in range(30):
        v = clean_poll(plan, rng)
        if i >= 20:
            v[(NIC, "in_drop_pps")] = 10.0
        mon.collector.history.add(1000.0 + i, v)
        mon.collector.on_poll(1000.0 + i, v)  # type: ignore[misc]
    assert mon.alerts() == [] and mon.alerts("peer-outlier") == []
    assert [(a["detector"], a["component"], a["opened"])
            for a in mon.alerts("static-thresholds")] == [("static:nic_drops", NIC, 1020.0)]
