"""Scenarios are modules of scenarios/experiments/, found by `astral-lab list` and `run`.

A new experiment is one new file: the test copies each shipped module under a new name and
checks, in a fresh interpreter (the registry is read once), that the copy is listed, takes
its original's ``--flags``, names its results after itself, and (for the scenarios the
fake lab of ``scen_fakes`` can drive without a fabric) runs to the same rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from scenarios.base import Param, Run, RunResult, Scenario, scenario
from scenarios.experiments import SCENARIOS

REPO = Path(__file__).resolve().parents[2]

#: the scenarios ``scen_fakes.install`` runs whole, with what keeps them short
RUNNABLE = {"topology-compare": {"model_draws": 8},
            "lb-compare": {"model_draws": 10, "modes": ["ecmp", "planned"]},
            "decode-latency": {"model_draws": 4},
            "expert-skew": {"model_draws": 8, "tokens_per_gpu": 16}}


def test_every_scenario_is_named_after_its_module() -> None:
    for name, sc in SCENARIOS.all().items():
        assert sc.name == name and sc.fn.__module__ == \
            f"scenarios.experiments.{name.replace('-', '_')}"
        assert sc.description and "\n" not in sc.description


def test_a_module_must_declare_one_scenario_named_after_it() -> None:
    mod = ModuleType("scenarios.experiments.twice")

    def body(run: Run) -> None:
        pass

    body.__module__ = mod.__name__
    with pytest.raises(ValueError, match="must define one @scenario function .it defines 0"):
        Scenario.declared_in("twice", mod)
    mod.a = scenario("one")(body)
    mod.b = scenario("two")(body)
    with pytest.raises(ValueError, match=r"\(it defines 2\)"):
        Scenario.declared_in("twice", mod)
    del mod.b
    assert Scenario.declared_in("twice", mod) is mod.a and mod.a.name == "twice"
    mod.a = scenario("one", name="other")(body)
    with pytest.raises(ValueError, match="declares 'other'; a scenario is named after its "
                                         "module \\('twice'\\)"):
        Scenario.declared_in("twice", mod)
    with pytest.raises(TypeError, match="must be a Param, not 'one line'"):
        scenario("my-exp", "one line", Param("n", 1, "n"))


def test_a_scenario_made_elsewhere_is_listed_until_removed() -> None:
    toy = scenario("a toy", name="toy-listed")(lambda run: None)
    before = SCENARIOS.names()
    SCENARIOS.add("toy-listed", toy)
    try:
        assert SCENARIOS.names() == (*before, "toy-listed")
        assert SCENARIOS.get("toy-listed") is toy
        with pytest.raises(ValueError, match="scenario 'toy-listed' exists already"):
            SCENARIOS.add("toy-listed", toy)
    finally:
        SCENARIOS.remove("toy-listed")
    assert SCENARIOS.names() == before


def test_a_scenario_declares_what_run_prints_after_its_table() -> None:
    """``epilogue=`` replaces the results line; the CLI asks the scenario, not its name."""
    res = RunResult("toy", "/r/x", [], {})
    plain = scenario("a toy", name="toy")(lambda run: None)
    assert plain.closing(res) == ("\nresults: /r/x/ (REPORT.md, summary.csv, config.json, "
                                  "*.json, *.png)")
    own = scenario("a toy", name="toy", epilogue=lambda r: f"see {r.path}")(lambda run: None)
    assert own.closing(res) == "see /r/x"
    for sc in SCENARIOS.all().values():
        assert isinstance(sc.closing(res), str) and "/r/x" in sc.closing(res), sc.name
    if "demo" in SCENARIOS:  # the tour walks through the files it made
        assert SCENARIOS.get("demo").closing(res).startswith("\nEverything is in /r/x/:")


# Runs in a fresh interpreter: puts a copy of scenario ORIG, named NEW, on the package's
# path, then lists it, asks for its flags and (when RUNNABLE) runs both on the fake lab.
_CHECK = textwrap.dedent("""
    import contextlib, io, json, os, sys
    import pytest
    import scenarios.experiments as pkg
    pkg.__path__.append(sys.argv[1])
    orig, new, out, tests, kw = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
    sys.path.insert(0, tests)
    from astral_lab import cli
    from scenarios.experiments import SCENARIOS

    a, b = SCENARIOS.get(orig), SCENARIOS.get(new)
    rep = {"names": list(SCENARIOS.names()),
           "declared": [b.name, b.fn.__module__, b.description == a.description,
                        [p.name for p in b.params] == [p.name for p in a.params]]}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["list"])
    rep["list"] = [rc, [ln.split()[0] for ln in buf.getvalue().splitlines() if ln.strip()]]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            cli.main(["run", new, "--help"])
        except SystemExit as exc:
            rep["help"] = [exc.code, all(f"--{p.flag}" in buf.getvalue() for p in b.params)]
    if kw != "null":
        from scen_fakes import install

        with pytest.MonkeyPatch.context() as mp:
            install(mp, sys.modules[a.fn.__module__], sys.modules[b.fn.__module__])
            ra = a(quick=True, output=os.path.join(out, "a"), log=lambda _m: None,
                   **json.loads(kw))
            rb = b(quick=True, output=os.path.join(out, "b"), log=lambda _m: None,
                   **json.loads(kw))
        with open(os.path.join(rb.path, "REPORT.md")) as f:
            title = f.readline().strip()
        rep["run"] = [rb.name, title, ra.rows == rb.rows, len(rb.rows)]
    print(json.dumps(rep, default=str))
""")


@pytest.mark.parametrize("orig", SCENARIOS.names())
def test_a_copied_scenario_is_listed_takes_its_flags_and_runs(orig: str,
                                                              tmp_path: Path) -> None:
    new = f"copy-of-{orig}"
    extra = tmp_path / "extra"
    extra.mkdir()
    src = sys.modules[SCENARIOS.get(orig).fn.__module__].__file__
    shutil.copy(src, extra / f"{new.replace('-', '_')}.py")
    # its template beside it, as beside a shipped one (templates/ next to its folder)
    (tmp_path / "templates").mkdir()
    shutil.copy(REPO / "scenarios" / "templates" / f"{orig.replace('-', '_')}.md",
                tmp_path / "templates" / f"{new.replace('-', '_')}.md")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", _CHECK, str(extra), orig, new, str(out),
                           str(Path(__file__).parent), json.dumps(RUNNABLE.get(orig))],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO),
                               "ASTRAL_LAB_RESULTS": str(tmp_path / "results")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    # listed beside its original (the same ORDER), the others as before
    assert new in rep["names"] and [n for n in rep["names"] if n != new] == list(SCENARIOS.names())
    assert rep["declared"] == [new, f"scenarios.experiments.{new.replace('-', '_')}", True,
                               True]
    assert rep["list"][0] == 0 and new in rep["list"][1] and orig in rep["list"][1]
    assert rep["help"] == [0, True]
    if orig in RUNNABLE:
        name, title, same_rows, n = rep["run"]
        assert name == new and title.startswith(f"# {new}: ")
        assert same_rows and n > 0
