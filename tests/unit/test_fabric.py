"""The controller's decisions as the switches see them: modes, failover, resync, on a fake fabric.

Reading guide. ``FabricLogic`` turns (plan, failed ports, mode, flows) into per-switch
tables and the minimal changes between two of them; ``ofmsgs.messages`` turns those
changes into the os-ken messages the app sends. Here they are applied in order to the fake
fabric (``tests/unit/fakeof.py``), which refuses anything OVS would refuse or that would
leave a packet without a rule (a group deleted while an entry uses it, a strict delete of
a missing entry), and packets are traced through the result.
"""

from __future__ import annotations

import itertools
import random

import pytest

from controllers import lb
from controllers.fabric import FabricLogic
from controllers.flowtable import COOKIE_PIN, Entry, entry_from_stats
from controllers.routing import attach_points, shortest_switch_hops
from controllers.shell.ofmsgs import messages, protocol
from tests.unit.fabrics import FABRICS, plan_of
from tests.unit.fakeof import FakeFabric
from vocab.flows import Flow
from vocab.plan import WiringPlan

OF13, OF15 = 4, 6


def apply_changes(logic: FabricLogic, fabric: FakeFabric, version: int = OF15) -> dict[str, int]:
    """What the app's ``push`` does, applied to the fake fabric; messages sent per switch."""
    dp = protocol(version)
    sent = {}
    for sw, (ch, want) in logic.changes(logic.switch_names).items():
        msgs = messages(dp, ch, "dp_hash")
        fabric.apply(sw, msgs)
        logic.commit(sw, want)
        sent[sw] = len(msgs)
    return sent


def fresh(plan: WiringPlan, mode: str = "ecmp", version: int = OF15) -> tuple[FabricLogic,
                                                                                FakeFabric]:
    logic = FabricLogic(plan, mode)
    fabric = FakeFabric(plan)
    apply_changes(logic, fabric, version)
    return logic, fabric


def all_to_all(plan: WiringPlan, sports: int = 1, size: int = 1 << 20) -> list[Flow]:
    hosts = [h.name for h in plan.hosts]
    return [Flow(s, d, 49152 + q, bytes=size) for s, d in itertools.permutations(hosts, 2)
            for q in range(sports)]


def trace_flow(fabric: FakeFabric, flow: Flow) -> list[list[str]]:
    ip = fabric.plan.node(flow.dst).ip
    pkt = fabric.packet(flow.src, ip, ip_proto=17, udp_src=flow.sport, udp_dst=flow.dport)
    return fabric.trace(flow.src, pkt)


def nodes_of(logic: FabricLogic, flow: Flow) -> list[str]:
    """Host, switches of the assigned path, host: what a trace of a pinned flow must give."""
    return [flow.src] + [sw for sw, _ in logic.assign[flow]] + [flow.dst]


# --- every mode, every topology -------------------------------------------------------------
@pytest.mark.parametrize("version", [OF13, OF15], ids=["of13", "of15"])
@pytest.mark.parametrize("mode", ["ecmp", "planned", "adaptive"])
@pytest.mark.parametrize("name", [n for n in FABRICS if n != "astral3-default"])
def test_every_flow_takes_a_minimal_loop_free_path_its_mode_chose(name: str, mode: str,
                                                                  version: int) -> None:
    plan = plan_of(name)
    logic, fabric = fresh(plan, mode, version)
    flows = all_to_all(plan, sports=2)
    logic.set_flows(flows)
    apply_changes(logic, fabric, version)
    hops = {}
    attach = attach_points(plan)
    for flow in flows:
        paths = trace_flow(fabric, flow)  # raises LoopError on a loop
        key = (attach[flow.src][0], attach[flow.dst][0])
        if key not in hops:
            hops[key] = shortest_switch_hops(plan, flow.src, flow.dst)
        for p in paths:
            assert p[-1] == flow.dst and len(p) - 2 == hops[key], (flow, p)
        if mode == "ecmp":
            assert not logic.assign
        else:  # pinned: exactly the assigned path, no hashing left
            assert paths == [nodes_of(logic, flow)], (flow, paths)
    if mode != "ecmp":
        assert len(logic.assign) == len(flows)


