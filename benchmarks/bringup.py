"""Bring-up benchmark: time until every GPU reaches every other, beside plain Mininet.

For each fabric size, each repeat runs two fresh processes side by side:

``plain``
    ``Mininet(PlanTopo(plan))``: the same graph, the same switch class, datapath
    and shaped links, built the usual way (``net.build(); net.start()``), with
    no controller and no ping. This is a *lower bound* on plain Mininet's time
    to reachability, so the comparison is generous to Mininet.
``lab``
    ``Lab(plan)``: preflight, controller, hosts, links, switches, controller
    converged, then a verified all-pairs ping (every ordered pair, one echo
    each, retries counted). ``all_pairs_s`` is the figure the goal is about.

The order of the two alternates between repeats so drift on a shared machine
falls on both. Reported: medians, all samples, and ratios of medians. Both
children take the machine's fabric lock (the wait is not timed) and die with
this process (``benchmarks.common.die_with_parent``), stopping their fabric.

    python -m benchmarks.bringup [--sizes 64,256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from mininet.net import Mininet

from benchmarks.common import child_argv, die_with_parent, run_child, summarize, write
from testbed.shell import cleanup
from testbed.shell.lab import Lab
from testbed.shell.machine import fabric_lock
from testbed.shell.mntopo import PlanTopo
from testbed.shell.procs import kill_pids
from testbed.topologies import build
from vocab.plan import WiringPlan

#: GPU count -> astral3 parameters (8 GPUs per server, rail-aligned leaves, shuffled lanes).
SIZES: dict[int, dict[str, int]] = {
    64: dict(servers=8, gpus=8, servers_per_block=4),  # 16 leaves, 8 spines, 192 links
    256: dict(servers=32, gpus=8, servers_per_block=8, lanes_per_uplink=8),  # 32+16, 768
}
GOAL_RATIO = 0.5


def run_plain(gpus: int) -> dict[str, float]:
    """Plain Mininet's build+start and stop, under the fabric lock like any fabric.

    Stopped on every way out (``finally``), so an interrupted baseline leaves
    nothing; what a killed one leaves, ``astral-lab clean`` finds by its names.
    """
    plan = build("astral3", **SIZES[gpus])
    lock = fabric_lock(lambda _msg: None)
    try:
        t0 = time.monotonic()
        net = Mininet(topo=PlanTopo(plan), controller=None, build=False, autoSetMacs=False)
        try:
            net.build()
            net.start()
            t1 = time.monotonic()
        finally:
            t_stop = time.monotonic()
            try:
                net.stop()
                t2 = time.monotonic()
            finally:
                _drop_plain_leftovers(net, plan)
    finally:
        lock.close()
    return {"start_s": t1 - t0, "stop_s": t2 - t_stop}


def _drop_plain_leftovers(net: Any, plan: WiringPlan) -> None:
    """Remove what ``net.stop()`` left of ``plan``: nothing, unless it was interrupted.

    A signal in the middle of a node's command leaves that node's shell waiting for
    output, and Mininet's stop then fails on the node (its ``cmd`` asserts) with
    most veths still there. We hold the fabric lock, so the plan's names are ours.
    """
    shells = [n.shell.pid for n in net.hosts + net.switches
              if getattr(n, "shell", None) is not None and n.shell.poll() is None]
    kill_pids(shells, grace=0.5, sig=signal.SIGKILL)
    names = {s.name for s in plan.switches}
    cleanup.delete_bridges([b for b in cleanup.all_bridges() if b in names])
    cleanup.delete_links([i for ln in plan.links for i in (ln.a_intf, ln.b_intf)])


def run_lab(gpus: int) -> dict[str, Any]:
    plan = build("astral3", **SIZES[gpus])
    t0 = time.monotonic()
    lab = Lab(plan, log=lambda _msg: None)
    try:
        lab.start()
        converged = time.monotonic() - t0
        reach = lab.reachability()
        all_pairs = time.monotonic() - t0
    finally:
        t1 = time.monotonic()
        lab.stop()
    return {"converged_s": converged, "all_pairs_s": all_pairs, "stop_s": time.monotonic() - t1,
            "reach_s": reach.seconds, "pairs": reach.pairs, "loss_pct": reach.loss_pct,
            "first_try_lost": reach.first_try_lost,
            "steps_s": {k: round(v, 3) for k, v in lab.timings.items()}}


def _child(kind: str, gpus: int) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (no state shared between samples)."""
    out = run_child(child_argv("benchmarks.bringup", "--child", kind, "--sizes", str(gpus)),
                    timeout=1800)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} {gpus} failed:\n{out.stderr[-2000:]}")
    return json.loads(lines[-1])


