"""`astral-lab clean` kills only what is recorded and still looks like the lab's (no root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from testbed import cleanup


@pytest.fixture
def state_dir(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> str:
    """Records in a private folder, and no machine-wide sweep: a unit test must never touch
    a real lab that happens to run on this machine (the sweep has integration tests)."""
    d = str(tmp_path)
    monkeypatch.setattr(cleanup, "STATE_DIR", d)
    monkeypatch.setattr(cleanup, "tagged_bridges", lambda: {})
    monkeypatch.setattr(cleanup, "our_processes", lambda: [])
    return d


def _spawn(*argv: str) -> subprocess.Popen[bytes]:
    """A sleeping Python process whose command line ends with ``argv`` (how ps sees it)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *argv])


def _record(state_dir: str, run_id: str, pids: list[int], owner: int = 999999999) -> str:
    path = os.path.join(state_dir, f"{run_id}.json")
    with open(path, "w") as f:
        json.dump({"run_id": run_id, "owner_pid": owner, "pids": pids, "bridges": [],
                   "links": [], "host_links": []}, f)
    return path


def _gone(proc: subprocess.Popen[bytes]) -> bool:
    for _ in range(100):
        if proc.poll() is not None:
            return True
        time.sleep(0.02)
    return False


def test_clean_kills_recorded_lab_processes_and_spares_reused_pids(state_dir: str) -> None:
    shell = _spawn("mininet:s0g0")  # what a Mininet host shell looks like
    stranger = _spawn("not-ours")  # a PID reused by an unrelated process
    try:
        path = _record(state_dir, "dead1", [shell.pid, stranger.pid])
        done = cleanup.clean(verbose=False)
        assert _gone(shell), "the recorded host shell should be killed"
        assert stranger.poll() is None, "an unrelated process must survive"
        assert not os.path.exists(path)
        assert done["records"] == 1 and done["processes"] == 1
    finally:
        for p in (shell, stranger):
            p.kill()
            p.wait()


def test_clean_leaves_a_live_run_alone(state_dir: str) -> None:
    shell = _spawn("mininet:s1g0")
    try:
        path = _record(state_dir, "live1", [shell.pid], owner=os.getppid())  # owner alive
        cleanup.clean(verbose=False)
        assert shell.poll() is None and os.path.exists(path)
    finally:
        shell.kill()
        shell.wait()


def test_unreadable_record_is_dropped(state_dir: str) -> None:
    bad = os.path.join(state_dir, "junk.json")
    with open(bad, "w") as f:
        f.write("{not json")
    cleanup.clean(verbose=False)
    assert not os.path.exists(bad)


def test_run_reports_a_missing_program_as_exit_127() -> None:
    proc = cleanup.run(["astral-lab-no-such-program"])
    assert proc.returncode == 127
    with pytest.raises(RuntimeError, match="not found"):
        cleanup.run(["astral-lab-no-such-program"], check=True)
