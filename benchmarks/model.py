"""Flow-model benchmark: runtime and peak memory of ``astral-lab model`` at 1K, 8K and 64K GPUs.

Every measurement runs in a fresh child process (``--child``), so its peak resident set
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``: the whole process, interpreter and NumPy
included, ~60 MiB of it before any work) belongs to that one model run and nothing else.
The workload is the issue's: an All-to-All inside expert-parallel groups of 256 GPUs (1 MiB
per GPU pair, one flow per pair), groups ``packed`` and ``spread``.

Fabrics (astral3, 400G NICs, 200G lanes, 8 GPUs per server, leaves filled to 256 lanes):

* 1,024 and 8,192 GPUs: radix 256 (today's 51.2T switches), 16 and 128 leaves, 128 spines.
* 65,536 GPUs: the what-if of ``testbed/flowmodel.py``: radix 1024, 64 servers per block,
  1,024 leaves, 128 spines of 1,024 lanes each.

``aggregate`` mode (the what-if: every policy it computes, ecmp hashing all flows) runs at
every size, because that is what ``auto`` picks above 300,000 flows (1K GPUs = 261,120
flows is just under; it is measured both ways). ``per-flow`` mode (every flow routed by
``controllers.lb``) runs at ``--per-flow-sizes``. Goal: 64K within 60 s and 8 GiB.

    python -m benchmarks.model [--sizes 1024,8192,65536] [--placements packed,spread]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import write

FABRICS: dict[int, dict[str, int]] = {
    256: {},
    1024: {},
    8192: {},
    65536: {"radix": 1024, "servers_per_block": 64},
}
GOAL = {"gpus": 65536, "seconds": 60.0, "gib": 8.0}


def child(gpus: int, placement: str, mode: str, policies: list[str]) -> dict[str, Any]:
    """One model run in this process; the parent reads the JSON line it prints."""
    from testbed import flowmodel as fm

    t = time.perf_counter()
    doc, results = fm.run("astral3", gpus, group_size=min(gpus, 256), placement=placement,
                          mode=mode, policies=policies, fabric=FABRICS[gpus])
    wall = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {
        "gpus": gpus, "placement": placement, "mode": doc["mode"],
        "fabric": doc["fabric"]["summary"], "flows": doc["workload"]["flows"],
        "run_s": round(wall, 3), "peak_rss_mib": round(rss, 1),
        "bound_s": doc["bounds_s"]["unsplit"],
        "policies": {r.policy: {"kind": r.kind, "method": r.method,
                                "compute_s": round(r.compute_s, 3),
                                "completion_s": r.completion_s,
                                "ratio_to_bound": None if r.ratio is None else round(r.ratio, 4),
                                "classes": r.classes, "events": r.events}
                     for r in results},
    }


def _spawn(gpus: int, placement: str, mode: str, policies: list[str]) -> dict[str, Any]:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "benchmarks.model", "--child", str(gpus),
                          "--placements", placement, "--mode", mode,
                          "--policies", ",".join(policies)],
                         capture_output=True, text=True)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"model {gpus} {placement} {mode} failed:\n{out.stderr[-2000:]}")
    sample = json.loads(lines[-1])
    sample["process_s"] = round(time.perf_counter() - t, 3)  # + interpreter start, imports
    return sample


def _line(s: dict[str, Any]) -> str:
    pols = ", ".join(f"{p} {v['compute_s']:.1f}s"
                     + (f" ({1e3 * v['completion_s']:.3f} ms)" if v["completion_s"] else " (n/a)")
                     for p, v in s["policies"].items())
    return (f"  {s['gpus']:>6} GPUs {s['placement']:<6} {s['mode']:<9} {s['flows']:>11,} flows: "
            f"{s['run_s']:.1f} s, peak {s['peak_rss_mib']:.0f} MiB | {pols}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.model", description=__doc__)
    p.add_argument("--sizes", default="1024,8192,65536", help="GPU counts for aggregate mode")
    p.add_argument("--placements", default="packed,spread")
    p.add_argument("--per-flow-sizes", default="256,1024",
                   help="GPU counts also run per-flow ('' for none)")
    p.add_argument("--per-flow-policies", default="ecmp,ecmp-fluid,planned,adaptive")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="aggregate", help=argparse.SUPPRESS)
    p.add_argument("--policies", default="ecmp,ecmp-fluid,planned,adaptive",
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    placements = [x for x in args.placements.split(",") if x]
    if args.child:
        print(json.dumps(child(args.child, placements[0], args.mode, args.policies.split(","))),
              flush=True)
        return 0
    sizes = [int(x) for x in args.sizes.split(",") if x]
    per_flow = [int(x) for x in args.per_flow_sizes.split(",") if x]
    bad = [s for s in sizes + per_flow if s not in FABRICS]
    if bad:
        p.error(f"unknown size(s) {bad}; choose from {sorted(FABRICS)}")
    samples = []
    for gpus in sizes:
        for placement in placements:
            samples.append(_spawn(gpus, placement, "aggregate", args.policies.split(",")))
            print(_line(samples[-1]), flush=True)
    for gpus in per_flow:
        for placement in placements if gpus > 256 else placements[:1]:  # 1 group: same job
            samples.append(_spawn(gpus, placement, "per-flow", args.per_flow_policies.split(",")))
            print(_line(samples[-1]), flush=True)
    goal = [s for s in samples if s["gpus"] == GOAL["gpus"] and s["mode"] == "aggregate"]
    result = {
        "workload": "All-to-All in EP groups of 256 GPUs, 1 MiB per GPU pair, one flow per pair",
        "goal": f"{GOAL['gpus']} GPUs within {GOAL['seconds']:g} s and {GOAL['gib']:g} GiB",
        "goal_met": bool(goal) and all(s["run_s"] <= GOAL["seconds"]
                                       and s["peak_rss_mib"] <= GOAL["gib"] * 1024 for s in goal),
        "samples": samples,
    }
    print(f"wrote {write('model', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
