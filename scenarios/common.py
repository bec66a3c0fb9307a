"""Pieces several scenarios share: workloads as flow lists, link counters, small plots.

Link load is measured where a network engineer would read it: the transmit byte counters
of the switch-side interfaces (``/sys/class/net/<intf>/statistics/tx_bytes`` in the root
namespace, where every switch port of the emulated fabric lives). A fabric link ``a-b``
has two directions; ``a`` is the lower tier (plan convention), so "up" is ``a``'s
interface transmitting toward ``b`` and "down" is ``b``'s toward ``a``.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from testbed.plan import Link, WiringPlan
from traffic.kernels import FlowSpec


# --- workloads ---------------------------------------------------------------------------
def cross_leaf_permutation(plan: WiringPlan, seed: int = 0) -> list[tuple[str, str]]:
    """A random permutation in which no GPU sends to a GPU under its own leaf.

    Rejection-sampled (seeded): same-leaf pairs never touch a spine, so they would hide the
    load-balancing question the scenario asks.
    """
    from controllers.paths import PathFinder

    finder = PathFinder(plan)
    hosts = [h.name for h in plan.hosts]
    rng = random.Random(seed)
    for _ in range(10_000):
        dst = hosts[:]
        rng.shuffle(dst)
        if all(finder.attach(a) != finder.attach(b) for a, b in zip(hosts, dst, strict=True)):
            return list(zip(hosts, dst, strict=True))
    raise ValueError(f"no cross-leaf permutation found for {plan.topology} with "
                     f"{len(hosts)} GPUs (every GPU shares a leaf with too many others)")


def permutation_flows(plan: WiringPlan, nbytes: int, qps: int = 1, seed: int = 0,
                      qp_base: int = 0) -> list[FlowSpec]:
    """Each GPU sends ``nbytes`` to its partner over ``qps`` QPs (bytes split evenly)."""
    out = []
    for a, b in cross_leaf_permutation(plan, seed):
        for q in range(qps):
            out.append(FlowSpec.make(a, b, nbytes // qps, qp=qp_base + q,
                                     message_bytes=min(256_000, nbytes // qps)))
    return out


def all_to_all_flows(plan: WiringPlan, nbytes_per_pair: int, qp_base: int = 0
                     ) -> list[FlowSpec]:
    """Every GPU sends ``nbytes_per_pair`` to every other GPU (one QP per pair)."""
    hosts = [h.name for h in plan.hosts]
    return [FlowSpec.make(a, b, nbytes_per_pair, qp=qp_base,
                          message_bytes=min(256_000, nbytes_per_pair))
            for a in hosts for b in hosts if a != b]


def mean_hops(plan: WiringPlan, flows: list[FlowSpec], by_bytes: bool = False) -> float:
    """Mean switches crossed per flow (or per byte): every minimal path of a pair has the
    same length, so the first candidate's length is the pair's hop count."""
    from controllers.paths import PathFinder

    finder = PathFinder(plan)
    weights = [f.bytes if by_bytes else 1 for f in flows]
    hops = [len(finder.candidates(f.src, f.dst)[0]) for f in flows]
    return sum(h * w for h, w in zip(hops, weights, strict=True)) / sum(weights)


# --- link counters -----------------------------------------------------------------------
def fabric_links(plan: WiringPlan) -> list[Link]:
    """Switch-to-switch links (both ends in the root namespace)."""
    switches = {s.name for s in plan.switches}
    return [ln for ln in plan.links if ln.a in switches and ln.b in switches]


def _tx_bytes(intf: str) -> int:
    try:
        with open(f"/sys/class/net/{intf}/statistics/tx_bytes") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def link_counters(plan: WiringPlan) -> dict[tuple[str, str], int]:
    """``(link name, "up"|"down") -> tx bytes`` for every fabric link, read now."""
    out = {}
    for ln in fabric_links(plan):
        out[(ln.name, "up")] = _tx_bytes(ln.a_intf)
        out[(ln.name, "down")] = _tx_bytes(ln.b_intf)
    return out


def link_loads(plan: WiringPlan, before: dict[tuple[str, str], int],
               after: dict[tuple[str, str], int], seconds: float) -> list[dict[str, Any]]:
    """Per fabric link and direction: bytes carried and utilisation over ``seconds``."""
    nodes = {n.name: n for n in plan.nodes}
    rows = []
    for ln in fabric_links(plan):
        for direction in ("up", "down"):
            moved = after[(ln.name, direction)] - before[(ln.name, direction)]
            src, dst = (ln.a, ln.b) if direction == "up" else (ln.b, ln.a)
            rows.append({"link": ln.name, "direction": direction, "from": src, "to": dst,
                         "tier": f"{nodes[ln.a].tier}-{nodes[ln.b].tier}",
                         "bytes": moved, "mbps": ln.mbps,
                         "utilisation": moved * 8 / (ln.mbps * 1e6 * seconds)
                         if seconds > 0 else 0.0})
    return rows


def load_stats(rows: list[dict[str, Any]], tier: str | None = None) -> dict[str, float]:
    """Max and mean utilisation (over links that exist in ``tier``), and max/mean."""
    vals = [r["utilisation"] for r in rows if tier is None or r["tier"] == tier]
    if not vals:
        return {"max": 0.0, "mean": 0.0, "max_over_mean": 0.0}
    mean = sum(vals) / len(vals)
    return {"max": max(vals), "mean": mean, "max_over_mean": max(vals) / mean if mean else 0.0}


def bytes_per_node(rows: list[dict[str, Any]], tier_name: str) -> dict[str, int]:
    """Bytes each node of ``tier_name`` (e.g. "spine") forwarded downward over the run."""
    out: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["direction"] == "down" and r["tier"].endswith(f"-{tier_name}"):
            out[r["from"]] += r["bytes"]
    return dict(sorted(out.items()))


def real_time_factor(plan: WiringPlan) -> float:
    """Emulated seconds x this = seconds at the real (unscaled) rates.

    Every rate is the real one x ``scale`` (400 Gb/s x 1e-5 = 4 Mb/s), so moving the same
    bytes takes 1/scale as long: real time = emulated time x scale.
    """
    return plan.scale
