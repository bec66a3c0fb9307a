"""A flapping optic: the cable goes down and up ``count`` times, each phase as ``phases`` says."""

from __future__ import annotations

from typing import Any

from testbed.faultkinds.link_flap import phases
from testbed.shell.faults import FaultContext, FaultError, Handle


def apply(ctx: FaultContext, handle: Handle) -> None:
    link, _lane = ctx.link_target(handle)
    if not ctx.link_up(link):
        raise FaultError(f"link-flap: {handle.component} is down already; a flap needs "
                         "a link that is up")
    handle.info["down"] = False
    knobs = handle.fault.settings
    handle.info["detail"] = {"period": knobs.period, "count": knobs.count}
    if knobs.jitter:
        handle.info["detail"].update(jitter=knobs.jitter, seed=knobs.seed)


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    if handle.info.get("down"):
        link, lane = handle.info["link"], handle.info["lane"]
        ctx.lab.set_link(link.a, link.b, up=True, lane=lane)
        handle.info["down"] = False
    return {}


def worker(ctx: FaultContext, handle: Handle) -> None:
    """The flapping itself (the injector undoes the fault when it returns): down for the
    next phase's seconds, up for the one after, ``count`` times. Each edge is due at its
    planned offset from the first, so a slow ``set_link`` delays one edge, not every one
    after it."""
    knobs = handle.fault.settings
    link, lane = handle.info["link"], handle.info["lane"]
    seconds = phases(knobs)
    due = handle.now()
    for i in range(knobs.count):
        if i:  # up phase of the last cycle
            due += seconds[2 * i - 1]
            if handle.pause_until(due):
                return
        if handle.stopping:
            return
        ctx.lab.set_link(link.a, link.b, up=False, lane=lane)
        handle.info["down"] = True
        ctx.event(handle, "flap-down", cycle=i + 1)
        due += seconds[2 * i]
        if handle.pause_until(due):
            return
        ctx.lab.set_link(link.a, link.b, up=True, lane=lane)
        handle.info["down"] = False
        ctx.event(handle, "flap-up", cycle=i + 1)
    handle.pause_until(due + seconds[-1])
