"""Fault injection without root: names, validation, commands, incast shape, schedules.

The last part drives ``FaultInjector`` against a fake lab (it records ``set_link`` and
controller calls and answers ``ip -j link show``) to check the orchestration: undo on
exit, timers, flaps, schedules and their event log. The real effects of every kind are
measured in tests/integration/test_faults_live.py.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from testbed import faultkinds, faultmarks, faultspec
from testbed.faultkinds import corruption, hot_receiver, link_degrade
from testbed.faultkinds._loss import iptables_loss_commands, nft_loss_commands
from testbed.faultspec import Fault
from testbed.shaping import htb_commands
from testbed.shell import faults as F
from testbed.shell.faults import FaultError, FaultInjector
from testbed.shell.faults.link_degrade import degrade_commands, htb_rate_command
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.shell.running import LocalFiles
from vocab.plan import WiringPlan


@pytest.fixture(scope="module")
def small() -> WiringPlan:
    """4 servers x 2 GPUs, 2 blocks: 4 leaves, 4 spines, one lane per leaf-spine pair."""
    return build("astral3", servers=4, gpus=2, servers_per_block=2)


@pytest.fixture(scope="module")
def doubled() -> WiringPlan:
    """Two spines for four uplink lanes: two parallel cables between each leaf and spine."""
    return build("astral3", servers=4, gpus=2, servers_per_block=2, spines=2)


# --- Fault: validation --------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, param", [
    ({"kind": "link-cut", "target": "x"}, "kind"),
    ({"kind": "link-down", "target": ""}, "target"),
    ({"kind": "controller-kill", "target": "lf0r0"}, "target"),
    ({"kind": "link-down", "target": "a~b", "at": -1}, "at"),
    ({"kind": "link-down", "target": "a~b", "at": float("nan")}, "at"),
    ({"kind": "link-down", "target": "a~b", "duration": -0.5}, "duration"),
    ({"kind": "link-flap", "target": "a~b", "duration": 3}, "duration"),
    ({"kind": "link-flap", "target": "a~b", "period": 0}, "period"),
    ({"kind": "link-flap", "target": "a~b", "count": 0}, "count"),
    ({"kind": "link-flap", "target": "a~b", "count": 2.5}, "count"),
    ({"kind": "link-flap", "target": "a~b", "count": True}, "count"),
    ({"kind": "link-flap", "target": "a~b", "jitter": 1.0}, "jitter"),
    ({"kind": "link-flap", "target": "a~b", "seed": -1}, "seed"),
    ({"kind": "link-degrade", "target": "a~b", "fraction": 0}, "fraction"),
    ({"kind": "link-degrade", "target": "a~b", "fraction": 1}, "fraction"),
    ({"kind": "link-degrade", "target": "a~b", "fraction": 1.5}, "fraction"),
    ({"kind": "nic-loss", "target": "s0g0", "probability": 0}, "probability"),
    ({"kind": "nic-loss", "target": "s0g0", "probability": 1.01}, "probability"),
    ({"kind": "nic-loss", "target": "s0g0", "probability": "0.1"}, "probability"),
    ({"kind": "nic-loss", "target": "s0g0", "direction": "up"}, "direction"),
    ({"kind": "gray-loss", "target": "a~b", "probability": 0}, "probability"),
    ({"kind": "gray-loss", "target": "a~b", "direction": "egress"}, "direction"),
    ({"kind": "corruption", "target": "a~b", "probability": 1.5}, "probability"),
    ({"kind": "corruption", "target": "a~b", "direction": "both"}, "direction"),
    ({"kind": "hot-receiver", "target": "s0g0", "overload": 0}, "overload"),
    ({"kind": "hot-receiver", "target": "s0g0", "hot_share": 1.0}, "hot_share"),
    ({"kind": "hot-receiver", "target": "s0g0", "senders": -1}, "senders"),
    ({"kind": "partial-blackhole", "target": "lf0r0", "share": 0}, "share"),
    ({"kind": "partial-blackhole", "target": "lf0r0", "share": 1}, "share"),
    ({"kind": "partial-blackhole", "target": "lf0r0", "share": 0.1}, "share"),
    ({"kind": "partial-blackhole", "target": "lf0r0", "seed": -1}, "seed"),
    ({"kind": "mtu-mismatch", "target": "a~b", "mtu": 500}, "mtu"),
    ({"kind": "shuffle-miswiring", "target": "a~b", "seed": -1}, "seed"),
    ({"kind": "mtu-mismatch", "target": "a~b", "mtu": 1500.0}, "mtu"),
])
def test_bad_fault_parameters_name_the_parameter(kwargs: dict[str, Any], param: str) -> None:
    with pytest.raises(ValueError) as err:
        Fault(**kwargs)
    assert str(err.value).startswith(param), str(err.value)


def test_valid_edges_are_accepted_and_spans_follow_the_kind() -> None:
    assert Fault("nic-loss", "s0g0", probability=1.0).settings.probability == 1.0
    assert Fault("link-down", "a~b", at=0, duration=0).span == 0
    assert Fault("link-down", "a~b").span is None and Fault("link-down", "a~b").end is None
    flap = Fault("link-flap", "a~b", at=2, period=0.5, count=4)
    assert flap.span == 2.0 and flap.end == 4.0
    assert Fault("controller-restart").span == 0.0
    assert Fault("controller-restart", duration=3, at=1).end == 4
    assert Fault("controller-kill").target == "controller"


def test_fault_round_trips_through_a_dict_and_rejects_unknown_fields() -> None:
    f = Fault("link-degrade", "lf0r1~spine2#0", at=3.5, duration=10, fraction=0.3)
    assert Fault.from_dict(json.loads(json.dumps(f.to_dict()))) == f
    with pytest.raises(ValueError, match="unknown fault field"):
        Fault.from_dict({**f.to_dict(), "fractoin": 0.3})
    assert f.to_dict() == {"kind": "link-degrade", "target": "lf0r1~spine2#0", "at": 3.5,
                           "duration": 10, "fraction": 0.3}
    with pytest.raises(ValueError, match="unknown fault field.s. probability"):
        Fault.from_dict({**f.to_dict(), "probability": 0.3})


def test_each_kind_takes_its_own_settings_and_refuses_another_kinds() -> None:
    from testbed.faultkinds import FAULT_KINDS

    want = {
        "link-flap": ("period", "count", "jitter", "seed"), "link-degrade": ("fraction",),
        "nic-loss": ("probability", "direction"), "gray-loss": ("probability", "direction"),
        "corruption": ("probability",),
        "partial-blackhole": ("share", "seed"), "mtu-mismatch": ("mtu",),
        "shuffle-miswiring": ("seed",), "link-down": (), "switch-down": (),
        "hot-receiver": ("overload", "hot_share", "senders", "seed")}
    assert {k: FAULT_KINDS.get(k).knobs for k in want} == want  # these kinds' own knobs
    for kind in FAULT_KINDS.names():  # every kind round-trips with its defaults
        f = Fault(kind, "" if FAULT_KINDS.get(kind).target == "controller" else "a~b")
        assert type(f.settings) is FAULT_KINDS.get(kind).declared("SETTINGS")
        assert Fault.from_dict(f.to_dict()) == f
    with pytest.raises(ValueError, match=r"^probability: link-degrade has no setting "
                                         r"'probability' \(its settings: fraction\)$"):
        Fault("link-degrade", "a~b", probability=0.5)
    with pytest.raises(ValueError, match=r"fraction: link-down has no setting 'fraction' "
                                         r"\(its settings: none\)"):
        Fault("link-down", "a~b", fraction=0.5)
    # replace lays knobs over the fault's own settings (ops-eval's per-kind overrides)
    f = Fault("nic-loss", "s0g0", probability=0.2, direction="ingress")
    g = dataclasses.replace(f, at=4.0, probability=0.05)
    assert (g.at, g.settings.probability, g.settings.direction) == (4.0, 0.05, "ingress")
    assert dataclasses.replace(f, target="s1g1").settings == f.settings


# --- names: parse_target, resolve, component --------------------------------------------
def test_link_names_are_canonical_whatever_the_spelling(small: WiringPlan) -> None:
    want = "lf0r1~spine2#0"
    for spelling in ("lf0r1~spine2", "spine2~lf0r1", "lf0r1~spine2#0", "spine2~lf0r1#0",
                     " lf0r1~spine2 "):
        t = faultspec.parse_target(small, spelling)
        assert (t.kind, t.name, t.lane) == ("link", want, 0)
        assert {t.link.a, t.link.b} == {"lf0r1", "spine2"}
    link = faultspec.parse_target(small, want).link
    # an interface at either end names the same cable
    assert faultspec.canonical_component(small, link.a_intf) == want
    assert faultspec.canonical_component(small, link.b_intf) == want
    assert faultspec.canonical_component(small, "s1g1-eth0") == "s1g1~lf0r1#0"


def test_nodes_and_controller_resolve_to_themselves(small: WiringPlan) -> None:
    assert faultspec.parse_target(small, "s3g1").kind == "host"
    assert faultspec.parse_target(small, "spine3").kind == "switch"
    assert faultspec.parse_target(small, "lf1r0").name == "lf1r0"
    assert faultspec.parse_target(small, "controller").kind == "controller"


@pytest.mark.parametrize("text, words", [
    ("nosuch", "not in the plan"),
    ("lf0r1~spine9", "no node 'spine9'"),
    ("lf0r0~lf0r1", "no link between"),
    ("lf0r1~spine2#1", "cable index must be 0..0"),
    ("lf0r1~spine2#x", "cable index"),
    ("lf0r1-eth99", "has no port 99"),
    ("", "non-empty"),
])
def test_unknown_targets_are_one_clear_error(small: WiringPlan, text: str, words: str) -> None:
    with pytest.raises(ValueError) as err:
        faultspec.parse_target(small, text)
    assert str(err.value).startswith("target") and words in str(err.value), str(err.value)


def test_parallel_cables_need_an_index_and_follow_lab_set_link_order(doubled: WiringPlan
                                                                     ) -> None:
    cables = faultspec.parallel_links(doubled, "lf0r0", "spine1")
    assert len(cables) == 2
    with pytest.raises(ValueError, match="2 cables join"):
        faultspec.parse_target(doubled, "lf0r0~spine1")
    for k in (0, 1):
        t = faultspec.parse_target(doubled, f"spine1~lf0r0#{k}")
        assert t.link is cables[k] and t.name == f"lf0r0~spine1#{k}"
        # the index is Lab.set_link's ``lane``: the same cable Lab.links_between returns
        assert Lab.links_between(SimpleNamespace(plan=doubled), "lf0r0", "spine1")[k] is t.link
    assert faultspec.canonical_component(doubled, cables[1].b_intf) == "lf0r0~spine1#1"


@pytest.mark.parametrize("topology, params", [
    ("astral3", {}), ("astral3", {"servers": 4, "gpus": 2, "spines": 2}),
    ("rail3", {"servers": 4, "gpus": 2}), ("railonly", {"servers": 4, "gpus": 2}),
    ("fattree", {"servers": 2, "gpus": 4}),
])
def test_every_link_of_every_design_round_trips_through_its_name(topology: str,
                                                                 params: dict[str, int]) -> None:
    plan = build(topology, **params)
    names = [faultspec.link_name(plan, ln) for ln in plan.links]
    assert len(set(names)) == len(plan.links)
    for ln, name in zip(plan.links, names, strict=True):
        assert faultspec.parse_target(plan, name).link is ln
        assert name.startswith(f"{ln.a}~{ln.b}#")


def test_resolve_checks_the_target_kind_and_writes_it_canonically(small: WiringPlan) -> None:
    f = faultspec.resolve(small, Fault("link-degrade", "spine2~lf0r1", fraction=0.5))
    assert f.target == f.component == "lf0r1~spine2#0" and f.settings.fraction == 0.5
    assert Fault("link-down", "spine2~lf0r1").component == "spine2~lf0r1#0"  # unresolved
    assert faultspec.resolve(small, Fault("switch-down", "spine1")).component == "spine1"
    assert faultspec.resolve(small, Fault("nic-loss", "s2g1")).component == "s2g1"
    assert faultspec.resolve(small, Fault("controller-restart")).component == "controller"
    assert faultspec.resolve(small, Fault("hot-receiver", "s2g1")).component == "s2g1"
    for kind, target, words in [("switch-down", "s0g0", "is a host; switch-down needs a switch"),
                                ("nic-loss", "lf0r0", "is a switch; nic-loss needs a host"),
                                ("link-down", "spine0", "is a switch; link-down needs a link"),
                                ("hot-receiver", "lf0r1~spine2", "is a link")]:
        with pytest.raises(ValueError) as err:
            faultspec.resolve(small, Fault(kind, target))
        assert str(err.value).startswith("target") and words in str(err.value)


def test_hot_receiver_on_a_single_server_plan_is_refused() -> None:
    one = build("astral3", servers=2, gpus=2, servers_per_block=2)
    faultspec.resolve(one, Fault("hot-receiver", "s0g0"))  # two servers: fine
    solo = build("fattree", servers=1, gpus=4)
    with pytest.raises(ValueError, match="no host sends to it"):
        faultspec.resolve(solo, Fault("hot-receiver", "s0g0"))


# --- exact commands --------------------------------------------------------------------------
def test_degrade_changes_only_the_rate_of_the_labs_htb_class(small: WiringPlan) -> None:
    cmd = htb_rate_command("spine2-eth2", 5)
    assert cmd == ["tc", "class", "change", "dev", "spine2-eth2", "parent", "5:0", "classid",
                   "5:1", "htb", "rate", "5Mbit", "burst", "15k", "quantum", "1514"]
    add = next(c for c in htb_commands("spine2-eth2", 5) if c.startswith("class add"))
    assert cmd[3:] == add.split()[2:]  # same arguments as bring-up used, verb aside
    lane = faultspec.parse_target(small, "lf0r1~spine2").link
    assert degrade_commands(small, lane, 5) == [
        ("lf0r1", htb_rate_command("lf0r1-eth5", 5)),
        ("spine2", htb_rate_command("spine2-eth2", 5))]
    nic = faultspec.parse_target(small, "s1g1~lf0r1").link
    assert degrade_commands(small, nic, 10) == [
        ("s1g1", htb_rate_command("s1g1-eth0", 10)), ("lf0r1", htb_rate_command("lf0r1-eth2", 10))]


def test_htb_rates_read_back_from_tc_output() -> None:
    line = "class htb 5:1 root leaf 10: prio 0 rate {} ceil {} burst 15Kb cburst 1600b "
    assert link_degrade.parse_htb_rate(line.format("20Mbit", "20Mbit")) == 20
    assert link_degrade.parse_htb_rate(line.format("6666Kbit", "6666Kbit")) == pytest.approx(6.666)
    assert link_degrade.parse_htb_rate(line.format("1Gbit", "1Gbit")) == 1000
    assert link_degrade.parse_htb_rate(line.format("900bit", "900bit")) == pytest.approx(0.0009)
    assert link_degrade.parse_htb_rate("") is None


def test_nic_loss_nft_rules_drop_ipv4_only_in_a_dedicated_table() -> None:
    setup, script, undo = nft_loss_commands("s1g3-eth0", 0.2, "both")
    assert script == (
        "table netdev astral_lab_faults {\n"
        "  chain ingress {\n"
        '    type filter hook ingress device "s1g3-eth0" priority -500; policy accept;\n'
        "    meta protocol ip numgen random mod 1000000 < 200000 counter drop\n"
        "  }\n"
        "  chain egress {\n"
        '    type filter hook egress device "s1g3-eth0" priority -500; policy accept;\n'
        '    meta protocol ip numgen random mod 1000000 < 200000 counter fwd to "astral-sink"\n'
        "  }\n"
        "}\n")
    assert setup == [["ip", "link", "add", "astral-sink", "type", "veth", "peer", "name",
                      "astral-sink-p"], ["ip", "link", "set", "astral-sink", "up"]]
    assert undo == [["nft", "delete", "table", "netdev", "astral_lab_faults"],
                    ["ip", "link", "del", "astral-sink"]]
    setup, script, undo = nft_loss_commands("s1g3-eth0", 1.0, "ingress")
    assert setup == [] and "egress" not in script and len(undo) == 1
    assert "    meta protocol ip counter drop\n" in script  # p = 1: every IPv4 frame
    _s, script, _u = nft_loss_commands("s1g3-eth0", 1e-9, "egress")
    assert "ingress" not in script and "< 1 counter fwd" in script  # never rounded to no loss


def test_link_faults_act_at_the_sending_ends_egress(small: WiringPlan) -> None:
    """A frame going a->b is lost or corrupted as a's interface sends it: lane ends are
    switch ports (root namespace), a NIC link's a end is the host's NIC."""
    lane = faultspec.parse_target(small, "spine2~lf0r1").link
    assert faultspec.sending_ends(small, lane, "a-to-b") == [
        ("a-to-b", "lf0r1", lane.a_intf, False)]
    assert faultspec.sending_ends(small, lane, "b-to-a") == [
        ("b-to-a", "spine2", lane.b_intf, False)]
    nic = faultspec.parse_target(small, "lf0r0~s0g0").link
    assert [(w, n, h) for w, n, _i, h in faultspec.sending_ends(small, nic, "both")] == [
        ("a-to-b", "s0g0", True), ("b-to-a", "lf0r0", False)]
    with pytest.raises(ValueError, match="direction must be one of a-to-b, b-to-a, both"):
        faultspec.sending_ends(small, nic, "up")


def test_gray_loss_is_nic_loss_egress_with_a_table_and_sink_per_end() -> None:
    table = faultmarks.link_table(faultmarks.LOSS_TABLE, "lf0r1-eth5")
    sink = faultmarks.link_sink("lf0r1-eth5")
    assert table == "astral_lab_loss_lf0r1_eth5"
    assert sink[0].startswith("astral-sk") and len(sink[0]) == 15 == len(sink[1])
    assert faultmarks.link_sink("lf0r1-eth6") != sink  # one per interface
    setup, script, undo = nft_loss_commands("lf0r1-eth5", 0.005, "egress", table=table,
                                                      sink=sink)
    assert script == (
        f"table netdev {table} {{\n"
        "  chain egress {\n"
        '    type filter hook egress device "lf0r1-eth5" priority -500; policy accept;\n'
        f'    meta protocol ip numgen random mod 1000000 < 5000 counter fwd to "{sink[0]}"\n'
        "  }\n"
        "}\n")
    assert setup == [["ip", "link", "add", sink[0], "type", "veth", "peer", "name", sink[1]],
                     ["ip", "link", "set", sink[0], "up"]]
    assert undo == [["nft", "delete", "table", "netdev", table], ["ip", "link", "del", sink[0]]]


def test_corruption_rewrites_the_ipv4_header_checksum_itself() -> None:
    """Writing the checksum field (not another field nft would fix the checksum for) leaves
    checksum ^ 0x5a5a: wrong for every packet."""
    table = faultmarks.link_table(faultmarks.CORRUPT_TABLE, "spine2-eth1")
    assert corruption.nft_corruption_script("spine2-eth1", 0.0005, table) == (
        "table netdev astral_lab_corrupt_spine2_eth1 {\n"
        "  chain egress {\n"
        '    type filter hook egress device "spine2-eth1" priority -500; policy accept;\n'
        "    meta protocol ip numgen random mod 1000000 < 500 counter "
        "ip checksum set ip checksum ^ 0x5a5a\n"
        "  }\n"
        "}\n")
    assert corruption.CORRUPT_XOR not in (0, 0xFFFF)  # ones' complement's zeros: still valid
    assert "numgen" not in corruption.nft_corruption_script("spine2-eth1", 1.0, table)


@pytest.mark.parametrize("kind", ["gray-loss", "corruption"])
def test_link_fault_knobs_come_from_the_severitys_range(kind: str) -> None:
    from testbed.faultkinds import FAULT_KINDS

    mod = FAULT_KINDS.get(kind).module
    assert mod.SEVERITIES == ("gray", "hard")
    rng = random.Random(3)
    for severity, (low, high) in (("gray", (0.0005, 0.01)), ("hard", (0.02, 0.10))):
        drawn = [mod.random_knobs(rng, 10.0, severity) for _ in range(200)]
        ps = [k["probability"] for k in drawn]
        assert low <= min(ps) and max(ps) <= high, (severity, min(ps), max(ps))
        assert min(ps) < 2 * low and max(ps) > high / 2  # the whole range is drawn
        for knobs in drawn:
            Fault(kind, "a~b", **knobs)  # every draw is a valid fault
        if kind == "gray-loss":
            assert {k["direction"] for k in drawn} == set(faultkinds.LINK_DIRECTIONS)
    with pytest.raises(ValueError, match="severity must be one of gray, hard"):
        mod.random_knobs(rng, 10.0, "mixed")


def test_nic_loss_iptables_fallback_commands() -> None:
    setup, undo = iptables_loss_commands("s0g0-eth0", 0.05, "both")
    assert setup == [
        ["iptables", "-w", "-N", "ASTRAL_LAB_FAULTS_IN"],
        ["iptables", "-w", "-A", "ASTRAL_LAB_FAULTS_IN", "-i", "s0g0-eth0", "-m", "statistic",
         "--mode", "random", "--probability", "0.050000", "-j", "DROP"],
        ["iptables", "-w", "-I", "INPUT", "1", "-j", "ASTRAL_LAB_FAULTS_IN"],
        ["iptables", "-w", "-N", "ASTRAL_LAB_FAULTS_OUT"],
        ["iptables", "-w", "-A", "ASTRAL_LAB_FAULTS_OUT", "-o", "s0g0-eth0", "-m", "statistic",
         "--mode", "random", "--probability", "0.050000", "-j", "DROP"],
        ["iptables", "-w", "-I", "OUTPUT", "1", "-j", "ASTRAL_LAB_FAULTS_OUT"]]
    assert undo[:3] == [["iptables", "-w", "-D", "INPUT", "-j", "ASTRAL_LAB_FAULTS_IN"],
                        ["iptables", "-w", "-F", "ASTRAL_LAB_FAULTS_IN"],
                        ["iptables", "-w", "-X", "ASTRAL_LAB_FAULTS_IN"]]
    setup, undo = iptables_loss_commands("s0g0-eth0", 0.05, "egress")
    assert all("INPUT" not in " ".join(c) and "_IN" not in " ".join(c) for c in setup + undo)


# --- hot receiver: the incast's shape ---------------------------------------------------------
def test_incast_comes_from_other_servers_and_grows_with_the_hot_share(small: WiringPlan) -> None:
    w = hot_receiver.incast_weights(small, "s2g1")
    assert set(w) == {"s0g0", "s0g1", "s1g0", "s1g1", "s3g0", "s3g1"}  # not server 2: NVLink
    assert sum(w.values()) == pytest.approx(1.0)
    assert list(w.values()) == sorted(w.values(), reverse=True)
    assert hot_receiver.incast_weights(small, "s2g1") == w  # seeded
    fabric = hot_receiver.incast_bytes(small, "s2g1", intra_server="fabric")
    assert "s2g0" in fabric  # pure-RDMA kernels send to the same server through the NIC too
    # The hot experts really sit on the target: with hot_share = 1/8 (one GPU's share of
    # 8 GPUs) the gating is uniform and the target gets its fair share; at 0.6 it gets
    # ~0.6 / 0.125 = 4.8 times that (a little less: a token picks each expert only once).
    fair = sum(hot_receiver.incast_bytes(small, "s2g1", hot_share=0.125).values())
    hot = sum(hot_receiver.incast_bytes(small, "s2g1", hot_share=0.6).values())
    assert hot / fair == pytest.approx(0.6 / 0.125, rel=0.1)
    # the relabelling is a symmetry of the model: any target gets the same incast
    others = [sum(hot_receiver.incast_bytes(small, h, hot_share=0.6).values())
              for h in ("s0g0", "s3g1")]
    assert all(abs(o - hot) < 0.1 * hot for o in others)


def test_hot_streams_offer_overload_times_the_nic_split_by_the_weights(small: WiringPlan) -> None:
    f = Fault("hot-receiver", "s0g0", overload=1.5)
    streams = hot_receiver.hot_streams(small, f, sport_base=53000)
    nic = small.host_link_mbps()["s0g0"]
    assert sum(s["mbps"] for s in streams) == pytest.approx(1.5 * nic, rel=1e-3)
    assert [s["sport"] for s in streams] == list(range(53000, 53000 + len(streams)))
    w = hot_receiver.incast_weights(small, "s0g0")
    assert [s["src"] for s in streams] == list(w)
    for s in streams:
        assert s["pps"] == pytest.approx(s["mbps"] * 1e6 / 8 / (hot_receiver.HOT_PAYLOAD + 42),
                                         rel=1e-3)
    two = hot_receiver.hot_streams(small, Fault("hot-receiver", "s0g0", senders=2, overload=50))
    assert len(two) == 2 and all(s["mbps"] == nic for s in two)  # capped at their own NIC


# --- random schedules ---------------------------------------------------------------------------
@pytest.mark.parametrize("topology, params", [
    ("astral3", {"servers": 4, "gpus": 2}), ("astral3", {}), ("rail3", {"servers": 4, "gpus": 2}),
    ("fattree", {"servers": 4, "gpus": 2}),
])
def test_random_schedule_properties(topology: str, params: dict[str, int]) -> None:
    plan = build(topology, **params)
    n = 2 * len(faultspec.schedule_kinds(None, "hard")) + 1  # every kind twice, some thrice
    sched = faultspec.random_schedule(plan, n=n, duration_s=15 * n, seed=7, min_gap_s=4)
    assert sched == faultspec.random_schedule(plan, n=n, duration_s=15 * n, seed=7, min_gap_s=4)
    assert sched != faultspec.random_schedule(plan, n=n, duration_s=15 * n, seed=8, min_gap_s=4)
    counts = {k: sum(f.kind == k for f in sched) for k in faultspec.schedule_kinds(None, "hard")}
    assert min(counts.values()) >= 2 and max(counts.values()) - min(counts.values()) <= 1
    lanes = {faultspec.link_name(plan, ln) for ln in faultspec.traffic_links(plan)}
    leaves = set(faultspec.leaf_switches(plan))
    for f in sched:
        assert faultspec.resolve(plan, f) == f  # canonical and valid on this plan
        assert f.at >= 0 and f.end is not None and f.end <= 15 * n
        if faultspec.TARGET_KIND[f.kind] == "link":
            assert f.target in lanes
        if f.kind == "switch-down":
            assert f.target in leaves
        if f.kind == "link-degrade":
            assert 0.1 <= f.settings.fraction <= 0.5
        if f.kind == "nic-loss":
            assert 0.02 <= f.settings.probability <= 0.2
    for a, b in zip(sched, sched[1:], strict=False):
        assert a.end + 4 <= b.at + 1e-6, (a, b)  # no overlap, with the recovery gap


def test_random_schedule_with_few_faults_and_a_subset_of_kinds(small: WiringPlan) -> None:
    hard = faultspec.schedule_kinds(None, "hard")  # the default severity's kinds
    n = len(hard)
    sched = faultspec.random_schedule(small, n=n, duration_s=10 * n, seed=1)
    assert sorted(f.kind for f in sched) == sorted(hard)  # n = kinds: each exactly once
    two = faultspec.random_schedule(small, kinds=["nic-loss", "link-down"], n=5, duration_s=50,
                                    seed=2)
    assert {f.kind for f in two} == {"nic-loss", "link-down"}
    over = faultspec.random_schedule(small, n=12, duration_s=30, seed=3, overlap=True)
    assert all(f.at >= 0 and f.end <= 30 for f in over)


@pytest.mark.parametrize("kwargs, words", [
    ({"kinds": ["link-cut"]}, "kinds: unknown fault kind 'link-cut'"),
    ({"kinds": []}, "kinds must name"),
    ({"n": 0}, "n must be"),
    ({"duration_s": 0}, "duration_s must be"),
    ({"min_gap_s": -1}, "min_gap_s must be"),
    ({"n": 10, "duration_s": 20, "min_gap_s": 2}, "too short"),
])
def test_random_schedule_bad_input(small: WiringPlan, kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        faultspec.random_schedule(small, **kwargs)


def test_random_schedule_refuses_a_kind_without_targets() -> None:
    solo = build("fattree", servers=1, gpus=4)
    with pytest.raises(ValueError, match="no target for hot-receiver"):
        faultspec.random_schedule(solo, kinds=["hot-receiver"], n=2, duration_s=60)


# --- the injector against a fake lab ------------------------------------------------------------
class FakeLab:
    """What FaultInjector uses of a Lab, recording calls; interface admin state in a dict."""

    def __init__(self, plan: WiringPlan) -> None:
        self.plan = plan
        self.hosts = {h.name: SimpleNamespace(pid=1000 + i) for i, h in enumerate(plan.hosts)}
        self.admin = {i: True for ln in plan.links for i in (ln.a_intf, ln.b_intf)}
        self.calls: list[tuple[Any, ...]] = []
        self.controller_proc: Any = SimpleNamespace(pid=4242)
        self.use_controller = self.shape = True
        self.run_id, self.workdir, self.datapath = "fake", "/nonexistent", "fake"
        self.files = LocalFiles()
        self.lock = threading.Lock()

    def set_link(self, a: str, b: str, up: bool, lane: int = 0) -> Any:
        link = [ln for ln in self.plan.links if {ln.a, ln.b} == {a, b}][lane]
        with self.lock:
            self.calls.append(("set_link", a, b, up, lane))
            self.admin[link.a_intf] = self.admin[link.b_intf] = up
        return link

    def kill_controller(self) -> None:
        self.calls.append(("kill",))
        self.controller_proc = None

    def restart_controller(self, wait: bool = True) -> None:
        self.calls.append(("restart", wait))
        self.controller_proc = SimpleNamespace(pid=4343)

    def sh(self, argv: list[str], host: str | None = None, stdin: str | None = None,
           check: bool = True) -> subprocess.CompletedProcess[str]:
        assert argv[:4] == ["ip", "-j", "link", "show"], argv
        flags = ["BROADCAST", "UP"] if self.admin[argv[-1]] else ["BROADCAST"]
        return subprocess.CompletedProcess(argv, 0, json.dumps([{"flags": flags}]), "")


@pytest.fixture
def fake(small: WiringPlan) -> tuple[FakeLab, FaultInjector]:
    lab = FakeLab(small)
    inj = FaultInjector(lab)
    inj.context.sh = lab.sh  # type: ignore[method-assign]
    return lab, inj


def actions(inj: FaultInjector) -> list[tuple[str, str]]:
    return [(e["action"], e["component"]) for e in inj.events]


def test_inject_and_undo_log_ground_truth_and_undo_is_idempotent(fake: Any) -> None:
    lab, inj = fake
    t = time.time()
    h = inj.inject(Fault("link-down", "spine2~lf0r1"))
    assert lab.calls == [("set_link", "lf0r1", "spine2", False, 0)]
    assert h.component == "lf0r1~spine2#0" and h.active and inj.active == [h]
    inj.undo(h)
    inj.undo(h)
    assert lab.calls[1:] == [("set_link", "lf0r1", "spine2", True, 0)]
    assert actions(inj) == [("inject", "lf0r1~spine2#0"), ("undo", "lf0r1~spine2#0")]
    ev = inj.events[0]
    assert ev["kind"] == "link-down" and t <= ev["time"] <= inj.events[1]["time"] <= time.time()
    # the apply's start is stamped before the change: a score's window opens there
    assert t <= ev["apply_start"] <= ev["time"] and "apply_start" not in inj.events[1]
    assert not h.active and inj.active == []


def test_refused_faults_change_nothing(fake: Any) -> None:
    lab, inj = fake
    h = inj.inject(Fault("link-down", "lf0r1~spine2"))
    with pytest.raises(FaultError, match="already has an active link-down"):
        inj.inject(Fault("link-down", "spine2~lf0r1#0"))
    with pytest.raises(ValueError, match="target"):
        inj.inject(Fault("link-down", "lf0r1~spine7"))
    assert len(lab.calls) == 1 and len(inj.events) == 1
    inj.undo(h)
    lab.use_controller = False
    with pytest.raises(FaultError, match="runs no controller"):
        inj.inject(Fault("controller-kill"))
    lab.shape = False
    with pytest.raises(FaultError, match="without shaping"):
        inj.inject(Fault("link-degrade", "lf0r1~spine2"))
    assert len(lab.calls) == 2
    with pytest.raises(ValueError, match="nic_loss_backend"):
        FaultInjector(lab, nic_loss_backend="netem")


@pytest.mark.parametrize("kind", ["gray-loss", "corruption"])
def test_link_faults_are_refused_where_nft_cannot_load_their_rules(
        fake: Any, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe (``nft_rules_problem``) gets the kind's exact rules; its complaint is the
    refusal, before any command runs."""
    lab, inj = fake
    probed: list[tuple[str, str]] = []

    def no_egress(name: str, rules: Any) -> str:
        probed.append((name, rules("fp0")[1]))
        return "Error: Could not process rule: No such file or directory"

    monkeypatch.setattr(F, "nft_rules_problem", no_egress)
    ran: list[list[str]] = []
    inj.context.sh = lambda argv, *a, **k: ran.append(argv)  # type: ignore[method-assign]
    with pytest.raises(FaultError, match=rf"^{kind} needs nftables with the netdev egress "
                                         r"hook .*: Error: Could not process rule"):
        inj.inject(Fault(kind, "lf0r1~spine2", probability=0.01))
    assert ran == [] and inj.events == [] and lab.calls == []
    (name, script), = probed
    assert name == kind and 'hook egress device "fp0"' in script


