"""Baselines the lab's detectors and agent are scored against, on the same telemetry. Pure.

A baseline is an alert source like ``ops.detectors.Engine``: after every poll its
``step(hist)`` reads the ``History`` and opens or clears alerts (``AlertBook``: one per
rule and component while its condition holds), so ``ops.evaluate.score`` scores it the
same way. Three baselines, each what a fault-finder without the lab's logic would run,
each reading only series the lab's detectors read too:

* ``StaticThresholds``: the per-counter alarms an operator sets on switches and NICs (a
  drop counter, a queue, a link down, a carrier change, a lane carrying far less than its
  ECMP siblings, the job's lost packets towards a NIC), each held for ``PERSIST`` polls,
  with thresholds set from a separate clean run (``calibrate``): its maximum times
  ``MARGIN``, as an operator sets them from a quiet week's graphs;
* ``PeerOutlier``: Minder's idea, a job-level detector that knows nothing of the fabric:
  the host whose received rate stands farthest from its peers', for several polls, is the
  faulty machine;
* ``LossVote``: 007's idea for gray faults, a vote over the paths of the job's lossy
  flows: the link on the paths of most of them is the suspect.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from controllers.paths import PathFinder
from ops.detectors import JOB_MIN_MBPS, AlertBook, Finding, Topo, rounded, run_start
from ops.detectors.job_loss import HOLD_POLLS
from ops.telemetry import CONTROLLER, History
from testbed.faultkinds import TARGETS, shown_by
from traffic.iterations import JOB, parse_pair
from vocab.evidence import Evidence
from vocab.plan import WiringPlan, link_components

#: the names ``ops-eval`` files the baselines' scores under
NAMES = ("static-thresholds", "peer-outlier", "loss-vote")

@dataclass(frozen=True)
class Shows:
    """What a baseline alert shows, as ``ops.detectors.AlertKind`` says it for a detector's:
    the evidence its rule reads (``vocab.evidence``) and the parts of the fabric a fault
    behind it may sit on (fault kinds' ``TARGET``). The fault kinds it is evidence of are
    derived from them (``fault_kinds``), so a baseline names no kind either."""

    evidence: tuple[str, ...]
    parts: tuple[str, ...] = TARGETS

    @property
    def fault_kinds(self) -> tuple[str, ...]:
        return shown_by(self.evidence, self.parts)


#: a drop counter cannot tell whose loss: a NIC's own or its cable's
_LOSS = Shows((Evidence.LOSS,), ("host", "link"))
#: the job's lost packets (towards a NIC, or voted onto a link): any loss on the paths,
#: refused frames too
_JOB_LOSS = Shows((Evidence.LOSS, Evidence.ERRORS))
#: a port down cannot tell a cut from a flap or a dead switch (it fires per link)
_DOWN = Shows((Evidence.DOWN,), ("link", "switch"))
#: What each baseline alert shows, by the name it carries (``ops.evaluate`` scores kind
#: classification by it, as by a detector's ``AlertKind``). A baseline names no kind; its
#: rule says what it sees.
SHOWS: dict[str, Shows] = {
    "static:nic_drops": _LOSS, "static:qdrops_ab": _LOSS, "static:qdrops_ba": _LOSS,
    "static:up": _DOWN, "static:ctl_up": _DOWN, "static:carrier_changes": _DOWN,
    "static:controller_up": Shows((Evidence.DOWN,), ("controller",)),
    # a switch's port drop/error counters: the kernel refuses there the frames a lowered MTU
    # refuses (a blackhole's OpenFlow drops and corrupted frames are not counted there)
    "static:port_drops": Shows((Evidence.ERRORS,)),
    # an interface's discards: what link-drops reads, frames above the receiver's MTU
    "static:rxdrops_ab": Shows((Evidence.ERRORS,)), "static:rxdrops_ba": Shows((Evidence.ERRORS,)),
    # a lane carrying far less than its ECMP siblings
    "static:mbps_ab": Shows((Evidence.SLOW,), ("link",)),
    "static:mbps_ba": Shows((Evidence.SLOW,), ("link",)),
    # a queue that holds cannot tell a slow link from an oversubscribed receiver
    "static:backlog_ab": Shows((Evidence.SLOW,)), "static:backlog_ba": Shows((Evidence.SLOW,)),
    "static:job_lost": _JOB_LOSS,
    # a host far from its peers: whatever aimed at a host makes it lose or slow
    "peer-outlier": Shows((Evidence.LOSS, Evidence.SLOW), ("host",)),
    "loss-vote": _JOB_LOSS,
}

#: A calibrated threshold is the clean run's maximum times this (a rate ratio: its minimum
#: divided by it). A clean run's maximum is one draw of its tail, and a longer run sees a
#: larger one: twice it leaves that room without hiding a fault that doubles a counter.
MARGIN = 2.0


@dataclass(frozen=True)
class Thresholds:
    """What ``StaticThresholds`` alarms above (a rate ratio: below), per counter family.

    The defaults are what an operator sets by hand, and the floors of a calibrated
    threshold (``FLOORS``). Drop counters and the job's losses alarm above one packet a
    poll: ``0 x MARGIN`` would ring on one stray packet, which a healthy fabric drops now
    and then (a neighbour re-probe, a flow's first packets on the switch's slow path).
    """

    #: packets/s a NIC drops (the gap between NIC and IP counts, which ARP frames, on the
    #: NIC and not in IP, keep at a packet or two a second on a clean host)
    nic_drops: float = 2.0
    #: packets a switch port's queue drops in a poll (``qdrops_ab``/``qdrops_ba``)
    qdrops: float = 1.0
    #: frames an interface refused in a poll (``rxdrops_ab``/``rxdrops_ba``)
    rxdrops: float = 1.0
    #: a switch's OpenFlow port drop/error counters in a poll
    port_drops: float = 1.0
    #: carrier transitions of a link in a poll: a healthy link has none, so any counts
    carrier_changes: float = 0.0
    #: the job's packets lost towards one NIC over the last ``HOLD_POLLS`` polls (an
    #: iteration ends every few polls), as a RoCE NIC's out-of-sequence counter counts them
    job_lost: float = 1.0
    #: a link's queue, in seconds of its configured rate (so NIC links and lanes compare);
    #: by hand the detectors' 50 ms
    backlog_s: float = 0.05
    #: a lane carrying less than this fraction of its ECMP siblings' median
    rate_ratio: float = 0.5
    #: clean polls they were calibrated on (0: the defaults) and the margin applied
    polls: int = 0
    margin: float | None = None

    def limit(self, family: str) -> float:
        return float(getattr(self, family))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The lowest a calibrated threshold goes, per family (a rate ratio has none: a clean run
#: whose lanes already fall to a tenth of their siblings calibrates the rule quiet). A
#: queue of 10 ms of its link's rate is a few frames: no fault.
FLOORS: dict[str, float] = {"nic_drops": 2.0, "qdrops": 1.0, "rxdrops": 1.0,
                             "port_drops": 1.0, "carrier_changes": 0.0, "job_lost": 1.0,
                             "backlog_s": 0.01}


def calibrate(plan: WiringPlan, clean: History, margin: float = MARGIN,
              since: float | None = None, until: float | None = None) -> Thresholds:
    """``StaticThresholds``' thresholds from a clean run: per counter family, the largest
    value any of its components showed in any poll of ``clean`` (between ``since`` and
    ``until``, wall clock, when given) times ``margin``, floored at ``FLOORS``; the rate
    ratio is the smallest any lane showed divided by ``margin`` (default 0.5 when no lane
    carried traffic). Pure: the same clean history gives the same thresholds."""
    hist = _window(clean, since, until)
    topo = Topo.from_plan(plan)
    peak: dict[str, float] = {}
    low: float | None = None
    for family, _counter, _comp, vals in _observe(hist, topo, len(hist)):
        seen = [v for v in vals if v is not None]
        if not seen:
            continue
        if family == "rate_ratio":
            low = min(seen) if low is None else min(low, min(seen))
        else:
            peak[family] = max(peak.get(family, 0.0), max(seen))
    limits = {f: max(floor, peak.get(f, 0.0) * margin) for f, floor in FLOORS.items()}
    ratio = Thresholds.rate_ratio if low is None else low / margin
    return Thresholds(**limits, rate_ratio=ratio, polls=len(hist), margin=margin)


class StaticThresholds(AlertBook):
    """Per-counter thresholds held for ``PERSIST`` polls; each alert names the counter's
    component and its rule (``static:<counter>``; the controller's ``up`` is
    ``static:controller_up``, so the rule alone says what it is about: ``SHOWS``).

    It reads what the lab's detectors read: a NIC's drops (``in_drop_pps + out_drop_pps``),
    a switch port's queue drops (``qdrops``), an interface's discards (``rxdrops``), a
    switch's OpenFlow drop/error counters (``port_drops``), a link's carrier changes, its
    queue (``backlog``, in seconds of its rate), a lane's rate against the median of its
    ECMP siblings while they carry >= ``JOB_MIN_MBPS`` (ECMP plans them equal), and the
    job's packets lost per pair of NICs (``lost:<src>><dst>``), summed per receiving NIC
    over ``HOLD_POLLS`` polls (``static:job_lost`` on that host). Thresholds: ``Thresholds``
    (by hand) or ``calibrated`` from a clean run. States alarm on the poll they are read:
    a link down (``up`` or the controller's ``ctl_up`` is 0), the controller not answering
    (as the lab's link-down detector does; a state read is not a noisy sample).

    ``PERSIST = 2``: a counter over its threshold in one poll is what a shared machine's
    jitter makes now and then, two in a row is a condition, as the detectors' loss,
    link-drops, degraded and controller-down rules judge it; a third poll would only
    delay every alarm, since the calibrated margin already rules out clean amplitudes.
    """

    PERSIST = 2

    def __init__(self, plan: WiringPlan, thresholds: Thresholds | None = None) -> None:
        super().__init__()
        self.topo = Topo.from_plan(plan)
        self.limits = thresholds or Thresholds()

    @classmethod
    def calibrated(cls, plan: WiringPlan, clean: History, margin: float = MARGIN,
                   since: float | None = None, until: float | None = None
                   ) -> StaticThresholds:
        """A fresh baseline whose thresholds come from the clean run ``clean``
        (``calibrate``): its maximum per counter family x ``margin``, floored."""
        return cls(plan, calibrate(plan, clean, margin, since, until))

    def findings(self, hist: History) -> list[Finding]:
        n = self.PERSIST
        times = list(hist.times)[-n:]
        out: list[Finding] = []

        def alarm(counter: str, comp: str, vals: list[float | None], limit: float | None,
                  what: str) -> None:
            ev: dict[str, Any] = {counter: rounded(vals)}
            if limit is not None:  # a counter held n polls; a state read now
                ev["threshold"] = round(limit, 4)
            held = f" for {n} polls" if limit is not None else ""
            out.append(Finding(f"static:{counter}", comp, "warning",
                               f"{comp}: {counter} {what}{held} ({rounded(vals)})",
                               ev, times[0] if limit is not None else hist.now))

        held = _observe(hist, self.topo, n) if len(times) == n else iter(())
        for family, counter, comp, vals in held:
            limit = self.limits.limit(family)
            if family == "rate_ratio":
                bad = [v is not None and v < limit for v in vals]
            else:
                bad = [v is not None and v > limit for v in vals]
            if len(bad) == n and all(bad):
                what = "below" if family == "rate_ratio" else "above"
                alarm(counter, comp, vals, limit, f"{what} {limit:.3g}")
        for comp in self.topo.links:
            for counter in ("up", "ctl_up"):
                if hist.latest(comp, counter) == 0.0:
                    alarm(counter, comp, hist.last(comp, counter, n), None, "= 0")
        if hist.latest(CONTROLLER, "up") == 0.0:  # its own rule: a link's "up" is another
            alarm("controller_up", CONTROLLER, hist.last(CONTROLLER, "up", n), None, "= 0")
        return out


class PeerOutlier(AlertBook):
    """Minder's idea: per poll, the host whose received rate (NIC ``rx_mbps``, its share of
    the job) is farthest from its peers' median, flagged when that distance exceeds
    ``K`` x the peers' MAD for ``M`` polls in a row.

    ``K = 5``: for Gaussian jitter the MAD is ~0.67 sigma, so 5 MAD is ~3.4 sigma, which
    one clean host crosses it in about one poll in 1,300; ``M = 3`` polls in a row (the
    continuity Minder requires; the job-slow detector's 3) makes that a rare joint event
    and lets a transient (one slow poll on a shared core) pass. The MAD is floored at
    ``MAD_FLOOR`` of the peers' median: peers receiving almost the same rate would make any
    jitter an outlier. It sees only hosts, so it names a host (its NIC link), never a switch
    or a lane: a fault in the fabric shows, at best, as the host behind it.
    """

    K = 5.0
    M = 3
    MAD_FLOOR = 0.02

    def __init__(self, plan: WiringPlan) -> None:
        super().__init__()
        self.topo = Topo.from_plan(plan)

    def outlier(self, rates: dict[str, float]) -> str | None:
        """The host of one poll's rates that is an outlier, or None."""
        if len(rates) < 3:
            return None
        center = statistics.median(rates.values())
        host = max(sorted(rates), key=lambda h: abs(rates[h] - center))
        peers = [v for h, v in rates.items() if h != host]
        med = statistics.median(peers)
        mad = statistics.median(abs(v - med) for v in peers)
        if med < JOB_MIN_MBPS:  # an idle job: nothing to compare
            return None
        return host if abs(rates[host] - med) > self.K * max(mad, self.MAD_FLOOR * med) \
            else None

    def findings(self, hist: History) -> list[Finding]:
        cols = {h: hist.values(h, "rx_mbps") for h in sorted(self.topo.hosts)}
        flagged = []
        for i in range(max(0, len(hist) - self.M), len(hist)):
            flagged.append(self.outlier({h: c[i] for h, c in cols.items()
                                         if c[i] is not None}))
        last = flagged[-1] if flagged else None
        n, since = run_start(list(hist.times)[-len(flagged):],
                             [f is not None and f == last for f in flagged])
        if last is None or n < self.M:
            return []
        return [Finding("peer-outlier", self.topo.nic_link.get(last, last), "warning",
                        f"{last} receives {cols[last][-1]:.1f} Mb/s, far from its peers",
                        {"rx_mbps": cols[last][-1]}, since)]  # type: ignore[arg-type]


class LossVote(AlertBook):
    """007's vote over the job's lossy flows: the link on the paths of most of them.

    Input: the job's packets lost per (src, dst) pair of NICs (``lost:<src>><dst>`` of
    ``job``, pooled over ``HOLD_POLLS`` polls: job-loss's input). Each lossy pair casts one
    vote, however many packets it lost (a flow that loses a lot is one flow), spread over
    its candidate paths in the plan (``controllers.paths.PathFinder``: the source NIC's
    link, the source leaf's lanes to every spine, the spines' lanes down, the destination
    NIC's link): each path 1/len(paths), so a link's votes are the number of lossy pairs
    expected to have crossed it under ECMP. 007 knows each flow's path (traceroute); the
    lab cannot know the switch's hash, hence the spread.

    The most-voted link is flagged when its votes are >= ``MIN_VOTES`` (two pairs' worth:
    one lossy pair cannot tell its two ends apart, and a stray loss is one pair), >=
    ``SHARE`` of the lossy pairs (most of the loss is on it), and >= ``LEAD`` x the
    runner-up's (a tie says nothing of which), with the same verdict ``M`` polls in a row
    (a second poll's losses must not move it). So it names a NIC's link when the lossy
    pairs share that NIC, and a lane when they share no NIC but one lane; it cannot tell
    sibling lanes apart (every pair from a leaf may take any of them), so a lossy lane of
    a leaf with several lanes raises nothing, or, when its lossy flows happen to share a
    NIC, names that NIC. Pairs with no path in the plan are left out.
    """

    MIN_VOTES = 2.0
    SHARE = 0.5
    LEAD = 1.5
    M = 2

    def __init__(self, plan: WiringPlan) -> None:
        super().__init__()
        self.topo = Topo.from_plan(plan)
        self.paths = PathFinder(plan)
        self._end: dict[tuple[str, int], str] = {}  # (node, port) -> link component
        for comp, ln in link_components(plan).items():
            self._end[(ln.a, ln.a_port)] = comp
            self._end[(ln.b, ln.b_port)] = comp
        self._links: dict[tuple[str, str], dict[str, float]] = {}

    def links(self, src: str, dst: str) -> dict[str, float]:
        """Each link on the candidate paths from NIC ``src`` to NIC ``dst``: the share of
        those paths that cross it (empty: no path in the plan)."""
        key = (src, dst)
        if key not in self._links:
            out: dict[str, float] = defaultdict(float)
            try:
                paths = self.paths.paths(src, dst)
            except ValueError:
                paths = []
            for path in paths:
                comps = {self.topo.nic_link[src]} | {self._end[hop] for hop in path}
                for comp in comps:
                    out[comp] += 1.0 / len(paths)
            self._links[key] = dict(out)
        return self._links[key]

    def votes(self, pairs: Iterable[tuple[str, str]]) -> dict[str, float]:
        """Each link's votes from the lossy ``pairs``."""
        out: dict[str, float] = defaultdict(float)
        for src, dst in pairs:
            for comp, share in self.links(src, dst).items():
                out[comp] += share
        return dict(out)

    def verdict(self, pairs: Iterable[tuple[str, str]]) -> str | None:
        """The link the lossy ``pairs`` single out, or None."""
        lossy = [p for p in pairs if self.links(*p)]
        ranked = sorted(self.votes(lossy).items(), key=lambda kv: (-kv[1], kv[0]))
        if not ranked:
            return None
        top, v = ranked[0]
        runner = ranked[1][1] if len(ranked) > 1 else 0.0
        eps = 1e-9  # votes are sums of fractions
        ok = (v + eps >= self.MIN_VOTES and v + eps >= self.SHARE * len(lossy)
              and v + eps >= self.LEAD * runner)
        return top if ok else None

    def findings(self, hist: History) -> list[Finding]:
        pooled = _pooled_pairs(hist, self.M)
        k = len(next(iter(pooled.values()))) if pooled else 0
        verdicts = [self.verdict([p for p, vals in pooled.items() if vals[j]])
                    for j in range(k)]
        last = verdicts[-1] if verdicts else None
        n, since = run_start(list(hist.times)[-k:] if k else [],
                             [v is not None and v == last for v in verdicts])
        if last is None or n < self.M:
            return []
        lossy = {p: vals[-1] for p, vals in pooled.items() if vals[-1]}
        votes = self.votes(lossy)
        top = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        return [Finding("loss-vote", last, "warning",
                        f"{last} is on the paths of {votes[last]:.2g} of the "
                        f"{len(lossy)} NIC pairs whose packets the job lost",
                        {"votes": {c: round(v, 3) for c, v in top},
                         "lossy_pairs": len(lossy),
                         "pairs": {f"{s}>{d}": int(x) for (s, d), x in
                                   sorted(lossy.items())[:12]}},
                        since)]  # type: ignore[arg-type]


def baselines(plan: WiringPlan, calibration: History | None = None,
              margin: float = MARGIN, since: float | None = None,
              until: float | None = None) -> dict[str, AlertBook]:
    """A fresh instance of every baseline, by the name its scores are filed under; with
    ``calibration`` (a clean run's history; its polls at ``since`` <= t < ``until`` when
    given) the static thresholds come from it (``calibrate``)."""
    static = StaticThresholds(plan) if calibration is None else \
        StaticThresholds.calibrated(plan, calibration, margin, since, until)
    return {"static-thresholds": static, "peer-outlier": PeerOutlier(plan),
            "loss-vote": LossVote(plan)}


# --- what the baselines read ------------------------------------------------------------------
def _window(hist: History, since: float | None, until: float | None) -> History:
    """The polls of ``hist`` at ``since`` <= t < ``until`` (all of it when both are None)."""
    if since is None and until is None:
        return hist
    cols = {k: hist.values(*k) for k in list(hist.keys())}
    out = History(maxlen=None)
    for i, t in enumerate(hist.times):
        if (since is None or t >= since) and (until is None or t < until):
            out.add(t, {k: c[i] for k, c in cols.items()
                        if c[i] is not None})  # type: ignore[misc]
    return out


def _pooled(vals: list[float | None], n: int, hold: int) -> list[float]:
    """For each of the last ``n`` polls of ``vals``, the sum over the ``hold`` polls
    ending there."""
    return [sum(v for v in vals[max(0, j - hold + 1):j + 1] if v)
            for j in range(max(0, len(vals) - n), len(vals))]


def _pooled_pairs(hist: History, n: int) -> dict[tuple[str, str], list[float]]:
    """The job's packets lost per (src, dst) pair over ``HOLD_POLLS`` polls, at each of the
    last ``n`` polls (``n`` values per pair, fewer in a shorter history)."""
    out = {}
    for comp, metric in list(hist.keys()):
        pair = parse_pair(metric) if comp == JOB else None
        if pair is not None:
            out[pair] = _pooled(hist.last(comp, metric, n + HOLD_POLLS - 1), n, HOLD_POLLS)
    return out


def _observe(hist: History, topo: Topo, n: int
             ) -> Iterator[tuple[str, str, str, list[float | None]]]:
    """``(family, counter, component, values)`` of every series ``StaticThresholds``
    judges, its last ``n`` polls each; a family names its ``Thresholds`` field."""
    for host in sorted(topo.hosts):
        ins, outs = hist.last(host, "in_drop_pps", n), hist.last(host, "out_drop_pps", n)
        yield "nic_drops", "nic_drops", host, [
            None if a is None and b is None else (a or 0.0) + (b or 0.0)
            for a, b in zip(ins, outs, strict=True)]
    for comp, ln in topo.links.items():
        per_s = ln.mbps * 1e6 / 8 if ln.mbps else None
        for d in ("ab", "ba"):
            yield "qdrops", f"qdrops_{d}", comp, hist.last(comp, f"qdrops_{d}", n)
            yield "rxdrops", f"rxdrops_{d}", comp, hist.last(comp, f"rxdrops_{d}", n)
            if per_s:
                yield "backlog_s", f"backlog_{d}", comp, [
                    None if v is None else v / per_s
                    for v in hist.last(comp, f"backlog_{d}", n)]
        yield "carrier_changes", "carrier_changes", comp, hist.last(comp, "carrier_changes", n)
    for sw in sorted(topo.switch_links):
        yield "port_drops", "port_drops", sw, hist.last(sw, "port_drops", n)
    towards: dict[str, list[float]] = {}
    for (_src, dst), vals in _pooled_pairs(hist, n).items():
        if dst in topo.hosts:
            acc = towards.setdefault(dst, [0.0] * len(vals))
            towards[dst] = [a + v for a, v in zip(acc, vals, strict=True)]
    for host in sorted(towards):
        yield "job_lost", "job_lost", host, list(towards[host])
    for lanes in topo.uplinks.values():
        for d in ("ab", "ba"):
            rates = {c: hist.last(c, f"mbps_{d}", n) for c in lanes}
            for c in lanes:
                ratios: list[float | None] = []
                for j, v in enumerate(rates[c]):
                    peers = [r[j] for p, r in rates.items() if p != c and r[j] is not None]
                    if v is None or len(peers) < 2:
                        ratios.append(None)
                        continue
                    med = statistics.median(peers)
                    ratios.append(v / med if med >= JOB_MIN_MBPS else None)
                yield "rate_ratio", f"mbps_{d}", c, ratios

