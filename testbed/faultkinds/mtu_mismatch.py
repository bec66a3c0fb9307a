"""A port left at a smaller MTU than the fabric: full-size frames into it are dropped.

The lab gives every interface the MTU that carries its RoCE path MTU (4,096-byte
payloads: ``traffic.roce.mtu_for``). One switch port set lower (a port left at the
default 1,500 after a change, or set for a smaller IB MTU) drops every frame longer than
its MTU that arrives on it, silently, while pings and small frames pass: RoCE messages
that need full-size frames stall, the path looks healthy.

On veth pairs the receiving end is where the MTU bites (the kernel drops an arriving
frame above it and counts it in both ends' dropped counters), while the userspace switch
still sends frames above its port's MTU. So the fault lowers one end, the upper-tier one
(``lowered_end``: the spine of a lane, the leaf of a NIC cable), and breaks the frames
travelling *toward* it. Why no gray severity: every MTU under the largest frame drops
every full-size FIRST and MIDDLE frame of a message, and a reliable connection that loses
one packet of each message retries it forever, so any smaller MTU is a hard fault.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from vocab.plan import Link

TARGET = "link"
ORDER = 90  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("errors",)  # frames above the MTU are refused at the port and counted there
EFFECT = "drops"
SEVERITIES = ("hard",)
#: Start of the alias (``ip link set dev X alias``) of a switch port whose MTU this kind
#: lowered: ``<MTU_MARK> run=<run id> <intf>=<mtu> ...``, the run and the MTUs to restore
#: (the port's and its bridge's internal port's), for a crashed run.
MTU_MARK = "astral-lab-fault-mtu"

#: The MTUs a fault may set: from IPv4's minimum datagram to a jumbo frame.
MIN_MTU, MAX_MTU = 576, 9216


@dataclass(frozen=True)
class Settings:
    """The lowered end's MTU (bytes of IP packet, as ``ip link`` counts)."""

    mtu: int = 1500

    def __post_init__(self) -> None:
        if (isinstance(self.mtu, bool) or not isinstance(self.mtu, int)
                or not MIN_MTU <= self.mtu <= MAX_MTU):
            raise ValueError(f"mtu must be an integer in [{MIN_MTU}, {MAX_MTU}] (got "
                             f"{self.mtu!r}): mtu-mismatch sets one end of a link to it")


SETTINGS = Settings


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """The usual culprits: the default 1,500, an MTU set for IB MTU 2048, or the IB MTU
    4,096 itself typed as the Ethernet MTU (a few bytes short of the full frames)."""
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {', '.join(SEVERITIES)} (got {severity!r})")
    return {"mtu": rng.choice((1500, 2200, 4096))}


def lowered_end(link: Link) -> tuple[str, str]:
    """``(switch, interface)`` of the end whose MTU is lowered: the upper-tier end (``b``),
    always a switch port in the root namespace."""
    return link.b, link.b_intf


def mtu_command(intf: str, mtu: int) -> list[str]:
    return ["ip", "link", "set", "dev", intf, "mtu", str(mtu)]


def mark(run_id: str, restore: dict[str, int]) -> str:
    """The alias that marks a lowered port: its run and the MTUs to put back, so
    ``astral-lab clean`` can undo a crashed run's fault."""
    return " ".join([MTU_MARK, f"run={run_id}", *(f"{n}={m}" for n, m in restore.items())])


def parse_mark(alias: str) -> tuple[str, dict[str, int]] | None:
    """``(run id, {interface: MTU})`` of a ``mark``; None for any other alias."""
    words = (alias or "").split()
    if not words or words[0] != MTU_MARK or len(words) < 2 or not words[1].startswith("run="):
        return None
    restore = {}
    for word in words[2:]:
        name, _, mtu = word.rpartition("=")
        if not name or not mtu.isdigit():
            return None
        restore[name] = int(mtu)
    return words[1][len("run="):], restore
