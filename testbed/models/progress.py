"""Progress of a long model run: one status line on a terminal, a line per tenth elsewhere.

A decode step on a few hundred GPUs keeps the solver busy for a while, and a person
should see that it moves and roughly when it ends, at a terminal or reading a log. The
compiled event loop runs without the GIL and counts the classes it has finished in a
small array (a *probe*, ``maxmin.events``); a ``Watch`` thread reads it twice a second
and passes a note on (in a forked policy worker, over its pipe: ``forked.map_forked``).
``Progress`` gathers the notes of every policy. On a terminal it redraws one line on
stderr once the run has lasted a couple of seconds. Anywhere else (a pipe, a log file,
a job without a terminal) it writes whole lines, and only for a run past ``LINES_AFTER``
seconds, so short runs and tests stay clean: one when that time is reached, then one per
tenth of the work done, and once, when the estimate says the run takes over a minute in
all, that estimate. Work whose cost is known before it starts (drawing a long MoE step,
``jobs.step_forecast``) is announced before it starts, when it should take over a minute,
terminal or not (``forecast``).

The estimate: a refill after departures costs about the classes still sending, so the
work behind a solve that has finished a fraction f of its classes is about
``1 - (1 - f) ** 2`` of its total. On a decode step that follows the wall clock closely
enough to estimate from, where f alone runs far behind it early on. A policy's total
time is then its elapsed time over that; policies not yet started are taken to cost the
mean of the others.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

#: A note from a task: (phase, classes finished, classes in the solve). Phases: "routing"
#: (before the solve: routing, building classes), "solving", "done".
Note = tuple[str, float, float]


def probe() -> np.ndarray:
    """A fresh probe: classes finished, events, classes in the solve (0 until it starts)."""
    return np.zeros(3)


def work_fraction(done: float, total: float) -> float:
    """Share of a solve's work behind it once ``done`` of ``total`` classes have finished
    (module docstring)."""
    if total <= 0:
        return 0.0
    f = min(max(done / total, 0.0), 1.0)
    return 1.0 - (1.0 - f) ** 2


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``1 h 2 min``: what a person reads at a glance."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


@dataclass
class TaskState:
    """What the status line knows about one task (a policy)."""

    label: str
    phase: str = "waiting"
    started: float | None = None
    finished: float | None = None
    done: float = 0.0
    total: float = 0.0

    def fraction(self) -> float:
        return 1.0 if self.phase == "done" else work_fraction(self.done, self.total)


def estimate_left(tasks: Sequence[TaskState], now: float, jobs: int) -> float | None:
    """Seconds until every task is done, or None while nothing is known to go by.

    A finished task's duration is known; a solving one's is its elapsed time over its
    work fraction (once past 2%); a task still routing or waiting is taken to cost the
    mean of those. The work left is shared by ``jobs`` workers, and never ends before
    the longest running task does.
    """
    known: list[float] = []
    left_running: list[float] = []
    unknown_running: list[float] = []
    waiting = 0
    for t in tasks:
        if t.phase == "done" and t.started is not None and t.finished is not None:
            known.append(t.finished - t.started)
        elif t.phase == "waiting" or t.started is None:
            waiting += 1
        else:
            el = now - t.started
            w = t.fraction()
            if t.phase == "solving" and w >= 0.02:
                known.append(el / w)
                left_running.append(el / w - el)
            else:
                unknown_running.append(el)
    if not known:
        return None
    mean = sum(known) / len(known)
    running = left_running + [max(mean - el, 0.0) for el in unknown_running]
    work = sum(running) + waiting * mean
    return max(max(running, default=0.0), work / max(jobs, 1))


def format_line(tasks: Sequence[TaskState], elapsed: float, left: float | None) -> str:
    """The status line: time so far and left, then each task's state."""
    parts = []
    for t in tasks:
        if t.phase == "solving":
            parts.append(f"{t.label} {100 * t.fraction():.0f}%")
        else:
            parts.append(f"{t.label} {t.phase}")
    head = f"model: {duration(elapsed)}"
    head += f", about {duration(left)} left" if left is not None else ", estimating"
    return head + " | " + ", ".join(parts)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


#: seconds after which a run writes progress lines where stderr is not a terminal
LINES_AFTER = 5.0
#: a run estimated to take longer than this in all says so, once
SAY_ESTIMATE_PAST = 60.0


