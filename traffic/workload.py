"""One MoE layer step as traffic: which GPU sends how many token copies to which GPU. Pure.

The chain this module models, and why each link is here:

1. **A model preset** (``ModelPreset``): hidden size, routed experts, top-k and the
   node limit decide how many bytes one token copy is and how many copies a token makes.
2. **Bytes per token copy.** Dispatch is FP8 with one FP32 scale per 128 values (DeepEP's
   format), so a 7168-wide token is ``7168 + 7168/128 * 4 = 7,392`` bytes of payload;
   DeepEP's low-latency kernel puts a 16-byte header (one ``int4``: source token index and
   3 reserved ints) in front, so its message is ``7,408`` bytes. Combine is BF16:
   ``2 * 7168 = 14,336`` bytes (DeepEP's low-latency combine slot is exactly that, no
   header). The workload matrices use the *payload* sizes (``dispatch_bytes``,
   ``combine_bytes``); only ``traffic.kernels.low_latency`` uses the message sizes
   (``ll_dispatch_message_bytes``, ``ll_combine_message_bytes``).
3. **Gating** (``Gating``): how popular each expert is (uniform, Zipf, hot set). Real
   routers are skewed; skew is what makes ranks imbalanced and what EPLB fixes.
4. **Token routing** (``route_tokens``, in ``traffic.token_routing``): each token picks ``top_k``
   distinct experts, honouring DeepSeek-V3's node-limited routing (experts of at most M
   nodes, the nodes chosen by the sum of their best ``top_k/M`` scores).
5. **Placement** (``Placement``): experts (and replicas) on GPU slots, contiguous by default
   or from the EPLB-like balancer (``eplb``), with rank imbalance before and after.
6. **Output** (``StepTraffic``): per-(src GPU, dst GPU) token copies and bytes for dispatch
   and combine, plus the per-copy destinations the kernel models need for deduplication.

Sources (numbers checked against them unless marked *assumption*):

* DeepSeek-V3 Technical Report, arXiv:2412.19437: hidden 7168, 1 shared + 256 routed experts,
  8 routed experts per token, each token sent to at most M = 4 nodes, nodes chosen by "the
  sum of the highest K_r/M affinity scores of the experts distributed on each node"
  (section 2.1.2 and section 4.2). Its prefill deployment hosts one redundant expert per GPU
  (section 3.4.1), which is the balancer's default here.
* Mixtral of Experts, arXiv:2401.04088, Table 1: dim 4096, 8 experts, top-2, no shared expert.
* Qwen1.5-MoE-A2.7B ``config.json`` (Hugging Face ``Qwen/Qwen1.5-MoE-A2.7B``): hidden_size
  2048, num_experts 60, num_experts_per_tok 4, moe_intermediate_size 1408,
  shared_expert_intermediate_size 5632 (= 4 x 1408).
* DeepEP (github.com/deepseek-ai/DeepEP) ``csrc/kernels/internode_ll.cu``: low-latency
  dispatch ``num_bytes_per_msg = sizeof(int4) + hidden + hidden/128 * sizeof(float)`` for
  FP8, combine ``num_bytes_per_slot = hidden * sizeof(bf16)``; README / docs/legacy.md
  benchmark settings: 128 tokens per batch (decode) and 4096 (prefill), hidden 7168, top-8,
  FP8 dispatch, BF16 combine.
* DeepSeek EPLB (github.com/deepseek-ai/EPLB ``eplb.py``): replicate the expert with the
  highest load per replica into each redundant slot, pack with a greedy balanced packing
  (heaviest item to the lightest pack that still has room), hierarchical policy = pack
  expert groups onto nodes first, then replicate and pack within each node; global policy
  = the same with one group and one node.

Assumptions (not from a source; chosen for the lab and stated so a reader can change them):

* **Gate scores** are modelled as an exponential race: expert e's score for a token is
  ``-Exp(1)/p_e`` with ``p_e`` the gating popularity. Without a node limit the top-k is then
  exactly a weighted sample without replacement (Plackett-Luce) from ``p``; with a node
  limit DeepSeek-V3's rule is applied to these scores. Real gates are learned
  (sigmoid(u . e)); only the popularity is modelled. Because an expert is chosen at most
  once per token, realised shares are flatter than ``p`` for very hot experts.
* **Node-limited groups are nodes**: routing groups are contiguous blocks of
  ``routed_experts / servers`` logical experts, one per server (DeepSeek-V3 training used
  64-way EP on 8 nodes, where groups and nodes coincide).
* **Shared experts make no All-to-All traffic**: every rank runs them locally (DeepEP's
  benchmarks dispatch the top-8 routed copies only). DeepSeek-V3's decode deployment that
  treats the shared expert as a 9th routed one is not modelled.
* Per-token routing metadata (top-k indices and weights, a few dozen bytes) is not counted.
* EPLB load statistics default to this step's own expert load (an oracle; production uses a
  window of past steps, which differs only by sampling noise for a stationary gate).
* A token copy for a replicated expert goes to one of its replicas chosen uniformly at
  random (DeepSeek does not publish its replica selection).
* Hot experts of Zipf and hot-set gating are scattered over expert ids by a seeded shuffle
  (``Gating.shuffle``); without it they sit on the first GPUs, the worst case.
* FP8 dispatch is used for every preset (the DeepEP format), including Mixtral and Qwen,
  which were released in BF16.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import NamedTuple

import numpy as np

# Routing internals stay importable from here as well (tests compare against them).
from traffic.token_routing import argsmallest as argsmallest
from traffic.token_routing import route_reference as route_reference
from traffic.token_routing import route_tokens


class Phase(StrEnum):
    """The two halves of an MoE layer's all-to-all: tokens out to their experts (dispatch)
    and the experts' results back to the tokens' GPUs (combine)."""

    DISPATCH = "dispatch"
    COMBINE = "combine"


#: Bytes per value of the wire dtypes the kernels use.
DTYPE_BYTES = {"fp8": 1, "bf16": 2}
#: DeepEP quantises FP8 per 128 channels with one FP32 scale each (``kNumPerChannels = 128``).
FP8_SCALE_BLOCK = 128
FP32_BYTES = 4
#: DeepEP low-latency dispatch message header: one ``int4`` (source token index + 3 reserved).
LL_HEADER_BYTES = 16


# --------------------------------------------------------------------------------------
# Model presets
# --------------------------------------------------------------------------------------
def token_bytes(hidden: int, dtype: str, scale_block: int = FP8_SCALE_BLOCK) -> int:
    """Bytes of one token's hidden vector on the wire in ``dtype``.

    FP8 carries one FP32 scale per ``scale_block`` values (DeepEP's fine-grained
    quantisation), so FP8 is ``hidden + ceil(hidden/scale_block) * 4``; BF16 is ``2 * hidden``.
    """
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)} (got {dtype!r})")
    if dtype == "fp8":
        return hidden + math.ceil(hidden / scale_block) * FP32_BYTES
    return hidden * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class ModelPreset:
    """The MoE-layer numbers that decide the traffic (see the module docstring for sources)."""

    name: str
    hidden: int
    routed_experts: int
    shared_experts: int
    top_k: int
    max_nodes_per_token: int | None = None  # DeepSeek-V3's node-limited routing (M)
    dispatch_dtype: str = "fp8"
    combine_dtype: str = "bf16"
    scale_block: int = FP8_SCALE_BLOCK
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("hidden", "routed_experts", "top_k", "scale_block"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.shared_experts < 0:
            raise ValueError("shared_experts must be >= 0")
        if self.top_k > self.routed_experts:
            raise ValueError(f"top_k={self.top_k} exceeds routed_experts={self.routed_experts}")
        if self.max_nodes_per_token is not None and self.max_nodes_per_token < 1:
            raise ValueError("max_nodes_per_token must be >= 1 or None")
        for name in ("dispatch_dtype", "combine_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise ValueError(f"{name} must be one of {sorted(DTYPE_BYTES)}")

    @property
    def dispatch_bytes(self) -> int:
        """Payload bytes of one dispatched token copy (FP8 + scales: 7,392 at hidden 7168)."""
        return token_bytes(self.hidden, self.dispatch_dtype, self.scale_block)

    @property
    def combine_bytes(self) -> int:
        """Payload bytes of one combined token copy (BF16: 14,336 at hidden 7168)."""
        return token_bytes(self.hidden, self.combine_dtype, self.scale_block)

    @property
    def ll_dispatch_message_bytes(self) -> int:
        """DeepEP low-latency dispatch message: 16-byte header + payload (7,408 at 7168)."""
        return LL_HEADER_BYTES + self.dispatch_bytes

    @property
    def ll_combine_message_bytes(self) -> int:
        """DeepEP low-latency combine slot: the BF16 payload, no header (14,336 at 7168)."""
        return self.combine_bytes

    def copy_bytes(self, phase: Phase) -> int:
        """Payload bytes of one token copy in ``phase`` (``dispatch`` or ``combine``)."""
        check_phase(phase)
        return self.dispatch_bytes if phase == Phase.DISPATCH else self.combine_bytes


PRESETS: dict[str, ModelPreset] = {
    "deepseek-v3": ModelPreset(
        name="deepseek-v3", hidden=7168, routed_experts=256, shared_experts=1, top_k=8,
        max_nodes_per_token=4,
        source="DeepSeek-V3 Technical Report, arXiv:2412.19437, sections 2.1.2 and 4.2"),
    "mixtral-8x7b": ModelPreset(
        name="mixtral-8x7b", hidden=4096, routed_experts=8, shared_experts=0, top_k=2,
        source="Mixtral of Experts, arXiv:2401.04088, Table 1"),
    # Qwen1.5-MoE-A2.7B: 60 routed experts, top-4, hidden 2048 (config.json). The shared part is
    # one MLP of 5632 = 4 x 1408 in config.json; the Qwen1.5-MoE blog calls it 4 shared experts
    # (assumption: the blog wording was not checked here). Shared experts make no traffic.
    "qwen-moe": ModelPreset(
        name="qwen-moe", hidden=2048, routed_experts=60, shared_experts=4, top_k=4,
        source="Qwen/Qwen1.5-MoE-A2.7B config.json (hidden_size 2048, num_experts 60, "
               "num_experts_per_tok 4, shared_expert_intermediate_size 5632 = 4 x 1408)"),
}


def custom(name: str = "custom", *, hidden: int, routed_experts: int, top_k: int,
           shared_experts: int = 0, max_nodes_per_token: int | None = None,
           dispatch_dtype: str = "fp8", combine_dtype: str = "bf16") -> ModelPreset:
    """A user-defined model: the same fields as the presets, validated the same way."""
    return ModelPreset(name=name, hidden=hidden, routed_experts=routed_experts,
                       shared_experts=shared_experts, top_k=top_k,
                       max_nodes_per_token=max_nodes_per_token, dispatch_dtype=dispatch_dtype,
                       combine_dtype=combine_dtype, source="custom")


def preset(name: str) -> ModelPreset:
    """Look a preset up by name, with an error that lists the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; choose one of "
                         f"{', '.join(PRESETS)} or traffic.workload.custom(...)") from None


