"""What code that drives a fabric may use of it while it is up: ``RunningLab``.

The replay, iperf, the fault injector, the probes, QoS, ops' collector, the scenarios and the
benchmarks all take a running lab. ``testbed.shell.lab.Lab`` (and the cluster's subclass) is
one; a unit test's fake that has these members is another. The contract is written here,
in the traffic layer, because the replay needs it and may not import the testbed above it;
a member is here because code outside the Lab uses it, so the Lab's bring-up settings and
sidecars stay the Lab's own.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from controllers.policies import Policy
from controllers.shell.client import ControllerClient
from vocab.plan import Link, WiringPlan


class NotAnswered(RuntimeError):
    """A server did not answer a look at its files in time (a loaded or emulated machine):
    not a "no", so whoever polls asks again until their own deadline."""


class AgentFiles(Protocol):
    """The files a host's programs read and write (a replay's specs and reports), seen from
    here. Each call takes ``host -> paths``; the paths are the same on every machine.

    On one machine every host shares this file system, so there is nothing to do; on a
    cluster a host on another server has its own, and ``testbed.shell.cluster`` copies the
    files over SSH, one command per server and call.
    """

    def makedirs(self, hosts: Iterable[str], path: str) -> None:
        """Folder ``path`` (made here already) exists where these hosts run programs."""
        ...

    def push(self, files: dict[str, list[str]]) -> None:
        """Files written here are there for the hosts that read them."""
        ...

    def missing(self, files: dict[str, list[str]]) -> list[str]:
        """Those of the paths that the hosts' programs have not written (yet); raises
        ``NotAnswered`` when a server could not be asked in time."""
        ...

    def pull(self, files: dict[str, list[str]]) -> None:
        """Files the hosts' programs wrote are here (those that exist)."""
        ...


class LocalFiles:
    """``AgentFiles`` when every host runs on this machine: the files are already shared."""

    def makedirs(self, hosts: Iterable[str], path: str) -> None:
        pass

    def push(self, files: dict[str, list[str]]) -> None:
        pass

    def missing(self, files: dict[str, list[str]]) -> list[str]:
        return [p for paths in files.values() for p in paths if not os.path.exists(p)]

    def pull(self, files: dict[str, list[str]]) -> None:
        pass


#: How long a program that is still running may take to say it is ready. Generous on purpose:
#: one that exits is reported at once, and one that is only slow to start (a loaded server, an
#: emulated VM, imports over SSH-mounted or cold disks) is not a failure.
AGENT_START_S = 120.0


def wait_ready(files: AgentFiles, programs: dict[str, tuple[Any, str]],
               timeout: float = AGENT_START_S, what: str = "receiver") -> None:
    """Until each host's program (``host -> (Popen, ready file)``) has touched its ready file,
    wherever it runs; ``RuntimeError`` naming the host if one exits or ``timeout`` passes
    first."""
    ready = {host: [path] for host, (_p, path) in programs.items()}
    deadline = time.monotonic() + timeout
    while left := set(_missing(files, ready, deadline)):
        for host, (p, path) in programs.items():
            if path in left and (p.poll() is not None or time.monotonic() > deadline):
                err = stderr_now(p)
                raise RuntimeError(f"{what} on {host} did not start" + (f": {err}" if err else ""))
        time.sleep(0.02)


def _missing(files: AgentFiles, paths: dict[str, list[str]], deadline: float) -> list[str]:
    """``files.missing``; a server that did not answer counts as "all still missing" until
    ``deadline``, then its error is the caller's."""
    try:
        return files.missing(paths)
    except NotAnswered:
        if time.monotonic() > deadline:
            raise
        return [p for ps in paths.values() for p in ps]


def pull_written(files: AgentFiles, reports: dict[str, list[str]], timeout: float = 10.0) -> None:
    """Bring the hosts' reports here once they are written (``timeout`` at most): a program
    on another server was stopped through its SSH session, and writes its report after."""
    deadline = time.monotonic() + timeout
    while _missing(files, reports, deadline) and time.monotonic() < deadline:
        time.sleep(0.05)
    files.pull(reports)


