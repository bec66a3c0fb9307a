"""The UDP probe's gap accounting: an outage the network caused counts, a silence either end
caused by not being scheduled does not (folded records, then real sockets on loopback)."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from testbed.shell import probe
from traffic.shell import pktio

#: what a receiver reports per source port, either plane
FIELDS = ("received", "lost", "max_gap_s", "gap_at", "sender_stall_s", "first", "last",
          "reordered", "mean_latency_s", "marks")


def fold(arrivals: list[tuple[int, float, float, float]]) -> dict:
    flows: dict = {}
    for seq, sent, due, now in arrivals:
        probe.arrive(flows, 50000, seq, sent, due, now)
    return probe.report(4791, flows)["flows"]["50000"]


def test_a_network_outage_is_the_gap_and_its_packets_are_lost() -> None:
    # 100 pps, on time; seq 10..39 never arrive (0.3 s outage)
    arr = [(i, i / 100, i / 100, i / 100 + 0.001) for i in range(60) if not 10 <= i < 40]
    f = fold(arr)
    assert f["lost"] == 30 and f["received"] == 30
    assert abs(f["max_gap_s"] - 0.31) < 1e-6 and f["gap_at"] == 9 / 100 + 0.001
    assert f["sender_stall_s"] == 0


def test_a_late_sender_is_not_an_outage() -> None:
    # the sender is not scheduled for 0.5 s after seq 9, then catches up back to back
    arr = []
    for i in range(60):
        sent = i / 100 if i < 10 else max(i / 100, 0.59 + (i - 10) * 1e-4)
        arr.append((i, sent, i / 100, sent + 0.001))
    f = fold(arr)
    assert f["lost"] == 0 and f["received"] == 60
    assert f["sender_stall_s"] > 0.48 and f["max_gap_s"] < 0.011, f


def test_reordering_is_counted_not_lost() -> None:
    f = fold([(0, 0, 0, 0.001), (2, 0.02, 0.02, 0.021), (1, 0.01, 0.01, 0.022)])
    assert f["reordered"] == 1 and f["lost"] == 0


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _has_socket(pid: int) -> bool:
    """Whether process ``pid`` holds a socket (its files open and close as it starts)."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                return True
        except FileNotFoundError:
            continue
    return False


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The compiled plane's helper, built from this checkout's source."""
    return str(pktio.build(tmp_path_factory.mktemp("pktio") / "astral-pktio", force=True))


#: (sender, receiver) planes: each alone, and each end against the other's
PAIRS = [("python", "python"), ("native", "native"), ("python", "native"),
         ("native", "python")]


def program(plane: str, role: str, compiled: str) -> list[str]:
    """The command line of ``plane``'s ``role`` (send, recv), as ``Stream`` starts it."""
    if plane == "native":
        return [compiled, f"probe-{role}"]
    return [sys.executable, "-m", "astral_lab.probe_cli", role]


ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


class Loopback:
    """A stream on loopback: ``receiver``'s program on a free port, ready, then ``sender``'s
    sending one source port at 100 pps for ``duration`` s; ``finish()`` waits for the
    sender, stops the receiver and returns what the sender printed. Both are killed on
    the way out if still running."""

    def __init__(self, sender: str, receiver: str, compiled: str, out: str,
                 duration: float, every: float | None = None) -> None:
        self.sport, self.out = _free_udp_port(), out
        port = _free_udp_port()
        extra = ["--every", str(every)] if every else []
        self.recv = subprocess.Popen(program(receiver, "recv", compiled) + [
            "--port", str(port), "--out", out, *extra], env=ENV)
        self.send: subprocess.Popen[str] | None = None
        deadline = time.monotonic() + 60
        while not os.path.exists(out + ".ready") and time.monotonic() < deadline:
            assert self.recv.poll() is None
            time.sleep(0.02)
        self.send = subprocess.Popen(program(sender, "send", compiled) + [
            "--dst", "127.0.0.1", "--port", str(port), "--sports", str(self.sport),
            "--pps", "100", "--duration", str(duration)],
            env=ENV, stdout=subprocess.PIPE, text=True)

    def finish(self) -> dict[str, Any]:
        assert self.send is not None
        sent = json.loads(self.send.communicate(timeout=60)[0])
        time.sleep(0.2)
        self.recv.send_signal(signal.SIGTERM)
        assert self.recv.wait(timeout=30) == 0
        return sent

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *_: object) -> None:
        for p in (self.recv, self.send):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize(("sender", "receiver"), PAIRS)
