"""Routing, as the switches see it: real OpenFlow messages applied to a fake fabric.

Reading guide. ``compute_routes`` turns a wiring plan into per-switch routes (local
delivery plus shortest-path ECMP toward every attach switch); ``switch_program`` turns
one switch's routes into the os-ken messages the controller sends; ``FakeFabric`` applies
those very messages to in-memory tables wired as the plan says and traces a packet
through them. A select group forks the trace, so one trace returns every path ECMP can
pick, and each one must be loop-free, minimal and end at the destination.

Both OpenFlow versions the controller speaks are exercised: 1.3 (version 4) and 1.5
(version 6, where select groups also carry the "hash these fields" property).
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

import pytest

from controllers.flowtable import (
    COOKIE_ROUTE,
    DEFAULT_SELECT_METHOD,
    ETH_ARP,
    ETH_IPV4,
    FF_GROUP_BASE,
    OFPGC_ADD_OR_MOD,
)
from controllers.routing import (
    PRIO_LOCAL,
    PRIO_MISS,
    PRIO_ROUTE,
    attach_points,
    compute_routes,
    ip_int,
    prefix_for,
    shortest_switch_hops,
)
from controllers.shell.ofmsgs import (
    HASH_FIELDS,
    NTR_VENDOR_ID,
    NTRT_SELECTION_METHOD,
    group_mod,
    protocol,
    switch_program,
)
from testbed.topologies import build
from tests.unit.fabrics import FABRICS, plan_of
from tests.unit.fakeof import FakeFabric, FakeSwitch
from vocab.plan import Link, Node, WiringPlan, dpid_for, mac_for

OF13, OF15 = 4, 6
VERSIONS = [pytest.param(OF13, id="of13"), pytest.param(OF15, id="of15")]

def program(plan: WiringPlan, version: int,
            down: frozenset[tuple[str, int]] = frozenset()) -> FakeFabric:
    """What the controller does on connect, applied to a fake fabric."""
    routes = compute_routes(plan, set(down))
    fabric = FakeFabric(plan)
    dp = protocol(version)
    for sw in plan.switches:
        fabric.apply(sw.name, switch_program(dp, routes[sw.name]))
    return fabric


@cache
def fabric_of(name: str, version: int) -> FakeFabric:
    return program(plan_of(name), version)


def host_pairs(plan: WiringPlan) -> list[tuple[Node, Node]]:
    return [(s, d) for s in plan.hosts for d in plan.hosts if s is not d]


def trace(fabric: FakeFabric, src: Node, dst: Node, eth_type: int = ETH_IPV4) -> list[list[str]]:
    assert dst.ip is not None
    return fabric.trace(src.name, fabric.packet(src.name, dst.ip, eth_type))


# --- every pair, every path ----------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", FABRICS)
def test_every_pair_reaches_its_destination_by_shortest_paths(name: str, version: int) -> None:
    plan, fabric = plan_of(name), fabric_of(name, version)
    hops: dict[tuple[str, str], int] = {}
    attach = attach_points(plan)
    problems = []
    for src, dst in host_pairs(plan):
        key = (attach[src.name][0], attach[dst.name][0])
        if key not in hops:
            hops[key] = shortest_switch_hops(plan, src.name, dst.name)
        for eth_type in (ETH_IPV4, ETH_ARP):
            paths = trace(fabric, src, dst, eth_type)  # raises LoopError on any loop
            assert paths, (src.name, dst.name)
            for path in paths:
                if path[-1] != dst.name or len(path) - 2 != hops[key]:
                    problems.append((hex(eth_type), path, hops[key]))
    assert not problems, problems[:5]


@pytest.mark.parametrize("name, same_attach, same_group, other", [
    # switches crossed by a minimal path: same attach switch / same rail-block-pod / else
    ("astral3-default", 1, 3, 3),  # same leaf; any other leaf: leaf-spine-leaf
    ("rail3", 1, 3, 5),  # same ToR; same rail (turn at agg); cross-rail via core
    ("railonly", 1, 3, 5),  # same server; same block; other block via a rail spine
    ("fattree-3pods", 1, 3, 5),  # same edge; same pod; other pod via core
])
def test_shortest_switch_hops_by_location(name: str, same_attach: int, same_group: int,
                                          other: int) -> None:
    plan = plan_of(name)
    group_key = {"astral3": "block", "rail3": "rail", "railonly": "block", "fattree": "pod"}[
        plan.topology]
    attach = attach_points(plan)
    for src, dst in host_pairs(plan):
        if attach[src.name][0] == attach[dst.name][0]:
            want = same_attach
        elif src.loc[group_key] == dst.loc[group_key] or plan.topology == "astral3":
            want = same_group
        else:
            want = other
        assert shortest_switch_hops(plan, src.name, dst.name) == want, (src.name, dst.name)


def test_unknown_destinations_are_dropped_at_the_first_switch() -> None:
    fabric = fabric_of("astral3", OF15)
    pkt = fabric.packet("s0g0", "10.200.0.1")
    assert fabric.trace("s0g0", pkt) == [["s0g0", "lf0r0", "DROP"]]


def test_reprogramming_a_fabric_replaces_its_program() -> None:
    """A reconnecting switch gets its whole program again: wipe first, then re-add."""
    plan = plan_of("astral3")
    fabric = program(plan, OF15)
    routes = compute_routes(plan)
    for sw in plan.switches:  # would raise "group already exists" without the wipe
        fabric.apply(sw.name, switch_program(protocol(OF15), routes[sw.name]))
    assert len(fabric.switches["lf0r0"].flows) == len(fabric_of("astral3", OF15)
                                                      .switches["lf0r0"].flows)
    src, dst = plan.node("s0g0"), plan.node("s3g1")
    assert all(p[-1] == dst.name for p in trace(fabric, src, dst))


# --- ECMP -----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["astral3", "astral3-2spines", "astral3-1block",
                                  "astral3-default"])
def test_astral3_cross_leaf_traffic_spreads_over_every_spine(name: str, version: int) -> None:
    plan, fabric = plan_of(name), fabric_of(name, version)
    spines = {s.name for s in plan.switches if s.tier == "spine"}
    attach = attach_points(plan)
    for src, dst in host_pairs(plan):
        paths = trace(fabric, src, dst)
        distinct = {tuple(p) for p in paths}
        if attach[src.name][0] == attach[dst.name][0]:
            assert len(distinct) == 1
            continue
        assert len(distinct) == len(spines), (src.name, dst.name)
        assert {p[2] for p in distinct} == spines  # leaf, spine, leaf: one path per spine


@pytest.mark.parametrize("version", VERSIONS)
def test_fattree_ecmp_fans_out_like_the_textbook(version: int) -> None:
    plan, fabric = plan_of("fattree"), fabric_of("fattree", version)
    half = plan.counts["k"] // 2
    cases = {}
    for src, dst in host_pairs(plan):
        if (src.loc["pod"], src.loc["edge"]) == (dst.loc["pod"], dst.loc["edge"]):
            want = 1
        elif src.loc["pod"] == dst.loc["pod"]:
            want = half  # up to any agg of the pod
        else:
            want = half * half  # up to any agg, then any of its cores
        cases[(src.name, dst.name)] = want
        assert len({tuple(p) for p in trace(fabric, src, dst)}) == want, (src.name, dst.name)
    assert set(cases.values()) == {1, half, half * half}  # all three kinds were seen


@pytest.mark.parametrize("version", VERSIONS)
def test_rail3_cross_rail_traffic_turns_at_a_core(version: int) -> None:
    plan, fabric = plan_of("rail3"), fabric_of("rail3", version)
    aggs_per_rail, cores = plan.params["aggs_per_rail"], plan.params["cores"]
    src, dst = plan.node("s0g0"), plan.node("s0g1")
    paths = {tuple(p) for p in trace(fabric, src, dst)}
    assert len(paths) == aggs_per_rail * cores * aggs_per_rail
    for p in paths:
        assert [plan.node(n).tier for n in p[1:-1]] == ["tor", "agg", "core", "agg", "tor"]


# --- railonly: cross-rail relays through the source server only --------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["railonly", "railonly-1block"])
def test_railonly_cross_rail_relays_over_the_source_servers_nvlink(name: str,
                                                                    version: int) -> None:
    plan, fabric = plan_of(name), fabric_of(name, version)
    tier = {n.name: n.tier for n in plan.nodes}
    crossed = 0
    for src, dst in host_pairs(plan):
        if src.loc["rail"] == dst.loc["rail"]:
            continue
        for eth_type in (ETH_IPV4, ETH_ARP):
            for path in trace(fabric, src, dst, eth_type):
                assert path[1] == f"nvs{src.loc['server']}", path
                assert path[-2] == f"nvs{dst.loc['server']}", path
                middle = path[2:-2]
                assert not [n for n in middle if tier[n] == "nvswitch"], path
                crossed += 1
    assert crossed


@pytest.mark.parametrize("version", VERSIONS)
def test_an_nvlink_switch_never_carries_another_servers_traffic(version: int) -> None:
    """Even when relaying through a third server would be the only way through."""
    plan = build("railonly", servers=3, gpus=2, servers_per_block=3)  # one block, rails 0 and 1
    gpus = 2
    # Server 0 keeps only its rail-0 NIC, server 1 only its rail-1 NIC. The only remaining way
    # between them is leaf r0 -> nvs2 -> leaf r1, a relay by server 2 that real NVLink never does.
    down = frozenset({("nvs0", gpus + 1 + 1), ("nvs1", gpus + 0 + 1)})
    fabric = program(plan, version, down)
    for src, dst in host_pairs(plan):
        servers = {src.loc["server"], dst.loc["server"]}
        for path in trace(fabric, src, dst):
            if servers == {0, 1}:  # no legal path: the source's NVLink switch drops it
                assert path == [src.name, f"nvs{src.loc['server']}", "DROP"], path
            else:
                assert path[-1] == dst.name, path


# --- aggregated routes ------------------------------------------------------------------------
def test_prefix_for() -> None:
    # The bits two IPs share: 10.0.0.1 = ...01 and 10.0.0.2 = ...10 agree above the last two.
    assert prefix_for(["10.0.0.1", "10.0.0.2"], ["10.0.1.1"]) == ("10.0.0.0", "255.255.255.252")
    # ... but that aggregate would also catch 10.0.0.3, so there is none.
    assert prefix_for(["10.0.0.1", "10.0.0.2"], ["10.0.1.1", "10.0.0.3"]) is None
    # One IP: an exact match. Masks need not be contiguous (OpenFlow allows any mask).
    assert prefix_for(["10.0.0.7"], ["10.0.0.6"]) == ("10.0.0.7", "255.255.255.255")
    assert prefix_for(["10.0.0.1", "10.0.1.1"], ["10.0.0.2"]) == ("10.0.0.1", "255.255.254.255")


@pytest.mark.parametrize("name", FABRICS)
def test_every_route_covers_exactly_the_hosts_behind_its_destination(name: str) -> None:
    plan = plan_of(name)
    attach = attach_points(plan)
    ip_of = {h.name: ip_int(h.ip) for h in plan.hosts if h.ip}
    for sw, routes in compute_routes(plan).items():
        for r in routes:
            value, mask = ip_int(r.value), ip_int(r.mask)
            covered = {h for h, ip in ip_of.items() if ip & mask == value}
            if r.priority == PRIO_LOCAL:
                assert covered == {r.dest} and r.ports == (attach[r.dest][1],), r
            else:
                assert r.priority == PRIO_ROUTE
                behind = {h for h, (s, _p) in attach.items() if s == r.dest}
                assert covered and covered <= behind, r
            assert sw == r.switch


def two_leaf_plan() -> WiringPlan:
    """leafA holds 10.0.0.1 and 10.0.0.2, leafB holds 10.0.0.3: no safe aggregate for A."""
    def host(name: str, ip: str) -> Node:
        return Node(name, "host", "gpu", 0, {}, ip=ip, mac=mac_for(ip))

    nodes = [host("h1", "10.0.0.1"), host("h2", "10.0.0.2"), host("h3", "10.0.0.3"),
             Node("leafA", "switch", "leaf", 1, {}, dpid=dpid_for("leaf", 0, 0)),
             Node("leafB", "switch", "leaf", 1, {}, dpid=dpid_for("leaf", 0, 1)),
             Node("spine", "switch", "spine", 2, {}, dpid=dpid_for("spine", 0, 0))]
    links = [Link("h1", 0, "leafA", 1, "nic", 400, 40), Link("h2", 0, "leafA", 2, "nic", 400, 40),
             Link("h3", 0, "leafB", 1, "nic", 400, 40),
             Link("leafA", 3, "spine", 1, "uplink", 800, 80),
             Link("leafB", 3, "spine", 2, "uplink", 800, 80)]
    plan = WiringPlan("hand", {}, 1e-4, nodes, links)
    plan.validate()
    return plan


@pytest.mark.parametrize("version", VERSIONS)
def test_exact_routes_where_no_aggregate_is_safe(version: int) -> None:
    plan = two_leaf_plan()
    toward_a = [r for r in compute_routes(plan)["leafB"] if r.dest == "leafA"]
    assert sorted((r.value, r.mask) for r in toward_a) == [
        ("10.0.0.1", "255.255.255.255"), ("10.0.0.2", "255.255.255.255")]
    toward_b = [r for r in compute_routes(plan)["leafA"] if r.dest == "leafB"]
    assert [(r.value, r.mask) for r in toward_b] == [("10.0.0.3", "255.255.255.255")]
    fabric = program(plan, version)
    for src, dst in host_pairs(plan):
        for eth_type in (ETH_IPV4, ETH_ARP):
            assert trace(fabric, src, dst, eth_type) == [
                [src.name] + _expected_switches(src.name, dst.name) + [dst.name]]


def _expected_switches(src: str, dst: str) -> list[str]:
    leaf = {"h1": "leafA", "h2": "leafA", "h3": "leafB"}
    if leaf[src] == leaf[dst]:
        return [leaf[src]]
    return [leaf[src], "spine", leaf[dst]]


# --- failover: a downed link is routed around ---------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("end", ["leaf", "spine"])
def test_routes_avoid_a_downed_uplink(end: str, version: int) -> None:
    plan = plan_of("astral3")
    # One lane per (leaf, spine) pair here, so "leaf then spine" in a path names one link.
    assert plan.shuffle is not None and plan.shuffle["lanes_per_leaf_spine_pair"] == 1
    lane = next(x for x in plan.links if x.kind == "lane" and x.a == "lf0r0")
    down = (lane.a, lane.a_port) if end == "leaf" else (lane.b, lane.b_port)
    routes = compute_routes(plan, {down})
    assert all(down[1] not in r.ports for r in routes[down[0]])
    fabric = program(plan, version, frozenset({down}))
    problems = []
    for src, dst in host_pairs(plan):
        for eth_type in (ETH_IPV4, ETH_ARP):
            for path in trace(fabric, src, dst, eth_type):
                hops = list(zip(path, path[1:], strict=False))
                uses = (lane.a, lane.b) in hops or (lane.b, lane.a) in hops
                minimal = len(path) - 2 == shortest_switch_hops(plan, src.name, dst.name)
                if path[-1] != dst.name or uses or not minimal:
                    problems.append(path)
    assert not problems, problems[:5]


def test_the_unaffected_fabric_does_use_that_uplink() -> None:
    """The check above can fail: without the fault, traffic does cross lf0r0 -> spine."""
    plan, fabric = plan_of("astral3"), fabric_of("astral3", OF15)
    lane = next(x for x in plan.links if x.kind == "lane" and x.a == "lf0r0")
    src, dst = plan.node("s0g0"), plan.node("s2g0")  # lf0r0 -> lf1r0
    assert any((lane.a, lane.b) in zip(p, p[1:], strict=False) for p in trace(fabric, src, dst))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_downed_nic_port_drops_at_its_leaf_and_nothing_else_breaks(version: int) -> None:
    plan = plan_of("astral3")
    leaf, port = attach_points(plan)["s0g0"]
    fabric = program(plan, version, frozenset({(leaf, port)}))
    for src, dst in host_pairs(plan):
        paths = trace(fabric, src, dst)
        if dst.name == "s0g0":
            assert paths and all(p[-2:] == [leaf, "DROP"] for p in paths)
        else:
            assert all(p[-1] == dst.name for p in paths)


# --- the OpenFlow messages themselves ------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_switch_program_layout(version: int) -> None:
    dp = protocol(version)
    ofp = dp.ofproto
    routes = compute_routes(plan_of("astral3"))["lf0r0"]
    msgs = switch_program(dp, routes)
    kinds = [type(m).__name__ for m in msgs]
    # wipe flows, wipe groups, then groups, then flows, then the table-miss drop
    assert msgs[0].command == ofp.OFPFC_DELETE and kinds[0] == "OFPFlowMod"
    assert msgs[1].command == ofp.OFPGC_DELETE and msgs[1].group_id == ofp.OFPG_ALL
    groups = [m for m in msgs[2:] if type(m).__name__ == "OFPGroupMod"]
    flows = [m for m in msgs[2:] if type(m).__name__ == "OFPFlowMod"]
    assert kinds == kinds[:2] + ["OFPGroupMod"] * len(groups) + ["OFPFlowMod"] * len(flows)
    ecmp_sets = {r.ports for r in routes if len(r.ports) > 1}
    select = [g for g in groups if g.type == ofp.OFPGT_SELECT]
    failover = [g for g in groups if g.type == ofp.OFPGT_FF]
    assert len(select) == len(ecmp_sets) >= 1
    assert [g.group_id for g in select] == list(range(1, len(select) + 1))
    # ARP uses fast-failover groups over the same port sets, rotated per destination
    assert failover and all(g.group_id >= FF_GROUP_BASE for g in failover)
    ff_sets = {tuple(sorted(b.actions[0].port for b in g.buckets)) for g in failover}
    assert ff_sets == ecmp_sets
    assert len(groups) == len(select) + len(failover)
    assert len(flows) == 2 * len(routes) + 1  # an IPv4 and an ARP entry per route
    by_type = {}
    for f in flows[:-1]:
        eth = dict(f.match._fields2)["eth_type"]
        actions = f.instructions[0].actions
        if type(actions[0]).__name__ == "OFPActionGroup":
            by_type.setdefault(eth, set()).add(actions[0].group_id)
    assert all(gid < FF_GROUP_BASE for gid in by_type[0x0800])  # IPv4 -> ECMP
    assert all(gid >= FF_GROUP_BASE for gid in by_type[0x0806])  # ARP -> failover
    miss = flows[-1]
    assert miss.priority == PRIO_MISS and not miss.instructions
    assert all(f.cookie == COOKIE_ROUTE for f in flows)
    # the same routes always give the same bytes (stable group ids, stable order)
    again = switch_program(protocol(version), routes)
    for a, b in zip(msgs, again, strict=True):
        a.serialize()
        b.serialize()
        assert bytes(a.buf) == bytes(b.buf)


# Wire format (OpenFlow 1.3 section 7.3.4.2, 1.5 section 7.3.4.2) parsed by hand, so the test
# checks the bytes the switch receives rather than os-ken's view of its own objects.
OFPT_GROUP_MOD, OFPGT_SELECT, OFPAT_OUTPUT = 15, 1, 0
OFPGBPT_WEIGHT, OFPGBPT_WATCH_PORT = 0, 1


def _outputs(actions: bytes) -> list[int]:
    ports, off = [], 0
    while off < len(actions):
        a_type, a_len = struct.unpack_from("!HH", actions, off)
        if a_type == OFPAT_OUTPUT:
            ports.append(struct.unpack_from("!I", actions, off + 4)[0])
        off += a_len
    return ports


def parse_group_mod(data: bytes) -> dict[str, Any]:
    version, msg_type, length = struct.unpack_from("!BBH", data, 0)
    assert msg_type == OFPT_GROUP_MOD and length == len(data)
    _cmd, g_type, _pad, group_id = struct.unpack_from("!HBBI", data, 8)
    buckets: list[dict[str, Any]] = []
    props: list[bytes] = []
    if version == OF13:
        off = 16
        while off < length:
            b_len, weight, watch_port, _watch_group = struct.unpack_from("!HHII", data, off)
            buckets.append({"weight": weight, "watch_port": watch_port,
                            "outputs": _outputs(data[off + 16:off + b_len])})
            off += b_len
    else:
        (array_len,) = struct.unpack_from("!H", data, 16)
        off, end = 24, 24 + array_len
        while off < end:
            b_len, actions_len, _bucket_id = struct.unpack_from("!HHI", data, off)
            bucket: dict[str, Any] = {
                "outputs": _outputs(data[off + 8:off + 8 + actions_len])}
            p = off + 8 + actions_len
            while p < off + b_len:
                p_type, p_len = struct.unpack_from("!HH", data, p)
                if p_type == OFPGBPT_WEIGHT:
                    bucket["weight"] = struct.unpack_from("!H", data, p + 4)[0]
                elif p_type == OFPGBPT_WATCH_PORT:
                    bucket["watch_port"] = struct.unpack_from("!I", data, p + 4)[0]
                p += p_len
            buckets.append(bucket)
            off += b_len
        while off < length:  # group properties, each padded to 8 bytes
            (p_len,) = struct.unpack_from("!H", data, off + 2)
            props.append(data[off:off + p_len])
            pad = -p_len % 8
            assert data[off + p_len:off + p_len + pad] == bytes(pad)
            off += p_len + pad
    return {"version": version, "type": g_type, "group_id": group_id, "buckets": buckets,
            "props": props}


def _group_adds(version: int, method: str = DEFAULT_SELECT_METHOD
                ) -> list[tuple[Any, tuple[int, ...]]]:
    """The select group-mods the controller sends lf0r0, with the ports each spreads over."""
    dp = protocol(version)
    routes = compute_routes(plan_of("astral3-default"))["lf0r0"]
    ecmp = list(dict.fromkeys(r.ports for r in routes if len(r.ports) > 1))
    groups = [m for m in switch_program(dp, routes, method=method)
              if type(m).__name__ == "OFPGroupMod" and m.command == OFPGC_ADD_OR_MOD
              and m.type == dp.ofproto.OFPGT_SELECT]
    assert len(groups) == len(ecmp) >= 1
    return list(zip(groups, ecmp, strict=True))


@pytest.mark.parametrize("version", VERSIONS)
def test_select_groups_on_the_wire_have_weight_one_buckets_watching_their_port(
        version: int) -> None:
    for msg, ports in _group_adds(version):
        msg.serialize()
        g = parse_group_mod(bytes(msg.buf))
        assert g["version"] == version and g["type"] == OFPGT_SELECT
        assert [b["outputs"] for b in g["buckets"]] == [[p] for p in ports]
        for b in g["buckets"]:
            assert b["weight"] >= 1  # OVS ignores weight-0 buckets
            assert b["watch_port"] == b["outputs"][0]  # a dead port's bucket is skipped


def test_of13_group_mod_has_no_properties() -> None:
    (msg, _ports), *_ = _group_adds(OF13)
    msg.serialize()
    assert parse_group_mod(bytes(msg.buf))["props"] == []


# OXM header = class 0x8000 (OpenFlow basic) << 16 | field << 9 | payload length (spec 7.2.3.7).
OXM_FIELDS = {"ip_proto": (10, 1), "ipv4_src": (11, 4), "ipv4_dst": (12, 4), "tcp_src": (13, 2),
              "tcp_dst": (14, 2), "udp_src": (15, 2), "udp_dst": (16, 2)}


def test_hash_fields_are_the_right_oxm_headers() -> None:
    # RoCEv2 carries its ECMP entropy in the UDP source port: it must be hashed.
    assert {"ipv4_src", "ipv4_dst", "udp_src", "udp_dst"} <= set(HASH_FIELDS)
    for name, (header, size) in HASH_FIELDS.items():
        field, length = OXM_FIELDS[name]
        assert header == (0x8000 << 16) | (field << 9) | length, name
        assert size == length == header & 0xFF, name


def test_default_select_method_is_dp_hash_without_fields() -> None:
    """dp_hash: OVS hashes the 5-tuple in the datapath and caches one flow per bucket."""
    assert DEFAULT_SELECT_METHOD == "dp_hash"
    for msg, _ports in _group_adds(OF15):
        msg.serialize()
        (prop,) = parse_group_mod(bytes(msg.buf))["props"]
        p_type, p_len, experimenter, exp_type = struct.unpack_from("!HHII", prop, 0)
        assert (p_type, experimenter, exp_type) == (0xFFFF, NTR_VENDOR_ID, NTRT_SELECTION_METHOD)
        assert p_len == len(prop) == 40  # header, pad, name, parameter; no fields
        assert prop[16:32] == b"dp_hash" + bytes(9)
        assert struct.unpack_from("!Q", prop, 32) == (0,)  # algorithm 0: the IP 5-tuple


def test_unknown_select_method_is_refused() -> None:
    with pytest.raises(ValueError, match="select method"):
        _group_adds(OF15, method="round_robin")


def test_of15_group_mod_carries_the_ntr_hash_selection_method() -> None:
    for msg, _ports in _group_adds(OF15, method="hash"):
        msg.serialize()
        (prop,) = parse_group_mod(bytes(msg.buf))["props"]
        p_type, p_len, experimenter, exp_type = struct.unpack_from("!HHII", prop, 0)
        assert p_type == 0xFFFF and experimenter == NTR_VENDOR_ID == 0x154D
        assert exp_type == NTRT_SELECTION_METHOD == 1
        # 12-byte experimenter header, 4 pad, 16-byte method name, 8-byte parameter (40 bytes),
        # then one OXM entry per field: a 4-byte header and an all-ones value that OVS reads as
        # the field's mask. The length counts no trailing padding (OVS insists).
        entries = sum(4 + size for _header, size in HASH_FIELDS.values())
        assert p_len == len(prop) == 40 + entries
        assert prop[12:16] == bytes(4)
        assert prop[16:32] == b"hash" + bytes(12)
        assert struct.unpack_from("!Q", prop, 32) == (0,)
        fields, off = [], 40
        while off < p_len:
            (header,) = struct.unpack_from("!I", prop, off)
            size = header & 0xFF
            fields.append((header, prop[off + 4:off + 4 + size]))
            off += 4 + size
        assert off == p_len
        assert fields == [(header, b"\xff" * size) for header, size in HASH_FIELDS.values()]


def _weighted_group_mod(version: int, weight: int) -> Any:
    dp = protocol(version)
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if version == OF15:
        bucket = parser.OFPBucket(bucket_id=0, actions=[parser.OFPActionOutput(3)], properties=[
            parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=weight)])
        return parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, 1, buckets=[bucket])
    bucket = parser.OFPBucket(weight=weight, watch_port=3, watch_group=ofp.OFPG_ANY,
                              actions=[parser.OFPActionOutput(3)])
    return parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, 1, [bucket])


@pytest.mark.parametrize("version", VERSIONS)
def test_fake_table_rejects_a_weight_zero_bucket(version: int) -> None:
    FakeSwitch("ok").apply(_weighted_group_mod(version, 1))  # the same message, weight 1: fine
    with pytest.raises(ValueError, match="weight-0"):
        FakeSwitch("sw").apply(_weighted_group_mod(version, 0))


@pytest.mark.parametrize("version", VERSIONS)
def test_fake_table_follows_live_buckets_only(version: int) -> None:
    """A select group skips a bucket whose watched port is down, as OVS does."""
    sw = FakeSwitch("sw")
    dp = protocol(version)
    sw.apply(group_mod(dp, 1, (3, 4, 5)))
    match = dp.ofproto_parser.OFPMatch(eth_type=ETH_IPV4, ipv4_dst="10.0.0.1")
    sw.apply(dp.ofproto_parser.OFPFlowMod(
        dp, priority=PRIO_ROUTE, match=match, instructions=[
            dp.ofproto_parser.OFPInstructionActions(
                dp.ofproto.OFPIT_APPLY_ACTIONS, [dp.ofproto_parser.OFPActionGroup(1)])]))
    pkt = {"eth_type": ETH_IPV4, "ipv4_dst": ip_int("10.0.0.1")}
    assert sw.out_ports(pkt) == [3, 4, 5]
    sw.down_ports.add(4)
    assert sw.out_ports(pkt) == [3, 5]
    assert sw.out_ports({**pkt, "ipv4_dst": ip_int("10.0.0.2")}) == []


def test_arp_failover_groups_start_on_different_uplinks() -> None:
    """ARP takes no ECMP hash, so its failover groups are rotated per destination leaf."""
    dp = protocol(OF15)
    routes = compute_routes(plan_of("astral3-default"))["lf0r0"]
    msgs = switch_program(dp, routes)
    ff = {m.group_id: m.buckets[0].actions[0].port for m in msgs
          if type(m).__name__ == "OFPGroupMod" and m.type == dp.ofproto.OFPGT_FF}
    arp_first_ports = [ff[f.instructions[0].actions[0].group_id] for f in msgs
                       if type(f).__name__ == "OFPFlowMod" and f.instructions
                       and dict(f.match._fields2).get("eth_type") == ETH_ARP
                       and type(f.instructions[0].actions[0]).__name__ == "OFPActionGroup"]
    assert len(arp_first_ports) >= 8
    assert len(set(arp_first_ports)) >= 3, arp_first_ports
