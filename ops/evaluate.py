"""Scored evaluation of the operations layer: inject faults during traffic, score the alerts.

Two parts:

* ``score(...)`` is pure: ground-truth faults (kind, component, start, end), the alerts
  raised (with the poll time each was raised) by any alert source (the lab's detectors,
  or a baseline of ``ops.baselines``) and the agent's diagnoses (ranked components, with
  time; None for a source without an agent) in; the scores out. The definitions:

  - a fault's **window** runs from one interval before its injection (a poll's time is
    taken when it starts, so the poll during which a fault lands sees it) to ``grace_s``
    after its undo (default ``GRACE_POLLS`` intervals + ``GRACE_S``: a link back up, a
    restarted controller's counters settle, and an alert a poll late still belongs to it);
  - a fault is **detected** (a true positive of detection) when at least one alert, on
    any component, is raised inside its window; **recall** = detected / faults (the
    ``detection_rate``);
  - a **false alarm** (false positive) is an alert raised outside every fault's window;
    **false alarms per hour** = false alarms x 3600 / the phase's length (the fault-free
    phase is scored the same way: every alert there is false);
  - **precision** = detected / (detected + false alarms): each fault counts once however
    many alerts it raised (alerts on wrong components inside a window are not false
    alarms; localization scores them), each false alarm once; **F1** = 2PR / (P + R);
  - **time to detect**: from injection to the first alert raised in the window, in
    seconds and in polling intervals (``ttd_s`` / ``ttd_polls``: p50 and p95, linear
    interpolation between the sorted detected faults; goal: within 3 polls);
  - **warning lead time**: how long before the job visibly suffered (the job-slow
    detector's first bad sample) the first other alert came; None when the job never
    suffered (e.g. a lane cut that ECMP failover absorbed). The moment the job suffered
    is the fault's, not the source's: a source without a job detector (a baseline) is
    scored against the agent's (``score(..., suffered=...)``);
  - **localization top-1 / top-3** (a true positive of localization: the right
    component): the answer asked ``ask_delay_s`` after the detection (an operator reading
    the alert): is the ground-truth component first / among the first three? The agent's
    answer is its ranking; a source without an agent answers with the components of its
    alerts raised in the window up to that moment, in the order raised. Names compare with
    ``ops.telemetry.canonical`` (a NIC's link is the NIC);
  - **kind classification** (did it say *what* is wrong): at that same moment, the guess
    is the fault kinds declared by the alert the top answer rests on: the agent's top
    suspect's detector (a diagnosis recorded without one: the first alert in the window
    on its top component), a baseline's first alert in the window. A detector's alert
    declares them (``ops.detectors.AlertKind.fault_kinds``), a baseline's rule too
    (``ops.baselines.FAULT_KINDS``): every kind the alert cannot tell apart (a NIC's drops:
    ``nic-loss/gray-loss/corruption``), so a guess is a set, written joined by ``/``, and
    ``none`` when the answer rests on no alert naming a kind (a missed fault, a counter
    anomaly, a symptom, hash polarization). **kind_correct**: the fault's kind is in the
    guess, whether or not the component is right (localization scores that). **kind
    accuracy** = kind_correct / faults, over all faults as top-1 is (a missed fault is
    guessed ``none``, wrong); the **confusion** matrix counts {true kind: {guess: faults}};
  - **faults at the same time** (``concurrent``): each is scored as if the others were
    known: alerts on another live fault's component neither detect it nor are false
    alarms, and that component is skipped in its ranking;
  - **per kind** the same, over that kind's faults; a false alarm belongs to no fault, so
    precision, F1 and false alarms per hour are the run's only (None per kind).

  ``summarize(clean, faults)`` puts both phases' scores in the shape ``summary.json``
  carries for the agent and each baseline (precision over both phases' false alarms).

* ``ops.shell.experiment.run_ops_eval(...)`` does the experiment on a real fabric: steady
  probe streams between NICs of different leaves, the collector and detectors running, a
  fault-free phase, then a seeded schedule of faults of every kind
  (``testbed.shell.faults``) of the same length, the agent asked at every poll with an open
  alert. Goals: >= 95% detection, 0 false alarms in the fault-free phase, top-1 >= 90%,
  detection within 3 intervals.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ops.baselines import FAULT_KINDS
from ops.detectors import alert_kind
from ops.telemetry import canonical
from vocab.plan import WiringPlan

GOALS = {"detection_rate": 0.95, "false_alarms_clean": 0, "top1": 0.90, "detect_polls": 3.0}
#: a fault's window ends GRACE_POLLS intervals + GRACE_S seconds after its undo
GRACE_POLLS, GRACE_S = 3, 5.0
#: the kind guessed when the answer rests on no alert that names a fault kind
NO_GUESS = "none"


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
    localize_s: float | None = None  # injection to the first answer naming it first
    first_alert: str | None = None
    lead_s: float | None = None
    suffered_at: float | None = None  # when the job first visibly suffered in the window
    ranked: list[str] = field(default_factory=list)
    top1: bool = False
    top3: bool = False
    kind_alert: str | None = None  # the alert the kind guess rests on
    kind_guess: str = NO_GUESS
    kind_correct: bool = False

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


def fault_window(f: GroundTruth, interval: float, grace_s: float | None = None
                 ) -> tuple[float, float]:
    """The span in which an alert is the fault's: from one polling interval before its
    injection (a poll's time is taken when it starts: a fault injected during that poll is
    seen by it) to its undo plus a grace (default GRACE_POLLS intervals + GRACE_S)."""
    grace = GRACE_POLLS * interval + GRACE_S if grace_s is None else grace_s
    return f.start - interval, f.end + grace


def live_faults(events: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The faults injected and not yet undone at ``now``, oldest first, as the live view
    shows them beside the alerts: ``{kind, component, since}`` (``since``: wall clock)."""
    return [{"kind": g.kind, "component": g.component, "since": round(g.start, 3)}
            for g in ground_truth(events, float("inf")) if g.start <= now < g.end]


