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
from scenarios.prose import Prose
from traffic.roce import Plane

WORDS = Prose("findings")

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
        out.append(WORDS("guard_off"))
    elif margin is not None and margin < WARN_BELOW:
        out.append(WORDS("thin_margin", margin=margin, warn_below=WARN_BELOW))
    if plane == Plane.PYTHON:
        out.append(WORDS("python_plane"))
    if lost:
        out.append(WORDS("lost", lost=lost))
    if start_skew_s is not None and span_s and start_skew_s > SKEW_SHARE * span_s:
        out.append(WORDS("start_skew", skew_ms=1e3 * start_skew_s,
                         share_pct=100 * start_skew_s / span_s, span_s=span_s))
    return out


def caveat_text(caveats: list[str]) -> str:
    """The caveats as one sentence ('' for none)."""
    return WORDS("caveats", caveats="; ".join(caveats)) if caveats else ""


def margin_text(margin: float | None) -> str:
    """A margin as the report quotes it."""
    if margin is None:
        return WORDS("margin_not_recorded")
    return WORDS("margin_off") if margin != margin else WORDS("margin", margin=margin)
