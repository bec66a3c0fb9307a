"""One uplink of a leaf carries several times what its siblings carry.

A detector module (``ops/detectors/``), pure: ``detect(hist, topo)`` says which
components the condition holds for at the latest poll; its rule is in its docstring and
its thresholds are the constants below.
"""

from __future__ import annotations

import statistics

from ops.detectors import AlertKind, Finding, Topo, rounded, run_start
from ops.telemetry import History
from vocab.plugins import plugin_name

ORDER = 60  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: hash polarization is a load-balancing condition, evidence of no injected fault kind
ALERTS = {NAME: AlertKind(40, "switch load balancing to planned/adaptive (PUT /lb) or "
                               "add entropy (more QPs); {component} carries far more than its "
                               "siblings")}

#: ECMP imbalance: one uplink of a leaf carries more than this multiple of the median of
#: its sibling uplinks ...
ECMP_RATIO = 3.0
#: ... and at least this fraction of its configured rate (idle fabrics are not imbalanced) ...
ECMP_MIN_UTIL = 0.4
#: ... in this many polls in a row.
ECMP_POLLS = 5


def detect(hist: History, topo: Topo) -> list[Finding]:
    """ECMP imbalance: one up uplink of a leaf carries > ECMP_RATIO x the median of its
    sibling uplinks and >= ECMP_MIN_UTIL of its rate, for ECMP_POLLS polls (hash
    polarization: many flows hashed onto one member while others idle).
    """
    times = list(hist.times)
    out = []
    for leaf, comps in topo.uplinks.items():
        if len(comps) < 3:
            continue
        series = {c: hist.values(c, "mbps_ab") for c in comps}
        ups = {c: hist.values(c, "up") for c in comps}
        hot_at: list[str | None] = []
        for i in range(len(times)):
            live = {c: series[c][i] for c in comps
                    if series[c][i] is not None and ups[c][i] != 0.0}
            if len(live) < 3:
                hot_at.append(None)
                continue
            top = max(live, key=lambda c: live[c])  # type: ignore[arg-type, return-value]
            med = statistics.median(v for c, v in live.items() if c != top)
            hot = (live[top] >= ECMP_MIN_UTIL * topo.mbps(top)  # type: ignore[operator]
                   and live[top] > ECMP_RATIO * max(med, 1e-3))  # type: ignore[operator]
            hot_at.append(top if hot else None)
        last = hot_at[-1] if hot_at else None
        n, since = run_start(times, [h is not None and h == last for h in hot_at])
        if last is not None and n >= ECMP_POLLS:
            out.append(Finding(NAME, last, "warning",
                               f"ECMP imbalance at {leaf}: {last} carries "
                               f"{series[last][-1]:.1f} Mb/s, siblings' median far lower",
                               {c: rounded(series[c][-3:]) for c in comps},
                               since))  # type: ignore[arg-type]
    return out

