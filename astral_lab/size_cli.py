"""The size options of every verb that builds or models a fabric: ``--gpus`` (in all),
``--gpus-per-server`` and, in ``topo`` and ``up``, ``--servers``.

One module, so ``topo``, ``up`` and ``model`` say the same words with the same ranges
(what the builders take) and resolve them the same way (``topologies.fabric_size``).
"""

from __future__ import annotations

import argparse
from typing import Any

from testbed.fabricspec import EMULATED_RULES, FABRIC_RULES, GPU_COUNT, FabricSpec
from testbed.topologies import MAX_SERVERS, fabric_size

_DEFAULT = FabricSpec()
#: what each option takes: the emulating builders' GPUs per server, the fabric's servers
GPUS_PER_SERVER = EMULATED_RULES["gpus"]
SERVERS = FABRIC_RULES["servers"]


def add_size_options(p: Any, *, servers: bool, defaults: bool) -> None:
    """``--gpus`` and ``--gpus-per-server`` (and ``--servers`` where ``servers``) on the
    parser or group ``p``. ``defaults``: the namespace holds ``FabricSpec``'s size for an
    option left out (``model``); else None, and ``size`` fills it in."""
    gps = _DEFAULT.gpus
    p.add_argument("--gpus", type=GPU_COUNT, metavar="N",
                   default=_DEFAULT.gpu_count if defaults else None,
                   help=f"GPUs in the fabric, in all (default {_DEFAULT.gpu_count}: "
                        f"{_DEFAULT.servers} servers x {gps}); a whole number of servers, at "
                        f"most {MAX_SERVERS:,} of them ({MAX_SERVERS * gps:,} GPUs at {gps} "
                        "per server)")
    p.add_argument("--gpus-per-server", type=GPUS_PER_SERVER, metavar="N",
                   default=gps if defaults else None,
                   help=f"GPUs (NICs, rails) per server (default {gps}; {GPUS_PER_SERVER}); "
                        "servers = --gpus / this")
    if servers:
        p.add_argument("--servers", type=SERVERS, metavar="N", default=None,
                       help=f"servers (default --gpus / --gpus-per-server: "
                            f"{_DEFAULT.servers}; {SERVERS}); another way to give the size: "
                            "with --gpus, the two must agree")


def size(args: argparse.Namespace) -> tuple[int, int]:
    """``(servers, GPUs per server)`` of the options given (``fabric_size``: refused in one
    line when the total does not split evenly or ``--servers`` disagrees)."""
    return fabric_size(args.gpus, args.gpus_per_server, getattr(args, "servers", None))


__all__ = ["add_size_options", "size"]
