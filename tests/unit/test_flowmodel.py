"""Flow-level model: progressive filling by hand, exact aggregation, policies against bounds.

Reading guide. The first tests feed ``simulate`` hand-made link/flow sets whose max-min
answer is worked out in the comments (single bottleneck, two levels, parking lot, flows
finishing and handing their share on, start offsets, split flows), then compare it with a
plain one-level-at-a-time implementation on random instances (which also checks the
warm-started events). Then the fabric: one flow's time is bytes / rate; a three-flow job on
a small astral3 matches a hand calculation; the aggregate what-if (merged lanes, merged
groups, the planned theorem, the hash recipe) equals the per-flow model that routes with
``controllers.lb`` flow by flow; policies sit above their bounds; the 64K what-if matches
closed-form numbers; bad input gets one clear message. No test measures time.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from astral_lab.cli import main
from controllers import lb
from controllers.paths import PathFinder
from controllers.policies import POLICIES
from testbed.fabricspec import FabricSpec
from testbed.models import bounds, jobs, maxmin, perflow, solver, whatif
from testbed.models import flowmodel as fm
from testbed.topologies import build
from tests.unit.fabrics import plan_of
from vocab.flows import Flow, sport_for_qp

GB = 10**9


# --- progressive filling by hand --------------------------------------------------------
def sim(cap, rows, bits, start=None, mult=None):
    """``rows[c]`` = [(link, weight), ...] for flow class c."""
    row = [c for c, r in enumerate(rows) for _ in r]
    col = [link for r in rows for link, _ in r]
    w = [x for r in rows for _, x in r]
    return solver.simulate(np.array(cap, float), row, col, w,
                           np.ones(len(rows)) if mult is None else mult, np.array(bits, float),
                           None if start is None else np.array(start, float))


def test_single_bottleneck_shares_equally():
    # three flows on one 30 b/s link: 10 each; 30 bits take 3 s
    tl = sim([30], [[(0, 1)], [(0, 1)], [(0, 1)]], [30, 30, 30])
    assert tl.start_rate.tolist() == [10, 10, 10]
    assert tl.finish.tolist() == [3, 3, 3]
    assert tl.saturated.tolist() == [True]


def test_two_levels():
    # link0 (10) carries a, b; link1 (4) carries b, c. link1 fills first at 2 (b, c frozen);
    # a then takes what b leaves on link0: 10 - 2 = 8
    tl = sim([10, 4], [[(0, 1)], [(0, 1), (1, 1)], [(1, 1)]], [80, 20, 20])
    assert tl.start_rate.tolist() == pytest.approx([8, 2, 2])
    assert tl.finish.tolist() == pytest.approx([10, 10, 10])


@pytest.mark.parametrize("cap1, rates", [(1, [0.5, 0.5, 0.5]), (2, [0.5, 0.5, 1.5])])
def test_parking_lot(cap1, rates):
    # A crosses both links, B only link0 (cap 1), C only link1. Equal caps: all 1/2.
    # link1 at 2: link0 fills first (A, B at 1/2), C takes the rest of link1, 2 - 1/2
    tl = sim([1, cap1], [[(0, 1), (1, 1)], [(0, 1)], [(1, 1)]], [1, 1, 1])
    assert tl.start_rate.tolist() == pytest.approx(rates)


def test_finishing_flow_hands_its_share_on():
    # two flows of 1 and 3 bits on 1 b/s: both 1/2; the short one ends at 2 s with the long
    # one at 2 bits left, which then runs alone at 1 b/s: done at 4 s
    tl = sim([1], [[(0, 1)], [(0, 1)]], [1, 3])
    assert tl.finish.tolist() == pytest.approx([2, 4])
    assert tl.events == 2


def test_start_offsets():
    # A (2 bits) alone for 1 s at 1 b/s (1 bit left), then B (1 bit) joins: 1/2 each, both
    # need 2 more seconds: both end at 3 s
    tl = sim([1], [[(0, 1)], [(0, 1)]], [2, 1], start=[0, 1])
    assert tl.finish.tolist() == pytest.approx([3, 3])
    assert tl.start_rate.tolist() == pytest.approx([1, 0.5])


def test_parking_lot_with_departures():
    # parking lot with caps 1, 1: all at 1/2. B (1 bit) and C (1 bit) end at 2 s; A (3 bits)
    # has 2 left and runs alone at 1 b/s: 4 s
    tl = sim([1, 1], [[(0, 1), (1, 1)], [(0, 1)], [(1, 1)]], [3, 1, 1])
    assert tl.finish.tolist() == pytest.approx([4, 2, 2])


def test_split_flow_weights():
    # A puts half its rate on each of two 1 b/s links, B is on link0 only. link0 fills when
    # x/2 + x = 1: both at 2/3
    tl = sim([1, 1], [[(0, 0.5), (1, 0.5)], [(0, 1)]], [2, 2])
    assert tl.start_rate.tolist() == pytest.approx([2 / 3, 2 / 3])


def test_multiplicity_is_copies():
    # one class of 3 flows equals three separate classes
    a = sim([12, 5], [[(0, 1)], [(0, 1), (1, 1)]], [12, 4], mult=np.array([3.0, 1.0]))
    b = sim([12, 5], [[(0, 1)]] * 3 + [[(0, 1), (1, 1)]], [12, 12, 12, 4])
    assert a.finish.tolist() == pytest.approx(b.finish[[0, 3]].tolist())
    assert a.start_rate.tolist() == pytest.approx(b.start_rate[[0, 3]].tolist())


def plain_filling(cap, rows, active):
    """Plain progressive filling, one link per round: each active row's rate, and what is
    left of every link's capacity."""
    rate, frozen, rem = {}, set(), list(cap)
    while len(frozen) < len(active):
        best = None
        for link in range(len(cap)):
            d = sum(w for c in active if c not in frozen for lk, w in rows[c] if lk == link)
            if d > 0 and (best is None or rem[link] / d < best[0]):
                best = (rem[link] / d, link)
        level, link = best
        for c in active:
            if c not in frozen and any(lk == link for lk, _ in rows[c]):
                frozen.add(c)
                rate[c] = level
                for lk, w in rows[c]:
                    rem[lk] -= w * level
    return rate, rem


