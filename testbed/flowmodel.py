"""Flow-level model: max-min fair rates and completion times of a job's flows. Pure, no root.

Emulation tops out at a few hundred GPUs at scaled-down rates. This module answers the same
question ("how long does this flow list take on this fabric with this routing policy?") in a
fluid model, with the ideal number beside it, up to the 64K-GPU scale of the paper.

The model
    Every directed link (each switch egress ``Hop`` of ``controllers.paths`` plus each host's
    NIC transmit link, which no switch chooses but every flow of the host crosses) has a
    capacity in bits/s. Flows share links *max-min fairly* (what per-flow fair queueing or an
    idealised congestion control converges to), computed by **progressive filling**: raise
    every unfrozen flow's rate together; when a link fills, freeze every flow on it; repeat.
    Each filling round freezes *all* links at the current lowest level at once (ties within
    1e-9 relative); flows and links are index arrays (a classes x links incidence in CSR and
    CSC form), and the event loop is compiled (``testbed.models.maxmin``). The job is
    **event-driven**: rates are
    recomputed whenever a flow finishes or starts (``start`` offsets), so flows that finish
    early hand their share to the rest. After departures only the flows at or above the
    leavers' lowest rate are refilled; the rest provably keep their rates. Before any event,
    links that can never bind are dropped, the job splits into components that share no
    link (each has its own events), and identical components (the EP groups of a packed
    job; the same intra-leaf flows under several policies) are simulated once; all three are
    exact (``simulate``). No packets, no queues, no slow start: a fluid model is the *ideal*
    a transport can reach on that routing, which is what an emulation measurement is held
    against.

Routing: the SAME policy modules the controller runs (``controllers.policies``: each
module's ``model`` gives the paths, or ``SPLIT`` asks for the fluid split below), on the
same paths (``controllers.paths.PathFinder``), so model and emulation route identically.
The shipped ones:

``ecmp``        ``lb.ecmp_assign``: the per-switch 5-tuple hash model, seedable. Every flow keeps
                its own path, because hash collisions are the point.
``ecmp-fluid``  every flow split evenly at every switch over the ECMP ports that routing
                offers (``PathFinder.next_hops``): the *expectation* of the hash, i.e. ECMP with
                infinitely many flowlets. On a healthy Clos this is the same as an even split
                over all candidate paths; with failed links per-hop splitting is what hashing
                does, so that is the definition used.
``planned``     ``lb.plan_assign`` (lane colouring by Konig's theorem, else greedy+improve).
``adaptive``    ``lb.simulate_adaptive``: where the Hedera-style policy ends up, started from
                ECMP. The model keeps those final paths for the whole job; the controller's
                moves *during* a job (one per poll interval) are not modelled.

Aggregation, and why each kind is exact (the answer is identical to per-flow, not close):

1. *Identical flows.* Progressive filling sees a flow only through its incidence row (links
   and the fraction of its rate on each), its size and its start. Flows with identical rows,
   sizes and starts are frozen in the same round, at the same level, and finish at the same
   event, always. So they are one *class* with a multiplicity (``mult``); a link's demand is
   ``sum(mult * weight)``. Used for every policy (e.g. the QPs of one GPU pair).
2. *Parallel links (ecmp-fluid only).* Under per-hop splitting, every flow that loads one
   uplink lane of an astral3 leaf loads all of them with the same weight. Links whose columns
   (which (source, destination) attach pairs load them, with what weight) are identical and
   whose capacities are equal always carry equal load, so they fill at the same instant: one
   link of summed capacity, the flow's weight summed over them. Detected generically from the
   columns, not from names. Never used for hash ECMP, planned or adaptive: pinning flows to
   single lanes is what makes them collide.
3. *Group symmetry (the what-if).* N expert-parallel groups that each send the same traffic in
   their own local ranks, placed alike (``packed``: a group fills consecutive servers;
   ``spread``: strided over the fabric). One group's flows are the classes (``mult`` = N) and
   links are merged into classes: NIC links by local rank (N links each), leaf uplink and
   downlink bundles by the *multiset of local ranks* under the leaf. Why exact: suppose every
   copy of a flow runs at the same rate. A NIC link then carries what its local rank sends;
   a leaf bundle carries what its hosts send (receive) to (from) other leaves, a sum over the
   local ranks under it, so leaves with the same multiset carry the same load. Equal load
   and capacity: every link of a class fills at the same level, so a round freezes whole
   classes and the copies stay equal, round after round and event after event. The premises
   are checked, not assumed: every local rank sits under a leaf of the same class in every
   group, and the same-leaf partition of the local ranks is the same in every group;
   otherwise the what-if refuses. 16.7M flows become 65,280 classes on ~1K link classes.

Scale, per policy (the CLI says which one each number came from):

Running times are measured by ``benchmarks/model.py`` and quoted in the README.

* ``mode="per-flow"`` (any topology; default while the job has <= ``exact_flows`` flows,
  300,000): every policy routes every flow with the controller's own code, then exact
  event-driven max-min over the classes of (1) and (2). The cost is per event times the
  rate levels above the leavers, so an all-to-all (equal sizes: few events) and a prefill
  step (intra-rail: many small components) are quick, while a decode step (every GPU
  pair one flow of its own size: a finish time per flow, all coupled through the NICs)
  takes tens of thousands of events, each refilling thousands of flows: the slowest
  workload, by far.
* ``mode="aggregate"`` (astral3 only; default above that):
  ``ecmp-fluid``: exact max-min over the group quotient (3), every event. An all-to-all is
  one event. A prefill or decode step has as many distinct finish times in one group as
  per-flow mode has, so it costs what one group costs there; ``tolerance`` /
  ``--event-tolerance 1e-3`` coalesces finishes and is labelled ``approx`` (a decode step's
  job time came out 0.15% optimistic against the exact run).
  ``planned``: exact *job* completion from a theorem, not by running the planner. Theorem: if
  every flow has the same size s and start, then under ANY routing the max-min completion
  equals the largest link time (bytes / capacity) of that routing: it is a lower bound, and at
  every instant every flow's rate is at least the first filling level min(capacity / demand),
  which only rises as flows leave, so every flow finishes by s / first level = that link time.
  lb's lane colouring colours the source-leaf x destination-leaf multigraph of cross-leaf
  flows with D colours (D = its largest degree) and puts colour c on lane class c mod C (C =
  spines x lanes per leaf-spine pair). A leaf of degree D uses every colour once, so its
  busiest lane carries exactly ceil(D/C) flows, and no lane anywhere carries more, whatever
  colouring the algorithm finds. So the planned job time is max(NIC times, ceil(D/C) s / lane
  rate): exactly what lb.plan_assign would give, without running it (the tests compare the
  two). Per-flow times and unequal sizes (prefill, decode) are not computed.
  ``ecmp``: every flow hashed with lb's own hash recipe (BLAKE2 of the 5-tuple salted by
  switch and seed; checked bit-for-bit against ``lb.ecmp_path``) into exact per-lane loads;
  with equal sizes the theorem makes the max link time the exact completion, otherwise it is
  reported as a lower bound (``kind="lower-bound"``).
  ``adaptive``: not computed (its policy is per-flow Python). A policy module picks one of
  these closed forms with ``WHATIF`` (``fluid``, ``lanes``, ``hash``) or none.

The 64K what-if fabric (``astral-lab model astral3 --gpus 65536 --radix 1024
--servers-per-block 64``): 8,192 servers x 8 GPUs with 400G NICs; 128 blocks of 64 servers;
1,024 rail-aligned leaves, each 64 x 400G down and 128 x 200G lanes up (256 lanes: today's
51.2T leaf); 128 spines, each taking one lane from every leaf through the optical shuffle
(1,024 x 200G lanes = 204.8T: a hypothetical radix-1024 spine, 4x today's); non-blocking 1:1.
At radix 256 two tiers stop at 16,384 GPUs; ``testbed.cost`` instead splits 64K into rail
groups with NVLink relay, a different fabric. The wiring plan of the what-if cannot be built
(interface names like ``spine127-eth1024`` exceed Linux's 15 characters), so the aggregate
mode describes it structurally (``TwoTier``) with the builder's rules, checked against
``build_astral3`` at small sizes.

Bounds (``bounds``): per flow list, lower bounds on completion time from NIC capacity
(``lb.lower_bounds`` host_tx/host_rx, and a start-aware version), leaf uplink capacity for
unsplit flows (``lb.lower_bounds`` fabric_out/fabric_in, with its pigeonhole term) and for
split flows (bytes / total uplink capacity), and, on astral3, the bisection between the two
halves of the blocks. ``unsplit`` (= ``lb.ideal_max_link_time`` or more) bounds ecmp, planned
and adaptive; ``splittable`` bounds ecmp-fluid.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import multiprocessing as mp
import os
import signal
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from controllers import lb
from controllers import policies as registry
from controllers.flows import ROCE_PORT, Flow, sport_for_qp
from controllers.paths import UNITS, Hop, Path, PathFinder
from testbed import topologies
from testbed.models import maxmin
from testbed.plan import WiringPlan, write_json_atomic
from testbed.results import output_dir
from testbed.topologies import FabricSpec, build

#: every policy module (controllers/policies/), in listing order
POLICIES = registry.names()
WORKLOADS = ("alltoall", "prefill", "decode")
PLACEMENTS = ("packed", "spread")
MODES = ("auto", "per-flow", "aggregate")
#: Above this many flows the CLI's auto mode switches from per-flow to the aggregate what-if.
DEFAULT_EXACT_FLOWS = 300_000
#: Per-flow mode keeps Python objects per flow (~3 KB each, measured): beyond this, 8 GiB
#: would not hold them.
MAX_PER_FLOW = 1_000_000
#: Levels (and finish times) within this relative distance are one round (one event).
REL_TIE = 1e-9
DEFAULT_PAIR_BYTES = 1 << 20
SCHEMA = "astral-lab/model"


# =========================================================================================
# 1. Progressive filling over classes x links
# =========================================================================================
def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for every pair, vectorised (CSR row gathering)."""
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    shift = starts - np.concatenate(([0], np.cumsum(lens)[:-1]))
    return np.repeat(shift, lens) + np.arange(total)


@dataclass
class Timeline:
    """What ``simulate`` found, per class (seconds and bits/s) and overall."""

    finish: np.ndarray  # completion time of each class
    start_rate: np.ndarray  # rate each class got at the first allocation it took part in
    saturated: np.ndarray  # bool per link: full in the first allocation
    events: int  # distinct times at which an allocation was computed (a start or finish)
    rounds: int  # progressive-filling rounds over all events (identical components once)


