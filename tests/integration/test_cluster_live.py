"""Mininet Cluster Edition with this machine as the only server (``--cluster localhost``).

That is the path Mininet supports without SSH: the same classes (MininetCluster,
RemoteHost, RemoteOVSSwitch, RemoteGRELink) and the same steps as on several
servers, except that no link needs a tunnel. Checked: every pair pings, every
interface has the GRE-safe MTU, shaping survives OVS, a lane cut reaches both
switches, and nothing of the run is left afterwards, also after a failure half-way.

Leftovers are checked for *this run* (its pids, its tagged rows, its interfaces by
name and ifindex), because a fabric of another test run may take the machine's
fabric lock, and the same names, the moment ours is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest
from clusterleft import assert_run_gone as _assert_run_gone
from clusterleft import ifindex as _ifindex
from clusterleft import snapshot as _snapshot

from testbed.shell.cluster import CLUSTER_MTU, ClusterLab
from testbed.shell.procs import kill_pids
from testbed.topologies import build

# Mininet's cluster.py compares OVS versions with distutils (deprecated, still works on 3.11)
pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes:DeprecationWarning")


def test_cluster_localhost_all_pairs() -> None:
    plan = build("astral3", servers=4, gpus=2)
    with ClusterLab(plan, ["localhost"]) as lab:
        snap = _snapshot(lab)
        assert len(snap["intfs"]) == 2 * len(plan.links) - len(plan.hosts)  # host ends: netns
        # Built by Cluster Edition's classes, every node on the one server
        assert type(lab.net).__name__ == "MininetCluster"
        from mininet.examples.cluster import RemoteHost
        assert all(isinstance(h, RemoteHost) for h in lab.net.hosts)
        assert all(s.server == "localhost" for s in lab.net.switches)
        assert all(n.server == "localhost" for n in lab.plan.nodes)
        with open(os.path.join(lab.workdir, "plan.json")) as f:  # what the controller read
            assert {n["server"] for n in json.load(f)["nodes"]} == {"localhost"}

        r = lab.reachability()
        assert r.pairs == 8 * 7 and r.received == r.pairs and not r.failed, str(r)

        # GRE-safe MTU on every emulated interface, both ends
        for intf in snap["intfs"]:
            with open(f"/sys/class/net/{intf}/mtu") as f:
                assert int(f.read()) == CLUSTER_MTU, intf
        for h in plan.hosts:
            assert lab.host(h.name).cmd(f"cat /sys/class/net/{h.name}-eth0/mtu").strip() \
                == str(CLUSTER_MTU)
        # the plan's rates, and OVS left the qdiscs alone (noop QoS)
        lane = lab.links_between("lf0r0", "spine0")[0]
        out = subprocess.run(["tc", "class", "show", "dev", lane.a_intf],
                             capture_output=True, text=True).stdout
        assert f"rate {int(lane.mbps)}Mbit" in out, out
        nic = lab.host("s0g0").cmd("tc class show dev s0g0-eth0")
        assert f"rate {int(plan.host_link_mbps()['s0g0'])}Mbit" in nic, nic

        # permanent neighbour entries, as the one-machine Lab makes (static_arp)
        neigh = lab.host("s3g1").cmd("ip neigh show nud permanent")
        assert neigh.count("PERMANENT") == len(plan.hosts) - 1, neigh

        # a lane cut goes to both switches' ports, and back
        lab.set_link("lf0r0", "spine0", up=False)
        for intf in (lane.a_intf, lane.b_intf):
            with open(f"/sys/class/net/{intf}/operstate") as f:
                assert f.read().strip() == "down", intf
        lab.set_link("lf0r0", "spine0", up=True)
        assert lab.wait_converged(timeout=30)["converged"]
        assert lab.reachability().received == r.pairs
    _assert_run_gone(snap)


def test_cluster_failure_half_way_leaves_nothing() -> None:
    from mininet.examples.cluster import RemoteGRELink

    made: dict[str, int] = {}  # root-namespace interfaces the first links created

    class FailingLink(RemoteGRELink):  # the 6th link fails, as a broken tunnel would
        def __init__(self, node1: Any, node2: Any, **kw: Any) -> None:
            if len(made) >= 5:
                raise RuntimeError("injected link failure")
            super().__init__(node1, node2, **kw)
            name = str(self.intf2)  # the switch end: hosts' ends live in their namespaces
            made[name] = _ifindex(name)  # type: ignore[assignment]

    plan = build("astral3", servers=4, gpus=2)
    lab = ClusterLab(plan, ["localhost"], link_cls=FailingLink)
    seen: dict[str, Any] = {}
    orig = lab._record_local

    def spy() -> None:  # remember the shells that existed before the failure
        orig()
        seen["pids"] = [n.shell.pid for n in lab.net.hosts + lab.net.switches]

    lab._record_local = spy  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="injected link failure"):
        lab.start()
    assert len(made) == 5 and all(made.values()) and len(seen["pids"]) == 16
    assert lab.net is None and lab.controller_proc is None
    _assert_run_gone({"run": lab.run_id, "pids": seen["pids"], "intfs": made})


# --- two servers on one machine -------------------------------------------------------------
STANDIN_IP, HEAD_IP = "10.231.0.2", "10.231.0.1"
#: What the precheck picks with datapath=auto: kernel OVS where the module is loaded.
DATAPATH = "kernel" if os.path.isdir("/sys/module/openvswitch") else "user"

_SSH_SHIM = """#!/bin/sh
# Stand-in for ssh to the stand-in server: same command line, same "join the arguments and
# run them with the login shell" semantics, but the login is `ip netns exec` into the
# server's network namespace with its own Open vSwitch (OVS_RUNDIR points at it).
while [ $# -gt 0 ]; do
  case "$1" in -o|-i|-p|-l|-w|-F) shift 2 ;; -*) shift ;; *) break ;; esac
