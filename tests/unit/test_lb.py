"""Paths and load-balancing policies, checked against the wiring plan and hand-made bounds.

Reading guide. ``PathFinder`` lists every minimal path a flow may take; the first
tests compare that list with a brute-force walk over the plan's cables, so the
path code is checked against the plan, not against itself. Then each policy:
ECMP must pick a candidate and spread source ports over the spines; planned must
reach the lower bound on Astral's two-tier fabric and never lose to ECMP
elsewhere; adaptive must split colliding elephants in one step, and then leave
them alone (hysteresis, hold). Failed links close the file.

All numbers here are deterministic (seeded shuffles, a stable hash), so a test
that passes once passes always, and no test measures time.
"""

from __future__ import annotations

import random
from collections import defaultdict
from functools import cache

import pytest

from controllers import lb, lbscore
from controllers.paths import Path, PathFinder
from controllers.routing import attach_points, shortest_switch_hops
from tests.unit.fabrics import FABRICS, plan_of
from vocab.flows import Flow, sport_for_qp
from vocab.plan import WiringPlan

GB = 10**9

ASTRAL = ["astral3", "astral3-2spines", "astral3-default"]
OTHERS = [n for n in FABRICS if n not in ASTRAL]


@cache
def finder_of(name: str) -> PathFinder:
    return PathFinder(plan_of(name))


def pairs(finder: PathFinder) -> list[tuple[str, str]]:
    return [(s, d) for s in finder.hosts for d in finder.hosts if s != d]


# --- workloads ------------------------------------------------------------------------------
def all_to_all(hosts: list[str], size: int = GB) -> list[Flow]:
    pairs_ = [(s, d) for s in hosts for d in hosts if s != d]
    return [Flow(s, d, sport_for_qp(i), bytes=size, qp=i) for i, (s, d) in enumerate(pairs_)]


def permutation(hosts: list[str], seed: int, qps: int = 1, size: int = GB) -> list[Flow]:
    """Every host sends ``qps`` flows to one random other host (a seeded shuffle)."""
    dst = list(hosts)
    random.Random(seed).shuffle(dst)
    flows: list[Flow] = []
    for s, d in zip(hosts, dst, strict=True):
        for _ in range(qps if s != d else 0):
            flows.append(Flow(s, d, sport_for_qp(len(flows)), bytes=size))
    return flows


def random_flows(hosts: list[str], seed: int, n: int, sizes: tuple[int, ...]) -> list[Flow]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        s, d = rnd.sample(hosts, 2)
        out.append(Flow(s, d, sport_for_qp(i), bytes=rnd.choice(sizes)))
    return out


# --- paths ------------------------------------------------------------------------------------
def brute_force_paths(plan: WiringPlan, src: str, dst: str) -> set[Path]:
    """Every cable walk from src's switch to dst of minimal length, found the slow way.

    Independent of ``next_hops``: it only reads the plan's links, and applies the one
    routing rule (no transit through another server's NVLink switch) itself.
    """
    attach = attach_points(plan)
    ports = plan.ports()
    switches = {s.name for s in plan.switches}
    nvs = {s.name for s in plan.switches if s.tier == "nvswitch"}
    (a, _), (b, b_port) = attach[src], attach[dst]
    want = shortest_switch_hops(plan, src, dst)
    found: set[Path] = set()

    def walk(sw: str, hops: tuple[tuple[str, int], ...], seen: set[str]) -> None:
        if sw == b:
            if len(hops) + 1 == want:
                found.add(hops + ((b, b_port),))
            return
        if len(hops) + 1 >= want:
            return
        for port, (peer, _pp, _link) in sorted(ports[sw].items()):
            if peer in switches and peer not in seen and (peer not in nvs or peer == b):
                walk(peer, hops + ((sw, port),), seen | {peer})

    walk(a, (), {a})
    return found


