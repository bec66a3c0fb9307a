"""The live view's web server: the page, its assets, its JSON, ``/metrics``, and LB switching.

Standard library only (``http.server.ThreadingHTTPServer`` on 127.0.0.1) and a page of plain
JavaScript drawing inline SVG (``ops/static/``): the lab runs on offline machines, so there
is nothing to install and nothing for the browser to fetch from elsewhere; a one-page view
that polls one JSON document a second needs no framework, and the whole of it can be read
in a sitting.

Routes::

    GET  /                 the page (ops/static/index.html)
    GET  /static/NAME      its script and style sheet (files of ops/static/ only)
    GET  /api/layout       the wiring plan as drawing geometry (ops.dashboard.layout)
    GET  /api/state        the live state (ops.dashboard.DashboardState.snapshot)
    GET  /metrics          Prometheus text exposition 0.0.4 (ops.metrics)
    PUT  /api/lb           {"mode": NAME, ...}: forwarded to the controller's PUT /lb

The data comes from a ``Backend``; ``LiveBackend`` runs the ops telemetry collector
(``ops.shell.collector.Collector``, the poll ``ops watch`` runs) and the detector engine
against a running fabric, tests give a fake one.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from controllers.shell.client import ControllerClient, ControllerError
from ops import metrics
from ops.dashboard import DashboardState, layout, read_progress
from ops.detectors import Engine
from ops.shell.collector import Collector, running_sources
from ops.telemetry import DEFAULT_INTERVAL_S
from vocab.plan import WiringPlan, finite

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}
#: Largest request body accepted (a PUT /api/lb is a few dozen bytes).
MAX_BODY = 64 * 1024


class BadRequest(ValueError):
    """The request is malformed: answered 400 with ``{"error": message}``."""


class UpstreamError(RuntimeError):
    """The controller refused or did not answer: answered with ``status`` (400 or 502)."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


class Backend(Protocol):
    """Where the server's data comes from (``LiveBackend``, or a fake in tests)."""

    def layout(self) -> dict[str, Any]: ...

    def state(self) -> dict[str, Any]: ...

    def set_lb(self, body: dict[str, Any]) -> dict[str, Any]: ...


def check_lb_body(body: Any) -> dict[str, Any]:
    """A PUT /api/lb body: a JSON object with a string ``mode`` (the controller checks the
    name and any options; its refusal comes back as a 400)."""
    if not isinstance(body, dict):
        raise BadRequest('body must be a JSON object like {"mode": "planned"}')
    mode = body.get("mode")
    if not isinstance(mode, str) or not mode:
        raise BadRequest('body needs "mode": a load-balancing mode name (e.g. "ecmp")')
    return body


