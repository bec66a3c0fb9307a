"""Lane marks as the switches apply them: every IPv4 packet names the uplink it left by.

Reading guide. ``vocab.lanemark.LaneMarks`` gives each uplink port of a host-facing switch
a TTL (128 and up); ``FabricLogic`` hands those to ``flowtable.build_table``, which puts a
``set_nw_ttl`` before every IPv4 output through a marked port: in each bucket of a select
(ECMP) or fast-failover (pin) group, or before a direct output. Here the controller's real
messages are applied to the fake fabric (``tests/unit/fakeof.py``), which rewrites a
packet's TTL as OVS does, and every traced packet must arrive with the mark of the uplink
it really crossed, so that ``LaneMarks.link(src, ttl)`` names the lane the hash chose. The
traces fork into every bucket of a select group, so every lane ECMP could pick is checked,
not one hash draw. A table without marks fails these tests: packets would arrive with the
sender's TTL (64), which ``LaneMarks.link`` maps to no lane.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from typing import Any

import pytest

from controllers.fabric import FabricLogic
from controllers.flowtable import (
    COOKIE_PROBE,
    ETH_ARP,
    ETH_IPV4,
    Entry,
    GroupSpec,
    Table,
    action_of,
    diff,
    entry_from_stats,
    infer_groups,
)
from controllers.routing import attach_points, compute_routes
from controllers.shell.ofmsgs import entry_mod, group_mod, messages, protocol, switch_program
from ops.shell.experiment import stream_pairs, stream_sports
from testbed.topologies import build
from tests.unit.fakeof import HOST_TTL, Delivery, FakeFabric, FakeSwitch
from vocab.flows import Flow
from vocab.lanemark import (
    MARK_BASE,
    PROBE_DPORT,
    PROBE_SPORTS,
    LaneMarks,
    lane_slots,
    probe_slot,
    probe_sports,
)
from vocab.plan import WiringPlan

OF13, OF15 = 4, 6
VERSIONS = [pytest.param(OF13, id="of13"), pytest.param(OF15, id="of15")]
SPORTS = (49152, 50000, 61234)  # several RoCEv2-like source ports per host pair


def apply_changes(logic: FabricLogic, fabric: FakeFabric, version: int = OF15) -> int:
    """What the app's ``push`` does, applied to the fake fabric; messages sent in all."""
    dp = protocol(version)
    sent = 0
    for sw, (ch, want) in logic.changes(logic.switch_names).items():
        msgs = messages(dp, ch, "dp_hash")
        fabric.apply(sw, msgs)
        logic.commit(sw, want)
        sent += len(msgs)
    return sent


def fresh(plan: WiringPlan, mode: str = "ecmp", version: int = OF15,
          flows: list[Flow] | None = None) -> tuple[FabricLogic, FakeFabric]:
    logic = FabricLogic(plan, mode)
    fabric = FakeFabric(plan)
    if flows is not None:
        logic.set_flows(flows)
    apply_changes(logic, fabric, version)
    return logic, fabric


def flows_of(plan: WiringPlan, sports: tuple[int, ...] = SPORTS) -> list[Flow]:
    hosts = [h.name for h in plan.hosts]
    return [Flow(s, d, sp) for s, d in itertools.permutations(hosts, 2) for sp in sports]


def deliver(fabric: FakeFabric, flow: Flow, ttl: int = HOST_TTL) -> list[Delivery]:
    ip = fabric.plan.node(flow.dst).ip
    assert ip is not None
    pkt = fabric.packet(flow.src, ip, ip_proto=17, udp_src=flow.sport, udp_dst=flow.dport,
                        nw_ttl=ttl)
    return fabric.deliveries(flow.src, pkt)


