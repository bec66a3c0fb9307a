"""Replay agents end to end on a veth pair between two namespaces (root; no Mininet needed).

The sender's frames must arrive as sent (bytes, PSNs, every message complete, sane
latency), tshark must decode them as InfiniBand BTH over UDP 4791 exactly as sent, and
the receiver must notice loss when packets are dropped on the way in.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.sender import PY, Side, netns_pair, spec_dict, start_receiver, stop_receiver
from traffic import roce
from traffic.rxstate import flow_key
from vocab.flows import sport_for_qp

# 4 QPs, several sizes: ONLY-only, FIRST/MIDDLE/LAST, a shorter last message (``bytes``), a
# padded last packet, a later start, and a second work request on QP 2 (PSN must continue).
FLOWS: list[dict[str, Any]] = [
    {"qp": 1, "messages": 3, "message_bytes": 16, "flow_id": "tiny"},
    {"qp": 2, "messages": 4, "message_bytes": 7408, "flow_id": "dispatch", "dscp": 46,
     "traffic_class": "decode"},
    {"qp": 3, "messages": 2, "message_bytes": 100_000, "bytes": 150_001, "flow_id": "bulk"},
    {"qp": 4, "messages": 5, "message_bytes": 14336, "start": 0.05, "flow_id": "combine"},
    {"qp": 2, "messages": 2, "message_bytes": 14336, "start": 0.02, "flow_id": "combine2"},
]


@pytest.fixture
def pair() -> Iterator[tuple[Side, Side]]:
    with netns_pair("i") as sides:
        yield sides


def _sizes(flow: dict[str, Any]) -> list[int]:
    spec = roce.ReplaySpec.from_dict({"intf": "x", "src_mac": "02:00:00:00:00:01",
                                      "src_ip": "10.0.0.1", "rate_mbps": 0,
                                      "flows": [{"dst_ip": "10.0.0.2",
                                                 "dst_mac": "02:00:00:00:00:02", **flow}]})
    return spec.flows[0].sizes()


def _expected_wire(flows: list[dict[str, Any]]) -> dict[int, list[tuple[int, int]]]:
    """QP -> [(opcode, PSN)] in send order (flow entries on one QP run in start order)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for f in sorted(flows, key=lambda f: f.get("start", 0.0)):
        seq = out.setdefault(f["qp"], [])
        for size in _sizes(f):
            for op, _ in roce.segment(size):
                seq.append((op, len(seq)))
    return out


