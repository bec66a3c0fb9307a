"""Benchmark children die with their parent and stop what they built (no root).

A benchmark child builds a real fabric; the test stands in for it with a process that
writes a marker from its ``finally`` block, which is where the real child stops its
fabric. Real processes, real signals: the parent is killed with SIGKILL, as a crash
or ``kill -9`` would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import pytest

from benchmarks import common

REPO = str(Path(__file__).resolve().parents[2])
DEADLINE_S = 60.0  # generous: only a broken death signal should ever reach it

#: The child: ask for the death signal, say so, then sleep until stopped.
CHILD = """
import os, sys, time
sys.path.insert(0, {repo!r})
from benchmarks.common import die_with_parent
die_with_parent({parent})
with open({ready!r} + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename({ready!r} + ".tmp", {ready!r})
try:
    time.sleep(600)
finally:
    with open({stopped!r}, "w") as f:
        f.write("stopped")
"""

#: The parent: start the child (as ``run_child`` does), then sleep until killed.
PARENT = """
import os, subprocess, sys
child = {child!r}.replace("PARENT", str(os.getpid()))
subprocess.Popen([sys.executable, "-c", child])
import time
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie not yet reaped by its new parent counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _wait_for(path: Path, proc: subprocess.Popen[bytes] | None = None) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before {path.name}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} never appeared")
        time.sleep(0.05)
    return path.read_text()


def test_child_stops_through_its_finally_when_its_parent_is_killed(tmp_path: Path) -> None:
    ready, stopped = tmp_path / "ready", tmp_path / "stopped"
    child = CHILD.format(repo=REPO, parent="PARENT", ready=str(ready), stopped=str(stopped))
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(child=child)])
    child_pid = None
    try:
        child_pid = int(_wait_for(ready, parent))
        assert not stopped.exists()
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait_for(stopped) == "stopped"  # its finally ran: the fabric would be stopped
        deadline = time.monotonic() + DEADLINE_S
        while not _gone(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child_pid), "the orphaned child is still running"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child_pid is not None and not _gone(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def test_child_whose_parent_is_already_gone_does_not_start(tmp_path: Path) -> None:
    ghost = subprocess.Popen([sys.executable, "-c", "pass"])
    ghost.wait()  # a pid that is not our child's parent (and no longer anyone)
    ready, stopped = tmp_path / "ready", tmp_path / "stopped"
    out = subprocess.run([sys.executable, "-c", CHILD.format(
        repo=REPO, parent=ghost.pid, ready=str(ready), stopped=str(stopped))],
        capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "is gone" in out.stderr
    assert not ready.exists()


class _Interrupted(Exception):
    pass


def test_run_child_stops_the_child_when_the_parent_is_interrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception in the parent (Ctrl-C, a timeout) SIGTERMs the child and waits for it."""
    monkeypatch.setattr(common, "CHILD_GRACE_S", DEADLINE_S)
    ready, stopped = tmp_path / "ready", tmp_path / "stopped"
    argv = [sys.executable, "-c", CHILD.format(repo=REPO, parent=None, ready=str(ready),
                                               stopped=str(stopped))]
    deadline = time.monotonic() + DEADLINE_S

    def interrupt_once_ready(_sig: int, _frame: FrameType | None) -> None:
        if ready.exists() or time.monotonic() > deadline:
            raise _Interrupted
        signal.setitimer(signal.ITIMER_REAL, 0.05)

    old = signal.signal(signal.SIGALRM, interrupt_once_ready)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(_Interrupted):
            common.run_child(argv, timeout=DEADLINE_S * 10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert ready.exists(), "the child never started"
    child_pid = int(ready.read_text())
    assert stopped.read_text() == "stopped"  # run_child returned only after the child's finally
    assert _gone(child_pid)


def test_child_argv_names_the_parent() -> None:
    argv = common.child_argv("benchmarks.bringup", "--child", "plain")
    assert argv[:3] == [sys.executable, "-m", "benchmarks.bringup"]
    assert argv[-2:] == ["--parent-pid", str(os.getpid())]
