"""Bit errors on a link: frames arrive with a bad checksum; the receiver drops and counts them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import number
from testbed.faultkinds.gray_loss import draw_probability

TARGET = "link"
ORDER = 60  # where it lists among the kinds, and draws in a schedule
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
