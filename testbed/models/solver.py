"""Event-driven max-min fair sharing over classes of flows x links: the flow model's solver.
Pure, no root.

The model
    Every directed link (each switch egress ``Hop`` of ``controllers.paths`` plus each host's
    NIC transmit link, which no switch chooses but every flow of the host crosses) has a
    capacity in bits/s. Flows share links *max-min fairly* (what per-flow fair queueing or an
    idealised congestion control converges to), computed by **progressive filling**: raise
    every unfrozen flow's rate together; when a link fills, freeze every flow on it; repeat.
    Each filling round freezes *all* links at the current lowest level at once (ties within
    1e-9 relative); flows and links are index arrays (a classes x links incidence in CSR and
    CSC form), and the event loop is compiled (``testbed.models.maxmin``). The job is
    **event-driven**: rates are recomputed whenever a flow finishes or starts (``start``
    offsets), so flows that finish early hand their share to the rest. After departures only
    the flows at or above the leavers' lowest rate are refilled; the rest provably keep their
    rates. Before any event, links that can never bind are dropped, the job splits into
    components that share no link (each has its own events), and identical components (the
    EP groups of a packed job; the same intra-leaf flows under several policies) are
    simulated once; all three are exact (``simulate``). No packets, no queues, no slow start:
    a fluid model is the *ideal* a transport can reach on that routing, which is what an
    emulation measurement is held against.

``simulate`` knows classes and links only, not fabrics: the per-flow model
(``testbed.models.perflow``) and the what-if (``testbed.models.whatif``) build its arrays.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from testbed.models import maxmin

#: Levels (and finish times) within this relative distance are one round (one event).
REL_TIE = 1e-9
#: Components of at least this many classes are renumbered for memory locality first
#: (``_simulate_component``); smaller ones fit in the CPU's caches as they are.
RELABEL_ROWS = 20_000


def ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
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
    #: ``simulate(trace=True)`` only: every rate each class was given, (class, time, rate)
    #: columns, each class's records in time order, its finish as rate 0
    trace: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def sent_by(self, cls: np.ndarray, bits: np.ndarray, start: np.ndarray) -> np.ndarray:
        """When class ``cls[i]`` (one of its flows) had sent ``bits[i]`` of its bits: the
        rate history of the trace integrated, so a flow's intermediate marks (the end of
        each message a QP sends back to back) cost no extra simulation. ``start``: every
        class's start (a mark at or below 0 bits is reached then)."""
        if self.trace is None:
            raise ValueError("sent_by needs simulate(..., trace=True)")
        row, t, rate = self.trace
        order = np.argsort(row, kind="stable")  # by class, each in time order
        row, t, rate = row[order], t[order], rate[order]
        last = np.r_[row[1:] != row[:-1], True]
        dt = np.where(last, 0.0, np.diff(t, append=0.0))
        sent = rate * dt
        cum = np.cumsum(sent)
        lo = np.searchsorted(row, np.arange(self.finish.size), side="left")
        hi = np.searchsorted(row, np.arange(self.finish.size), side="right")
        cls = np.asarray(cls, dtype=np.int64)
        bits = np.asarray(bits, dtype=np.float64)
        out = np.empty(cls.size)
        if not cls.size:
            return out
        by_cls = np.argsort(cls, kind="stable")  # the queries of each class, in one pass
        cut = np.flatnonzero(np.r_[True, cls[by_cls][1:] != cls[by_cls][:-1], True])
        for s, e in zip(cut[:-1].tolist(), cut[1:].tolist(), strict=True):
            q = by_cls[s:e]
            c = cls[q[0]]
            a, b = lo[c], hi[c]
            if a == b:  # never sent (zero bits): everything reached at its start
                out[q] = start[c]
                continue
            base = cum[a - 1] if a else 0.0
            seg_end = cum[a:b] - base  # bits sent by the end of each record's interval
            k = np.minimum(np.searchsorted(seg_end, bits[q] * (1 - 1e-12), side="left"),
                           b - a - 1)
            before = np.where(k > 0, seg_end[np.maximum(k - 1, 0)], 0.0)
            r = rate[a + k]
            when = t[a + k] + np.where(r > 0, (bits[q] - before) / np.where(r > 0, r, 1), 0)
            out[q] = np.where(bits[q] <= 0, start[c], np.minimum(when, self.finish[c]))
        return out


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
_COMPONENT_CACHE: OrderedDict[bytes, tuple[Any, ...]] = OrderedDict()
_CACHE_CLASSES = 2_000_000