def signal_program(lab: Any, host: str, p: Any, marker: str, sig: str = "TERM") -> None:
    """Send ``sig`` to a program started in ``host`` (``p``: its Popen here), found there by
    ``marker``, a string only its command line holds (its report's path). A program on
    another server of a cluster is a child of an SSH session whose signals stay here, so
    the host's own shell, on that server, signals it by name instead."""
    if getattr(lab.hosts[host], "isRemote", False):
        lab.hosts[host].cmd(f"pkill -{sig} -f -- {shlex.quote(marker)}")
    elif p.poll() is None:
        p.send_signal(getattr(signal, f"SIG{sig}"))


def kill_program(lab: Any, host: str, p: Any, marker: str) -> None:
    """Kill a program started in ``host`` wherever it runs (``signal_program``), and reap
    its Popen here."""
    signal_program(lab, host, p, marker, "KILL")
    if p.poll() is None:
        p.kill()
    p.wait()


def stderr_now(p: Any) -> str:
    """What an exited program wrote to stderr, as much as is there now: never waits, because
    a process it left behind (``mnexec -d`` forks) may hold the pipe open for good."""
    if p.poll() is None:
        return "(still running)"
    told = getattr(p, "error", None)
    if callable(told):  # a ``traffic.shell.launch.Program``: it knows why it ended
        return str(told())
    if getattr(p, "stderr", None) is None:
        return ""
    os.set_blocking(p.stderr.fileno(), False)
    try:
        err = p.stderr.read() or b""
    except OSError:
        err = b""
    return err.decode(errors="replace")[-500:].strip()


@runtime_checkable
class RunningLab(Protocol):
    """A fabric that is up: its plan, its hosts, its controller and the changes a run makes."""

    plan: WiringPlan
    #: host name -> its Mininet node: ``pid`` (a process in the host's network namespace),
    #: ``popen``/``cmd`` to run programs there, ``sendCmd``/``waitOutput`` on its shell
    hosts: dict[str, Any]
    workdir: str  # this run's scratch folder, removed with the lab
    files: AgentFiles  # that folder's files where the hosts' programs run
    run_id: str  # names this run's processes and records (``astral-lab clean``)
    pmtu: int  # the RoCE path MTU a replay uses unless told otherwise
    mtu: int | None  # every emulated interface's MTU (None: the kernel's default)
    datapath: str  # the Open vSwitch datapath in use (``testbed.datapath.Datapath``)
    lb: str  # the controller's load-balancing mode: a policy name
    lb_policy: Policy  # that mode with the options the hosts apply (``qp-scaling:qps=8``)
    shape: bool  # links are rate-limited (HTB) to the plan's scaled speeds
    lossless: bool  # port queues are deep instead of drop-tail
    use_controller: bool
    controller_proc: subprocess.Popen[bytes] | None
    rest_port: int | None  # the controller's JSON API (None: no controller)
    timings: dict[str, float]  # bring-up step -> seconds ("total" when up)

    def client(self) -> ControllerClient:
        """A client of this lab's controller."""
        ...

    def health(self) -> dict[str, Any] | None:
        """The controller's health, or None when it does not answer."""
        ...

    def wait_converged(self, timeout: float | None = None) -> dict[str, Any]:
        """Until the controller has programmed every switch."""
        ...

    def reachability(self, timeout_ms: int = 1000, retries: int = 2,
                     max_inflight: int = 2048) -> Any:
        """All-pairs ping through the fabric (a ``testbed.reachability.Reachability``)."""
        ...

    def set_link(self, a: str, b: str, up: bool, lane: int = 0) -> Link:
        """Take one lane between ``a`` and ``b`` down or up; returns that link."""
        ...

    def set_links(self, links: list[Link], up: bool) -> None:
        """Take many links down or up at once."""
        ...

    def kill_controller(self) -> None:
        ...

    def restart_controller(self, wait: bool = True) -> None:
        ...

    def host(self, name: str) -> Any:
        """The Mininet node of host ``name``."""
        ...

    def stop(self) -> None:
        """Tear the fabric down (safe to call twice)."""
        ...
