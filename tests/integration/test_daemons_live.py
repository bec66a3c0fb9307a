"""Several switch daemons forwarding one fabric (``Lab(switch_daemons=N)``) on real packets:
every pair reaches every other, a replay crosses the daemons with every byte delivered, a
cable cut across daemons is seen and routed around, and nothing stays behind, even after
``kill -9`` of the process that owned the fabric."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from testbed.shell import cleanup
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.shell.replay import replay
from vocab.plan import WiringPlan

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plan() -> WiringPlan:
    return build("astral3", servers=2, gpus=4, servers_per_block=2)


def _ovs(lab: Lab, sw: str, *argv: str) -> str:
    d = lab.switch_daemon(sw)
    return subprocess.run(d.ovs(list(argv)), capture_output=True, text=True,
                          check=True).stdout


def test_two_daemons_carry_the_fabric(assert_clean: Callable[[WiringPlan], None]) -> None:
    p = plan()
    with Lab(p, switch_daemons=2) as lab:
        assert len(lab.daemons) == 2 and lab.of_host != "127.0.0.1"
        owners = [lab.switch_daemon(s.name).index for s in p.switches]
        assert set(owners) == {0, 1}
        ns = lab.daemons[1].netns
        assert ns and os.path.exists(f"/run/netns/{ns}")
        # each switch is a bridge of its own daemon only, its ports in that namespace
        for sw in p.switches:
            d = lab.switch_daemon(sw.name)
            assert sw.name in _ovs(lab, sw.name, "ovs-vsctl", "list-br").split()
            other = lab.daemons[1 - d.index]
            listed = subprocess.run(other.ovs(["ovs-vsctl", "list-br"]), capture_output=True,
                                    text=True).stdout.split()
            assert sw.name not in listed
        # every switch's controller: reconnect within a second, and kept while it is busy for
        # seconds (OVS's 5 s inactivity probe would drop it into a full resync)
        for d in lab.daemons:
            rows = subprocess.run(d.ovs(["ovs-vsctl", "--format=csv", "--no-headings",
                                         "--columns=inactivity_probe,max_backoff", "list",
                                         "Controller"]),
                                  capture_output=True, text=True, check=True).stdout.split()
            assert rows == ["60000,1000"] * owners.count(d.index), rows
        in_ns = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True,
                               text=True, check=True).stdout
        moved = [ln.b_intf for ln in p.links if lab.switch_daemon(ln.b).netns == ns]
        assert moved and all(f" {i}@" in in_ns or f" {i}:" in in_ns for i in moved)
        assert not any(os.path.exists(f"/sys/class/net/{i}") for i in moved)
        # the shaping is where the ports are
        tc = subprocess.run(["tc", "-n", ns, "class", "show", "dev", moved[0]],
                            capture_output=True, text=True, check=True).stdout
        assert "htb" in tc

        reach = lab.reachability()
        assert reach.received == reach.pairs > 0, reach

        # cross-rail flows: leaf - spine - leaf, over switches of both daemons
        hosts = [h.name for h in p.hosts]
        half = len(hosts) // 2
        flows = [FlowSpec.make(hosts[i], hosts[half + (i + 1) % half], 400_000, qp=i)
                 for i in range(half)]
        res = replay(lab, flows, progress=False, label="daemons")
        assert res.bytes_received == res.bytes_sent > 0
        assert res.lost_packets == 0
        # both daemons forwarded some of it
        for d in lab.daemons:
            stats = subprocess.run(d.ovs(["ovs-appctl", "-t", "ovs-vswitchd",
                                          "dpctl/show", "-s"]), capture_output=True, text=True,
                                   check=True).stdout
            assert "hit:" in stats
            hits = int(stats.split("hit:")[1].split()[0])
            assert hits > 100, (d.index, stats[:300])

        # a cable between two daemons: cut, seen by the controller, routed around
        cross = next(ln for ln in p.links if ln.a not in lab.hosts and ln.b not in lab.hosts
                     and lab.switch_daemon(ln.a) is not lab.switch_daemon(ln.b))
        lab.set_link(cross.a, cross.b, up=False)
        state = subprocess.run(["ip", *lab.switch_daemon(cross.b).ip(), "-o", "link", "show",
                                "dev", cross.b_intf], capture_output=True, text=True).stdout
        assert "state DOWN" in state, state
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the port status reached the controller
            health = lab.health() or {}
            if f"{cross.a}:" in " ".join(health.get("down_ports", [])):
                break
            time.sleep(0.2)
        assert f"{cross.a}:" in " ".join(health.get("down_ports", [])), health
        again = lab.reachability()
        assert again.received == again.pairs, again
        lab.set_link(cross.a, cross.b, up=True)
    assert_clean(p)
    assert not cleanup.leftovers(p)


def test_killed_multi_daemon_run_is_cleaned(killed_lab: Callable[..., list[str]],
                                            clean_cli: Callable[[], Any],
                                            assert_clean: Callable[[WiringPlan], None]) -> None:
    """kill -9 the owner of a two-daemon fabric: `astral-lab clean` removes the extra daemon,
    its namespace, its run directory and its controller link as well."""
    p = plan()
    ns, rundir = killed_lab("build('astral3', servers=2, gpus=4, servers_per_block=2), "
                            "switch_daemons=2", "lab.daemons[1].netns, lab.daemons[1].rundir")
    left = cleanup.leftovers(p)
    assert f"switch daemon namespace {ns}" in left, left
    assert any(x.startswith("switch daemon pid") for x in left), left
    out = clean_cli()
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(f"/run/netns/{ns}") and not os.path.exists(rundir)
    assert_clean(p)


def test_cli_up_with_switch_daemons(assert_clean: Callable[[WiringPlan], None]) -> None:
    out = subprocess.run([sys.executable, "-m", "astral_lab.cli", "up", "astral3", "--no-cli",
                          "--servers", "2", "--gpus-per-server", "4", "--servers-per-block", "2",
                          "--switch-daemons", "2"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "0.0% loss" in out.stdout and "2 switch daemons" in out.stdout + out.stderr
    assert_clean(plan())
    bad = subprocess.run([sys.executable, "-m", "astral_lab.cli", "up", "astral3", "--no-cli",
                          "--switch-daemons", "0"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) <= 2, bad.stderr
    assert "switch daemons must be a whole number in 1..256" in bad.stderr
