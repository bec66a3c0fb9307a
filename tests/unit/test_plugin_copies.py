"""docs/extending.md's proof, family by family: a module put in place under a new name is
listed, works, and leaves its family's tests green with no other file edited.

The page's own policy (``examples/plugins/roundrobin.py``) and topology
(``examples/plugins/leafspine.py``), and copies of a shipped detector (``loss`` as
``my-loss``), scenario (``lb-compare`` as ``my-exp``, with its template copied under the new
name and named by the copy) and topology (``astral3`` as ``my_topo``), go into scratch
folders appended to their packages' ``__path__`` (discovery is lazy, so that is where a new
file is looked for). In a fresh interpreter that does this first (a pytest plugin), the
families' own contract tests run over the registries with the copies in them, and the CLI
lists and runs each copy. The copied template is read from a folder holding the shipped
templates beside it, as if it had been dropped into ``scenarios/templates/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: what goes where: (package folder in the scratch root, new file, copied from)
COPIES = (
    ("policies", "roundrobin.py", REPO / "examples" / "plugins" / "roundrobin.py"),
    ("topologies", "leafspine.py", REPO / "examples" / "plugins" / "leafspine.py"),
    ("topologies", "my_topo.py", REPO / "testbed" / "topologies" / "astral3.py"),
    ("detectors", "my_loss.py", REPO / "ops" / "detectors" / "loss.py"),
    ("experiments", "my_exp.py", REPO / "scenarios" / "experiments" / "lb_compare.py"),
)

#: the families' tests, run with the copies in place (the ones that copy every module of a
#: family themselves are left out: each spawns interpreters, and copies of copies add nothing)
FAMILY_TESTS = ("test_policies.py", "test_hostlb.py", "test_topology_modules.py",
                "test_detector_modules.py", "test_scenario_modules.py", "test_plugins.py",
                "test_plan.py", "test_dashboard_state.py")

#: the pytest plugin (and module the check imports) that puts the scratch folders in place
_PLUGIN = textwrap.dedent('''
    """Appends the scratch folders of PLUGIN_COPIES to the plug-in packages' __path__."""
    import os
    from importlib import resources
    from pathlib import Path

    import controllers.policies
    import ops.detectors
    import testbed.topologies

    ROOT = Path(os.environ["PLUGIN_COPIES"])
    for pkg, sub in ((testbed.topologies, "topologies"), (controllers.policies, "policies"),
                     (ops.detectors, "detectors")):
        assert getattr(pkg, "__path__")
        pkg.__path__.append(str(ROOT / sub))
    # last: the scenarios' modules read the policies and topologies as they load (the
    # model's default policies, the Mininet topos), so those folders are in place first
    import scenarios.experiments

    scenarios.experiments.__path__.append(str(ROOT / "experiments"))
    _files = resources.files
    resources.files = lambda pkg: ROOT if pkg == "scenarios" else _files(pkg)
