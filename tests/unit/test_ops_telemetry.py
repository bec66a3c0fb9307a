"""Telemetry without a fabric: counter parsers, component names, the bounded SQLite store."""

from __future__ import annotations

import os
import sqlite3

import pytest

from ops import telemetry as T
from ops.detectors import Alert
from ops.shell import collector
from testbed.topologies import build
from vocab.plan import link_components

_HEAD = ("Inter-|   Receive                                                |  Transmit\n"
         " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
         "errs drop fifo colls carrier compressed\n")
PROC_NET_DEV = (_HEAD + "    lo: " + " ".join(["0"] * 16) + "\n"
                "s0g0-eth0: 21088 212 0 4 0 0 0 0 108594 795 0 7 0 0 0 0\n")

SNMP = """Ip: Forwarding DefaultTTL InReceives InHdrErrors InDelivers OutRequests OutDiscards
Ip: 2 64 206 0 142 1137 345
Udp: InDatagrams NoPorts OutDatagrams
Udp: 0 0 699
"""

TC = [{"kind": "htb", "handle": "5:", "dev": "lf0r0-eth3", "root": True, "bytes": 1000,
       "packets": 10, "drops": 0, "backlog": 0, "qlen": 0},
      {"kind": "pfifo", "handle": "10:", "parent": "5:1", "dev": "lf0r0-eth3", "bytes": 1000,
       "packets": 10, "drops": 3, "backlog": 4500, "qlen": 3},
      {"kind": "noqueue", "handle": "0:", "dev": "lo", "root": True, "bytes": 0, "drops": 0}]


def test_parsers() -> None:
    dev = T.parse_proc_net_dev(PROC_NET_DEV)
    assert dev["s0g0-eth0"] == {"rx_bytes": 21088, "rx_packets": 212, "rx_drop": 4,
                                "tx_bytes": 108594, "tx_packets": 795, "tx_drop": 7}
    snmp = T.parse_snmp(SNMP)
    assert snmp["Ip.InReceives"] == 206 and snmp["Ip.OutDiscards"] == 345
    assert snmp["Udp.OutDatagrams"] == 699
    tc = T.parse_tc_qdisc(TC)
    assert tc["lf0r0-eth3"] == {"bytes": 1000, "drops": 3, "backlog": 4500}


def test_component_names_follow_the_plan() -> None:
    plan = build("astral3", servers=2, gpus=2)
    comps = link_components(plan)
    assert "lf0r1~spine2#0" in comps and "s1g1~lf0r1#0" in comps
    assert comps["lf0r1~spine2#0"].b == "spine2"
    assert T.canonical("spine2~lf0r1", plan) == "lf0r1~spine2#0"
    assert T.canonical("lf0r1~spine2#0", plan) == "lf0r1~spine2#0"
    assert T.canonical("s1g1~lf0r1#0", plan) == "s1g1"
    assert T.canonical("lf0r1~s1g1", plan) == "s1g1"
    assert T.canonical("spine3") == "spine3"


def test_rates_ignore_first_sample_and_resets() -> None:
    r = T.Rates()
    assert r.rate("x", 0.0, 100) is None
    assert r.rate("x", 2.0, 300) == 100.0
    assert r.rate("x", 3.0, 50) is None  # counter reset
    assert r.delta("x", 4.0, 80) == 30


def test_history_aligns_series() -> None:
    h = T.History(maxlen=3)
    h.add(1.0, {("a", "m"): 1.0})
    h.add(2.0, {("b", "m"): 2.0})
    h.add(3.0, {("a", "m"): 3.0, ("b", "m"): 4.0})
    h.add(4.0, {("a", "m"): 5.0})
    assert list(h.times) == [2.0, 3.0, 4.0]
    assert h.values("a", "m") == [None, 3.0, 5.0]
    assert h.values("b", "m") == [2.0, 4.0, None]
    assert h.values("zz", "m") == [None, None, None]


def test_store_is_bounded_and_readable_by_sqlite(tmp_path) -> None:  # noqa: ANN001
    path = str(tmp_path / "t.sqlite")
    with T.Store(path, max_rows=50) as st:
        st.set_meta(interval_s=1.0)
        for i in range(40):
            st.add_samples(float(i), {("lf0r0~spine0#0", "mbps_ab"): float(i),
                                      ("s0g0", "rx_mbps"): 2.0 * i})
        assert st.count() == 50
        assert st.series("lf0r0~spine0#0", "mbps_ab")[0] == (15.0, 15.0)
        assert st.latest("s0g0") == {("s0g0", "rx_mbps"): (39.0, 78.0)}
        hist = st.history(since=30.0)
        assert len(hist) == 10 and hist.latest("s0g0", "rx_mbps") == 78.0
        a = Alert("degraded", "lf0r0~spine0#0", "warning", "slow", {"x": [1, 2]}, 5.0, 6.0)
        st.save_alert(a)
        a.cleared = 9.0
        st.save_alert(a)
        st.add_event(3.0, "faults", "inject", "s0g0", {"kind": "nic-loss"})
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM samples").fetchone()[0] == 50
    assert db.execute("SELECT component, cleared FROM alerts").fetchall() == [
        ("lf0r0~spine0#0", 9.0)]
    with T.Store(path) as st:
        assert st.meta() == {"interval_s": 1.0}
        assert st.alerts()[0]["evidence"] == {"x": [1, 2]}
        assert st.alerts(active_only=True) == []
        assert st.events()[0]["detail"] == {"kind": "nic-loss"}


def test_latest_keeps_a_stopped_series_and_a_closed_file_is_whole(tmp_path) -> None:  # noqa: ANN001
    """A series that stopped reporting keeps its last row; values never mix across rows;
    while a run writes, the log beside the file is folded back in when the store closes,
    so a reader given only the file (read-only, or a copy) sees every row."""
    path = str(tmp_path / "t.sqlite")
    st = T.Store(path)
    for i in range(5):
        vals = {("s0g0", "rx_mbps"): 10.0 + i, ("s0g0", "tx_mbps"): 20.0 + i}
        if i < 2:  # a series that stops after the second poll
            vals[("s0g1", "rx_mbps")] = 100.0 + i
        st.add_samples(float(i), vals)
    assert st.latest() == {("s0g0", "rx_mbps"): (4.0, 14.0), ("s0g0", "tx_mbps"): (4.0, 24.0),
                           ("s0g1", "rx_mbps"): (1.0, 101.0)}
    assert st.latest("s0g1") == {("s0g1", "rx_mbps"): (1.0, 101.0)}
    assert st.latest("nobody") == {}
    assert st.series("s0g0", "tx_mbps", since=2.0, until=3.0) == [(2.0, 22.0), (3.0, 23.0)]
    st.close()
    assert sorted(os.listdir(tmp_path)) == ["t.sqlite"]
    with T.Store(path, readonly=True) as ro:
        assert ro.count() == 12
    assert sorted(os.listdir(tmp_path)) == ["t.sqlite"]


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="max_rows"):
        T.Store(":memory:", max_rows=0)
    with pytest.raises(ValueError, match="interval"):
        collector.Collector(build("astral3", servers=2, gpus=2), None, interval=0)
