"""Persistent compiled agents: one ``astral-pktio serve`` per host and role, started once.

A replay that starts its own programs starts a receiver per destination and a sender per
source host, each a fork of this (large) Python process through the host's ``popen``; a MoE
job replaying two or three times an iteration would spend much of the machine starting
programs, beside the fabric it measures. ``HostAgents`` starts each host's sender and
receiver once, in the host's namespace, and hands them command lines over a pipe: the same
``send ...`` / ``recv ...`` arguments as the one-shot programs, the same files written, one
``done RC`` (or ``error MESSAGE``) line back per command. SIGUSR1 stops the command in
flight (a receiver drains and reports, as SIGTERM makes a one-shot one do); the end of stdin
or SIGTERM ends an agent. ``replay(..., agents=...)`` runs its programs this way
(``HostAgents`` is a ``traffic.shell.launch.Launcher``).

An agent stops when the thread that started it ends (``PR_SET_PDEATHSIG`` follows the
thread): start them from a thread that lives as long as they are used. One that is gone is
started again when next given a command, and ``spawned`` counts every start. One thread at
a time gives commands; ``close`` may come from another (it ends them all).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from traffic.shell import pktio as helper
from traffic.shell.launch import Program
from traffic.shell.running import AGENT_START_S, kill_program, signal_program

ROLES = ("send", "recv")
#: how long an agent asked to stop its command (or to end) may take: a receiver drains what
#: is still arriving for up to two seconds, then writes its report
STOP_S = 10.0
#: a stop is signalled again this often until the command answers: one sent just as the
#: previous command ended is, rightly, not applied to the next
RESIGNAL_S = 1.0


class AgentError(RuntimeError):
    """An agent could not be started, or was given a command it cannot take now."""


@dataclass(frozen=True)
class Reply:
    """An agent's answer to a command: what the one-shot program would have exited with,
    and, when it failed, why."""

    rc: int
    message: str = ""


class _Agent:
    """One ``serve`` process: its pipes, what it has said, and whether a command is out."""

    def __init__(self, host: str, role: str, proc: Any, tag: str, log: str) -> None:
        self.host, self.role, self.proc, self.tag, self.log = host, role, proc, tag, log
        self.fd: int = proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.partial = b""
        self.answers: list[str] = []
        self.ready = False  # it said so: its signal handlers are in place
        self.eof = False  # its stdout is closed: it is gone
        self.busy = False  # a command was written and its answer not read yet
        self.stopping = 0.0  # when the command in flight was last told to stop (0: not)

    def fill(self) -> None:
        """Read what it has written (never waits)."""
        while not self.eof:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.eof = True
                break
            *lines, self.partial = (self.partial + data).split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace").strip()
                if line == "ready":
                    self.ready = True
                elif line:
                    self.answers.append(line)

    def alive(self) -> bool:
        return not self.eof and self.proc.poll() is None

    def log_tail(self) -> str:
        try:
            with open(self.log, "rb") as fh:
                return fh.read()[-500:].decode(errors="replace").strip()
        except OSError:
            return ""


def _reply(line: str) -> Reply:
    """A ``done RC`` or ``error MESSAGE`` line as a ``Reply``."""
    word, _, rest = line.partition(" ")
    if word == "done" and rest.strip().lstrip("-").isdigit():
        return Reply(int(rest))
    if word == "error":
        return Reply(2, rest.strip())  # the one-shot program's exit status for the same
    return Reply(-1, f"unexpected answer {line[:200]!r}")


class AgentRun:
    """One command given to a host's agent, seen as a ``launch.Program`` by the replay."""

    def __init__(self, agents: HostAgents, agent: _Agent) -> None:
        self.agents, self._agent = agents, agent
        self.host, self.role = agent.host, agent.role
        self.reply: Reply | None = None

    @property
    def returncode(self) -> int | None:
        return None if self.reply is None else self.reply.rc

    def poll(self) -> int | None:
        if self.reply is None:
            self.reply = self.agents._answer(self._agent)
        return self.returncode

    def wait(self, timeout: float) -> int:
        if self.reply is None:
            self.reply = self.agents._wait(self._agent, timeout)
        return self.reply.rc

    def stop(self) -> None:
        if self.reply is None:
            self.agents._stop(self._agent)

    def error(self) -> str:
        return "" if self.reply is None else self.reply.message


