"""The baselines (ops.baselines) on synthetic telemetry, and the scores (ops.evaluate) on
hand-made faults and alerts whose precision, recall and F1 are known."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from test_ops_detectors import LANE, NIC, Values, clean_poll

from ops.baselines import (
    FLOORS,
    MARGIN,
    NAMES,
    SHOWS,
    LossVote,
    PeerOutlier,
    StaticThresholds,
    Thresholds,
    baselines,
    calibrate,
)
from ops.detectors import AlertBook
from ops.evaluate import GroundTruth, any_alert_score, score, summarize
from ops.telemetry import History
from testbed.topologies import build
from traffic.iterations import JOB, pair_metric

PERSIST = StaticThresholds.PERSIST
NIC_LINK = "s1g1~lf0r1#0"  # NIC's link: what peer-outlier and loss-vote name


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


def history(plan, polls: int, fault: Callable[[int, Values], None] | None = None,  # noqa: ANN001
            seed: int = 99) -> History:
    """A run's history (polls at t = 1000 + i), e.g. a clean calibration run."""
    rng = random.Random(seed)
    hist = History(maxlen=None)
    for i in range(polls):
        v = clean_poll(plan, rng)
        if fault is not None:
            fault(i, v)
        hist.add(1000.0 + i, v)
    return hist


def noisy(i: int, v: Values) -> None:
    """What a clean run shows that ``clean_poll`` does not: a queue dropping up to 3
    packets now and then, ARP on a NIC, a stray lost packet of the job."""
    if i % 7 == 3:
        v[(LANE, "qdrops_ab")] = float(1 + i % 3)  # 1, 2, 3
    v[(NIC, "in_drop_pps")] = 0.8 if i % 5 == 0 else 0.0
    if i % 11 == 5:
        v[(JOB, pair_metric("s0g0", "s0g1"))] = 1.0


def lossy_pairs(at: dict[int, list[tuple[str, str]]], lost: float = 4.0
                ) -> Callable[[int, Values], None]:
    """A fault hook: at poll i, the job reports ``lost`` packets on each of these pairs."""
    def fault(i: int, v: Values) -> None:
        for src, dst in at.get(i, []):
            v[(JOB, pair_metric(src, dst))] = lost
    return fault


def test_every_baseline_is_filed_and_its_rules_declare_kinds(plan) -> None:  # noqa: ANN001
    assert tuple(baselines(plan)) == NAMES
    assert SHOWS["loss-vote"].fault_kinds == SHOWS["static:job_lost"].fault_kinds == (
        "nic-loss", "gray-loss", "corruption", "partial-blackhole", "mtu-mismatch")
    assert {f"static:{c}_{d}" for c in ("qdrops", "rxdrops", "mbps", "backlog")
            for d in ("ab", "ba")} <= set(SHOWS)


def test_a_clean_fabric_raises_nothing(plan) -> None:  # noqa: ANN001
    cal = calibrate(plan, history(plan, 120, noisy))
    for seed in range(4):
        assert feed(plan, StaticThresholds(plan), 60, seed=seed) == {}
        assert feed(plan, StaticThresholds(plan, cal), 60, noisy, seed=seed) == {}
        assert feed(plan, PeerOutlier(plan), 60, seed=seed) == {}
        assert feed(plan, LossVote(plan), 60, noisy, seed=seed) == {}
    # a stray loss on one pair, now here, now there: one pair cannot tell its ends apart
    rng = random.Random(5)
    hosts = sorted(h.name for h in plan.hosts)
    stray = {i: [tuple(rng.sample(hosts, 2))] for i in range(0, 200, 7)}
    assert feed(plan, LossVote(plan), 200, lossy_pairs(stray, 1.0)) == {}  # type: ignore[arg-type]


