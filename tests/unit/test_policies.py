"""Load-balancing policies are modules of controllers/policies/, found by every consumer.

The contract a newcomer relies on: a new policy is one new file. So the test copies each
shipped module under a new name and checks, in a fresh interpreter (module constants such
as the controller's mode list are read at import), that the copy behaves exactly like
its original in the controller, the flow model (per-flow and what-if) and the CLI.
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

from controllers import policies
from controllers.fabric import FabricLogic
from testbed.topologies import build
from vocab.flows import ENTROPY_MODES, Flow

REPO = Path(__file__).resolve().parents[2]


#: what some shipped policies declare (pins, polls, random, entropy, whatif): a check of
#: those modules, not a list of the policies there are
DECLARED = {"ecmp": (False, False, True, "qp", "hash"),
            "ecmp-fluid": (False, False, False, "qp", "fluid"),
            "planned": (True, False, False, "qp", "lanes"),
            "adaptive": (True, True, True, "qp", None),
            "flowlet": (False, False, True, "flowlet", None),
            "plb": (False, False, True, "plb", None),
            "qp-scaling": (False, False, True, "qp", None),
            "spray": (False, False, True, "packet", "fluid")}


def test_every_policy_keeps_the_contract() -> None:
    """Whatever modules the folder holds: each declares what its consumers can use."""
    pols = policies.POLICIES.all()
    assert policies.CONTROLLER_MODES.names() == tuple(n for n, p in pols.items()
                                                      if p.controller)
    assert policies.random_names() == tuple(n for n, p in pols.items() if p.random)
    for name, p in pols.items():
        assert p.module.__name__ == f"controllers.policies.{name.replace('-', '_')}"
        assert p.entropy in ENTROPY_MODES, name
        assert p.whatif in (None, "fluid", "lanes", "hash"), name
        assert p.hook("place") is not None or not p.pins, f"{name} pins but has no place"
        assert p.split or p.hook("model") is not None, f"{name}: the flow model cannot route it"
        assert set(p.rules) == set(p.defaults), f"{name}: every option has a rule (RULES)"
        for key, value in p.defaults.items():
            p.rules[key].check(str(value), f"{name}:{key}")
        assert policies.parse(p.label) == p
    for row in policies.table():
        assert row["summary"] and "\n" not in row["summary"], row
    got = {n: (p.pins, p.polls, p.random, p.entropy, p.whatif) for n, p in pols.items()
           if n in DECLARED}
    assert got == {n: d for n, d in DECLARED.items() if n in pols}
    assert tuple(n for n in DECLARED if n in pols and not pols[n].controller) == (
        "ecmp-fluid",)


def test_an_unknown_or_model_only_policy_is_one_clear_error() -> None:
    known = ", ".join(policies.POLICIES.names())
    with pytest.raises(ValueError, match=f"^unknown policy 'nope'; choose from {known}$"):
        policies.POLICIES.get("nope")
    plan = build("astral3", servers=4, gpus=2, servers_per_block=2)
    modes = ", ".join(policies.CONTROLLER_MODES.names())
    assert "ecmp-fluid" not in policies.CONTROLLER_MODES
    with pytest.raises(ValueError, match=f"^unknown controller mode 'ecmp-fluid'; choose from "
                                         f"{modes}$"):
        FabricLogic(plan, "ecmp-fluid")
    logic = FabricLogic(plan, "ecmp")
    with pytest.raises(ValueError, match="unknown controller mode 'ecmp-fluid'"):
        logic.set_mode("ecmp-fluid")
    assert logic.mode == "ecmp"


def test_a_host_side_policy_says_what_its_senders_and_receivers_do() -> None:
    """``sender_settings``/``receiver_args`` are the module's hooks: the entropy rule is
    passed on for it, and a module without them asks for nothing more."""
    times = policies.HostTimes(rtt_s=1e-3, frame_s=1e-4)
    plain = policies.Policy("plain", ModuleType("controllers.policies.plain"))
    assert plain.sender_settings(times) == {} and plain.receiver_args(times) == []
    mod = ModuleType("controllers.policies.toy")
    mod.ENTROPY, mod.OPTIONS = "packet", {"entropies": 8, "wait": 3.0}
    mod.sender_settings = lambda opts, t: {"wait_us": opts["wait"] * t.rtt_s * 1e6}
    mod.receiver_args = lambda opts, t: ["--every-us", f"{t.frame_s * 1e6:.1f}"]
    toy = policies.Policy("toy", mod, options={"wait": 5.0})
    assert toy.sender_settings(times) == {"entropy": "packet", "entropies": 8,
                                          "wait_us": pytest.approx(5000.0)}
    assert toy.receiver_args(times) == ["--every-us", "100.0"]


def test_the_mode_decides_pins_not_its_name() -> None:
    """A pinning mode pins every posted flow on a path of its own; a hashing one none."""
    plan = build("astral3", servers=4, gpus=2, servers_per_block=2)
    hosts = [h.name for h in plan.hosts]
    flows = [Flow(hosts[0], hosts[-1], 49152 + q, bytes=1 << 20) for q in range(4)]
    for name, pol in policies.CONTROLLER_MODES.all().items():
        logic = FabricLogic(plan, name)
        logic.set_flows(flows)
        assert bool(logic.assign) == pol.pins, name
        if pol.pins:
            assert set(logic.assign) == set(flows)


# Runs in a fresh interpreter: puts a copy of policy ORIG, named NEW, on the policy
# package's path, then uses NEW and ORIG side by side through each consumer.
_CHECK = textwrap.dedent("""
    import contextlib, io, json, sys
    import controllers.policies as pkg
    pkg.__path__.append(sys.argv[1])
    orig, new, out = sys.argv[2], sys.argv[3], sys.argv[4]
    from controllers import policies
    from controllers.fabric import MODES, FabricLogic
    from vocab.flows import Flow
    from testbed.models import flowmodel as fm
    from testbed.models.perflow import model_flows
    from testbed.topologies import build
    from astral_lab.cli import main
    report = {"names": list(policies.POLICIES.names()), "modes": list(MODES)}
    p_new, p_orig = policies.POLICIES.get(new), policies.POLICIES.get(orig)
    report["same_declarations"] = [(p_new.pins, p_new.polls, p_new.random, p_new.split,
                                    p_new.controller, p_new.whatif, p_new.summary)
                                   == (p_orig.pins, p_orig.polls, p_orig.random, p_orig.split,
                                       p_orig.controller, p_orig.whatif, p_orig.summary)]
    plan = build("astral3", servers=4, gpus=2, servers_per_block=2)
    hosts = [h.name for h in plan.hosts]
    flows = [Flow(s, d, 49152 + q, bytes=(1 + q) << 18) for s in hosts for d in hosts
             if s != d for q in range(2)]
    a = model_flows(plan, flows, orig, seed=3)
    b = model_flows(plan, flows, new, seed=3)
    report["model"] = [a.completion_s, b.completion_s, b.policy, b.method == a.method]
    doc, res = fm.run("astral3", 64, gpus_per_server=8, mode="aggregate",
                      policies=[orig, new], fabric={"servers_per_block": 4})
    report["whatif"] = [[r.policy, r.completion_s, r.kind] for r in res]
    if p_orig.controller:
        la, lb_ = FabricLogic(plan, orig), FabricLogic(plan, new)
        for lg in (la, lb_):
            lg.set_flows(flows)
        report["controller"] = [la.assign == lb_.assign,
                                {s: la.table(s) == lb_.table(s) for s in la.switch_names},
                                len(lb_.assign)]
        lb_.set_mode(orig); lb_.set_mode(new)
        report["controller_mode"] = lb_.mode
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["policies"])
        rc2 = main(["model", "astral3", "--gpus", "16", "--lb", new, "-o", out])
    report["cli"] = [rc, rc2, buf.getvalue()]
    print(json.dumps(report))
