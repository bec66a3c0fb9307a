"""Detectors: time series in, alerts out. Pure: no sockets, no clock, no Mininet.

Each detector is a module here, ``ops/detectors/<name>.py`` (``DetectorModule``), whose
``detect(hist, topo)`` looks at the recent history (``ops.telemetry.History``) and says
which conditions hold *now*; its rule and thresholds are in its docstring and module
constants, so a reader can check both against ``docs/operations.md``, and its ``ALERTS``
say what each alert it raises means to an operator (``AlertKind``: how much it says about
*where* the fault is, the advice that goes with it, and the evidence it gives of *what*
is wrong, from which ``ops-eval`` derives the fault kinds it points to; the diagnosis
agent and ``ops-eval`` read them).
A new detector is a new file (its name is the module's, ``_`` written ``-``): ``Engine``,
the agent and ``ops-eval`` take it with no other change. ``Engine`` runs them all after
every poll and turns findings into ``Alert`` s: one alert per (detector, component) while
the condition lasts (deduplicated), with the time the condition was first seen, and
cleared once the condition has been absent for ``CLEAR_POLLS`` polls.

Thresholds leave margin over clean runs (measured numbers in ``docs/operations.md``): on
a shared machine rates jitter between polls, so no rule fires on one sample of a rate,
only on a queue that holds, a count, or several polls in a row.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ops.telemetry import History
from testbed.faultkinds import TARGETS, shown_by
from vocab.evidence import evidence
from vocab.plan import WiringPlan, link_components
from vocab.plugins import Plugin, Plugins

ALERT_SEVERITIES = ("info", "warning", "critical")
#: an alert is cleared after its condition has been absent for this many polls.
CLEAR_POLLS = 2
#: the job's baseline: the median of its first BASELINE_POLLS polls with traffic (or a
#: baseline run's) ...
BASELINE_POLLS = 10
#: ... counting only polls where it receives at least this many Mb/s (below: idle).
JOB_MIN_MBPS = 1.0


@dataclass
class Topo:
    """What detectors need from the wiring plan: rates, ends, which uplinks are siblings."""

    links: dict[str, Any]  # component -> vocab.plan.Link
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


@dataclass(frozen=True)
class AlertKind:
    """What one kind of alert means to whoever acts on it, declared by its detector.

    ``weight`` is how much the alert says about *where* the fault is (the agent ranks
    suspects by it, 0-100: a dead switch says it all, an uneven spread little); None
    says *that* the job suffers, not where (the agent notes it, ``ops-eval`` times the
    other alerts' lead against it). ``advice`` is the next action, with ``{component}``
    and ``{summary}`` filled in from the alert.

    ``evidence`` says *what* is wrong, in the words fault kinds use too
    (``vocab.evidence``: loss, errors, down, slow, misroute), and ``parts`` which parts of
    the fabric a fault behind it may sit on (fault kinds' ``TARGET``: a NIC dropping packets
    could be its own loss or its cable's, not a switch rule's). The alert is evidence of
    every kind that produces one of its words and is aimed at one of its parts
    (``fault_kinds``, ``testbed.faultkinds.shown_by``): no detector names a kind, and a new
    kind is classified by the alerts already here. None for an alert that matches no fault
    (a symptom, ECMP hash polarization). ``ops-eval`` scores a source's kind
    classification by it (``ops.evaluate``: right when the fault's kind is one of these),
    so a word or a part the alert cannot back earns credit it did not deserve.
    """

    weight: float | None
    advice: str
    evidence: tuple[str, ...] = ()
    parts: tuple[str, ...] = TARGETS

    def __post_init__(self) -> None:
        evidence(self.evidence, "alert")
        if not set(self.parts) <= set(TARGETS):
            raise ValueError(f"alert parts must be some of {', '.join(TARGETS)} "
                             f"(got {self.parts!r})")

    @property
    def fault_kinds(self) -> tuple[str, ...]:
        """The fault kinds this alert is evidence of, in their listing order."""
        return shown_by(self.evidence, self.parts)

    @property
    def symptom(self) -> bool:
        """True for an alert that names no component (the job suffers)."""
        return self.weight is None

    def action(self, component: str, summary: str = "") -> str:
        return self.advice.format(component=component, summary=summary)


class DetectorModule(Protocol):
    """What a detector module declares and implements; ``Detector`` reads it."""

    ALERTS: Mapping[str, AlertKind]
    """Every alert it raises, by the name its findings carry (its own name, from
    ``vocab.plugins.plugin_name(__name__)``, so a copy raises its own; a detector may raise
    others too, as link-down raises switch-down)."""
    BASELINE: bool = False
    """True: ``detect`` compares the job with itself and takes a third argument, the job's
    baseline rate (``Engine`` learns it), and ``topo`` holds only the job's hosts."""

    def detect(self, hist: History, topo: Topo) -> list[Finding]:
        """Which conditions hold at the latest poll of ``hist``, one finding each."""


@dataclass(frozen=True)
class Detector(Plugin):
    """A detector module read against ``DetectorModule``."""

    CONTRACT = DetectorModule

    @property
    def alerts(self) -> dict[str, AlertKind]:
        return dict(self.declared("ALERTS"))

    @property
    def baseline(self) -> bool:
        return bool(self.declared("BASELINE"))

    def detect(self, hist: History, topo: Topo, baseline: float | None = None
               ) -> list[Finding]:
        """The module's findings; ValueError for one that names an alert it does not
        declare (its advice would be missing)."""
        found = self.module.detect(hist, topo, baseline) if self.baseline else \
            self.module.detect(hist, topo)
        declared = self.alerts
        for f in found:
            if f.detector not in declared:
                raise ValueError(f"detector {self.name} raised {f.detector!r}, which its "
                                 f"ALERTS do not declare ({', '.join(declared)})")
        return found


#: Every detector, in the order they run (and alerts of one poll are raised in): each
#: module's ``ORDER``, then the rest by name.
DETECTORS: Plugins[Detector] = Plugins("detector", __name__, Detector)


def alert_kind(name: str) -> AlertKind | None:
    """The declaration of alert ``name`` by whichever detector raises it (None: no
    detector here declares it, e.g. an alert kept by an older run)."""
    for det in DETECTORS.all().values():
        kind = det.alerts.get(name)
        if kind is not None:
            return kind
    return None


# --- what detectors share --------------------------------------------------------------------
def run_start(times: list[float], ok: list[bool]) -> tuple[int, float | None]:
    """Length of the run of True at the end of ``ok`` and the time it began."""
    n = 0
    for flag in reversed(ok):
        if not flag:
            break
        n += 1
    return n, (times[-n] if n else None)


def rounded(values: list[float | None], digits: int = 2) -> list[float | None]:
    """Values rounded for an alert's evidence (None stays None)."""
    return [None if v is None else round(v, digits) for v in values]


def job_rate(hist: History, hosts: set[str]) -> list[float | None]:
    """The job's received rate per poll: sum of its hosts' NIC ``rx_mbps``."""
    cols = [hist.values(h, "rx_mbps") for h in sorted(hosts)]
    out: list[float | None] = []
    for i in range(len(hist.times)):
        vals = [c[i] for c in cols if c[i] is not None]
        out.append(sum(vals) if vals else None)
    return out


class AlertBook:
    """Findings poll after poll -> alerts: one per (detector, component) while its condition
    lasts (deduplicated), with the time the condition was first seen, cleared once absent
    for ``CLEAR_POLLS`` polls. ``findings(hist)`` says what holds at the latest poll (the
    ``Engine``: every detector; ``ops.baselines``: a baseline's rules), so every alert
    source opens and clears alerts the same way and scores the same.
    ``on_alert(alert, event)`` is called with event "open" or "clear".
    """

    def __init__(self, on_alert: Callable[[Alert, str], None] | None = None) -> None:
        self.on_alert = on_alert
        self.active: dict[tuple[str, str], Alert] = {}
        self.closed: list[Alert] = []

    def findings(self, hist: History) -> list[Finding]:
        raise NotImplementedError

    def step(self, hist: History) -> list[Alert]:
        """Evaluate after a poll; return alerts opened by this poll."""
        return self.update(self.findings(hist), hist.now)

    def update(self, findings: list[Finding], now: float) -> list[Alert]:
        """Open, refresh and clear alerts from one poll's findings; return the opened."""
        found = {(f.detector, f.component): f for f in findings}
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
        return opened

    def all_alerts(self) -> list[Alert]:
        return sorted([*self.closed, *self.active.values()], key=lambda a: a.first_seen)


class Engine(AlertBook):
    """Runs every detector after each poll; keeps the alert list (``AlertBook``).

    ``job_hosts`` restricts the job-slow detector to a job's hosts (default: every host);
    ``baseline_mbps`` fixes the job's baseline (else learned from the first
    BASELINE_POLLS polls with traffic). ``on_alert(alert, event)`` is called with event
    "open" or "clear" (``ops watch`` prints them; the store saves them).
    """

    def __init__(self, plan: WiringPlan, *, job_hosts: set[str] | None = None,
                 baseline_mbps: float | None = None,
                 on_alert: Callable[[Alert, str], None] | None = None) -> None:
        super().__init__(on_alert)
        self.topo = Topo.from_plan(plan)
        self.job_topo = Topo(self.topo.links, set(job_hosts) if job_hosts else self.topo.hosts,
                             self.topo.switch_links, self.topo.uplinks, self.topo.nic_link)
        self.baseline = baseline_mbps
        self._learn: list[float] = []

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
        for det in DETECTORS.all().values():  # the ones that compare with a baseline: job hosts
            out.extend(det.detect(hist, self.job_topo, self.baseline) if det.baseline
                       else det.detect(hist, self.topo))
        return out

    def step(self, hist: History) -> list[Alert]:
        """Evaluate after a poll; return alerts opened by this poll."""
        opened = super().step(hist)
        self._update_baseline(hist)
        return opened
