"""Start the controller in this process: ``python -m controllers.run --plan plan.json``.

os-ken 4.x has no ``osken-manager`` and no WSGI module, so we parse our own
options, hand the plan to the app, serve a small JSON API with the standard
library, and let ``AppManager.run_apps`` block. It runs in its own process
(the ``Lab`` starts it with ``subprocess``) because os-ken's hub and Mininet do
not share a process well.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from controllers import policies
from controllers.api import AppAPI
from controllers.fabric import FabricLogic
from controllers.plan import WiringPlan
from controllers.rest import make_server

DEFAULT_OF_PORT = 6653
DEFAULT_REST_PORT = 8080


def add_options(p: argparse.ArgumentParser) -> None:
    """The controller's options; ``astral-lab controller`` shares them."""
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
    p.add_argument("--lb", default="ecmp", choices=policies.names(controller=True),
                   help="load-balancing mode at start (switch later with PUT /lb; "
                        "`astral-lab policies` lists them)")
    p.add_argument("--poll-interval", type=float, default=1.0,
                   help="seconds between counter polls (links, adaptive mode; default 1)")
    p.add_argument("--adaptive-threshold", type=float, default=0.8,
                   help="adaptive: a link above this utilisation is hot (default 0.8)")
    p.add_argument("--adaptive-hysteresis", type=float, default=0.1,
                   help="adaptive: required improvement, so paths do not flap (default 0.1)")
    p.add_argument("--adaptive-hold", type=int, default=3,
                   help="adaptive: polls a moved flow stays put (default 3)")
    p.add_argument("--state", default=None,
                   help="JSON file keeping mode, flows and paths across controller restarts")
    p.add_argument("--run-id", default="",
                   help="tag of the Lab that started it (lets `astral-lab clean` find it)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="astral-lab controller",
                                description="Run the astral-lab OpenFlow controller for a plan.")
    add_options(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return serve(parse_args(argv))


def serve(args: argparse.Namespace) -> int:
    """Run until SIGTERM or Ctrl-C; 2 with one message for a bad plan or option."""
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
    app_module.SETTINGS.update(
        select_method=args.select_method, lb=args.lb, poll_interval=args.poll_interval,
        state_path=args.state,
        adaptive={"threshold": args.adaptive_threshold,
                  "hysteresis": args.adaptive_hysteresis, "hold": args.adaptive_hold})
    if args.poll_interval <= 0:
        print("astral-lab controller: --poll-interval must be > 0", file=sys.stderr)
        return 2
    try:  # bad adaptive options: one message now, not a traceback from os-ken later
        FabricLogic.new_policy(app_module.SETTINGS["adaptive"])
    except ValueError as exc:
        print(f"astral-lab controller: {exc}", file=sys.stderr)
        return 2

    api_ref: dict[str, Any] = {}
    try:
        server = make_server(api_ref, args.rest_host, args.rest_port)
    except OSError as exc:
        print(f"astral-lab controller: cannot serve on {args.rest_host}:{args.rest_port}: {exc}",
              file=sys.stderr)
        return 2
    threading.Thread(target=server.serve_forever, name="rest", daemon=True).start()

    mgr = AppManager.get_instance()
    mgr.load_apps(["controllers.app"])
    contexts = mgr.create_contexts()
    services = mgr.instantiate_apps(**contexts)
    app = next(a for a in mgr.applications.values()
               if isinstance(a, app_module.AstralController))
    api_ref["api"] = AppAPI(app)
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
