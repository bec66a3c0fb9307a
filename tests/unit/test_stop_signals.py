"""testbed.shell.signals: a stop is never lost, and never cuts a teardown short."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: A Ctrl-C or SIGTERM that lands inside a weakref callback (as one can inside an import's
#: module lock): Python swallows the handler's exception ("Exception ignored").
_SWALLOWED = """
import os, signal, sys, threading, time, weakref
from testbed.shell import signals
if sys.argv[2] == "hook":
    signals.stop_on_signals()
else:
    signal.signal(signal.SIGTERM, signals._stop)
class A: pass
def slow_callback(_ref):
    time.sleep(0.5)  # the signal lands in here
a = A(); r = weakref.ref(a, slow_callback)
threading.Timer(0.1, os.kill, (os.getpid(), int(sys.argv[1]))).start()
try:
    del a
    time.sleep(2)
    print("LOST")
except KeyboardInterrupt:
    print("CAUGHT KeyboardInterrupt")
except SystemExit as exc:
    print(f"CAUGHT SystemExit {exc.code}")
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


@pytest.mark.parametrize("sig, caught", [(signal.SIGINT, "KeyboardInterrupt"),
                                         (signal.SIGTERM, "SystemExit 143")])
def test_a_stop_swallowed_by_python_is_delivered_again(sig: int, caught: str) -> None:
    without = _run(_SWALLOWED, int(sig), "plain")
    assert without.stdout.strip() == "LOST"  # the failure this guards against is real
    assert "Exception ignored" in without.stderr
    got = _run(_SWALLOWED, int(sig), "hook")
    assert got.stdout.strip() == f"CAUGHT {caught}", got.stderr


#: The program's first moment: a Ctrl-C swallowed while the stop handlers themselves are
#: still being imported (before ``stop_on_signals`` runs), then the program's ``main``.
_BEFORE_HANDLERS = """
import os, signal, sys, threading, time, weakref
import astral_lab.__main__ as program
if sys.argv[1] == "plain":
    sys.unraisablehook = sys.__unraisablehook__
class A: pass
def slow_callback(_ref):
    time.sleep(0.5)  # the Ctrl-C lands in here
a = A(); r = weakref.ref(a, slow_callback)
threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
del a
sys.exit(program.main(["policies"]))
"""


def test_a_ctrl_c_swallowed_before_the_handlers_are_in_still_stops_the_program() -> None:
    without = _run(_BEFORE_HANDLERS, "plain")
    assert without.returncode == 0 and "ecmp" in without.stdout  # lost: it ran on
    got = _run(_BEFORE_HANDLERS, "program")
    assert got.returncode == 130, (got.stdout, got.stderr)
    assert "interrupted before it started" in got.stderr and "ecmp" not in got.stdout


#: A Ctrl-C that lands while the CLI's modules define a class: Python 3.11 hands it on
#: wrapped in "RuntimeError: Error calling __set_name__" (later versions as it is).
_WRAPPED = """
import builtins, sys
import astral_lab.__main__ as program
real_import = builtins.__import__
def importing(name, *args, **kw):
    if name == "astral_lab.cli":
        class Field:
            def __set_name__(self, owner, attr):
                raise KeyboardInterrupt
        class Policy:
            field = Field()
    return real_import(name, *args, **kw)
builtins.__import__ = importing
sys.exit(program.main(["policies"]))
"""


def test_a_ctrl_c_handed_on_inside_another_error_still_stops_the_program() -> None:
    got = _run(_WRAPPED)
    assert got.returncode == 130, (got.stdout, got.stderr)
    assert "interrupted before it started" in got.stderr and "Traceback" not in got.stderr


def test_stop_inside_finds_a_stop_in_the_cause_chain() -> None:
    from testbed.shell.signals import stop_inside

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__") from exc
    except RuntimeError as exc:
        wrapped = exc
    assert isinstance(stop_inside(wrapped), KeyboardInterrupt)
    assert stop_inside(RuntimeError("a bug")) is None
    assert stop_inside(SystemExit(1)) is None
    assert stop_inside(RuntimeError()) is None
    stop = stop_inside(SystemExit(143))
    assert isinstance(stop, SystemExit) and stop.code == 143


def test_held_delays_a_stop_until_the_block_is_done() -> None:
    got = _run("""
        import os, signal
        from testbed.shell import signals
        signals.stop_on_signals()
        steps = []
        try:
            with signals.held() as pending:
                with signals.held():
                    os.kill(os.getpid(), signal.SIGTERM)
                    os.kill(os.getpid(), signal.SIGINT)
                    steps.append("inner done")
                steps.append(f"outer done, pending {pending}")
        except SystemExit as exc:
            steps.append(f"then SystemExit {exc.code}")
        print("; ".join(steps))
        """)
    assert got.stdout.strip() == ("inner done; outer done, pending [15]; then SystemExit 143"), \
        got.stderr


def test_exit_status_is_the_shells() -> None:
    from testbed.shell.signals import exit_status

    assert [exit_status(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)] == \
        [130, 143, 129]