@pytest.mark.parametrize("name", FABRICS)
def test_candidates_are_every_minimal_loop_free_path_over_real_links(name: str) -> None:
    plan, finder = plan_of(name), finder_of(name)
    ports = plan.ports()
    attach = attach_points(plan)
    for src, dst in pairs(finder):
        paths = finder.paths(src, dst)
        assert paths == sorted(set(paths)), (src, dst)  # sorted, no duplicates
        assert set(paths) == brute_force_paths(plan, src, dst), (src, dst)
        want = shortest_switch_hops(plan, src, dst)
        for path in paths:
            assert len(path) == want
            nodes = finder.nodes(path)
            assert len(set(nodes)) == len(nodes), path  # loop-free
            assert path[0][0] == attach[src][0] and nodes[-1] == dst
            for (sw, port), nxt in zip(path, nodes[1:], strict=True):
                assert port in ports[sw] and ports[sw][port][0] == nxt, (path, sw, port)


@pytest.mark.parametrize("name", ["astral3", "astral3-2spines", "astral3-1block",
                                  "astral3-default"])
def test_astral3_has_one_path_per_lane_up_times_lane_down(name: str) -> None:
    plan, finder = plan_of(name), finder_of(name)
    lanes: dict[tuple[str, str], int] = {}
    for link in plan.links:
        if link.kind == "lane":
            lanes[(link.a, link.b)] = lanes.get((link.a, link.b), 0) + 1
    spines = sorted({s for _, s in lanes})
    attach = attach_points(plan)
    for src, dst in pairs(finder):
        a, b = attach[src][0], attach[dst][0]
        want = 1 if a == b else sum(lanes[(a, s)] * lanes[(b, s)] for s in spines)
        assert len(finder.paths(src, dst)) == want, (src, dst)
    if name == "astral3-2spines":  # 2 spines x 2 lanes up x 2 lanes down
        assert len(finder.paths("s0g0", "s2g0")) == 8


def test_hosts_under_one_switch_have_a_one_hop_path() -> None:
    finder = finder_of("astral3-default")
    assert finder.paths("s0g3", "s1g3") == [(("lf0r3", 2),)]  # server 1 of block 0: port 2
    assert finder.nodes(finder.paths("s0g3", "s1g3")[0]) == ["lf0r3", "s1g3"]


def test_railonly_paths_never_cross_a_third_servers_nvswitch() -> None:
    finder = finder_of("railonly")
    for src, dst in pairs(finder):
        ends = {finder.attach(src), finder.attach(dst)}
        for path in finder.paths(src, dst):
            relays = [n for n in finder.nodes(path) if n.startswith("nvs")]
            assert set(relays) <= ends, path


@pytest.mark.parametrize("name", FABRICS)
def test_capacity_lists_every_switch_egress_in_both_units(name: str) -> None:
    plan, finder = plan_of(name), finder_of(name)
    switches = {s.name for s in plan.switches}
    want = {}
    for link in plan.links:
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            if node in switches:
                want[(node, port)] = (link.gbps, link.mbps)
    gbps, mbps = finder.capacity("gbps"), finder.capacity("mbps")
    assert gbps == {hop: g for hop, (g, _m) in want.items()}
    assert mbps == {hop: m for hop, (_g, m) in want.items()}
    with pytest.raises(ValueError, match="unit"):
        finder.capacity("kbps")


def test_bad_host_names_and_self_flows_are_value_errors() -> None:
    finder = finder_of("astral3")
    with pytest.raises(ValueError, match="nosuch"):
        finder.paths("nosuch", "s0g0")
    with pytest.raises(ValueError, match="s0g0"):
        finder.paths("s0g0", "s0g0")


# --- bounds and loads ---------------------------------------------------------------------
def test_link_loads_sum_bytes_or_given_rates() -> None:
    f1, f2 = Flow("a", "b", 1, bytes=5), Flow("a", "c", 2, bytes=7)
    assign = {f1: (("x", 1), ("y", 2)), f2: (("x", 1), ("z", 3))}
    assert lb.link_loads(assign) == {("x", 1): 12, ("y", 2): 5, ("z", 3): 7}
    assert lb.link_loads(assign, {f1: 0.5}) == {("x", 1): 0.5, ("y", 2): 0.5, ("z", 3): 0.0}
    # 1 GB over 400 Gb/s takes 20 ms; over a 40 Mb/s emulated link, 200 s.
    assert lb.link_times({("x", 1): GB}, {("x", 1): 400.0}) == {("x", 1): pytest.approx(0.02)}
    assert lb.link_times({("x", 1): GB}, {("x", 1): 40.0}, "mbps")[("x", 1)] == pytest.approx(200)


