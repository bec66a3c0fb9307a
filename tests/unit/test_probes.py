"""The probe streams' reports to telemetry, and that telemetry to the faulty lane or NIC.

``ops.probes.ProbeTally`` takes the difference of each stream receiver's cumulative report
(``testbed.shell.probe.report``) from the previous one. The simulation below runs the
steady streams of an ops-eval (``ops.shell.experiment.stream_pairs``, each source port of
``stream_sports`` on the uplink the controller pins it to) at the ops-eval's default rate
on the default fabric, with one faulty link or NIC, and asks the detectors after every
poll.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from ops.detectors import Topo, job_loss, lane_loss
from ops.probes import PROBE, ProbeTally, budget
from ops.shell.experiment import stream_pairs, stream_sports
from ops.telemetry import History, canonical
from testbed.faultkinds import partial_blackhole
from testbed.faultkinds.hot_receiver import HOT_PORT
from testbed.topologies import build
from traffic.iterations import PATH_CORRUPT, PATH_LOST, pair_metric
from vocab.flows import ROCE_PORT
from vocab.lanemark import (
    MARK_BASE,
    PROBE_DPORT,
    PROBE_DPORT_MASK,
    PROBE_SPORTS,
    LaneMarks,
    lane_slots,
    probe_slot,
)
from vocab.plan import link_components

PLAN = build("astral3")
MARKS = LaneMarks(PLAN)
#: datagrams per source port per poll: 4 Mb/s of 1000-byte datagrams per host over 32 ports
PER_POLL = 16


def report(flows: dict[int, tuple[int, int, dict[int, int]]], bad: int | None = 0,
           drops: int = 0) -> dict[str, Any]:
    """A receiver's JSON as ``testbed.shell.probe.report`` writes it (the fields read)."""
    return {"port": 4792, "bad_headers": bad, "socket_drops": drops,
            "flows": {str(sp): {"received": r, "lost": lost,
                                "marks": {str(t): n for t, n in marks.items()}}
                      for sp, (r, lost, marks) in flows.items()}}


def test_only_what_changed_since_the_last_report_counts() -> None:
    tally = ProbeTally(PLAN)
    up = MARK_BASE + 1
    inner = ">".join(MARKS.path("s0g0", "s3g7", up))  # the NIC links too
    first = tally.take([("s0g0", "s3g7", report({50000: (10, 0, {up: 10})}))])
    assert first == {(PROBE, "rxdrops"): 0.0}
    got = tally.take([("s0g0", "s3g7", report({50000: (18, 2, {up: 18})}))])
    assert got == {(PROBE, "rxdrops"): 0.0, (PROBE, pair_metric("s0g0", "s3g7")): 2.0,
                   (PROBE, f"{PATH_LOST}:{inner}"): 2.0}
    # the same report again: nothing new
    assert tally.take([("s0g0", "s3g7", report({50000: (18, 2, {up: 18})}))]) == {
        (PROBE, "rxdrops"): 0.0}


def test_a_receivers_bad_headers_make_its_lost_datagrams_corrupt_up_to_their_count() -> None:
    tally = ProbeTally(PLAN)
    up = MARK_BASE + 2
    inner = ">".join(MARKS.path("s0g0", "s3g7", up))
    tally.take([("s0g0", "s3g7", report({50000: (10, 0, {up: 10})}, bad=7))])
    got = tally.take([("s0g0", "s3g7", report({50000: (15, 4, {up: 15})}, bad=10))])
    assert got[(PROBE, f"{PATH_LOST}:{inner}")] == 4
    assert got[(PROBE, f"{PATH_CORRUPT}:{inner}")] == 3  # 3 new bad headers, 4 lost
    got = tally.take([("s0g0", "s3g7", report({50000: (20, 5, {up: 20})}, bad=19))])
    assert got[(PROBE, f"{PATH_CORRUPT}:{inner}")] == 1  # never more than were lost


def test_a_receiver_that_fell_behind_reports_no_loss_for_that_poll() -> None:
    tally = ProbeTally(PLAN)
    up = MARK_BASE
    tally.take([("s0g0", "s3g7", report({50000: (10, 0, {up: 10})}))])
    got = tally.take([("s0g0", "s3g7", report({50000: (15, 5, {up: 15})}, drops=5))])
    assert got == {(PROBE, "rxdrops"): 1.0}
    # a restarted receiver (fewer arrivals than before) starts over from nothing
    got = tally.take([("s0g0", "s3g7", report({50000: (3, 1, {up: 3})}, drops=5))])
    assert got[(PROBE, pair_metric("s0g0", "s3g7"))] == 1.0


