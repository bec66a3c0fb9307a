"""Several Open vSwitch daemons forwarding one fabric, each on its own core.

On the userspace datapath one ``ovs-vswitchd`` forwards every packet of the fabric from its
main thread, so the lab's capacity is one core however many the machine has. A second daemon
cannot share the root network namespace with the first (both want the datapath's tap device,
``ovs-netdev``), but it runs fine in a namespace of its own with its own database, sockets
and run directory. So with ``Lab(switch_daemons=N)``:

* daemon 0 is the machine's own (root namespace, the system's database), as with one;
* daemon k >= 1 is an ``ovsdb-server`` + ``ovs-vswitchd`` pair started in network namespace
  ``astral-ovs-<run id>-<k>``, its files in ``/run/astral-lab-ovs/<run id>-<k>``; every
  ``ovs-*`` command reaches it through ``OVS_RUNDIR`` (``SwitchDaemon.ovs``), every ``ip``/
  ``tc`` command through the namespace (``SwitchDaemon.ns``);
* each switch belongs to one daemon (``assign``), and its ports live where its daemon is;
  a link between switches of two daemons is a plain veth pair across the namespaces;
* the controller listens on ``CONTROLLER_IP``, a link-local address on one small veth per
  namespaced daemon (``mgmt``), which the root daemon reaches as a local address.

The kernel datapath forwards in softirq on every core already, so there ``auto`` means 1.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from typing import Any

from testbed.daemons import (
    CONTROLLER_IP,
    NETNS_PREFIX,
    ROOT,
    RUNDIR_RE,
    SwitchDaemon,
    assign,
    mgmt_name,
    rundir,
    rundirs,
    running,
)
from testbed.shell import ovsbuf, procs
from testbed.shell.procs import kill_pids
from vocab.plan import WiringPlan

SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"


def start_all(run_id: str, plan: WiringPlan, n: int, on_start: Callable[[SwitchDaemon], None]
              ) -> tuple[list[SwitchDaemon], dict[str, SwitchDaemon]]:
    """The machine's daemon plus ``n - 1`` extra ones, ready, and each switch's daemon."""
    started = [ROOT] + [start(run_id, k, on_start) for k in range(1, n)]
    for d in started[1:]:
        wait_ready(d)
    return started, {sw: started[k] for sw, k in assign(plan, n).items()}


def vswitchd_pids(started: list[SwitchDaemon]) -> list[int | None]:
    """Each daemon's ``ovs-vswitchd`` process (None where it is not running), in order:
    the machine's own from the system's pid file, the extra ones' from theirs."""
    return [ovsbuf.vswitchd_pid() if d.netns is None else next(iter(d.pids()), None)
            for d in started]


def _run(argv: list[str], what: str) -> None:
    proc = procs.run(argv, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{what}: {proc.stderr.strip()[:300] or proc.stdout.strip()[:300]}")


def start(run_id: str, index: int, on_start: Callable[[SwitchDaemon], None]) -> SwitchDaemon:
    """Namespace, database, ``ovsdb-server``, ``ovs-vswitchd`` and the controller link of
    extra daemon ``index`` (>= 1). ``on_start`` is told before anything exists, so a run
    record can name what a crash would leave."""
    d = SwitchDaemon(index, f"{NETNS_PREFIX}{run_id}-{index}",
                     rundir(f"{run_id}-{index}"))
    assert d.netns and d.rundir
    on_start(d)
    os.makedirs(d.rundir, exist_ok=True)
    _run(["ip", "netns", "add", d.netns], f"creating namespace {d.netns}")
    _run(["ip", "-n", d.netns, "link", "set", "lo", "up"], "loopback up")
    start_ovs(d)
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


def start_ovs(d: SwitchDaemon) -> None:
    """A fresh database, ``ovsdb-server`` and ``ovs-vswitchd`` for ``d``, in its existing
    namespace, every file in its run directory. Apart from ``start`` because the fake
    cluster test runs the same pair as a fake server's own Open vSwitch."""
    assert d.netns and d.rundir
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


def stop_daemon(d: SwitchDaemon | dict[str, Any]) -> None:
    """Stop an extra daemon and remove its namespace (every port in it goes too), its
    controller link and its files. Safe on a half-started or already-stopped daemon."""
    if isinstance(d, dict):
        d = SwitchDaemon(int(d["index"]), d.get("netns"), d.get("rundir"))
    if d.netns is None:
        return
    pids = [p for p in d.pids() if _comm(p) in ("ovs-vswitchd", "ovsdb-server")]
    # whatever else still runs in the namespace (a capture, a command cut short)
    listed = procs.run(["ip", "netns", "pids", d.netns], timeout=60)
    pids += [int(p) for p in listed.stdout.split() if p.isdigit() and int(p) not in pids]
    kill_pids(pids, grace=2.0)
    procs.run(["ip", "netns", "del", d.netns], timeout=60)
    if os.path.exists(f"/sys/class/net/{mgmt_name(d.index)}"):  # goes with its peer, usually
        procs.run(["ip", "link", "del", mgmt_name(d.index)], timeout=60)
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
            found[f"{run_id}-{k}"] = {"index": int(k), "netns": name}
    for name in rundirs():
        run_id, _, k = name.partition("-")
        if run_id not in live_runs:
            found.setdefault(name, {"index": int(k), "netns": f"{NETNS_PREFIX}{name}"})
    return [{**d, "rundir": rundir(key)} for key, d in sorted(found.items())]


def wait_ready(d: SwitchDaemon, timeout: float = 30.0) -> None:
    """Until the daemon answers on its control socket (its bridges can then be added)."""
    deadline = time.monotonic() + timeout
    while True:
        if procs.run(d.ovs(["ovs-appctl", "-t", "ovs-vswitchd", "version"]),
                     timeout=60).returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"switch daemon {d.index} did not answer within {timeout:g} s")
        time.sleep(0.1)


def leftovers() -> list[str]:
    """What extra switch daemons left on this machine (for ``cleanup.leftovers``): their
    namespaces, run directories, controller links and processes. Empty means clean."""
    found = [f"switch daemon namespace {n}" for n in (
        os.listdir("/run/netns") if os.path.isdir("/run/netns") else [])
        if n.startswith(NETNS_PREFIX)]
    found += [f"switch daemon folder {rundir(d)}" for d in rundirs()]
    found += [f"interface {i}" for i in sorted(os.listdir("/sys/class/net"))
              if re.fullmatch(r"astral-ovs[0-9]+", i)]
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                argv = f.read().split("\0")
        except OSError:
            continue
        if any(a.startswith(f"--pidfile={rundir()}") for a in argv):
            found.append(f"switch daemon pid {pid} ({argv[0]})")
    return found


def locate_bridges(extra: list[SwitchDaemon] | None = None) -> dict[str, SwitchDaemon]:
    """``bridge -> the daemon that has it``, over the machine's daemon and every extra one
    (``extra``; default: those running here)."""
    out = {}
    for d in [ROOT, *(running() if extra is None else extra)]:
        listed = procs.run(d.ovs(["ovs-vsctl", "--timeout=10", "list-br"]), timeout=60)
        out.update(dict.fromkeys(listed.stdout.split(), d))
    return out