""")


@pytest.mark.parametrize("orig", policies.POLICIES.names())
def test_a_copied_policy_module_works_in_controller_model_and_cli(orig: str,
                                                                 tmp_path: Path) -> None:
    new = f"copy-of-{orig}"
    src = policies.POLICIES.get(orig).module.__file__
    extra = tmp_path / "extra"
    extra.mkdir()
    shutil.copy(src, extra / f"{new.replace('-', '_')}.py")
    out = tmp_path / "model"
    proc = subprocess.run([sys.executable, "-c", _CHECK, str(extra), orig, new, str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    assert new in rep["names"] and orig in rep["names"]
    assert rep["same_declarations"] == [True]
    a, b, label, same_method = rep["model"]
    assert a == b and a > 0 and label == new and same_method
    (o_pol, o_t, o_kind), (n_pol, n_t, n_kind) = rep["whatif"]
    assert (o_pol, n_pol) == (orig, new) and o_t == n_t and o_kind == n_kind
    if policies.POLICIES.get(orig).controller:
        assert new in rep["modes"]
        same_assign, same_tables, pinned = rep["controller"]
        assert same_assign and all(same_tables.values())
        assert (pinned > 0) == policies.POLICIES.get(orig).pins
        assert rep["controller_mode"] == new
    else:
        assert new not in rep["modes"]
    rc, rc2, text = rep["cli"]
    assert rc == 0 and rc2 == 0
    assert any(line.split()[0] == new for line in text.splitlines() if line.strip())
    model = json.loads((out / "model.json").read_text())
    assert [r["policy"] for r in model["results"]] == [new]
