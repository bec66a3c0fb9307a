"""Bit errors on a link: frames arrive with a bad checksum; the receiver drops and counts them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import number
from testbed.faultkinds._loss import chance, draw_probability
from testbed.faultmarks import NFT_FAMILY

TARGET = "link"
ORDER = 60  # where it lists among the kinds, and draws in a schedule
#: the receiver finds the bad frames' checksum wrong and drops them: corrupt, and lost to
#: the flow
EVIDENCE = ("loss", "corrupt")
EFFECT = "drops"
#: A few corrupted frames in a thousand (gray) or a few in a hundred (hard).
SEVERITIES = ("gray", "hard")


@dataclass(frozen=True)
class Settings:
    """Each IPv4 frame crossing the link (either way) is corrupted with ``probability``."""

    probability: float = 0.01

    def __post_init__(self) -> None:
        number("probability", self.probability, low=0.0, high=1.0, low_open=True,
               why="corruption gives each IPv4 frame on the link a bad checksum with this "
                   "probability")


SETTINGS = Settings


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """Gray 0.05-1% or hard 2-10% of the frames corrupted (gray-loss's ranges)."""
    return {"probability": draw_probability(rng, severity)}


#: What a corruption XORs into an IPv4 header checksum. Any value but 0x0000 and 0xffff
#: (ones' complement's two zeros) makes the header's sum wrong, whatever the packet.
CORRUPT_XOR = 0x5A5A


def nft_corruption_script(dev: str, probability: float, table: str) -> str:
    """``nft -f`` input: IPv4 frames leaving ``dev`` get a bad header checksum with
    ``probability`` (netdev egress hook).

    nft fixes the checksum of the header a payload statement changes, so a field other
    than the checksum would leave the frame valid; writing the checksum field itself
    stores the new value last (after that fix-up), so the frame leaves with exactly
    ``checksum ^ CORRUPT_XOR``. The receiving host's IP layer drops it and counts it
    (``Ip: InHdrErrors``, ``IpExt: InCsumErrors``), as a NIC counts a bad FCS; switches
    on the way forward it (OVS checks no IP checksum). ARP is untouched.
    """
    return (f"table {NFT_FAMILY} {table} {{\n"
            "  chain egress {\n"
            f'    type filter hook egress device "{dev}" priority -500; policy accept;\n'
            f"    meta protocol ip {chance(probability)}counter "
            f"ip checksum set ip checksum ^ {CORRUPT_XOR:#06x}\n"
            "  }\n"
            "}\n")
