"""The ops-eval experiment on a real fabric: a MoE job beside steady probe traffic, the
collector, detectors and agent running, a fault-free phase, then a seeded schedule of
faults (some at once); scored by the pure
``ops.evaluate.score`` (whose docstring says what each score means and the goals).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ops import questions as Q
from ops.agent import Tools, diagnose
from ops.baselines import baselines
from ops.detectors import Engine, alert_kind
from ops.detectors import miswired as MISWIRED
from ops.evaluate import GroundTruth, ground_truth, live_faults
from ops.shell.collector import Collector
from ops.telemetry import DEFAULT_INTERVAL_S, Store
from traffic.iterations import settled
from traffic.kernels import KernelTraffic
from traffic.shell.moejob import MoeJob
from traffic.shell.running import RunningLab
from vocab.flows import ROCE_PORT
from vocab.plan import WiringPlan

#: the longest the warm-up waits for the MoE job to settle (``traffic.iterations.settled``)
SETTLE_S = 240.0
#: the longest default calibration, in polls (inside what the history keeps)
CALIBRATE_MAX_POLLS = 240
#: healthy slots among a fault phase's fault slots, as a share of them
CONTROLS = 0.25
#: the agent checks the cabling against the plan this often (s) ...
WIRING_EVERY_S = 30.0
#: ... and as soon as this long after the last check when the job suffers and no alert
#: says where (s)
WIRING_SOON_S = 10.0
#: how much nicer than the lab a background wiring check runs (the switches it probes need
#: the cores more); relative, so a lab started under `nice` still outranks its check
BACKGROUND_NICE = 10


class WiringWatch:
    """The wiring check (``testbed.shell.wiring.check_wiring``) as the agent uses it.

    The agent looks at the cabling on its own: every ``every_s`` whatever the alerts say,
    and sooner (``soon_s`` after the last check) when the job suffers and no alert says
    where (``unexplained``): both fault-blind. ``maybe(now, urgent)`` starts a check in a
    thread of its own unless one runs or ran too recently; the collector calls it every
    poll. A check is a few
    ``ovs-ofctl`` calls per switch, seconds on a large fabric: it never holds up the
    collector's poll, and its processes run at a lower priority than the switches they
    share the cores with. Each result is handed to the collector's next poll
    (``take_values``, which never waits for a check) as the miswired detector's telemetry
    (``ops.detectors.miswired``). ``look()`` is an operator's own check (a question's
    "is the wiring as planned?"): its result answers the question and never reaches the
    detectors, so what the harness asks cannot help the score. ``spans`` keeps when each
    check ran (wall clock), to measure what checking costs the poll and the job.
    ``check`` stands in for the real check in tests."""

    def __init__(self, plan: WiringPlan, check: Callable[[], list[Any]] | None = None,
                 every_s: float = WIRING_EVERY_S, log: Callable[[str], None] = print,
                 soon_s: float = WIRING_SOON_S) -> None:
        if check is None:
            from testbed.shell.wiring import check_wiring

            def check() -> list[Any]:
                return check_wiring(plan)
        self.check, self.every_s, self.soon_s, self.log = check, every_s, soon_s, log
        self.checks = 0
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()  # one check at a time: they share the switches' rules
        self._result = threading.Lock()  # guards _pending only, held for no longer than a copy
        self._busy = threading.Event()
        self._last = -float("inf")
        self._pending: dict[tuple[str, str], float] = {}

    def _run(self) -> list[Any]:
        with self._lock:
            t0 = time.time()
            try:
                return self.check()
            finally:
                self.checks += 1
                self.spans.append((t0, time.time()))

    def run(self) -> list[Any]:
        """Check now, for the detectors; the findings (``testbed.wiring.Finding``)."""
        from testbed.wiring import miswired

        found = self._run()
        values = {(MISWIRED.COMPONENT, MISWIRED.CHECKED): 1.0}
        values.update({(link, MISWIRED.METRIC): 1.0 for link in miswired(found)})
        with self._result:
            self._pending = values
        return found

    def look(self) -> list[Any]:
        """Check now for an operator's question; the result never reaches the detectors."""
        return self._run()

    def maybe(self, now: float, urgent: bool = False) -> bool:
        """Start a check in the background unless one runs or ran within ``every_s``
        (``urgent``: within ``soon_s``)."""
        gap = min(self.soon_s, self.every_s) if urgent else self.every_s
        if self._busy.is_set() or now - self._last < gap:
            return False
        self._busy.set()
        self._last = now
        threading.Thread(target=self._background, name="wiring-check", daemon=True).start()
        return True

    def _background(self) -> None:
        with contextlib.suppress(OSError):  # this thread and the processes it starts
            me = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, me,
                           min(19, os.getpriority(os.PRIO_PROCESS, me) + BACKGROUND_NICE))
        try:
            self.run()
        except Exception as exc:  # a failed check is no finding; say so and go on
            self.log(f"ops-eval: wiring check failed: {exc}")
        finally:
            self._busy.clear()

    def take_values(self) -> dict[tuple[str, str], float]:
        """The latest check's result, once (never waits for a check that is running)."""
        with self._result:
            values, self._pending = self._pending, {}
        return values


