"""Baselines the lab's detectors and agent are scored against, on the same telemetry. Pure.

A baseline is an alert source like ``ops.detectors.Engine``: after every poll its
``step(hist)`` reads the ``History`` and opens or clears alerts (``AlertBook``: one per
rule and component while its condition holds), so ``ops.evaluate.score`` scores it the
same way. Two baselines, each what a fault-finder without the lab's logic would run:

* ``StaticThresholds``: the fixed per-counter alarms an operator sets on a switch or NIC
  (a drop counter above zero, a link down, a carrier change, a lane carrying far less than
  its ECMP siblings), judged on one poll, no smoothing;
* ``PeerOutlier``: Minder's idea, a job-level detector that knows nothing of the fabric:
  the host whose received rate stands farthest from its peers', for several polls, is the
  faulty machine.
"""

from __future__ import annotations

import statistics

from ops.detectors import JOB_MIN_MBPS, AlertBook, Finding, Topo, run_start
from ops.telemetry import CONTROLLER, History
from vocab.plan import WiringPlan

#: the names ``ops-eval`` files the baselines' scores under
NAMES = ("static-thresholds", "peer-outlier")

_LOSS = ("nic-loss", "gray-loss", "corruption")
_DOWN = ("link-down", "link-flap", "switch-down")
#: The fault kinds each baseline alert is evidence of, by the name it carries: what
#: ``ops.detectors.AlertKind.fault_kinds`` says for a detector's alert (``ops.evaluate``
#: scores kind classification by either). A baseline names no kind itself; its rule does:
#: a drop counter cannot tell whose loss, a port down cannot tell a cut from a flap or a
#: dead switch (it fires per link), a host far from its peers is one of the kinds aimed at
#: a host.
FAULT_KINDS: dict[str, tuple[str, ...]] = {
    "static:nic_drops": _LOSS, "static:qdrops_ab": _LOSS, "static:qdrops_ba": _LOSS,
    "static:up": _DOWN, "static:ctl_up": _DOWN, "static:carrier_changes": _DOWN,
    "static:controller_up": ("controller-kill", "controller-restart"),
    # a switch's port drop/error counters: the kernel drops there the frames a lowered MTU
    # refuses (a blackhole's OpenFlow drops and corrupted frames are not counted there)
    "static:port_drops": ("mtu-mismatch",),
    "static:mbps_ab": ("link-degrade",), "static:mbps_ba": ("link-degrade",),
    "peer-outlier": ("nic-loss", "hot-receiver"),
}


class StaticThresholds(AlertBook):
    """Per-counter thresholds on the latest poll alone; each alert names the counter's
    component and its rule (``static:<counter>``; the controller's ``up`` is
    ``static:controller_up``, so the rule alone says what it is about: ``FAULT_KINDS``).

    * a NIC's drops (``in_drop_pps + out_drop_pps``) > ``NIC_DROP_PPS``: an operator's
      "discards > 0"; here the counter is the gap between the NIC's and IP's packet counts,
      which ARP frames (on the NIC, not in IP) keep at a packet or two a second on a clean
      host, so zero would ring all the time;
    * a switch port's queue drops > 0 (``qdrops``), a switch's OpenFlow drop/error
      counters > 0 (``port_drops``);
    * a link down (``up`` or the controller's ``ctl_up`` is 0), a carrier change
      (``carrier_changes`` > 0), the controller not answering;
    * a lane (a leaf's uplink) carrying < ``RATE_RATIO`` of the median of its ECMP
      siblings, each way, while they carry >= ``JOB_MIN_MBPS``: ECMP plans them equal.
    """

    NIC_DROP_PPS = 2.0
    RATE_RATIO = 0.5

    def __init__(self, plan: WiringPlan) -> None:
        super().__init__()
        self.topo = Topo.from_plan(plan)

    def findings(self, hist: History) -> list[Finding]:
        now = hist.now
        out: list[Finding] = []

        def alarm(counter: str, comp: str, value: float | None) -> None:
            out.append(Finding(f"static:{counter}", comp, "warning",
                               f"{comp}: {counter} = {value}", {counter: value}, now))

        for host in sorted(self.topo.hosts):
            drops = sum(hist.latest(host, m) or 0.0 for m in ("in_drop_pps", "out_drop_pps"))
            if drops > self.NIC_DROP_PPS:
                alarm("nic_drops", host, drops)
        for comp in self.topo.links:
            for counter in ("qdrops_ab", "qdrops_ba", "carrier_changes"):
                v = hist.latest(comp, counter)
                if v is not None and v > 0:
                    alarm(counter, comp, v)
            for counter in ("up", "ctl_up"):
                if hist.latest(comp, counter) == 0.0:
                    alarm(counter, comp, 0.0)
        for sw in sorted(self.topo.switch_links):
            v = hist.latest(sw, "port_drops")
            if v is not None and v > 0:
                alarm("port_drops", sw, v)
        if hist.latest(CONTROLLER, "up") == 0.0:  # its own rule: a link's "up" is another
            alarm("controller_up", CONTROLLER, 0.0)
        for lanes in self.topo.uplinks.values():
            for d in ("ab", "ba"):
                rate = {c: hist.latest(c, f"mbps_{d}") for c in lanes}
                for c, v in rate.items():
                    peers = [r for p, r in rate.items() if p != c and r is not None]
                    if v is None or len(peers) < 2:
                        continue
                    med = statistics.median(peers)
                    if med >= JOB_MIN_MBPS and v < self.RATE_RATIO * med:
                        alarm(f"mbps_{d}", c, round(v, 2))
        return out


