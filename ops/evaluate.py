"""Scored evaluation of the operations layer: inject faults during traffic, score the alerts.

Two parts:

* ``score(...)`` is pure: ground-truth faults (kind, component, apply start, undo), the
  alerts raised (with the poll time each was raised) by any alert source (the lab's
  detectors, or a baseline of ``ops.baselines``) and the agent's diagnoses (ranked
  components, with time; None for a source without an agent) in; the scores out. It scores
  **strictly**, as SkeletonHunter and NIKA do, so that a source alerting at random or on
  everything scores badly:

  - a fault's **window** runs from the start of its apply (stamped before the change, so
    an alert raised before it never counts) to ``grace_s`` after its undo (default
    ``GRACE_POLLS`` intervals + ``GRACE_S``: a late alert still belongs to it);
  - an alert **detects** a fault only when it is no symptom (``job-slow`` says the job
    suffers, not where: it never detects; it times the lead), it was raised inside the
    fault's window, and it names the fault's component or an immediate neighbour
    (``neighbourhood``: a lane and its two end switches; a NIC, its cable and its leaf; a
    switch and its links; a miswiring's two crossed lanes; the controller). Each alert
    detects one fault at most (``credit``: an exact name first, then a fault whose kind
    the alert is evidence of, then the earliest injected); **recall** = faults detected /
    faults;
  - **alert precision** = alerts that detected a fault / all non-symptom alerts; the
    headline **F1** = 2PR / (P + R) from it and recall;
  - a **false alarm** is a non-symptom alert raised where no fault's window runs;
    **false alarms per hour** are timed over the seconds no window covers, per phase (the
    fault-free phase, and the fault phase between its windows: the healthy slots). An
    alert inside a window that detects nothing (a wrong component) is **astray**: it
    lowers alert precision, not the hourly rate;
  - **time to detect**: from the apply's start to the first alert that detects the fault
    (p50/p95, seconds and polls); **time to localize**: to the first answer naming it
    first;
  - **localization top-1 / top-3**: the answer asked ``ask_delay_s`` (two polls) after
    the first alert that detected the fault: is the fault's component (either crossed
    lane of a miswiring) first / among the first three, the other live faults'
    components skipped? The agent's answer is its ranking; a source without an agent
    answers with the components of its non-symptom alerts in the window so far, in the
    order raised. Names compare with ``ops.telemetry.canonical`` (a NIC's link is the NIC);
  - **kind**: the fault kinds the alert the answer rests on is evidence of are the guess,
    a set (the kinds that produce the evidence the alert gives, aimed at the parts it
    points to: ``ops.detectors.AlertKind.fault_kinds``, a baseline rule's
    ``ops.baselines.SHOWS``); right when the fault's kind is in it. **kind accuracy** over all
    faults (a missed fault is guessed ``none``) and **given the right component** (over
    the faults whose top-1 was right); the **confusion** matrix counts {true: {guess: n}};
  - **pair F1** (NIKA): the (component, kind) pairs the source states while faults are
    live (the agent: its top suspect and kind at each ask; a source without an agent: each
    alert); a pair is right when it names a live fault's component and its kind; each
    fault found counts once, each wrong pair once per set of live faults;
  - **warning lead time**: how long before the job visibly suffered (the job-slow
    detector's first bad sample in the window) the first alert that detected it came.

  ``any_alert_score`` keeps the lenient scoring of earlier runs beside it (any alert in a
  window from one interval before the injection's stamp detects it, whatever it names;
  false alarms over the whole phase), reported as ``any_alert_*`` so old runs compare.
  ``summarize(clean, faults)`` puts both phases in the shape ``summary.json`` carries;
  ``score_run(result, plan)`` does all of it for every source of an ``ops_eval.json``
  (``astral-lab ops rescore RUN_DIR``).

* ``ops.shell.experiment.run_ops_eval(plan, spec)`` (``spec``: an ``EvalSpec``)
  does the experiment on a real fabric: steady
  probe streams between NICs of different leaves, the collector and detectors running, a
  fault-free phase, then a seeded schedule of faults of every kind with healthy slots
  among them (``testbed.shell.faults``), the agent asked at every poll with an open alert.
  Goals: >= 95% detection, 0 false alarms in the fault-free phase, top-1 >= 90%,
  detection within 3 intervals. ``EvalSpec`` is the campaign it runs (the schedule and its
  timing, with the ``ops-eval`` scenario's defaults), checked when built; the live objects
  (the lab, the MoE job, the telemetry file, the log, the live view) stay its keywords.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ops.baselines import SHOWS
from ops.detectors import alert_kind
from ops.telemetry import DEFAULT_INTERVAL_S, canonical
from testbed.faultkinds import SCHEDULE_SEVERITIES
from testbed.faultspec import schedule_kinds
from vocab.plan import WiringPlan, link_components

GOALS = {"detection_rate": 0.95, "false_alarms_clean": 0, "top1": 0.90, "detect_polls": 3.0}
#: a fault's window ends GRACE_POLLS intervals + GRACE_S seconds after its undo
GRACE_POLLS, GRACE_S = 3, 5.0
#: the kind guessed when the answer rests on no alert that names a fault kind
NO_GUESS = "none"
#: what the lenient scores of earlier runs are filed under in a summary
ANY_ALERT = "any_alert_"


@dataclass
class GroundTruth:
    """One injected fault as the injector's event log recorded it (wall-clock times):
    ``start`` when its apply began, ``end`` its undo, ``injected`` when the apply ended
    (the stamp earlier runs scored from; None: ``start``), ``also`` the other components
    it puts wrong (a miswiring's partner lane)."""

    kind: str
    component: str
    start: float
    end: float
    injected: float | None = None
    also: tuple[str, ...] = ()

    @property
    def stamp(self) -> float:
        """When the lenient scoring takes the fault to begin: the end of its apply."""
        return self.start if self.injected is None else self.injected


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
    """Faults from an injector event log: ``inject`` opens (from its ``apply_start`` when
    stamped, else its time), the next ``undo`` of the same fault closes (flap-down/flap-up
    in between are part of the fault); an inject's ``detail.affects`` lists the other
    components it puts wrong."""
    open_: dict[Any, GroundTruth] = {}
    out = []
    for e in sorted(events, key=lambda e: e["time"]):
        key = e.get("fault_id") or (e["kind"], e["component"])
        if e["action"] == "inject":
            also = tuple((e.get("detail") or {}).get("affects") or ())
            start = e.get("apply_start", e["time"])
            open_[key] = GroundTruth(e["kind"], e["component"], start, end_of_run,
                                     injected=e["time"] if start != e["time"] else None,
                                     also=also)
        elif e["action"] == "undo" and key in open_:
            g = open_.pop(key)
            g.end = e["time"]
            out.append(g)
    out.extend(open_.values())
    return sorted(out, key=lambda g: g.start)


def fault_window(f: GroundTruth, interval: float, grace_s: float | None = None
                 ) -> tuple[float, float]:
    """The lenient window of earlier runs: from one polling interval before the
    injection's stamp to its undo plus a grace (default GRACE_POLLS intervals + GRACE_S)."""
    grace = GRACE_POLLS * interval + GRACE_S if grace_s is None else grace_s
    return f.stamp - interval, f.end + grace


def live_faults(events: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The faults injected and not yet undone at ``now``, oldest first, as the live view
    shows them beside the alerts: ``{kind, component, since}`` (``since``: wall clock)."""
    return [{"kind": g.kind, "component": g.component, "since": round(g.stamp, 3)}
            for g in ground_truth(events, float("inf")) if g.stamp <= now < g.end]


def fault_kinds(alert: str) -> tuple[str, ...]:
    """The fault kinds alert ``alert`` is evidence of, from the evidence its detector
    declares, else a baseline rule's (none for an alert neither declares, e.g. the agent's
    ``counters``)."""
    kind = alert_kind(alert)
    if kind is not None:
        return kind.fault_kinds
    shows = SHOWS.get(alert)
    return () if shows is None else shows.fault_kinds


def kind_label(kinds: Sequence[str]) -> str:
    """A kind guess as the confusion matrix's column names it."""
    return "/".join(kinds) or NO_GUESS


def neighbourhood(f: GroundTruth, plan: WiringPlan | None) -> set[str]:
    """The components an alert may name to detect ``f``: its own (and the others it puts
    wrong, ``f.also``: a miswiring's crossed partner lane) or an immediate neighbour: a
    lane and its two end switches; a NIC (its cable is the NIC) and its leaf; a switch and
    its links; the controller and itself. Without a plan, the fault's own components."""
    own = identity(f, plan)
    if plan is None:
        return own
    out = set(own)
    links = link_components(plan)
    hosts = {h.name for h in plan.hosts}
    for comp in own:
        if "~" in comp:  # a lane (a NIC's cable is the NIC: canonical)
            a, _, b = comp.partition("#")[0].partition("~")
            out.update({a, b})
        elif comp in hosts:
            out.update(ln.b for ln in links.values() if ln.a == comp)
            out.update(ln.a for ln in links.values() if ln.b == comp)
        else:  # a switch: its links (a host's link canonical, i.e. the host)
            out.update(canonical(c, plan) for c, ln in links.items() if comp in (ln.a, ln.b))
    return out


def identity(f: GroundTruth, plan: WiringPlan | None) -> set[str]:
    """What naming ``f`` exactly means: its component, and the others it puts wrong."""
    return {canonical(c, plan) for c in (f.component, *f.also)}


def credit(faults: list[GroundTruth], alerts: list[dict[str, Any]], interval: float,
           plan: WiringPlan | None = None, grace_s: float | None = None
           ) -> list[int | None]:
    """Per alert (in the order given), the index of the fault it detects, or None.

    An alert detects a fault only when it is no symptom, it was raised inside the fault's
    window (``strict_window``: from the apply's start, so never before the injection) and
    it names the fault's component or an immediate neighbour (``neighbourhood``). Each
    alert is credited to one fault at most: among those it qualifies for, one it names
    exactly first, then one whose kind it is evidence of, then the earliest injected."""
    spans = [strict_window(f, interval, grace_s) for f in faults]
    near = [neighbourhood(f, plan) for f in faults]
    exact = [identity(f, plan) for f in faults]
    out: list[int | None] = []
    for a in alerts:
        t = a.get("opened")
        if t is None or _symptom(a):
            out.append(None)
            continue
        comp = canonical(a["component"], plan)
        kinds = fault_kinds(a["detector"])
        cands = [i for i, (lo, hi) in enumerate(spans) if lo <= t <= hi and comp in near[i]]
        out.append(min(cands, key=lambda i: (comp not in exact[i], faults[i].kind not in kinds,
                                              faults[i].start, i), default=None))
    return out


def strict_window(f: GroundTruth, interval: float, grace_s: float | None = None
                  ) -> tuple[float, float]:
    """Where an alert may detect ``f``: from the start of its apply (stamped before the
    change, so an alert raised before it is never the fault's) to its undo plus the grace
    (default ``GRACE_POLLS`` intervals + ``GRACE_S``: a late alert still belongs to it)."""
    grace = GRACE_POLLS * interval + GRACE_S if grace_s is None else grace_s
    return f.start, f.end + grace


def uncovered_s(faults: list[GroundTruth], span: tuple[float, float], interval: float,
                grace_s: float | None = None) -> float:
    """Seconds of ``span`` that no fault's window covers: where a false alarm is timed."""
    lo, hi = span
    cuts = sorted((max(lo, a), min(hi, b)) for a, b in
                  (strict_window(f, interval, grace_s) for f in faults))
    covered, end = 0.0, lo
    for a, b in cuts:
        if b <= end:
            continue
        covered += b - max(a, end)
        end = b
    return max(0.0, hi - lo - covered)


def score(faults: list[GroundTruth], alerts: list[dict[str, Any]],
          diagnoses: Sequence[tuple[Any, ...]] | None, *, span: tuple[float, float],
          interval: float, plan: WiringPlan | None = None, grace_s: float | None = None,
          ask_delay_s: float | None = None,
          suffered: Sequence[float | None] | None = None) -> dict[str, Any]:
    """Score one phase strictly (the module docstring); pure. ``span``: the phase's
    (start, end) wall-clock seconds. ``diagnoses``: the agent's answers, ``(time, ranked
    components[, top suspect's detector])``; None: the source has no agent, its own alerts
    are its answer. ``suffered``: per fault, when the job visibly suffered, for a source
    that cannot see it (default: this source's own symptom alerts in the fault's window).
    """
    delay = 2 * interval if ask_delay_s is None else ask_delay_s
    raised = sorted((a for a in alerts if a.get("opened") is not None),
                    key=lambda a: a["opened"])
    diag = sorted(((d[0], list(d[1]), d[2] if len(d) > 2 else None) for d in diagnoses or []),
                  key=lambda d: d[0])
    owner = credit(faults, raised, interval, plan, grace_s)
    spans = [strict_window(f, interval, grace_s) for f in faults]
    rows: list[FaultScore] = []
    for idx, f in enumerate(faults):
        lo, hi = spans[idx]
        want = identity(f, plan)
        others = set().union(*(identity(g, plan) for j, g in enumerate(faults)
                               if j != idx and spans[j][0] <= hi and lo <= spans[j][1])) - want
        mine = [a for a, o in zip(raised, owner, strict=True) if o == idx]
        fs = FaultScore(f.kind, f.component, f.start, detected=bool(mine))
        fs.suffered_at = suffered[idx] if suffered is not None else min(
            (a["first_seen"] for a in raised if _symptom(a) and lo <= a["opened"] <= hi),
            default=None)
        if mine and fs.suffered_at is not None:
            fs.lead_s = round(fs.suffered_at - mine[0]["opened"], 3)
        if mine:
            first = mine[0]
            fs.detect_s = round(first["opened"] - f.start, 3)
            fs.first_alert = f"{first['detector']}:{first['component']}"
            ask = first["opened"] + delay
            answer, said = _answer(raised, diag if diagnoses is not None else None,
                                   (lo, hi), first["opened"], ask, others, plan, interval / 2)
            fs.ranked = answer[:5]
            names = _ranked(answer, others, plan)
            fs.top1 = bool(names) and names[0] in want
            fs.top3 = bool(want & set(names[:3]))
            kinds = fault_kinds(said) if said else ()
            fs.kind_alert, fs.kind_guess = said, kind_label(kinds)
            fs.kind_correct = f.kind in kinds
            fs.localize_s = _localized(f.start, want, others, mine, diag
                                       if diagnoses is not None else None, (lo, hi), plan)
        rows.append(fs)
    signals = [(a, o) for a, o in zip(raised, owner, strict=True) if not _symptom(a)]
    covered = [any(lo <= a["opened"] <= hi for lo, hi in spans) for a, _ in signals]
    false = [a for (a, o), c in zip(signals, covered, strict=True) if o is None and not c]
    astray = [a for (a, o), c in zip(signals, covered, strict=True) if o is None and c]
    free_s = uncovered_s(faults, span, interval, grace_s)
    out = _totals(rows, interval)
    out.update({
        "alerts": len(signals), "credited": sum(o is not None for _, o in signals),
        "alert_precision": _ratio(sum(o is not None for _, o in signals), len(signals)),
        "false_alarms": len(false), "astray": len(astray),
        "fault_free_s": round(free_s, 3),
        "false_alarms_per_hour": round(len(false) * 3600 / free_s, 2) if free_s > 0 else None,
        "false_alarm_list": [f"{a['detector']}:{a['component']}@{a['opened']:.1f}"
                             for a in false],
        "astray_list": [f"{a['detector']}:{a['component']}@{a['opened']:.1f}" for a in astray],
        "pairs": pair_scores(faults, raised, diag if diagnoses is not None else None,
                             interval, plan, grace_s),
    })
    out["precision"] = out["alert_precision"]
    out["f1"] = f1(out["precision"], out["recall"])
    return out


def any_alert_score(faults: list[GroundTruth], alerts: list[dict[str, Any]],
                    diagnoses: Sequence[tuple[Any, ...]] | None, *, run_s: float,
                    interval: float, plan: WiringPlan | None = None,
                    grace_s: float | None = None, ask_delay_s: float | None = None,
                    suffered: Sequence[float | None] | None = None) -> dict[str, Any]:
    """Score one phase the lenient way of earlier runs (``any_alert_*``); pure. Any alert
    inside a fault's lenient window (``fault_window``) detects it, whatever it names;
    false alarms are timed over the whole phase (``run_s``). Arguments as ``score``'s."""
    delay = 2 * interval if ask_delay_s is None else ask_delay_s
    raised = sorted((a for a in alerts if a.get("opened") is not None),
                    key=lambda a: a["opened"])
    diag = sorted(((d[0], list(d[1]), d[2] if len(d) > 2 else None) for d in diagnoses or []),
                  key=lambda d: d[0])
    rows: list[FaultScore] = []
    attributed: set[int] = set()
    spans = [fault_window(f, interval, grace_s) for f in faults]  # lenient
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
        fs = FaultScore(f.kind, f.component, f.stamp, detected=bool(window))
        if suffered is not None:
            fs.suffered_at = suffered[idx]
        else:
            fs.suffered_at = min((a["first_seen"] for _, a in window if _symptom(a)),
                                 default=None)
        if signals and fs.suffered_at is not None:
            fs.lead_s = round(fs.suffered_at - signals[0]["opened"], 3)
        if window:
            first = window[0][1]
            fs.detect_s = round(first["opened"] - f.stamp, 3)
            fs.first_alert = f"{first['detector']}:{first['component']}"
            ask = first["opened"] + delay
            so_far = [a for _, a in window if a["opened"] <= ask + interval / 2]
            said: str | None
            if diagnoses is None:  # no agent: its alerts so far, in the order raised
                answer = list(dict.fromkeys(canonical(a["component"], plan) for a in so_far))
                said = first["detector"]
            else:
                answer, said = next(((r, d) for t, r, d in diag
                                     if ask - interval / 2 <= t <= hi), (None, None))
                if answer is None:  # the fault ended before the operator asked: last answer
                    answer, said = next(((r, d) for t, r, d in reversed(diag)
                                         if first["opened"] <= t <= hi), ([], None))
                if said is None and answer:  # not recorded: the alert that named its top
                    said = next((a["detector"] for a in so_far if canonical(
                        a["component"], plan) == canonical(answer[0], plan)), None)
            fs.ranked = answer[:5]
            want = canonical(f.component, plan)
            names = _ranked(answer, others, plan)
            fs.localize_s = _localized(f.stamp, {want}, others,
                                       [a for _, a in window], diag if diagnoses is not None
                                       else None, (lo, hi), plan)
            fs.top1 = bool(names) and names[0] == want
            fs.top3 = want in names[:3]
            kinds = fault_kinds(said) if said else ()
            fs.kind_alert, fs.kind_guess = said, kind_label(kinds)
            fs.kind_correct = f.kind in kinds
        rows.append(fs)
    false = [a for i, a in enumerate(raised) if i not in attributed]
    out = _totals(rows, interval)
    precision = _ratio(out["detected"], out["detected"] + len(false))
    out.update({
        "false_alarms": len(false),
        "false_alarms_per_hour": round(len(false) * 3600 / run_s, 2) if run_s > 0 else None,
        "false_alarm_list": [f"{a['detector']}:{a['component']}@{a['opened']:.1f}"
                             for a in false],
        "precision": precision, "f1": f1(precision, out["recall"])})
    return out


def _totals(rows: list[FaultScore], interval: float) -> dict[str, Any]:
    """What both scorings total the same way from their per-fault rows."""
    located = [r.localize_s for r in rows if r.localize_s is not None]
    n = len(rows)
    detected = [r for r in rows if r.detected]
    times = [r.detect_s for r in detected if r.detect_s is not None]
    leads = [r.lead_s for r in rows if r.lead_s is not None]
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
    right = [r for r in rows if r.top1]
    return {
        "faults": n,
        "detected": len(detected),
        "detection_rate": _ratio(len(detected), n),
        "recall": _ratio(len(detected), n),
        "detect_s_median": round(statistics.median(times), 3) if times else None,
        "detect_s_max": round(max(times), 3) if times else None,
        "detect_polls_median": round(statistics.median(times) / interval, 2) if times else None,
        "detect_polls_max": round(max(times) / interval, 2) if times else None,
        "within_3_polls": _ratio(sum(t <= 3 * interval for t in times), n),
        "lead_s_median": round(statistics.median(leads), 3) if leads else None,
        "lead_n": len(leads),
        "top1": _ratio(len(right), n),
        "top3": _ratio(sum(r.top3 for r in rows), n),
        "kind_accuracy": _ratio(sum(r.kind_correct for r in rows), n),
        "kind_accuracy_given_component": _ratio(sum(r.kind_correct for r in right),
                                                len(right)),
        "confusion": confusion(rows),
        "by_kind": by_kind,
        "per_fault": [r.to_dict() for r in rows],
        "ttd_s": percentiles(times),
        "ttd_polls": percentiles([t / interval for t in times]),
        "ttl_s": percentiles(located),
        "ttl_polls": percentiles([t / interval for t in located]),
        "per_kind": {k: _kind_scores([r for r in rows if r.kind == k], interval)
                     for k in sorted({r.kind for r in rows})},
    }


def pair_scores(faults: list[GroundTruth], alerts: list[dict[str, Any]],
                diag: list[tuple[float, list[str], str | None]] | None, interval: float,
                plan: WiringPlan | None = None, grace_s: float | None = None
                ) -> dict[str, Any]:
    """NIKA's F1 over (component, kind) pairs stated while faults are live (module
    docstring). ``diag`` None: the source's statements are its non-symptom alerts."""
    spans = [strict_window(f, interval, grace_s) for f in faults]
    exact = [identity(f, plan) for f in faults]
    said: list[tuple[float, str, tuple[str, ...]]] = []
    if diag is None:
        said = [(a["opened"], canonical(a["component"], plan), fault_kinds(a["detector"]))
                for a in alerts if not _symptom(a)]
    else:
        for t, ranked, det in diag:
            if not ranked:
                continue
            top = canonical(ranked[0], plan)
            if det is None:  # not recorded: the latest alert on its top suspect says it
                det = next((a["detector"] for a in reversed(alerts) if a["opened"] <= t
                            and not _symptom(a) and canonical(a["component"], plan) == top),
                           None)
            said.append((t, top, fault_kinds(det) if det else ()))
    found: set[int] = set()
    wrong: set[tuple[str, str, frozenset[int]]] = set()
    stated = 0
    for t, comp, kinds in said:
        live = frozenset(i for i, (lo, hi) in enumerate(spans) if lo <= t <= hi)
        if not live:
            continue
        stated += 1
        hit = [i for i in live if comp in exact[i] and faults[i].kind in kinds]
        if hit:
            found.update(hit)
        else:
            wrong.add((comp, kind_label(kinds), live))
    precision = _ratio(len(found), len(found) + len(wrong))
    recall = _ratio(len(found), len(faults))
    return {"stated": stated, "right": len(found), "wrong": len(wrong),
            "precision": precision, "recall": recall, "f1": f1(precision, recall)}


def _answer(raised: list[dict[str, Any]], diag: list[tuple[float, list[str], str | None]] | None,
            span: tuple[float, float], first: float, ask: float, others: set[str],
            plan: WiringPlan | None, slack: float) -> tuple[list[str], str | None]:
    """What the source answers at ``ask`` about the fault whose window is ``span``: its
    ranking, and the detector whose alert its kind guess rests on. The answer is the one
    given at the poll nearest ``ask``, within ``slack`` (half a poll: polls come a few ms
    early or late, and a poll early by one is still the one asked for)."""
    lo, hi = span
    so_far = [a for a in raised if lo <= a["opened"] <= ask + slack and not _symptom(a)]
    if diag is None:  # no agent: its alerts so far, in the order raised
        answer = list(dict.fromkeys(canonical(a["component"], plan) for a in so_far))
        said = None
    else:
        answer, said = next(((r, d) for t, r, d in diag if ask - slack <= t <= hi),
                            (None, None))
        if answer is None:  # the fault ended before the operator asked: the last answer
            answer, said = next(((r, d) for t, r, d in reversed(diag) if first <= t <= hi),
                                ([], None))
    names = _ranked(answer, others, plan)
    if said is not None and answer and names and canonical(answer[0], plan) != names[0]:
        said = None  # the recorded kind is that of another live fault, ranked above it
    if said is None and names:  # not recorded: the first alert that named its top
        said = next((a["detector"] for a in so_far
                     if canonical(a["component"], plan) == names[0]), None)
    return answer, said


def summarize(clean: dict[str, Any], faults: dict[str, Any],
              lenient: tuple[dict[str, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """One alert source's scores as ``summary.json`` carries them, from ``score`` of the
    fault-free phase (``clean``) and of the fault phase: recall, localization, time to
    detect and kind from the faults; alert precision and false alarms per hour over both
    phases and per phase; the pair scores; ``lenient``: ``any_alert_score`` of both
    phases, filed beside as ``any_alert_*``."""
    alerts = clean["alerts"] + faults["alerts"]
    precision = _ratio(faults["credited"], alerts)
    free = clean["fault_free_s"] + faults["fault_free_s"]
    fa = clean["false_alarms"] + faults["false_alarms"]
    out = {"precision": precision, "recall": faults["recall"],
           "f1": f1(precision, faults["recall"]), "top1": faults["top1"],
           "top3": faults["top3"], "kind_accuracy": faults["kind_accuracy"],
           "kind_accuracy_given_component": faults["kind_accuracy_given_component"],
           "confusion": faults["confusion"],
           "pair_precision": faults["pairs"]["precision"],
           "pair_recall": faults["pairs"]["recall"], "pair_f1": faults["pairs"]["f1"],
           "alerts": alerts, "credited": faults["credited"], "astray": faults["astray"],
           "false_alarms_per_hour": round(fa * 3600 / free, 2) if free > 0 else None,
           "false_alarms_per_hour_clean": clean["false_alarms_per_hour"],
           "false_alarms_per_hour_fault_phase": faults["false_alarms_per_hour"],
           "false_alarms_clean": clean["false_alarms"],
           "false_alarms_fault_phase": faults["false_alarms"],
           "fault_free_s": {"clean": clean["fault_free_s"],
                            "fault_phase": faults["fault_free_s"]},
           "ttd_s": faults["ttd_s"], "ttd_polls": faults["ttd_polls"],
           "ttl_s": faults["ttl_s"], "ttl_polls": faults["ttl_polls"],
           "lead_s_median": faults["lead_s_median"], "lead_n": faults["lead_n"],
           "faults": faults["faults"], "detected": faults["detected"],
           "per_kind": faults["per_kind"]}
    if lenient is not None:
        lc, lf = lenient
        lfa = lc["false_alarms"] + lf["false_alarms"]
        lp = _ratio(lf["detected"], lf["detected"] + lfa)
        out.update({f"{ANY_ALERT}{k}": v for k, v in {
            "precision": lp, "recall": lf["recall"], "f1": f1(lp, lf["recall"]),
            "top1": lf["top1"], "top3": lf["top3"], "kind_accuracy": lf["kind_accuracy"],
            "detected": lf["detected"], "false_alarms_clean": lc["false_alarms"],
            "false_alarms_per_hour": lc["false_alarms_per_hour"], "ttd_s": lf["ttd_s"],
            "per_kind": {k: {"detected": v["detected"], "top1": v["top1"]}
                         for k, v in lf["per_kind"].items()}}.items()})
    return out


def score_run(res: dict[str, Any], plan: WiringPlan | None) -> dict[str, Any]:
    """Every source's scores from what one ``ops_eval.json`` keeps (the injector's events,
    the phases' instants, each source's raw alerts and the agent's answers): ``{"agent":
    {"clean", "faults", "lenient"}, "baselines": {name: ...}}``, each phase a ``score``
    and ``lenient`` the ``any_alert_score`` pair. ``summarize`` each for summary.json."""
    interval = res["interval_s"]
    ph = res["phases"]
    clean_span, fault_span = (ph["clean"], ph["faults"]), (ph["faults"], ph["end"])
    truth = ground_truth(res.get("events") or [], ph["end"])

    def phases(alerts: list[dict[str, Any]], diag: list[Any] | None,
               suffered: list[Any] | None = None, lsuffered: list[Any] | None = None
               ) -> dict[str, Any]:
        def within(lo: float, hi: float) -> list[dict[str, Any]]:
            return [a for a in alerts if a.get("opened") is not None and lo <= a["opened"] < hi]

        cl, fa = within(*clean_span), within(ph["faults"], float("inf"))
        fd = None if diag is None else [d for d in diag if d[0] >= ph["faults"]]
        out = {"clean": score([], cl, None if diag is None else [], span=clean_span,
                              interval=interval, plan=plan),
               "faults": score(truth, fa, fd, span=fault_span, interval=interval, plan=plan,
                               suffered=suffered)}
        out["lenient"] = (
            any_alert_score([], cl, None if diag is None else [],
                            run_s=clean_span[1] - clean_span[0], interval=interval, plan=plan),
            any_alert_score(truth, fa, fd, run_s=fault_span[1] - fault_span[0],
                            interval=interval, plan=plan,
                            suffered=lsuffered))
        return out

    agent = phases(res.get("alerts") or [], res.get("diagnoses") or [])
    suffered = [r["suffered_at"] for r in agent["faults"]["per_fault"]]  # the job's view
    lsuffered = [r["suffered_at"] for r in agent["lenient"][1]["per_fault"]]
    return {"agent": agent,
            "baselines": {name: phases(alerts, None, suffered, lsuffered)
                          for name, alerts in (res.get("baseline_alerts") or {}).items()}}


def summaries(scored: dict[str, Any]) -> dict[str, Any]:
    """``score_run``'s output as summary.json carries it: the agent's summary, with each
    baseline's under ``baselines``."""
    def one(s: dict[str, Any]) -> dict[str, Any]:
        return summarize(s["clean"], s["faults"], s["lenient"])

    return {**one(scored["agent"]),
            "baselines": {n: one(s) for n, s in scored["baselines"].items()}}


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


def _localized(start: float, want: set[str], others: set[str], alerts: list[dict[str, Any]],
               diag: list[tuple[float, list[str], str | None]] | None,
               span: tuple[float, float], plan: WiringPlan | None) -> float | None:
    """Seconds from ``start`` to the first answer in the fault's window that names it first
    (the agent's ranking, the other live faults' components skipped), or for a source
    without an agent its first alert of ``alerts`` on it; None: never."""
    if diag is None:
        return next((round(a["opened"] - start, 3) for a in alerts
                     if canonical(a["component"], plan) in want), None)
    for t, ranked, _ in diag:
        if span[0] <= t <= span[1]:
            names = _ranked(ranked, others, plan)
            if names and names[0] in want:
                return round(t - start, 3)
    return None


def _symptom(alert: dict[str, Any]) -> bool:
    """An alert that says the job suffers, not where (its detector declares it so)."""
    kind = alert_kind(alert["detector"])
    return kind is not None and kind.symptom


#: healthy slots among a fault phase's fault slots, as a share of them
CONTROLS = 0.25


@dataclass(frozen=True)
class EvalSpec:
    """One ops-eval campaign: which faults, how long each phase lasts, what is asked.

    Checked when built (a ValueError naming the field), so a bad value is refused before
    any fabric comes up rather than minutes into a run."""

    #: faults of each kind
    per_kind: int = 8
    #: fault kinds to draw (None: every kind that has ``severity``'s faults)
    kinds: tuple[str, ...] | None = None
    #: how bad the faults are: gray, hard or mixed (``testbed.faultkinds``)
    severity: str = "hard"
    #: faults injected at once, in different parts of the fabric
    concurrent: int = 2
    #: longest fault (s)
    fault_s: float = 10.0
    #: gap between fault slots (s): recovery before the next
    gap_s: float = 12.0
    #: seed of the schedule, the healthy slots and the questions
    seed: int = 1
    #: telemetry polling interval (s)
    interval: float = DEFAULT_INTERVAL_S
    #: probe streams each NIC sends (emulated Mb/s)
    mbps_per_host: float = 4.0
    #: healthy slots among the fault slots, as a share of them
    controls: float = CONTROLS
    #: clean traffic that sets the static thresholds (s; None: a third of the fault phase)
    calibrate_s: float | None = None
    #: fault-free phase (s; None: as long as the fault phase)
    clean_s: float | None = None
    #: operator's questions asked about each fault
    questions: int = 4
    #: operator's questions asked about healthy components, per fault
    healthy_questions: int = 3
    #: how long after an injection its questions are asked (s; None: 4 intervals)
    ask_delay_s: float | None = None
    #: a decode burst every this many MoE training iterations
    decode_every: int = 2
    #: what each NIC of the MoE job sends at (emulated Mb/s; None: its emulated rate)
    job_mbps: float | None = 10.0
    #: per-kind overrides of a drawn fault's knobs, e.g. {"link-degrade": {"fraction": 0.25}}
    fault_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: a schedule given instead of drawn (``testbed.faultspec.Fault`` s, slot i at
    #: i x (fault_s + gap_s), one at a time: ``testbed.faultspec.sweep_schedule``); then
    #: per_kind, kinds, concurrent and controls are not used
    faults: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.kinds is not None:
            object.__setattr__(self, "kinds", tuple(self.kinds))
        if self.severity not in SCHEDULE_SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SCHEDULE_SEVERITIES)} "
                             f"(got {self.severity!r})")
        schedule_kinds(self.kinds, self.severity)  # "kinds: ..." for an unknown or lacking kind
        for name in ("per_kind", "concurrent", "decode_every"):
            _check(name, getattr(self, name), low=1, whole=True)
        for name in ("questions", "healthy_questions"):
            _check(name, getattr(self, name), low=0, whole=True)
        _check("seed", self.seed, low=None, whole=True)
        for name in ("fault_s", "interval", "mbps_per_host"):
            _check(name, getattr(self, name), low=0, strict=True)
        _check("gap_s", self.gap_s, low=0)
        _check("controls", self.controls, low=0)
        for name in ("calibrate_s", "clean_s", "ask_delay_s"):
            if getattr(self, name) is not None:
                _check(name, getattr(self, name), low=0)
        if self.job_mbps is not None:
            _check("job_mbps", self.job_mbps, low=0, strict=True)
        for kind, knobs in self.fault_params.items():
            if not isinstance(knobs, Mapping):
                raise ValueError(f"fault_params: {kind}'s knobs must be a mapping "
                                 f"(got {knobs!r})")


def _check(name: str, value: Any, *, low: float | None, whole: bool = False,
           strict: bool = False) -> None:
    """Refuse ``value`` for field ``name`` unless it is a finite number (an int when
    ``whole``) at least ``low`` (above it when ``strict``); bools are not numbers here."""
    kind = int if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        raise ValueError(f"{name} must be {'an integer' if whole else 'a number'} "
                         f"(got {value!r})")
    if low is not None and (value <= low if strict else value < low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low:g} (got {value!r})")
