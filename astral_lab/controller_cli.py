"""``astral-lab controller``: the controller's options, and its process entry point.

``python -m astral_lab.controller_cli --plan plan.json ...`` is how a ``Lab`` starts the
controller in a process of its own; ``astral-lab controller`` takes the same options.
The controller itself (``controllers.shell.run.serve``) parses nothing.
"""

from __future__ import annotations

import argparse
import sys

from controllers import policies
from controllers.fabric import ADAPTIVE_DEFAULTS, DEFAULT_MODE, POLL_INTERVAL_S
from controllers.flowtable import DEFAULT_SELECT_METHOD, SELECT_METHODS
from controllers.shell.rest import DEFAULT_REST_PORT
from controllers.shell.run import DEFAULT_OF_PORT, serve
from testbed.topologies import TOPOLOGIES
from vocab.plan import WiringPlan
from vocab.plugins import suggest
from vocab.validate import (
    PORT,
    SECONDS,
    BadValue,
    Parser,
    count,
    distinct,
    in_file,
    out_file,
    real,
)


def plan_file(path: str) -> str:
    """``--plan`` of ``controller`` and ``dashboard``: a wiring plan file, read (never
    written) and checked whole here, its topology one of the lab's designs, so neither the
    controller nor the live view starts on a plan it cannot hold."""
    in_file(path)
    try:
        plan = WiringPlan.load(path)
    except OSError as exc:
        raise BadValue(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:  # not JSON, or not a plan (the schema names the field)
        raise BadValue(f"{path}: {exc}") from None
    if plan.topology not in TOPOLOGIES.names():
        raise BadValue(f"{path}: wiring plan: topology {plan.topology!r} is not one of the "
                       f"lab's designs; {suggest(plan.topology, TOPOLOGIES.names())}")
    return path


def controller_policy(spec: str) -> str:
    """``--lb`` of ``up`` and ``controller``: a mode the controller runs, with options
    (``qp-scaling:qps=8``: the switches hash, the hosts' replays use the options)."""
    try:
        policies.parse(spec, controller=True)
    except ValueError as exc:
        raise BadValue(str(exc)) from None
    return spec.strip()


def add_options(p: argparse.ArgumentParser) -> None:
    """The controller's options; ``astral-lab controller`` shares them."""
    p.add_argument("--plan", required=True, type=plan_file,
                   help="wiring plan JSON (from `astral-lab topo`)")
    p.add_argument("--of-port", type=PORT, default=DEFAULT_OF_PORT,
                   help=f"OpenFlow listen port (default {DEFAULT_OF_PORT}; {PORT})")
    p.add_argument("--of-host", default="127.0.0.1", help="OpenFlow listen address")
    p.add_argument("--rest-port", type=PORT, default=DEFAULT_REST_PORT,
                   help=f"JSON API port on 127.0.0.1 (default {DEFAULT_REST_PORT}; {PORT})")
    p.add_argument("--rest-host", default="127.0.0.1", help="JSON API address")
    p.add_argument("--select-method", default=DEFAULT_SELECT_METHOD,
                   choices=list(SELECT_METHODS),
                   help=f"how ECMP select groups hash on OpenFlow 1.5 (default "
                        f"{DEFAULT_SELECT_METHOD}; see controllers/shell/ofmsgs.py)")
    p.add_argument("--lb", default=DEFAULT_MODE, type=controller_policy, metavar="MODE",
                   help="load-balancing mode at start, options as MODE:KEY=VALUE, as `up "
                        "--lb` (one of " + ", ".join(policies.CONTROLLER_MODES.names()) +
                        "; switch later with PUT /lb; `astral-lab policies` lists them)")
    p.add_argument("--poll-interval", type=SECONDS, default=POLL_INTERVAL_S,
                   help=f"seconds between counter polls (links, adaptive mode; default "
                        f"{POLL_INTERVAL_S:g}; {SECONDS})")
    adaptive = ADAPTIVE_DEFAULTS
    p.add_argument("--adaptive-threshold", type=real(0, 1, low_open=True),
                   default=adaptive["threshold"],
                   help=f"adaptive: a link above this utilisation is hot (default "
                        f"{adaptive['threshold']:g}; in (0, 1])")
    p.add_argument("--adaptive-hysteresis", type=real(0, 1, high_open=True),
                   default=adaptive["hysteresis"],
                   help=f"adaptive: required improvement, so paths do not flap (default "
                        f"{adaptive['hysteresis']:g}; in [0, threshold))")
    p.add_argument("--adaptive-hold", type=count(0, 1000), default=int(adaptive["hold"]),
                   help=f"adaptive: polls a moved flow stays put (default "
                        f"{int(adaptive['hold'])}; 0..1000)")
    p.add_argument("--state", default=None, type=out_file,
                   help="JSON file keeping mode, flows and paths across controller restarts")
    p.add_argument("--run-id", default="",
                   help="tag of the Lab that started it (lets `astral-lab clean` find it)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def check_files(args: argparse.Namespace) -> None:
    """The state file the controller writes must not be the plan it reads (BadValue)."""
    if args.state:
        distinct({"--plan": args.plan, "--state": args.state})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="astral-lab controller",
               description="Run the astral-lab OpenFlow controller for a plan.")
    add_options(p)
    args = p.parse_args(argv)
    try:
        check_files(args)
    except BadValue as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    return serve(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
