"""The live view's wiring without a fabric: CLI arguments, --capture names, the process a Lab
starts (and stops), and how ``astral-lab clean`` recognises its leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from astral_lab import cli, dashboard_cli
from scenarios import base
from scenarios.base import Run, scenario
from scenarios.experiments import SCENARIOS
from testbed import capture
from testbed.shell import cleanup, sidecars
from testbed.shell.lab import Lab
from tests.stopping import stop_command, stopped_as_asked
from tests.unit.dash_fakes import demo_plan
from tests.unit.test_cleanup import _gone, _record, _spawn, state_dir  # noqa: F401 (fixture)
from traffic.roce import DEFAULT_PMTU
from vocab.plan import WiringPlan


# --- arguments ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,message", [
    (["dashboard", "--port", "70000"], "argument --port: must be a whole number in 0..65535"),
    (["dashboard", "--port", "web"], "argument --port: must be a whole number in 0..65535"),
    (["dashboard", "--interval", "0"], "argument --interval: must be a finite number in [0.001, "),
    (["dashboard", "--interval", "nan"],
     "argument --interval: must be a finite number in [0.001, "),
    (["up", "astral3", "--capture", "lf0r0"], "'lf0r0' is not a switch port"),
    (["up", "astral3", "--capture", "lf0r0-eth3,lf0r0:3,lf0r0-eth3"], "named twice"),
    (["up", "astral3", "--dashboard-port", "-1"], "must be a whole number in 0..65535"),
])
def test_bad_arguments_are_one_usage_error(argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv,message", [
    (["dashboard", "--controller", "http://127.0.0.1:8080"], "--controller needs --plan"),
    (["dashboard", "--demo", "--plan", "PLAN"], "--demo brings up its own fabric"),
])
def test_conflicting_dashboard_options_are_refused(argv: list[str], message: str,
                                                   tmp_path: Any,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.json"  # --plan must name a file that exists
    demo_plan().save(plan)
    assert cli.main([str(plan) if a == "PLAN" else a for a in argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("astral-lab dashboard: error: ") and \
        message in err[0]


def test_demo_needs_root(monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["dashboard", "--demo"]) == cli.EXIT_USAGE
    assert "run it as root" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:8080", "http://127.0.0.1", "127.0.0.1:8080",
                                 "http://127.0.0.1:8080/lb", "http://127.0.0.1:port"])
def test_malformed_controller_urls(url: str) -> None:
    with pytest.raises(ValueError, match="--controller must look like"):
        dashboard_cli.controller_client(url)
    client = dashboard_cli.controller_client("http://127.0.0.1:8080/")
    assert client is not None and (client.host, client.port) == ("127.0.0.1", 8080)


def test_the_process_entry_needs_a_plan(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        dashboard_cli.parse_args(["--port", "0"])
    assert "--plan is required" in capsys.readouterr().err


def test_up_with_an_unknown_capture_port_fails_before_anything_is_built(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path / "results"))

    def no_lab(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a fabric was started")

    monkeypatch.setattr(cli, "make_lab", no_lab)
    status = cli.main(["up", "astral3", "--servers", "2",
                       "--capture", "lf0r0-eth99"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == cli.EXIT_USAGE and len(err) == 1
    assert err[0].startswith("astral-lab up: error: --capture: astral3 has no switch port "
                             "lf0r0-eth99; its ports look like lf0r0-eth1")
    assert not os.path.exists(tmp_path / "results")


# --- capture names -----------------------------------------------------------------------------
def test_capture_ports_resolve_to_switch_interfaces() -> None:
    plan = demo_plan()
    assert capture.resolve(plan, ["lf0r0-eth3", "spine1:2"]) == ["lf0r0-eth3", "spine1-eth2"]
    with pytest.raises(ValueError, match=r"GPU NIC .* switch end instead \(lf0r0-eth1\)"):
        capture.resolve(plan, ["s0g0-eth0"])
    with pytest.raises(ValueError, match="no switch port spine9-eth1"):
        capture.resolve(plan, ["spine9-eth1"])
    assert len(capture.switch_ports(plan)) == 8 + 2 * 16  # NIC switch ends + both lane ends


def test_capture_command_writes_whole_packets_as_they_come() -> None:
    cmd = capture.command("lf0r0-eth3", "/r/lf0r0-eth3.pcap")
    assert cmd[:5] == ["tcpdump", "-i", "lf0r0-eth3", "-w", "/r/lf0r0-eth3.pcap"]
    assert "-U" in cmd and cmd[cmd.index("-s") + 1] == "0"
    assert capture.is_capture(cmd, cleanup.INTF_RE)
    assert not capture.is_capture(["tcpdump", "-i", "eth0", "-w", "x.pcap"], cleanup.INTF_RE)
    assert not capture.is_capture(["tcpdump", "-i", "lf0r0-eth3"], cleanup.INTF_RE)  # no file


def test_lab_checks_capture_ports_when_made_before_building() -> None:
    plan = demo_plan()
    with pytest.raises(ValueError, match="no switch port lf0r0-eth99"):
        Lab(plan, capture=["lf0r0-eth99"], capture_dir="/nonexistent")
    with pytest.raises(ValueError, match="capture needs capture_dir"):
        Lab(plan, capture=["lf0r0:3"])
    lab = Lab(plan, capture=["lf0r0:3"], capture_dir="/r", dashboard=True, dashboard_port=9)
    assert lab.capture == ["lf0r0-eth3"] and lab.dashboard and lab.dashboard_url is None
    assert not lab.workdir  # nothing was made


#: a process that writes the number of the signal that ended it into argv[1]
_SIGNALLED = """import signal, sys, time
def got(n, _f):
    open(sys.argv[1], "w").write(str(n)); sys.exit(0)
