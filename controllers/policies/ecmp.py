"""Switches hash each packet's 5-tuple onto one of their equal-cost ports, as they do unaided.

No per-flow state: the controller installs destination routes over select groups and the
switches pick a port by hashing (for RoCEv2 the UDP source port is the entropy). Cheap and
blind to load: two large flows that hash onto one lane share it while the next lane idles.
"""

from __future__ import annotations

from collections.abc import Mapping

from controllers.paths import Path, PathFinder
from controllers.policies import ModelContext
from vocab.flows import Flow

ORDER = 10  # where it lists among the policies (vocab.plugins.listing_key)
PINS = False
RANDOM = True
METHOD = "lb.ecmp_assign (hash per flow)"
PUBLISHED = ('random hashing of n flows onto n paths leaves about 1/e of them idle; DeepEP '
             'users on RoCE saw "huge" degradation with default ECMP')
SOURCE = ('Hedera (NSDI 2010); DeepEP issue #82')
DIFFERS = ("OVS dp_hash is another hash than the model's, so they agree in distribution, not "
           'draw by draw')
WHATIF = "hash"


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    """The path each flow's hash picks at every switch (``lb.ecmp_path``, seeded)."""
    return ctx.ecmp()