def reference(cap, rows, bits, start):
    """Plain progressive filling, one link per round, recomputed from scratch at each event."""

    def rates(active):
        return plain_filling(cap, rows, active)[0]

    left, finish, t = list(bits), [None] * len(bits), 0.0
    while any(f is None for f in finish):
        active = [c for c in range(len(bits)) if finish[c] is None and start[c] <= t + 1e-12]
        if not active:
            t = min(start[c] for c in range(len(bits)) if finish[c] is None)
            continue
        r = rates(active)
        dt = min(left[c] / r[c] for c in active)
        later = [start[c] - t for c in range(len(bits)) if finish[c] is None and start[c] > t]
        dt = min([dt, *later])
        for c in active:
            left[c] -= r[c] * dt
        t += dt
        for c in active:
            if left[c] <= 1e-9 * bits[c]:
                finish[c] = t
    return finish


def random_instance(rng, max_links=8, max_flows=14, weights=(1.0, 1.0, 0.5, 0.25)):
    """A small random job: link capacities, each class's (link, weight) row, sizes, starts."""
    n_links, n = rng.randint(1, max_links), rng.randint(1, max_flows)
    cap = [float(rng.choice([1, 2, 3, 5, 10])) for _ in range(n_links)]
    rows = [[(lk, rng.choice(weights))
             for lk in rng.sample(range(n_links), rng.randint(1, min(n_links, 3)))]
            for _ in range(n)]
    bits = [float(rng.choice([1, 2, 3, 7, 10])) for _ in range(n)]
    start = [float(rng.choice([0, 0, 0, 1, 2.5])) for _ in range(n)]
    return cap, rows, bits, start