def _send(a: Side, workdir: str, spec: dict[str, Any], *extra: str) -> subprocess.CompletedProcess:
    path = os.path.join(workdir, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return subprocess.run(a.cmd(PY, "-m", "astral_lab.agent_cli", "send", "--spec", path, "--out",
                                os.path.join(workdir, "sent.json"), *extra),
                          capture_output=True, text=True, timeout=120)


def _start_tcpdump(side: Side, pcap: str) -> subprocess.Popen:
    proc = subprocess.Popen(side.cmd("tcpdump", "-i", side.intf, "-w", pcap, "-U", "-s", "160",
                                     "--immediate-mode", "udp", "port", "4791"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # tcpdump says "listening on ..." once capturing
        line = proc.stderr.readline()
        if "listening on" in line or not line:
            break
    assert proc.poll() is None, "tcpdump did not start"
    return proc


@pytest.mark.skipif(not (shutil.which("tcpdump") and shutil.which("tshark")),
                    reason="needs tcpdump and tshark")
def test_replay_arrives_as_sent_and_tshark_decodes_it(pair: tuple[Side, Side],
                                                      tmp_path: Any) -> None:
    a, b = pair
    workdir = str(tmp_path)
    spec = spec_dict(a, b, FLOWS, rate_mbps=200.0)
    total = sum(sum(_sizes(f)) for f in FLOWS)
    pcap = os.path.join(workdir, "replay.pcap")
    dump = _start_tcpdump(b, pcap)
    recv, recv_out = start_receiver(b, workdir, "recv", "--expect-bytes", str(total),
                                    "--idle-timeout", "5", "--timeout", "60")
    try:
        run = _send(a, workdir, spec, "--start-at", str(time.time() + 0.3))
        assert run.returncode == 0, run.stderr
        recv.wait(timeout=30)
    finally:
        got = stop_receiver(recv, recv_out)
        time.sleep(0.2)
        dump.send_signal(signal.SIGINT)
        dump.communicate(timeout=10)
    with open(os.path.join(workdir, "sent.json")) as f:
        sent = json.load(f)

    # the sender: everything sent, at about the asked rate, nothing retried
    assert sent["bytes"] == total and not sent["interrupted"]
    assert [f["flow_id"] for f in sent["flows"]] == [f["flow_id"] for f in FLOWS]
    assert sent["wire_mbps"] < 1.1 * 200 and sent["send_retries"] == 0
    # the receiver: same bytes and packets, no loss, no kernel drops, stopped by byte count
    assert got["stop_reason"] == "expect_bytes"
    assert (got["bytes"], got["packets"], got["lost"]) == (total, sent["packets"], 0)
    assert got["timestamps"] == "kernel"
    assert not any(got["kernel_drops"].values()), got["kernel_drops"]
    wire = _expected_wire(FLOWS)
    for qp, seq in wire.items():
        key = flow_key(a.ip, qp)  # a QP is named by its number (a sprayed QP's port varies)
        rf = got["flows"][key]
        entries = [f for f in sent["flows"] if f["qp"] == qp]
        assert rf["qp"] == qp and rf["sport"] == sport_for_qp(qp)
        assert rf["bytes"] == sum(f["bytes"] for f in entries)
        assert (rf["first_psn"], rf["next_psn"], rf["packets"]) == (0, len(seq), len(seq))
        assert (rf["reordered"], rf["duplicates"]) == (0, 0)
        # the send time in every message's payload is the sender's record of it
        msgs = [m for m in got["messages"] if m["flow"] == key]
        starts = [t for f in sorted(entries, key=lambda f: f["start_ns"])
                  for t in f["message_start_ns"]]
        assert [m["start_ns"] for m in msgs] == starts
        assert [m["seq"] for m in msgs] == list(range(len(starts)))
    assert len(got["messages"]) == sum(f["messages"] for f in FLOWS)
    for m in got["messages"]:
        assert m["complete"] and m["bytes"] == m["dma_len"], m
        assert 0 < m["latency_ns"] < 1e9, m
        assert m["start_ns"] <= m["first_ns"] <= m["end_ns"]
    # the later flow started no earlier than its offset
    t0 = sent["start_at"] * 1e9
    combine = next(f for f in sent["flows"] if f["flow_id"] == "combine")
    assert combine["start_ns"] >= t0 + 0.05e9

    # tshark decodes the capture as InfiniBand over UDP 4791, exactly as sent
    out = subprocess.run(["tshark", "-r", pcap, "-d", "udp.port==4791,infiniband", "-T", "fields",
                          "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
                          "-e", "infiniband.bth.psn", "-e", "infiniband.reth.dmalen",
                          "-e", "ip.dsfield.dscp"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    decoded: dict[int, list[tuple[int, int]]] = {}
    dscp_of: dict[int, set[int]] = {}
    for line in out.stdout.splitlines():
        op, qp, psn, _dma, dscp = line.split("\t")
        decoded.setdefault(int(qp, 0), []).append((int(op), int(psn)))
        dscp_of.setdefault(int(qp, 0), set()).add(int(dscp))
    assert decoded == wire
    assert dscp_of == {1: {26}, 2: {46, 26}, 3: {26}, 4: {26}}  # QP 2: decode, then bulk


def test_receiver_counts_loss_and_stops_on_sigterm(pair: tuple[Side, Side],
                                                   tmp_path: Any) -> None:
    a, b = pair
    workdir = str(tmp_path)
    drop = ["iptables", "-A", "INPUT", "-p", "udp", "--dport", "4791", "-m", "statistic",
            "--mode", "nth", "--every", "25", "--packet", "7", "-j", "DROP"]
    res = subprocess.run(b.cmd(*drop), capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"iptables statistic unavailable: {res.stderr.strip()}")
    flows = [{"qp": 5, "messages": 20, "message_bytes": 7408},
             {"qp": 6, "messages": 8, "message_bytes": 65536}]
    recv, recv_out = start_receiver(b, workdir, "recv")
    try:
        run = _send(a, workdir, spec_dict(a, b, flows, rate_mbps=100.0))
        assert run.returncode == 0, run.stderr
        time.sleep(0.3)
    finally:
        got = stop_receiver(recv, recv_out)  # SIGTERM: the report is still written
    with open(os.path.join(workdir, "sent.json")) as f:
        sent = json.load(f)
    assert got["stop_reason"] == "SIGTERM"
    assert got["packets"] < sent["packets"]
    assert got["lost"] > 0
    for f in sent["flows"]:
        rf = got["flows"][flow_key(a.ip, f["qp"])]
        # a dropped last packet of the flow leaves no gap behind it: lost may be one short
        assert f["packets"] - rf["packets"] - rf["lost"] in (0, 1)
        assert rf["complete_messages"] < f["messages"]
    incomplete = [m for m in got["messages"] if not m["complete"]]
    assert incomplete and all(m["dma_len"] is None or m["bytes"] < m["dma_len"]
                              for m in incomplete)
    # paced: never above the asked rate (below it is how a busy machine's CPU shows, which
    # the fidelity guard judges, not a test)
    assert 0 < sent["wire_mbps"] < 1.1 * 100


def test_sender_refuses_bad_spec_and_oversized_pmtu(pair: tuple[Side, Side],
                                                     tmp_path: Any) -> None:
    a, b = pair
    bad = spec_dict(a, b, [{"qp": 1, "messages": 1, "message_bytes": 8}])
    run = _send(a, str(tmp_path), bad)
    assert run.returncode == 2 and "flows[0].message_bytes" in run.stderr
    big = spec_dict(a, b, [{"qp": 1, "messages": 1, "message_bytes": 8192}], pmtu=4096)
    run = _send(a, str(tmp_path), big)
    assert run.returncode == 2 and "MTU" in run.stderr, run.stderr
