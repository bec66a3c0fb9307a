"""The forked runner of the flow model's policies (``testbed.models.forked``).

Results come back in task order, whole (bigger than a pipe's buffer), with the workers'
progress notes on the way; a worker's error is raised here with its message and stops
the others; a worker that dies without a word is an error; however the parent stops,
no worker outlives the call. Tests of a whole stopped CLI run are in
test_flowmodel_signals.py.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from testbed.models import forked


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _kids() -> list[int]:
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children", encoding="ascii") as fh:
        return [int(x) for x in fh.read().split()]


def _square(task, note):
    note(("working", task))
    return task * task


def test_results_in_task_order_and_notes_on_the_way():
    notes = []
    out = forked.map_forked(_square, list(range(7)), 3, lambda i, n: notes.append((i, n)))
    assert out == [x * x for x in range(7)]
    assert sorted(notes) == [(i, ("working", i)) for i in range(7)]
    assert _kids() == []


def test_one_job_runs_here_in_turn():
    pids = forked.map_forked(lambda t, note: os.getpid(), [1, 2, 3], 1)
    assert pids == [os.getpid()] * 3


def test_a_result_bigger_than_the_pipe_buffer():
    out = forked.map_forked(lambda n, note: b"x" * n, [5 << 20, 3, 1 << 20], 2)
    assert [len(x) for x in out] == [5 << 20, 3, 1 << 20]


def _fail_or_wait(task, note):
    if task == "fail":
        raise ValueError("policy 'x' refused: no path")
    note(("started", os.getpid()))
    time.sleep(600)


def test_a_worker_error_is_raised_here_and_stops_the_others():
    started = []
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="policy 'x' refused: no path") as info:
        forked.map_forked(_fail_or_wait, ["wait", "wait", "fail"], 3,
                          lambda i, n: started.append(n[1]))
    assert time.monotonic() - t0 < 60  # not the sleepers' 600 s
    assert isinstance(info.value.__cause__, forked.RemoteTraceback)
    assert "_fail_or_wait" in str(info.value.__cause__)
    assert not any(_alive(p) for p in started) and _kids() == []


def test_a_worker_that_dies_without_a_word():
    def die(task, note):
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(forked.WorkerError, match="died without a result"):
        forked.map_forked(die, [1, 2], 2)
    assert _kids() == []


def test_an_interrupt_in_the_parent_kills_and_reaps_every_worker():
    started = []

    def interrupt(i, note):
        started.append(note[1])
        if len(started) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        forked.map_forked(_fail_or_wait, ["wait"] * 4, 2, interrupt)
    assert len(started) == 2 and not any(_alive(p) for p in started) and _kids() == []