def test_a_duration_undoes_the_fault_by_itself(fake: Any) -> None:
    lab, inj = fake
    h = inj.inject(Fault("link-down", "lf0r0~spine0", duration=0.1))
    assert h.wait(5)
    assert [c[3] for c in lab.calls] == [False, True]
    inj_t, undo_t = (e["time"] for e in inj.events)
    assert 0.09 <= undo_t - inj_t < 2.0


def test_a_flap_toggles_count_times_then_leaves_the_link_up(fake: Any) -> None:
    lab, inj = fake
    h = inj.inject(Fault("link-flap", "lf0r0~spine1", period=0.1, count=3))
    assert h.wait(5)
    assert [c[3] for c in lab.calls] == [False, True] * 3
    assert [a for a, _ in actions(inj)] == ["inject"] + ["flap-down", "flap-up"] * 3 + ["undo"]
    assert lab.admin["lf0r0-eth4"] and lab.admin["spine1-eth1"]
    downs = [e["time"] for e in inj.events if e["action"] == "flap-down"]
    assert 0.08 <= downs[1] - downs[0] < 3.0  # one period apart (late on a busy machine)


def test_a_slow_link_command_delays_one_flap_edge_not_every_one_after_it(small: WiringPlan
                                                                          ) -> None:
    """Each ``set_link`` costs 0.1 s of the injector's clock (a busy machine's shell): the
    edges still start at their planned offsets from the first one instead of drifting by
    0.1 s more per edge."""
    from testbed.faultkinds.link_flap import phases

    now = [0.0]
    starts: list[float] = []

    def clock() -> float:  # virtual: each read moves it a little, so pauses end by reading
        now[0] += 0.02
        return now[0]

    class SlowLab(FakeLab):
        def set_link(self, a: str, b: str, up: bool, lane: int = 0) -> Any:
            starts.append(now[0])
            now[0] += 0.1
            return super().set_link(a, b, up, lane)

    lab = SlowLab(small)
    inj = FaultInjector(lab, clock=clock)
    inj.context.sh = lab.sh  # type: ignore[method-assign]
    fault = Fault("link-flap", "lf0r0~spine1", period=0.4, count=2)
    h = inj.inject(fault)
    assert h.wait(10)
    planned = [0.0]
    for s in phases(faultspec.resolve(small, fault).settings)[:-1]:
        planned.append(planned[-1] + s)
    assert len(starts) == 4
    assert [t - starts[0] for t in starts] == pytest.approx(planned, abs=0.05)


