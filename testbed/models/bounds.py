"""Lower bounds on a flow list's completion time, whatever the routing. Pure, no root.

Per flow list, lower bounds on completion time from NIC capacity (``lb.lower_bounds``
host_tx/host_rx, and a start-aware version), leaf uplink capacity for unsplit flows
(``lb.lower_bounds`` fabric_out/fabric_in, with its pigeonhole term) and for split flows
(bytes / total uplink capacity), and, on astral3, the bisection between the two halves of
the blocks. ``unsplit`` (= ``lb.ideal_max_link_time`` or more) bounds ecmp, planned and
adaptive; ``splittable`` bounds ecmp-fluid. The what-if computes the same bounds on its
group quotient with the helpers here (``testbed.models.whatif``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from controllers import lb
from controllers.paths import UNITS, PathFinder
from testbed import topologies
from testbed.models.inputs import normalise
from vocab.flows import Flow
from vocab.plan import WiringPlan


def start_aware(key: np.ndarray, start: np.ndarray, bits: np.ndarray, cap: np.ndarray
                ) -> float:
    """max over keys and thresholds tau of tau + bits starting at or after tau / capacity.

    Nothing can cross a link before it starts, so the flows starting at tau or later need
    their bits / capacity after tau. ``cap`` is per entry (the key's capacity).
    """
    if not key.size:
        return 0.0
    order = np.lexsort((-start, key))
    k, s, b, c = key[order], start[order], bits[order], cap[order]
    new = np.ones(k.size, bool)
    new[1:] = k[1:] != k[:-1]
    seg = np.cumsum(new) - 1
    csum = np.cumsum(b)
    base = np.concatenate(([0.0], csum))[np.flatnonzero(new)][seg]
    return float((s + (csum - base) / c).max())


def funnel(n: np.ndarray, total: np.ndarray, biggest: np.ndarray, equal: np.ndarray,
           size: np.ndarray, links: int, cap_each: float) -> np.ndarray:
    """``lb._funnel_bound`` vectorised over attach switches with ``links`` equal uplinks:
    max(total / all capacity, largest flow / one link, ceil(n / links) x size when equal)."""
    out = np.maximum(total / (links * cap_each), biggest / cap_each)
    pig = np.where(equal, np.ceil(n / links) * size / cap_each, 0.0)
    return np.maximum(out, pig)


def bounds(plan_or_finder: WiringPlan | PathFinder, flows: Iterable[Any],
           unit: str = "gbps") -> dict[str, float]:
    """Lower bounds (seconds at the unit's rates) on the completion time of ``flows``.

    ``host_tx``/``host_rx``/``fabric_out``/``fabric_in``: ``lb.lower_bounds`` (the last two
    assume unsplit flows). ``host_start``: the NIC bound with start offsets.
    ``fabric_out_split``/``fabric_in_split``: cross-switch bytes / all uplink capacity of the
    attach switch (holds for split flows too). ``bisection`` (astral3): bytes between the two
    halves of the blocks / the uplink capacity of the sending half. ``unsplit`` is the largest
    of all (bounds ecmp, planned, adaptive); ``splittable`` the largest of those that hold
    for split flows (bounds ecmp-fluid). ``ideal`` is ``lb.ideal_max_link_time``.
    """
    finder = plan_or_finder if isinstance(plan_or_finder, PathFinder) else \
        PathFinder(plan_or_finder)
    fl = normalise(flows)
    out = lb.lower_bounds(finder, [Flow(f.src, f.dst, f.sport, f.dport, f.proto, f.bytes)
                                   for f in fl], unit)
    k = 8.0 / UNITS[unit]
    hosts = {h: i for i, h in enumerate(finder.hosts)}
    nic = np.array([finder.nic_capacity(h, unit) for h in finder.hosts])
    src = np.array([hosts[f.src] for f in fl], dtype=np.int64)
    dst = np.array([hosts[f.dst] for f in fl], dtype=np.int64)
    size = np.array([f.bytes for f in fl], dtype=np.float64)
    start = np.array([f.start for f in fl], dtype=np.float64)
    out["host_start"] = max(start_aware(src, start, size, nic[src] / k),
                            start_aware(dst, start, size, nic[dst] / k))
    cap = finder.capacity(unit)
    up: dict[str, float] = defaultdict(float)
    down: dict[str, float] = defaultdict(float)
    for f in fl:
        a, b = finder.attach(f.src), finder.attach(f.dst)
        if a != b:
            up[a] += f.bytes
            down[b] += f.bytes
    out["fabric_out_split"] = max((v * k / max(sum(cap[h] for h in finder.uplinks(a)), 1e-300)
                                   for a, v in up.items()), default=0.0)
    out["fabric_in_split"] = max((v * k / max(sum(cap[finder.peer(h)]
                                                  for h in finder.uplinks(b)), 1e-300)
                                  for b, v in down.items()), default=0.0)
    design = topologies.TOPOLOGIES.find(finder.plan.topology)
    if design is not None and design.bisection:
        block = {h.name: int(h.loc["block"]) for h in finder.plan.hosts}
        blocks = 1 + max(block.values())
        uplink = np.zeros(blocks)
        for sw in finder.plan.switches:
            if sw.tier == "leaf":
                uplink[int(sw.loc["block"])] += sum(cap[h] for h in finder.uplinks(sw.name))
        bis = _bisection(np.array([block[f.src] for f in fl]), np.array([block[f.dst] for f in fl]),
                         size, uplink * UNITS[unit])
        if bis is not None:
            out["bisection"] = bis
    # lb.ideal_max_link_time is the largest of lb.lower_bounds' four: computed once above
    return finish_bounds(out, max(out[key] for key in ("host_tx", "host_rx", "fabric_out",
                                                       "fabric_in")))


def _bisection(block_src: np.ndarray, block_dst: np.ndarray, size: np.ndarray,
               uplink_bps: np.ndarray) -> float | None:
    """Bytes between the first and second half of the blocks over the sending half's leaf
    uplinks (bits/s per block in ``uplink_bps``), the worse direction; None for one block.

    Every such byte leaves its source leaf by an uplink, so this holds for any routing,
    split or not. It is never above the per-leaf bound (a sum of leaves cannot beat its
    busiest leaf); it is here because it is the number a bisection figure promises.
    """
    blocks = uplink_bps.size
    if blocks < 2:
        return None
    half = blocks // 2
    a_src, a_dst = block_src < half, block_dst < half
    ab = float(size[a_src & ~a_dst].sum()) * 8
    ba = float(size[~a_src & a_dst].sum()) * 8
    return max(ab / uplink_bps[:half].sum(), ba / uplink_bps[half:].sum())


def finish_bounds(out: dict[str, float], ideal: float) -> dict[str, float]:
    split_keys = ("host_tx", "host_rx", "host_start", "fabric_out_split", "fabric_in_split",
                  "bisection")
    out["ideal"] = ideal
    out["splittable"] = max(out.get(key, 0.0) for key in split_keys)
    out["unsplit"] = max(v for key, v in out.items() if key not in ("splittable",))
    return {key: float(v) for key, v in out.items()}
