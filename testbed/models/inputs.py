"""What the flow model takes in: flows (normalised to ``FlowIn``) and policy names. Pure,
no root.

Its own module because the per-flow model, the bounds and the job generator all read flows
the same way, and the bounds sit below the per-flow model (which reports them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from controllers import policies as registry
from vocab.flows import ROCE_PORT

#: what the CLI and ``run`` model unless told: the switch-side policies (the host-side ones,
#: which open more QPs or decide per job, are asked for by name: ``--lb spray,plb``)
DEFAULT_POLICIES = tuple(n for n, p in registry.POLICIES.all().items()
                         if p.entropy == "qp" and not p.expands)


def check_policy(policy: str) -> registry.Policy:
    """The policy a spec names, with its options (``registry.parse``: ``qp-scaling:qps=8``)."""
    return registry.parse(policy)


@dataclass
class FlowIn:
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


def normalise(flows: Iterable[Any]) -> list[FlowIn]:
    out = []
    for i, f in enumerate(flows):
        if type(f) is FlowIn and f.bytes >= 0 and f.start >= 0 and f.src != f.dst:
            out.append(f)  # already normalised (``Job.flow_list``, ``perflow.Prepared.fl``)
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
        out.append(FlowIn(src, dst, sport, size, start, int(getattr(f, "dport", ROCE_PORT)),
                          str(getattr(f, "proto", "udp")), getattr(f, "qp", None)))
    return out