def test_undoing_a_flap_midway_restores_the_link(fake: Any) -> None:
    lab, inj = fake
    # a long period: the undo lands inside the first down half even when this thread is
    # scheduled late on a busy machine
    h = inj.inject(Fault("link-flap", "lf0r0~spine1", period=6.0, count=50))
    time.sleep(0.1)  # inside the first down half
    inj.undo(h)
    assert lab.calls[-1][3] is True and lab.admin["lf0r0-eth4"]
    assert sum(1 for c in lab.calls if not c[3]) == 1


def test_switch_down_restores_exactly_the_links_that_were_up(fake: Any) -> None:
    lab, inj = fake
    lab.set_link("lf0r0", "spine3", up=False)  # down before the fault: must stay down
    lab.calls.clear()
    h = inj.inject(Fault("switch-down", "lf0r0"))
    plan = lab.plan
    mine = [ln for ln in plan.links if "lf0r0" in (ln.a, ln.b)]
    assert len(lab.calls) == len(mine) - 1 and not any(c[3] for c in lab.calls)
    assert inj.events[0]["detail"] == {"links_down": len(mine) - 1, "links": len(mine)}
    inj.undo(h)
    assert all(lab.admin[ln.a_intf] for ln in mine if ln.b != "spine3")
    assert not lab.admin["lf0r0-eth6"] and not lab.admin["spine3-eth1"]


