"""`astral-lab ops diagnose` on a live lab keeps its telemetry in a scratch folder of the
run and removes it however the session ends; a file the user named is kept. No root: the
lab and its collector are stand-ins, the store is a real SQLite file."""

from __future__ import annotations

import argparse
import os
from typing import Any

import pytest

from astral_lab import ops_cli as cli
from testbed.shell import cleanup
from testbed.topologies import build

RUN_ID = "0123456789"


def _polls(interrupt_at: int) -> Any:
    """A collector's poll that reads nothing (no lab), or is interrupted at poll N."""
    count = [0]

    def poll_once() -> None:
        count[0] += 1
        if count[0] == interrupt_at:
            raise KeyboardInterrupt

    return poll_once


class _Answer:
    def text(self) -> str:
        return "1. s1g1  [loss]"


def _session(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, interrupt_at: int = 0,
             db: str | None = None, used: list[str] | None = None) -> list[str]:
    """Run one --ask session against a stand-in lab; returns (and appends to ``used``) the
    telemetry paths it opened, each checked to exist while the agent answered."""
    monkeypatch.setattr(cleanup, "scratch_root", lambda: str(tmp_path))
    plan = build("astral3", servers=2, gpus=2)
    monkeypatch.setattr(cli, "discover", lambda run=None: {
        "run_id": RUN_ID, "plan": plan, "rest_port": None, "host_pids": {}})
    used = [] if used is None else used

    class Live(cli.Live):
        def __init__(self, lab: dict[str, Any], path: str, *a: Any, **kw: Any) -> None:
            super().__init__(lab, path, *a, **kw)
            self.collector.poll_once = _polls(interrupt_at)  # type: ignore[method-assign]
            used.append(path)

    def answer(tools: Any, question: str, args: Any) -> _Answer:
        assert os.path.isfile(used[-1])
        return _Answer()

    monkeypatch.setattr(cli, "Live", Live)
    monkeypatch.setattr(cli, "answer", answer)
    args = argparse.Namespace(run=None, db=db, live=db is not None, ask="why is s1g1 slow?",
                              json=False, collect=0.0, interval=0.01, baseline=None,
                              llm=False, no_probe=True)
    assert cli.run_diagnose(args) == 0
    return used


def test_live_session_telemetry_is_a_run_scratch_folder_removed_at_the_end(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture) -> None:
    (db,) = _session(monkeypatch, tmp_path)
    assert cleanup.scratch_owner(os.path.basename(os.path.dirname(db))) == (RUN_ID, os.getpid())
    assert "s1g1" in capsys.readouterr().out
    assert os.listdir(tmp_path) == []


def test_interrupted_live_session_leaves_nothing(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Any) -> None:
    used: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        _session(monkeypatch, tmp_path, interrupt_at=1, used=used)
    assert len(used) == 1 and used[0].startswith(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_a_telemetry_file_the_user_named_is_kept(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Any) -> None:
    mine = tmp_path / "mine" / "telemetry.sqlite"
    mine.parent.mkdir()
    (db,) = _session(monkeypatch, tmp_path, db=str(mine))
    assert db == str(mine) and mine.is_file()
    assert sorted(os.listdir(tmp_path)) == ["mine"]
