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
from ops.telemetry import History, link_components
from testbed.topologies import build

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
