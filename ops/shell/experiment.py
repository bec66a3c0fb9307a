"""The ops-eval experiment on a real fabric: a MoE job beside steady probe traffic, the
collector, detectors and agent running, a fault-free phase, then a seeded schedule of
faults (some at once); scored by the pure
``ops.evaluate.score`` (whose docstring says what each score means and the goals).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ops import questions as Q
from ops.evaluate import EvalSpec, GroundTruth, ground_truth, live_faults
from ops.shell.monitor import check_cost
from ops.shell.observer import LabRecord, ObserverProcess
from testbed import faultspec
from testbed.shell import faults as F
from testbed.shell.lab import Lab
from testbed.shell.probe import Stream
from traffic.iterations import settled
from traffic.kernels import FlowSpec, KernelTraffic
from traffic.shell.moejob import MoeJob
from traffic.shell.running import RunningLab
from vocab.lanemark import PROBE_DPORT, PROBE_SPORTS, LaneMarks, lane_slots, probe_sports
from vocab.plan import WiringPlan

#: the longest the warm-up waits for the MoE job to settle (``traffic.iterations.settled``)
SETTLE_S = 240.0
#: the longest default calibration, in polls (inside what the history keeps)
CALIBRATE_MAX_POLLS = 240


class Asker:
    """Asks ``ops.questions`` while each fault is live: once per fault, ``delay_s`` after its
    injection (detection has had its chance by then), a seeded sample of questions about
    it and about healthy components (``Q.QuestionSpec``), answered by the deterministic
    planner's tools on the live telemetry (``ask``: ``Monitor.ask``, or the observer
    process's)."""

    def __init__(self, plan: WiringPlan,
                 ask: Callable[[Q.QuestionSpec, float], list[tuple[Q.Question, Q.Answer, float]]],
                 *, seed: int, delay_s: float, job_pairs: list[tuple[str, str]],
                 relevant: int = 4, healthy: int = 3, timeout: float = 10.0,
                 clock: Callable[[], float] = time.time,
                 log: Callable[[str], None] = print) -> None:
        self.plan, self.ask, self.seed, self.delay_s = plan, ask, seed, delay_s
        self.job_pairs, self.relevant, self.healthy = job_pairs, relevant, healthy
        self.timeout, self.clock, self.log = timeout, clock, log
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
            mine = next((g for g in live if (g.kind, g.component, g.stamp)
                         == (ev["kind"], ev["component"], ev["time"])), None)
            if mine is None:
                self.missed.append(fid)
                continue
            self._ask(fid, mine, live, recent)

    def _ask(self, fid: Any, fault: GroundTruth, live: list[GroundTruth],
             recent: list[GroundTruth]) -> None:
        spec = Q.QuestionSpec(tuple(live), tuple(recent), self.seed * 1000 + int(fid),
                            tuple(self.job_pairs), self.relevant, self.healthy)
        base = {"fault_id": fid, "kind": fault.kind, "component": fault.component}
        try:
            answered = self.ask(spec, self.timeout)
        except TimeoutError as exc:
            answered = [(q, Q.Answer([], "", error=str(exc)), self.clock())
                        for q in spec.questions(self.plan)]
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
    """Who sends to whom in ``steady_traffic``: each host to one on another leaf, every
    host receiving one stream. Host i takes the first host from n/2 + 1 + r on in plan
    order (r its rank among its leaf's hosts) that no stream goes to yet, on a leaf that
    neither it nor a host of its leaf sends to (failing that, any other leaf).

    The shape makes the streams' losses tell links apart (``ops.detectors.lane_loss``).
    Past the half by one, a rail fabric's streams go across rails (GPU 4 of one block to
    GPU 5 of the other): a stream between two GPUs of one index leaves over one lane and
    comes back over its partner, so every stream crossing one would cross the other. And
    by r, the hosts of one leaf send to different leaves and receive from different
    leaves: a lane that loses one way only is then crossed that way by streams from (or
    to) two leaves, and it is the one link their paths share."""
    hosts = [h.name for h in plan.hosts]
    n = len(hosts)
    ports = plan.ports()
    leaf = {h: ports[h][0][0] for h in hosts}
    rank: dict[str, int] = {}
    count: dict[str, int] = defaultdict(int)
    for h in hosts:
        rank[h] = count[leaf[h]]
        count[leaf[h]] += 1
    taken: set[str] = set()
    sent_to: dict[str, set[str]] = defaultdict(set)  # leaf -> leaves its hosts send to
    out = []
    for i, src in enumerate(hosts):
        order = [hosts[(i + n // 2 + 1 + rank[src] + k) % n] for k in range(n)]
        free = [d for d in order if d not in taken and leaf[d] != leaf[src]]
        dst = next((d for d in free if leaf[d] not in sent_to[leaf[src]]),
                   free[0] if free else order[0])
        taken.add(dst)
        sent_to[leaf[src]].add(leaf[dst])
        out.append((src, dst))
    return out


def stream_flows(plan: WiringPlan) -> list[FlowSpec]:
    """The steady streams as flows (each host to its peer), for the fidelity guard."""
    return [FlowSpec.make(a, b, 1_000_000) for a, b in stream_pairs(plan)]


def stream_sports(plan: WiringPlan) -> list[list[int]]:
    """Each steady stream's source ports (``vocab.lanemark.probe_sports``), in
    ``stream_pairs`` order: the controller pins them to lanes, the same number on every
    uplink of the sender's leaf. Their low bits take every value a partial blackhole's
    masked match on them can (up to 1/32 of the port space), so each stream crosses
    whatever slice a switch drops; and the streams that leave or reach one leaf get
    different colours where the lane slots allow, so one such slice lands on several of
    that leaf's lanes and is not taken for a lossy lane."""
    marks = LaneMarks(plan)
    slots = lane_slots(max((len(u) for u in marks.uplinks.values()), default=1))
    used: dict[str, set[int]] = defaultdict(set)  # leaf -> colours of its streams
    out = []
    for src, dst in stream_pairs(plan):
        ends = [marks.switch_of.get(src, src), marks.switch_of.get(dst, dst)]
        taken = used[ends[0]] | used[ends[1]]
        color = min(range(slots), key=lambda c: (c in taken, sum(c in used[e] for e in ends)))
        for e in ends:
            used[e].add(color)
        out.append(probe_sports(color, slots))
    return out


#: the bound of an evaluation's telemetry store: the whole of a run of the default fabric
#: (about a thousand rows a poll), so that ``ops rescore --redetect`` replays all of it,
#: fault-free phase included; the store of a live ``ops watch`` keeps the default bound
RUN_STORE_ROWS = 4_000_000


def steady_traffic(lab: RunningLab, seconds: float, mbps_per_host: float = 16.0,
                   size: int = 1000, every: float | None = None) -> list[Stream]:
    """One probe ``Stream`` from every NIC to a NIC on another leaf, for ``seconds``.

    Host i sends to the host ``n/2`` positions later in plan order, so every flow crosses
    the spines; its source ports (``stream_sports``) ride the lanes the controller pins
    them to, evenly. Stream i goes to UDP port ``PROBE_DPORT + i`` (``vocab.lanemark``:
    the block the controller pins; 4791 is the job's, whose receivers take it, and a hot
    receiver's flood has a port of its own). At 16
    Mb/s of 1000-byte datagrams per host every lane of the default small fabric carries ~8
    Mb/s (40% of 20 Mb/s), so a lane cut below that queues. ``every``: the receivers
    rewrite their reports that often (``ops.probes`` reads them as they run). The
    streams are the compiled plane's: they run beside the job for the whole experiment,
    and Python's per-datagram work would take the machine the job and switch need.
    """
    pps = mbps_per_host * 1e6 / 8 / size / PROBE_SPORTS
    streams: list[Stream] = []
    try:
        for i, ((src, dst), sports) in enumerate(zip(stream_pairs(lab.plan),
                                                     stream_sports(lab.plan), strict=True)):
            streams.append(Stream(lab, src, dst, sports=sports, pps=pps,
                                  duration=seconds, port=PROBE_DPORT + i, size=size,
                                  every=every, plane="native").start())
    except BaseException:
        for s in streams:
            s.stop()
        raise
    return streams


def run_ops_eval(plan: WiringPlan, spec: EvalSpec, *, log: Callable[[str], None] = print,
                 lab_kw: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """Bring ``plan`` up (controller polling every ``spec.interval``) and run
    ``eval_on_lab`` on it; ``kw`` are its live arguments (job, store_path, on_faults)."""
    with Lab(plan, log=log, poll_interval=spec.interval, **(lab_kw or {})) as lab:
        return eval_on_lab(lab, spec, log=log, **kw)


def eval_on_lab(lab: RunningLab, spec: EvalSpec, *,
                job: tuple[KernelTraffic, KernelTraffic | None] | None = None,
                store_path: str | None = None, log: Callable[[str], None] = print,
                on_faults: Callable[[list[dict[str, Any]]], None] | None = None
                ) -> dict[str, Any]:
    """A calibration, a fault-free phase and a fault phase on a running lab, as ``spec``
    (``ops.evaluate.EvalSpec``) describes them; what every alert source raised in them,
    raw, for ``ops.evaluate.score_run`` to score. The names below are ``spec``'s fields.

    The schedule is ``testbed.faultspec.random_schedule(plan, kinds, per_kind * len(kinds),
    ...)`` with its knobs as drawn (``fault_params`` overrides a kind's knobs, e.g.
    ``{"link-degrade": {"fraction": 0.25}}``); faults last at most ``fault_s`` and are
    ``gap_s`` apart, and ``controls`` x as many healthy slots as fault slots, drawn from
    ``seed``, stand among them (``healthy_slots``): no fault, the same traffic, so false
    alarms are also counted late in the run, not only in the fault-free phase that comes
    first. ``severity`` (gray, hard or mixed) is the schedule's; ``kinds`` None takes every
    kind that has it. The fault-free phase lasts ``clean_s`` (None: as long as the fault
    phase, so false alarms are counted over equal times); before it,
    ``calibrate_s`` seconds (default a third of it, at least 30 polls) of clean traffic
    set the static-thresholds baseline's thresholds (``ops.baselines.calibrated``).
    ``store_path``: keep the telemetry in that SQLite file (up to RUN_STORE_ROWS rows).

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

    ``job`` (a keyword): ``(training step, decode burst)`` kernel traffic run as a MoE job
    (``traffic.shell.moejob.MoeJob``) beside the streams from the warm-up to the end, its
    iterations fed to the detectors (``out["job"]``: every iteration), each NIC sending at
    ``job_mbps`` (None: its emulated rate). ``concurrent`` > 1 injects faults in groups of
    that many at once, in different parts of the fabric. The agent checks the wiring
    (``ops.shell.monitor.WiringWatch``) on its own; ``out["telemetry"]["wiring"]`` says
    what that cost (``check_cost``). The collector, detectors, baselines and agent run in
    a process of their own (``ops.shell.observer``), so they do not slow the job.
    """
    plan = lab.plan
    per_kind, severity, concurrent = spec.per_kind, spec.severity, spec.concurrent
    fault_s, gap_s, seed, interval = spec.fault_s, spec.gap_s, spec.seed, spec.interval
    mbps_per_host, decode_every = spec.mbps_per_host, spec.decode_every
    slot_s = fault_s + gap_s
    if spec.faults is not None:  # given: one per slot, no healthy slots among them
        schedule = list(spec.faults)
        kinds = list(dict.fromkeys(f.kind for f in schedule))
        n = groups = len(schedule)
        healthy: list[int] = []
    else:
        kinds = faultspec.schedule_kinds(list(spec.kinds or ()) or None, severity)
        n = per_kind * len(kinds)
        groups = -(-n // concurrent)
        healthy = healthy_slots(groups, spec.controls, seed)
        schedule = faultspec.random_schedule(plan, kinds, n, groups * slot_s, seed, gap_s,
                                             severity=severity, concurrent=concurrent)
    phase_s = (groups + len(healthy)) * slot_s + gap_s
    schedule = [dataclasses.replace(f, at=shifted(f.at, slot_s, healthy) + gap_s / 2,
                                    **spec.fault_params.get(f.kind, {})) for f in schedule]
    warmup_s = 15 * interval
    calib_s = min(max(30 * interval, phase_s / 3), CALIBRATE_MAX_POLLS * interval) \
        if spec.calibrate_s is None else spec.calibrate_s
    clean_s = phase_s if spec.clean_s is None else spec.clean_s
    out: dict[str, Any] = {"phase_s": phase_s, "clean_s": clean_s, "interval_s": interval,
                           "mbps_per_host": mbps_per_host, "severity": severity,
                           "plan": plan.to_dict(), "calibrate_s": calib_s,
                           "healthy_slots": [gap_s / 2 + i * slot_s for i in healthy],
                           "slot_s": slot_s,
                           "schedule": [_fault_dict(f) for f in schedule]}
    streams = steady_traffic(lab, warmup_s + SETTLE_S + calib_s + clean_s + phase_s + 60,
                             mbps_per_host, every=interval)
    # the observer polls, detects and diagnoses in a process of its own, beside the job;
    # it reads the streams' reports as they are rewritten
    observer = ObserverProcess(LabRecord.of(lab), interval=interval, store_path=store_path,
                               probes=[(s.src, s.dst, s.out) for s in streams],
                               store_rows=RUN_STORE_ROWS)
    moe = MoeJob(lab, job[0], job[1], decode_every=decode_every, log=log,
                 rate_mbps=spec.job_mbps, on_iteration=observer.feed) if job else None
    try:
        observer.start()
        if moe is not None:
            moe.start()
            log(f"ops-eval: MoE job running ({len(moe.phases)} training phases per iteration, "
                f"a decode burst every {decode_every})")
        log(f"ops-eval: warm-up {warmup_s:g} s, calibration {calib_s:g} s, then a fault-free "
            f"phase of {clean_s:g} s")
        time.sleep(warmup_s)
        if moe is not None:  # the fault-free phase starts from the job's steady state
            wait = time.monotonic() + SETTLE_S
            while not settled(moe.iterations) and time.monotonic() < wait:
                time.sleep(0.5)
            log(f"ops-eval: the job {'settled' if settled(moe.iterations) else 'did not settle'}"
                f" after {len(moe.iterations)} iterations")
        t_cal = time.time()
        time.sleep(calib_s)
        out["thresholds"] = observer.calibrate(t_cal)
        t_clean = time.time()
        time.sleep(clean_s)
        t_fault = time.time()
        out["baseline_mbps"] = observer.baseline()
        log(f"ops-eval: fault phase, {n} {severity} faults ({', '.join(kinds)}) and "
            f"{len(healthy)} healthy slots")
        asker = Asker(plan, observer.ask, seed=seed,
                      delay_s=4 * interval if spec.ask_delay_s is None else spec.ask_delay_s,
                      job_pairs=stream_pairs(plan), relevant=spec.questions,
                      healthy=spec.healthy_questions, timeout=5 * interval + 5, log=log)
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
        seen = observer.stop()
        out["questions"] = asker.result(ground_truth(events, t1))
        out["events"] = events
        out["phases"] = {"calibrate": t_cal, "clean": t_clean, "faults": t_fault, "end": t1}
        for key in ("alerts", "diagnoses", "baseline_alerts"):
            out[key] = seen[key]
        if moe is not None:
            moe.stop()
            out["job"] = [it.to_dict() for it in moe.iterations]
        polls = [d for _t, d in seen["poll_times"]]
        out["telemetry"] = {"polls": len(polls),
                            "poll_s_median": round(statistics.median(polls), 4)
                            if polls else None,
                            "poll_s_max": round(max(polls), 4) if polls else None,
                            "diagnoses": len(seen["diagnose_s"]),
                            "wiring_checks": len(seen["wiring_spans"]),
                            "wiring": check_cost(seen["wiring_spans"], seen["poll_times"],
                                                 out.get("job") or []),
                            "diagnose_s_median": round(statistics.median(seen["diagnose_s"]),
                                                       4) if seen["diagnose_s"] else None,
                            "rows": seen["rows"], "observer": "process"}
    finally:
        observer.close()
        if moe is not None:
            moe.stop()
        for s in streams:
            s.stop()
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
