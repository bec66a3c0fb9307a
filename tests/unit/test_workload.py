"""The MoE workload model: presets, bytes per copy, gating, routing, placement and EPLB.

Reading guide: a step routes ``tokens_per_gpu`` tokens on every GPU to ``top_k`` distinct
experts (node-limited for DeepSeek-V3), places experts on GPU slots (contiguous, or by the
EPLB-like balancer) and reports per-(src GPU, dst GPU) copies and bytes. These tests pin
the published numbers, the routing rules (distinct experts, at most M nodes, the same
distribution as a brute-force implementation of the rule), reproducibility, and what the
balancer promises (less imbalance, every expert placed, groups kept inside their node).
"""

from __future__ import annotations

import numpy as np
import pytest

from traffic import workload as wl
from traffic.token_routing import argsmallest, route_reference, route_tokens
from traffic.workload import (
    PRESETS,
    Gating,
    Placement,
    contiguous_placement,
    custom,
    eplb,
    hotset,
    imbalance,
    simulate_step,
    token_bytes,
    uniform,
    zipf,
)


# --- presets and bytes ------------------------------------------------------------------
@pytest.mark.parametrize("name, hidden, routed, shared, top_k, max_nodes", [
    ("deepseek-v3", 7168, 256, 1, 8, 4),      # arXiv:2412.19437
    ("mixtral-8x7b", 4096, 8, 0, 2, None),    # arXiv:2401.04088
    ("qwen-moe", 2048, 60, 4, 4, None),       # Qwen1.5-MoE-A2.7B config.json
])
def test_presets_carry_the_published_numbers(name: str, hidden: int, routed: int, shared: int,
                                             top_k: int, max_nodes: int | None) -> None:
    m = PRESETS[name]
    assert (m.hidden, m.routed_experts, m.shared_experts, m.top_k, m.max_nodes_per_token) == \
        (hidden, routed, shared, top_k, max_nodes)
    assert (m.dispatch_dtype, m.combine_dtype, m.scale_block) == ("fp8", "bf16", 128)
    assert m.source


def test_bytes_per_token_copy_deepseek_v3() -> None:
    m = PRESETS["deepseek-v3"]
    assert m.dispatch_bytes == 7168 + 7168 // 128 * 4 == 7392   # FP8 + one fp32 per 128
    assert m.ll_dispatch_message_bytes == 7408                  # + DeepEP's 16-byte header
    assert m.combine_bytes == m.ll_combine_message_bytes == 2 * 7168 == 14336
    assert m.copy_bytes("dispatch") == 7392 and m.copy_bytes("combine") == 14336
    with pytest.raises(ValueError):
        m.copy_bytes("backward")


def test_token_bytes_other_sizes() -> None:
    assert token_bytes(4096, "fp8") == 4096 + 32 * 4
    assert token_bytes(4096, "bf16") == 8192
    assert token_bytes(200, "fp8") == 200 + 2 * 4  # a partial block still has a scale
    bf16 = custom(hidden=1024, routed_experts=16, top_k=2, dispatch_dtype="bf16")
    assert bf16.dispatch_bytes == 2048 and bf16.ll_dispatch_message_bytes == 2064
    with pytest.raises(ValueError):
        token_bytes(1024, "fp4")


def test_custom_and_preset_validation() -> None:
    m = custom("tiny", hidden=512, routed_experts=16, top_k=4, max_nodes_per_token=2)
    assert (m.name, m.routed_experts, m.max_nodes_per_token) == ("tiny", 16, 2)
    with pytest.raises(ValueError, match="top_k"):
        custom(hidden=512, routed_experts=4, top_k=5)
    with pytest.raises(ValueError, match="unknown model preset"):
        wl.preset("gpt-moe")
    with pytest.raises(ValueError, match="unknown model preset"):
        simulate_step("gpt-moe", 1, 8)