def test_planned_pins_are_exact_matches_above_the_routes_and_unknown_flows_use_ecmp() -> None:
    plan = plan_of("astral3")
    logic, fabric = fresh(plan, "planned")
    flows = all_to_all(plan)
    logic.set_flows(flows)
    apply_changes(logic, fabric)
    pins = [f for sw in fabric.switches.values() for f in sw.flows if f.cookie == COOKIE_PIN]
    assert pins and all(f.priority == 250 for f in pins)
    assert all({"ipv4_src", "ipv4_dst", "ip_proto", "udp_src", "udp_dst"} <= set(f.match)
               for f in pins)
    # a flow the controller was not told about (other source port) is hashed as usual
    stranger = Flow(flows[0].src, flows[-1].dst, 40000)
    traces = trace_flow(fabric, stranger)
    assert len(traces) > 1 and all(t[-1] == stranger.dst for t in traces)


def test_planned_mode_on_the_lab_default_reaches_the_ideal_link_load() -> None:
    """32 GPUs, all-to-all: the installed pins give max link load == the lower bound."""
    plan = plan_of("astral3-default")
    logic, fabric = fresh(plan, "planned")
    flows = all_to_all(plan)
    logic.set_flows(flows)
    apply_changes(logic, fabric)
    load: dict[tuple[str, int], int] = {}
    for flow in flows:
        (path,) = trace_flow(fabric, flow)
        for a, b in zip(path[1:-1], path[2:], strict=False):
            port = next(p for p, (peer, _pp, _l) in fabric.ports[a].items() if peer == b)
            load[(a, port)] = load.get((a, port), 0) + flow.bytes
    cap = logic.finder.capacity("gbps")
    worst = max(v * 8e-9 / cap[h] for h, v in load.items())
    ideal = lb.ideal_max_link_time(logic.finder, flows)
    assert worst == pytest.approx(ideal, rel=1e-9)
    ecmp = lb.max_link_time(lb.ecmp_assign(flows, logic.finder), logic.finder)
    assert ecmp > worst  # the hash collides somewhere on 992 flows over 64 lanes


# --- changes are minimal --------------------------------------------------------------------
def test_nothing_to_send_when_nothing_changed() -> None:
    logic, fabric = fresh(plan_of("astral3"), "planned")
    logic.set_flows(all_to_all(plan_of("astral3")))
    assert apply_changes(logic, fabric)
    assert logic.changes(logic.switch_names) == {}
    logic.set_flows(all_to_all(plan_of("astral3")))  # same flows again
    assert logic.changes(logic.switch_names) == {}


def test_mode_round_trip_leaves_no_pins_or_groups_behind() -> None:
    plan = plan_of("astral3-2spines")
    logic, fabric = fresh(plan, "ecmp")
    before = {n: (len(s.flows), len(s.groups)) for n, s in fabric.switches.items()}
    logic.set_flows(all_to_all(plan, sports=3))
    for mode in ("planned", "adaptive", "planned", "ecmp"):
        logic.set_mode(mode)
        apply_changes(logic, fabric)  # strict deletes and group deletes must all be legal
    after = {n: (len(s.flows), len(s.groups)) for n, s in fabric.switches.items()}
    assert after == before


# --- failover -------------------------------------------------------------------------------
def spine_lane(plan: WiringPlan) -> tuple[str, int, str, int]:
    """(leaf, leaf port, spine, spine port) of the first leaf-spine lane."""
    link = next(ln for ln in plan.links if ln.kind == "lane")
    return link.a, link.a_port, link.b, link.b_port


def pairs_dropped(fabric: FakeFabric, flows: list[Flow]) -> int:
    return sum(any(p[-1] == "DROP" for p in trace_flow(fabric, f)) for f in flows)