''')

#: lists each copy through the CLI and runs it: the policy in the controller and the model,
#: the detector on its fault, the scenario on the fake lab, the topology through `topo`
_CHECK = textwrap.dedent("""
    import contextlib, io, json, os, random, sys
    out, tests = sys.argv[1], sys.argv[2]
    sys.path.insert(0, tests)
    import with_copies  # noqa: F401  (the scratch folders first)
    import pytest
    from astral_lab import cli
    from controllers.fabric import FabricLogic
    from controllers.policies import POLICIES
    from ops.detectors import DETECTORS, Engine
    from ops.telemetry import History
    from scenarios.experiments import SCENARIOS
    from testbed.models.perflow import model_flows
    from testbed.topologies import TOPOLOGIES, build
    from vocab.flows import Flow
    from scen_fakes import install
    from test_ops_detectors import NIC, clean_poll

    rep = {"names": {"policies": list(POLICIES.names()), "detectors": list(DETECTORS.names()),
                     "scenarios": list(SCENARIOS.names()), "topologies": list(TOPOLOGIES.names())}}
    listed = {}
    for verb in ("policies", "list"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = cli.main([verb])
        listed[verb] = [rc, [ln.split()[0] for ln in buf.getvalue().splitlines() if ln.strip()]]
    rep["listed"] = listed
    rcs = []
    for topo in ("leafspine", "my_topo"):
        with contextlib.redirect_stdout(io.StringIO()):
            rcs.append(cli.main(["topo", topo, "--gpus", "8", "--gpus-per-server", "2",
                                 "--servers-per-block", "2", "-o",
                                 os.path.join(out, topo + ".json"), "--no-png"]))
    rep["topo"] = [rcs, [json.load(open(os.path.join(out, t + ".json")))["topology"]
                         for t in ("leafspine", "my_topo")]]

    plan = build("my_topo", servers=4, gpus=2, servers_per_block=2)
    hosts = [h.name for h in plan.hosts]
    flows = [Flow(s, d, 49152, bytes=1 << 18) for s in hosts for d in hosts if s != d]
    logic = FabricLogic(plan, "roundrobin")
    logic.set_flows(flows)
    rep["policy"] = [len(logic.assign), model_flows(plan, flows, "roundrobin").completion_s]

    small = build("astral3", servers=2, gpus=2)
    rng, hist, eng, alerts = random.Random(1), History(), Engine(small), []
    for i in range(30):
        v = clean_poll(small, rng)
        if i >= 20:
            v[(NIC, "in_drop_pps")], v[(NIC, "out_drop_pps")] = 100.0, 80.0
        hist.add(1000.0 + i, v)
        alerts += [[a.detector, a.component] for a in eng.step(hist)]
    rep["detector"] = alerts

    sc = SCENARIOS.get("my-exp")
    with pytest.MonkeyPatch.context() as mp:
        install(mp, sys.modules[sc.fn.__module__])
        res = sc(quick=True, output=os.path.join(out, "run"), log=lambda _m: None,
                 model_draws=10, modes=["ecmp", "roundrobin"])
    with open(os.path.join(res.path, "REPORT.md")) as f:
        report = f.read()
    rep["scenario"] = [res.name, report.splitlines()[0], len(res.rows),
                       sorted({r.get("mode") for r in res.rows if r.get("mode")}),
                       "COPIED TEMPLATE" in report]
    print(json.dumps(rep, default=str))
""")


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The scratch root (one folder per package, ``templates/``, the plugin) and the
    environment that puts it in place."""
    root = tmp_path_factory.mktemp("copies")
    for sub, name, src in COPIES:
        (root / sub).mkdir(exist_ok=True)
        shutil.copy(src, root / sub / name)
    # the copy is not edited: it reads the template named as its own file
    assert "Prose.of_module(__name__)" in (root / "experiments" / "my_exp.py").read_text()
    shutil.copytree(REPO / "scenarios" / "templates", root / "templates")
    tpl = (root / "templates" / "lb_compare.md").read_text()
    (root / "templates" / "my_exp.md").write_text(tpl.replace(
        "<!-- setup keep-lines -->\n", "<!-- setup keep-lines -->\nCOPIED TEMPLATE:\n", 1))
    (root / "with_copies.py").write_text(_PLUGIN)
    env = {**os.environ, "PLUGIN_COPIES": str(root), "ASTRAL_LAB_RESULTS": str(root / "results"),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(root)])}
    return root, env


def test_the_families_tests_pass_with_the_copies_in_place(
        copies: tuple[Path, dict[str, str]]) -> None:
    root, env = copies
    tests = [str(REPO / "tests" / "unit" / f) for f in FAMILY_TESTS]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "with_copies",
                           "-p", "no:cacheprovider", "-k", "not copied", *tests],
                          cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-2000:])
    assert " passed" in proc.stdout.splitlines()[-1]


def test_each_copy_is_listed_and_works(copies: tuple[Path, dict[str, str]]) -> None:
    root, env = copies
    out = root / "out"
    out.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", _CHECK, str(out), str(Path(__file__).parent)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    names = rep["names"]
    assert "roundrobin" in names["policies"] and "my-loss" in names["detectors"]
    assert "my-exp" in names["scenarios"] and {"leafspine", "my_topo"} <= set(names["topologies"])
    (rc, policies), (rc2, scenarios) = rep["listed"]["policies"], rep["listed"]["list"]
    assert rc == rc2 == 0 and "roundrobin" in policies and "my-exp" in scenarios
    assert rep["topo"] == [[0, 0], ["leafspine", "my_topo"]]
    pinned, completion = rep["policy"]
    assert pinned > 0 and completion > 0
    where = {d: c for d, c in rep["detector"]}
    assert "loss" in where and where.get("my-loss") == where["loss"], rep["detector"]
    name, title, rows, modes, own_words = rep["scenario"]
    assert name == "my-exp" and title.startswith("# my-exp: ") and rows > 0
    assert modes == ["ecmp", "roundrobin"] and own_words
