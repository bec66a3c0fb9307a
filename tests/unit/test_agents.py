"""``traffic.shell.agents.HostAgents``: persistent compiled agents driven command by command,
and ``replay(agents=...)``, which must give what a replay of spawned programs gives.

The lab is a fake whose hosts' ``popen`` runs the program here (or, for the replay, inside
one of two private network namespaces joined by a veth pair: ``tests/unit/netns.py``), so
the real ``astral-pktio serve`` is driven through the same calls Mininet's hosts answer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from controllers import policies
from testbed.topologies import build
from traffic import native
from traffic.kernels import FlowSpec
from traffic.roce import ReplaySpec
from traffic.shell import pktio as helper
from traffic.shell import replay as R
from traffic.shell.agents import AgentError, AgentRun, HostAgents, Reply
from traffic.shell.running import LocalFiles
from vocab.flows import sport_for_qp


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(helper.build(tmp_path_factory.mktemp("pktio") / "astral-pktio", force=True))


class LocalHost:
    """A lab host whose programs run here, optionally under a prefix (``ip netns exec NS``):
    Mininet's ``popen`` (pipes for stdout and stderr unless told), minus ``mnexec``."""

    def __init__(self, prefix: list[str] | None = None) -> None:
        self.prefix = prefix or []
        self.started: list[list[str]] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        self.started.append(list(argv))
        self.procs.append(subprocess.Popen(self.prefix + argv, **kw))
        return self.procs[-1]


def fake_lab(tmp_path: Path, hosts: dict[str, LocalHost] | None = None) -> SimpleNamespace:
    return SimpleNamespace(hosts=hosts or {"h1": LocalHost(), "h2": LocalHost()},
                           workdir=str(tmp_path), run_id="t1", files=LocalFiles())


def plan_file(tmp_path: Path, name: str, messages: int, rate: float = 0.0) -> Any:
    sp = ReplaySpec.from_dict({
        "intf": "x", "src_mac": "02:00:00:00:00:01", "src_ip": "10.0.0.1", "rate_mbps": rate,
        "pmtu": 1024, "flows": [{"dst_ip": "10.0.0.2", "dst_mac": "02:00:00:00:00:02",
                                 "qp": 5, "sport": 49157, "dscp": 26, "messages": messages,
                                 "message_bytes": 10_000}]})
    return native.write_plan(sp, str(tmp_path / name))


def dump_send(tmp_path: Path, plan: str, out: str) -> list[str]:
    return ["send", "--plan", str(tmp_path / plan), "--out", str(tmp_path / out),
            "--dump", str(tmp_path / f"{out}.frames")]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_agents_start_once_and_answer_command_after_command(exe: str, tmp_path: Path) -> None:
    lab = fake_lab(tmp_path)
    quick = plan_file(tmp_path, "quick", 2)
    slow = plan_file(tmp_path, "slow", 1000, rate=5.0)  # 16 s of traffic
    agents = HostAgents(lab, exe=exe).start(senders=["h1", "h2"], receivers=["h2"])
    try:
        assert agents.spawned == 3 and set(agents.pids()) == {("h1", "send"), ("h2", "send"),
                                                              ("h2", "recv")}
        (argv,) = lab.hosts["h1"].started
        assert argv[:3] == [exe, "serve", "--tag"] and "t1-h1-send" in argv[3]
        for i in range(3):
            agents.command("h1", "send", dump_send(tmp_path, "quick", f"sent{i}"))
            assert agents.wait("h1", "send", 30) == Reply(0)
            assert native.read_sent(str(tmp_path / f"sent{i}"), quick, None)["packets"] == 20
        agents.command("h2", "send", ["send", "--bogus", "1"])
        assert agents.wait("h2", "send", 30) == Reply(2, "unknown send option --bogus")
        agents.command("h1", "send", dump_send(tmp_path, "slow", "cut"))
        time.sleep(0.3)
        assert agents.poll("h1", "send") is None
        agents.stop_current("h1", "send")
        assert agents.wait("h1", "send", 10) == Reply(0)
        assert native.read_sent(str(tmp_path / "cut"), slow, None)["interrupted"]
        assert agents.spawned == 3 and len(lab.hosts["h1"].started) == 1  # no new process
    finally:
        pids = list(agents.pids().values())
        agents.close()
    assert pids and not any(alive(p) for p in pids)
    with pytest.raises(AgentError, match="closed"):
        agents.command("h1", "send", dump_send(tmp_path, "quick", "late"))
    agents.close()  # twice is fine


