"""The ops-eval experiment on a real fabric: steady traffic, the collector, detectors and
agent running, a fault-free phase, then a seeded schedule of faults; scored by the pure
``ops.evaluate.score`` (whose docstring says what each score means and the goals).
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from ops.agent import Tools, diagnose
from ops.baselines import baselines
from ops.detectors import Engine
from ops.evaluate import ground_truth, score
from ops.shell.collector import Collector
from ops.telemetry import DEFAULT_INTERVAL_S, Store
from traffic.shell.running import RunningLab
from vocab.flows import ROCE_PORT
from vocab.plan import WiringPlan


# --- the experiment (thin shell over a real Lab) ---------------------------------------------
class Monitor:
    """Collector + detectors + agent asked at every poll with an open alert (in-process),
    and the baselines (``ops.baselines``) stepped on the same history after every poll."""

    def __init__(self, lab: RunningLab, store: Store | None, interval: float,
                 baseline_mbps: float | None = None, job_hosts: set[str] | None = None) -> None:
        self.lab = lab
        self.engine = Engine(lab.plan, baseline_mbps=baseline_mbps, job_hosts=job_hosts,
                             on_alert=self._saved)
        self.store = store
        #: (poll time, ranked components, the top suspect's detector: what kind it says)
        self.diagnoses: list[tuple[float, list[str], str | None]] = []
        self.baselines = baselines(lab.plan)
        self.collector = Collector.for_lab(lab, store, interval=interval,
                                           on_poll=self._after_poll)
        self.lock = threading.Lock()

    def _saved(self, alert: Any, _event: str) -> None:
        if self.store is not None:
            self.store.save_alert(alert)

    def _after_poll(self, t: float, _values: dict[tuple[str, str], float]) -> None:
        with self.lock:
            self.engine.step(self.collector.history)
            for b in self.baselines.values():
                b.step(self.collector.history)
            if self.engine.active:
                tools = Tools(self.lab.plan, history=self.collector.history, engine=self.engine,
                              client=self.collector.client)
                d = diagnose(tools, "what is wrong?", probe=False)
                self.diagnoses.append((t, d.components()[:5],
                                       d.suspects[0].detector if d.suspects else None))

    def alerts(self, baseline: str | None = None) -> list[dict[str, Any]]:
        """The engine's alerts, or those of the baseline so named."""
        book = self.engine if baseline is None else self.baselines[baseline]
        with self.lock:
            return [a.to_dict() for a in book.all_alerts()]


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


def steady_traffic(lab: RunningLab, seconds: float, mbps_per_host: float = 16.0,
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
                                  duration=seconds, port=ROCE_PORT + i, size=size).start())
    except BaseException:
        for s in streams:
            s.stop()
        raise
    return streams


def run_ops_eval(plan: WiringPlan, *, interval: float = DEFAULT_INTERVAL_S,
                 log: Callable[[str], None] = print, lab_kw: dict[str, Any] | None = None,
                 **kw: Any) -> dict[str, Any]:
    """Bring ``plan`` up (controller polling every ``interval``) and run ``eval_on_lab``."""
    from testbed.shell.lab import Lab

    with Lab(plan, log=log, poll_interval=interval, **(lab_kw or {})) as lab:
        return eval_on_lab(lab, interval=interval, log=log, **kw)


def eval_on_lab(lab: RunningLab, *, per_kind: int = 1, kinds: list[str] | None = None,
                fault_s: float = 10.0, gap_s: float = 12.0, seed: int = 1,
                interval: float = DEFAULT_INTERVAL_S, store_path: str | None = None,
                log: Callable[[str], None] = print,
                fault_params: dict[str, dict[str, Any]] | None = None,
                mbps_per_host: float = 20.0, severity: str = "hard") -> dict[str, Any]:
    """A fault-free phase and a fault phase of equal length on a running lab; score both.

    The schedule is ``testbed.shell.faults.random_schedule(plan, kinds, per_kind * len(kinds),
    ...)`` with its knobs as drawn (``fault_params`` overrides a kind's knobs, e.g.
    ``{"link-degrade": {"fraction": 0.25}}``); faults last at most ``fault_s`` and are
    ``gap_s`` apart. ``severity`` (gray, hard or mixed) is the schedule's; ``kinds`` None
    takes every kind that has it. ``store_path``: keep the telemetry in that SQLite file. Returns
    ``{"clean": score, "faults": score, "schedule", "events", "baseline_mbps",
    "telemetry", "baselines": {name: {"clean": score, "faults": score}}, ...}`` (the
    baselines scored on the same polls, with no agent).
    """
    from testbed.shell import faults as F

    plan = lab.plan
    kinds = F.schedule_kinds(kinds or None, severity)
    n = per_kind * len(kinds)
    phase_s = n * (fault_s + gap_s) + gap_s
    schedule = F.random_schedule(plan, kinds, n, phase_s - gap_s, seed, gap_s,
                                 severity=severity)
    schedule = [dataclasses.replace(f, at=f.at + gap_s / 2,
                                    **(fault_params or {}).get(f.kind, {})) for f in schedule]
    warmup_s = 15 * interval
    store = Store(store_path) if store_path else None
    out: dict[str, Any] = {"phase_s": phase_s, "interval_s": interval,
                           "mbps_per_host": mbps_per_host, "severity": severity,
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
        log(f"ops-eval: fault phase, {n} {severity} faults ({', '.join(kinds)})")
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
        out["baselines"] = {}
        for name in mon.baselines:
            raised = mon.alerts(name)
            out["baselines"][name] = {
                "clean": score([], [a for a in raised if t_clean <= a["opened"] < t_fault],
                               None, run_s=t_fault - t_clean, interval=interval, plan=plan),
                "faults": score(truth, [a for a in raised if a["opened"] >= t_fault], None,
                                run_s=t1 - t_fault, interval=interval, plan=plan)}
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
