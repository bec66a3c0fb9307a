"""The three-tier rail-optimized fabric of Astral/Xingmai 2.0: rail ToRs, per-rail aggregation,
a core.

Same-rail traffic turns at the aggregation switches of its rail; cross-rail traffic goes up
to the core. Uplink ports are cabled whole (no shuffle). Past what one aggregation layer
holds, the cost model splits the blocks into pods and groups the cores by aggregation index.
"""

from __future__ import annotations

from testbed.fabricspec import (
    Builder,
    CostSpec,
    Fabric,
    FabricSpec,
    Infeasible,
    add_rail_hosts,
    bisection_gbps,
    check_layout,
    check_radix,
    count_nic_lanes,
    count_radix,
    divisors,
    fill_leaf,
    largest_divisor_at_most,
    leaf_uplink_lanes,
    nic_lanes,
    params_of,
    uplink_lanes,
)
from vocab.plan import WiringPlan

ORDER = 20  # where it lists among the topologies (vocab.plugins.listing_key)
#: the FabricSpec fields read beyond the common ones (any other set is an error)
OPTIONS = ("servers_per_block", "lanes_per_uplink", "oversubscription", "aggs_per_rail", "cores")
BLOCKS = True
BISECTION = False


def rules(spec: FabricSpec, emulated: bool = True) -> tuple[int, int, int]:
    """The design's rules on a spec: (uplink ports per ToR, aggs per rail, cores), or the
    ValueError saying why not. ``emulated=False`` (the cost model) leaves out the
    emulator's addressing limits."""
    check_layout(spec, emulated)
    up_lanes = leaf_uplink_lanes(spec)
    L = spec.lanes_per_uplink
    tor_ports = up_lanes // L
    aggs = spec.aggs_per_rail or tor_ports
    if tor_ports % aggs:
        raise ValueError(f"aggs_per_rail={aggs} must divide the {tor_ports} uplink ports of a ToR")
    agg_down = spec.blocks * (tor_ports // aggs)
    agg_up = agg_down  # 1:1 above the ToR
    cores = spec.cores or agg_up
    if agg_up % cores:
        raise ValueError(f"cores={cores} must divide the {agg_up} uplink ports of an agg switch")
    check_radix(spec, "ToR", spec.servers_per_block * nic_lanes(spec) + up_lanes)
    check_radix(spec, "aggregation switch", (agg_down + agg_up) * L)
    check_radix(spec, "core switch", spec.gpus * aggs * (agg_up // cores) * L)
    return tor_ports, aggs, cores


def build(spec: FabricSpec, name: str = "rail3") -> WiringPlan:
    """The wiring plan: rail ToRs, aggregation switches per rail, cores."""
    tor_ports, aggs, cores = rules(spec)
    L = spec.lanes_per_uplink
    per_tor_agg = tor_ports // aggs
    agg_down = spec.blocks * per_tor_agg
    agg_up = agg_down  # 1:1 above the ToR
    per_agg_core = agg_up // cores

    b = Builder(spec, name)
    add_rail_hosts(b, spec, lambda blk, r: f"tor{blk}r{r}", "tor")
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
    }
    params = params_of(spec, "servers_per_block", "lane_gbps", "lanes_per_uplink", "radix",
                       "oversubscription")
    params.update(aggs_per_rail=aggs, cores=cores)
    return b.plan(params, counts)


def _fabric(name: str, gpus: int, g: int, d: int, n: int, lanes_per_uplink: int, radix: int,
            os_: float, nic_gbps: float, aggs: int, cores_per_group: int, pods: int = 1,
            core_groups: int = 1) -> Fabric:
    """Closed-form counts: rail ToRs, per-(pod, rail) aggregation, cores (grouped by
    aggregation index)."""
    L = lanes_per_uplink
    servers = gpus // g
    blocks = servers // d
    up = uplink_lanes(d, n, os_, L)
    ports = up // L
    if ports % aggs:
        raise ValueError(f"aggs_per_rail={aggs} must divide the {ports} uplink ports of a ToR")
    if blocks % pods or aggs % core_groups:
        raise ValueError("pods must divide the blocks and core groups the aggregation index")
    per_tor_agg = ports // aggs
    agg_down = (blocks // pods) * per_tor_agg
    agg_up = agg_down  # 1:1 above the ToR
    if agg_up % cores_per_group:
        raise ValueError(f"cores={cores_per_group} must divide the {agg_up} uplink ports of "
                         "an agg switch")
    per_agg_core = agg_up // cores_per_group
    count_radix(radix, "ToR", d * n + up)
    count_radix(radix, "aggregation switch", (agg_down + agg_up) * L)
    count_radix(radix, "core switch",
                pods * g * (aggs // core_groups) * per_agg_core * L)
    tors = blocks * g
    n_aggs = pods * g * aggs
    n_cores = core_groups * cores_per_group
    uplinks = tors * ports + n_aggs * agg_up
    return Fabric(
        design=name, gpus=gpus, servers=servers,
        layout={"servers_per_block": d, "blocks": blocks, "uplink_ports_per_tor": ports,
                "pods": pods, "blocks_per_pod": blocks // pods, "aggs_per_rail_per_pod": aggs,
                "core_groups": core_groups, "cores_per_group": cores_per_group,
                "ports_per_agg_core_pair": per_agg_core},
        switches_per_tier={"tor": tors, "agg": n_aggs, "core": n_cores},
        links_per_kind={"nic": gpus, "uplink": uplinks},
        switch_lanes_used=gpus * n + 2 * uplinks * L,
        switch_lanes_capacity=(tors + n_aggs + n_cores) * radix,
        optics=2 * gpus + 2 * uplinks,
        optic_lanes=2 * gpus * n + 2 * uplinks * L,
        fibers=2 * n * gpus + 2 * L * uplinks,
        shuffle_boxes=0,
        # cross-rail or cross-pod: ToR-agg-core-agg-ToR; one rail: ToR-agg-ToR
        max_switch_hops=(5 if g > 1 or pods > 1 else 3 if blocks > 1
                         else 1 if gpus > 1 else 0),
        bisection_gbps=bisection_gbps(gpus, nic_gbps, os_, blocks),
        nic_lanes=n,
    )


def counts(spec: FabricSpec, name: str = "rail3") -> Fabric:
    """Closed-form counts of exactly the plan ``build`` makes from ``spec``; the builder's
    own rules decide what is buildable, so the two cannot disagree."""
    _ports, aggs, cores = rules(spec, emulated=False)
    return _fabric(name, spec.gpu_count, spec.gpus, spec.servers_per_block,
                   n=nic_lanes(spec), lanes_per_uplink=spec.lanes_per_uplink,
                   radix=spec.radix, os_=spec.oversubscription, nic_gbps=spec.nic_gbps,
                   aggs=aggs, cores_per_group=cores)


def size(gpus: int, spec: CostSpec, name: str = "rail3") -> Fabric:
    """Sized as a buyer would: leaves filled; pods and core groups past one aggregation
    layer (folded-Clos core planes)."""
    n = count_nic_lanes(spec.nic_gbps, spec.lane_gbps)
    g, R, L, os_ = spec.gpus_per_server, spec.radix, spec.lanes_per_uplink, spec.oversubscription
    servers = gpus // g
    d = fill_leaf(servers, n, spec)
    blocks = servers // d
    ports = uplink_lanes(d, n, os_, L) // L
    bp = largest_divisor_at_most(blocks, R / (2 * L))
    if bp is None:
        raise Infeasible(f"an aggregation switch needs 2 ports of {L} lanes per block > "
                         f"radix {R}")
    pods = blocks // bp
    t = largest_divisor_at_most(ports, R / (2 * bp * L)) or 1
    aggs = ports // t
    agg_up = bp * t
    cg = next((c for c in divisors(aggs) if pods * g * (aggs // c) * L <= R), None)
    if cg is None:
        raise Infeasible(f"a core must reach one aggregation switch in each of {pods} "
                         f"pod(s) x {g} rails = {pods * g} ports of {L} lanes > radix {R}")
    per = largest_divisor_at_most(agg_up, R / (pods * g * (aggs // cg) * L)) or 1
    fab = _fabric(name, gpus, g, d, n=n, lanes_per_uplink=L, radix=R, os_=os_,
                  nic_gbps=spec.nic_gbps, aggs=aggs, cores_per_group=agg_up // per,
                  pods=pods, core_groups=cg)
    if pods > 1 or cg > 1:
        fab.notes.append(f"{pods} pod(s) of {bp} blocks; cores in {cg} group(s) by "
                         "aggregation index (folded-Clos core planes)")
    return fab
