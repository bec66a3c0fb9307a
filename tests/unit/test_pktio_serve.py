"""``astral-pktio serve``: the compiled sender and receiver as a persistent agent that runs
command after command, with nothing of one command reaching the next.

The sending side is checked against the one-shot program's ``--dump`` (no network needed);
the receiving side on a veth pair between two private network namespaces (root, no Mininet,
no switch: ``tests/unit/netns.py``), fed by a serving sender.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.netns import VethPair, veth_pair
from traffic import native
from traffic.roce import ReplaySpec
from traffic.shell import pktio as helper


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(helper.build(tmp_path_factory.mktemp("pktio") / "astral-pktio", force=True))


class Serve:
    """One ``serve`` process and its protocol: a command line in, one answer line out."""

    def __init__(self, argv: list[str]) -> None:
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self._buf = b""
        assert self.line() == "ready"

    def line(self, timeout: float = 30.0) -> str:
        """The next line it writes (``TimeoutError`` if none comes)."""
        fd = self.p.stdout.fileno()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer")
            if select.select([fd], [], [], left)[0]:
                data = os.read(fd, 4096)
                if not data:
                    raise EOFError(f"it exited ({self.p.wait(5)}): {self.p.stderr.read()!r}")  # type: ignore[union-attr]
                self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def send(self, command: str) -> None:
        self.p.stdin.write(command.encode() + b"\n")  # type: ignore[union-attr]
        self.p.stdin.flush()  # type: ignore[union-attr]

    def ask(self, command: str, timeout: float = 30.0) -> str:
        self.send(command)
        return self.line(timeout)

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.p.pid}/fd"))

    def close(self) -> int:
        """End it as a driver does (end of stdin); its exit status."""
        if self.p.stdin and not self.p.stdin.closed:
            self.p.stdin.close()
        try:
            return self.p.wait(timeout=10)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()


def spec(flows: list[dict[str, Any]], rate: float = 0.0) -> ReplaySpec:
    return ReplaySpec.from_dict({"intf": "tx0", "src_mac": "02:00:00:00:00:01",
                                 "src_ip": "10.0.0.1", "rate_mbps": rate, "pmtu": 1024,
                                 "flows": flows})


def flow(qp: int, messages: int, size: int, **kw: Any) -> dict[str, Any]:
    return {"dst_ip": "10.0.0.2", "dst_mac": "02:00:00:00:00:02", "qp": qp,
            "sport": 49152 + qp, "dscp": 26, "messages": messages, "message_bytes": size,
            **kw}


def frames_of(path: Path) -> list[bytes]:
    data, out, off = path.read_bytes(), [], 0
    while off < len(data):
        n = int.from_bytes(data[off:off + 4], "little")
        out.append(data[off + 4:off + 4 + n])
        off += 4 + n
    return out


def timeless(frames: list[bytes]) -> list[bytes]:
    """The frames with the send time each carries zeroed (its ICRC recomputed): what two
    runs of one plan must agree on."""
    from tests.unit.test_native import with_send_ns

    return [with_send_ns(f, 0) for f in frames]


def sent_rows(sent: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(r["first_seq"], r["first_psn"], r["next_psn"], r["messages"], r["bytes"],
             r["complete"]) for r in sent["flows"]]


# --- sending, to a file ----------------------------------------------------------------------
def test_serve_sends_what_the_one_shot_sender_sends_command_after_command(
        exe: str, tmp_path: Path) -> None:
    """Two commands of one plan in one agent give the one-shot program's frames and report
    twice: neither continues the PSNs, messages or CPU time of the commands before it."""
    sp = spec([flow(7, 3, 5000), flow(8, 2, 700, psn=(1 << 24) - 1), flow(7, 1, 3000,
                                                                       start=0.001)])
    plan = native.write_plan(sp, str(tmp_path / "plan"))
    one = subprocess.run([exe, "send", "--plan", str(tmp_path / "plan"), "--out",
                          str(tmp_path / "sent0"), "--dump", str(tmp_path / "frames0")],
                         capture_output=True, text=True, timeout=60)
    assert one.returncode == 0, one.stderr
    heavy = native.write_plan(spec([flow(3, 30_000, 64)]), str(tmp_path / "heavy"))
    srv = Serve([exe, "serve"])
    try:
        assert srv.ask(f"send --plan {tmp_path}/heavy --out {tmp_path}/heavy-sent "
                       f"--dump {tmp_path}/heavy-frames") == "done 0"
        for i in (1, 2):
            assert srv.ask(f"send --plan {tmp_path}/plan --out {tmp_path}/sent{i} "
                           f"--dump {tmp_path}/frames{i}") == "done 0"
    finally:
        assert srv.close() == 0
    busy = native.read_sent(str(tmp_path / "heavy-sent"), heavy, None)["cpu_s"]
    dumps = [timeless(frames_of(tmp_path / f"frames{i}")) for i in range(3)]
    assert len(dumps[0]) == 20 and dumps[1] == dumps[0] and dumps[2] == dumps[0]
    sents = [native.read_sent(str(tmp_path / f"sent{i}"), plan, None) for i in range(3)]
    assert sent_rows(sents[1]) == sent_rows(sents[2]) == sent_rows(sents[0])
    assert sents[2]["packets"] == sents[0]["packets"] == 20
    assert not sents[2]["interrupted"] and 0 <= sents[1]["cpu_s"] < busy / 2  # its own
    assert sents[2]["first_ns"] > sents[1]["finished_ns"]  # its own clock, not the first's


def test_a_bad_command_is_an_error_line_and_the_agent_goes_on(exe: str, tmp_path: Path) -> None:
    native.write_plan(spec([flow(7, 2, 3000)]), str(tmp_path / "plan"))
    data = (tmp_path / "plan").read_bytes()
    (tmp_path / "cut").write_bytes(data[:-7])
    srv = Serve([exe, "serve", "--tag", "test-agent"])
    try:
        good = f"send --plan {tmp_path}/plan --out {tmp_path}/sent --dump {tmp_path}/frames"
        assert srv.ask(good) == "done 0"
        fds = srv.fds()
        assert srv.ask("send --bogus 1") == "error unknown send option --bogus"
        assert srv.ask("send --plan") == "error option --plan needs a value"
        assert srv.ask(f"send --plan {tmp_path}/cut --out {tmp_path}/cut-sent --dump "
                       f"{tmp_path}/cut-frames") == f"error truncated plan file {tmp_path}/cut"
        assert srv.ask(f"send --plan {tmp_path}/plan --out {tmp_path}/nowhere/sent --dump "
                       f"{tmp_path}/f2") == f"error cannot write {tmp_path}/nowhere/sent.tmp"
        assert srv.ask(f"recv --intf nosuch0 --out {tmp_path}/r.json") == \
            "error no interface nosuch0"
        assert srv.ask("frob --x 1") == "error unknown command frob (send or recv)"
        assert srv.ask("") == "error empty command (send ... or recv ...)"
        assert srv.ask("send " + "x " * 70).startswith("error more than 64 arguments")
        assert srv.ask("send --plan " + "p" * 70_000).startswith("error command longer than")
        assert srv.fds() == fds  # every failed command gave its files and sockets back
        assert srv.ask(good) == "done 0"
    finally:
        assert srv.close() == 0
    assert not (tmp_path / "cut-sent").exists() and not (tmp_path / "r.json.bin").exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert len(frames_of(tmp_path / "frames")) == 6


def test_sigusr1_stops_the_command_and_the_next_one_runs_whole(exe: str,
                                                               tmp_path: Path) -> None:
    slow = native.write_plan(spec([flow(1, 1000, 10_000)], rate=5.0),  # 16 s of traffic
                             str(tmp_path / "slow"))
    quick = native.write_plan(spec([flow(2, 2, 3000)]), str(tmp_path / "quick"))
    srv = Serve([exe, "serve"])
    try:
        srv.send(f"send --plan {tmp_path}/slow --out {tmp_path}/s1 --dump {tmp_path}/f1")
        time.sleep(0.5)
        srv.p.send_signal(signal.SIGUSR1)
        assert srv.line(timeout=10) == "done 0"
        assert srv.p.poll() is None  # the agent waits for the next command
        assert srv.ask(f"send --plan {tmp_path}/quick --out {tmp_path}/s2 --dump "
                       f"{tmp_path}/f2") == "done 0"
    finally:
        assert srv.close() == 0
    cut = native.read_sent(str(tmp_path / "s1"), slow, None)
    assert cut["interrupted"] and 0 < cut["flows"][0]["messages"] < 1000
    whole = native.read_sent(str(tmp_path / "s2"), quick, None)
    assert not whole["interrupted"] and whole["flows"][0]["complete"]


def test_sigterm_or_the_end_of_stdin_ends_the_agent(exe: str, tmp_path: Path) -> None:
    slow = native.write_plan(spec([flow(1, 1000, 10_000)], rate=5.0), str(tmp_path / "slow"))
    idle = Serve([exe, "serve"])
    idle.p.send_signal(signal.SIGTERM)
    assert idle.p.wait(timeout=5) == 0
    busy = Serve([exe, "serve"])  # SIGTERM mid-command: it stops, reports, answers, ends
    busy.send(f"send --plan {tmp_path}/slow --out {tmp_path}/s1 --dump {tmp_path}/f1")
    busy.send(f"send --plan {tmp_path}/slow --out {tmp_path}/s2 --dump {tmp_path}/f2")
    time.sleep(0.5)
    busy.p.send_signal(signal.SIGTERM)
    assert busy.line(timeout=10) == "done 0" and busy.p.wait(timeout=5) == 0
    assert native.read_sent(str(tmp_path / "s1"), slow, None)["interrupted"]
    assert not (tmp_path / "s2").exists()  # the command after it never ran
    assert Serve([exe, "serve"]).close() == 0


# --- receiving, on a real interface ----------------------------------------------------------
@pytest.fixture
def veth() -> Any:
    with veth_pair() as pair:
        yield pair


def wait_file(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.02)


def test_serve_receives_command_after_command_with_nothing_carried_over(
        exe: str, veth: VethPair, tmp_path: Path) -> None:
    """A serving receiver counts what a serving sender sends over the veth, twice, each
    command only its own packets; SIGUSR1 stops a receive that expects nothing, the agent
    goes on, and every command gave back its ring, sockets and files."""
    rx = Serve(veth.run_in(veth.ns_b, [exe, "serve"]))
    tx = Serve(veth.run_in(veth.ns_a, [exe, "serve"]))
    try:
        fds = rx.fds()
        plans = [[flow(7, 3, 5000)], [flow(9, 2, 3000), flow(11, 4, 700)]]
        got = []
        for i, flows in enumerate(plans):
            sp = spec(flows)
            plan = native.write_plan(sp, str(tmp_path / f"plan{i}"))
            want = sum(sum(f.sizes()) for f in sp.flows)
            rx.send(f"recv --intf {veth.b} --out {tmp_path}/r{i}.json --ready "
                    f"{tmp_path}/r{i}.ready --expect-bytes {want} --idle-timeout 3 --timeout 20")
            wait_file(tmp_path / f"r{i}.ready")
            assert tx.ask(f"send --plan {tmp_path}/plan{i} --out {tmp_path}/s{i} --intf "
                          f"{veth.a}") == "done 0"
            assert rx.line(timeout=25) == "done 0"
            sent = native.read_sent(str(tmp_path / f"s{i}"), plan, None)
            recv = native.read_received(str(tmp_path / f"r{i}.json"), 4791)
            assert recv["stop_reason"] == "expect_bytes" and recv["bytes"] == want
            assert recv["packets"] == sent["packets"] and recv["lost"] == 0
            assert {int(f["qp"]) for f in recv["flows"].values()} == {f["qp"] for f in flows}
            got.append(recv)
        assert [sum(f["complete_messages"] for f in r["flows"].values()) for r in got] == [3, 6]
        assert [len(r["messages"]) for r in got] == [3, 6]
        assert rx.fds() == fds and "socket:" not in Path(f"/proc/{rx.p.pid}/maps").read_text()
        # a receive that expects nothing, stopped by SIGUSR1: the agent stays
        rx.send(f"recv --intf {veth.b} --out {tmp_path}/r2.json --ready {tmp_path}/r2.ready")
        wait_file(tmp_path / "r2.ready")
        rx.p.send_signal(signal.SIGUSR1)
        assert rx.line(timeout=10) == "done 0" and rx.p.poll() is None
        assert native.read_received(str(tmp_path / "r2.json"), 4791)["stop_reason"] == "SIGUSR1"
        # and the next runs to its own end (the stop was the last command's only)
        assert rx.ask(f"recv --intf {veth.b} --out {tmp_path}/r3.json --timeout 0.3") == \
            "done 0"
        last = native.read_received(str(tmp_path / "r3.json"), 4791)
        assert last["stop_reason"] == "timeout" and last["packets"] == 0
        assert rx.fds() == fds and "socket:" not in Path(f"/proc/{rx.p.pid}/maps").read_text()
    finally:
        assert rx.close() == 0 and tx.close() == 0
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
