"""Which hosts drop RoCE at their NIC's ingress hook on purpose, for telemetry to know.

The compiled receiver reads frames from a packet ring and has the host drop them at the
ingress hook (``traffic.shell.replay.drop_roce``), so the UDP stack never sees them. To the
NIC-loss reading (frames the NIC received that IP never delivered) that deliberate drop
looks like a NIC losing every packet. While it is in place the replay leaves a marker named
by the host shell's PID (the namespace the collector reads counters through), and the
collector leaves that host's inbound loss unmeasured instead of raising a false alarm.
Markers are keyed by PID, so one a killed run left behind matches no later host.
"""

from __future__ import annotations

import contextlib
import os

#: one empty file per sinking host, named by the PID of a process in its namespace
SINK_DIR = "/run/astral-lab-rx-sink"


def _path(pid: int) -> str:
    return os.path.join(SINK_DIR, str(int(pid)))


def mark(pid: int) -> None:
    """Note that the host whose namespace ``pid`` is in drops RoCE at ingress."""
    os.makedirs(SINK_DIR, exist_ok=True)
    with open(_path(pid), "w"):
        pass


def unmark(pid: int) -> None:
    """The host no longer drops RoCE at ingress (no error if it was not marked)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(_path(pid))
    with contextlib.suppress(OSError):  # the last one out removes the folder
        os.rmdir(SINK_DIR)


def stale() -> list[int]:
    """PIDs of markers whose process is gone (a run killed mid-replay left them)."""
    try:
        names = os.listdir(SINK_DIR)
    except FileNotFoundError:
        return []
    return [int(n) for n in names if n.isdigit() and not os.path.exists(f"/proc/{n}")]


def sinking(pid: int) -> bool:
    """Whether the host whose namespace ``pid`` is in drops RoCE at ingress now."""
    return os.path.exists(_path(pid))