def test_bounds_by_hand_in_seconds_at_line_rate() -> None:
    """Small astral3: 400G NICs, one 200G lane from each leaf to each of 4 spines.

    s0g0 and s1g0 (leaf lf0r0) each send three 1 GB flows to s2g0 / s3g0 (leaf lf1r0).
    A NIC carries 3 GB: 3 * 8e9 / 400e9 = 0.06 s. Leaf lf0r0 sends 6 unsplit flows over
    4 lanes, so some lane carries 2 GB: 2 * 8e9 / 200e9 = 0.08 s. That binds.
    """
    finder = finder_of("astral3")
    flows = [Flow(s, d, 50000 + i, bytes=GB)
             for s, d in (("s0g0", "s2g0"), ("s1g0", "s3g0")) for i in range(3)]
    bounds = lb.lower_bounds(finder, flows)
    assert bounds == pytest.approx({"host_tx": 0.06, "host_rx": 0.06,
                                    "fabric_out": 0.08, "fabric_in": 0.08})
    assert lb.ideal_max_link_time(finder, flows) == pytest.approx(0.08)
    assert lb.ideal_max_link_time(plan_of("astral3"), flows, "mbps") == pytest.approx(800.0)
    planned = lb.plan_assign(flows, finder)
    assert lb.max_link_time(planned, finder) == pytest.approx(0.08)


def test_max_link_time_counts_the_senders_nic() -> None:
    """Three 1 GB flows out of s0g0: its NIC needs 0.06 s; the lanes 0.04 s each at most."""
    finder = finder_of("astral3")
    flows = [Flow("s0g0", d, 50000 + i, bytes=GB) for i, d in enumerate(["s1g0", "s2g0",
                                                                         "s3g1"])]
    planned = lb.plan_assign(flows, finder)
    assert lb.max_link_time(planned, finder) == pytest.approx(0.06)
    assert lb.max_link_time(planned, finder, fabric_only=True) == pytest.approx(0.04)
    assert lb.lower_bounds(finder, flows)["host_tx"] == pytest.approx(0.06)


# --- ECMP -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FABRICS)
def test_ecmp_path_is_always_a_candidate(name: str) -> None:
    finder = finder_of(name)
    for i, (src, dst) in enumerate(pairs(finder)):
        cands = set(finder.paths(src, dst))
        for sport in (49152 + i, 60000 + i):
            for seed in (0, 1):
                flow = Flow(src, dst, sport)
                path = lb.ecmp_path(flow, finder, seed)
                assert path in cands, (flow, path)
                assert path == lb.ecmp_path(flow, finder, seed)  # stable


@pytest.mark.parametrize("name", ["astral3", "astral3-2spines", "astral3-default"])
def test_ecmp_spreads_source_ports_over_every_spine_and_lane(name: str) -> None:
    finder = finder_of(name)
    src, dst = "s0g0", "s2g0"  # block 0 -> block 1 on rail 0: leaf-spine-leaf
    flows = [Flow(src, dst, sport_for_qp(q)) for q in range(256)]
    paths = lb.ecmp_assign(flows, finder)
    per_spine: dict[str, int] = {}
    for path in paths.values():
        spine = path[1][0]
        per_spine[spine] = per_spine.get(spine, 0) + 1
    spines = {s.name for s in plan_of(name).switches if s.tier == "spine"}
    assert set(per_spine) == spines
    assert min(per_spine.values()) >= 256 // len(spines) // 2  # roughly even, not all on one
    # Independent hashing per switch: every up-lane x down-lane combination occurs.
    assert set(paths.values()) == set(finder.paths(src, dst))


def test_ecmp_seeds_change_the_luck_not_the_candidates() -> None:
    finder = finder_of("astral3-default")
    flows = all_to_all(finder.hosts)[:200]
    a, b = lb.ecmp_assign(flows, finder, seed=0), lb.ecmp_assign(flows, finder, seed=1)
    assert a != b
    assert all(b[f] in finder.paths(f.src, f.dst) for f in flows)


