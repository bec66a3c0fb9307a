"""Compare load-balancing policies on the same flows in the flow model: no root, no packets.

``testbed.models.perflow.model_flows`` routes a flow list with the controller's own policy
code, computes max-min fair rates, the job's completion time and a lower bound no routing can
beat. A policy whose paths depend on the ECMP hash (``ecmp``; ``adaptive`` starts from it) is
one draw per hash seed, so it is modelled over many seeds and quoted as median [p25-p75],
N=seeds, never as one draw. Times are at real rates (400G NICs); options as NAME:KEY=VALUE.

    .venv/bin/python examples/compare_policies.py ecmp qp-scaling:qps=8   # none: ecmp planned
"""

import sys

import numpy as np

from controllers import policies
from testbed.models.perflow import model_flows
from testbed.topologies import build_for_gpus
from traffic.kernels import FlowSpec

SEEDS = 30  # hash draws for a hash-dependent policy
QPS = 2  # QPs per GPU pair: each QP is one 5-tuple, which the switches hash on its own
PAIR_BYTES = 64 << 20


def permutation(plan):
    """Every GPU sends to the GPU half the host list away: the other block, via a spine."""
    hosts = [h.name for h in plan.hosts]
    n = len(hosts)
    return [FlowSpec.make(hosts[i], hosts[(i + n // 2) % n], PAIR_BYTES // QPS, qp=q)
            for i in range(n) for q in range(QPS)]


def spread(values, unit):
    if len(values) == 1:
        return f"{values[0]:.2f}{unit} (deterministic: one run)"
    p25, med, p75 = np.percentile(values, [25, 50, 75])
    return f"median {med:.2f}{unit} [p25 {p25:.2f} - p75 {p75:.2f}], N={len(values)}"


def main(names):
    try:
        chosen = {name: policies.parse(name) for name in names}
    except ValueError as exc:
        print(f"compare_policies: {exc}", file=sys.stderr)
        return 2
    plan = build_for_gpus("astral3", gpus=8, gpus_per_server=2)  # 2 blocks, 4 leaves, 4 spines
    flows = permutation(plan)
    print(f"{plan.topology}, {plan.counts['gpus']} GPUs: a permutation, {len(flows)} flows")
    for name, pol in chosen.items():
        seeds = range(SEEDS) if pol.random else [0]
        runs = [model_flows(plan, flows, name, seed=s) for s in seeds]
        print(f"{name}: bound {runs[0].bound_s * 1e3:.2f} ms (for {runs[0].bound_name} flows)")
        print(f"  completion  {spread([r.completion_s * 1e3 for r in runs], ' ms')}")
        print(f"  / bound     {spread([r.ratio for r in runs], 'x')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["ecmp", "planned"]))