signal.signal(signal.SIGINT, got); signal.signal(signal.SIGTERM, got)
open(sys.argv[1] + ".ready", "w").close(); time.sleep(60)
"""


def test_lab_stop_ends_its_dashboard_by_sigterm_and_captures_by_sigint_first(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Before the fabric goes (a capture must flush while its port exists), and also when
    a subclass (ClusterLab) replaces the fabric's teardown."""
    lab = Lab(demo_plan(), capture=["lf0r0:3"], capture_dir="/r", dashboard=True)
    order: list[str] = []
    procs = {k: subprocess.Popen([sys.executable, "-c", _SIGNALLED, str(tmp_path / k)])
             for k in ("dashboard", "capture")}
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"{k}.ready").exists() for k in procs):
        assert time.monotonic() < deadline, "the stand-in processes never got ready"
        time.sleep(0.02)
    lab.sidecar_procs = {k: [p] for k, p in procs.items()}
    lab.dashboard_url = "http://127.0.0.1:1/"

    def teardown() -> None:
        order.append("teardown")
        assert all(p.poll() is not None for p in procs.values()), "fabric went first"

    monkeypatch.setattr(lab, "teardown_fabric", teardown)
    monkeypatch.setattr(lab, "drop_workdir", lambda: None)
    try:
        lab.stop()
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    assert order == ["teardown"]
    assert (tmp_path / "dashboard").read_text() == str(int(signal.SIGTERM))
    assert (tmp_path / "capture").read_text() == str(int(signal.SIGINT))
    assert lab.dashboard_url is None and lab.sidecar_procs == {"dashboard": [], "capture": []}


# --- scenario runs: options reach every Lab, progress.json is written ---------------------------
def test_run_passes_dashboard_and_capture_to_its_labs_and_writes_progress(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, Any]] = []

    class RecordingLab:
        def __init__(self, plan: WiringPlan, *_a: Any, **kw: Any) -> None:
            made.append(kw)
            self.plan, self.lb, self.datapath, self.timings = plan, "ecmp", "fake", {}
            self.pmtu, self.mtu = DEFAULT_PMTU, None

        def __enter__(self) -> RecordingLab:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(base, "make_lab", RecordingLab)
    monkeypatch.setattr(base, "calibrate", lambda *_a, **_k: {"hop_pps": 1, "measured": "x"})
    seen: dict[str, Any] = {}

    from testbed.topologies import build

    @scenario("a toy with two fabrics", name="toy-live",
              fabrics=lambda _p: {"astral3 small": demo_plan(), "rail3": build("rail3")})
    def toy(run: Run) -> None:
        with run.lab(run.fabric("astral3 small"), label="astral3 small"):
            run.stage("first fabric")
            with open(run.path("progress.json")) as f:
                seen.update(json.load(f))
            assert "faults" not in seen  # a run that injects nothing says nothing of faults
            run.show_faults([{"kind": "link-down", "component": "lf0r0~spine1#0",
                              "since": 1.0}])
            with open(run.path("progress.json")) as f:
                shown = json.load(f)
            assert shown["stage"] == "first fabric" and shown["faults"] == [
                {"kind": "link-down", "component": "lf0r0~spine1#0", "since": 1.0}]
        with run.lab(run.fabric("rail3"), label="rail3"):
            run.stage("second fabric")

    SCENARIOS.add("toy-live", toy)
    try:
        assert cli.main(["run", "toy-live", "--dashboard", "--dashboard-port", "8799",
                         "--capture", "lf0r0-eth3"]) == 0
    finally:
        SCENARIOS.remove("toy-live")
    (folder,) = os.listdir(tmp_path / "results")
    first, second = made
    assert first["dashboard"] and first["dashboard_port"] == 8799
    assert first["dashboard_progress"].endswith("-toy-live.partial/progress.json")
    assert first["capture"] == ["lf0r0-eth3"]
    assert first["capture_dir"].endswith("-toy-live.partial/capture/astral3_small")
    assert "capture" not in second and second["dashboard"]  # rail3 has no lf0r0: skipped
    assert seen["scenario"] == "toy-live" and seen["stage"] == "first fabric"
    with open(tmp_path / "results" / folder / "progress.json") as f:
        assert json.load(f)["done"] == 2


