"""Break one part of a running fabric and ask the diagnosis agent what is wrong.

Steady UDP streams cross the spines; ``FaultInjector`` breaks a component by its plan name
(default: lane 0 of lf0r0 to spine1 at 1/4 of its rate, a dirty optic) until its ``with``
ends; a ``Collector`` polls, ``Engine`` raises alerts, ``Tools`` + ``diagnose`` rank suspects.

    sudo .venv/bin/python examples/fault_diagnose.py [KIND TARGET]  # e.g. link-down lf0r1~spine3#0
"""

import sys
import time

from ops.agent import Tools, diagnose
from ops.detectors import Engine
from ops.shell import experiment, probe  # probe streams between leaves; the agent's ping
from ops.shell.collector import Collector
from ops.telemetry import canonical
from testbed.faultspec import Fault
from testbed.shell.faults import FaultInjector
from testbed.shell.lab import Lab
from testbed.topologies import build_for_gpus


def make_plan():
    return build_for_gpus("astral3", gpus=4, gpus_per_server=2)


def watch(collector, engine, polls):  # poll once a second, run the detectors after each
    for _ in range(polls):
        collector.poll_once()
        engine.step(collector.history)
        time.sleep(1.0)


def main(argv):
    fault = Fault(*argv) if argv else Fault("link-degrade", "lf0r0~spine1#0", fraction=0.25)
    with Lab(make_plan()) as lab:
        streams = experiment.steady_traffic(lab, seconds=60, mbps_per_host=20)
        try:
            collector, engine = Collector.for_lab(lab, None), Engine(lab.plan)
            watch(collector, engine, 5)  # the healthy fabric first: rates and queues settle
            with FaultInjector(lab) as injector:
                broken = canonical(injector.inject(fault).component, lab.plan)
                print(f"injected {fault.kind} on {broken}")
                watch(collector, engine, 6)
                print("alerts:", *(f"{a.detector}:{a.component}" for a in engine.active.values()))
                tools = Tools(lab.plan, history=collector.history, engine=engine, prober=probe.ping,
                              client=collector.client, host_pids=collector.host_pids)
                answer = diagnose(tools, "what is wrong?")
        finally:
            for s in streams:
                s.stop()
    print(answer.text(top=3))
    found = broken in answer.components()[:3]  # exit 0 if the broken part is a top-3 suspect
    print(f"{broken} {'is' if found else 'is NOT'} among the top 3 suspects")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
