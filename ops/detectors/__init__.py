"""Detectors: time series in, alerts out. Pure: no sockets, no clock, no Mininet.

Each detector is a module here, ``ops/detectors/<name>.py``, whose ``detect(hist, topo) ->
list[Finding]`` looks at the recent history (``ops.telemetry.History``) and says which
conditions hold *now*; its rule and thresholds are in its docstring and module constants,
so a reader can check both against ``docs/operations.md``. A new detector is a new file
(its name is the module's, ``_`` written ``-``); ``ops-eval`` scores it with no other change.
``Engine`` runs them all after every poll and turns findings into ``Alert`` s: one alert
per (detector, component) while the condition lasts (deduplicated), with the time the
condition was first seen, and cleared once the condition has been absent for
``CLEAR_POLLS`` polls.

Thresholds leave margin over clean runs (measured numbers in ``docs/operations.md``): on
a shared machine rates jitter between polls, so no rule fires on one sample of a rate,
only on a queue that holds, a count, or several polls in a row.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import cache
from types import ModuleType

from ops.detectors._base import SEVERITIES, Alert, Finding, Topo, _rounded, _run_start
from ops.detectors.controller_down import CONTROLLER_POLLS
from ops.detectors.controller_down import detect as detect_controller
from ops.detectors.degraded import DEGRADED_BACKLOG_S, DEGRADED_POLLS, DEGRADED_RATE_RATIO
from ops.detectors.degraded import detect as detect_degraded
from ops.detectors.ecmp_imbalance import ECMP_MIN_UTIL, ECMP_POLLS, ECMP_RATIO
from ops.detectors.ecmp_imbalance import detect as detect_ecmp_imbalance
from ops.detectors.flapping import FLAP_MIN_CHANGES, FLAP_WINDOW_S
from ops.detectors.flapping import detect as detect_flapping
from ops.detectors.hot_receiver import INCAST_BACKLOG_S, INCAST_POLLS, INCAST_RATE_RATIO
from ops.detectors.hot_receiver import detect as detect_hot_receiver
from ops.detectors.job_slow import BASELINE_POLLS, JOB_MIN_MBPS, JOB_POLLS, JOB_RATIO, job_rate
from ops.detectors.job_slow import detect as detect_job_slow
from ops.detectors.link_down import LINK_DOWN_POLLS
from ops.detectors.link_down import detect as detect_link_down
from ops.detectors.loss import LOSS_MIN_PPS, LOSS_POLLS, LOSS_RATIO, STALL_RATIO
from ops.detectors.loss import detect as detect_loss
from ops.telemetry import History
from vocab.plan import WiringPlan
from vocab.plugins import discover

#: an alert is cleared after its condition has been absent for this many polls.
CLEAR_POLLS = 2


#: the order detectors run in (and alerts of one poll are raised in): these, then the rest
_FIRST = ("link-down", "flapping", "degraded", "loss", "ecmp-imbalance", "hot-receiver",
          "controller-down", "job-slow")


@cache
def modules() -> dict[str, ModuleType]:
    """Every detector module, by name (module name with ``_`` written ``-``)."""
    return discover(__name__, __path__, _FIRST)


def _detectors() -> dict[str, Callable[[History, Topo], list[Finding]]]:
    return {n: m.detect for n, m in modules().items() if not getattr(m, "BASELINE", False)}


#: name -> detect function of every detector that needs only the history and the plan
DETECTORS: dict[str, Callable[[History, Topo], list[Finding]]] = _detectors()

__all__ = [
    "SEVERITIES", "Alert", "Finding", "Topo", "Engine", "DETECTORS", "CLEAR_POLLS", "modules",
    "job_rate", "_rounded", "_run_start",
    "detect_controller", "detect_degraded", "detect_ecmp_imbalance", "detect_flapping",
    "detect_hot_receiver", "detect_job_slow", "detect_link_down", "detect_loss",
    "CONTROLLER_POLLS", "DEGRADED_BACKLOG_S", "DEGRADED_POLLS", "DEGRADED_RATE_RATIO",
    "ECMP_MIN_UTIL", "ECMP_POLLS", "ECMP_RATIO", "FLAP_MIN_CHANGES", "FLAP_WINDOW_S",
    "INCAST_BACKLOG_S", "INCAST_POLLS", "INCAST_RATE_RATIO", "BASELINE_POLLS", "JOB_MIN_MBPS",
    "JOB_POLLS", "JOB_RATIO", "LINK_DOWN_POLLS", "LOSS_MIN_PPS", "LOSS_POLLS", "LOSS_RATIO",
    "STALL_RATIO",
]


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
        for mod in modules().values():  # the ones that compare with a baseline: job hosts
            if getattr(mod, "BASELINE", False):
                out.extend(mod.detect(hist, self.job_topo, self.baseline))
            else:
                out.extend(mod.detect(hist, self.topo))
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