class HostAgents:
    """A compiled sender and receiver per host, started once and given command after
    command (module docstring). ``close()`` (or leaving a ``with`` block) ends them all."""

    def __init__(self, lab: Any, exe: str | None = None, log_dir: str | None = None) -> None:
        self.lab = lab
        self.exe = exe or helper.path()
        self.log_dir = log_dir or lab.workdir
        self.agents: dict[tuple[str, str], _Agent] = {}
        self.spawned = 0  # agents started, restarts included
        self.closed = False
        self._lock = threading.Lock()

    # --- starting and ending ---------------------------------------------------------------
    def start(self, senders: Iterable[str] = (), receivers: Iterable[str] = (),
              timeout: float = AGENT_START_S) -> HostAgents:
        """Start a sending agent in each of ``senders`` and a receiving one in each of
        ``receivers`` (those not running already), and wait until each says it is ready;
        on any failure every agent is ended and the error raised."""
        try:
            started = [self._get(h, "send") for h in senders]
            started += [self._get(h, "recv") for h in receivers]
            deadline = time.monotonic() + timeout
            for a in started:
                self._until_ready(a, deadline)
        except BaseException:
            self.close()
            raise
        return self

    def _get(self, host: str, role: str) -> _Agent:
        """The host's agent for ``role``, started (again) if it is not running."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES} (got {role!r})")
        with self._lock:
            if self.closed:
                raise AgentError("these agents are closed")
            a = self.agents.get((host, role))
            if a is not None and not a.busy and not a.alive():
                self._drop(a)
                a = None
            if a is None:
                a = self._spawn(host, role)
            return a

    def _spawn(self, host: str, role: str) -> _Agent:
        self.spawned += 1
        run = getattr(self.lab, "run_id", "lab")
        tag = f"astral-agent-{run}-{host}-{role}-{os.getpid()}-{self.spawned}"
        log = os.path.join(self.log_dir, f"agent-{host}-{role}.log")
        with open(log, "ab") as err:  # serve writes nothing there unless something breaks
            proc = self.lab.hosts[host].popen([self.exe, "serve", "--tag", tag],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=err)
        a = _Agent(host, role, proc, tag, log)
        self.agents[(host, role)] = a
        return a

    def _until_ready(self, a: _Agent, deadline: float) -> None:
        while True:
            a.fill()
            if a.ready:
                return
            if not a.alive() or time.monotonic() > deadline:
                why = a.log_tail() or ("it exited" if not a.alive() else "no answer")
                raise AgentError(f"the {a.role} agent on {a.host} did not start: {why}")
            _readable(a.fd, min(0.2, max(0.0, deadline - time.monotonic())))

    def _drop(self, a: _Agent) -> None:
        """End one agent at once (it is started again when next used)."""
        if self.agents.get((a.host, a.role)) is a:
            del self.agents[(a.host, a.role)]
        _close_pipe(a.proc.stdin)
        kill_program(self.lab, a.host, a.proc, a.tag)
        a.eof = True  # before its pipe's number can be another file's
        _close_pipe(a.proc.stdout)

    def close(self) -> None:
        """End every agent: the command in flight stops and reports, then the agent exits;
        one that has not within ``STOP_S`` is killed. Safe to call twice."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            agents = list(self.agents.values())
            self.agents.clear()
        for a in agents:
            _close_pipe(a.proc.stdin)  # the end of its commands
            with contextlib.suppress(Exception):  # a host already gone: the kill reaps it
                signal_program(self.lab, a.host, a.proc, a.tag, "TERM")
        deadline = time.monotonic() + STOP_S
        for a in agents:
            with contextlib.suppress(subprocess.TimeoutExpired):
                a.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            kill_program(self.lab, a.host, a.proc, a.tag)
            a.eof = True
            _close_pipe(a.proc.stdout)

    def __enter__(self) -> HostAgents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pids(self) -> dict[tuple[str, str], int]:
        """(host, role) -> the agent's process id here (what started it: ``mnexec`` execs
        the agent, so on one machine this is the agent itself)."""
        return {k: a.proc.pid for k, a in self.agents.items()}

    # --- commands --------------------------------------------------------------------------
    def command(self, host: str, role: str, argv: Sequence[str]) -> None:
        """Have the host's ``role`` agent run ``argv`` (``["recv", "--intf", ...]``, the
        one-shot program's arguments); ``wait`` reads the answer. One command at a time."""
        self._command(host, role, argv)

    def _command(self, host: str, role: str, argv: Sequence[str]) -> _Agent:
        if not argv or argv[0] != role:
            raise ValueError(f"a {role} agent runs '{role} ...' commands (got {list(argv)})")
        if any(not a or any(c.isspace() for c in a) for a in argv):
            raise ValueError(f"agent arguments are blank-separated: none may be empty or hold "
                             f"blanks ({list(argv)})")
        line = (" ".join(argv) + "\n").encode()
        for attempt in (1, 2):
            a = self._get(host, role)
            if a.busy:
                raise AgentError(f"the {role} agent on {host} has a command in flight")
            try:
                a.proc.stdin.write(line)
                a.proc.stdin.flush()
            except (OSError, ValueError) as exc:  # it died since we looked: once more
                a.eof = True
                if attempt == 2:
                    raise AgentError(f"the {role} agent on {host} is gone: {exc}") from exc
                continue
            a.busy, a.stopping = True, 0.0
            return a
        raise AssertionError("unreachable")

    def run(self, host: str, role: str, argv: list[str], marker: str) -> AgentRun:
        """``launch.Launcher``: the plane's command line (its program, then ``role`` and its
        options) given to the host's agent. ``marker`` is not needed: the agent's tag finds
        it."""
        if len(argv) < 2 or argv[1] != role:
            raise ValueError(f"not a {role} command line: {argv}")
        return AgentRun(self, self._command(host, role, argv[1:]))

    def end(self, programs: Iterable[Program]) -> None:
        """``launch.Launcher``: every command of ``programs`` still running is stopped and
        answers; an agent that does not within ``STOP_S`` is killed (and started again when
        next used), so none is left with a command in flight."""
        runs = [p for p in programs if isinstance(p, AgentRun) and p.reply is None]
        for p in runs:
            p.stop()
        deadline = time.monotonic() + STOP_S
        for p in runs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except (TimeoutError, AgentError):
                with self._lock:
                    self._drop(p._agent)

    def poll(self, host: str, role: str) -> Reply | None:
        """The answer to the command in flight, if it has come (never waits)."""
        return self._answer(self._busy(host, role))

    def wait(self, host: str, role: str, timeout: float) -> Reply:
        """Until the command in flight answers (``TimeoutError`` after ``timeout`` s)."""
        return self._wait(self._busy(host, role), timeout)

    def stop_current(self, host: str, role: str) -> None:
        """Stop the command in flight (SIGUSR1): a receiver drains and reports, a sender
        reports what it sent. The agent waits for the next command."""
        a = self.agents.get((host, role))
        if a is not None and a.busy:
            self._stop(a)

    def _busy(self, host: str, role: str) -> _Agent:
        a = self.agents.get((host, role))
        if a is None or not a.busy:
            raise AgentError(f"the {role} agent on {host} has no command in flight")
        return a

    def _answer(self, a: _Agent) -> Reply | None:
        if not a.busy:
            raise AgentError(f"the {a.role} agent on {a.host} has no command in flight")
        a.fill()
        if a.answers:
            a.busy = False
            return _reply(a.answers.pop(0))
        if a.alive():
            return None
        a.busy, a.eof = False, True
        status = a.proc.poll()
        tail = a.log_tail()
        return Reply(status if status else -1, f"the {a.role} agent on {a.host} exited "
                     f"(status {status})" + (f": {tail}" if tail else ""))

    def _wait(self, a: _Agent, timeout: float) -> Reply:
        deadline = time.monotonic() + timeout
        while True:
            reply = self._answer(a)
            if reply is not None:
                return reply
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError(f"the {a.role} agent on {a.host} did not answer within "
                                   f"{timeout:g} s")
            if a.stopping and now - a.stopping >= RESIGNAL_S:
                self._stop(a)
            _readable(a.fd, min(deadline - now, RESIGNAL_S))

    def _stop(self, a: _Agent) -> None:
        if not a.ready:  # before its handlers are in place SIGUSR1 would end it
            try:
                self._until_ready(a, time.monotonic() + STOP_S)
            except AgentError:
                return  # gone or stuck: the answer (or end()) says so
        signal_program(self.lab, a.host, a.proc, a.tag, "USR1")
        a.stopping = time.monotonic()


def _readable(fd: int, timeout: float) -> None:
    """Until ``fd`` has something to read (or is closed), at most ``timeout`` s."""
    waiter = select.poll()  # not select(): a big fabric's pipes go past FD_SETSIZE
    waiter.register(fd, select.POLLIN | select.POLLHUP)
    waiter.poll(max(0, int(timeout * 1000)))


def _close_pipe(pipe: Any) -> None:
    if pipe is not None:
        with contextlib.suppress(OSError):  # a write it held could not go: it is ending
            pipe.close()
