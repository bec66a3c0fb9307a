"""What a model run says: its links, one policy's ``ModelResult``, per-tier summaries and
bottleneck links. Pure, no root.

Shared by the per-flow model and the aggregate what-if, so both report alike: a model link
may stand for several physical links that always carry equal load (``ModelLinks.count``), and
every summary counts physical links.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from testbed.models.solver import REL_TIE


@dataclass
class ModelLinks:
    """The model's links: each stands for ``count`` physical links of ``cap_each`` bits/s
    that always carry equal load (1 for per-flow links; more for merged classes)."""

    name: list[str]
    tier: list[str]
    count: np.ndarray
    cap_each: np.ndarray
    tier_links: dict[str, int]  # physical links per tier in the whole fabric

    @property
    def capacity(self) -> np.ndarray:
        return self.count * self.cap_each


@dataclass
class ModelResult:
    """One policy's answer for one flow list. Times in seconds at the unit's link rates.

    ``kind``: ``exact`` (the fluid max-min completion for that routing), ``lower-bound``
    (the routing's largest link time, which the completion cannot beat; see ``note``) or
    ``not-computed`` (``completion_s`` is None; ``note`` says why).
    """

    policy: str
    method: str
    kind: str
    completion_s: float | None
    flows: int
    classes: int = 0
    events: int = 0
    rounds: int = 0
    max_link_time_s: float | None = None
    bound_s: float | None = None
    bound_name: str = ""
    note: str = ""
    unit: str = "gbps"
    tiers: dict[str, dict[str, Any]] = field(default_factory=dict)
    bottlenecks: list[dict[str, Any]] = field(default_factory=list)
    flow_completion: dict[str, float] = field(default_factory=dict)
    compute_s: float = 0.0
    #: the QPs (flows on the wire) the hosts open for ``flows``: more when the policy's
    #: ``expand`` stripes them (qp-scaling); None where not counted (the what-if)
    qps: int | None = None
    #: per input flow: completion time and first rate (bits/s); in the aggregate what-if, per
    #: flow of ONE group (every group's copy of a flow finishes with it), ecmp-fluid only
    flow_finish_s: np.ndarray | None = None
    flow_start_rate_bps: np.ndarray | None = None
    #: ``model_flows(marks=...)`` only: per input flow, when it had sent each of its marks
    flow_mark_s: list[np.ndarray] | None = None

    @property
    def ratio(self) -> float | None:
        """Completion / bound (1.0 = the ideal)."""
        if self.completion_s is None or not self.bound_s:
            return None
        return self.completion_s / self.bound_s

    def to_dict(self, per_flow_limit: int = 10_000) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("flow_finish_s", "flow_start_rate_bps", "flow_mark_s")}
        d["ratio_to_bound"] = None if self.ratio is None else round(self.ratio, 6)
        if self.flow_finish_s is not None and self.flow_finish_s.size <= per_flow_limit:
            d["flow_finish_s"] = [float(x) for x in self.flow_finish_s]
        return d


def finish_quantiles(values: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    """Weighted min/p50/p90/p99/max (weights = flows per class)."""
    if not values.size:
        return {}
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = np.cumsum(w) / w.sum()
    out = {"min": float(v[0])}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        out[name] = float(v[min(np.searchsorted(cum, q), v.size - 1)])
    out["max"] = float(v[-1])
    return out


def tier_summary(links: ModelLinks, load_bytes: np.ndarray, completion: float | None,
                 max_each_override: dict[str, float] | None = None) -> dict[str, dict]:
    """Per tier: physical links, bytes, the most loaded link and its link time, mean use.

    ``load_bytes`` is per model link (shared equally by its ``count`` members). Links the
    flows never touch count as idle members of their tier.
    """
    out: dict[str, dict[str, Any]] = {}
    each = load_bytes / links.count
    tiers = np.array(links.tier)
    for tier in sorted(set(links.tier) | set(links.tier_links)):
        m = tiers == tier if len(tiers) else np.zeros(0, bool)
        n_phys = links.tier_links.get(tier, int(links.count[m].sum()))
        total = float(load_bytes[m].sum())
        cap = float(links.cap_each[m][0]) if m.any() else 0.0
        top = float(each[m].max()) if m.any() else 0.0
        at_max: int | None = int(links.count[m][each[m] >= top * (1 - REL_TIE)].sum()) \
            if top > 0 else 0
        if max_each_override and tier in max_each_override:
            top, at_max = max_each_override[tier], None  # the count depends on the colouring
        row: dict[str, Any] = {"links": n_phys, "total_bytes": total,
                               "mean_bytes": total / n_phys if n_phys else 0.0,
                               "max_bytes": top, "links_at_max": at_max,
                               "capacity_gbps": cap / 1e9 if cap else None,
                               "max_link_time_s": top * 8 / cap if cap else 0.0}
        if completion and cap and n_phys:
            row["mean_utilisation"] = total * 8 / (n_phys * cap * completion)
        out[tier] = row
    return out


def top_bottlenecks(links: ModelLinks, load_bytes: np.ndarray, saturated: np.ndarray | None,
                    top: int = 5) -> list[dict[str, Any]]:
    """The model links with the largest link time (bytes / capacity), busiest first."""
    time_each = load_bytes * 8 / links.capacity
    order = np.argsort(-time_each, kind="stable")[:top]
    out = []
    for i in order:
        if time_each[i] <= 0:
            break
        d: dict[str, Any] = {"link": links.name[i], "tier": links.tier[i],
                             "links_alike": int(links.count[i]),
                             "bytes_each": float(load_bytes[i] / links.count[i]),
                             "link_time_s": float(time_each[i])}
        if saturated is not None:
            d["full_at_start"] = bool(saturated[i])
        out.append(d)
    return out


def tolerance_note(tolerance: float, note: str) -> tuple[str, str]:
    """A result's kind and note: ``exact``, or ``approx`` with how finishes were coalesced."""
    if not tolerance:
        return "exact", note
    extra = f"approximate: finishes within {tolerance:g} (relative) of an event coalesced"
    return "approx", f"{note}; {extra}" if note else extra
