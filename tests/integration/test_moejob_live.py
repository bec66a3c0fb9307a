"""A MoE job on a real fabric: its iterations are timed, a fault shows in them, the ops
layer's job-slow detector reads them (``traffic/shell/moejob.py``).

Four servers of two GPUs (two rail blocks, so the training step's rail-aligned flows
cross the spines): a few clean iterations, then a lossy NIC under the job. And the job's
iterations start no process: its hosts' compiled agents, started once, run every replay.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from ops.shell.monitor import Monitor
from testbed.faultspec import Fault
from testbed.shell.faults import FaultInjector
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.shell.moejob import MoeJob, job_traffic


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:g} s")


def test_iterations_are_timed_and_a_lossy_nic_shows_in_them_and_in_job_slow(
        assert_clean: Callable[[Any], None]) -> None:
    plan = build("astral3", servers=4, gpus=2)
    train, decode = job_traffic(plan, 4, 2, 16, seed=1)
    assert {f.src[:2] for f in train.flows} == {"s0", "s1", "s2", "s3"}
    with Lab(plan, log=lambda m: None) as lab:
        job = MoeJob(lab, train, decode, decode_every=2, log=lambda m: None)
        mon = Monitor(lab, None, interval=1.0, job=job)
        try:
            job.start()
            mon.collector.start()
            wait_for(lambda: len(job.iterations) >= 7, 90, "seven iterations")
            clean = list(job.iterations)
            assert all(it.error is None and it.lost_packets == 0 for it in clean), clean
            assert all(0 < it.iter_s < 10 and set(it.phases) == {"dispatch", "combine"}
                       for it in clean)
            assert [it.decode_s is not None for it in clean[:4]] == [True, False, True, False]
            # the collector was handed every iteration's time, each once
            seen = [v for v in mon.collector.history.values("job", "iter_s") if v is not None]
            assert 5 <= len(seen) <= len(clean) and set(seen) <= {it.iter_s for it in clean}
            assert [a for a in mon.alerts() if a["detector"] == "job-slow"] == []
            with FaultInjector(lab) as inj:
                start = len(job.iterations)
                inj.inject(Fault("nic-loss", "s1g1", probability=0.2))
                lossy = wait_for(lambda: [it for it in job.iterations[start + 1:]
                                          if it.lost_packets], 60, "a lossy iteration")[0]
                assert {f["src"] for f in lossy.lossy} | {f["dst"] for f in lossy.lossy} \
                    >= {"s1g1"}
                assert all("s1g1" in (f["src"], f["dst"]) for f in lossy.lossy), lossy.lossy
                alert = wait_for(lambda: [a for a in mon.alerts()
                                          if a["detector"] == "job-slow"], 20, "job-slow")[0]
                assert alert["component"] == "job" and "lost" in alert["summary"]
        finally:
            mon.collector.stop()
            job.stop()
        assert len(job.iterations) > start + 1
    assert_clean(plan)


def pktio_in(lab: Any) -> dict[int, str]:
    """Every ``astral-pktio`` process in one of the lab's host namespaces: pid -> host."""
    netns = {os.readlink(f"/proc/{h.pid}/ns/net"): name for name, h in lab.hosts.items()}
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv0 = fh.read().split(b"\0")[0]
            ns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:  # gone meanwhile
            continue
        if argv0.endswith(b"astral-pktio") and ns in netns:
            found[int(pid)] = netns[ns]
    return found


def test_iterations_start_no_process_their_hosts_agents_run_every_replay(
        assert_clean: Callable[[Any], None]) -> None:
    """After the job has started, its iterations start nothing through the hosts' ``popen``,
    and the only compiled senders and receivers ever seen in the hosts (sampled every 0.1 s,
    shorter than any replay) are the agents it started, one per host and role; the
    iterations are whole; stopping the job ends every agent."""
    plan = build("astral3", servers=4, gpus=2)
    train, decode = job_traffic(plan, 4, 2, 16, seed=1)
    with Lab(plan, log=lambda m: None) as lab:
        job = MoeJob(lab, train, decode, decode_every=2, log=lambda m: None)
        popens: list[tuple[str, Any]] = []
        shell_cmds: list[str] = []

        def counted(name: str, host: Any) -> None:
            popen, send_cmd = host.popen, host.sendCmd

            def popen_counted(*args: Any, **kw: Any) -> Any:
                popens.append((name, args[0] if args else None))
                return popen(*args, **kw)

            def send_counted(*args: Any, **kw: Any) -> Any:
                shell_cmds.append(name)
                return send_cmd(*args, **kw)

            host.popen, host.sendCmd = popen_counted, send_counted

        for name, host in lab.hosts.items():
            counted(name, host)
        try:
            job.start()
            assert job.agents is not None
            agents = job.agents.pids()
            flows = [f for f in train.flows + decode.flows if f.bytes > 0]
            assert set(agents) == {(f.src, "send") for f in flows} | \
                {(f.dst, "recv") for f in flows}
            assert len(popens) == len(agents) and all("serve" in argv for _h, argv in popens)
            started, spawned = list(popens), job.agents.spawned
            wait_for(lambda: len(job.iterations) >= 1, 60, "a first iteration")
            first = len(job.iterations)
            seen: dict[int, str] = {}
            deadline = time.monotonic() + 120
            while len(job.iterations) < first + 4:  # two with a decode burst, two without
                assert time.monotonic() < deadline, "four iterations took over 120 s"
                seen |= pktio_in(lab)
                time.sleep(0.1)
            done = job.iterations[first:]
            assert all(it.error is None and it.lost_packets == 0 for it in done), done
            assert popens == started, popens[len(started):][:5]  # nothing started since
            assert job.agents.spawned == spawned and job.agents.pids() == agents
            assert set(seen) == set(agents.values()), (seen, agents)
            # what still runs per replay, through the hosts' existing shells: the ingress
            # drop rule added and removed (nft), one shell command per host each way
            print(f"shell commands during {len(done)} iterations: {len(shell_cmds)}")
        finally:
            job.stop()
        assert pktio_in(lab) == {}  # every agent ended with the job
    assert_clean(plan)


