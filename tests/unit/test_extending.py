"""The worked extensions of docs/extending.md: a policy and a topology, one file each,
copied into place.

``examples/plugins/roundrobin.py`` and ``examples/plugins/leafspine.py`` are what
docs/extending.md shows. The test copies the project into a scratch folder,
puts the two files where the page says (``controllers/policies/``,
``testbed/topologies/``), and drives the copy through the CLI in a fresh interpreter:
nothing else is edited, so this is exactly what a user who follows the page gets. The
integration test brings the new topology up under the new policy on a real fabric.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("astral_lab", "benchmarks", "controllers", "ops", "scenarios", "testbed", "traffic",
            "vocab")


def copy_with_plugins(dest: Path) -> Path:
    """The project's packages under ``dest``, with the two worked examples put in place."""
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, dest / pkg, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(REPO / "examples" / "plugins" / "roundrobin.py",
                dest / "controllers" / "policies" / "roundrobin.py")
    shutil.copy(REPO / "examples" / "plugins" / "leafspine.py",
                dest / "testbed" / "topologies" / "leafspine.py")
    return dest


def cli(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``astral-lab ARGS`` run from the copy (its packages first on the path)."""
    return subprocess.run([sys.executable, "-m", "astral_lab.cli", *args], cwd=root,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(root),
                               "ASTRAL_LAB_RESULTS": str(root / "results")})


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_with_plugins(tmp_path_factory.mktemp("extended"))


def test_the_worked_policy_is_listed_and_modelled(copy: Path) -> None:
    out = cli(copy, "policies")
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("roundrobin "))
    assert "model + controller" in line and "pins flows" in line
    out = cli(copy, "model", "astral3", "--gpus", "32", "--gpus-per-server", "4",
              "--servers-per-block", "2", "--workload", "decode", "--lb", "ecmp,planned,roundrobin",
              "-o", str(copy / "m"))
    assert out.returncode == 0, out.stderr
    res = {r["policy"]: r for r in json.loads((copy / "m" / "model.json").read_text())["results"]}
    assert set(res) == {"ecmp", "planned", "roundrobin"}
    # spread by count between every leaf pair: at the bound's side of hashing, not past it
    t = {p: r["completion_s"] for p, r in res.items()}
    assert t["planned"] <= t["roundrobin"] * (1 + 1e-9) <= t["ecmp"] * (1 + 2e-9)
    assert res["roundrobin"]["ratio_to_bound"] >= 1 - 1e-9


def test_the_worked_topology_builds_counts_and_models(copy: Path) -> None:
    out = cli(copy, "topo", "leafspine", "--gpus", "32", "--gpus-per-server", "4",
              "--servers-per-block", "2", "--lanes-per-uplink", "2", "-o",
              str(copy / "plan.json"), "--no-png")
    assert out.returncode == 0, out.stderr
    plan = json.loads((copy / "plan.json").read_text())
    assert plan["topology"] == "leafspine"
    assert plan["counts"]["switches_per_tier"] == {"leaf": 4, "spine": 8}
    out = cli(copy, "cost", "--gpus", "4096", "--designs", "astral3,leafspine", "-o",
              str(copy / "cost"), "--no-png")
    assert out.returncode == 0, out.stderr
    rows = json.loads((copy / "cost" / "cost.json").read_text())["rows"]
    assert [r["design"] for r in rows] == ["astral3", "leafspine"] and all(
        r["feasible"] for r in rows)
    out = cli(copy, "model", "leafspine", "--gpus", "32", "--gpus-per-server", "4",
              "--servers-per-block", "2", "--lb", "roundrobin", "-o", str(copy / "ml"))
    assert out.returncode == 0, out.stderr
    assert "leafspine" in out.stdout and "roundrobin" in out.stdout


def test_the_worked_topology_counts_match_its_plans(copy: Path) -> None:
    """The closed form and the builder agree over many sizes (the cost model stays honest)."""
    script = """
import json, itertools
from testbed.models.cost import counts_for_spec
from testbed.fabricspec import FabricSpec
from testbed.topologies import build
bad = []
for servers, gpus, spb, lanes, os_ in itertools.product((2, 4, 6, 12), (1, 2, 4), (1, 2),
                                                       (1, 2), (1.0, 2.0)):
    kw = dict(servers=servers, gpus=gpus, servers_per_block=spb, lanes_per_uplink=lanes,
              oversubscription=os_)
    try:
        plan = build("leafspine", **kw)
    except ValueError as exc:
        try:
            counts_for_spec("leafspine", FabricSpec(**kw))
        except ValueError:
            continue
        bad.append([kw, "builds nowhere but counts", str(exc)])
        continue
    c = counts_for_spec("leafspine", FabricSpec(**kw))
    got = (c.switches_per_tier, c.links_per_kind, c.optics, c.max_switch_hops)
    want = (plan.counts["switches_per_tier"], plan.counts["links_per_kind"],
            plan.counts["optics"], plan.counts["max_switch_hops"])
    if got != want:
        bad.append([kw, str(got), str(want)])
print(json.dumps(bad))
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(copy)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
