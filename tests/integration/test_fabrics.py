"""Real fabrics: Mininet hosts, userspace (or kernel) OVS, the os-ken controller, real packets.

Run with ``sudo make test`` (or ``sudo .venv/bin/python -m pytest -m integration``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from testbed.shell import cleanup
from testbed.shell.lab import Lab
from testbed.shell.preflight import LabError
from testbed.topologies import build, build_for_gpus
from vocab.plan import WiringPlan

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

SMALL = {
    "astral3": dict(servers=4, gpus=4),
    "rail3": dict(servers=4, gpus=4),
    "railonly": dict(servers=4, gpus=4),
    "fattree": dict(servers=4, gpus=4),
}


@pytest.mark.parametrize("topology", sorted(SMALL))
def test_fabric_comes_up_and_every_pair_reaches(topology: str,
                                                assert_clean: Callable[[WiringPlan], None]
                                                ) -> None:
    plan = build(topology, **SMALL[topology])
    with Lab(plan) as lab:
        health = lab.health()
        assert health and health["converged"], health
        assert health["switches"]["programmed"] == len(plan.switches)
        assert health["errors"] == []
        reach = lab.reachability()
        assert reach.pairs == len(plan.hosts) * (len(plan.hosts) - 1)
        assert reach.loss_pct == 0.0, str(reach)
        # the IP the plan promises is the IP the host has
        h = plan.hosts[-1]
        assert f"inet {h.ip}/8" in lab.host(h.name).cmd(f"ip -4 addr show dev {h.name}-eth0")
    assert_clean(plan)


def _tx_packets(bridge: str) -> dict[int, int]:
    """Transmitted packets per OpenFlow port, from ``ovs-ofctl dump-ports``."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", bridge],
                         capture_output=True, text=True, check=True).stdout
    counts, port = {}, None
    for line in out.splitlines():
        m = re.match(r"\s*port\s+(\d+):", line)
        if m:
            port = int(m.group(1))
        m = re.search(r"tx pkts=(\d+)", line)
        if m and port is not None:
            counts[port] = int(m.group(1))
    return counts


@pytest.mark.parametrize("method", ["dp_hash", "hash"])
def test_udp_source_ports_spread_over_leaf_uplinks(method: str,
                                                   assert_clean: Callable[[WiringPlan], None]
                                                   ) -> None:
    """RoCEv2-like flows (one UDP source port per QP) between ONE pair of NICs use many uplinks."""
    plan = build("astral3", servers=4, gpus=2)
    src, dst = "s0g0", "s0g1"  # same server, different rails: leaf lf0r0 -> spine -> lf0r1
    leaf = "lf0r0"
    uplinks = sorted(link.a_port for link in plan.links if link.a == leaf and link.kind == "lane")
    assert len(uplinks) == 4
    burst = [sys.executable, os.path.join(HERE, "udp_burst.py"), plan.node(dst).ip]
    with Lab(plan, select_method=method) as lab:
        health = lab.health()
        assert health["groups_hash_ports"] is True and health["select_method"] == method
        host = lab.host(src)
        host.cmd(f"ping -c1 -W2 {plan.node(dst).ip}")  # resolve ARP first
        before = _tx_packets(leaf)
        host.cmd(*burst, "20000", "64", "5")
        after = _tx_packets(leaf)
        per_uplink = {p: after[p] - before[p] for p in uplinks}
        used = [p for p, n in per_uplink.items() if n >= 5]
        assert sum(per_uplink.values()) >= 64 * 5, per_uplink
        assert len(used) >= 3, f"64 source ports used only uplinks {per_uplink}"
        # ...and one source port (one flow) sticks to one uplink: hashing, not spraying
        before = _tx_packets(leaf)
        host.cmd(*burst, "30001", "1", "50")
        after = _tx_packets(leaf)
        moved = {p: after[p] - before[p] for p in uplinks}
        assert sorted(moved.values())[-1] >= 50 and sum(moved.values()) < 60, moved
    assert_clean(plan)


