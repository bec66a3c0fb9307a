"""The live view's data (ops.dashboard): the plan as geometry, and polls turned into state."""

from __future__ import annotations

import pytest

from ops.dashboard import DashboardState, layout, read_progress
from testbed.topologies import TOPOLOGIES, build
from tests.unit.dash_fakes import demo_plan
from vocab.plan import link_components

NIC = "s0g0~lf0r0#0"
LANE = "lf0r0~spine1#0"


@pytest.mark.parametrize("topology", TOPOLOGIES.names())
def test_layout_draws_every_link_of_the_plan_once_inside_the_picture(topology: str) -> None:
    plan = build(topology)
    lay = layout(plan)
    ids = [ln["id"] for ln in lay["links"]]
    assert sorted(ids) == sorted(link_components(plan))
    assert len(lay["nodes"]) == len(plan.nodes)
    for ln in lay["links"]:
        assert len(ln["points"]) >= 2
        for x, y in ln["points"]:
            assert 0 <= x <= lay["width"] and 0 <= y <= lay["height"], ln


def test_astral3_lanes_go_through_the_shuffle_box_and_hosts_sit_below_leaves() -> None:
    lay = layout(demo_plan())
    box = lay["boxes"][0]
    lane = next(ln for ln in lay["links"] if ln["id"] == LANE)
    assert len(lane["points"]) == 4 and lane["lane"] == 1
    # enters the box's bottom edge and leaves by its top edge
    assert lane["points"][1][1] == box["y"] + box["h"] / 2
    assert lane["points"][2][1] == box["y"] - box["h"] / 2
    y = {n["name"]: n["y"] for n in lay["nodes"]}
    assert y["s0g0"] > y["lf0r0"] > box["y"] > y["spine0"]  # SVG y grows downwards
    nic = next(ln for ln in lay["links"] if ln["id"] == NIC)
    assert nic["rail"] == 0 and nic["kind"] == "nic" and len(nic["points"]) == 2


def test_utilisation_is_the_polls_rate_over_the_links_emulated_rate() -> None:
    plan = demo_plan()
    s = DashboardState(plan)
    s.update(10.0, {(NIC, "mbps_ab"): 30.0, (NIC, "mbps_ba"): 4.0, (LANE, "mbps_ab"): 5.0})
    nic, lane = s.link(NIC), s.link(LANE)
    assert nic["mbps_capacity"] == 40.0 and nic["util_ab"] == pytest.approx(0.75)
    assert nic["util_ba"] == pytest.approx(0.1) and nic["util"] == pytest.approx(0.75)
    assert lane["util_ab"] == pytest.approx(0.25) and lane["util_ba"] is None
    assert s.link("s1g3~lf0r3#0")["util"] is None  # never sampled: not zero


def test_byte_totals_integrate_rates_over_the_poll_interval() -> None:
    s = DashboardState(demo_plan())
    s.update(10.0, {(NIC, "mbps_ab"): 8.0})  # first poll: no interval yet, nothing counted
    s.update(12.0, {(NIC, "mbps_ab"): 8.0})  # 8 Mb/s for 2 s = 2 MB
    s.update(13.0, {(NIC, "mbps_ab"): 16.0})  # + 16 Mb/s for 1 s = 2 MB
    assert s.link(NIC)["bytes_ab"] == 4_000_000
    s.update(12.5, {(NIC, "mbps_ab"): 1000.0})  # out of order: ignored
    assert s.link(NIC)["bytes_ab"] == 4_000_000 and s.polls == 3


def test_link_state_from_the_kernel_then_the_controller_else_unknown() -> None:
    s = DashboardState(demo_plan())
    s.update(1.0, {(NIC, "up"): 1.0, (LANE, "up"): 0.0, ("lf0r1~spine0#0", "ctl_up"): 0.0})
    assert s.link_state(NIC) == "up"
    assert s.link_state(LANE) == "down"
    assert s.link_state("lf0r1~spine0#0") == "down"  # the controller's view when no kernel
    assert s.link_state("lf0r2~spine0#0") == "unknown"
    s.update(2.0, {(LANE, "up"): 1.0})
    assert s.link_state(LANE) == "up" and s.link_state(NIC) == "unknown"  # latest poll only


def test_spine_bytes_count_what_leaves_each_spine() -> None:
    s = DashboardState(demo_plan())
    down = {("lf0r0~spine0#0", "mbps_ba"): 8.0, ("lf0r1~spine0#0", "mbps_ba"): 8.0,
            ("lf0r0~spine1#0", "mbps_ba"): 4.0, ("lf0r0~spine2#0", "mbps_ab"): 20.0}
    s.update(0.0, down)
    s.update(1.0, down)
    snap = s.snapshot()["spines"]
    assert set(snap) == {"spine0", "spine1", "spine2", "spine3"}
    assert snap["spine0"] == {"bytes": 2_000_000, "mbps": 16.0, "links": 4}
    assert snap["spine1"]["bytes"] == 500_000
    assert snap["spine2"]["bytes"] == 0  # traffic into a spine is not what it forwarded


def test_drops_and_group_buckets_accumulate_and_controller_health_shows() -> None:
    s = DashboardState(demo_plan())
    s.update(0.0, {(LANE, "qdrops_ab"): 3.0, ("lf0r0", "port_drops"): 1.0,
                   ("lf0r0", "bucket4_mbps"): 8.0, ("controller", "up"): 1.0,
                   ("controller", "converged"): 0.0})
    s.update(1.0, {(LANE, "qdrops_ab"): 2.0, ("lf0r0", "port_drops"): 1.0,
                   ("lf0r0", "bucket4_mbps"): 8.0, ("controller", "up"): 1.0,
                   ("controller", "converged"): 1.0, ("controller", "down_ports"): 2.0})
    snap = s.snapshot()
    assert snap["links"][LANE]["qdrops_ab"] == 5
    assert snap["switches"]["lf0r0"]["port_drops"] == 2
    assert snap["groups"] == {"lf0r0": {"4": 1_000_000}}
    assert snap["controller"] == {"up": True, "converged": True, "down_ports": 2}


def test_alerts_keep_active_and_recently_cleared_ones_active_first() -> None:
    s = DashboardState(demo_plan())
    s.update(1000.0, {})
    s.set_alerts([
        {"detector": "degraded", "component": LANE, "severity": "warning", "summary": "slow",
         "first_seen": 900.0, "cleared": 990.0},
        {"detector": "link-down", "component": NIC, "severity": "critical", "summary": "down",
         "first_seen": 995.0, "cleared": None},
        {"detector": "loss", "component": "s1g1", "severity": "warning", "summary": "old",
         "first_seen": 100.0, "cleared": 200.0},
    ])
    assert [a["detector"] for a in s.snapshot()["alerts"]] == ["link-down", "degraded"]


def test_progress_file_is_read_only_when_whole() -> None:
    assert read_progress('{"scenario": "demo", "stage": "ecmp"}') == {"scenario": "demo",
                                                                     "stage": "ecmp"}
    assert read_progress('{"scenario": "de') is None
    assert read_progress("[1, 2]") is None
    assert read_progress(None) is None
