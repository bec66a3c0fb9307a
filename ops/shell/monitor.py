"""The observer of ops-eval: the collector, the detectors, the baselines and the agent
after every poll (``Monitor``), the agent's own look at the cabling (``WiringWatch``), and
the operator's questions put to it (``Q.QuestionSpec``, ``answer_questions``). It runs in a
process of its own beside the job (``ops.shell.observer``) or, in tests, in the caller's.
Nothing here knows the faults: the experiment (``ops.shell.experiment``) injects and scores.
"""

from __future__ import annotations

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
from ops.shell.collector import Collector
from ops.telemetry import Store
from testbed.wiring import miswired
from traffic.shell.moejob import MoeJob
from traffic.shell.running import RunningLab
from vocab.evidence import Evidence

#: the agent checks the cabling against the plan this often (s) ...
WIRING_EVERY_S = 10.0
#: ... and as soon as this long after the last check when the job suffers and no alert
#: says where (s)
WIRING_SOON_S = 3.0


class WiringWatch:
    """The wiring check as the agent uses it: ``check()`` asks the controller for one
    (``ControllerClient.check_wiring``, read by ``testbed.wiring.findings``; tests give
    a stand-in) and returns its findings.

    The agent looks at the cabling on its own: every ``every_s`` whatever the alerts say,
    and sooner (``soon_s`` after the last check) when the job suffers and no alert says
    where (``unexplained``): both fault-blind. ``maybe(now, urgent)`` starts a check in a
    thread of its own unless one runs or ran too recently; the collector calls it every
    poll, and a check (a probe frame out of every switch link end, half a second for them
    to come back) never holds up its poll; sooner too while a miswired alert is open
    (``check_soon``), to see the repair. Each result is handed to the collector's next
    poll (``take_values``, which never waits for a check) as the miswired detector's
    telemetry (``ops.detectors.miswired``). ``look()`` is an operator's own check (a
    question's "is the wiring as planned?"): its result answers the question and never
    reaches the detectors, so what the harness asks cannot help the score. ``spans`` keeps
    when each check ran (wall clock), to measure what checking costs the poll and the job.
    """

    def __init__(self, check: Callable[[], list[Any]], every_s: float = WIRING_EVERY_S,
                 log: Callable[[str], None] = print, soon_s: float = WIRING_SOON_S) -> None:
        self.check, self.every_s, self.soon_s, self.log = check, every_s, soon_s, log
        self.checks = 0
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()  # one check at a time
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
        found = self._run()
        values = {(MISWIRED.COMPONENT, MISWIRED.CHECKED): 1.0}
        values.update({(link, MISWIRED.METRIC): 1.0 for link in miswired(found)})
        with self._result:
            self._pending = values
        return found

    def look(self) -> list[Any]:
        """Check now for an operator's question; the result never reaches the detectors."""
        return self._run()

    def maybe(self, now: float, urgent: bool = False, at_once: bool = False) -> bool:
        """Start a check in the background unless one runs or ran within ``every_s``
        (``urgent``: within ``soon_s``; ``at_once``: unless one runs)."""
        gap = 0.0 if at_once else min(self.soon_s, self.every_s) if urgent else self.every_s
        if self._busy.is_set() or now - self._last < gap:
            return False
        self._busy.set()
        self._last = now
        threading.Thread(target=self._background, name="wiring-check", daemon=True).start()
        return True

    def _background(self) -> None:
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


def check_soon(active: Iterable[Any]) -> bool:
    """Whether the next wiring check is due sooner: the loss is ``unexplained``, or a
    miswired alert is open, so the check after the recabling says it took and the alert
    clears then, not at the next periodic check."""
    active = list(active)
    return unexplained(active) or any(a.detector == MISWIRED.NAME for a in active)


def unexplained(active: Iterable[Any]) -> bool:
    """The job suffers (a symptom alert is open) and no open alert says where; or packets
    are lost at a switch and no open alert names a link or NIC of it: a miswired lane
    delivers its frames through the wrong spine, so they are lost at its leaf and no one
    link explains them."""
    active = list(active)
    kinds = [alert_kind(a.detector) for a in active]
    if any(k is not None and k.symptom for k in kinds) and \
            all(k is not None and k.symptom for k in kinds):
        return True
    return bool(at_switch(active)) and not any("~" in a.component for a in active)


def at_switch(alerts: Iterable[Any]) -> list[Any]:
    """The alerts that place lost packets at a switch, no link of it named: how a
    miswiring first shows (its frames are lost at its leaf). A new one has the wiring
    checked at once, not at the next period: until the check, the leaf is all the
    agent can name."""
    out = []
    for a in alerts:
        k = alert_kind(a.detector)
        if k is not None and not k.symptom and Evidence.LOSS in k.evidence \
                and "~" not in a.component:
            out.append(a)
    return out


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
            opened = self.engine.step(self.collector.history)
            if self.wiring is not None:  # the agent's own period, sooner when unexplained
                active = list(self.engine.active.values())
                self.wiring.maybe(time.monotonic(), urgent=check_soon(active),
                                  at_once=unexplained(active) and bool(at_switch(opened)))
            for b in self.baselines.values():
                b.step(self.collector.history)
            if self.engine.active:
                tools = Tools(self.lab.plan, history=self.collector.history, engine=self.engine,
                              client=self.collector.client)
                t0 = time.monotonic()
                d = diagnose(tools, "what is wrong?", probe=False)
                self.diagnose_s.append(time.monotonic() - t0)
                self.diagnoses.append(d.record(t))
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

    def ask(self, spec: Q.QuestionSpec, timeout: float) -> list[tuple[Q.Question, Q.Answer,
                                                                      float]]:
        """The operator's questions ``spec`` draws, answered on the live telemetry right after
        the next poll; a question about the cabling gets its own look (``WiringWatch.look``,
        here, not in the collector's thread), which never reaches the detectors."""
        qs = spec.questions(self.lab.plan)
        found = None
        if self.wiring is not None and any(q.read is Q.miswired for q in qs):
            try:
                found = self.wiring.look()
            except Exception as exc:  # the question is answered with the error
                self.wiring.log(f"ops-eval: wiring check failed: {exc}")
        return self.consult(lambda make: Q.answer_questions(qs, make, found), timeout)

    def results(self) -> dict[str, Any]:
        """Everything this monitor raised, answered and measured, for ``ops_eval.json``."""
        return {"alerts": self.alerts(),
                "baseline_alerts": {name: self.alerts(name) for name in self.baselines},
                "diagnoses": [list(d) for d in self.diagnoses],
                "diagnose_s": list(self.diagnose_s), "poll_times": self.poll_times(),
                "wiring_spans": list(self.wiring.spans) if self.wiring else [],
                "rows": self.store.count() if self.store is not None else None}

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
