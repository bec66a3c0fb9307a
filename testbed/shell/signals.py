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
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: The signals that stop a verb, and the exit status each gives (128 + the signal).
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def exit_status(signum: int) -> int:
    """The shell's status for a process stopped by ``signum``: 130 for Ctrl-C, 143 for TERM."""
    return 128 + int(signum)


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(exit_status(signum))


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP raise ``SystemExit(128 + signal)``; SIGINT keeps Python's
    ``KeyboardInterrupt``. Call it first thing in a command's ``main``."""
    if not _main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)


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
