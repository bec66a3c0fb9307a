"""Several Open vSwitch daemons forwarding one fabric, each on its own core.

On the userspace datapath one ``ovs-vswitchd`` forwards every packet of the fabric from its
main thread, so the lab's capacity is one core however many the machine has. A second daemon
cannot share the root network namespace with the first (both want the datapath's tap device,
``ovs-netdev``), but it runs fine in a namespace of its own with its own database, sockets
and run directory. So with ``Lab(switch_daemons=N)``:

* daemon 0 is the machine's own (root namespace, the system's database), as with one;
* daemon k >= 1 is an ``ovsdb-server`` + ``ovs-vswitchd`` pair started in network namespace
  ``astral-ovs-<run id>-<k>``, its files in ``/run/astral-lab/<run id>-ovs<k>``; every
  ``ovs-*`` command reaches it through ``OVS_RUNDIR`` (``SwitchDaemon.ovs``), every ``ip``/
  ``tc`` command through the namespace (``SwitchDaemon.ns``);
* each switch belongs to one daemon (``assign``), and its ports live where its daemon is;
  a link between switches of two daemons is a plain veth pair across the namespaces;
* the controller listens on ``CONTROLLER_IP``, a link-local address on one small veth per
  namespaced daemon (``mgmt``), which the root daemon reaches as a local address.

The kernel datapath forwards in softirq on every core already, so there ``auto`` means 1.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testbed.datapath import Datapath
from testbed.shell import cleanup

#: namespaces of the extra daemons: ``astral-ovs-<run id>-<k>``
NETNS_PREFIX = "astral-ovs-"
#: the controller's address when several daemons run; daemon k's end of its link is .(k+1)
CONTROLLER_IP = "169.254.77.1"
SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
#: an extra daemon's run directory, in ``cleanup.STATE_DIR``: ``<run id>-ovs<k>``
RUNDIR_RE = re.compile(r"[0-9a-f]{10}-ovs[0-9]+")


@dataclass(frozen=True)
class SwitchDaemon:
    """One switch daemon: where its commands must run. Index 0 is the machine's own."""

    index: int
    netns: str | None = None  # None: the root namespace
    rundir: str | None = None  # None: the system's run directory

    def ovs(self, argv: list[str]) -> list[str]:
        """``argv`` (an ``ovs-*`` command) aimed at this daemon."""
        if self.rundir is None:
            return argv
        return ["env", f"OVS_RUNDIR={self.rundir}", f"OVS_DBDIR={self.rundir}",
                f"OVS_LOGDIR={self.rundir}", *argv]

    def ns(self, argv: list[str]) -> list[str]:
        """``argv`` run in the namespace where this daemon's ports are."""
        return argv if self.netns is None else ["ip", "netns", "exec", self.netns, *argv]

    def ip(self) -> list[str]:
        """``ip``/``tc`` options selecting this daemon's namespace (``-n NAME``)."""
        return [] if self.netns is None else ["-n", self.netns]

    @property
    def mgmt_ip(self) -> str:
        """This daemon's end of its link to the controller."""
        return CONTROLLER_IP.rsplit(".", 1)[0] + f".{self.index + 1}"

    def pids(self) -> list[int]:
        """The daemon's processes, from its pid files (none for the machine's own)."""
        if self.rundir is None:
            return []
        found = []
        for name in ("ovs-vswitchd", "ovsdb-server"):
            with contextlib.suppress(OSError, ValueError), \
                    open(os.path.join(self.rundir, f"{name}.pid")) as f:
                found.append(int(f.read().strip()))
        return found

    def as_record(self) -> dict[str, Any]:
        return {"index": self.index, "netns": self.netns, "rundir": self.rundir}


ROOT = SwitchDaemon(0)


def parse_request(text: str | int) -> int | str:
    """``--switch-daemons`` as typed: ``auto`` or a whole number >= 1 (one-line error)."""
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        n = int(str(text).strip())
    except ValueError:
        raise ValueError(f"switch daemons must be a number or 'auto', not {text!r}") from None
    if n < 1:
        raise ValueError(f"switch daemons must be at least 1, not {n}")
    return n


