"""RoCEv2 replay agents: put a host's RDMA WRITEs on the wire, and time what arrives (run in hosts).

    python -m astral_lab.agent_cli recv --out RECV.json --ready READY_FILE [--port 4791]
        [--idle-timeout S] [--expect-bytes N] [--timeout S] [--rcvbuf BYTES]
    python -m astral_lab.agent_cli send --spec SPEC.json --out SENT.json [--start-at EPOCH]
        [--rate-mbps R] [--intf IFACE]

**Sender.** ``SPEC.json`` is a ``traffic.roce.ReplaySpec``::

    {"intf": "s0g0-eth0", "src_mac": "...", "src_ip": "10.0.0.1", "rate_mbps": 40.0,
     "pmtu": 1024, "flows": [{"dst_ip": "...", "dst_mac": "...", "qp": 7, "sport": 49159,
     "dscp": 26, "messages": 4, "message_bytes": 1048576, "start": 0.0,
     "traffic_class": "bulk", "flow_id": "s0g0>s3g0/qp7"}]}

optional: ``overhead_bytes`` (per frame, for pacing; default 0), ``ecn`` (default true:
ECT(0), as DCQCN-enabled RoCE NICs send), per flow ``bytes`` (total; the last message
may then be shorter) and ``psn`` (first PSN). The sender opens one ``AF_PACKET`` raw
socket on the interface (the host's emulated NIC), builds every frame template before
the start (``traffic.roce.FrameBuilder``), sleeps until ``--start-at`` (wall clock: every
emulated host shares the machine's clock), then sends. Flows whose ``start`` offset has
come are interleaved **packet by packet, round-robin** (a NIC serves its active QPs
concurrently); flow entries on the same QP (same ``dst_ip`` and ``qp``, e.g. dispatch then
combine on one RC connection) run one after the other with PSN and message numbers
continuing, as an RC QP executes its work requests in order.

Pacing: a token bucket at ``rate_mbps`` counting each frame's bytes (Ethernet header to
ICRC, no FCS: what Mininet's HTB shaper on the host link counts) plus ``overhead_bytes``
(24 = FCS + preamble + IFG to count a real wire; 0 by default to match HTB). The bucket
holds max(2 frames, 200 µs at the rate), so the host queue stays short and a message's
latency reflects the emulated NIC rate rather than a burst sitting in a queue.
``rate_mbps`` 0 sends as fast as Python can (the benchmark's mode). If the interface's
queue is full (``ENOBUFS``) the frame is retried after 100 µs, as a NIC's send queue
would back-pressure; retries are counted. ``SENT.json``: per flow packets, bytes
(RDMA payload), wire bytes, message count, first message number and PSN, send time of
every message (ns); totals, duration and packets/s.

**Receiver.** A UDP socket on port 4791 (frames carry the host's own MAC/IP, so the kernel
delivers them; RoCEv2 sends UDP checksum 0, which IPv4 accepts), kernel receive timestamps
(``SO_TIMESTAMPNS``; else ``time.time_ns()`` after the read), a large receive buffer, and
``SO_RXQ_OVFL`` so socket-queue drops are reported. Per QP (source IP, QP number) it
follows the PSN (``traffic.rxstate``): gaps are counted as lost until the missing PSN shows
up late (then it is reordered), a PSN seen twice is a duplicate (not counted as data), a
packet from before the first one seen is late data. Per message (QP, message number from
the replay header) it records the send time from the payload (``start_ns``), first and last
arrival (``first_ns``, ``end_ns``), bytes and packets; ``latency_ns = end_ns - start_ns``;
``complete`` when the RETH DMA length was seen and that many bytes arrived including the
LAST/ONLY packet. It stops on SIGTERM/SIGINT (after draining what the kernel already
queued), when ``--expect-bytes`` of payload arrived, after ``--idle-timeout`` seconds
without a packet once traffic has started, or at ``--timeout``; then writes ``RECV.json``
atomically, with the kernel's drop counts (``SO_RXQ_OVFL``, the socket's drops in
``/proc/net/udp`` and the namespace's UDP ``RcvbufErrors`` delta; the largest of them is
``receiver_drops``) so a run shows whether the receiver kept up. The ready file is written
once the socket is bound. ``RECV.json``: ``flows`` keyed ``"SRC_IP/QP"`` (bytes, packets,
lost, reordered, duplicates, first/next PSN, first/last arrival, messages seen and
complete) and ``messages`` (``flow``, ``seq``, ``bytes``, ``packets``, ``dma_len``,
``start_ns``, ``first_ns``, ``end_ns``, ``latency_ns``, ``complete``). Message numbers run
per QP from 0; ``SENT.json`` gives each flow entry's ``sport`` and ``first_seq`` to join
the two. The ICRC is not checked on receive (the kernel does not, and the sender's is
tested).

Per-packet work is kept small on both sides: preallocated frames patched with
``struct.pack_into``, one ``zlib.crc32`` per frame; on receive, ``recvmsg_into`` a
preallocated buffer, ``struct.unpack_from``, timestamps kept undecoded until the end.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import select
import signal
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from traffic.roce import (
    ECN_ECT0,
    MAX_OVERHEAD,
    PAYLOAD_HDR,
    PSN_MASK,
    Endpoints,
    FrameBuilder,
    Plane,
    ReplayFlow,
    ReplaySpec,
    burst_s,
    flow_report,
    sender_report,
)
from traffic.rxstate import F_LAST, fold, new_flow, receiver_report
from vocab.flows import ROCE_PORT
from vocab.plan import write_json_atomic

# Linux socket options the socket module does not name (asm-generic/socket.h).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SIOCGIFMTU = 0x8921
PR_SET_TIMERSLACK = 29
DEFAULT_RCVBUF = 256 << 20
RETRY_SLEEP_S = 100e-6
RETRY_GIVE_UP_S = 10.0
MIN_SLEEP_S = 50e-6


# --- sender ------------------------------------------------------------------------------------
@dataclass
class _Job:
    """One flow entry of the spec while it runs (its QP's lane decides when it may start)."""

    index: int
    flow: ReplayFlow
    builder: FrameBuilder
    due: float = 0.0  # monotonic
    first_seq: int = 0
    first_psn: int = 0
    end_ns: int = 0
    message_start_ns: list[int] = field(default_factory=list)
    done: bool = False
    gen: Any = None

    def frames(self) -> Iterator[bytearray]:
        """All frames of this flow entry, message after message; marks ``done`` at the end."""
        b = self.builder
        starts = self.message_start_ns
        self.first_seq, self.first_psn = b.seq, b.psn
        for size in self.flow.sizes():
            yield from b.frames(size)
            starts.append(b.message_start_ns)
        self.end_ns = time.time_ns()
        self.done = True

    def report(self, pmtu: int) -> dict[str, Any]:
        """What was sent; after an interruption, counts cover the messages sent completely."""
        return flow_report(self.flow, self.builder, pmtu, self.message_start_ns,
                           first_seq=self.first_seq, first_psn=self.first_psn,
                           next_psn=self.builder.psn, end_ns=self.end_ns, done=self.done)


def interface_mtu(sock: socket.socket, intf: str) -> int:
    """The interface MTU, asked of the socket's namespace (``/sys`` may show another one)."""
    req = struct.pack("16si", intf.encode(), 0)
    return struct.unpack("16si", fcntl.ioctl(sock.fileno(), SIOCGIFMTU, req))[1]


def _fine_timer_slack() -> None:
    """Ask for 1 µs timer slack (default 50 µs) so pacing sleeps end when asked."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)


def open_raw(intf: str) -> socket.socket:
    """One bound ``AF_PACKET`` socket that sends whole frames and receives nothing (proto 0)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sock.bind((intf, 0))
    return sock


def send(spec: ReplaySpec, out: str | None = None, start_at: float | None = None) -> dict[str, Any]:
    """Send every flow of ``spec`` from ``spec.intf``; return (and write to ``out``) the report."""
    sock = open_raw(spec.intf)
    need = spec.pmtu + MAX_OVERHEAD - 14
    mtu = interface_mtu(sock, spec.intf)
    if need > mtu:
        sock.close()
        raise ValueError(f"pmtu {spec.pmtu} needs an MTU of >= {need} on {spec.intf} (it has "
                         f"{mtu}); use a smaller pmtu or raise the MTU")
    ecn = ECN_ECT0 if spec.ecn else 0
    jobs: list[_Job] = []
    lanes: dict[tuple[str, int], list[_Job]] = {}
    for i, f in enumerate(spec.flows):
        ep = Endpoints(spec.src_mac, f.dst_mac, spec.src_ip, f.dst_ip, f.qp, f.sport, f.dscp, ecn)
        job = _Job(i, f, FrameBuilder(ep, spec.pmtu, psn=f.psn))
        for size in set(f.sizes()):
            job.builder.prepare(size)
        jobs.append(job)
        lanes.setdefault((f.dst_ip, f.qp), []).append(job)
    for lane in lanes.values():
        lane.sort(key=lambda j: (j.flow.start, j.index))
    _fine_timer_slack()
    now_wall = time.time()
    if start_at is None:
        start_at = now_wall
    t0 = time.monotonic() + (start_at - now_wall)
    delay = t0 - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    started_ns = time.time_ns()
    interrupted = False
    retries = 0
    try:
        retries = _run(lanes, t0, sock, spec)
    except KeyboardInterrupt:
        interrupted = True
    finished_ns = time.time_ns()
    sock.close()
    flows = [j.report(spec.pmtu) for j in jobs]
    result = sender_report(spec, flows, start_at=start_at, started_ns=started_ns,
                           finished_ns=finished_ns, retries=retries, interrupted=interrupted,
                           plane=Plane.PYTHON, cpu_s=_cpu_s())
    if out:
        write_json_atomic(out, result)
    return result


def _run(lanes: dict[tuple[str, int], list[_Job]], t0: float, sock: socket.socket,
         spec: ReplaySpec) -> int:
    """The send loop: admit due lane heads, send one frame per active QP per round, pace.

    Returns the number of ``ENOBUFS`` retries. The hot path is the ``for g in gens`` loop.
    """
    pending = [lane[0] for lane in lanes.values() if lane]
    queued = {id(lane[0]): lane[1:] for lane in lanes.values() if lane}
    for j in pending:
        j.due = t0 + j.flow.start
    pending.sort(key=lambda j: j.due, reverse=True)  # next due at the end
    active: list[_Job] = []
    gens: list[Any] = []
    send = sock.send
    mono = time.monotonic
    sleep = time.sleep
    spb = 8.0 / (spec.rate_mbps * 1e6) if spec.rate_mbps > 0 else 0.0  # seconds per byte
    ovh = spec.overhead_bytes
    burst = burst_s(spec)
    t_next = mono()
    retries = 0
    while active or pending:
        if pending:
            now = mono()
            while pending and pending[-1].due <= now:
                job = pending.pop()
                job.gen = job.frames()
                active.append(job)
                gens.append(job.gen)
            if not gens:
                sleep(min(pending[-1].due - now, 1.0))
                continue
        finished = False
        for g in gens:
            buf = next(g, None)
            if buf is None:
                finished = True
                continue
            try:
                send(buf)
            except OSError as exc:
                retries += resend(send, buf, exc)
            if spb:
                t_next += (len(buf) + ovh) * spb
                d = t_next - mono()
                if d > MIN_SLEEP_S:
                    sleep(d)
                elif d < -burst:
                    t_next -= d + burst  # idle or late: give back at most one bucket of credit
        if finished:
            still = []
            for job in active:
                if not job.done:
                    still.append(job)
                    continue
                rest = queued.pop(id(job))
                if rest:  # the QP's next work request: PSN and message numbers continue
                    nxt = rest[0]
                    nxt.builder.psn, nxt.builder.seq = job.builder.psn, job.builder.seq
                    nxt.due = max(t0 + nxt.flow.start, mono())
                    queued[id(nxt)] = rest[1:]
                    pending.append(nxt)
                    pending.sort(key=lambda j: j.due, reverse=True)
            active = still
            gens = [j.gen for j in active]
    return retries


def resend(send: Any, buf: bytes | bytearray, exc: OSError) -> int:
    """Resend a frame the interface queue refused (ENOBUFS/EAGAIN), like NIC back-pressure;
    the number of tries. Any other error is raised again."""
    if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
        raise exc
    deadline = time.monotonic() + RETRY_GIVE_UP_S
    n = 0
    while True:
        n += 1
        time.sleep(RETRY_SLEEP_S)
        try:
            send(buf)
            return n
        except OSError as again:
            if again.errno not in (errno.ENOBUFS, errno.EAGAIN) or time.monotonic() > deadline:
                raise


# --- receiver ----------------------------------------------------------------------------------
DRAIN_S = 2.0
_BTH_HDR = struct.Struct(">BB6xIIIQ")  # opcode, flags, PSN word, then 16 bytes after the BTH
_TIMESPEC = struct.Struct("qq")
def stamp_ns(stamp: Any) -> int | None:
    """A packet's arrival time: a kernel timestamp from ancillary data, or ``time_ns()``."""
    if isinstance(stamp, int):
        return stamp
    for level, kind, data in stamp:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec * 1_000_000_000 + nsec
    return None


def stamp_ovfl(stamp: Any) -> int:
    """The socket's cumulative drop count carried by ``SO_RXQ_OVFL`` (0 when absent)."""
    if isinstance(stamp, int):
        return 0
    for level, kind, data in stamp:
        if level == socket.SOL_SOCKET and kind == SO_RXQ_OVFL and len(data) >= 4:
            return struct.unpack_from("I", data)[0]
    return 0


def snmp_counter(proto: str, name: str) -> int | None:
    """A counter of this network namespace's ``/proc/net/snmp`` (``"Udp", "RcvbufErrors"``:
    packets dropped at full socket queues; ``"Ip", "InHdrErrors"``: frames dropped for a bad
    header); None if it cannot be read."""
    try:
        with open("/proc/self/net/snmp") as f:
            rows = [line.split() for line in f if line.startswith(f"{proto}:")]
        return int(dict(zip(rows[0][1:], rows[1][1:], strict=True))[name])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def socket_drops(sock: socket.socket) -> int | None:
    """The ``drops`` column of ``/proc/net/udp`` for this socket (matched by inode)."""
    inode = str(os.fstat(sock.fileno()).st_ino)
    try:
        with open("/proc/self/net/udp") as f:
            for line in f:
                cols = line.split()
                if len(cols) >= 13 and cols[9] == inode:
                    return int(cols[12])
    except (OSError, ValueError):
        pass
    return None


def open_receiver(port: int = ROCE_PORT, rcvbuf: int = DEFAULT_RCVBUF) -> tuple[socket.socket,
                                                                                 bool]:
    """A non-blocking UDP socket on ``port`` with a big buffer; returns it and whether kernel
    receive timestamps are on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)  # root: above rmem_max
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    kernel_ts = True
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        kernel_ts = False
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
    sock.bind(("0.0.0.0", port))
    sock.setblocking(False)
    return sock, kernel_ts


def receive(out: str, ready: str | None = None, port: int = ROCE_PORT,
            idle_timeout: float | None = None, expect_bytes: int | None = None,
            timeout: float | None = None, rcvbuf: int = DEFAULT_RCVBUF) -> dict[str, Any]:
    """Receive RoCEv2 WRITEs until told to stop; write and return the per-QP/per-message report."""
    sock, kernel_ts = open_receiver(port, rcvbuf)
    stop: list[str | None] = [None]

    def on_signal(signum: int, _frame: Any) -> None:
        stop[0] = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    errors0 = snmp_counter("Udp", "RcvbufErrors")
    if ready:
        write_json_atomic(ready, {"port": port, "pid": os.getpid(), "kernel_timestamps": kernel_ts,
                                  "rcvbuf": sock.getsockopt(socket.SOL_SOCKET,
                                                            socket.SO_RCVBUF)})
    flows: dict[tuple[str, int], list[Any]] = {}
    buf = bytearray(65536)
    bufs = [buf]
    ancsize = socket.CMSG_SPACE(16) + socket.CMSG_SPACE(4)
    recv = sock.recvmsg_into
    unpack = _BTH_HDR.unpack_from
    unpack_hdr = PAYLOAD_HDR.unpack_from
    time_ns = time.time_ns
    mono = time.monotonic
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    limit = expect_bytes if expect_bytes else 1 << 62
    deadline = mono() + timeout if timeout else None
    drain_until = None
    total = 0
    seen = -1
    idle_since = mono()
    malformed = 0
    reason = "signal"
    while True:
        try:
            n, anc, _flags, addr = recv(bufs, ancsize)
        except BlockingIOError:
            if stop[0]:
                reason = stop[0]
                break
            now = mono()
            if total != seen:
                seen, idle_since = total, now
            elif total and idle_timeout and now - idle_since >= idle_timeout:
                reason = "idle"
                break
            if deadline is not None and now >= deadline:
                reason = "timeout"
                break
            poller.poll(50)
            continue
        if n < 32:
            malformed += 1
            continue
        op, fl, psnw, a, b, t = unpack(buf)
        if op in (0x07, 0x08):  # MIDDLE, LAST (a literal tuple is a constant: no lookups)
            seq, dma = a, 0
            plen = n - 16 - ((fl >> 4) & 3)  # BTH 12 + ICRC 4 + pad
        elif op in (0x06, 0x0A):  # FIRST, ONLY: RETH, then the replay header
            if n < 48:
                malformed += 1
                continue
            dma = t & 0xFFFFFFFF
            seq, _idx, t = unpack_hdr(buf, 28)
            plen = n - 32 - ((fl >> 4) & 3)  # BTH 12 + RETH 16 + ICRC 4 + pad
        else:
            malformed += 1
            continue
        stamp = anc if kernel_ts else time_ns()
        psn = psnw & 0xFFFFFF
        qp = struct.unpack_from(">I", buf, 4)[0] & PSN_MASK
        f = flows.get((addr[0], qp))
        if f is None:
            f = flows[(addr[0], qp)] = new_flow(psn, qp, stamp, addr[1])
        plen = fold(f, op, psn, seq, plen, dma, t, stamp)
        if not plen:
            continue
        total += plen
        if total >= limit:
            reason = "expect_bytes"
            break
        if stop[0]:  # traffic still flowing: drain a bounded while, then stop
            if drain_until is None:
                drain_until = mono() + DRAIN_S
            elif mono() > drain_until:
                reason = stop[0]
                break
    stopped_ns = time_ns()
    drops = socket_drops(sock)
    errors1 = snmp_counter("Udp", "RcvbufErrors")
    sock.close()
    result = receiver_report(flows, port, kernel_ts, reason, stopped_ns, malformed, stamp_ns)
    result["kernel_drops"] = {
        "rxq_ovfl": max((stamp_ovfl(f[F_LAST]) for f in flows.values()), default=0),
        "socket": drops,
        "udp_rcvbuf_errors": (errors1 - errors0) if errors0 is not None and errors1 is not None
        else None}
    # three readings of the one socket queue's drops: the largest is the count
    result["receiver_drops"] = max(v for v in result["kernel_drops"].values() if v is not None)
    result["plane"] = Plane.PYTHON
    result["cpu_s"] = _cpu_s()
    write_json_atomic(out, result)
    return result


# --- CLI ---------------------------------------------------------------------------------------
def load_spec(path: str, intf: str | None = None, rate_mbps: float | None = None) -> ReplaySpec:
    """Read and validate a spec file, applying command-line overrides first."""
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        if intf is not None:
            data["intf"] = intf
        if rate_mbps is not None:
            data["rate_mbps"] = rate_mbps
    return ReplaySpec.from_dict(data)


def _cpu_s() -> float:
    """CPU seconds this process used so far, imports included (what an agent costs)."""
    t = os.times()
    return round(t.user + t.system, 6)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt
