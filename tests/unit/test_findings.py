"""Every finding builder states the reason its evidence supports, branch by branch.

Each test feeds a builder the evidence of one case (a thin fidelity margin, the Python
plane, bytes on time but messages late, a collision or none, ...) and checks which reason
the finding gives and which it must not give. Reasons that once were true of the lab (the
senders were Python agents) must not come back where the run's own numbers say otherwise.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

from scenarios.common import distribution
from scenarios.experiments import demo as dm
from scenarios.findings import caveat_text, margin_text, pace_caveats


def dist(*values: float) -> dict[str, Any]:
    return distribution(list(values))


# --- the shared caveats ------------------------------------------------------------------
def test_caveats_come_from_the_run_not_from_history() -> None:
    assert pace_caveats(margin=4.67, plane="native", lost=0, start_skew_s=0.002,
                        span_s=0.5) == []
    thin = pace_caveats(margin=1.4, plane="native")
    assert len(thin) == 1 and "1.40x" in thin[0] and "CPU" in thin[0]
    off = pace_caveats(margin=math.nan)
    assert len(off) == 1 and "guard was off" in off[0]
    assert pace_caveats(margin=None) == []  # not recorded: nothing to say either way
    py = pace_caveats(margin=5.0, plane="python")
    assert len(py) == 1 and "Python agents" in py[0]
    assert "12 packets" in pace_caveats(margin=5.0, lost=12)[0]
    skew = pace_caveats(margin=5.0, start_skew_s=0.2, span_s=1.0)
    assert len(skew) == 1 and "200 ms" in skew[0] and "20%" in skew[0]
    assert pace_caveats(margin=5.0, start_skew_s=0.05, span_s=1.0) == []
    assert caveat_text([]) == "" and caveat_text(["a", "b"]) == "In this run a; b."
    assert margin_text(None) == "not recorded" and margin_text(math.nan) == "off (guard off)"
    assert margin_text(2.0) == "2.00x"


# --- demo --------------------------------------------------------------------------------
BOUND = 2.5


def perm(mode: str, measured: list[float], model: list[float], slow: list[float],
         model_slow: list[float], *, hops: float = 3.0, margin: float = 5.0,
         plane: str = "native", lost: int = 0, tier: str = "leaf-spine", mbps: float = 2.0,
         holds: float = 1.0, bound: float = BOUND) -> dict[str, Any]:
    """A demo permutation result with the fields the finding builders read."""
    busiest = {"link": "x~y", "direction": "up", "tier": tier, "mbps": mbps, "qps": 2.0,
               "holds_qps": holds, "slowdown": slow[0]}
    return {"mode": mode, "measured": distribution(measured),
            "model": {"completion_s": distribution(model),
                      "slowdown": distribution(model_slow)},
            "slowdown": distribution(slow), "bound_s": bound, "hops": hops, "lost": lost,
            "margin": margin, "plane": plane, "start_skew_s": 0.003,
            "draws": [{"busiest": busiest} for _ in measured]}


def ecmp_collided(**kw: Any) -> dict[str, Any]:
    return perm("ecmp", [7.5, 7.5, 7.5, 7.5, 10.0, 10.0, 7.5], [7.5] * 150 + [10.0] * 50,
                [3.0, 3.0, 3.0, 3.0, 4.0, 4.0, 3.0], [3.0] * 150 + [4.0] * 50, **kw)


def planned(measured: float = 2.53, bound: float = BOUND, **kw: Any) -> dict[str, Any]:
    return perm("planned", [measured], [bound], [1.0], [1.0], bound=bound, **kw)


def test_demo_ecmp_finding_with_collisions() -> None:
    f = dm.ecmp_finding(ecmp_collided(), planned(), (4, 4))
    assert f["title"] == "ECMP collisions vs planned placement"
    assert "4 QPs over 4 uplink lanes" in f["why"]
    assert "busiest link carried 3.0x its share" in f["why"]
    assert "3.00x the bound" in f["why"] and "hash's luck" in f["why"]
    assert "within 1% of the bound" in f["why"]
    assert "outside" not in f["why"]  # measured and model agree here
    assert "Python" not in f["why"]


def test_demo_ecmp_finding_without_collisions() -> None:
    e = perm("ecmp", [2.55] * 5, [2.55] * 20 + [5.1] * 80, [1.0] * 5, [1.0] * 20 + [2.0] * 80)
    f = dm.ecmp_finding(e, planned(), (4, 4))
    assert "no collision" in f["title"]
    assert "within 2% of the bound" in f["why"] and "no costly collision" in f["why"]
    assert "as in 20 of the model's 100 draws" in f["why"]
    assert "about the same time" in f["why"] and "busiest link carried" not in f["why"]
    # slow, yet the counters show no hot link: the finding says they do not explain it
    e = perm("ecmp", [7.5] * 5, [7.5] * 100, [1.0] * 5, [3.0] * 100)
    f = dm.ecmp_finding(e, planned(), (4, 4))
    assert f["title"] == "ECMP vs planned placement"
    assert "do not show where the time went" in f["why"] and "collision" not in f["why"]


def test_demo_ecmp_finding_planned_above_the_bound() -> None:
    thin = dm.ecmp_finding(ecmp_collided(), planned(3.2, margin=1.5), (4, 4))
    assert "Planned placement took 1.28x the bound" in thin["why"]
    assert "fidelity margin was 1.50x" in thin["why"]
    assert "show nothing" not in thin["why"]
    ample = dm.ecmp_finding(ecmp_collided(), planned(3.2), (4, 4))
    assert "show nothing that explains" in ample["why"]
    assert "CPU" not in ample["why"]


def test_demo_ecmp_finding_gap_to_the_model() -> None:
    # every emulated draw far below the model's: not the draws' luck, the hash differs
    e = perm("ecmp", [2.6] * 5, [7.5] * 200, [1.0] * 5, [3.0] * 200)
    f = dm.ecmp_finding(e, planned(), (4, 4))
    assert "Measured / model = 0.35, outside 0.7-1.3" in f["why"]
    assert "another hash function" in f["why"]
    # one draw's median against a wide model: luck is a candidate
    e = perm("ecmp", [2.6], [2.6] * 60 + [7.5] * 140, [1.0], [1.0] * 60 + [3.0] * 140)
    assert "luck is a candidate" in dm.ecmp_finding(e, planned(), (4, 4))["why"]
    # a thin margin is named before any hash story
    e = perm("ecmp", [2.6] * 5, [7.5] * 200, [1.0] * 5, [3.0] * 200, margin=1.2)
    why = dm.ecmp_finding(e, planned(), (4, 4))["why"]
    assert "fidelity margin was 1.20x" in why and "hash function" not in why


def rail3(slow: float, model_slow: float = 1.5) -> dict[str, Any]:
    return perm("ecmp", [4.0] * 7, [3.8] * 200, [slow] * 7, [model_slow] * 200, hops=4.875,
                tier="tor-agg", mbps=8.0, holds=4.0)


def test_demo_fabric_finding_thin_lanes_cost_more() -> None:
    f = dm.fabric_finding(ecmp_collided(), rail3(1.5), planned(), planned(2.6, hops=4.875))
    assert f["title"] == "thin shuffled lanes make a collision cost more than fat uplinks"
    assert "3.0x its share on astral3 against 1.5x on rail3" in f["why"]
    assert "as the flow model has it" in f["why"]
    assert "hold 1 QP at full rate" in f["why"] and "hold 4" in f["why"]
    assert "within 4% of the same bound" in f["why"]
    assert "3.0 switch hops per packet against 4.9" in f["why"]


def test_demo_fabric_finding_when_rail3_collides_more_or_alike() -> None:
    worse = dm.fabric_finding(ecmp_collided(), rail3(4.0, model_slow=1.5), planned(),
                              planned(2.6))
    assert "rail3's uplinks fared worse" in worse["title"]
    assert "unlike the flow model" in worse["why"]
    assert "price of the flat fabric" not in worse["why"]
    alike = dm.fabric_finding(ecmp_collided(), rail3(3.0, model_slow=3.0), planned(),
                              planned(2.6))
    assert "alike" in alike["title"] and "thin lane" not in alike["why"]


def test_demo_fabric_finding_planned_off_the_bound() -> None:
    f = dm.fabric_finding(ecmp_collided(), rail3(1.5), planned(), planned(3.5, bound=3.0))
    assert "rail3 1.17x its own (3.00 s)" in f["why"]
    assert "neither fabric was the bottleneck" not in f["why"]


def decode(r50: list[float], r99: list[float], done: list[float], *, margin: float = 4.67,
           plane: str = "native", lost: int = 0, skew: float = 0.004,
           p99_ms: float = 707.0, phase_ms: float = 760.0) -> dict[str, Any]:
    d = {"p50": {"measured": dist(466.0), "ideal": dist(346.0), "ratio": distribution(r50)},
         "p99": {"measured": dist(p99_ms), "ideal": dist(419.0), "ratio": distribution(r99)},
         "completion_ratio": distribution(done), "floor_ms": 14.8, "messages": 4698,
         "lost": lost, "incomplete": 0, "start_skew_s": skew,
         "completion_s": dist(phase_ms / 1e3), "plane": plane}
    return {"mode": "planned", "margin": margin, "dispatch": d}


def test_demo_decode_finding_in_band() -> None:
    f = dm.decode_finding(decode([1.1], [1.2], [1.02]), 8, 1e-5)
    assert "the fluid model of the same flows predicts it" in f["why"]
    assert "outside" not in f["why"] and "congestion control" not in f["why"]
    assert "the burst's length" in f["why"]


def test_demo_decode_finding_bytes_on_time_messages_late() -> None:
    """The case REPORT.md met with the compiled plane and a margin of 4.67: the README's
    reason (no congestion control, lane FIFOs), not the Python senders."""
    f = dm.decode_finding(decode([1.35], [1.69], [1.03]), 8, 1e-5)
    assert "(1.35/1.69) are outside 0.7-1.3" in f["why"]
    assert "1.03x the model's" in f["why"] and "the bytes arrive on time" in f["why"]
    assert "no congestion control" in f["why"] and "FIFO" in f["why"]
    assert "fidelity margin 4.67x, native plane" in f["why"]
    assert "Python" not in f["why"] and "CPU" not in f["why"]


@pytest.mark.parametrize("kw,said", [
    ({"margin": 1.5}, "fidelity margin was 1.50x"),
    ({"margin": math.nan}, "guard was off"),
    ({"plane": "python"}, "Python agents sent the packets"),
    ({"lost": 40}, "40 packets were lost"),
    ({"skew": 0.2}, "started up to 200 ms apart"),
])
def test_demo_decode_finding_names_the_run_when_the_run_is_the_suspect(
        kw: dict[str, Any], said: str) -> None:
    f = dm.decode_finding(decode([1.35], [1.69], [1.03], **kw), 8, 1e-5)
    assert said in f["why"] and "the run itself may be the cause" in f["why"]
    assert "congestion control" not in f["why"]


def test_demo_decode_finding_bytes_late_too_and_low_side() -> None:
    late = dm.decode_finding(decode([1.5], [1.9], [1.6]), 8, 1e-5)
    assert "bytes themselves arrived late" in late["why"]
    assert "congestion control" not in late["why"]
    low = dm.decode_finding(decode([0.6], [0.9], [0.95]), 8, 1e-5)
    assert "on the low side" in low["why"] and "sooner than" in low["why"]
    assert "congestion control" not in low["why"]


def test_demo_decode_finding_p99_against_the_phase() -> None:
    short = dm.decode_finding(decode([1.0], [1.0], [1.0], p99_ms=200.0, phase_ms=800.0),
                              8, 1e-5)
    assert "p99 (200 ms) is 25% of the phase (800 ms)" in short["why"]
    assert "burst's length" not in short["why"]


def test_demo_run_on_fakes_reports_the_findings(tmp_path: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole demo on the fake lab: the decode evidence reaches the finding."""
    from scen_fakes import FakeLab, install, read_json, read_text

    from testbed.reachability import Reachability

    install(monkeypatch, dm)
    monkeypatch.setattr(FakeLab, "reachability", lambda self: Reachability(
        pairs=12, received=12, first_try_lost=0), raising=False)
    out = os.path.join(str(tmp_path), "run")
    dm.demo(quick=True, output=out, log=lambda _m: None, model_draws=20, draws=2,
            decode_draws=1)
    report = read_text(out, "REPORT.md")
    assert "### decode dispatch latency" in report and "phase completion" in report
    assert "Python senders" not in report
    runs = read_json(out, "runs.json")
    d = runs["decode"]["dispatch"]
    assert d["plane"] == "native" and d["completion_ratio"]["draws"] == 1
    assert runs["astral3/ecmp"]["margin"] == 5.0


