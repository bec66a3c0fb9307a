"""A bad hardware table entry: drop rules for some UDP source ports on one switch's bridge."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

from testbed.faultkinds.partial_blackhole import (
    OF_COOKIE,
    add_command,
    delete_command,
    dump_command,
    flow_lines,
    parse_rules,
    port_matches,
)
from testbed.shell.cleanup import root_sh, tagged_bridges
from testbed.shell.faults import FaultContext, FaultError, Handle
from testbed.shell.procs import run


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


def blackhole_rules(sh: Callable[..., subprocess.CompletedProcess[str]], bridge: str
                    ) -> list[tuple[int, int, int]]:
    """The partial-blackhole rules on ``bridge`` (``sh`` runs a command in the root
    namespace): ``(value, mask, packets dropped)`` each; none if the bridge cannot be read."""
    proc = sh(dump_command(bridge), check=False)
    return parse_rules(proc.stdout) if proc.returncode == 0 else []


def clean_crashed(theirs: Callable[[str], bool]) -> dict[str, int]:
    """Delete this kind's rules (``OF_COOKIE``) from the bridges of the runs ``theirs``
    accepts (a bridge's tag names its run): a bridge that outlived its run's injector."""
    switches = 0
    for bridge, run_id in tagged_bridges().items():
        if theirs(run_id) and blackhole_rules(root_sh, bridge):
            run(delete_command(bridge))
            switches += 1
    return {"switches": switches}
