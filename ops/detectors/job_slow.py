"""The job suffers: its iterations take longer or lose packets, or its received rate falls.
A detector module: pure.

Unlike the others it compares the job with itself. A job that reports its iterations
(``traffic.shell.moejob``: samples ``iter_s``, ``iter_lost`` and ``iter_failed`` of
component ``job``) is judged by them, as Minder, Holmes and Greyhound judge training jobs:
an iteration much slower than the job's own recent ones, or one that lost packets (an RC
queue pair would stall on it until a retransmission), or failed. Its received rate is then
no signal (an all-to-all is bursts and pauses). A job without iterations (steady streams)
is judged by its received rate against the baseline the engine learns from the first polls
with traffic (or a baseline run's): ``detect(hist, topo, baseline)`` takes it, and looks
only at the job's hosts (``BASELINE = True`` tells the engine so).
"""

from __future__ import annotations

import statistics

from ops.detectors import JOB_MIN_MBPS, AlertKind, Finding, Topo, job_rate, rounded, run_start
from ops.telemetry import History
from traffic.iterations import JOB
from vocab.plugins import plugin_name

ORDER = 90  # the detectors run (and list) in this order (vocab.plugins.listing_key)
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
#: an iteration is slow above this multiple of the median of the job's earlier iterations
#: in the history (a fail-slow job; on a shared machine a fault-free all-to-all's time
#: jitters up to ~1.7x its median from one iteration to the next) ...
ITER_RATIO = 2.0
#: ... once there are at least this many earlier ones to take the median of
ITER_BASELINE = 5


def detect(hist: History, topo: Topo, baseline: float | None) -> list[Finding]:
    """Job slow, by its iterations when it reports them, else by its received rate
    (< JOB_RATIO x baseline for JOB_POLLS polls). The suspected component is ``job``:
    this says *that* it suffers; the other detectors and the agent say *where*.
    """
    iters = _iterations(hist)
    if iters:
        return _slow_iterations(iters)
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


def _iterations(hist: History) -> list[tuple[float, float | None, float, float]]:
    """``(poll time, iteration s or None, packets lost, failed)`` of every poll that
    brought an iteration's end."""
    secs, lost, failed = (hist.values(JOB, m) for m in ("iter_s", "iter_lost", "iter_failed"))
    return [(t, s, lo or 0.0, fa or 0.0) for t, s, lo, fa in zip(hist.times, secs, lost, failed,
                                                                strict=True)
            if s is not None or lo is not None or fa is not None]


def _slow_iterations(iters: list[tuple[float, float | None, float, float]]) -> list[Finding]:
    """The latest iterations, while they are slow, lossy or failed (one finding)."""
    def bad(i: int) -> str | None:
        t, s, lost, failed = iters[i]
        if failed:
            return "failed"
        if lost:
            return f"lost {lost:.0f} packets"
        earlier = [x[1] for x in iters[:i] if x[1] is not None and not x[2] and not x[3]]
        if s is not None and len(earlier) >= ITER_BASELINE:
            base = statistics.median(earlier[-4 * ITER_BASELINE:])
            if s > ITER_RATIO * base:
                return f"took {s:.2f} s, {s / base:.1f}x the median {base:.2f} s"
        return None

    run = []
    for i in range(len(iters) - 1, -1, -1):
        why = bad(i)
        if why is None:
            break
        run.append((iters[i][0], why))
    if not run:
        return []
    done = [x[1] for x in iters if x[1] is not None]
    return [Finding(NAME, "job", "warning",
                    f"the job's last iteration {run[0][1]} ({len(run)} in a row)",
                    {"iteration_s": rounded(done[-6:], 3),
                     "lost_packets": [x[2] for x in iters[-6:]]}, run[-1][0])]