# --- lb-compare --------------------------------------------------------------------------
def lbr(wl: str, mode: str, measured: list[float], model: list[float], *, bound: float = 1.5,
        margin: float = 5.0, plane: str = "native", lost: int = 0, skew: float = 0.004,
        lanes: float = 2.0, model_lanes: float = 2.0) -> dict[str, Any]:
    return {"workload": wl, "mode": mode, "measured": distribution(measured),
            "model": distribution(model), "lane_skew": dist(lanes),
            "model_lane_skew": dist(model_lanes), "fluid_s": bound * 1.2, "bound_s": bound,
            "margin": margin, "plane": plane, "lost": lost, "start_skew_s": skew}


def test_lb_compare_ecmp_finding_permutation_and_alltoall() -> None:
    from scenarios.experiments import lb_compare as lc

    res = {"permutation/ecmp": lbr("permutation", "ecmp", [3.0, 4.5, 4.5],
                                   [3.0] * 50 + [4.5] * 150),
           "permutation/planned": lbr("permutation", "planned", [1.52], [1.5]),
           "alltoall/ecmp": lbr("alltoall", "ecmp", [2.0, 2.1, 2.2], [2.1] * 200)}
    f = lc.ecmp_finding(res, "permutation", 2, (4, 4))
    assert "sends 4 QPs over 4 uplink lanes" in f["why"]
    assert "the draws took 2x, 3x the bound" in f["why"]
    assert "outside" not in f["why"]
    f = lc.ecmp_finding(res, "alltoall", 2, (4, 4))
    assert "1.40x the bound, smaller than the permutation's 3.00x" in f["why"]
    res["permutation/ecmp"] = lbr("permutation", "ecmp", [1.5] * 3, [1.5] * 200)
    f = lc.ecmp_finding(res, "alltoall", 2, (4, 4))
    assert "not smaller than the permutation's 1.00x" in f["why"]
    del res["permutation/ecmp"]
    assert "permutation's" not in lc.ecmp_finding(res, "alltoall", 2, (4, 4))["why"]