def pinned(host: str, sport: int) -> int:
    """The mark of the uplink the controller pins ``host``'s probe port ``sport`` to."""
    ups = len(MARKS.uplinks[MARKS.switch_of[host]])
    return MARK_BASE + probe_slot(sport, lane_slots(ups)) % ups


def simulate(faulty: str | None, p: float, corrupt: bool, polls: int, seed: int,
             way: str = "both", blackhole: tuple[str, int, int] | None = None,
             until: int | None = None) -> list[list[Any]]:
    """The detectors' findings after each poll of the steady streams; every datagram over
    ``faulty`` (a link name, or a host: its NIC link) is lost, or corrupt (its receiver's
    IP layer counts it), with probability ``p``; ``way`` ``up`` or ``down``: only those
    crossing a lane from its leaf to its spine, or back. ``blackhole``: (a switch, and the
    value and mask of the UDP source ports) whose datagrams through that switch are all
    lost, from the second poll
    on (the receivers count each port's missing rounds as they go). ``until``: the poll
    the fault ends at."""
    rng = random.Random(seed)
    topo = Topo.from_plan(PLAN)
    bad_link = topo.nic_link.get(faulty, faulty) if faulty else None
    streams = [(s, d, {sp: pinned(s, sp) for sp in sports})
               for (s, d), sports in zip(stream_pairs(PLAN), stream_sports(PLAN), strict=True)]
    state = {(s, d, sp): [0, 0, {}] for s, d, lanes in streams for sp in lanes}
    bad_at = {d: 0 for _s, d, _l in streams}
    tally, hist, found = ProbeTally(PLAN), History(), []
    for t in range(polls):
        for s, d, lanes in streams:
            for sp, ttl in lanes.items():
                inner = MARKS.inner_path(s, d, ttl)
                on = (bad_link in MARKS.path(s, d, ttl) if way == "both"
                      else inner[0 if way == "up" else 1] == bad_link)
                on = on and (until is None or t < until)
                hit = sum(rng.random() < p for _ in range(PER_POLL)) if on else 0
                if blackhole and t and sp & blackhole[2] == blackhole[1] and any(
                        blackhole[0] in ln.split("~")[1] for ln in inner):
                    hit = PER_POLL
                st = state[(s, d, sp)]
                st[0] += PER_POLL - hit
                st[1] += hit
                st[2][ttl] = st[2].get(ttl, 0) + PER_POLL - hit
                if corrupt:
                    bad_at[d] += hit
        reports = [(s, d, report({sp: tuple(state[(s, d, sp)]) for sp in lanes},
                                 bad=bad_at[d])) for s, d, lanes in streams]
        hist.add(float(t), tally.take(reports))
        found.append(lane_loss.detect(hist, topo) + job_loss.detect(hist, topo))
    return found


def lanes() -> list[str]:
    return [n for n, ln in link_components(PLAN).items() if ln.kind == "lane"]


@pytest.mark.parametrize("seed", range(5))
def test_streams_name_a_lane_losing_half_a_percent_and_a_clean_fabric_names_nothing(
        seed: int) -> None:
    lane = random.Random(seed).choice(lanes())
    found = simulate(lane, 0.005, False, polls=12, seed=seed)
    named = {(f.detector, f.component) for poll in found for f in poll}
    assert named == {(lane_loss.NAME, lane)}, named
    assert all(not f for f in simulate(None, 0.0, False, polls=12, seed=seed))


@pytest.mark.parametrize("way", ["up", "down"])
@pytest.mark.parametrize("seed", range(3))
def test_streams_name_a_lane_that_loses_one_way_only(seed: int, way: str) -> None:
    """Gray links often lose one way only: that way the lane is crossed by streams of two
    leaves (``stream_pairs``), and it is the one link they share."""
    lane = random.Random(20 + seed).choice(lanes())
    found = simulate(lane, 0.005, False, polls=20, seed=seed, way=way)
    named = {(f.detector, f.component) for poll in found for f in poll}
    assert named == {(lane_loss.NAME, lane)}, named


def test_once_the_loss_stops_nothing_is_named_though_the_pool_still_holds_it() -> None:
    """The detector pools 15 polls; as the loss of a fault that ended ages out of the
    pool, what is left must not point somewhere new: after FRESH_POLLS quiet polls,
    nothing is named at all."""
    lane = random.Random(7).choice(lanes())
    found = simulate(lane, 0.02, False, polls=14, seed=7, until=6)
    assert any(f.component == lane for f in found[5])
    assert all(not f for f in found[6 + lane_loss.FRESH_POLLS:]), found


