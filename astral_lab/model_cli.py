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

from astral_lab.size_cli import add_size_options
from controllers import policies as policy_modules
from controllers.paths import UNITS
from testbed import topologies
from testbed.fabricspec import EMULATED_RULES, GPU_COUNT, FabricSpec
from testbed.models.flowmodel import (
    DEFAULT_EXACT_FLOWS,
    DEFAULT_TOLERANCE,
    FABRIC_FIELDS,
    MAX_REL_ERROR,
    ModelMode,
    format_report,
    run,
)
from testbed.models.inputs import DEFAULT_POLICIES
from testbed.models.jobs import DEFAULT_PAIR_BYTES, Placement, Workload
from testbed.models.progress import Progress
from testbed.results import check_output, output_dir
from traffic.workload import PRESETS, Phase
from vocab.plan import write_json_atomic
from vocab.validate import SEED, count, list_of, out_dir, real

#: the MoE preset of a prefill or decode step unless --model says
MOE_MODEL = "deepseek-v3"
#: options that shape one kind of workload only: the workloads each applies to
WORKLOAD_OPTIONS = {"pair_bytes": ("--bytes", (Workload.ALLTOALL.value,)),
                    "qps": ("--qps", (Workload.ALLTOALL.value,)),
                    "phase": ("--phase", (Workload.PREFILL.value, Workload.DECODE.value)),
                    "tokens": ("--tokens", (Workload.PREFILL.value, Workload.DECODE.value)),
                    "model": ("--model", (Workload.PREFILL.value, Workload.DECODE.value))}
#: what ``model`` writes in its folder
MODEL_FILES = ("model.json",)
#: the default fabric is ``FabricSpec``'s, as ``topo`` draws it (``topologies.spec_for_gpus``)
_DEFAULT = FabricSpec()


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
    p.add_argument("topology", choices=topologies.TOPOLOGIES.names())
    add_size_options(p, servers=False, defaults=True)
    p.add_argument("--workload", default=Workload.ALLTOALL.value,
                   choices=[w.value for w in Workload],
                   help="alltoall: equal bytes per GPU pair; prefill/decode: one MoE step "
                        "through the high-bandwidth / low-latency kernel (default alltoall)")
    p.add_argument("--lb", default=list(DEFAULT_POLICIES), metavar="P[,P...]",
                   type=list_of(check=policy_modules.parse),
                   help=f"policies, options as P:KEY=VALUE (default {','.join(DEFAULT_POLICIES)};"
                        f" the policies there are: {','.join(policy_modules.POLICIES.names())})")
    p.add_argument("--groups", type=count(0, GPU_COUNT.high), default=0, metavar="G",
                   help="expert-parallel groups (default: as many as fit)")
    p.add_argument("--group-size", type=count(0, GPU_COUNT.high), default=0, metavar="N",
                   help="GPUs per group (default min(GPUs, 256))")
    p.add_argument("--placement", default=Placement.PACKED.value,
                   choices=[pl.value for pl in Placement],
                   help="packed: consecutive servers; spread: strided over the fabric")
    p.add_argument("--seed", type=SEED, default=0, help="ECMP hash seed and MoE step seed")
    p.add_argument("--bytes", type=count(1, 1 << 40), default=None, dest="pair_bytes",
                   metavar="B", help=f"alltoall: bytes per GPU pair (default "
                                     f"{DEFAULT_PAIR_BYTES})")
    p.add_argument("--qps", type=count(1, 1024), default=None, metavar="Q",
                   help="alltoall: flows per GPU pair (1..1024; default 1)")
    p.add_argument("--phase", default=None, choices=[ph.value for ph in Phase],
                   help=f"prefill/decode: the step's phase (default {Phase.DISPATCH.value})")
    p.add_argument("--tokens", type=count(0, 1 << 20), default=None, metavar="T",
                   help="prefill/decode: tokens per GPU (default 4096 prefill, 128 decode)")
    p.add_argument("--model", default=None, choices=sorted(PRESETS),
                   help=f"prefill/decode: MoE preset (traffic.workload; default {MOE_MODEL})")
    p.add_argument("--mode", default=ModelMode.AUTO.value, choices=[m.value for m in ModelMode])
    p.add_argument("--exact-flows", type=count(0, 10 ** 9), default=None, metavar="N",
                   help=f"auto mode: per-flow up to N flows (default {DEFAULT_EXACT_FLOWS})")
    p.add_argument("--event-tolerance", type=real(0, 0.5, high_open=True), default=None,
                   metavar="EPS", dest="tolerance",
                   help=f"coalesce finishes within EPS (relative) of an event (default "
                        f"{DEFAULT_TOLERANCE:g}: every flow's finish within "
                        f"{100 * MAX_REL_ERROR:g}%% of the exact solve, measured); 0 = exact")
    p.add_argument("--exact", action="store_true",
                   help="the exact solve, every finish event on its own (= --event-tolerance "
                        "0; much slower for decode/prefill steps)")
    p.add_argument("--jobs", type=count(0, 1024), default=0, metavar="N",
                   help="policies modelled at once, each in its own process (default 0: one "
                        "per CPU, as memory allows)")
    p.add_argument("--unit", default="gbps", choices=sorted(UNITS),
                   help="gbps: real link rates; mbps: the emulated fabric's (per-flow mode)")
    p.add_argument("-o", "--output", metavar="DIR", type=out_dir,
                   help="write model.json here (default results/<time>-model/)")
    g = p.add_argument_group("fabric (real units; unset = `topo`'s default; servers-per-block "
                             "0 = fill the leaf)")
    for name in FABRIC_FIELDS:
        value = getattr(_DEFAULT, name)
        rule = EMULATED_RULES[name]
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, type=rule, default=None,
                       metavar="N", help=f"default {value:g}; {rule}")
    p.set_defaults(fn=run_model)
    return p


