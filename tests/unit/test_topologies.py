"""Fabric builders: every design, over a range of sizes, must produce a sound wiring plan.

Reading guide. All four designs take the same ``FabricSpec`` (real units):

* ``astral3``  GPU NIC i of every server in a block -> leaf i of the block (rail-aligned);
  leaf uplink ports are split lane by lane through optical shuffles so every leaf
  reaches every spine. Two tiers.
* ``rail3``    rail ToRs -> per-rail aggregation switches -> cores. Three tiers.
* ``railonly`` per-rail leaf/spine networks with no switch across rails; each server has
  an NVLink switch (``nvsN``) that relays cross-rail traffic inside the server.
* ``fattree``  the textbook k-ary fat-tree, GPU NICs as hosts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from testbed.fabricspec import FabricSpec, fattree_k_for
from testbed.topologies import TOPOLOGIES, build, describe
from tests.unit.recount import Wiring, recount
from vocab.plan import MAX_INTF_NAME, Link, Node, WiringPlan

# The tier code in a DPID's top 16 bits, spelled out so a change to the codes is noticed.
TIER_CODE = {"leaf": 1, "tor": 1, "edge": 1, "spine": 2, "agg": 2, "core": 3, "nvswitch": 4}

# Spec defaults: 4 servers x 8 GPUs, 2 servers per block, 400G NICs, 200G lanes, 4 lanes per
# uplink port, radix 256 lanes, oversubscription 1. The leaf needs
# servers_per_block * 400 / oversubscription Gb/s upward = 2 * servers_per_block / os lanes.
ASTRAL3 = [
    {},
    dict(servers=2, gpus=1, servers_per_block=2),  # one block, one rail: a single leaf
    dict(servers=4, gpus=2, servers_per_block=4),  # one block, two rails, 2 uplink ports
    dict(servers=16, gpus=4, servers_per_block=2),  # eight blocks
    dict(servers=8, gpus=8, servers_per_block=4, lanes_per_uplink=8),  # 1.6T = 8 x 200G port
    dict(servers=8, gpus=4, servers_per_block=4, oversubscription=2, lanes_per_uplink=2),
    dict(servers=6, gpus=2, servers_per_block=2, lanes_per_uplink=2, spines=2),  # 2 lanes/pair
    dict(servers=8, gpus=2, servers_per_block=8, lanes_per_uplink=4, spines=2),  # 4 lanes/pair
    dict(servers=4, gpus=4, servers_per_block=2, scale=1e-3),
    dict(servers=512, servers_per_block=32, radix=1024),  # 4096 GPUs
]
RAIL3 = [
    {},
    dict(servers=2, gpus=1, servers_per_block=2),
    dict(servers=16, gpus=4, servers_per_block=2),
    dict(servers=8, gpus=2, servers_per_block=4, lanes_per_uplink=2),  # 4 ToR uplink ports
    dict(servers=8, gpus=2, servers_per_block=4, lanes_per_uplink=2, aggs_per_rail=2, cores=2),
    dict(servers=8, gpus=4, servers_per_block=4, oversubscription=2, lanes_per_uplink=2),
    dict(servers=8, gpus=8, servers_per_block=4, lanes_per_uplink=8),
    dict(servers=4, gpus=4, servers_per_block=2, scale=1e-3),
]
RAILONLY = [
    {},
    dict(servers=2, gpus=2, servers_per_block=2),  # one block: no spines at all
    dict(servers=3, gpus=1, servers_per_block=1, lanes_per_uplink=2),  # one GPU per server
    dict(servers=16, gpus=4, servers_per_block=2),
    dict(servers=8, gpus=2, servers_per_block=4, lanes_per_uplink=2),  # 4 leaf uplink ports
    dict(servers=8, gpus=2, servers_per_block=4, lanes_per_uplink=2, spines=2),
    dict(servers=8, gpus=4, servers_per_block=4, oversubscription=2, lanes_per_uplink=2),
    dict(servers=8, gpus=8, servers_per_block=4, lanes_per_uplink=8),
]
FATTREE = [
    {},  # 32 GPUs: auto k = 6
    dict(servers=1, gpus=1),  # one GPU, k = 4
    dict(servers=2, gpus=2),  # fits under one edge switch
    dict(servers=4, gpus=4, k=4),  # exactly k^3/4 = 16 GPUs
    dict(servers=4, gpus=8, k=8),  # k larger than needed
    dict(servers=16, gpus=8),  # 128 GPUs: auto k = 8
    dict(servers=4, gpus=2, scale=1e-3),
]
CASES = ([("astral3", p) for p in ASTRAL3] + [("rail3", p) for p in RAIL3]
         + [("railonly", p) for p in RAILONLY] + [("fattree", p) for p in FATTREE])


def case_id(case: tuple[str, dict[str, Any]]) -> str:
    topology, params = case
    return topology + "".join(f"-{k}={v}" for k, v in params.items())


_plans: dict[str, WiringPlan] = {}


def plan_for(topology: str, params: dict[str, Any]) -> WiringPlan:
    """Build once per module; tests only read the plan."""
    key = case_id((topology, params))
    if key not in _plans:
        _plans[key] = build(topology, **params)
    return _plans[key]


# --- small helpers that read a plan the way a newcomer would --------------------------------
_link_index: dict[int, tuple[WiringPlan, dict[str, list[Link]]]] = {}


def links_of(plan: WiringPlan, node: str) -> list[Link]:
    """The links with an end at ``node`` (indexed once per plan: big plans have 12k links)."""
    cached = _link_index.get(id(plan))
    if cached is None or cached[0] is not plan:
        index: dict[str, list[Link]] = defaultdict(list)
        for x in plan.links:
            index[x.a].append(x)
            index[x.b].append(x)
        cached = _link_index[id(plan)] = (plan, index)
    return cached[1].get(node, [])


def peer(link: Link, node: str) -> str:
    return link.b if link.a == node else link.a


def attach(plan: WiringPlan, host: Node) -> Node:
    """The switch at the other end of a host's one link."""
    (link,) = links_of(plan, host.name)
    return node_named(plan, peer(link, host.name))


