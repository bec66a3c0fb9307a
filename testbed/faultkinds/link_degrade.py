"""A dirty optic or a failed SerDes lane: one cable runs at ``fraction`` of its rate."""

from __future__ import annotations

import random
from typing import Any

TARGET = "link"


def random_knobs(rng: random.Random, span: float) -> dict[str, Any]:
    """Down to 10-50% of the rate."""
    return {"fraction": round(rng.uniform(0.1, 0.5), 3)}
