"""Pieces several scenarios share: workloads as flow lists, link counters, small plots.

Link load is measured where a network engineer would read it: the transmit byte counters
of the switch-side interfaces (``/proc/net/dev`` of the root namespace, where the switch
ports live, and of each switch daemon's namespace when several forward:
``testbed.shell.switch_daemons``). A fabric link ``a-b`` has two directions; ``a`` is the lower
tier (plan convention), so "up" is ``a``'s interface transmitting toward ``b`` and "down"
is ``b``'s toward ``a``.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import defaultdict
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from controllers import policies
from controllers.paths import UNITS, PathFinder
from testbed.daemons import tx_bytes_everywhere
from testbed.models.bounds import bounds
from testbed.models.perflow import model_flows
from traffic.kernels import FlowSpec
from traffic.roce import LAB_PMTU, frame_len, message_wire_bytes, segment
from vocab.flows import ROCE_PORT, sport_for_qp
from vocab.plan import Link, WiringPlan


# --- workloads ---------------------------------------------------------------------------
def cross_leaf_permutation(plan: WiringPlan, seed: int = 0) -> list[tuple[str, str]]:
    """A random permutation in which no GPU sends to a GPU under its own leaf.

    Rejection-sampled (seeded): same-leaf pairs never touch a spine, so they would hide the
    load-balancing question the scenario asks.
    """
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


def leaf_fanout(plan: WiringPlan, flows: list[FlowSpec]) -> tuple[int, int]:
    """(QPs leaving the busiest leaf, that leaf's uplink lanes) for cross-leaf ``flows``."""
    finder = PathFinder(plan)
    per: dict[str, int] = {}
    for f in flows:
        leaf = finder.attach(f.src)
        per[leaf] = per.get(leaf, 0) + 1
    leaf = max(per, key=lambda k: per[k])
    return per[leaf], len(finder.uplinks(leaf))


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
    finder = PathFinder(plan)
    weights = [f.bytes if by_bytes else 1 for f in flows]
    hops = [len(finder.candidates(f.src, f.dst)[0]) for f in flows]
    return sum(h * w for h, w in zip(hops, weights, strict=True)) / sum(weights)


# --- link counters -----------------------------------------------------------------------
def fabric_links(plan: WiringPlan) -> list[Link]:
    """Switch-to-switch links (both ends in the root namespace)."""
    switches = {s.name for s in plan.switches}
    return [ln for ln in plan.links if ln.a in switches and ln.b in switches]


def port_tx_bytes(intf: str) -> int:
    """One switch port's transmitted bytes; 0 if the interface is gone."""
    try:
        with open(f"/sys/class/net/{intf}/statistics/tx_bytes") as f:
            return int(f.read())
    except (OSError, ValueError):  # or it is in a switch daemon's namespace

        return tx_bytes_everywhere().get(intf, 0)


def link_counters(plan: WiringPlan) -> dict[tuple[str, str], int]:
    """``(link name, "up"|"down") -> tx bytes`` for every fabric link, read now (in one
    pass over the root namespace and every switch daemon's: ``testbed.shell.switch_daemons``)."""
    now = tx_bytes_everywhere()
    out = {}
    for ln in fabric_links(plan):
        out[(ln.name, "up")] = now.get(ln.a_intf, 0)
        out[(ln.name, "down")] = now.get(ln.b_intf, 0)
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


# --- distributions and ideals ------------------------------------------------------------
def distribution(values: list[float]) -> dict[str, Any]:
    """``draws``, ``median``, ``p25``, ``p75`` (and min/max) of figures from random draws.

    A figure that depends on a hash or gating seed is one sample of a distribution; a
    report quotes the distribution so one lucky or unlucky draw cannot pass for the fabric.
    Quartiles interpolate linearly between order statistics (numpy's default).
    """
    vals = np.asarray([float(v) for v in values if v is not None], dtype=float)
    if vals.size == 0:
        return {"draws": 0, "median": None, "p25": None, "p75": None, "min": None,
                "max": None, "values": []}
    p25, med, p75 = (float(x) for x in np.percentile(vals, [25, 50, 75]))
    return {"draws": int(vals.size), "median": med, "p25": p25, "p75": p75,
            "min": float(vals.min()), "max": float(vals.max()),
            "values": [float(v) for v in vals]}


def fmt_distribution(d: dict[str, Any], unit: str = "", digits: int = 2) -> str:
    """``median [p25-p75], N=draws`` for tables and findings."""
    if not d.get("draws"):
        return "n/a"
    f = f"{{:.{digits}f}}"
    return (f"{f.format(d['median'])}{unit} [{f.format(d['p25'])}-{f.format(d['p75'])}], "
            f"N={d['draws']}")


def compare(measured: float | None, ideal: float | None, **extra: Any) -> dict[str, Any]:
    """A ``summary.json`` entry: ``measured``, the model's ``ideal`` of the same quantity,
    and ``ratio`` = measured / ideal (None when either is missing or the ideal is 0)."""
    ratio = (measured / ideal) if measured is not None and ideal else None
    return {"measured": measured, "ideal": ideal, "ratio": ratio, **extra}


# --- hash draws, the model's distribution, and plots of both ------------------------------
#: policies whose paths depend on a hash draw (their modules say RANDOM = True)
RANDOM_POLICIES = policies.random_names()
#: a measured/ideal ratio outside this band gets a finding that says why
RATIO_BAND = (0.7, 1.3)
#: QP numbers of hash draw k are shifted by k x this (``shift_qps``, ``qp_base``): every draw
#: gets its own UDP source ports, far from any other draw's
DRAW_QP_STRIDE = 1000


def shift_qps(flows: list[FlowSpec], offset: int) -> list[FlowSpec]:
    """The same flows on other QPs, i.e. other UDP source ports: another ECMP hash draw.

    Bytes, messages, starts and classes are kept; only the 5-tuple's entropy changes.
    """
    if not offset:
        return list(flows)
    return [dataclasses.replace(f, qp=f.qp + offset, sport=sport_for_qp(f.qp + offset))
            for f in flows]


def model_draws(plan_or_finder: Any, flows: list[FlowSpec], policy: str, draws: int, *,
                unit: str = "mbps", wire: bool = True) -> list[Any]:
    """``testbed.models.perflow.model_flows`` over ``draws`` seeds of its hash (``ecmp``,
    ``adaptive``), or once for a policy without a draw (``planned``, ``ecmp-fluid``).

    ``wire``: model the frame bytes the shapers count (``wire_flows``), so the answer is
    the emulated time of the same flows, not their payload time."""
    fl = wire_flows(flows) if wire else list(flows)
    n = max(1, int(draws)) if policy in RANDOM_POLICIES else 1
    bnd = bounds(plan_or_finder, fl, unit=unit)  # the same for every seed: once
    return [model_flows(plan_or_finder, fl, policy, seed=s, unit=unit, bound=bnd)
            for s in range(n)]


def in_band(ratio: float | None, band: tuple[float, float] = RATIO_BAND) -> bool:
    """Is measured/ideal within the band where no explanation is owed?"""
    return ratio is not None and ratio == ratio and band[0] <= ratio <= band[1]


def rank_in(value: float, values: list[float]) -> float:
    """The share of ``values`` at or below ``value`` (0..1): where a measured median falls
    in the model's distribution (0.5 = its median; near 0 or 1 = in a tail)."""
    if not values:
        return float("nan")
    below = sum(1 for v in values if v < value)
    equal = sum(1 for v in values if v == value)
    return (below + 0.5 * equal) / len(values)


def plot_draws(ax: Any, labels: list[str], measured: list[list[float]],
               model: list[list[float]], *, bound: list[float | None] | None = None,
               colours: list[str] | None = None, bound_label: str = "lower bound") -> None:
    """Per label: the model's draws as a grey box (one value: a grey tick), the emulated
    draws as dots with their median as a bar, and the bound as a dashed tick."""
    for i, (got, mod) in enumerate(zip(measured, model, strict=True)):
        colour = (colours or ["tab:red"] * len(labels))[i]
        if len(mod) > 1:
            ax.boxplot([mod], positions=[i - 0.18], widths=0.3, patch_artist=True,
                       boxprops={"facecolor": "0.9", "edgecolor": "0.5"},
                       medianprops={"color": "0.3"}, whiskerprops={"color": "0.5"},
                       capprops={"color": "0.5"}, showfliers=False)
            # every model draw as a faint dot: completion times often take few values,
            # which a box alone hides
            ax.scatter([i - 0.18 + 0.26 * (((j * 0.618) % 1) - 0.5) for j in range(len(mod))],
                       mod, color="0.35", s=4, alpha=0.25, zorder=2, linewidths=0)
        elif mod:
            ax.hlines(mod[0], i - 0.33, i - 0.03, color="0.45", lw=3)
        ax.scatter([i + 0.18 + 0.04 * ((j % 5) - 2) for j in range(len(got))], got,
                   color=colour, s=16, zorder=3)
        if got:
            med = distribution(got)["median"]
            ax.hlines(med, i + 0.05, i + 0.31, color=colour, lw=2)
        if bound and bound[i] is not None:
            ax.hlines(bound[i], i - 0.4, i + 0.4, color="k", ls="--", lw=1,
                      label=bound_label if i == 0 else None)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlim(-0.6, len(labels) - 0.4)


def message_sizes(flow: FlowSpec) -> list[int]:
    """A flow's messages in payload bytes, in order (the last one may be short)."""
    if not flow.message_bytes or flow.messages <= 1:
        return [flow.bytes]
    full = [flow.message_bytes] * (flow.messages - 1)
    return full + [flow.bytes - sum(full)]


#: The path MTU the running scenario replays at (``Run`` sets it for the run): the frames a
#: message is cut into, hence the header bytes the shapers count, depend on it.
WIRE_PMTU: ContextVar[int] = ContextVar("WIRE_PMTU", default=LAB_PMTU)


def wire_flows(flows: list[FlowSpec], pmtu: int | None = None) -> list[FlowSpec]:
    """The same flows with ``bytes`` = the frame bytes on the wire (headers, ICRC).

    What the shapers count, so the flow model fed with these predicts the emulated times
    instead of payload times a few per cent shorter. ``pmtu``: the run's (``WIRE_PMTU``).
    """
    pmtu = pmtu or WIRE_PMTU.get()
    return [replace(f, bytes=sum(message_wire_bytes(s, pmtu) for s in message_sizes(f)),
                    message_bytes=0, messages=0) for f in flows]


@dataclass(frozen=True)
class _Message:
    src: str
    dst: str
    sport: int
    bytes: int
    start: float
    dport: int = ROCE_PORT
    proto: str = "udp"


def message_latencies(plan: WiringPlan, flows: list[FlowSpec], policy: str, *,
                      unit: str = "mbps") -> list[float]:
    """The flow model's latency of every message (seconds; flows in order, then messages),
    over the span the replay measures: first frame sent to last frame received
    (``message_times``)."""
    return message_times(plan, flows, policy, unit=unit)[0]


def message_times(plan: WiringPlan, flows: list[FlowSpec], policy: str, *,
                  unit: str = "mbps") -> tuple[list[float], list[float]]:
    """The flow model's latency and end time of every message (seconds; flows in order,
    then messages): latency over the span the replay measures, first frame sent to last
    frame received; end when the QP had sent the whole message (its last message's end is
    the QP's finish).

    A QP sends its messages one after another while the host's QPs share the NIC, which is
    what the replay's senders do: message k starts when message k-1 ends, on the same
    5-tuple, hence the same path. In a fluid model that is exactly one flow per QP of all
    its wire bytes; when it had sent any running total comes from one simulation
    (``model_flows(marks=...)``), no iteration over message starts.

    A fluid has no frames, but the measured span starts when the message's first frame
    goes out whole at the NIC's rate, not when the QP's share of the NIC reaches it (a QP
    sharing the NIC with N others sends one frame per round of N). So the span is taken
    between the fluid times at which the QP had sent the message's first frame and all of
    it (the same phase of the sender's rounds at both ends), plus that first frame's time
    at the NIC rate and the last frame's store-and-forward at every switch egress of the
    path: a message of one frame then costs its serialisation hop by hop, as on the wire.
    """
    pmtu = WIRE_PMTU.get()
    finder = PathFinder(plan)
    cap = finder.capacity(unit)
    to_bps = UNITS[unit]
    qps, marks, extra = [], [], []
    for f in flows:
        nic = finder.nic_capacity(f.src, unit) * to_bps
        per_bit = sum(1 / (cap[h] * to_bps) for h in finder.candidates(f.src, f.dst)[0])
        sent, m, x = 0, [], []
        for size in message_sizes(f):
            frames = [frame_len(op, n) for op, n in segment(size, pmtu)]
            m += [sent + frames[0], sent + sum(frames)]
            x.append(frames[0] * 8 / nic + frames[-1] * 8 * per_bit)
            sent += sum(frames)
        qps.append(_Message(f.src, f.dst, f.sport, sent, f.start))
        marks.append(m)
        extra.append(x)
    res = model_flows(finder, qps, policy, unit=unit, marks=marks)
    assert res.flow_mark_s is not None
    out: list[float] = []
    done: list[float] = []
    for at, x in zip(res.flow_mark_s, extra, strict=True):
        ends = at.tolist()
        out += [b - a + e for a, b, e in zip(ends[0::2], ends[1::2], x, strict=True)]
        done += ends[1::2]
    return out, done


def replay_lead(flows: list[FlowSpec]) -> float:
    """How far ahead a scenario's replay sets its common start: 0.5 s + 0.1 s per sender.

    ``traffic.shell.replay``'s default (1 s + 0.25 s per sender) is a few times what the senders
    need to build their templates here (docs/scenarios.md, "Start skew"); the time
    saved pays for more hash draws. Every result's ``start_skew_s`` says how late the last
    sender really was; the scenarios keep the worst per figure in summary.json."""
    return 0.5 + 0.1 * len({f.src for f in flows})


def median_chance(values: list[float], observed: float, n: int) -> float:
    """How often the median of ``n`` draws from ``values`` (the model's draws) lands at least
    as far from their median as ``observed``, on the same side.

    A measured median over few hash draws is itself random: when this chance is not small
    (say >= 5%), a gap between it and the model's median may be the draws' luck; when it is
    small, the gap is systematic. Ties count as "as far" (completion times take few values).
    """
    if not values or n < 1:
        return float("nan")
    med = distribution(values)["median"]
    tol = 1e-3 * abs(med)
    if observed <= med:
        p = sum(1 for v in values if v <= observed + tol) / len(values)
    else:
        p = sum(1 for v in values if v >= observed - tol) / len(values)
    need = n // 2 + 1 if n % 2 else n // 2  # draws on that side for the median to be there
    return float(sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j)
                     for j in range(need, n + 1)))