@pytest.mark.parametrize("measured,model,kw,said,unsaid", [
    # below the model's whole range, the run clean: not luck, and nothing in the run
    ([2.0] * 3, [4.5] * 200, {}, "outside the model's whole range, so not luck; this run's "
     "fidelity margin (5.00x)", "CPU"),
    # the same with a thin margin: the run is named, not the hash
    ([2.0] * 3, [4.5] * 200, {"margin": 1.3}, "fidelity margin was 1.30x", "not luck"),
    ([2.0] * 3, [4.5] * 200, {"plane": "python"}, "Python agents", "not luck"),
    # inside the model's range, a median that far is common: luck
    ([3.0] * 3, [3.0] * 60 + [4.5] * 140, {}, "may be the draws' luck", "Python"),
    # inside the range but rare: the hash functions differ
    ([3.0] * 3, [3.0] * 2 + [4.5] * 198, {}, "a different hash function", "Python"),
])
def test_lb_compare_ecmp_finding_out_of_band(measured: list[float], model: list[float],
                                            kw: dict[str, Any], said: str,
                                            unsaid: str) -> None:
    from scenarios.experiments import lb_compare as lc

    res = {"permutation/ecmp": lbr("permutation", "ecmp", measured, model, **kw)}
    why = lc.ecmp_finding(res, "permutation", 2, (4, 4))["why"]
    assert "is outside 0.7-1.3" in why and said in why and unsaid not in why


