"""Every count a plan or the cost model reports, recomputed from the plan's links alone.

Reading guide. For every design (and the worked ``leafspine`` example of docs/extending.md) a
seeded sample of sizes is drawn from a grid of the parameters the design reads; each is built,
and everything the plan's ``counts`` and the cost model's ``counts_for_spec`` report is
recomputed from the plan's nodes and links by the suite's one recount (``recount.py``), code
that shares nothing with the builders: switches by tier, links by kind, transceivers, their
lanes, fibres, switch lanes, shuffle boxes, the most network switches on any GPU pair's
shortest path (a search from every GPU to every other) and, where the halves are well
defined, the bisection (a max-flow between the two halves of the servers); four corners (one
GPU, one server, one rail) are added to the draws. Every draw the builder rejects must be
rejected by the cost model too, and at the radix of its fullest switch a size builds and
counts while one lane less is refused by both. Then: a parameter a design does not read is
an error naming it, through every way in; and the four cases that started it.
"""

from __future__ import annotations

import importlib.util
import itertools
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from astral_lab.cli import main
from testbed import topologies
from testbed.fabricspec import CostSpec, Fabric, FabricSpec
from testbed.models import flowmodel
from testbed.models.cost import analyze, counts_for_spec
from testbed.models.whatif import TwoTier
from testbed.topologies import Topology, build
from tests.unit.recount import (
    Wiring,
    bisection_by_max_flow,
    design_counts,
    hops_between_every_pair,
    lanes_per_switch,
    recount,
)
from vocab.plan import WiringPlan

REPO = Path(__file__).resolve().parents[2]


def _example(name: str) -> Topology:
    """A worked example topology, loaded from examples/plugins/ without copying it in."""
    path = REPO / "examples" / "plugins" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Topology(name, module)


TOPOS: dict[str, Topology] = {**topologies.TOPOLOGIES.all(), "leafspine": _example("leafspine")}

#: the values each parameter is drawn from (repeats weight the draw); a design is sampled
#: only over the parameters it reads
GRID: dict[str, tuple[Any, ...]] = {
    "servers": (1, 2, 2, 3, 4, 4, 6, 8, 8, 12, 16),
    "gpus": (1, 1, 2, 2, 3, 4, 4, 8),
    "servers_per_block": (1, 2, 2, 3, 4, 4, 8),
    "nic_gbps": (400.0, 400.0, 400.0, 200.0, 800.0, 300.0),
    "lane_gbps": (200.0, 200.0, 200.0, 100.0),
    "lanes_per_uplink": (1, 2, 2, 4, 4, 8),
    "radix": (256, 256, 256, 64, 32, 24, 16, 12, 8),
    "oversubscription": (1.0, 1.0, 2.0, 0.5, 4.0),
    "spines": (0, 0, 0, 1, 2, 4),
    "aggs_per_rail": (0, 0, 1, 2),
    "cores": (0, 0, 1, 2, 4),
    "k": (0, 0, 0, 4, 6, 8),
    "nvlink_gbps": (3600.0, 900.0),
}
#: buildable draws per design the sample is picked from
POOL = 200


def _halves_are_blocks(name: str, spec: FabricSpec) -> bool:
    """The halves of the servers split no block (or there is one): the case the bisection's
    closed form describes (an odd block count splits one, which only adds capacity)."""
    if spec.servers % 2:
        return False
    return name == "fattree" or spec.blocks == 1 or spec.blocks % 2 == 0


