"""Shortest-path ECMP routing over a wiring plan. Pure: plain data in, plain data out.

For every switch and every destination the controller needs the set of ports
that lie on a shortest path toward it. Hosts hang off exactly one switch (their
*attach* switch: a leaf, a ToR, an edge, or in ``railonly`` the server's NVLink
switch), and every path to a host ends at its attach switch, so the next hops
toward all hosts of one attach switch are the same everywhere else. We
therefore run one breadth-first search per attach switch, not per host.

One rule keeps ``railonly`` honest: a per-server NVLink switch may start or end a
path but never carry transit traffic between two network switches (a real
NVLink domain does not forward for other servers). The BFS never expands
through an NVLink switch other than the destination's own.

Routes are matched on destination address: IPv4 by ``ipv4_dst`` and ARP by
``arp_tpa``. Routing ARP like unicast means a broadcast ARP request travels the
unicast path to the one host that owns the address, so a looped Clos needs
neither flooding nor a spanning tree, and the controller sees no packet-ins.
Where the IPs under one attach switch share bits that no other host has, one
masked match covers them all (``prefix_for``), which keeps tables small.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass

from vocab.plan import WiringPlan

#: Flow priorities. Planned/adaptive modes (controller issue) install above ROUTE.
PRIO_LOCAL = 300  # deliver to a directly attached host
PRIO_ROUTE = 200  # toward a remote attach switch
PRIO_MISS = 0  # table miss: drop (no packet-in storms)


@dataclass(frozen=True)
class Route:
    """At ``switch``: packets for ``value/mask`` leave by one of ``ports`` (ECMP if several)."""

    switch: str
    value: str  # dotted IPv4
    mask: str  # dotted IPv4 mask (may be non-contiguous)
    ports: tuple[int, ...]
    priority: int
    dest: str  # attach switch (or host, for local delivery) this route leads to


def ip_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def ip_str(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def attach_points(plan: WiringPlan) -> dict[str, tuple[str, int]]:
    """``host -> (attach switch, port on that switch)``."""
    hosts = {h.name for h in plan.hosts}
    out: dict[str, tuple[str, int]] = {}
    for link in plan.links:
        if link.a in hosts:
            out[link.a] = (link.b, link.b_port)
        elif link.b in hosts:
            out[link.b] = (link.a, link.a_port)
    return out


def switch_graph(plan: WiringPlan, down: set[tuple[str, int]] | None = None
                 ) -> dict[str, list[tuple[int, str]]]:
    """``switch -> [(local port, neighbour switch)]`` over switch-to-switch links.

    A link with either end in ``down`` (``(switch, port)`` pairs) is left out.
    """
    down = down or set()
    switches = {s.name for s in plan.switches}
    graph: dict[str, list[tuple[int, str]]] = {s: [] for s in switches}
    for link in plan.links:
        if (link.a, link.a_port) in down or (link.b, link.b_port) in down:
            continue
        if link.a in switches and link.b in switches:
            graph[link.a].append((link.a_port, link.b))
            graph[link.b].append((link.b_port, link.a))
    for ports in graph.values():
        ports.sort()
    return graph


def distances_to(graph: dict[str, list[tuple[int, str]]], target: str,
                 no_transit: set[str]) -> dict[str, int]:
    """Hop distance from every switch to ``target``; ``no_transit`` nodes are never crossed."""
    dist = {target: 0}
    queue = deque([target])
    while queue:
        node = queue.popleft()
        if node != target and node in no_transit:
            continue  # reached, but packets may not pass through it
        for _port, peer in graph[node]:
            if peer not in dist:
                dist[peer] = dist[node] + 1
                queue.append(peer)
    return dist


def next_hops(plan: WiringPlan, down: set[tuple[str, int]] | None = None
              ) -> dict[str, dict[str, tuple[int, ...]]]:
    """``result[switch][attach_switch]`` = ports on a shortest path toward that attach switch.

    ``down`` lists ``(switch, port)`` ends whose link must not be used (for failover
    in later issues). Switches with no path get no entry.
    """
    graph = switch_graph(plan, down)
    no_transit = {s.name for s in plan.switches if s.tier == "nvswitch"}
    targets = sorted({sw for sw, _ in attach_points(plan).values()})
    result: dict[str, dict[str, tuple[int, ...]]] = {s: {} for s in graph}
    for target in targets:
        dist = distances_to(graph, target, no_transit)
        for sw, adj in graph.items():
            if sw == target or sw not in dist:
                continue
            ports = tuple(p for p, n in adj
                          if n in dist and dist[n] == dist[sw] - 1
                          and (n == target or n not in no_transit))
            if ports:
                result[sw][target] = ports
    return result


def prefix_for(ips: list[str], others: list[str]) -> tuple[str, str] | None:
    """The widest (value, mask) that matches every IP in ``ips`` and none in ``others``.

    Bits on which all of ``ips`` agree form the mask; if some other host agrees
    on all of them too, there is no safe aggregate and we return ``None``.
    """
    values = [ip_int(ip) for ip in ips]
    same = 0xFFFFFFFF
    for v in values[1:]:
        same &= ~(v ^ values[0]) & 0xFFFFFFFF
    value = values[0] & same
    if any(ip_int(o) & same == value for o in others):
        return None
    return ip_str(value), ip_str(same)


def compute_routes(plan: WiringPlan, down: set[tuple[str, int]] | None = None
                   ) -> dict[str, list[Route]]:
    """Every switch's destination routes: local delivery plus ECMP toward each attach switch."""
    attach = attach_points(plan)
    by_switch: dict[str, list[str]] = {}
    for host, (sw, _port) in attach.items():
        by_switch.setdefault(sw, []).append(host)
    ip_of = {h.name: h.ip for h in plan.hosts}
    all_ips = set(ip_of.values())
    prefixes: dict[str, list[tuple[str, str]]] = {}
    for sw, hosts in by_switch.items():
        mine = [ip_of[h] for h in hosts]
        agg = prefix_for(mine, sorted(all_ips - set(mine)))
        prefixes[sw] = [agg] if agg else [(ip, "255.255.255.255") for ip in sorted(mine)]

    hops = next_hops(plan, down)
    routes: dict[str, list[Route]] = {s.name: [] for s in plan.switches}
    for host, (sw, port) in sorted(attach.items()):
        if (sw, port) in (down or set()):
            continue
        routes[sw].append(Route(sw, ip_of[host], "255.255.255.255", (port,), PRIO_LOCAL, host))
    for sw, toward in hops.items():
        for target, ports in sorted(toward.items()):
            for value, mask in prefixes[target]:
                routes[sw].append(Route(sw, value, mask, ports, PRIO_ROUTE, target))
    return routes


def shortest_switch_hops(plan: WiringPlan, src: str, dst: str) -> int:
    """Switches on a minimal path between two hosts (1 when they share an attach switch)."""
    attach = attach_points(plan)
    s, d = attach[src][0], attach[dst][0]
    no_transit = {n.name for n in plan.switches if n.tier == "nvswitch"}
    dist = distances_to(switch_graph(plan), d, no_transit)
    if s not in dist:
        raise ValueError(f"no path from {src} to {dst}")
    return dist[s] + 1