def test_calibration_is_the_clean_maximum_times_the_margin_floored(plan) -> None:  # noqa: ANN001
    clean = history(plan, 120, noisy)
    cal = calibrate(plan, clean)
    assert (cal.polls, cal.margin) == (120, MARGIN)
    assert cal.qdrops == 3.0 * MARGIN  # the queue's 3 stray drops
    assert cal.nic_drops == FLOORS["nic_drops"]  # ARP's 0.8/s x 2 is below the floor
    assert cal.job_lost == 1.0 * MARGIN  # a stray lost packet
    assert (cal.rxdrops, cal.port_drops, cal.carrier_changes) == (1.0, 1.0, 0.0)  # zeros
    # queues of at most 3,000 bytes: 1.2 ms of a 20 Mb/s lane, 0.6 ms of a NIC; floored
    assert cal.backlog_s == FLOORS["backlog_s"]
    # lanes at 30-50% of their rate: the slowest is > 0.6 x its siblings' median
    assert 0.3 < cal.rate_ratio < Thresholds().rate_ratio
    # a window of the run: polls before the first stray drop give the floors
    assert calibrate(plan, clean, since=1000.0, until=1003.0).qdrops == FLOORS["qdrops"]
    assert calibrate(plan, clean, margin=3.0).qdrops == 9.0
    # baselines() takes the calibration run too
    static = baselines(plan, calibration=clean)["static-thresholds"]
    assert isinstance(static, StaticThresholds) and static.limits == cal


def test_calibrated_thresholds_pass_a_marginal_or_one_poll_spike(plan) -> None:  # noqa: ANN001
    """Clean: the lane's queue drops up to 3 packets a poll. 5 a poll from poll 20 on is
    within 2 x that: the hand-set threshold rings, the calibrated one does not; 20 in one
    poll rings neither (no persistence); 10 a poll rings both, PERSIST polls in."""
    cal = StaticThresholds.calibrated(plan, history(plan, 120, noisy)).limits

    def drops(n: float, start: int = 20, stop: int = 40) -> Callable[[int, Values], None]:
        def edit(i: int, v: Values) -> None:
            if start <= i < stop:
                v[(LANE, "qdrops_ab")] = n
        return edit

    opened = {20 + PERSIST - 1: [("static:qdrops_ab", LANE)]}
    assert feed(plan, StaticThresholds(plan, cal), 40, drops(5.0)) == {}
    assert feed(plan, StaticThresholds(plan), 40, drops(5.0)) == opened
    assert feed(plan, StaticThresholds(plan, cal), 40, drops(20.0, 20, 21)) == {}
    assert feed(plan, StaticThresholds(plan, cal), 40, drops(20.0, 20, 20 + PERSIST - 1)) == {}
    assert feed(plan, StaticThresholds(plan, cal), 40, drops(10.0)) == opened
    assert feed(plan, StaticThresholds(plan, cal), 40, drops(10.0, 20, 20 + PERSIST)) == opened


def test_thresholds_flag_gray_loss_on_its_nic_after_persist_polls(plan) -> None:  # noqa: ANN001
    def gray(i: int, v: Values) -> None:
        if i >= 20:
            v[(NIC, "in_drop_pps")] = 0.005 * v[(NIC, "in_pps")]  # 0.5%: 10 packets/s

    at = 20 + PERSIST - 1
    assert feed(plan, StaticThresholds(plan), 30, gray) == {at: [("static:nic_drops", NIC)]}
    # one slow lane among its siblings is the lane's alarm, in the direction it is slow
    def slow_lane(i: int, v: Values) -> None:
        if i >= 20:
            v[(LANE, "mbps_ab")] *= 0.3

    assert feed(plan, StaticThresholds(plan), 30, slow_lane) == {at: [("static:mbps_ab", LANE)]}
    # the same lane against a calibration run whose lanes already fell to 0.2 x their
    # siblings' now and then: 0.3 x is within its margin
    def dip(i: int, v: Values) -> None:
        if i % 10 == 0:
            v[(LANE, "mbps_ab")] = 0.2 * 8.0

    quiet = StaticThresholds.calibrated(plan, history(plan, 60, dip))
    assert quiet.limits.rate_ratio <= 0.2 * 8.0 / 6.0 / MARGIN + 1e-9
    assert feed(plan, quiet, 30, slow_lane) == {}