def measure(sizes: list[int], repeats: int, log: Any = print) -> dict[str, Any]:
    result: dict[str, Any] = {"goal": f"lab all-pairs time <= {GOAL_RATIO}x plain Mininet "
                                      "build+start for the same graph", "sizes": {}}
    for gpus in sizes:
        plan = build("astral3", **SIZES[gpus])
        plain, lab = [], []
        for r in range(repeats):
            order = ("plain", "lab") if r % 2 == 0 else ("lab", "plain")
            for kind in order:
                sample = _child(kind, gpus)
                (plain if kind == "plain" else lab).append(sample)
                log(f"  {gpus} GPUs, repeat {r + 1}/{repeats}, {kind}: "
                    + ", ".join(f"{k}={v:.2f}" for k, v in sample.items()
                                if isinstance(v, float)))
        p_start = summarize([s["start_s"] for s in plain])
        l_all = summarize([s["all_pairs_s"] for s in lab])
        l_conv = summarize([s["converged_s"] for s in lab])
        p_stop = summarize([s["stop_s"] for s in plain])
        l_stop = summarize([s["stop_s"] for s in lab])
        entry = {
            "graph": {"topology": "astral3", "params": SIZES[gpus], "hosts": len(plan.hosts),
                      "switches": len(plan.switches), "links": len(plan.links)},
            "plain_mininet_start_s": p_start,
            "plain_mininet_stop_s": p_stop,
            "lab_converged_s": l_conv,
            "lab_all_pairs_s": l_all,
            "lab_reachability_s": summarize([s["reach_s"] for s in lab]),
            "lab_stop_s": l_stop,
            "lab_loss_pct": max(s["loss_pct"] for s in lab),
            "lab_first_try_lost": [s["first_try_lost"] for s in lab],
            "lab_steps_s_last": lab[-1]["steps_s"],
            "ratio_all_pairs_vs_plain_start": round(l_all["median"] / p_start["median"], 3),
            "ratio_converged_vs_plain_start": round(l_conv["median"] / p_start["median"], 3),
            "ratio_stop": round(l_stop["median"] / p_stop["median"], 3),
        }
        entry["meets_goal"] = entry["ratio_all_pairs_vs_plain_start"] <= GOAL_RATIO
        result["sizes"][str(gpus)] = entry
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bringup", description=__doc__)
    p.add_argument("--sizes", default="64,256", help="GPU counts, from " + str(sorted(SIZES)))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", choices=["plain", "lab"], help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    bad = [s for s in sizes if s not in SIZES]
    if bad:
        p.error(f"unknown size(s) {bad}; choose from {sorted(SIZES)}")
    if args.child:
        die_with_parent(args.parent_pid)
        fn = run_plain if args.child == "plain" else run_lab
        print(json.dumps(fn(sizes[0])), flush=True)
        return 0
    result = measure(sizes, args.repeats)
    path = write("bringup", {"repeats": args.repeats, **result})
    for gpus, e in result["sizes"].items():
        print(f"{gpus} GPUs: lab all-pairs {e['lab_all_pairs_s']['median']:.1f} s "
              f"(converged {e['lab_converged_s']['median']:.1f} s) vs plain Mininet start "
              f"{e['plain_mininet_start_s']['median']:.1f} s -> ratio "
              f"{e['ratio_all_pairs_vs_plain_start']:.2f} (goal <= {GOAL_RATIO}); "
              f"teardown {e['lab_stop_s']['median']:.1f} s vs "
              f"{e['plain_mininet_stop_s']['median']:.1f} s")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
