"""A host or a switch port drops packets, poll after poll.

A detector module (``ops/detectors/``), pure: ``detect(hist, topo)`` says which
components the condition holds for at the latest poll; its rule is in its docstring and
its thresholds are the constants below.
"""

from __future__ import annotations

from ops.detectors import AlertKind, Finding, Topo, rounded, run_start
from ops.telemetry import History
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 40  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: a NIC or a queue dropping packets looks the same whether the NIC loses them, the cable
#: does, or bit errors make the receiver drop them
ALERTS = {NAME: AlertKind(70, "check NIC/port {component}: drop counters, firmware, cable; "
                               "drain it from the job if loss persists",
                          evidence=(Evidence.LOSS,), parts=("host", "link"))}

#: loss: a host drops (in + out) at least this fraction of its IP packets ...
LOSS_RATIO = 0.01
#: ... and at least this many packets a second ...
LOSS_MIN_PPS = 10.0
#: ... in this many polls in a row. Queue drops on a switch port count the same way.
LOSS_POLLS = 2
#: a poll where the NIC sent (almost) nothing of what IP handed it is a transmit stall, not
#: random loss: seen on clean runs here for ~3 s at a time (packets held for an unresolved
#: neighbour under load); not counted as loss (see docs/operations.md, known gaps).
STALL_RATIO = 0.9


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Loss: a host drops >= LOSS_RATIO of its IP packets (and >= LOSS_MIN_PPS packets/s),
    or a switch port's queue drops >= LOSS_MIN_PPS packets/s, for LOSS_POLLS polls.

    Host drops are the gap between the NIC's and the IP layer's counters in the host's
    namespace (see ``ops.shell.collector.Collector._poll_hosts``): a NIC losing packets shows
    there, whether the NIC or netfilter drops them.
    """
    times = list(hist.times)
    out = []
    for host in sorted(topo.hosts):
        din = hist.values(host, "in_drop_pps")
        dout = hist.values(host, "out_drop_pps")
        pin = hist.values(host, "in_pps")
        pout = hist.values(host, "out_pps")
        ok, ratio = [], []
        for a, b, c, d in zip(din, dout, pin, pout, strict=True):
            if None in (a, b, c, d):
                ok.append(False)
                ratio.append(None)
                continue
            if d and b / d >= STALL_RATIO:  # type: ignore[operator]
                b = 0.0  # a stall, not loss
            drops, total = a + b, max(c + d, 1e-9)  # type: ignore[operator]
            ratio.append(drops / total)
            ok.append(drops >= LOSS_MIN_PPS and drops / total >= LOSS_RATIO)
        n, since = run_start(times, ok)
        if n >= LOSS_POLLS:
            out.append(Finding(NAME, host, "warning",
                               f"NIC {host} losing {100 * ratio[-1]:.1f}% of packets "
                               f"({(din[-1] or 0) + (dout[-1] or 0):.0f}/s) for {n} polls",
                               {"drop_ratio": [None if r is None else round(r, 4)
                                               for r in ratio[-n - 2:]],
                                "in_drop_pps": rounded(din[-n - 2:]),
                                "out_drop_pps": rounded(dout[-n - 2:])},
                               since))  # type: ignore[arg-type]
    for comp in topo.links:
        for d in ("ab", "ba"):
            q = hist.values(comp, f"qdrops_{d}")
            n, since = run_start(times, [v is not None and v >= LOSS_MIN_PPS for v in q])
            if n >= LOSS_POLLS:
                out.append(Finding(NAME, comp, "warning",
                                   f"link {comp} ({d[0]}->{d[1]}) queue dropping "
                                   f"{q[-1]:.0f} packets/s", {f"qdrops_{d}": q[-n - 2:]},
                                   since))  # type: ignore[arg-type]
                break
    return out

