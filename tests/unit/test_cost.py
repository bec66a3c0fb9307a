"""Cost model: the closed-form counts must equal real wiring plans, and scale to 64K GPUs.

Reading guide. ``testbed.models.cost`` counts switches, lanes, optics, fibres and shuffle boxes
without building anything. Three kinds of check keep it honest:

1. Builder semantics (``counts_for_spec``): for small specs, build the real plan with
   ``testbed.topologies.build`` and compare tier by tier and link kind by link kind; lanes,
   optics and fibres are recounted from the plan's links by the suite's one recount
   (``recount.py``), independently of the formulas.
2. Sizing (``analyze``): the layout the model picks for a buyer is turned back into a
   ``FabricSpec`` and built; astral3 rail groups are built as one plan per group.
3. Published facts: two-tier k^2/2, fat-tree k^3/4, and the rail-only paper's range.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections import Counter
from typing import Any

import pytest

from astral_lab.cost_cli import add_cost_parser, run_cost
from testbed import topologies
from testbed.fabricspec import CostSpec, Fabric, FabricSpec, Infeasible
from testbed.models.cost import (
    DESIGNS,
    RAIL_ONLY_PAPER_REDUCTION,
    Prices,
    analyze,
    cost_table,
    counts_for_spec,
    format_table,
    plot_costs,
    price,
    rail_only_reduction,
    three_tier_capacity,
    two_tier_capacity,
)
from testbed.shuffle import OpticalShuffle
from testbed.topologies import build
from tests.unit.recount import Wiring, recount
from vocab.plan import WiringPlan
from vocab.validate import Parser

# --- 1. builder semantics ----------------------------------------------------------------------
BUILDER_CASES: list[tuple[str, dict[str, Any]]] = [
    ("astral3", {}),
    ("astral3", dict(servers=2, gpus=1, servers_per_block=2)),  # a single leaf
    ("astral3", dict(servers=16, gpus=4, servers_per_block=2)),
    ("astral3", dict(servers=8, gpus=8, servers_per_block=4, lanes_per_uplink=8)),
    ("astral3", dict(servers=8, gpus=4, servers_per_block=4, oversubscription=2,
                     lanes_per_uplink=2)),
    ("astral3", dict(servers=6, gpus=2, servers_per_block=2, lanes_per_uplink=2, spines=2)),
    ("astral3", dict(servers=8, gpus=2, servers_per_block=8, spines=2)),
    ("astral3", dict(servers=6, gpus=1, servers_per_block=2)),  # 3 leaves: a part-full box
    ("astral3", dict(servers=64, gpus=8, servers_per_block=16, radix=128, spines=16)),
    ("rail3", {}),
    ("rail3", dict(servers=2, gpus=1, servers_per_block=2)),
    ("rail3", dict(servers=16, gpus=4, servers_per_block=2)),
    ("rail3", dict(servers=8, gpus=2, servers_per_block=4, lanes_per_uplink=2)),
    ("rail3", dict(servers=8, gpus=2, servers_per_block=4, lanes_per_uplink=2,
                   aggs_per_rail=2, cores=2)),
    ("rail3", dict(servers=8, gpus=4, servers_per_block=4, oversubscription=2,
                   lanes_per_uplink=2)),
    ("rail3", dict(servers=8, gpus=8, servers_per_block=4, lanes_per_uplink=8)),
    ("railonly", {}),
    ("railonly", dict(servers=2, gpus=2, servers_per_block=2)),  # one block: no spines
    ("railonly", dict(servers=3, gpus=1, servers_per_block=1, lanes_per_uplink=2)),
    ("railonly", dict(servers=16, gpus=4, servers_per_block=2)),
    ("railonly", dict(servers=8, gpus=2, servers_per_block=4, lanes_per_uplink=2, spines=2)),
    ("railonly", dict(servers=8, gpus=4, servers_per_block=4, oversubscription=2,
                      lanes_per_uplink=2)),
    ("fattree", {}),
    ("fattree", dict(servers=1, gpus=1)),
    ("fattree", dict(servers=2, gpus=2)),
    ("fattree", dict(servers=4, gpus=4, k=4)),
    ("fattree", dict(servers=4, gpus=8, k=8)),
    ("fattree", dict(servers=16, gpus=8)),
]

_plans: dict[str, WiringPlan] = {}


def plan_for(design: str, params: dict[str, Any]) -> WiringPlan:
    key = design + repr(sorted(params.items()))
    if key not in _plans:
        _plans[key] = build(design, **params)
    return _plans[key]


def case_id(case: tuple[str, dict[str, Any]]) -> str:
    return case[0] + "".join(f"-{k}={v}" for k, v in case[1].items())


@pytest.fixture(params=BUILDER_CASES, ids=[case_id(c) for c in BUILDER_CASES])
def builder_case(request: pytest.FixtureRequest) -> tuple[WiringPlan, Fabric, FabricSpec]:
    design, params = request.param
    spec = FabricSpec(**params)
    return plan_for(design, params), counts_for_spec(design, spec), spec


def test_switches_per_tier_match_the_real_plan(builder_case: Any) -> None:
    plan, fab, _spec = builder_case
    assert fab.switches_per_tier == plan.counts["switches_per_tier"]
    assert sum(fab.switches_per_tier.values()) == len(plan.switches)


def test_links_per_kind_match_the_real_plan(builder_case: Any) -> None:
    plan, fab, _spec = builder_case
    assert fab.links_per_kind == plan.counts["links_per_kind"]
    assert sum(fab.links_per_kind.values()) == len(plan.links)


def test_boxes_and_hops_match_the_real_plan(builder_case: Any) -> None:
    plan, fab, _spec = builder_case
    assert fab.shuffle_boxes == plan.counts["shuffle_boxes"]
    assert fab.max_switch_hops == plan.counts["max_switch_hops"]
    assert fab.gpus == len(plan.hosts)


def test_lanes_optics_fibers_match_a_recount_of_the_plan(builder_case: Any) -> None:
    plan, fab, _spec = builder_case
    got = recount(Wiring(plan))
    assert fab.switch_lanes_used == got["switch_lanes_used"]
    assert fab.optics == got["optics"]
    assert fab.fibers == got["fibers"]


def test_optics_equal_the_builders_own_count(builder_case: Any) -> None:
    """The builder reads optics off its links by the model's convention, so the two agree
    with a part-full astral3 shuffle box too (the box still has L outputs to L spines)."""
    plan, fab, _spec = builder_case
    assert fab.optics == plan.counts["optics"]


def test_shuffle_boxes_agree_with_optical_shuffle() -> None:
    for leaves, uplinks, lanes, spines in [(1, 1, 4, 4), (3, 2, 4, 8), (8, 4, 4, 16),
                                           (16, 2, 8, 8), (10, 3, 2, 6)]:
        sh = OpticalShuffle(leaves=leaves, uplinks=uplinks, lanes=lanes, spines=spines)
        d = uplinks * lanes // 2  # two NIC lanes each, 1:1
        fab = counts_for_spec("astral3", FabricSpec(
            servers=d * leaves, gpus=1, servers_per_block=d, lanes_per_uplink=lanes,
            spines=spines, radix=4096))
        assert fab.shuffle_boxes == sh.boxes
        assert fab.links_per_kind["lane"] == len(sh.table)
        assert fab.layout["lanes_per_leaf_spine_pair"] == sh.per_spine


@pytest.mark.parametrize(("design", "params"), [
    ("astral3", dict(servers=8, gpus=8, servers_per_block=2, radix=8)),  # spine too small
    ("astral3", dict(servers=4, gpus=2, servers_per_block=2, spines=3)),  # spines ∤ lanes
    ("rail3", dict(servers=16, gpus=8, servers_per_block=2, radix=16)),  # core too small
    ("railonly", dict(servers=8, gpus=2, servers_per_block=2, spines=3)),
    ("fattree", dict(servers=8, gpus=8, k=4)),  # k^3/4 < GPUs
    ("astral3", dict(servers=5, gpus=2, servers_per_block=2)),  # blocks do not divide
])
def test_model_rejects_what_the_builder_rejects(design: str, params: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        build(design, **params)
    with pytest.raises(ValueError):
        counts_for_spec(design, FabricSpec(**params))


# --- 2. sizing: what the model picks is buildable and counts the same --------------------------
SMALL = [
    (CostSpec(gpus_per_server=4, radix=32), [64, 128, 256]),
    (CostSpec(gpus_per_server=2, radix=16, lanes_per_uplink=2), [16, 64, 128]),
    (CostSpec(gpus_per_server=4, radix=16, lanes_per_uplink=2), [64, 128]),  # rail groups
    (CostSpec(gpus_per_server=4, radix=32, oversubscription=2, lanes_per_uplink=2), [128]),
    (CostSpec(gpus_per_server=2, nic_gbps=200, radix=16, lanes_per_uplink=2), [32, 64]),
]


def spec_from_layout(fab: Fabric, cs: CostSpec, rails: int | None = None) -> FabricSpec:
    """The builder spec that reproduces a sized layout (one rail group if ``rails``)."""
    lay = fab.layout
    common = dict(servers=fab.servers, gpus=rails or cs.gpus_per_server,
                  nic_gbps=cs.nic_gbps, lane_gbps=cs.lane_gbps, radix=cs.radix,
                  lanes_per_uplink=cs.lanes_per_uplink, oversubscription=cs.oversubscription,
                  servers_per_block=lay.get("servers_per_block", 1))
    # only what the design reads: setting a parameter it ignores is an error
    common = {k: v for k, v in common.items() if k in topologies.TOPOLOGIES.get(fab.design).options}
    if fab.design == "astral3":
        return FabricSpec(spines=lay["spines_per_group"], **common)
    if fab.design == "rail3":
        return FabricSpec(aggs_per_rail=lay["aggs_per_rail_per_pod"],
                          cores=lay["cores_per_group"], **common)
    if fab.design == "railonly":
        return FabricSpec(spines=lay["spines_per_rail"], **common)
    return FabricSpec(k=lay["k"], **common)


def sized_cases() -> list[tuple[str, CostSpec, int]]:
    return [(d, cs, n) for cs, sizes in SMALL for n in sizes for d in DESIGNS]


@pytest.mark.parametrize(("design", "cs", "gpus"), sized_cases(),
                         ids=[f"{d}-{n}-r{cs.radix}-g{cs.gpus_per_server}-L"
                              f"{cs.lanes_per_uplink}-os{cs.oversubscription:g}"
                              f"-nic{cs.nic_gbps:g}" for d, cs, n in sized_cases()])
def test_sized_fabric_is_what_the_builder_builds(design: str, cs: CostSpec, gpus: int) -> None:
    try:
        fab = analyze(design, gpus, cs)
    except Infeasible as exc:
        assert str(exc)  # the reason is said
        return
    assert fab.switch_lanes_used <= fab.switch_lanes_capacity
    lay = fab.layout
    if design == "rail3" and (lay["pods"] > 1 or lay["core_groups"] > 1):
        check_rail3_by_enumeration(fab, cs)  # no builder for pods / core groups
        return
    groups = lay.get("rail_groups", 1)
    rails = cs.gpus_per_server // groups
    plans = [build(design, **{f.name: getattr(spec_from_layout(fab, cs, rails), f.name)
                              for f in dataclasses.fields(FabricSpec)})
             for _ in range(groups)]
    tiers: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for p in plans:
        tiers.update(p.counts["switches_per_tier"])
        kinds.update(p.counts["links_per_kind"])
    assert fab.switches_per_tier == dict(tiers)
    assert fab.links_per_kind == dict(kinds)
    assert fab.shuffle_boxes == sum(p.counts["shuffle_boxes"] for p in plans)
    got = [recount(Wiring(p)) for p in plans]
    assert fab.switch_lanes_used == sum(x["switch_lanes_used"] for x in got)
    assert fab.optics == sum(x["optics"] for x in got)
    assert fab.fibers == sum(x["fibers"] for x in got)


def check_rail3_by_enumeration(fab: Fabric, cs: CostSpec) -> None:
    """Wire rail3 pods and grouped cores explicitly, the way the model describes them, and
    check counts, every switch's radix, and that any ToR reaches any ToR up-down (5 hops)."""
    lay, g, L = fab.layout, cs.gpus_per_server, cs.lanes_per_uplink
    n = round(cs.nic_gbps / cs.lane_gbps)
    bp, A = lay["blocks_per_pod"], lay["aggs_per_rail_per_pod"]
    gc, cpg = lay["core_groups"], lay["cores_per_group"]
    ports = lay["uplink_ports_per_tor"]
    lanes: Counter[tuple[Any, ...]] = Counter()
    up: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    links = 0
    for b in range(lay["blocks"]):
        for r in range(g):
            tor = ("tor", b, r)
            lanes[tor] += lay["servers_per_block"] * n
            for p in range(ports):
                agg = ("agg", b // bp, r, p % A)
                lanes[tor] += L
                lanes[agg] += L
                up.setdefault(tor, set()).add(agg)
                links += 1
    agg_up = bp * ports // A
    for q in range(lay["pods"]):
        for r in range(g):
            for a in range(A):
                agg = ("agg", q, r, a)
                for j in range(agg_up):
                    core = ("core", a // (A // gc), j % cpg)
                    lanes[agg] += L
                    lanes[core] += L
                    up.setdefault(agg, set()).add(core)
                    links += 1
    tiers = Counter(k[0] for k in lanes)
    assert fab.switches_per_tier == dict(tiers)
    assert fab.links_per_kind["uplink"] == links
    assert max(lanes.values()) <= cs.radix
    assert fab.switch_lanes_used == sum(lanes.values())
    cores_of = {t: set().union(*(up[a] for a in aggs)) for t, aggs in up.items()
                if t[0] == "tor"}
    tors = list(cores_of)
    assert all(cores_of[x] & cores_of[y] for x in tors for y in tors)  # a common core


def test_astral3_grows_by_rail_groups_that_the_builder_can_build_one_by_one() -> None:
    cs = CostSpec(gpus_per_server=4, radix=16, lanes_per_uplink=2)
    fab = analyze("astral3", 128, cs)  # 32 leaves, a spine reaches 16
    assert fab.layout["rail_groups"] == 2 and fab.layout["rails_per_group"] == 2
    assert any("rail groups" in note and "NVLink" in note for note in fab.notes)
    with pytest.raises(ValueError, match="radix"):  # the whole thing in one plan: too big
        build("astral3", servers=32, gpus=4, servers_per_block=4, radix=16,
              lanes_per_uplink=2, spines=fab.layout["spines_per_group"])


def test_rail3_pods_respect_every_switch_radix() -> None:
    cs = CostSpec()
    for gpus in (8192, 32768, 65536, 131072):
        fab = analyze("rail3", gpus, cs)
        lay, L, R = fab.layout, cs.lanes_per_uplink, cs.radix
        agg_ports = 2 * lay["blocks_per_pod"] * lay["uplink_ports_per_tor"] \
            // lay["aggs_per_rail_per_pod"]
        core_ports = (lay["pods"] * cs.gpus_per_server * lay["aggs_per_rail_per_pod"]
                      // lay["core_groups"] * lay["ports_per_agg_core_pair"])
        assert agg_ports * L <= R and core_ports * L <= R
        # every aggregation uplink lands on exactly one core port
        agg_up = agg_ports // 2
        assert fab.switches_per_tier["agg"] * agg_up == fab.switches_per_tier["core"] * core_ports
        # ToR -> agg and agg -> core layers carry the same number of uplinks (1:1 above ToR)
        assert fab.links_per_kind["uplink"] == 2 * fab.switches_per_tier["tor"] * \
            lay["uplink_ports_per_tor"]
    with pytest.raises(Infeasible, match="core must reach"):
        analyze("rail3", 262144, cs)  # 16 pods x 8 rails x 4 lanes > 256


# --- 3. scale and published facts ---------------------------------------------------------------
def test_65536_gpus_every_design_answers() -> None:
    rows = cost_table([65536])
    assert [r["design"] for r in rows] == list(DESIGNS)
    for r in rows:
        if r["feasible"]:
            assert r["cost"]["total"] > 0 and r["switches"] > 0
            assert r["bisection_tbps"] == pytest.approx(65536 * 400 / 2 / 1000)
        else:
            assert len(r["reason"]) > 20
    by = {r["design"]: r for r in rows}
    assert by["astral3"]["feasible"] and by["astral3"]["layout"]["rail_groups"] == 4
    assert by["rail3"]["feasible"] and by["rail3"]["layout"]["pods"] == 4
    assert by["fattree"]["feasible"] and by["fattree"]["layout"]["k"] == 64
    assert not by["railonly"]["feasible"] and "lanes-per-uplink" in by["railonly"]["reason"]
    text = format_table(rows)
    assert "infeasible" in text and "rail groups" in text


def test_well_past_64k_answers_without_enumerating() -> None:
    rows = cost_table([1 << 20], spec=CostSpec(radix=1024))  # 1M GPUs, 204.8T switches
    assert any(r["feasible"] for r in rows)
    big = analyze("fattree", 1 << 20, CostSpec(radix=1024))
    assert big.layout["k"] == 162  # smallest even k with k^3/4 >= 2^20


@pytest.mark.parametrize("k", [8, 16, 32, 64, 128])
def test_two_tier_capacity_is_k_squared_over_two(k: int) -> None:
    """One spine layer of radix-k switches reaches k leaves of k/2 hosts: k^2/2 per plane.

    With NIC = lane speed, astral3's spines (lane ports via the shuffle) hold exactly
    k^2/2 GPUs in one rail group; one more block needs a second group. railonly with uplink
    ports of NIC speed holds k^2/2 per rail (whole ports, k = radix / port lanes).
    """
    assert two_tier_capacity(k) == k * k // 2
    cs = CostSpec(gpus_per_server=2, nic_gbps=200, lane_gbps=200, radix=k, lanes_per_uplink=1)
    at = analyze("astral3", two_tier_capacity(k), cs)
    assert at.layout["rail_groups"] == 1
    assert at.switch_lanes_used == at.switch_lanes_capacity  # exactly full
    more = analyze("astral3", two_tier_capacity(k) + k // 2 * 2, cs)
    assert more.layout["rail_groups"] == 2
    per_rail = CostSpec(gpus_per_server=1, nic_gbps=200, lane_gbps=200, radix=k,
                        lanes_per_uplink=1)
    assert analyze("railonly", two_tier_capacity(k), per_rail).max_switch_hops == 3
    with pytest.raises(Infeasible):
        analyze("railonly", two_tier_capacity(k) + k // 2, per_rail)


def test_two_tier_capacity_holds_for_real_plans() -> None:
    """The builder itself: radix 8 lanes, NIC = lane: 8 leaves of 4 hosts = 32 = 8^2/2."""
    p = dict(gpus=2, nic_gbps=200, lane_gbps=200, servers_per_block=4, radix=8,
             lanes_per_uplink=1)
    plan = build("astral3", servers=16, **p)
    assert len(plan.hosts) == two_tier_capacity(8)
    with pytest.raises(ValueError, match="radix"):
        build("astral3", servers=20, **p)


@pytest.mark.parametrize("k", [4, 8, 16, 32, 64])
def test_three_tier_capacity_is_k_cubed_over_four(k: int) -> None:
    n = three_tier_capacity(k)
    assert n == k ** 3 // 4
    fab = analyze("fattree", n, CostSpec(gpus_per_server=1))
    assert fab.layout["k"] == k
    assert fab.switches == 5 * k * k // 4
    assert fab.links_per_kind["uplink"] == k ** 3 // 2
    assert analyze("fattree", n + 1, CostSpec(gpus_per_server=1)).layout["k"] == k + 2
    if k <= 8:
        plan = build("fattree", servers=n, gpus=1, k=k)
        assert len(plan.hosts) == n and len(plan.switches) == 5 * k * k // 4


def test_rail_only_reduction_is_near_the_papers_range() -> None:
    """Wang et al. (arXiv 2307.12169) report 38-77 % lower network cost than a rail-optimized
    any-to-any fabric. Ours, HB domains of 8 and 256 GPUs, 400G NICs, 51.2T switches:
    35.3 % vs rail3 at HB 8 (3 vs 5 switch port-ends and 4 vs 6 optic lanes per NIC lane),
    72-75 % vs the fat-tree at HB 256 (one switch per rail). Pricing the NIC-to-leaf cables
    or not moves the low end between 35 % and 45 %, bracketing the paper's 38 %."""
    got = rail_only_reduction()
    lo, hi = RAIL_ONLY_PAPER_REDUCTION
    hb8 = [e["vs_rail3"] for e in got if e["hb_domain"] == 8]
    hb256 = [e["vs_fattree"] for e in got if e["hb_domain"] == 256]
    assert all(v == pytest.approx(0.353, abs=0.005) for v in hb8)
    assert all(0.70 <= v <= 0.76 for v in hb256)
    ours = hb8 + hb256
    assert abs(min(ours) - lo) < 0.05 and abs(max(ours) - hi) < 0.05
    without = rail_only_reduction(nic_cables=False)
    hb8_without = [e["vs_rail3"] for e in without if e["hb_domain"] == 8]
    assert all(v == pytest.approx(0.445, abs=0.005) for v in hb8_without)
    assert min(hb8) < lo < min(hb8_without)
    # against the two-tier any-to-any design, rail-only saves little at HB 8
    assert all(e["vs_astral3"] == pytest.approx(0.021, abs=0.005)
               for e in got if e["hb_domain"] == 8)
    # at HB 256 a rail3 core cannot reach 256 rails of 4-lane ports: said, not hidden
    assert all(e["vs_rail3"] is None for e in got if e["hb_domain"] == 256)


def test_pricing_without_nic_cables_removes_exactly_those_cables() -> None:
    fab = analyze("rail3", 8192)
    p = Prices()
    with_, without = price(fab, p), price(fab, p, nic_cables=False)
    n = fab.nic_lanes
    per_cable = 2 * (p.optic_module + n * p.optic_lane) + 2 * n * p.fiber
    assert with_["total"] - without["total"] == pytest.approx(8192 * per_cable)
    assert with_["switches"] == without["switches"]


# --- prices, table, chart, CLI --------------------------------------------------------------------
def test_prices_are_linear_and_relative_is_against_rail3() -> None:
    rows = cost_table([8192])
    base = {r["design"]: r for r in rows}
    assert base["rail3"]["relative"] == 1.0
    assert base["astral3"]["relative"] < 1.0  # two tiers instead of three
    fab = analyze("astral3", 8192)
    p1, p2 = price(fab, Prices()), price(fab, Prices(switch_port=300.0))
    assert p2["switches"] == pytest.approx(2 * p1["switches"])
    assert p2["total"] - p1["total"] == pytest.approx(p1["switches"])
    free = price(fab, Prices(switch_port=0, optic_module=0, optic_lane=0, fiber=0,
                             shuffle_box=1))
    assert free["total"] == fab.shuffle_boxes


def test_oversubscription_halves_uplinks_and_bisection() -> None:
    one = analyze("astral3", 8192)
    two = analyze("astral3", 8192, CostSpec(oversubscription=2, lanes_per_uplink=2))
    assert two.bisection_gbps == pytest.approx(one.bisection_gbps / 2)
    assert two.links_per_kind["lane"] < one.links_per_kind["lane"]


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(gpus=[100]), "whole number of 8-GPU servers"),
    (dict(gpus=[0]), "positive"),
    (dict(gpus=[]), "at least one"),
    (dict(gpus=[64], designs=("astral3", "torus")), "unknown topology 'torus'"),
    (dict(gpus=[64], spec=CostSpec(nic_gbps=300)), "whole number"),
    (dict(gpus=[64], spec=CostSpec(radix=0)), "radix"),
    (dict(gpus=[64], prices=Prices(fiber=-1)), "fiber"),
])
def test_bad_input_is_one_clear_value_error(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cost_table(**kwargs)


def test_format_table_aligns_and_footnotes() -> None:
    text = format_table(cost_table([8192, 65536]))
    lines = text.splitlines()
    header = lines[0]
    for col in ("design", "switches by tier", "optics", "fibers", "shuffles", "bisect Tb/s",
                "cost $M", "rel"):
        assert col in header
    rows = [ln for ln in lines[2:] if ln and not ln.startswith("[")]
    assert len(rows) == 8
    # right-aligned numeric columns end at the same place as the header's
    feasible = [ln for ln in rows if "infeasible" not in ln]
    assert {len(ln) for ln in feasible} == {len(header)}
    assert any(ln.startswith("[1] ") for ln in lines)


def is_png(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_writes_a_real_png_atomically(tmp_path: Any) -> None:
    out = tmp_path / "chart" / "cost.png"
    plot_costs(cost_table([8192, 65536]), out)
    assert is_png(str(out)) and out.stat().st_size > 5000
    assert [p.name for p in out.parent.iterdir()] == ["cost.png"]  # no temp file left


def cli(argv: list[str]) -> argparse.Namespace:
    p = Parser(prog="astral-lab")
    sub = p.add_subparsers(dest="verb", required=True)
    add_cost_parser(sub)
    return p.parse_args(argv)


def test_cli_writes_json_and_png_to_output_dir(tmp_path: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    args = cli(["cost", "--gpus", "8192,65536", "-o", str(tmp_path / "out"),
                "--price-switch-port", "200"])
    assert args.fn is run_cost
    assert run_cost(args) == 0
    out = capsys.readouterr().out
    assert "astral3" in out and "fattree" in out and "infeasible" in out
    doc = json.loads((tmp_path / "out" / "cost.json").read_text())
    assert doc["prices"]["switch_port"] == 200.0 and len(doc["rows"]) == 8
    assert is_png(str(tmp_path / "out" / "cost.png"))


def test_cli_default_results_dir_is_renamed_from_partial(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path))
    assert run_cost(cli(["cost", "--gpus", "512", "--no-png", "--radix", "128"])) == 0
    (made,) = os.listdir(tmp_path)
    assert made.endswith("-cost") and not made.endswith(".partial")
    assert os.listdir(tmp_path / made) == ["cost.json"]
    doc = json.loads((tmp_path / made / "cost.json").read_text())
    assert doc["spec"]["radix"] == 128


@pytest.mark.parametrize("gpus", ["abc", "8192,", "-8", "8192;65536", "1000000000", "8,8"])
def test_cli_bad_gpus_is_refused_as_parsed(gpus: str, tmp_path: Any,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        run_cost(cli(["cost", "--gpus", gpus, "-o", str(tmp_path)]))
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("astral-lab cost: error: argument --gpus: ") and "\n" not in err
    assert not os.listdir(tmp_path)
