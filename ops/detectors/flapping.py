"""A link loses and regains carrier again and again.

A detector module (``ops/detectors/``), pure: ``detect(hist, topo)`` says which
components the condition holds for at the latest poll; its rule is in its docstring and
its thresholds are the constants below.
"""

from __future__ import annotations

from ops.detectors import AlertKind, Finding, Topo
from ops.telemetry import History
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 20  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: a link that keeps going down: the evidence of a link down, which a cut gives once
ALERTS = {NAME: AlertKind(80, "drain {component} (take it down so ECMP stops using it) "
                               "before it fails for good, then reseat/replace the optic",
                          evidence=(Evidence.DOWN,), parts=("link",))}

#: flapping: at least this many carrier transitions (both ends counted once) ...
FLAP_MIN_CHANGES = 3
#: ... within this many seconds (down, up, down = 3: a second loss of carrier).
FLAP_WINDOW_S = 30.0


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Flapping: >= FLAP_MIN_CHANGES carrier transitions within FLAP_WINDOW_S seconds.

    ``carrier_changes`` is the kernel's count of carrier on/off events (the larger of the
    two ends), so it sees a flap that starts and ends between two polls. One cut and its
    repair are 2 transitions; a third means the link lost carrier again: flapping.
    """
    times = list(hist.times)
    if not times:
        return []
    start = times[-1] - FLAP_WINDOW_S
    out = []
    for comp in topo.links:
        vals = hist.values(comp, "carrier_changes")
        window = [(t, v) for t, v in zip(times, vals, strict=True) if t > start and v]
        total = sum(v for _, v in window)
        if total >= FLAP_MIN_CHANGES:
            out.append(Finding(NAME, comp, "warning",
                               f"link {comp} flapping: {total:g} carrier changes in "
                               f"{FLAP_WINDOW_S:g} s",
                               {"carrier_changes": [(round(t, 2), v) for t, v in window]},
                               window[0][0]))
    return out