def test_matches_plain_reference_on_random_instances():
    rng = random.Random(7)
    for _ in range(150):
        cap, rows, bits, start = random_instance(rng)
        got = sim(cap, rows, bits, start).finish
        assert got.tolist() == pytest.approx(reference(cap, rows, bits, start), rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_many_links_ties_and_regrouping_match_the_reference(seed):
    # more links than the kernel keeps as level candidates, equal capacities (ties across
    # many links at once), staggered starts and sizes (flows move between bottlenecks as
    # others leave, and finished flows are dropped from the per-link lists): every finish
    # time equals a from-scratch filling at every event
    rng = random.Random(300 + seed)
    n_links, n = 3 * maxmin.CANDIDATES // 2, 45
    cap = [float(rng.choice([4, 4, 4, 6])) for _ in range(n_links)]
    rows = [[(lk, 1.0) for lk in rng.sample(range(n_links), rng.randint(1, 3))]
            for _ in range(n)]
    bits = [float(rng.choice([1, 2, 2, 3, 5])) for _ in range(n)]
    start = [float(rng.choice([0, 0, 0, 0, 0.3])) for _ in range(n)]
    got = sim(cap, rows, bits, start)
    assert got.events > 5
    assert got.finish.tolist() == pytest.approx(reference(cap, rows, bits, start), rel=1e-9)


def test_levels_within_the_tie_fill_in_one_round_past_the_candidates():
    # more links than the kernel's level candidates, all at levels within REL_TIE of one
    # another but not equal: one round freezes every flow, as the definition of a round says
    n = 2 * maxmin.CANDIDATES
    cap = [4.0 * (1 + i * 1e-12) for i in range(n)] + [1000.0]  # + one shared, roomy link
    got = sim(cap, [[(i, 1.0), (n, 1.0)] for i in range(n)], [1.0] * n)
    assert (got.events, got.rounds) == (1, 1)
    assert got.finish.tolist() == pytest.approx([0.25] * n, rel=1e-9)


def reference_timeline(cap, rows, bits, start):
    """``reference`` that also returns each flow's first rate and the links full in the first
    allocation: what ``simulate`` reports besides finish times."""
    finish = reference(cap, rows, bits, start)
    live = [c for c in range(len(bits)) if bits[c] > 0]
    t0 = min(start[c] for c in live)
    first = [c for c in live if start[c] <= t0 + 1e-12]
    rate, rem = plain_filling(cap, rows, first)
    saturated = [r <= 1e-9 * c for r, c in zip(rem, cap, strict=True)]
    return finish, rate, saturated


def coupled_groups(rng, groups, copies):
    """A random job made like the fabric's: groups of flows on their own NIC-like links
    (tx per sender, rx per receiver), a shared "uplink" per group that is sometimes
    big enough never to bind and sometimes not, and a few flows between groups over a
    thin shared link; ``copies`` of each group are identical (same sizes and starts)."""
    cap, rows, bits, start = [], [], [], []
    thin = len(cap)
    cap.append(float(rng.choice([1, 2, 3])))
    for _ in range(groups):
        hosts = rng.randint(2, 4)
        nic = [float(rng.choice([2, 4])) for _ in range(hosts)]
        flows = [(rng.randrange(hosts), rng.randrange(hosts), float(rng.choice([1, 2, 3, 5, 8])),
                  float(rng.choice([0, 0, 0, 0.5, 1.5])), rng.random() < 0.5)
                 for _ in range(rng.randint(2, 6))]
        up_cap = rng.choice([sum(nic), sum(nic) * 2, 1.0])  # never binds, or might
        for _ in range(copies):
            tx = list(range(len(cap), len(cap) + hosts))
            cap.extend(nic)
            rx = list(range(len(cap), len(cap) + hosts))
            cap.extend(nic)
            up = len(cap)
            cap.append(up_cap)
            for s, d, b, t, via in flows:
                if s == d:
                    d = (s + 1) % hosts
                rows.append([(tx[s], 1.0), (up, 1.0), (rx[d], 1.0)] if via else
                            [(tx[s], 1.0), (rx[d], 1.0)])
                bits.append(b)
                start.append(t)
    for _ in range(rng.randint(0, 2)):  # couple two groups through the thin link
        a, b = rng.sample(range(len(rows)), 2)
        rows.append([rows[a][0], (thin, 1.0), rows[b][-1]])
        bits.append(float(rng.choice([1, 4])))
        start.append(0.0)
    return cap, rows, bits, start


@pytest.mark.parametrize("relabel", [False, True], ids=["as-given", "relabelled"])
@pytest.mark.parametrize("seed", range(8))
def test_components_pruning_and_copies_match_the_reference(seed, relabel, monkeypatch):
    # the reductions simulate() makes before its events (links that cannot bind dropped,
    # independent components apart, identical components once) change nothing: finish
    # times, first rates and the links full at the start equal a from-scratch filling at
    # every event, with unequal sizes, staggered starts and split weights; nor does
    # renumbering a component's rows by first rate (done for large ones, here for all)
    if relabel:
        monkeypatch.setattr(solver, "RELABEL_ROWS", 1)
    rng = random.Random(100 + seed)
    for _ in range(12):
        cap, rows, bits, start = coupled_groups(rng, rng.randint(1, 3), rng.randint(1, 3))
        if rng.random() < 0.3:  # split a flow's rate over two links
            c = rng.randrange(len(rows))
            cap.append(float(rng.choice([1, 2])))
            rows[c] = rows[c] + [(len(cap) - 1, 0.5)]
        solver._COMPONENT_CACHE.clear()
        got = sim(cap, rows, bits, start)
        finish, rate, saturated = reference_timeline(cap, rows, bits, start)
        assert got.finish.tolist() == pytest.approx(finish, rel=1e-9)
        first = sorted(rate)
        assert got.start_rate[first].tolist() == pytest.approx([rate[c] for c in first],
                                                               rel=1e-9)
        assert got.saturated.tolist() == saturated
        again = sim(cap, rows, bits, start)  # from the cache: same answer, same counts
        assert again.finish.tolist() == got.finish.tolist()
        assert (again.events, again.rounds) == (got.events, got.rounds)


def _records(tl):
    """A trace's (class, time, rate) records, sorted: comparable whatever order they came."""
    row, t, rate = tl.trace
    o = np.lexsort((rate, t, row))
    return [row[o].tolist(), t[o].tolist(), rate[o].tolist()]


def test_relabelled_rows_keep_their_trace(monkeypatch):
    # the rate history behind Timeline.sent_by comes back under the caller's class numbers
    rng = random.Random(7)
    cap, rows, bits, start = coupled_groups(rng, 2, 3)
    solver._COMPONENT_CACHE.clear()
    plain = solver.simulate(np.array(cap, float), *_coo(rows), np.ones(len(rows)),
                            np.array(bits, float), np.array(start, float), trace=True)
    monkeypatch.setattr(solver, "RELABEL_ROWS", 1)
    solver._COMPONENT_CACHE.clear()
    moved = solver.simulate(np.array(cap, float), *_coo(rows), np.ones(len(rows)),
                            np.array(bits, float), np.array(start, float), trace=True)
    assert moved.finish.tolist() == pytest.approx(plain.finish.tolist(), rel=1e-12)
    for got, want in zip(_records(moved), _records(plain), strict=True):
        assert got == pytest.approx(want, rel=1e-12)
    cls = np.arange(len(rows))
    half = np.array(bits, float) / 2
    assert moved.sent_by(cls, half, np.array(start, float)).tolist() == pytest.approx(
        plain.sent_by(cls, half, np.array(start, float)).tolist(), rel=1e-12)


def test_identical_groups_are_simulated_once_and_split_groups_apart():
    # four copies of a group behind one uplink that cannot bind (4 x 2 b/s of NICs into
    # 8 b/s): the uplink is dropped, the copies fall apart and are simulated once
    tx, rx = [0, 1, 2, 3], [4, 5, 6, 7]
    cap = [2.0] * 8 + [8.0]
    rows = [[(tx[g], 1), (8, 1), (rx[g], 1)] for g in range(4)] + \
           [[(tx[g], 1), (rx[g], 1)] for g in range(4)]
    bits = [2, 2, 2, 2, 6, 6, 6, 6]
    solver._COMPONENT_CACHE.clear()
    tl = sim(cap, rows, bits)
    assert solver._never_binding(*_csr(cap, rows)).tolist() == [False] * 8 + [True]
    assert len(solver._COMPONENT_CACHE) == 1
    # each copy: both flows at 1 b/s; the 2-bit one ends at 2 s, the other then runs at
    # 2 b/s and has 4 bits left: 4 s
    assert tl.finish.tolist() == pytest.approx([2] * 4 + [4] * 4)
    assert tl.events == 2
    assert tl.saturated.tolist() == [True] * 8 + [False]
    # a thin uplink binds: it stays, joins the copies, and the answer is still exact
    cap[8] = 1.0
    got = sim(cap, rows, bits)
    assert got.finish.tolist() == pytest.approx(reference(cap, rows, bits, [0] * 8), rel=1e-9)
    assert not solver._never_binding(*_csr(cap, rows))[8]


def test_two_links_that_only_each_other_could_imply_are_both_kept():
    # one flow on two equal links: each link's load is capped by the other's capacity,
    # but dropping both would leave the flow unbounded; anchors (first and last link of a
    # row) are never dropped
    tl = sim([3.0, 3.0], [[(0, 1), (1, 1)]], [6])
    assert tl.finish.tolist() == [2.0]
    assert tl.start_rate.tolist() == [3.0]


def _csr(cap, rows):
    row = np.array([c for c, r in enumerate(rows) for _ in r])
    col = np.array([lk for r in rows for lk, _ in r])
    coef = np.array([float(w) for r in rows for _, w in r])
    rptr = np.concatenate(([0], np.cumsum([len(r) for r in rows])))
    return np.array(cap, float), row, col, coef, rptr


def test_event_tolerance_is_labelled_and_close():
    # many distinct sizes on a parking lot: coalescing finishes within 1e-3 of an event
    # takes fewer events and stays within a fraction of a percent; 0 stays exact
    rng = random.Random(3)
    rows = [[(0, 1)], [(1, 1)], [(0, 1), (1, 1)]] * 40
    bits = [float(rng.randint(100, 10_000)) for _ in rows]
    exact = sim([50, 70], rows, bits)
    approx = solver.simulate(np.array([50.0, 70.0]), *_coo(rows), np.ones(len(rows)),
                             np.array(bits), tolerance=1e-3)
    assert approx.events < exact.events
    assert approx.finish == pytest.approx(exact.finish, rel=5e-3)
    with pytest.raises(ValueError, match="tolerance"):
        solver.simulate(np.array([1.0]), *_coo([[(0, 1)]]), np.ones(1), np.ones(1), tolerance=0.7)
    _, finder = small()
    r = perflow.model_flows(finder, [Flow("s0g0", "s1g0", 1, bytes=GB)], "ecmp", tolerance=1e-3)
    assert r.kind == "approx" and "approximate" in r.note


def _coo(rows):
    return ([c for c, r in enumerate(rows) for _ in r], [lk for r in rows for lk, _ in r],
            [w for r in rows for _, w in r])


def test_simulate_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one link"):
        solver.simulate(np.ones(1), [0], [0], [1.0], np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match=">= 0"):
        sim([1], [[(0, 1)]], [-1])
    with pytest.raises(ValueError, match="> 0"):
        sim([0], [[(0, 1)]], [1])


# --- on a wiring plan ------------------------------------------------------------------------
def small() -> tuple:
    plan = build("astral3", servers=4, gpus=2, servers_per_block=2)
    return plan, PathFinder(plan)


@pytest.mark.parametrize("policy, src, dst, gbps", [
    ("ecmp", "s0g0", "s2g1", 200),  # cross-leaf, pinned to one 200G lane
    ("planned", "s0g0", "s2g1", 200),
    ("ecmp-fluid", "s0g0", "s2g1", 400),  # split over 4 lanes: the 400G NIC limits
    ("ecmp", "s0g0", "s1g0", 400),  # same leaf: NIC to NIC
])
def test_single_flow_takes_bytes_over_rate(policy, src, dst, gbps):
    plan, finder = small()
    r = perflow.model_flows(finder, [Flow(src, dst, 49152, bytes=GB)], policy)
    assert r.completion_s == pytest.approx(GB * 8 / (gbps * 1e9))
    assert r.flow_start_rate_bps.tolist() == pytest.approx([gbps * 1e9])
    emulated = perflow.model_flows(finder, [Flow(src, dst, 49152, bytes=GB)], policy, unit="mbps")
    assert emulated.completion_s == pytest.approx(GB * 8 / (gbps * 1e3 * plan.scale * 1e6))


@pytest.mark.parametrize("policy", POLICIES.names())
def test_small_astral3_matches_hand_calculation(policy):
    # lf0r0 holds s0g0 and s1g0; s2g0 and s3g0 sit under lf1r0. Links are 400G NICs and
    # 200G lanes. A: s0g0->s2g0 1 GB, B: s0g0->s1g0 2 GB (same leaf), C: s3g0->s1g0 1 GB.
    # s0g0's NIC carries A+B, s1g0's downlink B+C, A and C one lane each (200G):
    # everything fills at 200G. A and C end at 8 Gb / 200 Gb/s = 40 ms; B has 8 Gb left,
    # alone at 400G: 20 ms more, 60 ms. That is the NIC bound too: s0g0 sends 3 GB = 24 Gb
    # at 400G = 60 ms, so every policy is ideal here.
    _, finder = small()
    flows = [Flow("s0g0", "s2g0", 1, bytes=GB), Flow("s0g0", "s1g0", 2, bytes=2 * GB),
             Flow("s3g0", "s1g0", 3, bytes=GB)]
    r = perflow.model_flows(finder, flows, policy)
    assert r.flow_finish_s.tolist() == pytest.approx([0.04, 0.06, 0.04])
    assert r.completion_s == pytest.approx(0.06)
    assert r.bound_s == pytest.approx(0.06) and r.ratio == pytest.approx(1.0)
    assert r.events == 2 and r.kind == "exact"


def test_flowspecs_with_starts_and_shared_five_tuples():
    # traffic.kernels FlowSpecs carry start offsets; two specs on one 5-tuple are one flow
    # to the controller (routed once) but keep their own bytes and starts
    from traffic.kernels import FlowSpec

    _, finder = small()
    a = FlowSpec("s0g0", "s2g1", GB, 0, sport_for_qp(0), message_bytes=GB, messages=1)
    b = FlowSpec("s0g0", "s2g1", GB, 0, sport_for_qp(0), start=0.01, message_bytes=GB,
                 messages=1, phase="combine")
    r = perflow.model_flows(finder, [a, b], "ecmp")
    # same lane (200G): a alone for 10 ms (2 Gb done, 6 Gb left), then both at 100G:
    # a ends at 10 + 60 = 70 ms; b then has 8 - 6 = 2 Gb left at 200G: 80 ms
    assert r.flow_finish_s.tolist() == pytest.approx([0.07, 0.08])


def all_to_all(hosts, size=GB):
    pairs = [(s, d) for s in hosts for d in hosts if s != d]
    return [Flow(s, d, sport_for_qp(i), bytes=size, qp=i) for i, (s, d) in enumerate(pairs)]


def permutation(hosts, seed, size=GB):
    dst = list(hosts)
    random.Random(seed).shuffle(dst)
    return [Flow(s, d, sport_for_qp(i), bytes=size)
            for i, (s, d) in enumerate(zip(hosts, dst, strict=True)) if s != d]


@pytest.mark.parametrize("fabric", ["astral3", "astral3-2spines", "astral3-default"])
@pytest.mark.parametrize("kind", ["all-to-all", "permutation"])
def test_ecmp_not_better_than_planned_not_better_than_bound(fabric, kind):
    finder = PathFinder(plan_of(fabric))
    flows = all_to_all(finder.hosts) if kind == "all-to-all" else \
        permutation(finder.hosts, seed=3)
    bnd = bounds.bounds(finder, flows)
    got = {p: perflow.model_flows(finder, flows, p, bound=bnd) for p in POLICIES.names()}
    assert got["ecmp"].completion_s >= got["planned"].completion_s * (1 - 1e-9)
    assert got["planned"].completion_s >= bnd["unsplit"] * (1 - 1e-9)
    assert got["adaptive"].completion_s >= bnd["unsplit"] * (1 - 1e-9)
    assert got["ecmp-fluid"].completion_s >= bnd["splittable"] * (1 - 1e-9)
    assert bnd["unsplit"] >= lb.ideal_max_link_time(finder, flows) * (1 - 1e-12)
    # equal sizes, one start: completion is the routing's max link time (the theorem)
    assign = lb.ecmp_assign(flows, finder)
    assert got["ecmp"].completion_s == pytest.approx(lb.max_link_time(assign, finder))
    assert got["planned"].completion_s == pytest.approx(
        lb.max_link_time(lb.plan_assign(flows, finder), finder))


@pytest.mark.parametrize("fabric", ["astral3-2spines", "fattree-3pods", "rail3", "railonly"])
def test_parallel_link_merging_is_exact(fabric):
    finder = PathFinder(plan_of(fabric))
    rnd = random.Random(5)
    flows = [Flow(*rnd.sample(finder.hosts, 2), sport_for_qp(i),
                  bytes=rnd.choice([GB, 2 * GB, 5 * GB])) for i in range(60)]
    merged = perflow.model_flows(finder, flows, "ecmp-fluid")
    plain = perflow.model_flows(finder, flows, "ecmp-fluid", merge=False)
    assert merged.flow_finish_s.tolist() == pytest.approx(plain.flow_finish_s.tolist(),
                                                          rel=1e-9)
    assert merged.classes == plain.classes


# --- the aggregate what-if against the per-flow model ---------------------------------------
CASES = [  # (fabric params, groups, group size, placement, workload)
    (dict(servers=8, gpus=2, servers_per_block=2), 4, 4, "packed", "alltoall"),
    (dict(servers=8, gpus=2, servers_per_block=2), 4, 4, "spread", "alltoall"),
    (dict(servers=8, gpus=2, servers_per_block=4, spines=2), 2, 8, "spread", "alltoall"),
    (dict(servers=8, gpus=2, servers_per_block=4, spines=2), 2, 8, "packed", "decode"),
    (dict(servers=8, gpus=2, servers_per_block=2), 2, 8, "spread", "prefill"),
]


def per_flow_and_whatif(params, groups, size, placement, workload, policies=None):
    policies = POLICIES.names() if policies is None else policies
    plan = build("astral3", **params)
    finder = PathFinder(plan)
    job = jobs.make_job(params["servers"], params["gpus"], workload=workload, groups=groups,
                        group_size=size, placement=placement, tokens=16, qps=2)
    names = {int(h.loc["server"]) * params["gpus"] + int(h.loc["gpu"]): h.name
             for h in plan.hosts}
    flows = job.flow_list(names)
    results, wbounds = whatif.whatif(whatif.TwoTier.from_spec(FabricSpec(**params)), job, policies)
    return finder, job, flows, {r.policy: r for r in results}, wbounds


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3]}-{c[4]}-{c[2]}")
def test_group_quotient_equals_per_flow(case):
    finder, job, flows, what, wbounds = per_flow_and_whatif(*case)
    bnd = bounds.bounds(finder, flows)
    assert wbounds == pytest.approx(bnd, rel=1e-12)
    fluid = perflow.model_flows(finder, flows, "ecmp-fluid", bound=bnd)
    per_group = fluid.flow_finish_s.reshape(job.groups, -1)
    assert per_group == pytest.approx(np.broadcast_to(what["ecmp-fluid"].flow_finish_s,
                                                      per_group.shape), rel=1e-9)
    assert what["ecmp-fluid"].completion_s == pytest.approx(fluid.completion_s, rel=1e-12)
    ecmp = perflow.model_flows(finder, flows, "ecmp", bound=bnd)
    assert what["ecmp"].max_link_time_s == pytest.approx(ecmp.max_link_time_s, rel=1e-12)
    if job.equal_sizes():
        assert what["ecmp"].kind == "exact"
        assert what["ecmp"].completion_s == pytest.approx(ecmp.completion_s, rel=1e-9)
        planned = perflow.model_flows(finder, flows, "planned", bound=bnd)
        assert what["planned"].completion_s == pytest.approx(planned.completion_s, rel=1e-9)
    else:
        assert what["ecmp"].kind == "lower-bound"
        assert what["ecmp"].completion_s <= ecmp.completion_s * (1 + 1e-12)
        assert what["planned"].kind == "not-computed"
    assert what["adaptive"].kind == "not-computed"


