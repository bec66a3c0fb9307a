"""The paper-shapes scenario without a fabric: published constants, arithmetic, the table."""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
from typing import Any

import pytest

from scenarios import base
from scenarios.experiments import SCENARIOS
from scenarios.experiments.paper_shapes import (
    _check_params,
    ecmp_model,
    eplb_imbalance,
    overlap,
    paper_shapes,
    position,
    publish,
    tiers,
)
from scenarios.paper_shapes_table import (
    PUBLISHED,
    ROWS,
    balls_into_bins,
    build_rows,
    flow_throughput,
    paired_growth,
)
from testbed.topologies import build, build_for_gpus


# --- published constants -----------------------------------------------------------------------
def test_every_published_figure_has_its_source() -> None:
    assert set(PUBLISHED) == {"ecmp", "deepep", "eplb", "railonly", "hops", "cost"}
    for key, pub in PUBLISHED.items():
        assert len(pub["source"]) > 60, key  # says who and what, not just a name
        assert pub["short"] and pub["text"], key
        assert "value" in pub, key


def test_published_values_are_the_sources_numbers() -> None:
    dp = PUBLISHED["deepep"]
    assert dp["us"] == {8: 77, 16: 118, 32: 155}
    assert dp["value"][16] == pytest.approx(118 / 77) and dp["value"][32] == pytest.approx(155 / 77)
    assert "legacy.md" in dp["source"]
    assert PUBLISHED["railonly"]["value"] == (1.082, 1.112)
    assert "2307.12169" in PUBLISHED["railonly"]["source"]
    lo, hi = PUBLISHED["ecmp"]["value"]
    assert lo == pytest.approx(0.96 / 2.13, abs=0.005)  # Hedera: 96% of optimal, +113% over ECMP
    assert hi == pytest.approx(1 - 1 / math.e)
    for who in ("Hedera", "NSDI 2010", "C4", "2406.04594"):
        assert who in PUBLISHED["ecmp"]["source"]
    assert PUBLISHED["hops"]["value"] == pytest.approx(3 / 5)
    # no number is invented where the source gives none
    assert PUBLISHED["eplb"]["value"] is None and PUBLISHED["cost"]["value"] is None


# --- arithmetic ----------------------------------------------------------------------------------
def test_balls_into_bins() -> None:
    assert balls_into_bins(1) == 1.0
    assert balls_into_bins(4) == pytest.approx(1 - 0.75 ** 4)
    assert balls_into_bins(10**6) == pytest.approx(1 - 1 / math.e, abs=1e-6)
    with pytest.raises(ValueError):
        balls_into_bins(0)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_balls_into_bins_is_also_the_mean_flow_share(n: int) -> None:
    """Every way to hash n equal flows onto n paths: mean over flows of 1/(flows on its path)
    averages to the share of paths used (the docstring's claim, enumerated exactly)."""
    total = 0.0
    for assign in itertools.product(range(n), repeat=n):
        load = [assign.count(b) for b in range(n)]
        total += sum(1 / load[b] for b in assign) / n
    assert total / n ** n == pytest.approx(balls_into_bins(n))


def test_flow_throughput() -> None:
    assert flow_throughput([2.0, 4.0], [2.0, 2.0]) == pytest.approx(0.75)
    assert flow_throughput([None, 2.0], [2.0, 2.0]) == pytest.approx(0.5)  # unfinished = 0
    with pytest.raises(ValueError):
        flow_throughput([1.0], [1.0, 1.0])
    with pytest.raises(ValueError):
        flow_throughput([], [])


def test_paired_growth_pairs_by_draw() -> None:
    assert paired_growth([1.0, 2.0], [1.5, 5.0]) == [1.5, 2.5]
    assert paired_growth([1.0, 0.0], [2.0, 3.0]) == [2.0]  # no growth from a zero base
    assert paired_growth([1.0, 1.0, 1.0], [2.0]) == [2.0]  # only draws both sizes have


