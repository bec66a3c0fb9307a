"""Fixtures for integration tests: real Mininet fabrics, and a check that nothing is left behind."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

# Fabrics are one per machine (testbed.shell.lab.fabric_lock): a test started while another run's
# fabric is up waits for it instead of failing on taken names.
os.environ.setdefault("ASTRAL_LAB_WAIT", "1200")

from testbed.shell import cleanup
from testbed.shell.lab import fabric_lock
from vocab.plan import WiringPlan


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


@pytest.fixture(autouse=True)
def _start_clean() -> None:
    """Each test starts from a machine with no lab leftovers (a failed test may leave some).

    Cleaning under the fabric lock: without it, this would tear down a fabric that another
    run (a second test session, a scenario) has up right now.
    """
    lock = fabric_lock(lambda _msg: None)
    try:
        cleanup.clean(verbose=False)
    finally:
        lock.close()
