"""A dirty optic or a failed SerDes lane: one cable runs at ``fraction`` of its rate."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import number

TARGET = "link"
ORDER = 30  # where it lists among the kinds, and draws in a schedule
SEVERITIES = ("gray", "hard")


@dataclass(frozen=True)
class Settings:
    """The new rate as a fraction of the configured one."""

    fraction: float = 0.25

    def __post_init__(self) -> None:
        number("fraction", self.fraction, low=0.0, high=1.0, low_open=True, high_open=True,
               why="link-degrade sets the rate to fraction x the configured rate")


SETTINGS = Settings


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """Gray: 50-90% of the rate (a port running on some of its lanes: 3 of 4 is 0.75);
    hard: down to 10-50%."""
    if severity == "gray":
        return {"fraction": round(rng.uniform(0.5, 0.9), 3)}
    return {"fraction": round(rng.uniform(0.1, 0.5), 3)}