def test_thresholds_read_the_jobs_losses_and_a_ports_discards(plan) -> None:  # noqa: ANN001
    """The job's lost packets towards a NIC (its out-of-sequence counter, as it were),
    pooled as job-loss pools them; a port refusing full-size frames (an MTU)."""
    to_nic = lossy_pairs({20: [("s0g0", NIC), ("s0g1", NIC)]}, 2.0)
    opened = feed(plan, StaticThresholds(plan), 40, to_nic)
    assert opened == {20 + PERSIST - 1: [("static:job_lost", NIC)]}
    # one stray packet is not above the floor
    assert feed(plan, StaticThresholds(plan), 40, lossy_pairs({20: [("s0g0", NIC)]}, 1.0)) == {}

    def mtu(i: int, v: Values) -> None:
        if i >= 20:
            v[(LANE, "rxdrops_ba")] = 40.0

    assert feed(plan, StaticThresholds(plan), 30, mtu) == {
        20 + PERSIST - 1: [("static:rxdrops_ba", LANE)]}


def test_loss_vote_spreads_a_pairs_vote_over_its_paths(plan) -> None:  # noqa: ANN001
    lv = LossVote(plan)
    cross = lv.links("s0g0", "s0g1")  # leaf lf0r0 to leaf lf0r1: through any of 4 spines
    assert cross["s0g0~lf0r0#0"] == cross["s0g1~lf0r1#0"] == 1.0
    lanes = {c: v for c, v in cross.items() if "spine" in c}
    assert len(lanes) == 8 and set(lanes.values()) == {0.25}
    assert lv.links("s0g0", "s1g0") == {"s0g0~lf0r0#0": 1.0, "s1g0~lf0r0#0": 1.0}  # one leaf
    assert lv.links("s0g0", "nowhere") == {}


def test_loss_vote_names_the_nic_its_lossy_pairs_share(plan) -> None:  # noqa: ANN001
    into = lossy_pairs({20: [("s0g0", NIC), ("s1g0", NIC), ("s0g1", NIC)]})
    m = LossVote.M
    assert feed(plan, LossVote(plan), 40, into) == {20 + m - 1: [("loss-vote", NIC_LINK)]}
    # two pairs, one from it and one to it (job-loss's case): still its link
    both_ways = lossy_pairs({20: [(NIC, "s0g0")], 21: [("s0g1", NIC)]})
    assert feed(plan, LossVote(plan), 40, both_ways) == {21 + m - 1: [("loss-vote", NIC_LINK)]}
    # one pair alone cannot tell its ends apart
    assert feed(plan, LossVote(plan), 40, lossy_pairs({20: [("s0g0", NIC)]})) == {}


def test_loss_vote_is_silent_on_loss_it_cannot_place(plan) -> None:  # noqa: ANN001
    """Loss on every pair, or on every pair from one leaf to the other (what a lossy
    uplink lane of lf0r0 loses): every leaf reaches every spine, so the leaf's four lanes
    tie, and so do its NICs."""
    hosts = sorted(h.name for h in plan.hosts)
    every = [(a, b) for a in hosts for b in hosts if a != b]
    assert feed(plan, LossVote(plan), 40, lossy_pairs({20: every})) == {}
    up = [(a, b) for a in ("s0g0", "s1g0") for b in ("s0g1", "s1g1")]
    assert feed(plan, LossVote(plan), 40, lossy_pairs({20: up})) == {}
    assert LossVote(plan).verdict(up) is None


