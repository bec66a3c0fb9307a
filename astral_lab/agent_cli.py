"""The traffic agents' command line: how the replay starts a sender or receiver in a host.

    python -m astral_lab.agent_cli recv --out RECV.json --ready READY_FILE [--port 4791]
    python -m astral_lab.agent_cli send --spec SPEC.json --out SENT.json [--start-at EPOCH]

The agents themselves (``traffic.shell.agent``) take plain arguments; their process entry
point and options live here with the other parsers.
"""

from __future__ import annotations

import argparse
import signal
import sys

from traffic.shell import agent
from vocab.flows import ROCE_PORT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m astral_lab.agent_cli",
                                description=agent.__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send", help="send a spec's RDMA WRITEs as RoCEv2 frames")
    s.add_argument("--spec", required=True, help="SPEC.json (traffic.roce.ReplaySpec)")
    s.add_argument("--out", required=True, help="SENT.json")
    s.add_argument("--start-at", type=float, default=None, help="epoch seconds (time.time())")
    s.add_argument("--rate-mbps", type=float, default=None, help="override; 0 = unpaced")
    s.add_argument("--intf", default=None, help="override the spec's interface")
    r = sub.add_parser("recv", help="receive RoCEv2 WRITEs and time every message")
    r.add_argument("--out", required=True, help="RECV.json")
    r.add_argument("--ready", default=None, help="written once the socket is bound")
    r.add_argument("--port", type=int, default=ROCE_PORT)
    r.add_argument("--idle-timeout", type=float, default=None,
                   help="stop after S s without packets, once traffic started")
    r.add_argument("--expect-bytes", type=int, default=None,
                   help="stop once this much RDMA payload arrived")
    r.add_argument("--timeout", type=float, default=None, help="stop after S s in any case")
    r.add_argument("--rcvbuf", type=int, default=agent.DEFAULT_RCVBUF, help="socket buffer bytes")
    args = p.parse_args(argv)
    try:
        if args.cmd == "recv":
            res = agent.receive(args.out, args.ready, args.port, args.idle_timeout,
                                args.expect_bytes, args.timeout, args.rcvbuf)
            print(f"received {res['packets']} packets, {res['bytes']} bytes, lost {res['lost']} "
                  f"({res['stop_reason']})")
        else:
            spec = agent.load_spec(args.spec, args.intf, args.rate_mbps)
            signal.signal(signal.SIGTERM, agent._interrupt)
            res = agent.send(spec, args.out, args.start_at)
            print(f"sent {res['packets']} packets, {res['bytes']} bytes in {res['duration_s']} s "
                  f"({res['pps']} pps, {res['send_retries']} retries)")
    except ValueError as exc:
        print(f"astral-lab agent: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"astral-lab agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # stopped before sending began: nothing to report
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
