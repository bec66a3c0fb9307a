"""The flow model of the host-side policies: qp-scaling, spray, flowlet and plb.

Each check computes its expectation another way than the code under test does: the
striped QPs modelled directly as plain flows (then the per-flow maximum by hand), the
flowlet rule's spacing and gap from the plan's rates and the frame size, PLB against the
same seed's ECMP draw. Pure: no root, no fabric.
"""

from __future__ import annotations

import json
import re
import statistics

import numpy as np
import pytest

from astral_lab.cli import main
from controllers import lb, policies
from controllers.paths import PathFinder
from controllers.policies import flowlet, plb
from testbed.models import perflow, results
from testbed.models.perflow import FRAME_BYTES, Prepared, _model_prepared
from testbed.topologies import build
from vocab.flows import Flow, sport_for_qp

MB = 10**6


def small() -> PathFinder:
    """4 leaves (lf0r0: s0g0, s1g0; lf1r0: s2g0, s3g0; ...), 4 spines, 400G NICs, 200G lanes."""
    return PathFinder(build("astral3", servers=4, gpus=2, servers_per_block=2))


def lab32() -> PathFinder:
    """32 GPUs on 8 leaves of 16 x 200G lanes up: an all-to-all where hashing collides."""
    return PathFinder(build("astral3", servers=4, gpus=8, servers_per_block=4))


def all_to_all(hosts: list[str], size: int = MB) -> list[Flow]:
    pairs = [(s, d) for s in hosts for d in hosts if s != d]
    return [Flow(s, d, sport_for_qp(i), bytes=size) for i, (s, d) in enumerate(pairs)]


def uneven(finder: PathFinder) -> list[Flow]:
    """Flows of sizes that 3 does not divide, some sharing a sender, one leaf-local."""
    return [Flow("s0g0", "s2g0", sport_for_qp(0), bytes=3 * MB + 1),
            Flow("s0g0", "s3g1", sport_for_qp(1), bytes=2 * MB + 2),
            Flow("s1g0", "s0g0", sport_for_qp(2), bytes=MB),
            Flow("s3g0", "s1g0", sport_for_qp(3), bytes=5 * MB + 1)]


# --- qp-scaling ---------------------------------------------------------------------------
def test_qp_scaling_opens_n_qps_per_flow_with_their_bytes_and_own_ports() -> None:
    finder = small()
    flows = uneven(finder)
    prep = Prepared(finder, flows, "gbps")
    opened, origin = prep.opened(policies.parse("qp-scaling:qps=3"))
    assert origin is not None and np.bincount(origin).tolist() == [3] * len(flows)
    for i, f in enumerate(flows):
        mine = [g for g, o in zip(opened.fl, origin.tolist(), strict=True) if o == i]
        assert sum(g.bytes for g in mine) == f.bytes
        assert max(g.bytes for g in mine) - min(g.bytes for g in mine) <= 1
        assert {(g.src, g.dst) for g in mine} == {(f.src, f.dst)}
    assert len({g.key for g in opened.fl}) == 3 * len(flows)  # every QP its own 5-tuple


def test_qp_scaling_reports_per_input_flow_the_latest_stripe_and_its_marks() -> None:
    finder = small()
    flows = uneven(finder)
    marks = [[f.bytes / 4, f.bytes / 2, f.bytes] for f in flows]
    got = perflow.model_flows(finder, flows, "qp-scaling:qps=3", seed=5, marks=marks)
    assert got.policy == "qp-scaling:qps=3" and got.flows == 4 and got.qps == 12
    # the same QPs as plain flows: qp-scaling hashes each one as ecmp does
    opened, origin = Prepared(finder, flows, "gbps").opened(policies.parse("qp-scaling:qps=3"))
    share = [g.bytes / flows[o].bytes for g, o in zip(opened.fl, origin.tolist(), strict=True)]
    direct = perflow.model_flows(finder, opened.fl, "ecmp", seed=5,
                                 marks=[[m * s for m in marks[o]]
                                        for o, s in zip(origin.tolist(), share, strict=True)])
    assert direct.flow_mark_s is not None and got.flow_mark_s is not None
    for i in range(len(flows)):
        mine = np.flatnonzero(origin == i)
        assert got.flow_finish_s[i] == max(direct.flow_finish_s[mine])
        want = np.max([direct.flow_mark_s[j] for j in mine], axis=0)
        assert got.flow_mark_s[i].tolist() == want.tolist()
        assert got.flow_mark_s[i][-1] == pytest.approx(got.flow_finish_s[i])
        assert got.flow_start_rate_bps[i] == pytest.approx(sum(direct.flow_start_rate_bps[mine]))
    assert got.completion_s == max(got.flow_finish_s)