def test_lb_compare_gap_and_adaptive_findings() -> None:
    from scenarios.experiments import lb_compare as lc

    e = lbr("permutation", "ecmp", [4.5] * 3, [4.5] * 200)
    pl = lc.gap_finding(lbr("permutation", "planned", [2.5], [1.5]))
    assert "the paths are the model's" in pl["why"] and "show nothing" in pl["why"]
    assert "senders" not in pl["why"] and "CPU" not in pl["why"]
    thin = lc.gap_finding(lbr("permutation", "planned", [2.5], [1.5], margin=1.1))
    assert "fidelity margin was 1.10x" in thin["why"] and "show nothing" not in thin["why"]
    between = lc.gap_finding(lbr("permutation", "adaptive", [3.0] * 3, [1.5] * 200), e)
    assert "between ECMP's 4.50 s and the final paths' 1.50 s" in between["why"]
    slow = lc.gap_finding(lbr("permutation", "adaptive", [4.6] * 3, [1.5] * 200), e)
    assert "no faster than ECMP's 4.50 s" in slow["why"]
    f = lc.adaptive_finding(lbr("permutation", "adaptive", [1.5] * 3, [1.5] * 200), 6.0, e)
    assert "as fast as the final paths" in f["why"] and "sized to 6 s" in f["why"]
    f = lc.adaptive_finding(lbr("permutation", "adaptive", [3.0] * 3, [1.5] * 200), 6.0, None)
    assert "the first polls ran on the hash placement" in f["why"]


