"""Run the controller in this process, from parsed options (``serve``).

os-ken 4.x has no ``osken-manager`` and no WSGI module, so this hands the plan to the app,
serves a small JSON API with the standard library, and lets ``AppManager.run_apps`` block.
It runs in its own process because os-ken's hub and Mininet do not share a process well:
``astral-lab controller`` or, as the ``Lab`` starts it, ``python -m
astral_lab.controller_cli`` (the options are defined there, with the other parsers).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any

from controllers.fabric import FabricLogic
from controllers.plan import WiringPlan
from controllers.shell.api import AppAPI
from controllers.shell.rest import make_server

DEFAULT_OF_PORT = 6653
DEFAULT_REST_PORT = 8080


def serve(args: Any) -> int:
    """Run until SIGTERM or Ctrl-C; 2 with one message for a bad plan or option. ``args``
    has the attributes of ``astral_lab.controller_cli``'s options (an argparse Namespace)."""
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

    from controllers.shell import app as app_module

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
    mgr.load_apps(["controllers.shell.app"])
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