# --- planned --------------------------------------------------------------------------------
def check_assignment(assign: dict[Flow, Path], flows: list[Flow], finder: PathFinder) -> None:
    assert set(assign) == set(flows)
    for f, path in assign.items():
        assert path in finder.paths(f.src, f.dst), (f, path)
        if finder.attach(f.src) == finder.attach(f.dst):
            assert len(path) == 1  # same rail, same block: stays under its leaf


@pytest.mark.parametrize("name", ASTRAL)
@pytest.mark.parametrize("workload", ["permutation", "permutation-8qp", "all-to-all",
                                      "random-equal"])
def test_planned_reaches_the_ideal_on_astral3(name: str, workload: str) -> None:
    finder = finder_of(name)
    hosts = finder.hosts
    flows = {
        "permutation": lambda: permutation(hosts, seed=7),
        "permutation-8qp": lambda: permutation(hosts, seed=11, qps=8),
        "all-to-all": lambda: all_to_all(hosts),
        "random-equal": lambda: random_flows(hosts, seed=3, n=6 * len(hosts), sizes=(GB,)),
    }[workload]()
    planned = lb.plan_assign(flows, finder)
    check_assignment(planned, flows, finder)
    for fabric_only in (False, True):
        ideal = lb.ideal_max_link_time(finder, flows, fabric_only=fabric_only)
        got = lb.max_link_time(planned, finder, fabric_only=fabric_only)
        assert got == pytest.approx(ideal, rel=1e-9), (fabric_only, got / ideal)


def test_planned_spreads_a_leafs_flows_over_spines_and_lanes() -> None:
    """8 equal flows from one leaf to another over 2 spines x 2 lanes: 2 per lane, not 8."""
    finder = finder_of("astral3-2spines")
    flows = [Flow(s, d, 50000 + i, bytes=GB) for i in range(4)
             for s, d in (("s0g0", "s2g0"), ("s1g0", "s3g0"))]
    loads = lb.link_loads(lb.plan_assign(flows, finder))
    lanes = {h: v for h, v in loads.items() if finder.is_fabric(h)}
    assert len(lanes) == 8 and set(lanes.values()) == {2 * GB}  # 4 up lanes + 4 down lanes


def test_the_ideal_is_below_ecmp_which_collides() -> None:
    finder = finder_of("astral3-default")
    flows = all_to_all(finder.hosts)
    ecmp = lb.max_link_time(lb.ecmp_assign(flows, finder), finder, fabric_only=True)
    assert ecmp > lb.ideal_max_link_time(finder, flows, fabric_only=True)


@pytest.mark.parametrize("name", OTHERS + ["astral3-default"])
@pytest.mark.parametrize("workload", ["permutation", "all-to-all-skewed", "random-mixed"])
def test_planned_never_loses_to_ecmp(name: str, workload: str) -> None:
    finder = finder_of(name)
    hosts = finder.hosts
    rnd = random.Random(5)
    flows = {
        "permutation": lambda: permutation(hosts, seed=2, qps=2),
        "all-to-all-skewed": lambda: [Flow(f.src, f.dst, f.sport, bytes=rnd.randint(1, 16) * GB)
                                      for f in all_to_all(hosts)],
        "random-mixed": lambda: random_flows(hosts, seed=9, n=5 * len(hosts),
                                             sizes=(GB, 2 * GB, 8 * GB)),
    }[workload]()
    planned = lb.plan_assign(flows, finder)
    check_assignment(planned, flows, finder)
    for fabric_only in (False, True):
        got = lb.max_link_time(planned, finder, fabric_only=fabric_only)
        assert got >= lb.ideal_max_link_time(finder, flows, fabric_only=fabric_only) * (1 - 1e-9)
        for seed in range(4):
            ecmp = lb.ecmp_assign(flows, finder, seed)
            assert got <= lb.max_link_time(ecmp, finder, fabric_only=fabric_only) * (1 + 1e-9)


