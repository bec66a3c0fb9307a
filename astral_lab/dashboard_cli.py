"""``astral-lab dashboard``: the live view of a fabric in the browser, and its process entry.

    sudo astral-lab dashboard                     serve the running lab's view (found by its
                                                  run record, like `ops watch`)
    sudo astral-lab dashboard --port 8765 --plan plan.json --controller http://127.0.0.1:8080
    sudo astral-lab dashboard --demo              a small astral3 fabric, a permutation
                                                  repeated under ECMP then planned, until Ctrl-C
    sudo astral-lab up astral3 --dashboard        ... or with any bring-up (`run NAME --dashboard`)

``python -m astral_lab.dashboard_cli --plan PLAN.json --controller URL --port N`` is how a
``Lab(dashboard=True)`` starts it in a process of its own (``testbed.shell.sidecars``);
either way the URL is the first line printed. The server, page and data are
``ops.shell.dashboard_server``, ``ops/static/`` and ``ops.dashboard``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import urllib.parse
from typing import Any

from astral_lab.controller_cli import plan_file
from astral_lab.ops_cli import discover
from controllers.shell.client import ControllerClient
from ops.shell.collector import host_pids_from_processes
from ops.telemetry import DEFAULT_INTERVAL_S
from scenarios.live_demo import alternate
from testbed.capture import parse_ports
from testbed.results import results_dir
from testbed.shell.lab import Lab
from testbed.shell.signals import STOPPING, exit_status
from testbed.topologies import build
from vocab.plan import WiringPlan, write_json_atomic
from vocab.validate import SECONDS, Parser, count

DEFAULT_PORT = 8765
#: The demo's fabric: small enough for any machine, with every tier and a shuffle box.
DEMO_FABRIC = {"servers": 2, "gpus": 4, "servers_per_block": 2}


#: the live view's port: 0 asks for any free one
_PORT = count(0, 65535)


def controller_client(url: str | None, timeout: float = 1.0) -> ControllerClient | None:
    """A REST client for ``http://HOST:PORT`` (None for no URL); ``ValueError`` if malformed."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("",
                                                                                          "/"):
        raise ValueError(f"--controller must look like http://127.0.0.1:8080 (got {url!r})")
    return ControllerClient(parts.hostname, port, timeout=timeout)


def add_options(p: argparse.ArgumentParser, process: bool = False) -> None:
    """The server's options; ``process``: the ones only a Lab passes (``--url-file`` ...)."""
    p.add_argument("--port", type=_PORT, default=DEFAULT_PORT,
                   help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--plan", type=plan_file,
                   help="wiring plan JSON of the fabric (default: the running lab's)")
    p.add_argument("--controller", metavar="URL",
                   help="the controller's JSON API, e.g. http://127.0.0.1:8080 (with --plan)")
    p.add_argument("--interval", type=SECONDS, default=DEFAULT_INTERVAL_S, metavar="S",
                   help=f"telemetry poll and page refresh (default {DEFAULT_INTERVAL_S:g} s)")
    p.add_argument("--progress", metavar="FILE",
                   help="a scenario run's progress.json to show (read each poll)")
    if process:
        p.add_argument("--url-file", help='write {"url": URL, "pid": PID} here once serving')
        p.add_argument("--run-id", default="",
                       help="tag of the Lab that started it (lets `astral-lab clean` find it)")


def serve(plan: WiringPlan, client: ControllerClient | None, *, port: int,
          interval: float = DEFAULT_INTERVAL_S, host_pids: dict[str, int] | None = None,
          progress: str | None = None, url_file: str | None = None,
          stop: threading.Event | None = None) -> int:
    """Serve the live view until ``stop`` is set or a signal stops it (then the status is
    128 + the signal, as for every verb); print the URL first."""
    # lazy: the live view loads matplotlib (~0.2 s); only a running dashboard needs it
    from ops.shell.dashboard_server import LiveBackend, serve_until

    if host_pids is None:  # the hosts' Mininet shells, to read their NIC counters
        names = {h.name for h in plan.hosts}
        host_pids = {h: p for h, p in host_pids_from_processes().items() if h in names}
    stop = stop or threading.Event()
    stopped_by: list[int] = []
    if threading.current_thread() is threading.main_thread():
        def on_signal(signum: int, _frame: Any) -> None:
            stopped_by.append(signum)
            stop.set()

        for sig in STOPPING:
            signal.signal(sig, on_signal)
    backend = LiveBackend(plan, client, host_pids=host_pids, interval=interval,
                          progress=progress)

    def announce(url: str) -> None:
        print(url, flush=True)
        if url_file:
            write_json_atomic(url_file, {"url": url, "pid": os.getpid()})

    serve_until(stop, backend, port, on_url=announce)
    return exit_status(stopped_by[0]) if stopped_by else 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """``astral-lab dashboard``: a given plan and controller, the running lab, or the demo."""
    if args.demo:
        if args.plan or args.controller:
            raise ValueError("--demo brings up its own fabric: drop --plan/--controller")
        return run_demo(args)
    if args.controller and not args.plan:
        raise ValueError("--controller needs --plan (the fabric it controls)")
    if args.plan:
        plan = WiringPlan.load(args.plan)
        client = controller_client(args.controller)
        return serve(plan, client, port=args.port, interval=args.interval,
                     progress=args.progress)

    lab = discover(args.run)
    client = controller_client(f"http://127.0.0.1:{lab['rest_port']}") \
        if lab["rest_port"] else None
    return serve(lab["plan"], client, port=args.port, interval=args.interval,
                 host_pids=lab["host_pids"], progress=args.progress)