def unexplained(active: Iterable[Any]) -> bool:
    """The job suffers (a symptom alert is open) and no open alert says where."""
    kinds = [alert_kind(a.detector) for a in active]
    return any(k is not None and k.symptom for k in kinds) and \
        all(k is not None and k.symptom for k in kinds)


def check_cost(spans: list[tuple[float, float]], polls: list[tuple[float, float]],
               iterations: list[dict[str, Any]]) -> dict[str, Any]:
    """What the periodic wiring check costs: its duration, and the poll's and the job's
    iteration time while a check ran beside those without one (``polls``: (poll time,
    seconds it took); ``iterations``: ``traffic.iterations.Iteration.to_dict()`` s)."""
    def during(lo: float, hi: float) -> bool:
        return any(a <= hi and lo <= b for a, b in spans)

    def med(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 4) if xs else None

    timed = [it for it in iterations if it.get("error") is None]
    return {"checks": len(spans), "check_s_median": med([b - a for a, b in spans]),
            "check_s_max": round(max((b - a for a, b in spans), default=0.0), 4),
            "poll_s_median_checking": med([d for t, d in polls if during(t, t + d)]),
            "poll_s_median_not": med([d for t, d in polls if not during(t, t + d)]),
            "iter_s_median_checking": med([it["iter_s"] for it in timed
                                           if during(it["started"], it["ended"])]),
            "iter_s_median_not": med([it["iter_s"] for it in timed
                                      if not during(it["started"], it["ended"])])}


