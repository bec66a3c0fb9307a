"""A controller crash and restart: killed, started again ``duration`` s later, then resyncing."""

from __future__ import annotations

from testbed.shell.faults import FaultContext, Handle
from testbed.shell.faults.controller_kill import apply, check, revert

__all__ = ["apply", "check", "revert", "worker"]


def worker(ctx: FaultContext, handle: Handle) -> None:
    """The downtime (``span``, 0 without a duration); the injector restarts it after."""
    handle.pause(handle.fault.span or 0.0)
