"""Is the fabric cabled as planned? What the controller sends and reads to find out.

Counters cannot see a miswired cable: every port is up and every packet arrives, only at
another switch than the plan says. So the controller asks the cables themselves, as
LLDP discovery does (Faucet, Ryu's ``--observe-links``): one identifiable frame leaves
each end of every switch-to-switch link of the plan (a packet-out of the plan's port
number), and every switch hands such a frame back to the controller (a packet-in, by one
rule per switch, ``trap_entry``) with the port it came in by. The frames and the answers
travel over the OpenFlow connections the controller already holds: a check costs a few
hundred small messages, no process and no change to any switch's rules.

This module is the pure half: which ends send (``probe_ends``), the frames (numbered,
and stamped with the check they belong to, so a late copy of an earlier check is not
read as this one's), and the trap rule as a flow-table entry. ``controllers.shell.app``
sends and reads them; ``testbed.wiring`` compares the answer with the plan.
"""

from __future__ import annotations

from controllers.flowtable import Entry
from vocab.plan import WiringPlan

#: IEEE 802 local experimental ethertype: no host stack or route of the controller's takes it.
ETHERTYPE = 0x88B5
#: The trap rule's cookie: not one of the routes' (``flowtable.OWN_COOKIES``), so the
#: controller's read-back sync leaves it alone, nor fault injection's.
COOKIE_TRAP = 0xA57FF0A1
#: Above every route of the controller's and every rule of fault injection's.
PRIORITY = 65000
#: A probe's destination MAC: a locally administered unicast prefix, then the check's
#: number (one byte) and the probe's (two bytes).
MAC_PREFIX = bytes.fromhex("0ea577")
SRC_MAC = bytes.fromhex("0ea577ffffff")
FRAME_LEN = 60  # the Ethernet minimum, zero padded
MAX_PROBES = 1 << 16


def probe_ends(plan: WiringPlan) -> list[tuple[str, int]]:
    """Each end of every link between two switches, in plan order: the (switch, port)
    a probe leaves by. A probe's number is its index in this list."""
    switches = {s.name for s in plan.switches}
    out: list[tuple[str, int]] = []
    for ln in plan.links:
        if ln.a in switches and ln.b in switches:
            out += [(ln.a, ln.a_port), (ln.b, ln.b_port)]
    if len(out) > MAX_PROBES:
        raise ValueError(f"{len(out)} switch link ends: a check numbers at most {MAX_PROBES}")
    return out


def frame(check: int, n: int) -> bytes:
    """Probe ``n`` of check number ``check`` (modulo 256) as an Ethernet frame."""
    if not 0 <= n < MAX_PROBES:
        raise ValueError(f"probe number must be in [0, {MAX_PROBES}) (got {n})")
    head = MAC_PREFIX + bytes([check % 256]) + n.to_bytes(2, "big") + SRC_MAC \
        + ETHERTYPE.to_bytes(2, "big")
    return head.ljust(FRAME_LEN, b"\0")


def read_frame(data: bytes) -> tuple[int, int] | None:
    """``(check modulo 256, probe number)`` of a probe frame; None for any other frame."""
    if len(data) < 14 or data[:3] != MAC_PREFIX or data[6:12] != SRC_MAC \
            or int.from_bytes(data[12:14], "big") != ETHERTYPE:
        return None
    return data[3], int.from_bytes(data[4:6], "big")


def trap_entry(controller_port: int) -> Entry:
    """The rule on every switch that hands each probe frame to the controller.
    ``controller_port``: the OpenFlow reserved port CONTROLLER of the switch's version."""
    return Entry(priority=PRIORITY, match=(("eth_type", ETHERTYPE),),
                 actions=(("output", controller_port),), cookie=COOKIE_TRAP)
