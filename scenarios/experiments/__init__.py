"""The scenarios, one module each: ``scenarios/experiments/<name>.py``.

A scenario's name is its module's name with ``_`` written as ``-`` (``lb_compare.py`` is
``lb-compare``); the module defines one ``@scenario`` function (``scenarios.base``: the
declaration is its description, its ``Param`` s and the run). ``astral-lab list`` and
``astral-lab run NAME`` find them in ``SCENARIOS``, so a new experiment is a new file: copy
the closest module under a new name and change what it does. What several scenarios share
(the framework, flows, the fidelity guard, report helpers) stays in ``scenarios/``.
"""

from __future__ import annotations

from scenarios.base import Scenario
from vocab.plugins import Plugins

#: Every scenario, in ``astral-lab list`` order: each module's ``ORDER`` (the tour first),
#: then any others by name.
SCENARIOS: Plugins[Scenario] = Plugins("scenario", __name__, Scenario.declared_in)
