"""A gray link: a dirty optic or a marginal lane loses a small share of frames at random."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import LINK_DIRECTIONS, number
from testbed.faultkinds._loss import draw_probability

TARGET = "link"
ORDER = 50  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("loss",)  # frames vanish on the cable
EFFECT = "drops"
#: Degraded (the fail-slow loss production fault-finders must catch) and obvious.
SEVERITIES = ("gray", "hard")


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


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """Gray 0.05-1% or hard 2-10% loss, one way or both (real gray links are often one
    fibre of the pair)."""
    return {"probability": draw_probability(rng, severity),
            "direction": rng.choice(LINK_DIRECTIONS)}
