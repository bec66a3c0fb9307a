"""A plain two-tier leaf-spine: a server's NICs all on one leaf, whole uplink ports to spines.

A worked example of a topology in one file (docs/extending.md): copy it to
``testbed/topologies/leafspine.py`` and ``leafspine`` works in ``astral-lab topo``, ``up``,
``cost`` and ``model``, in ``mn --custom testbed/shell/mntopo.py --topo leafspine`` and in
``build("leafspine")``. The fabric most clusters had before rail-optimized designs: no
rails, no shuffle; ``servers_per_block`` servers share a leaf, and each leaf's uplink
ports (``lanes_per_uplink`` lanes, cabled whole) go round-robin to the spines.
"""

from __future__ import annotations

from testbed.fabricspec import (
    Builder,
    CostSpec,
    Fabric,
    FabricSpec,
    Infeasible,
    bisection_gbps,
    check_blocks,
    check_common,
    check_radix,
    check_spec,
    count_nic_lanes,
    count_radix,
    divisors,
    params_of,
    rail_ip,
    whole,
)
from vocab.plan import WiringPlan

#: the FabricSpec fields read beyond the common ones (servers, gpus, nic_gbps, lane_gbps,
#: radix, scale); setting any other is an error naming it, not a silently ignored option
OPTIONS = ("servers_per_block", "lanes_per_uplink", "oversubscription", "spines")


def _rules(d: int, g: int, n: float, os_: float, L: int, radix: int, leaves: int,
           spines: int, radix_check=count_radix) -> tuple[int, int]:
    """Uplink ports per leaf and per (leaf, spine) pair, or why the fabric cannot exist."""
    up = whole(d * g * n / os_)
    if up is None or up < 1 or up % L:
        raise ValueError(f"a leaf's {d * g} NICs need {d * g * n / os_:g} uplink lanes: not "
                         f"whole ports of lanes_per_uplink={L}")
    ports = up // L
    if ports % (spines or ports):
        raise ValueError(f"spines={spines} must divide the {ports} uplink ports of a leaf")
    per = ports // (spines or ports)
    radix_check(radix, "leaf", d * g * n + up)
    radix_check(radix, "spine", leaves * per * L)
    return ports, per


def build(spec: FabricSpec, name: str = "leafspine") -> WiringPlan:
    """The wiring plan: leaves of ``servers_per_block`` whole servers, spines above."""
    check_common(spec)
    check_blocks(spec)
    leaves, n, L = spec.blocks, spec.nic_gbps / spec.lane_gbps, spec.lanes_per_uplink
    ports, per = _rules(spec.servers_per_block, spec.gpus, n, spec.oversubscription, L,
                        spec.radix, leaves, spec.spines,
                        lambda _r, what, lanes: check_radix(spec, what, lanes))
    spines = ports // per
    b = Builder(spec, name)
    for leaf in range(leaves):
        b.switch(f"lf{leaf}", "leaf", 1, leaf, 0, block=leaf)
    for k in range(spines):
        b.switch(f"spine{k}", "spine", 2, 0, k, index=k)
    for server in range(spec.servers):
        leaf, sib = divmod(server, spec.servers_per_block)
        for gpu in range(spec.gpus):
            h = b.host(server, gpu, rail_ip(leaf, gpu, sib), block=leaf, server_in_block=sib)
            b.link(h, 0, f"lf{leaf}", sib * spec.gpus + gpu + 1, "nic", spec.nic_gbps)
    down = spec.servers_per_block * spec.gpus
    for leaf in range(leaves):
        for p in range(ports):
            k, r = p % spines, p // spines
            b.link(f"lf{leaf}", down + p + 1, f"spine{k}", leaf * per + r + 1, "uplink",
                   L * spec.lane_gbps)
    # optics and max_switch_hops are read off the links by the Builder
    counts = {"blocks": leaves, "leaves": leaves, "spines": spines, "shuffle_boxes": 0}
    params = params_of(spec, "servers_per_block", "lane_gbps", "lanes_per_uplink", "radix",
                       "oversubscription")
    params["spines"] = spines
    return b.plan(params, counts)


def _fabric(name: str, gpus: int, g: int, d: int, n: int, L: int, radix: int, os_: float,
            nic_gbps: float, spines: int) -> Fabric:
    """Closed-form counts of the same fabric (the cost model's view)."""
    leaves = gpus // g // d
    ports, per = _rules(d, g, n, os_, L, radix, leaves, spines)
    spines, uplinks = ports // per, leaves * ports
    return Fabric(
        design=name, gpus=gpus, servers=gpus // g,
        layout={"servers_per_leaf": d, "uplink_ports_per_leaf": ports, "spines": spines},
        switches_per_tier={"leaf": leaves, "spine": spines},
        links_per_kind={"nic": gpus, "uplink": uplinks},
        switch_lanes_used=gpus * n + 2 * uplinks * L,
        switch_lanes_capacity=(leaves + spines) * radix,
        optics=2 * gpus + 2 * uplinks, optic_lanes=2 * gpus * n + 2 * uplinks * L,
        fibers=2 * n * gpus + 2 * L * uplinks, shuffle_boxes=0,
        max_switch_hops=3 if leaves > 1 else (1 if gpus > 1 else 0),
        bisection_gbps=bisection_gbps(gpus, nic_gbps, os_, leaves), nic_lanes=n)


def counts(spec: FabricSpec, name: str = "leafspine") -> Fabric:
    """Closed-form counts of exactly the plan ``build`` makes from ``spec``."""
    check_spec(spec)
    if spec.servers % spec.servers_per_block:
        raise ValueError(f"servers={spec.servers} must be a multiple of servers_per_block="
                         f"{spec.servers_per_block}")
    return _fabric(name, spec.gpu_count, spec.gpus, spec.servers_per_block,
                   count_nic_lanes(spec.nic_gbps, spec.lane_gbps), spec.lanes_per_uplink,
                   spec.radix, spec.oversubscription, spec.nic_gbps, spec.spines)


def size(gpus: int, spec: CostSpec, name: str = "leafspine") -> Fabric:
    """Sized as a buyer would: the most servers a leaf holds, then the fewest spines."""
    g, n = spec.gpus_per_server, count_nic_lanes(spec.nic_gbps, spec.lane_gbps)
    servers = gpus // g
    for d in sorted(divisors(servers), reverse=True):
        if spec.servers_per_block and d != spec.servers_per_block:
            continue
        for spines in divisors(max(1, round(d * g * n / spec.oversubscription))):
            try:
                return _fabric(name, gpus, g, d, n, spec.lanes_per_uplink, spec.radix,
                               spec.oversubscription, spec.nic_gbps, spines)
            except ValueError:
                continue
    raise Infeasible(f"no leaf of {spec.radix} lanes and spine layer holds {gpus} GPUs")
