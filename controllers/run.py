"""Start the controller in this process: ``python -m controllers.run --plan plan.json``.

os-ken 4.x has no ``osken-manager`` and no WSGI module, so we parse our own
options, hand the plan to the app, serve a small JSON API with the standard
library, and let ``AppManager.run_apps`` block. It runs in its own process
(the ``Lab`` starts it with ``subprocess``) because os-ken's hub and Mininet do
not share a process well.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testbed.plan import WiringPlan

DEFAULT_OF_PORT = 6653
DEFAULT_REST_PORT = 8080


def make_handler(app_ref: dict[str, Any], plan: WiringPlan) -> type[BaseHTTPRequestHandler]:
    """HTTP handler bound to the running app; JSON in every answer, errors included."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "astral-lab"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the lab polls /health
            logging.getLogger("astral.rest").debug(fmt, *args)

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            try:
                if path == "/health":
                    app = app_ref.get("app")
                    if app is None:
                        self._send(503, {"status": "starting", "converged": False})
                    else:
                        self._send(200, app.state.health())
                elif path == "/topology":
                    self._send(200, plan.to_dict())
                else:
                    self._send(404, {"error": f"no such endpoint {path}",
                                     "endpoints": ["/health", "/topology"]})
            except Exception as exc:  # a bug here must not kill the controller
                logging.getLogger("astral.rest").exception("GET %s failed", path)
                self._send(500, {"error": f"{type(exc).__name__}: {exc}"})

    return Handler


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="astral-lab controller",
                                description="Run the astral-lab OpenFlow controller for a plan.")
    p.add_argument("--plan", required=True, help="wiring plan JSON (from `astral-lab topo`)")
    p.add_argument("--of-port", type=int, default=DEFAULT_OF_PORT,
                   help=f"OpenFlow listen port (default {DEFAULT_OF_PORT})")
    p.add_argument("--of-host", default="127.0.0.1", help="OpenFlow listen address")
    p.add_argument("--rest-port", type=int, default=DEFAULT_REST_PORT,
                   help=f"JSON API port on 127.0.0.1 (default {DEFAULT_REST_PORT})")
    p.add_argument("--rest-host", default="127.0.0.1", help="JSON API address")
    p.add_argument("--select-method", default="dp_hash", choices=["dp_hash", "hash"],
                   help="how ECMP select groups hash on OpenFlow 1.5 (default dp_hash; see "
                        "controllers/ofmsgs.py)")
    p.add_argument("--run-id", default="",
                   help="tag of the Lab that started it (lets `astral-lab clean` find it)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        plan = WiringPlan.load(args.plan)
    except (OSError, ValueError, KeyError) as exc:
        print(f"astral-lab controller: cannot load plan {args.plan}: {exc}", file=sys.stderr)
        return 2

    # os-ken reads its listen options from oslo.config; register them by importing.
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    from os_ken.controller import controller as _ofp_controller  # noqa: F401

    from controllers import app as app_module

    cfg.CONF(args=["--ofp-tcp-listen-port", str(args.of_port),
                   "--ofp-listen-host", args.of_host], project="os_ken")
    app_module.SETTINGS["plan"] = plan
    app_module.SETTINGS["select_method"] = args.select_method

    app_ref: dict[str, Any] = {}
    try:
        server = ThreadingHTTPServer((args.rest_host, args.rest_port), make_handler(app_ref, plan))
    except OSError as exc:
        print(f"astral-lab controller: cannot serve on {args.rest_host}:{args.rest_port}: {exc}",
              file=sys.stderr)
        return 2
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="rest", daemon=True).start()

    mgr = AppManager.get_instance()
    mgr.load_apps(["controllers.app"])
    contexts = mgr.create_contexts()
    services = mgr.instantiate_apps(**contexts)
    app_ref["app"] = next(a for a in mgr.applications.values()
                          if isinstance(a, app_module.AstralController))
    logging.getLogger("astral.controller").info(
        "listening: OpenFlow %s:%d, JSON %s:%d", args.of_host, args.of_port, args.rest_host,
        args.rest_port)

    def stop(signum: int, _frame: Any) -> None:
        # Nothing to flush but the log; exiting from the handler avoids races with the
        # hub's threads during interpreter shutdown.
        logging.getLogger("astral.controller").info("signal %d: exiting", signum)
        logging.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    from os_ken.lib import hub
    try:
        hub.joinall(services)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
        mgr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