def resolve_count(request: int | str, datapath: str, switches: int) -> int:
    """How many daemons ``--switch-daemons`` asks for: ``auto`` is one per usable core on
    the userspace datapath (1 on the kernel's), never more than there are switches."""
    request = parse_request(request)
    if request == "auto":
        if datapath != Datapath.USER:
            return 1
        n = len(os.sched_getaffinity(0))
    else:
        n = int(request)
        if n > 1 and datapath != Datapath.USER:
            raise ValueError("--switch-daemons above 1 needs the userspace datapath: the "
                             "kernel datapath forwards on every core already")
    return max(1, min(n, switches))


def assign(plan: Any, n: int) -> dict[str, int]:
    """Which daemon forwards each switch: ports balanced across daemons.

    A daemon's work is the packets its ports carry, and in these fabrics a switch's share
    of the traffic follows its port count, so switches go largest first to the daemon
    with the fewest ports so far (ties: the lower index). Links between daemons cost a
    veth hop like any other, so nothing is kept together for their sake.
    """
    degree: dict[str, int] = {s.name: 0 for s in plan.switches}
    for link in plan.links:
        for node in (link.a, link.b):
            if node in degree:
                degree[node] += 1
    order = {s.name: i for i, s in enumerate(plan.switches)}
    load = [0] * n
    out: dict[str, int] = {}
    for name in sorted(degree, key=lambda s: (-degree[s], order[s])):
        k = min(range(n), key=lambda i: (load[i], i))
        out[name] = k
        load[k] += degree[name]
    return out


def group_ends(plan: Any, ends: list[tuple[str, float]],
               daemon_of: Callable[[str], SwitchDaemon]
               ) -> dict[SwitchDaemon, list[tuple[str, float]]]:
    """Switch-side link ends ``(interface, Mb/s)`` grouped by the daemon whose switch owns
    them: each group is configured with one ``ip``/``tc`` batch in that daemon's namespace."""
    node_of = {}
    for link in plan.links:
        node_of[link.a_intf], node_of[link.b_intf] = link.a, link.b
    out: dict[SwitchDaemon, list[tuple[str, float]]] = {}
    for name, mbps in ends:
        out.setdefault(daemon_of(node_of[name]), []).append((name, mbps))
    return out


def start_all(run_id: str, plan: Any, n: int, on_start: Callable[[SwitchDaemon], None]
              ) -> tuple[list[SwitchDaemon], dict[str, SwitchDaemon]]:
    """The machine's daemon plus ``n - 1`` extra ones, ready, and each switch's daemon."""
    running = [ROOT] + [start(run_id, k, on_start) for k in range(1, n)]
    for d in running[1:]:
        wait_ready(d)
    return running, {sw: running[k] for sw, k in assign(plan, n).items()}


