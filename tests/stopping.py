"""Stopping a command the way a user does (Ctrl-C at a terminal, ``kill``) and saying how
it went: shared by the unit tests (the flow model) and the integration tests (fabrics)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Stopped:
    """How one command ended after a signal: its status, how long it took to go after the
    signal, everything it printed, and what it had printed before the signal."""

    status: int
    seconds: float
    stderr: str
    before: str = ""


def as_from_a_terminal() -> None:
    """Run in the child before exec: the signal dispositions a terminal's command starts
    with. A test run started in the background (``&``, CI's harness) has SIGINT ignored,
    and an ignored disposition is inherited across exec, which would make every Ctrl-C
    case pass or fail for the wrong reason."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def stop_command(argv: list[str], sig: int, *, after: float | None = None,
                 after_line: str | None = None, env: dict[str, str] | None = None,
                 bound: float = 60.0, cwd: str | None = None) -> Stopped:
    """Start ``argv`` in its own session, signal it ``after`` seconds (after ``after_line``
    appeared on its output, when given) and wait at most ``bound`` seconds for it to go.

    SIGINT goes to the whole process group, as a terminal's Ctrl-C does; other signals to
    the process, as ``kill`` does. Its standard input is closed right after the signal. A command
    still running after ``bound`` is killed and reported with status -9.
    """
    proc = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True, text=True,
                            preexec_fn=as_from_a_terminal,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert proc.stdout is not None and proc.stdin is not None
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if after_line is not None and after_line in line:
                seen.set()
        seen.set()  # the command ended before the line came

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if after_line is not None:
            seen.wait(bound)
        if after:
            time.sleep(after)
        before = "".join(lines)
        t0 = time.monotonic()
        if proc.poll() is None:
            if sig == signal.SIGINT:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        with contextlib.suppress(OSError):
            proc.stdin.close()  # a Mininet CLI that kept the Ctrl-C (as `mn` does) ends here
        try:
            status = proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = -9
        seconds = time.monotonic() - t0
        reader.join(timeout=10)
        return Stopped(status, seconds, "".join(lines), before)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stopped_as_asked(sig: int, how: Stopped) -> bool:
    """The shell's status for a command stopped by ``sig`` (130, 143); or the command died of
    the signal itself, which a shell reports the same way; or, for Ctrl-C during CPython's
    own start-up (before any of the program's code runs), CPython's fatal-error exit: no
    program can handle a signal before it exists, and nothing was built yet."""
    if how.status in (128 + sig, -sig):
        return True
    return (sig == signal.SIGINT and how.status == 1
            and how.stderr.startswith("Fatal Python error: init_")
            and how.stderr.rstrip().endswith("KeyboardInterrupt"))


def before_the_program(how: Stopped) -> bool:
    """True when no frame of the traceback ``how`` printed is the project's own code (only
    CPython's start-up, its import machinery, site-packages' start-up hooks): the signal
    came before any line of the program ran, so only CPython could report it, and it does
    with a traceback."""
    frames = re.findall(r'File "([^"]+)"', how.stderr)
    venv = os.path.join(REPO, ".venv") + os.sep
    return bool(frames) and not any(f.startswith(REPO + os.sep) and not f.startswith(venv)
                                    for f in frames)