def test_controller_restart_and_kill(fake: Any) -> None:
    lab, inj = fake
    h = inj.inject(Fault("controller-restart", duration=0.05))
    assert h.wait(5) and lab.calls == [("kill",), ("restart", True)]
    assert [e["detail"]["pid"] for e in inj.events] == [4242, 4343]
    h = inj.inject(Fault("controller-kill"))
    time.sleep(0.1)
    assert h.active and lab.controller_proc is None
    with pytest.raises(FaultError, match="already has an active controller-kill"):
        inj.inject(Fault("controller-kill"))
    inj.undo(h)
    assert lab.calls[-1] == ("restart", True) and lab.controller_proc.pid == 4343


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_leaving_the_block_undoes_everything_even_on_errors(small: WiringPlan,
                                                            exc: type[BaseException]) -> None:
    lab = FakeLab(small)
    with pytest.raises(exc), FaultInjector(lab) as inj:
        inj.context.sh = lab.sh  # type: ignore[method-assign]
        inj.inject(Fault("link-down", "lf0r0~spine0"))
        inj.inject(Fault("switch-down", "spine1"))
        inj.inject(Fault("controller-kill"))
        inj.run_schedule([Fault("link-down", "lf1r1~spine2", at=30)])
        raise exc("boom")
    assert all(lab.admin.values())
    assert lab.calls[-1][0] == "set_link" and ("restart", True) in lab.calls
    assert not inj.active and inj._schedules == []
    assert ("lf1r1", "spine2") not in {c[1:3] for c in lab.calls}  # never injected


