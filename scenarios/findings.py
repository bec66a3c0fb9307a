"""Why a measurement differs from its model, in words the run's own evidence supports.

A finding that explains a gap with a cause fixed when its text was written goes stale when
the lab changes under it (the senders were once Python agents; they are compiled now). So
the causes that lie in the run rather than the fabric are chosen here from what the run
recorded beside each measurement: the fidelity guard's margin, the traffic plane that sent
the packets, losses and start skew. A scenario states its physical explanation only where
none of these applies.
"""

from __future__ import annotations

from scenarios.fidelity import WARN_BELOW
from traffic.roce import Plane

#: start skew above this share of the span it is compared with is worth saying
SKEW_SHARE = 0.1


def pace_caveats(*, margin: float | None, plane: Plane | str | None = None, lost: int = 0,
                 start_skew_s: float | None = None, span_s: float | None = None) -> list[str]:
    """What in this run, rather than the fabric, may have set the measured pace (empty when
    nothing did): a thin or missing fidelity margin, the Python traffic plane, lost packets,
    a start skew that is a sizeable share of ``span_s``. ``margin`` NaN is a run with the
    guard off (``--force``); None is a margin that was not recorded."""
    out = []
    if margin is not None and margin != margin:
        out.append("the fidelity guard was off (--force), so nothing checked that this "
                   "machine could switch the load: the CPU may have set the pace")
    elif margin is not None and margin < WARN_BELOW:
        out.append(f"the fidelity margin was {margin:.2f}x (the guard warns below "
                   f"{WARN_BELOW:g}): this machine's switching was near its limit, so the "
                   "CPU may have set the pace, not the fabric")
    if plane == Plane.PYTHON:
        out.append("the Python agents sent the packets (plane python; a sleep per packet), "
                   "and they fall behind their pace under load where the compiled plane "
                   "does not")
    if lost:
        out.append(f"{lost} packets were lost and not retransmitted")
    if start_skew_s is not None and span_s and start_skew_s > SKEW_SHARE * span_s:
        out.append(f"the senders started up to {1e3 * start_skew_s:.0f} ms apart, "
                   f"{100 * start_skew_s / span_s:.0f}% of the {span_s:.2f} s measured")
    return out


def caveat_text(caveats: list[str]) -> str:
    """The caveats as one sentence ('' for none)."""
    if not caveats:
        return ""
    return "In this run " + "; ".join(caveats) + "."


def margin_text(margin: float | None) -> str:
    """A margin as the report quotes it."""
    if margin is None:
        return "not recorded"
    return "off (guard off)" if margin != margin else f"{margin:.2f}x"
