"""A flapping optic or a loose connector: one cable goes down and up again, ``count`` times."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import number, whole

TARGET = "link"


@dataclass(frozen=True)
class Settings:
    """Down and up every ``period / 2`` seconds, ``count`` times."""

    period: float = 1.0
    count: int = 3

    def __post_init__(self) -> None:
        number("period", self.period, low=0.0, low_open=True)
        whole("count", self.count, 1)


SETTINGS = Settings


def validate(fault: Any) -> None:
    """A flap's length is its cycles, not a duration."""
    if fault.duration is not None:
        raise ValueError("duration: a link-flap lasts count x period; leave duration "
                         "None and set period and count")


def span(fault: Any) -> float:
    return fault.settings.period * fault.settings.count


def random_knobs(rng: random.Random, span: float) -> dict[str, Any]:
    """2-4 flaps filling the span."""
    count = rng.randint(2, 4)
    return {"count": count, "period": round(span / count, 3), "duration": None}
