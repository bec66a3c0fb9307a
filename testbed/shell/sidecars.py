"""The processes a Lab runs beside its fabric on request: the live view and port captures.

The dashboard is started the way the controller is, by module name in a process of its own
(``python -m astral_lab.dashboard_cli``; the testbed never imports the ops layer), in its
own session so a Ctrl-C in the terminal reaches the Lab, which then stops it. Captures are
one ``tcpdump`` per requested switch port (``testbed.capture``). Each start hands every PID
to ``on_pid`` (the Lab writes it into its run record) before it waits for the process, so
``astral-lab clean`` finds them if the Lab itself is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from testbed import capture
from testbed.shell import cleanup, signals
from testbed.shell.machine import free_port
from testbed.shell.preflight import LabError
from testbed.shell.procs import kill_pids
from vocab.plan import WiringPlan

START_TIMEOUT_S = 30.0


def start_dashboard(plan: WiringPlan, workdir: str, run_id: str, *, port: int | None,
                    interval: float, rest_port: int | None, progress: str | None,
                    on_pid: Callable[[int], None]) -> tuple[subprocess.Popen[bytes], str]:
    """Start the live view of ``plan`` (``port`` None: a free one); returns its process and
    URL once it serves. Raises ``LabError`` with its log if it does not come up."""
    port = port or free_port()
    plan_path = os.path.join(workdir, "plan.json")
    if not os.path.exists(plan_path):
        plan.save(plan_path)
    url_file = os.path.join(workdir, "dashboard.url")
    log_path = os.path.join(workdir, "dashboard.log")
    argv = [sys.executable, "-m", cleanup.DASHBOARD_MODULE, "--plan", plan_path,
            "--port", str(port), "--url-file", url_file, "--interval", str(interval),
            "--run-id", run_id]
    if rest_port:
        argv += ["--controller", f"http://127.0.0.1:{rest_port}"]
    if progress:
        argv += ["--progress", progress]
    with signals.held(), open(log_path, "ab") as logf:  # recorded before a stop lands
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        on_pid(proc.pid)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError), open(url_file, encoding="utf-8") as f:
            return proc, json.load(f)["url"]  # written atomically: complete once it exists
        if proc.poll() is not None:
            raise LabError(f"the dashboard exited at start:\n{_tail(log_path)}")
        time.sleep(0.05)
    raise LabError(f"the dashboard did not start serving within {START_TIMEOUT_S:g} s:\n"
                   f"{_tail(log_path)}")


def start_captures(ports: Sequence[str], capture_dir: str, workdir: str,
                   on_pid: Callable[[int], None],
                   where: Callable[[str], Callable[[list[str]], list[str]]] | None = None,
                   ) -> list[subprocess.Popen[bytes]]:
    """One capture per switch port in ``ports`` into ``capture_dir`` (``<intf>.pcap``, its log
    in ``workdir``); returns once every one listens. ``where(intf)`` turns a command into
    one run in the port's namespace (a switch daemon's: ``testbed.shell.switch_daemons``)."""
    os.makedirs(capture_dir, exist_ok=True)
    procs = []
    for intf in ports:
        path = capture.pcap_path(capture_dir, intf)
        with signals.held(), open(os.path.join(workdir, f"capture-{intf}.log"), "ab") as logf:
            try:
                argv = capture.command(intf, path)
                proc = subprocess.Popen(where(intf)(argv) if where else argv, stdout=logf,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
            except FileNotFoundError:
                raise LabError(f"--capture needs {capture.TOOL} (apt package {capture.TOOL}; "
                               "sudo bash scripts/setup.sh installs it)") from None
            on_pid(proc.pid)
        procs.append(proc)
    _wait_listening(ports, capture_dir, workdir, procs)
    return procs


def _wait_listening(ports: Sequence[str], capture_dir: str, workdir: str,
                    procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every capture has opened its file (its first line of output says it listens),
    so traffic that follows is in the pcap; a capture that dies is a ``LabError``."""
    deadline = time.monotonic() + 10
    for intf, proc in zip(ports, procs, strict=True):
        log_path = os.path.join(workdir, f"capture-{intf}.log")
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LabError(f"capture of {intf} exited: {_tail(log_path, 5)}")
            if os.path.exists(capture.pcap_path(capture_dir, intf)):
                break
            time.sleep(0.05)


def stop(procs: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    """Stop processes started here: ``sig`` first (SIGINT makes a capture flush and close its
    pcap), SIGKILL after a grace period; reaped either way, so none is left behind."""
    if not procs:
        return
    kill_pids([p.pid for p in procs], grace=5.0, sig=sig)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"
