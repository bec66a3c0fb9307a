"""Kept for one release: the cost model is ``testbed/models/cost.py`` now.

``from testbed.cost import ...`` keeps working for its library names. The CLI glue
(``add_cost_parser``, ``run_cost``) is in ``astral_lab.cost_cli`` and not re-exported: a
module under ``testbed/`` importing ``astral_lab`` would make the layers a cycle.
"""

from __future__ import annotations

from testbed.models.cost import *  # noqa: F403
from testbed.models.cost import __all__  # noqa: F401
