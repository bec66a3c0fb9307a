"""One validation layer (``vocab.validate``): every numeric option, list, output path
and plan file a user gives is checked once, at parse time, by one rule; a mistake is one
line on stderr naming the option and the rule, exit 2, and nothing written.

No root and no fabric: ``run`` is told it is not root (so a value that slipped through would
stop at the root check, not at a bring-up) and ``make_lab`` fails the test if reached.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from astral_lab import cli, controller_cli
from controllers import policies
from scenarios import base
from scenarios.experiments import SCENARIOS
from testbed import topologies
from testbed.fabricspec import COST_RULES, FABRIC_RULES, CostSpec, FabricSpec
from testbed.models import flowmodel
from testbed.topologies import build, fabric_spec, spec_for_gpus
from vocab.plan import WiringPlan, check_schema
from vocab.validate import BadValue, Rule, count, items, out_dir, out_file, positive, real

#: a path no process can write, even root's (procfs makes no files)
UNWRITABLE = "/proc/astral-lab-x"


@pytest.fixture(autouse=True)
def no_fabric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Results in tmp; not root; no Lab can be made."""
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a bad value reached the bring-up")

    monkeypatch.setattr(cli, "make_lab", refuse)  # `up`
    monkeypatch.setattr(base, "make_lab", refuse)  # a scenario's Run.lab
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    results = tmp_path / "results"
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(results))
    return results


def run_cli(argv: list[str]) -> int:
    """``astral-lab ARGV`` in this process: its exit status, argparse's refusals too."""
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse refuses as it parses
        return int(exc.code or 0)


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """What the command said on stderr, which must be one line and no traceback."""
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _nothing_in(path: Path) -> bool:
    return not path.exists() or not any(path.iterdir())


# --- plans with one mistake each -------------------------------------------------------------
def _plan_doc() -> dict[str, Any]:
    return build("astral3", servers=2, gpus=2).to_dict()


def _broken(how: str) -> Any:
    doc = _plan_doc()
    if how == "list":
        return []
    if how == "no-name":
        del doc["nodes"][0]["name"]
    elif how == "no-b_port":
        del doc["links"][0]["b_port"]
    elif how == "nodes-x":
        doc["nodes"] = "x"
    elif how == "no-links":
        del doc["links"]
    elif how == "nan-rate":
        doc["links"][0]["mbps"] = float("nan")
    elif how == "port-text":
        doc["links"][1]["a_port"] = "3"
    elif how == "extra-field":
        doc["nodes"][1]["colour"] = "red"
    elif how == "scale-0":
        doc["scale"] = 0
    return doc


PLAN_MISTAKES = [
    ("list", "a JSON object is expected (got list)"),
    ("no-name", "nodes[0].name is missing"),
    ("no-b_port", "links[0].b_port is missing"),
    ("nodes-x", "nodes must be a list (got str)"),
    ("no-links", "links is missing"),
    ("nan-rate", "links[0].mbps must be a finite number"),
    ("port-text", "links[1].a_port must be an integer (got '3')"),
    ("extra-field", "nodes[1].colour is not a field of a node"),
    ("scale-0", "scale must be a finite number > 0"),
]