# --- expert-skew -------------------------------------------------------------------------
def es_case(measured: float, model: float, bound: float, *, hot: float | None = None,
            mid: float = 0.5, margin_lost: int = 0, plane: str = "native",
            incast: float = 1.7, incast_hb: float = 1.0) -> dict[str, Any]:
    return {"measured_s": dist(measured, measured), "model_s": dist(model, model, model),
            "hot_nic_bound_s": dist(bound), "hottest_done_s": dist(hot or measured),
            "median_rx_done_s": dist(mid), "start_skew_s": 0.002, "lost": margin_lost,
            "delivered": 1.0, "plane": plane, "incast": dist(incast),
            "incast_hb": dist(incast_hb)}


def es_cases(**skewed: Any) -> dict[str, dict[str, Any]]:
    return {"uniform": es_case(1.0, 1.0, 0.95), "skewed": es_case(**{
        "measured": 1.6, "model": 1.6, "bound": 1.5, **skewed}),
        "skewed+eplb": es_case(1.05, 1.05, 1.0)}


def test_expert_skew_completion_finding_branches() -> None:
    from scenarios.experiments import expert_skew as es

    ok = es.completion_finding(es_cases(), {}, "ecmp", 1e-5)
    assert ok["title"] == "Completion follows the hottest receiver"
    assert "back near the uniform case (1.05x" in ok["why"]
    assert "agree within 0%" in ok["why"] and "Python" not in ok["why"]
    cases = es_cases()
    cases["skewed+eplb"] = es_case(1.4, 1.4, 1.0)
    assert "from 1.60x to 1.40x the uniform median, not back" in es.completion_finding(
        cases, {}, "ecmp", 1e-5)["why"]
    cases["skewed+eplb"] = es_case(1.7, 1.7, 1.0)
    f = es.completion_finding(cases, {}, "ecmp", 1e-5)
    assert "did not shorten it" in f["why"]
    assert f["title"] == "Completion follows the hottest receiver"
    far = es.completion_finding(es_cases(measured=2.4, model=2.4, bound=1.5), {}, "ecmp", 1e-5)
    assert far["title"] == "Completion against the hottest receiver's bound"
    assert "something besides that NIC set the pace" in far["why"]


@pytest.mark.parametrize("skewed,margin,said,unsaid", [
    ({"measured": 3.2, "model": 1.6, "bound": 1.5, "hot": 3.1}, {}, "not kept busy", "Python"),
    ({"measured": 3.2, "model": 1.6, "bound": 1.5, "hot": 1.6}, {},
     "not what set the measured time", "FIFO"),
    ({"measured": 3.2, "model": 1.6, "bound": 1.5, "hot": 3.1}, {"skewed": 1.2},
     "fidelity margin was 1.20x", "FIFO"),
    ({"measured": 3.2, "model": 1.6, "bound": 1.5, "hot": 3.1, "plane": "python"}, {},
     "Python agents", "FIFO"),
    ({"measured": 0.9, "model": 1.6, "bound": 0.8}, {}, "finished sooner than the model",
     "FIFO"),
])
def test_expert_skew_completion_finding_out_of_band(skewed: dict[str, Any],
                                                    margin: dict[str, float], said: str,
                                                    unsaid: str) -> None:
    from scenarios.experiments import expert_skew as es

    why = es.completion_finding(es_cases(**skewed), margin, "ecmp", 1e-5)["why"]
    assert "skewed: the ratio" in why and said in why and unsaid not in why
    assert "agree within" not in why


def test_expert_skew_incast_finding_branches() -> None:
    from scenarios.experiments import expert_skew as es

    c = es_cases(hot=1.6, mid=0.5)
    f = es.incast_finding(c["uniform"], c["skewed"], c["skewed+eplb"], 8.0)
    assert "the other receivers finish early" in f["why"] and "moves that hot spot" in f["why"]
    c = es_cases(hot=0.55, mid=0.5, incast_hb=1.8)
    f = es.incast_finding(c["uniform"], c["skewed"], c["skewed+eplb"], 8.0)
    assert "did not leave the others idle" in f["why"]
    assert "no lower than" in f["why"] and "moves that hot spot" not in f["why"]


