"""Ctrl-C and SIGTERM stop the long-running verbs on a busy machine, whenever they land.

Each try starts the real program (``python -m astral_lab``, what the console script runs) in
its own session with two CPU-bound processes beside it, signals it at one moment (while
Python starts, while the modules load, during bring-up, once the fabric is up, during
traffic) and checks the exit status, how long it took to go, and that the machine is clean.
"""

from __future__ import annotations

import glob
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import pytest

from testbed.topologies import build
from tests.stopping import before_the_program, stop_command, stopped_as_asked
from vocab.plan import WiringPlan, write_json_atomic

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = [sys.executable, "-m", "astral_lab"]
#: seconds a stopped verb may take to go (tearing a small fabric down on a busy machine)
BOUND = 45.0

#: the fabric every try brings up: the smallest astral3 (2 servers of 2 GPUs)
FABRIC = dict(servers=2, gpus=2)
UP = [*PROGRAM, "up", "astral3", "--servers", "2", "--gpus-per-server", "2"]


@pytest.fixture
def env(tmp_path: Any) -> dict[str, str]:
    """Results in a temporary folder, and a stand-in calibration (these tries are about
    stopping, not fidelity: a run must never calibrate on a machine kept busy on purpose)."""
    from scenarios import fidelity
    from traffic.roce import LAB_PMTU

    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASTRAL_LAB_CACHE", str(cache))
        write_json_atomic(fidelity.cache_path(LAB_PMTU),
                          {"key": fidelity.machine_key(LAB_PMTU), "hop_pps": 10**9})
    return dict(os.environ, ASTRAL_LAB_RESULTS=str(tmp_path / "results"),
                ASTRAL_LAB_CACHE=str(cache))


def _check(sig: int, how: Any, plan: WiringPlan, assert_clean: Callable[[WiringPlan], None],
           where: str) -> None:
    assert stopped_as_asked(sig, how), f"{where}: status {how.status}\n{how.stderr[-3000:]}"
    assert how.seconds < BOUND, f"{where}: took {how.seconds:.1f} s to stop"
    if not before_the_program(how):  # only CPython could speak then, with a traceback
        assert "Traceback" not in how.stderr, f"{where}:\n{how.stderr[-3000:]}"
    assert_clean(plan)


# While Python starts (0.05 s), while the modules load (0.4 s), during bring-up (1 s, 1.5 s).
@pytest.mark.parametrize("after", [0.05, 0.4, 1.0, 1.5])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_up_stops_at_every_moment_of_bring_up(sig: int, after: float, env: dict[str, str],
                                              busy_machine: None, assert_clean: Any) -> None:
    """A fast machine may be up already when the signal comes: then Ctrl-C belongs to the
    Mininet CLI, as in `mn` ("Interrupt", the CLI stays), and closing its input ends it."""
    how = stop_command(UP, sig, after=after, env=env, bound=BOUND + 60, cwd=REPO)
    if sig == signal.SIGINT and "*** Starting CLI" in how.before:
        assert how.status == 0 and "Interrupt" in how.stderr, how.stderr[-3000:]
        assert_clean(build("astral3", **FABRIC))
        return
    _check(sig, how, build("astral3", **FABRIC), assert_clean, f"up, {after} s")


def test_up_stops_on_sigterm_in_its_cli(env: dict[str, str], busy_machine: None,
                                        assert_clean: Any) -> None:
    """Once up, the Mininet CLI keeps Ctrl-C for the command it runs (as `mn` does); SIGTERM
    ends the verb and tears the fabric down."""
    how = stop_command(UP, signal.SIGTERM, after_line="exit to tear down", env=env,
                       bound=BOUND + 120, cwd=REPO)
    assert "exit to tear down" in how.stderr, how.stderr[-3000:]
    _check(signal.SIGTERM, how, build("astral3", **FABRIC), assert_clean, "up, in the CLI")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_dashboard_demo_stops_once_serving(sig: int, env: dict[str, str], busy_machine: None,
                                           assert_clean: Any) -> None:
    from astral_lab.dashboard_cli import DEMO_FABRIC

    how = stop_command([*PROGRAM, "dashboard", "--demo", "--port", "0"], sig,
                       after_line="http://", after=2.0, env=env, bound=BOUND + 120, cwd=REPO)
    _check(sig, how, build("astral3", **DEMO_FABRIC), assert_clean, "dashboard --demo")
    # what the live view had written is kept (a stop is not a failure)
    assert glob.glob(os.path.join(env["ASTRAL_LAB_RESULTS"], "*-dashboard-demo"))


@pytest.mark.parametrize("sig, after", [(signal.SIGINT, 1.0), (signal.SIGTERM, 1.0),
                                        (signal.SIGTERM, None)])
def test_run_stops_before_and_during_traffic(sig: int, after: float | None,
                                             env: dict[str, str], busy_machine: None,
                                             assert_clean: Any) -> None:
    """Before the fabric (1 s in) and during the replay (right after the guard speaks): the
    scenario's partial folder says how it stopped; nothing else stays."""
    argv = [*PROGRAM, "run", "lb-compare", "--quick", "--seconds", "20"]
    how = stop_command(argv, sig, after=after if after is not None else 3.0,
                       after_line=None if after is not None else "fidelity guard",
                       env=env, bound=BOUND + 240, cwd=REPO)
    _check(sig, how, build("astral3", servers=2, gpus=4), assert_clean, f"run, {after}")
    markers = glob.glob(os.path.join(env["ASTRAL_LAB_RESULTS"], "*.partial",
                                     "INTERRUPTED.md"))
    if after is None:  # stopped mid-run: what had been written is kept, marked
        assert len(markers) == 1, how.stderr[-3000:]
    for marker in markers:
        with open(marker, encoding="utf-8") as fh:
            text = fh.read()
        assert ("interrupted by the user" if sig == signal.SIGINT
                else "stopped by a signal (exit status 143)") in text, text