class Progress:
    """The progress of one model run, from the tasks' notes (module docstring).

    Made when the run starts (its clock starts then); ``start`` names the tasks once the
    run knows them. ``enabled`` None: a status line when ``stream`` is a terminal, else
    lines (after ``lines_after`` seconds, one per tenth); True: the status line anywhere;
    False: nothing. The status line is not drawn before ``delay`` seconds, or more often
    than every ``interval`` seconds; ``close`` erases it so the report starts on a clean
    line. Thread-safe: notes come from a watch thread or from the parent of forked
    workers.
    """

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None,
                 delay: float = 2.0, interval: float = 1.0,
                 lines_after: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        tty = _isatty(self.stream)
        self.lines = enabled is None and not tty  # whole lines: a pipe, a log file
        self.enabled = True if self.lines else (tty if enabled is None else enabled)
        self.lines_after = LINES_AFTER if lines_after is None else lines_after
        self._tenths = -1  # the last tenth of the work a line was written for
        self._said_estimate = False
        self.tasks: list[TaskState] = []
        self.jobs, self.delay, self.interval, self.clock = 1, delay, interval, clock
        self.t0 = clock()
        self._drawn = 0.0
        self._width = 0
        self._lock = threading.Lock()

    def start(self, labels: Sequence[str], jobs: int = 1) -> None:
        """The tasks of this run (policy labels), ``jobs`` of them at once."""
        with self._lock:
            self.tasks = [TaskState(label) for label in labels]
            self.jobs = max(jobs, 1)

    def note(self, index: int, note: Note) -> None:
        """Task ``index`` says where it is (``Note``)."""
        phase, done, total = note
        with self._lock:
            t = self.tasks[index]
            now = self.clock()
            if t.started is None:
                t.started = now
            t.phase, t.done, t.total = phase, float(done), float(total)
            if phase == "done":
                t.finished = now
            self._draw(now)

    def forecast(self, seconds: float, what: str, basis: str) -> None:
        """Before work that should take ``seconds`` starts, one line saying so when that is
        over ``SAY_ESTIMATE_PAST``: on a terminal or not (only ``enabled=False`` silences
        it), so a run that will compute for minutes says so before it goes quiet."""
        if not self.enabled or seconds <= SAY_ESTIMATE_PAST:
            return
        with self._lock:
            self.stream.write(f"model: {what} should take about {duration(seconds)} here "
                              f"(an estimate: {basis})\n")
            self.stream.flush()

    def line(self) -> str:
        """The line as it would be drawn now."""
        now = self.clock()
        return format_line(self.tasks, now - self.t0,
                           estimate_left(self.tasks, now, self.jobs))

    def _write_line(self, now: float) -> None:
        """Lines mode: a line once past ``lines_after``, then at every tenth of the work,
        and the estimate once if the run takes over a minute in all."""
        if now - self.t0 < self.lines_after or not self.tasks:
            return
        done = sum(t.fraction() for t in self.tasks) / len(self.tasks)
        tenths = int(done * 10 + 1e-9)
        left = estimate_left(self.tasks, now, self.jobs)
        if not self._said_estimate and left is not None and \
                now - self.t0 + left > SAY_ESTIMATE_PAST:
            self._said_estimate = True
            self.stream.write(f"model: this run takes about {duration(now - self.t0 + left)} "
                              f"in all (estimate); a line per tenth done follows\n")
        if tenths > self._tenths:
            self._tenths = tenths
            self.stream.write(f"{format_line(self.tasks, now - self.t0, left)}\n")
            self.stream.flush()

    def _draw(self, now: float) -> None:
        if self.lines:
            self._write_line(now)
            return
        if not self.enabled or now - self.t0 < self.delay or \
                (self._width and now - self._drawn < self.interval):
            return
        text = format_line(self.tasks, now - self.t0, estimate_left(self.tasks, now, self.jobs))
        cols = shutil.get_terminal_size((100, 20)).columns
        text = text[:max(cols - 1, 20)]
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width, self._drawn = len(text), now

    def close(self) -> None:
        """Erase the line (if one was drawn)."""
        with self._lock:
            if self.lines:
                return
            if self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0


class Watch:
    """A thread that reads a probe twice a second and sends ``(phase, done, total)`` to
    ``send`` while a task runs; a last note when it stops."""

    def __init__(self, probe: np.ndarray, send: Callable[[Note], None],
                 interval: float = 0.5) -> None:
        self.probe, self.send, self.interval = probe, send, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="model-progress", daemon=True)

    def _note(self) -> Note:
        total = float(self.probe[2])
        return ("solving" if total > 0 else "routing", float(self.probe[0]), total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.send(self._note())

    def __enter__(self) -> Watch:
        self.send(self._note())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


__all__ = ["Progress", "Watch", "TaskState", "probe", "work_fraction", "estimate_left",
           "format_line", "duration", "Note"]
