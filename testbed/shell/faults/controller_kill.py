"""A controller crash: killed (SIGKILL) while the switches keep forwarding on their flows."""

from __future__ import annotations

from typing import Any

from testbed.faultspec import Fault
from testbed.shell.faults import FaultContext, FaultError, Handle


def check(ctx: FaultContext, fault: Fault) -> None:
    if not getattr(ctx.lab, "use_controller", True):
        raise FaultError(f"{fault.kind}: this lab runs no controller (Lab(controller=False))")


def apply(ctx: FaultContext, handle: Handle) -> None:
    proc = getattr(ctx.lab, "controller_proc", None)
    if proc is None:
        raise FaultError(f"{handle.fault.kind}: the controller is not running")
    handle.info["detail"] = {"pid": proc.pid}
    ctx.lab.kill_controller()


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    ctx.lab.restart_controller(wait=True)
    proc = getattr(ctx.lab, "controller_proc", None)
    return {"pid": proc.pid if proc is not None else None}
