"""What a replay receiver keeps per QP and per message, and the report made from it.

Shared by the Python receiver (which folds packets as they arrive) and the compiled plane
(whose receiver only records packets; ``traffic.native`` folds the records afterwards), so
both give the same loss, reordering and latency figures for the same packets.

Per QP (source IP, destination QP number: a sprayed QP changes its UDP source port every
packet, so the port cannot name it) the PSN is followed: a gap is counted lost until the
missing PSN shows up late (then it is reordered); a PSN seen twice is a duplicate and not
counted as data. The receiver does not know where a QP's PSNs start, so the first packet to
arrive opens the range; a packet from before it (the QP's first packets, overtaken on
another path) is late data, not a duplicate, and the range opens further back. For
reordering the QP also keeps how far behind the newest PSN a late packet came (its reorder
distance) and the widest window between the oldest hole and the newest PSN (what an
out-of-order receiver's bitmap or buffer must span).

``lost`` counts only the PSNs between the first and the newest seen: a packet missing at
the head or the tail of a QP leaves no gap the receiver can see. ``first_psn`` ..
``next_psn`` is the range seen (``packets + lost`` PSNs); whoever knows what was sent
(``traffic.shell.replay`` joins the senders' packet counts) counts the rest as lost.

Per message (QP, message number) the send time from the payload, first and
last arrival, bytes and packets are kept; a message is complete when its RETH DMA length was
seen and that many bytes arrived including the LAST/ONLY packet.

The compiled receiver also reads each frame's TTL: the lane mark a host-facing switch wrote
(``vocab.lanemark``), so ``marks`` says per QP which uplinks its packets crossed (the Python
receiver, on a UDP socket, does not see the TTL and leaves it empty).

A frame that fails a checksum (the compiled receiver checks the IPv4 header's, and the ICRC
of frames it holds whole) is dropped as a NIC drops it and counted in its QP's ``errors``:
the clean fabric's count is exactly zero, so one error is a corrupting link.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traffic.roce import OP_WRITE_FIRST, OP_WRITE_LAST, OP_WRITE_MIDDLE, PSN_MASK

# Per-QP state is a list (index constants below): attribute access costs more per packet.
_F_BYTES, _F_PKTS, _F_EXP, _F_LOST, _F_REORD, _F_DUP, _F_FIRST, F_LAST, _F_MSGS = range(9)
_F_QP, _F_PSN0, _F_MISSING, _F_UNTRACKED, _F_SPORT, _F_HOLE, _F_RDIST, _F_RWIN = range(9, 17)
_F_ERR, _F_MARKS = 17, 18
# Per-message state: send ns (payload), bytes, packets, first stamp, last stamp, DMA length, last?
_M_SENT, _M_BYTES, _M_PKTS, _M_FIRST, _M_LAST, _M_DMA, _M_END = range(7)
MAX_TRACKED_GAP = 4096  # PSNs of a larger gap are counted lost but not remembered one by one
MAX_MISSING = 1 << 20


def psn_event(f: list[Any], psn: int) -> bool:
    """A PSN other than the expected one: a gap (loss so far), a late packet (from a gap, or
    up to ``MAX_TRACKED_GAP`` PSNs before the first seen) or a duplicate.

    Returns whether the packet carries new data (``False`` for a duplicate).
    """
    exp = f[_F_EXP]
    ahead = (psn - exp) & PSN_MASK
    if ahead < (1 << 23):  # the packets exp .. psn-1 are missing (for now)
        _holes(f, exp, ahead)
        if f[_F_HOLE] < 0:
            f[_F_HOLE] = exp
        f[_F_EXP] = (psn + 1) & PSN_MASK
        _window(f)
        return True
    missing = f[_F_MISSING]
    back = (f[_F_PSN0] - psn) & PSN_MASK
    if 0 < back <= MAX_TRACKED_GAP and back + ((exp - f[_F_PSN0]) & PSN_MASK) < (1 << 23):
        _before_start(f, psn, back)
        return True
    if psn in missing:  # a late packet fills an old gap: reordered, not lost
        missing.discard(psn)
        f[_F_LOST] -= 1
        _late(f, psn)
        if psn == f[_F_HOLE]:  # the oldest hole filled: the next oldest (wrap-aware)
            f[_F_HOLE] = max(missing, key=lambda x: (exp - x) & PSN_MASK) if missing else -1
        return True
    f[_F_DUP] += 1
    return False


def _before_start(f: list[Any], psn: int, back: int) -> None:
    """A packet ``back`` PSNs before the first one seen: the QP's range now starts at it.

    It came late (every packet seen so far overtook it); the PSNs between it and the old
    start were not seen either, so they are holes, lost until they come.
    """
    gap = back - 1
    if gap:
        _holes(f, psn + 1, gap)
        f[_F_HOLE] = (psn + 1) & PSN_MASK  # older than any hole after the old start
    f[_F_PSN0] = psn
    dist = _late(f, psn)
    if dist + 1 > f[_F_RWIN]:  # a receiver that knew the start had a hole at psn till now
        f[_F_RWIN] = dist + 1


def _holes(f: list[Any], first: int, n: int) -> None:
    """PSNs ``first`` .. ``first + n - 1`` not seen: lost until they come (remembered one by
    one up to ``MAX_TRACKED_GAP`` of them at once and ``MAX_MISSING`` in all)."""
    f[_F_LOST] += n
    missing = f[_F_MISSING]
    if n <= MAX_TRACKED_GAP and len(missing) < MAX_MISSING:
        missing.update((first + k) & PSN_MASK for k in range(n))
    else:
        f[_F_UNTRACKED] += n


def _late(f: list[Any], psn: int) -> int:
    """Count ``psn`` as reordered; its reorder distance (newer packets that overtook it)."""
    f[_F_REORD] += 1
    dist = (f[_F_EXP] - 1 - psn) & PSN_MASK
    if dist > f[_F_RDIST]:
        f[_F_RDIST] = dist
    return dist


def _window(f: list[Any]) -> None:
    """Widen the QP's reorder window to span its oldest hole .. newest PSN, if wider."""
    if f[_F_HOLE] >= 0:
        win = (f[_F_EXP] - f[_F_HOLE]) & PSN_MASK
        if win > f[_F_RWIN]:
            f[_F_RWIN] = win


