"""Traffic-class isolation: tc command construction and read-back parsing (no root).

The read-back fixtures are what ``tc -s`` (iproute2 6.1, Linux 6.x) printed on this machine
for a 20 Mb/s port after ``htb_commands`` (single) and then ``isolation_commands``
(isolated); only the queue limits are templated from ``queue_packets`` so the fixtures follow
the Lab's queue depth. The integration test applies the same commands to real interfaces.
"""

from __future__ import annotations

import pytest

from testbed.shaping import htb_commands, queue_packets
from testbed.shell import qos
from testbed.topologies import build
from traffic.kernels import TRAFFIC_CLASSES

STATS = (" Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
         " backlog 0b 0p requeues 0\n")
CLASS_STATS = STATS + " lended: 0 borrowed: 0 giants: 0\n tokens: 96000 ctokens: 10000\n\n"


def single_text(mbps_label: str = "20Mbit", limit: int | None = None) -> str:
    limit = queue_packets(20) if limit is None else limit
    return (
        "qdisc htb 5: root refcnt 3 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000\n"
        + STATS
        + f"qdisc pfifo 10: parent 5:1 limit {limit}p\n" + STATS
        + f"class htb 5:1 root leaf 10: prio 0 rate {mbps_label} ceil {mbps_label} burst 15Kb "
          "cburst 1600b \n" + CLASS_STATS)


def isolated_text(decode_prio: int = 0, decode_rate: str = "19800Kbit",
                  decode_match: str = "00b80000/00fc0000", catch_all: bool = True,
                  decode_packets: int = 7) -> str:
    text = (
        "qdisc htb 5: root refcnt 3 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000\n"
        + STATS
        + f"qdisc pfifo 12: parent 5:20 limit {queue_packets(20)}p\n" + STATS
        + f"qdisc pfifo 11: parent 5:10 limit {queue_packets(20, qos.DECODE_QUEUE_S)}p\n"
        + STATS
        + f"class htb 5:10 parent 5:1 leaf 11: prio {decode_prio} rate {decode_rate} ceil 20Mbit "
          "burst 15Kb cburst 1600b \n"
        + f" Sent {decode_packets * 1082} bytes {decode_packets} pkt (dropped 0, overlimits 0 "
          "requeues 0) \n backlog 0b 0p requeues 0\n"
        + "class htb 5:1 root rate 20Mbit ceil 20Mbit burst 15Kb cburst 1600b \n" + CLASS_STATS
        + "class htb 5:20 parent 5:1 leaf 12: prio 1 rate 200Kbit ceil 20Mbit burst 15Kb "
          "cburst 1600b \n"
        + " Sent 3246 bytes 3 pkt (dropped 1, overlimits 0 requeues 0) \n"
          " backlog 0b 0p requeues 0\n\n"
        + "filter protocol ip pref 1 u32 chain 0 \n"
        + "filter protocol ip pref 1 u32 chain 0 fh 800: ht divisor 1 \n"
        + "filter protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 "
          "*flowid 5:10 not_in_hw \n"
        + f"  match {decode_match} at 0\n")
    if catch_all:
        text += ("filter protocol all pref 2 u32 chain 0 \n"
                 "filter protocol all pref 2 u32 chain 0 fh 801: ht divisor 1 \n"
                 "filter protocol all pref 2 u32 chain 0 fh 801::800 order 2048 key ht 801 "
                 "bkt 0 *flowid 5:20 not_in_hw \n"
                 "  match 00000000/00000000 at 0\n")
    return text