def test_a_schedule_plays_out_and_logs_ground_truth(fake: Any) -> None:
    lab, inj = fake
    sched = [Fault("link-down", "lf0r0~spine0", at=0.0, duration=0.1),
             Fault("link-flap", "lf0r1~spine1", at=0.2, period=0.1, count=2),
             Fault("controller-restart", at=0.5, duration=0.05)]
    run = inj.run_schedule(sched)
    assert run.wait(10) and not run.errors
    evs = run.events
    # each fault's own events in order; faults that overlap in time (the flap's last cycle
    # and the restart) interleave as the machine schedules their threads
    by: dict[str, list[str]] = {}
    for e in evs:
        by.setdefault(e["component"], []).append(e["action"])
    assert by == {"lf0r0~spine0#0": ["inject", "undo"],
                  "lf0r1~spine1#0": ["inject", "flap-down", "flap-up", "flap-down", "flap-up",
                                     "undo"],
                  "controller": ["inject", "undo"]}
    assert [e["component"] for e in evs if e["action"] == "inject"] == [
        "lf0r0~spine0#0", "lf0r1~spine1#0", "controller"]
    starts = [e["t"] for e in evs if e["action"] == "inject"]
    for got, want in zip(starts, (0.0, 0.2, 0.5), strict=True):
        assert want - 0.01 <= got < want + 0.5
    assert all(lab.admin.values()) and not inj.active


