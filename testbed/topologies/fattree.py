"""A textbook k-ary fat-tree (Al-Fares et al. 2008) with the GPU NICs as hosts.

A server's NICs sit on consecutive edge ports, as in a cluster that is not rail-optimized:
the baseline the rail designs are compared with. Every switch has k ports at NIC speed.
"""

from __future__ import annotations

from testbed.fabricspec import (
    MAX_K,
    Builder,
    CostSpec,
    Fabric,
    FabricSpec,
    Infeasible,
    check_common,
    check_radix,
    check_spec,
    count_nic_lanes,
    count_radix,
    fattree_k_for,
    nic_lanes,
    params_of,
)
from vocab.plan import WiringPlan

ORDER = 40  # where it lists among the topologies (vocab.plugins.listing_key)
#: the FabricSpec fields read beyond the common ones: a textbook fat-tree is 1:1, has no
#: blocks, and its links run at NIC speed, so any other field set is an error
OPTIONS = ("k",)
#: hosts hang off edge switches by index, not in rail-aligned blocks
BLOCKS = False
BISECTION = False


def rules(spec: FabricSpec, emulated: bool = True) -> int:
    """The design's rules on a spec: its arity k, or the ValueError saying why not.
    ``emulated=False`` (the cost model) leaves out the emulator's addressing limits."""
    if emulated:
        check_common(spec)
    else:
        check_spec(spec)
    k = spec.k or fattree_k_for(spec.gpu_count)
    if k < 2 or k % 2:
        raise ValueError(f"k must be an even number >= 2 (got {k})")
    if k ** 3 // 4 < spec.gpu_count:
        raise ValueError(f"k={k} fat-tree holds {k ** 3 // 4} hosts, fewer than the "
                         f"{spec.gpu_count} GPUs requested; raise k or use 0 for auto")
    if emulated and k > MAX_K:
        raise ValueError(f"k must be <= {MAX_K} to keep addresses readable (got {k})")
    check_radix(spec, "fat-tree switch", k * nic_lanes(spec))
    return k


def build(spec: FabricSpec, name: str = "fattree") -> WiringPlan:
    """The wiring plan: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores."""
    k = rules(spec)
    half = k // 2
    b = Builder(spec, name)
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
    }
    params = params_of(spec, "lane_gbps", "radix")
    params["k"] = k
    return b.plan(params, counts)


def _fabric(name: str, gpus: int, g: int, n: int, radix: int, nic_gbps: float, k: int
            ) -> Fabric:
    """Closed-form counts: 5k^2/4 switches of k NIC-speed ports."""
    if k < 2 or k % 2:
        raise ValueError(f"k must be an even number >= 2 (got {k})")
    if k ** 3 // 4 < gpus:
        raise ValueError(f"k={k} fat-tree holds {k ** 3 // 4} hosts, fewer than {gpus} GPUs")
    count_radix(radix, "fat-tree switch", k * n)
    half = k // 2
    per_pod = half * half
    uplinks = k ** 3 // 2  # k pods x (k/2)^2 edge-agg + same agg-core
    switches = k * k + per_pod
    return Fabric(
        design=name, gpus=gpus, servers=gpus // g,
        layout={"k": k, "pods": k, "pods_with_gpus": -(-gpus // per_pod),
                "switch_lanes_each": k * n},
        switches_per_tier={"edge": k * half, "agg": k * half, "core": per_pod},
        links_per_kind={"nic": gpus, "uplink": uplinks},
        switch_lanes_used=n * (gpus + 2 * uplinks),
        switch_lanes_capacity=switches * k * n,
        optics=2 * gpus + 2 * uplinks,
        optic_lanes=2 * n * (gpus + uplinks),
        fibers=2 * n * (gpus + uplinks),
        shuffle_boxes=0,
        # GPUs fill edge switches in order: across pods, within one pod, on one edge
        max_switch_hops=(5 if gpus > per_pod else 3 if gpus > half
                         else 1 if gpus > 1 else 0),
        bisection_gbps=min(gpus / 2, k ** 3 / 8) * nic_gbps,
        nic_lanes=n,
    )


def counts(spec: FabricSpec, name: str = "fattree") -> Fabric:
    """Closed-form counts of exactly the plan ``build`` makes from ``spec``; the builder's
    own rules decide what is buildable, so the two cannot disagree."""
    k = rules(spec, emulated=False)
    return _fabric(name, spec.gpu_count, spec.gpus, nic_lanes(spec), spec.radix,
                   spec.nic_gbps, k)


def size(gpus: int, spec: CostSpec, name: str = "fattree") -> Fabric:
    """The smallest k that holds the GPUs, as the builder picks it; built 1:1."""
    n = count_nic_lanes(spec.nic_gbps, spec.lane_gbps)
    R = spec.radix
    k = fattree_k_for(gpus)
    if k * n > R:
        raise Infeasible(f"a k-ary fat-tree for {gpus} GPUs needs k={k} ports of "
                         f"{spec.nic_gbps:g}G = {k * n} lanes per switch > radix {R}")
    fab = _fabric(name, gpus, spec.gpus_per_server, n, R, spec.nic_gbps, k)
    if k * n < R:
        fab.notes.append(f"k={k}: switches of {k} x {spec.nic_gbps:g}G ({k * n} lanes), "
                         f"smaller than the {R}-lane radix")
    # the cost table compares designs on one CostSpec, so what a fat-tree cannot use is
    # said in its row rather than refused
    if spec.oversubscription != 1:
        fab.notes.append("built 1:1 (textbook); oversubscription not applied")
    if spec.servers_per_block:
        fab.notes.append("no blocks (NICs fill edge switches in order); servers_per_block "
                         "not applied")
    if spec.lanes_per_uplink != CostSpec().lanes_per_uplink:
        fab.notes.append(f"every link at NIC speed ({spec.nic_gbps:g}G); lanes_per_uplink "
                         "not applied")
    return fab
