"""Path-choice algorithms the load-balancing policies use: which of its minimal paths
each flow takes. Pure.

Each policy is a module of ``controllers.policies`` that calls these plain functions over
plain data (flows, paths, rates), so they are unit-tested without root and the os-ken
app only turns the answer into flow entries. The algorithms behind the shipped policies:

``ecmp``
    What the switches do on their own: every switch hashes the packet's 5-tuple
    (for RoCEv2 the UDP source port is the entropy) and picks one of its
    shortest-path ports. Cheap and stateless, but blind to load: two elephant
    flows that hash onto one uplink share it while the next uplink idles. That
    collision is what the lab demonstrates.
``planned``
    The controller knows the whole job (``POST /traffic`` lists every flow and
    its bytes) and gives each flow an explicit path, so no link carries more
    than its fair share when a collision-free assignment exists. On Astral's
    two-tier fabric that is an edge colouring: same-rail traffic stays under its
    leaf, and cross-leaf flows are spread evenly over spines and lanes.
``adaptive``
    The controller does not know the job, but it measures: every few seconds it
    reads port and flow counters, finds links above a threshold and moves the
    largest flows on them to the least-loaded alternative (Hedera's global
    first fit, NSDI 2010), with hysteresis and a hold time so paths do not flap.

Units. A *load* is bytes on a directed link (``link_loads``); a capacity is a
rate in Gb/s (real) or Mb/s (emulated), see ``PathFinder.capacity``. Their ratio
is reported as a *link time*: the seconds the link needs to carry its load at
line rate. The largest link time over the fabric is the job's completion time if
every link ran flat out, and ``ideal_max_link_time`` is a lower bound on it that
no policy can beat, so "max link time / ideal" is the policy's quality (1.0 is
perfect). ``AdaptivePolicy`` works on rates instead: utilisation = rate /
capacity in one unit, as a controller measures them.

Speed. Where a flow has many candidate paths, the planner's greedy step and the adaptive
policy's scoring run in NumPy (``controllers.lbscore``: ``ManyCandidates``, ``Scorer``),
with the same arithmetic, hence the same choices, as the Python code here.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from controllers.lbscore import ManyCandidates, Scorer
from controllers.paths import UNITS, Hop, Path, PathFinder
from vocab.flows import Flow
from vocab.plan import WiringPlan

Assignment = dict[Flow, Path]


# --- loads and bounds ---------------------------------------------------------------------
def link_loads(assign: Mapping[Flow, Path],
               weight: Mapping[Flow, float] | None = None) -> dict[Hop, float]:
    """Sum, per hop, of what the flows assigned to it carry.

    ``weight`` defaults to each flow's bytes (a volume, for planning); pass a dict of
    per-flow rates to get link rates instead (flows missing from it count as 0).
    """
    loads: dict[Hop, float] = defaultdict(float)
    for flow, path in assign.items():
        w = flow.bytes if weight is None else weight.get(flow, 0.0)
        for hop in path:
            loads[hop] += w
    return dict(loads)


def _seconds_per_byte(unit: str) -> float:
    """Multiply bytes / capacity-in-``unit`` by this to get seconds at line rate."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {sorted(UNITS)} (got {unit!r})")
    return 8.0 / UNITS[unit]


def link_times(loads: Mapping[Hop, float], capacity: Mapping[Hop, float],
               unit: str = "gbps") -> dict[Hop, float]:
    """Seconds each link needs to carry its load (bytes) at its capacity (in ``unit``)."""
    k = _seconds_per_byte(unit)
    return {hop: load * k / capacity[hop] for hop, load in loads.items()}


def max_link_time(assign: Mapping[Flow, Path], finder: PathFinder, unit: str = "gbps",
                  fabric_only: bool = False) -> float:
    """The largest link time of an assignment: the quantity ``ideal_max_link_time`` bounds.

    Covers every switch egress a path uses plus each source host's NIC transmit link
    (which is not a ``Hop`` because no switch chooses it, but is a link the job must
    cross). ``fabric_only`` keeps only switch-to-switch hops: the links a policy can
    actually influence, which is the sharper comparison when NICs are the bottleneck.
    """
    k = _seconds_per_byte(unit)
    cap = finder.capacity(unit)
    worst = 0.0
    for hop, load in link_loads(assign).items():
        if not fabric_only or finder.is_fabric(hop):
            worst = max(worst, load * k / cap[hop])
    if not fabric_only:
        tx: dict[str, float] = defaultdict(float)
        for flow in assign:
            tx[flow.src] += flow.bytes
        for host, load in tx.items():
            worst = max(worst, load * k / finder.nic_capacity(host, unit))
    return worst


