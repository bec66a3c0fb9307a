"""A flapping optic or a loose connector: one cable goes down and up again, ``count`` times.

A clean flap is periodic: down ``period / 2``, up ``period / 2``. A failing connector is
not: with ``jitter`` each down and each up phase lasts ``period / 2 x u``, ``u`` drawn
uniformly in ``[1 - jitter, 1 + jitter]`` by a ``random.Random(seed)``, so the irregular
timing is a pure function of the settings (``phases``): the injector plays it, a test
or a detector's evaluation can compute it, and a schedule is reproducible.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import number, whole

TARGET = "link"
ORDER = 20  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("down",)  # down, up and down again: each transition is a port going down
EFFECT = "down"
INTERMITTENT = True
SEVERITIES = ("gray", "hard")


@dataclass(frozen=True)
class Settings:
    """Down and up every ``period / 2`` seconds, ``count`` times; each phase stretched by a
    factor in ``1 +- jitter`` drawn from ``seed`` (``jitter`` 0: exactly periodic)."""

    period: float = 1.0
    count: int = 3
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        number("period", self.period, low=0.0, low_open=True)
        whole("count", self.count, 1)
        number("jitter", self.jitter, low=0.0, high=1.0, high_open=True,
               why="each phase lasts period/2 x a factor in [1 - jitter, 1 + jitter]")
        whole("seed", self.seed, 0)


SETTINGS = Settings


def phases(settings: Settings) -> list[float]:
    """Seconds of each phase in turn: down, up, down, up, ... (``2 x count`` of them)."""
    half = settings.period / 2
    if not settings.jitter:
        return [half] * (2 * settings.count)
    rng = random.Random(settings.seed)
    j = settings.jitter
    return [half * rng.uniform(1 - j, 1 + j) for _ in range(2 * settings.count)]


def validate(fault: Any) -> None:
    """A flap's length is its cycles, not a duration."""
    if fault.duration is not None:
        raise ValueError("duration: a link-flap lasts its count cycles of period (jittered); "
                         "leave duration None and set period and count")


def span(fault: Any) -> float:
    knobs = fault.settings
    return knobs.period * knobs.count if not knobs.jitter else sum(phases(knobs))


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """Hard: 2-4 regular flaps filling the span. Gray: 2-3 flaps whose phases are
    stretched or shortened by up to 30-70% (a connector that drops now and then, at no
    steady rhythm), the period chosen so the flapping fills but does not pass the span."""
    if severity != "gray":
        count = rng.randint(2, 4)
        return {"count": count, "period": round(span / count, 3), "duration": None}
    count = rng.randint(2, 3)
    jitter = round(rng.uniform(0.3, 0.7), 3)
    seed = rng.randrange(1 << 16)
    unit = sum(phases(Settings(period=1.0, count=count, jitter=jitter, seed=seed)))
    period = max(math.floor(span / unit * 1000) / 1000, 0.001)
    return {"count": count, "period": period, "jitter": jitter, "seed": seed,
            "duration": None}
