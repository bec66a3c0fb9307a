"""A dirty optic or a failed SerDes lane: the HTB rate of both ends cut to ``fraction``."""

from __future__ import annotations

from typing import Any

from testbed.faultspec import Fault, link_ends, parse_htb_rate
from testbed.shaping import htb_commands
from testbed.shell.faults._base import FaultError, Handle
from vocab.plan import Link, WiringPlan


# ----------------------------------------------------------------------------------------
# link-degrade's tc commands (derived from the lab's own shaping, hence here)
# ----------------------------------------------------------------------------------------
def htb_rate_command(dev: str, mbps: float) -> list[str]:
    """``tc class change`` of the lab's HTB class 5:1 on ``dev`` to ``mbps``.

    Built from ``testbed.shell.lab.htb_commands`` (its ``class add`` line, verb changed) so
    burst and quantum stay exactly what bring-up used; only the rate differs.
    """
    add = next(c for c in htb_commands(dev, mbps) if c.startswith("class add "))
    return ["tc", *("class change " + add[len("class add "):]).split()]


def degrade_commands(plan: WiringPlan, link: Link, mbps: float
                     ) -> list[tuple[str | None, list[str]]]:
    """The commands that set both ends of ``link`` to ``mbps``: ``(host or None, argv)``.

    ``host`` names the namespace a host-side end lives in; None is the root namespace
    (switch ports).
    """
    return [(node if in_host else None, htb_rate_command(intf, mbps))
            for node, intf, in_host in link_ends(plan, link)]


# ----------------------------------------------------------------------------------------
# The fault
# ----------------------------------------------------------------------------------------
def check(inj: Any, fault: Fault) -> None:
    if not getattr(inj.lab, "shape", True):
        raise FaultError("link-degrade changes the links' HTB rate, but this lab was "
                         "brought up without shaping (Lab(shape=False))")


def apply(inj: Any, handle: Handle) -> None:
    link, _lane = inj._link_target(handle)
    ends = link_ends(inj.plan, link)
    before = [inj._class_show(*end) for end in ends]
    old = [parse_htb_rate(text) or 0.0 for text in before]
    # restore the plan's exact rate when that is what runs (tc prints rates rounded)
    restore = [link.mbps if abs(r - link.mbps) <= 1e-3 * link.mbps else r for r in old]
    new = [r * handle.fault.fraction for r in restore]
    handle.info.update(before=before, restore=restore, changed=[])
    try:
        for end, mbps in zip(ends, new, strict=True):
            node, intf, in_host = end
            inj._sh(htb_rate_command(intf, mbps), node if in_host else None)
            handle.info["changed"].append(end)
            got = parse_htb_rate(inj._class_show(*end)) or 0.0
            if abs(got - mbps) > 0.01 * mbps:
                raise FaultError(f"link-degrade: {intf} reads back {got:g} Mb/s after "
                                 f"setting {mbps:g}")
    except BaseException:
        inj._restore_rates(handle)
        raise
    handle.info["detail"] = {"mbps_before": restore, "mbps": [round(m, 6) for m in new]}


def revert(inj: Any, handle: Handle) -> dict[str, Any]:
    after = inj._restore_rates(handle)
    for was, now, mbps in zip(handle.info["before"], after, handle.info["restore"],
                              strict=True):
        got = parse_htb_rate(now) or 0.0
        # exact when the plan's rate was running; a rate tc printed rounded (6666Kbit)
        # can only come back to within its rounding
        if now != was and abs(got - mbps) > 1e-3 * mbps:
            raise FaultError(f"link-degrade: {handle.component} did not return to its "
                             f"previous class: {was!r} -> {now!r}")
    return {"mbps": handle.info["restore"]}
