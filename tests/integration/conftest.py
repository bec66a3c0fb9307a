"""Fixtures for integration tests: real Mininet fabrics, and a check that nothing is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

# Fabrics are one per machine (testbed.shell.machine.fabric_lock): a test started while another
# run's fabric is up waits for it instead of failing on taken names.
os.environ.setdefault("ASTRAL_LAB_WAIT", "1200")

from testbed.shell import cleanup
from testbed.shell.faults import INJECTORS
from testbed.shell.machine import fabric_lock
from vocab.plan import WiringPlan

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def assert_clean() -> Callable[[WiringPlan], None]:
    def check(plan: WiringPlan) -> None:
        # Hold the machine's fabric lock while looking, so a fabric another run brings up
        # right after ours is not mistaken for our leftovers.
        lock = fabric_lock(lambda _msg: None)
        try:
            left = cleanup.leftovers(plan)
        finally:
            lock.close()
        assert not left, f"left behind: {left[:10]}"

    return check


@pytest.fixture
def killed_lab() -> Callable[..., list[str]]:
    """Bring a Lab up in a child process (``Lab(<lab_args>).start()``), read the words it
    prints once up (``report``: Python expressions over ``lab``), let ``while_up`` look at
    them, then ``kill -9`` the child, as a crash would; returns the words. Then a test checks
    what ``astral-lab clean`` (``clean_cli``) removes."""
    def run(lab_args: str, report: str,
            while_up: Callable[[list[str]], None] | None = None) -> list[str]:
        script = ("from testbed.shell.lab import Lab\nfrom testbed.topologies import build\n"
                  f"import time\nlab = Lab({lab_args}).start()\n"
                  f"print('UP', {report}, flush=True)\ntime.sleep(600)\n")
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                cwd=REPO, env=_env())
        try:
            line = proc.stdout.readline().decode() if proc.stdout else ""
            assert line.startswith("UP"), line
            words = line.split()[1:]
            if while_up is not None:
                while_up(words)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        return words

    return run


@pytest.fixture
def clean_cli() -> Callable[[], subprocess.CompletedProcess[str]]:
    """``astral-lab clean`` as a user runs it after a crash."""
    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "astral_lab.cli", "clean"],
                              capture_output=True, text=True, cwd=REPO, env=_env())

    return run


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ASTRAL_LAB_KEEP_LOGS"}


@pytest.fixture(autouse=True)
def _start_clean() -> None:
    """Each test starts from a machine with no lab leftovers (a failed test may leave some).

    Cleaning under the fabric lock: without it, this would tear down a fabric that another
    run (a second test session, a scenario) has up right now.
    """
    lock = fabric_lock(lambda _msg: None)
    try:
        cleanup.clean(verbose=False, kinds=INJECTORS.all().values())
    finally:
        lock.close()