def test_one_qp_is_ecmp_bit_for_bit() -> None:
    finder = lab32()
    flows = all_to_all(finder.hosts)
    one = perflow.model_flows(finder, flows, "qp-scaling:qps=1", seed=2)
    ecmp = perflow.model_flows(finder, flows, "ecmp", seed=2)
    assert one.policy == "qp-scaling:qps=1" and one.qps == one.flows == len(flows)
    assert np.array_equal(one.flow_finish_s, ecmp.flow_finish_s)


def _fabric_max(r: results.ModelResult) -> float:
    return max(r.tiers[t]["max_link_time_s"] for t in ("leaf->spine", "spine->leaf"))


def test_qp_scaling_lowers_the_busiest_lane_of_an_all_to_all_over_seeds() -> None:
    finder = lab32()
    flows = all_to_all(finder.hosts)
    prep = Prepared(finder, flows, "gbps")
    kw = dict(adaptive=None, merge=True, bound=None, tolerance=0.0)
    ecmp, qps = [], []
    for seed in range(20):
        ecmp.append(_fabric_max(_model_prepared(prep, "ecmp", seed=seed, **kw)))
        qps.append(_fabric_max(_model_prepared(prep, "qp-scaling", seed=seed, **kw)))
    assert statistics.median(qps) < statistics.median(ecmp)


def test_spray_is_within_ten_percent_of_the_bound_on_an_all_to_all() -> None:
    finder = lab32()
    r = perflow.model_flows(finder, all_to_all(finder.hosts), "spray", seed=1)
    assert r.bound_name == "splittable" and r.ratio is not None and r.ratio <= 1.10


# --- flowlet ------------------------------------------------------------------------------
def _fan(n: int, size: int = 4 * MB) -> list[Flow]:
    """One sender, ``n`` QPs to one receiver two switch hops away (leaf, spine, leaf)."""
    return [Flow("s0g0", "s2g0", sport_for_qp(q), bytes=size) for q in range(n)]


def _by_hand(finder: PathFinder, qps: int, gap_rtts: float) -> tuple[float, float]:
    """Spacing and gap of the rule from the plan: QPs x frame at the NIC rate; gap_rtts x
    (switch hops + 1) x frame at the lane rate (the replay's base RTT)."""
    frame = FRAME_BYTES * 8
    nic = finder.nic_capacity("s0g0") * 1e9
    hops = len(finder.paths("s0g0", "s2g0")[0])
    lane = finder.capacity()[finder.paths("s0g0", "s2g0")[0][0]] * 1e9
    return qps * frame / nic, gap_rtts * (hops + 1) * frame / lane


@pytest.mark.parametrize("qps, gap_rtts", [(17, 2.0), (15, 2.0), (64, 2.0), (8, 2.0), (10, 1.0),
                                           (20, 4.0)])
def test_flowlet_splits_when_the_packet_spacing_reaches_the_gap(qps: int,
                                                               gap_rtts: float) -> None:
    finder = small()
    flows = _fan(qps)
    spacing, gap = _by_hand(finder, qps, gap_rtts)
    numbers = flowlet.rule(flows, finder, {"frame_bytes": FRAME_BYTES, "gap_rtts": gap_rtts})
    assert numbers["spacing_s"] == pytest.approx(spacing)
    assert numbers["gap_s"] == pytest.approx(gap)
    r = perflow.model_flows(finder, flows, f"flowlet:gap_rtts={gap_rtts:g}", seed=4)
    if spacing >= gap:
        twin = perflow.model_flows(finder, flows, "ecmp-fluid")
        assert r.method.endswith("this job: split") and r.bound_name == "splittable"
    else:
        twin = perflow.model_flows(finder, flows, "ecmp", seed=4)
        assert r.method.endswith("this job: paths") and r.bound_name == "unsplit"
    assert np.array_equal(r.flow_finish_s, twin.flow_finish_s)


def test_flowlet_decides_for_the_median_sender() -> None:
    # three senders: one with 64 QPs, two with 4: the median sender's spacing is short
    finder = small()
    flows = _fan(64) + [Flow(s, "s2g1", sport_for_qp(100 + q), bytes=MB)
                        for s in ("s1g0", "s3g0") for q in range(4)]
    assert not flowlet.rule(flows, finder, {"frame_bytes": FRAME_BYTES, "gap_rtts": 2.0}
                            )["split"]
    flowlet_policy = policies.POLICIES.get("flowlet")
    assert flowlet_policy.split is False and flowlet_policy.split_rule
    assert "split or hash by a rule per job" in next(
        r["traits"] for r in policies.table() if r["name"] == "flowlet")


# --- plb ----------------------------------------------------------------------------------
def _colliding() -> tuple[PathFinder, list[Flow]]:
    """Two QPs from each host under lf0r0 to the hosts under lf1r0: four QPs over four
    lanes (one flow per lane is the NIC bound), so a hash collision is a hot lane."""
    finder = small()
    flows = [Flow(s, d, sport_for_qp(q), bytes=8 * MB)
             for q, (s, d) in enumerate([("s0g0", "s2g0"), ("s0g0", "s3g0"),
                                         ("s1g0", "s2g0"), ("s1g0", "s3g0")])]
    return finder, flows