def run_demo(args: argparse.Namespace) -> int:
    """Bring up the demo fabric with its live view; alternate ECMP and planned rounds of one
    permutation until Ctrl-C; tear everything down. The URL is the first line printed."""
    if os.geteuid() != 0:
        raise ValueError("--demo brings up a Mininet fabric: run it as root "
                         "(sudo astral-lab dashboard --demo)")
    plan = build("astral3", **DEMO_FABRIC)
    partial, final = results_dir("dashboard-demo")
    progress = os.path.join(partial, "progress.json")
    stop = threading.Event()
    try:
        with Lab(plan, dashboard=True, dashboard_port=args.port or None,
                 dashboard_progress=progress, poll_interval=args.interval) as lab:
            print(lab.dashboard_url, flush=True)
            print(f"live view of {plan.topology} ({len(plan.hosts)} GPUs); ECMP and planned "
                  "rounds alternate; Ctrl-C stops and tears down", file=sys.stderr, flush=True)
            alternate(lab, progress, seconds=args.seconds, stop=stop)
    except KeyboardInterrupt:
        print("astral-lab dashboard: stopped; the fabric was torn down", file=sys.stderr)
        return exit_status(signal.SIGINT)
    finally:
        if os.path.isdir(partial):
            os.replace(partial, final)
    return 0


def add_dashboard_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``dashboard`` verb (see the module docstring)."""
    d = subparsers.add_parser("dashboard", help="live view of a fabric in the browser "
                              "(and /metrics for Prometheus)",
                              description="The live view of a fabric in the browser: links "
                              "coloured by utilisation, spine bytes, LB mode, alerts, "
                              "progress; /metrics for Prometheus.")
    add_options(d)
    d.add_argument("--run", help="run id of the lab (when several run)")
    d.add_argument("--demo", action="store_true",
                   help="bring up a small astral3 fabric and alternate ECMP and planned "
                        "rounds of a permutation until Ctrl-C")
    d.add_argument("--seconds", type=SECONDS, default=6.0, metavar="S",
                   help="--demo: seconds of traffic per round (default 6)")
    d.set_defaults(fn=cmd_dashboard)
    return d


def add_live_options(p: argparse.ArgumentParser) -> None:
    """``--dashboard``, ``--dashboard-port`` and ``--capture``, shared by ``up`` and ``run``."""
    p.add_argument("--dashboard", action="store_true",
                   help="serve the live view while the fabric is up (its URL is printed)")
    p.add_argument("--dashboard-port", type=_PORT, default=None, metavar="N",
                   help="port of the live view (default: any free port)")
    p.add_argument("--capture", metavar="PORT[,PORT...]", type=_capture, default=[],
                   help="write a pcap of each switch port (lf0r0-eth3 or lf0r0:3) under "
                        "the results folder")


def _capture(text: str) -> list[str]:
    try:
        return parse_ports(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--capture: ")) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="python -m astral_lab.dashboard_cli",
               description="Serve the live view of a running fabric.")
    add_options(p, process=True)
    args = p.parse_args(argv)
    if not args.plan:
        p.error("--plan is required")
    try:
        args.client = controller_client(args.controller)
    except ValueError as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = WiringPlan.load(args.plan)
    return serve(plan, args.client, port=args.port, interval=args.interval,
                 progress=args.progress, url_file=args.url_file)


if __name__ == "__main__":
    sys.exit(main())
