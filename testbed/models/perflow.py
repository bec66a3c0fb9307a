"""Per-flow model on a wiring plan: any topology, routed by the controllers' own policy
code, then exact event-driven max-min (``testbed.models.solver``). Pure, no root.

``model_flows`` is one policy on one flow list. ``run`` models several policies on one flow
list through ``Prepared`` (normalised, checked and hashed once) and ``model_policies``
(the policies side by side in forked workers, ``auto_jobs`` of them). Why merging identical
flows and, under ecmp-fluid, parallel links is exact: ``testbed.models.flowmodel``,
aggregation points 1 and 2.

A policy that changes what the hosts open (``expand``: qp-scaling's QPs) is modelled on
the flows it opens, and its answer is mapped back to the flows it was given, so a caller
compares policies flow by flow whatever each one does to them.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controllers import policies as registry
from controllers.paths import UNITS, Hop, Path, PathFinder
from testbed.models.bounds import bounds
from testbed.models.forked import map_forked
from testbed.models.inputs import check_policy, normalise
from testbed.models.progress import Note, Watch
from testbed.models.progress import probe as new_probe
from testbed.models.results import (
    ModelLinks,
    ModelResult,
    finish_quantiles,
    tier_summary,
    tolerance_note,
    top_bottlenecks,
)
from testbed.models.solver import ranges, simulate
from traffic.roce import LAB_PMTU, OP_WRITE_MIDDLE, frame_len
from vocab.flows import Flow
from vocab.plan import WiringPlan

#: ``ctx.options`` key of a ``SPLIT`` rule: the bytes of one full-size frame on the wire, at
#: the path MTU the lab replays at (``scenarios.common.WIRE_PMTU``'s default)
FRAME_KEY = "frame_bytes"
FRAME_BYTES = frame_len(OP_WRITE_MIDDLE, LAB_PMTU)


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

    def links(self) -> ModelLinks:
        return ModelLinks(list(self.name), list(self.tier), np.ones(self.cap.size), self.cap.copy(),
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
                 merge: bool) -> tuple[ModelLinks, dict[tuple[str, str], list[tuple[int, float]]],
                                       dict[str, int], dict[str, int]]:
    """Model links for ecmp-fluid: NIC tx and last hops as they are; trunk hops merged into
    classes of identical columns and capacity (exact: ``testbed.models.flowmodel``,
    aggregation point 2).

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
    links = ModelLinks(name, tier, np.array(count, dtype=np.float64),
                       np.array(cap_each, dtype=np.float64), dict(pl.tier_links))
    return links, rows, host_ids, last_ids


@dataclass(frozen=True)
class _Opened:
    """An input flow as a policy's ``expand`` sees it: no QP number, so
    ``controllers.policies.stripe`` gives each stripe a source port of its own
    (the port the replay's striped QP gets), and ``origin`` (its index) rides along."""

    src: str
    dst: str
    sport: int
    bytes: int
    start: float
    dport: int
    proto: str
    origin: int


