"""The compiled traffic plane on a real fabric: the same report as the Python agents for the
same flows, frames that decode as RoCE with a correct ICRC at a 4,096-byte path MTU, and one
clear error when the MTU does not fit."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from controllers.plan import WiringPlan
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.roce import packets_for, verify_icrc
from traffic.shell.replay import replay


def small() -> WiringPlan:
    return build("astral3", servers=4, gpus=2, servers_per_block=2)


def flows() -> list[FlowSpec]:
    # cross-rail and same-leaf, bulk and single-packet messages, a short last message
    return [FlowSpec.make("s0g0", "s2g1", 300_000, qp=1, message_bytes=64_000),
            FlowSpec.make("s1g1", "s0g1", 20_000, qp=2, message_bytes=500),
            FlowSpec.make("s3g0", "s0g0", 100_000, qp=3, message_bytes=30_000)]


def test_native_and_python_planes_report_the_same_flows(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = small()
    with Lab(plan) as lab:
        got = {plane: replay(lab, flows(), plane=plane, progress=False)
               for plane in ("python", "native")}
    for plane, r in got.items():
        assert r.plane == plane
        assert r.bytes_received == r.bytes_sent == 420_000 and r.lost_packets == 0, plane
        assert all(m["complete"] for m in r.messages), plane
        assert r.cpu_s["senders"] > 0 and r.cpu_s["receivers"] > 0, (plane, r.cpu_s)

    def key(r: Any) -> Any:  # what must not depend on the plane
        return sorted((f["src"], f["dst"], f["qp"], f["bytes"], f["received"], f["reordered"])
                      for f in r.flows), sorted((m["src"], m["seq"], m["bytes"], m["packets"],
                                                 m["dma_len"]) for m in r.messages)

    assert key(got["native"]) == key(got["python"])
    print(f"CPU s, python plane {got['python'].cpu_s}, native {got['native'].cpu_s}")
    assert_clean(plan)


def test_pmtu_4096_frames_decode_with_a_correct_icrc(
        assert_clean: Callable[[WiringPlan], None], tmp_path: str) -> None:
    from scapy.utils import rdpcap

    plan = small()
    pcap = os.path.join(str(tmp_path), "roce4k.pcap")
    with Lab(plan) as lab:  # pmtu 4096 by default: every interface's MTU carries it
        assert lab.pmtu == 4096 and lab.mtu == 4200
        cap = lab.hosts["s2g1"].popen(["tcpdump", "-i", "s2g1-eth0", "-w", pcap, "-U",
                                       "--immediate-mode", "udp", "port", "4791"])
        time.sleep(1.0)
        r = replay(lab, flows()[:1], pmtu=4096, progress=False)
        time.sleep(0.5)
        cap.terminate()
        cap.wait(timeout=10)
    assert r.bytes_received == r.bytes_sent and r.lost_packets == 0
    frames = [bytes(p) for p in rdpcap(pcap)]
    # 300,000 bytes in 64,000-byte messages at pmtu 4096: 16 packets each, 11 in the last
    assert len(frames) == 4 * packets_for(64_000, 4096) + packets_for(44_000, 4096) == 75
    assert max(len(f) for f in frames) == 14 + 20 + 8 + 12 + 16 + 4096 + 4
    assert all(verify_icrc(f) for f in frames)
    assert_clean(plan)


def test_a_pmtu_the_mtu_cannot_carry_is_one_clear_error(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = small()
    with Lab(plan, pmtu=1024) as lab, pytest.raises(RuntimeError,
                                                    match="pmtu 4096 needs an MTU"):
        replay(lab, flows()[:1], pmtu=4096, progress=False)
    assert_clean(plan)
