"""Fakes for the live view's tests: a backend whose load the test sets, a fake controller."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ops.dashboard import DashboardState, layout
from ops.shell.dashboard_server import UpstreamError, check_lb_body
from testbed.topologies import build
from vocab.plan import WiringPlan


def demo_plan() -> WiringPlan:
    """The demo's fabric: 8 GPUs, 4 leaves, 4 spines, one shuffle box, 24 links."""
    return build("astral3", servers=2, gpus=4, servers_per_block=2)


class FakeBackend:
    """A backend whose every ``state()`` is one more poll at the current ``load`` (the
    fraction of each link's rate it carries up the tree); ``down`` links report down."""

    def __init__(self, plan: WiringPlan | None = None, load: float = 0.05) -> None:
        self.plan = plan or demo_plan()
        self.st = DashboardState(self.plan)
        self.lay = layout(self.plan)
        self.load = load
        self.down: set[str] = set()
        self.t = 1_000.0
        self.lb_calls: list[dict[str, Any]] = []
        self.st.lb = {"mode": "ecmp", "modes": ["ecmp", "planned", "adaptive"]}
        self._lock = threading.Lock()

    def layout(self) -> dict[str, Any]:
        return self.lay

    def state(self) -> dict[str, Any]:
        with self._lock:
            self.t += 1.0
            values = {}
            for comp, ln in self.st.links.items():
                values[(comp, "mbps_ab")] = self.load * ln.mbps
                values[(comp, "up")] = 0.0 if comp in self.down else 1.0
            self.st.update(self.t, values)
            return self.st.snapshot()

    def set_lb(self, body: dict[str, Any]) -> dict[str, Any]:
        body = check_lb_body(body)
        if body["mode"] not in self.st.lb["modes"]:
            raise UpstreamError(f"controller: unknown mode {body['mode']!r}", 400)
        self.lb_calls.append(body)
        self.st.lb = {**self.st.lb, "mode": body["mode"]}
        return {"mode": body["mode"], "modes": self.st.lb["modes"]}


class FakeController:
    """Enough of the controller's JSON API on 127.0.0.1 for the LB switch: GET/PUT /lb."""

    MODES = ["ecmp", "planned", "adaptive"]

    def __init__(self) -> None:
        self.mode = "ecmp"
        self.puts: list[Any] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:
                pass

            def _answer(self, status: int, data: Any) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/lb":
                    self._answer(200, {"mode": fake.mode, "modes": fake.MODES})
                else:
                    self._answer(404, {"error": "no such endpoint"})

            def do_PUT(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"null")
                fake.puts.append(body)
                if body.get("mode") not in fake.MODES:
                    self._answer(400, {"error": f"unknown mode {body.get('mode')!r}"})
                    return
                fake.mode = body["mode"]
                self._answer(200, {"mode": fake.mode, "modes": fake.MODES})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeController:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
