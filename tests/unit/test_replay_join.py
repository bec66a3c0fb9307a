"""The replay orchestration's pure parts: input checks, percentiles, joining agent outputs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.shell.replay import _check, _result, _spec, percentile
from vocab.flows import sport_for_qp


@pytest.fixture(scope="module")
def lab() -> SimpleNamespace:
    return SimpleNamespace(plan=build("astral3", servers=4, gpus=2, servers_per_block=2))


def flow(src: str, dst: str, qp: int, n: int = 2, size: int = 1000, **kw: object) -> FlowSpec:
    return FlowSpec(src, dst, bytes=n * size, qp=qp, sport=sport_for_qp(qp),
                    message_bytes=size, messages=n, **kw)  # type: ignore[arg-type]


def test_percentile_is_a_measured_value() -> None:
    vals = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(vals, 50) == 3.0
    assert percentile(vals, 99) == 5.0
    assert percentile(vals, 0) == 1.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_bad_flow_lists_are_refused_with_the_reason(lab: SimpleNamespace) -> None:
    with pytest.raises(ValueError, match="no host 'nobody'"):
        _check([flow("s0g0", "nobody", 1)], lab)
    with pytest.raises(ValueError, match="appears twice"):
        _check([flow("s0g0", "s2g1", 1), flow("s0g0", "s2g1", 1)], lab)
    _check([flow("s0g0", "s2g1", 1), flow("s0g0", "s2g1", 2)], lab)


def test_sender_spec_names_the_plan_addresses_and_the_nic_rate(lab: SimpleNamespace) -> None:
    spec = _spec(lab, "s0g0", [flow("s0g0", "s2g1", 5, traffic_class="decode", dscp=46)],
                 1024, None)
    dst = lab.plan.node("s2g1")
    assert spec["src_ip"] == lab.plan.node("s0g0").ip and spec["rate_mbps"] == 40.0
    (f,) = spec["flows"]
    assert (f["dst_ip"], f["dst_mac"], f["sport"], f["dscp"]) == (dst.ip, dst.mac,
                                                                  sport_for_qp(5), 46)


def test_results_join_receivers_to_flows_by_source_ip_and_qp(lab: SimpleNamespace) -> None:
    flows = [flow("s0g0", "s2g1", 1), flow("s1g0", "s2g1", 2, traffic_class="decode",
                                                 dscp=46)]
    ip0, ip1 = lab.plan.node("s0g0").ip, lab.plan.node("s1g0").ip
    t0 = 1_000_000_000_000
    received = {"s2g1": {
        "flows": {
            f"{ip0}/1": {"src_ip": ip0, "sport": sport_for_qp(1) + 64, "qp": 1, "bytes": 2000,
                         "lost": 0, "reordered": 0, "last_ns": t0 + 5_000_000},
            f"{ip1}/2": {"src_ip": ip1, "sport": sport_for_qp(2), "qp": 2, "bytes": 1000,
                         "lost": 1, "reordered": 0, "last_ns": t0 + 9_000_000},
        },
        "messages": [
            {"flow": f"{ip0}/1", "seq": 0, "bytes": 1000, "complete": True,
             "latency_ns": 2_000_000},
            {"flow": f"{ip0}/1", "seq": 1, "bytes": 1000, "complete": True,
             "latency_ns": 4_000_000},
            {"flow": f"{ip1}/2", "seq": 0, "bytes": 1000, "complete": True,
             "latency_ns": 7_000_000},
            {"flow": f"{ip1}/2", "seq": 1, "bytes": 0, "complete": False,
             "latency_ns": None},
        ]}}
    r = _result(lab, flows, {}, received, t0, "planned")
    assert r.bytes_sent == 4000 and r.bytes_received == 3000 and r.lost_packets == 1
    assert r.job_completion_s == pytest.approx(0.009)
    assert [row["fct_s"] for row in r.flows] == [pytest.approx(0.005), pytest.approx(0.009)]
    assert r.latency_us["bulk"]["count"] == 2 and r.latency_us["bulk"]["max"] == 4000.0
    assert r.latency_us["decode"] == {"count": 1, "p50": 7000.0, "p99": 7000.0,
                                      "max": 7000.0, "mean": 7000.0}