def test_loss_vote_names_a_lane_that_is_the_only_link_its_lossy_pairs_share() -> None:
    """Three leaves with one lane each to one spine (astral3 at 4:1 oversubscription):
    pairs from both NICs of lf0r0 to NICs of two other leaves share no NIC, only lf0r0's
    lane. On the 2x2 fabric above the same pairs name nothing."""
    plan = build("astral3", servers=2, gpus=3, oversubscription=4, lanes_per_uplink=1)
    lane = "lf0r0~spine0#0"
    assert LossVote(plan).links("s0g0", "s0g1")[lane] == 1.0  # no sibling lane to take
    m = LossVote.M
    two = lossy_pairs({20: [("s0g0", "s0g1"), ("s1g0", "s1g2")]})
    assert feed(plan, LossVote(plan), 40, two) == {20 + m - 1: [("loss-vote", lane)]}
    up = [(a, b) for a in ("s0g0", "s1g0") for b in ("s0g1", "s1g1", "s0g2", "s1g2")]
    assert feed(plan, LossVote(plan), 40, lossy_pairs({20: up})) == {
        20 + m - 1: [("loss-vote", lane)]}
    # a NIC of lf0r0 losing on flows that all leave the leaf: they all cross its one lane
    # too, a tie; one flow to its neighbour under the leaf tells them apart
    out = [("s0g0", b) for b in ("s0g1", "s1g1", "s0g2")]
    assert feed(plan, LossVote(plan), 40, lossy_pairs({20: out})) == {}
    near = lossy_pairs({20: [("s0g0", "s1g0"), ("s0g0", "s0g1")]})
    assert feed(plan, LossVote(plan), 40, near) == {20 + m - 1: [("loss-vote", "s0g0~lf0r0#0")]}


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
    truth = [GroundTruth("partial-blackhole", "spine2", 1020.0, 1039.0)]
    raised = [a.to_dict() for a in book.all_alerts()]
    s = score(truth, raised, None, span=(1000.0, 1040.0), interval=1.0, plan=plan)
    assert s["recall"] == 0.0 and s["top1"] == 0.0 and s["astray"] == 1  # not its neighbour
    lenient = any_alert_score(truth, raised, None, run_s=40.0, interval=1.0, plan=plan)
    assert lenient["recall"] == 1.0 and lenient["top1"] == 0.0
    assert feed(plan, PeerOutlier(plan), 40, blackhole(0.9)) == {}


def test_lenient_scores_count_faults_once_and_alerts_outside_windows_as_false(plan) -> None:  # noqa: ANN001
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
    s = any_alert_score(truth, alerts, None, run_s=1800.0, interval=0.5, plan=plan)
    assert (s["detected"], s["false_alarms"], s["false_alarms_per_hour"]) == (2, 2, 4.0)
    assert (s["recall"], s["precision"], s["f1"]) == (0.6667, 0.5, 0.5714)
    assert s["ttd_s"] == {"p50": 8.0, "p95": 14.3}
    assert s["ttd_polls"] == {"p50": 16.0, "p95": 28.6}
    # no agent: the answer is the alerts so far (asked two polls after the first)
    assert [r["ranked"] for r in s["per_fault"]] == [[LANE], ["s1g1"], []]
    assert s["top1"] == 0.6667 and s["per_kind"]["switch-down"]["recall"] == 0.0
    assert s["per_kind"]["nic-loss"]["ttd_polls"] == {"p50": 30.0, "p95": 30.0}
    # both phases: the fault-free phase's false alarm lowers precision, not recall
    clean = any_alert_score([], [alert("lf0r1", 10.0)], None, run_s=1800.0, interval=0.5)
    both = summarize(_strict_clean(), _strict_of(plan), (clean, s))
    assert (both["any_alert_precision"], both["any_alert_recall"],
            both["any_alert_false_alarms_per_hour"]) == (0.4, 0.6667, 2.0)
    assert both["any_alert_f1"] == round(2 * 0.4 * 0.6667 / (0.4 + 0.6667), 4)


def test_ops_eval_monitor_steps_the_baselines_on_the_engines_polls(plan) -> None:  # noqa: ANN001
    """The experiment's Monitor feeds every poll to the engine and to each baseline (no
    second run): the gray loss the lab's loss detector ignores (0.5% < its 1%) is the
    static thresholds' alarm."""
    from types import SimpleNamespace

    from ops.shell.monitor import Monitor

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
            for a in mon.alerts("static-thresholds")] == [  # held PERSIST polls
        ("static:nic_drops", NIC, 1020.0 + PERSIST - 1)]


def _strict_clean() -> dict:
    return score([], [], None, span=(0.0, 1800.0), interval=0.5)


def _strict_of(plan) -> dict:  # noqa: ANN001
    return score([GroundTruth("link-down", LANE, 100.0, 110.0)], [], None,
                 span=(0.0, 1800.0), interval=0.5, plan=plan)
