"""Run a function over tasks in forked worker processes, and never leave one behind.

The flow model runs its policies side by side, one forked process each (``perflow``).
``multiprocessing.Pool`` was not safe to stop: its ``terminate()`` takes a lock that an
idle worker holds while it waits for a task (so stopping could hang), and a worker forked
while a Ctrl-C was arriving died of ``KeyboardInterrupt`` before its initializer ran (a
``KeyboardInterrupt`` in the middle of starting workers left the rest running). This
runner is small enough to reason about:

* each worker is forked with SIGINT, SIGTERM and SIGHUP blocked in the forking thread and
  with Python-level handlers that only note the signal, so no signal lands between the
  fork and the parent recording the worker's pid; the child then ignores SIGINT (Ctrl-C is
  the parent's to handle), takes the default action for SIGTERM and SIGHUP, asks the
  kernel to kill it when the parent dies, and only then unblocks them;
* a worker sends framed pickles over its own pipe (progress notes, then the result or its
  exception) and leaves with ``os._exit``, whatever happens; the parent reads every pipe
  until EOF with ``select`` (a result can exceed the pipe buffer) and reaps each worker;
* however the parent stops (``KeyboardInterrupt``, the CLI's ``SystemExit`` on SIGTERM,
  a worker's error), it SIGKILLs every live worker, reaps them all, and re-raises. A
  worker's exception is raised again in the parent, its traceback as the cause.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import struct
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from testbed.shell.signals import STOPPING

T = TypeVar("T")
R = TypeVar("R")

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_HEADER = struct.Struct("!BQ")  # message kind, payload length
_PROGRESS, _RESULT, _ERROR = 1, 2, 3


class RemoteTraceback(Exception):
    """A worker's traceback, as the ``__cause__`` of its exception raised in the parent."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class WorkerError(RuntimeError):
    """A worker died without reporting (killed by a signal, or its result would not
    pickle)."""


def fork_available() -> bool:
    """Whether this platform can fork workers (Linux can; elsewhere tasks run in turn)."""
    return hasattr(os, "fork") and hasattr(signal, "pthread_sigmask")


@contextmanager
def _signals_held() -> Iterator[set[signal.Signals]]:
    """Stop signals noted instead of acted on (Python level) and blocked (this thread)
    for the duration; then handled as they would have been, once, in order.

    Blocking alone is not enough: another thread (NumPy's BLAS pool) may take a
    process-wide signal and trip Python's flag, and Python would run the handler
    between two bytecodes, e.g. right after ``os.fork()`` returned a pid not yet recorded.
    Yields the signal mask this thread had before (a forked child restores it).
    """
    noted: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    saved: dict[int, Any] = {}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        if main:
            for s in STOPPING:
                saved[s] = signal.signal(s, lambda signum, _frame: noted.append(signum))
        yield old_mask
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    for s in dict.fromkeys(noted):  # once each, first first
        handler = signal.getsignal(s)
        if handler == signal.SIG_DFL:
            os.kill(os.getpid(), s)
        else:
            _act(s, handler, None)


