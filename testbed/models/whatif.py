"""The aggregate what-if: a two-tier (astral3) fabric described by its numbers, EP groups
merged by symmetry, a closed form per policy. Pure, no root.

The 64K what-if fabric (``astral-lab model astral3 --gpus 65536 --radix 1024
--servers-per-block 64``): 8,192 servers x 8 GPUs with 400G NICs; 128 blocks of 64 servers;
1,024 rail-aligned leaves, each 64 x 400G down and 128 x 200G lanes up (256 lanes: today's
51.2T leaf); 128 spines, each taking one lane from every leaf through the optical shuffle
(1,024 x 200G lanes = 204.8T: a hypothetical radix-1024 spine, 4x today's); non-blocking 1:1.
At radix 256 two tiers stop at 16,384 GPUs; ``testbed.models.cost`` instead splits 64K into
rail groups with NVLink relay, a different fabric. The wiring plan of the what-if cannot be
built (interface names like ``spine127-eth1024`` exceed Linux's 15 characters), so the
aggregate mode describes it structurally (``TwoTier``) with the builder's rules, checked
against the ``astral3`` builder at small sizes.

Why the group quotient (``_Quotient``) is exact, and the theorem behind the planned and
ecmp closed forms: ``testbed.models.flowmodel``, aggregation point 3 and "Scale".
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controllers import policies as registry
from testbed import topologies
from testbed.fabricspec import FabricSpec
from testbed.models.bounds import finish_bounds, funnel, start_aware
from testbed.models.inputs import DEFAULT_POLICIES, check_policy
from testbed.models.jobs import Job
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
from testbed.models.solver import simulate
from vocab.flows import ROCE_PORT, sport_for_qp


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
        rules = topologies.TOPOLOGIES.get(topology).two_tier
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


class _Quotient:
    """The group quotient of a job on a TwoTier fabric (``testbed.models.flowmodel``,
    aggregation point 3).

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
    def links(self) -> ModelLinks:
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
        return ModelLinks(name, tier, count, cap, self.tier_links())

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


def _whatif_static(q: _Quotient) -> tuple[ModelLinks, np.ndarray]:
    """Bytes on every quotient link (policy-independent at NIC and leaf-bundle level)."""
    links = q.links()
    row, col, w, _ = q.incidence()
    load = np.bincount(col, w * q.job.size[row] * q.job.groups, minlength=links.count.size)
    return links, load


def _whatif_fluid(q: _Quotient, bnd: dict[str, float], tolerance: float = 0.0,
                  probe: np.ndarray | None = None) -> ModelResult:
    """ecmp-fluid on the group quotient: event-driven max-min, exact (aggregation point 3);
    ``probe``: ``simulate``'s progress counters."""
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
                  tolerance, probe=probe)
    completion = float(tl.finish.max())
    kind, note = tolerance_note(tolerance, f"{job.flows:,} flows as {uniq.shape[0]:,} classes "
                                            f"on {links.count.size:,} link classes")
    return ModelResult(
        policy="ecmp-fluid", method="per-hop equal split, group-quotient max-min "
        "(lanes of a leaf merged; groups merged by symmetry)", kind=kind,
        completion_s=completion, flows=job.flows, classes=int(uniq.shape[0]),
        events=tl.events, rounds=tl.rounds,
        max_link_time_s=float((load * 8 / links.capacity).max()),
        bound_s=bnd["splittable"], bound_name="splittable",
        tiers=tier_summary(links, load, completion),
        bottlenecks=top_bottlenecks(links, load, tl.saturated),
        flow_completion=finish_quantiles(tl.finish, mult), compute_s=time.perf_counter() - t0,
        flow_finish_s=tl.finish[inv], flow_start_rate_bps=tl.start_rate[inv], note=note)


def _whatif_planned(q: _Quotient, bnd: dict[str, float]) -> ModelResult:
    """The planned job time from lane counts and the equal-size theorem (``flowmodel``, Scale).

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
    tiers = tier_summary(links, load, completion, {"leaf->spine": up_max,
                                                   "spine->leaf": down_max})
    bott = top_bottlenecks(links, load, None)
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
    links = ModelLinks(_LaneNames(tt, front.name[:nfront]),
                       front.tier[:nfront] + ["leaf->spine"] * lanes + ["spine->leaf"] * lanes,
                       np.concatenate([front.count[:nfront], np.ones(2 * lanes)]),
                       np.concatenate([front.cap_each[:nfront], np.full(2 * lanes, lane_cap)]),
                       q.tier_links())
    load = np.concatenate([front_load[:nfront], up_b, down_b])
    mlt = float((load * 8 / links.capacity).max())
    exact = job.equal_sizes()
    bott = top_bottlenecks(links, load, None)
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
        tiers=tier_summary(links, load, mlt if exact else None),
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
        "host_start": max(start_aware(job.src, job.start, s * 8, np.full(s.size, nic)),
                          start_aware(job.dst, job.start, s * 8, np.full(s.size, nic)))}
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
        fun = funnel(cnt, tot * 8, lbig * 8, equal, lbig * 8, tt.up_lanes, lane)
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
    return finish_bounds(out, ideal)


def whatif(tt: TwoTier, job: Job, policies: Sequence[str] = DEFAULT_POLICIES, seed: int = 0,
           tolerance: float = 0.0, progress: Callable[[int, Note], None] | None = None
           ) -> tuple[list[ModelResult], dict[str, float]]:
    """The aggregate model of ``job`` on ``tt`` for each policy, and the bounds.

    ``tolerance``: event coalescing of ecmp-fluid (``simulate``; 0 = exact).
    ``progress(policy index, note)``: where each policy is (``testbed.models.progress``).
    """
    pols = [check_policy(p) for p in policies]
    q = _Quotient(tt, job)
    bnd = _whatif_bounds(q)
    out = []
    for i, p in enumerate(pols):  # the closed form the policy module names (WHATIF)
        pr = new_probe()
        with contextlib.ExitStack() as watching:
            if progress is not None:
                watching.enter_context(Watch(pr, lambda note, i=i: progress(i, note)))
            res = _whatif_one(q, bnd, p, seed, tolerance, pr)
        if progress is not None:
            progress(i, ("done", float(pr[0]), float(pr[2])))
        out.append(dataclasses.replace(res, policy=p.label))
    return out, bnd


def _whatif_one(q: _Quotient, bnd: dict[str, float], p: registry.Policy, seed: int,
                tolerance: float, probe: np.ndarray) -> ModelResult:
    """One policy's aggregate result: the closed form its module names (``WHATIF``)."""
    if p.whatif == "fluid":
        return _whatif_fluid(q, bnd, tolerance, probe)
    if p.whatif == "lanes":
        return _whatif_planned(q, bnd)
    if p.whatif == "hash":
        return _whatif_ecmp(q, bnd, seed)
    return ModelResult(
        policy=p.name, method="not computed", kind="not-computed", completion_s=None,
        flows=q.job.flows, bound_s=bnd["splittable" if p.split else "unsplit"],
        bound_name="splittable" if p.split else "unsplit",
        note=f"the {p.name} policy has no aggregate form (its module sets no WHATIF); "
             "use --mode per-flow on a smaller fabric")