def _finder(plan_or_finder: WiringPlan | PathFinder) -> PathFinder:
    return plan_or_finder if isinstance(plan_or_finder, PathFinder) else PathFinder(plan_or_finder)


def _funnel_bound(sizes: list[float], caps: list[float]) -> float:
    """Lower bound on max(load / capacity) over ``caps`` links that must carry ``sizes`` flows.

    Each flow crosses exactly one of the links, unsplit. Three arguments, take the
    largest: (1) the links together carry the sum, so the most loaded one relative to
    its capacity is at least sum / total capacity; (2) the largest flow alone sits on
    some link; (3) with equal flows and equal links, pigeonhole puts ceil(n / links)
    flows on one of them, which is what makes a "perfect" split impossible when the
    flow count does not divide evenly.
    """
    total = sum(sizes)
    if not caps:
        return math.inf if total > 0 else 0.0
    bound = max(total / sum(caps), max(sizes) / max(caps))
    if len(set(sizes)) == 1 and len(set(caps)) == 1:
        bound = max(bound, math.ceil(len(sizes) / len(caps)) * sizes[0] / caps[0])
    return bound


def lower_bounds(plan_or_finder: WiringPlan | PathFinder, flows: Iterable[Flow],
                 unit: str = "gbps") -> dict[str, float]:
    """Named lower bounds (seconds at line rate) on the max link time of ANY assignment.

    ``host_tx`` / ``host_rx``: a host's bytes sent / received over its own link (no
    path choice changes these). ``fabric_out`` / ``fabric_in``: per attach switch, the
    flows to (from) hosts under other attach switches must leave (enter) it over its
    live switch-to-switch links, funnelled as ``_funnel_bound`` explains. Every bound
    counts only traffic that provably crosses the links it names, so each one is a
    valid lower bound on ``max_link_time`` (the ``fabric_*`` ones on its
    ``fabric_only`` form too). They say nothing about deeper tiers of a 3-tier
    fabric, so there the bound may be loose; on a two-tier fabric it is tight.
    """
    finder = _finder(plan_or_finder)
    k = _seconds_per_byte(unit)
    cap = finder.capacity(unit)
    tx: dict[str, float] = defaultdict(float)
    rx: dict[str, float] = defaultdict(float)
    out: dict[str, list[float]] = defaultdict(list)
    inn: dict[str, list[float]] = defaultdict(list)
    for f in flows:
        tx[f.src] += f.bytes
        rx[f.dst] += f.bytes
        a, b = finder.attach(f.src), finder.attach(f.dst)
        if a != b:
            out[a].append(f.bytes)
            inn[b].append(f.bytes)
    host_tx = max((v / finder.nic_capacity(h, unit) for h, v in tx.items()), default=0.0)
    host_rx = max((v / finder.nic_capacity(h, unit) for h, v in rx.items()), default=0.0)
    fab_out = max((_funnel_bound(sizes, [cap[h] for h in finder.uplinks(a)])
                   for a, sizes in out.items()), default=0.0)
    fab_in = max((_funnel_bound(sizes, [cap[finder.peer(h)] for h in finder.uplinks(b)])
                  for b, sizes in inn.items()), default=0.0)
    return {"host_tx": host_tx * k, "host_rx": host_rx * k,
            "fabric_out": fab_out * k, "fabric_in": fab_in * k}


def ideal_max_link_time(plan_or_finder: WiringPlan | PathFinder, flows: Iterable[Flow],
                        unit: str = "gbps", fabric_only: bool = False) -> float:
    """Lower bound (seconds at line rate) on ``max_link_time`` of any unsplit assignment.

    The largest of ``lower_bounds``; with ``fabric_only`` only the fabric bounds, to
    compare with ``max_link_time(..., fabric_only=True)``. A policy whose max link
    time equals it is optimal; the ratio says how far from optimal it is.
    """
    bounds = lower_bounds(plan_or_finder, flows, unit)
    keys = ("fabric_out", "fabric_in") if fabric_only else tuple(bounds)
    return max(bounds[key] for key in keys)


