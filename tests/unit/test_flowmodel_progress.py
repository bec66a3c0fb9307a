"""Progress of a long model run (``testbed.models.progress``): what the status line says,
how the time left is estimated, and that it is drawn only on a terminal (a pty here) and
never into a pipe, a file or a test's captured stderr."""

from __future__ import annotations

import io
import os
import pty
import select

import numpy as np

from astral_lab.cli import main
from testbed.models import progress as pg
from testbed.models.flowmodel import run


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_work_fraction_and_durations():
    assert pg.work_fraction(0, 100) == 0.0
    assert pg.work_fraction(5, 0) == 0.0  # nothing to solve yet
    assert pg.work_fraction(50, 100) == 0.75  # refills cost the classes still sending
    assert pg.work_fraction(100, 100) == 1.0 and pg.work_fraction(120, 100) == 1.0
    assert [pg.duration(s) for s in (0.4, 42, 185, 3725)] == ["0 s", "42 s", "3 min 5 s",
                                                             "1 h 2 min"]


def test_the_line_names_every_policy_and_the_time_left():
    tasks = [pg.TaskState("ecmp", "solving", 0.0, None, 50, 100),
             pg.TaskState("ecmp-fluid", "done", 0.0, 4.0),
             pg.TaskState("planned", "routing", 8.0),
             pg.TaskState("adaptive")]
    left = pg.estimate_left(tasks, now=12.0, jobs=2)
    # ecmp: 12 s for 75% of its work -> 16 s in all, 4 s left; known totals 4 and 16 s,
    # mean 10 s: planned (4 s in) about 6 s more, adaptive 10 s; 20 s of work over 2 jobs
    assert left == 10.0
    line = pg.format_line(tasks, 12.0, left)
    assert line == ("model: 12 s, about 10 s left | ecmp 75%, ecmp-fluid done, "
                    "planned routing, adaptive waiting")
    assert pg.estimate_left([pg.TaskState("ecmp", "routing", 0.0)], 5.0, 1) is None
    assert "estimating" in pg.format_line(tasks[:1], 1.0, None)


def test_lines_where_not_a_terminal_one_per_tenth_after_a_few_seconds():
    """`model astral3 --gpus 64 --workload prefill --tokens 1048576` computed for ~8 min
    and said nothing when stderr was not a terminal."""
    clock = Clock()
    piped = io.StringIO()
    p = pg.Progress(piped, clock=clock, delay=2.0, lines_after=5.0)
    assert p.lines and p.enabled
    p.start(["ecmp"])
    clock.t += 3
    p.note(0, ("routing", 0, 0))
    assert piped.getvalue() == ""  # a short run says nothing
    clock.t += 3
    p.note(0, ("routing", 0, 0))
    assert piped.getvalue() == "model: 6 s, estimating | ecmp routing\n"
    clock.t += 1
    p.note(0, ("routing", 0, 0))
    assert piped.getvalue().count("\n") == 1  # no new tenth: no new line
    clock.t += 1
    p.note(0, ("solving", 10, 100))  # 19% of the work, 5 s after the task began
    clock.t += 1
    p.note(0, ("solving", 20, 100))  # 36%
    lines = piped.getvalue().splitlines()
    assert lines[1:] == ["model: 8 s, about 21 s left | ecmp 19%",
                         "model: 9 s, about 11 s left | ecmp 36%"]
    clock.t += 100
    p.note(0, ("solving", 30, 100))  # 51% in 106 s: about 208 s for the task
    lines = piped.getvalue().splitlines()
    assert lines[3] == ("model: this run takes about 3 min 31 s in all (estimate); a line "
                        "per tenth done follows")
    assert lines[4] == "model: 1 min 49 s, about 1 min 42 s left | ecmp 51%"
    p.close()
    assert "\r" not in piped.getvalue()


def test_silent_where_told_and_only_after_the_delay():
    clock = Clock()
    out = io.StringIO()
    p = pg.Progress(out, clock=clock, delay=2.0, enabled=False)
    assert not p.enabled and not p.lines
    p.start(["ecmp"])
    clock.t += 30
    p.note(0, ("solving", 10, 100))
    p.close()
    assert out.getvalue() == ""

    tty = Tty()
    p = pg.Progress(tty, clock=clock, delay=2.0, interval=1.0)
    assert p.enabled
    p.start(["ecmp", "planned"], jobs=2)
    p.note(0, ("routing", 0, 0))
    assert tty.getvalue() == ""  # not before the delay
    clock.t += 3
    p.note(0, ("solving", 50, 100))
    drawn = tty.getvalue()
    assert drawn.startswith("\r") and "ecmp 75%" in drawn and "planned waiting" in drawn
    clock.t += 0.5
    p.note(0, ("solving", 60, 100))
    assert tty.getvalue() == drawn  # not more often than every interval
    p.close()
    assert tty.getvalue().endswith("\r") and tty.getvalue()[len(drawn):].strip() == ""