class PeerOutlier(AlertBook):
    """Minder's idea: per poll, the host whose received rate (NIC ``rx_mbps``, its share of
    the job) is farthest from its peers' median, flagged when that distance exceeds
    ``K`` x the peers' MAD for ``M`` polls in a row.

    ``K = 5``: for Gaussian jitter the MAD is ~0.67 sigma, so 5 MAD is ~3.4 sigma, which
    one clean host crosses it in about one poll in 1,300; ``M = 3`` polls in a row (the
    continuity Minder requires; the job-slow detector's 3) makes that a rare joint event
    and lets a transient (one slow poll on a shared core) pass. The MAD is floored at
    ``MAD_FLOOR`` of the peers' median: peers receiving almost the same rate would make any
    jitter an outlier. It sees only hosts, so it names a host (its NIC link), never a switch
    or a lane: a fault in the fabric shows, at best, as the host behind it.
    """

    K = 5.0
    M = 3
    MAD_FLOOR = 0.02

    def __init__(self, plan: WiringPlan) -> None:
        super().__init__()
        self.topo = Topo.from_plan(plan)

    def outlier(self, rates: dict[str, float]) -> str | None:
        """The host of one poll's rates that is an outlier, or None."""
        if len(rates) < 3:
            return None
        center = statistics.median(rates.values())
        host = max(sorted(rates), key=lambda h: abs(rates[h] - center))
        peers = [v for h, v in rates.items() if h != host]
        med = statistics.median(peers)
        mad = statistics.median(abs(v - med) for v in peers)
        if med < JOB_MIN_MBPS:  # an idle job: nothing to compare
            return None
        return host if abs(rates[host] - med) > self.K * max(mad, self.MAD_FLOOR * med) \
            else None

    def findings(self, hist: History) -> list[Finding]:
        cols = {h: hist.values(h, "rx_mbps") for h in sorted(self.topo.hosts)}
        flagged = []
        for i in range(max(0, len(hist) - self.M), len(hist)):
            flagged.append(self.outlier({h: c[i] for h, c in cols.items()
                                         if c[i] is not None}))
        last = flagged[-1] if flagged else None
        n, since = run_start(list(hist.times)[-len(flagged):],
                             [f is not None and f == last for f in flagged])
        if last is None or n < self.M:
            return []
        return [Finding("peer-outlier", self.topo.nic_link.get(last, last), "warning",
                        f"{last} receives {cols[last][-1]:.1f} Mb/s, far from its peers",
                        {"rx_mbps": cols[last][-1]}, since)]  # type: ignore[arg-type]


def baselines(plan: WiringPlan) -> dict[str, AlertBook]:
    """A fresh instance of every baseline, by the name its scores are filed under."""
    return {"static-thresholds": StaticThresholds(plan), "peer-outlier": PeerOutlier(plan)}
