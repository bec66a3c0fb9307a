"""A link sends less than its configured rate while its queue holds: a dirty optic.

A detector module (``ops/detectors/``), pure: ``detect(hist, topo)`` says which
components the condition holds for at the latest poll; its rule is in its docstring and
its thresholds are the constants below.
"""

from __future__ import annotations

from ops.detectors import AlertKind, Finding, Topo, rounded, run_start
from ops.telemetry import History
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 30  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
ALERTS = {NAME: AlertKind(75, "drain lane {component} (take it down: ECMP moves its flows "
                               "to the other lanes) and replace its optic; {summary}",
                          evidence=(Evidence.SLOW,), parts=("link",))}

#: degraded: the egress queue holds at least this many seconds of the configured rate ...
DEGRADED_BACKLOG_S = 0.05
#: ... while the port sends less than this fraction of its configured rate ...
DEGRADED_RATE_RATIO = 0.8
#: ... in this many polls in a row.
DEGRADED_POLLS = 2


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Degraded: the queue holds >= DEGRADED_BACKLOG_S of the configured rate while the port
    sends < DEGRADED_RATE_RATIO of that rate, for DEGRADED_POLLS polls in a row.

    A healthy but busy link with a queue sends at its configured rate (that is congestion,
    not a fault); a lane that queues and still sends well below its rate is failing (a
    dirty optic, a lane renegotiated down). Queues are deep and lossless-style here, so a
    degraded lane queues rather than drops.
    """
    times = list(hist.times)
    out = []
    for comp in topo.links:
        rate = topo.mbps(comp)
        min_backlog = DEGRADED_BACKLOG_S * rate * 1e6 / 8
        for d in ("ab", "ba"):
            back = hist.values(comp, f"backlog_{d}")
            mbps = hist.values(comp, f"mbps_{d}")
            ok = [b is not None and m is not None and b >= min_backlog
                  and m < DEGRADED_RATE_RATIO * rate for b, m in zip(back, mbps, strict=True)]
            n, since = run_start(times, ok)
            if n >= DEGRADED_POLLS:
                cur = mbps[-1] or 0.0
                out.append(Finding(
                    NAME, comp, "warning",
                    f"link {comp} ({d[0]}->{d[1]}) degraded: {cur:.1f} of {rate:g} Mb/s "
                    f"({100 * cur / rate:.0f}%) with {back[-1] / 1e3:.0f} kB queued "
                    f"for {n} polls",
                    {f"mbps_{d}": rounded(mbps[-n - 2:]),
                     f"backlog_{d}": rounded(back[-n - 2:], 0),
                     "configured_mbps": rate, "polls": n}, since))  # type: ignore[arg-type]
                break
    return out

