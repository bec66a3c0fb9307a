"""The observer in a process of its own: the collector, detectors, baselines and agent
(``ops.shell.monitor.Monitor``) beside the job they watch, not inside it.

Why a process: in one Python process the MoE job's orchestration (starting replays,
reading their results) and the observer's polling, detection and diagnosis take turns on
one interpreter lock, so the observer's busy moments delay the job it measures. Here the
parent keeps the lab, the job and the fault injector; ``ObserverProcess`` starts a child
(``spawn``: a fresh interpreter, safe beside the parent's threads) that reads the same
counters from outside (a ``LabRecord``: the plan, the controller's port, the host shells'
and switch daemons' pids, all it needs to poll) and answers over a pipe:

* ``feed(iteration)``: each job iteration as it ends (the job-based detectors' input);
* ``calibrate(since)``, ``baseline()``, ``ask(spec, timeout)`` (the operator's questions,
  ``QuestionSpec``): requests answered in order;
* ``stop()``: the child stops polling and hands back everything it raised and answered
  (``Monitor.results``), which ``ops.evaluate.score_run`` scores.

The child dies with its parent (``PR_SET_PDEATHSIG``) and ignores the terminal's Ctrl-C:
the parent, which owns the lab, decides when it stops (``close()`` ends it in any case).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from controllers.shell.client import ControllerClient
from ops.probes import ProbeTally, Report
from ops.questions import QuestionSpec
from ops.shell.monitor import Monitor, WiringWatch
from ops.telemetry import DEFAULT_MAX_ROWS, Store
from testbed.models.forked import PR_SET_PDEATHSIG
from testbed.wiring import findings
from traffic.iterations import Iteration, iteration_values
from traffic.shell.running import RunningLab
from vocab.plan import WiringPlan

#: how long the child may take to start (a fresh interpreter importing the lab's modules)
START_S = 60.0
#: how long the child may take to stop and hand its results back
STOP_S = 60.0
#: what answering a batch of questions may take besides its poll: a question about the
#: cabling runs a wiring check first (the controller's, its frames get half a second),
#: after any check running, with a controller that may be slow to answer
LOOK_S = 60.0


@dataclass(frozen=True)
class HostPid:
    """A host shell's pid: its namespace, as the collector reads it."""

    pid: int


@dataclass(frozen=True)
class DaemonPid:
    """A switch daemon in a namespace of its own (``--switch-daemons``)."""

    netns: str | None
    pid: int

    def pids(self) -> list[int]:
        return [self.pid]


@dataclass(frozen=True)
class LabRecord:
    """What polling a running lab from another process takes: the plan, the controller's
    REST port, the host shells' pids and the switch daemons'. It answers what
    ``ops.shell.collector.Collector.for_lab`` asks of a lab; picklable."""

    plan: WiringPlan
    rest_port: int | None
    hosts: dict[str, HostPid]
    daemons: list[DaemonPid] = field(default_factory=list)

    @classmethod
    def of(cls, lab: RunningLab) -> LabRecord:
        extra = [DaemonPid(d.netns, d.pids()[-1]) for d in getattr(lab, "daemons", [])[1:]
                 if d.netns and d.pids()]
        return cls(lab.plan, lab.rest_port, {n: HostPid(h.pid) for n, h in lab.hosts.items()},
                   [DaemonPid(None, 0), *extra])

    def client(self) -> ControllerClient:
        return ControllerClient(port=self.rest_port)


class JobFeed:
    """The job's iterations as the child's collector reads them (``MoeJob.take_values``'s
    part, across the pipe), and the probe streams' reports, read from their files
    (``ops.probes``): ``(source, destination, report file)`` each."""

    def __init__(self, plan: WiringPlan | None = None,
                 probes: list[tuple[str, str, str]] | None = None) -> None:
        self._lock = threading.Lock()
        self._done: list[Iteration] = []
        self._probes = list(probes or [])
        self._tally = ProbeTally(plan) if plan is not None and self._probes else None

    def add(self, it: dict[str, Any]) -> None:
        with self._lock:
            self._done.append(Iteration(**it))

    def take_values(self, _t: float | None = None) -> dict[tuple[str, str], float]:
        with self._lock:
            done, self._done = self._done, []
        out = iteration_values(done)
        if self._tally is not None:
            out.update(self._tally.take(read_reports(self._probes)))
        return out


def read_reports(probes: list[tuple[str, str, str]]) -> list[Report]:
    """The probe streams' latest reports (one not yet written, or being replaced, is
    skipped: the next poll reads it)."""
    out = []
    for src, dst, path in probes:
        try:
            with open(path) as f:
                out.append((src, dst, json.load(f)))
        except (OSError, ValueError):
            continue
    return out


class ObserverError(RuntimeError):
    """The observer process failed or did not answer."""


