"""The one recount of a wiring plan: counts read off its nodes and links alone.

Every test that checks a closed-form count (``plan.counts``, the cost model's
``counts_for_spec``/``analyze``) recomputes it here, by code that shares nothing with the
builders or the cost model: switches by tier, links by kind, transceivers and their lanes,
fibres, switch lanes, shuffle boxes, the worst GPU pair's switch hops and the bisection (a
max-flow between the halves of the servers).
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from vocab.plan import WiringPlan


class Wiring:
    """A plan read as a graph: who is a GPU, a network switch, a switch inside a server."""

    def __init__(self, plan: WiringPlan) -> None:
        self.plan = plan
        self.node = {n.name: n for n in plan.nodes}
        self.gpus = [n.name for n in plan.nodes if n.kind == "host"]
        self.inner = {n.name for n in plan.nodes if n.kind == "switch" and n.tier == "nvswitch"}
        self.network = {n.name for n in plan.nodes if n.kind == "switch"} - self.inner
        self.adj: dict[str, set[str]] = {n: set() for n in self.node}
        for x in plan.links:
            self.adj[x.a].add(x.b)
            self.adj[x.b].add(x.a)


def hops_between_every_pair(w: Wiring) -> int:
    """Network switches on the shortest path of the worst GPU pair, one search per GPU.

    A switch inside a server (NVLink) costs nothing and is only crossed by its own
    server's GPUs (another server's is a way in to its GPUs, never a way through).
    """
    worst = 0
    for src in w.gpus:
        own = w.adj[src]
        cost = {src: 0}
        queue = deque([src])
        while queue:
            u = queue.popleft()
            if u != src and w.node[u].kind == "host":
                continue
            through = u == src or u in w.network or u in own
            for v in w.adj[u]:
                if not through and w.node[v].kind != "host":
                    continue
                c = cost[u] + (1 if v in w.network else 0)
                if c < cost.get(v, 1 << 30):
                    cost[v] = c
                    (queue.appendleft if c == cost[u] else queue.append)(v)
        for dst in w.gpus:
            if dst != src:
                assert dst in cost, f"no path {src} -> {dst}"
                worst = max(worst, cost[dst])
    return worst


def recount(w: Wiring) -> dict[str, Any]:
    """Switches, links, transceivers, lanes and fibres read off the links.

    A cable has a module at each end, as wide as the link; a shuffled lane shares its
    leaf's uplink-port module with the other lanes of that port, and its box output's
    trunk module (L lanes, to one spine) with the lanes of the other inputs; NVLink has
    none. Fibres: two per lane per segment (a shuffled lane: leaf -> box, then its share
    of the box -> spine trunk, which is L lanes wide whether the box is full or not).
    """
    plan, lane_gbps = w.plan, float(w.plan.params["lane_gbps"])
    modules: dict[tuple[Any, ...], float] = {}
    fibers = 0.0
    switch_lanes = 0.0
    trunk_width = int(plan.shuffle["lanes_per_uplink"]) if plan.shuffle else 0
    for i, x in enumerate(plan.links):
        width = x.gbps / lane_gbps
        switch_lanes += width * ((x.a in w.network) + (x.b in w.network))
        if x.kind == "nvlink":
            continue
        if x.kind == "lane":
            modules[("port", x.a, x.info["uplink"])] = trunk_width
            modules[("trunk", x.info["box"], x.info["box_out"])] = trunk_width
            fibers += 2
        else:
            modules[("cable", i, "a")] = modules[("cable", i, "b")] = width
            fibers += 2 * width
    trunks = sum(1 for k in modules if k[0] == "trunk")
    fibers += 2 * trunk_width * trunks
    nic = {x.gbps for x in plan.links if x.kind == "nic"}
    assert len(nic) == 1
    return {
        "gpus": len(w.gpus),
        "servers": len({w.node[g].loc["server"] for g in w.gpus}),
        "switches_per_tier": dict(Counter(w.node[s].tier for s in w.network | w.inner)),
        "network_switches": len(w.network),
        "links_per_kind": dict(Counter(x.kind for x in plan.links)),
        "optics": len(modules),
        "optic_lanes": sum(modules.values()),
        "fibers": fibers,
        "switch_lanes_used": switch_lanes,
        "shuffle_boxes": len({x.info["box"] for x in plan.links if x.kind == "lane"}),
        "nic_lanes": nic.pop() / lane_gbps,
    }


def tier_count(w: Wiring, tier: str) -> int:
    return sum(1 for s in w.network | w.inner if w.node[s].tier == tier)


def design_counts(w: Wiring) -> dict[str, Any]:
    """Each design's own keys of ``plan.counts``, recomputed from nodes and links."""
    plan = w.plan
    lanes = [x for x in plan.links if x.kind == "lane"]
    blocks = {w.node[g].loc["block"] for g in w.gpus if "block" in w.node[g].loc}
    edges = [s for s in w.network if w.node[s].tier == "edge"]
    out: dict[str, Any] = {
        "blocks": len(blocks), "leaves": tier_count(w, "leaf"),
        "spines": tier_count(w, "spine"), "tors": tier_count(w, "tor"),
        "aggs": tier_count(w, "agg"), "cores": tier_count(w, "core"),
        "nvswitches": tier_count(w, "nvswitch"), "lanes": len(lanes),
        "shuffle_boxes": len({x.info["box"] for x in lanes}),
    }
    if lanes:
        ports = {leaf: len({x.info["uplink"] for x in lanes if x.a == leaf})
                 for leaf in {x.a for x in lanes}}
        reached = {leaf: len({x.b for x in lanes if x.a == leaf}) for leaf in ports}
        assert len(set(ports.values())) == 1 and len(set(reached.values())) == 1
        out["uplink_ports_per_leaf"] = next(iter(ports.values()))
        out["spines_reached_per_leaf"] = next(iter(reached.values()))
        # cabled whole, port p to its own spine: no more spines than ports
        out["spines_reached_without_shuffle"] = min(out["uplink_ports_per_leaf"],
                                                    out["spines"])
    if edges:
        pods = {w.node[s].loc["pod"] for s in w.network if "pod" in w.node[s].loc}
        out["pods"] = out["k"] = len(pods)
        # the pod of the edge switch each GPU hangs off
        out["pods_with_gpus"] = len({w.node[next(iter(w.adj[g]))].loc["pod"] for g in w.gpus})
    return out


