"""What the model's default solve promises: every flow's finish within ``MAX_REL_ERROR``
(relative) of the exact, event-by-event solve.

Coalescing finishes (``DEFAULT_TOLERANCE``) has no theorem behind its error (max-min rates
are not monotone in departures), so the promise is checked here on real MoE steps, the
workloads it exists for: decode (a finish time per GPU pair) and prefill, on 32 and 64
GPUs, several seeds, every default policy, flow by flow. Then the CLI: the report and
model.json say which solve ran, ``--exact`` is the exact one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from astral_lab.cli import main
from testbed.models import flowmodel as fm


@pytest.mark.parametrize("gpus, seeds", [(32, (0, 1, 2)), (64, (0, 1))])
@pytest.mark.parametrize("workload", ["decode", "prefill"])
def test_every_flow_within_the_bound_of_the_exact_solve(workload, gpus, seeds):
    for seed in seeds:
        exact_doc, exact = fm.run("astral3", gpus, workload=workload, seed=seed, jobs=2,
                                  tolerance=0.0)
        doc, fast = fm.run("astral3", gpus, workload=workload, seed=seed, jobs=2)
        assert exact_doc["exactness"]["solve"] == "exact"
        assert doc["exactness"] == fm.exactness(fm.DEFAULT_TOLERANCE)
        assert doc["exactness"]["max_rel_error"] == fm.MAX_REL_ERROR
        for e, a in zip(exact, fast, strict=True):
            assert e.policy == a.policy and e.kind == "exact" and a.kind == "approx"
            err = np.abs(a.flow_finish_s - e.flow_finish_s) / e.flow_finish_s
            assert err.max() <= fm.MAX_REL_ERROR, (
                f"{workload} {gpus} GPUs seed {seed} {a.policy}: a flow "
                f"{err.max():.2e} off the exact solve")
            if workload == "decode":  # coalescing is what makes it fast
                assert a.events < e.events


def test_the_exactness_of_a_solve_is_stated():
    assert fm.exactness(0.0) == {"solve": "exact", "event_tolerance": 0.0, "max_rel_error": 0.0,
                                 "basis": "every finish event computed on its own"}
    loose = fm.exactness(10 * fm.DEFAULT_TOLERANCE)
    assert loose["max_rel_error"] is None and "not checked" in loose["basis"]
    assert fm.exactness(fm.DEFAULT_TOLERANCE / 2)["max_rel_error"] == fm.MAX_REL_ERROR


def test_cli_default_exact_and_conflicting_flags(tmp_path, capsys):
    args = ["model", "astral3", "--gpus", "16", "--workload", "decode", "--lb", "ecmp"]
    assert main([*args, "-o", str(tmp_path / "fast")]) == 0
    out = capsys.readouterr().out
    assert f"within {100 * fm.MAX_REL_ERROR:g}% of the exact solve" in out and "approx" in out
    doc = json.loads((tmp_path / "fast" / "model.json").read_text())
    assert doc["exactness"]["event_tolerance"] == fm.DEFAULT_TOLERANCE
    assert doc["exactness"]["max_rel_error"] == fm.MAX_REL_ERROR

    assert main([*args, "--exact", "-o", str(tmp_path / "exact")]) == 0
    assert "solve: exact" in capsys.readouterr().out
    doc = json.loads((tmp_path / "exact" / "model.json").read_text())
    assert doc["exactness"]["solve"] == "exact" and doc["event_tolerance"] == 0.0
    assert doc["results"][0]["kind"] == "exact"

    assert main([*args, "--exact", "--event-tolerance", "1e-3"]) == 2
    assert "--exact and --event-tolerance: choose one" in capsys.readouterr().err