def _never_binding(cap: np.ndarray, row: np.ndarray, col: np.ndarray, coef: np.ndarray,
                   rptr: np.ndarray) -> np.ndarray:
    """Bool per link: its constraint is implied by kept links' constraints, so dropping it
    leaves every max-min allocation unchanged (``simulate``, reduction 1).

    Anchors are each class's first and last link (a NIC, in the model's rows); they are
    always kept. For a class on link l and anchor k, its load on l is at most
    ``coef_l / coef_k`` times its load on k, so the classes of l that share anchor k load l
    by at most ``max(coef_l / coef_k) * cap_k``; summed over anchors, that caps l's load.
    Rows are CSR (sorted by class); a class listing one link twice disables the test.
    """
    n_links = cap.size
    drop = np.zeros(n_links, bool)
    if not row.size:
        return drop
    pair = np.sort(row * n_links + col)
    if np.any(pair[1:] == pair[:-1]):
        return drop
    lens = np.diff(rptr)
    anchor = np.zeros(n_links, bool)
    anchor[col[rptr[:-1]]] = True
    anchor[col[rptr[1:] - 1]] = True
    bound = np.full(n_links, np.inf)
    for end in (rptr[:-1], rptr[1:] - 1):  # first link, then last link of every class
        k = np.repeat(col[end], lens)
        ratio = coef / np.repeat(coef[end], lens)
        m = ~anchor[col]
        if not m.any():
            return drop
        key = col[m] * n_links + k[m]
        o = np.argsort(key, kind="stable")
        key, ratio = key[o], ratio[m][o]
        cut = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        rmax = np.maximum.reduceat(ratio, cut)
        link, via = np.divmod(key[cut], n_links)
        bound = np.minimum(bound, np.bincount(link, cap[via] * rmax, minlength=n_links)
                           + np.where(np.bincount(link, minlength=n_links) > 0, 0.0, np.inf))
    used = np.bincount(col, minlength=n_links) > 0
    return used & ~anchor & (bound <= cap * (1 + 1e-12))


def _components(n_links: int, row: np.ndarray, col: np.ndarray,
                rptr: np.ndarray) -> np.ndarray:
    """Component label per class: classes joined by shared links (``simulate``, reduction
    2). Union-find over links, vectorised: hook every link onto its class's first link,
    then pointer-jump, until every entry agrees with its class."""
    lab = np.arange(n_links)
    a, b = col, col[rptr[:-1]][row]
    while True:
        la, lb = lab[a], lab[b]
        diff = la != lb
        if not diff.any():
            return lab[col[rptr[:-1]]]
        lo = np.minimum(la[diff], lb[diff])
        np.minimum.at(lab, la[diff], lo)
        np.minimum.at(lab, lb[diff], lo)
        while True:
            nxt = lab[lab]
            if np.array_equal(nxt, lab):
                break
            lab = nxt


#: Results of recently simulated components, by a digest of their canonical arrays
#: (``simulate``, reduction 3). Bounded by the classes it holds.
_COMPONENT_CACHE: OrderedDict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = \
    OrderedDict()
_CACHE_CLASSES = 2_000_000


def _digest(*arrays: np.ndarray | float) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.digest()


