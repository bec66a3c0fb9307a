"""``astral-lab controller``: the controller's options, and its process entry point.

``python -m astral_lab.controller_cli --plan plan.json ...`` is how a ``Lab`` starts the
controller in a process of its own; ``astral-lab controller`` takes the same options.
The controller itself (``controllers.shell.run.serve``) parses nothing.
"""

from __future__ import annotations

import argparse
import sys

from controllers import policies
from controllers.shell.run import DEFAULT_OF_PORT, DEFAULT_REST_PORT, serve
from vocab.validate import PORT, SECONDS, BadValue, Parser, count, in_file, out_file, real

#: what a controller process's command line contains (``testbed.shell.cleanup`` finds them by it)
MODULE = "astral_lab.controller_cli"


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
    p.add_argument("--plan", required=True, type=in_file,
                   help="wiring plan JSON (from `astral-lab topo`)")
    p.add_argument("--of-port", type=PORT, default=DEFAULT_OF_PORT,
                   help=f"OpenFlow listen port (default {DEFAULT_OF_PORT}; {PORT})")
    p.add_argument("--of-host", default="127.0.0.1", help="OpenFlow listen address")
    p.add_argument("--rest-port", type=PORT, default=DEFAULT_REST_PORT,
                   help=f"JSON API port on 127.0.0.1 (default {DEFAULT_REST_PORT}; {PORT})")
    p.add_argument("--rest-host", default="127.0.0.1", help="JSON API address")
    p.add_argument("--select-method", default="dp_hash", choices=["dp_hash", "hash"],
                   help="how ECMP select groups hash on OpenFlow 1.5 (default dp_hash; see "
                        "controllers/shell/ofmsgs.py)")
    p.add_argument("--lb", default="ecmp", type=controller_policy, metavar="MODE",
                   help="load-balancing mode at start, options as MODE:KEY=VALUE, as `up "
                        "--lb` (one of " + ", ".join(policies.names(controller=True)) +
                        "; switch later with PUT /lb; `astral-lab policies` lists them)")
    p.add_argument("--poll-interval", type=SECONDS, default=1.0,
                   help=f"seconds between counter polls (links, adaptive mode; default 1; "
                        f"{SECONDS})")
    p.add_argument("--adaptive-threshold", type=real(0, 1, low_open=True), default=0.8,
                   help="adaptive: a link above this utilisation is hot (default 0.8; in "
                        "(0, 1])")
    p.add_argument("--adaptive-hysteresis", type=real(0, 1, high_open=True), default=0.1,
                   help="adaptive: required improvement, so paths do not flap (default 0.1; "
                        "in [0, threshold))")
    p.add_argument("--adaptive-hold", type=count(0, 1000), default=3,
                   help="adaptive: polls a moved flow stays put (default 3; 0..1000)")
    p.add_argument("--state", default=None, type=out_file,
                   help="JSON file keeping mode, flows and paths across controller restarts")
    p.add_argument("--run-id", default="",
                   help="tag of the Lab that started it (lets `astral-lab clean` find it)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="astral-lab controller",
               description="Run the astral-lab OpenFlow controller for a plan.")
    add_options(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return serve(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
