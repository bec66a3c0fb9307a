"""The Lab, its cluster form and the scenarios' fake all are ``RunningLab``s, checked without
starting anything: what the replay, a scenario or ops may use of a running lab exists on
each, and each method takes the arguments the contract passes it."""

from __future__ import annotations

import inspect
import time
from typing import Any

import pytest
from scen_fakes import FakeLab

from testbed.shell.cluster import ClusterLab
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.shell.running import RunningLab
from vocab.plan import WiringPlan


def _members() -> tuple[list[str], dict[str, Any]]:
    """The contract's attributes and its methods (by name)."""
    methods = {k: v for k, v in vars(RunningLab).items()
               if callable(v) and not k.startswith("_")}
    return sorted(RunningLab.__annotations__), methods


def _takes(impl: Any, contract: Any) -> list[str]:
    """The contract's parameters (name, and its default where it has one) that ``impl``
    does not accept the same way."""
    got = inspect.signature(impl).parameters
    bad = []
    for name, p in inspect.signature(contract).parameters.items():
        if name not in got:
            bad.append(f"{name}: missing")
        elif p.default is not inspect.Parameter.empty and got[name].default != p.default:
            bad.append(f"{name}: default {got[name].default!r}, not {p.default!r}")
    return bad


@pytest.fixture(scope="module")
def plan() -> Any:
    return build("astral3", servers=2, gpus=2, servers_per_block=2)


@pytest.mark.parametrize("make", [Lab, lambda plan: ClusterLab(plan, "here", user="lab"),
                                  FakeLab], ids=["Lab", "ClusterLab", "FakeLab"])
def test_each_lab_has_what_code_outside_it_uses(make: Any, plan: WiringPlan) -> None:
    lab = make(plan)  # a Lab's constructor only records its settings: nothing starts
    cls = type(lab)
    attrs, methods = _members()
    assert attrs and methods
    missing = [a for a in attrs + sorted(methods) if not hasattr(lab, a)]
    assert not missing, f"{cls.__name__} lacks {missing}"
    assert isinstance(lab, RunningLab)
    mismatched = {name: _takes(getattr(cls, name), fn) for name, fn in methods.items()
                  if _takes(getattr(cls, name), fn)}
    assert not mismatched, f"{cls.__name__}: {mismatched}"


def test_the_check_finds_a_lab_that_lacks_a_member(plan: WiringPlan) -> None:
    class Partial(FakeLab):
        def set_link(self, a: str, b: str) -> Any:  # type: ignore[override]
            return None

    lab = FakeLab(plan)
    del lab.workdir
    assert not isinstance(lab, RunningLab)
    assert _takes(Partial.set_link, RunningLab.set_link) == ["up: missing", "lane: missing"]


def test_wait_ready_waits_for_a_slow_program_and_reports_an_exited_one_at_once() -> None:
    from traffic.shell import running

    class Files(running.LocalFiles):
        def __init__(self, polls: int) -> None:
            self.polls = polls

        def missing(self, files: dict[str, list[str]]) -> list[str]:
            self.polls -= 1
            return [p for paths in files.values() for p in paths] if self.polls > 0 else []

    class Program:
        def __init__(self, code: int | None) -> None:
            self.code, self.stderr = code, None

        def poll(self) -> int | None:
            return self.code

    slow = Files(polls=5)
    running.wait_ready(slow, {"h1": (Program(None), "/x/out.ready")})
    assert slow.polls == 0  # asked until the file was there, no deadline reached
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="receiver on h2 did not start"):
        running.wait_ready(Files(polls=10**9), {"h2": (Program(1), "/x/out.ready")})
    assert time.monotonic() - t0 < running.AGENT_START_S
