"""The one link (or switch) that explains the lost or corrupt packets of the job and the
probe streams, by lane marks. Pure.

A detector module. The job's receivers tell each flow's lane by the mark its first switch
wrote in the TTL (``vocab.lanemark``), so every flow's path between switches is known, and
each iteration reports per path the packets sent along it and those lost, or received
corrupt (``traffic.iterations.add_paths``). That is network tomography with exact paths,
as fault-finders that score links by the failed paths they explain localize (007,
NetBouncer, SCORE's single-failure hitting set): the suspect is the link on the paths of
(nearly) all the damaged packets, and a clear margin of them lies on paths that every
other link misses. The margin matters here: the training step's flows are rail-aligned,
so between two blocks a lane's flows all come back over one partner lane; only flows that
leave the rail (the decode burst's) tell the two apart, and until some of those are damaged
the detector waits rather than guess. When no link explains the loss but one switch does,
the switch is named: a table entry that drops some flows (a partial blackhole) loses them
on all of its links alike. A NIC's own loss is left to ``job-loss``, which names the NIC by
its flows' ends (this detector steps aside when one NIC is an end of nearly all of it).
Corrupt frames are counted apart (a clean fabric corrupts none): the same rule over them
names the corrupting link. The probe streams report the same per path (``ops.probes``),
with many times the job's packets per lane: the two are pooled.
"""

from __future__ import annotations

from collections import defaultdict

