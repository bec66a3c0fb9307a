"""Bit errors on a link: IPv4 frames leave one cable's ends with a bad header checksum, at random.

Realised like gray-loss, at each end's netdev egress hook (both ways along the link), but
the frame is sent on: an nft payload statement XORs its IPv4 header checksum
(``nft_corruption_script``). Switches forward it, as OVS checks no IP checksum, and the
receiving host's IP layer drops it and counts it (``Ip: InHdrErrors``, ``IpExt:
InCsumErrors``), where a NIC would count a bad FCS or ICRC. A receiver that reads raw
frames from a packet ring (the compiled replay's) sees the frame before IP does and does
not notice; a UDP socket, ping and the probe streams do.
"""

from __future__ import annotations

from typing import Any

from testbed.faultkinds.corruption import nft_corruption_script
from testbed.faultmarks import CORRUPT_TABLE, NFT_FAMILY, link_table
from testbed.faultspec import Fault, sending_ends
from testbed.shell.cleanup import fault_leftovers
from testbed.shell.faults import FaultContext, FaultError, Handle


def check(ctx: FaultContext, fault: Fault) -> None:
    ctx.require_nft("corruption", lambda dev: (
        [], nft_corruption_script(dev, 0.5, link_table(CORRUPT_TABLE, dev))))


def apply(ctx: FaultContext, handle: Handle) -> None:
    link, _lane = ctx.link_target(handle)
    p = handle.fault.settings.probability
    ends = handle.info["ends"] = []
    try:
        for way, node, intf, _in_host in sending_ends(ctx.plan, link, "both"):
            end = {"way": way, "where": node, "intf": intf,
                   "table": link_table(CORRUPT_TABLE, intf)}
            ends.append(end)
            ctx.sh(["nft", "-f", "-"], end["where"],
                   stdin=nft_corruption_script(intf, p, end["table"]))
    except BaseException:
        _remove(ctx, handle)
        raise
    handle.info["detail"] = {"probability": p, "interfaces": [e["intf"] for e in ends]}


def _remove(ctx: FaultContext, handle: Handle) -> list[str]:
    """Delete every end's table; those still there after."""
    left = []
    for end in handle.info["ends"]:
        ctx.sh(["nft", "delete", "table", NFT_FAMILY, end["table"]], end["where"], check=False)
        left += [x for x in fault_leftovers(ctx.sh, end["where"])
                 if x.endswith(f" {end['table']}")]
    return left


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    corrupted = {e["way"]: ctx.nft_counters(e["table"], e["where"]).get("egress", 0)
                 for e in handle.info["ends"]}
    left = _remove(ctx, handle)
    if left:
        raise FaultError(f"corruption on {handle.component}: still present after undo: {left}")
    return {"corrupted": corrupted}
