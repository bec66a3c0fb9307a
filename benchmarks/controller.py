"""Controller benchmarks: failover, convergence, and how close each LB mode gets to ideal.

``failover`` (real fabric, needs root)
    A steady UDP stream (``testbed.shell.probe``: 16 source ports x 500 packets/s, so one
    packet every 2 ms per flow) runs from lf0r0 to lf1r1 on a small astral3 while a
    lane is cut, ``--repeats`` times (the lane is restored in between).
    ``leaf-uplink``: the sender's leaf loses a lane; its select group skips the port
    in the data plane (goal <= 50 ms of silence). ``spine-downlink``: the receiver's
    leaf loses a lane; the sender's leaf keeps hashing flows onto that spine until
    the controller reroutes (goal <= 500 ms). Reported per cut: the longest silence
    of any flow whose silence began at the cut (its outage), and the controller's own
    port-status-to-barrier time.
``convergence`` (real fabric, needs root)
    From the first switch connecting to every switch read back and programmed
    (``programming_s``), and from controller start (``converged_after_s``, which
    includes building hosts, links and bridges), for the 64- and 256-GPU fabrics.
``quality`` (pure model, no root)
    For one random permutation and one all-to-all (equal flows) per size: max link
    time / ideal over the fabric's switch links for ``ecmp`` (the hash model, over
    several seeds: median and worst), ``planned`` and ``adaptive`` (fluid model of
    the policy, started from ECMP). The emulated fabric runs the same policies; the
    model is what makes 256+ GPUs and many seeds affordable.

    python -m benchmarks.controller [--parts failover,convergence,quality] [--repeats 5]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time
from typing import Any

from benchmarks.bringup import SIZES as BRINGUP_SIZES
from benchmarks.common import summarize, write
from controllers import lb
from controllers.paths import PathFinder
from testbed.shell.lab import Lab
from testbed.shell.probe import Stream
from testbed.topologies import build
from vocab.flows import Flow

QUALITY_SIZES: dict[int, dict[str, int]] = {
    **BRINGUP_SIZES,
    1024: dict(servers=128, gpus=8, servers_per_block=16, lanes_per_uplink=16),
}
ALL_TO_ALL_MAX = 256  # GPUs; larger sizes run the permutation only
FAILOVER_GOALS_S = {"leaf-uplink": 0.050, "spine-downlink": 0.500}


def failover(repeats: int) -> dict[str, Any]:
    plan = build("astral3", servers=4, gpus=2, servers_per_block=2)
    src, dst, pps = "s0g0", "s2g1", 500.0
    out: dict[str, Any] = {"fabric": "astral3 servers=4 gpus=2 (4 leaves, 4 spines, 1 lane each)",
                           "stream": f"{src}->{dst}, 16 UDP source ports x {pps:g} pkt/s"}
    with Lab(plan, lb="ecmp", poll_interval=1.0) as lab:
        for where, leaf in (("leaf-uplink", "lf0r0"), ("spine-downlink", "lf1r1")):
            outages, installed = [], []
            for _ in range(repeats):
                with Stream(lab, src, dst, sports=range(50000, 50016), pps=pps,
                            duration=3.0) as st:
                    time.sleep(1.2)
                    t_cut = time.time()
                    lab.set_link(leaf, "spine1", up=False)
                    time.sleep(1.0)
                    health = lab.health() or {}
                hit = [f["max_gap_s"] for f in st.result["flows"].values()
                       if f["gap_at"] and f["gap_at"] >= t_cut - 0.05]
                outages.append(max(hit) if hit else 1.0 / pps)
                rr = (health.get("reroutes") or [{}])[-1]
                installed.append(rr.get("installed_s", float("nan")))
                lab.set_link(leaf, "spine1", up=True)
                time.sleep(1.0)
                lab.wait_converged()
            out[where] = {"outage_s": summarize(outages),
                          "controller_installed_s": summarize(installed),
                          "goal_s": FAILOVER_GOALS_S[where],
                          "goal_met": statistics.median(outages) <= FAILOVER_GOALS_S[where]}
            print(f"  {where}: outage median {1000 * statistics.median(outages):.0f} ms "
                  f"(max {1000 * max(outages):.0f}), controller installed in median "
                  f"{1000 * statistics.median(installed):.0f} ms", flush=True)
    return out


def convergence(repeats: int, sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for gpus in sizes:
        plan = build("astral3", **BRINGUP_SIZES[gpus])
        after_start, programming = [], []
        for _ in range(repeats):
            with Lab(plan) as lab:
                health = lab.health() or {}
                after_start.append(health["converged_after_s"])
                programming.append(health["programming_s"])
        out[str(gpus)] = {"switches": len(plan.switches),
                          "controller_start_to_converged_s": summarize(after_start),
                          "first_switch_to_all_programmed_s": summarize(programming)}
        print(f"  {gpus} GPUs: {statistics.median(programming):.2f} s from the first switch "
              f"connecting to all {len(plan.switches)} programmed "
              f"({statistics.median(after_start):.2f} s after the controller started, "
              "while hosts and links were built)", flush=True)
    return out


def _flows(hosts: list[str], kind: str, seed: int) -> list[Flow]:
    if kind == "all-to-all":
        return [Flow(s, d, 49152, bytes=1 << 20) for s, d in itertools.permutations(hosts, 2)]
    rng = random.Random(seed)
    while True:  # a derangement: nobody sends to itself
        perm = hosts[:]
        rng.shuffle(perm)
        if all(a != b for a, b in zip(hosts, perm, strict=True)):
            return [Flow(s, d, 49152, bytes=1 << 20) for s, d in zip(hosts, perm, strict=True)]


def mean_rate_vs_ideal(assign: dict[Flow, Any], finder: PathFinder, ideal: float) -> float:
    """Mean over flows of (rate under collisions) / (rate in the ideal schedule), capped at 1.

    Each fabric link is shared in proportion to bytes, so a flow gets
    ``capacity * bytes / load`` on each hop and its slowest hop sets its rate; the
    ideal rate finishes the flow in the ideal time. This is the usual way collision
    loss is quoted (fraction of ideal throughput), beside the max-load ratio.
    """
    loads = lb.link_loads(assign)
    cap = finder.capacity("gbps")
    total = 0.0
    for f, path in assign.items():
        ideal_rate = f.bytes * 8e-9 / ideal  # Gb/s
        rate = min((cap[h] * f.bytes / loads[h] for h in path if finder.is_fabric(h)),
                   default=ideal_rate)
        total += min(1.0, rate / ideal_rate)
    return total / len(assign)


def quality(sizes: list[int], seeds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for gpus in sizes:
        plan = build("astral3", **QUALITY_SIZES[gpus])
        finder = PathFinder(plan)
        hosts = [h.name for h in plan.hosts]
        row: dict[str, Any] = {}
        for kind in ("permutation", "all-to-all"):
            if kind == "all-to-all" and gpus > ALL_TO_ALL_MAX:
                continue  # 1M flows: the flow model's job, not this bench
            flows = _flows(hosts, kind, seed=1)
            ideal = lb.ideal_max_link_time(finder, flows, fabric_only=True)

            def ratio(assign: dict[Flow, Any], ideal: float = ideal, finder: PathFinder = finder,
                      flows: list[Flow] = flows) -> float:
                return lb.max_link_time(assign, finder, fabric_only=True) / ideal

            def share(assign: dict[Flow, Any], ideal: float = ideal,
                      finder: PathFinder = finder) -> float:
                return mean_rate_vs_ideal(assign, finder, ideal)

            t = time.monotonic()
            ecmp_runs = [lb.ecmp_assign(flows, finder, seed=s) for s in range(seeds)]
            t_ecmp = (time.monotonic() - t) / seeds
            ecmp = [ratio(a) for a in ecmp_runs]
            ecmp_share = [share(a) for a in ecmp_runs]
            t = time.monotonic()
            planned = ratio(lb.plan_assign(flows, finder))
            t_planned = time.monotonic() - t
            t = time.monotonic()
            adaptive = [ratio(lb.simulate_adaptive(flows, finder, seed=s))
                        for s in range(min(seeds, 3))]
            t_adaptive = (time.monotonic() - t) / min(seeds, 3)
            row[kind] = {
                "flows": len(flows),
                "ecmp": {"median": round(statistics.median(ecmp), 3),
                         "worst": round(max(ecmp), 3), "seeds": seeds,
                         "mean_flow_rate_vs_ideal": round(statistics.median(ecmp_share), 3)},
                "planned": round(planned, 3),
                "adaptive": {"median": round(statistics.median(adaptive), 3),
                             "worst": round(max(adaptive), 3)},
                "compute_s": {"ecmp": round(t_ecmp, 3), "planned": round(t_planned, 3),
                              "adaptive": round(t_adaptive, 3)},
            }
            print(f"  {gpus} GPUs {kind}: max link load / ideal: ecmp median "
                  f"{statistics.median(ecmp):.2f} (worst {max(ecmp):.2f}; mean flow rate "
                  f"{100 * statistics.median(ecmp_share):.0f}% of ideal), planned "
                  f"{planned:.2f}, adaptive {statistics.median(adaptive):.2f}", flush=True)
        out[str(gpus)] = row
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.controller", description=__doc__)
    p.add_argument("--parts", default="failover,convergence,quality")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--sizes", default="64,256", help="convergence sizes (GPUs)")
    p.add_argument("--quality-sizes", default="64,256,1024")
    p.add_argument("--seeds", type=int, default=10, help="ECMP hash seeds per flow set")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    result: dict[str, Any] = {}
    if "quality" in parts:
        print("quality (model): max link load / ideal", flush=True)
        result["quality"] = quality([int(x) for x in args.quality_sizes.split(",")],
                                    args.seeds)
    if "failover" in parts:
        print("failover (emulated)", flush=True)
        result["failover"] = failover(args.repeats)
    if "convergence" in parts:
        print("convergence (emulated)", flush=True)
        result["convergence"] = convergence(min(args.repeats, 3),
                                            [int(x) for x in args.sizes.split(",")])
    print(f"wrote {write('controller', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
