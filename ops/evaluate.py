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

* ``run_ops_eval(...)`` does the experiment on a real fabric: steady probe streams
  between NICs of different leaves, the collector and detectors running, a fault-free
  phase, then a seeded schedule of faults of every kind (``testbed.shell.faults``) of the same
  length, the agent asked at every poll with an open alert. Goals: >= 95% detection,
  0 false alarms in the fault-free phase, top-1 >= 90%, detection within 3 intervals.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controllers.plan import WiringPlan
from ops.agent import Tools, diagnose
from ops.detectors import Engine
from ops.telemetry import Collector, Store, canonical

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
        signals = [a for _, a in window if a["detector"] != "job-slow"]
        fs = FaultScore(f.kind, f.component, f.start, detected=bool(window))
        if window:
            first = window[0][1]
            fs.detect_s = round(first["opened"] - f.start, 3)
            fs.first_alert = f"{first['detector']}:{first['component']}"
            suffer = [a["first_seen"] for _, a in window if a["detector"] == "job-slow"]
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


# --- the experiment (thin shell over a real Lab) ---------------------------------------------
class Monitor:
    """Collector + detectors + agent asked at every poll with an open alert (in-process)."""

    def __init__(self, lab: Any, store: Store | None, interval: float,
                 baseline_mbps: float | None = None, job_hosts: set[str] | None = None) -> None:
        self.lab = lab
        self.engine = Engine(lab.plan, baseline_mbps=baseline_mbps, job_hosts=job_hosts,
                             on_alert=self._saved)
        self.store = store
        self.diagnoses: list[tuple[float, list[str]]] = []
        self.collector = Collector.for_lab(lab, store, interval=interval,
                                           on_poll=self._after_poll)
        self.lock = threading.Lock()

    def _saved(self, alert: Any, _event: str) -> None:
        if self.store is not None:
            self.store.save_alert(alert)

    def _after_poll(self, t: float, _values: dict[tuple[str, str], float]) -> None:
        with self.lock:
            self.engine.step(self.collector.history)
            if self.engine.active:
                tools = Tools(self.lab.plan, history=self.collector.history, engine=self.engine,
                              client=self.collector.client)
                d = diagnose(tools, "what is wrong?", probe=False)
                self.diagnoses.append((t, d.components()[:5]))

    def alerts(self) -> list[dict[str, Any]]:
        with self.lock:
            return [a.to_dict() for a in self.engine.all_alerts()]


