"""lb-compare without a fabric: hash draws, the model's distribution beside them, and a whole
run on the fake replay (scen_fakes) whose report, plots and summary.json are checked."""

from __future__ import annotations

import os
from typing import Any

import pytest
from scen_fakes import check_entry, install, read_json, read_text

from scenarios.common import DRAW_QP_STRIDE, model_draws, shift_qps
from scenarios.experiments import lb_compare as lc
from testbed.topologies import build
from vocab.plan import WiringPlan


@pytest.fixture(scope="module")
def plan() -> Any:
    return build("astral3", servers=2, gpus=4, scale=1e-5)


def test_draws_use_other_source_ports_on_the_same_pairs(plan: WiringPlan) -> None:
    a = lc._flows(plan, "permutation", 1.0, 2, 1, qp_base=0)
    b = lc._flows(plan, "permutation", 1.0, 2, 1, qp_base=DRAW_QP_STRIDE)
    assert [(f.src, f.dst, f.bytes) for f in a] == [(f.src, f.dst, f.bytes) for f in b]
    assert not {f.sport for f in a} & {f.sport for f in b}
    c = shift_qps(a, DRAW_QP_STRIDE)
    assert [f.sport for f in c] == [f.sport for f in b]
    assert lc.draws_for("ecmp", 3) == lc.draws_for("adaptive", 3) == 3
    assert lc.draws_for("planned", 3) == 1


def test_model_distribution_and_lane_skew(plan: WiringPlan) -> None:
    flows = lc._flows(plan, "permutation", 1.5, 2, 1, 0)
    ecmp = model_draws(plan, flows, "ecmp", 40)
    planned = model_draws(plan, flows, "planned", 40)
    assert len(ecmp) == 40 and len(planned) == 1
    assert 1.5 < planned[0].completion_s < 1.5 * 1.07  # frame bytes: headers and ICRC
    assert lc.model_lane_skew(planned[0]) == pytest.approx(1.0)
    times = [m.completion_s for m in ecmp]
    assert min(times) >= planned[0].completion_s * 0.99 and len(set(round(t, 3) for t in times)) > 1
    assert max(lc.model_lane_skew(m) for m in ecmp) > 1.5
    rows = [{"tier": "leaf-spine", "bytes": b} for b in (1, 1, 2, 4)] + \
        [{"tier": "gpu-leaf", "bytes": 99}]
    assert lc.lane_skew(rows) == pytest.approx(2.0)
    assert lc.lane_skew([]) is None


def test_a_run_reports_distributions_beside_the_model(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    labs = install(monkeypatch, lc)
    out = os.path.join(str(tmp_path), "run")
    res = lc.lb_compare(quick=True, output=out, log=lambda _m: None, model_draws=30,
                        modes=["ecmp", "planned", "adaptive"])
    p = lc.lb_compare.resolve(True, {})
    n = p["ecmp_samples"]
    assert n >= 3
    # ECMP and adaptive once per draw, planned once, per workload
    assert len(labs[0].replays) == len(p["workloads"]) * (2 * n + 1)
    summary = read_json(out, "summary.json")
    for wl in p["workloads"]:
        for mode in ("ecmp", "adaptive"):
            e = summary[f"{wl}/{mode}"]
            check_entry(e, draws=n)
            assert e["model"]["draws"] == 30 and e["randomized"]
        pl = summary[f"{wl}/planned"]
        check_entry(pl, draws=1)
        assert not pl["randomized"] and pl["model"]["draws"] == 1
        assert pl["bound"] > 0 and pl["vs_bound"] >= 0.99
    rows = {(r["workload"], r["mode"]): r for r in res.rows}
    assert rows[("permutation", "ecmp")]["draws"] == n
    assert rows[("permutation", "ecmp")]["p25_s"] <= rows[("permutation", "ecmp")][
        "completion_s"] <= rows[("permutation", "ecmp")]["p75_s"]
    report = read_text(out, "REPORT.md")
    assert f"N={n}" in report and "deterministic, 1 run" in report
    assert "### permutation: ECMP collision penalty" in report
    for png in ("completion.png", "spine_load.png", "lane_heatmap.png"):
        assert os.path.getsize(os.path.join(out, png)) > 1000 and f"]({png})" in report
    draws = read_json(out, "draws.json")
    assert len(draws["permutation/ecmp"]["per_draw"]) == n


def test_host_side_policies_stand_beside_their_published_shapes(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every policy run gets a row beside what its source published, and the host-side
    ones say where the lab differs; spray's fluid model is at the bound."""
    from controllers import policies

    install(monkeypatch, lc)
    out = os.path.join(str(tmp_path), "run")
    modes = ["ecmp", "spray", "qp-scaling", "flowlet", "plb"]
    lc.lb_compare(quick=True, output=out, log=lambda _m: None, model_draws=10, modes=modes,
                  workloads=["alltoall"], ecmp_samples=1)
    report = read_text(out, "REPORT.md")
    table = report[report.index("| workload | policy | measured / bound"):]
    for mode in modes:
        pol = policies.POLICIES.get(mode)
        row = next(line for line in table.splitlines() if line.startswith(f"| alltoall | {mode} |"))
        assert pol.published[:40] in row and pol.source in row, mode
        if pol.differs:
            assert f"* **{mode}**: {pol.differs}" in report
    spray = read_json(out, "summary.json")["alltoall/spray"]
    assert spray["model"]["median"] / spray["bound"] < 1.1