# --- the process a Lab starts -------------------------------------------------------------------
def test_a_labs_dashboard_process_prints_its_url_serves_and_stops(tmp_path: Any) -> None:
    """The real ``python -m astral_lab.dashboard_cli``, as ``Lab`` starts it (no controller;
    it polls kernel counters of interfaces that do not exist here)."""
    plan = demo_plan()
    pids: list[int] = []
    proc, url = sidecars.start_dashboard(plan, str(tmp_path), "0123456789", port=None,
                                         interval=0.5, rest_port=None, progress=None,
                                         on_pid=pids.append)
    try:
        assert pids == [proc.pid] and url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "api/state", timeout=10) as r:
            state = json.load(r)
        assert set(state["links"]) == {f"{ln.a}~{ln.b}#0" for ln in plan.links}
        with urllib.request.urlopen(url + "metrics", timeout=10) as r:
            assert b"astral_link_capacity_bytes_per_second" in r.read()
        with open(tmp_path / "dashboard.url") as f:
            assert json.load(f) == {"url": url, "pid": proc.pid}
        with open(f"/proc/{proc.pid}/cmdline") as f:
            assert cleanup._is_sidecar(f.read().split("\0"))
    finally:
        sidecars.stop([proc])
    assert proc.poll() is not None and not os.path.exists(f"/proc/{proc.pid}")
    with open(tmp_path / "dashboard.log") as f:
        log = f.read()
    assert log.splitlines()[0] == url  # the URL is its first line
    assert "Traceback" not in log  # SIGTERM ended it through its own handler


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("after", [0.05, 0.5, None])
def test_the_dashboard_verb_stops_on_a_signal_at_any_moment(
        tmp_path: Any, sig: int, after: float | None, busy_machine: None) -> None:
    """`astral-lab dashboard --plan` stopped while it starts and while it serves, with the
    CPU contended: the shell's status (130 Ctrl-C, 143 SIGTERM), soon, no traceback."""
    plan_path = tmp_path / "plan.json"
    demo_plan().save(str(plan_path))
    argv = [sys.executable, "-m", "astral_lab", "dashboard", "--plan", str(plan_path),
            "--port", "0", "--interval", "0.5"]
    how = stop_command(argv, sig, after=after, after_line="http://" if after is None else None,
                       env=dict(os.environ, ASTRAL_LAB_RESULTS=str(tmp_path / "results")),
                       bound=60)
    assert stopped_as_asked(sig, how), how
    assert how.seconds < 30, how
    if after is None:
        assert "http://" in how.before and "Traceback" not in how.stderr, how.stderr


# --- astral-lab clean ---------------------------------------------------------------------------
def test_clean_kills_a_dead_runs_dashboard_and_captures(state_dir: str) -> None:  # noqa: F811
    dash = _spawn("-m", "astral_lab.dashboard_cli", "--run-id", "dead2")
    cap = _spawn("-i", "lf0r0-eth3", "-w", "/tmp/x.pcap", argv0="tcpdump")
    stranger = _spawn("-i", "eth0", "-w", "/tmp/y.pcap", argv0="tcpdump")  # not the lab's
    try:
        _record(state_dir, "dead2", [dash.pid, cap.pid, stranger.pid])
        done = cleanup.clean(verbose=False)
        assert _gone(dash) and _gone(cap)
        assert stranger.poll() is None and done["processes"] == 2
    finally:
        for p in (dash, cap, stranger):
            p.kill()
            p.wait()


def test_unrecorded_dashboards_and_captures_are_found_but_a_live_runs_are_spared() -> None:
    dash = _spawn("-m", "astral_lab.dashboard_cli", "--run-id", "x1")
    cap = _spawn("-i", "spine0-eth2", "-w", "/tmp/z.pcap", argv0="tcpdump")
    plain = _spawn("-m", "astral_lab.dashboard_cli")  # by hand: no run
    try:
        found = cleanup.our_processes()
        assert dash.pid in found and cap.pid in found and plain.pid not in found
    finally:
        for p in (dash, cap, plain):
            p.kill()
            p.wait()
