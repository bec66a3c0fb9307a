"""Running a command and stopping processes: the one way the lab's shell runs a command
and reads its output (``run``), and the one way every part of the lab ends what it started
(host shells, the controller, captures, switch daemons) so that it is really gone.

Apart from ``testbed.shell.cleanup`` because the modules that start processes need it
too, and ``cleanup`` needs some of them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def run(cmd: list[str], stdin: str | None = None, check: bool = False,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output; raise with its stderr when ``check`` and it fails.

    A missing program counts as a failure (exit 127), so cleanup works on a machine
    where, say, Open vSwitch was never installed.
    """
    try:
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        proc = subprocess.CompletedProcess(cmd, 127, "", f"{cmd[0]}: not found")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {proc.stderr.strip()[:400]}")
    return proc


def kill_pids(pids: list[int], grace: float = 2.0, sig: int = signal.SIGTERM,
              reap: float = 10.0) -> None:
    """Send ``sig``, wait up to ``grace`` seconds, then SIGKILL whatever is left and wait up
    to ``reap`` seconds for it to be gone: a killed process still exists until the kernel
    has run its exit, which on a busy machine is not at once, and whoever looks next must
    not find it."""
    alive = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            alive.append(pid)
    alive = _wait_gone_pids(alive, grace)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone_pids(alive, reap)


def _wait_gone_pids(pids: list[int], timeout: float) -> list[int]:
    """Poll until none of ``pids`` is alive or ``timeout`` passes; the ones still alive."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if pid_alive(p)]
    return alive


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie still "exists": reap it if it is ours; another's holds nothing any more
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
