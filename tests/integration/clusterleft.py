"""What a cluster run owns, to check after ``stop`` that none of it is left: on this machine
(its interfaces by name and ifindex, its shells and controller, its tagged rows, its run
record) and, given fake servers (``fakecluster``), on each of them (the interfaces in their
namespaces, the remote nodes' shells, the rows in their own Open vSwitch).

Leftovers are checked for *this run*, because a fabric of another test run may take the
machine's fabric lock, and the same names, the moment ours is gone.
"""

from __future__ import annotations

import os
from typing import Any

from testbed.shell import cleanup


def ifindex(name: str) -> int | None:
    """The interface's ifindex in this namespace (None: no such interface)."""
    try:
        with open(f"/sys/class/net/{name}/ifindex") as f:
            return int(f.read())
    except OSError:
        return None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in f.read().lower()
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ")[:80]
    except OSError:
        return "?"


def snapshot(lab: Any, fake: Any = None) -> dict[str, Any]:
    """What this run owns: on this machine, and on each fake server of ``fake`` if given
    (a fake server shares this machine's process table, so its nodes' pids are checkable)."""
    names = {i for link in lab.plan.links for i in (link.a_intf, link.b_intf)}
    intfs = {i: idx for i in sorted(names) if (idx := ifindex(i)) is not None}
    nodes = lab.net.hosts + lab.net.switches + lab.net.controllers
    pids = [n.shell.pid for n in nodes]  # local shells; ssh sessions for remote nodes
    pids += [n.pid for n in nodes if getattr(n, "isRemote", False) and n.pid]
    if lab.controller_proc:
        pids.append(lab.controller_proc.pid)
    remote: dict[int, dict[str, int]] = {}
    for i in range(fake.n if fake is not None else 0):
        remote[i] = {n: idx for n, idx in fake.ifindex(i).items() if n in names}
    return {"run": lab.run_id, "intfs": intfs, "pids": pids, "remote": remote,
            "workdir": lab.workdir}


def assert_run_gone(snap: dict[str, Any], fake: Any = None) -> None:
    run = snap["run"]
    left = [f"interface {i}" for i, idx in snap["intfs"].items() if ifindex(i) == idx]
    left += [f"pid {p} ({cmdline(p)})" for p in snap["pids"] if alive(p)]
    left += [f"bridge {b}" for b, r in cleanup.tagged_bridges().items() if r == run]
    left += [f"QoS {q}" for q, r in cleanup.tagged_qos().items() if r == run]
    if os.path.exists(cleanup.record_path(run)):
        left.append("run record")
    if snap.get("workdir") and os.path.exists(snap["workdir"]):
        left.append(f"scratch folder {snap['workdir']}")
    for i, intfs in snap.get("remote", {}).items():
        now = fake.ifindex(i)
        left += [f"interface {n} on {fake.ips[i]}" for n, idx in intfs.items()
                 if now.get(n) == idx]
        tag = f"external_ids:{cleanup.BRIDGE_TAG}={run}"
        for table in ("Bridge", "QoS"):
            rows = fake.vsctl(i, "--bare", "--columns=_uuid", "find", table, tag).split()
            left += [f"{table} {r} on {fake.ips[i]}" for r in rows]
    assert not left, f"left behind: {left[:10]}"
