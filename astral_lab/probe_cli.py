"""The UDP probe's command line: how a ``Stream`` starts its sender and receiver in hosts.

    python -m astral_lab.probe_cli recv --port 4791 --out recv.json [--duration S] [--every S]
    python -m astral_lab.probe_cli send --dst 10.1.0.1 --port 4791 --sports 50000-50015

The probe itself (``testbed.shell.probe``) takes plain arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from testbed.shell import probe
from vocab.flows import ROCE_PORT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m astral_lab.probe_cli",
                                description=probe.__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--port", type=int, default=ROCE_PORT)
    r.add_argument("--duration", type=float, default=None, help="stop after S s (or SIGTERM)")
    r.add_argument("--out", required=True)
    r.add_argument("--every", type=float, default=None,
                   help="also rewrite the report every S s while receiving")
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, default=ROCE_PORT)
    s.add_argument("--sports", default="50000", help="e.g. 50000-50015")
    s.add_argument("--pps", type=float, default=200.0, help="packets/s per source port")
    s.add_argument("--duration", type=float, default=5.0)
    s.add_argument("--size", type=int, default=200, help="UDP payload bytes")
    args = p.parse_args(argv)
    try:
        if args.cmd == "recv":
            probe.receive(args.port, args.duration, args.out, args.every)
        else:
            print(json.dumps(probe.send(args.dst, args.port, probe.parse_sports(args.sports),
                                        args.pps, args.duration, args.size)))
    except ValueError as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
