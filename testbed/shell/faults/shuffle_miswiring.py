"""Two lanes of a shuffle box crossed: their spine-side ports trade bridges and numbers."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from typing import Any

from testbed import daemons
from testbed.datapath import Datapath
from testbed.faultkinds._ports import alias_command
from testbed.faultkinds.shuffle_miswiring import (
    Home,
    locate_command,
    mark,
    move_command,
    parse_locate,
    parse_mark,
    partner,
    swapped,
)
from testbed.faultspec import link_name
from testbed.shell.cleanup import intf_state, marked_ports
from testbed.shell.faults import FaultContext, FaultError, Handle
from testbed.shell.lab import OVS_PORT_RCVBUF
from testbed.shell.machine import socket_buffers
from testbed.shell.procs import run

Sh = Callable[..., subprocess.CompletedProcess[str]]


def port_state(sh: Sh, intf: str) -> dict[str, Any]:
    """What must not change when a port moves: its home in Open vSwitch, its MTU and its
    qdiscs and classes (the HTB shaper), as read now; ``FaultError`` if it is missing."""
    home = parse_locate(sh(locate_command(intf), check=False).stdout)
    state = intf_state(sh, intf)
    if home is None or state is None:
        raise FaultError(f"shuffle-miswiring: {intf} is not a switch port here")
    tc = "".join(sh(["tc", obj, "show", "dev", intf]).stdout for obj in ("qdisc", "class"))
    return {"home": home, "mtu": state["mtu"], "alias": state.get("ifalias", ""), "tc": tc}


def move(ctx: FaultContext, moves: dict[str, Home], where: str) -> None:
    """Put the ports of ``moves`` where it says, in one transaction. On the userspace
    datapath the default socket receive buffer is raised meanwhile, as the Lab does when
    it adds ports, so the moved ports' packet sockets are as deep as the others'. ``where``:
    a switch of the daemon that has both ports (``FaultContext.sh``)."""
    deep = ctx.lab.datapath == Datapath.USER
    with socket_buffers(OVS_PORT_RCVBUF) if deep else contextlib.nullcontext():
        ctx.sh(move_command(moves), where)


def apply(ctx: FaultContext, handle: Handle) -> None:
    link, _lane = ctx.link_target(handle)
    other = partner(ctx.plan, link, handle.fault.settings.seed)
    ports = [link.b_intf, other.b_intf]
    if daemons.of(ctx.lab, link.b) != daemons.of(ctx.lab, other.b):
        raise FaultError(f"shuffle-miswiring: {link.b} and {other.b} are forwarded by "
                         "different switch daemons, and a port cannot move between them; "
                         "run with --switch-daemons 1 for this fault")
    sh = ctx.on(link.b)
    before = {i: port_state(sh, i) for i in ports}
    for intf, state in before.items():
        if parse_mark(state["alias"]) is not None:
            raise FaultError(f"shuffle-miswiring: {intf} is marked as moved already "
                             f"({state['alias']!r}: left by a crashed run? `astral-lab clean` "
                             "puts it back)")
    homes = {i: s["home"] for i, s in before.items()}
    handle.info.update(before=before, homes=homes, partner=other, where=link.b)
    try:
        for intf in ports:
            sh(alias_command(intf, mark(ctx.lab.run_id, homes[intf])))
        moves = swapped(*homes.items())
        move(ctx, moves, link.b)
        after = {i: port_state(sh, i) for i in ports}
        got = {i: s["home"] for i, s in after.items()}
        if got != moves or any(after[i]["tc"] != before[i]["tc"] for i in ports):
            raise FaultError(f"shuffle-miswiring: the ports read back {got} after moving them "
                             f"to {moves}, or their qdiscs changed")
    except BaseException:
        _restore(ctx, handle)
        raise
    # ``affects``: the other component this fault puts wrong (scoring reads it)
    handle.info["detail"] = {"partner": f"{other.a}~{other.b}",
                             "affects": [link_name(ctx.lab.plan, other)], "ports": {
        i: f"{h.bridge}:{h.ofport}" for i, h in moves.items()}}


def _restore(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    """Ports home, aliases back; what reads differently afterwards (empty: all as before)."""
    before, homes = handle.info["before"], handle.info["homes"]
    sh = ctx.on(handle.info["where"])
    move(ctx, homes, handle.info["where"])
    for intf, state in before.items():
        sh(alias_command(intf, state["alias"]))
    after = {i: port_state(sh, i) for i in before}
    return {i: after[i] for i in before if after[i] != before[i]}


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    differ = _restore(ctx, handle)
    if differ:
        raise FaultError(f"shuffle-miswiring: {handle.component} did not return to its "
                         f"wiring: {differ} (was {handle.info['before']})")
    return {"ports": {i: f"{h.bridge}:{h.ofport}" for i, h in handle.info["homes"].items()}}


def clean_crashed(theirs: Callable[[str], bool]) -> dict[str, int]:
    """Move the ports this kind crossed (its ``mark`` on their alias names their home) back
    to their bridges, for the runs ``theirs`` accepts: in one transaction, so two crossed
    ports trade places back at once."""
    marks = {i: parse_mark(a) for i, a in marked_ports(parse_mark).items()}
    moved = {i: m[1] for i, m in marks.items() if m and theirs(m[0])}
    if moved:
        run(move_command(moved))
        for intf in moved:
            run(alias_command(intf, ""))
    return {"ports": len(moved)}
