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
import subprocess
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from controllers.policies import Policy
from controllers.shell.client import ControllerClient
from vocab.plan import Link, WiringPlan


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
        """Those of the paths that the hosts' programs have not written (yet)."""
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