# --- decode-latency ----------------------------------------------------------------------
def dl_row(case: str, r50: float, r99: float, done: float, *, margin: float = 6.0,
           plane: str = "native", lost: int = 0, skew: float = 0.003) -> dict[str, Any]:
    return {"ep": 8, "case": case, "phase": "dispatch", "ratio_p50": r50, "ratio_p99": r99,
            "measured": {"p50_us": {"median": 600e3 * r50}, "p99_us": {"median": 1e6 * r99}},
            "ideal_p50_ms": 600.0, "ideal_p99_ms": 1000.0, "per_draw": [
                {"start_skew_s": skew, "plane": plane}], "lost": lost, "incomplete": 0,
            "completion_ms": 1100.0 * done, "ideal_completion_ms": 1100.0, "margin": margin}


@pytest.mark.parametrize("row,said,unsaid", [
    (dl_row("alone", 1.0, 1.2, 1.0), "", ""),
    (dl_row("alone", 1.0, 1.6, 1.05), "the bytes arrive on time", "Python"),
    (dl_row("alone", 1.0, 1.6, 1.05, margin=1.5), "fidelity margin was 1.50x",
     "congestion control"),
    (dl_row("alone", 1.0, 1.6, 1.05, plane="python"), "Python agents", "congestion control"),
    (dl_row("alone", 1.0, 1.6, 1.6), "the bytes themselves arrived late", "congestion"),
    (dl_row("background", 1.0, 3.0, 2.0), "FIFO queueing the fair-sharing model", "Python"),
    (dl_row("background", 1.0, 3.0, 2.0, lost=9), "9 packets were lost", "FIFO queueing"),
    (dl_row("isolated", 0.9, 0.6, 1.0), "strict priority beats fair sharing", "Python"),
    (dl_row("alone", 0.9, 0.6, 1.0), "a candidate is the hash", "congestion"),
])
def test_decode_latency_gap_line(row: dict[str, Any], said: str, unsaid: str) -> None:
    from scenarios import decode_findings as dl

    line = dl.gap_line(row, 0.5)
    if not said:
        assert line == ""
        return
    assert line.startswith("EP8 ") and said in line
    assert unsaid not in line


def test_decode_latency_isolation_why_follows_the_numbers() -> None:
    from scenarios import decode_findings as dl

    split = dl.isolation_why(0.5, [{"p50": 1.05, "p99": 2.0, "isolated": 1.02}], [])
    assert "the CDF splits in two" in split and "returned close to the idle-fabric" in split
    both = dl.isolation_why(0.5, [{"p50": 1.9, "p99": 2.0, "isolated": 1.6}], ["EP8: x"])
    assert "the median moved with the tail" in both and "CDF splits" not in both
    assert "x1.60 of alone, not back to it" in both and "EP8: x" in both
    calm = dl.isolation_why(0.5, [{"p50": 1.0, "p99": 1.1, "isolated": 1.0}], [])
    assert "barely moved decode latency" in calm


def test_decode_latency_explains_the_queueing_once_and_the_growth_by_the_numbers() -> None:
    from scenarios import decode_findings as dl

    told: set[str] = set()
    first = dl.gap_line(dl_row("alone", 1.0, 1.6, 1.05), 0.5, told)
    again = dl.gap_line(dl_row("alone", 1.0, 1.6, 1.05), 0.5, told)
    assert "no congestion control" in first and "no congestion control" not in again
    assert "the queueing explained above" in again
    remote = {8: 0.75, 16: 0.875, 32: 0.9375}
    deep = {"dispatch": 2.52, "combine": 3.16}
    more = dl.growth_why(remote, {"dispatch": (1.38, 1.4), "combine": (1.35, 1.4)}, 2, 128,
                         deep)
    assert "x1.25 from EP8 to EP32, against the dispatch phase's x1.38" in more
    assert "75% of the copies already cross" in more and "stops at EP32" in more
    assert "grow alike here" in more and "the flow model's p99 grows x1.40" in more
    assert "/128 of DeepEP" in more and "x3.16 vs x2.52" in more
    share = dl.growth_why(remote, {"dispatch": (1.25, 1.3), "combine": (1.8, 1.3)}, 2, 8,
                          deep)
    assert "about the dispatch phase's whole growth" in share
    assert "grow differently here" in share and "candidates" not in share