def test_planned_revisits_early_choices_that_later_flows_regret() -> None:
    """k=4 fat-tree, five flows; greedy alone ends at 10 GB on a link, the ideal is 5 GB.

    Largest first, s1g0 -> s0g1 (inside pod 0) takes aggregation switch 0 on a tie;
    then s1g0 -> s3g1 finds both of its way up from edge 0x1 already carrying 5 GB and
    must double one. Only moving the earlier intra-pod flow to the other aggregation
    switch (the local-improvement step) brings every link back to one flow.
    """
    finder = finder_of("fattree")
    flows = [Flow(s, d, 50000 + i, bytes=size * GB) for i, (s, d, size) in enumerate([
        ("s0g0", "s2g1", 5), ("s2g1", "s1g1", 1), ("s1g0", "s0g1", 5), ("s1g0", "s3g1", 5),
        ("s0g0", "s3g1", 5)])]
    planned = lb.plan_assign(flows, finder)
    check_assignment(planned, flows, finder)
    assert lb.max_link_time(planned, finder, fabric_only=True) == pytest.approx(0.1)  # 5 GB/400G
    assert lb.ideal_max_link_time(finder, flows, fabric_only=True) == pytest.approx(0.1)


def test_planned_is_deterministic_and_ignores_input_order() -> None:
    finder = finder_of("rail3")
    flows = random_flows(finder.hosts, seed=4, n=40, sizes=(GB, 3 * GB))
    shuffled = list(flows)
    random.Random(0).shuffle(shuffled)
    assert lb.plan_assign(flows, finder) == lb.plan_assign(shuffled, finder)
    equal = all_to_all(finder_of("astral3").hosts)
    assert lb.plan_assign(equal, finder_of("astral3")) == lb.plan_assign(
        list(reversed(equal)), finder_of("astral3"))


def test_planned_steers_around_a_degraded_lane() -> None:
    """Three flows leaf to leaf, four lanes; one lane is given 1% capacity: none uses it."""
    finder = finder_of("astral3")
    cap = finder.capacity()
    slow = ("lf0r0", 3)
    cap[slow] = 2.0
    flows = [Flow("s0g0", "s2g0", 50000 + i, bytes=GB) for i in range(3)]
    planned = lb.plan_assign(flows, finder, capacity=cap)
    check_assignment(planned, flows, finder)
    assert all(slow not in path for path in planned.values())
    assert len({path[0] for path in planned.values()}) == 3


def test_edge_colour_is_proper_with_max_degree_colours() -> None:
    rnd = random.Random(1)
    for trial in range(30):
        n_left, n_right = rnd.randint(1, 9), rnd.randint(1, 9)
        edges = [(rnd.randrange(n_left), rnd.randrange(n_right))
                 for _ in range(rnd.randint(1, 120))]
        colours = lb.edge_colour(edges, n_left, n_right)
        degree = max(max(sum(1 for u, _ in edges if u == x) for x in range(n_left)),
                     max(sum(1 for _, v in edges if v == y) for y in range(n_right)))
        assert set(colours) <= set(range(degree)), trial
        seen = set()
        for (u, v), c in zip(edges, colours, strict=True):
            assert ("L", u, c) not in seen and ("R", v, c) not in seen, (trial, u, v, c)
            seen |= {("L", u, c), ("R", v, c)}
    assert lb.edge_colour([], 0, 0) == []


# --- adaptive -------------------------------------------------------------------------------
def colliding(finder: PathFinder, src: str, dst: str, n: int = 2) -> list[Flow]:
    """``n`` flows whose ECMP hashes put them on the same first uplink."""
    first: dict[tuple[str, int], list[Flow]] = {}
    for q in range(256):
        f = Flow(src, dst, sport_for_qp(q))
        same = first.setdefault(lb.ecmp_path(f, finder)[0], [])
        same.append(f)
        if len(same) == n:
            return same
    raise AssertionError(f"no {n} colliding flows in 256")


def setup_collision(*rates: float) -> tuple[PathFinder, dict[Flow, Path], dict[Flow, float]]:
    """Flows s0g0 -> s2g0 that ECMP put on one lane, one per rate (Mb/s)."""
    finder = finder_of("astral3")  # 20 Mb/s lanes (emulated), 40 Mb/s NICs
    flows = colliding(finder, "s0g0", "s2g0", len(rates))
    assign = lb.ecmp_assign(flows, finder)
    return finder, assign, dict(zip(flows, rates, strict=True))


