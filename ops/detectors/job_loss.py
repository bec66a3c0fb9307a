"""Where the job's packets are lost: the NIC or the leaf every lossy flow shares. Pure.

A detector module. A MoE job (``traffic.iterations``) reports, per pair of NICs, the
packets its flows lost in the iterations that ended since the previous poll. A fault no
counter sees (a switch's bad table entry dropping some flows, a lossy lane, bit errors, an
MTU too small for full frames) still loses the job's packets on the flows that cross it,
and only on those: the component on the path of (nearly) every lost packet is the
suspect, as fault-finders that trace failed flows (SkeletonHunter, 007) localize. The
probe streams report their losses the same way (``ops.probes``) and are pooled with the
job's. A NIC
when one NIC is an end of them all, across at least two pairs (one pair alone cannot tell
its two ends apart); else a leaf when each of them starts or ends under it. When the lane
marks put the lost packets on one link's paths (``lane-loss``: a lane, which may not be
told from its partner yet), the loss is that link's and this detector says nothing: a NIC
is named when its lost flows crossed several lanes, a leaf when no one link of it
explains the loss (a switch's rule dropping some flows) and the wiring check did not find
its fibres crossed (the miswiring's alert names that).
"""

from __future__ import annotations

from collections import defaultdict

from ops.detectors import AlertKind, Finding, Topo, lane_loss
from ops.probes import SENSORS
from ops.telemetry import History
from traffic.iterations import parse_pair
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 100  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its NIC alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: a leaf's alert
SWITCH = f"{NAME}-switch"
ALERTS = {
    NAME: AlertKind(70, "check NIC {component}: its flows lose packets ({summary}); drop "
                        "counters, cable, firmware; drain it from the job if it persists",
                    evidence=(Evidence.LOSS,), parts=("host", "link")),
    SWITCH: AlertKind(55, "check leaf {component} and its lanes: the flows through it lose "
                          "packets ({summary}); its flow table (rules that drop), its ports' "
                          "MTU and error counters, then drain it",
                      evidence=(Evidence.LOSS, Evidence.ERRORS), parts=("switch", "link")),
}
#: the losses of this many recent polls are pooled (an iteration ends every few polls, so
#: the alert holds while the job's iterations keep losing)
HOLD_POLLS = 6
#: the suspect is on the paths of at least this share of the packets lost
SHARE = 0.9


def detect(hist: History, topo: Topo) -> list[Finding]:
    """A NIC or leaf on the path of >= SHARE of the job's packets lost in the last
    HOLD_POLLS polls (the most specific one: a NIC before its leaf)."""
    leaf_of = {h: topo.links[c].b for h, c in topo.nic_link.items()}
    lost, since, fresh = _lost_pairs(hist, leaf_of)
    total = sum(lost.values())
    if not total or not fresh or lane_loss.suspect(hist, topo) is not None \
            or lane_loss.covering(hist, topo):
        return []
    host: dict[str, float] = defaultdict(float)
    host_pairs: dict[str, int] = defaultdict(int)
    leaf: dict[str, float] = defaultdict(float)
    for (src, dst), n in lost.items():
        for h in {src, dst}:
            host[h] += n
            host_pairs[h] += 1
        for sw in {leaf_of.get(src), leaf_of.get(dst)} - {None}:
            leaf[sw] += n  # type: ignore[index]
    evidence = {"lost_packets": int(total), "pairs": {f"{s}>{d}": int(n) for (s, d), n in
                                                     sorted(lost.items())[:12]}}
    nics = [h for h, n in host.items() if n >= SHARE * total and host_pairs[h] >= 2]
    if len(nics) == 1:
        h = nics[0]
        return [Finding(NAME, h, "warning",
                        f"{int(host[h])} of {int(total)} packets lost (job and probes) "
                        f"were on {h}'s flows ({host_pairs[h]} pairs)", evidence, since)]
    leaves = [sw for sw, n in leaf.items() if n >= SHARE * total]
    if len(leaves) == 1 and len(lost) >= 2 and leaves[0] not in lane_loss.crossed(hist):
        sw = leaves[0]
        return [Finding(SWITCH, sw, "warning",
                        f"{int(leaf[sw])} of {int(total)} packets lost (job and probes) "
                        f"were on flows through {sw} ({len(lost)} pairs)", evidence, since)]
    return []


def _lost_pairs(hist: History, leaf_of: dict[str, str]
                ) -> tuple[dict[tuple[str, str], float], float, bool]:
    """Packets lost per (src, dst) NIC pair over the last HOLD_POLLS polls, the first of
    those polls that brought a loss, and whether one of the last
    ``lane_loss.FRESH_POLLS`` did (a loss that stopped is a fault that ended, and what
    is still pooled of it names nothing here, as in lane-loss); not those a leaf of the
    pair lost while one of its links changed state (the fabric reconverging:
    ``lane_loss.reconverging``); ``leaf_of`` is each NIC's leaf."""
    times = list(hist.times)[-HOLD_POLLS:]
    per_poll = [0.0] * len(times)
    out: dict[tuple[str, str], float] = defaultdict(float)
    gated = lane_loss.reconverging(hist, len(times))
    for comp, metric in list(hist.keys()):
        pair = parse_pair(metric) if comp in SENSORS else None
        if pair is None:
            continue
        leaves = {leaf_of.get(pair[0]), leaf_of.get(pair[1])}
        vals = hist.last(comp, metric, HOLD_POLLS)
        skip = len(times) - len(vals)
        for i, v in enumerate(vals):
            if v and not leaves & gated[skip + i]:
                out[pair] += v
                per_poll[skip + i] += v
    since = next((t for t, n in zip(times, per_poll, strict=True) if n), hist.now)
    fresh = any(per_poll[-lane_loss.FRESH_POLLS:])
    return {k: v for k, v in out.items() if v}, since, fresh