def check_marks(plan: WiringPlan, fabric: FakeFabric, flows: list[Flow],
                sent_ttl: int = HOST_TTL) -> dict[str, set[int]]:
    """Every delivery of every flow arrives, marked with the uplink it left its first
    switch by (or with the sender's TTL when it crossed no uplink there). Returns, per
    first switch, the uplink ports seen, so a caller can check the lanes were all used."""
    lanes = LaneMarks(plan)
    seen: dict[str, set[int]] = {}
    problems = []
    for flow in flows:
        src_ip = plan.node(flow.src).ip
        for d in deliver(fabric, flow, sent_ttl):
            if d.path[-1] != flow.dst or not d.hops:
                problems.append((flow, d.path))
                continue
            first, port = d.hops[0]
            ttl = d.pkt["nw_ttl"]
            mark = lanes.ttl(first, port)
            link = lanes.link(flow.src, ttl)
            ok = d.path[-1] == flow.dst and lanes.link(src_ip or "", ttl) == link
            if mark is None:  # left by a host port (same switch) or an unmarked one
                ok = ok and ttl == sent_ttl and link is None
            else:
                ok = (ok and ttl == mark >= MARK_BASE and link is not None
                      and (link.a, link.a_port) == (first, port) and link.b == d.path[2])
                seen.setdefault(first, set()).add(port)
            if not ok:
                problems.append((flow, d.path, d.hops[:1], ttl, mark))
    assert not problems, problems[:5]
    return seen


def all_uplinks(plan: WiringPlan) -> dict[str, set[int]]:
    return {sw: {ln.a_port for ln in links} for sw, links in LaneMarks(plan).uplinks.items()}


# --- the lab default: every pair, every lane ECMP can pick, every pinned path --------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_every_ecmp_packet_carries_the_mark_of_the_uplink_it_took(version: int) -> None:
    plan = build("astral3")
    _logic, fabric = fresh(plan, "ecmp", version)
    flows = flows_of(plan)
    seen = check_marks(plan, fabric, flows)
    assert seen == all_uplinks(plan)  # the select groups spread over (and mark) every lane
    # and cross-leaf packets really were marked: not one arrived with the sender's TTL
    attach = attach_points(plan)
    cross = [f for f in flows if attach[f.src][0] != attach[f.dst][0]]
    assert cross and all(d.pkt["nw_ttl"] >= MARK_BASE for f in cross[:200]
                         for d in deliver(fabric, f))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_pinned_packet_carries_the_mark_of_its_assigned_uplink(version: int) -> None:
    plan = build("astral3")
    flows = flows_of(plan, SPORTS[:2])
    logic, fabric = fresh(plan, "planned", version, flows)
    assert len(logic.assign) == len(flows)
    check_marks(plan, fabric, flows)
    lanes = LaneMarks(plan)
    for flow in flows:
        (d,) = deliver(fabric, flow)  # pinned: one path, no hashing left
        first_hop = logic.assign[flow][0]
        if len(logic.assign[flow]) > 1:  # crosses a lane: the mark names the assigned one
            assert d.hops[0] == first_hop
            link = lanes.link(flow.src, d.pkt["nw_ttl"])
            assert link is not None and (link.a, link.a_port) == first_hop, flow


def test_same_leaf_packets_keep_the_senders_ttl_and_cross_leaf_ones_do_not() -> None:
    plan = build("astral3")
    _logic, fabric = fresh(plan)
    attach = attach_points(plan)
    hosts = [h.name for h in plan.hosts]
    same = [(s, d) for s, d in itertools.permutations(hosts, 2) if attach[s][0] == attach[d][0]]
    other = [(s, d) for s, d in itertools.permutations(hosts, 2) if attach[s][0] != attach[d][0]]
    assert same and other
    for ttl in (1, 37, MARK_BASE - 1):
        for s, d in same:
            for dl in deliver(fabric, Flow(s, d, 49152), ttl):
                assert dl.pkt["nw_ttl"] == ttl and len(dl.hops) == 1, (s, d, dl)
        for s, d in other[:50]:
            for dl in deliver(fabric, Flow(s, d, 49152), ttl):
                assert dl.pkt["nw_ttl"] >= MARK_BASE, (s, d, dl)


# --- failures: the mark follows the bucket the switch really used --------------------------------
@pytest.mark.parametrize("mode", ["ecmp", "planned"])
def test_marks_stay_true_through_a_local_failover_and_after_the_reroute(mode: str) -> None:
    plan = build("astral3")
    flows = flows_of(plan, SPORTS[:2])
    logic, fabric = fresh(plan, mode, OF15, flows if mode != "ecmp" else None)
    lane = next(ln for ln in plan.links if ln.kind == "lane" and ln.a == "lf0r0")
    fabric.switches[lane.a].down_ports.add(lane.a_port)
    fabric.switches[lane.b].down_ports.add(lane.b_port)
    from_leaf = [f for f in flows if attach_points(plan)[f.src][0] == lane.a]
    # The switch alone: its groups skip the dead uplink, and each bucket carries its own
    # mark, so the packets are still marked with the lane they took.
    seen = check_marks(plan, fabric, from_leaf)
    assert seen[lane.a] == all_uplinks(plan)[lane.a] - {lane.a_port}
    # The controller learns of it and reroutes everything else around the dead lane.
    assert logic.set_port(lane.a, lane.a_port, up=False)
    logic.set_port(lane.b, lane.b_port, up=False)
    assert apply_changes(logic, fabric)
    seen = check_marks(plan, fabric, flows)
    assert lane.a_port not in seen[lane.a] and seen[lane.a]
    assert all(lane.b not in d.path or lane.a not in d.path
               for f in flows if attach_points(plan)[f.dst][0] == lane.a
               for d in deliver(fabric, f))