def test_commands_are_checked_before_they_go(exe: str, tmp_path: Path) -> None:
    with HostAgents(fake_lab(tmp_path), exe=exe) as agents:
        with pytest.raises(ValueError, match="runs 'recv ...' commands"):
            agents.command("h1", "recv", ["send", "--plan", "p"])
        with pytest.raises(ValueError, match="blank"):
            agents.command("h1", "send", ["send", "--plan", "a file"])
        with pytest.raises(ValueError, match="role"):
            agents.command("h1", "both", ["both"])
        plan_file(tmp_path, "slow", 1000, rate=5.0)
        agents.command("h1", "send", dump_send(tmp_path, "slow", "s1"))
        with pytest.raises(AgentError, match="in flight"):
            agents.command("h1", "send", dump_send(tmp_path, "slow", "s2"))
        with pytest.raises(AgentError, match="no command in flight"):
            agents.wait("h2", "send", 1)
        with pytest.raises(TimeoutError, match="did not answer"):
            agents.wait("h1", "send", 0.2)
        pid = agents.pids()[("h1", "send")]
    assert not alive(pid)  # the with block ended it, command in flight and all


def test_a_dead_agent_is_started_again_and_one_dying_mid_command_says_so(
        exe: str, tmp_path: Path) -> None:
    lab = fake_lab(tmp_path)
    plan_file(tmp_path, "quick", 2)
    plan_file(tmp_path, "slow", 1000, rate=5.0)
    with HostAgents(lab, exe=exe).start(senders=["h1"]) as agents:
        first = agents.pids()[("h1", "send")]
        os.kill(first, signal.SIGKILL)
        time.sleep(0.2)
        agents.command("h1", "send", dump_send(tmp_path, "quick", "s1"))
        assert agents.wait("h1", "send", 30) == Reply(0)
        second = agents.pids()[("h1", "send")]
        assert second != first and agents.spawned == 2
        agents.command("h1", "send", dump_send(tmp_path, "slow", "s2"))
        time.sleep(0.2)
        os.kill(second, signal.SIGKILL)
        reply = agents.wait("h1", "send", 10)
        assert reply.rc != 0 and "send agent on h1 exited" in reply.message


def test_an_agent_that_cannot_start_is_an_error_and_nothing_is_left(tmp_path: Path) -> None:
    lab = fake_lab(tmp_path)
    with pytest.raises(AgentError, match="agent on h1 did not start"):
        HostAgents(lab, exe="/bin/false").start(senders=["h1"], timeout=10)
    script = tmp_path / "mute"  # runs, never says it is ready
    script.write_text("#!/bin/sh\nexec sleep 600\n")
    script.chmod(0o755)
    agents = HostAgents(lab, exe=str(script))
    with pytest.raises(AgentError, match="no answer"):
        agents.start(receivers=["h2"], timeout=0.5)
    assert agents.closed and not agents.agents
    procs = lab.hosts["h1"].procs + lab.hosts["h2"].procs
    assert len(procs) == 2 and all(p.poll() is not None for p in procs)


