"""A port left at a smaller MTU: one switch end of a link lowered, frames into it dropped."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

from testbed.faultkinds._ports import alias_command
from testbed.faultkinds.mtu_mismatch import (
    lowered_end,
    mark,
    mtu_command,
    parse_mark,
)
from testbed.shell.cleanup import intf_state, marked_ports, root_sh
from testbed.shell.faults import FaultContext, FaultError, Handle
from testbed.shell.procs import run


def _state(ctx: FaultContext, sw: str, intf: str) -> dict[str, Any]:
    state = intf_state(ctx.on(sw), intf)
    if state is None:
        raise FaultError(f"mtu-mismatch: no interface {intf}")
    return state


def _rx_dropped(state: dict[str, Any]) -> int:
    return int(state.get("stats64", {}).get("rx", {}).get("dropped", 0))


def apply(ctx: FaultContext, handle: Handle) -> None:
    link, _lane = ctx.link_target(handle)
    sw, intf = lowered_end(link)
    sh = ctx.on(sw)
    port = _state(ctx, sw, intf)
    mtu = handle.fault.settings.mtu
    alias = port.get("ifalias", "")
    if parse_mark(alias) is not None:
        raise FaultError(f"mtu-mismatch: {intf} is marked as lowered already ({alias!r}: "
                         "left by a crashed run? `astral-lab clean` restores it)")
    if mtu >= port["mtu"]:
        raise FaultError(f"mtu-mismatch: {intf} has MTU {port['mtu']}; a mismatch needs a "
                         f"smaller one (got mtu={mtu})")
    # the port, and its bridge's internal port, whose MTU OVS follows
    restore = {intf: port["mtu"]}
    bridge = intf_state(sh, sw)
    if bridge is not None:
        restore[sw] = bridge["mtu"]
    handle.info.update(intf=intf, switch=sw, restore=restore, alias=alias,
                       ovs=ovs_mtus(sh, restore), rx_dropped=_rx_dropped(port))
    try:
        sh(alias_command(intf, mark(ctx.lab.run_id, restore)))
        sh(mtu_command(intf, mtu))
        got = _state(ctx, sw, intf)["mtu"]
        if got != mtu:
            raise FaultError(f"mtu-mismatch: {intf} reads back MTU {got} after setting {mtu}")
    except BaseException:
        restore_mtus(sh, restore)
        sh(alias_command(intf, alias), check=False)
        raise
    handle.info["detail"] = {"interface": intf, "mtu": mtu, "mtu_before": restore[intf]}


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    intf, restore, sw = handle.info["intf"], handle.info["restore"], handle.info["switch"]
    sh = ctx.on(sw)
    dropped = _rx_dropped(_state(ctx, sw, intf)) - handle.info["rx_dropped"]
    after = restore_mtus(sh, restore)
    sh(alias_command(intf, handle.info["alias"]))
    ovs = ovs_mtus(sh, restore)
    if after != restore or ovs != handle.info["ovs"]:
        raise FaultError(f"mtu-mismatch: {handle.component} did not return to its MTUs: "
                         f"kernel {after} (was {restore}), Open vSwitch {ovs} (was "
                         f"{handle.info['ovs']})")
    return {"mtu": restore[intf], "rx_dropped": dropped}


def ovs_mtus(sh: Callable[..., subprocess.CompletedProcess[str]], names: Iterable[str]
             ) -> dict[str, int | None]:
    """Open vSwitch's view: the ``mtu`` column of these rows of its Interface table (None
    where it is empty; rows OVS does not have are left out)."""
    proc = sh(["ovs-vsctl", "--timeout=10", "--format=json", "--columns=name,mtu",
               "--if-exists", "list", "Interface", *names], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {}
    rows = json.loads(proc.stdout).get("data", [])
    return {name: (mtu if isinstance(mtu, int) else None) for name, mtu in rows}


def restore_mtus(sh: Callable[..., subprocess.CompletedProcess[str]], restore: dict[str, int],
                 timeout: float = 10.0, settle: float = 0.5) -> dict[str, int | None]:
    """Put root-namespace interfaces back to their MTUs and hold them there until Open
    vSwitch agrees; the MTUs the kernel reads at the end.

    Raising a port's MTU makes OVS set its bridge's internal port to the new minimum of
    the bridge's ports, which need not be the MTU it had. So every interface of
    ``restore`` is set back, and again while OVS changes it, until the kernel and OVS's
    Interface table both read ``restore`` for ``settle`` seconds (or ``timeout`` passes).
    """
    deadline = time.monotonic() + timeout
    calm: float | None = None
    while True:
        now = {}
        for name, mtu in restore.items():
            state = intf_state(sh, name)
            now[name] = None if state is None else state["mtu"]
            if state is not None and state["mtu"] != mtu:
                sh(mtu_command(name, mtu), check=False)
        present = {n: m for n, m in restore.items() if now[n] is not None}
        agreed = all(now[n] == m for n, m in present.items()) \
            and ovs_mtus(sh, present) == present
        t = time.monotonic()
        if not agreed:
            calm = None
        elif calm is None:
            calm = t
        if (calm is not None and t - calm >= settle) or t > deadline:
            return now
        time.sleep(0.05)


def clean_crashed(theirs: Callable[[str], bool]) -> dict[str, int]:
    """Put the ports this kind lowered (its ``mark`` on their alias) back to the MTUs the
    mark names, for the runs ``theirs`` accepts."""
    ports = 0
    for intf, alias in marked_ports(parse_mark).items():
        run_id, restore = parse_mark(alias) or ("", {})
        if theirs(run_id):
            restore_mtus(root_sh, restore)
            run(alias_command(intf, ""))
            ports += 1
    return {"ports": ports}