def test_adaptive_splits_two_elephants_sharing_an_uplink_in_one_step() -> None:
    finder, assign, rates = setup_collision(12.0, 12.0)  # 24 of 20 Mb/s on one lane
    cap = finder.capacity("mbps")
    policy = lb.AdaptivePolicy()
    moves = policy.step(assign, rates, lb.link_loads(assign, rates), cap, finder, tick=0)
    assert len(moves) == 1
    (moved, path), = moves.items()
    assert path in finder.paths(moved.src, moved.dst) and path[0] != assign[moved][0]
    after = {**assign, **moves}
    utils = {h: r / cap[h] for h, r in lb.link_loads(after, rates).items()}
    assert max(utils.values()) == pytest.approx(0.6)
    # Stable: with rates that reflect the new placement there is nothing to do, even
    # long after the hold has expired (no flapping).
    for tick in (1, 10):
        assert policy.step(after, rates, lb.link_loads(after, rates), cap, finder, tick) == {}


def test_adaptive_does_nothing_below_the_threshold() -> None:
    finder, assign, rates = setup_collision(7.0, 8.0)  # 15 of 20 Mb/s: 0.75 < 0.8
    cap = finder.capacity("mbps")
    moves = lb.AdaptivePolicy().step(assign, rates, lb.link_loads(assign, rates), cap, finder, 0)
    assert moves == {}


def test_adaptive_moves_the_largest_flow_first_and_only_as_many_as_needed() -> None:
    finder, assign, rates = setup_collision(4.0, 9.0, 5.0)  # 18 of 20 Mb/s: 0.9
    big = max(rates, key=rates.__getitem__)
    cap = finder.capacity("mbps")
    moves = lb.AdaptivePolicy().step(assign, rates, lb.link_loads(assign, rates), cap, finder, 0)
    # Once the 9 Mb/s flow leaves, the lane is at 0.45: no longer hot, so the others stay
    # even though an empty lane would suit them too (moves cost a reroute; they buy nothing).
    assert list(moves) == [big]


def test_adaptive_hold_keeps_a_moved_flow_in_place_until_it_expires() -> None:
    finder, assign, rates = setup_collision(12.0, 12.0)
    cap = finder.capacity("mbps")
    policy = lb.AdaptivePolicy(hold=3)
    moves = policy.step(assign, rates, lb.link_loads(assign, rates), cap, finder, tick=0)
    (moved, path), = moves.items()
    after = {**assign, **moves}
    # Next interval, something else makes the moved flow's new lane hot; elsewhere is cool.
    link_rates = lb.link_loads(after, rates)
    link_rates[path[0]] += 10.0  # 22 of 20 Mb/s
    for tick in (1, 2):
        assert policy.step(after, rates, link_rates, cap, finder, tick) == {}
    again = policy.step(after, rates, link_rates, cap, finder, tick=3)
    assert list(again) == [moved] and again[moved][0] != path[0]


def test_adaptive_hysteresis_refuses_marginal_moves() -> None:
    """Its lane at 0.85, every other lane at 0.78: moving a 0.05 flow only reaches 0.83."""
    finder = finder_of("astral3")
    cap = finder.capacity("mbps")
    flow = Flow("s0g0", "s2g0", 50000)
    assign = {flow: lb.ecmp_path(flow, finder)}
    rates = {flow: 0.05 * 20}
    link_rates = {h: 0.78 * c for h, c in cap.items() if finder.is_fabric(h)}
    for hop in assign[flow][:-1]:
        link_rates[hop] = 0.85 * cap[hop]
    assert lb.AdaptivePolicy().step(assign, rates, link_rates, cap, finder, 0) == {}
    eager = lb.AdaptivePolicy(hysteresis=0.0)
    moves = eager.step(assign, rates, link_rates, cap, finder, 0)
    assert list(moves) == [flow]