def fault_kinds(alert: str) -> tuple[str, ...]:
    """The fault kinds alert ``alert`` is evidence of: its detector's declaration, else a
    baseline rule's (none for an alert neither declares, e.g. the agent's ``counters``)."""
    kind = alert_kind(alert)
    return kind.fault_kinds if kind is not None else FAULT_KINDS.get(alert, ())


def kind_label(kinds: Sequence[str]) -> str:
    """A kind guess as the confusion matrix's column names it."""
    return "/".join(kinds) or NO_GUESS


def score(faults: list[GroundTruth], alerts: list[dict[str, Any]],
          diagnoses: Sequence[tuple[Any, ...]] | None, *, run_s: float, interval: float,
          plan: WiringPlan | None = None, grace_s: float | None = None,
          ask_delay_s: float | None = None,
          suffered: Sequence[float | None] | None = None) -> dict[str, Any]:
    """Score one run (see the module docstring); pure. ``diagnoses``: the agent's answers,
    ``(time, ranked components)`` or ``(time, ranked components, top suspect's detector)``;
    None: the source has no agent, its alerts' components are its answer. ``suffered``:
    per fault, when the job visibly suffered (another source's ``suffered_at``), for a
    source that cannot see it itself; default: this source's own symptom alerts."""
    delay = 2 * interval if ask_delay_s is None else ask_delay_s
    raised = sorted((a for a in alerts if a.get("opened") is not None),
                    key=lambda a: a["opened"])
    diag = sorted(((d[0], list(d[1]), d[2] if len(d) > 2 else None) for d in diagnoses or []),
                  key=lambda d: d[0])
    rows: list[FaultScore] = []
    attributed: set[int] = set()
    spans = [fault_window(f, interval, grace_s) for f in faults]
    for idx, f in enumerate(faults):
        lo, hi = spans[idx]
        # faults live at the same time: each is scored as if the others were known, so
        # their components' alerts neither detect it nor stand first in its ranking
        others = {canonical(g.component, plan) for g, (glo, ghi) in zip(faults, spans,
                                                                          strict=True)
                  if g is not f and glo <= hi and lo <= ghi}
        window = [(i, a) for i, a in enumerate(raised)
                  if lo <= a["opened"] <= hi and canonical(a["component"], plan) not in others]
        attributed.update(i for i, _ in window)
        signals = [a for _, a in window if not _symptom(a)]
        fs = FaultScore(f.kind, f.component, f.start, detected=bool(window))
        if suffered is not None:
            fs.suffered_at = suffered[idx]
        else:
            fs.suffered_at = min((a["first_seen"] for _, a in window if _symptom(a)),
                                 default=None)
        if signals and fs.suffered_at is not None:
            fs.lead_s = round(fs.suffered_at - signals[0]["opened"], 3)
        if window:
            first = window[0][1]
            fs.detect_s = round(first["opened"] - f.start, 3)
            fs.first_alert = f"{first['detector']}:{first['component']}"
            ask = first["opened"] + delay
            so_far = [a for _, a in window if a["opened"] <= ask + 1e-6]
            said: str | None
            if diagnoses is None:  # no agent: its alerts so far, in the order raised
                answer = list(dict.fromkeys(canonical(a["component"], plan) for a in so_far))
                said = first["detector"]
            else:
                answer, said = next(((r, d) for t, r, d in diag
                                     if ask - 1e-6 <= t <= hi), (None, None))
                if answer is None:  # the fault ended before the operator asked: last answer
                    answer, said = next(((r, d) for t, r, d in reversed(diag)
                                         if first["opened"] <= t <= hi), ([], None))
                if said is None and answer:  # not recorded: the alert that named its top
                    said = next((a["detector"] for a in so_far if canonical(
                        a["component"], plan) == canonical(answer[0], plan)), None)
            fs.ranked = answer[:5]
            want = canonical(f.component, plan)
            names = _ranked(answer, others, plan)
            fs.localize_s = _localized(f, want, others, window, diag if diagnoses is not None
                                       else None, (lo, hi), plan)
            fs.top1 = bool(names) and names[0] == want
            fs.top3 = want in names[:3]
            kinds = fault_kinds(said) if said else ()
            fs.kind_alert, fs.kind_guess = said, kind_label(kinds)
            fs.kind_correct = f.kind in kinds
        rows.append(fs)
    false = [a for i, a in enumerate(raised) if i not in attributed]
    located = [r.localize_s for r in rows if r.localize_s is not None]
    n = len(rows)
    detected = [r for r in rows if r.detected]
    times = [r.detect_s for r in detected if r.detect_s is not None]
    leads = [r.lead_s for r in rows if r.lead_s is not None]
    precision = _ratio(len(detected), len(detected) + len(false))
    recall = _ratio(len(detected), n)
    by_kind: dict[str, dict[str, Any]] = {}
    for r in rows:
        k = by_kind.setdefault(r.kind, {"faults": 0, "detected": 0, "top1": 0, "top3": 0,
                                        "kind_correct": 0, "detect_s": []})
        k["faults"] += 1
        k["detected"] += r.detected
        k["top1"] += r.top1
        k["top3"] += r.top3
        k["kind_correct"] += r.kind_correct
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
        "kind_accuracy": _ratio(sum(r.kind_correct for r in rows), n),
        "confusion": confusion(rows),
        "by_kind": by_kind,
        "per_fault": [r.to_dict() for r in rows],
        "precision": precision,
        "recall": recall,
        "f1": f1(precision, recall),
        "ttd_s": percentiles(times),
        "ttd_polls": percentiles([t / interval for t in times]),
        "ttl_s": percentiles(located),
        "ttl_polls": percentiles([t / interval for t in located]),
        "per_kind": {k: _kind_scores([r for r in rows if r.kind == k], interval)
                     for k in sorted({r.kind for r in rows})},
    }