@pytest.mark.parametrize("mode", ["ecmp", "planned", "adaptive"])
def test_a_dead_spine_lane_needs_the_controller_and_only_its_changes(mode: str) -> None:
    plan = plan_of("astral3")
    logic, fabric = fresh(plan, mode)
    flows = all_to_all(plan, sports=4)
    logic.set_flows(flows)
    apply_changes(logic, fabric)
    initial = sum(len(t.entries) + len(t.groups) for t in logic.tables.values())
    before = dict(logic.assign)
    leaf, lport, spine, sport = spine_lane(plan)
    # The switches alone: both ends see the port down; groups skip it locally...
    fabric.switches[leaf].down_ports.add(lport)
    fabric.switches[spine].down_ports.add(sport)
    from_leaf = [f for f in flows if attach_points(plan)[f.src][0] == leaf]
    assert pairs_dropped(fabric, from_leaf) == 0  # local uplink failure: data plane only
    # ...but the spine has no other way down to that leaf (one lane): remote traffic dies.
    assert pairs_dropped(fabric, flows) > 0
    # The controller learns both ends and reroutes.
    assert logic.set_port(leaf, lport, up=False)
    assert not logic.set_port(spine, sport, up=False)  # same link: nothing new
    # Only what crossed the dead lane moves. Away from the failed leaf, every changed entry
    # is a route toward that leaf or the pin of a flow whose path used the lane.
    dead = {(leaf, lport), (spine, sport)}
    moved = {f for f, path in before.items() if dead & set(path)}
    for flow, path in before.items():
        if flow not in moved:
            assert logic.assign[flow] == path, flow
        else:
            assert not dead & set(logic.assign[flow])
    toward = {r.value for rs in logic.routes.values() for r in rs if r.dest == leaf}
    # pins toward that leaf change too: their failover ports lose the dead spine
    toward |= {logic.ip_of[h] for h, (sw, _p) in attach_points(plan).items() if sw == leaf}
    pinned = {(logic.ip_of[f.src], logic.ip_of[f.dst], f.sport) for f in moved}
    for sw, (ch, _want) in logic.changes(logic.switch_names).items():
        if sw == leaf:
            continue
        for e in ch.entries_set + ch.entries_del:
            m = dict(e.match)
            dst = m.get("ipv4_dst", m.get("arp_tpa"))
            dst = dst[0] if isinstance(dst, tuple) else dst
            assert dst in toward or (m.get("ipv4_src"), dst, m.get("udp_src")) in pinned, (sw, e)
    sent = apply_changes(logic, fabric)
    assert pairs_dropped(fabric, flows) == 0
    assert sum(sent.values()) < initial
    # Repair restores the original tables exactly.
    fabric.switches[leaf].down_ports.clear()
    fabric.switches[spine].down_ports.clear()
    logic.set_port(leaf, lport, up=True)
    logic.set_port(spine, sport, up=True)
    apply_changes(logic, fabric)
    assert pairs_dropped(fabric, flows) == 0
    if mode == "ecmp":  # the lane is back in every ECMP set: some flows can use it again
        assert any(spine in p and leaf in p for f in flows for p in trace_flow(fabric, f)
                   if attach_points(plan)[f.dst][0] == leaf)


def test_a_dead_spine_is_routed_around_everywhere() -> None:
    plan = plan_of("astral3")
    logic, fabric = fresh(plan, "planned")
    flows = all_to_all(plan, sports=2)
    logic.set_flows(flows)
    apply_changes(logic, fabric)
    dead = "spine1"
    ports = fabric.ports[dead]
    for port, (peer, peer_port, _link) in ports.items():
        fabric.switches[dead].down_ports.add(port)
        fabric.switches[peer].down_ports.add(peer_port)
        logic.set_port(peer, peer_port, up=False)
    apply_changes(logic, fabric)
    for flow in flows:
        for p in trace_flow(fabric, flow):
            assert dead not in p and p[-1] == flow.dst, p


# --- resync after a controller restart -------------------------------------------------------
def read_back(fabric: FakeFabric, switch: str) -> tuple[dict, list[int]]:
    """What the app reads from a switch: its entries (as flow stats) and its group ids."""
    entries: dict = {}
    for f in fabric.switches[switch].flows:
        e: Entry = entry_from_stats(f.source)
        entries[e.key] = e
    return entries, list(fabric.switches[switch].groups)


@pytest.mark.parametrize("mode", ["ecmp", "planned"])
def test_restart_resyncs_without_touching_entries(mode: str) -> None:
    plan = plan_of("astral3-2spines")
    old, fabric = fresh(plan, mode)
    flows = all_to_all(plan, sports=2)
    old.set_flows(flows)
    apply_changes(old, fabric)
    lane = spine_lane(plan)
    old.set_port(lane[0], lane[1], up=False)  # history: a failure moved groups to new ids
    apply_changes(old, fabric)

    new = FabricLogic(plan, mode)  # a restarted controller, told the same state
    new.set_flows(flows)
    new.set_port(lane[0], lane[1], up=False)
    dp = protocol(OF15)
    for sw in plan.switches:
        entries, gids = read_back(fabric, sw.name)
        ch, want = new.sync(sw.name, entries, gids)
        assert ch.entries_set == [] and ch.entries_del == [], sw.name  # forwarding untouched
        assert ch.groups_del == []
        fabric.apply(sw.name, messages(dp, ch, "dp_hash"))  # groups re-sent: add_or_mod
        new.commit(sw.name, want)
    assert pairs_dropped(fabric, flows) == 0


