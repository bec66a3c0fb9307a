"""The link-failure scenario's arithmetic on what its runs recorded: delivered rates from
counter samples, recovery time, the bytes left at the cut, the probe's gap, the flow
model's ideal and penalty for the same failure, and their distributions over the draws.

``_failure_metrics`` turns one failure run's record into the numbers the scenario's
docstring defines (``scenarios.experiments.link_failure``, *Definitions*); the functions it uses are
unit-tested one by one. ``draws_for`` says how many hash draws a mode gets (how they
differ is ``scenarios.common.DRAW_QP_STRIDE``), which the runs and the report both need.
``aggregate`` takes every run's record to per-run metrics and per mode-and-case
distributions beside the model's, which ``scenarios.link_failure_report`` writes out.
Everything here is pure (plain data, NumPy and the flow model, no fabric).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from controllers.paths import Hop, PathFinder
from scenarios.common import RANDOM_POLICIES, distribution, wire_flows
from testbed.models.perflow import model_flows
from traffic.kernels import FlowSpec
from vocab.plan import Link, WiringPlan

SMOOTH = 3  # samples averaged, and samples held, for the recovery rule
TAIL_FRACTION = 0.9  # recovery is searched until this share of the bytes has arrived
#: the All-to-All's RDMA WRITE size (a message missing a packet never completes)
MESSAGE_BYTES = 64 * 1024
CASES = ("baseline", "lane", "spine")  # each draw's runs: no failure, a lane cut, a spine down


def draws_for(mode: str, draws: int) -> int:
    """Emulated draws of a mode: one per hash draw where its paths depend on the hash."""
    return max(1, draws) if mode in RANDOM_POLICIES else 1


def down_hops(links: Sequence[Link]) -> set[Hop]:
    """Both switch ends of each link, as ``PathFinder(down=...)`` takes them."""
    return {(ln.a, ln.a_port) for ln in links} | {(ln.b, ln.b_port) for ln in links}


def remaining_after(flows: Sequence[FlowSpec], finish_s: Sequence[float],
                    start_rate_bps: Sequence[float], t: float) -> list[FlowSpec]:
    """The bytes each flow still has at ``t`` s, given the model's first rates and finishes.

    A flow finished by ``t`` has none left; otherwise it has sent its first rate times ``t``.
    Rates are constant until the first flow finishes, so this is exact when none finishes
    before ``t`` (as in an equal All-to-All under fluid ECMP); after a departure max-min
    rates can move either way, so it is then an approximation. Flows with nothing left are
    dropped. Wire-bytes flows (``message_bytes`` 0) stay so.
    """
    if t < 0:
        raise ValueError("t must be >= 0")
    out = []
    for f, fin, rate in zip(flows, finish_s, start_rate_bps, strict=True):
        if fin <= t:
            continue
        left = f.bytes - int(rate * t / 8)
        if left > 0 and not f.message_bytes:  # a wire-bytes flow (scenarios.common.wire_flows)
            out.append(dataclasses.replace(f, bytes=left, start=max(0.0, f.start - t)))
        elif left > 0:
            out.append(FlowSpec.make(f.src, f.dst, left, f.qp, message_bytes=f.message_bytes,
                                     start=max(0.0, f.start - t),
                                     traffic_class=f.traffic_class, phase=f.phase,
                                     kernel=f.kernel))
    return out


def rates(samples: Sequence[tuple[int, int]], start_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Counter samples ``(wall ns, total bytes)`` -> (mid-interval s after start, Mb/s)."""
    if len(samples) < 2:
        return np.zeros(0), np.zeros(0)
    t = np.array([s[0] for s in samples], dtype=np.float64)
    b = np.array([s[1] for s in samples], dtype=np.float64)
    dt = np.diff(t) / 1e9
    keep = dt > 0
    mid = ((t[:-1] + t[1:]) / 2 - start_ns) / 1e9
    return mid[keep], (np.diff(b) * 8 / 1e6)[keep] / dt[keep]