def test_as_a_launcher_end_stops_what_runs_and_keeps_the_agent(exe: str,
                                                               tmp_path: Path) -> None:
    """What the replay does on an error: every command still running stops and answers, and
    the agent takes the next replay's command without being started again."""
    plan_file(tmp_path, "slow", 1000, rate=5.0)
    plan_file(tmp_path, "quick", 2)
    with HostAgents(fake_lab(tmp_path), exe=exe).start(senders=["h1"]) as agents:
        run = agents.run("h1", "send", [exe, *dump_send(tmp_path, "slow", "s1")],
                         str(tmp_path / "s1"))
        assert isinstance(run, AgentRun) and run.poll() is None and run.error() == ""
        pid = agents.pids()[("h1", "send")]
        agents.end([run])
        assert run.returncode == 0 and (tmp_path / "s1").exists()
        again = agents.run("h1", "send", [exe, *dump_send(tmp_path, "quick", "s2")], "s2")
        assert again.wait(30) == 0 and agents.pids()[("h1", "send")] == pid
        assert agents.spawned == 1
        with pytest.raises(ValueError, match="not a recv command line"):
            agents.run("h1", "recv", [exe, "send"], "x")


# --- the replay with agents, on a real interface --------------------------------------------
def flow(src: str, dst: str, qp: int, messages: int, size: int) -> FlowSpec:
    return FlowSpec(src, dst, bytes=messages * size, qp=qp, sport=sport_for_qp(qp),
                    message_bytes=size, messages=messages)


def test_replay_with_agents_gives_what_spawned_programs_give_and_starts_none(
        exe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two hosts in two private namespaces joined by a veth pair named as the lab names a
    host's NIC: each sends to the other. Replays with programs spawned per replay and with
    persistent agents report the same traffic; the agents' replays start no process."""
    from tests.unit.netns import veth_pair

    plan = build("astral3", servers=2, gpus=1)
    a, b = (plan.node(h) for h in ("s0g0", "s1g0"))
    monkeypatch.setenv("ASTRAL_PKTIO", exe)
    monkeypatch.setattr(R, "drop_roce", lambda *_a, **_k: None)  # no host shells here
    flows = [flow("s0g0", "s1g0", 3, 4, 4096), flow("s1g0", "s0g0", 4, 3, 3000),
             flow("s0g0", "s1g0", 5, 2, 700)]
    with veth_pair("s0g0-eth0", "s1g0-eth0", (a.mac, b.mac)) as pair:
        hosts = {"s0g0": LocalHost(["ip", "netns", "exec", pair.ns_a]),
                 "s1g0": LocalHost(["ip", "netns", "exec", pair.ns_b])}
        lab = SimpleNamespace(
            plan=plan, hosts=hosts, workdir=str(tmp_path), files=LocalFiles(), run_id="t2",
            pmtu=1024, lb_policy=policies.parse("ecmp", controller=True),
            client=lambda: SimpleNamespace(lb=lambda: {"mode": "ecmp", "pins": False}))
        kw: dict[str, Any] = {"progress": False, "recv_idle_s": 3.0}
        spawned = [R.replay(lab, flows, **kw) for _ in range(2)]
        assert [len(h.started) for h in hosts.values()] == [4, 4]  # a sender, a receiver each
        with HostAgents(lab).start(senders=list(hosts), receivers=list(hosts)) as agents:
            pids = agents.pids()
            served = [R.replay(lab, flows, agents=agents, **kw) for _ in range(2)]
            assert agents.pids() == pids and agents.spawned == 4
            with pytest.raises(ValueError, match="python plane has no persistent agents"):
                R.replay(lab, flows, agents=agents, plane="python", **kw)
        assert [len(h.started) for h in hosts.values()] == [6, 6]  # the agents, once

    def same(r: R.ReplayResult) -> tuple[Any, ...]:
        rows = [(f["src"], f["dst"], f["qp"], f["received"], f["sent_packets"],
                 f["received_packets"], f["lost_packets"]) for f in r.flows]
        return (rows, len(r.messages), r.bytes_sent, r.bytes_received, r.lost_packets,
                r.receiver_drops, r.plane, r.mode)

    assert same(spawned[0])[3] == sum(f.bytes for f in flows)
    assert all(m["complete"] for r in spawned + served for m in r.messages)
    assert same(served[0]) == same(served[1]) == same(spawned[0]) == same(spawned[1])
    assert all(0 < r.job_completion_s < 5 and r.cpu_s["receivers"] > 0 for r in served)
