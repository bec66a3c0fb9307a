"""A gray link: a dirty optic or a marginal lane loses a small share of frames at random."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import LINK_DIRECTIONS, number

TARGET = "link"
ORDER = 50  # where it lists among the kinds, and draws in a schedule
#: Degraded (the fail-slow loss production fault-finders must catch) and obvious.
SEVERITIES = ("gray", "hard")
#: The loss probability ``random_knobs`` draws, per severity: 0.05-1% and 2-10%.
RANGES = {"gray": (0.0005, 0.01), "hard": (0.02, 0.10)}


@dataclass(frozen=True)
class Settings:
    """Each IPv4 frame crossing the link ``direction`` is lost with ``probability``."""

    probability: float = 0.01
    direction: str = "both"

    def __post_init__(self) -> None:
        number("probability", self.probability, low=0.0, high=1.0, low_open=True,
               why="gray-loss drops each IPv4 frame on the link with this probability")
        if self.direction not in LINK_DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(LINK_DIRECTIONS)} "
                             f"(got {self.direction!r}): a is the link's lower-tier end")


SETTINGS = Settings


def draw_probability(rng: random.Random, severity: str) -> float:
    """A probability from ``RANGES[severity]``, log-uniform (as likely in each decade: the
    gray range spans twenty times its low end), rounded to 1e-5."""
    if severity not in RANGES:
        raise ValueError(f"severity must be one of {', '.join(RANGES)} (got {severity!r})")
    low, high = RANGES[severity]
    return round(math.exp(rng.uniform(math.log(low), math.log(high))), 5)


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """Gray 0.05-1% or hard 2-10% loss, one way or both (real gray links are often one
    fibre of the pair)."""
    return {"probability": draw_probability(rng, severity),
            "direction": rng.choice(LINK_DIRECTIONS)}
