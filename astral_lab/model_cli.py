"""``astral-lab model``: the argparse glue of the flow model (``testbed.models.flowmodel``).

The verb's flags map one to one onto ``run``'s arguments; the report is ``format_report``'s.
Here, not in the library, so that nothing under ``testbed/`` depends on the command line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any

from controllers.paths import UNITS
from controllers.plan import write_json_atomic
from testbed import topologies
from testbed.models.flowmodel import (
    DEFAULT_EXACT_FLOWS,
    DEFAULT_PAIR_BYTES,
    DEFAULT_POLICIES,
    DEFAULT_TOLERANCE,
    FABRIC_FIELDS,
    MAX_REL_ERROR,
    MODES,
    PLACEMENTS,
    POLICIES,
    WORKLOADS,
    Progress,
    format_report,
    run,
)
from testbed.models.forked import raise_if_stopped, stop_signals_noted
from testbed.results import output_dir
from testbed.topologies import FabricSpec


def add_model_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``model`` verb."""
    p = subparsers.add_parser(
        "model", help="flow-level model: completion time per routing policy beside the bound",
        description="Max-min fair flow model of a job on a fabric: completion time per routing "
                    "policy (the controller's own ecmp/planned/adaptive code, plus fluid ECMP), "
                    "the lower bounds, the bottleneck links. Per-flow up to --exact-flows "
                    "flows; above that an exact group-symmetric what-if (astral3). 64K-GPU "
                    "what-if: astral-lab model astral3 --gpus 65536 --radix 1024 "
                    "--servers-per-block 64 --groups 256 --group-size 256")
    p.add_argument("topology", choices=topologies.names())
    p.add_argument("--gpus", type=int, required=True, metavar="N", help="GPUs in the fabric")
    p.add_argument("--gpus-per-server", type=int, default=8, metavar="N", help="default 8")
    p.add_argument("--workload", default="alltoall", choices=WORKLOADS,
                   help="alltoall: equal bytes per GPU pair; prefill/decode: one MoE step "
                        "through the high-bandwidth / low-latency kernel (default alltoall)")
    p.add_argument("--lb", default=",".join(DEFAULT_POLICIES), metavar="P[,P...]",
                   help=f"policies, options as P:KEY=VALUE (default {','.join(DEFAULT_POLICIES)};"
                        f" all: {','.join(POLICIES)})")
    p.add_argument("--groups", type=int, default=0, metavar="G",
                   help="expert-parallel groups (default: as many as fit)")
    p.add_argument("--group-size", type=int, default=0, metavar="N",
                   help="GPUs per group (default min(GPUs, 256))")
    p.add_argument("--placement", default="packed", choices=PLACEMENTS,
                   help="packed: consecutive servers; spread: strided over the fabric")
    p.add_argument("--seed", type=int, default=0, help="ECMP hash seed and MoE step seed")
    p.add_argument("--bytes", type=int, default=DEFAULT_PAIR_BYTES, dest="pair_bytes",
                   metavar="B", help=f"alltoall bytes per GPU pair (default {DEFAULT_PAIR_BYTES})")
    p.add_argument("--qps", type=int, default=1, metavar="Q", help="alltoall flows per GPU pair")
    p.add_argument("--phase", default="dispatch", choices=("dispatch", "combine"))
    p.add_argument("--tokens", type=int, default=0, metavar="T",
                   help="tokens per GPU (default 4096 prefill, 128 decode)")
    p.add_argument("--model", default="deepseek-v3", help="MoE preset (traffic.workload)")
    p.add_argument("--mode", default="auto", choices=MODES)
    p.add_argument("--exact-flows", type=int, default=DEFAULT_EXACT_FLOWS, metavar="N",
                   help=f"auto mode: per-flow up to N flows (default {DEFAULT_EXACT_FLOWS})")
    p.add_argument("--event-tolerance", type=float, default=None, metavar="EPS", dest="tolerance",
                   help=f"coalesce finishes within EPS (relative) of an event (default "
                        f"{DEFAULT_TOLERANCE:g}: every flow's finish within "
                        f"{100 * MAX_REL_ERROR:g}%% of the exact solve, measured); 0 = exact")
    p.add_argument("--exact", action="store_true",
                   help="the exact solve, every finish event on its own (= --event-tolerance "
                        "0; much slower for decode/prefill steps)")
    p.add_argument("--jobs", type=int, default=0, metavar="N",
                   help="policies modelled at once, each in its own process (default 0: one "
                        "per CPU, as memory allows)")
    p.add_argument("--unit", default="gbps", choices=sorted(UNITS),
                   help="gbps: real link rates; mbps: the emulated fabric's (per-flow mode)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="write model.json here (default results/<time>-model/)")
    g = p.add_argument_group("fabric (real units; servers-per-block 0/unset = fill the leaf)")
    defaults = FabricSpec()
    for name in FABRIC_FIELDS:
        value = getattr(defaults, name)
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, type=type(value), default=None,
                       metavar="N", help=f"default {value:g}")
    p.set_defaults(fn=run_model)
    return p


def run_model(args: argparse.Namespace) -> int:
    """Print the report, write model.json. Bad input raises ValueError (the CLI prints it).

    Progress goes to stderr while the model runs, only if stderr is a terminal. An
    interrupted run leaves no results folder: there is nothing partial worth keeping.
    """
    policies = [p.strip() for p in str(args.lb).split(",") if p.strip()]
    fabric = {name: getattr(args, name) for name in FABRIC_FIELDS
              if getattr(args, name, None) is not None}
    tolerance = args.tolerance
    if getattr(args, "exact", False):
        if tolerance not in (None, 0):
            raise ValueError("--exact and --event-tolerance: choose one")
        tolerance = 0.0
    progress = Progress(sys.stderr)
    with stop_signals_noted() as stopped:
        try:
            doc, _ = run(args.topology, args.gpus, gpus_per_server=args.gpus_per_server,
                         workload=args.workload, policies=policies, groups=args.groups,
                         group_size=args.group_size, placement=args.placement, seed=args.seed,
                         pair_bytes=args.pair_bytes, qps=args.qps, phase=args.phase,
                         tokens=args.tokens, model=args.model, mode=args.mode,
                         exact_flows=args.exact_flows, unit=args.unit, fabric=fabric,
                         tolerance=tolerance, jobs=args.jobs,
                         progress=progress if progress.enabled else None)
        finally:
            progress.close()
        raise_if_stopped(stopped)  # a stop whose exception Python swallowed
        print(format_report(doc))
        out_dir, final = output_dir("model", args.output)
        try:
            write_json_atomic(os.path.join(out_dir, "model.json"), doc)
            raise_if_stopped(stopped)
            if out_dir != final:
                os.replace(out_dir, final)
        except BaseException:
            if out_dir != final:
                shutil.rmtree(out_dir, ignore_errors=True)
            raise
    print(f"\nresults: {final}/ (model.json)")
    return 0


__all__ = ["add_model_parser", "run_model"]
