"""A flapping optic: the cable goes down and up every ``period/2`` s, ``count`` times."""

from __future__ import annotations

from typing import Any

from testbed.shell.faults._base import FaultError, Handle, _pause


def apply(inj: Any, handle: Handle) -> None:
    link, _lane = inj._link_target(handle)
    if not inj._link_up(link):
        raise FaultError(f"link-flap: {handle.component} is down already; a flap needs "
                         "a link that is up")
    handle.info["down"] = False
    handle.info["detail"] = {"period": handle.fault.period, "count": handle.fault.count}


def revert(inj: Any, handle: Handle) -> dict[str, Any]:
    if handle.info.get("down"):
        link, lane = handle.info["link"], handle.info["lane"]
        inj.lab.set_link(link.a, link.b, up=True, lane=lane)
        handle.info["down"] = False
    return {}


def worker(inj: Any, handle: Handle) -> None:
    """The flapping itself (the injector undoes the fault when it returns)."""
    f = handle.fault
    link, lane = handle.info["link"], handle.info["lane"]
    half = f.period / 2
    for i in range(f.count):
        if i and _pause(handle._stop, half, handle._clock):  # up phase of the last cycle
            return
        if handle._stop.is_set():
            return
        inj.lab.set_link(link.a, link.b, up=False, lane=lane)
        handle.info["down"] = True
        inj._event(handle, "flap-down", cycle=i + 1)
        if _pause(handle._stop, half, handle._clock):
            return
        inj.lab.set_link(link.a, link.b, up=True, lane=lane)
        handle.info["down"] = False
        inj._event(handle, "flap-up", cycle=i + 1)
    _pause(handle._stop, half, handle._clock)