def _cached_component(cap: np.ndarray, row: np.ndarray, col: np.ndarray, coef: np.ndarray,
                      bits: np.ndarray, start: np.ndarray, tolerance: float
                      ) -> tuple[bytes, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """``_simulate_component`` through the cache; returns the component's key and result."""
    key = _digest(cap, row, col, coef, bits, start, np.float64(tolerance))
    hit = _COMPONENT_CACHE.get(key)
    if hit is not None:
        _COMPONENT_CACHE.move_to_end(key)
        return key, hit
    out = _simulate_component(cap, row, col, coef, bits, start, tolerance)
    if bits.size <= _CACHE_CLASSES:
        _COMPONENT_CACHE[key] = out
        held = sum(v[0].size for v in _COMPONENT_CACHE.values())
        while held > _CACHE_CLASSES:
            _, old = _COMPONENT_CACHE.popitem(last=False)
            held -= old[0].size
    return key, out


def simulate(capacity: np.ndarray, row: np.ndarray, col: np.ndarray, weight: np.ndarray,
             mult: np.ndarray, bits: np.ndarray, start: np.ndarray | None = None,
             tolerance: float = 0.0) -> Timeline:
    """Event-driven max-min: completion time of every class of flows.

    ``capacity[l]`` bits/s; incidence entries ``(row[i], col[i], weight[i])`` say that a flow
    of class ``row[i]`` puts ``weight[i]`` of its rate on link ``col[i]`` (1 on every hop of a
    pinned path; 1/k on each of k equal-split ports); ``mult[c]`` flows in class c, each
    ``bits[c]`` long, starting at ``start[c]`` seconds. Between events rates are constant;
    the next event is the earliest finish or start. Rows finishing within ``REL_TIE`` of the
    event finish with it.

    ``tolerance`` > 0 trades exactness for events: at an event at time t, rows due to finish
    by ``t * (1 + tolerance)`` finish at it, their last bits dropped. A workload of many
    distinct sizes (a decode step: tens of thousands of distinct finish times) then takes a
    few thousand events instead of tens of thousands. Such a row is reported at its own
    projected finish, but leaves the allocation early, so the others get its bandwidth up to
    ``tolerance`` (relative) early: slightly optimistic, not bounded by a theorem (max-min
    rates are not monotone in departures). 0 (the default) is exact.

    The event loop costs work per rate level per event, so three exact
    reductions come first:

    1. *Links that can never bind are dropped* (``_never_binding``): when the flows' own
       NIC links cap a link's load at its capacity (the merged uplinks of a non-blocking
       leaf under fluid ECMP), its constraint is implied by the others and the feasible
       rates, hence every max-min allocation, are the same without it.
    2. *Independent components are simulated apart* (``_components``): classes that share
       no kept link never influence each other's rates, so a departure in one never refills
       the other (a prefill step splits by rail and group).
    3. *Identical components are simulated once* (``_COMPONENT_CACHE``): each component is
       relabelled canonically (classes in order, links by first use) and keyed by a digest of
       its arrays; equal inputs give equal outputs, so the EP groups of a packed job, or the
       same intra-leaf flows routed by several policies, cost one run.

    Within a component, warm start after departures (``_simulate_component``). ``events``
    counts the distinct times at which some component's allocation was computed;
    ``rounds`` the filling rounds actually run. The tests compare all of this with a
    from-scratch implementation.
    """
    cap = np.asarray(capacity, dtype=np.float64)
    row = np.asarray(row, dtype=np.int64)
    col = np.asarray(col, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    mult = np.asarray(mult, dtype=np.float64)
    bits = np.asarray(bits, dtype=np.float64)
    n = bits.size
    start = np.zeros(n) if start is None else np.asarray(start, dtype=np.float64)
    if not (row.size == col.size == w.size) or mult.size != n or start.size != n:
        raise ValueError("incidence arrays and per-class arrays must have matching lengths")
    if n == 0:
        return Timeline(np.empty(0), np.empty(0), np.zeros(cap.size, bool), 0, 0)
    if np.any(cap <= 0) or np.any(w <= 0) or np.any(mult <= 0):
        raise ValueError("capacities, weights and multiplicities must be > 0")
    if np.any(bits < 0) or np.any(start < 0):
        raise ValueError("sizes and start times must be >= 0")
    if not 0 <= tolerance < 0.5:
        raise ValueError(f"tolerance must be in [0, 0.5) (got {tolerance!r})")
    if row.size and (row.min() < 0 or row.max() >= n or col.min() < 0 or col.max() >= cap.size):
        raise ValueError("incidence refers to a class or link that does not exist")
    if np.any(np.bincount(row, minlength=n) == 0):
        raise ValueError("every class of flows must cross at least one link")
    n_links = cap.size
    order = np.argsort(row, kind="stable")  # CSR, each class's entries in the given order
    coef_all = (mult[row] * w)[order]
    row_all, col_all = row[order], col[order]
    rptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_all, minlength=n), out=rptr[1:])
    keep = ~_never_binding(cap, row_all, col_all, coef_all, rptr)[col_all]
    row_k, col_k, coef_k = row_all[keep], col_all[keep], coef_all[keep]
    kptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_k, minlength=n), out=kptr[1:])
    comp = _components(n_links, row_k, col_k, kptr)
    finish = np.empty(n)
    start_rate = np.empty(n)
    times: list[np.ndarray] = []
    rounds = 0
    seen: set[bytes] = set()
    by_comp = np.argsort(comp, kind="stable")
    cut = np.flatnonzero(np.r_[True, comp[by_comp][1:] != comp[by_comp][:-1], True])
    for s, e in zip(cut[:-1].tolist(), cut[1:].tolist(), strict=True):
        ids = by_comp[s:e]  # ascending class ids: a canonical order
        ent = _ranges(kptr[ids], kptr[ids + 1])
        lens = kptr[ids + 1] - kptr[ids]
        links, first, inv = np.unique(col_k[ent], return_index=True, return_inverse=True)
        rank = np.empty(links.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(links.size)
        lcol = rank[inv.ravel()]
        lcap = np.empty(links.size)
        lcap[lcol] = cap[col_k[ent]]
        key, (f, sr, t, r) = _cached_component(
            lcap, np.repeat(np.arange(ids.size), lens), lcol, coef_k[ent], bits[ids],
            start[ids], tolerance)
        finish[ids], start_rate[ids] = f, sr
        if key not in seen:  # identical components count once, cached or not
            seen.add(key)
            times.append(t)
            rounds += r
    events = _distinct(np.concatenate(times)) if times else 0
    # links full in the first allocation, from the rates of the classes that took part in it
    live = bits > 0
    saturated = np.zeros(n_links, bool)
    if live.any():
        t0 = float(start[live].min())
        first_alloc = live & (start <= t0 + REL_TIE * max(t0, 1e-12))
        on = first_alloc[row_all]
        load = np.bincount(col_all[on], coef_all[on] * start_rate[row_all[on]],
                           minlength=n_links)
        saturated = cap - load <= REL_TIE * cap
    return Timeline(finish, start_rate, saturated, events, rounds)


def _distinct(times: np.ndarray) -> int:
    """How many distinct times (within ``REL_TIE``) ``times`` holds."""
    if not times.size:
        return 0
    t = np.sort(times)
    return 1 + int(np.count_nonzero(np.diff(t) > REL_TIE * np.maximum(t[1:], 1e-12)))


def _simulate_component(cap: np.ndarray, row: np.ndarray, col: np.ndarray, coef: np.ndarray,
                        bits: np.ndarray, start: np.ndarray, tolerance: float
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The event loop of ``simulate`` on one component (CSR rows, ``coef`` = mult x weight):
    finish and first rate per class, the times at which an allocation was computed, and the
    filling rounds. The loop (warm start after departures, next finish from a segment tree)
    is compiled: ``testbed.models.maxmin``."""
    rptr = np.zeros(bits.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=bits.size), out=rptr[1:])
    return maxmin.run(cap, rptr, col, coef, bits, start, tolerance, REL_TIE)


# =========================================================================================
# 2. Links, loads and what a result says
# =========================================================================================
@dataclass
class _Links:
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
    #: per input flow: completion time and first rate (bits/s); in the aggregate what-if, per
    #: flow of ONE group (every group's copy of a flow finishes with it), ecmp-fluid only
    flow_finish_s: np.ndarray | None = None
    flow_start_rate_bps: np.ndarray | None = None

    @property
    def ratio(self) -> float | None:
        """Completion / bound (1.0 = the ideal)."""
        if self.completion_s is None or not self.bound_s:
            return None
        return self.completion_s / self.bound_s

    def to_dict(self, per_flow_limit: int = 10_000) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("flow_finish_s", "flow_start_rate_bps")}
        d["ratio_to_bound"] = None if self.ratio is None else round(self.ratio, 6)
        if self.flow_finish_s is not None and self.flow_finish_s.size <= per_flow_limit:
            d["flow_finish_s"] = [float(x) for x in self.flow_finish_s]
        return d


def _quantiles(values: np.ndarray, weights: np.ndarray) -> dict[str, float]:
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


def _tier_summary(links: _Links, load_bytes: np.ndarray, completion: float | None,
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


def _bottlenecks(links: _Links, load_bytes: np.ndarray, saturated: np.ndarray | None,
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


# =========================================================================================
# 3. Per-flow model on a wiring plan (any topology; the controllers' own routing code)
# =========================================================================================
@dataclass
class _FlowIn:
    """A flow as the model needs it, from a ``Flow``, a ``FlowSpec`` or anything alike."""

    src: str
    dst: str
    sport: int
    bytes: int
    start: float
    dport: int = ROCE_PORT
    proto: str = "udp"
    qp: int | None = None

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return (self.src, self.dst, self.proto, self.sport, self.dport)


def _normalise(flows: Iterable[Any]) -> list[_FlowIn]:
    out = []
    for i, f in enumerate(flows):
        if type(f) is _FlowIn and f.bytes >= 0 and f.start >= 0 and f.src != f.dst:
            out.append(f)  # already normalised (``Job.flow_list``, ``_Prepared.fl``)
            continue
        try:
            src, dst, sport, size = f.src, f.dst, int(f.sport), int(f.bytes)
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"flows[{i}] needs src, dst, sport and bytes (a Flow or FlowSpec)"
                             ) from None
        start = float(getattr(f, "start", 0.0) or 0.0)
        if size < 0 or start < 0:
            raise ValueError(f"flows[{i}]: bytes and start must be >= 0")
        if src == dst:
            raise ValueError(f"flows[{i}]: src and dst are the same host {src}")
        out.append(_FlowIn(src, dst, sport, size, start, int(getattr(f, "dport", ROCE_PORT)),
                           str(getattr(f, "proto", "udp")), getattr(f, "qp", None)))
    return out


class _PlanLinks:
    """Index of a plan's directed links: every live switch egress hop, then every host's NIC
    transmit link (not a Hop: no switch chooses it, but every flow of the host crosses it)."""

    def __init__(self, finder: PathFinder, unit: str) -> None:
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {sorted(UNITS)} (got {unit!r})")
        scale = UNITS[unit]
        tier_of = {n.name: n.tier for n in finder.plan.nodes}
        cap = finder.capacity(unit)
        self.hops: list[Hop] = sorted(cap)
        self.hop_id = {h: i for i, h in enumerate(self.hops)}
        hosts = finder.hosts
        self.tx_id = {h: len(self.hops) + i for i, h in enumerate(hosts)}
        names, tiers, caps = [], [], []
        for h in self.hops:
            peer = finder.peer(h)[0]
            names.append(f"{h[0]}:{h[1]}->{peer}")
            tiers.append(f"{tier_of[h[0]]}->{tier_of[peer]}")
            caps.append(cap[h] * scale)
        for h in hosts:
            sw = finder.attach(h)
            names.append(f"{h}->{sw}")
            tiers.append(f"{tier_of[h]}->{tier_of[sw]}")
            caps.append(finder.nic_capacity(h, unit) * scale)
        self.name, self.tier = names, tiers
        self.cap = np.array(caps, dtype=np.float64)
        self.tier_links = dict(sorted((t, tiers.count(t)) for t in set(tiers)))

    def links(self) -> _Links:
        return _Links(list(self.name), list(self.tier), np.ones(self.cap.size), self.cap.copy(),
                      dict(self.tier_links))


def _fluid_trunk(finder: PathFinder, a: str, b: str) -> dict[Hop, float]:
    """Per-hop equal split from attach switch ``a`` to ``b``: fraction of a flow on each hop.

    All minimal paths have the same length, so the split advances one layer at a time.
    """
    out: dict[Hop, float] = defaultdict(float)
    layer = {a: 1.0} if a != b else {}
    for _ in range(len(finder.next_hops) + 1):
        if not layer:
            return dict(out)
        nxt: dict[str, float] = defaultdict(float)
        for sw, x in layer.items():
            ports = finder.next_hops.get(sw, {}).get(b)
            if not ports:
                raise ValueError(f"no path from {a} to {b}")
            share = x / len(ports)
            for p in ports:
                out[(sw, p)] += share
                peer = finder.peer((sw, p))[0]
                if peer != b:
                    nxt[peer] += share
        layer = nxt
    raise RuntimeError(f"next hops from {a} to {b} loop")  # routing bug


def _fluid_links(finder: PathFinder, pl: _PlanLinks, pairs: list[tuple[str, str]],
                 merge: bool) -> tuple[_Links, dict[tuple[str, str], list[tuple[int, float]]],
                                       dict[str, int], dict[str, int]]:
    """Model links for ecmp-fluid: NIC tx and last hops as they are; trunk hops merged into
    classes of identical columns and capacity (exact, module docstring point 2).

    Returns the links, each attach pair's row (link id, weight), and the tx / last-hop link
    id of every host.
    """
    trunks = {p: _fluid_trunk(finder, *p) for p in pairs}
    column: dict[Hop, list[tuple[int, float]]] = defaultdict(list)
    for i, p in enumerate(pairs):
        for hop, w in trunks[p].items():
            column[hop].append((i, round(w, 12)))
    groups: dict[Any, list[Hop]] = defaultdict(list)
    for hop in sorted(column):  # the tier in the key only keeps reports per tier honest
        i = pl.hop_id[hop]
        key = (tuple(column[hop]), pl.cap[i], pl.tier[i]) if merge else hop
        groups[key].append(hop)
    name, tier, count, cap_each = [], [], [], []
    host_ids: dict[str, int] = {}
    last_ids: dict[str, int] = {}
    for h, i in pl.tx_id.items():
        host_ids[h] = len(name)
        name.append(pl.name[i])
        tier.append(pl.tier[i])
        count.append(1)
        cap_each.append(pl.cap[i])
    for h in finder.hosts:
        i = pl.hop_id.get(finder.host_hop(h))
        if i is None:
            continue  # NIC link down: flows to it raise earlier
        last_ids[h] = len(name)
        name.append(pl.name[i])
        tier.append(pl.tier[i])
        count.append(1)
        cap_each.append(pl.cap[i])
    class_of: dict[Hop, int] = {}
    for members in groups.values():
        j = len(name)
        for hop in members:
            class_of[hop] = j
        first = pl.hop_id[members[0]]
        name.append(pl.name[first] + (f" (+{len(members) - 1} parallel)" if len(members) > 1
                                      else ""))
        tier.append(pl.tier[first])
        count.append(len(members))
        cap_each.append(pl.cap[first])
    rows: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for p in pairs:
        acc: dict[int, float] = defaultdict(float)
        for hop, w in trunks[p].items():
            acc[class_of[hop]] += w
        rows[p] = sorted(acc.items())
    links = _Links(name, tier, np.array(count, dtype=np.float64),
                   np.array(cap_each, dtype=np.float64), dict(pl.tier_links))
    return links, rows, host_ids, last_ids


def _tolerance_note(tolerance: float, note: str) -> tuple[str, str]:
    if not tolerance:
        return "exact", note
    extra = f"approximate: finishes within {tolerance:g} (relative) of an event coalesced"
    return "approx", f"{note}; {extra}" if note else extra


def _check_policy(policy: str) -> registry.Policy:
    return registry.get(policy)


class _Prepared:
    """A flow list made ready for routing, shared by the policies of one ``run``.

    Normalising a few hundred thousand flows, checking that each has a path, merging
    5-tuples and hashing them for ECMP are per-flow Python; ``run`` models four policies
    on one flow list, so it does that once (the adaptive policy starts from the same ECMP
    assignment that the ecmp policy uses).
    """

    def __init__(self, finder: PathFinder, flows: Iterable[Any], unit: str) -> None:
        self.finder, self.unit = finder, unit
        self.fl = _normalise(flows)
        if not self.fl:
            raise ValueError("no flows to model")
        self.pl = _PlanLinks(finder, unit)
        for f in self.fl:
            finder.candidates(f.src, f.dst)  # ValueError naming both hosts if there is no path
        self.size = np.array([f.bytes for f in self.fl], dtype=np.float64)
        self.start = np.array([f.start for f in self.fl], dtype=np.float64)
        self._unique: tuple[list[Flow], np.ndarray] | None = None
        self._ecmp: dict[int, dict[Flow, Path]] = {}

    def unique(self) -> tuple[list[Flow], np.ndarray]:
        """One ``Flow`` per 5-tuple (bytes summed), and each input flow's index in it."""
        if self._unique is None:
            merged: dict[tuple[str, str, str, int, int], int] = {}
            total: list[int] = []
            idx = np.empty(len(self.fl), dtype=np.int64)
            for i, f in enumerate(self.fl):
                k = merged.setdefault(f.key, len(total))
                if k == len(total):
                    total.append(0)
                total[k] += f.bytes
                idx[i] = k
            flows = [Flow(k[0], k[1], k[3], k[4], k[2], b)
                     for k, b in zip(merged, total, strict=True)]
            self._unique = (flows, idx)
        return self._unique

    def route(self, policy: registry.Policy, seed: int, adaptive: dict[str, Any] | None
              ) -> tuple[list[Flow], np.ndarray, dict[Flow, Path]]:
        """The policy's path for every merged flow (the seed's ECMP draw shared)."""
        unique, idx = self.unique()
        ctx = registry.ModelContext(self.finder, unique, seed, adaptive, self._ecmp)
        return unique, idx, policy.model(unique, self.finder, ctx)


def model_flows(plan_or_finder: WiringPlan | PathFinder, flows: Iterable[Any],
                policy: str = "ecmp", *, seed: int = 0, unit: str = "gbps",
                adaptive: dict[str, Any] | None = None, merge: bool = True,
                bound: dict[str, float] | None = None, tolerance: float = 0.0) -> ModelResult:
    """Route ``flows`` on a plan with ``policy`` and run event-driven max-min; per-flow exact.

    ``flows``: ``controllers.flows.Flow`` or ``traffic.kernels.FlowSpec`` objects (anything
    with src, dst, sport, bytes; optional start, dport, proto). Flows sharing a 5-tuple are
    routed as one flow with their bytes summed (what the controller sees from
    ``controller_body``) and then keep their own sizes and starts. ``unit``: ``gbps`` for
    the real fabric, ``mbps`` for the emulated one (what Mininet will take). ``merge=False``
    turns off the parallel-link merging of ecmp-fluid (tests compare both). ``tolerance``:
    see ``simulate`` (0 = exact). A PathFinder with ``down`` links models a failed fabric.
    """
    _check_policy(policy)
    t0 = time.perf_counter()
    finder = plan_or_finder if isinstance(plan_or_finder, PathFinder) else \
        PathFinder(plan_or_finder)
    prep = _Prepared(finder, flows, unit)
    return _model_prepared(prep, policy, seed=seed, adaptive=adaptive, merge=merge,
                           bound=bound, tolerance=tolerance, t0=t0)


def _model_prepared(prep: _Prepared, policy: str, *, seed: int, adaptive: dict[str, Any] | None,
                    merge: bool, bound: dict[str, float] | None, tolerance: float,
                    t0: float | None = None) -> ModelResult:
    """``model_flows`` on a prepared flow list."""
    pol = _check_policy(policy)
    t0 = time.perf_counter() if t0 is None else t0
    finder, fl, pl, unit = prep.finder, prep.fl, prep.pl, prep.unit
    n = len(fl)
    rowkey = np.empty(n, dtype=np.int64)
    # rows (links and weights of a flow's rate on each), flat: row k is flat[ptr[k]:ptr[k+1]]
    flat_c: list[int] = []
    flat_w: list[float] = []
    ptr = [0]
    seen: dict[Any, int] = {}
    if pol.split:
        pairs = sorted({(finder.attach(f.src), finder.attach(f.dst)) for f in fl})
        links, pair_rows, tx_ids, last_ids = _fluid_links(finder, pl, pairs, merge)
        for i, f in enumerate(fl):
            key = (f.src, f.dst)
            k = seen.get(key)
            if k is None:
                pair = (finder.attach(f.src), finder.attach(f.dst))
                k = seen[key] = len(ptr) - 1
                flat_c.append(tx_ids[f.src])
                flat_w.append(1.0)
                for c, w in pair_rows[pair]:
                    flat_c.append(c)
                    flat_w.append(w)
                flat_c.append(last_ids[f.dst])
                flat_w.append(1.0)
                ptr.append(len(flat_c))
            rowkey[i] = k
    else:
        unique, idx, assign = prep.route(pol, seed, adaptive)
        links = pl.links()
        key_of = np.empty(len(unique), dtype=np.int64)
        hop_id = pl.hop_id
        for u, f in enumerate(unique):
            path = assign[f]
            key = (f.src, path)
            k = seen.get(key)
            if k is None:
                k = seen[key] = len(ptr) - 1
                flat_c.append(pl.tx_id[f.src])
                flat_c.extend([hop_id[h] for h in path])
                ptr.append(len(flat_c))
            key_of[u] = k
        flat_w = [1.0] * len(flat_c)
        rowkey = key_of[idx]
    size, start = prep.size, prep.start
    keys = np.column_stack([rowkey.astype(np.float64), size, start])
    uniq, cls, mult = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    cls = cls.ravel()
    r_ids = uniq[:, 0].astype(np.int64)
    rp = np.array(ptr, dtype=np.int64)
    lens = rp[r_ids + 1] - rp[r_ids]
    ent = _ranges(rp[r_ids], rp[r_ids + 1])
    row = np.repeat(np.arange(uniq.shape[0]), lens)
    col = np.array(flat_c, dtype=np.int64)[ent]
    wt = np.array(flat_w, dtype=np.float64)[ent]
    tl = simulate(links.capacity, row, col, wt, mult.astype(np.float64), uniq[:, 1] * 8,
                  uniq[:, 2], tolerance)
    finish = tl.finish[cls]
    load = np.bincount(col, wt * mult[row] * uniq[row, 1], minlength=links.count.size)
    completion = float(finish.max())
    bnd = bound if bound is not None else bounds(finder, fl, unit)
    bname = "splittable" if pol.split else "unsplit"
    method = pol.method + ", per-flow max-min"
    kind, note = _tolerance_note(tolerance, pol.note)
    return ModelResult(
        policy=policy, method=method, kind=kind, completion_s=completion, flows=n,
        classes=int(uniq.shape[0]), events=tl.events, rounds=tl.rounds,
        max_link_time_s=float((load * 8 / links.capacity).max()),
        bound_s=bnd[bname], bound_name=bname, note=note, unit=unit,
        tiers=_tier_summary(links, load, completion),
        bottlenecks=_bottlenecks(links, load, tl.saturated),
        flow_completion=_quantiles(tl.finish, mult.astype(np.float64)),
        compute_s=time.perf_counter() - t0, flow_finish_s=finish,
        flow_start_rate_bps=tl.start_rate[cls])


#: The prepared flow list that forked policy workers model (set only around the fork).
_WORKER_PREP: _Prepared | None = None
#: Resident memory a policy worker may add: its own copy of the per-flow Python objects
#: (reference counting writes to the pages it shares with the parent) and its arrays.
_WORKER_BYTES_PER_FLOW = 6_000
_WORKER_BYTES = 300 << 20


def auto_jobs(flows: int, policies: int) -> int:
    """How many policies to model at once: one per CPU this process may run on, as many as
    the available memory holds workers of this size, never more than the policies."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    by_memory = cpus if avail is None else \
        avail // (_WORKER_BYTES + _WORKER_BYTES_PER_FLOW * flows)
    return max(1, min(cpus, policies, int(by_memory)))


def _worker_init() -> None:
    """A policy worker leaves Ctrl-C to its parent, which ends it (SIGTERM) at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _one_policy(prep: _Prepared, task: tuple[str, int, dict[str, float], float]
                ) -> ModelResult:
    policy, seed, bound, tolerance = task
    return _model_prepared(prep, policy, seed=seed, adaptive=None, merge=True, bound=bound,
                           tolerance=tolerance)


def _policy_worker(task: tuple[str, int, dict[str, float], float]) -> ModelResult:
    assert _WORKER_PREP is not None
    return _one_policy(_WORKER_PREP, task)


def _model_policies(prep: _Prepared, policies: Sequence[str], jobs: int, *, seed: int,
                    bound: dict[str, float], tolerance: float) -> list[ModelResult]:
    """``_model_prepared`` for every policy, in ``jobs`` forked processes when more than one.

    The policies share nothing but the prepared flow list, and each is one long compiled
    event loop: on a machine with more than one CPU they run side by side, each on its own
    core. Workers are forked so they inherit the flow list instead of unpickling it; where
    fork is unavailable, or one job is asked for, they run here in turn. However the parent
    stops (an error in a worker, Ctrl-C, SIGTERM), leaving the pool terminates every worker.
    """
    global _WORKER_PREP
    tasks = [(p, seed, bound, tolerance) for p in policies]
    if jobs == 0:
        jobs = auto_jobs(len(prep.fl), len(tasks))
    jobs = min(jobs, len(tasks))
    if jobs <= 1 or "fork" not in mp.get_all_start_methods():
        return [_one_policy(prep, task) for task in tasks]
    _WORKER_PREP = prep
    try:
        with mp.get_context("fork").Pool(jobs, initializer=_worker_init) as pool:
            return pool.map(_policy_worker, tasks, chunksize=1)
    finally:
        _WORKER_PREP = None


# =========================================================================================
# 4. Bounds
# =========================================================================================
def _start_aware(key: np.ndarray, start: np.ndarray, bits: np.ndarray, cap: np.ndarray
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


def _funnel(n: np.ndarray, total: np.ndarray, biggest: np.ndarray, equal: np.ndarray,
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
    fl = _normalise(flows)
    out = lb.lower_bounds(finder, [Flow(f.src, f.dst, f.sport, f.dport, f.proto, f.bytes)
                                   for f in fl], unit)
    k = 8.0 / UNITS[unit]
    hosts = {h: i for i, h in enumerate(finder.hosts)}
    nic = np.array([finder.nic_capacity(h, unit) for h in finder.hosts])
    src = np.array([hosts[f.src] for f in fl], dtype=np.int64)
    dst = np.array([hosts[f.dst] for f in fl], dtype=np.int64)
    size = np.array([f.bytes for f in fl], dtype=np.float64)
    start = np.array([f.start for f in fl], dtype=np.float64)
    out["host_start"] = max(_start_aware(src, start, size, nic[src] / k),
                            _start_aware(dst, start, size, nic[dst] / k))
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
    if finder.plan.topology in topologies.names() and \
            topologies.get(finder.plan.topology).bisection:
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
    return _finish_bounds(out, max(out[key] for key in ("host_tx", "host_rx", "fabric_out",
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


def _finish_bounds(out: dict[str, float], ideal: float) -> dict[str, float]:
    split_keys = ("host_tx", "host_rx", "host_start", "fabric_out_split", "fabric_in_split",
                  "bisection")
    out["ideal"] = ideal
    out["splittable"] = max(out.get(key, 0.0) for key in split_keys)
    out["unsplit"] = max(v for key, v in out.items() if key not in ("splittable",))
    return {key: float(v) for key, v in out.items()}


# =========================================================================================
# 5. The aggregate what-if: astral3 two-tier fabric, EP groups, group symmetry
# =========================================================================================
@dataclass(frozen=True)
class TwoTier:
    """An astral3 fabric described by its numbers instead of its wiring (the builder's rules).

    Hosts are ranks ``server * gpus + gpu``; NIC i of the servers of block B hangs off leaf
    ``B * gpus + i`` (``lf{B}r{i}``); leaf uplink lane k (``k = port * L + lane``) goes to
    spine ``k % spines`` (``testbed.shuffle``), ``per_spine`` lanes from each leaf to each
    spine. Only the emulation's limits (interface-name length, 256 addressable blocks) are
    not applied, which is what lets a 64K-GPU what-if exist.
    """

    servers: int
    gpus: int  # per server = rails
    servers_per_block: int
    nic_gbps: float
    lane_gbps: float
    up_lanes: int  # per leaf
    spines: int
    radix: int
    oversubscription: float
    lanes_per_uplink: int
    topology: str = "astral3"

    @classmethod
    def from_spec(cls, spec: FabricSpec, topology: str = "astral3") -> TwoTier:
        """The design's own rules (its module's ``two_tier``), without the emulator's
        addressing limits; same messages as its builder."""
        rules = topologies.get(topology).two_tier
        if rules is None:
            raise ValueError(f"the aggregate what-if needs a two-tier design (a topology "
                             f"module with two_tier); {topology} has none")
        try:
            up, spines, _leaves = rules(spec)
        except ValueError as exc:
            if "spine needs" not in str(exc):
                raise
            leaves = spec.servers // spec.servers_per_block * spec.gpus
            raise ValueError(
                f"{exc} (two tiers: one spine lane per leaf, {leaves} leaves). The 64K-GPU "
                "what-if is --radix 1024 --servers-per-block 64 (51.2T leaves, 204.8T "
                "spines); `astral-lab cost` shows the rail-group layout at radix 256") from None
        return cls(spec.servers, spec.gpus, spec.servers_per_block, spec.nic_gbps,
                   spec.lane_gbps, up, spines, spec.radix, spec.oversubscription,
                   spec.lanes_per_uplink, topology)

    @property
    def blocks(self) -> int:
        return self.servers // self.servers_per_block

    @property
    def leaves(self) -> int:
        return self.blocks * self.gpus

    @property
    def per_spine(self) -> int:
        """m: lanes from each leaf to each spine."""
        return self.up_lanes // self.spines

    @property
    def hosts(self) -> int:
        return self.servers * self.gpus

    def leaf_of(self, ranks: np.ndarray) -> np.ndarray:
        server, gpu = np.divmod(ranks, self.gpus)
        return server // self.servers_per_block * self.gpus + gpu

    def leaf_name(self, leaf: int) -> str:
        return f"lf{leaf // self.gpus}r{leaf % self.gpus}"

    def host_name(self, rank: int) -> str:
        return f"s{rank // self.gpus}g{rank % self.gpus}"

    def describe(self) -> dict[str, Any]:
        nic_lanes = self.nic_gbps / self.lane_gbps
        leaf_lanes = self.servers_per_block * nic_lanes + self.up_lanes
        return {
            "topology": self.topology, "gpus": self.hosts, "servers": self.servers,
            "gpus_per_server": self.gpus, "servers_per_block": self.servers_per_block,
            "blocks": self.blocks, "leaves": self.leaves, "spines": self.spines,
            "uplink_lanes_per_leaf": self.up_lanes, "lanes_per_leaf_spine_pair": self.per_spine,
            "nic_gbps": self.nic_gbps, "lane_gbps": self.lane_gbps, "radix": self.radix,
            "oversubscription": self.oversubscription,
            "leaf_lanes_used": leaf_lanes, "spine_lanes_used": self.leaves * self.per_spine,
            "lane_links": 2 * self.leaves * self.up_lanes,
            "summary": (f"{self.topology}: {self.hosts:,} GPUs = {self.servers:,} servers x "
                        f"{self.gpus}; "
                        f"{self.blocks} block{'s' if self.blocks > 1 else ''} of "
                        f"{self.servers_per_block} servers; "
                        f"{self.leaves:,} leaves ({self.servers_per_block} x "
                        f"{self.nic_gbps:g}G down, {self.up_lanes} x {self.lane_gbps:g}G lanes "
                        f"up = {leaf_lanes:g} lanes); {self.spines} spines ("
                        f"{self.leaves * self.per_spine:,} x {self.lane_gbps:g}G lanes each, "
                        f"{self.per_spine} per leaf); radix {self.radix}"),
        }


@dataclass
class Job:
    """EP groups placed on servers, and the flows of ONE group in its local ranks.

    Every group sends the same flows (local rank k is GPU ``k % gpus`` of the group's
    ``k // gpus``-th server). That is exact for ``alltoall``; for ``prefill``/``decode`` it
    means one seeded MoE step is replayed in every group (a stated assumption: it is what
    makes the 64K what-if affordable, and groups with independent steps differ only by
    sampling noise).
    """

    workload: str
    groups: int
    group_size: int
    placement: str
    gpus_per_server: int
    group_servers: np.ndarray  # (groups, servers per group)
    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray  # bytes per flow
    start: np.ndarray  # seconds
    qp: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def flows(self) -> int:
        return self.groups * int(self.src.size)

    def ranks(self) -> np.ndarray:
        """``(groups, group_size)`` global GPU rank of every group's local rank."""
        g = self.gpus_per_server
        return (self.group_servers[:, :, None] * g + np.arange(g)).reshape(self.groups, -1)

    def equal_sizes(self) -> bool:
        """All flows the same size and start: the premise of the completion theorem."""
        return bool(self.size.size and np.all(self.size == self.size[0])
                    and np.all(self.start == self.start[0]) and self.size[0] > 0)

    def flow_list(self, names: dict[int, str]) -> list[_FlowIn]:
        """Every group's flows as model inputs; ``names[rank]`` is the plan's host name."""
        out = []
        sports = [sport_for_qp(int(q)) for q in self.qp]
        for ranks in self.ranks().tolist():
            hn = [names[r] for r in ranks]
            out.extend(_FlowIn(hn[s], hn[d], p, b, t, qp=q) for s, d, p, b, t, q in zip(
                self.src.tolist(), self.dst.tolist(), sports, self.size.tolist(),
                self.start.tolist(), self.qp.tolist(), strict=True))
        return out


#: one group's flows are kept in memory; beyond this the what-if would not fit
MAX_GROUP_FLOWS = 5_000_000


def make_job(servers: int, gpus_per_server: int, *, workload: str = "alltoall",
             groups: int = 0, group_size: int = 0, placement: str = "packed", seed: int = 0,
             pair_bytes: int = DEFAULT_PAIR_BYTES, qps: int = 1, phase: str = "dispatch",
             tokens: int = 0, model: str = "deepseek-v3") -> Job:
    """Groups, their placement and one group's flows (see ``Job``).

    ``group_size`` 0 = min(all GPUs, 256); ``groups`` 0 = as many as fit. ``packed``: group
    g takes servers g*q .. g*q+q-1 (q = group_size / gpus_per_server); ``spread``: servers
    g, g+T, g+2T, ... with T = servers // q, i.e. strided across the whole fabric. Groups take
    whole servers (as a scheduler gives them), so group_size must be a multiple of
    gpus_per_server.

    ``alltoall``: every ordered pair of the group's GPUs sends ``pair_bytes`` (over ``qps``
    flows), all starting at 0, every GPU pair over the network (the issue's 16.7M GPU-pair
    flows at 64K). ``prefill``/``decode``: one ``traffic.workload.simulate_step`` of
    ``model`` (tokens per GPU 4096 / 128 unless ``tokens``) through
    ``traffic.kernels.high_bandwidth`` / ``low_latency``, one ``phase``; same-server copies
    ride NVLink, as those kernels do.
    """
    for name, value in (("servers", servers), ("gpus_per_server", gpus_per_server)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1 (got {value!r})")
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose from "
                         f"{', '.join(PLACEMENTS)}")
    for name, value in (("groups", groups), ("group_size", group_size), ("tokens", tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0 (0 = automatic; got {value!r})")
    if not isinstance(qps, int) or qps < 1 or not isinstance(pair_bytes, int) or pair_bytes < 1:
        raise ValueError("qps and bytes per pair must be integers >= 1")
    gps = gpus_per_server
    total = servers * gps
    size = group_size or min(total, 256)
    if size % gps or size < 2:
        raise ValueError(f"group size {size} must be a multiple of {gps} GPUs per server and "
                         ">= 2 (groups take whole servers)")
    q = size // gps
    n_groups = groups or total // size
    if n_groups < 1 or n_groups * q > servers:
        raise ValueError(f"{groups or 'auto'} group(s) x {size} GPUs = {max(n_groups, 1) * size} "
                         f"GPUs do not fit the fabric's {total} GPUs")
    if placement == "packed":
        gs = np.arange(n_groups)[:, None] * q + np.arange(q)
    else:
        gs = np.arange(n_groups)[:, None] + (servers // q) * np.arange(q)
    info: dict[str, Any] = {"workload": workload, "groups": n_groups, "group_size": size,
                            "placement": placement, "seed": seed}
    if workload == "alltoall":
        n_pairs = size * (size - 1) * qps
        if n_pairs > MAX_GROUP_FLOWS:
            raise ValueError(f"one group's all-to-all is {n_pairs:,} flows (> {MAX_GROUP_FLOWS:,}"
                             "): use smaller groups (--group-size) or fewer --qps")
        k = np.arange(size)
        src = np.repeat(k, size - 1)
        dst = (src + 1 + np.tile(np.arange(size - 1), size)) % size
        src, dst = np.repeat(src, qps), np.repeat(dst, qps)
        part = np.tile(np.arange(qps), size * (size - 1))
        nbytes = pair_bytes // qps + (part < pair_bytes % qps)
        qp = dst * qps + part
        start = np.zeros(src.size)
        info.update(bytes_per_pair=pair_bytes, qps_per_pair=qps, intra_server="fabric")
    else:
        from traffic import kernels
        from traffic.workload import simulate_step

        tok = tokens or (4096 if workload == "prefill" else 128)
        step = simulate_step(model, q, gps, tok, seed=seed)
        kern = kernels.high_bandwidth if workload == "prefill" else kernels.low_latency
        traffic = kern(step, phases=(phase,))
        rank = {name: i for i, name in enumerate(kernels.Cluster.default(q, gps).hosts)}
        fs = traffic.flows
        if len(fs) > MAX_GROUP_FLOWS:
            raise ValueError(f"one group's step is {len(fs):,} flows (> {MAX_GROUP_FLOWS:,})")
        src = np.array([rank[f.src] for f in fs], dtype=np.int64)
        dst = np.array([rank[f.dst] for f in fs], dtype=np.int64)
        nbytes = np.array([f.bytes for f in fs], dtype=np.int64)
        qp = np.array([f.qp for f in fs], dtype=np.int64)
        start = np.array([f.start for f in fs], dtype=np.float64)
        info.update(kernel=traffic.kernel, model=step.model.name, tokens_per_gpu=tok,
                    phase=phase, step=step.summary(), same_step_in_every_group=True)
    if not src.size:
        raise ValueError("the workload has no network flows (e.g. a group inside one server)")
    job = Job(workload, n_groups, size, placement, gps, gs, src.astype(np.int64),
              dst.astype(np.int64), np.asarray(nbytes, dtype=np.int64), start,
              np.asarray(qp, dtype=np.int64), info)
    info.update(flows=job.flows, flows_per_group=int(src.size),
                bytes_total=int(job.size.sum()) * n_groups)
    return job


class _Quotient:
    """The group quotient of a job on a TwoTier fabric (module docstring, point 3).

    Builds leaf labels (the multiset of local ranks under each leaf) and checks the two
    premises that make every link of a class carry the same load; raises ValueError (with
    what to do) when a placement breaks them.
    """

    def __init__(self, tt: TwoTier, job: Job) -> None:
        self.tt, self.job = tt, job
        ranks = job.ranks()
        if ranks.max() >= tt.hosts:
            raise ValueError("the job's groups do not fit the fabric")
        self.ranks = ranks
        groups, n = ranks.shape
        leaf = tt.leaf_of(ranks)
        self.leaf = leaf
        flat, k = leaf.ravel(), np.tile(np.arange(n), groups)
        order = np.lexsort((k, flat))
        ls, ks = flat[order], k[order]
        cut = np.flatnonzero(np.diff(ls)) + 1
        label_of_leaf = np.full(tt.leaves, -1, dtype=np.int64)
        labels: dict[bytes, int] = {}
        rep: list[int] = []
        mult: list[np.ndarray] = []
        for s, e in zip(np.r_[0, cut], np.r_[cut, ls.size], strict=True):
            key = ks[s:e].tobytes()
            lab = labels.get(key)
            if lab is None:
                lab = labels[key] = len(rep)
                rep.append(int(ls[s]))
                mult.append(np.bincount(ks[s:e], minlength=n))
            label_of_leaf[ls[s]] = lab
        lab = label_of_leaf[leaf]
        if not np.all(lab == lab[0]):
            raise ValueError("this placement is not the same for every group (a local rank "
                             "sits under differently loaded leaves in different groups), so the "
                             "group-symmetric model does not apply; use --mode per-flow on a "
                             "smaller fabric, or groups that divide the blocks evenly")
        canon0 = None
        for g in range(groups):
            _, first, inv = np.unique(leaf[g], return_index=True, return_inverse=True)
            canon = first[inv.ravel()]
            if canon0 is None:
                canon0 = canon
            elif not np.array_equal(canon, canon0):
                raise ValueError("groups split their GPUs over leaves differently, so the "
                                 "group-symmetric model does not apply; use --mode per-flow")
        self.label_k = lab[0]
        self.n_labels = len(rep)
        self.rep_leaf = np.array(rep, dtype=np.int64)
        self.leaves_of_label = np.bincount(label_of_leaf[label_of_leaf >= 0],
                                           minlength=self.n_labels)
        self.mcount = np.array(mult, dtype=np.float64)  # (labels, n): rank k per leaf
        self.cross = leaf[0][job.src] != leaf[0][job.dst]
        self.n = n

    # --- the quotient's links ----------------------------------------------------------
    def links(self) -> _Links:
        """tx(k), rx(k) for every local rank k; up/down bundles for every leaf label."""
        tt, n, groups = self.tt, self.n, self.job.groups
        name, tier = [], []
        r0, l0 = self.ranks[0], self.leaf[0]
        for k in range(n):
            name.append(f"{tt.host_name(int(r0[k]))}->{tt.leaf_name(int(l0[k]))}"
                        f" (x{groups} groups)")
            tier.append("gpu->leaf")
        for k in range(n):
            name.append(f"{tt.leaf_name(int(l0[k]))}->{tt.host_name(int(r0[k]))}"
                        f" (x{groups} groups)")
            tier.append("leaf->gpu")
        for lab in range(self.n_labels):
            name.append(f"{tt.leaf_name(int(self.rep_leaf[lab]))}->spines (all "
                        f"{tt.up_lanes} lanes; {self.leaves_of_label[lab]} leaves alike)")
            tier.append("leaf->spine")
        for lab in range(self.n_labels):
            name.append(f"spines->{tt.leaf_name(int(self.rep_leaf[lab]))} (all "
                        f"{tt.up_lanes} lanes; {self.leaves_of_label[lab]} leaves alike)")
            tier.append("spine->leaf")
        lanes = self.leaves_of_label * tt.up_lanes
        count = np.concatenate([np.full(2 * n, groups), lanes, lanes]).astype(np.float64)
        cap = np.concatenate([np.full(2 * n, tt.nic_gbps), np.full(2 * self.n_labels,
                                                                   tt.lane_gbps)]) * 1e9
        return _Links(name, tier, count, cap, self.tier_links())

    def tier_links(self) -> dict[str, int]:
        lanes = self.tt.leaves * self.tt.up_lanes
        return {"gpu->leaf": self.tt.hosts, "leaf->gpu": self.tt.hosts, "leaf->spine": lanes,
                "spine->leaf": lanes}

    def incidence(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rows (one per flow of the representative group) over the quotient's links."""
        job, n, nl = self.job, self.n, self.n_labels
        c = self.cross
        nf = job.src.size
        row = [np.arange(nf), np.arange(nf), np.flatnonzero(c), np.flatnonzero(c)]
        col = [job.src, n + job.dst, 2 * n + self.label_k[job.src[c]],
               2 * n + nl + self.label_k[job.dst[c]]]
        row_a, col_a = np.concatenate(row), np.concatenate(col)
        order = np.argsort(row_a, kind="stable")
        return row_a[order], col_a[order], np.ones(row_a.size), np.ones(nf)


def _whatif_static(q: _Quotient) -> tuple[_Links, np.ndarray]:
    """Bytes on every quotient link (policy-independent at NIC and leaf-bundle level)."""
    links = q.links()
    row, col, w, _ = q.incidence()
    load = np.bincount(col, w * q.job.size[row] * q.job.groups, minlength=links.count.size)
    return links, load


def _whatif_fluid(q: _Quotient, bnd: dict[str, float], tolerance: float = 0.0) -> ModelResult:
    """ecmp-fluid on the group quotient: event-driven max-min, exact (module docstring, 3)."""
    t0 = time.perf_counter()
    job = q.job
    row, col, w, _ = q.incidence()
    keys = np.column_stack([job.src, job.dst, job.size, job.start]).astype(np.float64)
    uniq, first, inv, cnt = np.unique(keys, axis=0, return_index=True, return_inverse=True,
                                      return_counts=True)
    inv = inv.ravel()
    keep = np.isin(row, first)
    pos = np.full(job.src.size, -1, dtype=np.int64)
    pos[first] = np.arange(first.size)
    c_row, c_col, c_w = pos[row[keep]], col[keep], w[keep]
    links, load = _whatif_static(q)
    mult = cnt.astype(np.float64) * job.groups
    tl = simulate(links.capacity, c_row, c_col, c_w, mult, uniq[:, 2] * 8, uniq[:, 3],
                  tolerance)
    completion = float(tl.finish.max())
    kind, note = _tolerance_note(tolerance, f"{job.flows:,} flows as {uniq.shape[0]:,} classes "
                                            f"on {links.count.size:,} link classes")
    return ModelResult(
        policy="ecmp-fluid", method="per-hop equal split, group-quotient max-min "
        "(lanes of a leaf merged; groups merged by symmetry)", kind=kind,
        completion_s=completion, flows=job.flows, classes=int(uniq.shape[0]),
        events=tl.events, rounds=tl.rounds,
        max_link_time_s=float((load * 8 / links.capacity).max()),
        bound_s=bnd["splittable"], bound_name="splittable",
        tiers=_tier_summary(links, load, completion),
        bottlenecks=_bottlenecks(links, load, tl.saturated),
        flow_completion=_quantiles(tl.finish, mult), compute_s=time.perf_counter() - t0,
        flow_finish_s=tl.finish[inv], flow_start_rate_bps=tl.start_rate[inv], note=note)


def _whatif_planned(q: _Quotient, bnd: dict[str, float]) -> ModelResult:
    """The planned job time from lane counts and the equal-size theorem (module docstring).

    D is the largest cross-leaf degree of any leaf, summed over the local ranks under it;
    C the lane classes (spines x lanes per leaf-spine pair = a leaf's uplink lanes).
    """
    t0 = time.perf_counter()
    job, tt = q.job, q.tt
    if not job.equal_sizes():
        return ModelResult(
            policy="planned", method="not computed", kind="not-computed", completion_s=None,
            flows=job.flows, bound_s=bnd["unsplit"], bound_name="unsplit",
            note="unequal flow sizes or starts: lb.plan_assign's greedy planner is per-flow "
                 "Python and the equal-size theorem does not apply; use --mode per-flow on a "
                 "smaller fabric")
    s = float(job.size[0])
    n, c = q.n, q.cross
    out_all = np.bincount(job.src, minlength=n)
    in_all = np.bincount(job.dst, minlength=n)
    deg_out = q.mcount @ np.bincount(job.src[c], minlength=n)
    deg_in = q.mcount @ np.bincount(job.dst[c], minlength=n)
    lanes = tt.up_lanes  # C = spines x lanes per (leaf, spine) lane classes
    d = float(max(deg_out.max(), deg_in.max())) if c.any() else 0.0
    per_lane = math.ceil(d / lanes) if d else 0
    nic, lane = tt.nic_gbps * 1e9, tt.lane_gbps * 1e9
    times = {"NIC tx": out_all.max() * s * 8 / nic, "NIC rx": in_all.max() * s * 8 / nic,
             "busiest lane": per_lane * s * 8 / lane}
    completion = max(times.values())
    links, load = _whatif_static(q)
    up_max = math.ceil(deg_out.max() / lanes) * s if c.any() else 0.0
    down_max = math.ceil(deg_in.max() / lanes) * s if c.any() else 0.0
    tiers = _tier_summary(links, load, completion, {"leaf->spine": up_max,
                                                    "spine->leaf": down_max})
    bott = _bottlenecks(links, load, None)
    if per_lane:
        worst = int(np.argmax(np.maximum(deg_out, deg_in)))
        bott.insert(0, {"link": f"busiest lane of {tt.leaf_name(int(q.rep_leaf[worst]))} "
                                f"({q.leaves_of_label[worst]} leaves alike)",
                        "tier": "leaf->spine" if deg_out[worst] >= deg_in[worst] else
                        "spine->leaf", "links_alike": int(q.leaves_of_label[worst]),
                        "bytes_each": per_lane * s, "link_time_s": times["busiest lane"],
                        "flows": per_lane})
    bott.sort(key=lambda b: -b["link_time_s"])
    return ModelResult(
        policy="planned", method="lane colouring: ceil(D/C) flows on the busiest lane "
        "(Konig) + equal-size theorem", kind="exact", completion_s=completion,
        flows=job.flows, max_link_time_s=completion, bound_s=bnd["unsplit"],
        bound_name="unsplit", tiers=tiers, bottlenecks=bott[:5],
        flow_completion={"max": completion}, compute_s=time.perf_counter() - t0,
        note=f"max leaf degree D={int(d):,} cross-leaf flows over C={lanes} lane classes -> "
             f"{per_lane} per busiest lane; job time is exact for any colouring lb finds, "
             "per-flow times are not computed; limited by " + max(times, key=times.get))


class _LaneNames(Sequence[str]):
    """Names of the what-if's per-lane links, made on demand (262K at 64K GPUs)."""

    def __init__(self, tt: TwoTier, n_front: list[str]) -> None:
        self.tt, self.front = tt, n_front

    def __len__(self) -> int:
        return len(self.front) + 2 * self.tt.leaves * self.tt.up_lanes

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < len(self.front):
            return self.front[i]
        tt = self.tt
        i -= len(self.front)
        down, i = divmod(i, tt.leaves * tt.up_lanes)
        leaf, k = divmod(i, tt.up_lanes)
        spine, r = k % tt.spines, k // tt.spines
        if down:
            return f"spine{spine}:{leaf * tt.per_spine + r + 1}->{tt.leaf_name(leaf)}"
        return f"{tt.leaf_name(leaf)}:{tt.servers_per_block + k + 1}->spine{spine}"


def ecmp_lanes(tt: TwoTier, seed: int, leaf_names: Sequence[str], src_names: Sequence[str],
               dst_names: Sequence[str], sports: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Up-lane and down-lane index (0..up_lanes-1) of cross-leaf flows under ``lb``'s hash.

    ``lb.ecmp_path`` hashes ``f"{seed}|{switch}|{src}|{dst}|udp|{sport}|4791"`` with BLAKE2
    (``lb._bucket_hash``) at every switch and takes ``ports[h % len(ports)]``. On astral3 the
    source leaf's ports toward another leaf are its uplink lanes in port order (lane k), lane
    k lands on spine ``k % S``, and that spine's ports toward the destination leaf are its
    ``m`` lanes from it in port order. The same string, the same hash, the same choice: the
    unit tests compare this with ``lb.ecmp_path`` flow by flow.
    """
    b2 = hashlib.blake2b
    up, spines, m = tt.up_lanes, tt.spines, tt.per_spine
    k = np.fromiter(
        (int.from_bytes(b2(f"{seed}|{a}|{s}|{d}|udp|{p}|{ROCE_PORT}".encode(),
                           digest_size=8).digest(), "big") % up
         for a, s, d, p in zip(leaf_names, src_names, dst_names, sports, strict=True)),
        dtype=np.int64, count=len(sports))
    spine = k % spines
    if m == 1:
        return k, spine
    r = np.fromiter(
        (int.from_bytes(b2(f"{seed}|spine{x}|{s}|{d}|udp|{p}|{ROCE_PORT}".encode(),
                           digest_size=8).digest(), "big") % m
         for x, s, d, p in zip(spine.tolist(), src_names, dst_names, sports, strict=True)),
        dtype=np.int64, count=len(sports))
    return k, r * spines + spine


def _whatif_ecmp(q: _Quotient, bnd: dict[str, float], seed: int) -> ModelResult:
    """Hash every flow of every group onto its lanes; exact per-lane bytes."""
    t0 = time.perf_counter()
    job, tt = q.job, q.tt
    lanes = tt.leaves * tt.up_lanes
    up_b, down_b = np.zeros(lanes), np.zeros(lanes)
    up_n, down_n = np.zeros(lanes), np.zeros(lanes)
    c = np.flatnonzero(q.cross)
    src_l, dst_l = job.src[c].tolist(), job.dst[c].tolist()
    size = job.size[c].astype(np.float64)
    sports = [sport_for_qp(int(x)) for x in job.qp[c]]
    for g in range(job.groups):
        ranks, leaf = q.ranks[g], q.leaf[g]
        hn = [tt.host_name(r) for r in ranks.tolist()]
        ln = [tt.leaf_name(x) for x in leaf.tolist()]
        k_up, k_down = ecmp_lanes(tt, seed, [ln[s] for s in src_l], [hn[s] for s in src_l],
                                  [hn[d] for d in dst_l], sports)
        a = leaf[job.src[c]] * tt.up_lanes + k_up
        b = leaf[job.dst[c]] * tt.up_lanes + k_down
        up_b += np.bincount(a, size, minlength=lanes)
        down_b += np.bincount(b, size, minlength=lanes)
        up_n += np.bincount(a, minlength=lanes)
        down_n += np.bincount(b, minlength=lanes)
    front, front_load = _whatif_static(q)
    nfront = 2 * q.n
    lane_cap = tt.lane_gbps * 1e9
    links = _Links(_LaneNames(tt, front.name[:nfront]),
                   front.tier[:nfront] + ["leaf->spine"] * lanes + ["spine->leaf"] * lanes,
                   np.concatenate([front.count[:nfront], np.ones(2 * lanes)]),
                   np.concatenate([front.cap_each[:nfront], np.full(2 * lanes, lane_cap)]),
                   q.tier_links())
    load = np.concatenate([front_load[:nfront], up_b, down_b])
    mlt = float((load * 8 / links.capacity).max())
    exact = job.equal_sizes()
    bott = _bottlenecks(links, load, None)
    counts = np.concatenate([np.zeros(nfront), up_n, down_n])
    order = np.argsort(-(load * 8 / links.capacity), kind="stable")[:len(bott)]
    for b, i in zip(bott, order, strict=True):
        if i >= nfront:
            b["flows"] = int(counts[i])
    note = (f"all {job.flows:,} flows hashed with lb's recipe; " + (
        "equal sizes and starts, so the max link time IS the max-min completion (theorem)"
        if exact else "unequal sizes: the max link time is a lower bound on the completion; "
        "per-flow max-min at this scale is not computed"))
    return ModelResult(
        policy="ecmp", method="lb hash per flow -> exact lane loads", flows=job.flows,
        kind="exact" if exact else "lower-bound", completion_s=mlt, max_link_time_s=mlt,
        bound_s=bnd["unsplit"], bound_name="unsplit", note=note,
        tiers=_tier_summary(links, load, mlt if exact else None),
        bottlenecks=bott, compute_s=time.perf_counter() - t0,
        flow_completion={"max": mlt} if exact else {})


def _whatif_bounds(q: _Quotient) -> dict[str, float]:
    """The same bounds as ``bounds`` computed on the quotient (equal to it, tested)."""
    job, tt, n = q.job, q.tt, q.n
    s = job.size.astype(np.float64)
    nic, lane = tt.nic_gbps * 1e9, tt.lane_gbps * 1e9
    out: dict[str, float] = {
        "host_tx": float(np.bincount(job.src, s, minlength=n).max() * 8 / nic),
        "host_rx": float(np.bincount(job.dst, s, minlength=n).max() * 8 / nic),
        "host_start": max(_start_aware(job.src, job.start, s * 8, np.full(s.size, nic)),
                          _start_aware(job.dst, job.start, s * 8, np.full(s.size, nic)))}
    c = q.cross
    for name, end in (("out", job.src), ("in", job.dst)):
        e, sc = end[c], s[c]
        cnt = q.mcount @ np.bincount(e, minlength=n)
        tot = q.mcount @ np.bincount(e, sc, minlength=n)
        big = np.zeros(n)
        small = np.full(n, np.inf)
        np.maximum.at(big, e, sc)
        np.minimum.at(small, e, sc)
        present = q.mcount > 0
        lbig = np.where(present, big, 0.0).max(axis=1)
        lsmall = np.where(present, small, np.inf).min(axis=1)
        equal = (lbig == lsmall) & (cnt > 0)
        fun = _funnel(cnt, tot * 8, lbig * 8, equal, lbig * 8, tt.up_lanes, lane)
        out[f"fabric_{name}"] = float(fun.max()) if c.any() else 0.0
        out[f"fabric_{name}_split"] = float((tot * 8 / (tt.up_lanes * lane)).max()) \
            if c.any() else 0.0
    if tt.blocks >= 2:
        half = tt.blocks // 2
        ab = ba = 0.0
        for g in range(job.groups):
            blk = q.leaf[g] // tt.gpus
            a_src, a_dst = blk[job.src] < half, blk[job.dst] < half
            ab += float(s[a_src & ~a_dst].sum())
            ba += float(s[~a_src & a_dst].sum())
        per_block = tt.gpus * tt.up_lanes * lane
        out["bisection"] = max(ab * 8 / (half * per_block),
                               ba * 8 / ((tt.blocks - half) * per_block))
    ideal = max(out["host_tx"], out["host_rx"], out["fabric_out"], out["fabric_in"])
    return _finish_bounds(out, ideal)


def whatif(tt: TwoTier, job: Job, policies: Sequence[str] = POLICIES, seed: int = 0,
           tolerance: float = 0.0) -> tuple[list[ModelResult], dict[str, float]]:
    """The aggregate model of ``job`` on ``tt`` for each policy, and the bounds.

    ``tolerance``: event coalescing of ecmp-fluid (``simulate``; 0 = exact).
    """
    pols = [_check_policy(p) for p in policies]
    q = _Quotient(tt, job)
    bnd = _whatif_bounds(q)
    out = []
    for p in pols:  # the closed form the policy module names (WHATIF)
        if p.whatif == "fluid":
            res = _whatif_fluid(q, bnd, tolerance)
        elif p.whatif == "lanes":
            res = _whatif_planned(q, bnd)
        elif p.whatif == "hash":
            res = _whatif_ecmp(q, bnd, seed)
        else:
            res = ModelResult(
                policy=p.name, method="not computed", kind="not-computed", completion_s=None,
                flows=job.flows, bound_s=bnd["splittable" if p.split else "unsplit"],
                bound_name="splittable" if p.split else "unsplit",
                note=f"the {p.name} policy has no aggregate form (its module sets no WHATIF); "
                     "use --mode per-flow on a smaller fabric")
        out.append(dataclasses.replace(res, policy=p.name))
    return out, bnd


# =========================================================================================
# 6. One call for the CLI and the benchmark
# =========================================================================================
#: FabricSpec fields the model verb exposes (servers and gpus come from --gpus and
#: --gpus-per-server).
FABRIC_FIELDS = tuple(f.name for f in fields(FabricSpec) if f.name not in ("servers", "gpus"))


def auto_servers_per_block(servers: int, gpus_per_server: int, spec: FabricSpec) -> int:
    """Largest block that fills a leaf: NIC lanes + uplink lanes within the radix, uplinks in
    whole ports, dividing the servers (what a buyer does; ``testbed.cost`` sizes alike)."""
    n = spec.nic_gbps / spec.lane_gbps
    for d in range(min(servers, int(spec.radix // max(n, 1e-9))), 0, -1):
        up = d * n / spec.oversubscription
        if servers % d or abs(up - round(up)) > 1e-9 or round(up) < 1:
            continue
        if round(up) % spec.lanes_per_uplink or d * n + round(up) > spec.radix:
            continue
        return d
    raise ValueError(f"no servers-per-block fits a {spec.radix}-lane leaf with whole "
                     f"{spec.lanes_per_uplink}-lane uplink ports for {servers} servers; pass "
                     "--servers-per-block")


def _spec(topology: str, servers: int, gps: int, fabric: dict[str, Any]) -> FabricSpec:
    unknown = sorted(set(fabric) - set(FABRIC_FIELDS))
    if unknown:
        raise ValueError(f"unknown fabric parameter(s) {', '.join(unknown)}")
    params = {k: v for k, v in fabric.items() if v is not None}
    spec = FabricSpec(servers=servers, gpus=gps, **params)
    if topologies.get(topology).blocks and "servers_per_block" not in params:
        spec = FabricSpec(servers=servers, gpus=gps, **params,
                          servers_per_block=auto_servers_per_block(servers, gps, spec))
    return spec


def run(topology: str, gpus: int, *, gpus_per_server: int = 8, workload: str = "alltoall",
        policies: Sequence[str] = POLICIES, groups: int = 0, group_size: int = 0,
        placement: str = "packed", seed: int = 0, pair_bytes: int = DEFAULT_PAIR_BYTES,
        qps: int = 1, phase: str = "dispatch", tokens: int = 0, model: str = "deepseek-v3",
        mode: str = "auto", exact_flows: int = DEFAULT_EXACT_FLOWS, unit: str = "gbps",
        fabric: dict[str, Any] | None = None, tolerance: float = 0.0, jobs: int = 1
        ) -> tuple[dict[str, Any], list[ModelResult]]:
    """Build the fabric and the job, model every policy, return (model.json document, results).

    ``mode``: ``per-flow`` routes every flow with the controller's code on a real wiring plan
    (any topology); ``aggregate`` is the group-symmetric what-if (astral3 only); ``auto``
    picks per-flow while the job has at most ``exact_flows`` flows. ``tolerance``: event
    coalescing (``simulate``); 0 = exact. ``jobs``: per-flow policies modelled in that many
    processes at once (0 = as many as the CPUs and memory allow; ``auto_jobs``).
    """
    t0 = time.perf_counter()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"--jobs must be 0 (auto) or a positive integer (got {jobs!r})")
    two_tier = topologies.get(topology).two_tier is not None  # ValueError if unknown
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if not policies:
        raise ValueError("no policy to model; choose from " + ", ".join(POLICIES))
    for p in policies:
        _check_policy(p)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"--gpus must be a positive integer (got {gpus!r})")
    if isinstance(gpus_per_server, bool) or not isinstance(gpus_per_server, int) \
            or gpus_per_server < 1:
        raise ValueError(f"--gpus-per-server must be a positive integer (got "
                         f"{gpus_per_server!r})")
    if gpus % gpus_per_server:
        raise ValueError(f"{gpus} GPUs is not a whole number of {gpus_per_server}-GPU servers")
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {sorted(UNITS)} (got {unit!r})")
    if not 0 <= tolerance < 0.5:
        raise ValueError(f"--event-tolerance must be in [0, 0.5) (got {tolerance!r})")
    servers = gpus // gpus_per_server
    spec = _spec(topology, servers, gpus_per_server, dict(fabric or {}))
    job = make_job(servers, gpus_per_server, workload=workload, groups=groups,
                   group_size=group_size, placement=placement, seed=seed,
                   pair_bytes=pair_bytes, qps=qps, phase=phase, tokens=tokens, model=model)
    chosen = mode
    if mode == "auto":
        chosen = "per-flow" if job.flows <= exact_flows else "aggregate"
    why = (f"{job.flows:,} flows {'<=' if chosen == 'per-flow' else '>'} --exact-flows "
           f"{exact_flows:,}" if mode == "auto" else "requested")
    results: list[ModelResult]
    if chosen == "per-flow" and job.flows > MAX_PER_FLOW:
        raise ValueError(f"{job.flows:,} flows is too many for the per-flow model (at most "
                         f"{MAX_PER_FLOW:,}: it keeps Python objects per flow); use --mode "
                         "aggregate (astral3) or fewer GPUs")
    if chosen == "aggregate":
        if not two_tier:
            raise ValueError(f"{job.flows:,} flows is more than the per-flow model takes "
                             f"(--exact-flows {exact_flows:,}) and the aggregate what-if covers "
                             "two-tier designs (astral3) only; use fewer GPUs or raise "
                             "--exact-flows")
        if unit != "gbps":
            raise ValueError("the aggregate what-if has no emulated fabric: use --unit gbps")
        tt = TwoTier.from_spec(spec, topology)
        results, bnd = whatif(tt, job, policies, seed, tolerance)
        fab = tt.describe()
    else:
        plan = build(topology, **{f.name: getattr(spec, f.name) for f in fields(FabricSpec)})
        finder = PathFinder(plan)
        names = {int(h.loc["server"]) * gpus_per_server + int(h.loc["gpu"]): h.name
                 for h in plan.hosts}
        prep = _Prepared(finder, job.flow_list(names), unit)
        bnd = bounds(finder, prep.fl, unit)
        results = _model_policies(prep, policies, jobs, seed=seed, bound=bnd,
                                  tolerance=tolerance)
        summary = f"{plan.topology}: " + ", ".join(
            f"{k.replace('_', ' ')} {v}" for k, v in plan.counts.items()
            if not isinstance(v, dict))
        if two_tier:
            summary = TwoTier.from_spec(spec, topology).describe()["summary"]
        fab = {"topology": plan.topology, **plan.counts, "params": plan.params,
               "summary": summary + " (per-flow, on its wiring plan)"}
    doc = {"schema": SCHEMA, "version": 1, "mode": chosen, "mode_reason": why, "unit": unit,
           "event_tolerance": tolerance,
           "fabric": fab, "workload": job.info, "seed": seed, "bounds_s": bnd,
           "results": [r.to_dict() for r in results],
           "runtime_s": round(time.perf_counter() - t0, 3)}
    return doc, results


# =========================================================================================
# 7. CLI glue (registered by astral_lab/cli.py as `astral-lab model`)
# =========================================================================================
def add_model_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``model`` verb."""
    p = subparsers.add_parser(
        "model", help="flow-level model: completion time per routing policy beside the bound",
        description="Max-min fair flow model of a job on a fabric: completion time per routing "
                    "policy (the controller's own ecmp/planned/adaptive code, plus fluid ECMP), "
                    "the lower bounds, the bottleneck links. Per-flow up to --exact-flows "
                    "flows; above that an exact group-symmetric what-if (astral3). 64K-GPU "
                    "what-if: astral-lab model astral3 --gpus 65536 --radix 1024 "
                    "--servers-per-block 64 --groups 256 --group-size 256")
    p.add_argument("topology", choices=topologies.names())
    p.add_argument("--gpus", type=int, required=True, metavar="N", help="GPUs in the fabric")
    p.add_argument("--gpus-per-server", type=int, default=8, metavar="N", help="default 8")
    p.add_argument("--workload", default="alltoall", choices=WORKLOADS,
                   help="alltoall: equal bytes per GPU pair; prefill/decode: one MoE step "
                        "through the high-bandwidth / low-latency kernel (default alltoall)")
    p.add_argument("--lb", default=",".join(POLICIES), metavar="P[,P...]",
                   help=f"policies (default {','.join(POLICIES)})")
    p.add_argument("--groups", type=int, default=0, metavar="G",
                   help="expert-parallel groups (default: as many as fit)")
    p.add_argument("--group-size", type=int, default=0, metavar="N",
                   help="GPUs per group (default min(GPUs, 256))")
    p.add_argument("--placement", default="packed", choices=PLACEMENTS,
                   help="packed: consecutive servers; spread: strided over the fabric")
    p.add_argument("--seed", type=int, default=0, help="ECMP hash seed and MoE step seed")
    p.add_argument("--bytes", type=int, default=DEFAULT_PAIR_BYTES, dest="pair_bytes",
                   metavar="B", help=f"alltoall bytes per GPU pair (default {DEFAULT_PAIR_BYTES})")
    p.add_argument("--qps", type=int, default=1, metavar="Q", help="alltoall flows per GPU pair")
    p.add_argument("--phase", default="dispatch", choices=("dispatch", "combine"))
    p.add_argument("--tokens", type=int, default=0, metavar="T",
                   help="tokens per GPU (default 4096 prefill, 128 decode)")
    p.add_argument("--model", default="deepseek-v3", help="MoE preset (traffic.workload)")
    p.add_argument("--mode", default="auto", choices=MODES)
    p.add_argument("--exact-flows", type=int, default=DEFAULT_EXACT_FLOWS, metavar="N",
                   help=f"auto mode: per-flow up to N flows (default {DEFAULT_EXACT_FLOWS})")
    p.add_argument("--event-tolerance", type=float, default=0.0, metavar="EPS", dest="tolerance",
                   help="coalesce finishes within EPS (relative) of an event: approximate, much "
                        "faster for decode/prefill steps (e.g. 1e-3); default 0 = exact")
    p.add_argument("--jobs", type=int, default=0, metavar="N",
                   help="policies modelled at once, each in its own process (default 0: one "
                        "per CPU, as memory allows)")
    p.add_argument("--unit", default="gbps", choices=sorted(UNITS),
                   help="gbps: real link rates; mbps: the emulated fabric's (per-flow mode)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="write model.json here (default results/<time>-model/)")
    g = p.add_argument_group("fabric (real units; servers-per-block 0/unset = fill the leaf)")
    defaults = FabricSpec()
    for name in FABRIC_FIELDS:
        value = getattr(defaults, name)
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, type=type(value), default=None,
                       metavar="N", help=f"default {value:g}")
    p.set_defaults(fn=run_model)
    return p


def _ms(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x * 1e3:.3f} ms" if x < 10 else f"{x:.3f} s"


def format_report(doc: dict[str, Any]) -> str:
    """What ``astral-lab model`` prints."""
    w = doc["workload"]
    lines = [doc["fabric"]["summary"],
             f"workload: {w['workload']}, {w['groups']} group(s) x {w['group_size']} GPUs "
             f"({w['placement']}), {w['flows']:,} flows, {w['bytes_total']:,} bytes"
             + (f", {w['bytes_per_pair']:,} bytes per GPU pair" if "bytes_per_pair" in w else
                f", {w.get('kernel')} {w.get('phase')}"),
             f"mode: {doc['mode']} ({doc['mode_reason']}); times at "
             f"{'real' if doc['unit'] == 'gbps' else 'emulated'} link rates", ""]
    head = f"{'policy':<11} {'completion':>13} {'x bound':>8}  {'kind':<12} method"
    lines.append(head)
    for r in doc["results"]:
        ratio = "" if r["ratio_to_bound"] is None else f"{r['ratio_to_bound']:.3f}"
        lines.append(f"{r['policy']:<11} {_ms(r['completion_s']):>13} {ratio:>8}  "
                     f"{r['kind']:<12} {r['method']}")
    b = doc["bounds_s"]
    names = [("host_tx", "NIC tx"), ("host_rx", "NIC rx"), ("host_start", "NIC w/ starts"),
             ("fabric_out", "leaf out (unsplit)"), ("fabric_in", "leaf in (unsplit)"),
             ("fabric_out_split", "leaf out (split)"), ("fabric_in_split", "leaf in (split)"),
             ("bisection", "bisection")]
    lines += ["", "lower bounds: " + ", ".join(f"{label} {_ms(b[k])}" for k, label in names
                                                if k in b),
              f"  unsplit (ecmp/planned/adaptive) {_ms(b['unsplit'])}; splittable "
              f"(ecmp-fluid) {_ms(b['splittable'])}"]
    shown = [r for r in doc["results"] if r["tiers"]]
    if shown:
        tiers = sorted({t for r in shown for t in r["tiers"]})
        lines += ["", "busiest link per tier: link time, and links at that load (mean use "
                      "over the job)",
                  f"{'tier':<13}{'links':>9}  " + "".join(f"{r['policy']:<28}" for r in shown)]
        for t in tiers:
            cells = []
            for r in shown:
                x = r["tiers"].get(t)
                if x is None:
                    cells.append(f"{'-':<28}")
                    continue
                n = "?" if x["links_at_max"] is None else f"{x['links_at_max']:,}"
                use = f" ({100 * x['mean_utilisation']:.0f}%)" if "mean_utilisation" in x else ""
                cells.append(f"{_ms(x['max_link_time_s']) + ' x' + n + use:<28}")
            links = max(r["tiers"][t]["links"] for r in shown if t in r["tiers"])
            lines.append(f"{t:<13}{links:>9,}  " + "".join(cells))
    lines += ["", "bottleneck links (link time):"]
    for r in doc["results"]:
        lines.append(f"  {r['policy']}" + (f": {r['note']}" if r["note"] else ""))
        for x in r["bottlenecks"][:3]:
            extra = f", {x['flows']} flows" if "flows" in x else ""
            lines.append(f"    {x['link']} [{x['tier']}] {_ms(x['link_time_s'])}{extra}")
    return "\n".join(lines)


def run_model(args: argparse.Namespace) -> int:
    """Print the report, write model.json. Bad input raises ValueError (the CLI prints it)."""
    policies = [p.strip() for p in str(args.lb).split(",") if p.strip()]
    fabric = {name: getattr(args, name) for name in FABRIC_FIELDS
              if getattr(args, name, None) is not None}
    doc, _ = run(args.topology, args.gpus, gpus_per_server=args.gpus_per_server,
                 workload=args.workload, policies=policies, groups=args.groups,
                 group_size=args.group_size, placement=args.placement, seed=args.seed,
                 pair_bytes=args.pair_bytes, qps=args.qps, phase=args.phase, tokens=args.tokens,
                 model=args.model, mode=args.mode, exact_flows=args.exact_flows, unit=args.unit,
                 fabric=fabric, tolerance=args.tolerance, jobs=args.jobs)
    print(format_report(doc))
    out_dir, final = output_dir("model", args.output)
    write_json_atomic(os.path.join(out_dir, "model.json"), doc)
    if out_dir != final:
        os.replace(out_dir, final)
    print(f"\nresults: {final}/ (model.json)")
    return 0


__all__ = [
    "POLICIES", "WORKLOADS", "PLACEMENTS", "MODES", "DEFAULT_EXACT_FLOWS", "Timeline",
    "ModelResult", "TwoTier", "Job", "simulate", "model_flows", "bounds", "make_job", "whatif",
    "ecmp_lanes", "auto_servers_per_block", "auto_jobs", "run", "format_report", "add_model_parser",
    "run_model",
]
