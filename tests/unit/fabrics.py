"""Small fabrics of every builder, shared by the routing, policy and controller tests."""

from __future__ import annotations

from functools import cache
from typing import Any

from testbed.topologies import build
from vocab.plan import WiringPlan

# Small fabrics, so that every host pair can be traced.
FABRICS: dict[str, tuple[str, dict[str, Any]]] = {
    # 2 blocks x 2 rails = 4 leaves, 4 spines, one lane per (leaf, spine)
    "astral3": ("astral3", dict(servers=4, gpus=2, servers_per_block=2)),
    # 2 spines: each leaf has two lanes to each spine
    "astral3-2spines": ("astral3", dict(servers=4, gpus=2, servers_per_block=2, spines=2)),
    # one block: leaves of different rails still meet at the spines
    "astral3-1block": ("astral3", dict(servers=2, gpus=2, servers_per_block=2)),
    # the lab default: 32 GPUs, 16 leaves, 4 spines
    "astral3-default": ("astral3", {}),
    # ToR -> 2 aggs per rail -> 2 cores
    "rail3": ("rail3", dict(servers=4, gpus=2, servers_per_block=2, lanes_per_uplink=2)),
    # 2 spines per rail; cross-rail traffic relays through the server's NVLink switch
    "railonly": ("railonly", dict(servers=4, gpus=2, servers_per_block=2, lanes_per_uplink=2)),
    "railonly-1block": ("railonly", dict(servers=2, gpus=2, servers_per_block=2)),
    # k = 4: 8 GPUs in two pods
    "fattree": ("fattree", dict(servers=4, gpus=2)),
    # 10 GPUs: three pods, the last one half empty
    "fattree-3pods": ("fattree", dict(servers=5, gpus=2)),
}


@cache
def plan_of(name: str) -> WiringPlan:
    topology, params = FABRICS[name]
    return build(topology, **params)
