"""Scored evaluation of the operations layer: inject faults during traffic, score the alerts.

Two parts:

* ``score(...)`` is pure: ground-truth faults (kind, component, start, end), the alerts
  raised (with the poll time each was raised) and the agent's diagnoses (ranked
  components, with time) in; the scores out:

  - **detection rate**: faults with at least one alert raised between the fault's start
    and ``grace_s`` after its end;
  - **false alarms per hour**: alerts raised outside every fault's window, per hour of
    run (the fault-free run is scored the same way: every alert there is false);
  - **time to detect**: from injection to the first alert raised, in seconds and in
    polling intervals (goal: within 3);
  - **warning lead time**: how long before the job visibly suffered (the job-slow
    detector's first bad sample) the first other alert came; None when the job never
    suffered (e.g. a lane cut that ECMP failover absorbed);
  - **localization top-1 / top-3**: the agent's answer asked ``ask_delay_s`` after the
    detection (an operator reading the alert): is the ground-truth component first /
    among the first three? Names compare with ``ops.telemetry.canonical``.

* ``ops.shell.experiment.run_ops_eval(...)`` does the experiment on a real fabric: steady
  probe streams between NICs of different leaves, the collector and detectors running, a
  fault-free phase, then a seeded schedule of faults of every kind
  (``testbed.shell.faults``) of the same length, the agent asked at every poll with an open
  alert. Goals: >= 95% detection, 0 false alarms in the fault-free phase, top-1 >= 90%,
  detection within 3 intervals.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ops.detectors import alert_kind
from ops.telemetry import canonical
from vocab.plan import WiringPlan

GOALS = {"detection_rate": 0.95, "false_alarms_clean": 0, "top1": 0.90, "detect_polls": 3.0}


@dataclass
class GroundTruth:
    """One injected fault as the injector's event log recorded it (wall-clock times)."""

    kind: str
    component: str
    start: float
    end: float


@dataclass
class FaultScore:
    kind: str
    component: str
    start: float
    detected: bool
    detect_s: float | None = None
    first_alert: str | None = None
    lead_s: float | None = None
    ranked: list[str] = field(default_factory=list)
    top1: bool = False
    top3: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def ground_truth(events: list[dict[str, Any]], end_of_run: float) -> list[GroundTruth]:
    """Faults from an injector event log: ``inject`` opens, the next ``undo`` of the same
    (kind, component) closes (flap-down/flap-up in between are part of the fault)."""
    open_: dict[Any, tuple[str, str, float]] = {}
    out = []
    for e in sorted(events, key=lambda e: e["time"]):
        key = e.get("fault_id") or (e["kind"], e["component"])
        if e["action"] == "inject":
            open_[key] = (e["kind"], e["component"], e["time"])
        elif e["action"] == "undo" and key in open_:
            kind, comp, start = open_.pop(key)
            out.append(GroundTruth(kind, comp, start, e["time"]))
    out.extend(GroundTruth(k, c, t, end_of_run) for k, c, t in open_.values())
    return sorted(out, key=lambda g: g.start)


def score(faults: list[GroundTruth], alerts: list[dict[str, Any]],
          diagnoses: list[tuple[float, list[str]]], *, run_s: float, interval: float,
          plan: WiringPlan | None = None, grace_s: float | None = None,
          ask_delay_s: float | None = None) -> dict[str, Any]:
    """Score one run (see the module docstring); pure."""
    grace = 3 * interval + 5.0 if grace_s is None else grace_s
    delay = 2 * interval if ask_delay_s is None else ask_delay_s
    raised = sorted((a for a in alerts if a.get("opened") is not None),
                    key=lambda a: a["opened"])
    diag = sorted(diagnoses, key=lambda d: d[0])
    rows: list[FaultScore] = []
    attributed: set[int] = set()
    for f in faults:
        # a poll's time is taken when it starts: a fault injected during that poll is seen
        # by it, so the window opens one interval early
        window = [(i, a) for i, a in enumerate(raised)
                  if f.start - interval <= a["opened"] <= f.end + grace]
        attributed.update(i for i, _ in window)
        signals = [a for _, a in window if not _symptom(a)]
        fs = FaultScore(f.kind, f.component, f.start, detected=bool(window))
        if window:
            first = window[0][1]
            fs.detect_s = round(first["opened"] - f.start, 3)
            fs.first_alert = f"{first['detector']}:{first['component']}"
            suffer = [a["first_seen"] for _, a in window if _symptom(a)]
            if suffer and signals:
                fs.lead_s = round(min(suffer) - signals[0]["opened"], 3)
            ask = first["opened"] + delay
            answer = next((r for t, r in diag if t >= ask - 1e-6 and t <= f.end + grace), None)
            if answer is None:  # the fault ended before the operator asked: last answer
                answer = next((r for t, r in reversed(diag)
                               if first["opened"] <= t <= f.end + grace), [])
            fs.ranked = answer[:5]
            want = canonical(f.component, plan)
            names = [canonical(c, plan) for c in answer]
            fs.top1 = bool(names) and names[0] == want
            fs.top3 = want in names[:3]
        rows.append(fs)
    false = [a for i, a in enumerate(raised) if i not in attributed]
    n = len(rows)
    detected = [r for r in rows if r.detected]
    times = [r.detect_s for r in detected if r.detect_s is not None]
    leads = [r.lead_s for r in rows if r.lead_s is not None]
    by_kind: dict[str, dict[str, Any]] = {}
    for r in rows:
        k = by_kind.setdefault(r.kind, {"faults": 0, "detected": 0, "top1": 0, "top3": 0,
                                        "detect_s": []})
        k["faults"] += 1
        k["detected"] += r.detected
        k["top1"] += r.top1
        k["top3"] += r.top3
        if r.detect_s is not None:
            k["detect_s"].append(r.detect_s)
    for k in by_kind.values():
        k["median_detect_s"] = round(statistics.median(k["detect_s"]), 3) if k["detect_s"] \
            else None
        del k["detect_s"]
    return {
        "faults": n,
        "detected": len(detected),
        "detection_rate": round(len(detected) / n, 4) if n else None,
        "false_alarms": len(false),
        "false_alarms_per_hour": round(len(false) * 3600 / run_s, 2) if run_s > 0 else None,
        "false_alarm_list": [f"{a['detector']}:{a['component']}@{a['opened']:.1f}"
                             for a in false],
        "detect_s_median": round(statistics.median(times), 3) if times else None,
        "detect_s_max": round(max(times), 3) if times else None,
        "detect_polls_median": round(statistics.median(times) / interval, 2) if times else None,
        "detect_polls_max": round(max(times) / interval, 2) if times else None,
        "within_3_polls": round(sum(t <= 3 * interval for t in times) / n, 4) if n else None,
        "lead_s_median": round(statistics.median(leads), 3) if leads else None,
        "lead_n": len(leads),
        "top1": round(sum(r.top1 for r in rows) / n, 4) if n else None,
        "top3": round(sum(r.top3 for r in rows) / n, 4) if n else None,
        "by_kind": by_kind,
        "per_fault": [r.to_dict() for r in rows],
    }


def _symptom(alert: dict[str, Any]) -> bool:
    """An alert that says the job suffers, not where (its detector declares it so)."""
    kind = alert_kind(alert["detector"])
    return kind is not None and kind.symptom
