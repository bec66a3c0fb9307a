"""The processes a Lab runs beside its fabric on request: the live view and port captures.

The dashboard is started the way the controller is, by module name in a process of its own
(``python -m astral_lab.dashboard_cli``; the testbed never imports the ops layer), in its
own session so a Ctrl-C in the terminal reaches the Lab, which then stops it. Captures are
one ``tcpdump`` per requested switch port (``testbed.capture``). Every PID goes into the
run record first, so ``astral-lab clean`` finds them if the Lab itself is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from testbed import capture
from testbed.shell import cleanup
from testbed.shell.machine import free_port
from testbed.shell.preflight import LabError

START_TIMEOUT_S = 30.0


def start_dashboard(lab: Any) -> subprocess.Popen[bytes]:
    """Start the live view for ``lab``; returns its process once it serves (its URL is in
    ``lab.dashboard_url``). Raises ``LabError`` with its log if it does not come up."""
    port = lab.dashboard_port or free_port()
    plan_path = os.path.join(lab.workdir, "plan.json")
    if not os.path.exists(plan_path):
        lab.plan.save(plan_path)
    url_file = os.path.join(lab.workdir, "dashboard.url")
    log_path = os.path.join(lab.workdir, "dashboard.log")
    argv = [sys.executable, "-m", cleanup.DASHBOARD_MODULE, "--plan", plan_path,
            "--port", str(port), "--url-file", url_file, "--interval", str(lab.poll_interval),
            "--run-id", lab.run_id]
    if lab.rest_port:
        argv += ["--controller", f"http://127.0.0.1:{lab.rest_port}"]
    if lab.dashboard_progress:
        argv += ["--progress", lab.dashboard_progress]
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    lab._record["pids"].append(proc.pid)
    lab._save_record()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError), open(url_file, encoding="utf-8") as f:
            url = json.load(f)["url"]  # written atomically: complete once it exists
            lab.dashboard_url = url
            lab.log(f"live view: {url}")
            return proc
        if proc.poll() is not None:
            raise LabError(f"the dashboard exited at start:\n{_tail(log_path)}")
        time.sleep(0.05)
    raise LabError(f"the dashboard did not start serving within {START_TIMEOUT_S:g} s:\n"
                   f"{_tail(log_path)}")


def start_captures(lab: Any) -> list[subprocess.Popen[bytes]]:
    """One capture per requested port into ``lab.capture_dir``; each writes ``<intf>.pcap``."""
    os.makedirs(lab.capture_dir, exist_ok=True)
    procs = []
    for intf in lab.capture:
        path = capture.pcap_path(lab.capture_dir, intf)
        with open(os.path.join(lab.workdir, f"capture-{intf}.log"), "ab") as logf:
            try:
                proc = subprocess.Popen(capture.command(intf, path), stdout=logf,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
            except FileNotFoundError:
                raise LabError(f"--capture needs {capture.TOOL} (apt package {capture.TOOL}; "
                               "sudo bash scripts/setup.sh installs it)") from None
        lab._record["pids"].append(proc.pid)
        procs.append(proc)
    lab._save_record()
    _wait_listening(lab, procs)
    lab.log(f"capturing {len(procs)} port(s) into {lab.capture_dir}/")
    return procs


def _wait_listening(lab: Any, procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every capture has opened its file (its first line of output says it listens),
    so traffic that follows is in the pcap; a capture that dies is a ``LabError``."""
    deadline = time.monotonic() + 10
    for intf, proc in zip(lab.capture, procs, strict=True):
        log_path = os.path.join(lab.workdir, f"capture-{intf}.log")
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LabError(f"capture of {intf} exited: {_tail(log_path, 5)}")
            if os.path.exists(capture.pcap_path(lab.capture_dir, intf)):
                break
            time.sleep(0.05)


def stop(procs: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    """Stop processes started here: ``sig`` first (SIGINT makes a capture flush and close its
    pcap), SIGKILL after a grace period; reaped either way, so none is left behind."""
    if not procs:
        return
    cleanup.kill_pids([p.pid for p in procs], grace=5.0, sig=sig)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"
