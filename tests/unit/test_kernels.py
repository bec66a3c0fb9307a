"""Kernel traffic models: what the NICs and NVLink carry for one MoE step.

Reading guide: ``high_bandwidth`` (prefill/training, DeepEP normal kernels) sends each
token once per destination server over a rail-aligned RDMA flow and forwards it over
NVLink; ``low_latency`` (decode) sends one 7,408-byte message per token copy straight to
the expert's GPU; ``flat_all_to_all`` sends equal bytes to every peer. These tests recount
every byte independently with plain loops (conservation, deduplication), check the rail
and message-size rules, and feed the flows to the controller's own parser on a real plan.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest

from testbed.topologies import build
from traffic.kernels import (
    TRAFFIC_CLASSES,
    Cluster,
    FlowSpec,
    KernelTraffic,
    controller_body,
    flat_all_to_all,
    high_bandwidth,
    low_latency,
)
from traffic.workload import StepTraffic, simulate_step, zipf
from vocab.flows import parse_flows, sport_for_qp
from vocab.plan import WiringPlan


@pytest.fixture(scope="module")
def plan() -> WiringPlan:
    return build("astral3", servers=4, gpus=8)


@pytest.fixture(scope="module")
def step() -> StepTraffic:
    """DeepSeek-V3 on 4 servers x 8 GPUs, skewed and balanced: replicas make it interesting."""
    return simulate_step("deepseek-v3", 4, 8, 96, seed=21, gating=zipf(1.0), balancer="auto")


def _loc(plan: WiringPlan, name: str) -> tuple[int, int]:
    node = plan.node(name)
    return node.loc["server"], node.loc["gpu"]


# --- FlowSpec ---------------------------------------------------------------------------
def test_flowspec_controller_dict_and_checks() -> None:
    f = FlowSpec("s0g1", "s2g1", bytes=7408 * 3, qp=17, sport=sport_for_qp(17),
                 traffic_class="decode", dscp=46, message_bytes=7408, messages=3)
    assert f.to_controller() == {"src": "s0g1", "dst": "s2g1", "sport": 49169, "dport": 4791,
                                 "proto": "udp", "bytes": 22224, "qp": 17}
    assert f.key == ("s0g1", "s2g1", "udp", 49169, 4791)
    with pytest.raises(ValueError, match="sport"):
        FlowSpec("s0g1", "s2g1", bytes=1, qp=17, sport=50000, message_bytes=1, messages=1)
    with pytest.raises(ValueError, match="messages"):
        FlowSpec("s0g1", "s2g1", bytes=10, qp=1, sport=sport_for_qp(1), message_bytes=4,
                 messages=2)
    with pytest.raises(ValueError, match="itself"):
        FlowSpec("s0g1", "s0g1", bytes=0, qp=1, sport=sport_for_qp(1))
    assert TRAFFIC_CLASSES == {"bulk": 26, "decode": 46}


def test_result_unpacks_like_a_tuple(step: StepTraffic) -> None:
    result = high_bandwidth(step)
    assert isinstance(result, KernelTraffic)
    flows, legs = result
    assert flows is result.flows and legs is result.nvlink_legs


# --- high-bandwidth ---------------------------------------------------------------------
def _recount_hierarchical(step: StepTraffic) -> tuple[Counter, Counter, Counter]:
    """Plain loops: RDMA tokens per (src rank, dst server), NVLink tokens, delivery paths."""
    P = step.gpus_per_server
    rdma: Counter = Counter()
    nvl: Counter = Counter()
    paths: Counter = Counter()
    for r in range(step.gpus):
        s, i = divmod(r, P)
        for t in range(step.tokens_per_gpu):
            gpus = set(step.dest_gpu[r, t].tolist())
            for srv in {g // P for g in gpus} - {s}:
                rdma[(r, srv)] += 1
            for g in gpus:
                srv, j = divmod(g, P)
                if j != i:
                    nvl[(srv, i, j)] += 1
                paths[("local" if j == i else "nvlink") if srv == s
                      else ("rdma" if j == i else "rdma+nvlink")] += 1
    return rdma, nvl, paths


def test_high_bandwidth_is_rail_aligned_and_dedups(plan: WiringPlan,
                                                   step: StepTraffic) -> None:
    flows, legs = high_bandwidth(step, plan)
    rdma, nvl, paths = _recount_hierarchical(step)
    sent: Counter = Counter()
    for f in flows:
        (s, i), (t, j) = _loc(plan, f.src), _loc(plan, f.dst)
        assert i == j and s != t, f"{f.src}->{f.dst} is not rail-aligned inter-server"
        if f.phase == "dispatch":
            assert f.bytes % 7392 == 0
            sent[(s * 8 + i, t)] += f.bytes // 7392
    assert sent == rdma  # each token once per destination server, however many experts there
    copies_remote = sum(int((step.dest_gpu[r] // 8 != r // 8).sum()) for r in range(32))
    assert sum(rdma.values()) < copies_remote  # dedup really removed copies here
    got_legs = Counter({(g.server, g.src_gpu, g.dst_gpu): g.tokens
                        for g in legs if g.phase == "dispatch"})
    assert got_legs == nvl
    combine_legs = Counter({(g.server, g.dst_gpu, g.src_gpu): g.tokens
                            for g in legs if g.phase == "combine"})
    assert combine_legs == nvl  # combine reverses every leg
    acc = high_bandwidth(step, plan).accounting["dispatch"]
    assert {k: acc[k] for k in paths} == dict(paths)


def test_high_bandwidth_conserves_bytes(step: StepTraffic) -> None:
    kt = high_bandwidth(step)
    for phase, per in (("dispatch", 7392), ("combine", 14336)):
        acc = kt.accounting[phase]
        delivered = acc["local"] + acc["nvlink"] + acc["rdma"] + acc["rdma+nvlink"]
        assert delivered + acc["deduplicated"] == acc["copies"] == step.total_copies
        assert kt.wire_bytes(phase) == acc["rdma_transfers"] * per
        assert kt.nvlink_bytes(phase) == acc["nvlink_transfers"] * per
        assert kt.local_bytes[phase] == acc["local"] * per
        # every remote delivery rode exactly one RDMA transfer; forwarded ones one NVLink leg
        assert acc["nvlink_transfers"] == acc["nvlink"] + acc["rdma+nvlink"]
        assert acc["rdma_transfers"] <= acc["rdma"] + acc["rdma+nvlink"]


def test_high_bandwidth_qps_and_message_sizes() -> None:
    st = simulate_step("deepseek-v3", 4, 8, 4096, seed=2)  # prefill-sized batch
    flows, _ = high_bandwidth(st, qps_per_peer=4)
    by_pair = defaultdict(list)
    for f in flows:
        by_pair[(f.src, f.dst, f.phase)].append(f)
    assert all(len(v) == 4 for v in by_pair.values())
    for (_, _, phase), v in by_pair.items():
        assert len({f.qp for f in v}) == 4 and len({f.sport for f in v}) == 4
        sizes = [f.bytes for f in v]
        assert max(sizes) - min(sizes) <= st.model.copy_bytes(phase)  # split by whole tokens
    d = [f for f in flows if f.phase == "dispatch"]
    assert {f.message_bytes for f in d} == {1_048_576 // 7392 * 7392}  # ~1 MB, whole tokens
    assert all(f.messages == -(-f.bytes // f.message_bytes) > 1 for f in d)
    small = high_bandwidth(st, message_bytes=32 * 7392, phases=("dispatch",))
    assert {f.message_bytes for f in small.flows} == {32 * 7392}  # DeepEP-sized chunks
    assert all(f.traffic_class == "bulk" and f.dscp == 26 and f.start == 0.0 for f in flows)


# --- low-latency ------------------------------------------------------------------------
def test_low_latency_one_message_per_copy(plan: WiringPlan, step: StepTraffic) -> None:
    kt = low_latency(step, plan)
    P = 8
    for phase, size in (("dispatch", 7408), ("combine", 14336)):
        flows = [f for f in kt.flows if f.phase == phase]
        legs = [g for g in kt.nvlink_legs if g.phase == phase]
        assert {f.message_bytes for f in flows} == {size}
        assert all(f.bytes == f.messages * size for f in flows)
        assert all(f.start == 0.0 and f.traffic_class == "decode" and f.dscp == 46
                   for f in flows)
        acc = kt.accounting[phase]
        local = sum(int((step.dest_gpu[r] == r).sum()) for r in range(step.gpus))
        assert acc["local"] == local
        # conservation: messages on the wire + NVLink copies + local copies = token copies
        assert sum(f.messages for f in flows) + sum(g.tokens for g in legs) + local \
            == step.total_copies
        assert kt.wire_bytes(phase) == acc["network"] * size
        assert all(_loc(plan, f.src)[0] != _loc(plan, f.dst)[0] for f in flows)
        assert all(g.bytes == g.tokens * size for g in legs)
    dispatch = [f for f in kt.flows if f.phase == "dispatch"]
    assert any(_loc(plan, f.src)[1] != _loc(plan, f.dst)[1] for f in dispatch)  # cross-rail
    # per (src, dst) pair the messages equal the copies that pair exchanges
    per_pair: Counter = Counter()
    for f in dispatch:
        (s, i), (t, j) = _loc(plan, f.src), _loc(plan, f.dst)
        per_pair[(s * P + i, t * P + j)] += f.messages
    c = step.copies("dispatch")
    assert all(per_pair[(a, b)] == c[a, b] for a in range(32) for b in range(32)
               if a // P != b // P)


def test_low_latency_qp_per_local_expert_and_fabric_mode(step: StepTraffic) -> None:
    spg = step.placement.slots_per_gpu
    kt = low_latency(step, phases=("dispatch",))
    pairs = defaultdict(set)
    for f in kt.flows:
        pairs[(f.src, f.dst)].add(f.qp)
    assert max(len(q) for q in pairs.values()) > 1  # several local experts -> several QPs
    assert all(len(q) <= spg for q in pairs.values())
    single = low_latency(step, phases=("dispatch",), qp_per_expert=False)
    assert all(n == 1 for n in Counter((f.src, f.dst) for f in single.flows).values())
    assert single.wire_bytes() == kt.wire_bytes()
    fabric = low_latency(step, intra_server="fabric")
    assert not fabric.nvlink_legs
    acc = fabric.accounting["dispatch"]
    assert acc["network"] + acc["local"] == step.total_copies and acc["nvlink"] == 0


# --- flat all-to-all --------------------------------------------------------------------
def test_flat_all_to_all_equal_bytes_and_conservation(plan: WiringPlan,
                                                      step: StepTraffic) -> None:
    kt = flat_all_to_all(step, plan)
    for phase in ("dispatch", "combine"):
        to_peer: dict[tuple[int, int], int] = defaultdict(int)
        for f in kt.flows:
            if f.phase == phase:
                (s, i), (t, j) = _loc(plan, f.src), _loc(plan, f.dst)
                to_peer[(s * 8 + i, t * 8 + j)] += f.bytes
        for g in kt.nvlink_legs:
            if g.phase == phase:
                to_peer[(g.server * 8 + g.src_gpu, g.server * 8 + g.dst_gpu)] += g.bytes
        for r in range(32):
            shares = [to_peer[(r, d)] for d in range(32) if d != r]
            assert max(shares) - min(shares) <= 1  # equal bytes to every peer
        acc = kt.accounting[phase]
        assert acc["network"] + acc["nvlink"] + acc["local"] == acc["bytes"]
        assert kt.wire_bytes(phase) == acc["network"]
        assert kt.nvlink_bytes(phase) == acc["nvlink"]
        per = step.model.copy_bytes(phase)
        assert acc["bytes"] == step.total_copies * per  # the same volume as the MoE step


# --- the controller ---------------------------------------------------------------------
@pytest.mark.parametrize("model", [high_bandwidth, low_latency, flat_all_to_all])
def test_flows_pass_the_controller_parser(plan: WiringPlan, step: StepTraffic,
                                          model: Callable[..., KernelTraffic]) -> None:
    kt = model(step, plan)
    body = kt.to_controller()
    parsed = parse_flows(body, plan)
    assert len(parsed) == len(body["flows"]) > 0
    assert sum(f.bytes for f in parsed) == kt.wire_bytes()
    for f in parsed:
        assert f.dport == 4791 and f.proto == "udp" and f.sport == sport_for_qp(f.qp)
    one_phase = [f.to_controller() for f in kt.flows if f.phase == "dispatch"]
    assert len(parse_flows({"flows": one_phase}, plan)) == len(one_phase)  # no merging needed


def test_controller_body_merges_shared_five_tuples() -> None:
    a = FlowSpec("s0g0", "s1g0", bytes=10, qp=3, sport=sport_for_qp(3), message_bytes=10,
                 messages=1)
    b = FlowSpec("s0g0", "s1g0", bytes=5, qp=3, sport=sport_for_qp(3), message_bytes=5,
                 messages=1, phase="combine")
    body = controller_body([a, b], replace=False)
    assert body == {"flows": [{**a.to_controller(), "bytes": 15}], "replace": False}


def test_plan_shape_must_match_and_railonly_names(step: StepTraffic) -> None:
    with pytest.raises(ValueError, match="servers"):
        low_latency(step, build("astral3", servers=2, gpus=8))
    rail = build("railonly", servers=4, gpus=8)
    cluster = Cluster.from_plan(rail)
    assert cluster.host(9) == "s1g1" and len(cluster.hosts) == 32
    kt = low_latency(step, rail)
    assert parse_flows(kt.to_controller(), rail)


def test_decode_step_at_256_gpus_runtime() -> None:
    """DeepSeek-V3 decode (128 tokens/GPU) at 32 servers x 8 GPUs: printed, not asserted."""
    t0 = time.perf_counter()
    st = simulate_step("deepseek-v3", 32, 8, 128, seed=0)
    t1 = time.perf_counter()
    kt = low_latency(st)
    t2 = time.perf_counter()
    print(f"\nDeepSeek-V3 decode, 256 GPUs x 128 tokens x top-8: workload {t1 - t0:.3f} s, "
          f"low-latency flows {t2 - t1:.3f} s ({len(kt.flows)} flows)")
    assert st.nodes_per_token().max() <= 4
    acc = kt.accounting["dispatch"]
    assert acc["network"] + acc["nvlink"] + acc["local"] == 256 * 128 * 8