def features(name: str, params: dict[str, Any], plan: WiringPlan) -> set[tuple[Any, ...]]:
    """What makes a size a distinct case: each value of each parameter the design reads; the
    structure (one block or several, one rail or several) at each oversubscription; halves
    that are whole blocks or not; the plan's shape (its tiers and kinds of link); its size
    to within a factor of four (a closed form can go wrong only past some size)."""
    spec = FabricSpec(**params)
    out: set[tuple[Any, ...]] = {("value", k, v) for k, v in params.items()}
    # the structure, at each oversubscription (which sizes the uplinks between blocks)
    out.add(("structure", spec.blocks == 1, spec.gpus == 1, params.get("oversubscription")))
    out.add(("bisected", _halves_are_blocks(name, spec), spec.blocks > 1))
    out.add(("shape", tuple(sorted(plan.counts["switches_per_tier"])),
             tuple(sorted(plan.counts["links_per_kind"]))))
    out.add(("size", plan.counts["gpus"].bit_length() // 2))
    return out


def _sample(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Seeded draws from the grid, and every draw the builder refused; of the POOL buildable
    draws, the fewest (greedily) that still show every feature any of them shows: a size
    that adds no new value, structure or shape repeats a case already checked."""
    topo = TOPOS[name]
    keys = [k for k in GRID if k in topo.options]
    rng = random.Random(f"counts-truth-{name}")
    pool: list[tuple[dict[str, Any], set[tuple[Any, ...]]]] = []
    bad: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for _ in range(4000):
        params = {k: rng.choice(GRID[k]) for k in keys}
        key = tuple(params.values())
        if key in seen:
            continue
        seen.add(key)
        try:
            plan = topo.build(FabricSpec(**params))
        except ValueError:
            bad.append(params)
            continue
        pool.append((params, features(name, params, plan)))
        if len(pool) == POOL:
            break
    missing = set().union(*(f for _, f in pool))
    ok: list[dict[str, Any]] = []
    while missing:
        params, got = max(pool, key=lambda c: len(c[1] & missing))
        ok.append(params)
        missing -= got
    return ok, bad


#: the corners a draw may miss: one GPU, one server, one block of one rail
EDGES = [dict(servers=1, gpus=1, servers_per_block=1, lanes_per_uplink=2),
         dict(servers=1, gpus=4, servers_per_block=1, lanes_per_uplink=2),
         dict(servers=2, gpus=1, servers_per_block=2),
         dict(servers=4, gpus=1, servers_per_block=2)]


def _edges(name: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k in TOPOS[name].options} for p in EDGES]


_SAMPLES = {name: _sample(name) for name in TOPOS}
CASES = [(name, p) for name in TOPOS for p in _SAMPLES[name][0] + _edges(name)]


def case_id(case: tuple[str, dict[str, Any]]) -> str:
    name, params = case
    return name + "".join(f"-{k[:4]}{v:g}" for k, v in params.items())


def model_counts(name: str, spec: FabricSpec) -> Fabric:
    """The cost model's closed form (the shipped designs through ``counts_for_spec``)."""
    if name in topologies.TOPOLOGIES.names():
        return counts_for_spec(name, spec)
    return TOPOS[name].counts(spec)


_plans: dict[str, tuple[WiringPlan, Wiring]] = {}


def wiring(name: str, params: dict[str, Any]) -> tuple[WiringPlan, Wiring]:
    key = case_id((name, params))
    if key not in _plans:
        plan = TOPOS[name].build(FabricSpec(**params))
        _plans[key] = (plan, Wiring(plan))
    return _plans[key]


# --- the property tests -------------------------------------------------------------------------
def test_every_design_is_sampled_at_distinct_sizes() -> None:
    for name in TOPOS:
        ok, _bad = _SAMPLES[name]
        assert len(ok) >= 8, (name, len(ok))
        assert len({case_id((name, p)) for p in ok}) == len(ok)
        # every value of every parameter the design reads is among the sizes
        for k in TOPOS[name].options:
            if k in GRID:
                assert {p[k] for p in ok} == set(GRID[k]), (name, k)
        # the sample spans the structure: one block and several, one rail and several
        if name == "fattree":
            assert len({p.get("k", 0) for p in ok}) > 1
        else:
            spb = [(p["servers"] // p["servers_per_block"], p["gpus"]) for p in ok]
            assert {b == 1 for b, _ in spb} == {True, False}
            assert {g == 1 for _, g in spb} == {True, False}


@pytest.mark.parametrize("case", CASES, ids=map(case_id, CASES))
def test_plan_counts_are_what_the_links_say(case: tuple[str, dict[str, Any]]) -> None:
    name, params = case
    plan, w = wiring(name, params)
    got = recount(w)
    mine = design_counts(w)
    want = {
        "gpus": got["gpus"], "servers": got["servers"],
        "switches": sum(got["switches_per_tier"].values()),
        "switches_per_tier": got["switches_per_tier"], "links": len(plan.links),
        "links_per_kind": got["links_per_kind"], "optics": got["optics"],
        "max_switch_hops": hops_between_every_pair(w),
        **{k: v for k, v in mine.items() if k in plan.counts},
    }
    assert set(want) == set(plan.counts), "a reported count this test does not recompute"
    assert plan.counts == want


@pytest.mark.parametrize("case", CASES, ids=map(case_id, CASES))
def test_cost_model_counts_are_what_the_links_say(case: tuple[str, dict[str, Any]]) -> None:
    name, params = case
    plan, w = wiring(name, params)
    spec = FabricSpec(**params)
    fab = model_counts(name, spec)
    got = recount(w)
    per_switch = (plan.counts["k"] * got["nic_lanes"] if name == "fattree"
                  else plan.params["radix"])
    assert fab.design == name
    assert (fab.gpus, fab.servers) == (got["gpus"], got["servers"])
    assert fab.switches_per_tier == got["switches_per_tier"]
    assert fab.switches == got["network_switches"]
    assert fab.links_per_kind == got["links_per_kind"]
    for key in ("optics", "optic_lanes", "fibers", "switch_lanes_used", "shuffle_boxes",
                "nic_lanes"):
        assert getattr(fab, key) == got[key], key
    assert fab.switch_lanes_capacity == got["network_switches"] * per_switch
    assert fab.switch_lanes_used <= fab.switch_lanes_capacity
    assert fab.max_switch_hops == plan.counts["max_switch_hops"]


BISECTED = [c for c in CASES if _halves_are_blocks(c[0], FabricSpec(**c[1]))]


@pytest.mark.parametrize("case", BISECTED, ids=map(case_id, BISECTED))
def test_bisection_is_the_max_flow_between_the_halves(case: tuple[str, dict[str, Any]]) -> None:
    name, params = case
    _plan, w = wiring(name, params)
    fab = model_counts(name, FabricSpec(**params))
    assert fab.bisection_gbps == pytest.approx(bisection_by_max_flow(w), rel=1e-9)


def test_enough_sizes_have_a_bisection_check() -> None:
    for name in TOPOS:
        assert sum(1 for c in BISECTED if c[0] == name) >= 5, name


@pytest.mark.parametrize("name", list(TOPOS))
def test_what_the_builder_refuses_the_cost_model_refuses(name: str) -> None:
    """Over every draw: the closed form refuses exactly the sizes the builder refuses."""
    refused = _SAMPLES[name][1]
    assert len(refused) >= 10, name
    for params in refused:
        with pytest.raises(ValueError):
            TOPOS[name].build(FabricSpec(**params))
        with pytest.raises(ValueError):
            model_counts(name, FabricSpec(**params))


@pytest.mark.parametrize("case", CASES, ids=map(case_id, CASES))
def test_the_radix_rule_is_the_wiring_for_both(case: tuple[str, dict[str, Any]]) -> None:
    """At the radix of the fullest switch (a fat-tree's k ports of NIC lanes) the size
    builds and counts; one lane less, both refuse it, naming the radix."""
    name, params = case
    plan, w = wiring(name, params)
    need = (plan.counts["k"] * recount(w)["nic_lanes"] if name == "fattree"
            else max(lanes_per_switch(w).values()))
    assert need == int(need)
    at = {**params, "radix": int(need)}
    assert TOPOS[name].build(FabricSpec(**at)).counts == TOPOS[name].build(
        FabricSpec(**params)).counts
    model_counts(name, FabricSpec(**at))
    below = {**params, "radix": int(need) - 1}
    with pytest.raises(ValueError, match="radix"):
        TOPOS[name].build(FabricSpec(**below))
    with pytest.raises(ValueError, match="radix"):
        model_counts(name, FabricSpec(**below))


# --- a parameter a design does not read is an error naming it ---------------------------------
#: a valid, non-default value for every parameter (the default is FabricSpec's)
OTHER: dict[str, Any] = {
    "servers_per_block": 1, "lanes_per_uplink": 2, "oversubscription": 2.0, "spines": 2,
    "aggs_per_rail": 1, "cores": 1, "k": 6, "nvlink_gbps": 900.0,
}
IGNORED = [(name, field) for name in TOPOS for field in OTHER
           if field not in TOPOS[name].options]


def test_each_design_declares_what_it_reads() -> None:
    reads = {name: set(OTHER) & set(t.options) for name, t in TOPOS.items()}
    assert reads == {
        "astral3": {"servers_per_block", "lanes_per_uplink", "oversubscription", "spines"},
        "rail3": {"servers_per_block", "lanes_per_uplink", "oversubscription",
                  "aggs_per_rail", "cores"},
        "railonly": {"servers_per_block", "lanes_per_uplink", "oversubscription", "spines",
                     "nvlink_gbps"},
        "fattree": {"k"},
        "leafspine": {"servers_per_block", "lanes_per_uplink", "oversubscription", "spines"},
    }


def _ways_in(name: str) -> list[Callable[[dict[str, Any]], object]]:
    topo = TOPOS[name]
    ways: list[Callable[[dict[str, Any]], object]] = [
        lambda p: topo.build(FabricSpec(**p)), lambda p: topo.counts(FabricSpec(**p))]
    if name in topologies.TOPOLOGIES.names():
        ways += [lambda p: build(name, **p), lambda p: counts_for_spec(name, FabricSpec(**p))]
    rules = topo.two_tier
    if rules is not None:  # the flow model's aggregate what-if reads the same spec
        ways.append(lambda p: rules(FabricSpec(**p)))
        if name in topologies.TOPOLOGIES.names():
            ways.append(lambda p: TwoTier.from_spec(FabricSpec(**p), name))
    return ways


@pytest.mark.parametrize(("name", "field"), IGNORED, ids=[f"{n}-{f}" for n, f in IGNORED])
def test_an_ignored_parameter_is_an_error_naming_it(name: str, field: str) -> None:
    small = {"servers": 4, "gpus": 2}
    for way in _ways_in(name):
        with pytest.raises(ValueError, match=rf"{name} does not use {field}=") as exc:
            way({**small, field: OTHER[field]})
        assert "leave it unset" in str(exc.value)
        way(small)  # not given: builds
        way({**small, field: getattr(FabricSpec(), field)})  # the default, given: builds


def test_every_ignored_parameter_is_named_at_once() -> None:
    with pytest.raises(ValueError) as exc:
        build("fattree", oversubscription=2, servers_per_block=4, spines=2, lanes_per_uplink=2)
    msg = str(exc.value)
    for field in ("servers_per_block", "lanes_per_uplink", "oversubscription", "spines"):
        assert f"{field}=" in msg
    assert "leave them unset" in msg and "fattree reads servers, gpus" in msg


@pytest.mark.parametrize(("verb", "name", "flag"), [
    ("topo", "fattree", "--oversubscription"), ("topo", "fattree", "--servers-per-block"),
    ("topo", "fattree", "--spines"), ("topo", "fattree", "--lanes-per-uplink"),
    ("topo", "astral3", "--k"), ("topo", "astral3", "--aggs-per-rail"),
    ("topo", "astral3", "--cores"), ("topo", "rail3", "--spines"),
    ("topo", "railonly", "--cores"), ("model", "fattree", "--oversubscription"),
    ("model", "astral3", "--k"),
])
def test_the_cli_says_which_option_the_design_ignores(verb: str, name: str, flag: str,
                                                      tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    field = flag[2:].replace("-", "_")
    value = f"{OTHER[field]:g}"
    if verb == "topo":
        argv = ["topo", name, flag, value, "-o", str(tmp_path / "p.json"), "--no-png"]
    else:
        argv = ["model", name, "--gpus", "16", "--gpus-per-server", "4", "--lb", "ecmp",
                flag, value, "-o", str(tmp_path / "m")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"astral-lab {verb}: error: {name} does not use {field}={value}")
    assert not (tmp_path / "p.json").exists()


def test_the_cli_passes_the_defaults_it_does_not_show(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """The verbs pass every option; an option left alone keeps working for every design."""
    for name in topologies.TOPOLOGIES.names():
        assert main(["topo", name, "-o", str(tmp_path / f"{name}.json"), "--no-png"]) == 0
        doc, _ = flowmodel.run(name, 16, gpus_per_server=4, policies=["ecmp"])
        assert doc["fabric"]["topology"] == name
    capsys.readouterr()


def test_the_cost_table_says_what_a_fattree_does_not_apply() -> None:
    """One CostSpec serves every design of a cost table: a fat-tree row says what it left
    out instead of refusing the whole comparison."""
    plain = analyze("fattree", 4096).notes
    assert not any("not applied" in n for n in plain)
    for field, value in (("oversubscription", 2.0), ("servers_per_block", 4),
                         ("lanes_per_uplink", 2)):
        notes = analyze("fattree", 4096, CostSpec(**{field: value})).notes
        assert any(f"{field} not applied" in n for n in notes), field
        assert analyze("astral3", 4096, CostSpec(**{field: value}))  # used there


# --- the four cases of the issue ----------------------------------------------------------------
def test_rail3_with_one_rail_turns_at_the_aggregation_switches() -> None:
    for servers, hops in ((6, 3), (2, 1)):
        params = dict(servers=servers, gpus=1, servers_per_block=2)
        plan = build("rail3", **params)
        assert plan.counts["max_switch_hops"] == hops
        assert counts_for_spec("rail3", FabricSpec(**params)).max_switch_hops == hops
        assert hops_between_every_pair(Wiring(plan)) == hops
    assert build("rail3", servers=6, gpus=2, servers_per_block=2).counts["max_switch_hops"] == 5


def test_fattree_and_astral3_refuse_what_they_would_ignore() -> None:
    with pytest.raises(ValueError, match="fattree does not use oversubscription=2"):
        build("fattree", oversubscription=2)
    for field, value in (("k", 6), ("aggs_per_rail", 2), ("cores", 2)):
        with pytest.raises(ValueError, match=f"astral3 does not use {field}={value}"):
            build("astral3", **{field: value})
        with pytest.raises(ValueError, match=f"astral3 does not use {field}={value}"):
            counts_for_spec("astral3", FabricSpec(**{field: value}))


def test_the_builder_and_the_cost_model_refuse_the_same_nic() -> None:
    params = dict(servers=4, gpus=2, servers_per_block=4, nic_gbps=300, lanes_per_uplink=2)
    msg = "nic_gbps=300 must be a whole number"
    with pytest.raises(ValueError, match=msg):
        build("astral3", **params)
    with pytest.raises(ValueError, match=msg):
        counts_for_spec("astral3", FabricSpec(**params))
    for name in topologies.TOPOLOGIES.names():  # one rule for every design
        with pytest.raises(ValueError, match=msg):
            build(name, nic_gbps=300)


def test_optics_of_a_part_full_shuffle_box() -> None:
    params = dict(servers=12, gpus=3, servers_per_block=2)
    plan = build("astral3", **params)
    assert plan.shuffle is not None
    table = [dict(zip(plan.shuffle["columns"], row, strict=True))
             for row in plan.shuffle["lanes"]]
    outputs = {(r["box"], r["box_out"]) for r in table}
    ports = {(r["leaf"], r["port"]) for r in table}
    assert (len(outputs), len(ports)) == (20, 18)
    assert plan.counts["optics"] == 20 + 18 + 2 * 36 == 110
    assert counts_for_spec("astral3", FabricSpec(**params)).optics == 110


def test_a_sample_is_the_same_every_run() -> None:
    again = {name: _sample(name) for name in ("astral3", "fattree")}
    for name, sample in again.items():
        assert sample == _SAMPLES[name]
    # and the grids really vary what each design reads
    for name in TOPOS:
        ok = _SAMPLES[name][0]
        varied = {k for k in itertools.chain.from_iterable(ok)
                  if len({p[k] for p in ok}) > 1}
        assert varied == {k for k in GRID if k in TOPOS[name].options}, name
