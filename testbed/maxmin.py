"""Kept for one release: the flow model's compiled kernel is ``testbed/models/maxmin.py``.

``python -m testbed.maxmin`` still compiles it into Numba's cache (what older provisioning
scripts call) and ``from testbed import maxmin`` still works; new code imports
``testbed.models.maxmin``.
"""

from __future__ import annotations

from testbed.models.maxmin import CANDIDATES, events, run, warm

__all__ = ["CANDIDATES", "events", "run", "warm"]

if __name__ == "__main__":
    warm()