class LiveBackend:
    """Telemetry of a running fabric, folded into a ``DashboardState`` after every poll.

    ``client`` is the controller's REST client (None: kernel counters only, no LB switch);
    ``host_pids`` lets the collector read the hosts' NIC counters; ``progress`` is the
    path of a scenario run's ``progress.json`` (read each poll when it exists).
    """

    def __init__(self, plan: WiringPlan, client: ControllerClient | None = None, *,
                 host_pids: dict[str, int] | None = None, interval: float = DEFAULT_INTERVAL_S,
                 progress: str | None = None) -> None:
        self.plan = plan
        self.client = client
        self.progress = progress
        self._layout = layout(plan)
        self._state = DashboardState(plan)
        self._lock = threading.Lock()
        self.engine = Engine(plan)
        self.collector = Collector(plan, None, client=client, host_pids=host_pids,
                                   interval=interval, on_poll=self._on_poll,
                                   sources=running_sources())

    def _on_poll(self, t: float, values: dict[tuple[str, str], float]) -> None:
        self.engine.step(self.collector.history)
        lb: dict[str, Any] | None = None
        if self.client is not None:
            with contextlib.suppress(ControllerError):
                lb = self.client.lb()
        progress = None
        if self.progress:
            with contextlib.suppress(OSError), open(self.progress, encoding="utf-8") as f:
                progress = read_progress(f.read())
        with self._lock:
            self._state.update(t, values)
            self._state.set_alerts([a.to_dict() for a in self.engine.all_alerts()], now=t)
            if lb is not None:
                self._state.lb = {"mode": lb.get("mode"), "modes": lb.get("modes", [])}
            self._state.progress = progress

    def start(self) -> LiveBackend:
        self.collector.start()
        return self

    def stop(self) -> None:
        self.collector.stop()

    def layout(self) -> dict[str, Any]:
        return self._layout

    def state(self) -> dict[str, Any]:
        with self._lock:
            return self._state.snapshot()

    def set_lb(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.client is None:
            raise UpstreamError("no controller: this dashboard was started without one", 502)
        body = check_lb_body(body)
        try:
            answer = self.client.set_lb(body["mode"], **{k: v for k, v in body.items()
                                                          if k != "mode"})
        except ControllerError as exc:
            status = 400 if exc.status is not None and 400 <= exc.status < 500 else 502
            raise UpstreamError(f"controller: {exc.message}", status) from None
        with self._lock:
            self._state.lb = {"mode": answer.get("mode"), "modes": answer.get("modes", [])}
        return answer


def _handler(backend: Backend) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "astral-lab-dashboard"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line a second
            pass

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, data: Any) -> None:
            try:
                text = json.dumps(data, allow_nan=False, default=str)
            except ValueError:  # a NaN somewhere (alert evidence): JSON has no NaN, say null
                text = json.dumps(finite(data), default=str)
            self._send(status, text.encode(), "application/json")

        def _error(self, status: int, message: str) -> None:
            self._json(status, {"error": message, "status": status})

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            try:
                if path in ("/", "/index.html"):
                    self._static("index.html")
                elif path.startswith("/static/"):
                    self._static(path[len("/static/"):])
                elif path == "/api/layout":
                    self._json(200, backend.layout())
                elif path == "/api/state":
                    self._json(200, backend.state())
                elif path == "/metrics":
                    text = metrics.exposition(backend.state(), backend.layout())
                    self._send(200, text.encode(), metrics.CONTENT_TYPE)
                else:
                    self._error(404, f"no such page: {path}")
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_HEAD = do_GET  # noqa: N815

        def _static(self, name: str) -> None:
            if "/" in name or "\\" in name or name.startswith(".") or \
                    name not in os.listdir(STATIC_DIR):
                self._error(404, f"no such asset: {name}")
                return
            with open(os.path.join(STATIC_DIR, name), "rb") as f:
                body = f.read()
            self._send(200, body, TYPES.get(os.path.splitext(name)[1],
                                            "application/octet-stream"))

        def do_PUT(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path != "/api/lb":
                self._drain()
                self._error(404 if not path.startswith("/api/") else 405,
                            f"PUT {path}: only PUT /api/lb is accepted")
                return
            try:
                body = json.loads(self._body() or b"null")
                self._json(200, backend.set_lb(check_lb_body(body)))
            except BadRequest as exc:
                self._error(400, str(exc))
            except ValueError as exc:  # not JSON
                self._error(400, f"body is not JSON: {exc}")
            except UpstreamError as exc:
                self._error(exc.status, str(exc))

        def do_POST(self) -> None:  # noqa: N802
            self._drain()
            self._error(405, f"POST {self.path}: not accepted (PUT /api/lb switches the mode)")

        do_DELETE = do_POST  # noqa: N815

        def _drain(self) -> None:
            with contextlib.suppress(ValueError, BadRequest):
                self._body()

        def _body(self) -> bytes:
            length = self.headers.get("Content-Length")
            if length is None:
                return b""
            n = int(length)
            if n < 0 or n > MAX_BODY:
                self.close_connection = True
                raise BadRequest(f"body of {n} bytes; at most {MAX_BODY} accepted")
            return self.rfile.read(n)

    return Handler


class DashboardServer:
    """The HTTP server in a background thread; ``url`` once started, ``stop()`` to end."""

    def __init__(self, backend: Backend, port: int = 0, host: str = "127.0.0.1") -> None:
        self.backend = backend
        self.httpd = ThreadingHTTPServer((host, port), _handler(backend))
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self) -> DashboardServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="dashboard-http",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_until(stop: threading.Event, backend: LiveBackend, port: int = 0,
                on_url: Any = None) -> None:
    """Start the backend's polling and the server, call ``on_url(url)``, block until
    ``stop`` is set, then stop both (what ``astral-lab dashboard`` and the process run)."""
    server = DashboardServer(backend, port).start()
    try:
        backend.start()
        if on_url is not None:
            on_url(server.url)
        while not stop.wait(0.2):
            pass
    finally:
        backend.stop()
        server.stop()