@pytest.mark.parametrize("how, message", PLAN_MISTAKES)
def test_a_broken_plan_is_refused_naming_the_field(how: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_schema(_broken(how))
    assert message in str(info.value)
    with pytest.raises(ValueError, match="wiring plan|not a wiring plan"):
        WiringPlan.from_dict(_broken(how))


def test_a_good_plan_passes_the_schema() -> None:
    doc = _plan_doc()
    check_schema(doc)
    assert WiringPlan.from_dict(json.loads(json.dumps(doc))).to_dict() == doc


# --- the cases users met, and their kin ---------------------------------------------------
def _cases(tmp: Path) -> list[tuple[list[str], str]]:
    (tmp / "a-folder").mkdir(exist_ok=True)
    (tmp / "a-file").write_text("x")
    plans = {}
    for how, _m in PLAN_MISTAKES[:5]:
        plans[how] = tmp / f"plan-{how}.json"
        plans[how].write_text(json.dumps(_broken(how)))
    good = tmp / "plan.json"
    good.write_text(json.dumps(_plan_doc()))
    out = str(tmp / "out")
    return [
        (["topo", "astral3", "--scale", "nan"], "argument --scale: must be a finite number"),
        (["topo", "astral3", "--scale", "inf"], "argument --scale"),
        (["topo", "astral3", "--scale", "1e9"], "argument --scale"),
        (["topo", "astral3", "--scale", "1"], "argument --scale"),
        (["topo", "astral3", "--scale", "0"], "argument --scale"),
        (["topo", "astral3", "--scale", "1e-2"], "use --scale <= 0.0025"),
        (["topo", "astral3", "--lane-gbps", "nan"], "argument --lane-gbps"),
        (["topo", "astral3", "--servers", "2.5"], "argument --servers: must be a whole number"),
        (["topo", "astral3", "--servers", "-4"], "argument --servers"),
        (["topo", "fattree", "--k", "1e9"], "argument --k"),
        (["topo", "astral3", "--oversubscription", "inf"], "argument --oversubscription"),
        (["topo", "astral3", "-o", UNWRITABLE + "/plan.json"], "argument -o/--output"),
        (["topo", "astral3", "-o", str(tmp / "a-folder") + "/"], "is a folder"),
        (["topo", "astral3", "-o", str(tmp / "a-folder")], "is a folder"),
        (["topo", "astral3", "-o", str(tmp / "a-file") + "/p.json"], "argument -o/--output"),
        (["topo", "astral3", "-o", out + "/plan.json", "--png", UNWRITABLE + ".png"],
         "argument --png"),
        (["topo", "astral3", "--png", UNWRITABLE + ".png"], "argument --png"),
        (["up", "astral3", "--scale", "nan"], "argument --scale"),
        (["up", "astral3", "--lb", "qp-scaling:qps=1e9"], "argument --lb: qp-scaling:qps"),
        (["up", "astral3", "--cluster", ""], "argument --cluster"),
        (["up", "astral3", "--cluster", "a,,b"], "argument --cluster: empty item"),
        (["up", "astral3", "--dashboard-port", "nan"], "argument --dashboard-port"),
        (["model", "astral3", "--scale", "nan", "-o", out], "argument --scale"),
        (["model", "astral3", "--lb", "ecmp,,ecmp", "-o", out], "argument --lb: empty item"),
        (["model", "astral3", "--lb", "ecmp,ecmp", "-o", out], "argument --lb: 'ecmp' is "
         "listed twice"),
        (["model", "astral3", "--lb", "qp-scaling:qps=1e9", "-o", out],
         "argument --lb: qp-scaling:qps must be a whole number in 1..1024"),
        (["model", "astral3", "-o", UNWRITABLE], "argument -o/--output"),
        (["model", "astral3", "-o", str(tmp / "a-file")], "exists and is not a folder"),
        (["model", "astral3", "--gpus", "0"], "argument --gpus"),
        (["model", "astral3", "--gpus", "1e9"], "argument --gpus"),
        (["model", "astral3", "--qps", "1e9"], "argument --qps"),
        (["model", "astral3", "--seed", "-1"], "argument --seed"),
        (["model", "astral3", "--event-tolerance", "nan"], "argument --event-tolerance"),
        (["model", "astral3", "--gpus", "1024", "-o", out], "--servers-per-block 0"),
        (["cost", "--gpus", "32", "-o", UNWRITABLE], "argument -o/--output"),
        (["cost", "--gpus", "32", "-o", str(tmp / "a-file")], "exists and is not a folder"),
        (["cost", "--gpus", "1000000000", "-o", out], "argument --gpus"),
        (["cost", "--gpus", "32,,64", "-o", out], "argument --gpus: empty item"),
        (["cost", "--gpus", "32", "--designs", "astral3,astral3", "-o", out],
         "argument --designs"),
        (["cost", "--gpus", "32", "--price-optic-lane", "nan", "-o", out],
         "argument --price-optic-lane"),
        (["cost", "--gpus", "32", "--lanes-per-uplink", "0", "-o", out],
         "argument --lanes-per-uplink"),
        (["controller", "--plan", str(plans["list"])], "a JSON object is expected"),
        (["controller", "--plan", str(plans["no-name"])], "nodes[0].name is missing"),
        (["controller", "--plan", str(plans["no-b_port"])], "links[0].b_port is missing"),
        (["controller", "--plan", str(plans["nodes-x"])], "nodes must be a list"),
        (["controller", "--plan", str(plans["no-links"])], "links is missing"),
        (["controller", "--plan", str(tmp / "missing.json")], "--plan"),
        (["controller", "--plan", str(good), "--of-port", "99999"], "argument --of-port"),
        (["controller", "--plan", str(good), "--rest-port", "0"], "argument --rest-port"),
        (["controller", "--plan", str(good), "--poll-interval", "nan"],
         "argument --poll-interval"),
        (["controller", "--plan", str(good), "--adaptive-hold", "2.5"],
         "argument --adaptive-hold"),
        (["controller", "--plan", str(good), "--adaptive-threshold", "0.5",
          "--adaptive-hysteresis", "0.6"], "hysteresis must be in [0, threshold"),
        (["controller", "--plan", str(good), "--lb", "qp-scaling:qps=1e9"], "argument --lb"),
        (["controller", "--plan", str(good), "--state", UNWRITABLE + "/s.json"],
         "argument --state"),
        (["dashboard", "--interval", "inf"], "argument --interval"),
        (["dashboard", "--plan", str(tmp / "missing.json")], "argument --plan: "),
        (["ops", "diagnose", "--ask", "?", "--db", str(tmp / "missing.sqlite")],
         "--db " + str(tmp / "missing.sqlite") + ": no such file"),
        (["ops", "diagnose", "--ask", "?", "--db", str(good)], "not an ops telemetry file"),
        (["ops", "diagnose", "--ask", "?", "--db", str(good), "--baseline",
          str(tmp / "missing.sqlite")], "--baseline"),
        (["ops", "watch", "--max-rows", "0"], "argument --max-rows"),
        (["ops", "diagnose", "--collect", "-1"], "argument --collect"),
        (["run", "lb-compare", "--scale", "nan"], "argument --scale"),
        (["run", "lb-compare", "--gpus", "-1"], "argument --gpus"),
        (["run", "lb-compare", "--seconds", "-5"], "argument --seconds"),
        (["run", "lb-compare", "--ecmp-samples", "0"], "argument --ecmp-samples"),
        (["run", "lb-compare", "--modes", "ecmp,,planned"], "argument --modes: empty item"),
        (["run", "lb-compare", "-o", UNWRITABLE], "argument -o/--output"),
        (["demo", "--scale", "inf"], "argument --scale"),
    ]


def test_every_listed_mistake_is_one_line_exit_2_and_nothing_written(
        tmp_path: Path, no_fabric: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = _cases(tmp_path)
    out = tmp_path / "out"
    for argv, needle in cases:
        status = run_cli(argv)
        line = one_line(capsys)
        assert status == 2, (argv, line)
        assert needle in line, (argv, line)
        assert line.startswith("astral-lab"), (argv, line)
        assert _nothing_in(no_fabric), (argv, list(no_fabric.iterdir()))
        assert not out.exists(), argv
        assert not (tmp_path / "missing.sqlite").exists(), argv  # a file to read is not made


def test_the_results_root_is_checked_before_work(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("x")
    for root, needle in ((UNWRITABLE, "not a writable folder"),
                         (str(tmp_path / "a-file"), "exists and is not a folder")):
        monkeypatch.setenv("ASTRAL_LAB_RESULTS", root)
        for argv in (["topo", "astral3"], ["model", "astral3", "--lb", "ecmp"],
                     ["cost", "--gpus", "32"]):
            assert run_cli(argv) == 2, argv
            line = one_line(capsys)
            assert "ASTRAL_LAB_RESULTS" in line and needle in line, line


def test_a_busy_openflow_port_is_one_line_exit_1(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan_doc()))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert run_cli(["controller", "--plan", str(plan), "--of-port", str(port)]) == 1
    line = one_line(capsys)
    assert f"--of-port {port}: cannot listen" in line


def test_topo_png_without_o_goes_where_it_is_told(tmp_path: Path, no_fabric: Path) -> None:
    png = tmp_path / "drawings" / "f.png"
    assert run_cli(["topo", "astral3", "--gpus", "4", "--gpus-per-server", "2", "--png",
                    str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    (folder,) = no_fabric.iterdir()
    assert os.listdir(folder) == ["plan.json"]


# --- the controller's --lb is up's --lb ----------------------------------------------------------
def test_controller_takes_host_side_policies_with_options_as_up_does(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan_doc()))
    for spec in ("qp-scaling:qps=8", "spray:entropies=64", "flowlet", "planned"):
        args = controller_cli.parse_args(["--plan", str(plan), "--lb", spec])
        assert args.lb == spec
        up = cli.parser().parse_args(["up", "astral3", "--lb", spec])
        assert up.lb == args.lb
    assert policies.parse("qp-scaling:qps=8", controller=True).name == "qp-scaling"


def test_the_controller_runs_the_mode_of_a_spec_with_options(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """``serve`` hands the app the mode's name; the options are the hosts' (as ``Lab``).
    os-ken gets its own options too: a switch slow to read the controller's messages is
    dropped after ``PEER_SILENCE_S``, not os-ken's 5 s (switches applying a decode burst's
    entries in an emulated VM fell off and reconnected into full resyncs)."""
    from os_ken import cfg

    from controllers.fabric import PEER_SILENCE_S
    from controllers.shell import run

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan_doc()))
    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def fake_server(*_a: Any) -> Any:
        from controllers.shell import app

        seen.update(app.SETTINGS)
        seen["socket_timeout"] = cfg.CONF.socket_timeout
        raise Stop

    monkeypatch.setattr(run, "make_server", fake_server)
    args = controller_cli.parse_args(["--plan", str(plan), "--lb", "qp-scaling:qps=8",
                                      "--of-port", "1", "--rest-port", "1"])
    monkeypatch.setattr(run, "can_listen", lambda *_a: "")
    with pytest.raises(Stop):
        run.serve(args)
    assert seen["lb"] == "qp-scaling"
    assert seen["socket_timeout"] == PEER_SILENCE_S > 5


# --- every scenario's parameters, from their declarations --------------------------------------
#: not finite: refused by every rule alike, so tried once per kind of rule (below)
NOT_FINITE = ["nan", "inf", "-inf"]


def _bad_values(rule: Rule) -> list[str]:
    """Values at this rule's own edges: just below, just above, fractional where whole."""
    out = []
    for v in ("0", "-1"):  # the largest of these the rule refuses is just below its low
        try:
            rule.check(v)
        except BadValue:
            out.append(v)
            break
    if rule.low is not None and rule.low not in (0, -1):
        out.append(f"{rule.low}" if rule.low_open else f"{rule.low - 1}")
    if rule.high is not None:
        out.append(f"{rule.high}" if rule.high_open else f"{rule.high * 2 + 1}")
    if rule.whole:
        out.append("2.5")
    return list(dict.fromkeys(out))


def _scenario_cases() -> list[tuple[str, str, str]]:
    """Every scenario parameter at its own edges; the values every rule refuses alike (not
    finite) once for each kind of parameter (a list or one value, whole or not)."""
    cases = []
    kinds_tried: set[tuple[bool, bool]] = set()
    for name, sc in SCENARIOS.all().items():
        for p in sc.params:
            if p.numeric:
                assert p.rule is not None, f"{name} --{p.flag} declares no rule"
                bad = _bad_values(p.rule)
                kind = (isinstance(p.default, list), bool(p.rule.whole))
                if kind not in kinds_tried:
                    kinds_tried.add(kind)
                    bad = NOT_FINITE + bad
                if isinstance(p.default, list):
                    ok = str(p.default[0])
                    bad += [f"{ok},,{ok}", f"{ok},{ok}"]
            elif isinstance(p.default, bool):
                bad = ["maybe", ""]
            elif p.choices:
                bad = ["nosuch"] + ([f"{p.choices[0]},{p.choices[0]}", ","]
                                    if isinstance(p.default, list) else [])
            else:
                continue
            cases += [(name, p.flag, v) for v in bad]
    return cases


SCENARIO_CASES = _scenario_cases()


def test_every_numeric_scenario_parameter_declares_a_rule_its_defaults_meet() -> None:
    for name, sc in SCENARIOS.all().items():
        for p in sc.params:
            if p.numeric:
                assert p.rule is not None, f"{name} --{p.flag}"
            for value in (p.default, p.quick):
                if value is not None:
                    p.check(value, p.flag)


@pytest.mark.parametrize("scenario, flag, value", SCENARIO_CASES,
                         ids=[f"{s}--{f}={v}" for s, f, v in SCENARIO_CASES])
def test_a_bad_scenario_parameter_is_refused_at_parse(
        scenario: str, flag: str, value: str, no_fabric: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["run", scenario, f"--{flag}", value]) == 2
    line = one_line(capsys)
    assert line.startswith(f"astral-lab run {scenario}: error: argument --{flag}: "), line
    assert _nothing_in(no_fabric)
    # ... and from Python (a notebook), before any folder
    sc = SCENARIOS.get(scenario)
    param = next(p for p in sc.params if p.flag == flag)
    py: Any = value
    if param.numeric and not isinstance(param.default, list):
        py = float(value) if value.lower().strip("+-") in ("nan", "inf") or "." in value \
            else int(value)
    with pytest.raises(ValueError, match=f"--{flag}"):
        sc.resolve(False, {param.name: py})
    assert _nothing_in(no_fabric)


# --- policy options ---------------------------------------------------------------------------
def test_every_policy_option_has_a_rule_its_default_meets() -> None:
    for name, pol in policies.POLICIES.all().items():
        assert set(pol.rules) == set(pol.defaults), name
        for key, value in pol.defaults.items():
            assert pol.rules[key].check(value, key) == value


@pytest.mark.parametrize("spec", ["qp-scaling:qps=1e9", "qp-scaling:qps=nan",
                                  "qp-scaling:qps=0", "qp-scaling:qps=1.5",
                                  "spray:entropies=1e9", "flowlet:gap_rtts=inf",
                                  "plb:rounds=-1", "plb:delay_frames=nan"])
def test_a_policy_option_out_of_its_rule_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match=spec.split("=")[0]):
        policies.parse(spec)


# --- the rules and paths themselves ------------------------------------------------------------
@pytest.mark.parametrize("rule, good, bad", [
    (count(1, 1024), ["1", "1024", "8.0", "1e3", "1_000", 7], ["0", "1025", "2.5", "nan", "x",
                                                                True, "", float("inf")]),
    (positive(1e-2), ["1e-4", "0.01", 0.005], ["0", "-1e-4", "0.02", "nan", "inf", "-inf"]),
    (real(0, 0.5, high_open=True), ["0", "0.49"], ["0.5", "-0.1", "nan"]),
])
def test_rules(rule: Rule, good: list[Any], bad: list[Any]) -> None:
    for v in good:
        x = rule.check(v, "--x")
        assert math.isfinite(x) and (isinstance(x, int) if rule.whole else isinstance(x, float))
    for v in bad:
        with pytest.raises(BadValue, match=r"^--x must be a (whole|finite) number"):
            rule.check(v, "--x")


def test_lists_refuse_empty_items_and_repeats() -> None:
    assert items("a, b", "--l") == ["a", "b"]
    assert items("8,16", "--l", rule=count(1, 64)) == [8, 16]
    for text, msg in (("a,,b", "empty item"), ("a,a", "listed twice"), ("", "at least one"),
                      ("a,z", "not one of")):
        with pytest.raises(BadValue, match=msg):
            items(text, "--l", choices=("a", "b"))


def test_output_paths_are_checked_without_writing(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert out_dir(str(tmp_path / "new" / "deeper")) == str(tmp_path / "new" / "deeper")
    assert out_file(str(tmp_path / "new" / "p.json"))
    assert not (tmp_path / "new").exists()  # nothing made
    assert os.listdir(tmp_path) == ["f"]  # and no probe file left behind
    for bad in (UNWRITABLE, str(tmp_path / "f"), str(tmp_path / "f" / "below")):
        with pytest.raises(BadValue):
            out_dir(bad, "-o")
    for bad in (UNWRITABLE + "/p.json", str(tmp_path) + "/", str(tmp_path),
                str(tmp_path / "f" / "p.json")):
        with pytest.raises(BadValue):
            out_file(bad, "-o")


# --- one fabric per name -------------------------------------------------------------------
@pytest.mark.parametrize("design", topologies.TOPOLOGIES.names())
def test_every_verb_builds_the_same_default_fabric(design: str) -> None:
    """``topo``, ``up``, ``model``, ``mn --custom`` and ``spec_for_gpus`` resolve the same
    spec for a bare design name, and ``model`` builds the very plan ``topo`` writes."""
    p = cli.parser()
    topo = fabric_spec(design, **cli._spec_params(p.parse_args(["topo", design])))
    up = fabric_spec(design, **cli._spec_params(p.parse_args(["up", design])))
    margs = p.parse_args(["model", design])
    fabric = {n: getattr(margs, n) for n in flowmodel.FABRIC_FIELDS
              if getattr(margs, n) is not None}
    model = flowmodel._spec(design, margs.gpus, margs.gpus_per_server, fabric)
    assert topo == up == model == spec_for_gpus(design) == fabric_spec(design)
    assert topo == topologies.TOPOLOGIES.get(design).resolve(FabricSpec())
    plan = build(design)  # what `mn --custom testbed/shell/mntopo.py --topo DESIGN` builds
    doc, _ = flowmodel.run(design, margs.gpus, gpus_per_server=margs.gpus_per_server,
                           policies=["ecmp"], fabric=fabric, mode="per-flow")
    assert doc["fabric"]["params"] == plan.params
    assert {k: v for k, v in doc["fabric"].items() if k in plan.counts} == plan.counts


def test_model_astral3_at_32_gpus_is_topos_two_blocks() -> None:
    spec = spec_for_gpus("astral3", 32)
    counts = build("astral3").counts
    assert spec.servers_per_block == 2 and counts["blocks"] == 2
    assert counts["leaves"] == 16 and counts["spines"] == 4
    assert flowmodel._spec("astral3", 32, 8, {}) == spec


def test_servers_per_block_0_fills_the_leaf_in_every_verb() -> None:
    topo = fabric_spec("astral3", servers=128, servers_per_block=0)
    model = flowmodel._spec("astral3", 1024, 8, {"servers_per_block": 0})
    assert topo == model and topo.servers_per_block == 64
    assert build("astral3", servers=4, servers_per_block=0).counts["blocks"] == 1


def test_the_demo_and_cost_share_the_defaults() -> None:
    """The demo's fabric is the default 32-GPU one; the cost model's fields are
    ``FabricSpec``'s, with the same rules (it sizes blocks and spines as a buyer would)."""
    demo = {p.name: p.default for p in SCENARIOS.get("demo").params}
    assert (demo["gpus"], demo["gpus_per_server"]) == (FabricSpec().gpu_count,
                                                       FabricSpec().gpus)
    fab, cost = FabricSpec(), CostSpec()
    for name in COST_RULES:
        twin = "gpus" if name == "gpus_per_server" else name
        assert COST_RULES[name] == FABRIC_RULES[twin]
        if name != "servers_per_block":
            assert getattr(cost, name) == getattr(fab, twin), name
