"""Steady UDP streams with sequence numbers: how long did a failure stop traffic? (runs in hosts)

    python -m astral_lab.probe_cli recv --port 4791 --out recv.json [--duration S] [--every S]
    python -m astral_lab.probe_cli send --dst 10.1.0.1 --port 4791 --sports 50000-50015 \
        --pps 200 --duration 5

The sender keeps one socket per UDP source port (one "queue pair" each: the
source port is what ECMP hashes) and sends sequence-numbered datagrams to every
one at ``--pps`` packets per second, interleaved. The receiver records, per
source port, how many arrived, how many are missing by sequence number, and the
longest silence between two consecutive arrivals: with a steady stream, that
silence is the outage a failure caused (the failover time), measured in the
data plane rather than taken from the controller's word. Both write JSON.
All hosts share the machine's clock, so send and receive times compare directly.
With ``--every S`` the receiver also rewrites its JSON every S seconds while it runs, so a
watcher reads the streams' loss as it happens (``ops.probes``). Each source port's record
counts its arrivals by IPv4 TTL: the lane mark its first switch wrote
(``vocab.lanemark``), which names the lane ECMP chose for it. The JSON also carries the
receiving namespace's ``Ip: InHdrErrors`` (the frames its IP layer dropped as corrupt, which
a UDP socket never sees) and the socket's own drops (``SO_RXQ_OVFL``: the receiver fell
behind, the machine's fault and not the fabric's).

On a busy machine either end may not be scheduled for a while, and that is not an outage:
arrivals carry the kernel's receive timestamp, and each datagram the time it was due as well
as the time it left, so a silence the sender caused by being late is taken out of the gap.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

from traffic.shell import pktio, programs
from traffic.shell.agent import open_receiver, resend, snmp_counter, stamp_ns, stamp_ovfl
from traffic.shell.running import (
    RunningLab,
    kill_program,
    pull_written,
    signal_program,
    wait_ready,
)
from vocab.flows import ROCE_PORT

#: who sends and receives: this module, or the compiled traffic plane's probe commands
PLANES = ("python", "native")
HEADER = struct.Struct("!Idd")  # sequence number, send time, due time (both time.time())


def parse_sports(text: str) -> list[int]:
    """``50000-50015`` or ``50000,50003`` -> list of ports."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = (int(x) for x in part.split("-", 1))
            out.extend(range(lo, hi + 1))
        elif part:
            out.append(int(part))
    if not out or not all(0 < p < 65536 for p in out):
        raise ValueError(f"bad --sports {text!r}")
    return out


def send(dst: str, port: int, sports: list[int], pps: float, duration: float,
         size: int = 200) -> dict[str, Any]:
    """Send ``pps`` rounds a second for ``duration``, each round one datagram per source
    port (all with the round's sequence number); a JSON-able summary.

    Lossless at the sender, as a NIC is towards its own host: a datagram the host's
    interface queue refuses (the job's burst filled it) is sent again until it goes, so a
    gap at the receiver is the fabric's loss, never the sending host's queue."""
    socks = []
    for sp in sports:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)  # a refused datagram says so
        s.bind(("0.0.0.0", sp))
        socks.append(s)
    pad = b"\0" * max(0, size - HEADER.size)
    interval = 1.0 / pps
    t0, wall0 = time.monotonic(), time.time()
    seq = errors = retries = 0
    while time.monotonic() - t0 < duration:
        now = time.time()
        for s in socks:
            data = HEADER.pack(seq, now, wall0 + seq * interval) + pad
            try:
                retries += send_one(s, data, (dst, port))
            except OSError:  # e.g. ENETUNREACH while a link is down; count and go on
                errors += 1
        seq += 1
        delay = t0 + seq * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return {"sent_per_sport": seq, "sports": sports, "errors": errors, "pps": pps,
            "queue_retries": retries}


#: Linux's socket option that makes a UDP socket report what befell its datagrams
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
#: errors an earlier datagram's ICMP message leaves on the socket, reported by the next send
#: (which did not go out)
_PENDING = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN)


def send_one(s: socket.socket, data: bytes, addr: tuple[str, int]) -> int:
    """Send one datagram; the extra tries a full interface queue took. Raises OSError if
    it cannot go."""
    try:
        s.sendto(data, addr)
        return 0
    except OSError as exc:
        if exc.errno in _PENDING:  # the error was an earlier datagram's: send this one
            s.sendto(data, addr)
            return 1
        return resend(lambda b: s.sendto(b, addr), data, exc)