def max_flow(cap: dict[str, dict[str, float]], source: str, sink: str) -> float:
    """Dinic's max-flow on a residual-capacity map (mutated)."""
    total = 0.0
    while True:
        level = {source: 0}
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for v, c in cap[u].items():
                if c > 1e-9 and v not in level:
                    level[v] = level[u] + 1
                    queue.append(v)
        if sink not in level:
            return total
        nexts = {u: iter(list(cap[u])) for u in cap}
        while (f := _push(cap, level, nexts, source, sink, float("inf"))) > 0:
            total += f


def _push(cap: dict[str, dict[str, float]], level: dict[str, int],
          nexts: dict[str, Any], u: str, sink: str, f: float) -> float:
    """One augmenting path along the level graph (Dinic's blocking-flow step)."""
    if u == sink:
        return f
    for v in nexts[u]:
        if cap[u][v] > 1e-9 and level.get(v) == level[u] + 1:
            got = _push(cap, level, nexts, v, sink, min(f, cap[u][v]))
            if got > 0:
                cap[u][v] -= got
                cap[v][u] = cap[v].get(u, 0.0) + got
                return got
    return 0.0


def bisection_by_max_flow(w: Wiring) -> float:
    """Gb/s one way from the first half of the servers to the second, servers kept whole
    (a server's GPUs and its NVLink switch are one end: relaying inside it is free)."""
    servers = sorted({w.node[g].loc["server"] for g in w.gpus})
    first = set(servers[: len(servers) // 2])
    cap: dict[str, dict[str, float]] = {n: {} for n in w.node}
    cap["SRC"], cap["DST"] = {}, {}
    for x in w.plan.links:
        cap[x.a][x.b] = cap[x.a].get(x.b, 0.0) + x.gbps
        cap[x.b][x.a] = cap[x.b].get(x.a, 0.0) + x.gbps
    ends = w.gpus + sorted(w.inner)
    for n in ends:
        side = "SRC" if w.node[n].loc["server"] in first else "DST"
        if side == "SRC":
            cap["SRC"][n] = float("inf")
        else:
            cap[n]["DST"] = float("inf")
    return max_flow(cap, "SRC", "DST")


def lanes_per_switch(w: Wiring) -> dict[str, float]:
    """Lane-ports in use on each network switch, read off its links."""
    lane_gbps = float(w.plan.params["lane_gbps"])
    used = dict.fromkeys(w.network, 0.0)
    for x in w.plan.links:
        for end in (x.a, x.b):
            if end in w.network:
                used[end] += x.gbps / lane_gbps
    return used
