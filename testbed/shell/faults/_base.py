"""What the injector (``testbed.shell.faults``) and its kind modules share: the error, the
handle of an injected fault and the stoppable pause. Here so that a kind module imports
neither the injector nor another kind's module."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from testbed.faultspec import Fault
from testbed.shell.preflight import LabError


class FaultError(LabError):
    """A fault cannot be applied or undone here; the message says what is missing or wrong."""


@dataclass(eq=False)
class Handle:
    """One injected fault: its resolved description, state and what undo needs."""

    id: int
    fault: Fault
    component: str
    injected_at: float = 0.0  # time.time()
    state: str = "active"  # active -> undoing -> undone (or failed)
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _worker: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    @property
    def active(self) -> bool:
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the fault has been undone (by a timer, a flap's end, or ``undo``)."""
        return self._done.wait(timeout)


def _pause(stop: threading.Event, seconds: float, clock: Callable[[], float]) -> bool:
    """Sleep ``seconds`` of ``clock`` time; True if ``stop`` was set meanwhile."""
    end = clock() + seconds
    while True:
        left = end - clock()
        if left <= 0:
            return stop.is_set()
        if stop.wait(min(left, 0.05)):
            return True
