"""The queue towards a NIC holds while the NIC receives at its rate: incast.

A detector module (``ops/detectors/``), pure: ``detect(hist, topo)`` says which
components the condition holds for at the latest poll; its rule is in its docstring and
its thresholds are the constants below.
"""

from __future__ import annotations

from ops.detectors import AlertKind, Finding, Topo, rounded, run_start
from ops.telemetry import History
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 70  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
ALERTS = {NAME: AlertKind(60, "rebalance experts away from {component} (EPLB replicas) "
                               "or pace its senders; the fabric is fine, the receiver is "
                               "oversubscribed", evidence=(Evidence.SLOW,), parts=("host",))}

#: hot receiver: the queue towards a NIC holds at least this many seconds of its rate ...
INCAST_BACKLOG_S = 0.05
#: ... while the NIC receives at least this fraction of its rate ...
INCAST_RATE_RATIO = 0.8
#: ... in this many polls in a row.
INCAST_POLLS = 2


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Hot receiver / incast: the queue towards a NIC holds >= INCAST_BACKLOG_S of its rate
    while the NIC receives >= INCAST_RATE_RATIO of its rate, for INCAST_POLLS polls.

    Many senders converge on one NIC: its last link is full and queueing, while the
    fabric before it is not (that is the difference from a degraded link).
    """
    times = list(hist.times)
    out = []
    for host, comp in topo.nic_link.items():
        rate = topo.mbps(comp)
        back = hist.values(comp, "backlog_ba")
        mbps = hist.values(comp, "mbps_ba")
        ok = [b is not None and m is not None and b >= INCAST_BACKLOG_S * rate * 1e6 / 8
              and m >= INCAST_RATE_RATIO * rate for b, m in zip(back, mbps, strict=True)]
        n, since = run_start(times, ok)
        if n >= INCAST_POLLS:
            out.append(Finding(NAME, host, "warning",
                               f"hot receiver {host}: {mbps[-1]:.1f} of {rate:g} Mb/s with "
                               f"{back[-1] / 1e3:.0f} kB queued towards it",
                               {"mbps_to_host": rounded(mbps[-n - 2:]),
                                "backlog_to_host": rounded(back[-n - 2:], 0)},
                               since))  # type: ignore[arg-type]
    return out

