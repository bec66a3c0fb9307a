"""Fabric builders: a spec in real units in, a ``WiringPlan`` out. Pure, no root.

Four designs, all built from the same ``FabricSpec`` so comparisons are at
equal GPU count and equal NIC speed:

``astral3``
    Astral 3.0's flattened two-tier, single-rail fabric. NIC *i* of every server
    in a block attaches to leaf *i* of that block (rail-aligned). Each leaf's
    uplink ports are split lane by lane by an optical shuffle so every leaf
    reaches every spine: any GPU reaches any other in leaf-spine-leaf.
``rail3``
    The three-tier rail-optimized fabric of Astral/Xingmai 2.0: rail ToRs,
    aggregation switches per rail (same-rail traffic turns there) and a core
    for cross-rail traffic. Uplink ports are cabled whole (no shuffle).
``railonly``
    Per-rail two-tier networks with no switch across rails. Cross-rail traffic is
    relayed inside the source server over NVLink to the GPU on the destination's
    rail; the NVLink domain is a per-server switch (``nvsN``) with its own rate.
``fattree``
    A textbook k-ary fat-tree with the GPU NICs as hosts (a server's NICs on
    consecutive edge ports, as in a cluster that is not rail-optimized).

Switch capacity is given as ``radix`` in SerDes lanes of ``lane_gbps``
(51.2 Tb/s = 256 x 200G), so one number bounds NIC ports, multi-lane uplink
ports and single lanes alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from testbed.plan import Link, Node, WiringPlan, dpid_for, mac_for
from testbed.shuffle import OpticalShuffle


@dataclass(frozen=True)
class FabricSpec:
    """What to build, in real units. Every builder reads the fields it needs.

    Defaults describe the lab's small default fabric (32 GPUs) with the link
    speeds of a 400G-NIC cluster; ``scale`` maps real Gb/s to emulated Mb/s
    (1e-4: a 400 Gb/s NIC becomes a 40 Mb/s veth).
    """

    servers: int = 4
    gpus: int = 8  # GPUs per server = NICs per server = rails
    servers_per_block: int = 2  # servers whose NIC i share leaf i (leaf downlinks)
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


def _check_common(spec: FabricSpec) -> None:
    _positive(spec, "servers", "gpus", "servers_per_block", "lanes_per_uplink", "radix")
    for name in ("nic_gbps", "lane_gbps", "nvlink_gbps", "scale", "oversubscription"):
        if getattr(spec, name) <= 0:
            raise ValueError(f"{name} must be > 0 (got {getattr(spec, name)})")
    for name in ("spines", "aggs_per_rail", "cores", "k"):
        if getattr(spec, name) < 0:
            raise ValueError(f"{name} must be >= 0 (got {getattr(spec, name)}; 0 means auto)")
    if spec.gpus > 255:
        raise ValueError(f"gpus must be <= 255 per server (got {spec.gpus})")


def _check_blocks(spec: FabricSpec) -> None:
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


def _positive(spec: FabricSpec, *names: str) -> None:
    for name in names:
        if getattr(spec, name) < 1:
            raise ValueError(f"{name} must be >= 1 (got {getattr(spec, name)})")


def _leaf_uplink_lanes(spec: FabricSpec) -> int:
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


def _nic_lanes(spec: FabricSpec) -> float:
    return spec.nic_gbps / spec.lane_gbps


def _check_radix(spec: FabricSpec, what: str, lanes_used: float) -> None:
    if lanes_used > spec.radix:
        raise ValueError(
            f"radix={spec.radix} lanes is too small: each {what} needs {lanes_used:g} lanes of "
            f"{spec.lane_gbps:g}G; raise radix or lower the size"
        )


class _Builder:
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
        plan = WiringPlan(topology=self.topology, params=params, scale=self.spec.scale,
                          nodes=self.nodes, links=self.links, counts=base, shuffle=shuffle,
                          notes=notes or [])
        plan.validate()
        return plan


def _rail_ip(block: int, rail: int, server_in_block: int) -> str:
    return f"10.{block}.{rail}.{server_in_block + 1}"


def _params(spec: FabricSpec, *names: str) -> dict[str, object]:
    d = asdict(spec)
    keep = ("servers", "gpus", "nic_gbps", "scale", *names)
    return {k: d[k] for k in keep}


def _add_rail_hosts(b: _Builder, spec: FabricSpec, leaf_name: Callable[[int, int], str],
                    leaf_tier: str) -> None:
    """Rail-aligned edge: NIC i of server s in block B -> leaf (B, i), port s_in_block + 1."""
    for block in range(spec.blocks):
        for rail in range(spec.gpus):
            b.switch(leaf_name(block, rail), leaf_tier, 1, block, rail, block=block, rail=rail)
    for server in range(spec.servers):
        block, sib = divmod(server, spec.servers_per_block)
        for gpu in range(spec.gpus):
            h = b.host(server, gpu, _rail_ip(block, gpu, sib), block=block, rail=gpu,
                       server_in_block=sib)
            b.link(h, 0, leaf_name(block, gpu), sib + 1, "nic", spec.nic_gbps)


# --------------------------------------------------------------------------------------
def build_astral3(spec: FabricSpec) -> WiringPlan:
    """Flattened two-tier rail fabric through optical shuffles (see module docstring)."""
    _check_common(spec)
    _check_blocks(spec)
    up_lanes = _leaf_uplink_lanes(spec)
    uplinks = up_lanes // spec.lanes_per_uplink
    spines = spec.spines or up_lanes
    leaves = spec.blocks * spec.gpus
    if up_lanes % spines:
        raise ValueError(
            f"spines={spines} must divide the {up_lanes} uplink lanes of each leaf so every "
            "leaf reaches every spine evenly"
        )
    shuffle = OpticalShuffle(leaves=leaves, uplinks=uplinks, lanes=spec.lanes_per_uplink,
                             spines=spines)
    shuffle.validate()
    _check_radix(spec, "leaf", spec.servers_per_block * _nic_lanes(spec) + up_lanes)
    _check_radix(spec, "spine", shuffle.spine_ports_used)

    b = _Builder(spec, "astral3")
    _add_rail_hosts(b, spec, lambda blk, r: f"lf{blk}r{r}", "leaf")
    for k in range(spines):
        b.switch(f"spine{k}", "spine", 2, 0, k, index=k)
    for lane in shuffle.table:
        block, rail = divmod(lane.leaf, spec.gpus)
        leaf_port = spec.servers_per_block + lane.port * spec.lanes_per_uplink + lane.lane + 1
        b.link(f"lf{block}r{rail}", leaf_port, f"spine{lane.spine}", lane.spine_port, "lane",
               spec.lane_gbps, uplink=lane.port, lane=lane.lane, box=lane.box,
               box_in=lane.box_in, box_out=lane.box_out)
    counts = {
        "blocks": spec.blocks,
        "leaves": leaves,
        "spines": spines,
        "uplink_ports_per_leaf": uplinks,
        "lanes": len(shuffle.table),
        "shuffle_boxes": shuffle.boxes,
        # one multi-lane module per leaf uplink port and one per spine-side trunk (same count)
        # plus both ends of every NIC cable
        "optics": 2 * leaves * uplinks + 2 * spec.gpu_count,
        "max_switch_hops": 3 if leaves > 1 else 1,
        "spines_reached_per_leaf": spines,
        "spines_reached_without_shuffle": shuffle.spines_reached_without_shuffle(),
    }
    params = _params(spec, "servers_per_block", "lane_gbps", "lanes_per_uplink", "radix",
                     "oversubscription")
    params["spines"] = spines
    return b.plan(params, counts, shuffle=shuffle.to_dict())


def build_rail3(spec: FabricSpec) -> WiringPlan:
    """Three-tier rail-optimized fabric (Astral/Xingmai 2.0): ToR, per-rail agg, core."""
    _check_common(spec)
    _check_blocks(spec)
    up_lanes = _leaf_uplink_lanes(spec)
    L = spec.lanes_per_uplink
    tor_ports = up_lanes // L
    aggs = spec.aggs_per_rail or tor_ports
    if tor_ports % aggs:
        raise ValueError(f"aggs_per_rail={aggs} must divide the {tor_ports} uplink ports of a ToR")
    per_tor_agg = tor_ports // aggs
    agg_down = spec.blocks * per_tor_agg
    agg_up = agg_down  # 1:1 above the ToR
    cores = spec.cores or agg_up
    if agg_up % cores:
        raise ValueError(f"cores={cores} must divide the {agg_up} uplink ports of an agg switch")
    per_agg_core = agg_up // cores
    _check_radix(spec, "ToR", spec.servers_per_block * _nic_lanes(spec) + up_lanes)
    _check_radix(spec, "aggregation switch", (agg_down + agg_up) * L)
    _check_radix(spec, "core switch", spec.gpus * aggs * per_agg_core * L)

    b = _Builder(spec, "rail3")
    _add_rail_hosts(b, spec, lambda blk, r: f"tor{blk}r{r}", "tor")
    port_gbps = L * spec.lane_gbps
    for rail in range(spec.gpus):
        for a in range(aggs):
            b.switch(f"agg{rail}x{a}", "agg", 2, rail, a, rail=rail, index=a)
    for c in range(cores):
        b.switch(f"core{c}", "core", 3, 0, c, index=c)
    for block in range(spec.blocks):
        for rail in range(spec.gpus):
            for p in range(tor_ports):
                a, r = p % aggs, p // aggs
                b.link(f"tor{block}r{rail}", spec.servers_per_block + p + 1, f"agg{rail}x{a}",
                       block * per_tor_agg + r + 1, "uplink", port_gbps)
    for rail in range(spec.gpus):
        for a in range(aggs):
            for p in range(agg_up):
                c, r = p % cores, p // cores
                core_port = (rail * aggs + a) * per_agg_core + r + 1
                b.link(f"agg{rail}x{a}", agg_down + p + 1, f"core{c}", core_port, "uplink",
                       port_gbps)
    counts = {
        "blocks": spec.blocks,
        "tors": spec.blocks * spec.gpus,
        "aggs": spec.gpus * aggs,
        "cores": cores,
        "shuffle_boxes": 0,
        "optics": 2 * len([x for x in b.links if x.kind == "uplink"]) + 2 * spec.gpu_count,
        "max_switch_hops": 5,
    }
    params = _params(spec, "servers_per_block", "lane_gbps", "lanes_per_uplink", "radix",
                     "oversubscription")
    params.update(aggs_per_rail=aggs, cores=cores)
    return b.plan(params, counts)


def build_railonly(spec: FabricSpec) -> WiringPlan:
    """Per-rail two-tier networks; cross-rail traffic relays over NVLink in the server."""
    _check_common(spec)
    _check_blocks(spec)
    L = spec.lanes_per_uplink
    b = _Builder(spec, "railonly")
    nic = spec.nic_gbps
    for block in range(spec.blocks):
        for rail in range(spec.gpus):
            b.switch(f"lf{block}r{rail}", "leaf", 2, block, rail, block=block, rail=rail)
    for server in range(spec.servers):
        b.switch(f"nvs{server}", "nvswitch", 1, server >> 8, server & 0xFF, server=server)
    # GPU -> NVLink switch (port g+1); NVLink switch port gpus+g+1 -> NIC g -> rail leaf g.
    for server in range(spec.servers):
        block, sib = divmod(server, spec.servers_per_block)
        for gpu in range(spec.gpus):
            h = b.host(server, gpu, _rail_ip(block, gpu, sib), block=block, rail=gpu,
                       server_in_block=sib)
            b.link(h, 0, f"nvs{server}", gpu + 1, "nvlink", spec.nvlink_gbps)
            b.link(f"nvs{server}", spec.gpus + gpu + 1, f"lf{block}r{gpu}", sib + 1, "nic", nic)
    spines = 0
    if spec.blocks > 1:
        up_lanes = _leaf_uplink_lanes(spec)
        leaf_ports = up_lanes // L
        spines = spec.spines or leaf_ports
        if leaf_ports % spines:
            raise ValueError(f"spines={spines} must divide the {leaf_ports} uplink ports of a "
                             "rail leaf")
        per = leaf_ports // spines
        _check_radix(spec, "rail leaf", spec.servers_per_block * _nic_lanes(spec) + up_lanes)
        _check_radix(spec, "rail spine", spec.blocks * per * L)
        for rail in range(spec.gpus):
            for k in range(spines):
                b.switch(f"rsp{rail}x{k}", "spine", 3, rail, k, rail=rail, index=k)
            for block in range(spec.blocks):
                for p in range(leaf_ports):
                    k, r = p % spines, p // spines
                    b.link(f"lf{block}r{rail}", spec.servers_per_block + p + 1, f"rsp{rail}x{k}",
                           block * per + r + 1, "uplink", L * spec.lane_gbps)
    else:
        _check_radix(spec, "rail leaf", spec.servers_per_block * _nic_lanes(spec))
    counts = {
        "blocks": spec.blocks,
        "leaves": spec.blocks * spec.gpus,
        "spines": spines * spec.gpus,
        "nvswitches": spec.servers,
        "shuffle_boxes": 0,
        "optics": 2 * len([x for x in b.links if x.kind == "uplink"]) + 2 * spec.gpu_count,
        "max_switch_hops": 3 if spines else 1,  # network switches; NVLink relay not counted
    }
    params = _params(spec, "servers_per_block", "lane_gbps", "lanes_per_uplink", "radix",
                     "oversubscription", "nvlink_gbps")
    params["spines"] = spines
    notes = ["cross-rail traffic is relayed over NVLink (nvsN) to the GPU on the destination's "
             "rail, then crosses that rail's network"]
    return b.plan(params, counts, notes=notes)


def fattree_k_for(gpus: int) -> int:
    """Smallest even k >= 4 whose fat-tree (k^3/4 hosts) holds ``gpus`` NICs."""
    k = 4
    while k ** 3 // 4 < gpus:
        k += 2
    return k


def build_fattree(spec: FabricSpec) -> WiringPlan:
    """Textbook k-ary fat-tree (Al-Fares et al. 2008) with GPU NICs as hosts."""
    _check_common(spec)
    k = spec.k or fattree_k_for(spec.gpu_count)
    if k < 2 or k % 2:
        raise ValueError(f"k must be an even number >= 2 (got {k})")
    if k ** 3 // 4 < spec.gpu_count:
        raise ValueError(f"k={k} fat-tree holds {k ** 3 // 4} hosts, fewer than the "
                         f"{spec.gpu_count} GPUs requested; raise k or use 0 for auto")
    if k > 254:
        raise ValueError(f"k must be <= 254 to keep addresses readable (got {k})")
    _check_radix(spec, "fat-tree switch", k * _nic_lanes(spec))
    half = k // 2
    b = _Builder(spec, "fattree")
    nic = spec.nic_gbps
    for p in range(k):
        for i in range(half):
            b.switch(f"edge{p}x{i}", "edge", 1, p, i, pod=p, index=i)
            b.switch(f"agg{p}x{i}", "agg", 2, p, i, pod=p, index=i)
    for c in range(half * half):
        b.switch(f"core{c}", "core", 3, 0, c, index=c)
    per_pod = half * half
    for n in range(spec.gpu_count):
        server, gpu = divmod(n, spec.gpus)
        pod, rest = divmod(n, per_pod)
        edge, slot = divmod(rest, half)
        h = b.host(server, gpu, f"10.{pod}.{edge}.{slot + 1}", pod=pod, edge=edge, slot=slot)
        b.link(h, 0, f"edge{pod}x{edge}", slot + 1, "nic", nic)
    used_pods = -(-spec.gpu_count // per_pod)
    for p in range(k):
        for e in range(half):
            for a in range(half):
                b.link(f"edge{p}x{e}", half + a + 1, f"agg{p}x{a}", e + 1, "uplink", nic)
        for a in range(half):
            for j in range(half):
                b.link(f"agg{p}x{a}", half + j + 1, f"core{a * half + j}", p + 1, "uplink", nic)
    counts = {
        "k": k,
        "pods": k,
        "pods_with_gpus": used_pods,
        "shuffle_boxes": 0,
        "optics": 2 * len([x for x in b.links if x.kind == "uplink"]) + 2 * spec.gpu_count,
        "max_switch_hops": 5 if spec.gpu_count > per_pod else (3 if spec.gpu_count > half else 1),
    }
    params = _params(spec, "lane_gbps", "radix")
    params["k"] = k
    return b.plan(params, counts)


#: name -> builder; ``astral-lab topo <name>`` and ``mn --topo <name>`` use this.
BUILDERS: dict[str, Callable[[FabricSpec], WiringPlan]] = {
    "astral3": build_astral3,
    "rail3": build_rail3,
    "railonly": build_railonly,
    "fattree": build_fattree,
}


def build(topology: str, **params: object) -> WiringPlan:
    """Build a wiring plan by topology name; unknown names and parameters are clear errors."""
    if topology not in BUILDERS:
        raise ValueError(f"unknown topology {topology!r}; choose one of {', '.join(BUILDERS)}")
    known = set(FabricSpec.field_names())
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    typed: dict[str, object] = {}
    for f in fields(FabricSpec):
        if f.name in params:
            typed[f.name] = _coerce(f.name, params[f.name], type(getattr(FabricSpec(), f.name)))
    return BUILDERS[topology](FabricSpec(**typed))  # type: ignore[arg-type]


def _coerce(name: str, value: object, want: type) -> object:
    try:
        if want is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {'an integer' if want is int else 'a number'} "
                         f"(got {value!r})") from None


def describe(plan: WiringPlan) -> str:
    """The counts table that ``astral-lab topo`` prints."""
    rows = [("topology", plan.topology)]
    for key, value in plan.counts.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        rows.append((key.replace("_", " "), str(value)))
    rates = sorted({(link.kind, link.gbps, link.mbps) for link in plan.links})
    for kind, gbps, mbps in rates:
        rows.append((f"{kind} link", f"{gbps:g} Gb/s real -> {mbps:g} Mb/s emulated"))
    rows.append(("scale", f"{plan.scale:g} (emulated Mb/s = real Gb/s x {1000 * plan.scale:g})"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
