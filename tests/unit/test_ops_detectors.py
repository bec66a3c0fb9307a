"""Every detector fires on its fault and stays silent on a clean run (synthetic series).

The clean series mimic what telemetry measured on a real fabric carrying steady
traffic: lanes at ~40% of their rate with a little jitter, no queues, no drops, every
link up, the controller answering (see docs/operations.md for the measured numbers).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from ops import detectors as D
from ops.telemetry import History
from testbed.topologies import build
from vocab.plan import link_components

Values = dict[tuple[str, str], float]


@pytest.fixture(scope="module")
def plan():  # noqa: ANN201
    return build("astral3", servers=2, gpus=2)


def clean_poll(plan, rng: random.Random) -> Values:  # noqa: ANN001
    """One poll of a healthy fabric under steady load (values with jitter)."""
    v: Values = {("controller", "up"): 1.0}
    hosts = {h.name for h in plan.hosts}
    for comp, ln in link_components(plan).items():
        v[(comp, "up")] = 1.0
        v[(comp, "carrier_changes")] = 0.0
        for d in ("ab", "ba"):
            v[(comp, f"mbps_{d}")] = ln.mbps * rng.uniform(0.3, 0.5)
            if not (d == "ab" and ln.a in hosts):
                v[(comp, f"backlog_{d}")] = float(rng.choice([0, 0, 1500, 3000]))
                v[(comp, f"qdrops_{d}")] = 0.0
            v[(comp, f"rxdrops_{d}")] = 0.0
    for h in hosts:
        v[(h, "rx_mbps")] = 16 * rng.uniform(0.9, 1.1)
        v[(h, "tx_mbps")] = 16 * rng.uniform(0.9, 1.1)
        v[(h, "in_pps")] = v[(h, "out_pps")] = 2000.0
        v[(h, "in_drop_pps")] = v[(h, "out_drop_pps")] = 0.0
    return v


def run(plan, polls: int, fault: Callable[[int, Values], None] | None = None,  # noqa: ANN001
        seed: int = 1) -> tuple[D.Engine, dict[int, list[D.Alert]]]:
    """Feed ``polls`` one-second polls through an Engine; ``fault(i, values)`` edits poll i."""
    rng = random.Random(seed)
    eng = D.Engine(plan)
    hist = History()
    opened = {}
    for i in range(polls):
        v = clean_poll(plan, rng)
        if fault is not None:
            fault(i, v)
        hist.add(1000.0 + i, v)
        got = eng.step(hist)
        if got:
            opened[i] = got
    return eng, opened


LANE = "lf0r0~spine2#0"
NIC = "s1g1"


def test_clean_run_is_silent(plan) -> None:  # noqa: ANN001
    for seed in range(5):
        eng, opened = run(plan, 300, seed=seed)
        assert opened == {}, opened
        assert eng.baseline is not None and eng.baseline > 50


def first(opened: dict[int, list[D.Alert]]) -> tuple[int, D.Alert]:
    i = min(opened)
    return i, opened[i][0]


def test_link_down_fires_at_once_and_clears(plan) -> None:  # noqa: ANN001
    def fault(i: int, v: Values) -> None:
        if i == 50:
            v[(LANE, "carrier_changes")] = 1.0
        if 50 <= i < 60:
            v[(LANE, "up")] = 0.0
        if i == 60:
            v[(LANE, "carrier_changes")] = 1.0

    eng, opened = run(plan, 80, fault)
    i, a = first(opened)
    assert (i, a.detector, a.component, a.severity) == (50, "link-down", LANE, "critical")
    assert a.first_seen == 1050.0
    assert [x.detector for xs in opened.values() for x in xs] == ["link-down"]
    assert a.cleared is not None and 1060 <= a.cleared <= 1062


def test_switch_down_names_the_switch(plan) -> None:  # noqa: ANN001
    comps = [c for c in link_components(plan) if "spine1" in c]

    def fault(i: int, v: Values) -> None:
        if i >= 30:
            for c in comps:
                v[(c, "up")] = 0.0
                v[(c, "mbps_ab")] = v[(c, "mbps_ba")] = 0.0

    _eng, opened = run(plan, 40, fault)
    alerts = [a for xs in opened.values() for a in xs]
    assert [(a.detector, a.component) for a in alerts] == [("switch-down", "spine1")]
    assert sorted(alerts[0].evidence["links_down"]) == sorted(comps)


def test_flapping_is_flagged_on_the_second_loss_of_carrier(plan) -> None:  # noqa: ANN001
    # carrier toggles between polls: the poll never sees the link down, only the counter
    def fault(i: int, v: Values) -> None:
        if i in (40, 42, 44, 46):
            v[(LANE, "carrier_changes")] = 2.0

    _eng, opened = run(plan, 60, fault)
    i, a = first(opened)
    assert (i, a.detector, a.component) == (42, "flapping", LANE)


def test_single_cut_and_repair_is_not_flapping(plan) -> None:  # noqa: ANN001
    def fault(i: int, v: Values) -> None:
        if i == 40:
            v[(LANE, "carrier_changes")] = 2.0

    assert run(plan, 60, fault)[1] == {}


def test_degraded_lane_fires_before_job_suffers(plan) -> None:  # noqa: ANN001
    # lane cut to 25%: it sends 5 Mb/s and its queue grows by the excess every second
    def fault(i: int, v: Values) -> None:
        if i >= 40:
            v[(LANE, "mbps_ab")] = 5.0
            v[(LANE, "backlog_ab")] = 375_000.0 * (i - 39)

    _eng, opened = run(plan, 60, fault)
    i, a = first(opened)
    assert (i, a.detector, a.component) == (41, "degraded", LANE)
    assert a.first_seen == 1040.0
    assert a.evidence["configured_mbps"] == 20.0


def test_full_lane_with_queue_is_congestion_not_degradation(plan) -> None:  # noqa: ANN001
    def fault(i: int, v: Values) -> None:
        if i >= 40:
            v[(LANE, "mbps_ab")] = 19.9
            v[(LANE, "backlog_ab")] = 400_000.0

    assert run(plan, 60, fault)[1] == {}


def test_nic_loss(plan) -> None:  # noqa: ANN001
    def fault(i: int, v: Values) -> None:
        if i >= 40:
            v[(NIC, "in_drop_pps")] = 100.0
            v[(NIC, "out_drop_pps")] = 80.0

    _eng, opened = run(plan, 50, fault)
    i, a = first(opened)
    assert (i, a.detector, a.component) == (41, "loss", NIC)


def test_a_few_drops_are_noise(plan) -> None:  # noqa: ANN001
    def fault(i: int, v: Values) -> None:
        if i % 7 == 0:
            v[(NIC, "in_drop_pps")] = 3.0

    assert run(plan, 100, fault)[1] == {}


def test_queue_drops_on_a_lane(plan) -> None:  # noqa: ANN001
    def fault(i: int, v: Values) -> None:
        if i >= 40:
            v[(LANE, "qdrops_ba")] = 50.0

    _eng, opened = run(plan, 50, fault)
    i, a = first(opened)
    assert (i, a.detector, a.component) == (41, "loss", LANE)


def test_ecmp_imbalance(plan) -> None:  # noqa: ANN001
    lanes = [c for c in link_components(plan) if c.startswith("lf0r1~")]

    def fault(i: int, v: Values) -> None:
        if i >= 40:
            for c in lanes:
                v[(c, "mbps_ab")] = 1.0
            v[(lanes[2], "mbps_ab")] = 18.0

    _eng, opened = run(plan, 60, fault)
    i, a = first(opened)
    assert (i, a.detector, a.component) == (44, "ecmp-imbalance", lanes[2])


def test_hot_receiver(plan) -> None:  # noqa: ANN001
    nic = link_components(plan)
    comp = next(c for c in nic if c.startswith(f"{NIC}~"))

    def fault(i: int, v: Values) -> None:
        if i >= 40:
            v[(comp, "mbps_ba")] = 39.5
            v[(comp, "backlog_ba")] = 1_000_000.0

    _eng, opened = run(plan, 50, fault)
    got = {(a.detector, a.component) for xs in opened.values() for a in xs}
    assert ("hot-receiver", NIC) in got
    assert min(opened) == 41


def test_controller_down_needs_two_missed_polls(plan) -> None:  # noqa: ANN001
    def blip(i: int, v: Values) -> None:
        if i == 30:
            v[("controller", "up")] = 0.0

    assert run(plan, 40, blip)[1] == {}

    def dead(i: int, v: Values) -> None:
        if i >= 30:
            v[("controller", "up")] = 0.0

    _eng, opened = run(plan, 40, dead)
    i, a = first(opened)
    assert (i, a.detector, a.component) == (31, "controller-down", "controller")


def test_job_slow_against_learned_baseline(plan) -> None:  # noqa: ANN001
    def fault(i: int, v: Values) -> None:
        if i >= 40:
            for h in plan.hosts:
                v[(h.name, "rx_mbps")] *= 0.4

    eng, opened = run(plan, 50, fault)
    i, a = first(opened)
    assert (i, a.detector, a.component) == (42, "job-slow", "job")
    assert eng.baseline == pytest.approx(64, rel=0.1)


def test_alerts_are_deduplicated(plan) -> None:  # noqa: ANN001
    def fault(i: int, v: Values) -> None:
        if i >= 10:
            v[(LANE, "up")] = 0.0

    eng, opened = run(plan, 100, fault)
    assert sum(len(x) for x in opened.values()) == 1
    assert len(eng.all_alerts()) == 1 and eng.all_alerts()[0].last_seen == 1099.0


def test_transmit_stall_is_not_random_loss(plan) -> None:  # noqa: ANN001
    # measured on a clean run: a NIC sent nothing for ~3 s while its sender kept going
    def fault(i: int, v: Values) -> None:
        if 40 <= i < 43:
            v[(NIC, "out_drop_pps")] = 2000.0

    assert run(plan, 50, fault)[1] == {}


def _iterations(times: dict[int, tuple[float, float]], bursty: bool = True):  # noqa: ANN202
    """A fault hook: a MoE job's iteration (seconds, packets lost) ending at poll i, with the
    job's received rate bursting and pausing as an all-to-all does."""
    def fault(i: int, v: Values) -> None:
        if bursty:
            for h in ("s0g0", "s0g1", "s1g0", "s1g1"):
                v[(h, "rx_mbps")] *= 3.0 if i % 3 == 0 else 0.1
        if i in times:
            secs, lost = times[i]
            v[("job", "iter_s")] = secs
            v[("job", "iter_lost")] = lost
            v[("job", "iter_failed")] = 0.0
    return fault


