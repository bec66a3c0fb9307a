"""A cut fibre: ``Lab.set_link(..., up=False)`` takes both ends down, so both switches see it."""

from __future__ import annotations

from typing import Any

from testbed.faultspec import link_ends
from testbed.shell.faults._base import Handle


def apply(inj: Any, handle: Handle) -> None:
    link, lane = inj._link_target(handle)
    handle.info["was_up"] = [inj._admin_up(n, i, h) for n, i, h in
                             link_ends(inj.plan, link)]
    inj.lab.set_link(link.a, link.b, up=False, lane=lane)


def revert(inj: Any, handle: Handle) -> dict[str, Any]:
    link, lane = handle.info["link"], handle.info["lane"]
    was = handle.info["was_up"]
    if all(was):
        inj.lab.set_link(link.a, link.b, up=True, lane=lane)
    else:  # only ends that were up before come back up
        for (node, intf, in_host), up in zip(link_ends(inj.plan, link), was, strict=True):
            if up:
                inj._sh(["ip", "link", "set", "dev", intf, "up"], node if in_host else None)
    return {}
