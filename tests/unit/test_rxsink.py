"""A compiled receiver's deliberate ingress drop is not read as a NIC losing packets.

``traffic.rxsink`` notes which hosts drop RoCE at ingress during a replay; the collector
leaves their inbound loss unmeasured meanwhile, and ``astral-lab clean`` removes notes a
killed run left behind.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ops.shell import collector as col
from testbed.topologies import build
from traffic import rxsink


@pytest.fixture
def sink_dir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    d = str(tmp_path / "rx-sink")
    monkeypatch.setattr(rxsink, "SINK_DIR", d)
    return d


def test_mark_unmark_and_the_folder_goes_with_the_last(sink_dir: str) -> None:
    me = os.getpid()
    assert not rxsink.sinking(me)
    rxsink.mark(me)
    rxsink.mark(1)
    assert rxsink.sinking(me) and rxsink.sinking(1)
    rxsink.unmark(me)
    assert not rxsink.sinking(me) and os.path.isdir(sink_dir)
    rxsink.unmark(1)
    rxsink.unmark(1)  # twice is fine
    assert not os.path.exists(sink_dir)


def test_stale_lists_only_markers_of_dead_processes(sink_dir: str) -> None:
    dead = 2 ** 22 + 12345  # above pid_max's default: no such process
    rxsink.mark(os.getpid())
    rxsink.mark(dead)
    assert rxsink.stale() == [dead]


def _fake_files(rx: int, deliver: int) -> dict[str, str]:
    dev = ("Inter-|   Receive                                                |  Transmit\n"
           " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets"
           " errs drop fifo colls carrier compressed\n"
           f"s0g0-eth0: {rx * 1000} {rx} 0 0 0 0 0 0 {rx * 1000} {rx} 0 0 0 0 0 0\n")
    snmp = ("Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams "
            "InUnknownProtos InDiscards InDelivers OutRequests\n"
            f"Ip: 2 64 {deliver} 0 0 0 0 0 {deliver} {rx}\n")
    return {"/proc/4242/net/dev": dev, "/proc/4242/net/snmp": snmp}


@pytest.mark.parametrize("sinking", [False, True])
def test_collector_leaves_a_sinking_hosts_inbound_loss_unmeasured(
        sink_dir: str, monkeypatch: pytest.MonkeyPatch, sinking: bool) -> None:
    plan = build("astral3", servers=2, gpus=2, servers_per_block=2)
    c = col.Collector(plan, None, host_pids={"s0g0": 4242})
    if sinking:
        rxsink.mark(4242)
    values: dict[tuple[str, str], float] = {}
    # every frame the NIC received was dropped before IP: 1,000 frames/s, none delivered
    for t, rx in ((0.0, 0), (1.0, 1000)):
        files = _fake_files(rx, 0)
        monkeypatch.setattr(col, "read_kernel_file", lambda p, f=files: f.get(p))
        values = {}
        c._poll_hosts(t, values)
    assert values[("s0g0", "in_pps")] == pytest.approx(1000)
    if sinking:
        assert ("s0g0", "in_drop_pps") not in values
    else:
        assert values[("s0g0", "in_drop_pps")] == pytest.approx(1000)
