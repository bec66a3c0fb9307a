"""The ops layer on a real fabric: detectors fire on real faults, the agent names them.

One small astral3 fabric (2 servers x 2 GPUs: 2 leaves, 4 spines, 8 lanes) carrying steady
probe streams, the collector and detectors running as in ``ops-eval``; faults come from
``testbed.shell.faults``. Timing goals are scored by ``astral-lab run ops-eval``, not here.
"""

from __future__ import annotations

import io
import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

from astral_lab import ops_cli as cli
from ops.agent import Tools, diagnose
from ops.shell.experiment import steady_traffic
from ops.shell.monitor import Monitor
from ops.shell.probe import ping
from testbed.faultspec import Fault
from testbed.shell.faults import FaultInjector
from testbed.shell.lab import Lab
from testbed.topologies import build


def wait_alert(mon: Monitor, detector: str, component: str, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for a in mon.alerts():
            if a["detector"] == detector and a["component"] == component:
                return a
        time.sleep(0.25)
    raise AssertionError(f"no {detector} alert on {component} in {timeout} s; alerts: "
                         f"{[(a['detector'], a['component']) for a in mon.alerts()]}")


def ask(lab: Lab, mon: Monitor, question: str = "what is wrong?") -> list[str]:
    with mon.lock:
        tools = Tools(lab.plan, history=mon.collector.history, engine=mon.engine,
                      client=mon.collector.client,
                      host_pids={n: h.pid for n, h in lab.hosts.items()}, prober=ping)
        return diagnose(tools, question).components()


def test_degraded_lane_and_down_link_are_found_and_named(
        assert_clean: Callable[[Any], None]) -> None:
    plan = build("astral3", servers=2, gpus=2)
    with Lab(plan, log=lambda m: None) as lab:
        streams = steady_traffic(lab, 60, mbps_per_host=20)
        mon = Monitor(lab, None, interval=1.0)
        try:
            mon.collector.start()
            time.sleep(12)  # baseline learned, traffic steady
            assert mon.alerts() == [], mon.alerts()  # a clean fabric is silent
            assert mon.engine.baseline and mon.engine.baseline > 40
            lane, down = "lf0r0~spine1#0", "lf0r1~spine3#0"
            with FaultInjector(lab) as inj:
                h = inj.inject(Fault("link-degrade", lane, fraction=0.2))
                a = wait_alert(mon, "degraded", lane)
                assert a["evidence"]["configured_mbps"] == 20.0
                assert ask(lab, mon, "why is s0g0 -> s0g1 slow?")[0] == lane
                inj.undo(h)
                time.sleep(4)  # the queue drains at full rate: not degraded any more
                assert ("degraded", lane) not in {(x.detector, x.component)
                                                  for x in mon.engine.active.values()}
                h = inj.inject(Fault("link-down", down))
                wait_alert(mon, "link-down", down, timeout=10)
                assert ask(lab, mon)[0] == down
                inj.undo(h)
        finally:
            mon.collector.stop()
            for s in streams:
                s.stop()
    assert_clean(plan)


def test_cli_finds_the_lab_and_answers_one_shot(assert_clean: Callable[[Any], None]) -> None:
    plan = build("astral3", servers=2, gpus=2)
    with Lab(plan, log=lambda m: None) as lab, FaultInjector(lab) as inj:
        found = cli.discover(lab.run_id)
        assert found["rest_port"] == lab.rest_port
        assert found["host_pids"] == {n: h.pid for n, h in lab.hosts.items()}
        inj.inject(Fault("nic-loss", "s1g1", probability=0.3))
        streams = steady_traffic(lab, 20, mbps_per_host=8)
        try:
            time.sleep(2)
            out = io.StringIO()
            with redirect_stdout(out):
                rc = cli.main(["diagnose", "--run", lab.run_id, "--collect", "4",
                               "--ask", "why is s1g1 slow?"])
            assert rc == 0
            text = out.getvalue()
            assert text.startswith("1. s1g1  [loss"), text
            assert "probe" in text  # the agent pinged the suspect NIC to confirm
            # `ops watch` on the same live fault: it stores samples and raises the alert
            db = os.path.join(lab.workdir, "watch.sqlite")
            out = io.StringIO()
            with redirect_stdout(out):
                rc = cli.main(["watch", "--run", lab.run_id, "--duration", "6", "--db", db])
            assert rc == 0
            assert "s1g1" in out.getvalue(), out.getvalue()
            with sqlite3.connect(db) as con:
                assert con.execute("select count(*) from samples").fetchone()[0] > 0
        finally:
            for s in streams:
                s.stop()
    assert_clean(plan)


def test_a_miswired_shuffle_is_found_by_the_agents_wiring_check(
        assert_clean: Callable[[Any], None]) -> None:
    """No counter moves when two lanes of a shuffle are crossed; the wiring check the agent
    runs (``WiringWatch``) sees it, the miswired detector names both lanes, the agent ranks
    one of them first, and a check after the repair clears it."""
    from ops.shell.monitor import WiringWatch
    from testbed.wiring import findings, miswired

    plan = build("astral3", servers=4, gpus=2)
    with Lab(plan, log=lambda m: None) as lab:
        client = lab.client()
        watch = WiringWatch(lambda: findings(plan, client.check_wiring()), log=lambda m: None)
        mon = Monitor(lab, None, interval=1.0, wiring=watch)
        try:
            mon.collector.start()
            assert watch.run() == []  # as planned
            time.sleep(3)
            assert [a for a in mon.alerts() if a["detector"] == "miswired"] == []
            with FaultInjector(lab) as inj:
                h = inj.inject(Fault("shuffle-miswiring", "lf0r1~spine0", seed=1))
                crossed = miswired(watch.run())
                assert len(crossed) == 2, crossed
                for lane in crossed:
                    wait_alert(mon, "miswired", lane, timeout=10)
                assert ask(lab, mon)[0] in crossed
                inj.undo(h)
            assert watch.run() == []
            deadline = time.monotonic() + 10
            while mon.engine.active and time.monotonic() < deadline:
                time.sleep(0.25)
            assert not [a for a in mon.engine.active.values() if a.detector == "miswired"]
        finally:
            mon.collector.stop()
    assert_clean(plan)
