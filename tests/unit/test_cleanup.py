"""`astral-lab clean` kills only what is recorded and still looks like the lab's (no root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from testbed.shell import cleanup, procs
from testbed.topologies import BUILDERS, build


@pytest.fixture
def state_dir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Records and scratch folders in private folders, and no machine-wide sweep: a unit
    test must never touch a real lab that happens to run on this machine (QoS rows, fault
    leftovers in its hosts, its /tmp folders, orphaned traffic; the sweep has integration
    tests, and test_cleanup_traffic points the traffic sweep at its own processes)."""
    d = str(tmp_path / "state")
    os.makedirs(d)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(cleanup, "STATE_DIR", d)
    monkeypatch.setattr(cleanup, "scratch_root", lambda: str(scratch))
    monkeypatch.setattr(cleanup, "tagged_bridges", lambda: {})
    monkeypatch.setattr(cleanup, "tagged_qos", lambda: {})
    monkeypatch.setattr(cleanup, "our_processes", lambda: [])
    monkeypatch.setattr(cleanup, "stale_traffic", lambda *_a, **_kw: {})
    monkeypatch.setattr(cleanup, "existing_interfaces", lambda: set())
    monkeypatch.setattr(cleanup, "all_bridges", lambda: [])
    monkeypatch.setattr(cleanup, "mininet_shells", lambda: {})
    monkeypatch.setattr(cleanup, "cleanup_faults",
                        lambda **_kw: {"namespaces": 0, "processes": 0})
    monkeypatch.delenv("ASTRAL_LAB_KEEP_LOGS", raising=False)
    return d


def _spawn(*argv: str, argv0: str | None = None) -> subprocess.Popen[bytes]:
    """A sleeping Python process whose command line ends with ``argv`` (how ps sees it);
    ``argv0`` names the program as ps shows it (default: the Python binary).

    Returns once the kernel shows that command line: until the child has exec'd, its
    /proc entry still reads like the parent's, and a busy machine can take a while.
    """
    p = subprocess.Popen([argv0 or sys.executable, "-c", "import time; time.sleep(60)", *argv],
                         executable=sys.executable)
    want = "\0".join(argv).encode()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                if f.read().rstrip(b"\0").endswith(want):
                    return p
        except OSError:
            pass
        time.sleep(0.01)
    p.kill()
    p.wait()
    raise AssertionError(f"spawned process never showed command line {argv}")


def _record(state_dir: str, run_id: str, pids: list[int], owner: int = 999999999,
            workdir: str = "") -> str:
    path = os.path.join(state_dir, f"{run_id}.json")
    with open(path, "w") as f:
        json.dump({"run_id": run_id, "owner_pid": owner, "pids": pids, "bridges": [],
                   "links": [], "host_links": [], "workdir": workdir}, f)
    return path


def _dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _scratch(name: str, kept: bool = False) -> str:
    path = os.path.join(cleanup.scratch_root(), name)
    os.makedirs(path)
    with open(os.path.join(path, "controller.log"), "w") as f:
        f.write("log\n")
    if kept:
        open(os.path.join(path, cleanup.KEEP_MARK), "w").close()
    return path


