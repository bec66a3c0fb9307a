"""The link-failure scenario's pure parts: traffic sizing, lane choice, the fluid ideal after a
failure, the throughput series, the recovery rule, the probe gap, and the sampler's timing."""

from __future__ import annotations

import time

import numpy as np
import pytest

from controllers.paths import PathFinder
from scenarios import link_failure_metrics as lm
from scenarios.common import wire_flows
from scenarios.experiments import link_failure as lf
from testbed.models.perflow import model_flows
from testbed.topologies import build
from traffic.kernels import FlowSpec


@pytest.fixture(scope="module")
def plan():  # type: ignore[no-untyped-def]
    return build("astral3", servers=2, gpus=4, servers_per_block=2, scale=2e-5)


def test_all_to_all_is_equal_split_and_lasts_about_the_duration(plan) -> None:  # type: ignore
    flows = lf.all_to_all(plan, 6.0, qps_per_peer=2)
    hosts = [h.name for h in plan.hosts]
    assert len(flows) == len(hosts) * (len(hosts) - 1) * 2  # every ordered pair, 2 QPs
    sizes = {f.bytes for f in flows}
    assert max(sizes) - min(sizes) <= 1
    fluid = model_flows(plan, flows, "ecmp-fluid", unit="mbps")
    # NIC-bound: one NIC's worth of duration, plus at most one token's rounding
    assert 6.0 <= fluid.completion_s < 6.2
    with pytest.raises(ValueError, match="--duration-s"):
        lf.all_to_all(plan, 0.0)


def test_pick_lane_takes_a_lane_the_probe_pair_can_cross(plan) -> None:  # type: ignore
    leaf, spine, src, dst = lf.pick_lane(plan)
    finder = PathFinder(plan)
    assert finder.attach(src) == leaf != finder.attach(dst)
    assert plan.node(spine).tier == "spine"
    assert any(finder.peer(p[0])[0] == spine for p in finder.candidates(src, dst))
    links = lf.spine_links(plan, spine)
    assert len(links) == sum(1 for s in plan.switches if s.tier == "leaf")
    assert len(lm.down_hops(links)) == 2 * len(links)
    with pytest.raises(ValueError):
        lf.spine_links(plan, "spine99")


def test_remaining_after_constant_rates_and_finished_flows() -> None:
    flows = [FlowSpec.make("a", "b", 1000, 0, message_bytes=100),
             FlowSpec.make("a", "c", 1000, 1, message_bytes=100)]
    left = lm.remaining_after(flows, [2.0, 0.4], [4000.0, 8000.0], 0.5)  # 500 B/s, 1000 B/s
    assert [(f.dst, f.bytes, f.qp) for f in left] == [("b", 750, 0)]
    assert left[0].messages == 8  # 750 B in 100 B messages
    assert lm.remaining_after(flows, [1.0, 1.0], [8000.0, 8000.0], 0.0)[0].bytes == 1000
    with pytest.raises(ValueError):
        lm.remaining_after(flows, [1.0, 1.0], [1.0, 1.0], -1.0)


def test_fluid_ideal_after_a_failure_is_slower_and_spine_is_worse(plan) -> None:  # type: ignore
    flows = lf.all_to_all(plan, 6.0)
    fluid = model_flows(plan, flows, "ecmp-fluid", unit="mbps")
    leaf, spine, _, _ = lf.pick_lane(plan)
    t = fluid.completion_s / 3
    left = lm.remaining_after(flows, fluid.flow_finish_s, fluid.flow_start_rate_bps, t)
    assert sum(f.bytes for f in left) == pytest.approx(sum(f.bytes for f in flows) * 2 / 3,
                                                       rel=0.01)
    totals = {}
    for case, links in (("lane", [ln for ln in plan.links if {ln.a, ln.b} == {leaf, spine}]),
                        ("spine", lf.spine_links(plan, spine))):
        finder = PathFinder(plan, down=lm.down_hops(links))
        totals[case] = t + model_flows(finder, left, "ecmp-fluid", unit="mbps").completion_s
    # a leaf's uplinks carry 6/7 of its NICs' rate; with 3 of 4 lanes they bind
    assert fluid.completion_s * 1.02 < totals["lane"] <= totals["spine"]


def test_rates_smooth_level_and_fraction() -> None:
    start = 10**18
    samples = [(start + k * 100_000_000, k * 125_000) for k in range(11)]  # 10 Mb/s
    t, mbps = lm.rates(samples, start)
    assert np.allclose(mbps, 10.0) and t[0] == pytest.approx(0.05)
    assert lm.rates(samples[:1], start)[0].size == 0
    assert np.allclose(lm.smooth(np.array([3.0, 6.0, 9.0, 0.0]), 2), [3.0, 4.5, 7.5, 4.5])
    assert lm.level(t, mbps, 0.0, 0.5) == pytest.approx(10.0)
    assert np.isnan(lm.level(t, mbps, 5.0, 6.0))
    assert lm.time_of_fraction(t, mbps, 0.5) == pytest.approx(0.45, abs=0.051)
    with pytest.raises(ValueError):
        lm.smooth(mbps, 0)