#: A Ctrl-C raised while the program imports its stop handlers (a finder that interrupts
#: exactly that import stands in for the signal's timing).
_IN_HANDLER_IMPORT = """
import runpy, sys
class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "testbed.shell.signals":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupting())
sys.argv = ["astral-lab", "policies"]
runpy.run_module("astral_lab", run_name="__main__")
"""


def test_a_ctrl_c_during_the_handlers_import_is_a_clean_stop() -> None:
    got = _run(_IN_HANDLER_IMPORT)
    assert got.returncode == 130, (got.stdout, got.stderr)
    assert got.stderr.strip() == "astral-lab: interrupted before it started"


#: A stop that lands the moment the controller's process exists (``Popen`` returning):
#: the Lab must know the process by then, or ``stop`` leaves it running.
_AT_CONTROLLER_START = """
import os, signal, subprocess, sys
from testbed.shell import cleanup, signals
from testbed.shell import lab as lab_module
from testbed.topologies import build
signals.stop_on_signals()
real = subprocess.Popen
def popen(argv, **kw):
    proc = real(["sleep", "30"], **kw)
    os.kill(os.getpid(), signal.SIGTERM)
    return proc
lab_module.subprocess.Popen = popen
cleanup.write_record = lambda *_a: None
lab = lab_module.Lab(build("astral3", servers=2, gpus=2))
lab.workdir = sys.argv[1]
lab._record = {"pids": []}
try:
    lab._start_controller()
except SystemExit as exc:
    print(exc.code, lab._record["pids"] == [lab.controller_proc.pid])
    lab.controller_proc.kill()
"""


def test_a_stop_at_the_controllers_start_finds_it_recorded(tmp_path: object) -> None:
    got = _run(_AT_CONTROLLER_START, tmp_path)
    assert got.stdout.strip() == "143 True", got.stderr


def test_ovs_counts_as_running_only_when_both_daemons_answer(monkeypatch: Any) -> None:
    """A start cut short leaves ovsdb-server without ovs-vswitchd: not running, so it is
    started again instead of every bridge change waiting for a switch that is not there."""
    from testbed.shell import preflight

    up = {"ovs-vsctl"}

    def run(cmd: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 0 if cmd[0] in up else 1, "", "")

    monkeypatch.setattr(preflight.subprocess, "run", run)
    assert not preflight.ovs_running()
    up.add("ovs-appctl")
    assert preflight.ovs_running()


def test_a_stop_during_the_daemons_start_waits_until_both_are_up() -> None:
    got = _run("""
        import os, signal, subprocess
        from testbed.shell import preflight, signals
        signals.stop_on_signals()
        up, steps = set(), []
        def run(cmd, **kw):
            if cmd[0] in ("ovs-vsctl", "ovs-appctl"):
                ok = {"ovs-vsctl": "db", "ovs-appctl": "switch"}[cmd[0]] in up
                return subprocess.CompletedProcess(cmd, 0 if ok else 1)
            up.add("db")
            os.kill(os.getpid(), signal.SIGTERM)  # lands between the two daemons
            up.add("switch")
            steps.append("started")
            return subprocess.CompletedProcess(cmd, 0)
        preflight.subprocess.run = run
        preflight.os.path.isdir = lambda p: True
        try:
            preflight.start_ovs()
        except SystemExit as exc:
            steps.append(f"SystemExit {exc.code}, {sorted(up)}")
        print("; ".join(steps))
        """)
    assert got.stdout.strip() == "started; SystemExit 143, ['db', 'switch']", got.stderr


#: A stop landing inside an import, in module code behind a bare ``except: pass``: Cython's
#: memoryview registration in NumPy's random module (a patched ``register`` sends the signal
#: exactly there, standing in for its timing).
_IN_CYTHON_IMPORT = """
import abc, os, signal, sys, time
from testbed.shell import signals
signals.stop_on_signals()
register, sent = abc.ABCMeta.register, []
def sending(cls, sub):
    if not sent and sub.__name__ == "_memoryviewslice":
        sent.append(sub.__name__)
        os.kill(os.getpid(), int(sys.argv[1]))
    return register(cls, sub)
abc.ABCMeta.register = sending
try:
    import numpy.random
    time.sleep(2)
    print("LOST", sent)
except KeyboardInterrupt:
    print("CAUGHT KeyboardInterrupt", sent)
except SystemExit as exc:
    print(f"CAUGHT SystemExit {exc.code}", sent)
"""


@pytest.mark.parametrize(("sig", "caught"), [(signal.SIGINT, "KeyboardInterrupt"),
                                             (signal.SIGTERM, "SystemExit 143")])
def test_a_stop_inside_an_import_behind_a_bare_except_still_stops(sig: int,
                                                                  caught: str) -> None:
    got = _run(_IN_CYTHON_IMPORT, int(sig))
    assert got.stdout.startswith(f"CAUGHT {caught} ['"), (got.stdout, got.stderr)