def _gone(proc: subprocess.Popen[bytes]) -> bool:
    """Polls with a generous deadline: returns as soon as the process is gone."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
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
    proc = procs.run(["astral-lab-no-such-program"])
    assert proc.returncode == 127
    with pytest.raises(RuntimeError, match="not found"):
        procs.run(["astral-lab-no-such-program"], check=True)


def test_scratch_folder_names_carry_run_id_and_owner_pid(state_dir: str) -> None:
    path = cleanup.make_scratch("0123456789")
    assert os.path.dirname(path) == cleanup.scratch_root()
    assert cleanup.scratch_owner(path) == ("0123456789", os.getpid())
    assert not os.path.exists(os.path.join(path, cleanup.KEEP_MARK))
    assert cleanup.scratch_owner("/tmp/astral-lab-0123456789-abcd_123") == ("0123456789", None)
    for other in ("astral-lab-ops-0123456789.sqlite", "astral-lab-xyz", "astral-sender-1234"):
        assert cleanup.scratch_owner(other) is None


def test_clean_removes_scratch_folders_of_dead_runs_only(state_dir: str) -> None:
    """kill -9 leaves a run's folder in /tmp: clean removes it (recorded or not), and keeps
    the folder of a live run, even one whose record is not written yet."""
    dead = _dead_pid()
    recorded = _scratch(f"astral-lab-aaaaaaaaaa-p{dead}-x1y2z3w4")
    _record(state_dir, "aaaaaaaaaa", [], owner=dead, workdir=recorded)
    orphan = _scratch(f"astral-lab-bbbbbbbbbb-p{dead}-q1w2e3r4")  # record already gone
    legacy = _scratch("astral-lab-cccccccccc-abcdefgh")  # name without the owner pid
    live_rec = _scratch(f"astral-lab-dddddddddd-p{os.getppid()}-a1b2c3d4")
    _record(state_dir, "dddddddddd", [], owner=os.getppid(), workdir=live_rec)
    starting = _scratch(f"astral-lab-eeeeeeeeee-p{os.getppid()}-e5f6g7h8")  # no record yet
    legacy_live = _scratch("astral-lab-ffffffffff-zzzzzzzz")
    _record(state_dir, "ffffffffff", [], owner=os.getppid(), workdir=legacy_live)
    stranger = _scratch("astral-lab-notours")
    done = cleanup.clean(verbose=False)
    assert done["scratch"] == 3
    for path in (recorded, orphan, legacy):
        assert not os.path.exists(path), path
    for path in (live_rec, starting, legacy_live, stranger):
        assert os.path.isdir(path), path


def test_clean_keeps_scratch_folders_when_logs_are_kept(state_dir: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    dead = _dead_pid()
    marked = _scratch(f"astral-lab-aaaaaaaaaa-p{dead}-x1y2z3w4", kept=True)
    plain = _scratch(f"astral-lab-bbbbbbbbbb-p{dead}-q1w2e3r4")
    monkeypatch.setenv("ASTRAL_LAB_KEEP_LOGS", "1")
    done = cleanup.clean(verbose=True)
    assert os.path.isdir(marked) and os.path.isdir(plain)
    assert done["scratch"] == 0 and done["kept"] == 2
    assert "kept 2 scratch folder(s)" in capsys.readouterr().out
    monkeypatch.delenv("ASTRAL_LAB_KEEP_LOGS")
    done = cleanup.clean(verbose=False)  # a run started with KEEP_LOGS stays marked
    assert os.path.isdir(marked) and not os.path.exists(plain)
    assert done["scratch"] == 1 and done["kept"] == 1


def test_a_damaged_record_cannot_point_clean_elsewhere(state_dir: str, tmp_path: Any) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    _record(state_dir, "aaaaaaaaaa", [], workdir=str(precious))
    cleanup.clean(verbose=False)
    assert precious.is_dir()


def test_keep_logs_at_start_marks_the_folder(state_dir: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASTRAL_LAB_KEEP_LOGS", "1")
    path = cleanup.make_scratch("0123456789")
    monkeypatch.delenv("ASTRAL_LAB_KEEP_LOGS")
    assert cleanup.scratch_kept(path)
    assert not cleanup.drop_scratch(path) and os.path.isdir(path)


def test_lab_scratch_folder_goes_even_when_teardown_fails(state_dir: str,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A teardown step that raises (or a second Ctrl-C in it) still removes the folder."""
    from testbed.shell.lab import Lab
    from testbed.topologies import build

    lab = Lab(build("astral3", servers=2, gpus=2), log=lambda _m: None)
    lab._begin_record()
    assert cleanup.scratch_owner(lab.workdir) == (lab.run_id, os.getpid())
    assert os.path.dirname(lab.workdir) == cleanup.scratch_root()

    def interrupted(_names: list[str]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cleanup, "delete_links", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lab.stop()
    assert not os.path.exists(lab.workdir)
    assert os.path.exists(cleanup.record_path(lab.run_id))  # left for `astral-lab clean`


# --- plain Mininet on a lab plan: no record, no tags, only the lab's names ------------------
#: The bring-up benchmark's 64-GPU plain-Mininet graph (benchmarks.bringup.SIZES[64]).
PLAIN = build("astral3", servers=8, gpus=8, servers_per_block=4)
#: What a killed plain Mininet leaves in the root namespace: both ends of every
#: switch-to-switch veth (host ends died with their namespaces), and its bridges.
PLAIN_LEFT = {i for ln in PLAIN.links if ln.kind != "nic" for i in (ln.a_intf, ln.b_intf)}
#: Not the lab's: Mininet's own defaults, the machine's, another tool's.
STRANGERS = {"lo", "eth0", "ovs-netdev", "ovs-system", "s1-eth1", "h1-eth0", "veth0a1b2c",
             "astsv0", "lf0r0", "spine0-eth", "xs0g0-eth0", "lf0r0-eth1x", "br-int"}


def test_every_topology_names_its_nodes_and_interfaces_the_way_clean_recognises() -> None:
    for topology in BUILDERS:
        plan = build(topology, servers=4, gpus=2)
        assert all(cleanup.NODE_RE.fullmatch(n.name) for n in plan.nodes), topology
        assert all(cleanup.INTF_RE.fullmatch(i) for ln in plan.links
                   for i in (ln.a_intf, ln.b_intf)), topology


def test_plain_mininet_leftovers_are_found_by_name_only() -> None:
    assert len(PLAIN_LEFT) == 256
    bridges = [s.name for s in PLAIN.switches] + ["br0", "s1", "br-int"]
    links, brs, why_not = cleanup.plain_mininet_leftovers(
        PLAIN_LEFT | STRANGERS, bridges, {4242: "h1", 4343: "s1"}, live_runs=())
    assert set(links) == PLAIN_LEFT and why_not == ""
    assert set(brs) == {s.name for s in PLAIN.switches}
    assert cleanup.plain_mininet_leftovers(STRANGERS, ["br0"], {}, ()) == ([], [], "")


def test_plain_mininet_sweep_spares_names_while_a_fabric_may_own_them() -> None:
    # a Lab is up: its record does not name every veth end, so no name is swept
    links, brs, why_not = cleanup.plain_mininet_leftovers(
        PLAIN_LEFT, ["lf0r0"], {}, live_runs={"0123456789"})
    assert (links, brs) == ([], []) and "0123456789" in why_not
    # a plain Mininet fabric is up: its node shells run (one per host and switch)
    links, brs, why_not = cleanup.plain_mininet_leftovers(
        PLAIN_LEFT, ["lf0r0"], {4242: "h1", 777: "spine3"}, live_runs=())
    assert (links, brs) == ([], []) and "777" in why_not and "4242" not in why_not


def _fake_machine(monkeypatch: pytest.MonkeyPatch, ifaces: set[str],
                  bridges: list[str]) -> list[list[str]]:
    """A root namespace and an OVS that ``clean`` changes through ``ip``/``ovs-vsctl``."""
    peer = {}
    for ln in PLAIN.links:
        peer[ln.a_intf], peer[ln.b_intf] = ln.b_intf, ln.a_intf
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], stdin: str | None = None, check: bool = False,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        if cmd[0] == "ip":
            for line in (stdin or "").splitlines():
                name = line.split()[-1]
                ifaces.discard(name)
                ifaces.discard(peer.get(name, ""))
        if cmd[0] == "ovs-vsctl":
            for i, arg in enumerate(cmd):
                if arg == "del-br":
                    bridges.remove(cmd[i + 1])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(procs, "run", fake_run)
    monkeypatch.setattr(cleanup, "existing_interfaces", lambda: set(ifaces))
    monkeypatch.setattr(cleanup, "all_bridges", lambda: list(bridges))
    return calls