# --- probe lanes: the source port, not the hash, picks a probe's uplink ------------------------
def probe_deliveries(plan: WiringPlan, fabric: FakeFabric
                     ) -> list[tuple[str, int, list[Delivery]]]:
    """Every probe stream's datagrams: (sender, source port, deliveries)."""
    out = []
    for i, ((s, d), sports) in enumerate(zip(stream_pairs(plan), stream_sports(plan),
                                             strict=True)):
        for sp in sports:
            out.append((s, sp, deliver(fabric, Flow(s, d, sp, PROBE_DPORT + i))))
    return out


def test_lane_slots_and_probe_ports_cover_every_slot_evenly() -> None:
    assert [lane_slots(n) for n in (1, 2, 3, 4, 5, 8)] == [1, 2, 4, 4, 8, 8]
    for slots in (1, 2, 4, 8):
        for color in range(slots):
            sports = probe_sports(color, slots)
            per = [probe_slot(sp, slots) for sp in sports]
            assert sorted(per) == sorted(list(range(slots)) * (PROBE_SPORTS // slots))
            assert sorted(sp % PROBE_SPORTS for sp in sports) == list(range(PROBE_SPORTS))
            assert per[0] == color  # the colour turns which lane the low bits 0 take
    for bad in (lambda: lane_slots(0), lambda: lane_slots(33), lambda: probe_sports(0, 3)):
        with pytest.raises(ValueError):
            bad()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_probe_rides_the_lane_its_source_port_names_and_carries_its_mark(version: int) -> None:
    plan = build("astral3")
    logic, fabric = fresh(plan, "ecmp", version)
    lanes = LaneMarks(plan)
    used: dict[str, set[int]] = {}
    for src, sp, got in probe_deliveries(plan, fabric):
        first = lanes.switch_of[src]
        ups = lanes.uplinks[first]
        want = ups[probe_slot(sp, lane_slots(len(ups))) % len(ups)]
        assert len(got) == 1, (src, sp, [d.path for d in got])  # one path: no ECMP fork
        (d,) = got
        assert d.hops[0] == (first, want.a_port) and d.path[2] == want.b
        assert d.pkt["nw_ttl"] == lanes.ttl(first, want.a_port)
        used.setdefault(first, set()).add(want.a_port)
        # the same ports to any other UDP port are still the hash's: every lane they could take
        assert len(deliver(fabric, Flow(src, d.path[-1], sp, 4791))) == len(ups)
    assert used == all_uplinks(plan)
    assert not [e for e in logic.tables["spine0"].entries.values() if e.cookie == COOKIE_PROBE]


def test_a_probe_whose_lane_died_fails_over_then_follows_the_reroute() -> None:
    plan = build("astral3")
    logic, fabric = fresh(plan, "ecmp")
    lanes = LaneMarks(plan)
    lane = lanes.uplinks["lf0r0"][1]
    for sw, port in ((lane.a, lane.a_port), (lane.b, lane.b_port)):
        fabric.switches[sw].down_ports.add(port)

    def check(everyone: bool) -> set[int]:
        """The uplinks lf0r0's probes left by; every probe (``everyone``) or lf0r0's
        arrives, marked with the lane it took."""
        ports = set()
        for src, _sp, got in probe_deliveries(plan, fabric):
            if everyone or lanes.switch_of[src] == "lf0r0":
                for d in got:
                    assert d.path[-1] != "DROP" and d.pkt["nw_ttl"] == lanes.ttl(*d.hops[0])
                    if lanes.switch_of[src] == "lf0r0":
                        ports.add(d.hops[0][1])
        return ports

    # the switch alone skips the dead uplink (a spine still sends down the dead lane,
    # as it does the hash's flows, until the controller reroutes)
    assert check(everyone=False) == all_uplinks(plan)["lf0r0"] - {lane.a_port}
    logic.set_port(lane.a, lane.a_port, up=False)
    logic.set_port(lane.b, lane.b_port, up=False)
    assert apply_changes(logic, fabric)
    assert check(everyone=True) == all_uplinks(plan)["lf0r0"] - {lane.a_port}
    groups = logic.tables["lf0r0"].groups.values()
    assert all(lane.a_port not in g.ports for g in groups if g.kind == "ff" and g.marks)
    # elsewhere the probes towards lf0r0 have entries of their own, over the 3 uplinks
    # from which lf0r0 is still reached, above the entries for the rest
    other = logic.tables["lf0r1"]
    own = [e for e in other.entries.values() if e.cookie == COOKIE_PROBE
           and dict(e.match).get("ipv4_dst")]
    assert len(own) == 4 and all(e.priority > 249 for e in own)
    assert {len(other.groups[e.actions[0][1]].ports) for e in own} == {3}


# --- what is not marked ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["ecmp", "planned"])
def test_arp_is_never_marked_and_never_shares_a_marked_group(mode: str) -> None:
    plan = build("astral3")
    flows = flows_of(plan, SPORTS[:1])
    logic, fabric = fresh(plan, mode, OF15, flows if mode != "ecmp" else None)
    marked_groups = 0
    for name, sw in fabric.switches.items():
        for f in sw.flows:
            if f.match.get("eth_type", (0, 0))[0] != ETH_ARP:
                continue
            assert not any(k == "set_nw_ttl" for k, _ in f.actions), (name, f)
            for kind, gid in f.actions:
                if kind == "group":
                    assert set(sw.bucket_ttls[gid]) == {None}, (name, gid)
        marked_groups += sum(any(t is not None for t in ts) for ts in sw.bucket_ttls.values())
        arp_ids = {gid for e in logic.tables[name].entries.values()
                   if dict(e.match).get("eth_type") == ETH_ARP
                   for kind, gid in e.actions if kind == "group"}
        assert all(not logic.tables[name].groups[g].marks for g in arp_ids)
    assert marked_groups
    # An ARP request is routed (not flooded) like unicast and arrives untouched.
    for s, d in itertools.islice(itertools.permutations([h.name for h in plan.hosts], 2), 100):
        ip = plan.node(d).ip
        assert ip is not None
        for dl in fabric.deliveries(s, fabric.packet(s, ip, ETH_ARP)):
            assert dl.path[-1] == d and "nw_ttl" not in dl.pkt


def test_an_arp_group_and_a_pin_group_over_the_same_ports_are_two_groups() -> None:
    """Pins and ARP both use fast-failover groups; only the pin's buckets set the TTL."""
    plan = build("astral3")
    logic, _fabric = fresh(plan, "planned", OF15, flows_of(plan, SPORTS[:1]))
    pairs = 0
    for table in logic.tables.values():
        by_ports: dict[tuple[str, tuple[int, ...]], list[GroupSpec]] = {}
        for spec in table.groups.values():
            by_ports.setdefault((spec.kind, spec.ports), []).append(spec)
        for specs in by_ports.values():
            if len(specs) > 1:
                assert len(specs) == 2 and {bool(s.marks) for s in specs} == {True, False}
                pairs += 1
    assert pairs  # the case happens on the lab default, so the check above is not vacuous


def test_spines_host_ports_and_unmarked_switches_set_no_ttl() -> None:
    plan = build("astral3")
    logic, _fabric = fresh(plan, "planned", OF15, flows_of(plan, SPORTS[:1]))
    lanes = LaneMarks(plan)
    for name, table in logic.tables.items():
        for spec in table.groups.values():
            want = tuple(lanes.ttl(name, p) for p in spec.ports)
            assert spec.marks in ((), want), (name, spec)
            if spec.marks:
                assert spec.kind in ("select", "ff") and name in lanes.uplinks
        for e in table.entries.values():
            acts = list(e.actions)
            for i, (kind, ttl) in enumerate(acts):
                if kind == "set_nw_ttl":  # only right before an output by a marked port
                    out_kind, port = acts[i + 1]
                    assert out_kind == "output" and lanes.ttl(name, port) == ttl, (name, e)
                    assert dict(e.match)["eth_type"] == ETH_IPV4
        if name not in lanes.uplinks:  # spines: nothing marked at all
            assert not any(spec.marks for spec in table.groups.values()), name
            assert not any(k == "set_nw_ttl" for e in table.entries.values()
                           for k, _ in e.actions), name


# --- no churn: rebuilding and reconnecting --------------------------------------------------------
@pytest.mark.parametrize("mode", ["ecmp", "planned"])
def test_a_second_build_with_nothing_changed_is_a_no_op(mode: str) -> None:
    plan = build("astral3")
    logic, _fabric = fresh(plan, mode, OF15, flows_of(plan, SPORTS[:1]))
    for sw in logic.switch_names:
        again = logic.table(sw)  # rebuilt from scratch, ids from the table it holds
        assert again == logic.tables[sw], sw
        assert len(diff(logic.tables[sw], again)) == 0, sw
    assert logic.changes(logic.switch_names) == {}


def read_back(fabric: FakeFabric, switch: str) -> tuple[dict, list[int]]:
    """What the app reads from a switch: its entries (as flow stats) and its group ids."""
    entries: dict = {}
    for f in fabric.switches[switch].flows:
        e: Entry = entry_from_stats(f.source)
        entries[e.key] = e
    return entries, list(fabric.switches[switch].groups)


@pytest.mark.parametrize("mode", ["ecmp", "planned"])
@pytest.mark.parametrize("name", ["astral3", "rail3"])  # rail3's ToRs: one uplink, no group
def test_a_switch_read_back_after_a_reconnect_is_not_reprogrammed(name: str, mode: str) -> None:
    plan = build(name)
    flows = flows_of(plan, SPORTS[:1])
    logic, fabric = fresh(plan, mode, OF15, flows)
    direct = 0  # entries that set the TTL and output without a group
    for sw in logic.switch_names:
        before = logic.tables[sw]
        logic.forget(sw)  # the switch reconnected: what it holds is read back
        entries, gids = read_back(fabric, sw)
        direct += sum(("set_nw_ttl", e.actions[0][1]) == e.actions[0]
                      for e in entries.values() if e.actions)
        ch, want = logic.sync(sw, entries, gids)
        assert ch.entries_set == [] and ch.entries_del == [] and ch.groups_del == [], sw
        assert want == before, sw  # same groups under the same ids
        fabric.apply(sw, messages(protocol(OF15), ch, "dp_hash"))  # groups re-sent: add_or_mod
        logic.commit(sw, want)
    assert logic.changes(logic.switch_names) == {}
    if name == "rail3":
        assert direct  # single-uplink ToRs mark by an entry's own actions, read back too
    check_marks(plan, fabric, flows)


def test_a_switch_holding_unmarked_rules_gets_the_marks_on_resync() -> None:
    """A switch programmed without marks (an older controller): resync adds them."""
    plan = build("rail3")
    flows = flows_of(plan, SPORTS[:1])
    logic = FabricLogic(plan)
    unmarked = FabricLogic(plan)
    unmarked.marks = {}
    old = FakeFabric(plan)
    apply_changes(unmarked, old)
    for sw in logic.switch_names:
        entries, gids = read_back(old, sw)
        ch, want = logic.sync(sw, entries, gids)
        if sw in logic.marks:
            assert ch.entries_set, sw  # the single-uplink routes gain their set_nw_ttl
        else:
            assert ch.entries_set == [], sw
        old.apply(sw, messages(protocol(OF15), ch, "dp_hash"))
    check_marks(plan, old, flows)


# --- the representation itself --------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_the_ttl_action_reads_back_as_it_was_sent(version: int) -> None:
    dp = protocol(version)
    e = Entry(200, (("eth_type", ETH_IPV4), ("ipv4_dst", "10.0.0.9")),
              (("set_nw_ttl", 129), ("output", 4)))
    msg = entry_mod(dp, e)
    assert [type(a).__name__ for a in msg.instructions[0].actions] == [
        "OFPActionSetNwTtl", "OFPActionOutput"]
    assert entry_from_stats(msg) == e
    g = group_mod(dp, 7, (3, 4, 5), kind="select", marks=(128, None, 130))
    assert [[action_of(a) for a in b.actions] for b in g.buckets] == [
        [("set_nw_ttl", 128), ("output", 3)], [("output", 4)],
        [("set_nw_ttl", 130), ("output", 5)]]
    with pytest.raises(ValueError, match="marks for"):
        group_mod(dp, 7, (3, 4), marks=(128,))


def test_infer_groups_sees_through_the_ttl_action() -> None:
    """A read-back entry that marks then sends to a group still names its group."""
    want_spec = GroupSpec("ff", (3, 4), (128, 129))
    key_match = (("eth_type", ETH_IPV4), ("ipv4_dst", "10.0.0.9"))
    want = Table(groups={5: want_spec},
                 entries={(200, key_match): Entry(200, key_match, (("group", 5),))})
    read = {(200, key_match): Entry(200, key_match, (("group", 9),))}
    assert infer_groups(read, want).groups == {9: want_spec}
    # GroupSpec equality includes the marks: an unmarked twin is another group
    assert GroupSpec("ff", (3, 4)) != want_spec


# --- the other designs ---------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name, params", [
    ("rail3", {}),  # ToRs with one uplink: marked by the route entry itself
    ("rail3", dict(servers=4, gpus=2, servers_per_block=2, lanes_per_uplink=2)),
    ("fattree", dict(servers=4, gpus=2)),
    ("fattree", {}),
    # railonly: a GPU's NIC link starts at its server's NVLink switch, not at the GPU, so
    # LaneMarks finds no host-facing switch there and nothing is marked (TTLs stay the
    # sender's, which check_marks asserts)
    ("railonly", dict(servers=4, gpus=2, servers_per_block=2)),
])
def test_other_designs_mark_the_uplink_each_packet_took(name: str, params: dict,
                                                        version: int) -> None:
    plan = build(name, **params)
    _logic, fabric = fresh(plan, "ecmp", version)
    seen = check_marks(plan, fabric, flows_of(plan, SPORTS[:1]))
    assert seen == all_uplinks(plan)  # every uplink of every host-facing switch, used and marked