# --- the experiment (thin shell over a real Lab) ---------------------------------------------
class Monitor:
    """Collector + detectors + agent asked at every poll with an open alert (in-process),
    and the baselines (``ops.baselines``) stepped on the same history after every poll."""

    def __init__(self, lab: RunningLab, store: Store | None, interval: float,
                 baseline_mbps: float | None = None, job_hosts: set[str] | None = None,
                 job: MoeJob | None = None, wiring: WiringWatch | None = None) -> None:
        self.lab = lab
        self.job, self.wiring = job, wiring
        self.engine = Engine(lab.plan, baseline_mbps=baseline_mbps, job_hosts=job_hosts,
                             on_alert=self._saved)
        self.store = store
        #: (poll time, ranked components, the top suspect's detector: what kind it says)
        self.diagnoses: list[tuple[float, list[str], str | None]] = []
        self.diagnose_s: list[float] = []  # what each answer cost (the agent's CPU)
        self.baselines = baselines(lab.plan)
        self.collector = Collector.for_lab(lab, store, interval=interval,
                                           on_poll=self._after_poll,
                                           extra=self._extra)
        self.lock = threading.Lock()
        self._consults: list[_Consult] = []

    def _saved(self, alert: Any, _event: str) -> None:
        if self.store is not None:
            self.store.save_alert(alert)

    def _extra(self, t: float) -> dict[tuple[str, str], float]:
        """What the job and the wiring check report, for the collector's poll."""
        out = self.job.take_values(t) if self.job is not None else {}
        if self.wiring is not None:
            out.update(self.wiring.take_values())
        return out

    def _after_poll(self, t: float, _values: dict[tuple[str, str], float]) -> None:
        with self.lock:
            self.engine.step(self.collector.history)
            if self.wiring is not None:  # the agent's own period, sooner when unexplained
                self.wiring.maybe(time.monotonic(),
                                  urgent=unexplained(self.engine.active.values()))
            for b in self.baselines.values():
                b.step(self.collector.history)
            if self.engine.active:
                tools = Tools(self.lab.plan, history=self.collector.history, engine=self.engine,
                              client=self.collector.client)
                t0 = time.monotonic()
                d = diagnose(tools, "what is wrong?", probe=False)
                self.diagnose_s.append(time.monotonic() - t0)
                self.diagnoses.append((t, d.components()[:5],
                                       d.suspects[0].detector if d.suspects else None))
            for job in self._consults:
                job.run(self.tools)
            self._consults.clear()

    def tools(self, **kw: Any) -> Tools:
        """Fresh agent tools over the live history and alerts (``kw``: more ``Tools``
        arguments, e.g. ``wiring``)."""
        return Tools(self.lab.plan, history=self.collector.history, engine=self.engine,
                     client=self.collector.client, **kw)

    def consult(self, fn: Callable[[Callable[..., Tools]], Any], timeout: float) -> Any:
        """``fn(make_tools)`` run in the collector's thread right after its next poll: the
        history is whole there (the collector appends to it between polls only). Raises
        TimeoutError when no poll came within ``timeout`` seconds."""
        job = _Consult(fn)
        with self.lock:
            self._consults.append(job)
        if not job.done.wait(timeout):
            with self.lock:
                if job in self._consults:
                    self._consults.remove(job)
            raise TimeoutError(f"no poll within {timeout:g} s to answer on")
        if job.error is not None:
            raise job.error
        return job.result

    def calibrate(self, since: float, timeout: float = 30.0) -> dict[str, Any]:
        """Set the baselines afresh, the static thresholds from the polls since ``since``
        (a clean calibration run: ``ops.baselines.calibrate``); their thresholds. Done in
        the collector's thread, where the history is whole; the alerts they raised before
        go with them (calibration is not scored)."""
        def swap(_make: Callable[..., Tools]) -> dict[str, Any]:
            self.baselines = baselines(self.lab.plan, calibration=self.collector.history,
                                       since=since)
            return self.baselines["static-thresholds"].limits.to_dict()  # type: ignore[attr-defined]

        return self.consult(swap, timeout)

    def poll_times(self) -> list[tuple[float, float]]:
        """(when each poll began, seconds it took)."""
        c = self.collector
        return list(zip(c.poll_times, c.poll_seconds, strict=False))

    def alerts(self, baseline: str | None = None) -> list[dict[str, Any]]:
        """The engine's alerts, or those of the baseline so named."""
        book = self.engine if baseline is None else self.baselines[baseline]
        with self.lock:
            return [a.to_dict() for a in book.all_alerts()]