def _digest(*arrays: np.ndarray | float) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.digest()


def _cached_component(cap: np.ndarray, row: np.ndarray, col: np.ndarray, coef: np.ndarray,
                      bits: np.ndarray, start: np.ndarray, tolerance: float, trace: bool,
                      probe: np.ndarray | None = None) -> tuple[bytes, tuple[Any, ...]]:
    """``_simulate_component`` through the cache; returns the component's key and result."""
    key = _digest(cap, row, col, coef, bits, start, np.float64(tolerance), np.int8(trace))
    hit = _COMPONENT_CACHE.get(key)
    if hit is not None:
        _COMPONENT_CACHE.move_to_end(key)
        if probe is not None:
            probe[0] += bits.size
        return key, hit
    out = _simulate_component(cap, row, col, coef, bits, start, tolerance, trace, probe)
    if bits.size <= _CACHE_CLASSES:
        _COMPONENT_CACHE[key] = out
        held = sum(v[0].size for v in _COMPONENT_CACHE.values())
        while held > _CACHE_CLASSES:
            _, old = _COMPONENT_CACHE.popitem(last=False)
            held -= old[0].size
    return key, out


def simulate(capacity: np.ndarray, row: np.ndarray, col: np.ndarray, weight: np.ndarray,
             mult: np.ndarray, bits: np.ndarray, start: np.ndarray | None = None,
             tolerance: float = 0.0, trace: bool = False,
             probe: np.ndarray | None = None) -> Timeline:
    """Event-driven max-min: completion time of every class of flows.

    ``capacity[l]`` bits/s; incidence entries ``(row[i], col[i], weight[i])`` say that a flow
    of class ``row[i]`` puts ``weight[i]`` of its rate on link ``col[i]`` (1 on every hop of a
    pinned path; 1/k on each of k equal-split ports); ``mult[c]`` flows in class c, each
    ``bits[c]`` long, starting at ``start[c]`` seconds. Between events rates are constant;
    the next event is the earliest finish or start. Rows finishing within ``REL_TIE`` of the
    event finish with it.

    ``tolerance`` > 0 trades exactness for events: the rows due to finish by
    ``t_next * (1 + tolerance)`` (t_next: the next finish) are coalesced into one event.
    They leave the allocation together at the mean of their projected finishes weighted
    by their rates, and each is reported at its own projected finish. Leaving at that
    mean, not at the first finish, makes the capacity-time that the early leavers keep
    too long and the late ones give up too early cancel on the links they share, so the
    others' errors mostly cancel instead of adding up (all optimistic) event after event.
    A workload of many distinct sizes (a decode step: a finish time per flow) then takes
    a few thousand events instead of tens of thousands. No theorem bounds the error
    (max-min rates are not monotone in departures): ``flowmodel.DEFAULT_TOLERANCE`` is
    chosen from measurements against the exact solve, and the tests hold it to
    ``flowmodel.MAX_REL_ERROR`` per flow. 0 (the default here) is exact.

    ``probe``: a float64 array of counters the event loop adds to while it runs (classes
    finished, events; a third, if there is one, gets the classes to simulate), for a
    thread that reports progress (``testbed.models.progress``).

    ``trace`` keeps every rate each class was given (``Timeline.trace``), from which
    ``Timeline.sent_by`` says when a class had sent any part of its bits.

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
        empty = (np.empty(0, dtype=np.int64), np.empty(0), np.empty(0)) if trace else None
        return Timeline(np.empty(0), np.empty(0), np.zeros(cap.size, bool), 0, 0, empty)
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
    if probe is not None and probe.size > 2:
        probe[2] += n
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
    traces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    rounds = 0
    seen: set[bytes] = set()
    by_comp = np.argsort(comp, kind="stable")
    cut = np.flatnonzero(np.r_[True, comp[by_comp][1:] != comp[by_comp][:-1], True])
    for s, e in zip(cut[:-1].tolist(), cut[1:].tolist(), strict=True):
        ids = by_comp[s:e]  # ascending class ids: a canonical order
        ent = ranges(kptr[ids], kptr[ids + 1])
        lens = kptr[ids + 1] - kptr[ids]
        links, first, inv = np.unique(col_k[ent], return_index=True, return_inverse=True)
        rank = np.empty(links.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(links.size)
        lcol = rank[inv.ravel()]
        lcap = np.empty(links.size)
        lcap[lcol] = cap[col_k[ent]]
        key, (f, sr, t, r, tr) = _cached_component(
            lcap, np.repeat(np.arange(ids.size), lens), lcol, coef_k[ent], bits[ids],
            start[ids], tolerance, trace, probe)
        finish[ids], start_rate[ids] = f, sr
        if trace:
            traces.append((ids[tr[0]], tr[1], tr[2]))
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
    tr_all = None
    if trace:
        tr_all = tuple(np.concatenate([x[i] for x in traces]) if traces else
                       np.empty(0, dtype=np.int64 if i == 0 else np.float64)
                       for i in range(3))
    return Timeline(finish, start_rate, saturated, events, rounds, tr_all)


def _distinct(times: np.ndarray) -> int:
    """How many distinct times (within ``REL_TIE``) ``times`` holds."""
    if not times.size:
        return 0
    t = np.sort(times)
    return 1 + int(np.count_nonzero(np.diff(t) > REL_TIE * np.maximum(t[1:], 1e-12)))


def _simulate_component(cap: np.ndarray, row: np.ndarray, col: np.ndarray, coef: np.ndarray,
                        bits: np.ndarray, start: np.ndarray, tolerance: float,
                        trace: bool = False, probe: np.ndarray | None = None
                        ) -> tuple[Any, ...]:
    """The event loop of ``simulate`` on one component (CSR rows, ``coef`` = mult x weight):
    finish and first rate per class, the times at which an allocation was computed, and the
    filling rounds. The loop (warm start after departures, next finish from a segment tree)
    is compiled: ``testbed.models.maxmin``.

    A large component's rows are first renumbered in the order of their first rates. A
    refill walks the rows in rate order, and the rows of one bottleneck keep neighbouring
    rates, so the walk then reads memory nearly in order instead of at random: the same
    answer (rows are only relabelled), with fewer cache misses."""
    rptr = np.zeros(bits.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=bits.size), out=rptr[1:])
    perm = None
    if bits.size >= RELABEL_ROWS:
        first = maxmin.run(cap, rptr, col, coef, bits, start, tolerance, REL_TIE,
                           max_events=1)[1]
        perm = np.argsort(first, kind="stable")
        lens = np.diff(rptr)[perm]
        new_ptr = np.zeros_like(rptr)
        np.cumsum(lens, out=new_ptr[1:])
        ent = ranges(rptr[perm], rptr[perm + 1])
        rptr, col, coef, bits, start = new_ptr, col[ent], coef[ent], bits[perm], start[perm]
    f, sr, t, r, tr_row, tr_t, tr_rate = maxmin.run(cap, rptr, col, coef, bits, start,
                                                    tolerance, REL_TIE, trace, probe)
    if perm is not None:
        back = np.empty_like(perm)
        back[perm] = np.arange(perm.size)
        f, sr, tr_row = f[back], sr[back], perm[tr_row]
    return f, sr, t, r, ((tr_row, tr_t, tr_rate) if trace else None)