def new_flow(psn: int, qp: int, stamp: Any, sport: int = 0) -> list[Any]:
    """The state of a QP first seen with ``psn`` at ``stamp`` (from UDP port ``sport``)."""
    return [0, 0, psn, 0, 0, 0, stamp, stamp, {}, qp, psn, set(), 0, sport, -1, 0, 0, 0, {}]


def mark(f: list[Any], ttl: int, packets: int) -> None:
    """``packets`` of the QP's frames arrived with TTL ``ttl``: the lane mark of the uplink
    they crossed (``vocab.lanemark``), or the sender's TTL when they crossed none."""
    f[_F_MARKS][ttl] = f[_F_MARKS].get(ttl, 0) + packets


def corrupt(f: list[Any], psn: int) -> None:
    """A frame of the QP that failed its checksum: dropped, so its PSN stays a gap (lost
    once a later PSN arrives, or by the senders' count at the tail), and counted."""
    f[_F_ERR] += 1


def fold(f: list[Any], op: int, psn: int, seq: int, plen: int, dma: int, sent_ns: int,
         stamp: Any) -> int:
    """Add one packet to its QP's state; return the payload bytes it counts (0: duplicate)."""
    if psn == f[_F_EXP]:
        f[_F_EXP] = (psn + 1) & PSN_MASK
        if f[_F_HOLE] >= 0:
            _window(f)
    elif not psn_event(f, psn):
        return 0
    f[_F_BYTES] += plen
    f[_F_PKTS] += 1
    f[F_LAST] = stamp
    msgs = f[_F_MSGS]
    m = msgs.get(seq)
    if m is None:
        m = msgs[seq] = [sent_ns, 0, 0, stamp, stamp, -1, False]
    elif sent_ns < m[_M_SENT]:  # packets carry their own send time: the message's is the first
        m[_M_SENT] = sent_ns
    m[_M_BYTES] += plen
    m[_M_PKTS] += 1
    m[_M_LAST] = stamp
    if op != OP_WRITE_MIDDLE:
        if op != OP_WRITE_LAST:
            m[_M_DMA] = dma
        if op != OP_WRITE_FIRST:
            m[_M_END] = True
    return plen


def flow_key(ip: str, qp: int) -> str:
    """How reports name a QP: its source IP and QP number."""
    return f"{ip}/{qp}"


def _int_stamp(stamp: Any) -> int | None:
    return stamp


def receiver_report(flows: dict[tuple[str, int], list[Any]], port: int, kernel_ts: bool,
                    reason: str, stopped_ns: int, malformed: int,
                    stamp_ns: Callable[[Any], int | None] = _int_stamp) -> dict[str, Any]:
    """The receiver's JSON: per QP (``"IP/QP"``, ``flows`` keyed by (source IP, QP number))
    and per message, from the folded state."""
    out_flows: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    for (ip, qp), f in sorted(flows.items()):
        key = flow_key(ip, qp)
        done = 0
        for seq, m in sorted(f[_F_MSGS].items()):
            end = stamp_ns(m[_M_LAST])
            complete = m[_M_END] and m[_M_DMA] == m[_M_BYTES]
            done += bool(complete)
            messages.append({
                "flow": key, "seq": seq, "bytes": m[_M_BYTES], "packets": m[_M_PKTS],
                "dma_len": m[_M_DMA] if m[_M_DMA] >= 0 else None,
                "start_ns": m[_M_SENT], "first_ns": stamp_ns(m[_M_FIRST]), "end_ns": end,
                "latency_ns": end - m[_M_SENT] if end is not None else None,
                "complete": bool(complete)})
        out_flows[key] = {
            "src_ip": ip, "sport": f[_F_SPORT], "qp": f[_F_QP], "bytes": f[_F_BYTES],
            "packets": f[_F_PKTS], "lost": f[_F_LOST], "reordered": f[_F_REORD],
            "reorder_distance_max": f[_F_RDIST], "reorder_window_max": f[_F_RWIN],
            "duplicates": f[_F_DUP], "lost_untracked": f[_F_UNTRACKED], "errors": f[_F_ERR],
            "marks": {str(t): n for t, n in sorted(f[_F_MARKS].items())},
            "first_psn": f[_F_PSN0], "next_psn": f[_F_EXP],
            "first_ns": stamp_ns(f[_F_FIRST]), "last_ns": stamp_ns(f[F_LAST]),
            "messages": len(f[_F_MSGS]), "complete_messages": done}
    firsts = [f["first_ns"] for f in out_flows.values() if f["first_ns"]]
    lasts = [f["last_ns"] for f in out_flows.values() if f["last_ns"]]
    return {"port": port, "timestamps": "kernel" if kernel_ts else "user",
            "stop_reason": reason, "stopped_ns": stopped_ns,
            "first_ns": min(firsts) if firsts else None, "last_ns": max(lasts) if lasts else None,
            "packets": sum(f["packets"] for f in out_flows.values()),
            "bytes": sum(f["bytes"] for f in out_flows.values()),
            "lost": sum(f["lost"] for f in out_flows.values()), "malformed": malformed,
            "errors": sum(f["errors"] for f in out_flows.values()),
            "flows": out_flows, "messages": messages}
