"""The job's flows as the controller sees them: what ``POST /traffic`` carries. Pure.

A flow is one transport 5-tuple between two GPU NICs. RoCEv2 sends every queue
pair (QP) from its own UDP source port toward UDP 4791, and switches hash that
source port for ECMP, so "the flow of QP 7 from s0g0 to s3g0" and "UDP
s0g0:sport -> s3g0:4791" are the same thing. The controller needs the 5-tuple
(to match packets exactly) and the bytes (to balance links by volume).

JSON form (``POST /traffic`` body; the traffic layer posts these)::

    {"flows": [{"src": "s0g0", "dst": "s3g0", "sport": 49153, "bytes": 4194304},
               {"src": "10.0.0.1", "dst": "10.1.0.1", "qp": 7, "bytes": 1048576,
                "proto": "udp", "dport": 4791}],
     "replace": true}

``src``/``dst`` are host names or their IPs; give ``sport`` or ``qp`` (then the
source port is ``sport_for_qp(qp)``, the mapping the traffic agents use too);
``dport`` defaults to 4791 (RoCEv2) and ``proto`` to ``udp``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vocab.plan import WiringPlan

ROCE_PORT = 4791
#: RoCEv2 source ports come from the dynamic range; QP n uses ``QP_SPORT_BASE + n % QP_SPORTS``.
QP_SPORT_BASE = 49152
QP_SPORTS = 16384
PROTOS = {"udp": 17, "tcp": 6}
#: how a sender may pick each packet's UDP source port (``controllers.policies`` ENTROPY)
ENTROPY_MODES = ("qp", "packet", "flowlet", "plb")
MAX_FLOWS = 200_000  # a 256-GPU all-to-all with 2 QPs per pair is 130K; beyond is a mistake


def sport_for_qp(qp: int) -> int:
    """The UDP source port of queue pair ``qp`` (one port per QP: the ECMP entropy)."""
    return QP_SPORT_BASE + qp % QP_SPORTS


@dataclass(frozen=True, order=True)
class Flow:
    """One transport flow between two hosts of the plan (names, not IPs)."""

    src: str
    dst: str
    sport: int
    dport: int = ROCE_PORT
    proto: str = "udp"
    bytes: int = 0
    qp: int | None = None

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        """Identity of the flow on the wire (bytes and QP are attributes, not identity)."""
        return (self.src, self.dst, self.proto, self.sport, self.dport)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["qp"] is None:
            del d["qp"]
        return d


def _int_field(item: dict[str, Any], name: str, i: int, lo: int, hi: int) -> int:
    value = item[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"flows[{i}].{name} must be an integer in [{lo}, {hi}] (got {value!r})")
    return value


def parse_flows(body: Any, plan: WiringPlan) -> list[Flow]:
    """Validate a ``POST /traffic`` body (or a bare list of flow objects) into ``Flow``s.

    Raises ``ValueError`` with one message that names the first bad field, so the
    REST layer can answer 400 and the controller never sees half a job.
    """
    items = body.get("flows") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise ValueError('body must be {"flows": [...]} or a JSON list of flows')
    if len(items) > MAX_FLOWS:
        raise ValueError(f"too many flows ({len(items)} > {MAX_FLOWS})")
    hosts = {h.name: h.name for h in plan.hosts}
    hosts.update({h.ip: h.name for h in plan.hosts if h.ip})
    flows: list[Flow] = []
    seen: set[tuple[str, str, str, int, int]] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"flows[{i}] must be an object")
        unknown = set(item) - {"src", "dst", "sport", "dport", "proto", "bytes", "qp"}
        if unknown:
            raise ValueError(f"flows[{i}] has unknown field(s) {sorted(unknown)}")
        ends = []
        for end in ("src", "dst"):
            if end not in item:
                raise ValueError(f"flows[{i}] needs {end!r}")
            name = hosts.get(item[end]) if isinstance(item[end], str) else None
            if name is None:
                raise ValueError(f"flows[{i}].{end}: no host or host IP {item[end]!r} in the plan")
            ends.append(name)
        if ends[0] == ends[1]:
            raise ValueError(f"flows[{i}]: src and dst are the same host {ends[0]}")
        proto = item.get("proto", "udp")
        if proto not in PROTOS:
            raise ValueError(f"flows[{i}].proto must be one of {sorted(PROTOS)} (got {proto!r})")
        qp = _int_field(item, "qp", i, 0, (1 << 24) - 1) if "qp" in item else None
        if "sport" in item:
            sport = _int_field(item, "sport", i, 1, 65535)
        elif qp is not None:
            sport = sport_for_qp(qp)
        else:
            raise ValueError(f"flows[{i}] needs 'sport' or 'qp'")
        dport = _int_field(item, "dport", i, 1, 65535) if "dport" in item else ROCE_PORT
        size = _int_field(item, "bytes", i, 0, 1 << 50) if "bytes" in item else 0
        flow = Flow(ends[0], ends[1], sport, dport, proto, size, qp)
        if flow.key in seen:
            raise ValueError(f"flows[{i}] repeats the 5-tuple {flow.key}")
        seen.add(flow.key)
        flows.append(flow)
    return flows
