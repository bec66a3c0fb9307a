"""Topologies are modules of testbed/topologies/, found by every consumer.

A new design is one new file: the test copies each shipped module under a new name and
checks, in a fresh interpreter (argument choices and the `mn --custom` table are read at
import), that the copy builds the same plan, counts and sizes the same fabric, and models
the same job as its original through `astral-lab topo`, `cost` and `model`.
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

from testbed import topologies
from testbed.fabricspec import FabricSpec
from testbed.models.cost import counts_for_spec
from testbed.topologies import build

REPO = Path(__file__).resolve().parents[2]

#: a small size every design builds
SMALL = {"servers": 4, "gpus": 2, "servers_per_block": 2}


#: what the shipped designs declare (blocks, bisection, a two-tier what-if): a check of
#: those modules, not a list of the topologies there are
DECLARED = {"astral3": (True, True, True), "rail3": (True, False, False),
            "railonly": (True, False, False), "fattree": (False, False, False)}


def test_every_topology_keeps_the_contract() -> None:
    """Whatever modules the folder holds: each builds, counts and says what it is."""
    topos = topologies.TOPOLOGIES.all()
    got = {n: (t.blocks, t.bisection, t.two_tier is not None) for n, t in topos.items()
           if n in DECLARED}
    assert got == {n: d for n, d in DECLARED.items() if n in topos}
    for name, topo in topos.items():
        assert topo.module.__name__ == f"testbed.topologies.{name}"
        assert topo.summary and "\n" not in topo.summary, name
        plan = build(name, **SMALL)
        assert plan.topology == name
        assert counts_for_spec(name, FabricSpec(**SMALL)).design == name
    known = ", ".join(topos)
    with pytest.raises(ValueError, match=f"^unknown topology 'mesh'; choose from {known}$"):
        build("mesh")
    with pytest.raises(ValueError, match=f"unknown topology 'mesh'; choose from {known}$"):
        counts_for_spec("mesh", FabricSpec())


def test_builders_maps_every_topology_to_its_module_builder() -> None:
    from testbed.topologies import BUILDERS

    assert list(BUILDERS) == list(topologies.TOPOLOGIES.names())
    spec = FabricSpec(**SMALL)
    own = topologies.TOPOLOGIES.get("astral3").build(spec)
    assert BUILDERS["astral3"](spec).to_dict() == own.to_dict()
    assert BUILDERS["fattree"](spec).topology == "fattree"


# Runs in a fresh interpreter: puts a copy of topology ORIG, named NEW, on the package's
# path, then uses NEW and ORIG side by side through each consumer.
_CHECK = textwrap.dedent("""
    import contextlib, io, json, sys
    import testbed.topologies as pkg
    pkg.__path__.append(sys.argv[1])
    orig, new, out = sys.argv[2], sys.argv[3], sys.argv[4]
    from astral_lab.cli import main
    from testbed import topologies
    from testbed.models import cost
    from testbed.models import flowmodel as fm
    from testbed.shell import mntopo
    from testbed.fabricspec import FabricSpec
    from testbed.topologies import build
    small = {"servers": 4, "gpus": 2, "servers_per_block": 2}
    rep = {"names": list(topologies.TOPOLOGIES.names()), "mn": new in mntopo.topos}
    a, b = build(orig, **small).to_dict(), build(new, **small).to_dict()
    rep["plan"] = [b["topology"], {k: v for k, v in a.items() if k != "topology"}
                   == {k: v for k, v in b.items() if k != "topology"}]
    def same_fabric(x, y):
        dx, dy = dict(vars(x)), dict(vars(y))
        return dx.pop("design") == orig and dy.pop("design") == new and dx == dy
    rep["counts"] = same_fabric(cost.counts_for_spec(orig, FabricSpec(**small)),
                                cost.counts_for_spec(new, FabricSpec(**small)))
    rep["size"] = same_fabric(cost.analyze(orig, 4096), cost.analyze(new, 4096))
    _, r_orig = fm.run(orig, 32, gpus_per_server=4, policies=["ecmp", "planned"])
    _, r_new = fm.run(new, 32, gpus_per_server=4, policies=["ecmp", "planned"])
    rep["model"] = [[r.completion_s for r in r_orig], [r.completion_s for r in r_new]]
    if topologies.TOPOLOGIES.get(orig).two_tier:
        kw = dict(mode="aggregate", policies=["planned"], fabric={"servers_per_block": 4})
        rep["whatif"] = [fm.run(t, 64, **kw)[1][0].completion_s for t in (orig, new)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rcs = [main(["topo", new, "--gpus", "8", "--gpus-per-server", "2",
                     "--servers-per-block", "2", "-o", out + "/plan.json", "--no-png"]),
               main(["cost", "--gpus", "4096", "--designs", f"{orig},{new}", "-o",
                     out + "/cost", "--no-png"]),
               main(["model", new, "--gpus", "16", "--gpus-per-server", "4", "--lb", "ecmp",
                     "-o", out + "/model"])]
    rep["cli"] = rcs
    print(json.dumps(rep))
""")


@pytest.mark.parametrize("orig", topologies.TOPOLOGIES.names())
def test_a_copied_topology_module_works_in_topo_cost_and_model(orig: str,
                                                               tmp_path: Path) -> None:
    new = f"copy_of_{orig}"
    extra = tmp_path / "extra"
    extra.mkdir()
    shutil.copy(topologies.TOPOLOGIES.get(orig).module.__file__, extra / f"{new}.py")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-c", _CHECK, str(extra), orig, new, str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    assert new in rep["names"] and rep["mn"]
    assert rep["plan"] == [new, True]
    assert rep["counts"] and rep["size"]
    assert rep["model"][0] == rep["model"][1] and all(t > 0 for t in rep["model"][0])
    if "whatif" in rep:
        assert rep["whatif"][0] == rep["whatif"][1] > 0
    else:
        assert topologies.TOPOLOGIES.get(orig).two_tier is None
    assert rep["cli"] == [0, 0, 0]
    assert json.loads((out / "plan.json").read_text())["topology"] == new
    designs = [r["design"] for r in json.loads((out / "cost" / "cost.json").read_text())["rows"]]
    assert designs == [orig, new]
    model = json.loads((out / "model" / "model.json").read_text())
    assert model["fabric"]["topology"] == new
