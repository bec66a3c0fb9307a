"""A bad hardware table entry: drop rules for some UDP source ports on one switch's bridge."""

from __future__ import annotations

from typing import Any

from testbed.faultkinds.partial_blackhole import (
    add_command,
    delete_command,
    flow_lines,
    port_matches,
)
from testbed.faultmarks import OF_COOKIE
from testbed.shell.cleanup import blackhole_rules
from testbed.shell.faults import FaultContext, FaultError, Handle


def apply(ctx: FaultContext, handle: Handle) -> None:
    sw = handle.fault.target
    knobs = handle.fault.settings
    sh = ctx.on(sw)
    if blackhole_rules(sh, sw):
        raise FaultError(f"partial-blackhole: {sw} already holds rules with cookie "
                         f"{OF_COOKIE:#x} (left by a crashed run? `astral-lab clean` "
                         "removes them)")
    matches = port_matches(knobs.share, knobs.seed)
    handle.info.update(switch=sw, matches=matches)
    try:
        sh(add_command(sw), stdin=flow_lines(matches))
        got = sorted((v, m) for v, m, _ in blackhole_rules(sh, sw))
        if got != sorted(matches):
            raise FaultError(f"partial-blackhole: {sw} reads back rules {got} after "
                             f"adding {matches}")
    except BaseException:
        sh(delete_command(sw), check=False)
        raise
    handle.info["detail"] = {"share": knobs.share, "seed": knobs.seed,
                             "udp_src": [f"{v:#x}/{m:#x}" for v, m in matches]}


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    sw = handle.info["switch"]
    sh = ctx.on(sw)
    rules = blackhole_rules(sh, sw)
    sh(delete_command(sw))
    left = blackhole_rules(sh, sw)
    if left:
        raise FaultError(f"partial-blackhole: {sw} still holds {len(left)} rule(s) with "
                         f"cookie {OF_COOKIE:#x} after undo")
    # fewer rules than added: something deleted them while the fault was on
    return {"dropped": sum(p for _, _, p in rules), "rules": len(rules),
            "rules_added": len(handle.info["matches"])}
