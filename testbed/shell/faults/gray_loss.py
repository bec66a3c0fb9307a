"""A gray link: IPv4 frames lost at random on one cable, dropped where the sending end transmits.

A frame going a->b is lost at a's interface, on the netdev *egress* hook: that is the
last point before the wire for every sender here. A switch port is a veth in the root
namespace that ovs-vswitchd writes through an AF_PACKET socket, and the kernel datapath
sends through ``dev_queue_xmit`` too: both pass the egress hook. An ingress hook on the
receiving port would come too late for the userspace switch, whose AF_PACKET tap has
taken its copy by then. Lost frames are forwarded into the end's own sink veth rather
than dropped: a drop at egress returns ``ENOBUFS`` to the sender, and ovs-vswitchd then
stops sending the rest of its ``sendmmsg`` batch, which would lose more than the knob says.
"""

from __future__ import annotations

from typing import Any

from testbed.faultkinds._loss import nft_loss_commands
from testbed.faultmarks import LOSS_TABLE, link_sink, link_table
from testbed.faultspec import Fault, sending_ends
from testbed.shell.cleanup import fault_leftovers
from testbed.shell.faults import FaultContext, FaultError, Handle


def _commands(dev: str, probability: float) -> tuple[list[list[str]], str, list[list[str]]]:
    """nic-loss's egress commands with this end's own table and sink."""
    return nft_loss_commands(dev, probability, "egress", table=link_table(LOSS_TABLE, dev),
                             sink=link_sink(dev))


def check(ctx: FaultContext, fault: Fault) -> None:
    ctx.require_nft("gray-loss", lambda dev: _commands(dev, 0.5)[:2])


def apply(ctx: FaultContext, handle: Handle) -> None:
    link, _lane = ctx.link_target(handle)
    knobs = handle.fault.settings
    ends = handle.info["ends"] = []
    try:
        for way, node, intf, _in_host in sending_ends(ctx.plan, link, knobs.direction):
            where = node
            setup, script, undo = _commands(intf, knobs.probability)
            ends.append({"way": way, "where": where, "intf": intf,
                         "table": link_table(LOSS_TABLE, intf), "undo": undo})
            for argv in setup:
                ctx.sh(argv, where)
            ctx.sh(["nft", "-f", "-"], where, stdin=script)
    except BaseException:
        _remove(ctx, handle)
        raise
    handle.info["detail"] = {"probability": knobs.probability, "direction": knobs.direction,
                             "interfaces": [e["intf"] for e in ends]}


def _remove(ctx: FaultContext, handle: Handle) -> list[str]:
    """Delete every end's table and sink; what of them is still there after."""
    left = []
    for end in handle.info["ends"]:
        for argv in end["undo"]:
            ctx.sh(argv, end["where"], check=False)
        mine = (end["table"], link_sink(end["intf"])[0])
        left += [x for x in fault_leftovers(ctx.sh, end["where"])
                 if x.rsplit(" ", 1)[-1] in mine]
    return left


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    dropped = {e["way"]: ctx.nft_counters(e["table"], e["where"]).get("egress", 0)
               for e in handle.info["ends"]}
    left = _remove(ctx, handle)
    if left:
        raise FaultError(f"gray-loss on {handle.component}: still present after undo: {left}")
    return {"dropped": dropped}
