"""A lane's frames arrive at another port than the wiring plan says: crossed fibres. Pure.

A detector module. Nothing counts a miswired lane: traffic still flows, through the wrong
spine, so no counter or rate moves. What finds it is a check of the cabling against the
plan (``ControllerClient.check_wiring`` read by ``testbed.wiring.findings``: a probe
frame out of each end of every switch-to-switch link, and where it arrived), which the
agent runs on its own, every so often and sooner when the job suffers and no alert says
where (``ops.shell.monitor.WiringWatch``). Each check's result comes with the next poll:
``(COMPONENT, CHECKED)`` 1, and ``(link, METRIC)`` 1 for every link whose frames arrived
elsewhere than planned (a link whose frames arrived nowhere is down:
link-down's). The latest check within HOLD_POLLS polls stands until the next one.
"""

from __future__ import annotations

from ops.detectors import AlertKind, Finding, Topo
from ops.telemetry import History
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 110  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: a probe frame that arrives at the wrong port says where and what, as a dead switch does
ALERTS = {NAME: AlertKind(95, "compare lane {component}'s cabling with the plan: {summary}; "
                               "uncross the fibres in its shuffle box",
                          evidence=(Evidence.MISROUTE,), parts=("link",))}

#: the series a wiring check's result is written to
COMPONENT, CHECKED, METRIC = "wiring", "checked", "miswired"
#: a check's result stands this many polls (the cabling changes rarely; a newer check
#: replaces it)
HOLD_POLLS = 30


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Miswired: the latest wiring check (within HOLD_POLLS polls) saw a link's frames
    arrive at another port than planned."""
    found = standing(hist)
    if found is None:
        return []
    when, links = found
    return [Finding(NAME, comp, "warning",
                    f"its probe frames arrived at another port than planned "
                    f"(wiring check at {when:.0f})", {"checked_at": when}, when)
            for comp in topo.links if comp in links]


def standing(hist: History) -> tuple[float, set[str]] | None:
    """The latest wiring check within HOLD_POLLS polls: when it ran and the links it found
    miswired; None if none ran."""
    checked = hist.last(COMPONENT, CHECKED, HOLD_POLLS)
    at = next((i for i in range(len(checked) - 1, -1, -1) if checked[i] is not None), None)
    if at is None:
        return None
    idx = len(hist.times) - len(checked) + at
    links = {c for c, m in list(hist.keys()) if m == METRIC and hist.values(c, m)[idx]}
    return list(hist.times)[idx], links
