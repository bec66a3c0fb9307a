"""``astral-lab ops rescore --redetect``: this checkout's detectors over a recorded run.

A run folder is written here by hand: its ``ops_eval.json`` (a fault phase with one lane
going down, and no alert raised live, as a detector that missed it would leave) and its
``telemetry.sqlite`` (the lane's ``up`` going to 0 in the middle). Replayed, the detectors
of today find the fault the recorded run missed; the run's files are only read.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import pytest

from astral_lab import ops_cli
from ops.replay import redetect
from ops.telemetry import History, Store
from testbed.topologies import build

PLAN = build("astral3", servers=2, gpus=2)
LANE = "lf0r0~spine1#0"
T0 = 1_000.0


def write_run(folder: str, *, first_poll: float, last_poll: float) -> str:
    """A run whose clean phase is T0..T0+60 and fault phase T0+60..T0+120, the lane down
    from T0+80 to T0+90; polls recorded every second from ``first_poll`` to
    ``last_poll``."""
    os.makedirs(folder)
    phases = {"calibrate": T0 - 30, "clean": T0, "faults": T0 + 60, "end": T0 + 120}
    events = [{"time": T0 + 80, "kind": "link-down", "component": LANE, "action": "inject",
               "fault_id": 1},
              {"time": T0 + 90, "kind": "link-down", "component": LANE, "action": "undo",
               "fault_id": 1}]
    res = {"plan": PLAN.to_dict(), "phases": phases, "interval_s": 1.0, "events": events,
           "alerts": [], "diagnoses": [], "baseline_alerts": {}}
    with open(os.path.join(folder, "ops_eval.json"), "w", encoding="utf-8") as f:
        json.dump(res, f)
    with Store(os.path.join(folder, "telemetry.sqlite")) as store:
        t = first_poll
        while t <= last_poll:
            store.add_samples(t, {(LANE, "up"): 0.0 if T0 + 81 <= t <= T0 + 89 else 1.0})
            t += 1.0
    return folder


def digest(folder: str) -> dict[str, str]:
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_the_detectors_of_today_find_what_the_recorded_run_missed(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(os.path.join(str(tmp_path), "run"), first_poll=T0 - 30,
                    last_poll=T0 + 120)
    before = digest(run)
    live = ops_cli.rescore(run)
    assert live["detected"] == 0 and "replayed" not in live
    again = ops_cli.rescore(run, redetect=True)
    assert again["detected"] == 1 and again["top1"] == 1.0
    assert again["false_alarms_per_hour_clean"] == 0.0
    assert again["replayed"] == {"polls": 151, "from": T0 - 30, "to": T0 + 120,
                                 "clean": True, "faults": True}
    assert ops_cli.main(["rescore", "--redetect", run]) == 0
    out = capsys.readouterr().out
    assert "agent (replayed)" in out and "151 polls" in out and "not scored" not in out
    assert digest(run) == before  # read, never written


def test_a_store_that_lost_the_clean_phase_scores_no_false_alarms_for_it(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The store keeps its newest samples: a run whose oldest polls were dropped is
    replayed over its fault phase only, and says so."""
    run = write_run(os.path.join(str(tmp_path), "run"), first_poll=T0 + 55,
                    last_poll=T0 + 120)
    again = ops_cli.rescore(run, redetect=True)
    assert again["detected"] == 1 and not again["replayed"]["clean"]
    assert again["false_alarms_per_hour_clean"] is None
    assert again["false_alarms_per_hour"] is None
    assert ops_cli.main(["rescore", "--redetect", run]) == 0
    assert "its false alarms are not scored" in capsys.readouterr().out


@pytest.mark.parametrize("first, last, why", [
    (T0 + 70, T0 + 120, "do not cover the fault phase"),
    (None, None, "no polls recorded"),
])
def test_a_store_that_cannot_replay_the_faults_is_one_clear_error(
        tmp_path: Any, capsys: pytest.CaptureFixture[str], first: float | None,
        last: float | None, why: str) -> None:
    run = write_run(os.path.join(str(tmp_path), "run"), first_poll=first or 1.0,
                    last_poll=last or 0.0)
    assert ops_cli.main(["rescore", "--redetect", run]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0], err
    os.remove(os.path.join(run, "telemetry.sqlite"))
    assert ops_cli.main(["rescore", "--redetect", run]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "telemetry.sqlite" in err[0], err


def test_redetect_raises_and_answers_as_the_live_agent_does() -> None:
    """Pure: the lane's alert opens at the poll its state says down, and the agent's
    answer at each poll with an alert open names it first."""
    hist = History(maxlen=None)
    for i in range(12):
        hist.add(float(i), {(LANE, "up"): 0.0 if 4 <= i <= 6 else 1.0})
    got = redetect(PLAN, hist)
    assert [(a["detector"], a["component"], a["opened"]) for a in got["alerts"]] == [
        ("link-down", LANE, 4.0)]
    assert got["diagnoses"] and all(d[1][0] == LANE for d in got["diagnoses"])
    assert got["covered"] == (0.0, 11.0) and got["polls"] == 12
    assert redetect(PLAN, History(maxlen=None))["covered"] is None