@pytest.mark.parametrize("name", FABRICS)
def test_choices_per_attach_pair_equal_the_intersection_of_candidates(name: str) -> None:
    # choices() works the fixed hops out once per attach pair; the definition is the
    # intersection of every candidate of the host pair, and the rest of each candidate
    finder = PathFinder(plan_of(name))
    for s, d in pairs(finder):
        cands = finder.candidates(s, d)
        fixed = frozenset(cands[0]).intersection(*cands[1:])
        assert finder.choices(s, d) == (
            fixed, tuple(tuple(h for h in p if h not in fixed) for p in cands))


@pytest.mark.parametrize("name", FABRICS)
@pytest.mark.parametrize("seed", [0, 1])
def test_planned_greedy_is_the_same_with_array_scoring(name: str, seed: int,
                                                       monkeypatch) -> None:
    # unequal sizes send every fabric to the greedy planner; score every pair's
    # candidates in NumPy (MIN 1) and in Python (MIN huge): the same plan
    finder = finder_of(name)
    flows = random_flows(finder.hosts, seed, 400, (1, 2, 3, 5, 8, 13))
    monkeypatch.setattr(lbscore.ManyCandidates, "MIN", 10**9)
    python = lb.plan_assign(flows, finder)
    monkeypatch.setattr(lbscore.ManyCandidates, "MIN", 1)
    assert lb.plan_assign(flows, finder) == python


def scalar_step(policy: lb.AdaptivePolicy, assign, flow_rates, link_rates, capacity,
                finder: PathFinder, tick: int) -> dict[Flow, Path]:
    """``AdaptivePolicy.step`` one flow and one candidate at a time, as first written: the
    reference for the block-vectorised scoring."""
    thr, hyst = policy.threshold, policy.hysteresis
    work = defaultdict(float, link_rates)

    def util(hop):
        return work[hop] / capacity[hop]

    hot = {h for h in work if h in capacity and util(h) > thr}
    if not hot:
        return {}
    todo = []
    for f, path in assign.items():
        rate = flow_rates.get(f, 0.0)
        if rate <= 0 or policy.held(f, tick):
            continue
        fixed = finder.choices(f.src, f.dst)[0]
        if any(h in hot and h not in fixed for h in path):
            todo.append((-rate, f))
    todo.sort()
    moves = {}
    for neg, f in todo:
        rate, path = -neg, assign[f]
        fixed = finder.choices(f.src, f.dst)[0]
        worst_now = max(util(h) for h in path if h not in fixed)
        if worst_now <= thr:
            continue
        here = set(path)
        best = None
        cands = finder.candidates(f.src, f.dst)
        for i, q in enumerate(cands):
            if q == path:
                continue
            us = [(work[h] + (0.0 if h in here else rate)) / capacity[h]
                  for h in q if h not in fixed]
            key = (max(us), sum(us), i)
            if best is None or key < best:
                best = key
        if best is None:
            continue
        score, eps = best[0], 1e-12
        if score < worst_now and (score <= thr - hyst + eps or worst_now - score >= hyst - eps):
            new = cands[best[2]]
            for h in here.difference(new):
                work[h] -= rate
            for h in set(new).difference(here):
                work[h] += rate
            moves[f] = new
            policy.last_move[f.key] = tick
    return moves


