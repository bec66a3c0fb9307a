"""What a host-side balancing policy asks of the replay's senders and receivers. Pure.

The switches only hash; policies such as spraying, flowlets and PLB change what they
hash, the UDP source port, per packet or per QP (``controllers.policies`` ``ENTROPY``).
This module turns a policy and the fabric's rates into the senders' settings
(``ReplaySpec`` fields) and the receivers' feedback options, so the replay's code stays
about running agents. Times follow from the emulated rates: a frame's time on the
slowest fabric link, and a path's base one-way delay as that many store-and-forward hops.
"""

from __future__ import annotations

from typing import Any

from controllers.policies import Policy, base_rtt_s
from traffic.roce import OP_WRITE_MIDDLE, frame_len
from vocab.flows import QP_SPORT_BASE, QP_SPORTS


def entropy_ports(sport: int, n: int) -> list[int]:
    """The ``n`` source ports a QP whose own port is ``sport`` may carry, in the order the
    compiled sender uses them (value 0 is the QP's own port; ``pktio.c`` computes the same:
    its tests compare). Spread over the QP port range so every value hashes afresh."""
    stride = QP_SPORTS // n
    return [QP_SPORT_BASE + (sport - QP_SPORT_BASE + k * stride) % QP_SPORTS
            for k in range(n)]


def _slowest_fabric_bps(plan: Any) -> float:
    kinds = {n.name: n.kind for n in plan.nodes}
    fabric = [ln.mbps for ln in plan.links if kinds.get(ln.a) == kinds.get(ln.b) == "switch"]
    return min(fabric or [ln.mbps for ln in plan.links]) * 1e6


def frame_s(plan: Any, pmtu: int) -> float:
    """Seconds a full frame takes on the slowest link between switches (or any link)."""
    return base_rtt_s(1, frame_len(OP_WRITE_MIDDLE, pmtu), _slowest_fabric_bps(plan))


def base_one_way_s(plan: Any, pmtu: int) -> float:
    """A full frame's unloaded one-way delay over the longest minimal path, which is also
    the base RTT (``policies.base_rtt_s``: switch hops + 1 links, the ACK left out)."""
    hops = int(plan.counts.get("max_switch_hops", 3))
    return base_rtt_s(hops + 1, frame_len(OP_WRITE_MIDDLE, pmtu), _slowest_fabric_bps(plan))


def sender_settings(policy: Policy, plan: Any, pmtu: int) -> dict[str, Any]:
    """The ``ReplaySpec`` fields of ``policy``'s entropy rule (empty for one port per QP)."""
    mode = policy.entropy
    if mode == "qp":
        return {}
    out: dict[str, Any] = {"entropy": mode}
    if "entropies" in policy.defaults:
        out["entropies"] = int(policy.option("entropies"))
    if mode == "flowlet":  # an RTT: the data's one-way delay plus the (tiny) ACK's
        out["flowlet_gap_us"] = policy.option("gap_rtts") * base_one_way_s(plan, pmtu) * 1e6
    if mode == "plb":
        out["plb_rounds"] = int(policy.option("rounds"))
    return out


def receiver_args(policy: Policy, plan: Any, pmtu: int) -> list[str]:
    """``astral-pktio recv`` options for ``policy`` (plb: answer rounds with ACK/CNP)."""
    if policy.entropy != "plb":
        return []
    base = base_one_way_s(plan, pmtu)  # also the RTT: the ACK's way back is a tiny frame
    delay = base + policy.option("delay_frames") * frame_s(plan, pmtu)
    return ["--feedback-round-us", f"{policy.option('round_rtts') * base * 1e6:.1f}",
            "--feedback-delay-us", f"{delay * 1e6:.1f}"]
