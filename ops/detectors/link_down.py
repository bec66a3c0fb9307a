"""A link is down, or every link of a switch is.

A detector module (``ops/detectors/``), pure: ``detect(hist, topo)`` says which
components the condition holds for at the latest poll; its rule is in its docstring and
its thresholds are the constants below.
"""

from __future__ import annotations

from ops.detectors import AlertKind, Finding, Topo, rounded, run_start
from ops.telemetry import History
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 10  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: this detector's alert, and the one it raises instead when all of a switch's links are down
ALERTS = {
    # a link seen down: a cut, or a flap in its first down phase (flapping tells them apart
    # on the second loss of carrier)
    NAME: AlertKind(90, "replace the optic or cable of {component} (ECMP already skips it); "
                        "check the port's error counters at both ends",
                    evidence=(Evidence.DOWN,), parts=("link",)),
    "switch-down": AlertKind(100, "check power and management of switch {component}; its "
                                  "traffic is rerouted over the other spines/leaves, capacity "
                                  "is reduced until it is back", evidence=(Evidence.DOWN,),
                             parts=("switch",)),
}

#: link down: a link is down when either end's operstate is not "up" in the latest poll.
LINK_DOWN_POLLS = 1


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Link down: either end's operstate is not ``up`` (``up`` == 0) in the latest poll.

    Kernel state read each poll, so a cut shows within one interval, with or without the
    controller. If every link of a switch is down, one ``switch-down`` finding names the
    switch instead (its links are the evidence): a dead switch is one fault, not six.
    """
    times = list(hist.times)
    down = {}
    for comp in topo.links:
        vals = hist.values(comp, "up")
        n, since = run_start(times, [v == 0.0 for v in vals])
        if n >= LINK_DOWN_POLLS:
            down[comp] = since
    out = []
    explained: set[str] = set()
    for sw, comps in topo.switch_links.items():
        if len(comps) >= 2 and all(c in down for c in comps):
            explained.update(comps)
            out.append(Finding("switch-down", sw, "critical",
                               f"switch {sw}: all {len(comps)} links down",
                               {"links_down": sorted(comps)},
                               min(down[c] for c in comps)))  # type: ignore[type-var]
    for comp, since in down.items():
        if comp in explained:
            continue
        out.append(Finding(NAME, comp, "critical", f"link {comp} is down",
                           {"up": rounded(hist.last(comp, "up", 5)),
                            "ctl_up": rounded(hist.last(comp, "ctl_up", 5))}, since))
    return out