class Prepared:
    """A flow list made ready for routing, shared by the policies of one ``run``.

    Normalising a few hundred thousand flows, checking that each has a path, merging
    5-tuples and hashing them for ECMP are per-flow Python; ``run`` models four policies
    on one flow list, so it does that once (the adaptive policy starts from the same ECMP
    assignment that the ecmp policy uses).
    """

    def __init__(self, finder: PathFinder, flows: Iterable[Any], unit: str) -> None:
        self.finder, self.unit = finder, unit
        self.fl = normalise(flows)
        if not self.fl:
            raise ValueError("no flows to model")
        self.pl = _PlanLinks(finder, unit)
        for f in self.fl:
            finder.candidates(f.src, f.dst)  # ValueError naming both hosts if there is no path
        self.size = np.array([f.bytes for f in self.fl], dtype=np.float64)
        self.start = np.array([f.start for f in self.fl], dtype=np.float64)
        self._unique: tuple[list[Flow], np.ndarray] | None = None
        self._ecmp: dict[int, dict[Flow, Path]] = {}
        self._opened: dict[Any, tuple[Prepared, np.ndarray | None]] = {}
        self._bounds: dict[str, float] | None = None

    def bounds(self) -> dict[str, float]:
        """``bounds`` of these flows (computed once)."""
        if self._bounds is None:
            self._bounds = bounds(self.finder, self.fl, self.unit)
        return self._bounds

    def opened(self, policy: registry.Policy) -> tuple[Prepared, np.ndarray | None]:
        """The flows the hosts open under ``policy`` (``Policy.expand``), prepared, and the
        input flow each came from; ``(self, None)`` when the policy opens the flows given.

        Checked: every input flow is opened at least once and its bytes are conserved.
        """
        if not policy.expands:
            return self, None
        key = (policy.module.__name__, tuple(sorted({**policy.defaults,
                                                     **policy.options}.items())))
        if key not in self._opened:
            views = [_Opened(f.src, f.dst, f.sport, f.bytes, f.start, f.dport, f.proto, i)
                     for i, f in enumerate(self.fl)]
            out = policy.expand(views)
            try:
                origin = np.array([g.origin for g in out], dtype=np.int64)
            except AttributeError:
                raise ValueError(f"{policy.name}: expand must keep the other fields of each "
                                 "flow it opens (dataclasses.replace)") from None
            n = len(self.fl)
            if len(out) == n and np.array_equal(origin, np.arange(n)) and all(
                    g.bytes == f.bytes and g.sport == f.sport for g, f in zip(out, self.fl,
                                                                              strict=True)):
                self._opened[key] = (self, None)
            else:
                sizes = np.array([g.bytes for g in out], dtype=np.float64)
                if origin.size and (origin.min() < 0 or origin.max() >= n):
                    raise ValueError(f"{policy.name}: expand opened a flow of no input flow")
                if not np.array_equal(np.bincount(origin, sizes, minlength=n), self.size) or \
                        (np.bincount(origin, minlength=n) == 0).any():
                    raise ValueError(f"{policy.name}: expand must open every flow and keep "
                                     "its bytes")
                self._opened[key] = (Prepared(self.finder, out, self.unit), origin)
        return self._opened[key]

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

    def splits(self, policy: registry.Policy, seed: int, adaptive: dict[str, Any] | None
               ) -> bool:
        """Whether the policy's flows are split here (its ``SPLIT``, or its rule's answer for
        these flows, which also sees ``FRAME_KEY``)."""
        if not policy.split_rule:
            return policy.split
        unique, _ = self.unique()
        opts = {**(adaptive or {}), FRAME_KEY: FRAME_BYTES}
        ctx = registry.ModelContext(self.finder, unique, seed, opts, self._ecmp)
        return policy.splits(unique, self.finder, ctx)


def model_flows(plan_or_finder: WiringPlan | PathFinder, flows: Iterable[Any],
                policy: str = "ecmp", *, seed: int = 0, unit: str = "gbps",
                adaptive: dict[str, Any] | None = None, merge: bool = True,
                bound: dict[str, float] | None = None, tolerance: float = 0.0,
                marks: Sequence[Sequence[float]] | None = None) -> ModelResult:
    """Route ``flows`` on a plan with ``policy`` and run event-driven max-min; per-flow exact.

    ``flows``: ``vocab.flows.Flow`` or ``traffic.kernels.FlowSpec`` objects (anything
    with src, dst, sport, bytes; optional start, dport, proto). Flows sharing a 5-tuple are
    routed as one flow with their bytes summed (what the controller sees from
    ``controller_body``) and then keep their own sizes and starts. ``unit``: ``gbps`` for
    the real fabric, ``mbps`` for the emulated one (what Mininet will take). ``merge=False``
    turns off the parallel-link merging of ecmp-fluid (tests compare both). ``tolerance``:
    see ``simulate`` (0 = exact). A PathFinder with ``down`` links models a failed fabric.
    ``marks``: per flow, byte counts at which to report when the flow had sent that much
    (``flow_mark_s``): the ends of the messages a QP sends back to back, from one simulation.

    ``policy`` is a spec with options (``qp-scaling:qps=8``, ``controllers.policies.parse``);
    the result's ``policy`` is its label. A policy that opens other flows than it is given
    (``expand``) is simulated on those, and each input flow gets back the latest finish of
    its stripes, the sum of their first rates and, per mark, the latest stripe to reach its
    share of the mark (marks scaled by the stripe's share of the flow's bytes); its bound
    is the one of the flows opened (``qps`` counts them).
    """
    check_policy(policy)
    t0 = time.perf_counter()
    finder = plan_or_finder if isinstance(plan_or_finder, PathFinder) else \
        PathFinder(plan_or_finder)
    prep = Prepared(finder, flows, unit)
    if marks is not None and len(marks) != len(prep.fl):
        raise ValueError(f"marks: one list per flow ({len(prep.fl)}), got {len(marks)}")
    return _model_prepared(prep, policy, seed=seed, adaptive=adaptive, merge=merge,
                           bound=bound, tolerance=tolerance, t0=t0, marks=marks)


