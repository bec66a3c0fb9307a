"""The job's received rate falls well below its own baseline. A detector module: pure.

Unlike the others it compares the job with itself: ``detect(hist, topo, baseline)`` takes
the baseline rate the engine learns from the first polls with traffic (or a baseline
run's), and looks only at the job's hosts (``BASELINE = True`` tells the engine so).
"""

from __future__ import annotations

from ops.detectors._base import Finding, Topo, _rounded, _run_start
from ops.telemetry import History

#: the engine passes the learned baseline and the job's hosts (see module docstring)
BASELINE = True
#: job slow: the job's received rate is below this fraction of its baseline ...
JOB_RATIO = 0.7
#: ... in this many polls in a row (the baseline: median of the first BASELINE_POLLS polls
#: with traffic, or a baseline run's).
JOB_POLLS = 3
BASELINE_POLLS = 10
#: a job whose baseline is below this many Mb/s is idle: nothing to compare.
JOB_MIN_MBPS = 1.0


def job_rate(hist: History, hosts: set[str]) -> list[float | None]:
    """The job's received rate per poll: sum of its hosts' NIC ``rx_mbps``."""
    cols = [hist.values(h, "rx_mbps") for h in sorted(hosts)]
    out: list[float | None] = []
    for i in range(len(hist.times)):
        vals = [c[i] for c in cols if c[i] is not None]
        out.append(sum(vals) if vals else None)
    return out


def detect(hist: History, topo: Topo, baseline: float | None) -> list[Finding]:
    """Job slow: the job's received rate (sum of its NICs) < JOB_RATIO x baseline for
    JOB_POLLS polls. The suspected component is ``job``: this says *that* it suffers;
    the other detectors and the agent say *where*.
    """
    if baseline is None or baseline < JOB_MIN_MBPS:
        return []
    rate = job_rate(hist, topo.hosts)
    n, since = _run_start(list(hist.times),
                          [r is not None and r < JOB_RATIO * baseline for r in rate])
    if n >= JOB_POLLS:
        return [Finding("job-slow", "job", "warning",
                        f"job receives {rate[-1]:.1f} Mb/s, {100 * rate[-1] / baseline:.0f}% of "
                        f"its baseline {baseline:.1f} Mb/s",
                        {"job_mbps": _rounded(rate[-n - 2:]), "baseline_mbps":
                         round(baseline, 2)}, since)]  # type: ignore[arg-type]
    return []