def _act(signum: int, handler: Any, frame: Any) -> None:
    """What ``handler`` (as ``signal.getsignal`` gives it) would do with ``signum``."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_IGN:
        return
    elif signum == signal.SIGINT:
        raise KeyboardInterrupt
    else:
        raise SystemExit(128 + signum)


def _die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGKILL when the parent dies; leave now if it already has."""
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _send(fd: int, kind: int, payload: bytes) -> None:
    data = _HEADER.pack(kind, len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _child(fn: Callable[..., Any], task: Any, wfd: int, parent: int, old_mask: Any) -> None:
    """In the forked worker: signals as the module docstring says, run, report, exit."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        _die_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        lock = threading.Lock()

        def progress(note: Any) -> None:
            payload = pickle.dumps(note)
            with lock:
                _send(wfd, _PROGRESS, payload)

        try:
            result = fn(task, progress)
            payload, kind = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL), _RESULT
        except BaseException as exc:  # noqa: BLE001  (reported to the parent, which raises)
            tb = "".join(traceback.format_exception(exc))
            try:
                payload = pickle.dumps((exc, tb))
                pickle.loads(payload)
            except Exception:  # noqa: BLE001  (an exception that does not survive pickling)
                payload = pickle.dumps((WorkerError(f"{type(exc).__name__}: {exc}"), tb))
            kind = _ERROR
        with lock:
            _send(wfd, kind, payload)
        code = 0
    finally:
        os._exit(code)


class _Worker:
    def __init__(self, index: int, pid: int, fd: int) -> None:
        self.index, self.pid, self.fd = index, pid, fd
        self.buf = bytearray()
        self.result: tuple[int, bytes] | None = None


def _spawn(fn: Callable[..., Any], task: Any, index: int, live: dict[int, _Worker]) -> None:
    """Fork one worker for ``task``; its record is in ``live`` before any signal is acted on."""
    rfd, wfd = os.pipe()
    try:
        with _signals_held() as mask:
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:  # the worker: never returns into the caller's code
                try:
                    os.close(rfd)
                    for w in live.values():
                        os.close(w.fd)
                    _child(fn, task, wfd, parent, mask)
                finally:
                    os._exit(1)
            live[rfd] = _Worker(index, pid, rfd)
    except BaseException:
        if rfd not in live:
            os.close(rfd)
        raise
    finally:
        os.close(wfd)


def _kill_all(live: dict[int, _Worker]) -> None:
    """SIGKILL every live worker, reap it, close its pipe; a second Ctrl-C meanwhile is
    acted on only when they are all gone."""
    with _signals_held():
        for w in live.values():
            with suppress(ProcessLookupError):
                os.kill(w.pid, signal.SIGKILL)
        for w in list(live.values()):
            with suppress(ChildProcessError):
                os.waitpid(w.pid, 0)
            os.close(w.fd)
            del live[w.fd]


def _frames(w: _Worker) -> Iterator[tuple[int, bytes]]:
    """Complete messages in a worker's buffer, removed from it."""
    while len(w.buf) >= _HEADER.size:
        kind, n = _HEADER.unpack_from(w.buf)
        if len(w.buf) < _HEADER.size + n:
            return
        payload = bytes(w.buf[_HEADER.size:_HEADER.size + n])
        del w.buf[:_HEADER.size + n]
        yield kind, payload


def map_forked(fn: Callable[[T, Callable[[Any], None]], R], tasks: Sequence[T], jobs: int,
               progress: Callable[[int, Any], None] | None = None) -> list[R]:
    """``[fn(task, note) for task in tasks]``, at most ``jobs`` tasks at once in forked
    workers (in this process, in turn, when ``jobs`` <= 1 or fork is unavailable).

    ``fn`` gets the task and a ``note`` function: whatever it passes (picklable) reaches
    ``progress(task index, note)`` in the parent while the task runs. Results come back
    in task order; the first worker error stops the rest and is raised here.
    """
    report = progress or (lambda _i, _n: None)
    if jobs <= 1 or len(tasks) <= 1 or not fork_available():
        return [fn(t, lambda note, i=i: report(i, note)) for i, t in enumerate(tasks)]
    results: list[Any] = [None] * len(tasks)
    live: dict[int, _Worker] = {}
    nxt = 0
    try:
        while nxt < len(tasks) or live:
            while nxt < len(tasks) and len(live) < jobs:
                _spawn(fn, tasks[nxt], nxt, live)
                nxt += 1
            ready, _, _ = select.select(list(live), [], [])
            for fd in ready:
                w = live[fd]
                chunk = os.read(fd, 1 << 20)
                w.buf += chunk
                for kind, payload in _frames(w):
                    if kind == _PROGRESS:
                        report(w.index, pickle.loads(payload))
                    else:
                        w.result = (kind, payload)
                if chunk:
                    continue
                os.waitpid(w.pid, 0)
                os.close(fd)
                del live[fd]
                if w.result is None:
                    raise WorkerError(f"worker for task {w.index} died without a result")
                kind, payload = w.result
                if kind == _ERROR:
                    exc, tb = pickle.loads(payload)
                    raise exc from RemoteTraceback(tb)
                results[w.index] = pickle.loads(payload)
    except BaseException:
        _kill_all(live)
        raise
    return results


__all__ = ["map_forked", "fork_available",
           "RemoteTraceback", "WorkerError"]