def summarize(clean: dict[str, Any], faults: dict[str, Any]) -> dict[str, Any]:
    """One alert source's scores as ``summary.json`` carries them, from ``score`` of the
    fault-free phase (``clean``) and of the fault phase: recall, localization, time to
    detect and kind classification (accuracy, confusion matrix) from the faults; false
    alarms per hour from the fault-free phase (same length and traffic); precision
    counting both phases' false alarms."""
    fa = clean["false_alarms"] + faults["false_alarms"]
    precision = _ratio(faults["detected"], faults["detected"] + fa)
    return {"precision": precision, "recall": faults["recall"],
            "f1": f1(precision, faults["recall"]), "top1": faults["top1"],
            "top3": faults["top3"], "kind_accuracy": faults["kind_accuracy"],
            "confusion": faults["confusion"],
            "false_alarms_per_hour": clean["false_alarms_per_hour"],
            "false_alarms_clean": clean["false_alarms"],
            "false_alarms_fault_phase": faults["false_alarms"],
            "ttd_s": faults["ttd_s"], "ttd_polls": faults["ttd_polls"],
            "ttl_s": faults["ttl_s"], "ttl_polls": faults["ttl_polls"],
            "lead_s_median": faults["lead_s_median"], "lead_n": faults["lead_n"],
            "faults": faults["faults"], "detected": faults["detected"],
            "per_kind": faults["per_kind"]}


