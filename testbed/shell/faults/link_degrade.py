"""A dirty optic or a failed SerDes lane: the HTB rate of both ends cut to ``fraction``."""

from __future__ import annotations

from typing import Any

from testbed.faultkinds.link_degrade import parse_htb_rate
from testbed.faultspec import Fault, link_ends
from testbed.shaping import htb_commands
from testbed.shell.faults import FaultContext, FaultError, Handle
from vocab.plan import Link, WiringPlan


# ----------------------------------------------------------------------------------------
# link-degrade's tc commands (derived from the lab's own shaping, hence here)
# ----------------------------------------------------------------------------------------
def htb_rate_command(dev: str, mbps: float) -> list[str]:
    """``tc class change`` of the lab's HTB class 5:1 on ``dev`` to ``mbps``.

    Built from ``testbed.shaping.htb_commands`` (its ``class add`` line, verb changed) so
    burst and quantum stay exactly what bring-up used; only the rate differs.
    """
    add = next(c for c in htb_commands(dev, mbps) if c.startswith("class add "))
    return ["tc", *("class change " + add[len("class add "):]).split()]


def degrade_commands(plan: WiringPlan, link: Link, mbps: float
                     ) -> list[tuple[str, list[str]]]:
    """The commands that set both ends of ``link`` to ``mbps``: ``(node, argv)``, each run
    where that node's end lives (``FaultContext.sh``).
    """
    return [(node, htb_rate_command(intf, mbps)) for node, intf, _ in link_ends(plan, link)]


def _class_show(ctx: FaultContext, node: str, intf: str, in_host: bool) -> str:
    """``tc class show`` of the lab's HTB class 5:1 on one end; FaultError if it has none."""
    out = ctx.sh(["tc", "class", "show", "dev", intf, "classid", "5:1"],
                 node).stdout.strip()
    if parse_htb_rate(out) is None:
        raise FaultError(f"link-degrade: {intf} has no HTB class 5:1 (is the lab shaped?): "
                         f"{out[:120]!r}")
    return out


def _restore_rates(ctx: FaultContext, handle: Handle) -> list[str]:
    """Every end this fault changed back to its previous rate; their classes read back."""
    link = handle.info["link"]
    ends = link_ends(ctx.plan, link)
    after = []
    for i, end in enumerate(ends):
        if end not in handle.info["changed"]:
            continue
        node, intf, in_host = end
        ctx.sh(htb_rate_command(intf, handle.info["restore"][i]), node)
        after.append(_class_show(ctx, *end))
    return after


# ----------------------------------------------------------------------------------------
# The fault
# ----------------------------------------------------------------------------------------
def check(ctx: FaultContext, fault: Fault) -> None:
    if not getattr(ctx.lab, "shape", True):
        raise FaultError("link-degrade changes the links' HTB rate, but this lab was "
                         "brought up without shaping (Lab(shape=False))")


def apply(ctx: FaultContext, handle: Handle) -> None:
    link, _lane = ctx.link_target(handle)
    ends = link_ends(ctx.plan, link)
    before = [_class_show(ctx, *end) for end in ends]
    old = [parse_htb_rate(text) or 0.0 for text in before]
    # restore the plan's exact rate when that is what runs (tc prints rates rounded)
    restore = [link.mbps if abs(r - link.mbps) <= 1e-3 * link.mbps else r for r in old]
    new = [r * handle.fault.settings.fraction for r in restore]
    handle.info.update(before=before, restore=restore, changed=[])
    try:
        for end, mbps in zip(ends, new, strict=True):
            node, intf, in_host = end
            ctx.sh(htb_rate_command(intf, mbps), node)
            handle.info["changed"].append(end)
            got = parse_htb_rate(_class_show(ctx, *end)) or 0.0
            if abs(got - mbps) > 0.01 * mbps:
                raise FaultError(f"link-degrade: {intf} reads back {got:g} Mb/s after "
                                 f"setting {mbps:g}")
    except BaseException:
        _restore_rates(ctx, handle)
        raise
    handle.info["detail"] = {"mbps_before": restore, "mbps": [round(m, 6) for m in new]}


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    after = _restore_rates(ctx, handle)
    for was, now, mbps in zip(handle.info["before"], after, handle.info["restore"],
                              strict=True):
        got = parse_htb_rate(now) or 0.0
        # exact when the plan's rate was running; a rate tc printed rounded (6666Kbit)
        # can only come back to within its rounding
        if now != was and abs(got - mbps) > 1e-3 * mbps:
            raise FaultError(f"link-degrade: {handle.component} did not return to its "
                             f"previous class: {was!r} -> {now!r}")
    return {"mbps": handle.info["restore"]}
