"""Per-rail two-tier networks with no switch across rails; cross-rail traffic relays over NVLink.

Each rail is its own leaf-spine network. Traffic to a GPU on another rail is relayed
inside the source server over NVLink to the GPU on the destination's rail; the NVLink
domain is a per-server switch (``nvsN``) with its own rate.
"""

from __future__ import annotations

from typing import Any

from testbed.fabricspec import (
    Builder,
    CostSpec,
    Fabric,
    FabricSpec,
    Infeasible,
    bisection_gbps,
    check_layout,
    check_radix,
    count_nic_lanes,
    count_radix,
    fill_leaf,
    largest_divisor_at_most,
    leaf_uplink_lanes,
    nic_lanes,
    params_of,
    rail_ip,
    uplink_lanes,
)
from vocab.plan import WiringPlan

ORDER = 30  # where it lists among the topologies (vocab.plugins.listing_key)
#: the FabricSpec fields read beyond the common ones (any other set is an error)
OPTIONS = ("servers_per_block", "lanes_per_uplink", "oversubscription", "spines",
           "nvlink_gbps")
BLOCKS = True
BISECTION = False


def rules(spec: FabricSpec, emulated: bool = True) -> int:
    """The design's rules on a spec: rail spines per rail (0 with one block: a rail is
    one leaf), or the ValueError saying why not. ``emulated=False`` (the cost model)
    leaves out the emulator's addressing limits."""
    check_layout(spec, emulated)
    if spec.blocks == 1:
        if spec.spines:
            raise ValueError(f"spines={spec.spines}: with one block a rail is one leaf and "
                             "railonly has no spines; leave spines unset")
        check_radix(spec, "rail leaf", spec.servers_per_block * nic_lanes(spec))
        return 0
    up_lanes = leaf_uplink_lanes(spec)
    leaf_ports = up_lanes // spec.lanes_per_uplink
    spines = spec.spines or leaf_ports
    if leaf_ports % spines:
        raise ValueError(f"spines={spines} must divide the {leaf_ports} uplink ports of a "
                         "rail leaf")
    check_radix(spec, "rail leaf", spec.servers_per_block * nic_lanes(spec) + up_lanes)
    check_radix(spec, "rail spine", spec.blocks * (leaf_ports // spines) * spec.lanes_per_uplink)
    return spines


def build(spec: FabricSpec, name: str = "railonly") -> WiringPlan:
    """The wiring plan: per-server NVLink switches, rail leaves, per-rail spines."""
    spines = rules(spec)
    L = spec.lanes_per_uplink
    b = Builder(spec, name)
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
            h = b.host(server, gpu, rail_ip(block, gpu, sib), block=block, rail=gpu,
                       server_in_block=sib)
            b.link(h, 0, f"nvs{server}", gpu + 1, "nvlink", spec.nvlink_gbps)
            b.link(f"nvs{server}", spec.gpus + gpu + 1, f"lf{block}r{gpu}", sib + 1, "nic", nic)
    if spines:
        leaf_ports = leaf_uplink_lanes(spec) // L
        per = leaf_ports // spines
        for rail in range(spec.gpus):
            for k in range(spines):
                b.switch(f"rsp{rail}x{k}", "spine", 3, rail, k, rail=rail, index=k)
            for block in range(spec.blocks):
                for p in range(leaf_ports):
                    k, r = p % spines, p // spines
                    b.link(f"lf{block}r{rail}", spec.servers_per_block + p + 1, f"rsp{rail}x{k}",
                           block * per + r + 1, "uplink", L * spec.lane_gbps)
    counts = {
        "blocks": spec.blocks,
        "leaves": spec.blocks * spec.gpus,
        "spines": spines * spec.gpus,
        "nvswitches": spec.servers,
        "shuffle_boxes": 0,
    }
    params = params_of(spec, "servers_per_block", "lane_gbps", "lanes_per_uplink", "radix",
                       "oversubscription", "nvlink_gbps")
    params["spines"] = spines
    notes = ["cross-rail traffic is relayed over NVLink (nvsN) to the GPU on the destination's "
             "rail, then crosses that rail's network"]
    return b.plan(params, counts, notes=notes)


def _fabric(name: str, gpus: int, g: int, d: int, n: int, lanes_per_uplink: int, radix: int,
            os_: float, nic_gbps: float, spines: int) -> Fabric:
    """Closed-form counts: per-rail leaf/spine networks; no switch joins two rails."""
    L = lanes_per_uplink
    servers = gpus // g
    blocks = servers // d
    leaves = blocks * g
    tiers = {"leaf": leaves, "nvswitch": servers}
    links = {"nvlink": gpus, "nic": gpus}
    layout: dict[str, Any] = {"servers_per_block": d, "blocks": blocks}
    if blocks > 1:
        up = uplink_lanes(d, n, os_, L)
        ports = up // L
        if ports % spines:
            raise ValueError(f"spines={spines} must divide the {ports} uplink ports of a rail "
                             "leaf")
        per = ports // spines
        count_radix(radix, "rail leaf", d * n + up)
        count_radix(radix, "rail spine", blocks * per * L)
        uplinks = leaves * ports
        tiers["spine"] = g * spines
        links["uplink"] = uplinks
        layout.update(uplink_ports_per_leaf=ports, spines_per_rail=spines,
                      ports_per_leaf_spine_pair=per)
    else:
        count_radix(radix, "rail leaf", d * n)
        uplinks, spines = 0, 0
        layout.update(spines_per_rail=0)
    network = leaves + g * spines
    return Fabric(
        design=name, gpus=gpus, servers=servers, layout=layout,
        switches_per_tier=tiers, links_per_kind=links,
        switch_lanes_used=gpus * n + 2 * uplinks * L,
        switch_lanes_capacity=network * radix,
        optics=2 * gpus + 2 * uplinks,
        optic_lanes=2 * gpus * n + 2 * uplinks * L,
        fibers=2 * n * gpus + 2 * L * uplinks,
        shuffle_boxes=0,
        # network switches (the NVLink relay is not one): leaf-spine-leaf, one leaf, or
        # none when every GPU is in one server
        max_switch_hops=3 if spines else (1 if servers > 1 else 0),
        bisection_gbps=bisection_gbps(gpus, nic_gbps, os_, blocks),
        nic_lanes=n,
        notes=["cross-rail traffic relays over NVLink inside the server (NVSwitch not priced)"],
    )


def counts(spec: FabricSpec, name: str = "railonly") -> Fabric:
    """Closed-form counts of exactly the plan ``build`` makes from ``spec``; the builder's
    own rules decide what is buildable, so the two cannot disagree."""
    return _fabric(name, spec.gpu_count, spec.gpus, spec.servers_per_block,
                   n=nic_lanes(spec), lanes_per_uplink=spec.lanes_per_uplink,
                   radix=spec.radix, os_=spec.oversubscription, nic_gbps=spec.nic_gbps,
                   spines=rules(spec, emulated=False))


def size(gpus: int, spec: CostSpec, name: str = "railonly") -> Fabric:
    """Sized as a buyer would: one leaf per rail while it holds every server, else leaves
    filled and the fewest rail spines that reach them."""
    n = count_nic_lanes(spec.nic_gbps, spec.lane_gbps)
    g, R, L, os_ = spec.gpus_per_server, spec.radix, spec.lanes_per_uplink, spec.oversubscription
    servers = gpus // g
    common = dict(n=n, lanes_per_uplink=L, radix=R, os_=os_, nic_gbps=spec.nic_gbps)
    if servers * n <= R and not spec.servers_per_block:
        return _fabric(name, gpus, g, servers, spines=0, **common)  # one leaf per rail
    d = fill_leaf(servers, n, spec)
    blocks = servers // d
    ports = uplink_lanes(d, n, os_, L) // L
    per = largest_divisor_at_most(ports, R / (blocks * L))
    if per is None:
        most = (R // L) * d * g
        fits = (f"smaller uplink ports, --lanes-per-uplink <= {R // blocks}, or a larger "
                "radix would fit" if R // blocks >= 1 else
                "even 1-lane uplink ports are too few for them: only a larger radix fits")
        raise Infeasible(
            f"each rail needs {blocks} leaves but a rail spine has {R // L} ports of {L} "
            f"lanes: per-rail two tiers hold at most {most} GPUs ({fits})")
    return _fabric(name, gpus, g, d, spines=ports // per, **common)