def stream_pairs(plan: WiringPlan) -> list[tuple[str, str]]:
    """Who sends to whom in ``steady_traffic``: host i to the host n/2 later in plan order,
    or the next one when that shares its leaf."""
    hosts = [h.name for h in plan.hosts]
    n = len(hosts)
    ports = plan.ports()
    out = []
    for i, src in enumerate(hosts):
        dst = hosts[(i + max(1, n // 2)) % n]
        if ports[src][0][0] == ports[dst][0][0]:
            dst = hosts[(i + 1) % n]
        out.append((src, dst))
    return out


def steady_traffic(lab: Any, seconds: float, mbps_per_host: float = 16.0,
                   size: int = 1000, sports: int = 16) -> list[Any]:
    """One probe ``Stream`` from every NIC to a NIC on another leaf, for ``seconds``.

    Host i sends to the host ``n/2`` positions later in plan order, so every flow crosses
    the spines; ``sports`` source ports spread each over the lanes (ECMP hashes them).
    At 16 Mb/s of 1000-byte datagrams per host every lane of the default small fabric
    carries ~8 Mb/s (40% of 20 Mb/s), so a lane cut below that queues.
    """
    from testbed.shell.probe import Stream

    pps = mbps_per_host * 1e6 / 8 / size / sports
    streams = []
    try:
        for i, (src, dst) in enumerate(stream_pairs(lab.plan)):
            streams.append(Stream(lab, src, dst, sports=range(50000, 50000 + sports), pps=pps,
                                  duration=seconds, port=4791 + i, size=size).start())
    except BaseException:
        for s in streams:
            s.stop()
        raise
    return streams


def run_ops_eval(plan: WiringPlan, *, interval: float = 1.0,
                 log: Callable[[str], None] = print, lab_kw: dict[str, Any] | None = None,
                 **kw: Any) -> dict[str, Any]:
    """Bring ``plan`` up (controller polling every ``interval``) and run ``eval_on_lab``."""
    from testbed.shell.lab import Lab

    with Lab(plan, log=log, poll_interval=interval, **(lab_kw or {})) as lab:
        return eval_on_lab(lab, interval=interval, log=log, **kw)


def eval_on_lab(lab: Any, *, per_kind: int = 1, kinds: list[str] | None = None,
                fault_s: float = 10.0, gap_s: float = 12.0, seed: int = 1,
                interval: float = 1.0, store_path: str | None = None,
                log: Callable[[str], None] = print,
                fault_params: dict[str, dict[str, Any]] | None = None,
                mbps_per_host: float = 20.0) -> dict[str, Any]:
    """A fault-free phase and a fault phase of equal length on a running lab; score both.

    The schedule is ``testbed.shell.faults.random_schedule(plan, kinds, per_kind * len(kinds),
    ...)`` with its knobs as drawn (``fault_params`` overrides a kind's knobs, e.g.
    ``{"link-degrade": {"fraction": 0.25}}``); faults last at most ``fault_s`` and are
    ``gap_s`` apart. ``store_path``: keep the telemetry in that SQLite file. Returns
    ``{"clean": score, "faults": score, "schedule", "events", "baseline_mbps",
    "telemetry", ...}``.
    """
    from testbed.shell import faults as F

    plan = lab.plan
    kinds = list(kinds or F.KINDS)
    n = per_kind * len(kinds)
    phase_s = n * (fault_s + gap_s) + gap_s
    schedule = F.random_schedule(plan, kinds, n, phase_s - gap_s, seed, gap_s)
    schedule = [dataclasses.replace(f, at=f.at + gap_s / 2,
                                    **(fault_params or {}).get(f.kind, {})) for f in schedule]
    warmup_s = 15 * interval
    store = Store(store_path) if store_path else None
    out: dict[str, Any] = {"phase_s": phase_s, "interval_s": interval,
                           "mbps_per_host": mbps_per_host,
                           "schedule": [_fault_dict(f) for f in schedule]}
    streams = steady_traffic(lab, warmup_s + 2 * phase_s + 60, mbps_per_host)
    mon = Monitor(lab, store, interval)
    try:
        mon.collector.start()
        log(f"ops-eval: warm-up {warmup_s:g} s, then a fault-free phase of {phase_s:g} s")
        time.sleep(warmup_s)
        t_clean = time.time()
        time.sleep(phase_s)
        t_fault = time.time()
        alerts = mon.alerts()
        out["clean"] = score([], [a for a in alerts if t_clean <= a["opened"] < t_fault],
                             [], run_s=t_fault - t_clean, interval=interval, plan=plan)
        out["clean"]["alerts_during_warmup"] = sum(a["opened"] < t_clean for a in alerts)
        out["baseline_mbps"] = mon.engine.baseline
        log(f"ops-eval: fault phase, {n} faults ({', '.join(kinds)})")
        with F.FaultInjector(lab, log=log) as inj:
            runner = inj.run_schedule(schedule)
            runner.wait(timeout=phase_s + 120)
            runner.stop()
            events = runner.events
            out["injector_errors"] = list(runner.errors)
        time.sleep(gap_s / 2)
        t1 = time.time()
        mon.collector.stop()
        truth = ground_truth(events, t1)
        out["faults"] = score(truth, [a for a in mon.alerts() if a["opened"] >= t_fault],
                              [d for d in mon.diagnoses if d[0] >= t_fault],
                              run_s=t1 - t_fault, interval=interval, plan=plan)
        out["events"] = events
        out["alerts"] = mon.alerts()
        polls = mon.collector.poll_seconds
        out["telemetry"] = {"polls": len(polls),
                            "poll_s_median": round(statistics.median(polls), 4),
                            "poll_s_max": round(max(polls), 4),
                            "rows": store.count() if store is not None else None}
    finally:
        mon.collector.stop()
        for s in streams:
            s.stop()
        if store is not None:
            store.close()
    return out


def _fault_dict(f: Any) -> dict[str, Any]:
    return {**f.to_dict(), "component": f.component}
