"""How ``astral-lab`` ends when something expected goes wrong: one ``error:`` message on
stderr and a documented exit status, never a traceback; a real bug keeps its traceback.

Scenarios here are toys over a fake Lab (no fabric, no root): the error paths are the CLI's
and the scenario framework's, the same ones a real run takes.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from astral_lab import cli
from controllers.shell.client import ControllerError
from scenarios import base, common, fidelity
from scenarios.base import Param, Run, scenario
from scenarios.experiments import SCENARIOS
from testbed.shell.preflight import LabError
from testbed.topologies import build
from traffic.roce import DEFAULT_PMTU
from vocab.plan import WiringPlan


class FakeLab:
    def __init__(self, plan: WiringPlan, *_a: Any, **kw: Any) -> None:
        self.plan, self.lb, self.datapath = plan, kw.get("lb", "ecmp"), "fake"
        self.timings = {"total": 0.0}
        self.pmtu, self.mtu = DEFAULT_PMTU, None

    def __enter__(self) -> FakeLab:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.fixture
def env(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Root as far as the CLI can tell, results in tmp, a fake fabric, a small capacity."""
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(cli, "make_lab", FakeLab)  # `up`
    monkeypatch.setattr(base, "make_lab", FakeLab)  # a scenario's Run.lab
    capacity = {"hop_pps": 40_000, "measured": "fake"}
    monkeypatch.setattr(base, "calibrate", lambda *_a, **_k: capacity)
    monkeypatch.setattr(fidelity, "load_cached", lambda _pmtu=4096, _daemons=1: capacity)
    return tmp_path / "results"


@pytest.fixture
def toy() -> Any:
    """One fabric, then one of: a guarded permutation, a LabError, a bug, a ValueError, a
    controller that did not answer, one that refused a request."""
    @scenario("a toy for the CLI's error paths", Param("scale", 1e-5, "scale"),
              Param("fail", "", "lab, bug, value, unanswered or refused"), name="toy-cli")
    def toy_fn(run: Run) -> None:
        plan = build("astral3", servers=2, gpus=4, scale=run.params["scale"])
        with run.lab(plan) as lab:
            run.stage("fabric up")
            fail = run.params["fail"]
            if fail == "lab":
                raise LabError("another fabric is up on this machine (pid 1); one fabric at a "
                               "time")
            if fail == "bug":
                raise RuntimeError("a bug")
            if fail == "value":
                raise ValueError("--seconds must be > 0")
            if fail == "unanswered":
                raise ControllerError("no answer from the controller at 127.0.0.1:1 within "
                                      "120 s (timed out)", request="POST /traffic")
            if fail == "refused":
                raise ControllerError("no host zz in the plan", 400, request="GET /paths")
            run.guard(lab, common.permutation_flows(plan, 1_000_000, qps=2), "perm")
            run.row(done=1)

    SCENARIOS.add("toy-cli", toy_fn)
    yield toy_fn
    SCENARIOS.remove("toy-cli")


def _error(stderr: str) -> list[str]:
    """What follows the run's progress log on stderr: the error message and its notes."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr
    start = next(i for i, line in enumerate(lines) if ": error: " in line)
    return lines[start:]


def _partial(results: Any) -> str:
    (partial,) = os.listdir(results)
    assert partial.endswith("-toy-cli.partial")
    assert os.path.exists(os.path.join(results, partial, "INTERRUPTED.md"))
    return os.path.join(results, partial)


def test_guard_refusal_is_two_lines_and_exit_3(env: Any, toy: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`astral-lab run lb-compare --quick --scale 0.001` printed the guard's message at the
    end of a traceback."""
    assert cli.main(["run", "toy-cli", "--scale", "0.001"]) == cli.EXIT_GUARD == 3
    err = _error(capsys.readouterr().err)
    assert len(err) == 2, err
    assert err[0].startswith("astral-lab run: error: fidelity guard: offered ")
    assert "margin" in err[0] and "Lower --scale or the GPU count, or pass --force." in err[0]
    assert err[1] == (f"partial results kept in {_partial(env)}/ (INTERRUPTED.md: what had "
                      "finished)")


def test_forced_past_the_guard_runs(env: Any, toy: Any,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "toy-cli", "--scale", "0.001", "--force"]) == 0
    out = capsys.readouterr()
    assert "results: " in out.out and "WARNING: fidelity guard" in out.err


@pytest.mark.parametrize("fail,status,first", [
    ("lab", cli.EXIT_LAB, "astral-lab run: error: another fabric is up on this machine"),
    ("value", cli.EXIT_USAGE, "astral-lab run: error: --seconds must be > 0"),
    ("unanswered", cli.EXIT_LAB, "astral-lab run: error: POST /traffic: no answer from the "
     "controller at 127.0.0.1:1 within 120 s (timed out)"),
])
def test_expected_errors_are_one_message_and_keep_the_partial_folder(
        env: Any, toy: Any, capsys: pytest.CaptureFixture[str], fail: str, status: int,
        first: str) -> None:
    assert cli.main(["run", "toy-cli", "--fail", fail]) == status
    err = _error(capsys.readouterr().err)
    assert err[0].startswith(first) and len(err) == 2, err
    assert err[1].startswith(f"partial results kept in {_partial(env)}/")


@pytest.mark.parametrize("fail,error", [("bug", RuntimeError), ("refused", ControllerError)])
def test_a_bug_keeps_its_traceback(env: Any, toy: Any, fail: str, error: type) -> None:
    """A controller that refused a request was sent a bad one: the sender's bug."""
    with pytest.raises(error) as info:
        cli.main(["run", "toy-cli", "--fail", fail])
    assert info.value.__notes__[0].startswith(f"partial results kept in {_partial(env)}/")


def test_bad_parameter_value_creates_nothing(env: Any, toy: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "no-such-scenario"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "astral-lab run: error: unknown scenario 'no-such-scenario'; choose from demo, ")
    assert not os.path.exists(env)


@pytest.mark.parametrize("force", [False, True])
def test_demo_on_a_machine_too_slow_to_calibrate(env: Any, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str],
                                                 force: bool) -> None:
    """`make demo` on a machine that cannot hold the lowest calibration rate ended in a
    traceback, with or without --force. Without: one line, exit 3, nothing left. With: the
    run goes ahead unguarded (here it stops at the fake fabric, which cannot ping)."""
    def slow(*_a: Any, **_k: Any) -> dict[str, Any]:
        raise fidelity.calibration_failed([{"held": False, "delivered_fraction": 0.5,
                                            "completion_s": 3.0, "ideal_s": 1.5}], senders=8)

    monkeypatch.setattr(base, "calibrate", slow)
    reached: list[Any] = []

    class NoPing(FakeLab):
        def reachability(self) -> Any:
            reached.append(self.plan.topology)
            raise LabError("fake fabric: nothing to ping")

    monkeypatch.setattr(base, "make_lab", NoPing)
    status = cli.main(["demo", "--quick", *(["--force"] if force else [])])
    stderr = capsys.readouterr().err
    err = _error(stderr)
    if not force:
        assert status == cli.EXIT_GUARD and len(err) == 1, err
        assert err[0].startswith("astral-lab demo: error: this machine could not hold even "
                                 "5 Mb/s per sender")
        assert "pass --force" in err[0]
        assert not os.path.exists(env) or os.listdir(env) == []
        assert reached == []
    else:
        assert reached == ["astral3"]  # past the calibration, into the fabric
        assert "WARNING: fidelity guard off (--force): this machine could not hold" in stderr
        assert status == cli.EXIT_LAB and err[0].startswith("astral-lab demo: error: fake")
