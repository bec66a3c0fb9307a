"""Bring up a small Astral 3.0 fabric and check that every GPU reaches every other GPU.

The lab's smallest complete program: ``build_for_gpus`` turns a fabric's size (GPUs in
all and per server, as ``astral-lab topo`` takes them) into a wiring plan, ``Lab`` brings
the plan up as Mininet hosts and Open vSwitch switches under the lab's OpenFlow
controller and waits until every switch is programmed, and
``lab.reachability()`` pings every ordered pair of GPU NICs through the fabric. Leaving
the ``with`` block tears everything down, also on an error or Ctrl-C.

Run it from the repository (root: it builds a real network):

    sudo .venv/bin/python examples/ping_all.py

Exit status 0 when every pair answered, 1 otherwise.
"""

import sys

from testbed.shell.lab import Lab
from testbed.topologies import build_for_gpus


def make_plan():
    """2 servers of 4 GPUs: 4 rail leaves and 4 spines, each leaf uplink split into 4 lanes."""
    return build_for_gpus("astral3", gpus=8, gpus_per_server=4)


def describe(plan):
    c = plan.counts
    tiers = ", ".join(f"{n} {tier}" for tier, n in c["switches_per_tier"].items())
    return (f"{plan.topology}: {c['gpus']} GPUs on {c['servers']} servers, {c['switches']} "
            f"switches ({tiers}), {c['links']} links ({c['lanes']} of them spine lanes)")


def main():
    plan = make_plan()
    print(describe(plan))
    with Lab(plan) as lab:
        print(f"up in {lab.timings['total']:.1f} s")
        a, b = plan.hosts[0], plan.hosts[-1]  # one ping by hand: a Mininet host's shell
        rtt = lab.host(a.name).cmd("ping -c1 -W1", b.ip).strip().splitlines()[-1]
        print(f"{a.name} -> {b.name} ({b.ip}): {rtt}")
        result = lab.reachability()  # then all of them
    print(result)
    for src, dst in result.failed:
        print(f"unreachable: {src} -> {dst}")
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
