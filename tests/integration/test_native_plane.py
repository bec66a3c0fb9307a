"""The compiled traffic plane on a real fabric: the same report as the Python agents for the
same flows, frames that decode as RoCE with a correct ICRC at a 4,096-byte path MTU, and one
clear error when the MTU does not fit."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.native import read_received
from traffic.roce import OFF_IP, Endpoints, FrameBuilder, ip_checksum, packets_for, verify_icrc
from traffic.shell.pktio import path
from traffic.shell.replay import replay
from vocab.plan import WiringPlan


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


def test_sixteen_senders_under_the_guard_lose_nothing(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    """16 GPUs each sending a cross-leaf permutation flow at its NIC rate, scaled so the
    offered load sits just inside the fidelity guard's margin of 2 against this machine's
    calibrated capacity: every byte arrives, no PSN gap."""
    from scenarios import fidelity
    from scenarios.common import permutation_flows

    capacity = fidelity.calibrate(lambda _m: None, pmtu=4096)

    def at(scale: float) -> tuple[WiringPlan, list[FlowSpec], dict[str, Any]]:
        plan = build("astral3", servers=4, gpus=4, servers_per_block=2, scale=scale)
        flows = permutation_flows(plan, int(scale * 400e9 / 8 * 2.0), qps=1, seed=3)
        return plan, flows, fidelity.verdict(capacity, fidelity.offered(plan, flows,
                                                                          pmtu=4096))

    _p, _f, probe = at(1e-5)
    plan, flows, v = at(1e-5 * probe["margin"] / 2.2)  # 2 s of traffic at the edge
    assert len({f.src for f in flows}) == 16
    assert 2 <= v["margin"] < 2.5, v
    with Lab(plan) as lab:
        r = replay(lab, flows, progress=False)
    assert r.plane == "native" and r.lost_packets == 0
    assert r.bytes_received == r.bytes_sent == sum(f.bytes for f in flows)
    assert all(f["reordered"] == 0 for f in r.flows)
    print(f"16 senders, margin {v['margin']:.1f}: completion {r.job_completion_s:.2f} s, "
          f"CPU s {r.cpu_s}")
    assert_clean(plan)


def test_ctrl_c_during_a_native_replay_stops_every_agent(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    script = ("from testbed.shell.lab import Lab\n"
              "from testbed.topologies import build\n"
              "from scenarios.common import permutation_flows\n"
              "from traffic.shell.replay import replay\n"
              "plan = build('astral3', servers=4, gpus=4, servers_per_block=2, scale=1e-5)\n"
              "with Lab(plan, log=lambda _m: None) as lab:\n"
              "    print('up', flush=True)\n"
              "    replay(lab, permutation_flows(plan, 20_000_000, qps=1), progress=False)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        deadline = time.monotonic() + 60
        running = ""
        while time.monotonic() < deadline and len(running.split()) < 32:
            running = subprocess.run(["pgrep", "-f", "astral-pktio (send|recv)"],
                                     capture_output=True, text=True).stdout
            time.sleep(0.2)
        assert len(running.split()) == 32, running  # 16 senders, 16 receivers
        time.sleep(1.0)  # traffic flowing
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "KeyboardInterrupt" in err, err[-2000:]
    left = subprocess.run(["pgrep", "-f", "astral-pktio (send|recv)"], capture_output=True,
                          text=True).stdout
    assert not left.strip(), left
    assert_clean(build("astral3", servers=4, gpus=4, servers_per_block=2))


@contextlib.contextmanager
def receiver_on_veth(tmp_path: Any) -> Iterator[tuple[str, subprocess.Popen[bytes], str]]:
    """A veth pair with ``astral-pktio recv`` ready on one end: (the other end, to send
    from; the receiver; its ``--out``). The pair goes, and a receiver still running is
    killed, on the way out."""
    a, b = f"astrA{os.getpid() % 100000}", f"astrB{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    out = str(tmp_path / "recv.json")
    recv = None
    try:
        for end in (a, b):
            subprocess.run(["ip", "link", "set", end, "up"], check=True)
        recv = subprocess.Popen([path(), "recv", "--intf", b, "--out", out,
                                 "--ready", out + ".ready", "--timeout", "60"])
        deadline = time.monotonic() + 60
        while not os.path.exists(out + ".ready") and recv.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.path.exists(out + ".ready"), recv.poll()
        yield a, recv, out
    finally:
        if recv is not None and recv.poll() is None:
            recv.kill()
            recv.wait()
        subprocess.run(["ip", "link", "del", a], check=False)


def test_a_receiver_not_scheduled_for_half_a_second_loses_nothing(tmp_path: Any) -> None:
    """A loaded machine deschedules receivers: frames at a low rate must wait in the ring,
    however many of its blocks the kernel hands over part-full, not be dropped."""
    with receiver_on_veth(tmp_path) as (a, recv, out):
        fb = FrameBuilder(Endpoints("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1",
                                    "10.0.0.2", qp=1))
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind((a, 0))
            for i in range(300):  # 200 one-frame messages a second; stopped for 100 of them
                if i == 50:
                    recv.send_signal(signal.SIGSTOP)
                elif i == 150:
                    recv.send_signal(signal.SIGCONT)
                for frame in fb.frames(1000):
                    s.send(frame)
                time.sleep(0.005)
        time.sleep(0.3)
        recv.send_signal(signal.SIGTERM)
        assert recv.wait(timeout=30) == 0
    got = read_received(out, 4791)
    assert got["receiver_drops"] == 0 and got["kernel_drops"]["ring_freezes"] == 0, got
    assert got["packets"] == 300 and got["lost"] == 0, {k: got[k] for k in ("packets", "lost")}


def test_the_receiver_drops_and_counts_corrupt_frames_and_reads_the_lane_mark(
        tmp_path: Any) -> None:
    """Frames with a bad IPv4 header checksum (any size) or a bad ICRC (a frame small enough
    to be held whole) are dropped as a NIC drops them: counted apart, their PSNs lost, the
    rest delivered; each good frame's TTL (the lane mark) is counted per QP. The frames are
    the sender's own, patched after building, so only the one field under test is wrong."""
    small = FrameBuilder(Endpoints("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1",
                                   "10.0.0.2", qp=1))
    large = FrameBuilder(Endpoints("02:00:00:00:00:03", "02:00:00:00:00:02", "10.0.0.3",
                                   "10.0.0.2", qp=2), pmtu=1024)
    with receiver_on_veth(tmp_path) as (a, recv, out):
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind((a, 0))
            for i in range(100):  # one-frame messages of 48 bytes: held whole by the ring
                (frame,) = [bytearray(f) for f in small.frames(48)]
                assert len(frame) <= 128
                if i % 10 == 3:  # a bad header checksum
                    frame[OFF_IP + 10] ^= 0x5A
                elif i % 10 == 7:  # a bad ICRC, the header intact
                    frame[-1] ^= 0x01
                elif i % 2:  # a lane mark, the header checksum fixed as a switch fixes it
                    frame[OFF_IP + 8] = 130
                    frame[OFF_IP + 10:OFF_IP + 12] = b"\0\0"
                    frame[OFF_IP + 10:OFF_IP + 12] = ip_checksum(
                        frame[OFF_IP:OFF_IP + 20]).to_bytes(2, "big")
                s.send(frame)
            for i in range(40):  # 1,024-byte frames: only the header is checked
                (frame,) = [bytearray(f) for f in large.frames(1000)]
                if i % 8 == 5:
                    frame[OFF_IP + 10] ^= 0x5A
                elif i % 8 == 6:
                    frame[-1] ^= 0x01  # beyond the snap: not seen, delivered
                s.send(frame)
        time.sleep(0.3)
        recv.send_signal(signal.SIGTERM)
        assert recv.wait(timeout=30) == 0
    got = read_received(out, 4791)
    assert (got["bad_ip_checksum"], got["bad_icrc"]) == (10 + 5, 10), got
    one = got["flows"]["10.0.0.1/1"]
    # 100 sent: 20 dropped (10 + 10), each a gap between good PSNs (the last, 99, is good)
    assert (one["packets"], one["errors"]) == (80, 20), one
    assert one["lost"] == 20 and one["next_psn"] == 100
    assert one["marks"] == {"64": 50, "130": 30}, one["marks"]
    two = got["flows"]["10.0.0.3/2"]
    assert (two["packets"], two["errors"], two["lost"]) == (35, 5, 5), two
    assert got["errors"] == 25 and got["packets"] == 80 + 35
