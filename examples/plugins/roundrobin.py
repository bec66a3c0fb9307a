"""Pins the flows between two leaves on their minimal paths in turn, ignoring their sizes.

A worked example of a load-balancing policy in one file (docs/extending.md): copy it to
``controllers/policies/roundrobin.py`` and ``roundrobin`` is a mode of the controller
(``--lb roundrobin``, ``PUT /lb``, ``Lab(lb="roundrobin")``), a policy of the flow model
(``astral-lab model ... --lb roundrobin``) and a row of ``astral-lab policies``.

Between ECMP and planned: like planned it needs the job's flows (the replay posts them,
because ``PINS`` is set) and spreads them evenly by count; like ECMP it does not look at
bytes, so where flows differ in size a busy path can still get the large ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from controllers.paths import Path, PathFinder
from controllers.policies import ModelContext
from vocab.flows import Flow

PINS = True  # the controller gives every posted flow the path place() returns
METHOD = "round-robin over each pair's minimal paths"


def _turns(flows: list[Flow], finder: PathFinder) -> dict[Flow, Path]:
    """Flows in a fixed order; the k-th flow between two attach switches (leaves) takes
    path k mod n of its candidates (their trunks are the same for every host pair)."""
    taken: dict[tuple[str, str], int] = defaultdict(int)
    out = {}
    for f in sorted(flows):
        pair = (finder.attach(f.src), finder.attach(f.dst))
        paths = finder.paths(f.src, f.dst)
        out[f] = paths[taken[pair] % len(paths)]
        taken[pair] += 1
    return out


def place(flows: list[Flow], finder: PathFinder, current: Mapping[Flow, Path]
          ) -> Mapping[Flow, Path]:
    """The controller's paths: every flow afresh (the turns depend on the whole job)."""
    return _turns(flows, finder)


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    """The flow model's view: the same paths the controller would pin."""
    return _turns(flows, finder)