def smooth(values: np.ndarray, window: int = SMOOTH) -> np.ndarray:
    """Trailing moving average (the first samples average what exists so far)."""
    if window < 1:
        raise ValueError("window must be >= 1")
    c = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def level(t: np.ndarray, mbps: np.ndarray, t0: float, t1: float) -> float:
    """Mean rate of the samples whose midpoint lies in ``[t0, t1)`` (NaN if none)."""
    sel = (t >= t0) & (t < t1)
    return float(mbps[sel].mean()) if sel.any() else math.nan


def recovery_time(t: np.ndarray, mbps: np.ndarray, cut_s: float, target_mbps: float,
                  until_s: float, hold: int = SMOOTH) -> float | None:
    """Seconds from ``cut_s`` until the smoothed rate is >= target for ``hold`` samples.

    Only samples after the cut and before ``until_s`` count. The answer is measured from the
    cut to the start of the first sample of the held run (0 if the rate never fell below the
    target); ``None`` if no such run exists before ``until_s``.
    """
    if hold < 1:
        raise ValueError("hold must be >= 1")
    s = smooth(mbps)
    idx = np.flatnonzero((t > cut_s) & (t < until_s))
    run = 0
    for k, i in enumerate(idx):
        run = run + 1 if s[i] >= target_mbps else 0
        if run >= hold:
            first = idx[k - hold + 1]
            half = (t[first] - t[first - 1]) / 2 if first > 0 else 0.0
            return max(0.0, float(t[first] - half - cut_s))
    return None


def time_of_fraction(t: np.ndarray, mbps: np.ndarray, fraction: float) -> float:
    """When the cumulative delivered bytes first reach ``fraction`` of their total."""
    if not len(t):
        return math.nan
    dt = np.diff(np.concatenate(([t[0] - (t[1] - t[0]) if len(t) > 1 else 0.0], t)))
    cum = np.cumsum(mbps * dt)
    if cum[-1] <= 0:
        return math.nan
    return float(t[int(np.searchsorted(cum, fraction * cum[-1]))])


def probe_gap(result: dict[str, Any], cut_wall_s: float, window_s: float = 1.0
              ) -> tuple[float | None, int]:
    """Longest probe silence that began within ``window_s`` around the cut, and how many
    probe ports had one (a port that never crossed the failed link has none there)."""
    gaps = []
    for f in result.get("flows", {}).values():
        at = f.get("gap_at")
        if at is not None and cut_wall_s - 0.2 <= at <= cut_wall_s + window_s:
            gaps.append(float(f["max_gap_s"]))
    return (max(gaps) if gaps else None), len(gaps)


def model_penalties(plan: WiringPlan, flows: Sequence[FlowSpec], policy: str,
                    links: Sequence[Link], fraction: float, draws: int
                    ) -> list[dict[str, float]]:
    """The flow model's completion penalty of a failure at ``fraction`` of the baseline,
    under ``policy`` (the controller's mode), over ``draws`` seeds of its hash (one for a
    policy without a draw): per seed the baseline completion, the completion with the links
    cut at that instant (what was left at the cut, re-routed by the same policy on the
    failed fabric), and their ratio. Frame bytes, as the shapers count."""
    wire = wire_flows(list(flows))
    failed = PathFinder(plan, down=down_hops(links))
    out = []
    for s in range(max(1, draws) if policy in RANDOM_POLICIES else 1):
        base = model_flows(plan, wire, policy, seed=s, unit="mbps")
        t = fraction * base.completion_s
        left = remaining_after(wire, base.flow_finish_s, base.flow_start_rate_bps, t)
        after = model_flows(failed, left, policy, seed=s, unit="mbps") if left else None
        total = t + (after.completion_s if after else 0.0)
        out.append({"seed": s, "baseline_s": base.completion_s, "failed_s": total,
                    "penalty": total / base.completion_s})
    return out


