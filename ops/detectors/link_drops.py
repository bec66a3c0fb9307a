"""A link end discards frames it receives, poll after poll: an MTU mismatch.

A detector module (``ops/detectors/``), pure: ``detect(hist, topo)`` says which
components the condition holds for at the latest poll; its rule is in its docstring and
its thresholds are the constants below.

What it reads is an interface's discard counter, as a switch shows it: ``rxdrops_ab`` /
``rxdrops_ba``, frames of that direction the receiving end dropped (see
``ops.shell.collector.Collector._poll_kernel``). On a healthy fabric they stay at 0 under
traffic, so a few discards a poll are already specific: a port refusing frames larger
than its MTU (small frames and pings pass, so nothing else looks wrong).
"""

from __future__ import annotations

from ops.detectors import AlertKind, Finding, Topo, run_start
from ops.telemetry import History
from vocab.evidence import Evidence
from vocab.plugins import plugin_name

ORDER = 50  # the detectors run (and list) in this order (vocab.plugins.listing_key)
#: the name its alerts carry: the module's own (a copy under a new name raises its own)
NAME = plugin_name(__name__)
#: a discard counter on one port names the port and, here, what is wrong with it: frames
#: above the receiving end's MTU; above loss (a NIC's drops could be anywhere on it),
#: below a dead link or switch
ALERTS = {NAME: AlertKind(85, "compare the MTU of both ends of {component} (`ip link show` "
                               "on each; frames larger than one end's MTU are dropped by "
                               "it) and set the lower one back to the fabric's; {summary}",
                          evidence=(Evidence.ERRORS,), parts=("link",))}

#: link-drops: the receiving end discards at least this many frames in a poll (one
#: full-size frame is already more than a healthy fabric ever discards) ...
DROPS_MIN = 1.0
#: ... in this many polls in a row, a port that refuses every full-size frame keeps
#: refusing them. Polls in which the link is down or its carrier changed do not count: a
#: link going down discards the frames in flight and those sent to it before its peer
#: sees the carrier go (a few, in the poll it went down and sometimes the next), and
#: those polls are link-down's and flapping's evidence, not an MTU's.
DROPS_POLLS = 2


def detect(hist: History, topo: Topo) -> list[Finding]:
    """Link drops: one end of a link discards >= DROPS_MIN received frames per poll, in
    DROPS_POLLS polls in a row (either direction; the first one that holds is reported).

    A poll counts only while the link is up and its carrier did not change in it. The
    queue drops of a congested port are ``loss``'s (``qdrops``); these are frames the
    receiving interface itself refused, which congestion never causes.
    """
    times = list(hist.times)
    out = []
    for comp in topo.links:
        steady = [u != 0.0 and not c for u, c in zip(
            hist.values(comp, "up"), hist.values(comp, "carrier_changes"), strict=True)]
        for d in ("ab", "ba"):
            drops = hist.values(comp, f"rxdrops_{d}")
            n, since = run_start(times, [s and v is not None and v >= DROPS_MIN
                                         for s, v in zip(steady, drops, strict=True)])
            if n >= DROPS_POLLS:
                recv = topo.links[comp].b if d == "ab" else topo.links[comp].a
                out.append(Finding(
                    NAME, comp, "warning",
                    f"link {comp} ({d[0]}->{d[1]}): {recv} discarding received frames, "
                    f"{drops[-1]:.0f} in the last poll, for {n} polls",
                    {f"rxdrops_{d}": drops[-n - 2:], "receiver": recv, "polls": n},
                    since))  # type: ignore[arg-type]
                break
    return out