# --- ECMP ---------------------------------------------------------------------------------
def _bucket_hash(flow: Flow, switch: str, seed: int) -> int:
    """A stable 64-bit hash of the 5-tuple, salted with the switch name and ``seed``.

    BLAKE2 rather than CRC32 on purpose: CRC is linear over XOR, so the difference
    between two flows' CRCs is the same whatever switch name salts them, and with a
    power-of-two port count two flows that collide at one switch would collide at
    every switch ("polarised" hashing). We model independent per-switch hashes.
    """
    data = f"{seed}|{switch}|{flow.src}|{flow.dst}|{flow.proto}|{flow.sport}|{flow.dport}"
    return int.from_bytes(hashlib.blake2b(data.encode(), digest_size=8).digest(), "big")


def ecmp_path(flow: Flow, finder: PathFinder, seed: int = 0) -> Path:
    """The path ECMP would give ``flow``: at each switch, hash the 5-tuple over the ports.

    A model of OVS select groups configured to hash the 5-tuple including the UDP
    source port (``selection_method=hash`` or ``dp_hash``; OVS's *default* method
    ignores UDP ports, see DESIGN.md). OVS's real hash function is internal and its
    bucket choice cannot be reproduced here, so this predicts the *statistics* of
    ECMP (how often flows collide), not which bucket a given packet takes. ``seed``
    stands for a different hash seed: averaging over seeds averages over luck.
    """
    finder.candidates(flow.src, flow.dst)  # raises ValueError if there is no path at all
    sw, target = finder.attach(flow.src), finder.attach(flow.dst)
    hops: list[Hop] = []
    for _ in range(len(finder.next_hops) + 1):  # minimal paths cross each switch at most once
        if sw == target:
            hops.append(finder.host_hop(flow.dst))
            return tuple(hops)
        ports = finder.next_hops[sw][target]
        port = ports[_bucket_hash(flow, sw, seed) % len(ports)]
        hops.append((sw, port))
        sw = finder.peer((sw, port))[0]
    raise RuntimeError(f"next hops from {flow.src} to {flow.dst} loop")  # routing bug


def ecmp_assign(flows: Iterable[Flow], finder: PathFinder, seed: int = 0) -> Assignment:
    """``ecmp_path`` for every flow."""
    return {f: ecmp_path(f, finder, seed) for f in flows}


# --- planned ------------------------------------------------------------------------------
def plan_assign(flows: Iterable[Flow], finder: PathFinder,
                capacity: Mapping[Hop, float] | None = None) -> Assignment:
    """An explicit path for every flow, balancing bytes over link capacities.

    Two methods, tried in order:

    1. *Lane colouring* (exact). When every flow between different attach switches
       has the same size and only leaf -> middle -> leaf candidates (Astral 3.0's
       two-tier fabric, a one-block rail-only fabric, any intra-pod traffic), the job
       is a bipartite multigraph, source leaf -> destination leaf, one edge per flow.
       Konig's theorem colours its edges with D colours (D = max leaf degree) so no
       two edges at a leaf share a colour. Each leaf has the same m lanes to each of
       the S middle switches; C = S * m "lane classes" (spine, j) exist, and colour c
       uses class c % C: up the source leaf's j-th lane to the spine, down the
       spine's j-th lane to the destination leaf. At any leaf each colour appears at
       most once, so a lane carries at most ceil(D / C) flows: exactly the pigeonhole
       bound of the busiest leaf, i.e. optimal.
    2. *Greedy + local improvement* (everything else: unequal bytes, 3-tier rail3 and
       fat-tree, rail-only relays, failed links). Largest flow first onto the
       candidate minimising (max utilisation along its choosable hops after adding
       it, then their sum); then, while the most utilised link has a flow that fits
       elsewhere below that level, move it. Not optimal (the problem is NP-hard in
       general) but never moves a flow onto a link as hot as the one it leaves.

    Deterministic: no randomness, ties broken by flow order and candidate order.
    ``capacity`` (hop -> rate, any one unit) defaults to the real rates; pass a lower
    one for a degraded link to steer traffic away from it.
    """
    flows = list(flows)
    cap = dict(capacity) if capacity is not None else finder.capacity("gbps")
    assign: Assignment = {}
    cross: list[Flow] = []
    for f in flows:
        if finder.attach(f.src) == finder.attach(f.dst):
            assign[f] = finder.candidates(f.src, f.dst)[0]  # the only minimal path
        else:
            if finder.down:
                finder.candidates(f.src, f.dst)  # a failed NIC link: ValueError naming both
            cross.append(f)
    coloured = _lane_colouring(sorted(cross), finder, cap)
    if coloured is not None:
        assign.update(coloured)
        return assign
    inv = _inverse(cap)
    order = sorted(cross, key=lambda f: (-f.bytes, f))
    load: dict[Hop, float] = defaultdict(float)
    for f in flows:
        if f in assign:
            for hop in assign[f]:
                load[hop] += f.bytes
    index: dict[Flow, int] = {}
    many = ManyCandidates(inv, finder)
    for hop, x in load.items():
        many.set(hop, x)
    for f in order:
        _fixed, varying = finder.choices(f.src, f.dst)
        if len(varying) >= ManyCandidates.MIN:
            best = many.least_loaded(f, size=f.bytes)
        else:
            best = _least_loaded(varying, load, inv, f.bytes)
        index[f] = best
        assign[f] = finder.candidates(f.src, f.dst)[best]
        for hop in assign[f]:
            load[hop] += f.bytes
            many.set(hop, load[hop])
    _improve(order, finder, index, assign, load, inv, max_moves=max(1000, len(order)))
    return assign