def test_forced_on_for_a_stream_that_is_not_a_terminal():
    out = io.StringIO()
    p = pg.Progress(out, enabled=True, delay=0.0)
    p.start(["ecmp"])
    p.note(0, ("done", 10, 10))
    assert "ecmp done" in out.getvalue()


def test_a_steps_forecast_is_its_measured_cost(monkeypatch):
    """The estimate said before a long MoE step is drawn rests on a measurement: the same
    step at a sixteenth of its tokens, timed and scaled by the tokens, lands near the
    step's own time (both see the machine's load alike). Short steps and all-to-alls are
    not forecast (they cost no calibration)."""
    import time

    from testbed.models import jobs

    monkeypatch.setattr(jobs, "FORECAST_FROM", 1 << 16)
    monkeypatch.setattr(jobs, "CALIBRATION_DRAWS", 1 << 12)
    fc = jobs.step_forecast(4, 8, workload="prefill", tokens=2048)  # 32 GPUs: 128 tokens
    t0 = time.perf_counter()
    jobs.make_job(4, 8, workload="prefill", tokens=2048)
    took = time.perf_counter() - t0
    assert fc is not None and (fc.group_size, fc.calibration_tokens) == (32, 128)
    assert took / 3 <= fc.seconds <= took * 4, (fc, took)
    assert jobs.step_forecast(4, 8, workload="alltoall") is None
    assert jobs.step_forecast(4, 8, workload="decode", tokens=64) is None  # 2,048 draws


def test_a_forecast_is_one_line_anywhere_but_only_past_a_minute():
    for stream in (io.StringIO(), Tty()):
        p = pg.Progress(stream)
        p.forecast(59.0, "drawing the step", "measured")
        assert stream.getvalue() == ""
        p.forecast(125.0, "drawing the step", "measured")
        assert stream.getvalue() == ("model: drawing the step should take about 2 min 5 s here "
                                     "(an estimate: measured)\n")
    quiet = io.StringIO()
    pg.Progress(quiet, enabled=False).forecast(3600.0, "x", "y")
    assert quiet.getvalue() == ""


def test_watch_reads_the_probe_while_a_task_runs():
    probe = pg.probe()
    notes = []
    with pg.Watch(probe, notes.append, interval=0.01):
        probe[2] = 40
        probe[0] = 10
        deadline = 200
        while not any(n == ("solving", 10.0, 40.0) for n in notes) and deadline:
            select.select([], [], [], 0.01)
            deadline -= 1
    assert notes[0] == ("routing", 0.0, 0.0) and ("solving", 10.0, 40.0) in notes


def _read_all(fd: int) -> str:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace")


def test_a_run_draws_its_line_on_a_terminal_from_forked_workers():
    master, slave = pty.openpty()
    try:
        with os.fdopen(os.dup(slave), "w") as tty:
            p = pg.Progress(tty, delay=0.0, interval=0.0)
            assert p.enabled
            doc, res = run("astral3", 16, workload="decode", jobs=2, progress=p,
                           policies=["ecmp", "ecmp-fluid", "planned"])
            p.close()
        text = _read_all(master)
    finally:
        os.close(master)
        os.close(slave)
    assert "model: " in text
    for label in ("ecmp", "ecmp-fluid", "planned"):
        assert f"{label} done" in text
    assert all(np.isfinite(r.completion_s) for r in res)


def test_the_cli_writes_whole_lines_into_captured_stderr(tmp_path, monkeypatch, capsys):
    """No status line (no carriage returns) where stderr is not a terminal; whole lines,
    here from the first moment (a real run waits ``LINES_AFTER`` seconds)."""
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path))
    monkeypatch.setattr(pg, "LINES_AFTER", 0.0)
    assert main(["model", "astral3", "--gpus", "16", "--workload", "decode", "--jobs", "2"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and err.endswith("\n")
    lines = err.splitlines()
    assert lines and all(line.startswith("model: ") for line in lines)
    assert lines[-1].endswith("adaptive done")