# --- what Open vSwitch itself makes of the messages ---------------------------------------------
def ofp_print(msg: Any) -> str:
    """``ovs-ofctl ofp-print``: OVS's own decoder, as ovs-vswitchd reads the message."""
    if shutil.which("ovs-ofctl") is None:
        pytest.fail("ovs-ofctl not found: install openvswitch-common (`sudo make setup`)",
                    pytrace=False)
    msg.serialize()
    out = subprocess.run(["ovs-ofctl", "ofp-print", bytes(msg.buf).hex()],
                         capture_output=True, text=True, check=True)
    return out.stdout + out.stderr


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name, switch", [("astral3", "lf0r0"), ("rail3", "tor0r0")])
def test_ovs_decodes_marked_groups_and_entries(name: str, switch: str, version: int) -> None:
    plan = build(name)
    marks = FabricLogic(plan).marks[switch]
    msgs = switch_program(protocol(version), compute_routes(plan)[switch], marks=marks)
    texts = [ofp_print(m) for m in msgs[2:]]
    assert not [t for t in texts if "decode error" in t or "***" in t]
    # every mark goes out right before the output by its own port, and nothing else is set
    stamped = {(int(port), int(ttl)) for t in texts
               for ttl, port in re.findall(r"mod_nw_ttl:(\d+),output:(\d+)", t)}
    assert stamped == set(marks.items())
    assert sum(t.count("mod_nw_ttl") for t in texts) == sum(
        len(re.findall(r"mod_nw_ttl:\d+,output:", t)) for t in texts)
    assert not [t for t in texts if "arp" in t and "mod_nw_ttl" in t]
    if name == "astral3":  # the probe lanes' masked port matches, one per lane slot
        slots = {int(v, 0) for t in texts
                 for v in re.findall(r"(?:tp|udp)_src=(0x[0-9a-f]+|\d+)/0x60\b", t)}
        assert slots == {0, 0x20, 0x40, 0x60}, texts[:3]


@pytest.mark.parametrize("version", VERSIONS)
def test_ovs_refuses_a_ttl_on_an_arp_entry_as_the_fake_does(version: int) -> None:
    arp = Entry(200, (("arp_tpa", "10.0.0.9"), ("eth_type", ETH_ARP)),
                (("set_nw_ttl", 129), ("output", 4)))
    assert "OFPBAC_MATCH_INCONSISTENT" in ofp_print(entry_mod(protocol(version), arp))
    with pytest.raises(ValueError, match="does not match IP"):
        FakeSwitch("sw").apply(entry_mod(protocol(version), arp))
