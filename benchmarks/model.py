"""Flow-model benchmark: runtime and peak memory of ``astral-lab model``.

Every measurement runs in a fresh child process (``--child``), so its CPU time and peak
resident set (``resource.getrusage``: the whole process, interpreter and NumPy included,
~60 MiB of it before any work, and the policy workers it forks) belong to that one model
run and nothing else.
Wall time is the model run alone; on a shared machine it also counts what other processes
took, so CPU time is the figure to compare between runs.

Three sweeps, all on astral3 (400G NICs, 200G lanes, 8 GPUs per server; ``FABRICS`` says
which blocks each size has):

* ``defaults``: ``astral-lab model astral3 --gpus N --workload W`` with every other option
  at its default (the four switch-side policies, auto mode:
  per-flow at these sizes, finishes coalesced within the default event tolerance), for
  each workload the CLI offers (alltoall, prefill, decode) at ``--default-sizes`` (256,
  1,024). Goal: each within 30 s, except the 1,024-GPU decode step: within 5 min.
* ``exact``: the decode step at ``--exact-sizes`` (256) solved exactly (``--exact``),
  beside the default run of the same step: both times, and the largest relative
  difference of any flow's finish (the default promises at most
  ``flowmodel.MAX_REL_ERROR``; the unit tests check it on smaller steps).
* ``aggregate``: the what-if (every policy it computes, ecmp hashing all flows) on the
  All-to-All inside expert-parallel groups of 256 GPUs (1 MiB per GPU pair, one flow per
  pair), groups ``packed`` and ``spread``, at ``--sizes``: 1,024 and 8,192 GPUs at radix 256
  (today's 51.2T switches), and 65,536 GPUs on the what-if fabric of
  ``testbed/models/flowmodel.py`` (radix 1024, 64 servers per block). Goal: 64K within 60 s and
  8 GiB.

    python -m benchmarks.model [--workloads alltoall,prefill,decode] [--default-sizes 256,1024]
                               [--exact-sizes 256] [--sizes 1024,8192,65536]
                               [--placements packed,spread]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.common import child_argv, die_with_parent, run_child, write
from testbed.models import flowmodel as fm
from testbed.models.flowmodel import MAX_REL_ERROR
from testbed.models.jobs import Workload

#: The fabric of each size. 256 GPUs: the CLI's default (``topo``'s blocks of two servers),
#: the command a user types. Larger: leaves filled (servers_per_block 0), since blocks of
#: two do not reach 1,024 GPUs at radix 256 (the CLI refuses them and says so).
FABRICS: dict[int, dict[str, int]] = {
    256: {},
    1024: {"servers_per_block": 0},
    8192: {"servers_per_block": 0},
    65536: {"radix": 1024, "servers_per_block": 64},
}
GOAL = {"gpus": 65536, "seconds": 60.0, "gib": 8.0}
DEFAULTS_GOAL_S = 30.0
#: Goals of the defaults sweep that are not ``DEFAULTS_GOAL_S``: (GPUs, workload) -> s.
DEFAULTS_GOAL_EXCEPT = {(1024, "decode"): 300.0}


def defaults_goal(gpus: int, workload: str) -> float:
    """Seconds the defaults sweep allows one run."""
    return DEFAULTS_GOAL_EXCEPT.get((gpus, workload), DEFAULTS_GOAL_S)


def _usage() -> tuple[float, float]:
    """(CPU seconds, peak RSS MiB) of this process and its reaped children (the forked
    policy workers) so far; the peak is the larger of this process's and any child's."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    return cpu, max(me.ru_maxrss, kids.ru_maxrss) / 1024  # ru_maxrss is KiB on Linux