# --- link-failure ------------------------------------------------------------------------
def lf_agg(modes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """agg entries per mode: ``base`` (measured, model) completion, ``lane``/``spine``
    (penalty, model penalty, recovered of 3), margin, plane."""
    out = {}
    for m, e in modes.items():
        common = {"mode": m, "draws": 3, "lost": 0, "start_skew_s": 0.003,
                  "margin": e.get("margin", 5.0), "plane": e.get("plane", "native")}
        got, model = e.get("base", (2.0, 2.0))
        out[f"{m}/baseline"] = {**common, "case": "baseline", "completion_s": dist(got),
                                "model_s": dist(model, model)}
        for case in ("lane", "spine"):
            pen, mpen, rec = e.get(case, (1.2, 1.2, 3))
            out[f"{m}/{case}"] = {**common, "case": case, "completion_s": dist(got * pen),
                                  "penalty": dist(pen, pen, pen),
                                  "model_penalty": dist(mpen, mpen, mpen), "recovered": rec,
                                  "recovery_s": dist(0.2)}
    return out


def test_link_failure_penalty_why_reads_the_baselines() -> None:
    from scenarios import link_failure_report as lr

    even = lr.penalty_why(lf_agg({"ecmp": {}, "planned": {}}), ["ecmp", "planned"], 4)
    assert "ran at their model's pace (ecmp 1.00x, planned 1.00x" in even
    assert "ran slower than its model" not in even and "Python" not in even
    assert "re-places only the flows" in even and "Adaptive" not in even
    slow = lr.penalty_why(lf_agg({"ecmp": {"base": (2.4, 2.0)}}), ["ecmp"], 4)
    assert "ecmp ran slower than its model" in slow and "show nothing" in slow
    assert "Python" not in slow and "re-places only the flows" not in slow
    thin = lr.penalty_why(lf_agg({"ecmp": {"base": (2.4, 2.0), "margin": 1.4}}), ["ecmp"], 4)
    assert "fidelity margin was 1.40x" in thin
    py = lr.penalty_why(lf_agg({"ecmp": {"base": (2.4, 2.0), "plane": "python"}}), ["ecmp"],
                        4)
    assert "Python agents sent the packets" in py


def test_link_failure_penalty_gaps_and_recovery() -> None:
    from scenarios import link_failure_report as lr

    gap = lr.penalty_why(lf_agg({"ecmp": {"lane": (1.1, 2.0, 3)}}), ["ecmp"], 4)
    assert "**ecmp/lane: penalty ratio 0.55, outside 0.7-1.3.**" in gap
    assert "nothing in the run itself" in gap and ": not luck." in gap
    thin = lr.penalty_why(lf_agg({"ecmp": {"lane": (1.1, 2.0, 3), "margin": 1.1}}),
                          ["ecmp"], 4)
    assert "In this run the fidelity margin was 1.10x" in thin
    ok = lr.recovery_why(lf_agg({"ecmp": {}}), ["ecmp"], 4, 1e-5)
    assert "every run got back to the target (median recovery" in ok
    assert "1/4 of every leaf's uplinks" in ok and "stayed under" not in ok
    stuck = lr.recovery_why(lf_agg({"ecmp": {"lane": (1.2, 1.2, 1), "spine": (1.3, 1.3, 0)}}),
                            ["ecmp"], 4, 1e-5)
    assert "After a lane cut 1 of 3 runs got back" in stuck
    assert "3 of 3 runs stayed under the target" in stuck


# --- topology-compare --------------------------------------------------------------------
def tc_r(design: str, kernel: str, measured: float, model: float, *, bound: float = 1.0,
         hops: float = 3.0, margin: float = 5.0, plane: str = "native", lost: int = 0,
         idle: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    return {"design": design, "kernel": kernel, "measured": dist(measured, measured),
            "model": dist(model, model, model), "model_bound": dist(bound), "hops": hops,
            "margin": margin, "plane": plane, "lost": lost, "start_skew_s": 0.002,
            "busiest_link": "lf0r0~spine0", "busiest_link_draws": 2,
            "busiest_util": dist(0.9, 0.9), "bottleneck_tiers": ["leaf->spine"],
            "idle_candidates": idle or {}}


def test_topology_compare_tiers_and_railonly_findings() -> None:
    from scenarios.experiments import topology_compare as tc

    a, r3 = tc_r("astral3", "flat", 1.2, 1.2), tc_r("rail3", "flat", 1.3, 1.3, hops=4.9)
    f = tc.tiers_finding(a, r3, "flat", 0.66)
    assert "the same bound here" in f["why"] and "(equal: both non-blocking here)" in f["ideal"]
    assert "3.00 switch hops per byte against rail3's 4.90" in f["why"]
    assert "costs at 8,192 GPUs 0.66x rail3" in f["why"]
    f = tc.tiers_finding(a, tc_r("rail3", "flat", 2.0, 2.0, bound=1.6), "flat", None)
    assert "The bounds differ (1.00 s vs 1.60 s)" in f["why"] and "rail3 the tighter" in f["why"]
    assert "non-blocking" not in f["ideal"]
    paid = tc.railonly_finding(tc_r("railonly", "flat", 1.5, 1.4), a)
    assert "1.25x astral3's time" in paid["why"] and "pays for the missing spine" in paid["why"]
    free = tc.railonly_finding(tc_r("railonly", "flat", 1.2, 1.2), a)
    assert "cost no completion time" in free["why"] and "pays" not in free["why"]


def test_topology_compare_high_bandwidth_and_gap() -> None:
    from scenarios.experiments import topology_compare as tc

    res = {"astral3/flat": tc_r("astral3", "flat", 1.0, 1.0),
           "rail3/flat": tc_r("rail3", "flat", 1.6, 1.6),
           "astral3/high_bandwidth": tc_r("astral3", "high_bandwidth", 1.0, 1.0),
           "rail3/high_bandwidth": tc_r("rail3", "high_bandwidth", 1.05, 1.0)}
    f = tc.high_bandwidth_finding(res)
    assert "varied 1.05x" in f["why"] and "1.60x for the flat kernel" in f["why"]
    assert "mattered much less" in f["why"]
    res["rail3/high_bandwidth"] = tc_r("rail3", "high_bandwidth", 1.5, 1.0)
    assert "not much less" in tc.high_bandwidth_finding(res)["why"]
    del res["rail3/flat"]
    assert "varied" not in tc.high_bandwidth_finding(res)["why"]
    # a gap: the run's caveats come before the fluid model's missing queues
    assert tc._gap(tc_r("fattree", "flat", 1.0, 1.0)) == ""
    slow = tc._gap(tc_r("fattree", "flat", 2.0, 1.0))
    assert "queues (FIFO" in slow and "Python" not in slow
    thin = tc._gap(tc_r("fattree", "flat", 2.0, 1.0, margin=1.5))
    assert "fidelity margin was 1.50x" in thin and "queues (FIFO" not in thin
    polar = tc._gap(tc_r("fattree", "flat", 2.0, 1.0, idle={
        "agg-core up": {"candidates": 8, "idle": 4.0}}))
    assert "hash polarization" in polar
    fast = tc._gap(tc_r("railonly", "flat", 0.5, 1.0))
    assert "faster than the fluid model" in fast


# --- paper-shapes ------------------------------------------------------------------------
def test_paper_shapes_rows_3_4_5_follow_their_numbers() -> None:
    from scenarios.experiments import paper_shapes as ps

    assert "stays at 1.40, above 1" in ps.eplb_why({"median": 1.40}, 1.2)
    assert "here to a max/mean of 1.02" in ps.eplb_why({"median": 1.02}, 1.2)
    assert "The emulation agrees (1.01x)" in ps.relay_why(1.0, dist(1.01))
    more = ps.relay_why(1.0, dist(1.2, 1.2))
    assert "The emulation gave 1.20x, more than the model" in more
    assert "agrees" not in ps.relay_why(1.0, None) and "(1.00x)" in ps.relay_why(1.0, None)
    h = {"lab_hops": [3, 5], "model_hops": [3, 5], "lab_gpus": 16, "paper_gpus": 65536}
    same = ps.tiers_why(h, {"measured": 0.66, "ideal": 0.64})
    assert "Hops are structural: the lab's plans give 3 vs 5" in same
    assert "it hardly moves with size (0.66x" in same
    moved = ps.tiers_why({**h, "lab_hops": [3, 4]}, {"measured": 0.9, "ideal": 0.64})
    assert "the structure changes with size" in moved and "it moves with size" in moved
    assert "hardly" not in moved


# --- ops-eval ----------------------------------------------------------------------------
def test_ops_eval_steady_gap_branches() -> None:
    from scenarios.experiments.ops_eval import steady_gap

    assert steady_gap(1.0, 83.4, 83.4, 5.0) == ""
    low = steady_gap(0.5, 83.4, 83.0, 5.0)
    assert "fidelity margin of 5.00x the machine kept up" in low and "probe-send" in low
    thin = steady_gap(0.5, 83.4, 83.0, 1.3)
    assert "fidelity margin was 1.30x" in thin and "probe-send" not in thin
    high = steady_gap(1.5, 83.4, 55.0, 5.0)
    assert "delivered more than the model carries" in high and "probe-send" not in high
