"""The observer in a process of its own (ops.shell.observer): a real child process polls a
2x2 plan with no fabric under it (nothing to read, so every poll is empty), takes the job's
iterations, answers requests in order and hands back what it raised; a child that cannot
start says so in one line."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from ops import questions as Q
from ops.evaluate import GroundTruth
from ops.shell.experiment import stream_pairs
from ops.shell.monitor import Monitor
from ops.shell.observer import DaemonPid, JobFeed, LabRecord, ObserverError, ObserverProcess
from ops.telemetry import Store
from testbed.topologies import build
from traffic.iterations import JOB, Iteration


def quiet(record: LabRecord, interval: float, store: Store | None, feed: JobFeed) -> Monitor:
    """A monitor whose collector reads nothing from the machine (no fabric here)."""
    mon = Monitor(record, store, interval, job=feed)  # type: ignore[arg-type]
    mon.collector._poll_kernel = lambda t, values: None  # type: ignore[method-assign]
    return mon


class SlowCalibration(Monitor):
    def calibrate(self, since: float, timeout: float = 30.0) -> dict[str, Any]:
        time.sleep(1.0)
        return {"late": True}


def slow(record: LabRecord, interval: float, store: Store | None, feed: JobFeed) -> Monitor:
    mon = SlowCalibration(record, store, interval, job=feed)  # type: ignore[arg-type]
    mon.collector._poll_kernel = lambda t, values: None  # type: ignore[method-assign]
    return mon


def broken(*_a: Any) -> Monitor:
    raise RuntimeError("no switch daemon here")


@pytest.fixture(scope="module")
def record() -> LabRecord:
    return LabRecord(build("astral3", servers=2, gpus=2), None, {}, [DaemonPid(None, 0)])


def test_the_observer_polls_feeds_answers_and_hands_back_what_it_saw(record: LabRecord,
                                                                      tmp_path: Any) -> None:
    store = str(tmp_path / "telemetry.sqlite")
    obs = ObserverProcess(record, interval=0.1, store_path=store, build=quiet).start()
    try:
        pid = obs._proc.pid
        assert pid != os.getpid() and obs._proc.is_alive()
        obs.feed(Iteration(0, time.time(), time.time(), 0.5, {"dispatch": 0.5}, 3,
                           lossy=[{"src": "s0g0", "dst": "s1g1", "sport": 49153, "lost": 3,
                                   "kernel": "train"}]))
        thresholds = obs.calibrate(0.0)
        assert thresholds["polls"] >= 1 and thresholds["margin"] == 2.0
        assert obs.baseline() is None  # no traffic: no job baseline yet
        spec = Q.QuestionSpec((GroundTruth("link-degrade", "lf0r0~spine2#0", 0.0, 1e12),), (),
                              7, tuple(stream_pairs(record.plan)), 4, 3)
        answered = obs.ask(spec, 5.0)
        assert [q.text for q, _a, _t in answered] == [q.text for q in spec.questions(
            record.plan)]  # the child drew the very questions the parent would
        assert all(q.read is None and isinstance(a, Q.Answer) for q, a, _t in answered)
        time.sleep(0.3)
        seen = obs.stop()
    finally:
        obs.close()
    assert not obs._proc.is_alive()
    assert len(seen["poll_times"]) >= 3
    # the lossy iteration crossed the pipe: the job-based detector saw it
    assert [(a["detector"], a["component"]) for a in seen["alerts"]] == [("job-slow", JOB)]
    assert set(seen["baseline_alerts"]) == {"static-thresholds", "peer-outlier", "loss-vote"}
    assert seen["rows"] > 0  # the child kept the telemetry in the run's file
    # and closed it before it ended: one file, its write-ahead log folded in
    assert sorted(os.listdir(tmp_path)) == ["telemetry.sqlite"]
    with Store(store) as s:  # the job's loss crossed the pipe into the child's telemetry
        assert [v for _t, v in s.series(JOB, "lost:s0g0>s1g1")] == [3.0]
    with pytest.raises(ObserverError, match="gone|did not answer"):
        obs.baseline()


def test_an_observer_that_cannot_start_says_why_in_one_line(record: LabRecord) -> None:
    obs = ObserverProcess(record, interval=0.1, build=broken)
    with pytest.raises(ObserverError) as err:
        obs.start()
    obs.close()
    assert str(err.value) == "the observer process failed: RuntimeError: no switch daemon here"
    assert not obs._proc.is_alive()


def test_an_answer_given_up_on_is_dropped_and_the_next_request_gets_its_own(
        record: LabRecord) -> None:
    obs = ObserverProcess(record, interval=0.1, build=slow).start()
    try:
        with pytest.raises(TimeoutError, match="did not answer within 0.3 s"):
            obs._call(("calibrate", 0.0, 30.0), 0.3)
        assert obs.baseline() is None  # not the late {"late": True}
        assert obs.calibrate(0.0) == {"late": True}
    finally:
        obs.close()
