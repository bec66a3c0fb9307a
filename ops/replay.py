"""Today's detectors and agent over a recorded run: what they would have raised and
answered, poll by poll. Pure.

An ops-eval run keeps its telemetry (``telemetry.sqlite``: every poll's samples, the job's
and the probes' per-path losses, the wiring checks' results). Feeding those polls, in
order, to a fresh ``Engine`` and asking the agent after each one, as the live observer
does (``ops.shell.monitor.Monitor``), gives the alerts and answers the detectors of this
checkout would have given on the same packets. So a change to a detector is scored on
recorded faults in a minute, not on a new half-hour run; the live run still has the last
word, since what the agent does to the fabric (when it checks the wiring) is recorded,
not replayed. The store keeps its newest samples only (``ops.telemetry.Store``): the
polls it lost are not replayed, and ``covered`` says which span was.
"""

from __future__ import annotations

from typing import Any

from ops.agent import Tools, diagnose
from ops.detectors import Engine
from ops.telemetry import HISTORY_POLLS, History
from vocab.plan import WiringPlan


def redetect(plan: WiringPlan, recorded: History) -> dict[str, Any]:
    """``{"alerts", "diagnoses", "covered", "polls"}``: every alert the detectors raise over
    ``recorded``'s polls (as ``Alert.to_dict``), the agent's answer ("what is wrong?") at
    each poll with an alert open, as ``(time, ranked components, top suspect's detector)``,
    and the ``(first, last)`` poll times replayed."""
    engine = Engine(plan)
    hist = History(HISTORY_POLLS)
    keys = list(recorded.keys())
    cols = {k: recorded.values(*k) for k in keys}
    diagnoses: list[list[Any]] = []
    times = list(recorded.times)
    for i, t in enumerate(times):
        hist.add(t, {k: col[i] for k, col in cols.items() if col[i] is not None})
        engine.step(hist)
        if engine.active:
            d = diagnose(Tools(plan, history=hist, engine=engine), "what is wrong?",
                         probe=False)
            diagnoses.append(list(d.record(t)))
    return {"alerts": [a.to_dict() for a in engine.all_alerts()], "diagnoses": diagnoses,
            "covered": (times[0], times[-1]) if times else None, "polls": len(times)}