def test_position_and_overlap() -> None:
    d = {"p25": 1.0, "p75": 2.0, "median": 1.5, "draws": 4}
    assert [position(v, d) for v in (0.5, 1.5, 2.5)] == ["below", "inside", "above"]
    assert position(None, d) == "n/a" and position(1.0, None) == "n/a"
    assert overlap(d, {"p25": 1.9, "p75": 3.0}) and not overlap(d, {"p25": 2.1, "p75": 3.0})


# --- the table from fake measurements --------------------------------------------------------
def fake_measurements(skip_ep32: bool = False) -> dict[str, Any]:
    lab_ep = {8: [1.0, 1.0, 1.0], 16: [1.4, 1.5, 1.6]}
    if not skip_ep32:
        lab_ep[32] = [1.9, 2.0, 2.1]
    return {
        "ecmp": {"lab": [0.5, 0.6, 0.7, 0.6], "model": [0.55, 0.6, 0.65] * 10,
                 "lab_job": [0.5] * 4, "model_job": [0.33] * 30, "planned_lab": 0.95,
                 "paths": 4, "ideal_fct": [2.0], "bound_s": 2.0},
        "ep": {"model": {8: [1.0] * 5, 16: [1.5] * 5, 32: [1.9] * 5}, "lab": lab_ep,
               "skipped": {32: "guard margin 0.80 < 1 at EP32 here"} if skip_ep32 else {}},
        "eplb": {"before": [3.8, 4.0, 3.9], "after": [1.4, 1.5, 1.3],
                 "expected": [1.38, 1.45, 1.3]},
        "relay": {"lab": [1.01, 1.03], "model": 1.0},
        "tiers": {"lab_hops": (3, 5), "model_hops": (3, 5), "lab_cost": (66.0, 100.0),
                  "model_cost": (149.0, 226.0), "lab_gpus": 8, "paper_gpus": 65536},
    }


def test_rows_from_fake_measurements() -> None:
    rows, summary = build_rows(fake_measurements())
    assert [r["row"] for r in rows] == list(ROWS) == list(summary)
    for r in rows:
        for col in ("shape", "lab", "lab is", "model", "published", "source"):
            assert r[col], (r["row"], col)
    for key, e in summary.items():
        assert e["measured"] is not None and e["ideal"] is not None, key
        assert e["ratio"] == pytest.approx(e["measured"] / e["ideal"]), key
        assert math.isfinite(e["ratio"]) and e["source"] and e["published"], key
    # randomized rows carry their distribution; the lab's median is the measured value
    for key, n in (("1", 4), ("2a", 3), ("2b", 3), ("3", 3), ("4", 2)):
        e = summary[key]
        assert e["draws"] == n and e["p25"] <= e["median"] <= e["p75"], key
        assert e["measured"] == e["median"], key
    assert summary["1"]["ideal"] == pytest.approx(0.6)
    assert summary["1"]["model_distribution"]["draws"] == 30
    assert summary["1"]["balls_into_bins_here"] == pytest.approx(balls_into_bins(4))
    assert summary["2a"]["measured"] == pytest.approx(1.5)  # paired by seed: 1.4, 1.5, 1.6
    assert summary["2a"]["published_value"] == pytest.approx(118 / 77)
    assert summary["2b"]["ideal"] == pytest.approx(1.9)
    assert summary["3"]["before"]["median"] == pytest.approx(3.9)
    assert summary["3"]["drop"] == pytest.approx(3.9 / 1.4)
    assert summary["5a"]["measured"] == pytest.approx(0.6)
    assert summary["5b"]["ideal"] == pytest.approx(149 / 226)
    by = {r["row"]: r for r in rows}
    assert by["1"]["lab"] == "0.60 [0.57-0.62], N=4"
    assert by["2b"]["published"].startswith("2.01x")
    assert by["3"]["lab is"] == "workload sim" and by["5a"]["lab is"] == "wiring plan"
    json.dumps(summary)  # summary.json is plain JSON


def test_a_skipped_ep_size_says_so_in_its_row() -> None:
    rows, summary = build_rows(fake_measurements(skip_ep32=True))
    row = next(r for r in rows if r["row"] == "2b")
    assert row["lab"].startswith("skipped: guard margin 0.80")
    assert summary["2b"]["measured"] is None and summary["2b"]["ratio"] is None
    assert summary["2b"]["ideal"] == pytest.approx(1.9) and "skipped" in summary["2b"]
    assert summary["2a"]["measured"] is not None  # EP16 still measured