def test_bad_scale_is_refused_before_anything_is_built(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = build("astral3", servers=4, gpus=2)
    for link in plan.links:  # 400G -> 4000 Mb/s, over Mininet's cap: a hand-edited plan file
        link.mbps = link.gbps * 10.0  # (the builder refuses such a scale itself)
    with pytest.raises(LabError, match="lower --scale"):
        Lab(plan).start()
    assert_clean(plan)


def test_failure_mid_build_tears_everything_down(monkeypatch: pytest.MonkeyPatch,
                                                 assert_clean: Callable[[WiringPlan], None]
                                                 ) -> None:
    plan = build("astral3", servers=4, gpus=2)

    def boom(self: Lab) -> None:
        raise RuntimeError("injected failure after hosts, links and controller exist")

    monkeypatch.setattr(Lab, "assemble_mininet", boom)
    lab = Lab(plan)
    with pytest.raises(RuntimeError, match="injected"):
        lab.start()
    assert_clean(plan)


def test_killed_lab_is_cleaned_by_astral_lab_clean(
        killed_lab: Callable[..., list[str]], clean_cli: Callable[[], Any],
        assert_clean: Callable[[WiringPlan], None]) -> None:
    """kill -9 the process that owns a running fabric; `astral-lab clean` removes the rest,
    its scratch folder in /tmp included."""
    plan = build("astral3", servers=4, gpus=2)

    def while_up(words: list[str]) -> None:
        assert os.path.isdir(words[0]) and cleanup.scratch_owner(words[0])
        assert any(b.startswith("lf") for b in cleanup.tagged_bridges())

    (workdir,) = killed_lab("build('astral3', servers=4, gpus=2)", "lab.workdir", while_up)
    left = cleanup.leftovers(plan)
    assert any("bridge" in x for x in left), "kill -9 leaves a fabric behind"
    assert f"scratch folder {workdir}" in left
    out = clean_cli()
    assert out.returncode == 0, out.stderr
    time.sleep(0.2)
    assert not os.path.exists(workdir)
    assert_clean(plan)


def test_ctrl_c_inside_a_running_lab_tears_it_down(assert_clean: Callable[[WiringPlan], None]
                                                   ) -> None:
    """Ctrl-C (SIGINT) while a `with Lab(...)` block runs: the fabric goes, nothing stays."""
    plan = build("astral3", servers=4, gpus=2)
    script = ("from testbed.shell.lab import Lab\nfrom testbed.topologies import build\n"
              "import time\n"
              "with Lab(build('astral3', servers=4, gpus=2)) as lab:\n"
              "    print('UP', flush=True)\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO)
    line = proc.stdout.readline().decode() if proc.stdout else ""
    assert "UP" in line
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert b"KeyboardInterrupt" in err
    assert_clean(plan)


def test_cli_up_without_cli_reports_zero_loss(assert_clean: Callable[[WiringPlan], None]) -> None:
    out = subprocess.run([sys.executable, "-m", "astral_lab.cli", "up", "astral3", "--no-cli",
                          "--lb", "planned", "--servers", "2", "--gpus-per-server", "2"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "0.0% loss" in out.stdout and "lb planned" in out.stdout, out.stdout
    assert_clean(build("astral3", servers=2, gpus=2))


def test_plain_mn_custom_topology_with_standalone_controller(
        tmp_path: str, assert_clean: Callable[[WiringPlan], None]) -> None:
    """`mn --custom testbed/shell/mntopo.py --topo astral3,...` + `astral-lab controller`: all
    pairs ping."""
    params = dict(gpus=4, gpus_per_server=2)  # `mn`'s words, as `topo`'s: gpus in all
    plan = build_for_gpus("astral3", **params)
    plan_path = os.path.join(str(tmp_path), "plan.json")
    plan.save(plan_path)
    from testbed.shell.machine import free_port

    of_port, rest_port = free_port(), free_port()
    ctl = subprocess.Popen([sys.executable, "-m", "astral_lab.cli", "controller", "--plan",
                            plan_path, "--of-port", str(of_port), "--rest-port", str(rest_port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        topo = "astral3," + ",".join(f"{k}={v}" for k, v in params.items())
        out = subprocess.run(["mn", "--custom", os.path.join(REPO, "testbed", "shell", "mntopo.py"),
                              "--topo", topo, "--controller", f"remote,ip=127.0.0.1,port={of_port}",
                              "--test", "pingall"],
                             capture_output=True, text=True, timeout=300)
        text = out.stdout + out.stderr
        assert "Results: 0% dropped" in text, text[-2000:]
    finally:
        ctl.terminate()
        ctl.wait(timeout=10)
    assert_clean(plan)


def test_tcp_runs_at_the_emulated_rate(assert_clean: Callable[[WiringPlan], None]) -> None:
    """The classic userspace-OVS trap: ping works but TCP stalls unless offloads are off.

    Two TCP flows: one between two NICs of one leaf (the 40 Mb/s NICs limit it) and one
    across the fabric, where a single flow hashes onto one 20 Mb/s lane (a 400G NIC
    over 200G lanes: one flow cannot use more than one lane). Each must reach its own
    bottleneck's rate, and never exceed it: the shaping of switch ports is real.
    """
    plan = build("astral3", servers=4, gpus=2)
    nic_mbps = next(link.mbps for link in plan.links if link.kind == "nic")
    lane_mbps = next(link.mbps for link in plan.links if link.kind == "lane")
    with Lab(plan) as lab:
        for (srv_name, cli_name), limit in ((("s1g0", "s0g0"), nic_mbps),
                                            (("s3g1", "s0g0"), lane_mbps)):
            got = _iperf3_mbps(lab, srv_name, cli_name)
            assert 0.6 * limit < got < 1.05 * limit, f"{got:.1f} Mb/s vs {limit} Mb/s"
    assert_clean(plan)


def _iperf3_mbps(lab: Lab, server_name: str, client_name: str) -> float:
    server, client = lab.host(server_name), lab.host(client_name)
    srv = server.popen(["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    out = client.cmd(f"iperf3 -c {server.IP()} -t 3 -J")
    srv.wait(timeout=10)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