def test_stopping_a_schedule_undoes_what_it_injected_and_skips_the_rest(fake: Any) -> None:
    lab, inj = fake
    bad = [Fault("link-down", "lf0r0~nowhere")]
    with pytest.raises(ValueError, match="no node"):
        inj.run_schedule(bad)  # checked before anything runs
    run = inj.run_schedule([Fault("switch-down", "spine0", at=0.0),
                            Fault("link-down", "lf1r1~spine2", at=60)])
    deadline = time.monotonic() + 5
    while not run.handles and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.running and not run.wait(0.1)
    assert run.stop() == []
    assert all(lab.admin.values()) and not inj.active
    assert [e["action"] for e in run.events] == ["inject", "undo"]
    assert ("lf1r1", "spine2") not in {c[1:3] for c in lab.calls}


def test_schedule_errors_are_logged_and_the_schedule_goes_on(fake: Any) -> None:
    lab, inj = fake
    run = inj.run_schedule([Fault("controller-kill", at=0.0, duration=0.3),
                            Fault("controller-kill", at=0.05, duration=0.1),  # conflicts
                            Fault("link-down", "lf0r0~spine0", at=0.1, duration=0.05)])
    assert run.wait(10)
    assert len(run.errors) == 1 and "already has an active" in run.errors[0]
    acts = [(e["action"], e["kind"]) for e in run.events]
    assert ("error", "controller-kill") in acts and ("undo", "link-down") in acts
    assert lab.controller_proc is not None
