"""The controller measures and moves the largest flows off hot links (Hedera-style).

It does not know the job: flows start where ECMP's hash would put them, pinned so they
can be measured and moved; every poll ``lb.AdaptivePolicy`` moves the largest flows off
links above the utilisation threshold to the least-loaded alternative (global first fit,
NSDI 2010), with hysteresis and a hold time so paths do not flap.
"""

from __future__ import annotations

from collections.abc import Mapping

from controllers import lb
from controllers.paths import Path, PathFinder
from controllers.policies import ModelContext
from vocab.flows import Flow

ORDER = 40  # where it lists among the policies (vocab.plugins.listing_key)
PINS = True
POLLS = True
RANDOM = True
METHOD = "lb.simulate_adaptive (final paths)"
NOTE = "paths where the adaptive policy settles (fluid, from ECMP); moves during the job are " \
       "not modelled"
PUBLISHED = ("global first fit recovers most of ECMP's loss for long flows")
SOURCE = ('Hedera (NSDI 2010)')
DIFFERS = ("moves come after the controller's 1 s polls (hold 3 polls): a job of a few "
           'seconds runs its first seconds at ECMP speed')
WHATIF = None


def place(flows: list[Flow], finder: PathFinder, current: Mapping[Flow, Path]
          ) -> Mapping[Flow, Path]:
    """Keep every flow where it is; a new flow starts on its ECMP path."""
    out = dict(current)
    for f in flows:
        if f not in out:
            out[f] = lb.ecmp_path(f, finder)
    return out


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    """Where the polling settles, started from the same hash draw as ``ecmp``."""
    return lb.simulate_adaptive(flows, finder, seed=ctx.seed, start=ctx.ecmp(), **ctx.options)