def clean_iterations(n: int, rng: random.Random) -> dict[int, tuple[float, float]]:
    """An iteration every 3 polls, 0.5 s +- 25%, no loss."""
    return {i: (0.5 * rng.uniform(0.75, 1.25), 0.0) for i in range(2, n, 3)}


def test_a_job_with_iterations_is_judged_by_them_not_by_its_bursty_rate(plan) -> None:  # noqa: ANN001
    for seed in range(5):
        its = clean_iterations(300, random.Random(seed))
        _, opened = run(plan, 300, _iterations(its), seed=seed)
        assert opened == {}, opened
    # a long pause in what the job receives (between all-to-alls) is no alarm while its
    # iterations keep their time; with no iterations reported it is one (the rate rule)
    its = clean_iterations(120, random.Random(1))
    bursts = _iterations(its, bursty=False)

    def pause(i: int, v: Values) -> None:
        bursts(i, v)
        if i >= 60:
            for h in plan.hosts:
                v[(h.name, "rx_mbps")] *= 0.1
    _, opened = run(plan, 120, pause)
    assert opened == {}
    its.clear()
    _, opened = run(plan, 120, pause)
    assert [a.detector for got in opened.values() for a in got] == ["job-slow"]


def test_a_slow_iteration_raises_job_slow_at_the_poll_it_ends(plan) -> None:  # noqa: ANN001
    its = clean_iterations(120, random.Random(3))
    its[62] = (1.2, 0.0)  # 2.4x the median
    _, opened = run(plan, 120, _iterations(its))
    i, a = first(opened)
    assert (i, a.detector, a.component) == (62, "job-slow", "job")
    assert "1.20 s" in a.summary and a.first_seen == 1062.0


