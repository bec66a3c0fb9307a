"""``make bench``: run every benchmark; each writes ``results/bench/<name>.json``.

    python -m benchmarks.run            all benchmarks, full size
    python -m benchmarks.run --quick    smallest sizes, one repeat (a smoke run)

Benchmarks measure the lab itself: bring-up, and the controller (failover,
convergence, LB quality), the sender, the fabric's capacity per traffic plane, and the
flow model's speed. They
need root, like the lab. Figures are medians over repeats; ratios compare things
measured side by side in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys

from benchmarks import bringup, capacity, controller, model, sender

#: name -> (full argv, quick argv)
BENCHMARKS = {
    "bringup": (bringup.main, ["--sizes", "64,256", "--repeats", "3"],
                ["--sizes", "64", "--repeats", "1"]),
    "controller": (controller.main, ["--repeats", "5"],
                   ["--repeats", "1", "--sizes", "64", "--quality-sizes", "64", "--seeds", "3"]),
    "sender": (sender.main, ["--repeats", "3", "--seconds", "3", "--scapy-packets", "3000"],
               ["--repeats", "1", "--seconds", "1", "--scapy-packets", "1000"]),
    "capacity": (capacity.main, ["--pmtus", "1024,2048,4096"],
                 ["--pmtus", "1024,4096", "--attempts", "1"]),
    "model": (model.main, ["--sizes", "1024,8192,65536", "--default-sizes", "256,1024",
                           "--exact-sizes", "256"],
              ["--sizes", "1024", "--placements", "packed", "--default-sizes", "256",
               "--workloads", "alltoall", "--exact-sizes", ""]),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smallest sizes, one repeat")
    p.add_argument("--only", choices=sorted(BENCHMARKS), action="append")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("benchmarks bring up real fabrics: run as root (sudo make bench)", file=sys.stderr)
        return 2
    failed = []
    for name, (fn, full, quick) in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        print(f"== {name}", flush=True)
        if fn(quick if args.quick else full) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
