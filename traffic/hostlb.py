"""What a host-side balancing policy asks of the replay's senders and receivers. Pure.

The switches only hash; policies such as spraying, flowlets and PLB change what they
hash, the UDP source port, per packet or per QP (``controllers.policies`` ``ENTROPY``).
A policy says what its senders and receivers do (``Policy.sender_settings`` and
``receiver_args``, hooks of the policy module); this module gives them the fabric's times
(``host_times``), so neither the replay's code nor this one asks which policy it is.
Times follow from the emulated rates: a frame's time on the slowest fabric link, and a
path's base one-way delay as that many store-and-forward hops.
"""

from __future__ import annotations

from typing import Any

from controllers.policies import HostTimes, Policy, base_rtt_s
from traffic.roce import OP_WRITE_MIDDLE, frame_len
from vocab.flows import QP_SPORT_BASE, QP_SPORTS
from vocab.plan import WiringPlan


def entropy_ports(sport: int, n: int) -> list[int]:
    """The ``n`` source ports a QP whose own port is ``sport`` may carry, in the order the
    compiled sender uses them (value 0 is the QP's own port; ``pktio.c`` computes the same:
    its tests compare). Spread over the QP port range so every value hashes afresh."""
    stride = QP_SPORTS // n
    return [QP_SPORT_BASE + (sport - QP_SPORT_BASE + k * stride) % QP_SPORTS
            for k in range(n)]


def _slowest_fabric_bps(plan: WiringPlan) -> float:
    kinds = {n.name: n.kind for n in plan.nodes}
    fabric = [ln.mbps for ln in plan.links if kinds.get(ln.a) == kinds.get(ln.b) == "switch"]
    return min(fabric or [ln.mbps for ln in plan.links]) * 1e6


def frame_s(plan: WiringPlan, pmtu: int) -> float:
    """Seconds a full frame takes on the slowest link between switches (or any link)."""
    return base_rtt_s(1, frame_len(OP_WRITE_MIDDLE, pmtu), _slowest_fabric_bps(plan))


def base_one_way_s(plan: WiringPlan, pmtu: int) -> float:
    """A full frame's unloaded one-way delay over the longest minimal path, which is also
    the base RTT (``policies.base_rtt_s``: switch hops + 1 links, the ACK left out)."""
    hops = int(plan.counts.get("max_switch_hops", 3))
    return base_rtt_s(hops + 1, frame_len(OP_WRITE_MIDDLE, pmtu), _slowest_fabric_bps(plan))


def host_times(plan: WiringPlan, pmtu: int) -> HostTimes:
    """The times a host-side policy's hooks are given: this fabric's base RTT and frame time."""
    return HostTimes(rtt_s=base_one_way_s(plan, pmtu), frame_s=frame_s(plan, pmtu))


def sender_settings(policy: Policy, plan: WiringPlan, pmtu: int) -> dict[str, Any]:
    """The ``ReplaySpec`` fields of ``policy``'s entropy rule (empty for one port per QP):
    the policy says them (``Policy.sender_settings``), this fabric gives the times."""
    return policy.sender_settings(host_times(plan, pmtu))


def receiver_args(policy: Policy, plan: WiringPlan, pmtu: int) -> list[str]:
    """``astral-pktio recv`` options for ``policy`` (its ``receiver_args``; plb's answer
    rounds with ACK/CNP)."""
    return policy.receiver_args(host_times(plan, pmtu))
