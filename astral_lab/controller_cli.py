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

#: what a controller process's command line contains (``testbed.shell.cleanup`` finds them by it)
MODULE = "astral_lab.controller_cli"


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
                        "controllers/shell/ofmsgs.py)")
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


if __name__ == "__main__":
    sys.exit(main())
