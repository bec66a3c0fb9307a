"""Shared pytest setup: integration tests need root and say so instead of failing obscurely."""

from __future__ import annotations

import os

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