def test_plb_moves_qps_off_hot_lanes_and_beats_the_same_seeds_ecmp() -> None:
    finder, flows = _colliding()
    limit = plb.nic_limit(flows, finder)
    collided = 0
    for seed in range(12):
        ctx = policies.ModelContext(finder, flows, seed)
        ecmp = lb.max_link_time(ctx.ecmp(), finder)
        paths = plb.model(flows, finder, ctx)
        if ecmp <= limit:
            assert dict(paths) == ctx.ecmp()  # nothing hot: nothing moves
            continue
        collided += 1
        assert lb.max_link_time(paths, finder) < ecmp
        a = perflow.model_flows(finder, flows, "plb", seed=seed)
        b = perflow.model_flows(finder, flows, "ecmp", seed=seed)
        assert a.max_link_time_s is not None and b.max_link_time_s is not None
        assert a.max_link_time_s < b.max_link_time_s and a.completion_s < b.completion_s
    assert collided >= 3  # the case collides for most seeds


def test_plb_is_deterministic_per_seed() -> None:
    finder = lab32()
    flows = all_to_all(finder.hosts)
    runs = {seed: [dict(plb.model(flows, finder, policies.ModelContext(finder, flows, seed)))
                   for _ in range(2)] for seed in (0, 1)}
    for first, again in runs.values():
        assert first == again
    assert runs[0][0] != runs[1][0]
    r0 = perflow.model_flows(finder, flows, "plb", seed=0)
    assert np.array_equal(r0.flow_finish_s, perflow.model_flows(finder, flows, "plb",
                                                                seed=0).flow_finish_s)


# --- policy specs -------------------------------------------------------------------------
@pytest.mark.parametrize("spec, message", [
    ("qp-scaling:qpz=8", "has no option 'qpz' (options: qps)"),
    ("qp-scaling:qps=eight", "qp-scaling:qps must be a whole number in 1..1024"),
    ("qp-scaling:qps", "qp-scaling:qps must be a whole number in 1..1024"),
    ("qp-scaling:qps=0", "qp-scaling:qps must be a whole number in 1..1024"),
    ("qp-scaling:qps=2.5", "must be a whole number"),
    ("qp-scaling:qps=1e9", "qp-scaling:qps must be a whole number in 1..1024"),
    ("qp-scaling:qps=2:qps=3", "qp-scaling:qps is given twice"),
    ("flowlet:gap_rtts=-1", "flowlet:gap_rtts must be a finite number in (0, 1000]"),
    ("flowlet:gap_rtts=nan", "flowlet:gap_rtts must be a finite number in (0, 1000]"),
    ("plb:rounds=inf", "plb:rounds must be a whole number in 1..1000"),
])
def test_a_bad_policy_option_is_one_clear_error(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        policies.parse(spec)
    with pytest.raises(ValueError, match=re.escape(message)):
        perflow.model_flows(small(), _fan(2), spec)


def test_policy_options_and_labels() -> None:
    assert policies.parse("qp-scaling:qps=8").label == "qp-scaling:qps=8"
    assert policies.parse("qp-scaling:qps=4").label == "qp-scaling"  # the default
    assert policies.parse("flowlet:gap_rtts=3").option("gap_rtts") == 3


def test_cli_models_the_host_policies_beside_the_bound(tmp_path, capsys) -> None:
    out = tmp_path / "m"
    lbs = "spray,qp-scaling,flowlet,plb,ecmp,qp-scaling:qps=8"
    assert main(["model", "astral3", "--gpus", "16", "--lb", lbs, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads((out / "model.json").read_text())
    res = {r["policy"]: r for r in doc["results"]}
    assert list(res) == lbs.split(",")
    flows = doc["workload"]["flows"]
    for name, r in res.items():
        assert r["ratio_to_bound"] >= 1 - 1e-9 and r["flows"] == flows, name
        assert any(line.split()[:1] == [name] for line in text.splitlines())
    assert res["qp-scaling"]["qps"] == 4 * flows and res["qp-scaling:qps=8"]["qps"] == 8 * flows
    assert res["ecmp"]["qps"] == flows


def test_cli_refuses_an_unknown_option_and_writes_nothing(tmp_path, capsys) -> None:
    out = tmp_path / "m"
    with pytest.raises(SystemExit) as info:  # refused as the option is parsed
        main(["model", "astral3", "--gpus", "16", "--lb", "ecmp,qp-scaling:qpz=8",
              "-o", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "has no option 'qpz'" in err and "\n" not in err
    assert not out.exists()