# --- commands --------------------------------------------------------------------------
def test_isolation_commands_strict_priority_for_dscp_46() -> None:
    cmds = qos.isolation_commands("lf0r0-eth3", 20.0)
    decode = next(c for c in cmds if "classid 5:10" in c)
    bulk = next(c for c in cmds if "classid 5:20" in c)
    assert "prio 0" in decode and "prio 1" in bulk
    # decode first up to 99% of the link, bulk keeps a 1% floor; both may borrow the link
    assert "rate 19.8Mbit ceil 20Mbit" in decode and "rate 0.2Mbit ceil 20Mbit" in bulk
    assert all("parent 5:1 " in c for c in (decode, bulk))
    dsfield = next(c for c in cmds if "dsfield" in c)
    assert TRAFFIC_CLASSES["decode"] << 2 == 0xB8
    assert "match ip dsfield 0xb8 0xfc flowid 5:10" in dsfield and "protocol ip" in dsfield
    catch_all = next(c for c in cmds if "match u32 0 0" in c)
    assert "flowid 5:20" in catch_all and "protocol all" in catch_all
    # filters come after the classes they point to, and the decode filter is tried first
    assert cmds.index(dsfield) > cmds.index(bulk) and "prio 1 u32" in dsfield
    assert "prio 2 u32" in catch_all
    queues = {c.split("handle ")[1].split()[0]: int(c.split("limit ")[1]) for c in cmds
              if c.startswith("qdisc add")}
    assert queues == {"11:": queue_packets(20, qos.DECODE_QUEUE_S), "12:": queue_packets(20)}


def test_isolation_commands_follow_the_lab_queue_mode_and_prefix() -> None:
    droptail = qos.isolation_commands("x", 20.0, lossless=False, prefix="tc ")
    assert all(c.startswith("tc ") for c in droptail)
    assert any("handle 12: pfifo limit 1000" in c for c in droptail)
    other = qos.isolation_commands("x", 20.0, decode_dscp=34, bulk_floor=0.05)
    assert any("dsfield 0x88 0xfc" in c for c in other)
    assert any("classid 5:20 htb rate 1Mbit" in c for c in other)


def test_restore_commands_undo_isolation_back_to_htb_commands() -> None:
    cmds = qos.restore_commands("lf0r0-eth3", 20.0)
    assert cmds[0] == "filter del dev lf0r0-eth3 parent 5:"
    assert {c for c in cmds if c.startswith("class del")} == {
        "class del dev lf0r0-eth3 classid 5:10", "class del dev lf0r0-eth3 classid 5:20"}
    # the queue the Lab put under 5:1, with the same limit htb_commands gives it
    lab_queue = htb_commands("lf0r0-eth3", 20.0)[-1].replace("qdisc add", "qdisc replace")
    assert cmds[-1] == lab_queue
    assert not any("qdisc" in c for c in qos.restore_commands("d", 20.0, lossless=False))


@pytest.mark.parametrize("kw", [{"dev": "", "mbps": 1.0}, {"dev": "a b", "mbps": 1.0},
                                {"dev": "d", "mbps": 0.0}, {"dev": "d", "mbps": 5.0,
                                                            "bulk_floor": 0.0},
                                {"dev": "d", "mbps": 5.0, "bulk_floor": 0.6}])
def test_bad_input_is_one_clear_error(kw: dict) -> None:
    with pytest.raises(ValueError, match="dev|mbps|bulk_floor"):
        qos.isolation_commands(**kw)


def test_tos_match_is_what_tc_prints() -> None:
    assert qos.tos_match(46) == "00b80000/00fc0000"
    assert qos.tos_match(26) == "00680000/00fc0000"
    with pytest.raises(ValueError, match="dscp"):
        qos.tos_match(64)


def test_show_commands_read_each_device_in_turn() -> None:
    assert qos.show_commands(["a", "b"]) == [
        "qdisc show dev a", "class show dev a", "filter show dev a parent 5:",
        "qdisc show dev b", "class show dev b", "filter show dev b parent 5:"]


# --- parsing and classification ------------------------------------------------------------
def test_parse_rate() -> None:
    assert qos.parse_rate("2Mbit") == 2e6
    assert qos.parse_rate("19800Kbit") == 19.8e6
    assert qos.parse_rate("500bit") == 500
    assert qos.parse_rate("1.5Gbit") == 1.5e9
    with pytest.raises(ValueError, match="tc rate"):
        qos.parse_rate("fast")