def _inverse(cap: Mapping[Hop, float]) -> dict[Hop, float]:
    """1 / capacity per hop: utilisation = load * inv, one multiply in the hot loops."""
    bad = [h for h, c in cap.items() if c <= 0]
    if bad:
        raise ValueError(f"capacity must be > 0; check {bad[:3]}")
    return {h: 1.0 / c for h, c in cap.items()}


def _least_loaded(varying: tuple[Path, ...], load: Mapping[Hop, float],
                  inv: Mapping[Hop, float], size: float) -> int:
    """Index of the candidate whose hops, with ``size`` added, have the lowest (max, sum)."""
    if len(varying) == 1:
        return 0
    best, best_key = 0, (math.inf, math.inf)
    for i, hops in enumerate(varying):
        worst = total = 0.0
        for hop in hops:
            u = (load.get(hop, 0.0) + size) * inv[hop]
            total += u
            if u > worst:
                worst = u
        if (worst, total) < best_key:
            best, best_key = i, (worst, total)
    return best


def _improve(order: list[Flow], finder: PathFinder, index: dict[Flow, int], assign: Assignment,
             load: dict[Hop, float], inv: Mapping[Hop, float], max_moves: int) -> int:
    """Move flows off the most utilised choosable link while that link gets cooler.

    A move takes a flow off the hottest link h onto a candidate whose every new hop
    stays strictly below h's utilisation. So the number of links at the top level
    shrinks (or the top level drops) with every move, and the loop ends; ``max_moves``
    bounds it anyway. It stops at the first hottest link that no single move can
    relieve, because then the max cannot drop by single moves. Returns the move count.
    """
    on: dict[Hop, dict[Flow, None]] = defaultdict(dict)  # insertion order = largest first
    for f in order:
        for hop in finder.choices(f.src, f.dst)[1][index[f]]:
            on[hop][f] = None
    heap = [(-load[h] * inv[h], h) for h in on]
    heapq.heapify(heap)
    moves = 0
    while heap and moves < max_moves:
        neg, hot = heap[0]
        u = load[hot] * inv[hot]
        if -neg != u:  # stale entry: reinsert with the current value
            heapq.heapreplace(heap, (-u, hot))
            continue
        if u <= 0:
            break
        moved = False
        for f in list(on[hot]):
            if f.bytes <= 0:
                continue
            varying = finder.choices(f.src, f.dst)[1]
            current = set(varying[index[f]])
            best, best_u = -1, u * (1 - 1e-12)
            for i, hops in enumerate(varying):
                if hot in hops:
                    continue
                worst = max((load[h] + (0 if h in current else f.bytes)) * inv[h] for h in hops)
                if worst < best_u:
                    best, best_u = i, worst
            if best < 0:
                continue
            new = set(varying[best])
            for h in current - new:
                load[h] -= f.bytes
                del on[h][f]
                heapq.heappush(heap, (-load[h] * inv[h], h))
            for h in new - current:
                load[h] += f.bytes
                on[h][f] = None
                heapq.heappush(heap, (-load[h] * inv[h], h))
            index[f] = best
            assign[f] = finder.candidates(f.src, f.dst)[best]
            moves += 1
            moved = True
            break
        if not moved:
            break
    return moves