@pytest.mark.parametrize("fabric", ["astral3", "astral3-2spines", "astral3-default"])
def test_ecmp_recipe_is_lb_hash_flow_by_flow(fabric):
    plan = plan_of(fabric)
    finder = PathFinder(plan)
    tt = whatif.TwoTier.from_spec(FabricSpec(**{k: plan.params[k] for k in (
        "servers", "gpus", "servers_per_block", "lanes_per_uplink", "radix", "spines")}))
    flows = [f for f in all_to_all(finder.hosts) if finder.attach(f.src) != finder.attach(f.dst)]
    for seed in (0, 3):
        k_up, k_down = whatif.ecmp_lanes(tt, seed, [finder.attach(f.src) for f in flows],
                                         [f.src for f in flows], [f.dst for f in flows],
                                         [f.sport for f in flows])
        for f, ku, kd in zip(flows, k_up.tolist(), k_down.tolist(), strict=True):
            path = lb.ecmp_path(f, finder, seed)
            assert path[0] == (finder.attach(f.src), tt.servers_per_block + ku + 1)
            leaf = plan.node(finder.attach(f.dst)).loc
            b = leaf["block"] * tt.gpus + leaf["rail"]
            assert path[1] == (f"spine{kd % tt.spines}", b * tt.per_spine + kd // tt.spines + 1)


def test_twotier_counts_match_the_builder():
    for params in (dict(servers=4, gpus=2, servers_per_block=2), {},
                   dict(servers=16, gpus=4, servers_per_block=4, spines=4)):
        spec = FabricSpec(**params)
        plan = build("astral3", **params)
        tt = whatif.TwoTier.from_spec(spec)
        assert (tt.leaves, tt.spines) == (plan.counts["leaves"], plan.counts["spines"])
        assert tt.leaves * tt.up_lanes == plan.counts["links_per_kind"]["lane"]
        assert tt.describe()["lane_links"] == 2 * plan.counts["lanes"]


def test_placement_that_breaks_symmetry_is_refused():
    # 3-server groups in blocks of 2 servers: group 0 owns block 0 and half of block 1,
    # group 1 the other half and block 2: local rank 0 sees different leaves
    tt = whatif.TwoTier.from_spec(FabricSpec(servers=6, gpus=2, servers_per_block=2))
    job = jobs.make_job(6, 2, groups=2, group_size=6)
    with pytest.raises(ValueError, match="per-flow"):
        whatif.whatif(tt, job, ["ecmp-fluid"])


# --- the 64K what-if ---------------------------------------------------------------------
WHATIF_64K = dict(radix=1024, servers_per_block=64)


@pytest.mark.parametrize("placement", ["packed", "spread"])
def test_64k_whatif_against_closed_form(placement):
    doc, res = fm.run("astral3", 65536, groups=256, group_size=256, placement=placement,
                      policies=["ecmp-fluid", "planned", "adaptive"], fabric=WHATIF_64K)
    r = {x.policy: x for x in res}
    assert doc["mode"] == "aggregate" and doc["workload"]["flows"] == 256 * 256 * 255
    assert (doc["fabric"]["leaves"], doc["fabric"]["spines"]) == (1024, 128)
    bits = (1 << 20) * 8
    # every GPU sends 255 flows through its 400G NIC: fluid ECMP reaches exactly that
    assert r["ecmp-fluid"].completion_s == pytest.approx(255 * bits / 400e9, rel=1e-9)
    if placement == "packed":
        # a group fills half a block: same-rail peers stay under the leaf, so a leaf sends
        # 64 x 224 = 14,336 flows up 128 lanes: 112 per lane, below the NIC limit
        assert r["planned"].completion_s == pytest.approx(255 * bits / 400e9, rel=1e-9)
    else:
        # every peer is under another leaf: 64 x 255 = 16,320 flows on 128 lanes: ceil = 128
        # flows on half the lanes, 128 x 1 MiB / 200G, a hair above the NIC time
        assert r["planned"].completion_s == pytest.approx(128 * bits / 200e9, rel=1e-9)
    assert r["planned"].completion_s == pytest.approx(doc["bounds_s"]["unsplit"], rel=1e-9)
    assert r["adaptive"].completion_s is None and "per-flow" in r["adaptive"].note
    json.dumps(doc)  # the model.json document is plain JSON


def test_64k_at_radix_256_says_what_to_do():
    with pytest.raises(ValueError, match="--radix 1024 --servers-per-block 64"):
        fm.run("astral3", 65536, policies=["ecmp-fluid"])


# --- CLI and bad input ----------------------------------------------------------------------
def test_cli_writes_model_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path))
    assert main(["model", "astral3", "--gpus", "32", "--group-size", "16",
                 "--placement", "spread", "--lb", "ecmp,planned"]) == 0
    out = capsys.readouterr().out
    assert "planned" in out and "lower bounds" in out
    (folder,) = list(tmp_path.iterdir())
    assert folder.name.endswith("-model") and not folder.name.endswith(".partial")
    doc = json.loads((folder / "model.json").read_text())
    assert doc["schema"] == "astral-lab/model" and doc["mode"] == "per-flow"
    assert [r["policy"] for r in doc["results"]] == ["ecmp", "planned"]
    assert doc["workload"]["flows"] == 2 * 16 * 15