def child(gpus: int, placement: str, mode: str, policies: list[str] | None,
          workload: str, tolerance: float | None = None, jobs: int = 1,
          finishes: str | None = None) -> dict[str, Any]:
    """One model run in this process; the parent reads the JSON line it prints.

    ``policies`` None and mode ``auto`` is the CLI with default options on ``FABRICS``'s
    fabric (``jobs`` 0: the CLI's workers). ``finishes``: an .npz file to save every policy's flow
    finishes in."""
    kw: dict[str, Any] = {"workload": workload, "fabric": FABRICS[gpus],
                          "tolerance": tolerance, "jobs": jobs}
    if policies is not None:
        kw.update(group_size=min(gpus, 256), placement=placement, mode=mode,
                  policies=policies)
    cpu0 = _usage()[0]
    t = time.perf_counter()
    doc, results = fm.run("astral3", gpus, **kw)
    wall = time.perf_counter() - t
    cpu, rss = _usage()
    if finishes:
        np.savez(finishes, **{r.policy: r.flow_finish_s for r in results
                              if r.flow_finish_s is not None})
    return {
        "gpus": gpus, "workload": workload, "placement": doc["workload"]["placement"],
        "mode": doc["mode"], "fabric": doc["fabric"]["summary"],
        "exactness": doc["exactness"], "jobs": jobs,
        "flows": doc["workload"]["flows"], "run_s": round(wall, 3),
        "run_cpu_s": round(cpu - cpu0, 3), "process_cpu_s": round(cpu, 3),
        "peak_rss_mib": round(rss, 1), "bound_s": doc["bounds_s"]["unsplit"],
        "jobs_note": "CPU: this process and its policy workers, summed; peak RSS: the "
                     "largest of them (each worker shares the parent's pages until it writes)",
        "policies": {r.policy: {"kind": r.kind, "method": r.method,
                                "compute_s": round(r.compute_s, 3),
                                "completion_s": r.completion_s,
                                "ratio_to_bound": None if r.ratio is None else round(r.ratio, 4),
                                "classes": r.classes, "events": r.events, "note": r.note}
                     for r in results},
    }


def _spawn(gpus: int, workload: str, placement: str = "packed", mode: str = "auto",
           policies: list[str] | None = None, timeout: float | None = None,
           tolerance: float | None = None, jobs: int = 1,
           finishes: str | None = None) -> dict[str, Any]:
    args = ["--child", str(gpus), "--workloads", workload, "--placements", placement,
            "--mode", mode, "--jobs", str(jobs)]
    if policies is not None:
        args += ["--policies", ",".join(policies)]
    if tolerance is not None:
        args += ["--tolerance", repr(tolerance)]
    if finishes:
        args += ["--finishes", finishes]
    t = time.perf_counter()
    try:  # the child dies with us (a benchmark killed midway must not leave it computing)
        out = run_child(child_argv("benchmarks.model", *args), timeout)
    except subprocess.TimeoutExpired:
        return {"gpus": gpus, "workload": workload, "placement": placement, "mode": mode,
                "timed_out": True, "timeout_s": timeout}
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"model {gpus} {workload} {placement} {mode} failed:\n"
                           f"{out.stderr[-2000:]}")
    sample = json.loads(lines[-1])
    sample["process_s"] = round(time.perf_counter() - t, 3)  # + interpreter start, imports
    return sample


def _compare(gpus: int, timeout: float | None) -> dict[str, Any]:
    """The decode step at ``gpus``, default solve and exact, and how far apart any flow's
    finish came out (relative to the exact one)."""
    with tempfile.TemporaryDirectory() as tmp:
        fast = _spawn(gpus, "decode", timeout=timeout, jobs=0,
                      finishes=os.path.join(tmp, "fast.npz"))
        exact = _spawn(gpus, "decode", timeout=timeout, jobs=0, tolerance=0.0,
                       finishes=os.path.join(tmp, "exact.npz"))
        err: dict[str, float] = {}
        if not fast.get("timed_out") and not exact.get("timed_out"):
            a, e = np.load(os.path.join(tmp, "fast.npz")), np.load(os.path.join(tmp, "exact.npz"))
            err = {p: float(np.max(np.abs(a[p] - e[p]) / e[p])) for p in e.files}

    return {"gpus": gpus, "workload": "decode", "default": fast, "exact": exact,
            "max_rel_error": err, "promised": MAX_REL_ERROR,
            "within": bool(err) and max(err.values()) <= MAX_REL_ERROR}


