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
    # process holds it without writing its pid: wait for it, do not claim a self-deadlock
    with open(lock_path, "w") as f:
        f.write(str(os.getpid()))
    p = _hold(lock_path, 1.0)
    monkeypatch.setenv("ASTRAL_LAB_WAIT", "20")
    said: list[str] = []
    t0 = time.monotonic()
    lock = machine.fabric_lock(said.append)
    try:
        assert time.monotonic() - t0 >= 0.5 and said and str(p.pid) in said[0]
        with open(lock_path) as f:
            assert f.read() == str(os.getpid())
    finally:
        lock.close()
        p.wait()


def test_no_wait_names_the_holder(lock_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _hold(lock_path, 5)
    monkeypatch.setenv("ASTRAL_LAB_WAIT", "0")
    try:
        with pytest.raises(LabError, match=f"pid {p.pid}"):
            machine.fabric_lock(lambda _m: None)
    finally:
        p.kill()
        p.wait()