done
[ "${1#*@}" = "%(ip)s" ] || { echo "standin-ssh: no server ${1#*@}" >&2; exit 255; }
shift
exec ip netns exec %(ns)s env OVS_RUNDIR=%(d)s OVS_DBDIR=%(d)s OVS_LOGDIR=%(d)s \\
  OVS_SYSCONFDIR=%(d)s sh -c "$*"
"""

_SUDO_SHIM = """#!/bin/sh
# This machine runs everything as root and has no sudo; Mininet's remote path calls it.
while [ $# -gt 0 ]; do case "$1" in -u) shift 2 ;; -*) shift ;; *) break ;; esac; done
exec "$@"
"""


def _sh(*cmd: str, check: bool = True) -> str:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    if check and proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A second server on this machine: its own network stack and its own OVS daemons.

    A network namespace joined to ours by a veth (the servers' network: addresses,
    MTU 1500, GRE across it), running its own ovsdb-server and ovs-vswitchd with their
    own database and run directory. What it does not stand in for: SSH (a shim enters
    the namespace instead), sudo (absent here; a shim drops it), and a separate kernel,
    CPU and clock.
    """
    import tempfile

    ns = f"astral-sv{os.getpid() % 100000}"
    d = tempfile.mkdtemp(prefix="astsv-", dir="/tmp")  # short: unix socket paths <= 107
    env = {"OVS_RUNDIR": d, "OVS_DBDIR": d, "OVS_LOGDIR": d, "OVS_SYSCONFDIR": d}
    in_ns = ["ip", "netns", "exec", ns, "env", *(f"{k}={v}" for k, v in env.items())]
    try:
        _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", "astsv0", "type", "veth", "peer", "name", "astsv1",
            "netns", ns)
        _sh("ip", "addr", "add", f"{HEAD_IP}/24", "dev", "astsv0")
        _sh("ip", "link", "set", "astsv0", "up")
        for cmd in (["ip", "addr", "add", f"{STANDIN_IP}/24", "dev", "astsv1"],
                    ["ip", "link", "set", "astsv1", "up"], ["ip", "link", "set", "lo", "up"]):
            _sh("ip", "netns", "exec", ns, *cmd)
        _sh("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
        _sh(*in_ns, "ovsdb-server", f"{d}/conf.db", f"--remote=punix:{d}/db.sock",
            f"--pidfile={d}/ovsdb-server.pid", "--detach", f"--log-file={d}/ovsdb.log")
        _sh(*in_ns, "ovs-vsctl", "--no-wait", "init")
        _sh(*in_ns, "ovs-vswitchd", f"unix:{d}/db.sock", f"--pidfile={d}/ovs-vswitchd.pid",
            "--detach", f"--log-file={d}/vswitchd.log")
        bin_dir = os.path.join(d, "bin")
        os.makedirs(bin_dir)
        shims = {"standin-ssh": _SSH_SHIM % {"ip": STANDIN_IP, "ns": ns, "d": d}}
        if not shutil.which("sudo"):
            shims["sudo"] = _SUDO_SHIM
        for name, text in shims.items():
            with open(os.path.join(bin_dir, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(bin_dir, name), 0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        yield {"ip": STANDIN_IP, "ns": ns, "ssh": [os.path.join(bin_dir, "standin-ssh")],
               "vsctl": lambda *a: _sh(*in_ns, "ovs-vsctl", "--timeout=10", *a),
               "links": lambda: _sh("ip", "netns", "exec", ns, "ip", "-o", "link", "show")}
    finally:
        for daemon in ("ovs-vswitchd", "ovsdb-server"):
            try:
                with open(f"{d}/{daemon}.pid") as f:
                    kill_pids([int(f.read())])
            except (OSError, ValueError):
                pass
        _sh("ip", "netns", "del", ns, check=False)
        _sh("ip", "link", "del", "astsv0", check=False)
        shutil.rmtree(d, ignore_errors=True)


def test_two_servers_standin(standin: dict[str, Any]) -> None:
    plan = build("astral3", servers=4, gpus=2)
    # this kernel has no GRE (precheck says so); VXLAN takes the same Cluster Edition path
    with ClusterLab(plan, ["localhost", standin["ip"]], user="root", ssh=standin["ssh"],
                    tunnel="vxlan") as lab:
        snap = _snapshot(lab)
        there = {n for n, s in lab.placement.items() if s == standin["ip"]}
        assert {n for n in there if n.startswith("lf")} == {"lf1r0", "lf1r1"}  # block 1
        assert lab.summary["crossing"] == 8 and lab.summary["crossing_by_kind"] == {"lane": 8}
        # the datapath this machine has: the stand-in shares our kernel and its module
        assert lab.check is not None and lab.check.datapaths == {standin["ip"]: DATAPATH}
        assert lab.of_host == HEAD_IP  # the controller listens where the other server reaches
        # each server's own OVS holds its own bridges, and only those
        here_br = set(_sh("ovs-vsctl", "list-br").split()) & {s.name for s in plan.switches}
        there_br = set(standin["vsctl"]("list-br").split())
        assert there_br == {s.name for s in plan.switches if s.name in there}
        assert here_br == {s.name for s in plan.switches} - there_br
        for h in lab.net.hosts:
            assert h.isRemote == (h.name in there)
        # where the datapaths differ: the bridge type, and offloads (off only for userspace
        # OVS, which stalls TCP with them on; the kernel datapath keeps them)
        for name, vsctl in ((next(iter(sorted(there_br))), standin["vsctl"]),
                            (next(iter(sorted(here_br))), lambda *a: _sh("ovs-vsctl", *a))):
            dp_type = vsctl("get", "Bridge", name, "datapath_type").strip().strip('"')
            assert dp_type in (("netdev",) if DATAPATH == "user" else ("", "system")), dp_type
        local = next(ln for ln in plan.links if ln.a not in there and ln.b not in there
                     and ln.b in here_br)  # a host's NIC link on this server: veth, not tunnel
        features = _sh("ethtool", "-k", local.b_intf)
        assert ("tx-checksumming: off" in features) == (DATAPATH == "user"), features[:300]
        # lanes between the servers are tunnels with the cluster MTU at both ends
        crossing = [ln for ln in plan.links if (ln.a in there) != (ln.b in there)]
        remote_links = standin["links"]()
        for ln in crossing:
            here_end, there_end = ((ln.b_intf, ln.a_intf) if ln.a in there
                                   else (ln.a_intf, ln.b_intf))
            info = _sh("ip", "-d", "link", "show", here_end)
            assert "vxlan id" in info and f"mtu {CLUSTER_MTU}" in info and STANDIN_IP in info
            assert f" {there_end}@" in remote_links or f" {there_end}:" in remote_links

        r = lab.reachability()
        assert r.pairs == 56 and r.received == r.pairs and not r.failed, str(r)

        # a lane between the servers is cut at both ends, each on its own server
        lane = lab.links_between("lf1r0", "spine0")[0]
        lab.set_link("lf1r0", "spine0", up=False)
        ends = [x for x in standin["links"]().splitlines() + _sh("ip", "-o", "link").splitlines()
                if x.split(":")[1].strip().split("@")[0] in (lane.a_intf, lane.b_intf)]
        assert len(ends) == 2 and all(",UP" not in x.split(">")[0] for x in ends), ends
        lab.set_link("lf1r0", "spine0", up=True)
        lab.wait_converged(timeout=30)
    _assert_run_gone(snap)
    assert standin["vsctl"]("list-br").split() == []
    assert standin["vsctl"]("--bare", "--columns=_uuid", "list", "QoS").split() == []
    left = [x.split(":")[1].strip().split("@")[0] for x in standin["links"]().splitlines()]
    # the stand-in's own OVS keeps its datapath's device while it runs
    dp_dev = "ovs-netdev" if DATAPATH == "user" else "ovs-system"
    assert set(left) <= {"lo", "astsv1", "gre0", "gretap0", "erspan0", dp_dev}, left
