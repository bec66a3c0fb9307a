"""Which machine runs each node of a cluster fabric: pure, no SSH, no Mininet.

``place(plan, servers)`` keeps every rail block (a pod for a fat-tree) on one machine, so
only leaf-spine lanes cross machines, and puts each shared-tier switch where it cuts the
fewest lanes; ``crossing_links`` lists the lanes that become tunnels, ``with_servers``
records each node's machine in the plan (``Node.server``). It is apart from
``testbed.shell.cluster`` (the bring-up) because it is plain graph arithmetic over a wiring
plan, unit-tested by brute force, with no root or network needed. ``testbed.shell.cluster``
re-exports every name.
"""

from __future__ import annotations

import copy
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from vocab.plan import Link, WiringPlan
from vocab.validate import items

#: The loc keys that name a group of nodes that must stay on one machine.
_UNIT_KEYS = ("block", "pod")


def _host(name: str) -> None:
    if any(c.isspace() for c in name) or name.startswith("-"):
        raise ValueError(f"{name!r} is not a host name or address")


def parse_servers(value: str | Sequence[str], name: str = "--cluster") -> list[str]:
    """``"h1,h2"`` (or a list) -> ``["h1", "h2"]``; empty, duplicate or odd names are errors
    (``vocab.validate.items``; ``name`` starts the message, "" for argparse)."""
    return items(value, name, check=_host)


def placement_units(plan: WiringPlan) -> dict[str, tuple[str, int | str]]:
    """``node -> unit`` for the nodes that must share a machine; shared-tier nodes are absent.

    A unit is a rail block (``loc["block"]``: its leaves or ToRs and the GPUs of its
    servers) or a fat-tree pod (``loc["pod"]``: edges, aggregations, GPUs). A switch
    with neither that has GPUs attached (``railonly``'s per-server NVLink switch)
    joins its GPUs' unit. Everything else (spines, rail aggregations, cores) is the
    shared tier, placed afterwards.
    """
    units: dict[str, tuple[str, int | str]] = {}
    for n in plan.nodes:
        for key in _UNIT_KEYS:
            if key in n.loc:
                units[n.name] = (key, n.loc[key])
                break
    hosts = {h.name for h in plan.hosts}
    for h in plan.hosts:  # no builder makes such a host; keep a GPU server together anyway
        units.setdefault(h.name, ("server", h.loc.get("server", h.name)))
    for link in plan.links:
        for sw, other in ((link.a, link.b), (link.b, link.a)):
            if sw not in units and other in hosts:
                units[sw] = units[other]
    return units


def place(plan: WiringPlan, servers: Sequence[str]) -> dict[str, str]:
    """Which server runs each node: every node exactly once, only shared-tier links cross.

    The rule, in two steps:

    1. **Units** (``placement_units``: rail blocks, pods) are never split, so a GPU's
       NIC link and its leaf's downlinks stay inside one machine. Units go to
       servers largest first, each to the server with the fewest nodes so far (ties:
       the earlier server), so equal blocks go round-robin: block b -> server b mod N.
    2. **Shared tier** (spines, aggregations, cores), lowest tier first: each goes to
       the server where the fewest of its links to already-placed nodes would cross
       machines; ties go to the server with the fewest shared switches, then the
       fewest nodes, then the earlier one. In ``astral3`` every leaf has the same
       number of lanes to every spine, so each spine's crossing count is the same
       on every server that holds equally many blocks, and the spines spread evenly.
       Spines are not linked to each other, so choosing each one's best server is
       optimal for the given blocks: crossing lanes = lanes x (1 - 1/N) when the
       blocks divide evenly over N servers (the unit tests check it by brute force).

    With more servers than units, the extra servers get only what the second rule
    sends there (usually nothing): a block cannot be split without putting NIC
    links on tunnels. The controller is not a node; it runs on ``servers[0]``.
    """
    servers = parse_servers(servers)
    units = placement_units(plan)
    weight = Counter(units.values())
    load = dict.fromkeys(servers, 0)
    order = {s: i for i, s in enumerate(servers)}
    unit_server: dict[tuple[str, int | str], str] = {}
    for unit in sorted(weight, key=lambda u: (-weight[u], str(u[0]), str(u[1]))):
        target = min(servers, key=lambda s: (load[s], order[s]))
        unit_server[unit] = target
        load[target] += weight[unit]
    placement = {name: unit_server[unit] for name, unit in units.items()}

    neighbours: dict[str, Counter[str]] = defaultdict(Counter)
    for link in plan.links:
        neighbours[link.a][link.b] += 1
        neighbours[link.b][link.a] += 1
    shared_load = dict.fromkeys(servers, 0)
    index = {n.name: i for i, n in enumerate(plan.nodes)}
    shared = sorted((n for n in plan.nodes if n.name not in placement),
                    key=lambda n: (n.level, index[n.name]))
    for node in shared:
        placed = [(peer, count) for peer, count in neighbours[node.name].items()
                  if peer in placement]

        def cost(server: str, placed: list[tuple[str, int]] = placed) -> tuple[int, ...]:
            crossing = sum(c for peer, c in placed if placement[peer] != server)
            return (crossing, shared_load[server], load[server], order[server])

        target = min(servers, key=cost)
        placement[node.name] = target
        shared_load[target] += 1
        load[target] += 1
    return placement


def crossing_links(plan: WiringPlan, placement: dict[str, str]) -> list[Link]:
    """The links whose two ends run on different servers (each one becomes a tunnel)."""
    missing = [n.name for n in plan.nodes if n.name not in placement]
    if missing:
        raise ValueError(f"placement has no server for {missing[:3]}")
    return [ln for ln in plan.links if placement[ln.a] != placement[ln.b]]


def placement_summary(plan: WiringPlan, placement: dict[str, str]) -> dict[str, Any]:
    """Per server: GPUs, switches, interfaces; crossing links by kind. For logs and docs."""
    per: dict[str, dict[str, int]] = {}
    for n in plan.nodes:
        row = per.setdefault(placement[n.name], {"gpus": 0, "switches": 0, "interfaces": 0})
        row["gpus" if n.kind == "host" else "switches"] += 1
    for ln in plan.links:
        per[placement[ln.a]]["interfaces"] += 1
        per[placement[ln.b]]["interfaces"] += 1
    crossing = crossing_links(plan, placement)
    return {"servers": per, "crossing": len(crossing),
            "crossing_by_kind": dict(Counter(ln.kind for ln in crossing)),
            "links": len(plan.links)}


def with_servers(plan: WiringPlan, placement: dict[str, str]) -> WiringPlan:
    """A copy of ``plan`` whose nodes record their server (``Node.server``)."""
    crossing_links(plan, placement)  # every node placed
    out = copy.deepcopy(plan)
    for n in out.nodes:
        n.server = placement[n.name]
    return out
