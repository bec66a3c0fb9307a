"""The demo's pure parts: hash draws, the model's ECMP distribution, the busiest-link factor,
and summary.json entries with measured / ideal / ratio and the draws' quartiles."""

from __future__ import annotations

from typing import Any

import pytest

from scenarios.common import compare, distribution, fmt_distribution, wire_flows
from scenarios.experiments import demo as dm
from testbed.topologies import build


@pytest.fixture(scope="module")
def plans() -> dict[str, Any]:
    return {t: build(t, servers=2, gpus=4, scale=1e-5) for t in ("astral3", "rail3")}


def test_distribution_quartiles_and_compare() -> None:
    d = distribution([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (d["draws"], d["median"], d["p25"], d["p75"]) == (5, 3.0, 2.0, 4.0)
    assert d["min"] == 1.0 and d["max"] == 5.0 and sorted(d["values"]) == [1, 2, 3, 4, 5]
    assert distribution([])["draws"] == 0 and fmt_distribution(distribution([])) == "n/a"
    assert fmt_distribution(d, " s") == "3.00 s [2.00-4.00], N=5"
    assert compare(3.0, 2.0)["ratio"] == 1.5
    assert compare(3.0, 0.0)["ratio"] is None and compare(None, 1.0)["ratio"] is None


def test_each_draw_has_its_own_source_ports_on_the_same_pairs(plans: dict[str, Any]) -> None:
    plan = plans["astral3"]
    a, b = dm._flows(plan, 10_000, seed=1, draw=0), dm._flows(plan, 10_000, seed=1, draw=1)
    assert [(f.src, f.dst) for f in a] == [(f.src, f.dst) for f in b]
    assert not {f.sport for f in a} & {f.sport for f in b}
    assert len(a) == dm.QPS * len(plan.hosts)


def test_model_ecmp_is_a_spread_and_collisions_cost_more_on_thin_lanes(
        plans: dict[str, Any]) -> None:
    out = {}
    for topo, plan in plans.items():
        nbytes = int(min(plan.rdma_nic().values()) * 1e6 / 8 * 2.0)
        ecmp = dm._model(plan, nbytes, seed=1, mode="ecmp", draws=60)
        planned = dm._model(plan, nbytes, seed=1, mode="planned", draws=60)
        assert ecmp["completion_s"]["draws"] == 60 and planned["completion_s"]["draws"] == 1
        # planned reaches the NIC time of the frames (payload + RoCE headers); ECMP never
        # beats it
        wire = wire_flows(dm._flows(plan, nbytes, 1, 0))
        nic_s = dm.QPS * wire[0].bytes * 8 / (min(plan.rdma_nic().values()) * 1e6)
        assert 2.0 * 1.01 < nic_s < 2.0 * 1.03  # 4 KiB frames: ~1.4% of headers
        assert planned["completion_s"]["median"] == pytest.approx(nic_s, rel=1e-6)
        assert ecmp["completion_s"]["min"] >= nic_s * (1 - 1e-6)
        assert planned["slowdown"]["median"] == pytest.approx(1.0, rel=0.02)
        out[topo] = ecmp
    # the structural lesson: one QP per 200G lane vs four per 800G uplink
    assert out["astral3"]["slowdown"]["median"] > out["rail3"]["slowdown"]["median"]
    assert out["astral3"]["completion_s"]["median"] > out["rail3"]["completion_s"]["median"]


def test_busiest_link_counts_qps_worth_of_bytes(plans: dict[str, Any]) -> None:
    plan = plans["astral3"]
    lane = min(ln.mbps for ln in plan.links if ln.a.startswith("lf"))
    wire = 100_000
    loads = [{"link": "x", "direction": "up", "tier": "leaf-spine", "mbps": lane,
              "bytes": int(3 * wire)},
             {"link": "y", "direction": "up", "tier": "leaf-spine", "mbps": lane,
              "bytes": int(wire)}]
    b = dm._busiest(plan, loads, wire)
    assert b["link"] == "x" and b["qps"] == pytest.approx(3.0, abs=0.01)
    share = min(plan.rdma_nic().values()) / dm.QPS
    assert b["slowdown"] == pytest.approx(max(1.0, 3 * share / lane), rel=0.01)


def test_summary_entries_carry_measured_ideal_ratio_and_quartiles() -> None:
    class FakeRun:
        def __init__(self) -> None:
            self.summary: dict[str, Any] = {}

    perm = {"measured": distribution([6.0, 4.0, 6.5]),
            "model": {"completion_s": distribution([6.0, 4.0, 6.0, 2.0]),
                      "slowdown": distribution([3.0, 2.0])},
            "slowdown": distribution([3.0, 2.0, 3.0]), "bound_s": 2.0, "hops": 3.0,
            "lost": 0}
    q = {"measured": distribution([100.0, 120.0]), "ideal": distribution([110.0, 110.0]),
         "ratio": distribution([0.91, 1.09])}
    dec = {"mode": "planned", "margin": 4.5,
           "dispatch": {"p50": q, "p99": q, "floor_ms": 3.0, "lost": 0, "plane": "native",
                        "completion_ratio": distribution([1.02, 1.04])}}
    run = FakeRun()
    dm._summary(run, {"astral3/ecmp": perm, "decode": dec})  # type: ignore[arg-type]
    e = run.summary["astral3/ecmp"]
    assert (e["measured"], e["ideal"], e["draws"], e["p25"], e["p75"]) == (6.0, 5.0, 3, 5.0,
                                                                          6.25)
    assert e["ratio"] == pytest.approx(1.2)
    d = run.summary["decode/dispatch/p99"]
    assert d["measured"] == 110.0 and d["ideal"] == 110.0 and d["ratio"] == 1.0
    assert d["draws"] == 2 and d["policy"] == "planned"
    # the evidence its finding reads: do the bytes arrive on time, and could the run keep up?
    assert d["phase_completion_ratio"]["median"] == pytest.approx(1.03)
    assert d["fidelity_margin"] == 4.5 and d["plane"] == "native"


def test_message_latencies_follow_each_qp_in_order(plans: dict[str, Any]) -> None:
    """A's one message and B's first share the NIC (half rate each); B's second then has it
    alone. Each span runs, as the replay measures it, from the first frame sent to the last
    received: the fluid time from the QP having sent the first frame to having sent all,
    plus the first frame at the NIC rate and the last frame's store-and-forward per hop."""
    from controllers.paths import PathFinder
    from scenarios.common import message_latencies
    from traffic.kernels import FlowSpec
    from traffic.roce import frame_len, segment
    from vocab.flows import sport_for_qp

    plan = plans["astral3"]
    m = 20 * 1024
    a = FlowSpec("s0g0", "s1g0", bytes=m, qp=1, sport=sport_for_qp(1), message_bytes=m,
                 messages=1)
    b = FlowSpec("s0g0", "s1g1", bytes=2 * m, qp=2, sport=sport_for_qp(2), message_bytes=m,
                 messages=2)
    rate = plan.rdma_nic()["s0g0"] * 1e6
    fr = [frame_len(op, n) for op, n in segment(m, 4096)]  # a run at the default pmtu
    w = sum(fr)
    finder = PathFinder(plan)
    cap = finder.capacity("mbps")

    def store_forward(dst: str) -> float:
        return sum(fr[-1] * 8 / (cap[h] * 1e6) for h in finder.candidates("s0g0", dst)[0])

    shared = (w - fr[0]) * 8 / (rate / 2)
    first = fr[0] * 8 / rate
    lat = message_latencies(plan, [a, b], "ecmp-fluid")
    assert lat == pytest.approx([shared + first + store_forward("s1g0"),
                                 shared + first + store_forward("s1g1"),
                                 (w - fr[0]) * 8 / rate + first + store_forward("s1g1")],
                                rel=1e-6)
    assert store_forward("s1g1") > store_forward("s1g0")  # 3 hops over 200G lanes vs 1
    from scenarios.common import message_times

    # each message ends when its QP had sent all of it: A and B's first together at half
    # the NIC each, B's second alone after them
    _lat, ends = message_times(plan, [a, b], "ecmp-fluid")
    assert ends == pytest.approx([2 * w * 8 / rate, 2 * w * 8 / rate, 3 * w * 8 / rate],
                                 rel=1e-6)