def _model_baselines(plan: WiringPlan, flows: Sequence[FlowSpec], mode: str, draws: int
                     ) -> list[Any]:
    wire = wire_flows(list(flows))
    return [model_flows(plan, wire, mode, seed=s, unit="mbps")
            for s in range(max(1, draws) if mode in RANDOM_POLICIES else 1)]


def fluid_after_cut(plan: WiringPlan, flows: Sequence[FlowSpec], fluid: Any,
                    links: Sequence[Link], frac: float) -> tuple[float, list[FlowSpec], Any]:
    """The fluid model's ideal when ``links`` fail at fraction ``frac`` of its run (``fluid``,
    the model's run without the failure): its completion time, the bytes left at the cut,
    and the model's run of those on what survives (None when nothing was left)."""
    t_model = frac * fluid.completion_s
    wire = wire_flows(list(flows))  # the fluid model runs on frame bytes, as the counters
    left = remaining_after(wire, fluid.flow_finish_s, fluid.flow_start_rate_bps, t_model)
    failed = PathFinder(plan, down=down_hops(links))
    after = model_flows(failed, left, "ecmp-fluid", unit="mbps") if left else None
    return t_model + (after.completion_s if after else 0.0), left, after


def _failure_metrics(r: dict[str, Any], base: dict[str, Any], plan: WiringPlan,
                     flows: list[FlowSpec], fluid: Any, links: Sequence[Link],
                     recover_pct: float) -> dict[str, Any]:
    """Recovery, penalty and their ideals for one failure run (see the module docstring)."""
    t, mbps = rates(r["samples"], r["start_ns"])
    cut_s = (r["action_ns"][0] - r["start_ns"]) / 1e9
    ideal_total, left, after = fluid_after_cut(plan, flows, fluid, links,
                                               cut_s / base["completion_s"])
    post_ideal = 8 * sum(f.bytes for f in left) / after.completion_s / 1e6 if after else 0.0
    first = float(np.sum(after.flow_start_rate_bps)) / 1e6 if after else 0.0
    pre = level(t, mbps, cut_s / 2, cut_s)
    target = (1 - recover_pct / 100) * min(post_ideal, pre if pre == pre else post_ideal)
    until = time_of_fraction(t, mbps, TAIL_FRACTION)
    rec = recovery_time(t, mbps, cut_s, target, until)
    sm = smooth(mbps)
    win = (t > cut_s) & (t < cut_s + 1.0)
    dip = float(sm[win].min()) if win.any() else math.nan
    reroutes = [x for x in r["health"].get("reroutes", [])
                if not x.get("up") and x.get("at", 0) >= r["action_ns"][0] / 1e9 - 0.5]
    gap, ports = probe_gap(r["probe"], r["action_ns"][0] / 1e9)
    return {
        "cut_s": cut_s, "cut_action_ms": (r["action_ns"][1] - r["action_ns"][0]) / 1e6,
        "pre_mbps": pre, "post_ideal_mbps": post_ideal, "fluid_first_mbps": first,
        "target_mbps": target,
        "dip_mbps": dip, "recovery_s": rec, "tail_s": until,
        "penalty": r["completion_s"] / base["completion_s"],
        "ideal_penalty": ideal_total / fluid.completion_s,
        "reroute_ms": max((1e3 * x.get("installed_s", 0.0) for x in reroutes), default=None),
        "reroute_switches": max((x.get("switches_changed", 0) for x in reroutes), default=None),
        "reroutes_seen": len(reroutes), "probe_gap_ms": None if gap is None else 1e3 * gap,
        "probe_ports_hit": ports,
        "lost_packets": r["summary"]["lost_packets"],
        "delivered": r["summary"]["bytes_received"] / max(1, r["summary"]["bytes_sent"]),
    }


