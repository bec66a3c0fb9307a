"""Detectors: time series in, alerts out. Pure: no sockets, no clock, no Mininet.

Each detector is a function ``detect_<name>(hist, topo) -> list[Finding]`` that looks at
the recent history (``ops.telemetry.History``) and says which conditions hold *now*.
Its rule and threshold are in its docstring and in module constants, so a reader can
check both against ``docs/operations.md``. ``Engine`` runs them all after every poll
and turns findings into ``Alert`` s: one alert per (detector, component) while the
condition lasts (deduplicated), with the time the condition was first seen, and
cleared once the condition has been absent for ``CLEAR_POLLS`` polls.

Thresholds leave margin over clean runs (measured numbers in ``docs/operations.md``):
this machine's 2 shared cores make rates jitter by a few Mb/s between 1 s polls, so no
rule fires on one sample of a rate, only on a queue that holds, a count, or several
polls in a row.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ops.telemetry import CONTROLLER, History, link_components
from testbed.plan import WiringPlan

SEVERITIES = ("info", "warning", "critical")

# --- thresholds ------------------------------------------------------------------------------
#: link down: a link is down when either end's operstate is not "up" in the latest poll.
LINK_DOWN_POLLS = 1
#: flapping: at least this many carrier transitions (both ends counted once) ...
FLAP_MIN_CHANGES = 3
#: ... within this many seconds (down, up, down = 3: a second loss of carrier).
FLAP_WINDOW_S = 30.0
#: degraded: the egress queue holds at least this many seconds of the configured rate ...
DEGRADED_BACKLOG_S = 0.05
#: ... while the port sends less than this fraction of its configured rate ...
DEGRADED_RATE_RATIO = 0.8
#: ... in this many polls in a row.
DEGRADED_POLLS = 2
#: loss: a host drops (in + out) at least this fraction of its IP packets ...
LOSS_RATIO = 0.01
#: ... and at least this many packets a second ...
LOSS_MIN_PPS = 10.0
#: ... in this many polls in a row. Queue drops on a switch port count the same way.
LOSS_POLLS = 2
#: a poll where the NIC sent (almost) nothing of what IP handed it is a transmit stall, not
#: random loss: seen on clean runs here for ~3 s at a time (packets held for an unresolved
#: neighbour under load); not counted as loss (see docs/operations.md, known gaps).
STALL_RATIO = 0.9
#: ECMP imbalance: one uplink of a leaf carries more than this multiple of the median of
#: its sibling uplinks ...
ECMP_RATIO = 3.0
#: ... and at least this fraction of its configured rate (idle fabrics are not imbalanced) ...
ECMP_MIN_UTIL = 0.4
#: ... in this many polls in a row.
ECMP_POLLS = 5
#: hot receiver: the queue towards a NIC holds at least this many seconds of its rate ...
INCAST_BACKLOG_S = 0.05
#: ... while the NIC receives at least this fraction of its rate ...
INCAST_RATE_RATIO = 0.8
#: ... in this many polls in a row.
INCAST_POLLS = 2
#: job slow: the job's received rate is below this fraction of its baseline ...
JOB_RATIO = 0.7
#: ... in this many polls in a row (the baseline: median of the first BASELINE_POLLS polls
#: with traffic, or a baseline run's).
JOB_POLLS = 3
BASELINE_POLLS = 10
#: a job whose baseline is below this many Mb/s is idle: nothing to compare.
JOB_MIN_MBPS = 1.0
#: controller: the REST API did not answer in this many polls in a row.
CONTROLLER_POLLS = 2
#: an alert is cleared after its condition has been absent for this many polls.
CLEAR_POLLS = 2


@dataclass
class Topo:
    """What detectors need from the wiring plan: rates, ends, which uplinks are siblings."""

    links: dict[str, Any]  # component -> testbed.plan.Link
    hosts: set[str]
    switch_links: dict[str, list[str]]  # switch -> its link components
    uplinks: dict[str, list[str]]  # leaf -> its uplink lane components (ECMP siblings)
    nic_link: dict[str, str]  # host -> its NIC link component

    @classmethod
    def from_plan(cls, plan: WiringPlan) -> Topo:
        links = link_components(plan)
        hosts = {h.name for h in plan.hosts}
        switch_links: dict[str, list[str]] = {s.name: [] for s in plan.switches}
        uplinks: dict[str, list[str]] = {}
        nic_link = {}
        for comp, ln in links.items():
            for end in (ln.a, ln.b):
                if end in switch_links:
                    switch_links[end].append(comp)
            if ln.a in hosts:
                nic_link[ln.a] = comp
            elif ln.kind in ("lane", "uplink"):
                uplinks.setdefault(ln.a, []).append(comp)
        return cls(links, hosts, switch_links, uplinks, nic_link)

    def mbps(self, comp: str) -> float:
        return float(self.links[comp].mbps)


@dataclass
class Finding:
    """A condition that holds at the latest poll."""

    detector: str
    component: str
    severity: str
    summary: str
    evidence: dict[str, Any]
    since: float  # time of the first poll of the current run of bad polls


@dataclass
class Alert:
    """A deduplicated finding over time: opened, refreshed while it holds, cleared after."""

    detector: str
    component: str
    severity: str
    summary: str
    evidence: dict[str, Any]
    first_seen: float
    last_seen: float
    cleared: float | None = None
    opened: float | None = None  # poll time at which the alert was raised (detection time)
    id: int | None = None
    absent: int = field(default=0, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "detector": self.detector, "severity": self.severity,
                "component": self.component, "summary": self.summary,
                "evidence": self.evidence, "first_seen": self.first_seen,
                "last_seen": self.last_seen, "cleared": self.cleared, "opened": self.opened}


# --- helpers -------------------------------------------------------------------------------
def _run_start(times: list[float], ok: list[bool]) -> tuple[int, float | None]:
    """Length of the run of True at the end of ``ok`` and the time it began."""
    n = 0
    for flag in reversed(ok):
        if not flag:
            break
        n += 1
    return n, (times[-n] if n else None)


def _rounded(values: list[float | None], digits: int = 2) -> list[float | None]:
    return [None if v is None else round(v, digits) for v in values]


# --- detectors -------------------------------------------------------------------------------
def detect_link_down(hist: History, topo: Topo) -> list[Finding]:
    """Link down: either end's operstate is not ``up`` (``up`` == 0) in the latest poll.

    Kernel state read each poll, so a cut shows within one interval, with or without the
    controller. If every link of a switch is down, one ``switch-down`` finding names the
    switch instead (its links are the evidence): a dead switch is one fault, not six.
    """
    times = list(hist.times)
    down = {}
    for comp in topo.links:
        vals = hist.values(comp, "up")
        n, since = _run_start(times, [v == 0.0 for v in vals])
        if n >= LINK_DOWN_POLLS:
            down[comp] = since
    out = []
    explained: set[str] = set()
    for sw, comps in topo.switch_links.items():
        if len(comps) >= 2 and all(c in down for c in comps):
            explained.update(comps)
            out.append(Finding("switch-down", sw, "critical",
                               f"switch {sw}: all {len(comps)} links down",
                               {"links_down": sorted(comps)},
                               min(down[c] for c in comps)))  # type: ignore[type-var]
    for comp, since in down.items():
        if comp in explained:
            continue
        out.append(Finding("link-down", comp, "critical", f"link {comp} is down",
                           {"up": _rounded(hist.last(comp, "up", 5)),
                            "ctl_up": _rounded(hist.last(comp, "ctl_up", 5))}, since))
    return out


def detect_flapping(hist: History, topo: Topo) -> list[Finding]:
    """Flapping: >= FLAP_MIN_CHANGES carrier transitions within FLAP_WINDOW_S seconds.

    ``carrier_changes`` is the kernel's count of carrier on/off events (the larger of the
    two ends), so it sees a flap that starts and ends between two polls. One cut and its
    repair are 2 transitions; a third means the link lost carrier again: flapping.
    """
    times = list(hist.times)
    if not times:
        return []
    start = times[-1] - FLAP_WINDOW_S
    out = []
    for comp in topo.links:
        vals = hist.values(comp, "carrier_changes")
        window = [(t, v) for t, v in zip(times, vals, strict=True) if t > start and v]
        total = sum(v for _, v in window)
        if total >= FLAP_MIN_CHANGES:
            out.append(Finding("flapping", comp, "warning",
                               f"link {comp} flapping: {total:g} carrier changes in "
                               f"{FLAP_WINDOW_S:g} s",
                               {"carrier_changes": [(round(t, 2), v) for t, v in window]},
                               window[0][0]))
    return out


def detect_degraded(hist: History, topo: Topo) -> list[Finding]:
    """Degraded: the queue holds >= DEGRADED_BACKLOG_S of the configured rate while the port
    sends < DEGRADED_RATE_RATIO of that rate, for DEGRADED_POLLS polls in a row.

    A healthy but busy link with a queue sends at its configured rate (that is congestion,
    not a fault); a lane that queues and still sends well below its rate is failing (a
    dirty optic, a lane renegotiated down). Queues are deep and lossless-style here, so a
    degraded lane queues rather than drops.
    """
    times = list(hist.times)
    out = []
    for comp in topo.links:
        rate = topo.mbps(comp)
        min_backlog = DEGRADED_BACKLOG_S * rate * 1e6 / 8
        for d in ("ab", "ba"):
            back = hist.values(comp, f"backlog_{d}")
            mbps = hist.values(comp, f"mbps_{d}")
            ok = [b is not None and m is not None and b >= min_backlog
                  and m < DEGRADED_RATE_RATIO * rate for b, m in zip(back, mbps, strict=True)]
            n, since = _run_start(times, ok)
            if n >= DEGRADED_POLLS:
                cur = mbps[-1] or 0.0
                out.append(Finding(
                    "degraded", comp, "warning",
                    f"link {comp} ({d[0]}->{d[1]}) degraded: {cur:.1f} of {rate:g} Mb/s "
                    f"({100 * cur / rate:.0f}%) with {back[-1] / 1e3:.0f} kB queued "
                    f"for {n} polls",
                    {f"mbps_{d}": _rounded(mbps[-n - 2:]),
                     f"backlog_{d}": _rounded(back[-n - 2:], 0),
                     "configured_mbps": rate, "polls": n}, since))  # type: ignore[arg-type]
                break
    return out


def detect_loss(hist: History, topo: Topo) -> list[Finding]:
    """Loss: a host drops >= LOSS_RATIO of its IP packets (and >= LOSS_MIN_PPS packets/s),
    or a switch port's queue drops >= LOSS_MIN_PPS packets/s, for LOSS_POLLS polls.

    Host drops are the gap between the NIC's and the IP layer's counters in the host's
    namespace (see ``ops.telemetry.Collector._poll_hosts``): a NIC losing packets shows
    there, whether the NIC or netfilter drops them.
    """
    times = list(hist.times)
    out = []
    for host in sorted(topo.hosts):
        din = hist.values(host, "in_drop_pps")
        dout = hist.values(host, "out_drop_pps")
        pin = hist.values(host, "in_pps")
        pout = hist.values(host, "out_pps")
        ok, ratio = [], []
        for a, b, c, d in zip(din, dout, pin, pout, strict=True):
            if None in (a, b, c, d):
                ok.append(False)
                ratio.append(None)
                continue
            if d and b / d >= STALL_RATIO:  # type: ignore[operator]
                b = 0.0  # a stall, not loss
            drops, total = a + b, max(c + d, 1e-9)  # type: ignore[operator]
            ratio.append(drops / total)
            ok.append(drops >= LOSS_MIN_PPS and drops / total >= LOSS_RATIO)
        n, since = _run_start(times, ok)
        if n >= LOSS_POLLS:
            out.append(Finding("loss", host, "warning",
                               f"NIC {host} losing {100 * ratio[-1]:.1f}% of packets "
                               f"({(din[-1] or 0) + (dout[-1] or 0):.0f}/s) for {n} polls",
                               {"drop_ratio": [None if r is None else round(r, 4)
                                               for r in ratio[-n - 2:]],
                                "in_drop_pps": _rounded(din[-n - 2:]),
                                "out_drop_pps": _rounded(dout[-n - 2:])},
                               since))  # type: ignore[arg-type]
    for comp in topo.links:
        for d in ("ab", "ba"):
            q = hist.values(comp, f"qdrops_{d}")
            n, since = _run_start(times, [v is not None and v >= LOSS_MIN_PPS for v in q])
            if n >= LOSS_POLLS:
                out.append(Finding("loss", comp, "warning",
                                   f"link {comp} ({d[0]}->{d[1]}) queue dropping "
                                   f"{q[-1]:.0f} packets/s", {f"qdrops_{d}": q[-n - 2:]},
                                   since))  # type: ignore[arg-type]
                break
    return out


def detect_ecmp_imbalance(hist: History, topo: Topo) -> list[Finding]:
    """ECMP imbalance: one up uplink of a leaf carries > ECMP_RATIO x the median of its
    sibling uplinks and >= ECMP_MIN_UTIL of its rate, for ECMP_POLLS polls (hash
    polarization: many flows hashed onto one member while others idle).
    """
    times = list(hist.times)
    out = []
    for leaf, comps in topo.uplinks.items():
        if len(comps) < 3:
            continue
        series = {c: hist.values(c, "mbps_ab") for c in comps}
        ups = {c: hist.values(c, "up") for c in comps}
        hot_at: list[str | None] = []
        for i in range(len(times)):
            live = {c: series[c][i] for c in comps
                    if series[c][i] is not None and ups[c][i] != 0.0}
            if len(live) < 3:
                hot_at.append(None)
                continue
            top = max(live, key=lambda c: live[c])  # type: ignore[arg-type, return-value]
            med = statistics.median(v for c, v in live.items() if c != top)
            hot = (live[top] >= ECMP_MIN_UTIL * topo.mbps(top)  # type: ignore[operator]
                   and live[top] > ECMP_RATIO * max(med, 1e-3))  # type: ignore[operator]
            hot_at.append(top if hot else None)
        last = hot_at[-1] if hot_at else None
        n, since = _run_start(times, [h is not None and h == last for h in hot_at])
        if last is not None and n >= ECMP_POLLS:
            out.append(Finding("ecmp-imbalance", last, "warning",
                               f"ECMP imbalance at {leaf}: {last} carries "
                               f"{series[last][-1]:.1f} Mb/s, siblings' median far lower",
                               {c: _rounded(series[c][-3:]) for c in comps},
                               since))  # type: ignore[arg-type]
    return out


def detect_hot_receiver(hist: History, topo: Topo) -> list[Finding]:
    """Hot receiver / incast: the queue towards a NIC holds >= INCAST_BACKLOG_S of its rate
    while the NIC receives >= INCAST_RATE_RATIO of its rate, for INCAST_POLLS polls.

    Many senders converge on one NIC: its last link is full and queueing, while the
    fabric before it is not (that is the difference from a degraded link).
    """
    times = list(hist.times)
    out = []
    for host, comp in topo.nic_link.items():
        rate = topo.mbps(comp)
        back = hist.values(comp, "backlog_ba")
        mbps = hist.values(comp, "mbps_ba")
        ok = [b is not None and m is not None and b >= INCAST_BACKLOG_S * rate * 1e6 / 8
              and m >= INCAST_RATE_RATIO * rate for b, m in zip(back, mbps, strict=True)]
        n, since = _run_start(times, ok)
        if n >= INCAST_POLLS:
            out.append(Finding("hot-receiver", host, "warning",
                               f"hot receiver {host}: {mbps[-1]:.1f} of {rate:g} Mb/s with "
                               f"{back[-1] / 1e3:.0f} kB queued towards it",
                               {"mbps_to_host": _rounded(mbps[-n - 2:]),
                                "backlog_to_host": _rounded(back[-n - 2:], 0)},
                               since))  # type: ignore[arg-type]
    return out


def detect_controller(hist: History, topo: Topo) -> list[Finding]:
    """Controller unreachable: its REST API did not answer CONTROLLER_POLLS polls in a row
    (one miss can be a busy machine; two is a dead or hung controller)."""
    vals = hist.values(CONTROLLER, "up")
    n, since = _run_start(list(hist.times), [v == 0.0 for v in vals])
    if n >= CONTROLLER_POLLS:
        return [Finding("controller-down", CONTROLLER, "critical",
                        f"controller not answering for {n} polls",
                        {"up": _rounded(vals[-n - 2:])}, since)]  # type: ignore[arg-type]
    return []


def job_rate(hist: History, hosts: set[str]) -> list[float | None]:
    """The job's received rate per poll: sum of its hosts' NIC ``rx_mbps``."""
    cols = [hist.values(h, "rx_mbps") for h in sorted(hosts)]
    out: list[float | None] = []
    for i in range(len(hist.times)):
        vals = [c[i] for c in cols if c[i] is not None]
        out.append(sum(vals) if vals else None)
    return out


def detect_job_slow(hist: History, topo: Topo, baseline: float | None) -> list[Finding]:
    """Job slow: the job's received rate (sum of its NICs) < JOB_RATIO x baseline for
    JOB_POLLS polls. The suspected component is ``job``: this says *that* it suffers;
    the other detectors and the agent say *where*.
    """
    if baseline is None or baseline < JOB_MIN_MBPS:
        return []
    rate = job_rate(hist, topo.hosts)
    n, since = _run_start(list(hist.times),
                          [r is not None and r < JOB_RATIO * baseline for r in rate])
    if n >= JOB_POLLS:
        return [Finding("job-slow", "job", "warning",
                        f"job receives {rate[-1]:.1f} Mb/s, {100 * rate[-1] / baseline:.0f}% of "
                        f"its baseline {baseline:.1f} Mb/s",
                        {"job_mbps": _rounded(rate[-n - 2:]), "baseline_mbps":
                         round(baseline, 2)}, since)]  # type: ignore[arg-type]
    return []


DETECTORS: dict[str, Callable[[History, Topo], list[Finding]]] = {
    "link-down": detect_link_down, "flapping": detect_flapping, "degraded": detect_degraded,
    "loss": detect_loss, "ecmp-imbalance": detect_ecmp_imbalance,
    "hot-receiver": detect_hot_receiver, "controller-down": detect_controller,
}


class Engine:
    """Runs every detector after each poll; keeps the alert list (dedup, first seen, clear).

    ``job_hosts`` restricts the job-slow detector to a job's hosts (default: every host);
    ``baseline_mbps`` fixes the job's baseline (else learned from the first
    BASELINE_POLLS polls with traffic). ``on_alert(alert, event)`` is called with event
    "open" or "clear" (``ops watch`` prints them; the store saves them).
    """

    def __init__(self, plan: WiringPlan, *, job_hosts: set[str] | None = None,
                 baseline_mbps: float | None = None,
                 on_alert: Callable[[Alert, str], None] | None = None) -> None:
        self.topo = Topo.from_plan(plan)
        self.job_topo = Topo(self.topo.links, set(job_hosts) if job_hosts else self.topo.hosts,
                             self.topo.switch_links, self.topo.uplinks, self.topo.nic_link)
        self.baseline = baseline_mbps
        self._learn: list[float] = []
        self.on_alert = on_alert
        self.active: dict[tuple[str, str], Alert] = {}
        self.closed: list[Alert] = []

    def _update_baseline(self, hist: History) -> None:
        if self.baseline is not None or self.active:
            return
        r = job_rate(hist, self.job_topo.hosts)[-1] if len(hist) else None
        if r is not None and r >= JOB_MIN_MBPS:
            self._learn.append(r)
        if len(self._learn) >= BASELINE_POLLS:
            self.baseline = statistics.median(self._learn)

    def findings(self, hist: History) -> list[Finding]:
        out = []
        for fn in DETECTORS.values():
            out.extend(fn(hist, self.topo))
        out.extend(detect_job_slow(hist, self.job_topo, self.baseline))
        return out

    def step(self, hist: History) -> list[Alert]:
        """Evaluate after a poll; return alerts opened by this poll."""
        now = hist.now
        found = {(f.detector, f.component): f for f in self.findings(hist)}
        opened = []
        for key, f in found.items():
            a = self.active.get(key)
            if a is None:
                a = Alert(f.detector, f.component, f.severity, f.summary, f.evidence,
                          first_seen=f.since, last_seen=now, opened=now)
                self.active[key] = a
                opened.append(a)
                if self.on_alert:
                    self.on_alert(a, "open")
            else:
                a.summary, a.evidence, a.severity, a.last_seen, a.absent = (
                    f.summary, f.evidence, f.severity, now, 0)
        for key in [k for k in self.active if k not in found]:
            a = self.active[key]
            a.absent += 1
            if a.absent >= CLEAR_POLLS:
                a.cleared = now
                del self.active[key]
                self.closed.append(a)
                if self.on_alert:
                    self.on_alert(a, "clear")
        self._update_baseline(hist)
        return opened

    def all_alerts(self) -> list[Alert]:
        return sorted([*self.closed, *self.active.values()], key=lambda a: a.first_seen)
