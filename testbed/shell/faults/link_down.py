"""A cut fibre: ``Lab.set_link(..., up=False)`` takes both ends down, so both switches see it."""

from __future__ import annotations

from typing import Any

from testbed.faultspec import link_ends
from testbed.shell.faults import FaultContext, Handle


def apply(ctx: FaultContext, handle: Handle) -> None:
    link, lane = ctx.link_target(handle)
    handle.info["was_up"] = [ctx.admin_up(n, i, h) for n, i, h in link_ends(ctx.plan, link)]
    ctx.lab.set_link(link.a, link.b, up=False, lane=lane)


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    link, lane = handle.info["link"], handle.info["lane"]
    was = handle.info["was_up"]
    if all(was):
        ctx.lab.set_link(link.a, link.b, up=True, lane=lane)
    else:  # only ends that were up before come back up
        for (node, intf, _in_host), up in zip(link_ends(ctx.plan, link), was, strict=True):
            if up:
                ctx.sh(["ip", "link", "set", "dev", intf, "up"], node)
    return {}