def _line(s: dict[str, Any]) -> str:
    head = f"  {s['gpus']:>6} GPUs {s['workload']:<8} {s['placement']:<6} {s['mode']:<9}"
    if s.get("timed_out"):
        return f"{head} timed out after {s['timeout_s']:g} s"
    pols = ", ".join(f"{p} {v['compute_s']:.1f}s"
                     + (f" ({1e3 * v['completion_s']:.3f} ms)" if v["completion_s"] else " (n/a)")
                     for p, v in s["policies"].items())
    return (f"{head} {s['flows']:>11,} flows: {s['run_s']:.1f} s wall, {s['run_cpu_s']:.1f} s "
            f"CPU, peak {s['peak_rss_mib']:.0f} MiB | {pols}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(Workload),
                   help="workloads of the default-options sweep")
    p.add_argument("--default-sizes", default="256,1024",
                   help="GPU counts of the default-options sweep ('' for none)")
    p.add_argument("--exact-sizes", default="256",
                   help="GPU counts of the decode step solved exactly too ('' for none)")
    p.add_argument("--sizes", default="1024,8192,65536",
                   help="GPU counts for the aggregate what-if ('' for none)")
    p.add_argument("--placements", default="packed,spread")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds before a child run is recorded as timed out")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="aggregate", help=argparse.SUPPRESS)
    p.add_argument("--policies", default=None, help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--tolerance", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--finishes", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    placements = [x for x in args.placements.split(",") if x]
    workloads = [x for x in args.workloads.split(",") if x]
    if args.child:
        die_with_parent(args.parent_pid)
        pols = args.policies.split(",") if args.policies else None
        print(json.dumps(child(args.child, placements[0], args.mode, pols, workloads[0],
                               args.tolerance, args.jobs, args.finishes)), flush=True)
        return 0
    sizes = [int(x) for x in args.sizes.split(",") if x]
    defaults = [int(x) for x in args.default_sizes.split(",") if x]
    exact_sizes = [int(x) for x in args.exact_sizes.split(",") if x]
    bad = [s for s in sizes + defaults + exact_sizes if s not in FABRICS]
    if bad:
        p.error(f"unknown size(s) {bad}; choose from {sorted(FABRICS)}")
    bad_w = [w for w in workloads if w not in tuple(Workload)]
    if bad_w:
        p.error(f"unknown workload(s) {bad_w}; choose from {', '.join(Workload)}")
    default_runs = []
    for gpus in defaults:
        for w in workloads:
            default_runs.append(_spawn(gpus, w, timeout=args.timeout, jobs=0))
            default_runs[-1]["goal_s"] = defaults_goal(gpus, w)
            print(_line(default_runs[-1]), flush=True)
    compared = []
    for gpus in exact_sizes:
        compared.append(_compare(gpus, args.timeout))
        c = compared[-1]
        print(f"  {gpus:>6} GPUs decode, default vs exact: " + ", ".join(
            f"{k} {c[k]['run_s']:.1f} s" if not c[k].get("timed_out") else f"{k} timed out"
            for k in ("default", "exact")) + "; largest finish difference " +
            (f"{max(c['max_rel_error'].values()):.2e}" if c["max_rel_error"] else "n/a"),
            flush=True)
    samples = []
    all_policies = ["ecmp", "ecmp-fluid", "planned", "adaptive"]
    for gpus in sizes:
        for placement in placements:
            samples.append(_spawn(gpus, "alltoall", placement, "aggregate", all_policies,
                                  args.timeout))
            print(_line(samples[-1]), flush=True)
    goal = [s for s in samples if s["gpus"] == GOAL["gpus"]]
    result = {
        "defaults": {
            "what": "astral-lab model astral3 --gpus N --workload W, every other option at its "
                    "default (the switch-side policies in forked workers, auto mode, finishes "
                    "coalesced within the default event tolerance)",
            "goal": f"each within {DEFAULTS_GOAL_S:g} s, "
                    + ", ".join(f"{w} at {g} GPUs within {s:g} s"
                                for (g, w), s in DEFAULTS_GOAL_EXCEPT.items()),
            "goal_met": bool(default_runs) and all(
                not s.get("timed_out") and s["run_s"] <= s["goal_s"] for s in default_runs),
            "samples": default_runs,
        },
        "exact": {
            "what": "the decode step solved exactly (--exact) beside the default solve; "
                    "max_rel_error: per policy, the largest |default - exact| / exact over "
                    "every flow's finish",
            "samples": compared,
        },
        "workload": "aggregate: All-to-All in EP groups of 256 GPUs, 1 MiB per GPU pair, one "
                    "flow per pair",
        "goal": f"{GOAL['gpus']} GPUs within {GOAL['seconds']:g} s and {GOAL['gib']:g} GiB",
        "goal_met": bool(goal) and all(not s.get("timed_out") and s["run_s"] <= GOAL["seconds"]
                                       and s["peak_rss_mib"] <= GOAL["gib"] * 1024
                                       for s in goal),
        "samples": samples,
    }
    print(f"wrote {write('model', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
