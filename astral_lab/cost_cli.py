"""``astral-lab cost``: the argparse glue of the cost model (``testbed.models.cost``).

One flag per ``CostSpec`` and ``Prices`` field; prints ``format_table`` and writes cost.json
(and cost.png). Here, not in the library, so that nothing under ``testbed/`` depends on the
command line.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, fields
from typing import Any

from testbed import topologies
from testbed.fabricspec import COST_RULES, GPU_COUNT, CostSpec
from testbed.models.cost import (
    CONVENTIONS,
    DESIGNS,
    Prices,
    cost_table,
    format_table,
    plot_costs,
)
from testbed.results import check_output, output_dir
from testbed.topologies import fabric_size
from vocab.plan import write_json_atomic
from vocab.validate import list_of, out_dir, real

#: what ``cost`` writes in its folder
COST_FILES = ("cost.json", "cost.png")
#: a price in $ (an assumption the user may zero; a billion is past any switch or optic)
PRICE = real(0, 1e9)


def add_cost_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``cost`` verb: one flag per CostSpec and Prices field, defaults shown."""
    p = subparsers.add_parser(
        "cost", help="cost table and bar chart of all designs at given GPU counts",
        description="Closed-form counts and cost of each design (astral3, rail3, railonly, "
                    "fattree) at each GPU count. Prices are assumptions; override them.")
    p.add_argument("--gpus", required=True, metavar="N[,N...]", type=list_of(rule=GPU_COUNT),
                   help=f"GPU counts of the fabrics, in all, comma-separated (e.g. "
                        f"8192,65536; each {GPU_COUNT}, a whole number of servers of "
                        "--gpus-per-server)")
    p.add_argument("--designs", default=list(DESIGNS), metavar="D[,D...]",
                   type=list_of(choices=topologies.TOPOLOGIES.names()),
                   help=f"designs to compare (default {','.join(DESIGNS)})")
    p.add_argument("-o", "--output", metavar="DIR", type=out_dir,
                   help="write cost.json/cost.png here (default results/<time>-cost/)")
    p.add_argument("--no-png", action="store_true", help="skip the bar chart")
    g = p.add_argument_group("fabric (real units; servers-per-block 0 = fill the leaf)")
    for f in fields(CostSpec):
        value = getattr(CostSpec(), f.name)
        rule = COST_RULES[f.name]
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=rule,
                       default=value, metavar="N", help=f"default {value:g}; {rule}")
    pr = p.add_argument_group("prices in $ (defaults are assumptions, see testbed/models/cost.py)")
    for f in fields(Prices):
        value = getattr(Prices(), f.name)
        pr.add_argument(f"--price-{f.name.replace('_', '-')}", dest=f"price_{f.name}",
                        type=PRICE, default=value, metavar="USD", help=f"default {value:g}")
    p.set_defaults(fn=run_cost)
    return p


def run_cost(args: argparse.Namespace) -> int:
    """Print the table, write cost.json (+ cost.png). Bad input raises ValueError; the
    results folder is checked before anything is computed."""
    check_output(args.output, COST_FILES)
    gpus, designs = list(args.gpus), list(args.designs)
    for n in gpus:  # whole servers, said as every verb says it (before any work)
        fabric_size(n, args.gpus_per_server, max_servers=int(GPU_COUNT.high or 0))
    spec = CostSpec(**{f.name: getattr(args, f.name) for f in fields(CostSpec)})
    prices = Prices(**{f.name: getattr(args, f"price_{f.name}") for f in fields(Prices)})
    rows = cost_table(gpus, designs, spec, prices)
    print(format_table(rows))
    doc = {"schema": "astral-lab/cost", "version": 1, "spec": asdict(spec),
           "prices": asdict(prices), "baseline": "rail3",
           "conventions": CONVENTIONS,
           "rows": rows}
    out_dir, final = output_dir("cost", args.output, COST_FILES)
    write_json_atomic(os.path.join(out_dir, "cost.json"), doc)
    png = not args.no_png and any(r["feasible"] for r in rows)
    if png:
        plot_costs(rows, os.path.join(out_dir, "cost.png"),
                   title=f"Network cost per GPU: {spec.nic_gbps:g}G NICs, radix "
                         f"{spec.radix} x {spec.lane_gbps:g}G, {spec.gpus_per_server} "
                         "GPUs/server\n(bar label: cost relative to rail3)")
    if out_dir != final:
        os.replace(out_dir, final)
    if not args.no_png and not png:
        print("\nno design fits at these sizes: no chart")
    print(f"\nresults: {final}/ (cost.json{', cost.png' if png else ''})")
    return 0


__all__ = ["add_cost_parser", "run_cost"]
