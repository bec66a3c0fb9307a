"""Shared pytest setup: integration tests need root and say so instead of failing obscurely."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark everything under tests/integration as ``integration`` (so `-m` selects it)."""
    for item in items:
        if "integration" in item.nodeid.split("/"):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _integration_needs_root(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("integration") and os.geteuid() != 0:
        pytest.fail("integration tests bring up real Mininet fabrics and need root: "
                    "run `sudo make test`, or `pytest -m 'not integration'` for unit tests only",
                    pytrace=False)


@pytest.fixture
def busy_machine() -> Iterator[None]:
    """Two CPU-bound processes beside the test, one of them at nice 19: CI's machine is not
    always quiet, and a signal race usually shows only when the CPU is contended."""
    # each spins only while pytest lives, so a killed test run leaves none behind
    spin = [sys.executable, "-c", "import os\np = os.getppid()\nwhile os.getppid() == p: pass"]
    procs = [subprocess.Popen(spin), subprocess.Popen(["nice", "-n", "19", *spin])]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()
