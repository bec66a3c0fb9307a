"""Shared helpers for benchmarks: machine facts, medians, atomic JSON output, child processes."""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from types import FrameType
from typing import Any

from testbed.datapath import choose_datapath
from testbed.models.forked import PR_SET_PDEATHSIG
from testbed.results import results_root
from vocab.plan import write_json_atomic

BENCH_DIR = os.path.join(results_root(), "bench")


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: cores, memory, kernel, Python, OVS and its datapath."""
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "datapath": choose_datapath(),
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = models[0] if models else platform.processor()
    except OSError:
        pass
    try:
        out = subprocess.run(["ovs-vsctl", "--version"], capture_output=True, text=True)
        info["ovs"] = out.stdout.splitlines()[0] if out.stdout else None
    except OSError:
        info["ovs"] = None
    return info


def summarize(samples: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), 3), "min": round(min(samples), 3),
            "max": round(max(samples), 3), "samples": [round(s, 3) for s in samples]}


def write(name: str, result: dict[str, Any]) -> str:
    """``results/bench/<name>.json``, atomically, stamped with time and machine."""
    result = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "machine": machine_info(), **result}
    path = os.path.join(BENCH_DIR, f"{name}.json")
    write_json_atomic(path, result)
    return path


#: Seconds a child gets to stop its fabric after SIGTERM before the parent kills it.
CHILD_GRACE_S = 300.0
_stopping = False


def exit_once(signum: int, _frame: FrameType | None) -> None:
    """First SIGTERM/SIGINT: leave through ``finally`` blocks; later ones: let them finish."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise SystemExit(128 + signum)


def die_with_parent(parent_pid: int | None) -> None:
    """Make this benchmark child stop, and take its fabric down, when its parent dies.

    A child builds a real fabric; orphaned, it runs on, holding the fabric's names,
    and once killed outright it leaves its veths behind. So the kernel is asked to
    send SIGTERM when the parent dies (``PR_SET_PDEATHSIG``), and SIGTERM (and
    SIGINT) become one ``SystemExit`` that runs the child's ``finally: stop()``;
    repeats are ignored so teardown is not cut short. ``parent_pid`` closes the
    race in which the parent died before the request: the child then exits at once.
    """
    signal.signal(signal.SIGTERM, exit_once)
    signal.signal(signal.SIGINT, exit_once)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if parent_pid is not None and os.getppid() != parent_pid:
        raise SystemExit(f"parent {parent_pid} is gone; not starting")


def child_argv(module: str, *args: str) -> list[str]:
    """``python -m module args... --parent-pid <us>``: what ``run_child`` starts."""
    return [sys.executable, "-m", module, *args, "--parent-pid", str(os.getpid())]


def run_child(argv: list[str], timeout: float | None) -> subprocess.CompletedProcess[str]:
    """Run a benchmark child to completion; never leave it running behind us.

    On a timeout, Ctrl-C or any other exit of ours the child gets SIGTERM and
    ``CHILD_GRACE_S`` to stop its fabric, then SIGKILL; if we are killed outright,
    its death signal (``die_with_parent``) does the same job.
    """
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        proc.terminate()
        try:
            proc.communicate(timeout=CHILD_GRACE_S)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