def aggregate(params: dict[str, Any], margin: dict[str, float], plan: WiringPlan,
              flows: list[FlowSpec], fluid: Any, failures: dict[str, list[Link]],
              results: dict[str, dict[str, Any]]
              ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Per mode and case: the draws' metrics (``"mode/draw/case"``), and their distributions
    and the model's beside them (``"mode/case"``). ``margin``: the fidelity guard's margin
    per mode."""
    p = params
    modes = list(p["modes"])
    nd = int(p["model_draws"])
    metrics: dict[str, dict[str, Any]] = {}  # "mode/draw/case" -> one run's metrics
    agg: dict[str, dict[str, Any]] = {}  # "mode/case" -> distributions and ideals
    for mode in modes:
        n = draws_for(mode, int(p["draws"]))
        for k in range(n):
            base = results[f"{mode}/{k}/baseline"]
            metrics[f"{mode}/{k}/baseline"] = {
                "completion_s": base["completion_s"], "penalty": 1.0,
                "pace": fluid.completion_s / base["completion_s"],
                "lost_packets": base["summary"]["lost_packets"],
                "start_skew_s": base["summary"]["start_skew_s"]}
            for case in ("lane", "spine"):
                m = _failure_metrics(results[f"{mode}/{k}/{case}"], base, plan, flows, fluid,
                                     failures[case], float(p["recover_pct"]))
                metrics[f"{mode}/{k}/{case}"] = {
                    **m, "completion_s": results[f"{mode}/{k}/{case}"]["completion_s"],
                    "start_skew_s": results[f"{mode}/{k}/{case}"]["summary"]["start_skew_s"]}
        base_model = [m.completion_s for m in _model_baselines(plan, flows, mode, nd)]
        runs = [metrics[f"{mode}/{k}/baseline"] for k in range(n)]
        agg[f"{mode}/baseline"] = {
            "mode": mode, "case": "baseline", "draws": n,
            "completion_s": distribution([r["completion_s"] for r in runs]),
            "model_s": distribution(base_model),
            "pace": distribution([r["pace"] for r in runs]),
            "lost": sum(r["lost_packets"] for r in runs),
            "start_skew_s": max(r["start_skew_s"] for r in runs), "margin": margin.get(mode),
            "plane": _plane(results, mode, n, "baseline")}
        for case in ("lane", "spine"):
            runs = [metrics[f"{mode}/{k}/{case}"] for k in range(n)]
            frac = distribution([r["cut_s"] / metrics[f"{mode}/{k}/baseline"]["completion_s"]
                                 for k, r in enumerate(runs)])["median"]
            model = model_penalties(plan, flows, mode, failures[case], frac, nd)
            agg[f"{mode}/{case}"] = {
                "mode": mode, "case": case, "draws": n, "cut_fraction": frac,
                **{key: distribution([r[key] for r in runs]) for key in (
                    "completion_s", "penalty", "ideal_penalty", "recovery_s", "cut_s",
                    "pre_mbps", "post_ideal_mbps", "dip_mbps", "reroute_ms", "probe_gap_ms",
                    "cut_action_ms")},
                "model_penalty": distribution([x["penalty"] for x in model]),
                "model_s": distribution([x["failed_s"] for x in model]),
                "recovered": sum(1 for r in runs if r["recovery_s"] is not None),
                "lost": sum(r["lost_packets"] for r in runs),
                "start_skew_s": max(r["start_skew_s"] for r in runs),
                "margin": margin.get(mode), "plane": _plane(results, mode, n, case)}
    for mode in modes:  # what each failure did to whole messages (no retransmission)
        for case in ("baseline", "lane", "spine"):
            rs = [results[f"{mode}/{k}/{case}"] for k in range(agg[f"{mode}/{case}"]["draws"])]
            agg[f"{mode}/{case}"]["incomplete"] = distribution(
                [r.get("incomplete_messages", 0) / max(r.get("messages", 0), 1) for r in rs])
    return metrics, agg


def _plane(results: dict[str, dict[str, Any]], mode: str, n: int, case: str) -> str | None:
    """The traffic plane of a mode's runs of one case (the last draw's)."""
    return results[f"{mode}/{n - 1}/{case}"]["summary"].get("plane")