def _model_prepared(prep: Prepared, policy: str, *, seed: int, adaptive: dict[str, Any] | None,
                    merge: bool, bound: dict[str, float] | None, tolerance: float,
                    t0: float | None = None, marks: Sequence[Sequence[float]] | None = None,
                    probe: np.ndarray | None = None) -> ModelResult:
    """``model_flows`` on a prepared flow list (``probe``: ``simulate``'s progress)."""
    pol = check_policy(policy)
    t0 = time.perf_counter() if t0 is None else t0
    given = prep
    prep, origin = given.opened(pol)
    if origin is not None:
        bound = prep.bounds()  # smaller flows: the unsplit bounds of the QPs opened are lower
        if marks is not None:
            share = np.divide(prep.size, given.size[origin], out=np.zeros(prep.size.size),
                              where=given.size[origin] > 0)
            marks = [np.asarray(marks[o], dtype=np.float64) * x
                     for o, x in zip(origin.tolist(), share.tolist(), strict=True)]
    split = prep.splits(pol, seed, adaptive)
    finder, fl, pl, unit = prep.finder, prep.fl, prep.pl, prep.unit
    n = len(fl)
    rowkey = np.empty(n, dtype=np.int64)
    # rows (links and weights of a flow's rate on each), flat: row k is flat[ptr[k]:ptr[k+1]]
    flat_c: list[int] = []
    flat_w: list[float] = []
    ptr = [0]
    seen: dict[Any, int] = {}
    if split:
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
    ent = ranges(rp[r_ids], rp[r_ids + 1])
    row = np.repeat(np.arange(uniq.shape[0]), lens)
    col = np.array(flat_c, dtype=np.int64)[ent]
    wt = np.array(flat_w, dtype=np.float64)[ent]
    tl = simulate(links.capacity, row, col, wt, mult.astype(np.float64), uniq[:, 1] * 8,
                  uniq[:, 2], tolerance, trace=marks is not None, probe=probe)
    finish = tl.finish[cls]
    start_rate = tl.start_rate[cls]
    mark_s = None
    if marks is not None:
        counts = [len(m) for m in marks]
        at = tl.sent_by(np.repeat(cls, counts),
                        np.concatenate([np.asarray(m, dtype=np.float64) for m in marks]
                                       or [np.empty(0)]) * 8, uniq[:, 2])
        mark_s = np.split(at, np.cumsum(counts)[:-1])
    quantiles = finish_quantiles(tl.finish, mult.astype(np.float64))
    if origin is not None:
        finish, start_rate, mark_s = _map_back(origin, len(given.fl), finish, start_rate,
                                               mark_s)
        quantiles = finish_quantiles(finish, np.ones(finish.size))
    load = np.bincount(col, wt * mult[row] * uniq[row, 1], minlength=links.count.size)
    completion = float(finish.max())
    bnd = bound if bound is not None else bounds(finder, fl, unit)
    bname = "splittable" if split else "unsplit"
    method = pol.method + ", per-flow max-min"
    if pol.split_rule:
        method += "; this job: " + ("split" if split else "paths")
    note = pol.note
    if origin is not None:
        note = (f"{note}; " if note else "") + f"{n:,} QPs for {len(given.fl):,} flows, " \
            "bound over the QPs"
    kind, note = tolerance_note(tolerance, note)
    return ModelResult(
        policy=pol.label, method=method, kind=kind, completion_s=completion,
        flows=len(given.fl), classes=int(uniq.shape[0]), events=tl.events, rounds=tl.rounds,
        max_link_time_s=float((load * 8 / links.capacity).max()),
        bound_s=bnd[bname], bound_name=bname, note=note, unit=unit,
        tiers=tier_summary(links, load, completion),
        bottlenecks=top_bottlenecks(links, load, tl.saturated),
        flow_completion=quantiles,
        compute_s=time.perf_counter() - t0, qps=n, flow_finish_s=finish,
        flow_start_rate_bps=start_rate, flow_mark_s=mark_s)


