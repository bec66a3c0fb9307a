"""A dirty optic or a failed SerDes lane: one cable runs at ``fraction`` of its rate."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import number

TARGET = "link"
ORDER = 30  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("slow",)  # the lane carries less than its rate; its queue holds
EFFECT = "slows"
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


_RATE = re.compile(r"\brate (?P<num>[0-9.]+)(?P<unit>[KMGT]?)bit\b")
_UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_htb_rate(tc_class_show: str) -> float | None:
    """Rate in Mb/s of the first HTB class in ``tc class show`` output (None if none)."""
    m = _RATE.search(tc_class_show)
    return None if m is None else float(m["num"]) * _UNITS[m["unit"]] / 1e6