def test_resync_replaces_a_foreign_or_stale_table() -> None:
    """A switch holding another controller's rules ends up with exactly ours, without a
    wipe; rules with a cookie not ours stay."""
    plan = plan_of("astral3")
    logic, fabric = fresh(plan, "ecmp")
    other = FabricLogic(plan, "planned")
    other.set_flows(all_to_all(plan))
    sw = plan.switches[0].name
    entries, gids = read_back(fabric, sw)
    # pretend the switch holds a stale pin and an extra group
    stale = next(e for e in other.table(sw).entries.values() if e.cookie == COOKIE_PIN)
    entries[stale.key] = stale
    # and another agent's rule (an operator's, an injected fault's): not ours to touch
    theirs = Entry(1000, (("eth_type", 0x800), ("ip_proto", 17), ("udp_src", (5, 7))), (),
                   0xA57FF001)
    entries[theirs.key] = theirs
    ch, want = logic.sync(sw, entries, gids + [999])
    assert stale in ch.entries_del and 999 in ch.groups_del
    assert theirs not in ch.entries_del + ch.entries_set


# --- adaptive -------------------------------------------------------------------------------
def test_adaptive_moves_a_colliding_flow_and_the_switches_follow() -> None:
    plan = plan_of("astral3")
    logic, fabric = fresh(plan, "adaptive")
    rng = random.Random(3)
    hosts = [h.name for h in plan.hosts]
    # find two flows from one leaf that ECMP's model puts on the same uplink
    leaf_hosts = [h for h in hosts if attach_points(plan)[h][0] == attach_points(plan)[hosts[0]][0]]
    far = [h for h in hosts if attach_points(plan)[h][0] != attach_points(plan)[hosts[0]][0]]
    flows: list[Flow] = []
    for _ in range(200):
        f = Flow(rng.choice(leaf_hosts), rng.choice(far), rng.randrange(49152, 65535))
        if f not in flows:
            flows.append(f)
        logic.set_flows(flows)
        first = [logic.assign[x][0] for x in flows]
        if len(set(first)) < len(first):
            break
    firsts = [logic.assign[y][0] for y in flows]
    a, b = [x for x in flows if firsts.count(logic.assign[x][0]) > 1][:2]
    logic.set_flows([a, b])
    apply_changes(logic, fabric)
    hop = logic.assign[a][0]
    assert logic.assign[b][0] == hop
    cap = logic.finder.capacity("mbps")[hop]
    rates = {a: 0.6 * cap, b: 0.6 * cap}
    moves = logic.adaptive_step(rates, {hop: 1.2 * cap}, tick=1)
    assert len(moves) == 1
    apply_changes(logic, fabric)
    assert logic.assign[a][0] != logic.assign[b][0]
    for f in (a, b):
        assert trace_flow(fabric, f) == [nodes_of(logic, f)]


def test_a_draining_link_does_not_push_a_second_flow_off() -> None:
    """After a move, the vacated lane's counters still show it busy (its queue drains)."""
    plan = plan_of("astral3")
    logic, _fabric = fresh(plan, "adaptive")
    src_leaf = attach_points(plan)["s0g0"][0]
    by_uplink: dict[tuple[str, int], list[Flow]] = {}
    for sport in range(50000, 50100):  # where ECMP's hash puts each (adaptive starts there)
        f = Flow("s0g0", "s2g1", sport)
        by_uplink.setdefault(lb.ecmp_path(f, logic.finder)[0], []).append(f)
    a, b = next(v for v in by_uplink.values() if len(v) >= 2)[:2]
    logic.set_flows([a, b])
    hop = logic.assign[a][0]
    assert hop[0] == src_leaf and logic.assign[b][0] == hop
    cap = logic.finder.capacity("mbps")[hop]
    rates = {a: 0.6 * cap, b: 0.6 * cap}
    assert len(logic.adaptive_step(rates, {hop: cap}, tick=1)) == 1
    # next polls: the old lane still transmits at full rate while it drains
    for tick in (2, 3, 4):
        assert logic.adaptive_step(rates, {hop: cap}, tick=tick) == {}
    # counters are believed again once the window has passed
    est = logic.link_estimate(rates, {hop: cap}, tick=20)
    assert est[hop] == pytest.approx(cap)
