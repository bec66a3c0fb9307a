"""Replay one MoE decode step as RoCEv2 packets, beside the flow model's ideal for it.

``simulate_step`` routes 16 DeepSeek-V3 tokens per GPU to their experts; ``low_latency``
makes DeepEP-style traffic of it (a 7,408-byte FP8 message per token copy, straight to
the expert's GPU; 14,336-byte BF16 combine messages back); ``replay_step`` sends it
through a live fabric, dispatch then combine. ``model_flows`` gives the same flows'
finish times on the same plan and policy at the emulated rates (unit "mbps"): max-min
fair sharing, no queues, the ideal. Times are emulated (scale 1e-5: a 400G NIC is 4 Mb/s).

    sudo .venv/bin/python examples/replay_decode.py        # root: it builds a real fabric
"""

import sys

from testbed.models.perflow import model_flows
from testbed.shell.lab import Lab
from testbed.topologies import build_for_gpus
from traffic.kernels import low_latency
from traffic.roce import message_wire_bytes
from traffic.shell.replay import percentile, replay_step
from traffic.workload import simulate_step
from vocab.flows import Flow


def make_plan():
    return build_for_gpus("astral3", gpus=4, gpus_per_server=2, scale=1e-5)


def model_finish(plan, flows, policy):
    """The model's finish time of every flow, sized as the shapers count (headers too)."""
    wire = [Flow(f.src, f.dst, f.sport, bytes=f.messages * message_wire_bytes(f.message_bytes))
            for f in flows]  # low_latency: every message of a flow has the same size
    return list(model_flows(plan, wire, policy, unit="mbps").flow_finish_s)


def p50_p99(seconds):
    return f"{percentile(seconds, 50) * 1e3:5.0f} / {percentile(seconds, 99) * 1e3:5.0f} ms"


def main():
    plan = make_plan()
    step = simulate_step("deepseek-v3", servers=2, gpus_per_server=2, tokens_per_gpu=16, seed=1)
    traffic = low_latency(step, plan)
    with Lab(plan, lb="planned") as lab:  # planned: the model takes the controller's paths
        results = replay_step(lab, traffic)
    for phase, res in results.items():
        flows = [f for f in traffic.flows if f.phase == phase]
        # a message's latency runs from when its sender started it; a flow ends with its last
        lat = [m["latency_ns"] / 1e9 for m in res.messages if m.get("complete")]
        fct = [r["fct_s"] for r in res.flows if r["fct_s"] is not None]
        print(f"{phase}: {len(flows)} flows, {len(lat)} messages, "
              f"{res.lost_packets} packets lost, policy {res.mode}")
        print(f"  message latency p50/p99  measured {p50_p99(lat)}")
        print(f"  flow finish     p50/p99  measured {p50_p99(fct)}"
              f"   model {p50_p99(model_finish(plan, flows, res.mode))}")
    return 0 if all(r.bytes_received == r.bytes_sent for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