@pytest.mark.parametrize("seed", range(3))
def test_two_faults_at_once_are_each_named_by_what_the_other_leaves(seed: int) -> None:
    """A switch dropping some source ports and a lossy NIC elsewhere at the same time: no
    one component explains all the loss; the switch explains most, and the NIC (by its
    link: the NIC's own cable) explains the rest."""
    host = random.Random(seed).choice([h.name for h in PLAN.hosts
                                       if MARKS.switch_of[h.name] != "lf0r4"])
    last = simulate(host, 0.05, False, polls=6, seed=seed,
                    blackhole=("spine1", 3, 7))[-1]
    named = {(f.detector, canonical(f.component, PLAN)) for f in last}
    assert named == {(lane_loss.SWITCH, "spine1"), (lane_loss.NIC, host)}, named


@pytest.mark.parametrize("seed", range(3))
def test_streams_name_a_corrupting_lane_by_its_receivers_bad_headers(seed: int) -> None:
    lane = random.Random(50 + seed).choice(lanes())
    last = simulate(lane, 0.005, True, polls=12, seed=seed)[-1]
    # the datagrams were lost to their flows, but corruption explains every one
    assert {(f.detector, f.component) for f in last} == {(lane_loss.CORRUPT, lane)}, last


@pytest.mark.parametrize("seed", range(3))
def test_streams_leave_a_lossy_nic_to_job_loss_which_names_it(seed: int) -> None:
    """A NIC both sends a stream and receives one: two pairs lose, on every lane of its
    leaf alike, and job-loss names the NIC."""
    host = random.Random(seed).choice([h.name for h in PLAN.hosts])
    last = simulate(host, 0.01, False, polls=8, seed=seed)[-1]
    assert [(f.detector, f.component) for f in last] == [(job_loss.NAME, host)], last


def test_the_budget_says_what_the_streams_cost_and_the_least_loss_a_fault_shows() -> None:
    """ops-eval's default: 32 NICs at 4 Mb/s of 1,000-byte datagrams over 64 lanes."""
    got = budget(PLAN, 4.0, 1000, 10.0, {"offered_hop_pps": 22_000, "capacity_hop_pps": 80_000})
    assert got["pps_per_host"] == 500 and got["lane_directions"] == 128
    assert got["pps_per_lane_direction"] == 250  # 32 x 500 x 2 lane directions / 128
    assert got["loss_seen"] == pytest.approx(3 / 2500)
    assert got["share_of_capacity"] == pytest.approx(0.275)
    assert "share_of_capacity" not in budget(PLAN, 4.0, 1000, 10.0)


def test_the_streams_ports_are_clear_of_the_jobs_and_a_hot_receivers() -> None:
    """A hot-receiver fault floods its target on a port of its own, and the job's
    receivers take 4791: a steady stream on either would refuse the fault or lose the
    job's frames (the 1,024 hosts of the largest fabric included)."""
    ports = set(range(PROBE_DPORT, PROBE_DPORT + 64 * 16))
    assert HOT_PORT not in ports and ROCE_PORT not in ports
    assert all(p & PROBE_DPORT_MASK == PROBE_DPORT for p in ports)  # all pinned


def test_each_stream_puts_as_many_ports_on_every_lane_of_its_leaf() -> None:
    """Pinned, not hashed: every stream crosses each uplink of its leaf with a quarter
    of its ports, and each quarter takes every value of the low three bits."""
    for (src, _dst), sports in zip(stream_pairs(PLAN), stream_sports(PLAN), strict=True):
        assert len(set(sports)) == PROBE_SPORTS
        by_lane: dict[int, list[int]] = {}
        for sp in sports:
            by_lane.setdefault(pinned(src, sp), []).append(sp)
        assert sorted(by_lane) == [MARK_BASE + k for k in range(4)]
        assert all(sorted(p & 7 for p in ps) == list(range(8)) for ps in by_lane.values())
        assert sorted(p & 31 for p in sports) == list(range(32))


@pytest.mark.parametrize("share", [1 / 32, 1 / 16, 1 / 8])
@pytest.mark.parametrize("seed", range(4))
def test_a_partial_blackhole_at_a_leaf_drops_its_streams_on_several_of_its_lanes(
        share: float, seed: int) -> None:
    """A slice of the low bits pinned to one lane would make a leaf's blackhole look like
    that lane losing: the streams at a leaf take the slice over different lanes."""
    matches = partial_blackhole.port_matches(share, seed)
    for leaf in MARKS.uplinks:
        lanes_hit = set()
        for (s, d), sports in zip(stream_pairs(PLAN), stream_sports(PLAN), strict=True):
            for sp in sports:
                if partial_blackhole.dropped(sp, matches) and leaf in (
                        MARKS.switch_of[s], MARKS.switch_of[d]):
                    lanes_hit.add(MARKS.inner_path(s, d, pinned(s, sp))[
                        0 if MARKS.switch_of[s] == leaf else 1])
        assert len(lanes_hit) >= 2, (leaf, lanes_hit)