class ObserverProcess:
    """The parent's side (see the module docstring). ``build`` makes the child's monitor
    (default ``monitor_for``; tests give a fake): a module-level function, since the child
    is a fresh interpreter."""

    def __init__(self, record: LabRecord, *, interval: float, store_path: str | None = None,
                 build: Callable[..., Monitor] | None = None,
                 probes: list[tuple[str, str, str]] | None = None,
                 store_rows: int = DEFAULT_MAX_ROWS) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=serve, name="ops-observer", daemon=True,
                                 args=(record, interval, store_path, child,
                                       build or monitor_for, os.getpid(), probes, store_rows))
        self._child = child
        self._send_lock = threading.Lock()  # the job's thread feeds, the main thread asks
        self._call_lock = threading.Lock()  # one request and its answer at a time
        self._next = 0  # requests are numbered: a late answer to one given up is dropped

    def start(self) -> ObserverProcess:
        self._proc.start()
        self._child.close()  # the child's end lives in the child now
        self._call(None, START_S)
        return self

    def feed(self, it: Iteration) -> None:
        """Hand one finished job iteration to the detectors (from any thread)."""
        with contextlib.suppress(OSError, ValueError), self._send_lock:
            self._conn.send(("iteration", it.to_dict()))

    def calibrate(self, since: float, timeout: float = 30.0) -> dict[str, Any]:
        return self._call(("calibrate", since, timeout), timeout + 5)

    def baseline(self) -> float | None:
        return self._call(("baseline",), 10.0)

    def ask(self, spec: QuestionSpec, timeout: float) -> list[tuple[Any, Any, float]]:
        """The questions ``spec`` draws, answered after the child's next poll (TimeoutError
        when none came in ``timeout`` s, or the answer did not come back in time)."""
        return self._call(("ask", spec, timeout), timeout + LOOK_S)

    def stop(self) -> dict[str, Any]:
        """Stop polling; everything the child raised and answered (``Monitor.results``)."""
        try:
            return self._call(("stop",), STOP_S)
        finally:
            # it answers, then stops its collector and closes its store (folding the
            # store's log into its file): let it finish before ending it
            self._proc.join(STOP_S)
            self.close()

    def close(self) -> None:
        """End the child whatever its state (idempotent)."""
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
        with contextlib.suppress(OSError):
            self._conn.close()

    def _call(self, msg: tuple[Any, ...] | None, timeout: float) -> Any:
        """Send request ``msg`` (None: wait for the child's start) and return its answer.
        A request that goes unanswered raises TimeoutError and its late answer is dropped
        when it comes; a child that is gone raises ObserverError."""
        with self._call_lock:
            self._next += 1
            me = 0 if msg is None else self._next
            answer = None
            try:
                if msg is not None:
                    with self._send_lock:
                        self._conn.send((msg[0], me, *msg[1:]))
                end = time.monotonic() + timeout
                while self._conn.poll(max(0.0, end - time.monotonic())):
                    answer = self._conn.recv()
                    if answer[1] == me:
                        break
                    answer = None  # the late answer to a request given up on
            except (EOFError, OSError) as exc:
                raise ObserverError(f"the observer process is gone (exit code "
                                    f"{self._proc.exitcode}): {exc}") from None
            if answer is None:
                raise TimeoutError(f"the observer process did not answer within {timeout:g} s"
                                   f" ({'start' if msg is None else msg[0]})")
            status, _number, value = answer
        if status != "ok":
            if str(value).startswith("TimeoutError"):  # no poll came to answer on
                raise TimeoutError(value)
            raise ObserverError(f"the observer process failed: {value}")
        return value


def monitor_for(record: LabRecord, interval: float, store: Store | None,
                feed: JobFeed) -> Monitor:
    """The child's monitor: collector, detectors, baselines, agent and wiring check."""
    client = record.client()
    return Monitor(record, store, interval, job=feed,  # type: ignore[arg-type]
                   wiring=WiringWatch(lambda: findings(record.plan, client.check_wiring()),
                                      log=lambda m: print(m, file=sys.stderr, flush=True)))


def serve(record: LabRecord, interval: float, store_path: str | None, conn: Connection,
          build: Callable[..., Monitor], parent: int,
          probes: list[tuple[str, str, str]] | None = None,
          store_rows: int = DEFAULT_MAX_ROWS) -> None:
    """The child: poll and answer until told to stop (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        return  # the parent died before we could ask to die with it
    store = Store(store_path, max_rows=store_rows) if store_path else None
    feed = JobFeed(record.plan, probes)
    try:
        mon = build(record, interval, store, feed)
        mon.collector.start()
    except Exception as exc:
        conn.send(("error", 0, f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ok", 0, "ready"))
    requests: queue.Queue[tuple[Any, ...]] = queue.Queue()
    worker = threading.Thread(target=_answer, args=(mon, requests, conn), daemon=True)
    worker.start()
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break  # the parent is gone
            if msg[0] == "iteration":
                feed.add(msg[1])  # at once: the job's thread must never wait on us
                continue
            requests.put(msg)
            if msg[0] == "stop":
                break
        worker.join(STOP_S)
    finally:
        mon.collector.stop()
        if store is not None:
            store.close()


def _answer(mon: Monitor, requests: queue.Queue[tuple[Any, ...]], conn: Connection) -> None:
    """The child's requests ``(kind, number, *args)``, in order, each answered ``("ok",
    number, value)`` or ``("error", number, why)``."""
    while True:
        kind, number, *args = requests.get()
        try:
            if kind == "calibrate":
                value: Any = mon.calibrate(*args)
            elif kind == "baseline":
                value = mon.engine.baseline
            elif kind == "ask":
                value = [(dataclasses.replace(q, read=None), a, t)  # a reader is a closure
                         for q, a, t in mon.ask(*args)]
            elif kind == "stop":
                mon.collector.stop()
                value = mon.results()
            else:
                raise ValueError(f"unknown request {kind!r}")
            conn.send(("ok", number, value))
        except Exception as exc:  # handed to the parent, which says it in one line
            conn.send(("error", number, f"{type(exc).__name__}: {exc}"))
        if kind == "stop":
            return
