"""The compiled traffic plane's files: the sender's plan, and what sender and receiver report.

The replay's per-packet work runs in ``astral-pktio`` (``traffic/csrc/pktio.c``), a small C
program, so the machine's cores go to the emulated switches instead of to Python. Everything
else stays here, in Python, so there is one definition of each thing:

* **frames**: the plan carries the frame templates ``traffic.roce.FrameBuilder`` builds (one
  per QP, opcode and payload length, with the ICRC's masked-prefix CRC); the C sender only
  writes the PSN word, RETH/replay header and ICRC at the offsets ``roce`` defines.
* **accounting**: the C receiver writes one fixed record per RoCE packet it saw (kernel
  timestamp, addresses, PSN, message number, payload length); ``fold_records`` feeds them,
  in arrival order, through ``traffic.rxstate`` like the Python receiver does live, so both
  planes report loss, reordering and latency the same way.

``write_plan`` / ``read_sent`` / ``read_received`` translate to and from the JSON reports of
the Python agents (``SENT.json``, ``RECV.json``), which ``traffic.shell.replay`` joins.
"""

from __future__ import annotations

import ipaddress
import json
import os
import struct
from typing import Any

import numpy as np

from traffic.roce import (
    ECN_ECT0,
    Endpoints,
    FrameBuilder,
    Plane,
    ReplaySpec,
    burst_s,
    flow_report,
    sender_report,
)
from traffic.rxstate import corrupt, fold, mark, new_flow, receiver_report
from vocab.flows import ENTROPY_MODES

PLAN_MAGIC, SENT_MAGIC, REC_MAGIC, VERSION = 0x534B5041, 0x524B5041, 0x434B5041, 3
#: one record per received packet, as ``pktio.c`` writes it (little-endian, packed)
RECORD = np.dtype([("stamp_ns", "<u8"), ("start_ns", "<u8"), ("src_ip", "<u4"),
                   ("psn", "<u4"), ("seq", "<u4"), ("plen", "<u4"), ("dma", "<u4"),
                   ("qp", "<u4"), ("sport", "<u2"), ("op", "u1"), ("bad", "u1"),
                   ("ttl", "u1"), ("pad2", "u1", (3,))])
assert RECORD.itemsize == 48


class _Plan:
    """The sender's jobs in lane order, with their frame kinds and message plans numbered."""

    def __init__(self, spec: ReplaySpec) -> None:
        self.spec = spec
        self.kinds: list[tuple[bytes, int, int, int]] = []  # frame, reth, ack bit, crc0
        self.plans: list[tuple[int, list[int]]] = []  # message size, kind per packet
        self.jobs: list[tuple[int, Any, FrameBuilder, list[tuple[int, int]]]] = []
        ecn = ECN_ECT0 if spec.ecn else 0
        lanes: dict[tuple[str, int], int] = {}
        order = sorted(range(len(spec.flows)),  # a lane's work requests run in this order
                       key=lambda i: (spec.flows[i].dst_ip, spec.flows[i].qp,
                                      spec.flows[i].start, i))
        self.order = order
        for i in order:
            f = spec.flows[i]
            lane = lanes.setdefault((f.dst_ip, f.qp), len(lanes))
            ep = Endpoints(spec.src_mac, f.dst_mac, spec.src_ip, f.dst_ip, f.qp, f.sport,
                           f.dscp, ecn)
            b = FrameBuilder(ep, spec.pmtu, psn=f.psn)
            kind_ids: dict[int, int] = {}
            plan_ids: dict[int, int] = {}
            runs: list[tuple[int, int]] = []
            for size in f.sizes():
                pid = plan_ids.get(size)
                if pid is None:
                    kinds = []
                    for k in b._plan(size):
                        kid = kind_ids.get(id(k))
                        if kid is None:
                            kid = kind_ids[id(k)] = len(self.kinds)
                            self.kinds.append((bytes(k.buf), int(k.reth), k.ack, k.crc0))
                        kinds.append(kid)
                    pid = plan_ids[size] = len(self.plans)
                    self.plans.append((size, kinds))
                if runs and runs[-1][0] == pid:
                    runs[-1] = (pid, runs[-1][1] + 1)
                else:
                    runs.append((pid, 1))
            self.jobs.append((lane, f, b, runs))

    def to_bytes(self) -> bytes:
        spec = self.spec
        out = [struct.pack("<IIIIddIII", PLAN_MAGIC, VERSION, spec.pmtu, spec.overhead_bytes,
                           spec.rate_mbps * 1e6, burst_s(spec), len(self.kinds),
                           len(self.plans), len(self.jobs)),
               struct.pack("<IIdII", ENTROPY_MODES.index(spec.entropy), spec.entropies,
                           spec.flowlet_gap_us / 1e6, spec.plb_rounds, 0)]
        for frame, reth, ack, crc0 in self.kinds:
            out.append(struct.pack("<IIII", len(frame), reth, ack, crc0) + frame)
        for size, kinds in self.plans:
            out.append(struct.pack(f"<II{len(kinds)}I", size, len(kinds), *kinds))
        for lane, f, b, runs in self.jobs:
            out.append(struct.pack("<IdIIQI", lane, f.start, f.psn, b.rkey, b.va, len(runs)))
            out.append(struct.pack(f"<{2 * len(runs)}I", *(x for r in runs for x in r)))
        return b"".join(out)


