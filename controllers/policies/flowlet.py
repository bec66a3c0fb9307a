"""A QP takes a new entropy value after an idle gap of at least ``gap_rtts`` base RTTs.

LetFlow at the host: packets of a burst keep one path (no reordering as long as the gap
exceeds the difference between paths' delays); after a pause long enough for the old
path's packets to have arrived, the next burst may take another. How often a QP pauses
decides everything: a sender serving many QPs round-robin spaces each QP's packets, and
with few packets in flight per path those spaces are already gaps.
"""

from __future__ import annotations

from collections.abc import Mapping

from controllers.flows import Flow
from controllers.paths import Path, PathFinder
from controllers.policies import ModelContext

PINS = False
RANDOM = True
ENTROPY = "flowlet"
OPTIONS = {"gap_rtts": 2.0}
WHATIF = None


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    raise NotImplementedError("flowlet's flow model is being written")