def _lane_colouring(cross: list[Flow], finder: PathFinder,
                    cap: Mapping[Hop, float]) -> Assignment | None:
    """Method 1 of ``plan_assign``; ``None`` when its preconditions do not hold.

    Preconditions, all checked from the candidate paths themselves (no topology
    names): equal flow sizes; every trunk is two hops, source -> middle -> destination;
    every pair sees the same middle switches; every (leaf, middle) pair has the same
    number m of lanes both ways and the same lanes whichever pair asks; all those
    lanes have one capacity. Failed links usually break the symmetry and send the job
    to the greedy method, which is the right thing.
    """
    if not cross or len({f.bytes for f in cross}) != 1:
        return None
    pairs = sorted({(finder.attach(f.src), finder.attach(f.dst)) for f in cross})
    middles: list[str] | None = None
    m = 0
    up: dict[tuple[str, str], tuple[int, ...]] = {}
    down: dict[tuple[str, str], tuple[int, ...]] = {}
    rates: set[float] = set()
    for a, b in pairs:
        trunks = finder.trunks(a, b)
        if not trunks or any(len(t) != 2 for t in trunks):
            return None
        ups: dict[str, set[int]] = defaultdict(set)
        downs: dict[str, set[int]] = defaultdict(set)
        for (_a, p), (s, q) in trunks:
            ups[s].add(p)
            downs[s].add(q)
        if middles is None:
            middles = sorted(ups)
            m = len(ups[middles[0]])
        if sorted(ups) != middles or len(trunks) != len(middles) * m * m:
            return None
        for s in middles:
            u, d = tuple(sorted(ups[s])), tuple(sorted(downs[s]))
            if len(u) != m or len(d) != m:
                return None
            if up.setdefault((a, s), u) != u or down.setdefault((s, b), d) != d:
                return None
            rates.update(cap[(a, p)] for p in u)
            rates.update(cap[(s, q)] for q in d)
    if len(rates) != 1 or middles is None:
        return None
    lefts = {a: i for i, a in enumerate(sorted({a for a, _ in pairs}))}
    rights = {b: i for i, b in enumerate(sorted({b for _, b in pairs}))}
    ends = [(finder.attach(f.src), finder.attach(f.dst)) for f in cross]
    colours = edge_colour([(lefts[a], rights[b]) for a, b in ends], len(lefts), len(rights))
    classes = [(s, j) for s in middles for j in range(m)]
    out: Assignment = {}
    for f, (a, b), c in zip(cross, ends, colours, strict=True):
        s, j = classes[c % len(classes)]
        out[f] = ((a, up[(a, s)][j]), (s, down[(s, b)][j]), finder.host_hop(f.dst))
    return out


def _diagonal_order(edges: list[tuple[int, int]], n_right: int) -> list[int]:
    """Edge indexes in an order that makes the greedy colouring rarely need a swap.

    The k-th copy of every (u, v) pair first, and within a copy by "diagonal"
    (v - u) mod n_right: in an all-to-all each diagonal is a matching, so all its
    edges find the same lowest free colour at both ends. Any order is correct; this
    one is only faster (about twenty times, for a 256-GPU all-to-all).
    """
    copy: dict[tuple[int, int], int] = defaultdict(int)
    keys = []
    for e, (u, v) in enumerate(edges):
        k = copy[(u, v)]
        copy[(u, v)] = k + 1
        keys.append((k, (v - u) % max(n_right, 1), u, e))
    keys.sort()
    return [key[3] for key in keys]