def test_policies_in_worker_processes_match_one_process():
    """Forked policy workers return exactly what modelling the policies in turn returns."""
    kw = dict(workload="decode", group_size=16, placement="spread", policies=POLICIES.names())
    _, alone = fm.run("astral3", 32, jobs=1, **kw)
    _, forked = fm.run("astral3", 32, jobs=2, **kw)
    assert [r.policy for r in forked] == list(POLICIES.names())
    for a, b in zip(alone, forked, strict=True):
        assert a.events > 1 and a.events == b.events and a.classes == b.classes
        assert np.array_equal(a.flow_finish_s, b.flow_finish_s)
        assert a.flow_completion == b.flow_completion and a.completion_s == b.completion_s


def test_auto_jobs_is_bounded_by_cpus_policies_and_memory(monkeypatch):
    # this machine's free memory is not the test's: a small VM would hold fewer workers
    monkeypatch.setattr(perflow, "_mem_available", lambda: 64 << 30)
    monkeypatch.setattr(perflow.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    assert perflow.auto_jobs(1000, 4) == 4
    assert perflow.auto_jobs(1000, 1) == 1
    monkeypatch.setattr(perflow.os, "sched_getaffinity", lambda pid: {0})
    assert perflow.auto_jobs(1000, 4) == 1
    monkeypatch.setattr(perflow.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert perflow.auto_jobs(10**12, 4) == 1  # no machine holds four workers of that size
    monkeypatch.setattr(perflow, "_mem_available", lambda: 1 << 30)
    assert perflow.auto_jobs(1000, 4) == 3  # 1 GiB holds three workers of 300 MiB and their flows
    monkeypatch.setattr(perflow, "_mem_available", lambda: None)
    assert perflow.auto_jobs(1000, 4) == 4  # memory unknown: bounded by CPUs and policies only


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "32", "--jobs", "-1"], "argument --jobs: must be a whole number in 0..1024"),
    (["--gpus", "30"], "--gpus 30 does not split evenly over servers of 8 GPUs"),
    (["--gpus", "32", "--lb", "ecmp,fastest"], "unknown policy 'fastest'"),
    (["--gpus", "1024"], "--servers-per-block 0 fills each leaf"),
    (["--gpus", "32", "--group-size", "12"], "group size 12 must be a multiple of 8"),
    (["--gpus", "32", "--groups", "3", "--group-size", "16"], "do not fit"),
    (["--gpus", "32", "--mode", "aggregate", "--unit", "mbps"], "--unit gbps"),
    (["--gpus", "32", "--event-tolerance", "2"],
     "argument --event-tolerance: must be a finite number in [0, 0.5)"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path))
    try:
        status = main(["model", "astral3", *argv])
    except SystemExit as exc:  # refused as the option was parsed
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("astral-lab model: ") and message in err and "\n" not in err
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    (dict(topology="mesh"), "unknown topology 'mesh'"),
    (dict(workload="training"), "unknown workload 'training'"),
    (dict(placement="random"), "unknown placement 'random'"),
    (dict(mode="fast"), "unknown mode 'fast'"),
    (dict(policies=[]), "no policy"),
    (dict(topology="fattree", gpus=1024, exact_flows=10), "two-tier designs"),
    (dict(group_size=4096, gpus=4096, fabric=dict(radix=1024)), "smaller groups"),
    (dict(fabric=dict(colour=1)), "unknown fabric parameter"),
])
def test_bad_input_messages(kwargs, message):
    args = {"topology": "astral3", "gpus": 32, **kwargs}
    with pytest.raises(ValueError, match=message):
        fm.run(args.pop("topology"), args.pop("gpus"), **args)


def test_model_flows_bad_input():
    _, finder = small()
    with pytest.raises(ValueError, match="unknown policy"):
        perflow.model_flows(finder, [Flow("s0g0", "s1g0", 1, bytes=1)], "random")
    with pytest.raises(ValueError, match="no host 'nope'"):
        perflow.model_flows(finder, [Flow("s0g0", "nope", 1, bytes=1)])
    with pytest.raises(ValueError, match="no flows"):
        perflow.model_flows(finder, [])
    with pytest.raises(ValueError, match="needs src, dst, sport and bytes"):
        perflow.model_flows(finder, [object()])
