"""Signals as a terminal user expects them: Ctrl-C and SIGTERM always stop the lab, and
never stop it halfway through tearing down.

Python turns SIGINT into ``KeyboardInterrupt``; ``stop_on_signals`` turns SIGTERM and SIGHUP
into ``SystemExit(128 + signal)`` the same way, so every ``with Lab(...)`` and ``finally``
unwinds for them too and the exit status is the shell's (130, 143, 129). A teardown that a
second signal interrupted would leave half a fabric behind, so teardowns run under ``held``:
signals that arrive meanwhile wait, and the first of them is delivered once it is done.
Only the main thread can set handlers; elsewhere both are no-ops.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

#: The signals that stop a verb, and the exit status each gives (128 + the signal).
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def exit_status(signum: int) -> int:
    """The shell's status for a process stopped by ``signum``: 130 for Ctrl-C, 143 for TERM."""
    return 128 + int(signum)


#: The exit statuses of those stops, as ``SystemExit`` codes.
_STOP_STATUSES = frozenset(exit_status(s) for s in STOPPING)


#: stops put off (inside an import, or swallowed by Python) and not yet raised, oldest first
_deferred: list[int] = []


def _stop(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C raises ``KeyboardInterrupt``, the others ``SystemExit(128 + signal)``; but not
    inside an import. An import runs other projects' module code, some of it behind a bare
    ``except: pass`` (Cython's memoryview registration, in NumPy's random module), where the
    stop would vanish and the command run on; there it is sent again a moment later, until
    the import is over. A short command can import to its very end, so the stop is also
    noted (``pending_stop``) for the program to act on when the command returns."""
    if _importing(frame):
        if signum not in _deferred:
            _deferred.append(signum)
        threading.Thread(target=_send_later, args=(signum,), daemon=True).start()
        return
    _deferred.clear()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(exit_status(signum))


def pending_stop() -> int | None:
    """The first stop that was put off and has not been raised yet, if any (a program's
    ``main`` asks once its command is done, so that stop is reported rather than lost)."""
    return _deferred[0] if _deferred else None


def _importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller of it is the import machinery's."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP raise ``SystemExit(128 + signal)``, SIGINT ``KeyboardInterrupt``
    as Python's own handler does (``_stop``); a stop that Python swallowed is delivered
    again (``_unswallow``).
    Call it first thing in a command's ``main``."""
    if not _main_thread():
        return
    for sig in STOPPING:
        signal.signal(sig, _stop)
    if getattr(sys.unraisablehook, "__name__", "") != _unswallow.__name__:
        _unswallow.previous = sys.unraisablehook  # type: ignore[attr-defined]
        sys.unraisablehook = _unswallow
    # The program's launcher blocks these signals before the interpreter starts (a stop in
    # Python's own start-up is otherwise a "Fatal Python error"); one that came meanwhile is
    # delivered here, to the handlers just installed.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)


def stop_inside(exc: BaseException | None) -> BaseException | None:
    """The Ctrl-C or stop that ``exc`` wraps (itself, or its cause or context), if any:
    Python 3.11 reports an exception raised in a class's ``__set_name__`` (a Ctrl-C
    landing while an imported module defines a class) as a RuntimeError caused by it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyboardInterrupt) or (
                isinstance(exc, SystemExit) and exc.code in _STOP_STATUSES):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _unswallow(unraisable: Any) -> None:
    """A handler's exception raised inside a finalizer or weakref callback (an import's
    module-lock callback, a ``__del__``) cannot propagate: Python prints "Exception ignored"
    and goes on, and that Ctrl-C would be lost. Send the signal again instead, from another
    thread a moment later, so its handler runs once the main thread is back in ordinary
    code (raised here, it would only be swallowed again); if it is, this runs again."""
    exc = unraisable.exc_value
    sig = None
    if isinstance(exc, KeyboardInterrupt):
        sig = signal.SIGINT
    elif isinstance(exc, SystemExit) and exc.code in _STOP_STATUSES:
        sig = signal.Signals(int(exc.code) - 128)  # type: ignore[arg-type]
    if sig is None:
        _unswallow.previous(unraisable)  # type: ignore[attr-defined]
        return
    if sig not in _deferred:
        _deferred.append(sig)
    threading.Thread(target=_send_later, args=(sig,), daemon=True).start()


def _send_later(sig: int) -> None:
    time.sleep(0.02)
    os.kill(os.getpid(), sig)


@contextlib.contextmanager
def held() -> Iterator[list[int]]:
    """Hold the stopping signals for the block; afterwards deliver the first that came.

    Yields the list of signals received so far (a long wait inside may look at it).
    Nested blocks pass their signal outwards, so only the outermost one delivers it.
    """
    if not _main_thread():
        yield []
        return
    got: list[int] = []

    def note(signum: int, _frame: FrameType | None) -> None:
        got.append(signum)

    old = {sig: signal.getsignal(sig) for sig in STOPPING}
    for sig in STOPPING:
        signal.signal(sig, note)
    try:
        yield got
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if got:
            signal.raise_signal(got[0])  # the restored handler raises (or records it)
