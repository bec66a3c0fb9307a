"""Bring a wiring plan up as a real Mininet fabric under the lab's controller, and tear it down.

    from testbed.topologies import build
    from testbed.shell.lab import Lab

    with Lab(build("astral3")) as lab:          # preflight, build, converge
        print(lab.reachability())               # all-pairs, real ICMP through OVS
        lab.host("s0g0").cmd("ping -c1 10.1.3.2")

Why not ``Mininet(topo).start()``: plain Mininet configures every interface with
its own shell commands (ifconfig, ethtool, several tc calls, one OVS call per
port), about 4,000 round trips for a 64-GPU fabric, and tears down the same way.
The Lab keeps Mininet's hosts (so ``host.cmd``, ``popen`` and the Mininet CLI
work as usual) but does the bulk work in batches: all veths in one ``ip -batch``,
checksum offloads off by ioctl, every host configured in parallel, all bridges
and ports in one ``ovs-vsctl`` transaction; teardown kills the host shells (their
namespaces and veths vanish with them) and deletes all bridges in one call.

Order of bring-up: preflight -> controller process (listening) -> host shells ->
veths -> host and switch-port configuration -> OVS bridges -> wait until the
controller reports every switch programmed. Any failure or Ctrl-C on the way
tears down what was built; a run record lets ``astral-lab clean`` finish the job
if the process itself is killed.

Where things live (each name is imported from its own module): this module is the bring-up,
run-time changes and teardown. The ``tc`` lines of the shaping (``htb_commands``,
``queue_packets``, ``root_ends``) are in ``testbed.shaping`` and the all-pairs ping's
result and fping parsing (``Reachability``) in ``testbed.reachability``, both pure; the
direct kernel calls (``free_port``, ``disable_offloads``, ``in_netns``, the machine's
``fabric_lock``) are in ``testbed.shell.machine``; the host shells, Mininet's with a start
that cannot hang, in ``testbed.shell.hostshell``. What runs beside the fabric on request,
the live view (``dashboard=True``) and per-port captures (``capture=[...]``), is started and
stopped by ``testbed.shell.sidecars``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mininet.link import Intf
from mininet.link import Link as MininetLink
from mininet.net import Mininet

from controllers import policies
from controllers.fabric import DEFAULT_MODE, PEER_SILENCE_S, POLL_INTERVAL_S
from controllers.flowtable import DEFAULT_SELECT_METHOD
from controllers.shell.client import ControllerClient
from testbed import daemons
from testbed.capture import resolve as capture_ports
from testbed.datapath import Datapath
from testbed.reachability import Reachability, fping_unreached
from testbed.shaping import htb_commands, root_ends
from testbed.shell import cleanup, ovsbuf, preflight, procs, sidecars, signals
from testbed.shell.hostshell import LabHost
from testbed.shell.machine import (
    disable_offloads,
    ensure_neighbour_capacity,
    fabric_lock,
    free_port,
    in_netns,
    socket_buffers,
)
from testbed.shell.mntopo import OF_PROTOCOLS, SwitchPortIntf
from testbed.shell.procs import kill_pids
from testbed.shell.switch_daemons import start_all, stop_daemon, vswitchd_pids
from traffic.roce import LAB_PMTU, mtu_for
from traffic.shell.running import AgentFiles, LocalFiles
from vocab.plan import Link, WiringPlan, intf_node

OVS_PORT_RCVBUF = 4 << 20  # bytes of receive buffer per switch port (see _create_bridges)


class Lab:
    """A running fabric: Mininet hosts, OVS bridges, the controller process. A context manager."""

    def __init__(self, plan: WiringPlan, *, datapath: str = "auto", controller: bool = True,
                 of_port: int | None = None, rest_port: int | None = None,
                 shape: bool = True, lossless: bool = True, converge_timeout: float = 300.0,
                 select_method: str = DEFAULT_SELECT_METHOD, lb: str = DEFAULT_MODE,
                 poll_interval: float = POLL_INTERVAL_S,
                 static_arp: bool = True, pmtu: int = LAB_PMTU,
                 dashboard: bool = False, dashboard_port: int | None = None,
                 dashboard_progress: str | None = None, capture: Sequence[str] = (),
                 capture_dir: str | None = None, switch_daemons: int | str = 1,
                 log: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        # switch daemons (testbed.shell.switch_daemons): asked for, and those running with each
        # switch's own; daemon 0 is the machine's
        self.switch_daemons_request = switch_daemons
        self.daemons: list[daemons.SwitchDaemon] = [daemons.ROOT]
        self.daemon_of: dict[str, daemons.SwitchDaemon] = {}
        # the live view (testbed.shell.sidecars): its port, a scenario's progress.json
        self.dashboard = dashboard
        self.dashboard_port = dashboard_port
        self.dashboard_progress = dashboard_progress
        self.dashboard_url: str | None = None
        # switch ports to capture (testbed.capture), checked now: before anything is built
        self.capture = capture_ports(plan, capture)
        if self.capture and not capture_dir:
            raise ValueError("capture needs capture_dir: the folder the pcaps go to")
        self.capture_dir = capture_dir or ""
        self.sidecar_procs: dict[str, list[subprocess.Popen[bytes]]] = {"dashboard": [],
                                                                      "capture": []}
        self.pmtu = pmtu  # the RoCE path MTU replays use by default
        self.mtu = mtu_for(pmtu)  # every emulated interface's MTU (None: the kernel's 1,500)
        self.datapath_request = datapath
        self.use_controller = controller
        self.of_port = of_port
        self.of_host = "127.0.0.1"  # OpenFlow listen address (testbed.shell.cluster widens it)
        self.rest_port = rest_port
        self.shape = shape
        self.lossless = lossless  # deep port queues instead of drop-tail (see htb_commands)
        self.static_arp = static_arp  # permanent neighbour entries (see _neighbour_file)
        self.select_method = select_method
        # "qp-scaling:qps=8": the controller runs the mode, the hosts' replays its options
        self.lb_policy = policies.parse(lb, controller=True)
        self.lb = self.lb_policy.name
        self.poll_interval = poll_interval
        self.converge_timeout = converge_timeout
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.run_id = uuid.uuid4().hex[:10]
        self.workdir = ""
        self.files: AgentFiles = LocalFiles()  # the hosts share this machine's files
        self.datapath = Datapath.USER
        self.preflight: preflight.Preflight | None = None
        self.hosts: dict[str, Any] = {}  # name -> mininet Host
        self.net: Any = None
        self.controller_proc: subprocess.Popen[bytes] | None = None
        self.timings: dict[str, float] = {}
        self.tx_buffer: dict[str, int] | str | None = None  # what _deepen_ovs_tx_buffer did
        self._record: dict[str, Any] = {}
        self._lock: Any = None  # the machine's fabric lock while this Lab is up

    # --- context manager -------------------------------------------------------------
    def __enter__(self) -> Lab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- bring-up --------------------------------------------------------------------
    def start(self) -> Lab:
        """Preflight, build, converge. On any failure (or Ctrl-C) undo everything, then raise."""
        t0 = time.monotonic()
        deadline = time.monotonic() + float(os.environ.get("ASTRAL_LAB_WAIT", "0") or 0)
        while True:
            self._lock = fabric_lock(self.log)
            try:
                pf = preflight.check(self.plan, self.datapath_request)
                # names held by a fabric that does not take the lock (plain `mn`, an older
                # astral-lab): with ASTRAL_LAB_WAIT, wait for those too
                if (pf.problems and time.monotonic() < deadline
                        and all(p.startswith("names already in use") for p in pf.problems)):
                    self._release_lock()
                    time.sleep(2)
                    continue
                pf.raise_if_problems()
                break
            except BaseException:
                self._release_lock()
                raise
        # bring-up time starts once the machine is ours: waiting for another fabric is not it
        self.timings["lock_wait"] = time.monotonic() - t0
        t0 = time.monotonic()
        self.preflight = pf
        self.datapath = pf.datapath
        for w in pf.warnings:
            self.log(f"note: {w}")
        ensure_neighbour_capacity(len(self.plan.hosts), self.log)
        try:
            self._begin_record()
            self._step("daemons", self._start_daemons)
            self._step("controller", self._start_controller)
            self._step("hosts", self._start_hosts)
            self._step("links", self._create_links)
            self._step("configure", self._configure_interfaces)
            self._step("switches", self._create_bridges)
            self._step("mininet", self.assemble_mininet)
            if self.capture:
                self._step("capture", self._start_captures)
            if self.use_controller:
                self._step("converge", self.wait_converged)
                if self.datapath == Datapath.USER and self.lossless and self.shape:
                    self._step("tx-buffer", self._deepen_ovs_tx_buffer)
            if self.dashboard:
                self._step("dashboard", self._start_dashboard)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        return self

    def _release_lock(self) -> None:
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.close()  # closing the file drops the flock

    def _step(self, name: str, fn: Callable[[], object]) -> None:
        t = time.monotonic()
        fn()
        self.timings[name] = time.monotonic() - t

    def _deepen_ovs_tx_buffer(self) -> None:
        """Make the userspace switch's queues as deep as tc says (see ``testbed.shell.ovsbuf``).

        ovs-vswitchd opens its transmit socket at its first forwarded packet, so when a
        daemon has none yet, each host pings the next one (through every daemon) first.
        """
        pids = vswitchd_pids(self.daemons)
        hosts = self.plan.hosts
        if any(p and not ovsbuf.tx_socket_fds(p) for p in pids) and len(hosts) > 1:
            for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True):
                self.hosts[a.name].sendCmd(f"ping -c1 -W1 {b.ip}")
            for a in hosts:
                self.hosts[a.name].waitOutput()
        for pid in pids:
            result = ovsbuf.raise_tx_buffer(pid=pid) if pid else "ovs-vswitchd is not running"
            if isinstance(result, str):
                self.log(f"note: switch port queues stay shallow (~150 packets per daemon), "
                         f"so bursts may be dropped: {result}")
                break
        self.tx_buffer = result

    def _begin_record(self) -> None:
        self.workdir = cleanup.make_scratch(self.run_id)
        self._record = {"run_id": self.run_id, "owner_pid": os.getpid(), "pids": [],
                        "bridges": [], "links": [], "workdir": self.workdir,
                        "topology": self.plan.topology, "started": time.time()}
        cleanup.write_record(self.run_id, self._record)

    def _save_record(self) -> None:
        cleanup.write_record(self.run_id, self._record)

    def _note_pid(self, pid: int) -> None:
        self._record["pids"].append(pid)
        self._save_record()

    def _start_captures(self) -> None:
        self.sidecar_procs["capture"] += sidecars.start_captures(
            self.capture, self.capture_dir, self.workdir, self._note_pid,
            where=lambda intf: self.switch_daemon(intf_node(intf)).ns)
        self.log(f"capturing {len(self.capture)} port(s) into {self.capture_dir}/")

    def _start_dashboard(self) -> None:
        proc, self.dashboard_url = sidecars.start_dashboard(
            self.plan, self.workdir, self.run_id, port=self.dashboard_port,
            interval=self.poll_interval, rest_port=self.rest_port,
            progress=self.dashboard_progress, on_pid=self._note_pid)
        self.sidecar_procs["dashboard"].append(proc)
        self.log(f"live view: {self.dashboard_url}")

    def _start_daemons(self) -> None:
        """With several switch daemons: start the extra ones, each switch to its daemon, and
        the controller where every daemon reaches it (``testbed.shell.switch_daemons``)."""
        n = daemons.resolve_count(self.switch_daemons_request, self.datapath,
                                  len(self.plan.switches))
        self._record["daemons"] = []

        def note(d: daemons.SwitchDaemon) -> None:
            self._record["daemons"].append(d.as_record())
            self._save_record()

        try:
            self.daemons, self.daemon_of = start_all(self.run_id, self.plan, n, note)
        except RuntimeError as exc:  # what failed, in one line (the record lets stop undo it)
            raise preflight.LabError(f"switch daemons: {exc}") from None
        if n > 1:
            self.of_host = daemons.CONTROLLER_IP
            self.log(f"{n} switch daemons: " + ", ".join(
                f"{sum(1 for d in self.daemon_of.values() if d is x)} switches on daemon "
                f"{x.index}" for x in self.daemons))

    def switch_daemon(self, node: str) -> daemons.SwitchDaemon:
        """The daemon forwarding switch ``node`` (where its ports and ``ovs-*`` calls go)."""
        return self.daemon_of.get(node, daemons.ROOT)

    def _ends_by_daemon(self) -> dict[daemons.SwitchDaemon, list[tuple[str, float]]]:
        """Every switch-side link end (``root_ends``), grouped by the daemon it lives with."""
        return daemons.group_ends(self._root_ends(), self.switch_daemon)

    def _start_controller(self) -> None:
        if not self.use_controller:
            return
        self.of_port = self.of_port or free_port()
        self.rest_port = self.rest_port or free_port()
        plan_path = os.path.join(self.workdir, "plan.json")
        if not os.path.exists(plan_path):
            self.plan.save(plan_path)
        # appended to, so a restarted controller's log follows the first one's
        # a stop that lands between the start and the record would leave the process
        # unknown to ``stop``: held until it is recorded, then delivered
        with signals.held(), open(os.path.join(self.workdir, "controller.log"), "ab") as logf:
            # appended to, so a restarted controller's log follows the first one's
            self.controller_proc = subprocess.Popen(
                [sys.executable, "-m", cleanup.CONTROLLER_MODULE, "--plan", plan_path,
                 "--of-host", self.of_host,
                 "--of-port", str(self.of_port), "--rest-port", str(self.rest_port),
                 "--select-method", self.select_method, "--lb", self.lb,
                 "--poll-interval", str(self.poll_interval),
                 "--state", os.path.join(self.workdir, "controller-state.json"),
                 "--run-id", self.run_id],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)  # Ctrl-C in the terminal goes to us, not to it
            self._note_pid(self.controller_proc.pid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.controller_proc.poll() is not None:
                raise preflight.LabError(f"controller exited at start:\n{self.controller_log()}")
            with contextlib.suppress(OSError):
                if self.health() is not None:
                    return
            time.sleep(0.05)
        raise preflight.LabError("controller did not start listening within 30 s")

    def _start_hosts(self) -> None:
        """One Mininet host shell per GPU NIC, started from a few threads at once.

        A shell start is mostly waiting for bash's first prompt, so threads overlap
        the waits (256 hosts: 2.3 s one by one). Each shell's PID is recorded as
        soon as it exists, so an interrupted start can still be cleaned up.
        """
        def start(name: str) -> Any:
            return LabHost(name, inNamespace=True)

        # held: a stop while shells start would leave the ones still starting unrecorded
        with signals.held(), ThreadPoolExecutor(max_workers=8) as pool:
            futures = {n.name: pool.submit(start, n.name) for n in self.plan.hosts}
            errors = []
            for name, fut in futures.items():
                try:
                    host = fut.result()
                except Exception as exc:  # keep going: every started shell must be recorded
                    errors.append(f"{name}: {exc}")
                    continue
                self.hosts[name] = host
                self._record["pids"].append(host.pid)
        self._save_record()
        if errors:
            raise preflight.LabError("host shells failed to start: " + "; ".join(errors[:3]))

    def _create_links(self) -> None:
        """Every veth in one ``ip -batch``; a host's end is born in the host's namespace.

        Creating an interface inside its namespace costs the same as creating it in
        the root namespace, whereas moving it afterwards costs a network-wide RCU
        wait per interface (6 s for 256 hosts). Offloads go off by ioctl, for host
        ends from inside the host's namespace.
        """
        lines = []
        mtu = f" mtu {self.mtu}" if self.mtu else ""
        def where(node: str) -> str:
            ns = self.switch_daemon(node).netns
            return f" netns {ns}" if ns else ""

        for link in self.plan.links:
            if link.a in self.hosts:
                mac = self.plan.node(link.a).mac
                lines.append(f"link add name {link.a_intf}{mtu} address {mac} "
                             f"netns {self.hosts[link.a].pid} type veth "
                             f"peer name {link.b_intf}{mtu}{where(link.b)}")
            else:
                lines.append(f"link add name {link.a_intf}{mtu}{where(link.a)} type veth "
                             f"peer name {link.b_intf}{mtu}{where(link.b)}")
        # Switch-to-switch veths must be deleted (by an end in the root namespace: one in a
        # switch daemon's goes with it); a host link dies with the host's namespace.
        in_root = {ln.a_intf: not where(ln.a) for ln in self.plan.links} | {
            ln.b_intf: not where(ln.b) for ln in self.plan.links}
        self._record["links"] = [
            next((i for i in (link.a_intf, link.b_intf) if in_root[i]), link.a_intf)
            for link in self.plan.links if link.a not in self.hosts]
        self._record["host_links"] = [link.b_intf for link in self.plan.links
                                      if link.a in self.hosts and in_root[link.b_intf]]
        self._save_record()
        procs.run(["ip", "-batch", "-"], stdin="\n".join(lines) + "\n", check=True)
        if self.datapath == Datapath.USER:
            for d, ends in self._ends_by_daemon().items():
                with (in_netns(d.pids()[-1]) if d.netns else contextlib.nullcontext()), \
                        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                    for name, _mbps in ends:
                        disable_offloads(name, sock)
            for node in self.plan.hosts:
                with in_netns(self.hosts[node.name].pid), \
                        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                    disable_offloads(f"{node.name}-eth0", sock)

    def _root_ends(self) -> list[tuple[str, float]]:
        return root_ends(self.plan)

    def _configure_interfaces(self) -> None:
        """Root ends: up and shaped, in two batches. Hosts: address, up, shaped, in parallel."""
        for d, ends in self._ends_by_daemon().items():
            procs.run(["ip", *d.ip(), "-batch", "-"], check=True,
                        stdin="".join(f"link set {n} up\n" for n, _mbps in ends))
            if self.shape:
                tc = [c for n, mbps in ends
                      for c in htb_commands(n, mbps, lossless=self.lossless)]
                procs.run(["tc", *d.ip(), "-batch", "-"], stdin="\n".join(tc) + "\n",
                            check=True)
        nic_mbps = self.plan.host_link_mbps()
        for node in self.plan.hosts:
            host = self.hosts[node.name]
            intf = f"{node.name}-eth0"
            cmds = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                    "net.ipv6.conf.default.disable_ipv6=1",
                    f"ip addr add {node.ip}/8 dev {intf}", f"ip link set {intf} up",
                    "ip link set lo up"]

            if self.shape:
                cmds += htb_commands(intf, nic_mbps[node.name], prefix="tc ",
                                     lossless=self.lossless)
            if self.static_arp:
                cmds.append(f"ip -batch {self._neighbour_file(node.name, intf)}")
            cmds.append("echo astral-ok")
            host.sendCmd(" && ".join(cmds))
        self._await_hosts()

    def _await_hosts(self, label: Callable[[Any], str] = lambda node: node.name) -> None:
        """Collect every host's reply to the ``... && echo astral-ok`` sent to it (hosts are
        configured in parallel); raise naming the ones whose commands failed."""
        bad = []
        for node in self.plan.hosts:
            out = self.hosts[node.name].waitOutput()
            if "astral-ok" not in out:
                bad.append(f"{label(node)}: {out.strip()[:200]}")
        if bad:
            raise preflight.LabError("host configuration failed:\n  " + "\n  ".join(bad[:5]))

    def _neighbour_file(self, host: str, intf: str) -> str:
        """Every other GPU's IP -> MAC as a permanent neighbour entry (``ip -batch`` file).

        Why: with deep lossless queues, a neighbour re-probe (ARP) waits behind seconds of
        bulk data; the kernel then marks the entry failed and holds the host's traffic
        (~3 s stalls seen under load). RDMA fabrics avoid the same trap with static or
        long-lived neighbour entries. The controller still routes ARP, for plain ``mn``.
        """
        path = os.path.join(self.workdir, f"neigh-{host}.batch")
        with open(path, "w") as f:
            for other in self.plan.hosts:
                if other.name != host and other.ip and other.mac:
                    f.write(f"neigh replace {other.ip} lladdr {other.mac} dev {intf} "
                            "nud permanent\n")
        return path

    def _create_bridges(self) -> None:
        """All bridges, ports and controller targets in one ``ovs-vsctl`` transaction.

        With the userspace datapath, ovs-vswitchd reads every port through its own packet
        socket, whose buffer is ``net.core.rmem_default`` when the port is added: a burst from
        many hosts at once (an All-to-All starting on every GPU together) overflows it, and
        the switch loses packets without counting them anywhere (an emulation artefact, not
        fabric behaviour). So the default is raised while the ports are created and put back
        right after; existing sockets keep their size.
        """
        with socket_buffers(OVS_PORT_RCVBUF):
            self._add_bridges()

    def _add_bridges(self) -> None:
        ports: dict[str, list[tuple[int, str]]] = {s.name: [] for s in self.plan.switches}
        for link in self.plan.links:
            for node, port, intf in ((link.a, link.a_port, link.a_intf),
                                     (link.b, link.b_port, link.b_intf)):
                if node in ports:
                    ports[node].append((port, intf))
        dp_type = "netdev" if self.datapath == Datapath.USER else "system"
        # OVS replaces a port's root qdisc with its own default when the port is added (and
        # at every reconfiguration), which silently removed our HTB shaping from every
        # switch port: measured, flows crossed "20 Mb/s" lanes at 35 Mb/s. A QoS of type
        # linux-noop tells OVS to leave the qdisc alone (Mininet instead re-applies tc after
        # adding ports: TCReapply). One row serves every port of the run.
        self._record["bridges"] = [s.name for s in self.plan.switches
                                   if self.switch_daemon(s.name).netns is None]
        self._save_record()
        for d in self.daemons:  # one transaction per daemon, each its own database
            self._add_bridges_of(d, dp_type, ports)

    def _add_bridges_of(self, d: daemons.SwitchDaemon, dp_type: str,
                        ports: dict[str, list[tuple[int, str]]]) -> None:
        cmd = ["ovs-vsctl", "--timeout=120", "--", "--id=@noop", "create", "QoS",
               "type=linux-noop", f"external_ids:{cleanup.BRIDGE_TAG}={self.run_id}"]
        for sw in self.plan.switches:
            if self.switch_daemon(sw.name) is not d:
                continue
            cmd += ["--", "add-br", sw.name,
                    "--", "set", "Bridge", sw.name, f"datapath_type={dp_type}",
                    "fail_mode=secure", f"protocols={OF_PROTOCOLS}",
                    f"other-config:datapath-id={sw.dpid}",
                    "other-config:disable-in-band=true",
                    f"external_ids:{cleanup.BRIDGE_TAG}={self.run_id}"]
            if self.use_controller:
                # Reconnect within a second after a controller restart (OVS backs off to 8 s);
                # a controller silent for seconds is kept (PEER_SILENCE_S).
                cid = f"@c{len(cmd)}"
                cmd += ["--", f"--id={cid}", "create", "Controller",
                        f'target="tcp:{self.of_host}:{self.of_port}"', "max_backoff=1000",
                        f"inactivity_probe={int(PEER_SILENCE_S * 1000)}",
                        "--", "set", "Bridge", sw.name, f"controller={cid}"]
            for port, intf in sorted(ports[sw.name]):
                cmd += ["--", "add-port", sw.name, intf, "qos=@noop",
                        "--", "set", "Interface", intf, f"ofport_request={port}"]
        procs.run(d.ovs(cmd), check=True, timeout=300)

    def assemble_mininet(self) -> None:
        """A ``Mininet`` object over what we built, so the Mininet CLI and helpers work.

        Public: a hook a subclass replaces (``ClusterLab``: its ``MininetCluster`` is the
        net), and the last step of ``start`` a test can make fail to see it clean up."""
        net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False)
        for node in self.plan.hosts:
            host = self.hosts[node.name]
            intf = Intf(f"{node.name}-eth0", node=host, port=0, moveIntfFn=lambda *a, **k: True)
            intf.ip, intf.prefixLen, intf.mac = node.ip, 8, node.mac
            net.hosts.append(host)
            net.nameToNode[node.name] = host
        for link in self.plan.links:
            if link.a not in self.hosts:
                continue
            mlink = MininetLink.__new__(MininetLink)
            mlink.intf1 = self.hosts[link.a].intfs[0]
            mlink.intf2 = SwitchPortIntf(link.b_intf, link.b, link.b_port,
                                         self.switch_daemon(link.b).netns)
            mlink.intf1.link = mlink
            net.links.append(mlink)
        net.built = True
        self.net = net

    # --- run-time changes ------------------------------------------------------------
    def links_between(self, a: str, b: str) -> list[Link]:
        """The plan's cables between two nodes, in either order (several for parallel lanes)."""
        found = [ln for ln in self.plan.links if {ln.a, ln.b} == {a, b}]
        if not found:
            raise ValueError(f"no link between {a!r} and {b!r} in the plan")
        return found

    def set_link(self, a: str, b: str, up: bool, lane: int = 0) -> Link:
        """Take one cable down or up at both ends, as Mininet's ``configLinkStatus`` does.

        ``lane`` picks one of several parallel cables (``links_between`` order).
        Both switches see their port lose its link, as with a real fibre cut.
        """
        links = self.links_between(a, b)
        if not 0 <= lane < len(links):
            raise ValueError(f"lane must be in [0, {len(links) - 1}] for {a}-{b}")
        link = links[lane]
        state = "up" if up else "down"
        for node, intf in ((link.a, link.a_intf), (link.b, link.b_intf)):
            self._set_intf_state(node, intf, state)
        return link

    def set_links(self, links: list[Link], up: bool) -> None:
        """Take several cables down (or up) at once, as a dead switch or power loss does.

        Switch-side ends go in one ``ip -batch`` (a whole spine in a few ms rather than one
        ``ip`` process per end); host-side ends, if any, one call per host.
        """
        state = "up" if up else "down"
        known = {id(ln) for ln in self.plan.links}
        switch_side: dict[daemons.SwitchDaemon, list[str]] = {}
        for link in links:
            if id(link) not in known:
                raise ValueError(f"link {link.name} is not one of this lab's plan links")
            for node, intf in ((link.a, link.a_intf), (link.b, link.b_intf)):
                if node in self.hosts:
                    self._set_intf_state(node, intf, state)
                else:
                    switch_side.setdefault(self.switch_daemon(node), []).append(
                        f"link set dev {intf} {state}\n")
        for d, lines in switch_side.items():
            procs.run(["ip", *d.ip(), "-batch", "-"], stdin="".join(lines), check=True)

    def _set_intf_state(self, node: str, intf: str, state: str) -> None:
        """``ip link set dev INTF up|down`` where the interface lives (a cluster overrides)."""
        if node in self.hosts:  # not host.cmd: not thread-safe (timed faults run in threads)
            procs.run(["mnexec", "-a", str(self.hosts[node].pid), "ip", "link", "set",
                         "dev", intf, state], check=True)
        else:
            procs.run(["ip", *self.switch_daemon(node).ip(), "link", "set", "dev", intf,
                         state], check=True)

    def kill_controller(self) -> None:
        """Kill the controller process (as a crash would); switches keep their flows."""
        if self.controller_proc is not None:
            kill_pids([self.controller_proc.pid], sig=signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.controller_proc.wait(timeout=5)
            self.controller_proc = None

    def restart_controller(self, wait: bool = True) -> None:
        """Start the controller again on the same ports and state file (after ``kill``)."""
        self.kill_controller()
        self._start_controller()
        if wait:
            self.wait_converged()

    def client(self) -> ControllerClient:
        """A REST client for this lab's controller (``controllers.shell.client``)."""
        if not self.rest_port:
            raise preflight.LabError("this lab runs no controller")
        return ControllerClient(port=self.rest_port)

    # --- controller state ------------------------------------------------------------
    def health(self) -> dict[str, Any] | None:
        """The controller's ``/health`` JSON, or None while it is not answering."""
        if not self.rest_port:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.rest_port}/health",
                                        timeout=2) as r:
                return json.load(r)
        except urllib.error.HTTPError as exc:
            return json.load(exc) if exc.code == 503 else None
        except (OSError, ValueError):
            return None

    def wait_converged(self, timeout: float | None = None) -> dict[str, Any]:
        """Until every switch applied what the controller pushed; raise with details if not."""
        timeout = self.converge_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            if self.controller_proc and self.controller_proc.poll() is not None:
                raise preflight.LabError(f"controller died:\n{self.controller_log()}")
            last = self.health()
            if last and last.get("errors"):
                raise preflight.LabError(f"switches rejected the controller's messages: "
                                         f"{last['errors'][:3]}")
            if last and last.get("converged"):
                return last
            time.sleep(0.05)
        raise preflight.LabError(f"fabric did not converge within {timeout:g} s: {last}")

    def controller_log(self, lines: int = 30) -> str:
        path = os.path.join(self.workdir, "controller.log")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no controller log)"

    # --- using the fabric ------------------------------------------------------------
    def host(self, name: str) -> Any:
        """The Mininet ``Host`` for a GPU NIC (``s0g3``): ``.cmd``, ``.popen``, ``.IP()``."""
        try:
            return self.hosts[name]
        except KeyError:
            raise KeyError(f"no host {name!r}; hosts look like s0g0 .. "
                           f"{self.plan.hosts[-1].name}") from None

    def reachability(self, timeout_ms: int = 1000, retries: int = 2,
                     max_inflight: int = 2048) -> Reachability:
        """Every host pings every other host once (``fping``, many hosts at a time).

        Hosts run in waves of at most ``max_inflight`` pings, each host sending one
        echo per millisecond. Every first packet towards a new destination is an
        upcall to ovs-vswitchd (datapath flows are per input port and destination),
        and a userspace OVS on two cores loses upcalls in bigger bursts: measured
        here, waves of 2,048 lost none at 64 and 256 GPUs in every benchmark run,
        4,096 sometimes lose a few hundred on a busy machine, 8,192 lose most. If a
        wave still loses more than 1%, later waves are halved. Pairs that miss are
        tried again up to ``retries`` times with three echoes; ``first_try_lost``
        says how many needed that, so a result is never quietly rounded to 0%.
        """
        t0 = time.monotonic()
        names = [h.name for h in self.plan.hosts]
        ip_of = {h.name: h.ip for h in self.plan.hosts}
        name_of = {ip: n for n, ip in ip_of.items()}
        todo = {n: [ip_of[m] for m in names if m != n] for n in names}
        pairs = sum(len(v) for v in todo.values())
        first_lost = 0
        longest = len(names) - 1 or 1
        width = max(1, max_inflight // longest)  # hosts per wave
        for attempt in range(retries + 1):
            count = 1 if attempt == 0 else 3
            missed: dict[str, list[str]] = {}
            waiting = [n for n in todo if todo[n]]
            i = 0
            while i < len(waiting):
                wave = waiting[i:i + width]
                i += len(wave)
                procs = {n: self.hosts[n].popen(
                    ["fping", "-q", "-c", str(count), "-t", str(timeout_ms), "-i", "1",
                     *todo[n]], stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in wave}
                lost_here = 0
                for n, proc in procs.items():
                    _out, err = proc.communicate(timeout=60 + len(todo[n]) * count)
                    lost = fping_unreached(err.decode(errors="replace"), todo[n])
                    if lost:
                        missed[n] = lost
                        lost_here += len(lost)
                if lost_here > 0.01 * sum(len(todo[n]) for n in wave):
                    width = max(1, width // 2)
            if attempt == 0:
                first_lost = sum(len(v) for v in missed.values())
            todo = missed
            if not todo:
                break
        failed = [(n, name_of[ip]) for n, ips in todo.items() for ip in ips]
        return Reachability(pairs=pairs, received=pairs - len(failed), first_try_lost=first_lost,
                            failed=failed, seconds=time.monotonic() - t0)

    # --- teardown --------------------------------------------------------------------
    def stop(self) -> None:
        """Remove everything this Lab made. Idempotent; never raises for a half-built lab.

        The live view and captures, the fabric (``teardown_fabric``), then the scratch folder and
        the fabric lock, whatever happened before (a failing step, a second Ctrl-C). Signals
        that arrive meanwhile wait until it is done (``signals.held``).
        """
        with signals.held():
            try:
                try:
                    self._stop_sidecars()
                finally:
                    self.teardown_fabric()
            finally:
                self.drop_workdir()
                self.net = None
                self._release_lock()

    def _stop_sidecars(self) -> None:
        """The live view and the captures go before the fabric (here, not in ``teardown_fabric``,
        which a ClusterLab replaces): a capture flushes its pcap on SIGINT while its port
        still exists."""
        sidecars.stop(self.sidecar_procs["dashboard"])
        sidecars.stop(self.sidecar_procs["capture"], sig=signal.SIGINT)
        self.sidecar_procs = {"dashboard": [], "capture": []}
        self.dashboard_url = None

    def teardown_fabric(self) -> None:
        """Controller, host shells, veths, bridges, QoS rows, run record.

        Public: a hook a subclass replaces (``ClusterLab`` tears down every server), and
        the seam a test replaces to check what ``stop`` does around the fabric.

        Order matters for speed: the host shells are killed (the kernel tears their
        namespaces down, taking the host links with them, in one batch), then the
        switch-to-switch veths are deleted, we wait until the host links are really
        gone so a caller can rebuild at once, and the bridges go in one transaction.
        """
        if self.controller_proc is not None:
            kill_pids([self.controller_proc.pid])
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.controller_proc.wait(timeout=5)
            self.controller_proc = None
        host_pids = [h.pid for h in self.hosts.values() if getattr(h, "pid", None)]
        for h in self.hosts.values():
            with contextlib.suppress(Exception):
                h.stdin.close() if h.stdin else None
            with contextlib.suppress(Exception):
                os.close(h.slave)
        # Interactive bash ignores SIGTERM; the shells hold nothing worth a grace period.
        kill_pids(host_pids, sig=signal.SIGKILL)
        for h in self.hosts.values():
            with contextlib.suppress(Exception):
                h.shell.wait(timeout=5)
        self.hosts.clear()
        if self._record:
            cleanup.delete_links(self._record.get("links", []))
            cleanup.wait_gone(self._record.get("host_links", []))
            cleanup.delete_bridges(self._record.get("bridges", []))
            cleanup.delete_qos([q for q, run in cleanup.tagged_qos().items()
                                if run == self.run_id])
            for d in self._record.get("daemons", []):  # their bridges and ports go with them
                stop_daemon(d)
            self.daemons, self.daemon_of = [daemons.ROOT], {}
            cleanup.drop_record(self.run_id)
            self._record = {}

    def drop_workdir(self) -> None:
        """Remove the run's scratch folder (logs, specs), unless ASTRAL_LAB_KEEP_LOGS is set.

        The run record goes first (``teardown_fabric``), so a kill between the two leaves a
        folder that ``astral-lab clean`` still recognises by its name. Public as the
        seam a test replaces when it has no scratch folder to drop.
        """
        if self.workdir:
            cleanup.drop_scratch(self.workdir, self.log)


__all__ = ["OVS_PORT_RCVBUF", "Lab"]