def test_an_iteration_that_lost_packets_raises_job_slow(plan) -> None:  # noqa: ANN001
    its = clean_iterations(120, random.Random(4))
    its[50] = (its[50][0], 3.0)  # on time, but 3 packets never arrived
    eng, opened = run(plan, 120, _iterations(its))
    i, a = first(opened)
    assert (i, a.detector) == (50, "job-slow") and "lost 3 packets" in a.summary
    # the next clean iteration (poll 53) ends it; cleared after CLEAR_POLLS polls
    assert [x.cleared for x in eng.closed if x.detector == "job-slow"] == [1000.0 + 54]


def test_slow_iterations_need_earlier_ones_to_compare_with(plan) -> None:  # noqa: ANN001
    its = {2: (0.5, 0.0), 5: (0.5, 0.0), 8: (2.0, 0.0)}  # only two before the slow one
    _, opened = run(plan, 12, _iterations(its))
    assert opened == {}


def _lossy_pairs(at: dict[int, dict[tuple[str, str], float]]):  # noqa: ANN202
    """A fault hook: at poll i, the job reports packets lost per (src, dst) NIC pair."""
    from traffic.iterations import JOB, pair_metric

    def fault(i: int, v: Values) -> None:
        for (src, dst), n in at.get(i, {}).items():
            v[(JOB, pair_metric(src, dst))] = n
    return fault