def edge_colour(edges: list[tuple[int, int]], n_left: int, n_right: int) -> list[int]:
    """Colour a bipartite multigraph's edges with D = max degree colours (Konig's theorem).

    ``edges[i] = (left vertex, right vertex)``; returns ``colour[i]`` in ``0..D-1`` with
    no two edges at a vertex sharing a colour. The classic alternating-path method:
    for edge (u, v) take the lowest colour a free at u and b free at v; if a is also
    free at v use it, if b is free at u use that; otherwise follow the path from v
    whose edges alternate a, b, a, ... and swap a and b along it. In a bipartite graph
    that path cannot reach u (it would arrive at u by an a-edge, and a is free at
    u) nor return to v, so afterwards a is free at both ends. O(E * V) worst case;
    paths are short in practice (65,024 edges of a 256-GPU all-to-all: well under a
    second).
    """
    if not edges:
        return []
    deg_l, deg_r = [0] * n_left, [0] * n_right
    for u, v in edges:
        deg_l[u] += 1
        deg_r[v] += 1
    d = max(max(deg_l), max(deg_r))
    at_l = [[-1] * d for _ in range(n_left)]  # at_l[u][c] = edge of colour c at u, or -1
    at_r = [[-1] * d for _ in range(n_right)]
    free_l = [list(range(d)) for _ in range(n_left)]  # lazy min-heaps of maybe-free colours
    free_r = [list(range(d)) for _ in range(n_right)]
    colour = [-1] * len(edges)

    def lowest_free(at: list[int], heap: list[int]) -> int:
        while at[heap[0]] != -1:
            heapq.heappop(heap)
        return heap[0]

    for e in _diagonal_order(edges, n_right):
        u, v = edges[e]
        a = lowest_free(at_l[u], free_l[u])
        b = lowest_free(at_r[v], free_r[v])
        if at_r[v][a] == -1:
            c = a
        elif at_l[u][b] == -1:
            c = b
        else:
            path: list[int] = []
            node, right, want = v, True, a
            while True:
                nxt = (at_r if right else at_l)[node][want]
                if nxt == -1:
                    break
                path.append(nxt)
                node = edges[nxt][0] if right else edges[nxt][1]
                right = not right
                want = b if want == a else a
            for x in path:
                xu, xv = edges[x]
                at_l[xu][colour[x]] = -1
                at_r[xv][colour[x]] = -1
            for x in path:
                xu, xv = edges[x]
                colour[x] = b if colour[x] == a else a
                at_l[xu][colour[x]] = x
                at_r[xv][colour[x]] = x
            # Inner nodes of the path keep both colours; v gives up a (taken by e just
            # below) and the far end gives up its last edge's old colour: one new free slot.
            heapq.heappush((free_r if right else free_l)[node], b if want == a else a)
            c = a
        colour[e] = c
        at_l[u][c] = e
        at_r[v][c] = e
    return colour


