"""The controller knows the job's flows and gives each an explicit, balanced path.

A job posts every flow and its bytes (``POST /traffic``); ``lb.plan_assign`` spreads
them so no link carries more than its fair share when a collision-free assignment
exists. On Astral's two-tier fabric that is an edge colouring (Konig's theorem):
same-rail traffic stays under its leaf, cross-leaf flows spread evenly over the lanes.
"""

from __future__ import annotations

from collections.abc import Mapping

from controllers import lb
from controllers.paths import Path, PathFinder
from controllers.policies import ModelContext
from vocab.flows import Flow

ORDER = 30  # where it lists among the policies (vocab.plugins.listing_key)
PINS = True
METHOD = "lb.plan_assign"
PUBLISHED = ('static routes on RoCE gave DeepEP near-InfiniBand results')
SOURCE = ('DeepEP issue #82')
WHATIF = "lanes"


def place(flows: list[Flow], finder: PathFinder, current: Mapping[Flow, Path]
          ) -> Mapping[Flow, Path]:
    """Plan every flow afresh: the plan is a function of the whole job."""
    return lb.plan_assign(flows, finder)


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    """The controller's own plan for the same flows."""
    return lb.plan_assign(flows, finder)
