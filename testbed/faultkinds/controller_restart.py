"""A controller crash and restart: down for ``duration`` seconds, then back and resyncing."""

from __future__ import annotations

from typing import Any

TARGET = "controller"
ORDER = 120  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("down",)  # the controller stops answering; the switches keep forwarding


def span(fault: Any) -> float:
    """The downtime; the fault ends when the new controller is up (no duration: at once)."""
    return fault.duration or 0.0
