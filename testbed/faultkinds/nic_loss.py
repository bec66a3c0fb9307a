"""A lossy NIC or optic: a host's NIC drops IPv4 frames at random with ``probability``."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import number

TARGET = "host"
ORDER = 40  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("loss",)  # frames vanish at the NIC
EFFECT = "drops"
SEVERITIES = ("gray", "hard")
#: Which frames a nic-loss drops: those the NIC receives, those it sends, or both.
DIRECTIONS = ("ingress", "egress", "both")


@dataclass(frozen=True)
class Settings:
    """Each IPv4 frame is dropped with ``probability``, in ``direction``."""

    probability: float = 0.1
    direction: str = "both"

    def __post_init__(self) -> None:
        number("probability", self.probability, low=0.0, high=1.0, low_open=True,
               why="nic-loss drops each IPv4 frame with this probability")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)} "
                             f"(got {self.direction!r})")


SETTINGS = Settings


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """Gray: 0.05-1% loss (a marginal optic: retransmissions, no outage); hard: 2-20%."""
    if severity == "gray":
        return {"probability": round(rng.uniform(0.0005, 0.01), 6)}
    return {"probability": round(rng.uniform(0.02, 0.2), 3)}
