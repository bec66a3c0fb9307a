"""Each peer gets several QPs (qps) and every message is striped over them; switches hash each QP.

QP scaling, as DeepEP's ``num_qps_per_rank`` or Meta's RoCE fabric with E-ECMP do it:
more flows with their own source ports give the hash more chances, so the biggest
collision shrinks roughly as balls-into-bins with ``qps`` times as many balls. Nothing
changes in the switches; the host opens more QPs (``expand``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from controllers.paths import Path, PathFinder
from controllers.policies import ModelContext, stripe
from vocab.flows import Flow
from vocab.validate import count

PINS = False
RANDOM = True
OPTIONS = {"qps": 4}
#: past a thousand QPs per peer the flows opened outgrow what a host, or the model, holds
RULES = {"qps": count(1, 1024)}
METHOD = "lb.ecmp_assign over the striped QPs (hash per QP)"
PUBLISHED = ('more QPs per peer give the hash more chances: up to +40% on AllReduce with '
             'E-ECMP; MegaScale split 400G NIC ports into 2x200G to cut collisions')
SOURCE = ('Meta RoCE fabric (SIGCOMM 2024); MegaScale (NSDI 2024)')
DIFFERS = ('the gain is balls-into-bins: with many flows per lane (all-to-all) the hash '
           'already averages out, with one flow per lane (permutation) more QPs help most')
WHATIF = None


def expand(flows: Sequence[Any], options: Mapping[str, float]) -> list[Any]:
    """Every flow striped over ``qps`` QPs with their own source ports."""
    return stripe(flows, int(options["qps"]))


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    """The hash of every striped QP (the flow model passes the expanded flows)."""
    return ctx.ecmp()
