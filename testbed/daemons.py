"""Several Open vSwitch daemons forwarding one fabric: the parts that need no root.

How many daemons a request means, which daemon forwards each switch (``assign``), how a
command is aimed at a daemon (``SwitchDaemon``: its namespace, its ``ovs-*`` sockets), and
how any process finds the daemons running on this machine and their ports' counters (from
their run directories and ``/proc``). ``testbed.shell.switch_daemons`` starts and stops them; its
docstring says why there are several.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testbed.datapath import Datapath
from vocab.plan import WiringPlan, intf_node

#: namespaces of the extra daemons: ``astral-ovs-<run id>-<k>``
NETNS_PREFIX = "astral-ovs-"
#: the controller's address when several daemons run; daemon k's end of its link is .(k+1)
CONTROLLER_IP = "169.254.77.1"


#: where extra daemons keep their database, sockets, pid and log files
DAEMON_DIR = "/run/astral-lab-ovs"
#: an extra daemon's run directory in DAEMON_DIR: ``<run id>-<k>``
RUNDIR_RE = re.compile(r"[0-9a-f]{10}-[0-9]+")


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


def of(lab: Any, node: str) -> SwitchDaemon:
    """The daemon of switch ``node`` in ``lab`` (the machine's own for a lab without
    several, or a stand-in lab in a test)."""
    find = getattr(lab, "switch_daemon", None)
    return find(node) if find else ROOT


#: the most switch daemons one may ask for (each wants a core of its own)
MAX_DAEMONS = 256


def parse_request(text: str | int) -> int | str:
    """``--switch-daemons`` as typed: ``auto`` or a whole number >= 1 (one-line error)."""
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        n = int(str(text).strip())
    except ValueError:
        raise ValueError(f"switch daemons must be a number or 'auto', not {text!r}") from None
    if not 1 <= n <= MAX_DAEMONS:
        raise ValueError(f"switch daemons must be a whole number in 1..{MAX_DAEMONS} or "
                         f"'auto', not {n}")
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
        if n > switches:
            raise ValueError(f"--switch-daemons {n}: the fabric has {switches} switches, and "
                             "a daemon forwards at least one; give at most that, or auto")
        if n > 1 and datapath != Datapath.USER:
            raise ValueError("--switch-daemons above 1 needs the userspace datapath: the "
                             "kernel datapath forwards on every core already")
    return max(1, min(n, switches))


def assign(plan: WiringPlan, n: int) -> dict[str, int]:
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


def group_ends(ends: list[tuple[str, float]],
               daemon_of: Callable[[str], SwitchDaemon]
               ) -> dict[SwitchDaemon, list[tuple[str, float]]]:
    """Switch-side link ends ``(interface, Mb/s)`` grouped by the daemon whose switch owns
    them: each group is configured with one ``ip``/``tc`` batch in that daemon's namespace."""
    out: dict[SwitchDaemon, list[tuple[str, float]]] = {}
    for name, mbps in ends:
        out.setdefault(daemon_of(intf_node(name)), []).append((name, mbps))
    return out


def mgmt_name(index: int) -> str:
    """The root end of daemon ``index``'s link to the controller (``astral-ovs<k>``)."""
    return f"astral-ovs{index}"


def rundir(name: str = "") -> str:
    """The path of run directory ``name`` (``<run id>-<k>``) in DAEMON_DIR."""
    return os.path.join(DAEMON_DIR, name)


def rundirs() -> list[str]:
    """Names of the run directories in DAEMON_DIR (``<run id>-<k>``)."""
    names = os.listdir(DAEMON_DIR) if os.path.isdir(DAEMON_DIR) else []
    return sorted(n for n in names if RUNDIR_RE.fullmatch(n))


def running() -> list[SwitchDaemon]:
    """Every extra switch daemon running on this machine (from their run directories and
    pid files): how a process that did not build the lab finds switches and ports."""
    out = []
    for name in rundirs():
        d = SwitchDaemon(int(name.partition("-")[2]), f"{NETNS_PREFIX}{name}",
                         rundir(name))
        if any(os.path.exists(f"/proc/{p}") for p in d.pids()):
            out.append(d)
    return out


def running_namespaces() -> dict[str, int]:
    """``namespace -> a PID in it`` for every extra switch daemon running on this machine."""
    return {d.netns: d.pids()[-1] for d in running() if d.netns and d.pids()}


def tx_bytes_everywhere() -> dict[str, int]:
    """Transmitted bytes of every interface in the root namespace and in every extra switch
    daemon's (``/proc/<pid>/net/dev`` shows the namespace of ``pid``)."""
    out: dict[str, int] = {}
    paths = ["/proc/net/dev"] + [f"/proc/{pid}/net/dev" for pid in running_namespaces().values()]
    for path in paths:
        with contextlib.suppress(OSError), open(path) as f:
            for line in f.read().splitlines()[2:]:
                name, _, nums = line.partition(":")
                fields = nums.split()
                if len(fields) >= 9 and fields[8].isdigit():
                    out[name.strip()] = int(fields[8])
    return out
