"""A flapping optic or a loose connector: one cable goes down and up again, ``count`` times."""

from __future__ import annotations

import random
from typing import Any

TARGET = "link"


def validate(fault: Any) -> None:
    """A flap's length is its cycles, not a duration."""
    if fault.duration is not None:
        raise ValueError("duration: a link-flap lasts count x period; leave duration "
                         "None and set period and count")


def span(fault: Any) -> float:
    return fault.period * fault.count


def random_knobs(rng: random.Random, span: float) -> dict[str, Any]:
    """2-4 flaps filling the span."""
    count = rng.randint(2, 4)
    return {"count": count, "period": round(span / count, 3), "duration": None}
