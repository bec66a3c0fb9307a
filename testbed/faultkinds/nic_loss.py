"""A lossy NIC or optic: a host's NIC drops IPv4 frames at random with ``probability``."""

from __future__ import annotations

import random
from typing import Any

TARGET = "host"


def random_knobs(rng: random.Random, span: float) -> dict[str, Any]:
    """2-20% loss."""
    return {"probability": round(rng.uniform(0.02, 0.2), 3)}
