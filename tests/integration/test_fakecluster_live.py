"""Cluster Edition across fake servers, tested the way Mininet tests it (``fakecluster.py``):
two "servers" beside this machine, each its own network and mount namespace with its own
Open vSwitch and its own sshd (Debian's openssh-server), logged into with a key made for
the test. The fabric is spread over the three with tunnels between them: every pair pings,
a replay crosses the tunnels with every byte delivered, the ops collector reads the
counters of the ports on every server, and nothing stays on any of them afterwards.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
from fakecluster import FakeCluster, available

from ops.shell.collector import Collector
from testbed.shell.cluster import ClusterLab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.shell.replay import replay
from vocab.plan import WiringPlan

# Mininet's cluster.py compares OVS versions with distutils (deprecated, still works on 3.11)
pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes:DeprecationWarning")


def _kernel_has(kind: str) -> bool:
    args = {"gretap": ["local", "127.0.0.1", "remote", "127.0.0.2"],
            "vxlan": ["id", "9", "local", "127.0.0.1", "remote", "127.0.0.2", "dstport", "4789"]}
    made = subprocess.run(["ip", "link", "add", "astral-tprobe", "type", kind, *args[kind]],
                          capture_output=True).returncode == 0
    subprocess.run(["ip", "link", "del", "astral-tprobe"], capture_output=True)
    return made


@pytest.mark.parametrize("tunnel", ["gre", "vxlan"])
def test_fabric_across_fake_servers(tunnel: str,
                                    assert_clean: Callable[[WiringPlan], None]) -> None:
    why = available()
    assert why is None, why  # `make setup` installs sshd and sudo: not having them is a bug
    if not _kernel_has({"gre": "gretap", "vxlan": "vxlan"}[tunnel]):
        pytest.skip(f"this kernel cannot make {tunnel} devices (the cluster precheck says so "
                    "too); the other tunnel kind covers the path")
    plan = build("astral3", servers=6, gpus=2, servers_per_block=2)  # 3 rail blocks
    with FakeCluster(2) as fc:
        for i in range(2):  # each fake server answers over ssh, with its own OVS
            out = fc.run(i, "ovs-vsctl --timeout=5 show && hostname -I")
            assert out.returncode == 0 and fc.ips[i] in out.stdout, (out.stderr, fc.log(i))
        with ClusterLab(plan, ["localhost", *fc.ips], user="root", ssh=fc.ssh,
                        tunnel=tunnel) as lab:
            servers = {lab.placement[h.name] for h in plan.hosts}
            assert servers == {"localhost", *fc.ips}, lab.placement
            assert lab.summary["crossing"] > 0
            for i, ip in enumerate(fc.ips):  # each server's OVS holds its own bridges
                there = {s.name for s in plan.switches if lab.placement[s.name] == ip}
                listed = set(fc.run(i, "ovs-vsctl list-br").stdout.split())
                assert listed == there and there, (listed, there)

            r = lab.reachability()
            assert r.received == r.pairs > 0, str(r)

            # flows whose ends are on different servers: every byte crosses a tunnel
            hosts = {s: [h.name for h in plan.hosts if lab.placement[h.name] == s]
                     for s in servers}
            order = ["localhost", *fc.ips]
            flows = [FlowSpec.make(hosts[a][0], hosts[b][-1], 300_000, qp=i)
                     for i, (a, b) in enumerate(zip(order, order[1:] + order[:1], strict=True))]
            res = replay(lab, flows, progress=False, label="fakecluster")
            assert res.bytes_received == res.bytes_sent > 0, res.summary()
            assert res.lost_packets == 0

            # the collector reads the ports of every server's switches
            col = Collector.for_lab(lab, None, interval=1.0)
            col.poll_once()
            values = col.poll_once()
            comps_up = {comp for (comp, metric), v in values.items() if metric == "up"}
            for ip in fc.ips:
                remote_links = [ln for ln in plan.links
                                if lab.placement[ln.b] == ip and ln.b not in lab.hosts]
                assert remote_links
                assert all(any(c.startswith(f"{ln.a}~{ln.b}") for c in comps_up)
                           for ln in remote_links), (ip, sorted(comps_up)[:10])
        for i in range(2):  # nothing of the fabric left on the fake servers
            assert fc.run(i, "ovs-vsctl list-br").stdout.split() == []
            links = fc.run(i, "ip -o link show").stdout
            names = {x.split(":")[1].strip().split("@")[0] for x in links.splitlines()}
            assert names <= {"lo", "eth0", "ovs-netdev", "ovs-system", "gre0", "gretap0",
                             "erspan0", "vxlan_sys_4789"}, names
            shells = fc.run(i, "pgrep -af 'mininet:' || true").stdout.strip()
            assert not shells, shells
    assert fc.leftovers() == []
    assert_clean(plan)