# --- gating -----------------------------------------------------------------------------
def test_gating_distributions() -> None:
    rng = np.random.default_rng(0)
    for g in (uniform(), zipf(1.2), hotset(0.1, 0.7)):
        p = g.popularity(64, rng)
        assert p.shape == (64,) and np.all(p > 0) and p.sum() == pytest.approx(1.0)
    assert np.allclose(uniform().popularity(8), 1 / 8)
    p = zipf(1.0, shuffle=False).popularity(64)
    assert p[0] / p[-1] == pytest.approx(64.0)
    p = hotset(0.25, 0.8, shuffle=False).popularity(64)
    assert p[:16].sum() == pytest.approx(0.8) and np.allclose(p[16:], 0.2 / 48)
    with pytest.raises(ValueError):
        Gating("pareto")
    with pytest.raises(ValueError):
        hotset(0.1, 1.0)  # cold experts would never be chosen


def test_shuffle_scatters_hot_experts_reproducibly() -> None:
    a = zipf(1.0).popularity(64, np.random.default_rng(5))
    b = zipf(1.0).popularity(64, np.random.default_rng(5))
    ordered = zipf(1.0, shuffle=False).popularity(64)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, ordered)  # the hottest expert is no longer expert 0 ...
    assert np.sort(a) == pytest.approx(np.sort(ordered))  # ... but the shares are the same


# --- reproducibility and routing rules --------------------------------------------------
def test_same_seed_same_step_other_seed_differs() -> None:
    kw = dict(gating=zipf(1.0), balancer="auto")
    a = simulate_step("deepseek-v3", 8, 8, 64, seed=11, **kw)
    b = simulate_step("deepseek-v3", 8, 8, 64, seed=11, **kw)
    c = simulate_step("deepseek-v3", 8, 8, 64, seed=12, **kw)
    assert np.array_equal(a.experts, b.experts) and np.array_equal(a.slots, b.slots)
    assert np.array_equal(a.copies(), b.copies())
    assert np.array_equal(a.placement.slots, b.placement.slots)
    assert not np.array_equal(a.experts, c.experts)
    assert not np.array_equal(a.copies(), c.copies())


@pytest.mark.parametrize("model, servers, gating", [
    ("deepseek-v3", 16, uniform()),      # node-limited path
    ("deepseek-v3", 16, hotset(0.05, 0.9)),
    ("deepseek-v3", 2, zipf(1.5)),       # limit >= servers: unlimited path
    ("mixtral-8x7b", 4, zipf(2.0)),      # 2 of 8: heavy skew exercises the exact completion
    ("qwen-moe", 4, hotset(0.05, 0.95)),
])
def test_each_token_picks_top_k_distinct_experts(model: str, servers: int,
                                                 gating: Gating) -> None:
    st = simulate_step(model, servers, 8, 64, gating=gating, seed=3)
    m = st.model
    e = np.sort(st.experts.reshape(-1, m.top_k), axis=1)
    assert e.shape == (servers * 8 * 64, m.top_k)
    assert e.min() >= 0 and e.max() < m.routed_experts
    assert np.all(np.diff(e, axis=1) > 0), "a token chose the same expert twice"


def test_node_limited_routing_never_exceeds_m_nodes() -> None:
    st = simulate_step("deepseek-v3", 16, 8, 128, seed=1)  # 16 servers, limit 4
    nodes = st.nodes_per_token()
    assert nodes.max() == 4  # the limit binds (top-8 of 256 uniform would span ~7 of 16)
    bal = simulate_step("deepseek-v3", 16, 8, 128, seed=1, gating=zipf(1.0),
                        balancer="hierarchical")
    assert bal.nodes_per_token().max() <= 4
    free = simulate_step(custom(hidden=7168, routed_experts=256, top_k=8), 16, 8, 128, seed=1)
    assert free.nodes_per_token().max() > 4  # without the rule tokens do spread further


