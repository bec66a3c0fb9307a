"""What a fault shows a detector, in the few words fault kinds and alerts share. Pure.

A fault kind says which of these its faults produce (``EVIDENCE`` in
``testbed/faultkinds/<name>.py``) and a detector's alert which it gives
(``ops.detectors.AlertKind.evidence``; a baseline rule's in ``ops.baselines``). An alert is
then evidence of every kind that produces one of its words (``testbed.faultkinds.shown_by``),
so neither side names the other: a new kind is classified by the alerts already there, and
a new detector classifies the kinds already there. The words live here, at the bottom, so
both sides spell them from one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Evidence(StrEnum):
    """One thing a detector can see go wrong."""

    LOSS = "loss"  # packets vanish on the way (dropped on a cable, a NIC, a switch rule)
    ERRORS = "errors"  # frames reach a port and are refused there, counted (above its MTU)
    DOWN = "down"  # a part stops answering: a link, a switch, the controller
    SLOW = "slow"  # traffic moves below what it should: a slow lane, an overloaded receiver
    MISROUTE = "misroute"  # traffic arrives where the plan does not send it
    CORRUPT = "corrupt"  # frames arrive damaged: their checksum fails at the receiver


#: Every word, in the order above.
EVIDENCE = tuple(e.value for e in Evidence)


def evidence(words: Iterable[str], whose: str) -> tuple[str, ...]:
    """``words`` as a tuple, each checked to be one of ``EVIDENCE`` and none twice; a
    ValueError naming ``whose`` declaration otherwise (a typo would classify nothing)."""
    got = tuple(words) if not isinstance(words, str) else (words,)
    bad = [w for w in got if w not in EVIDENCE]
    if bad or len(set(got)) != len(got):
        raise ValueError(f"{whose}: evidence must be distinct words of {', '.join(EVIDENCE)} "
                         f"(got {got!r})")
    return tuple(str(w) for w in got)
