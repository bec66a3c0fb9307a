"""An incast: GPUs whose tokens route to hot experts all send to one host and overload its NIC.

The incast's shape comes from the MoE workload model (``incast_bytes``, ``incast_weights``,
``hot_streams``, here); ``testbed.shell.faults.hot_receiver`` plays it as steady UDP streams
onto the target.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import link_component, number, whole
from traffic.kernels import Cluster, low_latency
from traffic.workload import hotset, preset, simulate_step
from vocab.plan import WiringPlan

TARGET = "host"
ORDER = 130  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("slow",)  # the target's NIC is oversubscribed: its queue holds
EFFECT = "slows"

#: UDP port of hot-receiver streams (4791 stays free for RoCE replay receivers on the target).
HOT_PORT = 4792
HOT_PAYLOAD = 1000  # UDP payload bytes of hot-receiver packets
HOT_SPORT_BASE = 52000  # sender i of fault id f: UDP source port 52000 + 200 * (f % 64) + i
MAX_HOT_SENDERS = 200
WIRE_OVERHEAD = 42  # Ethernet 14 + IPv4 20 + UDP 8 bytes around a UDP payload


@dataclass(frozen=True)
class Settings:
    """Offered load as a multiple of the target's NIC rate, the share of routing that goes
    to the hot experts, at most this many sources (0 = all), and the workload seed."""

    overload: float = 2.0
    hot_share: float = 0.5
    senders: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        number("overload", self.overload, low=0.0, low_open=True)
        number("hot_share", self.hot_share, low=0.0, high=1.0, low_open=True, high_open=True)
        whole("senders", self.senders, 0)
        whole("seed", self.seed, 0)


SETTINGS = Settings


def check_plan(plan: WiringPlan, fault: Any) -> None:
    """The target must receive an incast over the fabric in this plan."""
    incast_weights(plan, fault.target, hot_share=fault.settings.hot_share,
                   seed=fault.settings.seed)


def random_targets(plan: WiringPlan, pool: list[str]) -> list[str]:
    """Any host, if GPUs on 2+ servers make an incast over the fabric."""
    return pool if _has_incast(plan) else []


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """A workload seed (hard only: an incast at twice the NIC's rate)."""
    return {"seed": rng.randrange(1 << 16)}


def affected(plan: WiringPlan, component: str) -> list[str]:
    """The lanes of the target's leaf: the incast comes down them, so they run full."""
    hosts = {h.name for h in plan.hosts}
    leaf = next((ln.b for ln in reversed(plan.links) if ln.a == component), None)
    return [link_component(plan, ln) for ln in plan.links
            if leaf in (ln.a, ln.b) and ln.a not in hosts and ln.b not in hosts]


def incast_bytes(plan: WiringPlan, target: str, *, hot_share: float = 0.5, seed: int = 0,
                 tokens_per_gpu: int = 128, intra_server: str = "nvlink") -> dict[str, int]:
    """Bytes each source host's NIC sends to ``target`` in one hot decode step. Pure.

    One decode step of DeepSeek-V3 (``traffic.workload.simulate_step``; node-limited
    routing off, so any plan size works) with hot-set gating: the experts of one GPU
    take ``hot_share`` of the routing. Contiguous placement puts those experts on GPU
    0 of server 0, so the ranks are relabelled (servers rotated, GPU indexes rotated
    within a server: a relabelling the model is symmetric under) to put that GPU on
    ``target``. The low-latency kernel (``traffic.kernels.low_latency``) then says how
    many bytes each other GPU's NIC sends to it; with ``intra_server="nvlink"`` GPUs
    of the target's own server use NVLink and are not sources.
    """
    node = plan.node(target)
    if node.kind != "host":
        raise ValueError(f"target {target!r} is not a host")
    try:
        cluster = Cluster.from_plan(plan)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"target: this plan has no (server, gpu) grid for an incast: {exc}"
                         ) from None
    S, P = cluster.servers, cluster.gpus_per_server
    t_server, t_gpu = int(node.loc["server"]), int(node.loc["gpu"])
    model = dataclasses.replace(preset("deepseek-v3"), max_nodes_per_token=None)
    experts = model.routed_experts
    hot = max(1, experts // (S * P))
    step = simulate_step(model, S, P, tokens_per_gpu,
                         gating=hotset(hot / experts, hot_share, shuffle=False), seed=seed)
    flows = low_latency(step, phases=("dispatch",), intra_server=intra_server).flows
    rank_of = {name: r for r, name in enumerate(Cluster.default(S, P).hosts)}
    sent: dict[str, int] = {}
    for f in flows:
        if rank_of[f.dst] != 0:
            continue
        s, g = divmod(rank_of[f.src], P)
        src = cluster.host(((s + t_server) % S) * P + (g + t_gpu) % P)
        sent[src] = sent.get(src, 0) + f.bytes
    if not sum(sent.values()):
        raise ValueError(f"target {target!r}: no host sends to it over the fabric in this plan "
                         "(a single server talks over NVLink); use a plan with 2+ servers")
    return {h: sent[h] for h in sorted(sent, key=lambda h: (-sent[h], h))}


def incast_weights(plan: WiringPlan, target: str, *, hot_share: float = 0.5, seed: int = 0,
                   intra_server: str = "nvlink") -> dict[str, float]:
    """Share of the hot-receiver incast each source sends (sums to 1; heaviest first). Pure."""
    sent = incast_bytes(plan, target, hot_share=hot_share, seed=seed, intra_server=intra_server)
    total = sum(sent.values())
    return {h: b / total for h, b in sent.items()}


def hot_streams(plan: WiringPlan, fault: Any, sport_base: int = HOT_SPORT_BASE
                ) -> list[dict[str, Any]]:
    """The hot-receiver's UDP streams: ``{src, sport, mbps, pps}`` per source. Pure.

    Offered load is ``overload`` x the target's NIC rate, split by ``incast_weights``
    (the ``senders`` heaviest sources when ``senders`` > 0, at most ``MAX_HOT_SENDERS``),
    each capped at its own NIC's rate; packets carry ``HOT_PAYLOAD`` bytes (+42 on the
    wire). Source i sends from UDP port ``sport_base + i`` (the receiver tells sources
    apart by it).
    """
    knobs = fault.settings
    weights = incast_weights(plan, fault.target, hot_share=knobs.hot_share, seed=knobs.seed)
    chosen = list(weights)[:min(knobs.senders or MAX_HOT_SENDERS, MAX_HOT_SENDERS)]
    norm = sum(weights[h] for h in chosen)
    nic = plan.host_link_mbps()
    offered = knobs.overload * nic[fault.target]
    out = []
    for i, src in enumerate(chosen):
        mbps = min(nic[src], offered * weights[src] / norm)
        pps = mbps * 1e6 / (8 * (HOT_PAYLOAD + WIRE_OVERHEAD))
        if pps >= 1:
            out.append({"src": src, "sport": sport_base + i, "mbps": round(mbps, 4),
                        "pps": round(pps, 2)})
    return out


def _has_incast(plan: WiringPlan) -> bool:
    """Can a hot receiver get traffic over the fabric here? (GPUs on 2+ servers.)"""
    try:
        return Cluster.from_plan(plan).servers >= 2
    except (KeyError, ValueError):
        return False
