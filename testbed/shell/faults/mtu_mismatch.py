"""A port left at a smaller MTU: one switch end of a link lowered, frames into it dropped."""

from __future__ import annotations

from typing import Any

from testbed.faultkinds.mtu_mismatch import (
    alias_command,
    lowered_end,
    mark,
    mtu_command,
    parse_mark,
)
from testbed.shell.cleanup import intf_state, ovs_mtus, restore_mtus
from testbed.shell.faults import FaultContext, FaultError, Handle


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