def test_clean_removes_what_a_killed_plain_mininet_left(state_dir: str,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ifaces = PLAIN_LEFT | STRANGERS
    bridges = [s.name for s in PLAIN.switches] + ["br0"]
    _fake_machine(monkeypatch, ifaces, bridges)
    done = cleanup.clean(verbose=True)
    assert ifaces == STRANGERS and bridges == ["br0"]
    assert done["links"] == 256 and done["bridges"] == len(PLAIN.switches)
    assert done["unrecorded"] == 256 + len(PLAIN.switches)
    assert "256 interface(s)" in capsys.readouterr().out


@pytest.mark.parametrize("module", cleanup.CONTROLLER_MODULES)
def test_clean_leaves_lab_names_alone_while_a_run_lives(state_dir: str,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str],
                                                      module: str) -> None:
    """A live controller, started as this version starts it or as earlier ones did."""
    live = _spawn(module, "--run-id", "abcdef0123")
    try:
        _record(state_dir, "abcdef0123", [], owner=live.pid)
        ifaces = PLAIN_LEFT | STRANGERS
        bridges = [s.name for s in PLAIN.switches]
        calls = _fake_machine(monkeypatch, ifaces, bridges)
        done = cleanup.clean(verbose=True)
    finally:
        live.kill()
        live.wait()
    assert ifaces == PLAIN_LEFT | STRANGERS and len(bridges) == len(PLAIN.switches)
    assert done["links"] == 0 and done["unrecorded"] == 0
    assert not [c for c in calls if c[0] == "ip" or "del-br" in c]
    assert "abcdef0123 is alive" in capsys.readouterr().out


def test_stale_probe_namespaces_are_preflights_older_than_a_probe_takes(tmp_path: Any) -> None:
    """A run killed while preflight probed left its throwaway namespace; one being probed
    right now (younger than a minute) and anyone else's are not ours to remove."""
    old = time.time() - 600
    for name, mtime in [(f"{cleanup.PROBE_NS}0123abcd", old), (f"{cleanup.PROBE_NS}f0123abc", old),
                        (f"{cleanup.PROBE_NS}young000", None), ("someone-else", old)]:
        (tmp_path / name).touch()
        if mtime is not None:
            os.utime(tmp_path / name, (mtime, mtime))
    assert cleanup.stale_probe_namespaces(root=str(tmp_path)) == [
        f"{cleanup.PROBE_NS}0123abcd", f"{cleanup.PROBE_NS}f0123abc"]
    assert cleanup.stale_probe_namespaces(root=str(tmp_path / "none")) == []
