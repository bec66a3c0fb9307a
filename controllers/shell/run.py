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
import socket
import sys
import threading
from typing import Any

from controllers import policies
from controllers.fabric import PEER_SILENCE_S, FabricLogic
from controllers.shell.api import AppAPI
from controllers.shell.rest import make_server
from vocab.plan import WiringPlan

DEFAULT_OF_PORT = 6653


def can_listen(host: str, port: int) -> str:
    """Why the OpenFlow listener could not bind ``host:port``, or "". os-ken binds in a
    thread of its own and, when that fails, logs it and serves nothing while the process
    runs on; binding once here first (as it will: SO_REUSEADDR) turns that into an error.

    Public as a seam: the one place ``serve`` touches the network before os-ken starts, so a
    test can start the controller's setup without binding a port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return str(exc)
    family, _type, _proto, _name, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            return exc.strerror or str(exc)
    return ""


def _not_an_address(host: str, why: str) -> bool:
    """Whether a listen failure is the host's: a name that does not resolve, or an address
    no interface of this machine has."""
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return True
    return "assign requested address" in why


def serve(args: Any) -> int:
    """Run until SIGTERM or Ctrl-C; 2 with one message for a bad plan or option, 1 when a
    port cannot be bound. ``args`` has the attributes of ``astral_lab.controller_cli``'s
    options (an argparse Namespace, checked as it was parsed)."""
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        plan = WiringPlan.load(args.plan)
    except OSError as exc:
        print(f"astral-lab controller: error: --plan {args.plan}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    except ValueError as exc:  # not JSON, or not a wiring plan (the schema names the field)
        print(f"astral-lab controller: error: --plan {args.plan}: {exc}", file=sys.stderr)
        return 2

    adaptive = {"threshold": args.adaptive_threshold, "hysteresis": args.adaptive_hysteresis,
                "hold": args.adaptive_hold}
    try:  # options that only make sense together: one message now, not a traceback later
        FabricLogic.new_policy(adaptive)
    except ValueError as exc:
        print(f"astral-lab controller: error: {exc}", file=sys.stderr)
        return 2
    why = can_listen(args.of_host, args.of_port)
    if why:
        if _not_an_address(args.of_host, why):  # the host is wrong, not the port
            print(f"astral-lab controller: error: --of-host {args.of_host}: not an address "
                  f"this machine can listen on ({why})", file=sys.stderr)
            return 2
        print(f"astral-lab controller: error: --of-port {args.of_port}: cannot listen on "
              f"{args.of_host}:{args.of_port} ({why})", file=sys.stderr)
        return 1

    # os-ken reads its listen options from oslo.config; register them by importing.
    # lazy: os-ken takes ~85 ms to load; only the serving controller needs it, not the CLI
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    from os_ken.controller import controller as _ofp_controller  # noqa: F401
    from os_ken.lib import hub

    from controllers.shell import app as app_module

    cfg.CONF(args=["--ofp-tcp-listen-port", str(args.of_port),
                   "--ofp-listen-host", args.of_host], project="os_ken")
    cfg.CONF.set_override("socket_timeout", PEER_SILENCE_S)  # a config-file option only
    app_module.SETTINGS["plan"] = plan
    # "qp-scaling:qps=8": the controller runs the mode; its options are the hosts'
    mode = policies.parse(args.lb, controller=True).name
    app_module.SETTINGS.update(
        select_method=args.select_method, lb=mode, poll_interval=args.poll_interval,
        state_path=args.state, adaptive=adaptive)
    api_ref: dict[str, Any] = {}
    try:
        server = make_server(api_ref, args.rest_host, args.rest_port)
    except OSError as exc:
        print(f"astral-lab controller: error: --rest-port {args.rest_port}: cannot serve on "
              f"{args.rest_host}:{args.rest_port} ({exc.strerror or exc})", file=sys.stderr)
        return 1
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
    try:
        hub.joinall(services)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
        mgr.close()
    return 0
