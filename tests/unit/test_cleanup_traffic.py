"""`astral-lab clean` ends the traffic programs a killed Lab left in its hosts (no root).

A Lab killed without its signal handlers (a library script, SIGTERM) leaves its probes and
agents to init, still sending for their ``--duration``. The processes started here have the
real programs' command lines but do nothing: stand-in modules on the path, or ``sleep``
exec'd under the program's name; the sweep is pointed at them alone, so a real lab on this
machine is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.shell import cleanup, orphans
from testbed.shell.procs import pid_alive
from tests.unit.netns import veth_pair
from tests.unit.test_cleanup import _dead_pid, _record, state_dir  # noqa: F401 (fixture)
from traffic.shell import programs

#: the sweep itself, before the ``state_dir`` fixture replaces it with one that finds nothing
REAL_SWEEP = cleanup.stale_traffic
PY = sys.executable
DEAD_RUN, LIVE_RUN = "deadbeef01", "a1b2c3d4e5"


@pytest.mark.parametrize(("argv", "program"), [
    # what the lab starts in its hosts, as ps shows it
    ([PY, "-m", "astral_lab.probe_cli", "recv", "--port", "4811", "--out", "/tmp/p.json"],
     "astral_lab.probe_cli"),
    ([PY, "-m", "astral_lab.probe_cli", "send", "--dst", "10.1.0.1", "--port", "4791",
      "--sports", "50000,50001", "--duration", "650.0"], "astral_lab.probe_cli"),
    ([PY, "-m", "astral_lab.agent_cli", "recv", "--out", "r.json", "--ready", "r.ready"],
     "astral_lab.agent_cli"),
    (["/opt/venv/bin/astral-pktio", "serve", "--tag", "astral-agent-x"], "astral-pktio"),
    (["astral-pktio", "recv", "--intf", "s0g0-eth0"], "astral-pktio"),
    (["iperf3", "-s", "-1", "-p", "5201", "-J"], "iperf3"),
    (["/usr/bin/iperf3", "-c", "10.1.0.1", "-p", "5201"], "iperf3"),
    # the interpreter's own options may come first, bundled or not
    (["python3", "-u", "-m", "astral_lab.probe_cli", "recv"], "astral_lab.probe_cli"),
    (["python3.11", "-X", "dev", "-m", "astral_lab.agent_cli"], "astral_lab.agent_cli"),
    (["python3", "-Bmastral_lab.probe_cli", "send"], "astral_lab.probe_cli"),
    # earlier versions' module names
    (["python3", "-m", "traffic.shell.agent", "send"], "traffic.shell.agent"),
    (["python3", "-m", "testbed.shell.probe", "recv"], "testbed.shell.probe"),
    # lookalikes: the name in an argument, not in the program's position
    ([PY, "-c", "import time", "-m", "astral_lab.probe_cli", "recv"], None),
    ([PY, "script.py", "-m", "astral_lab.probe_cli"], None),
    (["python3", "run.py", "-m", "astral_lab.probe_cli"], None),
    ([PY, "-", "-m", "astral_lab.agent_cli"], None),
    (["bash", "-c", "python3 -m astral_lab.probe_cli recv"], None),
    (["vim", "astral_lab/probe_cli.py"], None),
    (["grep", "-r", "astral-pktio", "."], None),
    (["pkill", "-f", "astral_lab.probe_cli"], None),
    (["less", "/usr/bin/iperf3"], None),
    (["astral-pktio-old", "serve"], None),
    (["/tmp/iperf3.d/run", "-s"], None),
    ([PY, "-m", "astral_lab.probe_cli_extra"], None),
    ([PY, "-m", "astral_lab"], None),
    # the lab's other processes, which other sweeps own
    ([PY, "-m", "astral_lab.controller_cli", "--run-id", "x"], None),
    ([PY, "-m", "astral_lab.dashboard_cli", "--run-id", "x"], None),
    ([PY, "-m"], None),
    ([""], None),
    ([], None),
])
def test_traffic_program_reads_what_runs_not_what_is_named(argv: list[str],
                                                           program: str | None) -> None:
    assert orphans.traffic_program(argv) == program


def test_every_program_the_lab_starts_in_hosts_is_recognised() -> None:
    """The command lines as the lab builds them (the same names, one place)."""
    from traffic.shell import pktio, replay

    assert orphans.traffic_program(programs.python_module(programs.PROBE_MODULE)) \
        == programs.PROBE_MODULE
    assert orphans.traffic_program(replay.AGENT) == programs.AGENT_MODULE
    assert orphans.traffic_program([str(pktio.default_path()), "serve"]) == programs.PKTIO


def test_run_marks_read_the_run_folder_in_any_argument() -> None:
    argv = [PY, "-m", "astral_lab.probe_cli", "recv", "--out",
            f"/tmp/astral-lab-{DEAD_RUN}-p4242-abcd1234/probe-s0g0-s1g0-4811.json"]
    assert orphans.run_marks(argv, cleanup.SCRATCH_RE) == [(DEAD_RUN, 4242)]
    old = [PY, "--out=/tmp/astral-lab-0123456789-abcd1234/x"]  # before the owner's pid was in it
    assert orphans.run_marks(old, cleanup.SCRATCH_RE) == [("0123456789", None)]
    assert orphans.run_marks(["/tmp/astral-lab-0123456789-p1-abcd1234"], cleanup.SCRATCH_RE) \
        == []  # argv[0] is the program


# --- real processes -----------------------------------------------------------------------
@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    """Stand-ins for the lab's traffic modules: each notes that it started and sleeps.
    Run with this folder first on the path, ``python -m astral_lab.probe_cli ...`` has the
    real program's command line and does nothing else."""
    pkg = tmp_path / "fakes" / "astral_lab"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("probe_cli", "agent_cli"):
        (pkg / f"{name}.py").write_text(
            "import os, time\n"
            "open(os.path.join(os.environ['FAKE_STARTED'], str(os.getpid())), 'w').close()\n"
            "time.sleep(120)\n")
    (tmp_path / "started").mkdir()
    return tmp_path / "fakes"