def test_job_loss_names_the_nic_every_lossy_flow_shares(plan) -> None:  # noqa: ANN001
    eng, opened = run(plan, 40, _lossy_pairs({20: {("s1g1", "s0g0"): 5.0,
                                                   ("s0g1", "s1g1"): 3.0}}))
    i, a = first(opened)
    assert (i, a.detector, a.component) == (20, "job-loss", "s1g1")
    assert a.evidence["lost_packets"] == 8
    # named while the loss is fresh (FRESH_POLLS polls), then cleared CLEAR_POLLS later
    assert [x.cleared for x in eng.closed if x.detector == "job-loss"] == [1000.0 + 26]


def test_job_loss_names_nothing_from_a_pool_whose_loss_has_stopped(plan) -> None:  # noqa: ANN001
    """A fault's last loss still pooled, after lane-loss (which named the fault while it
    lasted, so job-loss stepped aside) let it go as stale: not a new suspect."""
    from ops.detectors import Topo, job_loss, lane_loss
    from ops.telemetry import History
    from traffic.iterations import JOB, pair_metric

    hist, topo = History(), Topo.from_plan(plan)
    lossy = {(JOB, pair_metric("s1g1", "s0g0")): 5.0, (JOB, pair_metric("s0g1", "s1g1")): 3.0}
    for i in range(job_loss.HOLD_POLLS):
        hist.add(1000.0 + i, lossy if i == 0 else {})
        got = job_loss.detect(hist, topo)
        assert [f.component for f in got] == (["s1g1"] if i < lane_loss.FRESH_POLLS else []), i
    assert lane_loss.FRESH_POLLS < job_loss.HOLD_POLLS  # so the pool still held it then


def test_job_loss_names_the_leaf_when_no_nic_explains_it(plan) -> None:  # noqa: ANN001
    # s0g0 and s1g0 hang off lf0r0; s0g1 off lf0r1: every lossy flow touches lf0r0
    _, opened = run(plan, 30, _lossy_pairs({20: {("s0g0", "s1g0"): 4.0},
                                            23: {("s1g1", "s0g0"): 1.0,
                                                 ("s1g0", "s0g1"): 2.0}}))
    got = [(i, a.detector, a.component) for i, alerts in opened.items() for a in alerts]
    assert got == [(23, "job-loss-switch", "lf0r0")]


def test_job_loss_says_nothing_of_one_pair_or_of_losses_spread_everywhere(plan) -> None:  # noqa: ANN001
    _, opened = run(plan, 30, _lossy_pairs({20: {("s0g0", "s1g1"): 9.0}}))
    assert opened == {}  # its two ends (and two leaves) cannot be told apart
    _, opened = run(plan, 30, _lossy_pairs({20: {("s0g0", "s1g1"): 3.0,
                                                 ("s1g0", "s0g1"): 3.0}}))
    assert opened == {}  # no NIC, and both leaves, on every lossy flow