def test_either_end_stopped_for_half_a_second_leaves_no_gap(
        tmp_path: Path, compiled: str, sender: str, receiver: str) -> None:
    """Real sockets: the receiver, then the sender, is stopped (SIGSTOP) for 0.5 s each; the
    kernel's arrival stamps and the due times keep both out of the gap, whichever plane
    sends and receives."""
    out = str(tmp_path / "recv.json")
    with Loopback(sender, receiver, compiled, out, duration=4) as lo:
        # Stopped while still starting (a slow or busy machine), the sender would not stall
        # between two packets: the schedule begins once its socket exists.
        assert lo.send is not None
        deadline = time.monotonic() + 60
        while not _has_socket(lo.send.pid) and time.monotonic() < deadline:
            assert lo.send.poll() is None
            time.sleep(0.02)
        for who in (lo.recv, lo.send):
            time.sleep(0.5)
            who.send_signal(signal.SIGSTOP)
            time.sleep(0.5)
            who.send_signal(signal.SIGCONT)
        sent = lo.finish()
    (f,) = json.loads(Path(out).read_text())["flows"].values()
    assert f["received"] == sent["sent_per_sport"] and f["lost"] == 0, f
    assert f["max_gap_s"] < 0.25, f
    assert f["sender_stall_s"] >= 0.4, f


@pytest.mark.parametrize(("sender", "receiver"), PAIRS)
def test_the_receiver_rewrites_its_report_as_it_runs_and_counts_arrivals_by_ttl(
        tmp_path: Path, compiled: str, sender: str, receiver: str) -> None:
    """``--every``: reports appear while the stream runs, each with more arrivals than the
    one before, every arrival under its TTL (the namespace's default: no switch marked it),
    and the namespace's bad-header counter beside them; the two planes write the same
    JSON."""
    out = str(tmp_path / "recv.json")
    seen = []
    with Loopback(sender, receiver, compiled, out, duration=3, every=0.2) as lo:
        assert lo.send is not None
        while lo.send.poll() is None:
            if os.path.exists(out):
                rep = json.loads(Path(out).read_text())
                f = rep["flows"].get(str(lo.sport))
                if f and (not seen or f["received"] > seen[-1]["received"]):
                    seen.append(f)
                    assert rep["bad_headers"] is not None and rep["socket_drops"] == 0
            time.sleep(0.1)
        sent = lo.finish()
    assert len(seen) >= 3, seen  # rewritten while the stream ran
    report = json.loads(Path(out).read_text())
    final = report["flows"][str(lo.sport)]
    assert final["received"] == sent["sent_per_sport"] and final["lost"] == 0, final
    ttl = Path("/proc/sys/net/ipv4/ip_default_ttl").read_text().strip()
    assert final["marks"] == {ttl: final["received"]}, final
    assert set(report) == {"port", "t", "bad_headers", "socket_drops", "flows"}
    assert set(final) == set(FIELDS), final
    assert set(sent) == {"sent_per_sport", "sports", "errors", "pps", "queue_retries"}


def test_a_port_that_goes_silent_loses_what_its_siblings_receive() -> None:
    """Every round goes to every source port: a port blackholed from seq 20 on has lost
    each round the others got, past TAIL_ROUNDS of slack, before anything of it returns."""
    flows: dict = {}
    for seq in range(50):
        for sport in (50000, 50001):
            if sport == 50001 and seq >= 20:
                continue
            probe.arrive(flows, sport, seq, seq / 100, seq / 100, seq / 100 + 0.001)
    rep = probe.report(4791, flows)["flows"]
    assert rep["50000"]["lost"] == 0
    assert rep["50001"]["lost"] == 49 - probe.TAIL_ROUNDS - 19
    # it comes back: the missing rounds are gaps now, counted once
    probe.arrive(flows, 50001, 50, 0.5, 0.5, 0.501)
    probe.arrive(flows, 50000, 50, 0.5, 0.5, 0.501)
    rep = probe.report(4791, flows)["flows"]
    assert rep["50001"]["lost"] == 30 and rep["50000"]["lost"] == 0


class _Refusing:
    """A socket whose first sends fail with the given errors, then go."""

    def __init__(self, *errors: int) -> None:
        self.errors, self.sent = list(errors), []

    def sendto(self, data: bytes, addr: tuple[str, int]) -> int:
        if self.errors:
            raise OSError(self.errors.pop(0), "refused")
        self.sent.append(data)
        return len(data)


def test_a_full_interface_queue_delays_a_datagram_and_never_loses_it() -> None:
    s = _Refusing(errno.ENOBUFS, errno.ENOBUFS)
    assert probe.send_one(s, b"x", ("10.0.0.1", 4792)) == 2 and s.sent == [b"x"]  # type: ignore[arg-type]
    # an earlier datagram's ICMP error, reported by this send: this one goes next try
    s = _Refusing(errno.ECONNREFUSED)
    assert probe.send_one(s, b"y", ("10.0.0.1", 4792)) == 1 and s.sent == [b"y"]  # type: ignore[arg-type]
    # no route: it cannot go, and says so (the sender counts it and goes on)
    s = _Refusing(errno.ENETUNREACH, errno.ENETUNREACH)
    with pytest.raises(OSError) as err:
        probe.send_one(s, b"z", ("10.0.0.1", 4792))  # type: ignore[arg-type]
    assert err.value.errno == errno.ENETUNREACH and s.sent == []
