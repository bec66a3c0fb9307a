"""Astral 3.0's flattened two-tier rail fabric: every leaf reaches every spine through shuffles.

NIC *i* of every server in a block attaches to leaf *i* of that block (rail-aligned). Each
leaf's uplink ports are split lane by lane by an optical shuffle (``testbed.shuffle``) so
every leaf reaches every spine: any GPU reaches any other in leaf-spine-leaf. Past what one
spine layer reaches (a spine lane per leaf), the cost model splits the rails into groups.
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
    check_blocks,
    check_common,
    check_radix,
    check_spec,
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
from testbed.shuffle import OpticalShuffle
from vocab.plan import WiringPlan

ORDER = 10  # where it lists among the topologies (vocab.plugins.listing_key)
#: the FabricSpec fields read beyond the common ones (any other set is an error)
OPTIONS = ("servers_per_block", "lanes_per_uplink", "oversubscription", "spines")
#: servers are grouped into blocks whose NIC i shares leaf i (the flow model fills leaves)
BLOCKS = True
#: the flow model's bisection bound between the two halves of the blocks applies
BISECTION = True


def two_tier(spec: FabricSpec, emulated: bool = False) -> tuple[int, int, int]:
    """The design's rules on a spec: (uplink lanes per leaf, spines, leaves), or the
    ValueError the builder gives. ``emulated=False`` leaves out the emulator's addressing
    limits, which is what lets the flow model's 64K-GPU what-if use the same rules."""
    check_spec(spec)
    if emulated:
        check_common(spec)
        check_blocks(spec)
    elif spec.servers % spec.servers_per_block:
        raise ValueError(f"servers={spec.servers} must be a multiple of servers_per_block="
                         f"{spec.servers_per_block} (servers are grouped into blocks that "
                         "share leaves)")
    up_lanes = leaf_uplink_lanes(spec)
    spines = spec.spines or up_lanes
    if up_lanes % spines:
        raise ValueError(
            f"spines={spines} must divide the {up_lanes} uplink lanes of each leaf so every "
            "leaf reaches every spine evenly"
        )
    leaves = spec.servers // spec.servers_per_block * spec.gpus
    check_radix(spec, "leaf", spec.servers_per_block * nic_lanes(spec) + up_lanes)
    check_radix(spec, "spine", leaves * (up_lanes // spines))
    return up_lanes, spines, leaves


def build(spec: FabricSpec, name: str = "astral3") -> WiringPlan:
    """The wiring plan: rail-aligned leaves, lanes through the shuffle boxes, spines."""
    up_lanes, spines, leaves = two_tier(spec, emulated=True)
    uplinks = up_lanes // spec.lanes_per_uplink
    shuffle = OpticalShuffle(leaves=leaves, uplinks=uplinks, lanes=spec.lanes_per_uplink,
                             spines=spines)
    shuffle.validate()

    b = Builder(spec, name)
    add_rail_hosts(b, spec, lambda blk, r: f"lf{blk}r{r}", "leaf")
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
        "spines_reached_per_leaf": spines,
        "spines_reached_without_shuffle": shuffle.spines_reached_without_shuffle(),
    }
    params = params_of(spec, "servers_per_block", "lane_gbps", "lanes_per_uplink", "radix",
                       "oversubscription")
    params["spines"] = spines
    return b.plan(params, counts, shuffle=shuffle.to_dict())


def _fabric(name: str, gpus: int, g: int, d: int, n: int, lanes_per_uplink: int, radix: int,
            os_: float, nic_gbps: float, spines: int, groups: int = 1) -> Fabric:
    """Closed-form counts: rail-aligned leaves, each uplink lane shuffled to a different
    spine of its rail group."""
    L = lanes_per_uplink
    servers = gpus // g
    blocks = servers // d
    up = uplink_lanes(d, n, os_, L)
    ports = up // L
    rails = g // groups
    leaves = blocks * g
    leaves_g = blocks * rails  # leaves one spine layer joins
    if up % spines:
        raise ValueError(f"spines={spines} must divide the {up} uplink lanes of each leaf")
    per = up // spines  # lanes from each leaf to each spine of its group
    count_radix(radix, "leaf", d * n + up)
    count_radix(radix, "spine", leaves_g * per)
    box_columns = -(-leaves_g // L)  # boxes per uplink port index per group (ceil)
    boxes = groups * ports * box_columns
    trunks = boxes * L  # every output of a box is one L-lane trunk to one spine
    lanes = leaves * up
    return Fabric(
        design=name, gpus=gpus, servers=servers,
        layout={"servers_per_block": d, "blocks": blocks, "uplink_lanes_per_leaf": up,
                "uplink_ports_per_leaf": ports, "spines_per_group": spines,
                "lanes_per_leaf_spine_pair": per, "rail_groups": groups,
                "rails_per_group": rails},
        switches_per_tier={"leaf": leaves, "spine": groups * spines},
        links_per_kind={"nic": gpus, "lane": lanes},
        switch_lanes_used=gpus * n + 2 * lanes,
        switch_lanes_capacity=(leaves + groups * spines) * radix,
        optics=2 * gpus + leaves * ports + trunks,
        optic_lanes=2 * gpus * n + leaves * ports * L + trunks * L,
        fibers=2 * n * gpus + 2 * lanes + 2 * L * trunks,
        shuffle_boxes=boxes,
        max_switch_hops=3 if leaves_g > 1 else (1 if gpus > 1 else 0),
        bisection_gbps=bisection_gbps(gpus, nic_gbps, os_, blocks),
        nic_lanes=n,
    )


def counts(spec: FabricSpec, name: str = "astral3") -> Fabric:
    """Closed-form counts of exactly the plan ``build`` makes from ``spec``; the builder's
    own rules (``two_tier``) decide what is buildable, so the two cannot disagree."""
    _up, spines, _leaves = two_tier(spec)
    return _fabric(name, spec.gpu_count, spec.gpus, spec.servers_per_block,
                   n=nic_lanes(spec), lanes_per_uplink=spec.lanes_per_uplink,
                   radix=spec.radix, os_=spec.oversubscription, nic_gbps=spec.nic_gbps,
                   spines=spines)


def size(gpus: int, spec: CostSpec, name: str = "astral3") -> Fabric:
    """Sized as a buyer would: leaves filled, fewest spines, rail groups past one layer."""
    n = count_nic_lanes(spec.nic_gbps, spec.lane_gbps)
    g, R, L, os_ = spec.gpus_per_server, spec.radix, spec.lanes_per_uplink, spec.oversubscription
    servers = gpus // g
    d = fill_leaf(servers, n, spec)
    blocks = servers // d
    up = uplink_lanes(d, n, os_, L)
    groups = next((G for G in divisors(g) if blocks * (g // G) <= R), None)
    if groups is None:
        raise Infeasible(
            f"{blocks} blocks need {blocks} leaves per rail, but a spine has {R} lanes and "
            f"reaches at most {R} leaves even with one rail per group: two tiers hold at "
            f"most {R * d * g} GPUs at this radix (raise radix or oversubscription)")
    leaves_g = blocks * (g // groups)
    per = largest_divisor_at_most(up, R / leaves_g) or 1
    fab = _fabric(name, gpus, g, d, n=n, lanes_per_uplink=L, radix=R, os_=os_,
                  nic_gbps=spec.nic_gbps, spines=up // per, groups=groups)
    if groups > 1:
        fab.notes.append(
            f"{groups} rail groups x {g // groups} rails: one spine layer reaches at most "
            f"{R} leaves and {blocks * g} are needed; cross-group traffic relays over "
            "NVLink (as railonly)")
    return fab
