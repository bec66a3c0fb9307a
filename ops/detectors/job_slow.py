"""The job's received rate falls well below its own baseline. A detector module: pure.

Unlike the others it compares the job with itself: ``detect(hist, topo, baseline)`` takes
the baseline rate the engine learns from the first polls with traffic (or a baseline
run's), and looks only at the job's hosts (``BASELINE = True`` tells the engine so).
"""

from __future__ import annotations

from ops.detectors import JOB_MIN_MBPS, AlertKind, Finding, Topo, job_rate, rounded, run_start
from ops.telemetry import History
from vocab.plugins import plugin_name

#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: it says *that* the job suffers (its component is ``job``), not where nor what (no fault
#: kinds): the other detectors and the agent say where
ALERTS = {NAME: AlertKind(None, "find where: the other alerts and the paths of the job's "
                                "hosts")}

#: the engine passes the learned baseline and the job's hosts (see module docstring)
BASELINE = True
#: job slow: the job's received rate is below this fraction of its baseline ...
JOB_RATIO = 0.7
#: ... in this many polls in a row (the baseline: ``ops.detectors.BASELINE_POLLS``; a job
#: whose baseline is below ``JOB_MIN_MBPS`` is idle: nothing to compare).
JOB_POLLS = 3


def detect(hist: History, topo: Topo, baseline: float | None) -> list[Finding]:
    """Job slow: the job's received rate (sum of its NICs) < JOB_RATIO x baseline for
    JOB_POLLS polls. The suspected component is ``job``: this says *that* it suffers;
    the other detectors and the agent say *where*.
    """
    if baseline is None or baseline < JOB_MIN_MBPS:
        return []
    rate = job_rate(hist, topo.hosts)
    n, since = run_start(list(hist.times),
                         [r is not None and r < JOB_RATIO * baseline for r in rate])
    if n >= JOB_POLLS:
        return [Finding(NAME, "job", "warning",
                        f"job receives {rate[-1]:.1f} Mb/s, {100 * rate[-1] / baseline:.0f}% of "
                        f"its baseline {baseline:.1f} Mb/s",
                        {"job_mbps": rounded(rate[-n - 2:]), "baseline_mbps":
                         round(baseline, 2)}, since)]  # type: ignore[arg-type]
    return []

