"""The live view's HTTP server (ops.shell.dashboard_server) against fake backends on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from controllers.shell.client import ControllerClient
from ops.metrics import CONTENT_TYPE
from ops.shell.dashboard_server import DashboardServer, LiveBackend
from tests.unit.dash_fakes import FakeBackend, FakeController, demo_plan


@pytest.fixture
def server() -> Iterator[tuple[DashboardServer, FakeBackend]]:
    backend = FakeBackend()
    with DashboardServer(backend, 0) as srv:
        yield srv, backend


def request(srv: DashboardServer, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read()
    finally:
        conn.close()


def test_serves_on_loopback_and_says_where(server: Any) -> None:
    srv, _ = server
    assert srv.host == "127.0.0.1" and srv.url == f"http://127.0.0.1:{srv.port}/"


def test_page_and_its_assets_come_from_the_package(server: Any) -> None:
    srv, _ = server
    status, ctype, body = request(srv, "GET", "/")
    assert status == 200 and ctype.startswith("text/html")
    page = body.decode()
    assert "/static/dashboard.js" in page and 'id="fabric"' in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # no CDN
    status, ctype, body = request(srv, "GET", "/static/dashboard.js")
    assert status == 200 and "javascript" in ctype and b"data-link" in body
    status, ctype, _ = request(srv, "GET", "/static/dashboard.css")
    assert status == 200 and ctype.startswith("text/css")


@pytest.mark.parametrize("path", ["/static/../dashboard.py", "/static/%2e%2e/x",
                                  "/static/nothing.js", "/static/.hidden", "/nowhere",
                                  "/api/nothing"])
def test_unknown_paths_are_404_with_a_json_error(server: Any, path: str) -> None:
    srv, _ = server
    status, ctype, body = request(srv, "GET", path)
    assert status == 404 and ctype == "application/json"
    assert "error" in json.loads(body)


def test_layout_and_state_are_json(server: Any) -> None:
    srv, backend = server
    status, _, body = request(srv, "GET", "/api/layout")
    lay = json.loads(body)
    assert status == 200 and len(lay["links"]) == len(backend.plan.links)
    backend.load = 0.5
    status, ctype, body = request(srv, "GET", "/api/state")
    state = json.loads(body)
    assert status == 200 and ctype == "application/json"
    assert state["links"]["s0g0~lf0r0#0"]["util"] == pytest.approx(0.5)
    assert state["lb"]["mode"] == "ecmp"


def test_metrics_are_prometheus_text(server: Any) -> None:
    srv, _ = server
    status, ctype, body = request(srv, "GET", "/metrics")
    text = body.decode()
    assert status == 200 and ctype == CONTENT_TYPE
    assert "# TYPE astral_link_utilisation_ratio gauge" in text
    assert 'astral_link_up{link="s0g0~lf0r0#0",a="s0g0",b="lf0r0",kind="nic"} 1' in text


def test_put_lb_switches_the_mode_through_the_backend(server: Any) -> None:
    srv, backend = server
    status, _, body = request(srv, "PUT", "/api/lb", json.dumps({"mode": "planned"}).encode(),
                              {"Content-Type": "application/json"})
    assert status == 200 and json.loads(body)["mode"] == "planned"
    assert backend.lb_calls == [{"mode": "planned"}]
    assert json.loads(request(srv, "GET", "/api/state")[2])["lb"]["mode"] == "planned"


@pytest.mark.parametrize("body", [b"not json", b"[1]", b'{"mode": 3}', b"{}", b'"ecmp"', b""])
def test_bad_lb_bodies_are_400_with_a_json_error(server: Any, body: bytes) -> None:
    srv, backend = server
    status, ctype, answer = request(srv, "PUT", "/api/lb", body)
    assert status == 400 and ctype == "application/json"
    assert json.loads(answer)["error"]
    assert backend.lb_calls == []


def test_an_unknown_mode_is_the_controllers_400(server: Any) -> None:
    srv, _ = server
    status, _, answer = request(srv, "PUT", "/api/lb", b'{"mode": "random"}')
    assert status == 400 and "unknown mode" in json.loads(answer)["error"]


def test_oversized_body_and_other_methods_are_refused(server: Any) -> None:
    srv, _ = server
    status, _, _ = request(srv, "PUT", "/api/lb", b"x", {"Content-Length": str(10 ** 7)})
    assert status == 400
    assert request(srv, "POST", "/api/lb", b"{}")[0] == 405
    assert request(srv, "PUT", "/api/state", b"{}")[0] == 405
    assert request(srv, "PUT", "/elsewhere", b"{}")[0] == 404


def test_live_backend_forwards_put_lb_to_the_controller() -> None:
    plan = demo_plan()
    with FakeController() as ctl:
        backend = LiveBackend(plan, ControllerClient(port=ctl.port, timeout=5))
        with DashboardServer(backend, 0) as srv:  # the collector is not started: no fabric
            status, _, body = request(srv, "PUT", "/api/lb", b'{"mode": "adaptive"}')
            assert status == 200 and json.loads(body)["mode"] == "adaptive"
            assert ctl.puts == [{"mode": "adaptive"}] and ctl.mode == "adaptive"
            assert json.loads(request(srv, "GET", "/api/state")[2])["lb"]["mode"] == "adaptive"
            status, _, body = request(srv, "PUT", "/api/lb", b'{"mode": "bogus"}')
            assert status == 400 and "unknown mode" in json.loads(body)["error"]


def test_live_backend_without_a_reachable_controller_is_502() -> None:
    backend = LiveBackend(demo_plan(), ControllerClient(port=1, timeout=1))
    with DashboardServer(backend, 0) as srv:
        status, _, body = request(srv, "PUT", "/api/lb", b'{"mode": "planned"}')
        assert status == 502 and "controller" in json.loads(body)["error"]
    no_ctl = LiveBackend(demo_plan(), None)
    with DashboardServer(no_ctl, 0) as srv:
        assert request(srv, "PUT", "/api/lb", b'{"mode": "planned"}')[0] == 502


def test_live_backend_folds_each_poll_into_the_state(tmp_path: Any) -> None:
    """What the collector's on_poll hook does, without a fabric: values, alerts, progress."""
    plan = demo_plan()
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"scenario": "demo", "stage": "ecmp round 1"}))
    backend = LiveBackend(plan, None, progress=str(progress))
    down = {("lf0r0~spine1#0", "up"): 0.0, ("s0g0~lf0r0#0", "mbps_ab"): 20.0}
    for t in (1.0, 2.0):
        backend.collector.history.add(t, down)
        backend._on_poll(t, down)
    state = backend.state()
    assert state["links"]["s0g0~lf0r0#0"]["util"] == pytest.approx(0.5)
    assert state["links"]["lf0r0~spine1#0"]["state"] == "down"
    assert [a["detector"] for a in state["alerts"]] == ["link-down"]  # the ops detector's
    assert state["progress"]["stage"] == "ecmp round 1"


def test_a_nan_in_the_state_is_sent_as_null(server: Any) -> None:
    srv, backend = server
    backend.st.set_alerts([{"detector": "degraded", "component": "s0g0~lf0r0#0",
                            "severity": "warning", "summary": "slow", "first_seen": 1.0,
                            "cleared": None, "evidence": {"ratio": float("nan")}}])
    status, _, body = request(srv, "GET", "/api/state")
    assert status == 200 and b"NaN" not in body
    assert json.loads(body)["alerts"][0]["evidence"] == {"ratio": None}