# --------------------------------------------------------------------------------------
# Gating
# --------------------------------------------------------------------------------------
GATING_KINDS = ("uniform", "zipf", "hotset")


@dataclass(frozen=True)
class Gating:
    """How popular each routed expert is: the skew that drives rank imbalance.

    ``uniform``: every expert equally likely (a perfectly balanced router).
    ``zipf``: popularity of the r-th most popular expert proportional to ``1/r**exponent``.
    ``hotset``: ``hot_fraction`` of the experts (at least one) share ``hot_share`` of the
    popularity evenly, the rest share the remainder evenly.
    With ``shuffle`` the hot experts are scattered over expert ids by the step's seeded
    generator; without it expert 0 is the hottest (and sits on GPU 0: the worst case).
    """

    kind: str = "uniform"
    exponent: float = 1.0
    hot_fraction: float = 0.1
    hot_share: float = 0.5
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.kind not in GATING_KINDS:
            raise ValueError(f"gating kind must be one of {GATING_KINDS} (got {self.kind!r})")
        if self.exponent < 0:
            raise ValueError("zipf exponent must be >= 0")
        if not 0 < self.hot_fraction <= 1:
            raise ValueError("hot_fraction must be in (0, 1]")
        if not 0 < self.hot_share < 1:
            raise ValueError("hot_share must be in (0, 1): every expert keeps a non-zero chance")

    def popularity(self, experts: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Routing weight per expert (positive, sums to 1); ``rng`` shuffles (default seed 0)."""
        if experts < 1:
            raise ValueError("experts must be >= 1")
        if self.kind == "uniform":
            return np.full(experts, 1.0 / experts)
        if self.kind == "zipf":
            p = 1.0 / np.arange(1, experts + 1, dtype=np.float64) ** self.exponent
        else:
            hot = max(1, round(self.hot_fraction * experts))
            if hot >= experts:
                return np.full(experts, 1.0 / experts)
            p = np.empty(experts)
            p[:hot] = self.hot_share / hot
            p[hot:] = (1.0 - self.hot_share) / (experts - hot)
        p /= p.sum()
        if self.shuffle:
            gen = rng if rng is not None else np.random.default_rng(0)
            p = p[gen.permutation(experts)]
        return p


def uniform() -> Gating:
    """Every expert equally popular."""
    return Gating("uniform")


def zipf(exponent: float = 1.0, *, shuffle: bool = True) -> Gating:
    """Zipf popularity with ``exponent`` (0 = uniform; 1 = classic Zipf)."""
    return Gating("zipf", exponent=exponent, shuffle=shuffle)


def hotset(fraction: float = 0.1, share: float = 0.5, *, shuffle: bool = True) -> Gating:
    """``fraction`` of the experts take ``share`` of the popularity."""
    return Gating("hotset", hot_fraction=fraction, hot_share=share, shuffle=shuffle)


# --------------------------------------------------------------------------------------
# Placement and the EPLB-like balancer
# --------------------------------------------------------------------------------------
def imbalance(load: np.ndarray) -> float:
    """Rank imbalance ``(max - mean) / mean`` (0 = perfectly balanced; 0 for an idle cluster)."""
    load = np.asarray(load, dtype=np.float64)
    mean = float(load.mean()) if load.size else 0.0
    return 0.0 if mean <= 0 else (float(load.max()) - mean) / mean


@dataclass(frozen=True, eq=False)
class Placement:
    """Experts on GPU slots: ``slots[gpu, j]`` is the logical expert in slot j (-1 = empty).

    A global slot id is ``gpu * slots_per_gpu + j``; the low-latency kernel uses ``j`` as the
    QP index toward that GPU (DeepEP uses one QP per local expert).
    """

    servers: int
    gpus_per_server: int
    experts: int
    slots: np.ndarray
    policy: str = "contiguous"

    def __post_init__(self) -> None:
        if self.slots.shape[0] != self.gpus or self.slots.ndim != 2:
            raise ValueError(f"slots must have shape ({self.gpus}, slots_per_gpu)")
        placed = self.slots[self.slots >= 0]
        if placed.size and placed.max() >= self.experts:
            raise ValueError("slots name an expert id beyond experts")
        missing = np.setdiff1d(np.arange(self.experts), placed)
        if missing.size:
            raise ValueError(f"experts {missing[:5].tolist()} have no slot")

    @property
    def gpus(self) -> int:
        return self.servers * self.gpus_per_server

    @property
    def slots_per_gpu(self) -> int:
        return int(self.slots.shape[1])

    @cached_property
    def replicas(self) -> np.ndarray:
        """Physical copies per logical expert (>= 1 each)."""
        return np.bincount(self.slots[self.slots >= 0], minlength=self.experts)

    @cached_property
    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        flat = self.slots.ravel()
        used = np.nonzero(flat >= 0)[0]
        order = np.argsort(flat[used], kind="stable")
        slot_ids = used[order].astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(self.replicas)[:-1]]).astype(np.int64)
        return slot_ids, offsets

    def expert_slots(self, expert: int) -> np.ndarray:
        """Global slot ids holding ``expert``."""
        slot_ids, offsets = self._table
        return slot_ids[offsets[expert]:offsets[expert] + self.replicas[expert]]

    def expert_servers(self, expert: int) -> set[int]:
        """Servers that hold a replica of ``expert``."""
        per_server = self.gpus_per_server * self.slots_per_gpu
        return {int(s) // per_server for s in self.expert_slots(expert)}

    def assign(self, experts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Global slot id for every token copy (uniformly random replica when there are several)."""
        slot_ids, offsets = self._table
        e = np.asarray(experts)
        base = offsets[e]
        if np.all(self.replicas == 1):
            return slot_ids[base]
        pick = (rng.random(e.shape) * self.replicas[e]).astype(np.int64)
        np.minimum(pick, self.replicas[e] - 1, out=pick)
        return slot_ids[base + pick]

    def gpu_load(self, expert_load: np.ndarray) -> np.ndarray:
        """Expected token copies per GPU: each expert's load split evenly over its replicas."""
        per_replica = np.asarray(expert_load, dtype=np.float64) / self.replicas
        values = np.where(self.slots >= 0, per_replica[np.maximum(self.slots, 0)], 0.0)
        return values.sum(axis=1)

    def imbalance(self, expert_load: np.ndarray) -> float:
        """``(max - mean) / mean`` of ``gpu_load(expert_load)``."""
        return imbalance(self.gpu_load(expert_load))


def contiguous_placement(experts: int, servers: int, gpus_per_server: int) -> Placement:
    """Experts in id order over GPUs: GPU g holds ids ``[g*E//G, (g+1)*E//G)``.

    With E >= G each GPU holds a block (E % G != 0 leaves some slots empty); with E < G
    each expert is replicated over a contiguous block of ``G/E`` GPUs so no GPU idles.
    Contiguous blocks keep node-limited routing groups on one server.
    """
    gpus = servers * gpus_per_server
    if experts < 1 or gpus < 1:
        raise ValueError("experts and gpus must be >= 1")
    if experts >= gpus:
        spg = math.ceil(experts / gpus)
        slots = np.full((gpus, spg), -1, dtype=np.int32)
        for g in range(gpus):
            block = np.arange(g * experts // gpus, (g + 1) * experts // gpus)
            slots[g, :len(block)] = block
    else:
        slots = (np.arange(gpus, dtype=np.int64) * experts // gpus).astype(np.int32)[:, None]
    return Placement(servers, gpus_per_server, experts, slots, "contiguous")


def _balanced_packing(weights: np.ndarray, packs: int) -> np.ndarray:
    """Pack index per item; every pack gets ``len(weights)/packs`` items (EPLB's greedy).

    Heaviest item first, into the lightest pack that still has room, as in DeepSeek
    EPLB's ``balanced_packing``.
    """
    n = len(weights)
    if n % packs:
        raise ValueError(f"{n} items do not split evenly into {packs} packs")
    per = n // packs
    pack_of = np.empty(n, dtype=np.int64)
    if per == 1:
        pack_of[np.argsort(-weights, kind="stable")] = np.arange(n)
        return pack_of
    heap = [(0.0, p) for p in range(packs)]  # (load, pack); a full pack leaves the heap
    count = [0] * packs
    for item in np.argsort(-weights, kind="stable"):
        load, p = heapq.heappop(heap)
        pack_of[item] = p
        count[p] += 1
        if count[p] < per:
            heapq.heappush(heap, (load + float(weights[item]), p))
    return pack_of


def _replicate(weights: np.ndarray, physical: int) -> np.ndarray:
    """Logical expert per physical slot: each redundant slot goes to max(load / replicas).

    DeepSeek EPLB's ``replicate_experts``: minimises the heaviest replica's load greedily.
    The first ``len(weights)`` entries are the experts themselves (each placed once).
    """
    logical = len(weights)
    if physical < logical:
        raise ValueError(f"{physical} physical slots cannot hold {logical} experts")
    count = np.ones(logical, dtype=np.int64)
    heap = [(-float(w), e) for e, w in enumerate(weights)]
    heapq.heapify(heap)
    extra = []
    for _ in range(physical - logical):
        _, e = heapq.heappop(heap)
        extra.append(e)
        count[e] += 1
        heapq.heappush(heap, (-float(weights[e]) / count[e], e))
    return np.concatenate([np.arange(logical), np.array(extra, dtype=np.int64)])


BALANCER_POLICIES = ("auto", "hierarchical", "global")


def eplb(expert_load: np.ndarray, servers: int, gpus_per_server: int, *,
         slots_per_gpu: int | None = None, policy: str = "auto",
         groups: int | None = None) -> Placement:
    """Replicate hot experts into redundant slots and pack replicas onto GPUs (DeepSeek EPLB).

    ``slots_per_gpu`` defaults to ``ceil(E/G) + 1``: one redundant slot per GPU, as in
    DeepSeek-V3's prefill deployment (8 experts + 1 redundant per GPU at EP32).

    ``hierarchical``: the ``groups`` contiguous expert groups (default: one per server, the
    node-limited routing groups) are packed onto servers balancing their load, then each
    server replicates its own experts into its ``gpus_per_server * slots_per_gpu`` slots and
    packs them onto its GPUs. Replicas of a group's experts therefore stay on the one server
    the group was packed onto, which keeps node-limited routing within M servers.
    ``global``: one group, one node: replicas may land on any GPU (best balance, but a
    token's copies may then reach more than M servers).
    ``auto``: hierarchical when the groups divide evenly (experts % groups == 0 and
    groups % servers == 0), else global, as DeepSeek's ``rebalance_experts`` does.
    """
    load = np.asarray(expert_load, dtype=np.float64)
    experts = len(load)
    gpus = servers * gpus_per_server
    if policy not in BALANCER_POLICIES:
        raise ValueError(f"policy must be one of {BALANCER_POLICIES} (got {policy!r})")
    if experts < 1 or gpus < 1 or np.any(load < 0):
        raise ValueError("need >= 1 expert, >= 1 GPU and non-negative loads")
    spg = slots_per_gpu if slots_per_gpu is not None else math.ceil(experts / gpus) + 1
    physical = gpus * spg
    if physical < experts:
        raise ValueError(f"{gpus} GPUs x {spg} slots cannot hold {experts} experts")
    groups = servers if groups is None else groups
    hier_ok = groups >= 1 and experts % groups == 0 and groups % servers == 0
    if policy == "hierarchical" and not hier_ok:
        raise ValueError(f"hierarchical balancing needs experts ({experts}) divisible by groups "
                         f"({groups}) and groups divisible by servers ({servers}); use 'global'")
    hierarchical = policy == "hierarchical" or (policy == "auto" and hier_ok)
    nodes, ngroups = (servers, groups) if hierarchical else (1, 1)
    group_size = experts // ngroups
    group_node = _balanced_packing(load.reshape(ngroups, group_size).sum(axis=1), nodes)
    gpus_per_node = gpus // nodes
    slots = np.full((gpus, spg), -1, dtype=np.int32)
    for node in range(nodes):
        mine = np.nonzero(group_node == node)[0]
        local = (mine[:, None] * group_size + np.arange(group_size)).ravel()
        phy = _replicate(load[local], physical // nodes)
        count = np.bincount(phy, minlength=len(local))
        gpu_of = _balanced_packing(load[local][phy] / count[phy], gpus_per_node)
        for g in range(gpus_per_node):
            slots[node * gpus_per_node + g] = np.sort(local[phy[gpu_of == g]])
    name = "eplb-hierarchical" if hierarchical else "eplb-global"
    return Placement(servers, gpus_per_server, experts, slots, name)


# --------------------------------------------------------------------------------------
# One step
# --------------------------------------------------------------------------------------
class PairTraffic(NamedTuple):
    """One non-zero entry of a traffic matrix."""

    src: int
    dst: int
    copies: int
    bytes: int


@dataclass(eq=False)
class StepTraffic:
    """One MoE layer step: every token copy's expert and destination, and the matrices.

    ``experts`` and ``slots`` have shape ``(gpus, tokens_per_gpu, top_k)``: source GPU (rank
    ``server * gpus_per_server + gpu``), token, copy. Dispatch sends copy ``(s, t, c)`` from
    GPU ``s`` to ``dest_gpu[s, t, c]``; combine sends it back.
    """

    model: ModelPreset
    servers: int
    gpus_per_server: int
    tokens_per_gpu: int
    gating: Gating
    seed: int
    popularity: np.ndarray
    experts: np.ndarray
    slots: np.ndarray
    placement: Placement
    baseline: Placement
    expert_load: np.ndarray
    imbalance_before: float
    imbalance_after: float

    @property
    def gpus(self) -> int:
        return self.servers * self.gpus_per_server

    @cached_property
    def dest_gpu(self) -> np.ndarray:
        """Destination GPU rank of every token copy, shape ``(gpus, tokens, top_k)``."""
        return (self.slots // self.placement.slots_per_gpu).astype(np.int32)

    @property
    def total_copies(self) -> int:
        return int(self.experts.size)

    @cached_property
    def _dispatch_copies(self) -> np.ndarray:
        g = self.gpus
        src = np.repeat(np.arange(g, dtype=np.int64), self.dest_gpu[0].size)
        return np.bincount(src * g + self.dest_gpu.ravel(), minlength=g * g).reshape(g, g)

    def copies(self, phase: Phase = Phase.DISPATCH) -> np.ndarray:
        """``(gpus, gpus)`` token copies sent src -> dst in ``phase`` (combine = transpose)."""
        check_phase(phase)
        return self._dispatch_copies if phase == Phase.DISPATCH else self._dispatch_copies.T

    def bytes(self, phase: Phase = Phase.DISPATCH) -> np.ndarray:
        """``(gpus, gpus)`` payload bytes src -> dst in ``phase`` (copies x bytes per copy)."""
        return self.copies(phase) * self.model.copy_bytes(phase)

    def pairs(self, phase: Phase = Phase.DISPATCH, *, include_self: bool = False
              ) -> Iterator[PairTraffic]:
        """Non-zero (src, dst, copies, bytes) entries of ``phase``, src-major order."""
        c = self.copies(phase)
        per = self.model.copy_bytes(phase)
        for s, d in zip(*np.nonzero(c), strict=True):
            if s != d or include_self:
                yield PairTraffic(int(s), int(d), int(c[s, d]), int(c[s, d]) * per)

    @cached_property
    def gpu_load(self) -> np.ndarray:
        """Token copies each GPU's experts receive (the realised load)."""
        return self._dispatch_copies.sum(axis=0)

    @property
    def realized_imbalance(self) -> float:
        """Imbalance of ``gpu_load`` (includes the random replica choice)."""
        return imbalance(self.gpu_load)

    def nodes_per_token(self) -> np.ndarray:
        """Distinct destination servers of each token, shape ``(gpus, tokens)``."""
        srv = np.sort(self.dest_gpu // self.gpus_per_server, axis=2)
        return 1 + (np.diff(srv, axis=2) != 0).sum(axis=2)

    def summary(self) -> dict[str, object]:
        """Headline numbers for reports."""
        return {
            "model": self.model.name, "servers": self.servers,
            "gpus_per_server": self.gpus_per_server, "tokens_per_gpu": self.tokens_per_gpu,
            "top_k": self.model.top_k, "gating": self.gating.kind, "seed": self.seed,
            "placement": self.placement.policy, "copies": self.total_copies,
            "dispatch_bytes": int(self.bytes(Phase.DISPATCH).sum()),
            "combine_bytes": int(self.bytes(Phase.COMBINE).sum()),
            "imbalance_before": round(self.imbalance_before, 4),
            "imbalance_after": round(self.imbalance_after, 4),
            "realized_imbalance": round(self.realized_imbalance, 4),
        }


def simulate_step(model: ModelPreset | str, servers: int, gpus_per_server: int,
                  tokens_per_gpu: int = 128, *, gating: Gating | None = None, seed: int = 0,
                  balancer: str | None = None, slots_per_gpu: int | None = None,
                  balance_load: np.ndarray | None = None) -> StepTraffic:
    """Route one step of ``tokens_per_gpu`` tokens on every GPU and place the experts.

    ``tokens_per_gpu``: 128 is DeepEP's decode benchmark batch, 4096 its prefill one.
    ``balancer``: None keeps the contiguous placement; ``"auto"``, ``"hierarchical"`` or
    ``"global"`` runs ``eplb`` on ``balance_load`` (default: this step's expert load).
    Everything random comes from ``numpy.random.default_rng(seed)`` in a fixed order
    (gating shuffle, routing, replica choice), so a seed reproduces the step exactly.
    Node-limited routing costs more than plain top-k (it draws per node group first).
    """
    m = preset(model) if isinstance(model, str) else model
    if servers < 1 or gpus_per_server < 1 or tokens_per_gpu < 1:
        raise ValueError("servers, gpus_per_server and tokens_per_gpu must be >= 1")
    gating = gating or Gating()
    rng = np.random.default_rng(seed)
    p = gating.popularity(m.routed_experts, rng)
    limit = m.max_nodes_per_token
    groups = servers if limit is not None and limit < servers else None
    gpus = servers * gpus_per_server
    experts = route_tokens(p, gpus * tokens_per_gpu, m.top_k, rng, groups=groups,
                           max_groups=limit).reshape(gpus, tokens_per_gpu, m.top_k)
    load = np.bincount(experts.ravel(), minlength=m.routed_experts)
    baseline = contiguous_placement(m.routed_experts, servers, gpus_per_server)
    if groups is not None:
        _check_groups_on_servers(baseline, groups)
    placement = baseline
    if balancer is not None:
        stats = load if balance_load is None else np.asarray(balance_load, dtype=np.float64)
        if stats.shape != (m.routed_experts,):
            raise ValueError(f"balance_load must have one entry per expert ({m.routed_experts})")
        placement = eplb(stats, servers, gpus_per_server, slots_per_gpu=slots_per_gpu,
                         policy=balancer)
    slots = placement.assign(experts, rng)
    return StepTraffic(
        model=m, servers=servers, gpus_per_server=gpus_per_server,
        tokens_per_gpu=tokens_per_gpu, gating=gating, seed=seed, popularity=p,
        experts=experts, slots=slots, placement=placement, baseline=baseline,
        expert_load=load, imbalance_before=baseline.imbalance(load),
        imbalance_after=placement.imbalance(load))


def _check_groups_on_servers(placement: Placement, groups: int) -> None:
    """Node-limited routing assumes routing group g lives on server g alone."""
    per = placement.experts // groups
    for g in range(groups):
        servers = set().union(*(placement.expert_servers(e) for e in range(g * per, (g + 1) * per)))
        if servers != {g}:
            raise ValueError(f"routing group {g} is not on server {g} alone ({sorted(servers)}); "
                             "node-limited routing needs experts that split evenly over servers")


def check_phase(phase: str) -> None:
    """Refuse anything but a ``Phase`` (its value), naming the phases."""
    if phase not in tuple(Phase):
        raise ValueError(f"phase must be one of {tuple(p.value for p in Phase)} "
                         f"(got {phase!r})")