def test_recovery_time_rule() -> None:
    t = np.arange(0.05, 6.0, 0.1)
    mbps = np.where((t > 2.0) & (t < 3.0), 2.0, 10.0)  # a dip of 1 s after a cut at 2 s
    rec = lm.recovery_time(t, mbps, 2.0, 9.0, until_s=5.5)
    # the 3-sample average is back above 9 once all 3 samples are after the dip
    assert rec == pytest.approx(1.2, abs=0.11)
    assert lm.recovery_time(t, np.full_like(t, 10.0), 2.0, 9.0, until_s=5.5) == pytest.approx(0.0)
    assert lm.recovery_time(t, mbps, 2.0, 11.0, until_s=5.5) is None
    assert lm.recovery_time(t, mbps, 2.0, 9.0, until_s=2.8) is None  # the tail came first


def test_probe_gap_only_counts_silences_at_the_cut() -> None:
    res = {"flows": {"50100": {"max_gap_s": 0.04, "gap_at": 100.01},
                     "50101": {"max_gap_s": 0.09, "gap_at": 100.3},
                     "50102": {"max_gap_s": 0.5, "gap_at": 90.0},
                     "50103": {"max_gap_s": 0.02, "gap_at": None}}}
    assert lm.probe_gap(res, 100.0) == (pytest.approx(0.09), 2)
    assert lm.probe_gap({"flows": {}}, 100.0) == (None, 0)


def test_sampler_detects_the_start_and_fires_once_after_the_delay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.monotonic()

    def fake(_intf: str) -> int:  # idle for 0.2 s, then 8 Mb/s
        return int(max(0.0, time.monotonic() - t0 - 0.2) * 1e6)

    monkeypatch.setattr(lf.Sampler, "read", staticmethod(fake))
    fired: list[float] = []
    s = lf.Sampler(delivered=["x"], watch=["y"], interval_s=0.02, start_mbps=4.0, delay_s=0.3,
                   action=lambda: fired.append(time.monotonic() - t0)).start()
    deadline = time.monotonic() + 30  # a busy machine may be slow; only the order matters
    while not fired and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)
    s.stop()
    assert len(fired) == 1 and s.action_ns is not None and s.error is None
    # never before the traffic started (0.2 s) plus the delay; how late is the machine's
    # business, printed as a measurement rather than asserted
    assert fired[0] >= 0.2 + 0.3 - 0.02
    print(f"action fired {fired[0] - 0.5:.3f} s after start + delay")
    assert s.started_ns is not None and len(s.samples) >= 5 and len(s.watched) == len(s.samples)


def test_sampler_reports_an_action_that_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lf.Sampler, "read", staticmethod(lambda _i: time.monotonic_ns()))

    def boom() -> None:
        raise OSError("no such device")

    s = lf.Sampler(delivered=["x"], watch=[], interval_s=0.01, start_mbps=1.0, delay_s=0.0,
                   action=boom).start()
    time.sleep(0.2)
    s.stop()
    assert isinstance(s.error, OSError) and s.action_ns is not None


def test_bad_parameters_fail_before_any_fabric(tmp_path: str) -> None:
    with pytest.raises(ValueError, match="--cut-fraction"):
        lf.link_failure(cut_fraction=1.5, output=str(tmp_path))
    with pytest.raises(ValueError, match="--modes"):
        lf.link_failure.resolve(True, {"modes": ["ecmp", "sprinkle"]})


def _fake_run(run, lab, flows, mode, case, links, delay_s, probe, draw=0):  # type: ignore
    """A failure run without a fabric: 10 Mb/s delivered until the end, a dip after the cut,
    completion stretched by the failure and a little by the draw (as a hash would)."""
    start = 10**18
    stretch = {"baseline": 1.0, "lane": 1.1, "spine": 1.25}[case] * (1 + 0.03 * draw)
    done = 4.0 * stretch
    samples = [(start + k * 100_000_000, int(k * 125_000 * (0.7 if delay_s and
                                                              k * 0.1 > delay_s else 1)))
               for k in range(int(done * 10) + 2)]
    cut = start + int((delay_s or 0) * 1e9)
    # a sprayed message crosses every lane: more of them lose a packet at a cut
    incomplete = 0 if case == "baseline" else 30 if mode == "spray" else 10
    return {"mode": mode, "case": case, "draw": draw, "completion_s": done,
            "messages": 1000, "incomplete_messages": incomplete,
            "summary": {"lost_packets": 0, "bytes_received": 10, "bytes_sent": 10,
                        "start_skew_s": 0.001},
            "start_ns": start, "samples": samples, "watched": [],
            "action_ns": (cut, cut + 5_000_000) if links else None,
            "links": [], "health": {"reroutes": [{"up": False, "at": cut / 1e9,
                                                  "installed_s": 0.02,
                                                  "switches_changed": 2}]},
            "probe": {"flows": {"50100": {"max_gap_s": 0.03, "gap_at": cut / 1e9}}}}


