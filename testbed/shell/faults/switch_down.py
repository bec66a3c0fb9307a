"""A switch that loses power: every one of its links that is up goes down, and back after."""

from __future__ import annotations

from typing import Any

from testbed.faultspec import parallel_links
from testbed.shell.faults import FaultContext, Handle
from vocab.plan import Link


def apply(ctx: FaultContext, handle: Handle) -> None:
    sw = handle.fault.target
    taken: list[tuple[Link, int]] = []
    handle.info["taken"] = taken
    links = [ln for ln in ctx.plan.links if sw in (ln.a, ln.b)]
    try:
        for link in links:
            lane = parallel_links(ctx.plan, link.a, link.b).index(link)
            if ctx.link_up(link):
                ctx.lab.set_link(link.a, link.b, up=False, lane=lane)
                taken.append((link, lane))
    except BaseException:
        revert(ctx, handle)
        raise
    handle.info["detail"] = {"links_down": len(taken), "links": len(links)}


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    for link, lane in reversed(handle.info["taken"]):
        ctx.lab.set_link(link.a, link.b, up=True, lane=lane)
    return {"links_up": len(handle.info["taken"])}
