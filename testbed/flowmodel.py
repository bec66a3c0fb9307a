"""Kept for one release: the flow model is the package ``testbed/models/`` now.

``from testbed.flowmodel import ...`` keeps working for the names it had (its front door is
``testbed.models.flowmodel``; the solver, results, per-flow model, bounds, jobs and what-if
have modules of their own there). The solver's component cache is handed out as the very
object ``testbed.models.solver`` uses, so clearing it here clears it there. The CLI glue
(``add_model_parser``, ``run_model``) is in ``astral_lab.model_cli`` and not re-exported:
a module under ``testbed/`` importing ``astral_lab`` would make the layers a cycle.
"""

from __future__ import annotations

import os  # noqa: F401  (the old module's ``os``: tests patch os.sched_getaffinity through it)

from testbed.models import maxmin  # noqa: F401
from testbed.models.flowmodel import *  # noqa: F403
from testbed.models.flowmodel import (  # noqa: F401
    DEFAULT_PAIR_BYTES,
    FABRIC_FIELDS,
    MAX_PER_FLOW,
    SCHEMA,
    __all__,
)
from testbed.models.jobs import MAX_GROUP_FLOWS  # noqa: F401
from testbed.models.solver import _COMPONENT_CACHE, REL_TIE, _never_binding  # noqa: F401