def test_a_run_reports_penalties_over_draws_beside_the_model(
        tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from scen_fakes import check_entry, install, read_json, read_text

    install(monkeypatch, lf)
    monkeypatch.setattr(lf, "one_run", _fake_run)
    out = os.path.join(str(tmp_path), "run")
    res = lf.link_failure(quick=True, output=out, log=lambda _m: None, model_draws=6,
                          modes=["ecmp", "planned"])
    n = lf.link_failure.resolve(True, {})["draws"]
    assert n >= 3
    summary = read_json(out, "summary.json")
    for case in ("baseline", "lane", "spine"):
        e, pl = summary[f"ecmp/{case}"], summary[f"planned/{case}"]
        assert e["draws"] == n and pl["draws"] == 1
        assert e["model"]["draws"] == 6 and pl["model"]["draws"] == 1
        assert e["p25"] <= e["median"] <= e["p75"]
        if case != "baseline":
            check_entry(e, draws=n)
            check_entry(pl, draws=1)
            assert pl["model"]["median"] >= 1.0  # planned: lost capacity never helps
            assert summary[f"ecmp/{case}/recovery_s"]["ratio"] is None
    assert [(r["mode"], r["case"]) for r in res.rows] == [
        (m, c) for m in ("ecmp", "planned") for c in ("baseline", "lane", "spine")]
    report = read_text(out, "REPORT.md")
    assert f"N={n}" in report and "### Completion-time penalty" in report
    for png in ("timeline.png", "completion.png"):
        assert os.path.getsize(os.path.join(out, png)) > 1000 and f"]({png})" in report
    assert len(read_json(out, "metrics.json")["runs"]) == 3 * (n + 1)


def test_model_penalty_follows_the_policy(plan) -> None:  # type: ignore
    flows = lf.all_to_all(plan, 4.0)
    leaf, spine, _, _ = lf.pick_lane(plan)
    lane = [ln for ln in plan.links if {ln.a, ln.b} == {leaf, spine}]
    planned = lm.model_penalties(plan, flows, "planned", lane, 0.33, 10)
    ecmp = lm.model_penalties(plan, flows, "ecmp", lane, 0.33, 10)
    assert len(planned) == 1 and len(ecmp) == 10
    assert planned[0]["penalty"] > 1.0  # the leaf's three surviving lanes bind
    # a hash over fewer ports re-spreads the flows toward and from the failed leaf, and
    # what is left at the cut lands on a second, independent placement: mixing two
    # placements can collide less than either (penalty < 1); never absurd
    assert all(0.5 < x["penalty"] < 2.0 for x in ecmp)
    # the hash's baseline is slower than the planned one: collisions
    assert min(x["baseline_s"] for x in ecmp) >= planned[0]["baseline_s"] * 0.999


@pytest.mark.parametrize("frac", [0.2, 0.5, 0.8])
def test_a_spine_down_never_costs_less_than_one_of_its_lanes_in_the_fluid_model(
        plan, frac: float) -> None:  # type: ignore[no-untyped-def]
    """At the same instant, a spine takes a lane from every leaf, including the lane the
    lane cut takes: its ideal is never the faster one."""
    flows = lf.all_to_all(plan, 4.0)
    leaf, spine, _, _ = lf.pick_lane(plan)
    lane = [ln for ln in plan.links if {ln.a, ln.b} == {leaf, spine}][:1]
    fluid = model_flows(plan, wire_flows(flows), "ecmp-fluid", unit="mbps")
    t_lane, _, _ = lm.fluid_after_cut(plan, flows, fluid, lane, frac)
    t_spine, _, _ = lm.fluid_after_cut(plan, flows, fluid, lf.spine_links(plan, spine), frac)
    assert fluid.completion_s < t_lane <= t_spine * (1 + 1e-9), (t_lane, t_spine)


def test_host_side_policies_report_the_whole_messages_a_failure_cost(
        tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from scen_fakes import install, read_text

    install(monkeypatch, lf)
    monkeypatch.setattr(lf, "one_run", _fake_run)
    out = os.path.join(str(tmp_path), "run")
    lf.link_failure(quick=True, output=out, log=lambda _m: None, model_draws=4,
                    modes=["ecmp", "spray"], draws=1)
    report = read_text(out, "REPORT.md")
    part = report[report.index("### Whole messages under host-side balancing"):]
    assert "spray: messages incomplete" in part and "lane 0.030" in part
    assert "spray lost whole messages at 0.030 of its messages, more than ECMP (0.010)" in part
    assert "Ultra Ethernet" in part
