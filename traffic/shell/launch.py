"""How the replay runs the programs that send and receive, and what it asks of one.

A replay runs a receiver per destination host and a sender per source host, waits for them,
stops receivers that lag and cleans up. Who runs them differs: ``Spawner`` starts each as a
process of its own through the host's ``popen`` (one process per program and replay, for
either traffic plane), while ``traffic.shell.agents.HostAgents`` hands the same command lines
to a compiled agent per host and role started once, which a job that replays again and again
wants. The replay sees both through ``Launcher`` and ``Program``, so everything else it does
is one piece of code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from traffic.shell.running import kill_program, signal_program, stderr_now


class Program(Protocol):
    """One program the replay started in a host (a receiver or a sender)."""

    host: str

    @property
    def returncode(self) -> int | None:
        """Its exit status once it ended (None while it runs)."""
        ...

    def poll(self) -> int | None:
        """Its exit status if it has ended, else None; never waits."""
        ...

    def wait(self, timeout: float) -> int:
        """Until it ends; its exit status. Raises (``TimeoutError`` or ``subprocess``'s
        ``TimeoutExpired``) if it has not ended within ``timeout`` s."""
        ...

    def stop(self) -> None:
        """Ask it to finish now, the way a lagging receiver is stopped: it drains what is
        still arriving and writes its report."""
        ...

    def error(self) -> str:
        """Why it failed, as far as is known now (never waits)."""
        ...


class Launcher(Protocol):
    """Who runs a replay's programs."""

    def run(self, host: str, role: str, argv: list[str], marker: str) -> Program:
        """Start ``argv`` (a plane's command line; ``role`` is ``send`` or ``recv``) in
        ``host``. ``marker`` is a string only this program's command line holds (its
        report's path), to find it where it runs."""
        ...

    def end(self, programs: Iterable[Program]) -> None:
        """Nothing of ``programs`` is left running, whatever happened to the replay."""
        ...


class Spawned:
    """A program that is a process of its own, started through the host's ``popen``."""

    def __init__(self, lab: Any, host: str, popen: Any, marker: str) -> None:
        self.lab, self.host, self.popen, self.marker = lab, host, popen, marker

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode  # type: ignore[no-any-return]

    def poll(self) -> int | None:
        return self.popen.poll()  # type: ignore[no-any-return]

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)  # type: ignore[no-any-return]

    def stop(self) -> None:
        signal_program(self.lab, self.host, self.popen, self.marker)

    def error(self) -> str:
        return stderr_now(self.popen)


class Spawner:
    """``Launcher`` that starts every program as a process of its own, per replay."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab

    def run(self, host: str, role: str, argv: list[str], marker: str) -> Spawned:
        return Spawned(self.lab, host, self.lab.hosts[host].popen(argv), marker)

    def end(self, programs: Iterable[Program]) -> None:
        for p in programs:
            if isinstance(p, Spawned):
                kill_program(self.lab, p.host, p.popen, p.marker)