class _Consult:
    """One ``Monitor.consult`` call waiting for the collector's thread."""

    def __init__(self, fn: Callable[[Callable[..., Tools]], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self, make: Callable[..., Tools]) -> None:
        try:
            self.result = self.fn(make)
        except Exception as exc:  # handed to the waiting thread
            self.error = exc
        self.done.set()


class Asker:
    """Asks ``ops.questions`` while each fault is live: once per fault, ``delay_s`` after its
    injection (detection has had its chance by then), a seeded sample of questions about
    it and about healthy components, answered by the deterministic planner's tools on the
    live telemetry (``consult``: ``Monitor.consult``); ``wiring`` is the wiring check, run
    here (not in the collector's thread) and only when a question needs it."""

    def __init__(self, plan: WiringPlan, consult: Callable[..., Any], *, seed: int,
                 delay_s: float, job_pairs: list[tuple[str, str]], relevant: int = 4,
                 healthy: int = 3, wiring: Callable[[], Any] | None = None,
                 timeout: float = 10.0, clock: Callable[[], float] = time.time,
                 log: Callable[[str], None] = print) -> None:
        self.plan, self.consult, self.seed, self.delay_s = plan, consult, seed, delay_s
        self.job_pairs, self.relevant, self.healthy = job_pairs, relevant, healthy
        self.wiring, self.timeout, self.clock, self.log = wiring, timeout, clock, log
        self.rows: list[dict[str, Any]] = []
        self.done: set[Any] = set()
        self.missed: list[Any] = []  # faults undone before their questions were due

    def step(self, events: list[dict[str, Any]]) -> None:
        """Ask about every injected fault whose questions are due and not yet asked."""
        now = self.clock()
        truth = ground_truth(events, float("inf"))
        for ev in events:
            fid = ev.get("fault_id")
            if ev["action"] != "inject" or fid is None or fid in self.done:
                continue
            if now < ev["time"] + self.delay_s:
                continue
            self.done.add(fid)
            live, recent = Q.live_at(truth, now)
            mine = next((g for g in live if (g.kind, g.component, g.start)
                         == (ev["kind"], ev["component"], ev["time"])), None)
            if mine is None:
                self.missed.append(fid)
                continue
            self._ask(fid, mine, live, recent)

    def _ask(self, fid: Any, fault: GroundTruth, live: list[GroundTruth],
             recent: list[GroundTruth]) -> None:
        qs = Q.question_set(self.plan, live, seed=self.seed * 1000 + int(fid), recent=recent,
                            job_pairs=self.job_pairs, relevant=self.relevant,
                            healthy=self.healthy)
        found = None
        if self.wiring is not None and any(q.read is Q.miswired for q in qs):
            try:
                found = self.wiring()
            except Exception as exc:  # the question is answered with the error
                self.log(f"ops-eval: wiring check failed: {exc}")
        kw = {} if found is None else {"wiring": lambda: found}

        def ask_all(make: Callable[..., Tools]) -> list[tuple[Q.Question, Q.Answer, float]]:
            out = []
            for q in qs:
                tools = make(**kw)
                out.append((q, Q.answer(q, tools), tools.now()))
            return out

        base = {"fault_id": fid, "kind": fault.kind, "component": fault.component}
        try:
            answered = self.consult(ask_all, self.timeout)
        except TimeoutError as exc:
            answered = [(q, Q.Answer([], "", error=str(exc)), self.clock()) for q in qs]
        for q, a, t in answered:
            self.rows.append(Q.row(q, a, self.plan, **base, asked_at=round(t, 3)))
        ok = sum(r["correct"] for r in self.rows[-len(answered):]) if answered else 0
        self.log(f"ops-eval: asked {len(answered)} questions about {fault.kind} "
                 f"{fault.component}: {ok} right")

    def result(self, truth: list[GroundTruth]) -> dict[str, Any]:
        """The rows (each marked ``stale`` when its fault had ended by the time it was
        answered: not scored) and their summary (``ops.questions.summarize``)."""
        for r in self.rows:
            r["stale"] = not any(g.kind == r["kind"] and g.component == r["component"]
                                 and g.start <= r["asked_at"] <= g.end for g in truth)
        scored = [r for r in self.rows if not r["stale"]]
        return {"rows": self.rows,
                "summary": {**Q.summarize(scored), "stale": len(self.rows) - len(scored),
                            "faults_missed": len(self.missed), "delay_s": self.delay_s,
                            "templates": len(Q.TEMPLATES)}}


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
                mbps_per_host: float = 20.0, severity: str = "hard",
                questions: int = 4, healthy_questions: int = 3,
                ask_delay_s: float | None = None,
                on_faults: Callable[[list[dict[str, Any]]], None] | None = None,
                job: tuple[KernelTraffic, KernelTraffic | None] | None = None,
                decode_every: int = 2, job_mbps: float | None = None,
                concurrent: int = 1, controls: float = CONTROLS,
                calibrate_s: float | None = None) -> dict[str, Any]:
    """A calibration, a fault-free phase and a fault phase on a running lab; what every
    alert source raised in them, raw, for ``ops.evaluate.score_run`` to score.

    The schedule is ``testbed.shell.faults.random_schedule(plan, kinds, per_kind * len(kinds),
    ...)`` with its knobs as drawn (``fault_params`` overrides a kind's knobs, e.g.
    ``{"link-degrade": {"fraction": 0.25}}``); faults last at most ``fault_s`` and are
    ``gap_s`` apart, and ``controls`` x as many healthy slots as fault slots, drawn from
    ``seed``, stand among them (``healthy_slots``): no fault, the same traffic, so false
    alarms are also counted late in the run, not only in the fault-free phase that comes
    first. ``severity`` (gray, hard or mixed) is the schedule's; ``kinds`` None takes every
    kind that has it. The fault-free phase is as long as the fault phase; before it,
    ``calibrate_s`` seconds (default a third of it, at least 30 polls) of clean traffic
    set the static-thresholds baseline's thresholds (``ops.baselines.calibrated``).
    ``store_path``: keep the telemetry in that SQLite file.

    Returns ``{"plan", "schedule", "events", "phases", "alerts", "diagnoses",
    "baseline_alerts", "baseline_mbps", "telemetry", "questions", "job", ...}``: the
    injector's log (the ground truth), the phases' instants, and every source's raw alerts
    and the agent's answers, so a run is scored, and scored again, from its file alone.
    ``questions``: the operator's questions (``ops.questions``) asked once per fault,
    ``ask_delay_s`` after its injection (default 4 intervals): ``questions`` about the
    fault and ``healthy_questions`` about healthy components, drawn from ``seed``; their
    rows and ``summary`` (``Asker.result``); the harness picks them from the injection
    log, so nothing they run reaches the detectors. ``on_faults`` is told the live faults
    (``ops.evaluate.live_faults``) each time they change, and ``[]`` at the end: the live
    view shows them beside the alerts.

    ``job``: ``(training step, decode burst)`` kernel traffic run as a MoE job
    (``traffic.shell.moejob.MoeJob``) beside the streams from the warm-up to the end, its
    iterations fed to the detectors (``out["job"]``: every iteration), each NIC sending at
    ``job_mbps`` (None: its emulated rate). ``concurrent`` > 1 injects faults in groups of
    that many at once, in different parts of the fabric. The agent checks the wiring
    (``WiringWatch``) on its own period; ``out["telemetry"]["wiring"]`` says what that
    cost (``check_cost``).
    """
    from testbed.shell import faults as F

    plan = lab.plan
    kinds = F.schedule_kinds(kinds or None, severity)
    n = per_kind * len(kinds)
    groups = -(-n // concurrent)
    slot_s = fault_s + gap_s
    healthy = healthy_slots(groups, controls, seed)
    phase_s = (groups + len(healthy)) * slot_s + gap_s
    schedule = F.random_schedule(plan, kinds, n, groups * slot_s, seed, gap_s,
                                 severity=severity, concurrent=concurrent)
    schedule = [dataclasses.replace(f, at=shifted(f.at, slot_s, healthy) + gap_s / 2,
                                    **(fault_params or {}).get(f.kind, {})) for f in schedule]
    warmup_s = 15 * interval
    calib_s = min(max(30 * interval, phase_s / 3), CALIBRATE_MAX_POLLS * interval) \
        if calibrate_s is None else calibrate_s
    store = Store(store_path) if store_path else None
    out: dict[str, Any] = {"phase_s": phase_s, "interval_s": interval,
                           "mbps_per_host": mbps_per_host, "severity": severity,
                           "plan": plan.to_dict(), "calibrate_s": calib_s,
                           "healthy_slots": [gap_s / 2 + i * slot_s for i in healthy],
                           "slot_s": slot_s,
                           "schedule": [_fault_dict(f) for f in schedule]}
    streams = steady_traffic(lab, warmup_s + SETTLE_S + calib_s + 2 * phase_s + 60,
                             mbps_per_host)
    moe = MoeJob(lab, job[0], job[1], decode_every=decode_every, log=log,
                 rate_mbps=job_mbps) if job else None
    watch = WiringWatch(plan, log=log)
    mon = Monitor(lab, store, interval, job=moe, wiring=watch)
    try:
        if moe is not None:
            moe.start()
            log(f"ops-eval: MoE job running ({len(moe.phases)} training phases per iteration, "
                f"a decode burst every {decode_every})")
        mon.collector.start()
        log(f"ops-eval: warm-up {warmup_s:g} s, calibration {calib_s:g} s, then a fault-free "
            f"phase of {phase_s:g} s")
        time.sleep(warmup_s)
        if moe is not None:  # the fault-free phase starts from the job's steady state
            wait = time.monotonic() + SETTLE_S
            while not settled(moe.iterations) and time.monotonic() < wait:
                time.sleep(0.5)
            log(f"ops-eval: the job {'settled' if settled(moe.iterations) else 'did not settle'}"
                f" after {len(moe.iterations)} iterations")
        t_cal = time.time()
        time.sleep(calib_s)
        out["thresholds"] = mon.calibrate(t_cal)
        t_clean = time.time()
        time.sleep(phase_s)
        t_fault = time.time()
        out["baseline_mbps"] = mon.engine.baseline
        log(f"ops-eval: fault phase, {n} {severity} faults ({', '.join(kinds)}) and "
            f"{len(healthy)} healthy slots")
        asker = Asker(plan, mon.consult, seed=seed,
                      delay_s=4 * interval if ask_delay_s is None else ask_delay_s,
                      job_pairs=stream_pairs(plan), relevant=questions,
                      healthy=healthy_questions, wiring=watch.look,
                      timeout=5 * interval + 5, log=log)
        with F.FaultInjector(lab, log=log) as inj:
            runner = inj.run_schedule(schedule)
            end = time.monotonic() + phase_s + 120
            shown: list[dict[str, Any]] | None = None
            while time.monotonic() < end:
                asker.step(inj.events)
                if on_faults is not None:
                    live = live_faults(inj.events, time.time())
                    if live != shown:
                        on_faults(live)
                        shown = live
                if runner.wait(timeout=min(0.25, max(0.0, end - time.monotonic()))):
                    break
            runner.stop()
            if on_faults is not None and shown:
                on_faults([])
            events = runner.events
            out["injector_errors"] = list(runner.errors)
        # the phase runs to the end of its last slot (a healthy one may come last)
        time.sleep(max(gap_s / 2, t_fault + phase_s - time.time()))
        t1 = time.time()
        mon.collector.stop()
        out["questions"] = asker.result(ground_truth(events, t1))
        out["events"] = events
        out["phases"] = {"calibrate": t_cal, "clean": t_clean, "faults": t_fault, "end": t1}
        out["alerts"] = mon.alerts()
        out["diagnoses"] = [list(d) for d in mon.diagnoses]
        out["baseline_alerts"] = {name: mon.alerts(name) for name in mon.baselines}
        if moe is not None:
            moe.stop()
            out["job"] = [it.to_dict() for it in moe.iterations]
        polls = mon.collector.poll_seconds
        out["telemetry"] = {"polls": len(polls),
                            "poll_s_median": round(statistics.median(polls), 4),
                            "poll_s_max": round(max(polls), 4),
                            "diagnoses": len(mon.diagnose_s),
                            "wiring_checks": watch.checks,
                            "wiring": check_cost(watch.spans, mon.poll_times(),
                                                 out.get("job") or []),
                            "diagnose_s_median": round(statistics.median(mon.diagnose_s), 4)
                            if mon.diagnose_s else None,
                            "rows": store.count() if store is not None else None}
    finally:
        mon.collector.stop()
        if moe is not None:
            moe.stop()
        for s in streams:
            s.stop()
        if store is not None:
            store.close()
    return out


def healthy_slots(groups: int, share: float, seed: int) -> list[int]:
    """Which slots of a fault phase of ``groups`` fault slots plus ``round(share x
    groups)`` healthy ones are the healthy ones (never the first: the fault-free phase
    just ended), drawn from ``seed``."""
    extra = round(share * groups)
    if extra <= 0:
        return []
    rng = random.Random(f"healthy-{seed}")
    return sorted(rng.sample(range(1, groups + extra), extra))


def shifted(at: float, slot_s: float, healthy: list[int]) -> float:
    """A fault's start ``at`` in a schedule without healthy slots, moved to its slot among
    them: the k-th fault slot becomes the k-th slot that is not healthy."""
    k = int(at // slot_s)
    index, seen = 0, -1
    while True:
        if index not in healthy:
            seen += 1
            if seen == k:
                return at + (index - k) * slot_s
        index += 1


def _fault_dict(f: Any) -> dict[str, Any]:
    return {**f.to_dict(), "component": f.component}