#: how many of the stream's rounds a source port may lag its newest datagram before the
#: ones it has not had count as lost (datagrams of one round cross the fabric on different
#: lanes and may arrive in any order)
TAIL_ROUNDS = 4


def arrive(flows: dict[int, dict[str, Any]], sport: int, seq: int, sent: float, due: float,
           now: float, ttl: int | None = None) -> None:
    """Fold one arrival (``now``, with IPv4 ``ttl`` when known) into its source port's
    record. The gap since the previous arrival counts less however much later than due the
    sender became in between: the silence of a sender that was not scheduled is not the
    network's."""
    late = sent - due
    f = flows.get(sport)
    if f is None:
        flows[sport] = {"received": 1, "first_seq": seq, "max_seq": seq, "first": now,
                        "last": now, "late": late, "max_gap_s": 0.0, "gap_at": None,
                        "sender_stall_s": 0.0, "latency_sum": now - sent, "reordered": 0,
                        "marks": {} if ttl is None else {ttl: 1}}
        return
    if ttl is not None:
        f["marks"][ttl] = f["marks"].get(ttl, 0) + 1
    stall = max(0.0, late - f["late"])
    gap = now - f["last"] - stall
    if gap > f["max_gap_s"]:
        f["max_gap_s"], f["gap_at"] = gap, f["last"]
    f["sender_stall_s"] = max(f["sender_stall_s"], stall)
    if seq < f["max_seq"]:
        f["reordered"] += 1
    f["max_seq"] = max(f["max_seq"], seq)
    f["last"], f["late"] = now, late
    f["received"] += 1
    f["latency_sum"] += now - sent


def report(port: int, flows: dict[int, dict[str, Any]], bad_headers: int | None = None,
           socket_drops: int = 0) -> dict[str, Any]:
    """The receiver's JSON: per source port, counts (arrivals by TTL in ``marks``), the
    longest gap and when it began; the namespace's ``InHdrErrors`` and the socket's drops.

    A port's lost datagrams are the gaps in its sequence numbers, and those it missed
    since: the sender sends each sequence number to every port, so a port more than
    TAIL_ROUNDS behind the stream's newest datagram lost the ones in between, though
    nothing after them came (a blackhole that takes every datagram of a port shows at
    once, not when it ends)."""
    result: dict[str, Any] = {"port": port, "t": time.time(), "bad_headers": bad_headers,
                              "socket_drops": socket_drops, "flows": {}}
    newest = max((f["max_seq"] for f in flows.values()), default=0)
    for sport, f in sorted(flows.items()):
        expected = max(f["max_seq"], newest - TAIL_ROUNDS) - f["first_seq"] + 1
        result["flows"][str(sport)] = {
            "received": f["received"], "lost": max(0, expected - f["received"]),
            "max_gap_s": round(f["max_gap_s"], 6), "gap_at": f["gap_at"],
            "sender_stall_s": round(f["sender_stall_s"], 6),
            "first": f["first"], "last": f["last"], "reordered": f["reordered"],
            "mean_latency_s": round(f["latency_sum"] / f["received"], 6),
            "marks": {str(t): n for t, n in sorted(f["marks"].items())}}
    return result