def write_plan(spec: ReplaySpec, path: str) -> _Plan:
    """Write the C sender's plan for ``spec``; return it (``read_sent`` needs it)."""
    plan = _Plan(spec)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(plan.to_bytes())
    os.replace(tmp, path)
    return plan


def read_sent(path: str, plan: _Plan, start_at: float | None) -> dict[str, Any]:
    """The C sender's report as the Python sender's ``SENT.json`` dict (same keys)."""
    spec = plan.spec
    with open(path, "rb") as fh:
        data = fh.read()
    magic, version, njobs, interrupted = struct.unpack_from("<IIII", data)
    if (magic, version, njobs) != (SENT_MAGIC, VERSION, len(plan.jobs)):
        raise ValueError(f"{path} is not this plan's sender report")
    started_ns, finished_ns, retries, cpu_ns = struct.unpack_from("<qqQq", data, 16)
    off = 48
    rows: dict[int, dict[str, Any]] = {}
    for index, (_lane, f, b, _runs) in zip(plan.order, plan.jobs, strict=True):
        first_seq, first_psn, next_psn, done, nstarts = struct.unpack_from("<5I", data, off)
        (end_ns,) = struct.unpack_from("<q", data, off + 20)
        moves, acks, cnps, _pad, first_move = struct.unpack_from("<4Iq", data, off + 28)
        starts = list(struct.unpack_from(f"<{nstarts}q", data, off + 52))
        off += 52 + 8 * nstarts
        rows[index] = flow_report(f, b, spec.pmtu, starts, first_seq=first_seq,
                                  first_psn=first_psn, next_psn=next_psn, end_ns=end_ns,
                                  done=bool(done))
        rows[index]["entropy"] = {"moves": moves, "first_move_ns": first_move or None,
                                  "acks": acks, "cnps": cnps}
    flows = [rows[i] for i in range(len(spec.flows))]
    return sender_report(spec, flows, start_at=start_at if start_at is not None
                         else started_ns / 1e9, started_ns=started_ns, finished_ns=finished_ns,
                         retries=retries, interrupted=bool(interrupted), plane=Plane.NATIVE,
                         cpu_s=round(cpu_ns / 1e9, 6))


def read_records(path: str) -> np.ndarray:
    """The receiver's packet records (``RECORD`` dtype), in arrival order."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8 or struct.unpack("<II", head) != (REC_MAGIC, VERSION):
            raise ValueError(f"{path} is not a receiver record file")
        return np.fromfile(fh, dtype=RECORD)


def fold_records(recs: np.ndarray) -> dict[tuple[str, int], list[Any]]:
    """Per-QP state of ``traffic.rxstate`` from packet records, folded in arrival order.

    A frame the receiver found corrupt (``bad``: its IPv4 header checksum or its ICRC) is
    dropped as a NIC drops it: not folded as data, so its PSN is a gap (lost), and counted
    in the QP's errors. A QP whose first frame was corrupt opens its range at that PSN. The
    good frames' TTLs are counted per QP (``marks``)."""
    flows: dict[tuple[int, int], list[Any]] = {}
    cols = [recs[c].tolist() for c in ("src_ip", "sport", "op", "psn", "seq", "plen", "dma",
                                       "start_ns", "stamp_ns", "qp", "bad")]
    for ip, sport, op, psn, seq, plen, dma, sent, stamp, qp, bad in zip(*cols, strict=True):
        f = flows.get((ip, qp))
        if f is None:
            f = flows[(ip, qp)] = new_flow(psn, qp, stamp, sport)
        if bad:
            corrupt(f, psn)
        else:
            fold(f, op, psn, seq, plen, dma, sent, stamp)
    good = recs[recs["bad"] == 0]
    if len(good):  # per QP, the lane marks its frames carried
        keys, counts = np.unique(good[["src_ip", "qp", "ttl"]], return_counts=True)
        for (ip, qp, ttl), n in zip(keys.tolist(), counts.tolist(), strict=True):
            mark(flows[(ip, qp)], ttl, n)
    return {(str(ipaddress.IPv4Address(ip)), qp): f for (ip, qp), f in flows.items()}


def read_received(path: str, port: int) -> dict[str, Any]:
    """The C receiver's output as the Python receiver's ``RECV.json`` dict (same keys)."""
    with open(path) as fh:
        meta = json.load(fh)
    flows = fold_records(read_records(f"{path}.bin"))
    result = receiver_report(flows, port, True, meta["stop_reason"], meta["stopped_ns"],
                             meta["malformed"])
    result["kernel_drops"] = {"ring": meta["ring_drops"], "ring_freezes": meta["ring_freezes"]}
    result["receiver_drops"] = int(meta["ring_drops"])  # frames the full ring turned away
    result["feedback"] = meta.get("feedback", {})
    result["plane"] = Plane.NATIVE
    result["cpu_s"] = meta.get("cpu_s")
    result["bad_ip_checksum"] = int(meta.get("bad_ip_checksum", 0))
    result["bad_icrc"] = int(meta.get("bad_icrc", 0))
    return result
