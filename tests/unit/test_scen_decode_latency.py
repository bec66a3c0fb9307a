"""decode-latency without a fabric: the model's message latencies per case, and a run on the
fake replay (scen_fakes) whose rows, report, plots and summary.json are checked."""

from __future__ import annotations

import os
from typing import Any

import pytest
from scen_fakes import check_entry, install, read_json, read_text

from scenarios.experiments import decode_latency as dl
from testbed.topologies import build
from traffic.workload import Phase


def test_model_case_gives_percentiles_over_draws() -> None:
    p = dl.decode_latency.resolve(True, {})
    plan = build("astral3", servers=2, gpus=2, scale=p["scale"])
    alone = dl.model_case(plan, p, "alone", "dispatch", 6, 1.0)
    bg = dl.model_case(plan, p, "background", "dispatch", 6, 1.0)
    for m in (alone, bg):
        assert m["p50_us"]["draws"] == m["p99_us"]["draws"] == 6
        assert m["p50_us"]["median"] <= m["p99_us"]["median"]
    # sharing the NICs and lanes fairly with the bulk flows slows decode, in the model too
    assert bg["p99_us"]["median"] >= alone["p99_us"]["median"]
    a, b = dl.decode_flows(plan, p, 0), dl.decode_flows(plan, p, 1)
    assert not {f.sport for f in a["dispatch"]} & {f.sport for f in b["dispatch"]}


def test_a_run_reports_distributions_beside_the_model(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, dl)
    out = os.path.join(str(tmp_path), "run")
    res = dl.decode_latency(quick=True, output=out, log=lambda _m: None, model_draws=4)
    p = dl.decode_latency.resolve(True, {})
    n = p["draws"]
    want = {(e, c, ph) for e in p["ep_sizes"] for ph in Phase
            for c in (dl.CASES if e in p["background_eps"] else ("alone",))}
    assert {(r["ep"], r["case"], r["phase"]) for r in res.rows} == want
    summary = read_json(out, "summary.json")
    for e, c, ph in want:
        for q in ("p50", "p99"):
            check_entry(summary[f"EP{e}/{c}/{ph}/{q}"], draws=n)
    assert len(summary["growth"]["dispatch"]["lab_p99"]) == len(p["ep_sizes"])
    report = read_text(out, "REPORT.md")
    assert f"N={n}" in report and "### 1. Decode latency growth with EP size" in report
    for png in ("latency_cdf.png", "latency_vs_ep.png", "p99_by_case.png"):
        assert os.path.getsize(os.path.join(out, png)) > 1000 and f"]({png})" in report
    lat = read_json(out, "latency.json")["messages"]
    assert all(len(lat[f"{e}/{c}/{ph}"]) == n for e, c, ph in want)
