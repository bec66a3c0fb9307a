"""Cluster Edition across fake servers, tested the way Mininet tests it (``fakecluster.py``):
two "servers" beside this machine, each a network namespace with its own sshd and its own
Open vSwitch, logged into over real SSH with a key made for the test (``fakecluster``).

The fabric (``astral3 --servers 6 --gpus-per-server 1``: 3 rail blocks, so hosts on all
three servers) is brought up twice per tunnel kind: once by the CLI verb (``astral-lab up
... --cluster ... --no-cli``: every pair pings, nothing left), once through the Python API
(every pair pings, a replay across the tunnels delivers every byte, the ops collector reads
both fake servers' ports, nothing left). Every wait is bounded (``deadline``): a hang fails.

This machine's kernel has no GRE: there ``--tunnel gre`` must be refused before anything is
built, with a line naming the missing device, and leave nothing. GRE across two real
kernels is checked in the Vagrant VMs (``scripts/vagrant-check.sh two``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from clusterleft import assert_run_gone, snapshot
from fakecluster import BASE_LINKS, FakeCluster, available, deadline

from ops.shell.collector import Collector
from testbed.shell import cleanup
from testbed.shell.cluster import SSH_CONFIG_ENV, ClusterLab
from testbed.shell.clustercheck import tunnel_probe
from testbed.shell.preflight import LabError
from testbed.shell.probe import Stream
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.shell.replay import replay
from vocab.plan import link_components

# Mininet's cluster.py compares OVS versions with distutils (deprecated, still works on 3.11)
pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes:DeprecationWarning")

FABRIC = {"servers": 6, "gpus": 1, "servers_per_block": 2}
CLI_FABRIC = ["astral3", "--servers", "6", "--gpus-per-server", "1", "--servers-per-block",
              "2"]
#: connections a bring-up opens on a server beyond one per node shell: the shared one (by
#: name and by address), the clock probe's, the switches' batch and the hosts' programs
SHARED_SLACK = 6
BRINGUP_S = 600  # bound on one bring-up, checks and teardown (about a minute here)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeCluster]:
    """Two fake servers for the module; removed whatever the tests did, then checked gone."""
    why = available()
    assert why is None, why  # scripts/setup.sh installs sshd and sudo: not having them is a bug
    old = os.environ.get(SSH_CONFIG_ENV)
    fc = FakeCluster(2)
    with fc:
        os.environ[SSH_CONFIG_ENV] = fc.ssh_config
        try:
            for i in range(2):  # each answers over SSH, with its own OVS, as the lab needs
                out = fc.run(i, "ovs-vsctl --timeout=5 show >/dev/null && hostname -I")
                assert out.returncode == 0 and fc.ips[i] in out.stdout, (out.stderr, fc.log(i))
            yield fc
        finally:
            if old is None:
                os.environ.pop(SSH_CONFIG_ENV, None)
            else:
                os.environ[SSH_CONFIG_ENV] = old
    assert fc.leftovers() == []


def _kernel_has(tunnel: str) -> bool:
    probe = tunnel_probe(tunnel)
    return probe is not None and subprocess.run(probe, capture_output=True).returncode == 0


def _servers_clean(fc: FakeCluster, plan_names: set[str]) -> None:
    """Nothing of a fabric on any fake server: bridges, QoS rows, interfaces, sessions."""
    for i in range(fc.n):
        assert fc.vsctl(i, "list-br").split() == [], f"bridges on {fc.ips[i]}"
        assert fc.vsctl(i, "--bare", "--columns=_uuid", "list", "QoS").split() == []
        assert fc.links(i) <= BASE_LINKS, f"{fc.ips[i]}: {fc.links(i) - BASE_LINKS}"
    assert fc.sessions() == {}, "SSH sessions or their programs left"
    here = set(os.listdir("/sys/class/net"))
    assert not {n for n in here if n.split("-")[0] in plan_names}, "interfaces left here"


def _cli_up(fc: FakeCluster, tunnel: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "astral_lab.cli", "up", *CLI_FABRIC, "--cluster",
           ",".join([fc.head, *fc.ips]), "--tunnel", tunnel, "--no-cli"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=BRINGUP_S,
                          env=dict(os.environ, **{SSH_CONFIG_ENV: fc.ssh_config}))


@pytest.mark.parametrize("tunnel", ["vxlan", "gre"])
def test_cli_up_across_fake_servers(fake: FakeCluster, tunnel: str) -> None:
    plan = build("astral3", **FABRIC)
    names = {n.name for n in plan.nodes}
    if tunnel == "gre" and not _kernel_has("gre"):
        # refused by the precheck, before anything is built: one line names what is missing
        proc = _cli_up(fake, tunnel)
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        line = [x for x in proc.stderr.splitlines() if f"{fake.head}: this kernel" in x]
        assert len(line) == 1 and "no gretap device: modprobe ip_gre" in line[0], proc.stderr
        _servers_clean(fake, names)
        assert cleanup.tagged_bridges() == {} and cleanup.tagged_qos() == {}
        return
    proc = _cli_up(fake, tunnel)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    pairs = len(plan.hosts) * (len(plan.hosts) - 1)
    assert f"all-pairs ping: {pairs}/{pairs} pairs reached" in proc.stdout, proc.stdout[-2000:]
    assert "'crossing': 8" in proc.stdout
    _servers_clean(fake, names)
    assert cleanup.tagged_bridges() == {} and cleanup.tagged_qos() == {}


@pytest.mark.parametrize("tunnel", ["vxlan", "gre"])
def test_api_replay_and_collector(fake: FakeCluster, tunnel: str) -> None:
    plan = build("astral3", **FABRIC)
    servers = [fake.head, *fake.ips]
    if tunnel == "gre" and not _kernel_has("gre"):  # refused before anything is built
        with pytest.raises(LabError, match="no gretap device: modprobe ip_gre"):
            ClusterLab(plan, servers, tunnel=tunnel, user="root").start()
        _servers_clean(fake, {n.name for n in plan.nodes})
        return
    snap: dict[str, Any] = {}
    before = [fake.connections(i) for i in range(fake.n)]
    with deadline(BRINGUP_S, f"fabric over fake servers ({tunnel})"), \
            ClusterLab(plan, servers, tunnel=tunnel, user="root") as lab:
        snap = snapshot(lab, fake)
        # 0. a connection per node shell, and the short commands (checks, interfaces,
        # tunnels) over one shared one: not a key exchange per command
        for i, ip in enumerate(fake.ips):
            nodes = sum(1 for n in plan.nodes if lab.placement[n.name] == ip)
            opened = fake.connections(i) - before[i]
            assert nodes < opened <= nodes + SHARED_SLACK, (ip, nodes, opened)
        hosts = {s: [h.name for h in plan.hosts if lab.placement[h.name] == s] for s in servers}
        assert all(len(h) == 2 for h in hosts.values()), hosts  # a block on every server
        for i, ip in enumerate(fake.ips):  # each server's own OVS holds its own bridges
            there = {s.name for s in plan.switches if lab.placement[s.name] == ip}
            assert set(fake.vsctl(i, "list-br").split()) == there and there

        # 1. every pair pings
        r = lab.reachability()
        assert r.pairs == 30 and r.received == r.pairs and not r.failed, str(r)

        # 2. a replay whose every flow crosses a tunnel: every byte delivered
        ring = list(zip(servers, servers[1:] + servers[:1], strict=True))
        flows = [FlowSpec.make(hosts[a][0], hosts[b][-1], 256 * 1024, qp=i + 1,
                               message_bytes=64 * 1024) for i, (a, b) in enumerate(ring)]
        res = replay(lab, flows, progress=False, label="fakecluster", timeout=120)
        assert res.bytes_received == res.bytes_sent == 3 * 256 * 1024, res.flows
        assert res.lost_packets == 0, res.flows

        # 2b. a probe stream between the two fake servers: its receiver's ready file and
        # report are written there, not here (each fake server has its own /tmp)
        with Stream(lab, hosts[servers[1]][0], hosts[servers[2]][0], sports=range(50000, 50004),
                    pps=50, duration=1.0) as st:
            pass
        got = st.result.get("flows", {})
        assert sorted(got) == [str(p) for p in range(50000, 50004)], st.result
        assert all(f["received"] > 0 for f in got.values()), st.result

        # 3. the ops collector reads the ports of both fake servers' switches
        col = Collector.for_lab(lab, None, interval=1.0)
        col.poll_once()
        lab.reachability()  # some traffic between the two polls
        values = col.poll_once()
        comps = link_components(lab.plan)
        for ip in fake.ips:
            remote = {c: ln for c, ln in comps.items() if lab.placement[ln.b] == ip}
            assert remote
            for comp, ln in remote.items():  # ports only the fake server's namespace has
                assert not os.path.exists(f"/sys/class/net/{ln.b_intf}")
                assert values.get((comp, "up")) == 1.0, (ip, comp)
            nic = next(c for c, ln in remote.items() if ln.a in lab.hosts)
            assert values.get((nic, "mbps_ab"), 0) > 0, (ip, nic, values.get((nic, "up")))
    # 4. nothing of the run on any server
    assert_run_gone(snap, fake)
    _servers_clean(fake, {n.name for n in plan.nodes})
