"""``astral-lab dashboard --demo`` end to end: a real fabric, its live view in headless Chromium.

Asserts from the rendered DOM that every link of the plan is drawn and that a loaded link's
colour changes within 3 s of traffic starting on it (traffic start is read independently,
from the switch port's own kernel counter), saves a screenshot into the demo's results
folder, then sends Ctrl-C and checks nothing is left: no host shells or their namespaces, no
controller, dashboard or capture process, no bridge or interface, no /tmp/astral-lab-*
scratch folder.
"""

from __future__ import annotations

import glob
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from astral_lab.dashboard_cli import DEMO_FABRIC
from ops.telemetry import parse_proc_net_dev
from testbed.shell import cleanup
from testbed.topologies import build
from tests.unit.browser import Browser, chromium_path
from vocab.plan import link_components

pytestmark = pytest.mark.skipif(chromium_path() is None,
                                reason="chromium not installed (scripts/setup.sh installs it)")

#: the NIC link watched, and the switch-side interface whose receive counter shows its traffic
NIC_LINK = "s0g0~lf0r0#0"
SWITCH_END = "lf0r0-eth1"


@pytest.fixture
def results_root(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            return proc.stdout.readline().strip()
        if proc.poll() is not None:
            break
    raise AssertionError(f"no URL from the demo within {timeout:g} s (exit {proc.poll()})")


def _rx_bytes(intf: str) -> int:
    with open("/proc/net/dev", encoding="ascii") as f:
        return parse_proc_net_dev(f.read()).get(intf, {}).get("rx_bytes", 0)


def _dashboard_pids(url: str) -> list[int]:
    pids = []
    for path in glob.glob(os.path.join(cleanup.scratch_root(), "astral-lab-*",
                                       "dashboard.url")):
        try:
            with open(path, encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue
        if info.get("url") == url:
            pids.append(int(info["pid"]))
    return pids


def _link_js(expr: str) -> str:
    """``expr`` about the watched link's element ``e``, as a page expression."""
    return f"(e => {expr})(document.querySelector('[data-link=\"{NIC_LINK}\"]'))"


def _wait_traffic_start(browser: Browser, timeout: float = 240.0) -> tuple[float, str]:
    """The moment the watched NIC starts sending after a quiet spell, while the page shows
    the link idle; returns that time and the idle colour. A round that starts while the page
    still shows the previous one is skipped (its "before" would not be idle)."""
    deadline = time.monotonic() + timeout
    last, quiet_since = _rx_bytes(SWITCH_END), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = _rx_bytes(SWITCH_END)
        grew, last = now - last, now
        if grew <= 20_000:  # ARP and the like, not a replay
            continue
        quiet = time.monotonic() - quiet_since
        quiet_since = time.monotonic()
        if quiet < 0.5:
            continue
        t = time.monotonic()
        util, color = browser.evaluate(_link_js("[Number(e.dataset.util), e.dataset.color]"))
        if util < 0.05:
            return t, color
    raise AssertionError("no round of traffic started on the watched NIC while it showed idle")


def test_dashboard_demo_in_a_browser(results_root: Any, assert_clean: Any) -> None:
    plan = build("astral3", **DEMO_FABRIC)
    port = _free_port()
    browsers_before = set(glob.glob(os.path.join(cleanup.scratch_root(), "astral-browser-*")))
    env = dict(os.environ, ASTRAL_LAB_RESULTS=str(results_root))
    proc = subprocess.Popen([sys.executable, "-m", "astral_lab.cli", "dashboard", "--demo",
                             "--port", str(port), "--seconds", "8"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dash_pids: list[int] = []
    try:
        url = _first_line(proc, timeout=600)  # may wait for the machine's fabric lock
        assert url == f"http://127.0.0.1:{port}/"
        dash_pids = _dashboard_pids(url)
        assert dash_pids, "the dashboard process wrote no URL file in the run's scratch folder"
        with Browser(url) as browser:
            browser.wait_for("document.body.dataset.ready === '1'", timeout=60)
            drawn = browser.links()
            assert sorted(drawn) == sorted(link_components(plan)), "not every plan link drawn"
            assert browser.evaluate("document.querySelectorAll('[data-node]').length") == \
                len(plan.nodes)

            t_start, idle = _wait_traffic_start(browser)
            changed = browser.wait_for(
                _link_js(f"Number(e.dataset.util) > 0.05 && e.dataset.color !== '{idle}' "
                         "&& e.dataset.util"), timeout=6.0, interval=0.05)
            elapsed = time.monotonic() - t_start
            assert elapsed <= 3.0, f"colour changed {elapsed:.2f} s after traffic started"
            assert float(changed) > 0.05
            browser.wait_for("[...document.querySelectorAll('#spines tr')]"
                             ".some(r => Number(r.dataset.bytes) > 0)", timeout=30)
            assert browser.evaluate("document.getElementById('lb-mode').value") in (
                "ecmp", "planned")
            (folder,) = glob.glob(str(results_root / "*-dashboard-demo.partial"))
            shot = browser.screenshot(os.path.join(folder, "dashboard.png"))
            with open(shot, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-3000:]  # Ctrl-C, as every verb reports it
    assert "torn down" in err
    (final,) = glob.glob(str(results_root / "*-dashboard-demo"))
    assert os.path.exists(os.path.join(final, "dashboard.png"))
    assert os.path.exists(os.path.join(final, "progress.json"))
    for pid in dash_pids:
        assert not os.path.exists(f"/proc/{pid}"), f"dashboard process {pid} left running"
    mine = [p for p in glob.glob(os.path.join(cleanup.scratch_root(), "astral-lab-*"))
            if f"-p{proc.pid}-" in os.path.basename(p)]
    assert not mine, f"scratch folders left: {mine}"
    # the browser's profile folders of this test are gone (another run's are not ours)
    browsers = set(glob.glob(os.path.join(cleanup.scratch_root(), "astral-browser-*")))
    assert not browsers - browsers_before, browsers - browsers_before
    assert_clean(plan)


def test_capture_writes_pcaps_that_tshark_decodes_as_roce(tmp_path: Any,
                                                          assert_clean: Any) -> None:
    """``Lab(capture=...)`` (what ``--capture`` gives): one pcap per port, flushed on
    teardown, RoCE frames in it; no capture process outlives the Lab."""
    from scenarios.common import permutation_flows
    from testbed.shell.lab import Lab
    from traffic.shell.replay import replay

    plan = build("astral3", **DEMO_FABRIC)
    folder = tmp_path / "capture"
    ports = ["lf0r0-eth1", "lf0r0:3"]  # s0g0's NIC, switch end; a lane to spine0
    with Lab(plan, capture=ports, capture_dir=str(folder)) as lab:
        assert lab.capture == ["lf0r0-eth1", "lf0r0-eth3"]
        replay(lab, permutation_flows(plan, 200_000, qps=1), progress=False)
    for intf in lab.capture:
        proc = subprocess.run(["tshark", "-r", str(folder / f"{intf}.pcap"), "-Y", "udp",
                               "-T", "fields", "-e", "infiniband.bth.opcode",
                               "-e", "infiniband.bth.destqp"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr  # a whole, readable pcap
        if intf == "lf0r0-eth1":  # s0g0 sends on every permutation: RoCE frames are here
            opcodes = [ln.split("\t")[0] for ln in proc.stdout.splitlines() if ln.strip()]
            assert opcodes and all(op for op in opcodes), proc.stdout[:500]
    left = subprocess.run(["pgrep", "-f", "tcpdump -i lf0r0-"], capture_output=True, text=True)
    assert not left.stdout.strip(), "a capture outlived its Lab"
    assert_clean(plan)
