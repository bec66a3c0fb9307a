"""How All-to-All kernels put one MoE step on the wire: flows between NICs and NVLink legs. Pure.

A ``StepTraffic`` (``traffic.workload``) says which GPU's token copies go to which GPU.
What the fabric carries depends on the kernel, and the differences are the point of the
lab, so each model here is explicit about every byte:

``high_bandwidth`` (training and prefill; DeepEP "normal" internode kernels)
    Hierarchical. A token on GPU (s, i) is sent over RDMA **once per destination server
    t** to the same-index GPU (t, i) (rail-aligned: only NIC i of s and NIC i of t are
    involved), then forwarded over NVLink from (t, i) to every distinct GPU (t, j) that
    holds one of its experts. A GPU receives a token once even if several of its experts
    want it (DeepEP dispatches per rank, not per expert). Same-server destinations are
    NVLink only. Combine is the reverse with BF16 payloads, and the expert outputs of one
    server are summed on (t, i) before the single RDMA transfer back (DeepEP's forwarders
    reduce), so combine RDMA volume equals dispatch RDMA volume in tokens. Each RDMA peer
    pair uses ``qps_per_peer`` QPs (default 4); messages are ``message_bytes`` rounded down
    to whole tokens (default 1 MiB: the issue asks for MB-range messages; DeepEP V1's
    tuned configs send RDMA chunks of 6-32 tokens, i.e. ~44-237 KB at hidden 7168: pass
    ``message_bytes=32 * 7392`` to mimic that).
``low_latency`` (decode; DeepEP low-latency kernels)
    Every token copy goes straight to the GPU that holds the chosen expert replica
    (cross-rail allowed: that is what a rail fabric with a spine layer, like Astral 3.0's,
    must carry), one message per copy: ``16 + 7,168 + 224 = 7,408`` bytes for FP8
    dispatch and ``14,336`` for BF16 combine at hidden 7168. No deduplication, all ranks
    start at the same instant (GPU-initiated IBGDA burst). DeepEP uses one QP per local
    expert of the destination, so flows are per (src, dst, destination slot) unless
    ``qp_per_expert=False``. Copies between GPUs of one server go over NVLink legs
    (``intra_server="nvlink"``, DeepEP's ``allow_nvlink_for_low_latency_mode=True``
    default) or, with ``intra_server="fabric"``, through the NICs like the V1 pure-RDMA
    kernel. The lab's ``astral3``/``rail3``/``fattree`` plans have no NVLink switch, so
    NVLink legs are bookkeeping (not emulated); in ``railonly`` a cross-rail flow is still
    a flow: the plan's per-server ``nvsN`` switch relays it onto the destination's rail.
``flat_all_to_all`` (the reference; NCCL-style ``all_to_all`` with equal splits)
    Every GPU sends the same number of bytes to every GPU (its step volume divided by the
    GPU count), intra-server shares over NVLink, the rest as direct cross-rail flows.

Every model returns a ``KernelTraffic``: ``flows`` (``FlowSpec``, one per QP: src/dst NIC
host, bytes, QP and its UDP source port ``sport_for_qp(qp)``, start offset, traffic class
and DSCP, message size and count), ``nvlink_legs`` and an ``accounting`` per phase that
shows every token copy is delivered exactly once (local, NVLink, RDMA, RDMA then NVLink).
``flows, legs = high_bandwidth(step)`` unpacks like a tuple.

QP numbering: the QP at the sender toward peer rank ``d`` is ``d * qps_per_peer + q``, so
QP numbers are unique per host (like real QPNs) and the dispatch flow s->d and the combine
flow s->d of a step share a QP, as they do on an RC connection. ``controller_body`` merges
flows that share a 5-tuple so ``POST /traffic`` never repeats one.

Traffic classes (DSCP): ``bulk`` = 26 (AF31) and ``decode`` = 46 (EF). 26 is the value
RoCE deployments commonly use for the lossless RoCE class (priority 3 under the default
DSCP>>3 mapping, the priority NVIDIA switch RoCE defaults reserve for RoCE; *assumption*:
the DSCP value itself is common practice, not a checked default); EF (RFC 3246, RFC 4594)
is the standard low-latency class and maps to priority 5, so decode and bulk land in
different queues and the scenarios can isolate them.

Start offsets are seconds relative to the start of the flow's phase: a replay runs
dispatch, then combine after the experts' compute (not modelled here).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traffic.workload import Phase, StepTraffic, check_phase
from vocab.flows import ROCE_PORT, sport_for_qp
from vocab.plan import WiringPlan

#: Traffic class -> DSCP (see the module docstring for the choice).
TRAFFIC_CLASSES: dict[str, int] = {"bulk": 26, "decode": 46}
DEFAULT_MESSAGE_BYTES = 1 << 20
INTRA_SERVER = ("nvlink", "fabric")


@dataclass(frozen=True)
class FlowSpec:
    """One RDMA flow (one QP) between two GPU NICs, as the replay engine will send it."""

    src: str
    dst: str
    bytes: int
    qp: int
    sport: int
    start: float = 0.0
    traffic_class: str = "bulk"
    dscp: int = TRAFFIC_CLASSES["bulk"]
    message_bytes: int = 0
    messages: int = 0
    phase: Phase = Phase.DISPATCH
    kernel: str = ""

    def __post_init__(self) -> None:
        if self.src == self.dst:
            raise ValueError(f"flow from {self.src} to itself")
        if self.traffic_class not in TRAFFIC_CLASSES:
            raise ValueError(f"traffic_class must be one of {sorted(TRAFFIC_CLASSES)}")
        if not 0 <= self.dscp < 64:
            raise ValueError("dscp must be in [0, 63]")
        if self.sport != sport_for_qp(self.qp):
            raise ValueError(f"sport {self.sport} is not sport_for_qp({self.qp})")
        if self.bytes < 0 or self.message_bytes < 0 or self.start < 0:
            raise ValueError("bytes, message_bytes and start must be >= 0")
        want = -(-self.bytes // self.message_bytes) if self.message_bytes else 0
        if self.bytes and self.messages != want:
            raise ValueError(f"{self.bytes} bytes in messages of {self.message_bytes} are "
                             f"{want} messages, not {self.messages}")

    @classmethod
    def make(cls, src: str, dst: str, nbytes: int, qp: int = 0, *,
             message_bytes: int = 1_000_000, start: float = 0.0,
             traffic_class: str = "bulk", phase: Phase = Phase.DISPATCH,
             kernel: str = "") -> FlowSpec:
        """A flow with its derived fields filled in (sport from the QP, message count, DSCP):
        what a scenario or test writes by hand, without repeating the bookkeeping."""
        mb = min(message_bytes, nbytes) if nbytes else message_bytes
        return cls(src, dst, nbytes, qp, sport_for_qp(qp), start=start,
                   traffic_class=traffic_class, dscp=TRAFFIC_CLASSES[traffic_class],
                   message_bytes=mb, messages=-(-nbytes // mb) if nbytes else 0,
                   phase=phase, kernel=kernel)

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        """The 5-tuple, as ``vocab.flows.Flow.key``."""
        return (self.src, self.dst, "udp", self.sport, ROCE_PORT)

    def to_controller(self) -> dict[str, Any]:
        """This flow as one item of the ``POST /traffic`` body (``vocab.flows``)."""
        return {"src": self.src, "dst": self.dst, "sport": self.sport, "dport": ROCE_PORT,
                "proto": "udp", "bytes": self.bytes, "qp": self.qp}


@dataclass(frozen=True)
class NvlinkLeg:
    """Bytes moved inside one server from one GPU to another over NVLink."""

    server: int
    src_gpu: int
    dst_gpu: int
    bytes: int
    tokens: int = 0  # token copies (or, for flat all-to-all, 0: it moves bytes, not tokens)
    phase: Phase = Phase.DISPATCH
    kernel: str = ""


@dataclass
class KernelTraffic:
    """What a kernel model produced; iterating yields ``flows`` then ``nvlink_legs``."""

    kernel: str
    flows: list[FlowSpec]
    nvlink_legs: list[NvlinkLeg]
    local_bytes: dict[str, int] = field(default_factory=dict)
    accounting: dict[str, dict[str, int]] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.flows, self.nvlink_legs))

    def wire_bytes(self, phase: Phase | None = None) -> int:
        """Bytes the NICs send (all flows, or one phase's)."""
        return sum(f.bytes for f in self.flows if phase in (None, f.phase))

    def nvlink_bytes(self, phase: Phase | None = None) -> int:
        """Bytes moved over NVLink (all legs, or one phase's)."""
        return sum(leg.bytes for leg in self.nvlink_legs if phase in (None, leg.phase))

    def to_controller(self, replace: bool = True) -> dict[str, Any]:
        """The ``POST /traffic`` body for these flows (5-tuples merged)."""
        return controller_body(self.flows, replace=replace)

    def summary(self) -> dict[str, Any]:
        """Headline numbers per phase."""
        out: dict[str, Any] = {"kernel": self.kernel, "flows": len(self.flows),
                               "nvlink_legs": len(self.nvlink_legs)}
        seen = {f.phase for f in self.flows} | set(self.local_bytes)
        for phase in (p for p in Phase if p in seen):
            out[phase] = {"wire_bytes": self.wire_bytes(phase),
                          "nvlink_bytes": self.nvlink_bytes(phase),
                          "local_bytes": self.local_bytes.get(phase, 0),
                          "messages": sum(f.messages for f in self.flows if f.phase == phase)}
        return out


def controller_body(flows: Iterable[FlowSpec], replace: bool = True) -> dict[str, Any]:
    """``{"flows": [...], "replace": ...}`` with flows sharing a 5-tuple merged (bytes summed).

    The controller rejects a repeated 5-tuple; on the wire, dispatch and combine traffic
    on the same QP *is* one flow, so summing is what the switches see.
    """
    merged: dict[tuple[str, str, str, int, int], dict[str, Any]] = {}
    for f in flows:
        item = merged.get(f.key)
        if item is None:
            merged[f.key] = f.to_controller()
        else:
            item["bytes"] += f.bytes
    return {"flows": list(merged.values()), "replace": replace}


# --------------------------------------------------------------------------------------
# Hosts
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cluster:
    """GPU rank -> NIC host name (rank = server * gpus_per_server + gpu)."""

    servers: int
    gpus_per_server: int
    hosts: tuple[str, ...]

    @classmethod
    def default(cls, servers: int, gpus_per_server: int) -> Cluster:
        """The lab's naming (``s{server}g{gpu}``) without a plan."""
        names = tuple(f"s{s}g{g}" for s in range(servers) for g in range(gpus_per_server))
        return cls(servers, gpus_per_server, names)

    @classmethod
    def from_plan(cls, plan: WiringPlan) -> Cluster:
        """Host names by (server, gpu) from the plan's ``Node.loc``, not by parsing names."""
        servers, gps = int(plan.params["servers"]), int(plan.params["gpus"])
        names: dict[tuple[int, int], str] = {}
        for h in plan.hosts:
            names[(int(h.loc["server"]), int(h.loc["gpu"]))] = h.name
        try:
            hosts = tuple(names[(s, g)] for s in range(servers) for g in range(gps))
        except KeyError as e:
            raise ValueError(f"plan has no host for (server, gpu) {e.args[0]}") from None
        return cls(servers, gps, hosts)

    def host(self, rank: int) -> str:
        return self.hosts[rank]


def cluster_for(step: StepTraffic, plan: WiringPlan | None = None) -> Cluster:
    """The step's hosts, checked against the plan's shape when one is given."""
    if plan is None:
        return Cluster.default(step.servers, step.gpus_per_server)
    cluster = Cluster.from_plan(plan)
    if (cluster.servers, cluster.gpus_per_server) != (step.servers, step.gpus_per_server):
        raise ValueError(f"plan has {cluster.servers} servers x {cluster.gpus_per_server} GPUs "
                         f"but the step has {step.servers} x {step.gpus_per_server}")
    return cluster


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------
def _check(phases: Sequence[Phase], traffic_class: str, start: float) -> None:
    for phase in phases:
        check_phase(phase)
    if traffic_class not in TRAFFIC_CLASSES:
        raise ValueError(f"traffic_class must be one of {sorted(TRAFFIC_CLASSES)}")
    if start < 0:
        raise ValueError("start must be >= 0")


def _flows(cluster: Cluster, src: np.ndarray, dst: np.ndarray, qp: np.ndarray,
           nbytes: np.ndarray, msg_bytes: np.ndarray, *, phase: Phase, kernel: str,
           traffic_class: str, start: float) -> list[FlowSpec]:
    """FlowSpecs from parallel arrays (zero-byte entries dropped)."""
    keep = nbytes > 0
    src, dst, qp, nbytes, msg_bytes = (a[keep] for a in (src, dst, qp, nbytes, msg_bytes))
    messages = -(-nbytes // msg_bytes)
    dscp = TRAFFIC_CLASSES[traffic_class]
    hosts = cluster.hosts
    return [
        FlowSpec(src=hosts[s], dst=hosts[d], bytes=b, qp=q, sport=sport_for_qp(q),
                 start=start, traffic_class=traffic_class, dscp=dscp, message_bytes=mb,
                 messages=n, phase=phase, kernel=kernel)
        for s, d, q, b, mb, n in zip(src.tolist(), dst.tolist(), qp.tolist(),
                                     nbytes.tolist(), msg_bytes.tolist(), messages.tolist(),
                                     strict=True)
    ]


def _split(total: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """``(part index, amount)`` per entry and part: ``total`` split as evenly as integers allow.

    Returns arrays of shape ``(len(total), parts)``.
    """
    q = np.arange(parts)[None, :]
    amount = total[:, None] // parts + (q < total[:, None] % parts)
    return np.broadcast_to(q, amount.shape), amount


def _legs(counts: np.ndarray, per_unit: int, phase: Phase, kernel: str, *, reverse: bool = False,
          tokens: bool = True) -> list[NvlinkLeg]:
    """NvlinkLegs from a ``(servers, gpus, gpus)`` count array (src gpu, dst gpu)."""
    out = []
    for s, i, j in zip(*np.nonzero(counts), strict=True):
        c = int(counts[s, i, j])
        a, b = (int(j), int(i)) if reverse else (int(i), int(j))
        out.append(NvlinkLeg(server=int(s), src_gpu=a, dst_gpu=b, bytes=c * per_unit,
                             tokens=c if tokens else 0, phase=phase, kernel=kernel))
    return out


# --------------------------------------------------------------------------------------
# High-bandwidth (training / prefill)
# --------------------------------------------------------------------------------------
def high_bandwidth(step: StepTraffic, plan: WiringPlan | None = None, *,
                   qps_per_peer: int = 4, message_bytes: int = DEFAULT_MESSAGE_BYTES,
                   phases: Sequence[Phase] = tuple(Phase), start: float = 0.0,
                   traffic_class: str = "bulk") -> KernelTraffic:
    """DeepEP-normal-style hierarchical All-to-All: rail-aligned RDMA + NVLink forwarding.

    See the module docstring. RDMA flows only ever join GPUs of the same index (rail), and
    carry each token once per destination server; NVLink legs carry it on to each distinct
    destination GPU.
    """
    _check(phases, traffic_class, start)
    if qps_per_peer < 1 or message_bytes < 1:
        raise ValueError("qps_per_peer and message_bytes must be >= 1")
    cluster = cluster_for(step, plan)
    kernel = "high_bandwidth"
    G, S, P = step.gpus, step.servers, step.gpus_per_server
    shape = step.dest_gpu.shape
    d = np.sort(step.dest_gpu, axis=2)
    first_gpu = np.ones(shape, dtype=bool)
    first_gpu[..., 1:] = d[..., 1:] != d[..., :-1]
    dsrv, dgpu = d // P, d % P  # sorted by rank, so servers are sorted too
    first_srv = np.ones(shape, dtype=bool)
    first_srv[..., 1:] = dsrv[..., 1:] != dsrv[..., :-1]
    rank = np.arange(G)[:, None, None]
    same_srv = dsrv == rank // P
    rail = dgpu == rank % P
    rank_b = np.broadcast_to(rank, shape)
    remote_first = first_srv & ~same_srv
    rdma = np.bincount((rank_b * S + dsrv)[remote_first], minlength=G * S).reshape(G, S)
    fwd = first_gpu & ~rail
    legs = np.bincount(((dsrv * P + rank_b % P) * P + dgpu)[fwd],
                       minlength=S * P * P).reshape(S, P, P)
    paths = {
        "local": int((first_gpu & same_srv & rail).sum()),
        "nvlink": int((first_gpu & same_srv & ~rail).sum()),
        "rdma": int((first_gpu & ~same_srv & rail).sum()),
        "rdma+nvlink": int((first_gpu & ~same_srv & ~rail).sum()),
    }
    deliveries = int(first_gpu.sum())
    base = {"copies": step.total_copies, "deliveries": deliveries,
            "deduplicated": step.total_copies - deliveries, **paths,
            "rdma_transfers": int(rdma.sum()), "nvlink_transfers": int(legs.sum())}

    r, t = np.nonzero(rdma)
    peer = t * P + r % P  # the same-index GPU on the destination server
    counts = rdma[r, t]
    flows: list[FlowSpec] = []
    nv: list[NvlinkLeg] = []
    local: dict[str, int] = {}
    accounting: dict[str, dict[str, int]] = {}
    for phase in phases:
        per_token = step.model.copy_bytes(phase)
        msg_tokens = max(1, message_bytes // per_token)
        src, dst = (r, peer) if phase == Phase.DISPATCH else (peer, r)
        q, tok = _split(counts, qps_per_peer)
        src_q, dst_q = (np.repeat(a, qps_per_peer) for a in (src, dst))
        tok = tok.ravel()
        flows += _flows(cluster, src_q, dst_q, dst_q * qps_per_peer + q.ravel(),
                        tok * per_token, np.minimum(tok, msg_tokens) * per_token,
                        phase=phase, kernel=kernel, traffic_class=traffic_class, start=start)
        nv += _legs(legs, per_token, phase, kernel, reverse=phase == Phase.COMBINE)
        local[phase] = paths["local"] * per_token
        accounting[phase] = dict(base)
    return KernelTraffic(kernel, flows, nv, local, accounting)


# --------------------------------------------------------------------------------------
# Low-latency (decode)
# --------------------------------------------------------------------------------------
def low_latency(step: StepTraffic, plan: WiringPlan | None = None, *,
                phases: Sequence[Phase] = tuple(Phase), start: float = 0.0,
                intra_server: str = "nvlink", qp_per_expert: bool = True,
                traffic_class: str = "decode") -> KernelTraffic:
    """DeepEP-low-latency-style All-to-All: one message per token copy, straight to the expert.

    See the module docstring. Messages are ``model.ll_dispatch_message_bytes`` (7,408 at
    hidden 7168, FP8) and ``model.ll_combine_message_bytes`` (14,336, BF16); every flow
    starts at ``start`` (all ranks fire at once).
    """
    _check(phases, traffic_class, start)
    if intra_server not in INTRA_SERVER:
        raise ValueError(f"intra_server must be one of {INTRA_SERVER}")
    cluster = cluster_for(step, plan)
    kernel = "low_latency"
    G, P = step.gpus, step.gpus_per_server
    spg = step.placement.slots_per_gpu
    src = np.repeat(np.arange(G, dtype=np.int64), step.slots[0].size)
    slot = step.slots.ravel().astype(np.int64)
    if not qp_per_expert:
        slot = slot // spg * spg
    counts = np.bincount(src * (G * spg) + slot, minlength=G * G * spg).reshape(G, G, spg)
    r, d, j = np.nonzero(counts)
    c = counts[r, d, j]
    is_local = r == d
    same = (r // P == d // P) & ~is_local
    on_nvlink = same if intra_server == "nvlink" else np.zeros_like(same)
    net = ~is_local & ~on_nvlink
    nvl = np.zeros((step.servers, P, P), dtype=np.int64)
    np.add.at(nvl, (r[on_nvlink] // P, r[on_nvlink] % P, d[on_nvlink] % P), c[on_nvlink])
    base = {"copies": step.total_copies, "local": int(c[is_local].sum()),
            "nvlink": int(c[on_nvlink].sum()), "network": int(c[net].sum())}
    rn, dn, jn, cn = r[net], d[net], j[net], c[net]
    flows: list[FlowSpec] = []
    nv: list[NvlinkLeg] = []
    local: dict[str, int] = {}
    accounting: dict[str, dict[str, int]] = {}
    for phase in phases:
        if phase == Phase.DISPATCH:
            msg = step.model.ll_dispatch_message_bytes
            s_, t_, qp = rn, dn, dn * spg + jn
        else:
            msg = step.model.ll_combine_message_bytes
            s_, t_, qp = dn, rn, rn * spg + jn
        flows += _flows(cluster, s_, t_, qp, cn * msg, np.full_like(cn, msg), phase=phase,
                        kernel=kernel, traffic_class=traffic_class, start=start)
        nv += _legs(nvl, msg, phase, kernel, reverse=phase == Phase.COMBINE)
        local[phase] = base["local"] * msg
        accounting[phase] = {**base, "message_bytes": msg}
    return KernelTraffic(kernel, flows, nv, local, accounting)


# --------------------------------------------------------------------------------------
# Flat all-to-all (reference)
# --------------------------------------------------------------------------------------
def flat_all_to_all(step: StepTraffic, plan: WiringPlan | None = None, *,
                    qps_per_peer: int = 2, message_bytes: int = DEFAULT_MESSAGE_BYTES,
                    phases: Sequence[Phase] = tuple(Phase), start: float = 0.0,
                    intra_server: str = "nvlink", traffic_class: str = "bulk") -> KernelTraffic:
    """NCCL-style ``all_to_all`` with equal splits: the same bytes to every GPU.

    Each GPU's phase volume (dispatch: the copies it sends x FP8 bytes; combine: the copies
    its experts return x BF16 bytes) is divided evenly over all GPUs, itself included (that
    share stays local); the remainder bytes go one each to the next ranks. Two QPs per peer
    by default (*assumption*: NCCL's QP count depends on channels and NCCL_IB_QPS_PER_CONNECTION;
    2 also matches the controller's flow-count sizing).
    """
    _check(phases, traffic_class, start)
    if intra_server not in INTRA_SERVER:
        raise ValueError(f"intra_server must be one of {INTRA_SERVER}")
    if qps_per_peer < 1 or message_bytes < 1:
        raise ValueError("qps_per_peer and message_bytes must be >= 1")
    cluster = cluster_for(step, plan)
    kernel = "flat_all_to_all"
    G, P = step.gpus, step.gpus_per_server
    copies = step.copies(Phase.DISPATCH)
    flows: list[FlowSpec] = []
    nv: list[NvlinkLeg] = []
    local: dict[str, int] = {}
    accounting: dict[str, dict[str, int]] = {}
    rank = np.arange(G)
    for phase in phases:
        sent = copies.sum(axis=1) if phase == Phase.DISPATCH else copies.sum(axis=0)
        volume = sent.astype(np.int64) * step.model.copy_bytes(phase)
        offset = (rank[None, :] - rank[:, None]) % G  # peer distance, 0 = self
        share = volume[:, None] // G + (((offset - 1) % G) < volume[:, None] % G)
        is_local = offset == 0
        same = (rank[:, None] // P == rank[None, :] // P) & ~is_local
        on_nvlink = same if intra_server == "nvlink" else np.zeros_like(same)
        net = ~is_local & ~on_nvlink
        nvl = np.zeros((step.servers, P, P), dtype=np.int64)
        si, di = np.nonzero(on_nvlink)
        nvl[si // P, si % P, di % P] = share[si, di]
        nv += _legs(nvl, 1, phase, kernel, tokens=False)
        s_, d_ = np.nonzero(net & (share > 0))
        q, amount = _split(share[s_, d_], qps_per_peer)
        src_q, dst_q = (np.repeat(a, qps_per_peer) for a in (s_, d_))
        amount = amount.ravel()
        flows += _flows(cluster, src_q, dst_q, dst_q * qps_per_peer + q.ravel(), amount,
                        np.minimum(amount, message_bytes), phase=phase, kernel=kernel,
                        traffic_class=traffic_class, start=start)
        local[phase] = int(share[is_local].sum())
        accounting[phase] = {"bytes": int(volume.sum()), "local": local[phase],
                             "nvlink": int(share[on_nvlink].sum()),
                             "network": int(share[net].sum())}
    return KernelTraffic(kernel, flows, nv, local, accounting)