# --- adaptive -----------------------------------------------------------------------------
class AdaptivePolicy:
    """Hedera-style global first fit over measured rates, with hysteresis and a hold time.

    Each ``step`` (one measurement interval, number ``tick``): links whose rate /
    capacity exceeds ``threshold`` are hot. The flows crossing a hot link (on a hop
    they could avoid) are taken largest measured rate first; for each, every other
    candidate path is scored by the highest utilisation it would have with the flow
    moved onto it. The best candidate wins, but the flow moves only if that score is
    at most ``threshold - hysteresis`` or it lowers the flow's own worst utilisation
    by at least ``hysteresis``. Without that margin two flows could swap back and
    forth every tick on measurement noise. A flow moved at tick t is left alone until
    tick t + ``hold``, because its new rate is not measured yet. Each move updates the
    working link rates, so later decisions in the same step see it.

    The policy remembers only when each flow (by 5-tuple) last moved.
    """

    def __init__(self, threshold: float = 0.8, hysteresis: float = 0.1, hold: int = 3) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1] (got {threshold!r})")
        if not 0 <= hysteresis < threshold:
            raise ValueError(f"hysteresis must be in [0, threshold={threshold}) "
                             f"(got {hysteresis!r})")
        if isinstance(hold, bool) or not isinstance(hold, int) or hold < 0:
            raise ValueError(f"hold must be an integer >= 0 ticks (got {hold!r})")
        self.threshold = threshold
        self.hysteresis = hysteresis
        self.hold = hold
        self.last_move: dict[tuple[str, str, str, int, int], int] = {}

    def held(self, flow: Flow, tick: int) -> bool:
        """True while ``flow`` moved less than ``hold`` ticks ago."""
        last = self.last_move.get(flow.key)
        return last is not None and tick - last < self.hold

    def step(self, assign: Mapping[Flow, Path], flow_rates: Mapping[Flow, float],
             link_rates: Mapping[Hop, float], capacity: Mapping[Hop, float],
             finder: PathFinder, tick: int) -> dict[Flow, Path]:
        """The moves for this tick: ``{flow: new path}`` (empty when nothing should change).

        ``flow_rates``, ``link_rates`` and ``capacity`` must share one unit (e.g. Mb/s
        from counters and ``finder.capacity("mbps")``). ``assign`` is left untouched;
        the caller applies the moves.

        Flows are decided one by one, largest rate first, each against the link rates
        left by the moves before it. Scoring every candidate of every hot flow in Python
        is what makes a large job slow (an astral3 leaf pair has one candidate per lane),
        so ``Scorer`` scores a block of flows at once with NumPy against the current
        rates. A move changes the rates of a few hops only, so after one, just the flows
        of the block whose candidates or path cross those hops are scored again; the
        others' verdicts still hold. The result is the one-at-a-time result exactly.
        """
        thr, hyst = self.threshold, self.hysteresis
        work: dict[Hop, float] = defaultdict(float, link_rates)
        hot = {h for h in work if h in capacity and work[h] / capacity[h] > thr}
        if not hot:
            return {}
        todo: list[tuple[float, Flow]] = []
        for f, path in assign.items():
            rate = flow_rates.get(f, 0.0)
            if rate <= 0 or self.held(f, tick):
                continue
            fixed = finder.choices(f.src, f.dst)[0]
            if any(h in hot and h not in fixed for h in path):
                todo.append((-rate, f))
        todo.sort()
        scorer = Scorer(work, capacity, finder)
        moves: dict[Flow, Path] = {}
        eps = 1e-12
        for first in range(0, len(todo), Scorer.BLOCK):
            flows = [f for _, f in todo[first:first + Scorer.BLOCK]]
            rates = [-neg for neg, _ in todo[first:first + Scorer.BLOCK]]
            paths = [assign[f] for f in flows]
            blk = scorer.block(flows, rates, paths)
            for j, f in enumerate(flows):
                now, score = float(blk.now[j]), float(blk.score[j])
                if now <= thr or blk.best[j] < 0:  # cooled by an earlier move; no other path
                    continue
                if score < now and (score <= thr - hyst + eps or now - score >= hyst - eps):
                    new = finder.candidates(f.src, f.dst)[int(blk.best[j])]
                    blk.rescore(scorer.move(paths[j], new, rates[j]), j)
                    moves[f] = new
                    self.last_move[f.key] = tick
        return moves



def simulate_adaptive(flows: Iterable[Flow], finder: PathFinder, rounds: int = 10,
                      seed: int = 0, start: Mapping[Flow, Path] | None = None,
                      **policy_kw: float) -> Assignment:
    """Where adaptive mode ends up for a job, in a fluid model (for benchmarks).

    Start from ECMP (what the fabric does before the controller reacts). Every flow
    demands bytes / T, with T = ``ideal_max_link_time``: the rates that would finish
    the job in the ideal time, so a link's utilisation is its link time / T and a
    link above 1 is what stretches the job. Rates are demands (not throttled by
    congestion), which is optimistic for the hot links and makes the run
    deterministic. Step the policy once per round until it makes no move. ``start``:
    ``ecmp_assign(flows, finder, seed)`` if the caller already has it (not modified).
    """
    policy = AdaptivePolicy(**policy_kw)  # type: ignore[arg-type]
    flows = list(flows)
    assign = dict(start) if start is not None else ecmp_assign(flows, finder, seed)
    ideal = ideal_max_link_time(finder, flows, "gbps")
    if ideal <= 0:  # no bytes to move
        return assign
    rates = {f: f.bytes * 8 / ideal / UNITS["gbps"] for f in flows}  # Gb/s
    cap = finder.capacity("gbps")
    for tick in range(rounds):
        moves = policy.step(assign, rates, link_loads(assign, rates), cap, finder, tick)
        if not moves:
            break
        assign.update(moves)
    return assign