@pytest.mark.parametrize("name", FABRICS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_scoring_moves_exactly_like_one_flow_at_a_time(name: str, seed: int,
                                                              monkeypatch) -> None:
    # random sizes and rates, a low threshold and no hysteresis: many hot links and many
    # moves, several ticks with holds; blocks of 7 flows so block boundaries are crossed
    if seed == 1:
        monkeypatch.setattr(lbscore.Scorer, "BLOCK", 7)
    finder = finder_of(name)
    rnd = random.Random(seed)
    flows = random_flows(finder.hosts, seed, 300, (1, 2, 3, 5, 8))
    assign = lb.ecmp_assign(flows, finder, seed)
    cap = finder.capacity("mbps")
    kw = [dict(threshold=0.3, hysteresis=0.0, hold=1), dict(threshold=0.5, hysteresis=0.05,
                                                           hold=2), {}][seed]
    fast, slow = lb.AdaptivePolicy(**kw), lb.AdaptivePolicy(**kw)
    a_fast, a_slow = dict(assign), dict(assign)
    total = 0
    for tick in range(4):
        rates = {f: rnd.uniform(0.5, 6.0) for f in flows}
        got = fast.step(a_fast, rates, lb.link_loads(a_fast, rates), cap, finder, tick)
        want = scalar_step(slow, a_slow, rates, lb.link_loads(a_slow, rates), cap, finder, tick)
        assert got == want and list(got) == list(want)
        a_fast.update(got)
        a_slow.update(want)
        total += len(got)
    assert total > 0


@pytest.mark.parametrize("kw, name", [
    (dict(threshold=0), "threshold"), (dict(threshold=1.5), "threshold"),
    (dict(hysteresis=-0.1), "hysteresis"), (dict(threshold=0.5, hysteresis=0.5), "hysteresis"),
    (dict(hold=-1), "hold"), (dict(hold=1.5), "hold"),
])
def test_adaptive_rejects_bad_parameters(kw: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        lb.AdaptivePolicy(**kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=name):
        lb.simulate_adaptive([], finder_of("astral3"), **kw)


@pytest.mark.parametrize("name", FABRICS)
def test_simulated_adaptive_never_ends_worse_than_ecmp(name: str) -> None:
    finder = finder_of(name)
    flows = all_to_all(finder.hosts)
    ecmp = lb.ecmp_assign(flows, finder)
    adaptive = lb.simulate_adaptive(flows, finder)
    check_assignment(adaptive, flows, finder)
    assert (lb.max_link_time(adaptive, finder, fabric_only=True)
            <= lb.max_link_time(ecmp, finder, fabric_only=True) * (1 + 1e-9))
    if name == "astral3":  # ECMP collides badly here (8 flows where 3 fit); adaptive helps
        assert (lb.max_link_time(adaptive, finder, fabric_only=True)
                < lb.max_link_time(ecmp, finder, fabric_only=True))


# --- failed links ---------------------------------------------------------------------------
def test_paths_avoid_a_failed_spine_lane_at_either_end() -> None:
    plan = plan_of("astral3-2spines")
    lane = next(link for link in plan.links if link.a == "lf0r0" and link.kind == "lane")
    full = finder_of("astral3-2spines").paths("s0g0", "s2g0")
    for end in ((lane.a, lane.a_port), (lane.b, lane.b_port)):
        finder = PathFinder(plan, down={end})
        up = (lane.a, lane.a_port)
        paths = finder.paths("s0g0", "s2g0")
        assert paths and all(up not in p for p in paths)
        assert set(paths) == {p for p in full if up not in p}
        flows = all_to_all(finder.hosts)
        for assign in (lb.ecmp_assign(flows, finder), lb.plan_assign(flows, finder),
                       lb.simulate_adaptive(flows, finder)):
            check_assignment(assign, flows, finder)
            assert all(up not in p and (lane.b, lane.b_port) not in p for p in assign.values())
        assert up not in finder.capacity() and (lane.b, lane.b_port) not in finder.capacity()


def test_a_partitioned_pair_raises_naming_both_hosts() -> None:
    plan = plan_of("astral3")
    cut = {(link.a, link.a_port) for link in plan.links
           if link.kind == "lane" and link.a == "lf1r0"}  # every uplink of s2g0's leaf
    finder = PathFinder(plan, down=cut)
    with pytest.raises(ValueError, match="s0g0.*s2g0"):
        finder.paths("s0g0", "s2g0")
    assert finder.paths("s2g0", "s3g0") == [(("lf1r0", 2),)]  # under the leaf still works
    flow = Flow("s0g0", "s2g0", 50000, bytes=GB)
    for policy in (lb.ecmp_assign, lb.plan_assign):
        with pytest.raises(ValueError, match="s0g0.*s2g0"):
            policy([flow], finder)
    nic = PathFinder(plan, down={("lf1r0", 1)})  # s2g0's own NIC link
    with pytest.raises(ValueError, match="s2g0"):
        nic.paths("s3g0", "s2g0")
    with pytest.raises(ValueError, match="s2g0"):
        nic.paths("s2g0", "s0g0")
    with pytest.raises(ValueError, match="s2g0"):
        lb.plan_assign([Flow("s0g0", "s2g0", 1, bytes=GB)], nic)
