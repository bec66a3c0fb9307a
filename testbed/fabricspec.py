"""What every topology is built and counted with: ``FabricSpec`` (what to build, in real
units) and its rules, the ``Builder`` a design wires its plan with and the checks it runs,
and the closed-form counting vocabulary of the cost model (``CostSpec``, ``Fabric``). Pure.

Public, and apart from the designs, so a topology module (``testbed/topologies/<name>.py``)
holds only its own rules and imports the rest from here, and so the cost model, the flow
model and the CLI read the spec without importing any design.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from vocab.plan import Link, Node, WiringPlan, dpid_for, mac_for
from vocab.validate import Rule, count, positive


# --- the spec and the builder's helpers ---------------------------------------------------
@dataclass(frozen=True)
class FabricSpec:
    """What to build, in real units. Every builder reads the fields it needs.

    Defaults describe the lab's small default fabric (32 GPUs) with the link
    speeds of a 400G-NIC cluster; ``scale`` maps real Gb/s to emulated Mb/s
    (1e-4: a 400 Gb/s NIC becomes a 40 Mb/s veth).
    """

    servers: int = 4
    # GPUs per server = NICs per server = rails: what users give as ``gpus_per_server``,
    # their ``gpus`` being the GPUs in all (``topologies.fabric_size``)
    gpus: int = 8
    servers_per_block: int = 2  # servers whose NIC i share leaf i; 0 = fill the leaf
    nic_gbps: float = 400.0
    lane_gbps: float = 200.0
    lanes_per_uplink: int = 4  # lanes in one leaf uplink port (800G = 4 x 200G)
    radix: int = 256  # switch capacity in lanes of lane_gbps (51.2T = 256 x 200G)
    oversubscription: float = 1.0  # leaf downlink : uplink bandwidth
    spines: int = 0  # astral3 spines / railonly spines per rail; 0 = one per uplink lane/port
    aggs_per_rail: int = 0  # rail3; 0 = one per ToR uplink port
    cores: int = 0  # rail3; 0 = as many as an aggregation switch has uplink ports
    k: int = 0  # fattree arity; 0 = smallest even k that fits the GPUs
    nvlink_gbps: float = 3600.0  # per GPU, one direction (H100-class NVLink: 450 GB/s)
    scale: float = 1e-4  # emulated Mb/s per real Gb/s is 1000 * scale

    @property
    def gpu_count(self) -> int:
        return self.servers * self.gpus

    @property
    def blocks(self) -> int:
        return self.servers // self.servers_per_block

    def emulated_mbps(self, gbps: float) -> float:
        return round(gbps * 1000.0 * self.scale, 6)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


#: the most GPUs of one server, and the largest fat-tree arity, the emulator addresses
MAX_GPUS_PER_SERVER, MAX_K = 255, 254
#: The rule of each ``FabricSpec`` field (``vocab.validate``): the verbs' flags, the
#: flow model and the builders check the same one. Counts are capped where a larger value
#: would only make a verb churn (the closed-form cost model takes them all; what the
#: emulating builders take is tighter still: ``EMULATED_RULES``); ``scale`` above 1e-2
#: would put even a 100G link above the 1000 Mb/s Mininet can shape.
FABRIC_RULES: dict[str, Rule] = {
    "servers": count(1, 65536),
    "gpus": count(1, 1024),
    "servers_per_block": count(0, 65536),
    "nic_gbps": positive(100_000),
    "lane_gbps": positive(100_000),
    "lanes_per_uplink": count(1, 1024),
    "radix": count(1, 65536),
    "oversubscription": positive(64),
    "spines": count(0, 65536),
    "aggs_per_rail": count(0, 65536),
    "cores": count(0, 65536),
    "k": count(0, 1024),
    "nvlink_gbps": positive(100_000),
    "scale": positive(1e-2),
}
#: where the builders of an emulated fabric take less than ``FABRIC_RULES`` (a server's
#: GPUs and a fat-tree's k are addressed in one octet): the rules of ``topo`` and ``up``,
#: so ``-h`` shows what they accept
EMULATED_RULES: dict[str, Rule] = {**FABRIC_RULES, "gpus": count(1, MAX_GPUS_PER_SERVER),
                                   "k": count(0, MAX_K)}
#: a fabric's GPU count (``model --gpus``, ``cost --gpus``): 16 times the paper's 64K
GPU_COUNT = count(1, 1 << 20)
#: the fastest emulated rate Mininet shapes (it ignores ``bw`` above it)
MAX_EMULATED_MBPS = 1000.0


def fill_servers_per_block(spec: FabricSpec) -> FabricSpec:
    """``spec`` with ``servers_per_block=0`` replaced by the largest block that fills a leaf
    (``fill_leaf``: what a buyer does, and the cost model's sizing); any other spec as is.
    Every verb resolves 0 here, so ``--servers-per-block 0`` means the same fabric in all."""
    if spec.servers_per_block:
        return spec
    check_spec(spec, blocks_given=False)
    cost = CostSpec(gpus_per_server=spec.gpus, nic_gbps=spec.nic_gbps,
                    lane_gbps=spec.lane_gbps, radix=spec.radix,
                    lanes_per_uplink=spec.lanes_per_uplink,
                    oversubscription=spec.oversubscription)
    try:
        d = fill_leaf(spec.servers, count_nic_lanes(spec.nic_gbps, spec.lane_gbps), cost)
    except Infeasible as exc:
        raise ValueError(f"servers_per_block=0 (fill the leaf): {exc}") from None
    return replace(spec, servers_per_block=d)


#: tiers inside a server (the NVLink domain): not network switches, and never transit
IN_SERVER_TIERS = frozenset({"nvswitch"})
#: link kinds inside a server: no transceivers
IN_SERVER_KINDS = frozenset({"nvlink"})
#: the FabricSpec fields every design reads; a module's ``OPTIONS`` names the rest it reads
COMMON_OPTIONS = ("servers", "gpus", "nic_gbps", "lane_gbps", "radix", "scale")


def check_spec(spec: FabricSpec, blocks_given: bool = True) -> None:
    """What no fabric could have, for the builder and the closed-form counts alike: every
    field by its rule (``FABRIC_RULES``), and NICs of whole lanes. ``blocks_given``: a
    builder needs ``servers_per_block`` resolved (``fill_servers_per_block``), not 0."""
    for name, rule in FABRIC_RULES.items():
        rule.check(getattr(spec, name), name)
    if blocks_given and spec.servers_per_block < 1:
        raise ValueError("servers_per_block=0 (fill the leaf) is resolved by "
                         "testbed.topologies (fill_servers_per_block) before building")
    # a port is a whole number of SerDes lanes: switch lanes, optics and fibres count them
    count_nic_lanes(spec.nic_gbps, spec.lane_gbps)


def check_common(spec: FabricSpec) -> None:
    """``check_spec`` plus the emulator's addressing limit on GPUs per server."""
    check_spec(spec)
    if spec.gpus > MAX_GPUS_PER_SERVER:
        raise ValueError(f"gpus_per_server must be <= {MAX_GPUS_PER_SERVER} (got {spec.gpus})")


def check_options(spec: FabricSpec, design: str, options: Iterable[str]) -> None:
    """Refuse a parameter the design does not read, rather than build something else.

    Only a value other than ``FabricSpec``'s default counts as given: the CLI verbs and the
    flow model pass every field, so a default says nothing about what the user asked for.
    """
    used = set(COMMON_OPTIONS) | set(options)
    defaults = FabricSpec()
    unused = [f for f in FabricSpec.field_names()
              if f not in used and getattr(spec, f) != getattr(defaults, f)]
    if unused:
        given = ", ".join(f"{f}={getattr(spec, f):g}" for f in unused)
        # the size as users give it: gpus in all and gpus_per_server (FabricSpec.gpus)
        reads = ", ".join("gpus, gpus_per_server" if f == "gpus" else f
                          for f in FabricSpec.field_names() if f in used)
        raise ValueError(f"{design} does not use {given}; leave "
                         f"{'it' if len(unused) == 1 else 'them'} unset ({design} reads "
                         f"{reads})")


def check_layout(spec: FabricSpec, emulated: bool = True) -> None:
    """Servers grouped in whole blocks, plus what the emulator can address (``emulated``)
    or only what no fabric could have (the cost model's ``emulated=False``)."""
    if emulated:
        check_common(spec)
        check_blocks(spec)
        return
    check_spec(spec)
    if spec.servers % spec.servers_per_block:
        raise ValueError(f"servers={spec.servers} must be a multiple of servers_per_block="
                         f"{spec.servers_per_block}")


def check_blocks(spec: FabricSpec) -> None:
    if spec.servers % spec.servers_per_block:
        raise ValueError(
            f"servers={spec.servers} must be a multiple of servers_per_block="
            f"{spec.servers_per_block} (servers are grouped into blocks that share leaves)"
        )
    if spec.servers_per_block > 254:
        raise ValueError(f"servers_per_block must be <= 254 (got {spec.servers_per_block})")
    if spec.blocks > 256:
        raise ValueError(f"at most 256 blocks are addressable (servers/servers_per_block="
                         f"{spec.blocks})")


def leaf_uplink_lanes(spec: FabricSpec) -> int:
    """Lanes a leaf needs upward to carry its NICs' bandwidth at the oversubscription."""
    need = spec.servers_per_block * spec.nic_gbps / spec.oversubscription
    lanes = need / spec.lane_gbps
    if abs(lanes - round(lanes)) > 1e-9 or round(lanes) < 1:
        raise ValueError(
            f"leaf uplink bandwidth servers_per_block*nic_gbps/oversubscription = {need:g} Gb/s "
            f"must be a whole number (>= 1) of lane_gbps={spec.lane_gbps:g} lanes"
        )
    lanes = round(lanes)
    if lanes % spec.lanes_per_uplink:
        raise ValueError(
            f"the leaf's {lanes} uplink lanes must fill whole uplink ports of "
            f"lanes_per_uplink={spec.lanes_per_uplink}; change servers_per_block, "
            "oversubscription or lanes_per_uplink"
        )
    return lanes


def nic_lanes(spec: FabricSpec) -> int:
    return count_nic_lanes(spec.nic_gbps, spec.lane_gbps)


def check_radix(spec: FabricSpec, what: str, lanes_used: float) -> None:
    if lanes_used > spec.radix:
        raise ValueError(
            f"radix={spec.radix} lanes is too small: each {what} needs {lanes_used:g} lanes of "
            f"{spec.lane_gbps:g}G; raise radix or lower the size"
        )


class Builder:
    """Collects nodes and links; the helpers keep addressing rules in one place."""

    def __init__(self, spec: FabricSpec, topology: str) -> None:
        self.spec = spec
        self.topology = topology
        self.nodes: list[Node] = []
        self.links: list[Link] = []

    def host(self, server: int, gpu: int, ip: str, **loc: int) -> str:
        name = f"s{server}g{gpu}"
        self.nodes.append(Node(name=name, kind="host", tier="gpu", level=0,
                               loc={"server": server, "gpu": gpu, **loc}, ip=ip, mac=mac_for(ip)))
        return name

    def switch(self, name: str, tier: str, level: int, a: int, b: int, **loc: int) -> str:
        self.nodes.append(Node(name=name, kind="switch", tier=tier, level=level, loc=loc,
                               dpid=dpid_for(tier, a, b)))
        return name

    def link(self, a: str, a_port: int, b: str, b_port: int, kind: str, gbps: float,
             **info: object) -> None:
        self.links.append(Link(a=a, a_port=a_port, b=b, b_port=b_port, kind=kind, gbps=gbps,
                               mbps=self.spec.emulated_mbps(gbps), info=dict(info)))

    def plan(self, params: dict[str, object], counts: dict[str, object],
             shuffle: dict[str, object] | None = None, notes: list[str] | None = None
             ) -> WiringPlan:
        """The plan, with the counts every design shares read off its nodes and links.

        ``optics`` and ``max_switch_hops`` come from the wiring, not from the design's
        rules, so a design cannot claim what it did not wire; ``counts`` adds the rest.
        """
        tiers: dict[str, int] = {}
        for n in self.nodes:
            if n.kind == "switch":
                tiers[n.tier] = tiers.get(n.tier, 0) + 1
        kinds: dict[str, int] = {}
        for link in self.links:
            kinds[link.kind] = kinds.get(link.kind, 0) + 1
        base = {
            "gpus": self.spec.gpu_count,
            "servers": self.spec.servers,
            "switches": sum(tiers.values()),
            "switches_per_tier": tiers,
            "links": len(self.links),
            "links_per_kind": kinds,
        }
        base.update(counts)
        base["optics"] = count_optics(self.links)
        base["max_switch_hops"] = max_switch_hops(self.nodes, self.links)
        check_emulated_rates(self.links, self.spec.scale)
        plan = WiringPlan(topology=self.topology, params=params, scale=self.spec.scale,
                          nodes=self.nodes, links=self.links, counts=base, shuffle=shuffle,
                          notes=notes or [])
        plan.validate()
        return plan


def check_emulated_rates(links: Iterable[Link], scale: float) -> None:
    """Refuse a plan whose ``scale`` puts a link above what Mininet shapes (it would ignore
    the rate, and the fabric would run unshaped) or rounds a link's rate to nothing."""
    links = list(links)
    fastest = max(links, key=lambda x: x.gbps, default=None)
    if fastest is not None and fastest.mbps > MAX_EMULATED_MBPS:
        raise ValueError(
            f"scale={scale:g} emulates the {fastest.kind} links ({fastest.gbps:g} Gb/s) at "
            f"{fastest.mbps:g} Mb/s, above the {MAX_EMULATED_MBPS:g} Mb/s Mininet shapes; "
            f"use --scale <= {MAX_EMULATED_MBPS / (fastest.gbps * 1000):.3g}")
    slowest = min(links, key=lambda x: x.gbps, default=None)
    if slowest is not None and slowest.mbps <= 0:
        raise ValueError(f"scale={scale:g} rounds the {slowest.kind} links ({slowest.gbps:g} "
                         "Gb/s) to 0 Mb/s emulated; raise --scale")


def count_optics(links: Iterable[Link]) -> int:
    """Transceiver modules, by the cost model's convention: one at each end of a cable;
    a shuffled lane shares its leaf's uplink-port module and its box output's trunk
    module with the other lanes there (a part-full box still has all its outputs); none
    inside a server."""
    cables = 0
    ports: set[tuple[str, object]] = set()
    trunks: set[tuple[object, object]] = set()
    for x in links:
        if x.kind in IN_SERVER_KINDS:
            continue
        if x.kind == "lane":
            ports.add((x.a, x.info["uplink"]))
            trunks.add((x.info["box"], x.info["box_out"]))
        else:
            cables += 2
    return cables + len(ports) + len(trunks)


def max_switch_hops(nodes: Iterable[Node], links: Iterable[Link]) -> int:
    """The most network switches on any GPU pair's shortest path; 0 without a pair.

    In-server switches (NVLink) are neither counted nor crossed, except the two GPUs' own,
    as the controller routes. Switches with the same neighbours are equally far from
    everything else, so one search per such group is enough (one for all astral3 leaves).
    """
    byname = {n.name: n for n in nodes}
    net: dict[str, set[str]] = {n: set() for n, x in byname.items()
                                if x.kind == "switch" and x.tier not in IN_SERVER_TIERS}
    inner: dict[str, set[str]] = {n: set() for n, x in byname.items()
                                  if x.kind == "switch" and n not in net}
    hosts_at: dict[str, int] = {}
    for x in links:
        a, b = byname[x.a], byname[x.b]
        if a.kind == "host" or b.kind == "host":
            sw = b.name if a.kind == "host" else a.name
            hosts_at[sw] = hosts_at.get(sw, 0) + 1
        elif a.name in net and b.name in net:
            net[a.name].add(b.name)
            net[b.name].add(a.name)
        elif a.name in net or b.name in net:
            inside, outside = (a.name, b.name) if a.name in inner else (b.name, a.name)
            inner[inside].add(outside)
    # where a GPU enters the network: its switch, or every network switch next to its
    # in-server switch
    entry = {t: {t} if t in net else inner[t] for t in hosts_at}
    next_to_inner: dict[str, set[str]] = {}
    for t, outs in inner.items():
        for o in outs:
            next_to_inner.setdefault(o, set()).add(t)
    groups: dict[tuple[object, ...], str] = {}
    for t in hosts_at:
        key = (("net", frozenset(net[t]), frozenset(next_to_inner.get(t, ())))
               if t in net else ("inner", frozenset(entry[t])))
        groups.setdefault(key, t)
    hops = max((1 if t in net else 0 for t, c in hosts_at.items() if c > 1), default=0)
    for r in groups.values():
        dist = {s: 0 for s in entry[r]}
        queue = deque(dist)
        while queue:
            s = queue.popleft()
            for o in net[s]:
                if o not in dist:
                    dist[o] = dist[s] + 1
                    queue.append(o)
        for t in hosts_at:
            if t == r:
                continue
            d = min((dist[b] for b in entry[t] if b in dist), default=None)
            if d is None:
                raise ValueError(f"no path between the GPUs on {r} and those on {t}")
            hops = max(hops, d + 1)
    return hops


def rail_ip(block: int, rail: int, server_in_block: int) -> str:
    return f"10.{block}.{rail}.{server_in_block + 1}"


def params_of(spec: FabricSpec, *names: str) -> dict[str, object]:
    d = asdict(spec)
    keep = ("servers", "gpus", "nic_gbps", "scale", *names)
    return {k: d[k] for k in keep}


def add_rail_hosts(b: Builder, spec: FabricSpec, leaf_name: Callable[[int, int], str],
                    leaf_tier: str) -> None:
    """Rail-aligned edge: NIC i of server s in block B -> leaf (B, i), port s_in_block + 1."""
    for block in range(spec.blocks):
        for rail in range(spec.gpus):
            b.switch(leaf_name(block, rail), leaf_tier, 1, block, rail, block=block, rail=rail)
    for server in range(spec.servers):
        block, sib = divmod(server, spec.servers_per_block)
        for gpu in range(spec.gpus):
            h = b.host(server, gpu, rail_ip(block, gpu, sib), block=block, rail=gpu,
                       server_in_block=sib)
            b.link(h, 0, leaf_name(block, gpu), sib + 1, "nic", spec.nic_gbps)


def fattree_k_for(gpus: int) -> int:
    """Smallest even k >= 4 whose fat-tree (k^3/4 hosts) holds ``gpus`` NICs."""
    k = 4
    while k ** 3 // 4 < gpus:
        k += 2
    return k



# --- counting in closed form (the cost model's vocabulary) --------------------------------
@dataclass(frozen=True)
class CostSpec:
    """What to cost, in real units. Defaults match ``FabricSpec`` so the lab and the model agree.

    ``servers_per_block=0`` lets the model fill every leaf, which is what a buyer does; the
    other structure (spines, aggregation switches, cores, k) is always sized automatically.
    """

    gpus_per_server: int = 8  # = NICs per server = rails (the HB/NVLink domain)
    nic_gbps: float = 400.0
    lane_gbps: float = 200.0
    radix: int = 256  # switch capacity in lanes (51.2 Tb/s = 256 x 200G)
    lanes_per_uplink: int = 4  # lanes in one leaf uplink port (800G = 4 x 200G)
    oversubscription: float = 1.0  # leaf downlink : uplink bandwidth
    servers_per_block: int = 0  # 0 = as many as fill a leaf

    def validate(self) -> None:
        """Reject inputs that no fabric could have, with one clear message: each field by
        the rule of its ``FabricSpec`` namesake (``COST_RULES``)."""
        for name, rule in COST_RULES.items():
            value = getattr(self, name)
            if not isinstance(value, int if rule.whole else (int, float)) \
                    or isinstance(value, bool):
                raise ValueError(f"{name} must be {rule} (got {value!r})")
            rule.check(value, name)
        count_nic_lanes(self.nic_gbps, self.lane_gbps)


#: the rule of each ``CostSpec`` field: its ``FabricSpec`` namesake's (GPUs per server is
#: ``FabricSpec.gpus``), so the cost model and the builders accept the same values
COST_RULES: dict[str, Rule] = {f.name: FABRIC_RULES["gpus" if f.name == "gpus_per_server"
                                                    else f.name] for f in fields(CostSpec)}


class Infeasible(Exception):
    """A design cannot reach the requested size with these parameters (not an input error)."""


@dataclass
class Fabric:
    """Closed-form counts of one fabric. ``layout`` holds the explicit structure chosen."""

    design: str
    gpus: int
    servers: int
    layout: dict[str, Any]
    switches_per_tier: dict[str, int]
    links_per_kind: dict[str, int]
    switch_lanes_used: int
    switch_lanes_capacity: int
    optics: int  # transceiver modules
    optic_lanes: int  # lanes over all modules (prices scale with it)
    fibers: int
    shuffle_boxes: int
    max_switch_hops: int
    bisection_gbps: float
    nic_lanes: int  # lanes of one NIC port (nic_gbps / lane_gbps)
    notes: list[str] = field(default_factory=list)

    @property
    def switches(self) -> int:
        """Network switches (per-server NVLink switches are part of the server)."""
        return sum(c for t, c in self.switches_per_tier.items() if t != "nvswitch")


def count_nic_lanes(nic_gbps: float, lane_gbps: float) -> int:
    """Lanes one NIC port occupies; the model counts whole lanes, so it must divide evenly."""
    n = nic_gbps / lane_gbps
    if abs(n - round(n)) > 1e-9 or round(n) < 1:
        raise ValueError(f"nic_gbps={nic_gbps:g} must be a whole number (>= 1) of "
                         f"lane_gbps={lane_gbps:g} lanes")
    return round(n)


def bisection_gbps(gpus: int, nic_gbps: float, os_: float, blocks: int) -> float:
    """One way between two halves of the servers: half the NICs' rate, cut by the
    oversubscription only when the halves are in different blocks (in one block every
    GPU's peer on its rail is one leaf away); uplinks beyond the NICs (oversubscription
    below 1) add nothing."""
    return gpus * nic_gbps / 2 / (max(os_, 1.0) if blocks > 1 else 1.0)


def whole(x: float) -> int | None:
    return round(x) if abs(x - round(x)) < 1e-9 else None


def divisors(x: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(x) + 1) if x % d == 0]
    return sorted(set(small + [x // d for d in small]))


def largest_divisor_at_most(x: int, bound: float) -> int | None:
    ok = [d for d in divisors(x) if d <= bound]
    return max(ok) if ok else None


def uplink_lanes(d: int, n: int, os_: float, lanes_per_uplink: int) -> int:
    """Leaf uplink lanes for ``d`` servers, by the builder's rule (whole ports of L lanes)."""
    up = whole(d * n / os_)
    if up is None or up < 1:
        raise ValueError(f"leaf uplink bandwidth servers_per_block*nic/oversubscription = "
                         f"{d * n / os_:g} lanes must be a whole number >= 1")
    if up % lanes_per_uplink:
        raise ValueError(f"the leaf's {up} uplink lanes must fill whole uplink ports of "
                         f"lanes_per_uplink={lanes_per_uplink}")
    return up


def count_radix(radix: int, what: str, lanes: float) -> None:
    if lanes > radix:
        raise ValueError(f"radix={radix} lanes is too small: each {what} needs {lanes:g} lanes")


def fill_leaf(servers: int, n: int, spec: CostSpec) -> int:
    """Largest servers-per-block whose NICs and uplinks fit one leaf and divide the servers."""
    L, R, os_ = spec.lanes_per_uplink, spec.radix, spec.oversubscription
    candidates = [spec.servers_per_block] if spec.servers_per_block else \
        range(min(servers, R // n), 0, -1)
    why = ""
    for d in candidates:
        up = whole(d * n / os_)
        if servers % d:
            why = f"servers_per_block={d} does not divide the {servers} servers"
        elif up is None or up < 1 or up % L:
            why = (f"servers_per_block={d} gives {d * n / os_:g} uplink lanes, not whole "
                   f"ports of {L} lanes")
        elif d * n + up > R:
            why = f"servers_per_block={d} needs {d * n + up} lanes per leaf > radix {R}"
        else:
            return d
    if spec.servers_per_block:
        raise Infeasible(why)
    raise Infeasible(f"no servers-per-block fits a {R}-lane leaf with whole {L}-lane uplink "
                     f"ports for {servers} servers (e.g. {why})")


