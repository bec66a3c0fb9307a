"""Stopping a parallel model run: whenever the signal lands, the CLI goes, its workers first.

``astral-lab model`` models its policies in forked workers (``testbed.models.forked``).
Stopping it is racy by nature: a Ctrl-C can land while the interpreter starts, while the
job is built, while a worker is being forked, while the workers run, or just as one
finished and the next is forked. So each test stops many runs, each at one of those
moments, on a machine made busy by two CPU-bound processes beside the CLI (one of them
niced), and fails if any run does not exit with the signal's status within a generous
bound, leaves a process of its session alive, or leaves a results folder. No timing is
asserted beyond that bound.

Exit status: 130 for SIGINT, 143 for SIGTERM. A signal that lands before the CLI's own
code runs (the interpreter still loading it) ends the process by that signal, which a
shell reports with the same status (128 + the signal), so that counts too. One case is
the interpreter's, not ours: a Ctrl-C while Python imports its ``site`` module, before
any project code, ends in Python's "Fatal Python error: init_import_site" and status 1;
it is recognised by that message and counted as a start that never happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.stopping import Stopped, as_from_a_terminal, stopped_as_asked

#: A run that lasts a few seconds here and forks two policy workers at a time (four
#: policies, --jobs 2), so every moment below comes before its end.
ARGV = ["model", "astral3", "--gpus", "32", "--workload", "decode", "--jobs", "2", "--exact"]
#: When to send the signal: seconds after the start, or at an event seen from outside.
MOMENTS = (0.05, 0.3, 1.0, "workers", "first-done")
TRIES = 3
#: Seconds a stopped run may take to exit: generous, the machine is busy on purpose. A stop
#: that lands while the CLI imports its modules is acted on once they are imported
#: (``testbed.shell.signals``), so twice their import time, measured beside the same load, is
#: added on top: an emulated VM imports them many times slower than a bare machine.
EXIT_BOUND_S = 20.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            return [int(x) for x in fh.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _session(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(d))
    return out


def _wait_for(moment: float | str, proc: subprocess.Popen[str], t0: float) -> bool:
    """Sleep until ``moment``; False if the run ended first."""
    if isinstance(moment, float):
        time.sleep(max(0.0, t0 + moment - time.monotonic()))
        return proc.poll() is None
    seen: set[int] = set()
    while proc.poll() is None and time.monotonic() < t0 + 120:
        kids = set(_children(proc.pid))
        if moment == "workers" and kids:
            return True
        if moment == "first-done" and any(k not in kids or _state(k) in (None, "Z")
                                           for k in seen):
            return True
        seen |= kids
        time.sleep(0.005)
    return False


def _import_seconds() -> float:
    """How long a fresh interpreter takes to import the CLI on this machine, now."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import astral_lab.cli"], check=True)
    return time.monotonic() - t0


def _one_try(sig: int, moment: float | str, results: str, bound: float) -> str | None:
    """Start the CLI, signal it at ``moment``; what went wrong, or None."""
    env = {**os.environ, "ASTRAL_LAB_RESULTS": results}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "astral_lab", *ARGV], env=env,
                            start_new_session=True, preexec_fn=as_from_a_terminal,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        if not _wait_for(moment, proc, t0):
            return f"the run ended (status {proc.returncode}) before the moment came"
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does
        else:
            proc.send_signal(sig)  # what kill(1) does
        sent = time.monotonic()
        try:
            _, err = proc.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            return f"still running {bound:.0f} s after the signal: {err.strip()[-300:]!r}"
        took = time.monotonic() - sent
        if not stopped_as_asked(sig, Stopped(proc.returncode, took, err)):
            return f"exit status {proc.returncode} after {took:.1f} s: {err.strip()[-300:]!r}"
        deadline = time.monotonic() + 1.0
        while (left := _session(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if left:
            return f"processes {left} of its session outlived it"
        if os.path.isdir(results) and os.listdir(results):
            return f"left {os.listdir(results)} in the results folder"
        return None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _session(proc.pid):  # never leave a stray worker behind a failed try
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("moment", MOMENTS, ids=str)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_model_run_exits_with_its_workers(sig, moment, tmp_path, busy_machine):
    problems = []
    bound = EXIT_BOUND_S + 2 * _import_seconds()
    for i in range(TRIES):
        why = _one_try(sig, moment, str(tmp_path / f"try{i}"), bound)
        if why:
            problems.append(f"try {i}: {why}")
    assert not problems, f"{signal.Signals(sig).name} at {moment}: " + "; ".join(problems)
