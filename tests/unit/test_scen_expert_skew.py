"""The expert-skew scenario's pure parts: gating, per-receiver bytes, incast, the three steps."""

from __future__ import annotations

import os
from typing import Any

import pytest

from scenarios.experiments.expert_skew import (
    analyse,
    expert_skew,
    incast,
    make_steps,
    nic_bound_s,
    receive_bytes,
    skewed_gating,
)
from testbed.topologies import build
from traffic.kernels import FlowSpec


def test_skewed_gating_kinds_and_bad_kind() -> None:
    assert skewed_gating("zipf", 1.2, 0.1, 0.5).exponent == 1.2
    g = skewed_gating("hotset", 1.0, 0.1, 0.6)
    assert (g.kind, g.hot_fraction, g.hot_share) == ("hotset", 0.1, 0.6)
    with pytest.raises(ValueError, match="--skew"):
        skewed_gating("pareto", 1.0, 0.1, 0.5)


def test_receive_bytes_lists_every_host_and_rejects_strangers() -> None:
    flows = [FlowSpec.make("a", "b", 100, 0), FlowSpec.make("c", "b", 50, 1),
             FlowSpec.make("b", "c", 7, 2)]
    assert receive_bytes(flows, ["a", "b", "c"]) == {"a": 0, "b": 150, "c": 7}
    with pytest.raises(ValueError, match="'z'"):
        receive_bytes([FlowSpec.make("a", "z", 1, 0)], ["a", "b"])


def test_incast_ratio_and_nic_bound() -> None:
    assert incast({"a": 3.0, "b": 1.0}) == ("a", 1.5)
    assert incast({"a": 0.0, "b": 0.0})[1] == 1.0
    with pytest.raises(ValueError):
        incast({})
    # 1 MB into a 4 Mb/s NIC takes 2 s; the slower of two hosts decides
    assert nic_bound_s({"a": 1_000_000, "b": 500_000}, {"a": 4.0, "b": 1.0}) == pytest.approx(4.0)


def test_three_steps_show_skew_incast_and_eplb_relief() -> None:
    plan = build("astral3", servers=2, gpus=4, servers_per_block=2, scale=2e-5)
    steps = make_steps("deepseek-v3", 2, 4, 64, skewed_gating("zipf", 1.0, 0.05, 0.5), 1)
    info = {case: analyse(plan, step) for case, step in steps.items()}
    u, s, e = info["uniform"], info["skewed"], info["skewed+eplb"]
    # the same tokens routed three times: same seed, same volume of token copies
    assert steps["uniform"].total_copies == steps["skewed"].total_copies
    assert s["realized_imbalance"] > 3 * u["realized_imbalance"]
    assert e["imbalance_after"] < 0.2 * s["imbalance_before"]
    assert s["incast"] > 1.5 > u["incast"] and e["incast"] < 1.2
    # the hierarchical kernel sends per destination server: no per-GPU incast on the NICs
    assert s["incast_hb"] < 1.1
    for i in info.values():
        assert sum(i["rx_bytes"].values()) == i["wire_bytes"] > 0
        # the fluid model cannot beat the hottest receiver's NIC, and here that NIC decides
        assert i["model_s"] >= i["hot_nic_bound_s"] * (1 - 1e-9)
        assert i["hot_nic_bound_s"] == pytest.approx(i["host_rx_bound_s"])
    assert s["model_s"] > 1.4 * u["model_s"]


def test_bad_parameters_fail_before_any_fabric(tmp_path: str) -> None:
    with pytest.raises(ValueError, match="--gpus 12 is 3 servers of 4 GPUs; astral3 pairs"):
        expert_skew(gpus=12, output=str(tmp_path))
    with pytest.raises(ValueError, match="--gpus 10 does not split evenly over servers of 4"):
        expert_skew(gpus=10, output=str(tmp_path))
    with pytest.raises(ValueError, match="--skew"):
        expert_skew.resolve(False, {"skew": "pareto"})
    with pytest.raises(ValueError, match="unknown parameter"):
        expert_skew.resolve(True, {"servers": 4})
    assert not os.listdir(tmp_path)


def test_draws_shift_source_ports_and_keep_bytes() -> None:
    plan = build("astral3", servers=2, gpus=4, servers_per_block=2, scale=2e-5)
    step = make_steps("deepseek-v3", 2, 4, 16, skewed_gating("zipf", 1.0, 0.05, 0.5), 1)
    a = analyse(plan, step["skewed"])
    b = analyse(plan, step["skewed"], qp_offset=1000)
    assert [(f.src, f.dst, f.bytes) for f in a["flows"]] == \
        [(f.src, f.dst, f.bytes) for f in b["flows"]]
    assert not {f.sport for f in a["flows"]} & {f.sport for f in b["flows"]}
    assert a["rx_bytes"] == b["rx_bytes"]


def test_a_run_reports_distributions_beside_the_model(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from scen_fakes import check_entry, install, read_json, read_text

    from scenarios.experiments import expert_skew as es

    labs = install(monkeypatch, es)
    out = os.path.join(str(tmp_path), "run")
    res = expert_skew(quick=True, output=out, log=lambda _m: None, model_draws=8,
                      tokens_per_gpu=16)
    n = expert_skew.resolve(True, {})["draws"]
    assert n >= 3 and len(labs[0].replays) == 3 * n
    # every draw is its own gating seed: the hottest GPU's bytes are not all alike
    summary = read_json(out, "summary.json")
    for case in es.CASES:
        check_entry(summary[case], draws=n)
        assert summary[case]["model"]["draws"] == 8
        assert summary[case]["bound"] > 0 and summary[case]["imbalance"]["draws"] == n
    assert [r["case"] for r in res.rows] == list(es.CASES)
    report = read_text(out, "REPORT.md")
    assert f"N={n}" in report and "N=8" in report
    for png in ("rx_bytes.png", "completion.png"):
        assert os.path.getsize(os.path.join(out, png)) > 1000 and f"]({png})" in report
    cases = read_json(out, "cases.json")
    assert [d["seed"] for d in cases["skewed"]["per_draw"]] == list(range(1, n + 1))
