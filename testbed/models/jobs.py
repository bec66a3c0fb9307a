"""The what-if's job generator: expert-parallel groups placed on servers and the flows of
one group (an all-to-all, or one MoE prefill/decode step). Pure, no root.

``run`` uses it for both modes: the aggregate what-if reads ``Job`` as arrays, the per-flow
model takes ``Job.flow_list`` on a real wiring plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from testbed.models.inputs import FlowIn
from traffic import kernels
from traffic.workload import Phase, simulate_step
from vocab.flows import sport_for_qp


class Workload(StrEnum):
    """What one expert-parallel group sends (``make_job``)."""

    ALLTOALL = "alltoall"  # every ordered GPU pair the same bytes
    PREFILL = "prefill"  # one MoE prefill step (high-bandwidth kernels)
    DECODE = "decode"  # one MoE decode step (low-latency kernels)


class Placement(StrEnum):
    """Which servers a group takes: consecutive ones, or strided across the fabric."""

    PACKED = "packed"
    SPREAD = "spread"


DEFAULT_PAIR_BYTES = 1 << 20


@dataclass
class Job:
    """EP groups placed on servers, and the flows of ONE group in its local ranks.

    Every group sends the same flows (local rank k is GPU ``k % gpus`` of the group's
    ``k // gpus``-th server). That is exact for ``alltoall``; for ``prefill``/``decode`` it
    means one seeded MoE step is replayed in every group (a stated assumption: it is what
    makes the 64K what-if affordable, and groups with independent steps differ only by
    sampling noise).
    """

    workload: Workload
    groups: int
    group_size: int
    placement: Placement
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

    def flow_list(self, names: dict[int, str]) -> list[FlowIn]:
        """Every group's flows as model inputs; ``names[rank]`` is the plan's host name."""
        out = []
        sports = [sport_for_qp(int(q)) for q in self.qp]
        for ranks in self.ranks().tolist():
            hn = [names[r] for r in ranks]
            out.extend(FlowIn(hn[s], hn[d], p, b, t, qp=q) for s, d, p, b, t, q in zip(
                self.src.tolist(), self.dst.tolist(), sports, self.size.tolist(),
                self.start.tolist(), self.qp.tolist(), strict=True))
        return out


#: one group's flows are kept in memory; beyond this the what-if would not fit
MAX_GROUP_FLOWS = 5_000_000


def make_job(servers: int, gpus_per_server: int, *, workload: Workload = Workload.ALLTOALL,
             groups: int = 0, group_size: int = 0, placement: Placement = Placement.PACKED,
             seed: int = 0, pair_bytes: int = DEFAULT_PAIR_BYTES, qps: int = 1,
             phase: Phase = Phase.DISPATCH,
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
    if workload not in tuple(Workload):
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(Workload)}")
    if placement not in tuple(Placement):
        raise ValueError(f"unknown placement {placement!r}; choose from "
                         f"{', '.join(Placement)}")
    workload, placement = Workload(workload), Placement(placement)
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
    if placement == Placement.PACKED:
        gs = np.arange(n_groups)[:, None] * q + np.arange(q)
    else:
        gs = np.arange(n_groups)[:, None] + (servers // q) * np.arange(q)
    info: dict[str, Any] = {"workload": workload, "groups": n_groups, "group_size": size,
                            "placement": placement, "seed": seed}
    if workload == Workload.ALLTOALL:
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
        tok = tokens or (4096 if workload == Workload.PREFILL else 128)
        step = simulate_step(model, q, gps, tok, seed=seed)
        kern = kernels.high_bandwidth if workload == Workload.PREFILL else kernels.low_latency
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


#: A prefill or decode step of this many token draws (group GPUs x tokens per GPU) or more
#: is costed before it is drawn: drawing one costs a few microseconds per draw, so a smaller
#: step takes seconds and is not worth the calibration.
FORECAST_FROM = 1 << 21
#: the calibration's size in the same draws: a sixteenth of the smallest step it forecasts
CALIBRATION_DRAWS = 1 << 17


@dataclass(frozen=True)
class Forecast:
    """What drawing a step should take here, and what that estimate rests on: the same
    step drawn with ``calibration_tokens`` tokens per GPU took ``calibration_s``."""

    seconds: float
    group_size: int
    tokens: int
    calibration_tokens: int
    calibration_s: float


def step_forecast(servers: int, gpus_per_server: int, *,
                  clock: Callable[[], float] = time.perf_counter,
                  **kw: Any) -> Forecast | None:
    """How long ``make_job(servers, gpus_per_server, **kw)`` should take here, measured
    rather than guessed: the same step with a few tokens per GPU, timed, scaled by the
    tokens (its cost is routing every token to its experts and cutting the kernels'
    messages, both linear in the tokens; the fixed part it also scales makes the estimate
    err long). None for an all-to-all (its flows are made in one step), for a step under
    ``FORECAST_FROM`` draws, or when the step is refused (``make_job`` then says why)."""
    workload = Workload(kw.get("workload", Workload.ALLTOALL))
    if workload == Workload.ALLTOALL:
        return None
    total = servers * gpus_per_server
    size = kw.get("group_size") or min(total, 256)
    tokens = kw.get("tokens") or (4096 if workload == Workload.PREFILL else 128)
    if size * tokens < FORECAST_FROM:
        return None
    small = max(1, CALIBRATION_DRAWS // size)
    t0 = clock()
    try:
        make_job(servers, gpus_per_server, **{**kw, "tokens": small})
    except ValueError:
        return None
    took = clock() - t0
    return Forecast(took * tokens / small, size, tokens, small, took)