def test_lane_marks_name_the_lossy_and_the_corrupting_lane(
        assert_clean: Callable[[Any], None]) -> None:
    """The job's receivers read each frame's lane mark, so its iterations count packets per
    path; a gray loss on one lane, then corruption on another, is named by lane-loss on that
    very lane (and its corrupt frames by lane-loss-corrupt), not by its leaf nor by the lane
    its rail-aligned flows come back over."""
    from traffic.iterations import PATH_LOST
    from vocab.plan import link_components

    plan = build("astral3", servers=4, gpus=2)
    train, decode = job_traffic(plan, 4, 2, 16, seed=1)
    lanes = {c: ln for c, ln in link_components(plan).items() if ln.kind == "lane"}
    nics = {c for c, ln in link_components(plan).items() if ln.kind != "lane"}
    with Lab(plan, log=lambda m: None) as lab:
        job = MoeJob(lab, train, decode, decode_every=2, log=lambda m: None)
        mon = Monitor(lab, None, interval=1.0, job=job)
        try:
            job.start()
            mon.collector.start()
            wait_for(lambda: len(job.iterations) >= 5, 90, "five iterations")
            clean = [it for it in job.iterations if it.error is None]
            sent: dict[str, int] = {}
            together: dict[tuple[str, str], int] = {}  # packets on paths with both lanes
            for it in clean:
                for key, (packets, lost, bad) in it.paths.items():
                    assert lost == bad == 0 or it is clean[0], (key, lost, bad)
                    links = key.split(">")  # the two NIC links and the lanes between
                    assert {links[0], links[-1]} <= set(nics), key
                    hops = [c for c in links if c in lanes]
                    for c in hops:
                        sent[c] = sent.get(c, 0) + packets
                        for other in hops:
                            if other != c:
                                together[(c, other)] = together.get((c, other), 0) + packets
            # the job's cross-leaf flows leave by every uplink of a leaf they use, by hash
            assert set(sent) <= set(lanes) and len(sent) >= len(lanes) // 2, sorted(sent)
            assert not [k for k in list(mon.collector.history.keys())
                        if k[1].startswith(PATH_LOST)]
            # a lane is told from its rail partner (the lane its rail-aligned flows come
            # back over) only by the packets it carries without it (the decode burst's
            # cross-rail flows): fault the two lanes with the most of those, so the marks
            # can decide within the wait, and not each other's partner
            alone = {c: sent[c] - max((n for (a, _b), n in together.items() if a == c),
                                      default=0) for c in sent}
            busiest = sorted(sent, key=lambda c: -alone[c])
            if together.get((busiest[0], busiest[1])):
                busiest.pop(1)
            with FaultInjector(lab) as inj:
                for kind, lane, knobs, detector in (
                        ("gray-loss", busiest[0], {"probability": 0.05}, "lane-loss"),
                        ("corruption", busiest[1], {"probability": 0.05}, "lane-loss-corrupt")):
                    h = inj.inject(Fault(kind, lane, **knobs))
                    since = len(job.iterations)
                    try:
                        got = wait_for(lambda d=detector: [a for a in mon.alerts()
                                                          if a["detector"] == d
                                                          and a["cleared"] is None], 60,
                                       detector)
                    except AssertionError as exc:  # what the job saw, per link
                        damaged = [{c: v for c, v in it.paths.items() if v[1] or v[2]}
                                   for it in job.iterations[since:]]
                        raise AssertionError(f"{exc}; alerts {mon.alerts()}; {kind} on "
                                             f"{lane}: per iteration {damaged}") from None
                    assert [a["component"] for a in got] == [lane], got
                    inj.undo(h)
                    wait_for(lambda d=detector: not [a for a in mon.alerts()
                                                     if a["detector"] == d
                                                     and a["cleared"] is None], 60,
                             f"{detector} cleared")
        finally:
            mon.collector.stop()
            job.stop()
    assert_clean(plan)
