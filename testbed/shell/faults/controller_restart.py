"""A controller crash and restart: killed, started again ``duration`` s later, then resyncing."""

from __future__ import annotations

from typing import Any

from testbed.shell.faults._base import Handle
from testbed.shell.faults.controller_kill import apply, check, revert

__all__ = ["apply", "check", "revert", "worker"]


def worker(inj: Any, handle: Handle) -> None:
    """The downtime (``span``, 0 without a duration); the injector restarts it after."""
    inj._timed(handle)
