"""The ``--cluster`` and ``--tunnel`` options of ``astral-lab up`` and ``astral-lab run``.

The cluster lab itself (``testbed.shell.cluster``) takes plain arguments; only the command line's
spelling of them lives here, with the other parsers.
"""

from __future__ import annotations

import argparse
from functools import partial

from testbed.clusterplace import parse_servers
from testbed.shell.cluster import TUNNELS


def add_cluster_option(parser: argparse.ArgumentParser) -> None:
    """``--cluster host1,host2,...`` and ``--tunnel`` for ``astral-lab up`` and ``run``."""
    parser.add_argument(
        "--cluster", type=partial(parse_servers, name=""), default=None, metavar="HOST1,HOST2,...",
        help="spread the fabric over these servers with Mininet Cluster Edition; the first "
             "must be this machine (controller there). `localhost` alone exercises the path on "
             "one machine. See docs/cluster.md")
    parser.add_argument(
        "--tunnel", default="gre", choices=list(TUNNELS),
        help="links between servers: GRE (default; MTU 1450 on every interface), VXLAN "
             "(kernels without GRE) or SSH tunnels (need PermitTunnel on the servers)")
