"""A controller crash: killed (SIGKILL) while the switches keep forwarding on their flows."""

from __future__ import annotations

from typing import Any

from testbed.faultspec import Fault
from testbed.shell.faults._base import FaultError, Handle


def check(inj: Any, fault: Fault) -> None:
    if not getattr(inj.lab, "use_controller", True):
        raise FaultError(f"{fault.kind}: this lab runs no controller (Lab(controller=False))")


def apply(inj: Any, handle: Handle) -> None:
    proc = getattr(inj.lab, "controller_proc", None)
    if proc is None:
        raise FaultError(f"{handle.fault.kind}: the controller is not running")
    handle.info["detail"] = {"pid": proc.pid}
    inj.lab.kill_controller()


def revert(inj: Any, handle: Handle) -> dict[str, Any]:
    inj.lab.restart_controller(wait=True)
    proc = getattr(inj.lab, "controller_proc", None)
    return {"pid": proc.pid if proc is not None else None}