@pytest.mark.parametrize("experts, groups, max_groups, top_k, gating", [
    (32, 8, 2, 4, zipf(1.0)),        # m = 2: DeepSeek-V3's rule, scores from bounds + draws
    (32, 8, 2, 4, uniform()),        # equal popularity: every group exact from bounds
    (48, 6, 2, 6, hotset(0.2, 0.8)),  # m = 3: the general exclusion path
    (32, 8, 4, 4, zipf(1.5)),        # m = 1: group score = its best expert
    (16, None, None, 4, hotset(0.1, 0.9)),  # no limit: first-k-distinct draws + completion
])
def test_fast_routing_matches_the_brute_force_rule(experts: int, groups: int | None,
                                                   max_groups: int | None, top_k: int,
                                                   gating: Gating) -> None:
    """Same distribution as scoring every expert of every token (the rule, written plainly)."""
    p = gating.popularity(experts, np.random.default_rng(7))
    n = 60_000
    fast = route_tokens(p, n, top_k, np.random.default_rng(1), groups=groups,
                        max_groups=max_groups)
    ref = route_reference(p, n, top_k, np.random.default_rng(2), groups, max_groups)
    f_fast = np.bincount(fast.ravel(), minlength=experts) / n
    f_ref = np.bincount(ref.ravel(), minlength=experts) / n
    assert np.abs(f_fast - f_ref).max() < 0.012  # ~5 sigma at 60k tokens
    if groups:
        per = experts // groups
        g_fast = np.sort(fast // per, axis=1)
        g_ref = np.sort(ref // per, axis=1)
        span_fast = 1 + (np.diff(g_fast, axis=1) != 0).sum(axis=1)
        span_ref = 1 + (np.diff(g_ref, axis=1) != 0).sum(axis=1)
        assert span_fast.max() <= max_groups
        assert abs(span_fast.mean() - span_ref.mean()) < 0.02


def test_argsmallest_agrees_with_argsort() -> None:
    v = np.random.default_rng(0).random((500, 32)) * 1e3
    got = argsmallest(v.copy(), 5)
    want = np.argsort(v, axis=1)[:, :5]
    assert np.array_equal(np.sort(got, axis=1), np.sort(want, axis=1))


# --- placement, imbalance, EPLB ---------------------------------------------------------
def test_imbalance_definition() -> None:
    assert imbalance(np.array([5, 5, 5, 5])) == 0.0
    assert imbalance(np.array([4, 0, 0, 0])) == pytest.approx(3.0)
    assert imbalance(np.zeros(4)) == 0.0


def test_contiguous_placement_shapes() -> None:
    pl = contiguous_placement(256, 4, 8)  # 8 experts per GPU, group s on server s
    assert pl.slots.shape == (32, 8) and np.array_equal(pl.slots.ravel(), np.arange(256))
    assert all(pl.expert_servers(e) == {e // 64} for e in (0, 63, 64, 255))
    few = contiguous_placement(8, 4, 8)  # Mixtral on 32 GPUs: each expert on 4 GPUs in a row
    assert few.slots.shape == (32, 1) and list(few.replicas) == [4] * 8
    assert list(few.slots[:8, 0]) == [0, 0, 0, 0, 1, 1, 1, 1]
    uneven = contiguous_placement(60, 4, 8)  # Qwen: 60 on 32, some GPUs hold one
    assert sorted(uneven.slots[uneven.slots >= 0]) == list(range(60))
    with pytest.raises(ValueError, match="no slot"):
        Placement(1, 2, 3, np.array([[0], [1]]))


def test_zipf_skew_increases_imbalance() -> None:
    flat = simulate_step("deepseek-v3", 4, 8, 512, seed=2, gating=uniform())
    mild = simulate_step("deepseek-v3", 4, 8, 512, seed=2, gating=zipf(0.6))
    steep = simulate_step("deepseek-v3", 4, 8, 512, seed=2, gating=zipf(1.2))
    assert flat.imbalance_before < mild.imbalance_before < steep.imbalance_before
    assert flat.imbalance_after == flat.imbalance_before  # no balancer: nothing changes


@pytest.mark.parametrize("policy", ["hierarchical", "global"])
@pytest.mark.parametrize("gating", [zipf(1.0), hotset(0.05, 0.6)])
def test_eplb_reduces_imbalance_and_places_every_expert(policy: str, gating: Gating) -> None:
    st = simulate_step("deepseek-v3", 4, 8, 512, seed=4, gating=gating, balancer=policy)
    pl = st.placement
    assert pl.policy == f"eplb-{policy}"
    assert st.imbalance_after < st.imbalance_before
    assert st.realized_imbalance < st.imbalance_before
    spg = -(-256 // 32) + 1  # default: one redundant slot per GPU
    assert pl.slots.shape == (32, spg)
    assert np.all(pl.slots >= 0)  # every slot used ...
    assert pl.replicas.sum() == 32 * spg and pl.replicas.min() >= 1  # ... every expert placed
    # the hottest expert got the most replicas (hierarchical: the most within its node)
    hot = int(np.argmax(st.expert_load))
    peers = range(256) if policy == "global" else range(hot // 64 * 64, hot // 64 * 64 + 64)
    assert pl.replicas[hot] == pl.replicas[list(peers)].max() > 1


def test_eplb_slot_count_parameter_and_errors() -> None:
    load = np.arange(1, 17, dtype=float)
    pl = eplb(load, 2, 4, slots_per_gpu=3)
    assert pl.slots.shape == (8, 3) and pl.replicas.sum() == 24
    with pytest.raises(ValueError, match="cannot hold"):
        eplb(load, 2, 4, slots_per_gpu=1)
    with pytest.raises(ValueError, match="hierarchical"):
        eplb(np.ones(60), 8, 8, policy="hierarchical")  # 60 experts do not split over 8 nodes
    assert eplb(np.ones(60), 8, 8, policy="auto").policy == "eplb-global"


def test_hierarchical_keeps_each_group_on_one_server() -> None:
    """Groups = servers' expert blocks; every replica of a group's experts stays on one server."""
    st = simulate_step("deepseek-v3", 4, 8, 512, seed=9, gating=zipf(1.2),
                       balancer="hierarchical")
    pl = st.placement
    per = 256 // 4
    homes = []
    for g in range(4):
        servers = set().union(*(pl.expert_servers(e) for e in range(g * per, (g + 1) * per)))
        assert len(servers) == 1, f"group {g} spread over {servers}"
        homes.append(servers.pop())
    assert sorted(homes) == [0, 1, 2, 3]  # one group per server
    glob = simulate_step("deepseek-v3", 4, 8, 512, seed=9, gating=zipf(1.2), balancer="global")
    spans = [set().union(*(glob.placement.expert_servers(e) for e in range(g * per,
                                                                          (g + 1) * per)))
             for g in range(4)]
    assert any(len(s) > 1 for s in spans)  # the global policy does not keep that promise
    assert glob.imbalance_after <= st.imbalance_after  # ... and balances at least as well


# --- the step's matrices ----------------------------------------------------------------
def test_matrices_count_every_copy() -> None:
    st = simulate_step("deepseek-v3", 4, 8, 100, seed=5, gating=zipf(0.8), balancer="auto")
    d = st.copies("dispatch")
    assert d.shape == (32, 32) and d.sum() == 32 * 100 * 8 == st.total_copies
    assert np.array_equal(d.sum(axis=1), np.full(32, 800))  # each GPU sends k per token
    assert np.array_equal(st.copies("combine"), d.T)
    assert np.array_equal(st.bytes("dispatch"), d * 7392)
    assert np.array_equal(st.bytes("combine"), d.T * 14336)
    assert np.array_equal(st.gpu_load, d.sum(axis=0))
    pairs = list(st.pairs("dispatch"))
    assert all(p.src != p.dst and p.copies > 0 for p in pairs)
    assert sum(p.copies for p in pairs) == d.sum() - np.trace(d)
    assert sum(p.bytes for p in st.pairs("combine", include_self=True)) == d.sum() * 14336
    # a token copy's destination really holds its expert
    for s, t, c in [(0, 0, 0), (31, 99, 7), (17, 50, 3)]:
        e, gpu = st.experts[s, t, c], st.dest_gpu[s, t, c]
        assert e in st.placement.slots[gpu]
    summary = st.summary()
    assert summary["copies"] == 25600 and summary["placement"] == "eplb-hierarchical"


def test_balance_load_from_history() -> None:
    history = simulate_step("deepseek-v3", 4, 8, 256, seed=1, gating=zipf(1.0)).expert_load
    st = simulate_step("deepseek-v3", 4, 8, 256, seed=1, gating=zipf(1.0), balancer="auto",
                       balance_load=history)
    assert st.imbalance_after < st.imbalance_before
    with pytest.raises(ValueError, match="balance_load"):
        simulate_step("deepseek-v3", 4, 8, 16, balancer="auto", balance_load=np.ones(3))
