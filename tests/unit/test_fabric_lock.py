"""The machine's fabric lock: who holds it comes from the kernel, not from a stale file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from testbed.shell import machine
from testbed.shell.preflight import LabError

HOLD_UNTIL_TOLD = ("import fcntl, sys; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
                   "print('held', flush=True); sys.stdin.readline()")
HOLD = ("import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(float(sys.argv[2]))")


def _hold(path: str, seconds: float) -> subprocess.Popen[str]:
    """A process that holds the flock like `flock(1)` does: without writing its pid."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, path, str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


@pytest.fixture
def lock_path(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    path = str(tmp_path / "astral-lab.lock")
    monkeypatch.setattr(machine, "LOCK_PATH", path)
    return path


def test_holder_is_read_from_the_kernel(lock_path: str) -> None:
    p = _hold(lock_path, 5)
    try:
        with open(lock_path) as f:
            assert machine.lock_holder(f) == str(p.pid)
    finally:
        p.kill()
        p.wait()
    with open(lock_path) as f:
        assert machine.lock_holder(f) is None  # nobody holds it now


def test_a_stale_own_pid_waits_instead_of_failing(lock_path: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # this process held the lock before (its pid is still in the file); now another
    # process holds it without writing its pid: wait for it, do not claim a self-deadlock.
    # The holder lets go only when told, so the order of events is checked, not a duration.
    import threading

    with open(lock_path, "w") as f:
        f.write(str(os.getpid()))
    p = subprocess.Popen([sys.executable, "-c", HOLD_UNTIL_TOLD, lock_path],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdin is not None
    assert p.stdout.readline().strip() == "held"
    monkeypatch.setenv("ASTRAL_LAB_WAIT", "60")
    said: list[str] = []
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(machine.fabric_lock(said.append)))
    waiter.start()
    try:
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:
            time.sleep(0.02)
        assert said and str(p.pid) in said[0], said  # it waits, naming the holder
        assert not got  # and has not taken the lock while the other process holds it
        p.stdin.write("go\n")
        p.stdin.flush()
        waiter.join(timeout=30)
        assert got, "the lock was not taken once the holder let go"
        with open(lock_path) as f:
            assert f.read() == str(os.getpid())
    finally:
        if got:
            got[0].close()
        p.kill()
        p.wait()
        waiter.join(timeout=5)


def test_no_wait_names_the_holder(lock_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _hold(lock_path, 5)
    monkeypatch.setenv("ASTRAL_LAB_WAIT", "0")
    try:
        with pytest.raises(LabError, match=f"pid {p.pid}"):
            machine.fabric_lock(lambda _m: None)
    finally:
        p.kill()
        p.wait()