def _env(fakes: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(fakes), FAKE_STARTED=str(fakes.parent / "started"))
    env.pop("PYTHONSAFEPATH", None)
    return env


def _wait_started(fakes: Path, pid: int, argv: list[str], stand_in: bool) -> None:
    """Until ``pid`` shows ``argv`` and, for a stand-in module, the stand-in (not the real
    program) has started; kill it and fail otherwise."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if orphans.argv_of(pid) == argv and (
                not stand_in or (fakes.parent / "started" / str(pid)).exists()):
            return
        time.sleep(0.02)
    _kill_if(pid, argv)
    raise AssertionError(f"pid {pid} never ran {argv} as a stand-in (shows {orphans.argv_of(pid)})")


def _orphan(fakes: Path, argv: list[str], argv0: str | None = None,
            netns: str | None = None) -> int:
    """Start ``argv`` as a grandchild whose parent exits at once, so init adopts it (as a
    killed Lab's children are). With ``argv0`` it runs under that name (``exec -a``); with
    ``netns``, in that network namespace (``ip netns exec`` execs it: same PID)."""
    inner = argv if argv0 is None else ["bash", "-c", 'exec -a "$0" "$@"', argv0, *argv]
    if netns is not None:
        inner = ["ip", "netns", "exec", netns, *inner]
    want, stand_in = (argv, True) if argv0 is None else ([argv0, *argv[1:]], False)
    out = subprocess.run(["bash", "-c", '"$@" </dev/null >/dev/null 2>&1 & echo $!', "bash",
                          *inner], cwd=fakes, env=_env(fakes),
                         capture_output=True, text=True, check=True, timeout=30).stdout
    pid = int(out.strip())
    _wait_started(fakes, pid, want, stand_in)
    return pid


def _child(fakes: Path, argv: list[str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, cwd=fakes, env=_env(fakes), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_started(fakes, proc.pid, argv, True)
    return proc


def _kill_if(pid: int, argv: list[str]) -> None:
    """Kill ``pid`` only while it still runs ``argv``: once gone, its number may be anyone's."""
    if orphans.argv_of(pid) == argv:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def started() -> Iterator[dict[int, list[str]]]:
    """``pid -> argv`` of the orphans a test starts, killed at its end if still there."""
    pids: dict[int, list[str]] = {}
    yield pids
    for pid, argv in pids.items():
        _kill_if(pid, argv)


def _only(pids: Collection[int]) -> Any:
    """The real sweep, shown these processes alone."""
    def sweep(live_runs: Collection[str] = (), live_pids: Collection[int] = (),
              _pids: Iterable[int] | None = None) -> dict[int, str]:
        return REAL_SWEEP(live_runs, live_pids, pids=list(pids))
    return sweep


def test_clean_ends_a_killed_labs_orphaned_traffic_and_spares_a_live_runs(
        state_dir: str, fakes: Path, started: dict[int, list[str]],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = cleanup.scratch_root()
    dead_owner = _dead_pid()
    dead_dir = f"{scratch}/astral-lab-{DEAD_RUN}-p{dead_owner}-abcd1234"
    live_dir = f"{scratch}/astral-lab-{LIVE_RUN}-p{os.getppid()}-abcd1234"
    probe = [PY, "-m", "astral_lab.probe_cli"]
    recv = [*probe, "recv", "--port", "4811", "--out", f"{dead_dir}/probe-s0g0-s1g0-4811.json"]
    send = [*probe, "send", "--dst", "10.1.0.1", "--port", "4791", "--sports",
            "50000,50001", "--pps", "200", "--duration", "650.0", "--size", "200"]
    live_recv = [*probe, "recv", "--port", "4811", "--out", f"{live_dir}/probe.json"]
    lookalike = [PY, str(fakes / "astral_lab" / "probe_cli.py"), "-m", "astral_lab.probe_cli",
                 "recv"]
    pktio = ["sleep", "120"]  # shown as astral-pktio / iperf3 by exec -a
    _record(state_dir, DEAD_RUN, [], owner=dead_owner)
    # a live run (its owner alive) lists this test's process, the parent of ``sibling``
    _record(state_dir, LIVE_RUN, [os.getpid()], owner=os.getppid())

    for argv in (recv, send, live_recv, lookalike):
        started[_orphan(fakes, argv)] = argv
    for name in ("/opt/venv/bin/astral-pktio", "iperf3"):
        pid = _orphan(fakes, pktio, argv0=name)
        started[pid] = [name, *pktio[1:]]
    orphan = {tuple(argv): pid for pid, argv in started.items()}
    if any(orphans.ppid(p) != 1 for p in started):
        pytest.skip("orphans here are adopted by a subreaper, not init")
    sibling = _child(fakes, send)  # same command line, but its parent lives in a live run
    try:
        monkeypatch.setattr(cleanup, "stale_traffic", _only([*started, sibling.pid]))
        done = cleanup.clean(verbose=False)
        assert sibling.poll() is None, "a live run's traffic must survive"
        killed = {orphan[tuple(recv)], orphan[tuple(send)],
                  orphan[("/opt/venv/bin/astral-pktio", "120")]}
        assert all(_gone(p) for p in killed), {p: orphans.argv_of(p) for p in killed}
        kept = set(started) - killed
        assert all(pid_alive(p) for p in kept), "spared: a live run's folder, a script " \
            "that names the module, iperf3 outside a lab host's namespace"
        assert done["processes"] == 3 and done["records"] == 1
    finally:
        sibling.kill()
        sibling.wait()


def test_an_orphan_adopted_by_a_subreaper_is_known_by_its_dead_runs_folder(
        fakes: Path) -> None:
    """A subreaper, not init, may adopt a killed Lab's programs: a run folder whose owner is
    dead still marks them; without one, a process whose parent lives is someone's."""
    dead_dir = f"/tmp/astral-lab-{DEAD_RUN}-p{_dead_pid()}-abcd1234"
    marked = _child(fakes, [PY, "-m", "astral_lab.agent_cli", "recv", "--out",
                            f"{dead_dir}/recv-s0g0.json", "--ready", f"{dead_dir}/r"])
    bare = _child(fakes, [PY, "-m", "astral_lab.agent_cli", "recv", "--out", "/tmp/r.json",
                          "--ready", "/tmp/r.ready"])
    try:
        pids = [marked.pid, bare.pid]
        assert REAL_SWEEP(pids=pids) == {marked.pid: "astral_lab.agent_cli"}
        # still its run's while that run lives, or while this (its parent) is listed by one
        assert REAL_SWEEP(live_runs={DEAD_RUN}, pids=pids) == {}
        assert REAL_SWEEP(live_pids={os.getpid()}, pids=pids) == {}
        assert marked.poll() is None and bare.poll() is None  # the sweep only looks
    finally:
        for p in (marked, bare):
            p.kill()
            p.wait()


def test_iperf3_counts_only_in_a_lab_hosts_namespace_and_a_host_still_up_keeps_its_own(
        fakes: Path, started: dict[int, list[str]]) -> None:
    """Root: private namespaces named after this test, holding interfaces named like a lab
    host's NIC and a leaf's port, or not; the machine's own namespace is not touched."""
    sleep = ["sleep", "120"]
    with veth_pair("s0g0-eth0", "lf0r0-eth1") as pair, veth_pair() as strangers:
        # ns_b's host is up: a Mininet shell runs there (a stand-in that only sleeps)
        shell_argv = [PY, "-c", "import time; time.sleep(120)", "mininet:lf0r0"]
        shell = subprocess.Popen(pair.run_in(pair.ns_b, shell_argv))
        try:
            _wait_started(fakes, shell.pid, shell_argv, stand_in=False)
            for ns, name in ((pair.ns_a, "iperf3"), (pair.ns_b, "iperf3"),
                             (pair.ns_b, "astral-pktio"), (strangers.ns_a, "iperf3")):
                started[_orphan(fakes, sleep, argv0=name, netns=ns)] = [name, *sleep[1:]]
            if any(orphans.ppid(p) != 1 for p in started):
                pytest.skip("orphans here are adopted by a subreaper, not init")
            in_a = next(iter(started))
            assert REAL_SWEEP(pids=[*started, shell.pid]) == {in_a: "iperf3"}
        finally:
            shell.kill()
            shell.wait()
