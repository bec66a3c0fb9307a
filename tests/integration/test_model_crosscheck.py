"""The flow-level model and the emulator on the same plan and flows: do they agree?

Four flows on a small astral3 at half the default scale (20 Mb/s NICs, 10 Mb/s lanes),
routed by the planned policy in both (the controller pins them; the model calls the same
``lb.plan_assign``): two flows incast into s2g1's NIC, one crosses the fabric alone (one
lane limits it), one stays under its leaf (only the NICs limit it). The model is fed the
bytes the shapers count (RoCE frames: headers, payload, ICRC) at the emulated rates, so
it predicts what Mininet should show.

Tolerance: per flow, 10% + 60 ms. Measured on this 2-core machine, the Python senders
hold 96% of a 20 Mb/s rate while the software switch and eight agents share the cores
(at 40 Mb/s they fall to ~90%, which is why this test runs at half scale); 60 ms covers
the senders' start skew and the receivers' last-packet timing. A real disagreement (a
wrong path, a missed bottleneck, a dropped burst) is 1.5-2x, far outside it.
"""

from __future__ import annotations

from collections.abc import Callable

from testbed.models.perflow import model_flows
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.roce import LAB_PMTU, message_wire_bytes
from traffic.shell.replay import replay
from vocab.flows import Flow, sport_for_qp
from vocab.plan import WiringPlan

MSG = 50_000


def spec(src: str, dst: str, qp: int, messages: int) -> FlowSpec:
    return FlowSpec(src, dst, bytes=messages * MSG, qp=qp, sport=sport_for_qp(qp),
                    message_bytes=MSG, messages=messages)


def test_model_and_emulation_agree_on_completion_times(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = build("astral3", servers=4, gpus=2, servers_per_block=2, scale=5e-5)
    flows = [spec("s0g0", "s2g1", 1, 40),   # incast into s2g1 with the next one
             spec("s1g0", "s2g1", 2, 40),
             spec("s0g1", "s3g0", 3, 30),   # alone across the fabric: one 10 Mb/s lane
             spec("s1g1", "s0g1", 4, 60)]   # same leaf (lf0r1): only the NICs limit it
    # the frame bytes the shapers count, at the path MTU Lab(plan) replays with
    wire = [Flow(f.src, f.dst, f.sport, bytes=f.messages * message_wire_bytes(MSG, LAB_PMTU))
            for f in flows]
    model = model_flows(plan, wire, "planned", unit="mbps")
    predicted = [float(x) for x in model.flow_finish_s]
    with Lab(plan, lb="planned") as lab:
        # userspace OVS: its transmit socket must hold the deep (lossless) port queues
        assert lab.datapath != "user" or lab.tx_buffer["after"] >= 32 << 20, lab.tx_buffer
        assert lab.pmtu == LAB_PMTU
        r = replay(lab, flows, progress=False)
    assert r.lost_packets == 0 and r.bytes_received == r.bytes_sent
    measured = [row["fct_s"] for row in r.flows]
    report = [f"{f.src}->{f.dst}: model {p:.3f} s, emulated {m:.3f} s ({100 * (m / p - 1):+.0f}%)"
              for f, p, m in zip(flows, predicted, measured, strict=True)]
    print("\n".join(report) + f"\nstart skew {r.start_skew_s * 1000:.0f} ms")
    for line, p, m in zip(report, predicted, measured, strict=True):
        assert abs(m - p) <= 0.10 * p + 0.06, line
    # the model's story is the fabric's: the lane-limited and incast flows take twice as long
    # as their bytes at NIC rate would
    assert predicted[2] > 1.5 * flows[2].bytes * 8 / 20e6