def test_parse_isolated_device() -> None:
    st = qos.parse_device(isolated_text())
    assert st.root()["kind"] == "htb" and st.root()["default"] == "0x1"
    dec = st.cls("5:10")
    assert dec["parent"] == "5:1" and dec["leaf"] == "11:" and dec["prio"] == 0
    assert dec["rate_bps"] == 19.8e6 and dec["ceil_bps"] == 20e6 and dec["packets"] == 7
    assert st.cls("5:20")["dropped"] == 1
    assert st.cls("5:1")["leaf"] is None and st.cls("5:1")["parent"] == "root"
    assert st.child_qdisc("5:20")["limit"] == queue_packets(20)
    assert [(f["flowid"], f["matches"]) for f in st.filters] == [
        ("5:10", ["00b80000/00fc0000@0"]), ("5:20", ["00000000/00000000@0"])]


def test_classify_single_and_isolated() -> None:
    assert qos.classify(qos.parse_device(single_text()), 20.0) == ("single", "")
    assert qos.classify(qos.parse_device(isolated_text()), 20.0) == ("isolated", "")
    # a non-lossless Lab: 5:1 keeps the kernel's default queue (not shown by tc)
    plain = single_text().split("qdisc pfifo")[0] + single_text().split(STATS)[2]
    plain = plain.replace("leaf 10: ", "")
    assert qos.classify(qos.parse_device(plain), 20.0, lossless=False)[0] == "single"
    assert qos.classify(qos.parse_device(plain), 20.0, lossless=True)[0] == "other"


@pytest.mark.parametrize("text, why", [
    (isolated_text(decode_prio=1), "prio 0"),
    (isolated_text(decode_rate="10Mbit"), "rate"),
    (isolated_text(decode_match="00680000/00fc0000"), "filters"),
    (isolated_text(catch_all=False), "filters"),
    (single_text(mbps_label="40Mbit"), "link class"),
    (single_text(limit=10), "leaf queues"),
])
def test_classify_names_what_is_wrong(text: str, why: str) -> None:
    mode, reason = qos.classify(qos.parse_device(text), 20.0)
    assert mode == "other"
    assert why in reason


def test_unshaped_port_is_not_mistaken_for_either_mode() -> None:
    st = qos.parse_device("qdisc noqueue 0: root refcnt 2 \n" + STATS)
    assert qos.problems(st, "single", 20.0) == [
        "root qdisc is not htb 5: (the Lab shapes every port with one)"]
    with pytest.raises(ValueError, match="mode"):
        qos.problems(st, "prio", 20.0)


def test_split_devices_by_root_qdisc() -> None:
    text = single_text() + isolated_text() + "qdisc noqueue 0: root refcnt 2 \n" + STATS
    chunks = qos.split_devices(text)
    assert len(chunks) == 3
    assert [qos.classify(qos.parse_device(c), 20.0)[0] for c in chunks] == [
        "single", "isolated", "other"]


def test_ports_cover_every_shaped_interface_once() -> None:
    plan = build("astral3", servers=2, gpus=2, scale=1e-4)
    ps = qos.ports(plan)
    devs = [p.dev for p in ps]
    assert len(devs) == len(set(devs))
    hosts = {h.name for h in plan.hosts}
    assert {p.host for p in ps if p.host} == hosts
    assert all(p.dev == f"{p.host}-eth0" for p in ps if p.host)
    # host NIC ends in their namespaces, both ends of every switch-to-switch link in root
    root = [p for p in ps if p.host is None]
    assert len(root) == 2 * len(plan.links) - len(hosts)
    lane = next(ln for ln in plan.links if ln.kind == "lane")
    assert {(p.dev, p.mbps) for p in root} >= {(lane.a_intf, lane.mbps),
                                               (lane.b_intf, lane.mbps)}


class _FakeLab:
    """Enough of a Lab for the shell's guards (no tc is run)."""

    def __init__(self, hosts: dict, shape: bool = True) -> None:
        self.hosts, self.shape = hosts, shape


def test_shell_refuses_a_lab_it_cannot_isolate() -> None:
    from testbed.shell.preflight import LabError

    with pytest.raises(LabError, match="not running"):
        qos.status(_FakeLab({}))
    with pytest.raises(LabError, match="shape=False"):
        qos.enable(_FakeLab({"s0g0": object()}, shape=False))
