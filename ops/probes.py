"""The probe streams as telemetry: per poll, the packets each stream lost and the lanes they
took. Pure.

The steady probe streams (``testbed.shell.probe``) send sequence-numbered datagrams from
every NIC to one on another leaf, over many UDP source ports, so ECMP spreads each stream
over the lanes. Their receivers rewrite a cumulative report every poll; ``ProbeTally``
turns two successive reports into what changed: per source port, the datagrams that
arrived by lane mark (the TTL the first switch wrote, ``vocab.lanemark``) and those lost
by sequence number. A probe stream carries many times the job's packets per lane, and a
lane that loses one frame in a thousand shows it in a few seconds of probes and in
minutes of the job's. The same tomography reads both (``ops.detectors.lane_loss``): the
values have the job's names (``traffic.iterations``) under the component ``PROBE``.

A UDP socket never sees a corrupt frame: the receiving host's IP layer drops it and counts
it (``Ip: InHdrErrors``). So a receiver's lost datagrams are corrupt ones up to the count
its namespace added over the same poll, and the rest are lost. A poll in which a
receiver's socket overflowed measured the machine, not the fabric: its losses are left out
and counted in ``rxdrops``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from traffic.iterations import JOB, add_path_values, add_paths, pair_metric
from vocab.lanemark import LaneMarks
from vocab.plan import WiringPlan

#: the telemetry component the probe streams' samples belong to
PROBE = "probe"
#: the components whose flows report their losses per pair of NICs and per path: the
#: job's and the probes' (the detectors pool them)
SENSORS = (JOB, PROBE)
#: one stream's report as a reader hands it over: (source host, destination host, JSON)
Report = tuple[str, str, dict[str, Any]]


class ProbeTally:
    """The streams' previous reports, to take each new one's difference from."""

    def __init__(self, plan: WiringPlan) -> None:
        self.marks = LaneMarks(plan)
        self._flows: dict[tuple[str, str, int], tuple[int, int, dict[str, int]]] = {}
        self._bad: dict[str, int] = {}
        self._drops: dict[tuple[str, str], int] = {}
        self._seen: dict[tuple[str, str, int], int] = {}

    def take(self, reports: list[Report]) -> dict[tuple[str, str], float]:
        """Telemetry of component ``PROBE`` for what ``reports`` add to the previous ones:
        ``lost:src>dst`` per pair of NICs, ``path_lost:...`` and ``path_corrupt:...`` per
        path between switches (nonzero ones only), and ``rxdrops``."""
        rows: list[dict[str, Any]] = []
        lost_at: dict[str, list[dict[str, Any]]] = defaultdict(list)
        bad_at: dict[str, int] = {}
        rxdrops = 0
        for src, dst, rep in reports:
            drops = int(rep.get("socket_drops") or 0)
            fell_behind = drops > self._drops.get((src, dst), drops)
            self._drops[(src, dst)] = drops
            rxdrops += fell_behind
            bad = rep.get("bad_headers")
            if bad is not None:
                if dst in self._bad:
                    bad_at[dst] = max(0, int(bad) - self._bad[dst])
                self._bad[dst] = int(bad)
            for sport, f in (rep.get("flows") or {}).items():
                row = self._row(src, dst, int(sport), f)
                if row is None:
                    continue
                if fell_behind:
                    row["lost_packets"] = 0
                rows.append(row)
                if row["lost_packets"]:
                    lost_at[dst].append(row)
        for dst, lossy in lost_at.items():  # the receiver's bad headers were lost datagrams
            left = min(bad_at.get(dst, 0), sum(r["lost_packets"] for r in lossy))
            for r in sorted(lossy, key=lambda r: -r["lost_packets"]):
                r["errors"] = min(left, r["lost_packets"])
                left -= r["errors"]
        paths: dict[str, list[int]] = {}
        add_paths(paths, rows, self.marks, self._seen)
        out: dict[tuple[str, str], float] = {(PROBE, "rxdrops"): float(rxdrops)}
        per: dict[tuple[str, str], float] = defaultdict(float)
        for r in rows:
            if r["lost_packets"]:
                per[(PROBE, pair_metric(r["src"], r["dst"]))] += r["lost_packets"]
        add_path_values(per, PROBE, paths)
        out.update(per)
        return out

    def _row(self, src: str, dst: str, sport: int, f: dict[str, Any]
             ) -> dict[str, Any] | None:
        """One source port's change since the previous report, as a flow row
        (``add_paths``'s shape); None when nothing changed."""
        key = (src, dst, sport)
        received, lost = int(f.get("received", 0)), int(f.get("lost", 0))
        marks = {str(t): int(n) for t, n in (f.get("marks") or {}).items()}
        r0, l0, m0 = self._flows.get(key, (0, 0, {}))
        self._flows[key] = (received, lost, marks)
        if received < r0:  # a new receiver (a restarted stream): start over
            r0, l0, m0 = 0, 0, {}
        got = {int(t): n - m0.get(t, 0) for t, n in marks.items() if n > m0.get(t, 0)}
        d_lost = max(0, lost - l0)
        if not got and not d_lost:
            return None
        return {"src": src, "dst": dst, "sport": sport, "marks": got, "lost_packets": d_lost,
                "errors": 0}


def budget(plan: WiringPlan, mbps_per_host: float, payload: int, fault_s: float,
           guard: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the probe streams cost and the least loss they show within a fault.

    Each NIC sends ``mbps_per_host`` of ``payload``-byte datagrams; each stream crosses two
    lane directions (up from its leaf, down to the other), so every one of the fabric's
    lane directions carries ``pps_per_lane_direction`` on average. Seeing one loss at
    probability p with 95% confidence takes ~3/p datagrams (``loss_seen``: the p for which
    a fault of ``fault_s`` carries that many; twice that for the tomography's three
    packets). ``guard``: the fidelity guard's verdict on the streams (their switch-hop
    packets against the machine's capacity)."""
    switches = {s.name for s in plan.switches}
    lanes = sum(1 for ln in plan.links if ln.a in switches and ln.b in switches)
    pps_host = mbps_per_host * 1e6 / 8 / payload
    per_dir = len(plan.hosts) * pps_host * 2 / (2 * lanes) if lanes else 0.0
    out: dict[str, Any] = {
        "pps_per_host": round(pps_host, 1), "lane_directions": 2 * lanes,
        "pps_per_lane_direction": round(per_dir, 1),
        "loss_seen": round(3 / (per_dir * fault_s), 5) if per_dir else None}
    if guard:
        hop, cap = guard.get("offered_hop_pps"), guard.get("capacity_hop_pps")
        out.update({"offered_hop_pps": hop, "capacity_hop_pps": cap,
                    "share_of_capacity": round(hop / cap, 3) if hop and cap else None})
    return out