def test_publish_writes_the_table_report_and_plot(tmp_path: Any) -> None:
    sc = base.Scenario("paper-shapes", paper_shapes.description, paper_shapes.params,
                       lambda _run: None)
    run = base.Run(sc, paper_shapes.resolve(True, {}), quick=True,
                   output=str(tmp_path / "run"), log=lambda _m: None)
    plan = build("astral3", servers=2, gpus=4, scale=1e-5)
    publish(run, fake_measurements(skip_ep32=True), plan, {"a replay": {"x": 1}})
    res = run.finish()
    files = set(os.listdir(res.path))
    assert {"REPORT.md", "summary.csv", "summary.json", "runs.json", "shapes.png"} <= files
    with open(os.path.join(res.path, "shapes.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(res.path, "REPORT.md")) as f:
        report = f.read()
    for text in ("## The table", "| row | shape | lab | lab is | model | published | source |",
                 "### 1. ECMP collisions", "### 2. DeepEP", "### 3. EPLB", "### 4. Rail-only",
                 "### 5. Two tiers", "## Sources", "skipped: guard margin"):
        assert text in report, text
    with open(os.path.join(res.path, "summary.csv")) as f:
        assert [r["row"] for r in csv.DictReader(f)] == list(ROWS)
    with open(os.path.join(res.path, "summary.json")) as f:
        assert list(json.load(f)) == list(ROWS)
    assert res.table().splitlines()[0].startswith("row")


# --- the pure parts on real plans ------------------------------------------------------------
def test_ecmp_model_draws_collide_and_planned_is_the_ideal() -> None:
    p = paper_shapes.resolve(True, {"model_draws": 20})
    plan = build_for_gpus("astral3", p["gpus"], p["gpus_per_server"], scale=p["scale"])
    e = ecmp_model(plan, p)
    assert len(e["model"]) == 20 and e["paths"] == 4
    assert all(0 < v <= 1 + 1e-9 for v in e["model"])
    assert sorted(e["model"])[10] < balls_into_bins(4)  # two collision points: below one
    assert max(e["model_job"]) <= 1 + 1e-9 and e["bound_s"] == pytest.approx(p["seconds"],
                                                                             rel=0.01)


def test_eplb_lowers_the_imbalance() -> None:
    b = eplb_imbalance({"eplb_seeds": 3, "eplb_tokens": 128, "zipf_exponent": 1.0, "seed": 1})
    assert len(b["before"]) == 3
    assert all(a < 0.6 * bf for a, bf in zip(b["after"], b["before"], strict=True))
    assert all(e >= 1.0 for e in b["expected"])


def test_tiers_hops_and_cost() -> None:
    t = tiers({"gpus": 8, "gpus_per_server": 4, "scale": 1e-5, "cost_gpus": 8192,
               "cost_radix": 256})
    assert t["lab_hops"] == (3, 5) and t["model_hops"] == (3, 5)
    assert t["lab_cost"][0] < t["lab_cost"][1] and t["model_cost"][0] < t["model_cost"][1]
    assert t["lab_gpus"] == 8 and t["paper_gpus"] == 8192


def test_parameters_are_checked() -> None:
    ok = paper_shapes.resolve(True, {})
    _check_params(ok)
    _check_params({**ok, "ep_sizes": [8, 16]})  # EP32 left out: its row says so
    for bad in ({"ep_sizes": [16, 32]}, {"ep_sizes": [8, 64]}, {"ep_sizes": [8, 32]},
                {"gpus": 12}, {"ecmp_draws": 0}, {"ep_gpus_per_server": 8},
                {"ep_scale": 0.5}):
        with pytest.raises(ValueError):
            _check_params({**ok, **bad})


def test_registered_with_quick_values() -> None:
    sc = SCENARIOS.get("paper-shapes")
    quick, full = sc.resolve(True, {}), sc.resolve(False, {})
    assert quick["ecmp_draws"] < full["ecmp_draws"] and quick["ep_seeds"] <= full["ep_seeds"]
    assert full["ep_sizes"] == [8, 16, 32]