from ops.detectors import AlertKind, Finding, Topo, miswired
from ops.probes import PROBE, SENSORS
from ops.telemetry import History
from traffic.iterations import PATH_CORRUPT, PATH_LOST, parse_pair, parse_path
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 105  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its loss alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: its corruption alert, the alert naming a switch, and the one naming a NIC
CORRUPT, SWITCH, NIC = f"{NAME}-corrupt", f"{NAME}-switch", f"{NAME}-nic"
ALERTS = {
    NAME: AlertKind(75, "check link {component}: the flows across it lose packets "
                        "and the flows beside it do not ({summary}); its optics and "
                        "cable, then drain it",
                    evidence=(Evidence.LOSS,), parts=("link",)),
    CORRUPT: AlertKind(80, "check link {component}: frames across it arrive corrupt "
                           "({summary}); clean or replace its optics, then drain it",
                       evidence=(Evidence.CORRUPT,), parts=("link",)),
    SWITCH: AlertKind(60, "check switch {component}: the lost packets crossed it and "
                          "no one of its links explains them ({summary}); its flow table "
                          "(rules that drop some flows), then drain it",
                      evidence=(Evidence.LOSS,), parts=("switch",)),
    NIC: AlertKind(70, "check NIC {component}: the flows through its cable lose packets and "
                       "no other component explains them ({summary}); drop counters, cable, "
                       "firmware; drain it from the job if it persists",
                   evidence=(Evidence.LOSS,), parts=("host", "link")),
}
#: the job's packets are pooled over this many recent polls (an iteration ends every few
#: polls, and the damaged packets that tell partner lanes apart come a few at a time) ...
HOLD_POLLS = 15
#: ... the probe streams' over this many (they carry hundreds of datagrams a lane each
#: poll, yet a lane losing 0.1% of them loses one every few polls each way)
PROBE_HOLD_POLLS = 10
#: at least this many damaged packets (lost; corrupt: CORRUPT_MIN) before anything is named
LOSS_MIN = 3
CORRUPT_MIN = 2
#: the suspect's paths carry all but this share of them ...
SLACK = 0.1
#: ... and every other candidate misses at least this many more of them than it does
#: (a clean fabric loses none, so two damaged packets off a link's paths clear it)
MARGIN = 2
#: ... of the corrupt ones, at least this many more: a clean fabric corrupts none, and
#: with no stray ones to tell apart the one link on the paths of them all is the culprit
CORRUPT_MARGIN = 1
#: a NIC an end of at least this share of the lost packets is job-loss's to name
NIC_SHARE = 0.9
#: a suspect is named only while damage keeps coming on its paths: within this many
#: recent polls
FRESH_POLLS = 5
#: a link whose state changed (down, or its carrier lost) makes the fabric reconverge: the
#: packets lost across either of its switches from the poll before the change to this many
#: polls after it are the link's, which link-down and flapping name, not another culprit's
RECONVERGE_POLLS = 2
#: how many faults at once it names at most (each explaining what the ones before left)
MAX_SUSPECTS = 3
#: when no one component explains the damage, the first of a pair is one of this many
#: that carry most of it
PAIR_FIRST = 5


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Per kind of damage (lost, corrupt): the links that ``explain`` it over the last
    HOLD_POLLS polls, one after another (``suspects``); for lost packets that no link
    explains, the switch that does."""
    out = []
    for name, metric, least, what in ((NAME, PATH_LOST, LOSS_MIN, "lost"),
                                      (CORRUPT, PATH_CORRUPT, CORRUPT_MIN, "corrupt")):
        for component, missed, runner_up, total, since in suspects(hist, topo, metric, least):
            alert = name if "~" in component else SWITCH
            host = _ends(component)[0]
            if metric == PATH_LOST and host in topo.hosts:
                alert, component = NIC, host  # a NIC's cable is the NIC
            if alert == SWITCH and metric == PATH_CORRUPT:
                continue  # a switch does not corrupt frames its links carry intact
            out.append(Finding(
                alert, component, "warning",
                f"{int(total - missed)} of the {int(total)} packets (job and probes) {what} "
                f"lately were on paths across {component}; every other "
                f"{'link' if alert != SWITCH else 'switch'} misses {int(runner_up)} or more",
                {f"{what}_packets": int(total), "explained": int(total - missed),
                 "next_best_misses": int(runner_up)}, since))
    return out


def suspects(hist: History, topo: Topo, metric: str = PATH_LOST, least: float = LOSS_MIN
             ) -> list[tuple[str, float, float, float, float]]:
    """``(link or switch, damaged packets off its paths, the runner-up's, damaged packets
    in all, since)`` for ``metric`` of the job and probes over the last HOLD_POLLS polls:
    the link that ``explains`` them, else the switch that does; then, with the packets on
    its paths taken out, the one that explains the rest, and so on (two faults at once
    each damage their own paths), MAX_SUSPECTS at most, while at least ``least`` are left.
    None when a NIC is an end of NIC_SHARE of the lost packets (job-loss names it)."""
    damaged, since, fresh = _pooled(hist, metric)
    if not fresh:
        return []  # what is pooled is old: a fault that ended, not one to name now
    if metric == PATH_LOST:
        if _one_nic(hist, topo):
            return []
        # a corrupt packet is lost to its flow too: the loss is what corruption leaves
        corrupt, _, _ = _pooled(hist, PATH_CORRUPT)
        damaged = {p: n - corrupt.get(p, 0.0) for p, n in damaged.items()
                   if n > corrupt.get(p, 0.0)}
    at = since if since is not None else hist.now
    margin = CORRUPT_MARGIN if metric == PATH_CORRUPT else MARGIN
    out: list[tuple[str, float, float, float, float]] = []
    while len(out) < MAX_SUSPECTS:
        total = sum(damaged.values())
        if total < least:
            break
        best = explains(damaged, total, margin) or _switch(damaged, total, topo)
        if best is None:
            if not out:  # two faults at once, neither explaining all but SLACK alone
                out = _pair(damaged, total, least, topo, at, margin)
            break
        out.append((*best, total, at))
        damaged = {p: n for p, n in damaged.items() if not _crosses(p, best[0])}
    # a suspect whose paths brought nothing lately is a fault that ended: its packets
    # explained the rest away, but it is not named; nor is a miswiring's (``crossed``)
    theirs = crossed(hist)
    return [s for s in out if any(_crosses(p, s[0]) for p in fresh) and s[0] not in theirs]


def _pair(damaged: dict[tuple[str, ...], float], total: float, least: float, topo: Topo,
          at: float, margin: float) -> list[tuple[str, float, float, float, float]]:
    """Two components that together explain ``damaged``: one of the PAIR_FIRST that carry
    most of it (links and switches), then, with its paths taken out, one that explains
    the rest (at least ``least`` packets, by ``margin``) as a single fault's would be; []
    if none do."""
    on: dict[str, float] = defaultdict(float)
    for path, n in damaged.items():
        for c in {*path, *(e for ln in path for e in _ends(ln) if e in topo.switch_links)}:
            on[c] += n
    # most damage first; at equal damage a link before a switch (the more specific: a
    # switch carries all of its link's), then by name (sets iterate in hash order)
    ranked = sorted(on, key=lambda c: (-on[c], "~" not in c, c))
    for first in ranked[:PAIR_FIRST]:
        rest = {p: n for p, n in damaged.items() if not _crosses(p, first)}
        left = sum(rest.values())
        if left < least:
            continue
        second = explains(rest, left, margin) or _switch(rest, left, topo)
        if second is not None:
            runner_up = next((total - on[c] for c in ranked if c != first), total)
            return [(first, total - on[first], runner_up, total, at), (*second, left, at)]
    return []


def suspect(hist: History, topo: Topo, metric: str = PATH_LOST, least: float = LOSS_MIN
            ) -> tuple[str, float, float, float, float] | None:
    """The first of ``suspects``, or None."""
    found = suspects(hist, topo, metric, least)
    return found[0] if found else None


def _switch(damaged: dict[tuple[str, ...], float], total: float, topo: Topo
            ) -> tuple[str, float, float] | None:
    """``(switch, damaged packets off paths through it, the runner-up's)`` for the one
    switch on the paths of all but SLACK of them, by MARGIN; else None."""
    switches: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for path in damaged:
        for ln in path:
            for end in _ends(ln):
                if end in topo.switch_links:
                    switches[end].add(path)
    return _unique({sw: total - sum(damaged[p] for p in paths)
                    for sw, paths in switches.items()}, total)


def _crosses(path: tuple[str, ...], component: str) -> bool:
    """Does ``path`` cross ``component`` (one of its links, or a switch at one's end)?"""
    return component in path or any(component in _ends(ln) for ln in path)


def covering(hist: History, topo: Topo) -> list[str]:
    """The links between switches on the paths of all but SLACK of the packets lost over
    the last HOLD_POLLS polls, margin or not: while there is one, a NIC whose flows lose
    may yet be a lane its flows happen to share (job-loss waits). A NIC's own link is the
    NIC's, not such a lane."""
    damaged, _, _ = _pooled(hist, PATH_LOST)
    total = sum(damaged.values())
    return sorted(ln for ln, m in _missed(damaged, total).items()
                  if m <= SLACK * total and _ends(ln)[0] not in topo.hosts)


def explains(damaged: dict[tuple[str, ...], float], total: float, margin: float = MARGIN
             ) -> tuple[str, float, float] | None:
    """``(link, damaged packets off its paths, the runner-up's)``: the link whose paths
    carry all but SLACK of the ``total`` damaged packets, when every other link's paths
    miss at least ``margin`` more of them; else None."""
    return _unique(_missed(damaged, total), total, margin)


def _missed(damaged: dict[tuple[str, ...], float], total: float) -> dict[str, float]:
    """Per link on any damaged path, the damaged packets on paths it is not on."""
    on: dict[str, float] = defaultdict(float)
    for path, n in damaged.items():
        for ln in set(path):
            on[ln] += n
    return {ln: total - n for ln, n in on.items()}


def _unique(missed: dict[str, float], total: float, margin: float = MARGIN
            ) -> tuple[str, float, float] | None:
    if not missed:
        return None
    ranked = sorted((m, c) for c, m in missed.items())
    (best, who), runner_up = ranked[0], ranked[1][0] if len(ranked) > 1 else total
    if best > SLACK * total or runner_up - best < margin:
        return None
    return who, best, runner_up


def _ends(link: str) -> tuple[str, str]:
    a, _, rest = link.partition("~")
    return a, rest.partition("#")[0]


def _one_nic(hist: History, topo: Topo) -> bool:
    """Is one NIC an end of NIC_SHARE of the lost packets (``lost:src>dst``)?"""
    per: dict[str, float] = defaultdict(float)
    total = 0.0
    for comp, metric in list(hist.keys()):
        pair = parse_pair(metric) if comp in SENSORS else None
        if pair is None:
            continue
        n = sum(v for v in hist.last(comp, metric, _hold(comp)) if v)
        total += n
        for h in set(pair):
            per[h] += n
    return bool(total) and max(per.values()) >= NIC_SHARE * total


def reconverging(hist: History, n: int) -> list[set[str]]:
    """Per poll of the last ``n``, the switches at the ends of a link whose state changed
    within RECONVERGE_POLLS polls before it (or in the next poll): its lost packets there
    are the reconvergence's (RECONVERGE_POLLS)."""
    out: list[set[str]] = [set() for _ in range(n)]
    for comp, metric in list(hist.keys()):
        if "~" not in comp or metric not in ("up", "carrier_changes"):
            continue  # a link's state only (the controller's "up" is no link's)
        vals = hist.last(comp, metric, n + RECONVERGE_POLLS)
        skip = n + RECONVERGE_POLLS - len(vals)
        for i, v in enumerate(vals):
            if v is None or not (v == 0.0 if metric == "up" else v > 0):
                continue
            at = skip + i - RECONVERGE_POLLS  # this poll's index among the last n
            for j in range(max(0, at - 1), min(n, at + RECONVERGE_POLLS + 1)):
                out[j].update(_ends(comp))
    return out


def crossed(hist: History) -> set[str]:
    """The links the standing wiring check found crossed (``miswired.standing``), and the
    switch two of them share: the miswiring's alert names them, and the loss across them
    is the miswiring's, not a culprit of this detector's to name (its paths stay in the
    pool: a fault beside it still explains its own)."""
    found = miswired.standing(hist)
    if found is None:
        return set()
    ends = [e for ln in found[1] for e in _ends(ln)]
    return found[1] | {e for e in ends if ends.count(e) > 1}


def _hold(component: str) -> int:
    """How many recent polls of ``component``'s damage are pooled."""
    return PROBE_HOLD_POLLS if component == PROBE else HOLD_POLLS


def _pooled(hist: History, what: str
            ) -> tuple[dict[tuple[str, ...], float], float | None, set[tuple[str, ...]]]:
    """Per path, the job's and probes' ``what`` (lost, corrupt): the job's over the last
    HOLD_POLLS polls, the probes' (dense: a few polls tell) over the last PROBE_HOLD_POLLS;
    the time of the first of those polls where any was nonzero; and the paths damaged in
    the last FRESH_POLLS polls."""
    times = list(hist.times)[-HOLD_POLLS:]
    per_poll = [0.0] * len(times)
    out: dict[tuple[str, ...], float] = defaultdict(float)
    fresh: set[tuple[str, ...]] = set()
    gated = reconverging(hist, len(times))
    for comp, metric in list(hist.keys()):
        parsed = parse_path(metric) if comp in SENSORS else None
        if parsed is None or parsed[0] != what:
            continue
        vals = hist.last(comp, metric, _hold(comp))
        skip = len(times) - len(vals)
        ends = {e for ln in parsed[1] for e in _ends(ln)}
        for i, v in enumerate(vals):
            if v and not ends & gated[skip + i]:
                out[parsed[1]] += v
                per_poll[skip + i] += v
                if i >= len(vals) - FRESH_POLLS:
                    fresh.add(parsed[1])
    since = next((t for t, n in zip(times, per_poll, strict=True) if n), None)
    return {k: v for k, v in out.items() if v}, since, fresh
