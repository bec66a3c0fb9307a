"""A controller crash and restart: killed, started again ``duration`` s later, then resyncing.

Killed, checked and restarted as ``controller_kill`` does it; only the downtime is its own.
"""

from __future__ import annotations

from typing import Any

from testbed.faultspec import Fault
from testbed.shell.faults import FaultContext, Handle, controller_kill

__all__ = ["apply", "check", "revert", "worker"]


def check(ctx: FaultContext, fault: Fault) -> None:
    controller_kill.check(ctx, fault)


def apply(ctx: FaultContext, handle: Handle) -> None:
    controller_kill.apply(ctx, handle)


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    return controller_kill.revert(ctx, handle)


def worker(ctx: FaultContext, handle: Handle) -> None:
    """The downtime (``span``, 0 without a duration); the injector restarts it after."""
    handle.pause(handle.fault.span or 0.0)