def _map_back(origin: np.ndarray, n: int, finish: np.ndarray, start_rate: np.ndarray,
              mark_s: list[np.ndarray] | None
              ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray] | None]:
    """Per input flow from its stripes (``origin``: each stripe's input flow): the latest
    finish, the summed first rate, and per mark the latest stripe (a message is done when
    its last stripe is)."""
    done = np.full(n, -np.inf)
    np.maximum.at(done, origin, finish)
    rate = np.bincount(origin, start_rate, minlength=n)
    if mark_s is None:
        return done, rate, None
    per = np.zeros(n, dtype=np.int64)
    for o, m in zip(origin.tolist(), mark_s, strict=True):
        per[o] = m.size  # every stripe of a flow has as many marks as the flow
    off = np.concatenate(([0], np.cumsum(per)))
    counts = per[origin]
    flat = np.concatenate(mark_s) if mark_s else np.empty(0)
    within = np.arange(flat.size) - np.repeat(np.cumsum(counts) - counts, counts)
    idx = np.repeat(off[:-1][origin], counts) + within
    out = np.full(int(off[-1]), -np.inf)
    np.maximum.at(out, idx, flat)
    return done, rate, np.split(out, off[1:-1])


#: Resident memory a policy worker may add: its own copy of the per-flow Python objects
#: (reference counting writes to the pages it shares with the parent) and its arrays.
_WORKER_BYTES_PER_FLOW = 6_000
_WORKER_BYTES = 300 << 20


def _mem_available() -> int | None:
    """The kernel's estimate of memory available without swapping (None: not Linux)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def auto_jobs(flows: int, policies: int) -> int:
    """How many policies to model at once: one per CPU this process may run on, as many as
    the available memory holds workers of this size, never more than the policies."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    avail = _mem_available()
    by_memory = cpus if avail is None else \
        avail // (_WORKER_BYTES + _WORKER_BYTES_PER_FLOW * flows)
    return max(1, min(cpus, policies, int(by_memory)))


def model_policies(prep: Prepared, policies: Sequence[str], jobs: int, *, seed: int,
                   bound: dict[str, float], tolerance: float,
                   progress: Callable[[int, Note], None] | None = None) -> list[ModelResult]:
    """``_model_prepared`` for every policy, in ``jobs`` forked processes when more than one.

    The policies share nothing but the prepared flow list, and each is one long compiled
    event loop: on a machine with more than one CPU they run side by side, each on its own
    core. Workers are forked so they inherit the flow list instead of unpickling it; where
    fork is unavailable, or one job is asked for, they run here in turn. However the parent
    stops (an error in a worker, Ctrl-C, SIGTERM), no worker outlives the call
    (``forked.map_forked``). ``progress(policy index, note)``: where each policy is, from a
    thread that watches its solve (``testbed.models.progress``).
    """
    if jobs == 0:
        jobs = auto_jobs(len(prep.fl), len(policies))

    def one(policy: str, note: Callable[[Note], None]) -> ModelResult:
        if progress is None:
            return _model_prepared(prep, policy, seed=seed, adaptive=None, merge=True,
                                   bound=bound, tolerance=tolerance)
        pr = new_probe()
        with Watch(pr, note):
            res = _model_prepared(prep, policy, seed=seed, adaptive=None, merge=True,
                                  bound=bound, tolerance=tolerance, probe=pr)
        note(("done", float(pr[0]), float(pr[2])))
        return res

    # the policies that pin paths first: they bind on every link and cost the most, so
    # with fewer workers than policies the cheap split ones fill in at the end
    order = sorted(range(len(policies)), key=lambda i: check_policy(policies[i]).split)

    def report(k: int, note: Note) -> None:
        if progress is not None:
            progress(order[k], note)

    out = map_forked(one, [policies[i] for i in order], min(jobs, len(policies)), report)
    by_index = dict(zip(order, out, strict=True))
    return [by_index[i] for i in range(len(policies))]