def confusion(rows: Sequence[FaultScore]) -> dict[str, dict[str, int]]:
    """{true kind: {kind guessed (``kind_label``): faults}}, both sorted by name: where a
    source's kind guesses go, right or wrong, and how often it guessed nothing."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        row = out.setdefault(r.kind, {})
        row[r.kind_guess] = row.get(r.kind_guess, 0) + 1
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def percentiles(values: list[float]) -> dict[str, float | None]:
    """``{"p50", "p95"}`` of ``values`` (linear between order statistics; None if empty)."""
    return {"p50": _quantile(values, 0.5), "p95": _quantile(values, 0.95)}


def f1(precision: float | None, recall: float | None) -> float | None:
    if precision is None or recall is None:
        return None
    return round(2 * precision * recall / (precision + recall), 4) if precision + recall \
        else 0.0


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return round(v[lo] + (v[hi] - v[lo]) * (pos - lo), 3)


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def _kind_scores(rows: list[FaultScore], interval: float) -> dict[str, Any]:
    """One kind's scores, the keys of ``summarize`` (run-wide ones None: see docstring)."""
    n = len(rows)
    times = [r.detect_s for r in rows if r.detect_s is not None]
    located = [r.localize_s for r in rows if r.localize_s is not None]
    return {"faults": n, "detected": sum(r.detected for r in rows),
            "recall": _ratio(sum(r.detected for r in rows), n),
            "top1": _ratio(sum(r.top1 for r in rows), n),
            "top3": _ratio(sum(r.top3 for r in rows), n),
            "kind_accuracy": _ratio(sum(r.kind_correct for r in rows), n),
            "ttd_s": percentiles(times), "ttd_polls": percentiles([t / interval for t in times]),
            "ttl_s": percentiles(located),
            "ttl_polls": percentiles([t / interval for t in located]),
            "precision": None, "f1": None, "false_alarms_per_hour": None}


def _ranked(answer: Sequence[str], others: set[str], plan: WiringPlan | None) -> list[str]:
    """An answer's components by their canonical names, the other live faults' skipped."""
    return [n for n in (canonical(c, plan) for c in answer) if n not in others]


def _localized(f: GroundTruth, want: str, others: set[str],
               window: list[tuple[int, dict[str, Any]]],
               diag: list[tuple[float, list[str], str | None]] | None,
               span: tuple[float, float], plan: WiringPlan | None) -> float | None:
    """Seconds from the injection to the first answer in the fault's window that names its
    component first (the agent's ranking, the other live faults' components skipped), or
    for a source without an agent its first alert on that component; None: never."""
    if diag is None:
        return next((round(a["opened"] - f.start, 3) for _, a in window
                     if canonical(a["component"], plan) == want), None)
    for t, ranked, _ in diag:
        if span[0] <= t <= span[1]:
            names = _ranked(ranked, others, plan)
            if names and names[0] == want:
                return round(t - f.start, 3)
    return None


def _symptom(alert: dict[str, Any]) -> bool:
    """An alert that says the job suffers, not where (its detector declares it so)."""
    kind = alert_kind(alert["detector"])
    return kind is not None and kind.symptom