def _check_fabric(args: argparse.Namespace, fabric: dict[str, Any]) -> None:
    """The design's rules on the fabric, before the job is built: a fabric the defaults
    cannot make at this size says how to fill the leaves instead (``topo``'s blocks of
    ``FabricSpec.servers_per_block`` servers are the default at every size)."""
    topo = topologies.TOPOLOGIES.get(args.topology)
    topologies.fabric_size(args.gpus, args.gpus_per_server)  # even, and not too many servers
    try:
        topo.counts(topologies.spec_for_gpus(args.topology, args.gpus, args.gpus_per_server,
                                             **fabric))
    except ValueError as exc:
        if not topo.blocks or "servers_per_block" in fabric:
            raise
        raise ValueError(f"{exc} (blocks of {_DEFAULT.servers_per_block} servers, as `topo` "
                         "builds them; --servers-per-block 0 fills each leaf)") from None


def _check_options(args: argparse.Namespace) -> None:
    """Refuse, saying why, an option the chosen workload or mode would ignore, then fill
    in the defaults of the rest."""
    for dest, (flag, workloads) in WORKLOAD_OPTIONS.items():
        if getattr(args, dest, None) is not None and args.workload not in workloads:
            raise ValueError(f"{flag} shapes the {' and '.join(workloads)} workload"
                             f"{'s' if len(workloads) > 1 else ''} only, not "
                             f"--workload {args.workload}: drop it")
    if getattr(args, "exact_flows", None) is not None and args.mode != ModelMode.AUTO.value:
        raise ValueError(f"--exact-flows chooses the mode in --mode auto; with --mode "
                         f"{args.mode} it does nothing: drop it")
    for dest, default in (("pair_bytes", DEFAULT_PAIR_BYTES), ("qps", 1),
                          ("phase", Phase.DISPATCH.value), ("tokens", 0), ("model", MOE_MODEL),
                          ("exact_flows", DEFAULT_EXACT_FLOWS)):
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)


def run_model(args: argparse.Namespace) -> int:
    """Print the report, write model.json. Bad input raises ValueError (the CLI prints it);
    the results folder and the fabric are checked first, so a bad one costs no computation.

    Progress goes to stderr while the model runs: a status line on a terminal, else a
    line per tenth once the run lasts a few seconds (``Progress``). An interrupted run
    leaves no results folder: there is nothing partial worth keeping.
    """
    _check_options(args)
    check_output(args.output, MODEL_FILES)
    policies = list(args.lb)
    fabric = {name: getattr(args, name) for name in FABRIC_FIELDS
              if getattr(args, name, None) is not None}
    _check_fabric(args, fabric)
    tolerance = args.tolerance
    if getattr(args, "exact", False):
        if tolerance not in (None, 0):
            raise ValueError("--exact and --event-tolerance: choose one")
        tolerance = 0.0
    progress = Progress(sys.stderr)
    try:
        doc, _ = run(args.topology, args.gpus, gpus_per_server=args.gpus_per_server,
                     workload=args.workload, policies=policies, groups=args.groups,
                     group_size=args.group_size, placement=args.placement, seed=args.seed,
                     pair_bytes=args.pair_bytes, qps=args.qps, phase=args.phase,
                     tokens=args.tokens, model=args.model, mode=args.mode,
                     exact_flows=args.exact_flows, unit=args.unit, fabric=fabric,
                     tolerance=tolerance, jobs=args.jobs,
                     progress=progress)
    finally:
        progress.close()
    print(format_report(doc))
    out_dir, final = output_dir("model", args.output, MODEL_FILES)
    try:
        write_json_atomic(os.path.join(out_dir, "model.json"), doc)
        if out_dir != final:
            os.replace(out_dir, final)
    except BaseException:
        if out_dir != final:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    print(f"\nresults: {final}/ (model.json)")
    return 0


__all__ = ["add_model_parser", "run_model"]