def node_named(plan: WiringPlan, name: str) -> Node:
    """``plan.node(name)`` without the linear scan."""
    cached = _nodes.get(id(plan))
    if cached is None or cached[0] is not plan:
        cached = _nodes[id(plan)] = (plan, {n.name: n for n in plan.nodes})
    return cached[1][name]


_nodes: dict[int, tuple[WiringPlan, dict[str, Node]]] = {}


def switches(plan: WiringPlan, tier: str) -> list[Node]:
    return [s for s in plan.switches if s.tier == tier]


def bandwidth(plan: WiringPlan, node: str, kinds: set[str], upward: bool) -> float:
    """Real Gb/s of the node's links of these kinds, going up (node is ``a``) or down."""
    return sum(x.gbps for x in links_of(plan, node)
               if x.kind in kinds and (x.a == node) == upward)


# --- invariants of every design ---------------------------------------------------------------
@pytest.fixture(params=CASES, ids=[case_id(c) for c in CASES])
def case(request: pytest.FixtureRequest) -> tuple[WiringPlan, FabricSpec]:
    topology, params = request.param
    return plan_for(topology, params), FabricSpec(**params)


def test_plan_validates(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, _spec = case
    plan.validate()


def test_one_host_per_gpu(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, spec = case
    assert len(plan.hosts) == spec.servers * spec.gpus
    assert plan.counts["gpus"] == spec.servers * spec.gpus
    assert {h.name for h in plan.hosts} == {
        f"s{s}g{g}" for s in range(spec.servers) for g in range(spec.gpus)}


def test_every_host_has_exactly_one_link_to_a_switch(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, _spec = case
    for host in plan.hosts:
        (link,) = links_of(plan, host.name)
        assert link.a == host.name and link.a_port == 0  # hosts are the lower end, eth0
        assert node_named(plan, link.b).kind == "switch"


def test_link_rates_are_real_rates_times_scale(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, spec = case
    assert plan.scale == spec.scale
    port_gbps = spec.lanes_per_uplink * spec.lane_gbps
    want = {"nic": spec.nic_gbps, "lane": spec.lane_gbps, "nvlink": spec.nvlink_gbps,
            "uplink": spec.nic_gbps if plan.topology == "fattree" else port_gbps}
    for link in plan.links:
        assert link.gbps == want[link.kind], link.name
        assert link.mbps == pytest.approx(link.gbps * 1000 * spec.scale), link.name


def test_identifiers_are_unique(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, _spec = case
    for values in ([n.name for n in plan.nodes], [h.ip for h in plan.hosts],
                   [h.mac for h in plan.hosts], [s.dpid for s in plan.switches]):
        assert None not in values
        assert len(set(values)) == len(values)


def test_dpid_top_bits_name_the_tier(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, _spec = case
    for s in plan.switches:
        assert s.dpid is not None and len(s.dpid) == 16
        assert int(s.dpid, 16) >> 48 == TIER_CODE[s.tier], s.name


def test_mac_spells_the_ip(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, _spec = case
    for h in plan.hosts:
        assert h.ip is not None and h.mac is not None
        assert h.mac.split(":")[2:] == [f"{int(o):02x}" for o in h.ip.split(".")]


def test_interface_names_fit_linux(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, _spec = case
    longest = max(max(len(x.a_intf), len(x.b_intf)) for x in plan.links)
    assert longest <= MAX_INTF_NAME


def test_counts_agree_with_the_plan(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, spec = case
    c = plan.counts
    assert c["servers"] == spec.servers
    assert c["switches"] == len(plan.switches)
    got = recount(Wiring(plan))
    assert c["switches_per_tier"] == got["switches_per_tier"]
    assert c["links"] == len(plan.links)
    assert c["links_per_kind"] == got["links_per_kind"]
    if plan.topology == "astral3":
        # One multi-lane module per leaf uplink port, one per shuffle-box output (every box
        # has L outputs, part-full or not), plus both ends of every NIC cable.
        outputs = c["shuffle_boxes"] * spec.lanes_per_uplink
        assert c["optics"] == (c["leaves"] * c["uplink_ports_per_leaf"] + outputs
                               + 2 * spec.gpu_count)
    else:
        assert c["optics"] == (2 * c["links_per_kind"].get("uplink", 0) + 2 * spec.gpu_count)
        assert c["shuffle_boxes"] == 0 and plan.shuffle is None


def test_ports_are_openflow_numbers(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, _spec = case
    for s, ports in plan.ports().items():
        if node_named(plan, s).kind == "switch":
            assert min(ports) >= 1, s


def test_describe_mentions_every_count(case: tuple[WiringPlan, FabricSpec]) -> None:
    plan, _spec = case
    text = describe(plan)
    assert plan.topology in text
    for key in plan.counts:
        assert key.replace("_", " ") in text


# --- rail-aligned designs ---------------------------------------------------------------------
RAIL_ALIGNED = [c for c in CASES if c[0] in ("astral3", "rail3")]


@pytest.mark.parametrize("topology, params", RAIL_ALIGNED, ids=map(case_id, RAIL_ALIGNED))
def test_nic_i_of_a_server_attaches_to_rail_i_of_its_block(topology: str,
                                                           params: dict[str, Any]) -> None:
    plan, spec = plan_for(topology, params), FabricSpec(**params)
    for h in plan.hosts:
        server, gpu = h.loc["server"], h.loc["gpu"]
        sw = attach(plan, h)
        assert sw.tier in ("leaf", "tor")
        assert sw.loc == {"block": server // spec.servers_per_block, "rail": gpu}, h.name
        # ... and the IP names the same place: 10.block.rail.(server in block + 1)
        assert h.ip == f"10.{server // spec.servers_per_block}.{gpu}." \
                       f"{server % spec.servers_per_block + 1}"


# railonly leaves have uplinks only when there is more than one block.
WITH_UPLINKS = RAIL_ALIGNED + [c for c in CASES
                               if c[0] == "railonly" and FabricSpec(**c[1]).blocks > 1]


@pytest.mark.parametrize("topology, params", WITH_UPLINKS, ids=map(case_id, WITH_UPLINKS))
def test_leaf_uplink_bandwidth_is_downlink_over_oversubscription(topology: str,
                                                                 params: dict[str, Any]) -> None:
    plan, spec = plan_for(topology, params), FabricSpec(**params)
    leaves = [s for s in plan.switches if s.tier in ("leaf", "tor")]
    assert leaves
    for leaf in leaves:
        down = bandwidth(plan, leaf.name, {"nic"}, upward=False)
        up = bandwidth(plan, leaf.name, {"lane", "uplink"}, upward=True)
        assert down == spec.servers_per_block * spec.nic_gbps
        assert up == pytest.approx(down / spec.oversubscription), leaf.name


# --- astral3 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("params", ASTRAL3, ids=[case_id(("astral3", p)) for p in ASTRAL3])
def test_astral3_every_leaf_reaches_every_spine_with_equal_lanes(params: dict[str, Any]) -> None:
    plan = plan_for("astral3", params)
    leaves, spines = switches(plan, "leaf"), switches(plan, "spine")
    lanes = Counter((x.a, x.b) for x in plan.links if x.kind == "lane")
    per_pair = {lanes[(leaf.name, spine.name)] for leaf in leaves for spine in spines}
    assert plan.shuffle is not None
    assert per_pair == {plan.shuffle["lanes_per_leaf_spine_pair"]}
    assert min(per_pair) >= 1
    # lanes only ever run leaf -> spine
    assert all(node_named(plan, b).tier == "spine" for _a, b in lanes)


@pytest.mark.parametrize("params", ASTRAL3, ids=[case_id(("astral3", p)) for p in ASTRAL3])
def test_astral3_counts(params: dict[str, Any]) -> None:
    plan, spec = plan_for("astral3", params), FabricSpec(**params)
    c = plan.counts
    up_lanes = round(spec.servers_per_block * spec.nic_gbps / spec.oversubscription
                     / spec.lane_gbps)
    uplinks = up_lanes // spec.lanes_per_uplink
    leaves = spec.blocks * spec.gpus
    assert c["blocks"] == spec.blocks
    assert c["leaves"] == leaves == len(switches(plan, "leaf"))
    assert c["spines"] == (spec.spines or up_lanes) == len(switches(plan, "spine"))
    assert c["uplink_ports_per_leaf"] == uplinks
    assert c["lanes"] == leaves * up_lanes == c["links_per_kind"]["lane"]
    boxes = {x.info["box"] for x in plan.links if x.kind == "lane"}
    assert c["shuffle_boxes"] == len(boxes) == uplinks * -(-leaves // spec.lanes_per_uplink)
    assert plan.shuffle is not None and plan.shuffle["boxes"] == c["shuffle_boxes"]
    assert c["spines_reached_per_leaf"] == c["spines"]
    assert c["max_switch_hops"] == (3 if leaves > 1 else 1 if spec.gpu_count > 1 else 0)


@pytest.mark.parametrize("params", ASTRAL3, ids=[case_id(("astral3", p)) for p in ASTRAL3])
def test_astral3_lane_links_follow_the_shuffle_table(params: dict[str, Any]) -> None:
    plan, spec = plan_for("astral3", params), FabricSpec(**params)
    assert plan.shuffle is not None
    cols = plan.shuffle["columns"]
    table = {(r["leaf"], r["port"], r["lane"]): r
             for r in (dict(zip(cols, row, strict=True)) for row in plan.shuffle["lanes"])}
    seen = set()
    for x in (x for x in plan.links if x.kind == "lane"):
        leaf = node_named(plan, x.a)
        leaf_index = leaf.loc["block"] * spec.gpus + leaf.loc["rail"]
        row = table[(leaf_index, x.info["uplink"], x.info["lane"])]
        assert x.b == f"spine{row['spine']}" and x.b_port == row["spine_port"]
        assert x.info["box"] == row["box"]
        # Leaf ports: NIC ports 1..servers_per_block, then the lanes, port by port.
        assert x.a_port == (spec.servers_per_block + x.info["uplink"] * spec.lanes_per_uplink
                            + x.info["lane"] + 1)
        seen.add((leaf_index, x.info["uplink"], x.info["lane"]))
    assert seen == set(table)


def test_astral3_large_plan_builds_with_short_interface_names() -> None:
    # 2048 servers x 8 GPUs: spine names reach three digits ("spine127-eth256" is 15).
    plan = build("astral3", servers=2048, servers_per_block=64, radix=1024)
    assert plan.counts["gpus"] == 16384 and plan.counts["spines"] == 128
    longest = max(max(len(x.a_intf), len(x.b_intf)) for x in plan.links)
    assert longest == MAX_INTF_NAME


def test_astral3_shuffle_lets_two_tiers_reach_all_spines() -> None:
    # The headline claim: an 8-lane uplink cabled whole reaches 1 spine; shuffled, 8.
    plan = build("astral3", servers=4, gpus=2, servers_per_block=4, lanes_per_uplink=8)
    assert plan.counts["spines_reached_without_shuffle"] == 1
    assert plan.counts["spines_reached_per_leaf"] == 8
    for leaf in switches(plan, "leaf"):
        assert len({x.b for x in links_of(plan, leaf.name) if x.kind == "lane"}) == 8


# --- rail3 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("params", RAIL3, ids=[case_id(("rail3", p)) for p in RAIL3])
def test_rail3_tiers_and_counts(params: dict[str, Any]) -> None:
    plan, spec = plan_for("rail3", params), FabricSpec(**params)
    tors, aggs, cores = (switches(plan, t) for t in ("tor", "agg", "core"))
    c = plan.counts
    assert (c["tors"], c["aggs"], c["cores"]) == (len(tors), len(aggs), len(cores))
    assert c["tors"] == spec.blocks * spec.gpus
    if spec.aggs_per_rail:
        assert c["aggs"] == spec.gpus * spec.aggs_per_rail
    if spec.cores:
        assert c["cores"] == spec.cores
    # ToR-agg-core-agg-ToR across rails; one rail turns at its aggs (ToR-agg-ToR), and one
    # ToR is the whole fabric
    assert c["max_switch_hops"] == (5 if spec.gpus > 1 else 3 if spec.blocks > 1 else 1)
    for tor in tors:  # a ToR reaches every aggregation switch of its own rail, and only those
        up = {x.b for x in links_of(plan, tor.name) if x.a == tor.name}
        assert up == {a.name for a in aggs if a.loc["rail"] == tor.loc["rail"]}, tor.name
    for agg in aggs:  # an aggregation switch reaches every core; 1:1 above the ToR
        up = [x for x in links_of(plan, agg.name) if x.a == agg.name]
        assert {x.b for x in up} == {c.name for c in cores}, agg.name
        assert bandwidth(plan, agg.name, {"uplink"}, True) == \
            bandwidth(plan, agg.name, {"uplink"}, False)


# --- railonly -----------------------------------------------------------------------------------
@pytest.mark.parametrize("params", RAILONLY, ids=[case_id(("railonly", p)) for p in RAILONLY])
def test_railonly_one_nvswitch_per_server_wired_to_every_rail(params: dict[str, Any]) -> None:
    plan, spec = plan_for("railonly", params), FabricSpec(**params)
    nvs = switches(plan, "nvswitch")
    assert len(nvs) == spec.servers == plan.counts["nvswitches"]
    for sw in nvs:
        server = sw.loc["server"]
        gpus = {peer(x, sw.name) for x in links_of(plan, sw.name) if x.kind == "nvlink"}
        assert gpus == {f"s{server}g{g}" for g in range(spec.gpus)}
        # NIC g of the server leaves the NVLink switch toward rail g of the server's block.
        nics = {x.b_port if x.b == sw.name else x.a_port: node_named(plan, peer(x, sw.name))
                for x in links_of(plan, sw.name) if x.kind == "nic"}
        block = server // spec.servers_per_block
        assert {p: (n.loc["block"], n.loc["rail"]) for p, n in nics.items()} == {
            spec.gpus + g + 1: (block, g) for g in range(spec.gpus)}
    for h in plan.hosts:
        assert attach(plan, h).name == f"nvs{h.loc['server']}"


@pytest.mark.parametrize("params", RAILONLY, ids=[case_id(("railonly", p)) for p in RAILONLY])
def test_railonly_no_switch_joins_two_rails_except_nvswitches(params: dict[str, Any]) -> None:
    plan = plan_for("railonly", params)
    network = {s.name: s for s in plan.switches if s.tier != "nvswitch"}
    for x in plan.links:
        if x.a in network and x.b in network:
            assert network[x.a].loc["rail"] == network[x.b].loc["rail"], x.name
    # Also as a graph: without the NVLink switches, each connected piece is one rail.
    adj: dict[str, set[str]] = defaultdict(set)
    for x in plan.links:
        if x.a in network and x.b in network:
            adj[x.a].add(x.b)
            adj[x.b].add(x.a)
    unseen = set(network)
    while unseen:
        stack = [unseen.pop()]
        rails = set()
        while stack:
            n = stack.pop()
            rails.add(network[n].loc["rail"])
            for m in adj[n] & unseen:
                unseen.discard(m)
                stack.append(m)
        assert len(rails) == 1


@pytest.mark.parametrize("params", RAILONLY, ids=[case_id(("railonly", p)) for p in RAILONLY])
def test_railonly_counts(params: dict[str, Any]) -> None:
    plan, spec = plan_for("railonly", params), FabricSpec(**params)
    c = plan.counts
    spines = switches(plan, "spine")
    assert c["leaves"] == len(switches(plan, "leaf")) == spec.blocks * spec.gpus
    assert c["spines"] == len(spines)
    if spec.blocks == 1:
        assert not spines and c["max_switch_hops"] == (1 if spec.servers > 1 else 0)
    else:
        assert c["max_switch_hops"] == 3
        assert len(spines) % spec.gpus == 0  # the same spine count on every rail
        if spec.spines:
            assert len(spines) == spec.spines * spec.gpus


# --- fattree ------------------------------------------------------------------------------------
@pytest.mark.parametrize("params", FATTREE, ids=[case_id(("fattree", p)) for p in FATTREE])
def test_fattree_sizes_match_k(params: dict[str, Any]) -> None:
    plan, spec = plan_for("fattree", params), FabricSpec(**params)
    k = plan.counts["k"]
    if spec.k:
        assert k == spec.k
    else:  # auto: the smallest even k >= 4 with room for every GPU
        assert k >= 4 and k % 2 == 0 and k ** 3 // 4 >= spec.gpu_count
        assert k == 4 or (k - 2) ** 3 // 4 < spec.gpu_count
    half = k // 2
    edges, aggs, cores = (switches(plan, t) for t in ("edge", "agg", "core"))
    assert (len(edges), len(aggs), len(cores)) == (k * half, k * half, half * half)
    assert len(plan.switches) == 5 * k * k // 4
    assert len(edges) * half == k ** 3 // 4  # host slots: the lower half of each edge's ports
    ports = plan.ports()
    for e in edges:
        for port, (other, _p, _link) in ports[e.name].items():
            lower = node_named(plan, other).kind == "host"
            assert (1 <= port <= half) if lower else (half < port <= k), (e.name, port)
    for s in plan.switches:
        assert len(ports[s.name]) <= k and max(ports[s.name]) <= k, s.name
    for a in aggs:  # every aggregation switch reaches every edge of its pod
        down = {x.a for x in links_of(plan, a.name) if x.b == a.name}
        assert down == {e.name for e in edges if e.loc["pod"] == a.loc["pod"]}
    for c in cores:  # every core reaches exactly one aggregation switch in every pod
        pods = [node_named(plan, x.a).loc["pod"] for x in links_of(plan, c.name)]
        assert sorted(pods) == list(range(k))


@pytest.mark.parametrize("gpus, k", [(1, 4), (16, 4), (17, 6), (54, 6), (55, 8), (128, 8),
                                     (129, 10)])
def test_fattree_k_for(gpus: int, k: int) -> None:
    assert fattree_k_for(gpus) == k


def test_fattree_large_k_builds_with_short_interface_names() -> None:
    plan = build("fattree", k=24)
    assert len(plan.switches) == 5 * 24 * 24 // 4
    assert max(max(len(x.a_intf), len(x.b_intf)) for x in plan.links) <= MAX_INTF_NAME


# --- large plans: names still fit Linux ---------------------------------------------------------
@pytest.mark.parametrize("topology", ["astral3", "rail3", "railonly"])
def test_large_rail_plans_build(topology: str) -> None:
    plan = plan_for(topology, dict(servers=512, servers_per_block=32, radix=1024))
    assert plan.counts["gpus"] == 4096
    assert max(max(len(x.a_intf), len(x.b_intf)) for x in plan.links) <= MAX_INTF_NAME


# --- bad parameters -----------------------------------------------------------------------------
BAD = [
    # (topology, params, the parameter the message must name)
    ("astral3", dict(servers=5, servers_per_block=2), "servers_per_block"),
    ("rail3", dict(servers=5, servers_per_block=2), "servers_per_block"),
    ("railonly", dict(servers=5, servers_per_block=2), "servers_per_block"),
    ("astral3", dict(gpus=0), "gpus"),
    ("rail3", dict(gpus=0), "gpus"),
    ("railonly", dict(gpus=0), "gpus"),
    ("fattree", dict(gpus=0), "gpus"),
    ("astral3", dict(servers=0), "servers"),
    ("astral3", dict(gpus=256), "gpus"),
    ("astral3", dict(radix=4), "radix"),
    ("rail3", dict(radix=4), "radix"),
    ("railonly", dict(radix=4), "radix"),
    ("fattree", dict(radix=4), "radix"),
    ("astral3", dict(servers=64, servers_per_block=32, radix=96), "radix"),  # leaf needs 128
    ("astral3", dict(spines=3), "spines"),  # 3 does not divide a leaf's 4 lanes
    ("astral3", dict(spines=8), "spines"),  # more spines than a leaf has lanes
    ("railonly", dict(spines=3), "spines"),
    ("rail3", dict(servers=8, gpus=2, servers_per_block=4, lanes_per_uplink=2,
                   aggs_per_rail=3), "aggs_per_rail"),
    ("rail3", dict(cores=3), "cores"),
    ("astral3", dict(lanes_per_uplink=8), "lanes_per_uplink"),  # 4 lanes cannot fill 8
    ("astral3", dict(oversubscription=3), "oversubscription"),  # 800/3 Gb/s: not whole lanes
    ("astral3", dict(oversubscription=0), "oversubscription"),
    ("astral3", dict(scale=0), "scale"),
    ("astral3", dict(nic_gbps=-400), "nic_gbps"),
    ("astral3", dict(spines=-1), "spines"),
    ("fattree", dict(k=5), "k"),
    ("fattree", dict(k=4, servers=4, gpus=8), "k"),  # 16 host slots for 32 GPUs
    ("astral3", dict(servers=2.5), "servers"),
    ("astral3", dict(servers="four"), "servers"),
    ("astral3", dict(gpus=None), "gpus"),
    ("fattree", dict(k="6x"), "k"),
    ("astral3", dict(scale="fast"), "scale"),
    ("astral3", dict(radixx=512), "radixx"),
    ("clos", {}, "topology"),
]


@pytest.mark.parametrize("topology, params, name", BAD,
                         ids=[f"{t}-{n}-{i}" for i, (t, _p, n) in enumerate(BAD)])
def test_bad_parameters_raise_value_error_naming_the_parameter(
        topology: str, params: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError) as exc:
        build(topology, **params)
    assert name in str(exc.value)


def test_unknown_topology_lists_the_choices() -> None:
    with pytest.raises(ValueError) as exc:
        build("clos")
    assert "'clos'" in str(exc.value)
    for name in TOPOLOGIES.names():
        assert name in str(exc.value)


def test_string_and_whole_float_parameters_are_accepted() -> None:
    # The CLI passes strings; whole floats are integers.
    plan = build("astral3", servers="4", gpus=2.0, scale="1e-3")
    assert plan.counts["gpus"] == 8
    assert plan.scale == 1e-3