def receive(port: int, duration: float | None, out: str,
            every: float | None = None) -> dict[str, Any]:
    """Receive on ``port`` until ``duration`` or SIGTERM; write the report to ``out`` at the
    end, and every ``every`` seconds before it when given."""
    sock, _kernel_ts = open_receiver(port, 4 << 20)
    sock.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
    sock.setblocking(True)
    flows: dict[int, dict[str, Any]] = {}
    stop = False

    def on_signal(_s: int, _f: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # written as soon as the socket is bound, so a starter can wait for it
    _write(out + ".ready", {"port": port})
    end = time.monotonic() + duration if duration else None
    due = time.monotonic() + every if every else None
    ancsize = socket.CMSG_SPACE(16) + 2 * socket.CMSG_SPACE(4)
    drops = 0
    while not stop and (end is None or time.monotonic() < end):
        if due is not None and time.monotonic() >= due:
            _write(out, report(port, flows, snmp_counter("Ip", "InHdrErrors"), drops))
            due += every  # type: ignore[operator]
        ready, _, _ = select.select([sock], [], [], 0.1)
        if not ready:
            continue
        data, anc, _flags, (_ip, sport) = sock.recvmsg(65535, ancsize)
        stamp = stamp_ns(anc)
        now = stamp / 1e9 if stamp is not None else time.time()
        drops = max(drops, stamp_ovfl(anc))
        if len(data) >= HEADER.size:
            arrive(flows, sport, *HEADER.unpack_from(data), now, _ttl(anc))
    result = report(port, flows, snmp_counter("Ip", "InHdrErrors"), drops)
    _write(out, result)
    return result


#: Linux's socket option (and ancillary message) for a datagram's TTL
IP_RECVTTL, IP_TTL = getattr(socket, "IP_RECVTTL", 12), getattr(socket, "IP_TTL", 2)


def _ttl(anc: list[tuple[int, int, bytes]]) -> int | None:
    """The datagram's IPv4 TTL from ``recvmsg``'s ancillary data (None when absent)."""
    for level, kind, data in anc:
        if level == socket.IPPROTO_IP and kind == IP_TTL and len(data) >= 4:
            return int.from_bytes(data[:4], sys.byteorder)
    return None


def _write(path: str, data: Any) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


class Stream:
    """A probe stream between two hosts of a running ``Lab`` (receiver first, then sender).

    ``with Stream(lab, "s0g0", "s3g1", sports=range(50000, 50016)) as st: ...`` runs
    the stream while the body injects a failure; ``st.result`` then holds the
    receiver's JSON per source port. With ``every`` the receiver rewrites ``st.out``
    every that many seconds while it runs (a watcher reads it: ``ops.probes``).
    ``plane``: ``"python"`` runs this module's sender and receiver; ``"native"`` the
    compiled ones (``astral-pktio probe-send`` / ``probe-recv``: the same datagrams,
    accounting and JSON at a fraction of the CPU, for streams that run beside a job).
    """

    def __init__(self, lab: RunningLab, src: str, dst: str, sports: Any, pps: float = 200.0,
                 duration: float = 5.0, port: int = ROCE_PORT, size: int = 200,
                 every: float | None = None, plane: str = "python") -> None:
        if plane not in PLANES:
            raise ValueError(f"plane must be one of {', '.join(PLANES)} (got {plane!r})")
        self.lab, self.src, self.dst = lab, src, dst
        self.sports = list(sports)
        self.pps, self.duration, self.port, self.size = pps, duration, port, size
        self.every, self.plane = every, plane
        self.out = os.path.join(lab.workdir, f"probe-{src}-{dst}-{port}.json")
        self.result: dict[str, Any] = {}
        self.sent: dict[str, Any] = {}
        self._recv: Any = None
        self._send: Any = None

    def start(self) -> Stream:
        for stale in (self.out, self.out + ".ready"):  # an earlier stream's on this port
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
        self.lab.files.makedirs([self.dst], os.path.dirname(self.out))  # where it runs
        every = ["--every", str(self.every)] if self.every else []
        self._recv = self.lab.hosts[self.dst].popen(
            self._program("recv") + ["--port", str(self.port), "--out", self.out, *every])
        wait_ready(self.lab.files, {self.dst: (self._recv, self.out + ".ready")},
                   what="probe receiver")
        ip = self.lab.plan.node(self.dst).ip
        sports = ",".join(str(p) for p in self.sports)
        self._send = self.lab.hosts[self.src].popen(
            self._program("send") + ["--dst", ip, "--port", str(self.port), "--sports", sports,
                                     "--pps", str(self.pps), "--duration", str(self.duration),
                                     "--size", str(self.size)])
        return self

    def _program(self, role: str) -> list[str]:
        """The command line of the plane's ``role`` (send, recv), before its options."""
        if self.plane == "native":
            return [pktio.path(), f"probe-{role}"]
        return [*programs.python_module(programs.PROBE_MODULE), role]

    def wait(self) -> dict[str, Any]:
        out, err = self._send.communicate(timeout=self.duration + 30)
        if self._send.returncode != 0:
            raise RuntimeError(f"probe sender failed: {err!r}")
        self.sent = json.loads(out)
        time.sleep(0.3)  # let the last packets land
        signal_program(self.lab, self.dst, self._recv, self.out)
        self._recv.communicate(timeout=10)
        pull_written(self.lab.files, {self.dst: [self.out]})
        with open(self.out) as f:
            self.result = json.load(f)
        return self.result

    def stop(self) -> None:
        if self._send is not None and self._send.poll() is None:
            self._send.kill()  # paced for a duration: ends by itself wherever it runs
            self._send.wait()
        if self._recv is not None:
            kill_program(self.lab, self.dst, self._recv, self.out)

    def __enter__(self) -> Stream:
        return self.start()

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.wait()
        self.stop()
