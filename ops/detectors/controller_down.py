"""The controller's REST API stops answering.

A detector module (``ops/detectors/``), pure: ``detect(hist, topo)`` says which
components the condition holds for at the latest poll; its rule is in its docstring and
its thresholds are the constants below.
"""

from __future__ import annotations

from ops.detectors import AlertKind, Finding, Topo, rounded, run_start
from ops.telemetry import CONTROLLER, History
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 80  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: a dead controller and one that will restart look the same while it is down
ALERTS = {NAME: AlertKind(85, "restart the controller (switches keep forwarding on their "
                               "last tables; no failover to new faults until it is back)",
                          evidence=(Evidence.DOWN,), parts=("controller",))}

#: controller: the REST API did not answer in this many polls in a row.
CONTROLLER_POLLS = 2


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Controller unreachable: its REST API did not answer CONTROLLER_POLLS polls in a row
    (one miss can be a busy machine; two is a dead or hung controller)."""
    vals = hist.values(CONTROLLER, "up")
    n, since = run_start(list(hist.times), [v == 0.0 for v in vals])
    if n >= CONTROLLER_POLLS:
        return [Finding(NAME, CONTROLLER, "critical",
                        f"controller not answering for {n} polls",
                        {"up": rounded(vals[-n - 2:])}, since)]  # type: ignore[arg-type]
    return []

