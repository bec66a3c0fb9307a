"""topology-compare without a fabric: draws of the step, the model's distribution per design,
and a run on the fake replay (scen_fakes) whose report, plots and summary.json are checked."""

from __future__ import annotations

import os
from typing import Any

import pytest
from scen_fakes import check_entry, install, read_json, read_text

from scenarios.experiments import topology_compare as tc
from testbed.topologies import build, build_for_gpus


def test_draws_shift_source_ports_and_the_model_spreads() -> None:
    p = tc.topology_compare.resolve(True, {})
    plan = build_for_gpus("astral3", p["gpus"], p["gpus_per_server"], scale=p["scale"])
    _t, a = tc._phase_flows("flat", p, plan, 16, 0)
    _t, b = tc._phase_flows("flat", p, plan, 16, 1)
    assert {(f.src, f.dst) for f in a["dispatch"]} == {(f.src, f.dst) for f in b["dispatch"]}
    assert not {f.sport for f in a["dispatch"]} & {f.sport for f in b["dispatch"]}
    m = tc.model_step("flat", p, plan, 16, 12)
    assert m["completion_s"]["draws"] == 12 and m["policy"] == "ecmp"
    assert m["completion_s"]["min"] >= m["bound_s"]["min"] * 0.999


def test_a_run_reports_distributions_beside_the_model(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    labs = install(monkeypatch, tc)
    out = os.path.join(str(tmp_path), "run")
    res = tc.topology_compare(quick=True, output=out, log=lambda _m: None, model_draws=8)
    p = tc.topology_compare.resolve(True, {})
    n = p["draws"]
    assert n >= 3 and len(labs) == len(p["designs"])
    assert all(len(lab.replays) == 2 * n for lab in labs)  # dispatch and combine per draw
    summary = read_json(out, "summary.json")
    for d in p["designs"]:
        e = summary[f"{d}/flat"]
        check_entry(e, draws=n)
        assert e["model"]["draws"] == 8 and e["hops_deterministic"] and e["bound"] > 0
    rows = {r["design"]: r for r in res.rows}
    assert rows["astral3"]["hops"] < rows["rail3"]["hops"]
    report = read_text(out, "REPORT.md")
    assert f"N={n}" in report and "N=8" in report and "## Cost model" in report
    for png in ("completion.png", "tier_load_heatmap.png"):
        assert os.path.getsize(os.path.join(out, png)) > 1000 and f"]({png})" in report


def test_idle_candidates_counts_links_ecmp_could_use_but_did_not() -> None:
    from scenarios.common import fabric_links

    p = tc.topology_compare.resolve(True, {})
    plan = build("fattree", servers=2, gpus=4, scale=1e-5)
    traffic, _ = tc._phase_flows("flat", p, plan, 16, 0)
    loads = [{"link": ln.name, "direction": d, "tier": f"{plan.node(ln.a).tier}-"
              f"{plan.node(ln.b).tier}", "bytes": 0 if ln.b.endswith("0") else 1000}
             for ln in fabric_links(plan) for d in ("up", "down")]
    idle = tc.idle_candidates(plan, traffic.flows, loads)
    assert idle["agg-core up"]["candidates"] > 0
    assert 0 < idle["agg-core up"]["idle"] < idle["agg-core up"]["candidates"]
    busy = [dict(r, bytes=1000) for r in loads]
    assert all(v["idle"] == 0 for v in tc.idle_candidates(plan, traffic.flows, busy).values())
