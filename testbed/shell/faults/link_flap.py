"""A flapping optic: the cable goes down and up every ``period/2`` s, ``count`` times."""

from __future__ import annotations

from typing import Any

from testbed.shell.faults import FaultContext, FaultError, Handle


def apply(ctx: FaultContext, handle: Handle) -> None:
    link, _lane = ctx.link_target(handle)
    if not ctx.link_up(link):
        raise FaultError(f"link-flap: {handle.component} is down already; a flap needs "
                         "a link that is up")
    handle.info["down"] = False
    knobs = handle.fault.settings
    handle.info["detail"] = {"period": knobs.period, "count": knobs.count}


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    if handle.info.get("down"):
        link, lane = handle.info["link"], handle.info["lane"]
        ctx.lab.set_link(link.a, link.b, up=True, lane=lane)
        handle.info["down"] = False
    return {}


def worker(ctx: FaultContext, handle: Handle) -> None:
    """The flapping itself (the injector undoes the fault when it returns)."""
    knobs = handle.fault.settings
    link, lane = handle.info["link"], handle.info["lane"]
    half = knobs.period / 2
    for i in range(knobs.count):
        if i and handle.pause(half):  # up phase of the last cycle
            return
        if handle.stopping:
            return
        ctx.lab.set_link(link.a, link.b, up=False, lane=lane)
        handle.info["down"] = True
        ctx.event(handle, "flap-down", cycle=i + 1)
        if handle.pause(half):
            return
        ctx.lab.set_link(link.a, link.b, up=True, lane=lane)
        handle.info["down"] = False
        ctx.event(handle, "flap-up", cycle=i + 1)
    handle.pause(half)