def _run(argv: list[str], what: str) -> None:
    proc = cleanup.run(argv, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{what}: {proc.stderr.strip()[:300] or proc.stdout.strip()[:300]}")


def start(run_id: str, index: int, on_start: Callable[[SwitchDaemon], None]) -> SwitchDaemon:
    """Namespace, database, ``ovsdb-server``, ``ovs-vswitchd`` and the controller link of
    extra daemon ``index`` (>= 1). ``on_start`` is told before anything exists, so a run
    record can name what a crash would leave."""
    d = SwitchDaemon(index, f"{NETNS_PREFIX}{run_id}-{index}",
                     os.path.join(cleanup.STATE_DIR, f"{run_id}-ovs{index}"))
    assert d.netns and d.rundir
    on_start(d)
    os.makedirs(d.rundir, exist_ok=True)
    _run(["ip", "netns", "add", d.netns], f"creating namespace {d.netns}")
    _run(["ip", "-n", d.netns, "link", "set", "lo", "up"], "loopback up")
    db = os.path.join(d.rundir, "conf.db")
    _run(["ovsdb-tool", "create", db, SCHEMA], "creating the switch database")
    _run(d.ns(d.ovs(["ovsdb-server", db, f"--remote=punix:{d.rundir}/db.sock",
                     f"--pidfile={d.rundir}/ovsdb-server.pid", "--detach", "--no-chdir",
                     f"--log-file={d.rundir}/ovsdb-server.log", "-vconsole:emer"])),
         "starting ovsdb-server")
    _run(d.ovs(["ovs-vsctl", "--no-wait", "--timeout=30", "init"]), "initialising the database")
    _run(d.ns(d.ovs(["ovs-vswitchd", f"unix:{d.rundir}/db.sock",
                     f"--pidfile={d.rundir}/ovs-vswitchd.pid", "--detach", "--no-chdir",
                     f"--log-file={d.rundir}/ovs-vswitchd.log", "-vconsole:emer"])),
         "starting ovs-vswitchd")
    root_end = mgmt_name(index)
    _run(["ip", "link", "add", root_end, "type", "veth", "peer", "name", "mgmt", "netns",
          d.netns], "creating the controller link")
    _run(["ip", "addr", "add", CONTROLLER_IP, "peer", d.mgmt_ip, "dev", root_end],
         "addressing the controller link")
    _run(["ip", "link", "set", root_end, "up"], "controller link up")
    _run(["ip", "-n", d.netns, "addr", "add", d.mgmt_ip, "peer", CONTROLLER_IP, "dev", "mgmt"],
         "addressing the daemon's end")
    _run(["ip", "-n", d.netns, "link", "set", "mgmt", "up"], "daemon link up")
    return d


def mgmt_name(index: int) -> str:
    """The root end of daemon ``index``'s link to the controller."""
    return f"astral-ovs{index}"


def stop(d: SwitchDaemon | dict[str, Any]) -> None:
    """Stop an extra daemon and remove its namespace (every port in it goes too), its
    controller link and its files. Safe on a half-started or already-stopped daemon."""
    if isinstance(d, dict):
        d = SwitchDaemon(int(d["index"]), d.get("netns"), d.get("rundir"))
    if d.netns is None:
        return
    pids = [p for p in d.pids() if _comm(p) in ("ovs-vswitchd", "ovsdb-server")]
    # whatever else still runs in the namespace (a capture, a command cut short)
    listed = cleanup.run(["ip", "netns", "pids", d.netns])
    pids += [int(p) for p in listed.stdout.split() if p.isdigit() and int(p) not in pids]
    cleanup.kill_pids(pids, grace=2.0)
    cleanup.run(["ip", "netns", "del", d.netns])
    cleanup.delete_links([mgmt_name(d.index)])
    if d.rundir and RUNDIR_RE.fullmatch(os.path.basename(d.rundir)):
        shutil.rmtree(d.rundir, ignore_errors=True)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def stale(live_runs: set[str], root: str = "/run/netns") -> list[dict[str, Any]]:
    """Extra daemons of runs that are gone (a namespace or run directory is still there),
    for ``clean``."""
    found: dict[str, dict[str, Any]] = {}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        run_id, _, k = name[len(NETNS_PREFIX):].rpartition("-")
        if name.startswith(NETNS_PREFIX) and k.isdigit() and run_id not in live_runs:
            found[f"{run_id}-ovs{k}"] = {"index": int(k), "netns": name}
    state = cleanup.STATE_DIR
    for name in sorted(os.listdir(state)) if os.path.isdir(state) else []:
        run_id, _, k = name.partition("-ovs")
        if RUNDIR_RE.fullmatch(name) and run_id not in live_runs:
            found.setdefault(name, {"index": int(k), "netns": f"{NETNS_PREFIX}{run_id}-{k}"})
    return [{**d, "rundir": os.path.join(state, key)} for key, d in sorted(found.items())]


def wait_ready(d: SwitchDaemon, timeout: float = 30.0) -> None:
    """Until the daemon answers on its control socket (its bridges can then be added)."""
    deadline = time.monotonic() + timeout
    while True:
        if cleanup.run(d.ovs(["ovs-appctl", "-t", "ovs-vswitchd", "version"])).returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"switch daemon {d.index} did not answer within {timeout:g} s")
        time.sleep(0.1)
