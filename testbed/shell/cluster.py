"""One fabric over several machines, with Mininet's own distributed engine (Cluster Edition).

    from testbed.topologies import build
    from testbed.shell.cluster import ClusterLab

    with ClusterLab(build("astral3", servers=8), ["lab", "worker1"]) as lab:
        print(lab.reachability())          # same API as testbed.shell.lab.Lab

A classroom or a research group outgrows one VM: one ``ovs-vswitchd`` forwards for
the whole fabric. Mininet ships a distributed engine, ``mininet.examples.cluster``
(``MininetCluster``, ``RemoteHost``, ``RemoteOVSSwitch``, ``RemoteGRELink``), so
the lab uses it rather than a second one of its own. This module adds only what
the lab needs around it:

* **Placement** (pure, unit-tested; in ``testbed.clusterplace``): ``place(plan,
  servers)``. A rail block (its leaves and the GPUs of its servers; a pod for a
  fat-tree) is never split, so only leaf-spine lanes cross machines; spines go
  where they cut fewest lanes, spread evenly when that ties (see ``place``).
  ``crossing_links`` lists the lanes that cross. The plan records each node's
  machine (``Node.server``).
* **Prechecks** (pure over an injectable runner; in ``testbed.shell.clustercheck``, with
  the SSH runner and clock probe they use): passwordless SSH and sudo, the same
  lab version at the same path, Open vSwitch running, the tools, the datapath,
  and the clocks (one-way latencies need clocks in sync; otherwise latency is
  reported as round-trip only). All problems are listed before anything is built.
* **Bring-up**: ``ClusterLab``, a ``Lab`` with the same public API (hosts, net,
  client, set_link, links_between, kill/restart_controller, health,
  wait_converged, reachability, stop, context manager). The controller
  (``python -m astral_lab.controller_cli``, started as the Lab starts it) runs on the first server,
  which must be this machine, listening on the address the others reach it by;
  every switch connects to it. Links between machines are GRE (``gretap``)
  tunnels by default (VXLAN or SSH on request), which costs header bytes: every
  emulated interface gets ``CLUSTER_MTU`` (see below). Shaping is the Lab's HTB
  with its deep queues.

Why the first server must be this machine: Mininet Cluster Edition drives every
node from the one Python process that built the network (remote nodes are shells
over SSH), and the lab's controller and REST API are processes of that machine.

This module keeps the MTU arithmetic, the CLI hook and the bring-up; the placement is
``testbed.clusterplace`` and the prechecks are ``testbed.shell.clustercheck``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shlex
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from operator import attrgetter
from typing import Any

from mininet.examples.cluster import (
    MininetCluster,
    RemoteGRELink,
    RemoteHost,
    RemoteOVSSwitch,
    RemoteSSHLink,
)
from mininet.node import Node, OVSSwitch, RemoteController
from mininet.util import quietRun

from testbed.clusterplace import (
    parse_servers,
    place,
    placement_summary,
    with_servers,
)
from testbed.datapath import Datapath
from testbed.shaping import htb_commands
from testbed.shell import cleanup, preflight
from testbed.shell.clustercheck import (
    SSH_OPTIONS,
    TIMED_OUT,
    ClockProbe,
    ClusterPrecheck,
    CommandResult,
    Runner,
    SharedConnections,
    SSHRunner,
    default_user,
    is_this_machine,
    precheck_servers,
    resolve_ipv4,
    source_address,
    ssh_clock_probe,
)
from testbed.shell.lab import OVS_PORT_RCVBUF, Lab
from testbed.shell.machine import socket_buffers
from testbed.shell.mntopo import OF_PROTOCOLS
from traffic.roce import DEFAULT_PMTU, largest_roce_pmtu
from traffic.shell.running import LocalFiles, NotAnswered
from vocab.plan import WiringPlan

# --- MTU -----------------------------------------------------------------------------------
#: MTU of the network between the servers (Ethernet; what Vagrant's private network has).
UNDERLAY_MTU = 1500
#: Bytes a ``gretap`` tunnel adds to each frame it carries: outer IPv4 header (20), GRE
#: header with the key Mininet sets per tunnel (4 + 4), and the carried Ethernet header
#: (14), which plain L3 GRE (1500 - 24) would not carry.
GRETAP_OVERHEAD = 20 + 8 + 14
#: Bytes a VXLAN tunnel adds (``--tunnel vxlan``, for kernels without GRE): outer IPv4
#: (20), UDP (8), VXLAN (8) and the carried Ethernet header (14).
VXLAN_OVERHEAD = 20 + 8 + 8 + 14
#: MTU of every emulated interface in cluster mode: Mininet's ``RemoteGRELink`` value,
#: 8 bytes under the 1,458 GRE allows and exactly what VXLAN allows. One MTU for every
#: interface, tunnel or not, so a path never has a smaller MTU than its ends think.
CLUSTER_MTU = 1450
#: ``--tunnel`` choices: how a link between two servers is carried.
TUNNELS = ("gre", "vxlan", "ssh")


assert max(GRETAP_OVERHEAD, VXLAN_OVERHEAD) + CLUSTER_MTU <= UNDERLAY_MTU
assert largest_roce_pmtu(CLUSTER_MTU) >= DEFAULT_PMTU


#: An ssh_config(5) file for every SSH session to the other servers (prechecks, Mininet's node
#: shells, tunnels, teardown), for when the user's own ``~/.ssh/config`` should not change:
#: ssh reads that from the account's home directory, whatever ``$HOME`` says.
SSH_CONFIG_ENV = "ASTRAL_LAB_SSH_CONFIG"


def ssh_from_env() -> list[str] | None:
    """``ssh -F FILE`` with the lab's options when ``ASTRAL_LAB_SSH_CONFIG`` names a file
    (None: plain ``ssh``, which reads the user's own configuration)."""
    path = os.environ.get(SSH_CONFIG_ENV)
    if not path:
        return None
    if not os.path.isfile(path):
        raise preflight.LabError(f"{SSH_CONFIG_ENV}={path}: no such file")
    return ["ssh", "-F", os.path.abspath(path), *SSH_OPTIONS]


def make_lab(plan: WiringPlan, cluster: Sequence[str] | None = None, tunnel: str = "gre",
             **kwargs: Any) -> Lab:
    """A ``Lab`` on this machine, or a ``ClusterLab`` over ``cluster``; same API either way."""
    if cluster:
        if str(kwargs.pop("switch_daemons", 1)) not in ("1", "auto"):
            raise ValueError("--switch-daemons and --cluster do not mix: a cluster runs one "
                             "switch daemon per server (add servers instead)")
        return ClusterLab(plan, cluster, tunnel=tunnel, **kwargs)
    return Lab(plan, **kwargs)


# --- bring-up ------------------------------------------------------------------------------
class SharedRcmd:
    """``rcmd`` (a short command on a node's server) over the server's shared SSH connection.

    Mixed in before Mininet's remote node classes; ``shared_ssh`` holds the run's
    ``SharedConnections.options`` (empty: every command its own connection, as Mininet).
    Node shells and programs keep their own connections (``SharedConnections``).
    """

    shared_ssh: list[str] = []

    def rcmd(self, *cmd: Any, **opts: Any) -> Any:
        own = self.sshcmd  # type: ignore[attr-defined]
        if not (self.isRemote and self.shared_ssh):  # type: ignore[attr-defined]
            return super().rcmd(*cmd, **opts)  # type: ignore[misc]
        self.sshcmd = [*own[:-1], *self.shared_ssh, own[-1]]  # options before the destination
        try:
            return super().rcmd(*cmd, **opts)  # type: ignore[misc]
        finally:
            self.sshcmd = own


_SWITCH_CLASS: Any = None


def lab_switch_class() -> Any:
    """Mininet's ``RemoteOVSSwitch``, with its per-server batch sent through a pipe.

    ``RemoteOVSSwitch.batchStartup`` types each server's one ``ovs-vsctl`` command
    into a switch's shell, i.e. into a pseudo-terminal, whose line discipline keeps
    at most 4,095 bytes of a line: from 8 switches on, the end of the command (the
    last bridges) was silently lost. This subclass hands the same command to
    ``sh -s`` on the same server through a pipe (``rpopen``: locally a plain
    process, remotely SSH without a terminal). Everything else is Mininet's.
    """
    global _SWITCH_CLASS
    if _SWITCH_CLASS is None:
        class PipedOVSSwitch(SharedRcmd, RemoteOVSSwitch):  # type: ignore[misc]
            @classmethod
            def batchStartup(cls, switches: Any, **_kwargs: Any) -> Any:  # noqa: N802
                key = attrgetter("server")
                for _server, group in groupby(sorted(switches, key=key), key):
                    group = tuple(group)
                    OVSSwitch.batchStartup(group, run=_piped(group[0]))
                return switches

        _SWITCH_CLASS = PipedOVSSwitch
    return _SWITCH_CLASS


_HOST_CLASS: Any = None


def lab_host_class() -> Any:
    """Mininet's ``RemoteHost``, whose programs on this machine stay the Popen's own process.

    ``RemoteMixin._popen`` starts every child in a process group of its own (``setpgrp``,
    so a Ctrl-C does not reach a remote node's ssh). For a node on this machine that child
    is ``mnexec -da PID program``, and ``mnexec -d`` then forks to be able to ``setsid``: the
    Popen's process exits at once and the program runs on as an orphan holding the Popen's
    pipes. The replay took that exit for a receiver that died, and then blocked reading its
    stderr until the orphan (waiting for packets no sender would send) ended: never. Local
    nodes therefore start programs as Mininet's plain ``Node`` does (as the one-machine Lab's
    hosts do); remote ones keep Mininet's path (``ssh`` is the Popen's process there).
    """
    global _HOST_CLASS
    if _HOST_CLASS is None:
        class LabRemoteHost(SharedRcmd, RemoteHost):  # type: ignore[misc]
            def _popen(self, cmd: Any, sudo: bool = True, tt: bool = True,
                       **params: Any) -> Any:
                if self.isRemote or not sudo:
                    return super()._popen(cmd, sudo=sudo, tt=tt, **params)
                return Node._popen(self, cmd.split() if isinstance(cmd, str) else cmd,
                                   **params)

        _HOST_CLASS = LabRemoteHost
    return _HOST_CLASS


_VXLAN_CLASS: Any = None


def vxlan_link_class() -> Any:
    """Mininet's ``RemoteGRELink`` with VXLAN instead of GRE between servers.

    Some kernels have no GRE (this lab's CI kernel: ``ip link add ... type gretap``
    says "Unknown device type") but do have VXLAN. Same steps as Mininet's
    ``makeTunnel`` (delete, create on both servers with the tunnel's key, MAC, up,
    MTU, move to the node); only the device type differs. Each tunnel has its own
    VNI, like Mininet's per-tunnel GRE key; the MTU stays ``CLUSTER_MTU``.
    """
    global _VXLAN_CLASS
    if _VXLAN_CLASS is None:
        class RemoteVXLANLink(RemoteGRELink):  # type: ignore[misc]
            def makeTunnel(self, node1: Any, node2: Any, intfname1: str,  # noqa: N802
                           intfname2: str, addr1: str | None = None,
                           addr2: str | None = None) -> None:
                if node2.server == "localhost":  # Mininet's convention: node1 is local
                    return self.makeTunnel(node2, node1, intfname2, intfname1, addr2, addr1)
                ip1, ip2 = node1.serverIP, node2.serverIP
                if node1.server == "localhost":
                    ip1 = quietRun(f"ip route get {ip2}").split(" src ")[1].split()[0]
                RemoteGRELink.GRE_KEY += 1
                vni = RemoteGRELink.GRE_KEY
                for node, intf, addr, local, remote in ((node1, intfname1, addr1, ip1, ip2),
                                                        (node2, intfname2, addr2, ip2, ip1)):
                    node.rcmd(f"ip link delete {intf}")
                    out = node.rcmd(f"ip link add name {intf} type vxlan id {vni} local {local}"
                                    f" remote {remote} dstport 4789")
                    if out:
                        raise preflight.LabError(f"creating VXLAN {intf} on {node.server}: "
                                                 f"{out.strip()}")
                    if addr:
                        node.rcmd(f"ip link set {intf} address {addr}")
                    node.rcmd(f"ip link set dev {intf} up")
                    node.rcmd(f"ip link set dev {intf} mtu {CLUSTER_MTU}")
                    self.moveIntf(intf, node)
                return None

        _VXLAN_CLASS = RemoteVXLANLink
    return _VXLAN_CLASS


def _listening(_node: Any, _ip: str, _port: int) -> bool:
    """``RemoteController.isListening`` replaced: the Lab started the controller and checks
    it through its JSON API (``health``, ``wait_converged``); Mininet's check needs telnet."""
    return True


def _piped(node: Any) -> Callable[..., str]:
    """A ``run(cmd)`` that feeds ``cmd`` to ``sh -s`` on ``node``'s server; raises on error."""

    def run(cmd: str, **_kwargs: Any) -> str:
        proc = node.rpopen(["sh", "-s"], tt=False, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = proc.communicate((cmd + "\n").encode(), timeout=300)
        text = out.decode(errors="replace")
        if proc.returncode != 0:
            raise preflight.LabError(f"ovs-vsctl on {node.server} failed: {text.strip()[:400]}")
        return text

    return run


class ServerFiles:
    """``AgentFiles`` for a cluster: a host on another server runs its programs against that
    server's file system, so the replay's specs go there and its reports come back here,
    at the same paths, over SSH (base64 through ``sh -s``: one command per server and call).

    A folder this makes on a server is removed with the lab (``remove``); one that already
    existed there (a server sharing this machine's files) is left to its owner.
    """

    def __init__(self, lab: ClusterLab) -> None:
        self.lab = lab
        self.made: dict[str, list[str]] = defaultdict(list)  # server -> folders made there

    def _by_server(self, files: dict[str, list[str]]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for host, paths in files.items():
            server = self.lab.server_of(host)
            if not self.lab._local(server):
                out[server] += [p for p in paths if p not in out[server]]
        return out

    def _run(self, server: str, script: str, what: str, poll: bool = False) -> str:
        """``script`` run by ``sh`` on ``server``; a poll (``poll``) that timed out is
        ``NotAnswered``, to be asked again, anything else that failed a ``LabError``."""
        got = self.lab.run_on(server, ["sh", "-s"], stdin=script)
        if got.returncode != 0:
            why = (got.stderr or got.stdout).strip()[:300]
            if poll and got.returncode == TIMED_OUT:
                raise NotAnswered(f"{server}: {what}: {why}")
            raise preflight.LabError(f"{server}: {what}: {why}")
        return got.stdout

    def makedirs(self, hosts: Iterable[str], path: str) -> None:
        for server in self._by_server({h: [path] for h in hosts}):
            # the outermost folder that mkdir -p makes is the one to remove later
            script = (f"d={shlex.quote(path)}; top=\n"
                      'while [ ! -d "$d" ]; do top=$d; d=$(dirname "$d"); done\n'
                      f'mkdir -p {shlex.quote(path)} && echo "made:$top"\n')
            top = self._run(server, script, f"making {path}").strip().removeprefix("made:")
            if top and top not in self.made[server]:
                self.made[server].append(top)

    def push(self, files: dict[str, list[str]]) -> None:
        for server, paths in self._by_server(files).items():
            script = []
            for path in paths:
                with open(path, "rb") as f:
                    data = base64.encodebytes(f.read()).decode()
                script.append(f"base64 -d > {shlex.quote(path)} <<'ASTRAL_EOF'\n{data}ASTRAL_EOF\n")
            self._run(server, "set -e\n" + "".join(script), f"copying {len(paths)} file(s)")

    def missing(self, files: dict[str, list[str]]) -> list[str]:
        remote = self._by_server(files)
        here = {h: ps for h, ps in files.items() if self.lab._local(self.lab.server_of(h))}
        gone = LocalFiles().missing(here)
        for server, paths in remote.items():
            out = self._run(server, "".join(f"test -e {shlex.quote(p)} || echo {shlex.quote(p)}\n"
                                            for p in paths), "looking for files", poll=True)
            gone += out.split()
        return gone

    def pull(self, files: dict[str, list[str]]) -> None:
        for server, paths in self._by_server(files).items():
            out = self._run(server, "".join(
                f"test -e {q} && {{ echo {q}; base64 -w0 {q}; echo; }}\n"
                for q in map(shlex.quote, paths)) + "true\n", f"reading {len(paths)} file(s)")
            lines = out.splitlines()
            for path, data in zip(lines[::2], lines[1::2], strict=False):
                with open(path, "wb") as f:
                    f.write(base64.b64decode(data))

    def remove(self) -> None:
        """The folders this made on other servers, with what the programs wrote in them."""
        for server, paths in self.made.items():
            with contextlib.suppress(Exception):
                self.lab.run_on(server, ["rm", "-rf", "--", *paths])
        self.made.clear()


class ClusterLab(Lab):
    """A ``Lab`` whose nodes run on several servers, built by Mininet Cluster Edition.

    ``servers[0]`` must be this machine; it runs the controller, and every node
    placed there runs locally (Mininet's ``localhost``). The other servers are
    reached over SSH (``user``). ``runner`` and ``clock_probe`` are injectable
    (tests; a stand-in for SSH); by default they use ``ssh``.
    """

    def __init__(self, plan: WiringPlan, servers: Sequence[str] | str, *, tunnel: str = "gre",
                 user: str | None = None, runner: Runner | None = None,
                 clock_probe: ClockProbe | None = None, link_cls: Any = None,
                 ssh: Sequence[str] | None = None, **kwargs: Any) -> None:
        self.servers = parse_servers(servers)
        if tunnel not in TUNNELS:
            raise ValueError(f"tunnel must be one of {', '.join(TUNNELS)} (got {tunnel!r})")
        placement = place(plan, self.servers)
        super().__init__(with_servers(plan, placement), **kwargs)
        self.placement = placement
        self.tunnel = tunnel
        self.user = user or default_user()
        self.head = self.servers[0]
        self.ssh = list(ssh) if ssh else ssh_from_env()  # the ssh program and options
        self.runner: Runner = runner or SSHRunner(self.user, local=[self.head], ssh=self.ssh)
        self.files = ServerFiles(self)  # a replay's files on the servers of its hosts
        self.clock_probe = clock_probe if clock_probe is not None else (
            ssh_clock_probe(self.user, ssh=self.ssh) if len(self.servers) > 1 else None)
        self.link_cls = link_cls  # default: Mininet's RemoteGRELink / RemoteSSHLink
        self.mtu = CLUSTER_MTU
        self.pmtu = min(self.pmtu, largest_roce_pmtu(CLUSTER_MTU))  # what tunnels carry
        self.check: ClusterPrecheck | None = None
        self.shared: SharedConnections | None = None  # SSH connections of start..stop
        self.one_way_latency = True
        self.server_ip: dict[str, str] = {}
        self.datapaths: dict[str, str] = {}
        self.summary = placement_summary(self.plan, placement)

    # Mininet's name for a server: the head is "localhost" (no SSH), the rest by name.
    def _mn_server(self, server: str) -> str:
        return "localhost" if server == self.head else server

    def _local(self, server: str) -> bool:
        return server == self.head

    # --- bring-up ----------------------------------------------------------------------
    def start(self) -> ClusterLab:
        """Prechecks on every server, then the Lab's bring-up with Cluster Edition steps.

        ``Lab.start`` takes the machine's fabric lock, runs the local preflight and
        calls the step methods below, which this class overrides; on any failure it
        calls ``stop`` (ours), so nothing is left on any server.
        """
        # a scratch folder's name: `astral-lab clean` removes it if this process is killed
        self.shared = SharedConnections(self.user, cleanup.scratch_prefix(self.run_id))
        if isinstance(self.runner, SSHRunner):
            self.runner.shared = self.shared.options
        try:
            self._precheck()
        except BaseException:
            self._close_shared()
            raise
        counts = ", ".join(f"{s}: {r['gpus']} GPUs {r['switches']} switches"
                           for s, r in self.summary["servers"].items())
        self.log(f"cluster placement: {counts}; {self.summary['crossing']} of "
                 f"{self.summary['links']} links cross servers ({self.tunnel} tunnels, "
                 f"MTU {self.mtu} on every interface)")
        super().start()
        return self

    # Lab.start's steps, the Cluster Edition way: Mininet builds nodes and links together,
    # and interfaces are configured once the switches hold their ports.
    def _start_hosts(self) -> None:
        self._step("build", self._build)

    def _create_links(self) -> None:
        """Nothing: ``_build`` made the links with the nodes (Mininet's order)."""

    def _configure_interfaces(self) -> None:
        """Nothing yet: OVS resets a port's qdisc when it adds it, so shaping comes after."""

    def _create_bridges(self) -> None:
        self._step("start-switches", self._start_switches)
        self._step("configure-interfaces", self._configure)

    def assemble_mininet(self) -> None:
        """Nothing: ``self.net`` is the ``MininetCluster`` that built the fabric."""

    def _precheck(self) -> None:
        """Who is who, then the per-server checks; raise with every problem, build nothing."""
        if not is_this_machine(self.head):
            raise preflight.LabError(
                f"the first --cluster server ({self.head}) must be this machine: it runs the "
                "controller and drives the others (run astral-lab there)")
        problems = []
        for s in self.servers[1:]:
            try:
                self.server_ip[s] = resolve_ipv4(s)
            except ValueError as exc:
                problems.append(f"{s}: {exc}")
                continue
            if is_this_machine(s):
                problems.append(f"{s}: is this machine again; only the first server may be")
        if problems:
            raise preflight.LabError("cannot bring up the cluster:\n  - "
                                     + "\n  - ".join(problems))
        self.check = precheck_servers(
            self.servers, self.runner, user=self.user, local=[self.head],
            datapath=self.datapath_request, tunnel=self.tunnel, clock_probe=self.clock_probe)
        self.check.raise_if_problems()
        for w in self.check.warnings:
            self.log(f"note: {w}")
        self.one_way_latency = self.check.one_way_latency
        if not self.one_way_latency:
            self.plan.notes.append("clocks of the cluster's servers are not in sync: latency "
                                   "metrics are round-trip only")
        self.datapaths.update(self.check.datapaths)
        if len(self.servers) > 1:
            self.of_host = source_address(self.server_ip[self.servers[1]])
            self.server_ip[self.head] = self.of_host
        else:
            self.server_ip[self.head] = "127.0.0.1"
        empty = [s for s in self.servers if s not in self.summary["servers"]]
        if empty:
            self.log(f"note: nothing placed on {', '.join(empty)}: a rail block is never split, "
                     f"and this fabric has fewer blocks than servers")

    def _build(self) -> None:
        """Hosts, switches and links, each on its server, by Mininet Cluster Edition.

        This is Mininet's own per-node, per-link path (a shell per node; on other
        servers over SSH), not the one-machine Lab's batches: remote nodes only
        exist as shells Mininet drives, which is the point of using its engine.
        """
        self.datapaths[self.head] = self.datapath  # Lab.start's preflight chose it
        link_cls = self.link_cls or {"gre": RemoteGRELink, "vxlan": vxlan_link_class(),
                                     "ssh": RemoteSSHLink}[self.tunnel]
        shared = self.shared.options if self.shared else []
        per_run: dict[str, Any] = {"shared_ssh": shared}
        if self.ssh:  # Mininet's ssh command is a class attribute (it drops "-tt" for popen)
            per_run["sshbase"] = [*self.ssh, "-tt"]
        host_cls = type("RemoteHost", (lab_host_class(),), per_run)
        switch_cls = type("RemoteOVSSwitch", (lab_switch_class(),), per_run)
        mn_ips = {self._mn_server(s): ip for s, ip in self.server_ip.items()}
        self.net = MininetCluster(
            topo=None, build=False, servers=list(mn_ips), serverIP=mn_ips, user=self.user,
            precheck=False, link=link_cls, host=host_cls, switch=switch_cls,
            controller=None, autoSetMacs=False, listenPort=None, waitConnected=False)
        net = self.net
        if self.use_controller:
            # Mininet checks a remote controller with telnet (not installed: a false "Unable to
            # contact" warning); ours already answers /health, so skip that check.
            quiet = type("RemoteController", (RemoteController,), {"isListening": _listening})
            net.addController("c0", controller=quiet, ip=self.of_host, port=self.of_port)
        for node in self.plan.nodes:
            srv = self._mn_server(node.server or self.head)
            where = {"server": srv, "serverIP": mn_ips[srv], "user": self.user}
            if node.kind == "host":
                self.hosts[node.name] = net.addHost(node.name, cls=host_cls, ip=f"{node.ip}/8",
                                                    mac=node.mac, **where)
            else:
                net.addSwitch(node.name, cls=switch_cls, dpid=node.dpid,
                              datapath=self.datapaths[node.server or self.head],
                              protocols=OF_PROTOCOLS, failMode="secure", reconnectms=1000,
                              inband=False, **where)
        self._record_local()
        for link in self.plan.links:
            macs = {"addr1": self.plan.node(link.a).mac} if link.a in self.hosts else {}
            net.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port, **macs)
        net.build()  # Mininet's configHosts: IP, MAC, lo up in every host

    def _record_local(self) -> None:
        """What lives on this machine goes in the run record (``astral-lab clean``)."""
        local_nodes = [n for n in self.net.hosts + self.net.switches + self.net.controllers
                       if not getattr(n, "isRemote", False)]
        self._record["pids"] += [n.shell.pid for n in local_nodes if n.shell]
        self._record["bridges"] = [s.name for s in self.plan.switches
                                   if self.placement[s.name] == self.head]
        kind = {n.name: n.kind for n in self.plan.nodes}
        links, host_links = [], []  # root-namespace ends here: deleted / die with a host
        for ln in self.plan.links:
            for node, intf in ((ln.a, ln.a_intf), (ln.b, ln.b_intf)):
                if kind[node] != "host" and self.placement[node] == self.head:
                    (host_links if kind[ln.a] == "host" else links).append(intf)
        self._record["links"], self._record["host_links"] = links, host_links
        self._save_record()

    def _root_ends_by_server(self) -> dict[str, list[tuple[str, float]]]:
        """``server -> [(interface, emulated Mb/s)]`` of link ends in servers' root namespaces."""
        out: dict[str, list[tuple[str, float]]] = defaultdict(list)
        kind = {n.name: n.kind for n in self.plan.nodes}
        for ln in self.plan.links:
            for node, intf in ((ln.a, ln.a_intf), (ln.b, ln.b_intf)):
                if kind[node] != "host":
                    out[self.placement[node]].append((intf, ln.mbps))
        return out

    def _start_switches(self) -> None:
        """``net.start()``: one ``ovs-vsctl`` per server (RemoteOVSSwitch.batchStartup).

        Ports get deep socket buffers as in the Lab (``_create_bridges``): the
        default receive buffer is raised on every server while ports are added.
        """
        others = [s for s in self.servers[1:] if s in self.summary["servers"]]
        old = {}
        for s in others:
            got = self.run_on(s, ["sysctl", "-n", "net.core.rmem_default"])
            old[s] = got.stdout.strip()
            if old[s].isdigit() and int(old[s]) < OVS_PORT_RCVBUF:
                self.run_on(s, ["sysctl", "-qw", f"net.core.rmem_default={OVS_PORT_RCVBUF}"])
        try:
            with socket_buffers(OVS_PORT_RCVBUF):
                self.net.start()
        finally:
            for s, value in old.items():
                if value.isdigit() and int(value) < OVS_PORT_RCVBUF:
                    self.run_on(s, ["sysctl", "-qw", f"net.core.rmem_default={value}"])

    def _deepen_ovs_tx_buffer(self) -> None:
        """The Lab's deep transmit buffer (``testbed.shell.ovsbuf``) for every userspace
        ``ovs-vswitchd``, on every server: without it a remote switch drops a lane's queue
        past ~150 packets (a 256 KiB flow into a lane half its NIC's rate lost 53 packets in
        the fake cluster test). A ring of pings through every host first gives every
        server's daemon its socket (the Lab's step pings only when this machine's has none);
        the other servers run the same code over SSH."""
        hosts = self.plan.hosts
        for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True):
            self.hosts[a.name].sendCmd(f"ping -c1 -W1 {b.ip}")
        for a in hosts:
            self.hosts[a.name].waitOutput()
        super()._deepen_ovs_tx_buffer()
        code = ("from testbed.shell import ovsbuf; r = ovsbuf.raise_tx_buffer(); "
                "print(r if isinstance(r, str) else 'astral-ok')")
        for server in self.servers[1:]:
            if server not in self.summary["servers"] or self.datapaths[server] != Datapath.USER:
                continue
            got = self.run_on(server, [sys.executable, "-c", code])
            if got.returncode != 0 or "astral-ok" not in got.stdout:
                self.log(f"note: switch port queues on {server} stay shallow (~150 packets), "
                         f"so bursts may be dropped: {(got.stdout or got.stderr).strip()[:200]}")

    def _configure(self) -> None:
        """MTU, offloads, shaping, the noop QoS and run tags: one script per server, hosts
        in parallel. The same HTB (and deep queues) as the one-machine Lab."""
        n_hosts = len(self.plan.hosts)
        per_server_hosts = Counter(self.placement[h.name] for h in self.plan.hosts)
        for server, ends in self._root_ends_by_server().items():
            script = self._server_script(server, ends, per_server_hosts[server], n_hosts)
            res = self.run_on(server, ["sh", "-s"], stdin=script)
            if res.returncode != 0 or "astral-ok" not in res.stdout:
                raise preflight.LabError(f"configuring {server} failed: "
                                         f"{(res.stderr or res.stdout).strip()[:400]}")
        nic_mbps = self.plan.host_link_mbps()
        for node in self.plan.hosts:
            intf = f"{node.name}-eth0"
            cmds = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                    "net.ipv6.conf.default.disable_ipv6=1",
                    f"ip link set dev {intf} mtu {self.mtu}"]
            if self.datapaths[node.server or self.head] == Datapath.USER:
                cmds.append(f"ethtool -K {intf} rx off tx off >/dev/null")
            if self.shape:
                cmds += htb_commands(intf, nic_mbps[node.name], prefix="tc ",
                                     lossless=self.lossless)
            cmds.append("echo astral-ok")
            self.hosts[node.name].sendCmd(" && ".join(cmds))
        self._await_hosts(lambda node: f"{node.name} ({node.server})")

    def _server_script(self, server: str, ends: list[tuple[str, float]], hosts_here: int,
                       n_hosts: int) -> str:
        """The shell script that configures one server's root-namespace link ends.

        Order matters: OVS replaced each port's qdisc when it added the port, so first
        every port gets the run's ``linux-noop`` QoS row (OVS then leaves qdiscs
        alone, as in the Lab), then HTB goes on.
        """
        lines = ["set -e"]
        if not self._local(server):  # this machine's limits are the Lab's business
            need = hosts_here * max(n_hosts - 1, 0) + 1024
            gc = "/proc/sys/net/ipv4/neigh/default/gc_thresh"
            lines.append(f"if [ -w {gc}3 ] && [ $(cat {gc}3) -lt {need} ]; then "
                         f"echo {need} > {gc}2; echo {2 * need} > {gc}3; fi")
        lines.append("ip -batch - <<'EOF'")
        lines += [f"link set dev {i} mtu {self.mtu}" for i, _ in ends]
        lines.append("EOF")
        if self.datapaths[server] == Datapath.USER:
            # "|| true": a gretap's offloads may be fixed; veths (what stalls TCP) accept it
            lines += [f"ethtool -K {i} rx off tx off >/dev/null 2>&1 || true" for i, _ in ends]
        tag = f"external_ids:{cleanup.BRIDGE_TAG}={self.run_id}"
        vsctl = ["ovs-vsctl", "--timeout=120", "--", "--id=@noop", "create", "QoS",
                 "type=linux-noop", tag]
        for sw in self.plan.switches:
            if self.placement[sw.name] == server:
                vsctl += ["--", "set", "Bridge", sw.name, tag]
        for i, _ in ends:
            vsctl += ["--", "set", "Port", i, "qos=@noop"]
        lines.append(shlex.join(vsctl) + " >/dev/null")
        if self.shape:
            lines.append("tc -batch - <<'EOF'")
            lines += [c for i, mbps in ends for c in htb_commands(i, mbps, lossless=self.lossless)]
            lines.append("EOF")
        if self.static_arp:
            lines += self._neighbour_lines(server)
        lines.append("echo astral-ok")
        return "\n".join(lines) + "\n"

    def _neighbour_lines(self, server: str) -> list[str]:
        """Permanent neighbour entries in every host of ``server`` (the Lab's ``static_arp``:
        see ``Lab._neighbour_file``), entered into each host's namespace with ``mnexec -a``
        because the Lab's per-host file exists on this machine only."""
        lines = []
        for node in self.plan.hosts:
            host = self.hosts.get(node.name)
            if host is None or self.placement[node.name] != server:
                continue
            lines.append(f"mnexec -a {host.pid} ip -batch - <<'EOF'")
            lines += [f"neigh replace {o.ip} lladdr {o.mac} dev {node.name}-eth0 nud permanent"
                      for o in self.plan.hosts if o.name != node.name and o.ip and o.mac]
            lines.append("EOF")
        return lines

    def server_of(self, node: str) -> str:
        """The server a node (host or switch) runs on, as named in ``--cluster``."""
        return self.placement[node]

    def run_on(self, server: str, argv: list[str], stdin: str | None = None) -> CommandResult:
        """A command as root in a server's root namespace (``sudo -n`` when SSH logs in as
        someone else). For code that reads switch ports (``/sys/class/net``, ``tc``,
        ``ovs-ofctl``): on this machine it only sees this server's part of the fabric."""
        if not self._local(server) and self.user != "root":
            argv = ["sudo", "-n", *argv]
        return self.runner(server, argv, stdin)

    # --- run-time changes --------------------------------------------------------------
    def _set_intf_state(self, node: str, intf: str, state: str) -> None:
        """On the node's own server: a host's namespace, or a switch's root namespace."""
        target = self.hosts.get(node) or (self.net.nameToNode.get(node) if self.net else None)
        if target is None:
            raise preflight.LabError(f"{node} is not running")
        out = target.cmd(f"ip link set dev {intf} {state}")
        if out.strip():
            raise preflight.LabError(f"ip link set {intf} {state} on {node}: {out.strip()}")

    # --- teardown ----------------------------------------------------------------------
    def teardown_fabric(self) -> None:
        """Remove everything on every server (``Lab.stop`` then drops the scratch folder
        and the lock). Never raises for a half-built lab.

        Mininet's ``net.stop()`` removes links, tunnels, bridges and shells on every
        server; then each server gets one sweep (bridges, this run's QoS rows, root
        namespace link ends) for whatever a failure half-way left behind.
        """
        self.kill_controller()  # its state file goes with the workdir below
        self.files.remove()
        if self.net is not None:
            with contextlib.suppress(Exception):
                self.net.stop()
            # Mininet's RemoteController.stop leaves the controller node's shell running
            for node in self.net.controllers + self.net.switches + self.net.hosts:
                with contextlib.suppress(Exception):
                    node.terminate()
        self.net = None
        self.hosts.clear()
        if self._record:
            ends = self._root_ends_by_server()
            for server in self.servers:
                bridges = [s.name for s in self.plan.switches if self.placement[s.name] == server]
                if not bridges and server not in ends:
                    continue
                with contextlib.suppress(Exception):
                    self.run_on(server, ["sh", "-s"],
                                   stdin=self._sweep_script(bridges, [i for i, _ in ends[server]]))
            cleanup.wait_gone(self._record.get("host_links", []), timeout=10)
            cleanup.drop_record(self.run_id)
            self._record = {}
        self._close_shared()

    def _close_shared(self) -> None:
        """End the shared SSH connections: by name (the runner's) and address (Mininet's)."""
        if self.shared is None:
            return
        others = self.servers[1:]
        self.shared.close(dict.fromkeys([*others, *(self.server_ip[s] for s in others
                                                    if s in self.server_ip)]), self.ssh)
        self.shared = None
        if isinstance(self.runner, SSHRunner):
            self.runner.shared = []

    def _sweep_script(self, bridges: list[str], intfs: list[str]) -> str:
        delbr = " ".join(f"-- --if-exists del-br {b}" for b in bridges)
        find = (f"ovs-vsctl --timeout=30 --bare --columns=_uuid find QoS "
                f"external_ids:{cleanup.BRIDGE_TAG}={self.run_id}")
        lines = [f"ovs-vsctl --timeout=60 {delbr}" if bridges else "true",
                 f"for q in $({find}); do ovs-vsctl --timeout=30 --if-exists destroy QoS $q; "
                 "done"]
        lines += [f"[ -e /sys/class/net/{i} ] && ip link del {i} 2>/dev/null" for i in intfs]
        lines.append("true")
        return "\n".join(lines) + "\n"


__all__ = [
    "UNDERLAY_MTU", "GRETAP_OVERHEAD", "VXLAN_OVERHEAD", "CLUSTER_MTU", "TUNNELS", "SSH_CONFIG_ENV",
    "ssh_from_env", "make_lab", "ServerFiles", "lab_host_class", "lab_switch_class",
    "vxlan_link_class", "ClusterLab",
]
