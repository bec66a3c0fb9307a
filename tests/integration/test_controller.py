"""The controller with traffic running: modes, failover, restart, and its JSON API.

Each test brings up a small real fabric (astral3: 4 leaves, 4 spines, one 20 Mb/s lane
between every leaf and spine) and runs steady UDP streams (``testbed.shell.probe``: one socket
per UDP source port, sequence numbers, the receiver measures the longest silence) while
something changes.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable

import pytest

from controllers.shell.client import ControllerError
from testbed.shell.lab import Lab
from testbed.shell.probe import Stream
from testbed.topologies import build
from vocab.lanemark import MARK_BASE, PROBE_DPORT, LaneMarks, lane_slots, probe_slot, probe_sports
from vocab.plan import WiringPlan

SPORTS = range(50000, 50016)


def small() -> WiringPlan:
    return build("astral3", servers=4, gpus=2, servers_per_block=2)


def flows_between(src: str, dst: str, sports: range = SPORTS) -> list[dict[str, object]]:
    return [{"src": src, "dst": dst, "sport": p, "bytes": 1_000_000} for p in sports]


def spine_tx(lab: Lab, spine: str) -> dict[int, int]:
    stats = lab.client().port_stats(spine)[spine]
    return {int(p): s["tx_packets"] for p, s in stats.items()}


def wait_poll(lab: Lab) -> None:
    time.sleep(lab.poll_interval * 2.2)  # two polls: counters are fresh


def test_ecmp_spreads_many_udp_flows_between_two_leaves_over_all_spines(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = small()
    with Lab(plan, lb="ecmp", poll_interval=0.5) as lab:
        wait_poll(lab)
        before = {s.name: sum(spine_tx(lab, s.name).values()) for s in plan.switches
                  if s.tier == "spine"}
        with Stream(lab, "s0g0", "s2g1", sports=range(50000, 50064), pps=20, duration=2) as st:
            pass
        wait_poll(lab)
        after = {s: sum(spine_tx(lab, s).values()) for s in before}
        carried = {s: after[s] - before[s] for s in before}
        assert sum(f["received"] for f in st.result["flows"].values()) >= 64 * 35
        # 64 flows over 4 spines: P(some spine gets none) ~ 4 * 0.75^64 = 4e-8
        assert all(n >= 20 for n in carried.values()), carried
        assert max(carried.values()) < 0.6 * sum(carried.values()), carried
    assert_clean(plan)


@pytest.mark.parametrize("plane", ["python", "native"])
def test_a_probe_rides_the_lane_its_source_port_names_on_real_switches(
        plane: str, assert_clean: Callable[[WiringPlan], None]) -> None:
    """The probe block's datagrams leave by the uplink their source port's slot names
    (OVS applying the masked matches), each port on one lane, and the marks say so; the
    same ports to another UDP port are the hash's."""
    plan = small()
    lanes = LaneMarks(plan)
    ups = lanes.uplinks[lanes.switch_of["s0g0"]]
    slots = lane_slots(len(ups))
    sports = probe_sports(1, slots)
    with Lab(plan, lb="ecmp", poll_interval=0.5) as lab:
        with Stream(lab, "s0g0", "s2g1", sports=sports, pps=20, duration=2,
                    port=PROBE_DPORT + 3, plane=plane) as st:
            pass
        flows = st.result["flows"]
        assert sorted(int(p) for p in flows) == sorted(sports)
        for sp in sports:
            marks = {int(t): n for t, n in flows[str(sp)]["marks"].items() if n}
            want = MARK_BASE + probe_slot(sp, slots) % len(ups)
            assert list(marks) == [want] and marks[want] >= 20, (sp, marks)
    assert_clean(plan)


def test_mode_switch_at_run_time_keeps_traffic_flowing(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = small()
    with Lab(plan, lb="ecmp", poll_interval=0.5) as lab:
        c = lab.client()
        c.post_traffic(flows_between("s0g0", "s2g1"))
        with Stream(lab, "s0g0", "s2g1", sports=SPORTS, pps=100, duration=6) as st:
            time.sleep(1)
            assert c.set_lb("planned")["pinned"] == len(SPORTS)
            time.sleep(1.5)
            assert c.set_lb("adaptive")["mode"] == "adaptive"
            time.sleep(1.5)
            assert c.set_lb("ecmp")["pinned"] == 0
        flows = st.result["flows"]
        assert len(flows) == len(SPORTS)
        for sport, f in flows.items():
            assert f["lost"] <= 2 and f["max_gap_s"] < 0.5, (sport, f)
        # planned pins spread the 16 flows evenly: 4 per spine (paths read back from the API)
        c.set_lb("planned")
        spines = [c.paths("s0g0", "s2g1", sport=p)["path"][1]["switch"] for p in SPORTS]
        assert sorted(spines.count(s) for s in set(spines)) == [4, 4, 4, 4]
        assert lab.health()["converged"]
    assert_clean(plan)


@pytest.mark.parametrize("where", ["leaf-uplink", "spine-downlink"])
def test_link_failure_under_udp_traffic_recovers(where: str,
                                                 assert_clean: Callable[[WiringPlan], None]
                                                 ) -> None:
    """A lane dies mid-stream: every flow keeps going; the outage is short and measured.

    leaf-uplink: the sender's leaf loses a lane; its select group skips the dead port
    without the controller. spine-downlink: a lane of the *receiver's* leaf dies; the
    sender's leaf keeps hashing flows to that spine until the controller reroutes.
    """
    plan = small()
    src, dst = "s0g0", "s2g1"  # lf0r0 -> any spine -> lf1r1
    leaf = "lf0r0" if where == "leaf-uplink" else "lf1r1"
    with Lab(plan, lb="ecmp", poll_interval=0.5) as lab:
        with Stream(lab, src, dst, sports=range(50000, 50032), pps=100, duration=4) as st:
            time.sleep(1.5)
            t_fail = time.time()
            lab.set_link(leaf, "spine1", up=False)
            time.sleep(1.0)
            health = lab.health()
        flows = st.result["flows"]
        assert len(flows) == 32
        gaps = sorted(f["max_gap_s"] for f in flows.values())
        for sport, f in flows.items():
            assert f["last"] > t_fail + 1.5, (sport, f)  # still arriving well after the cut
            # recovered quickly: under a second without packets, under a second's worth
            # (100 pps) lost
            assert f["max_gap_s"] < 1.0 and f["lost"] < 100, (sport, f)
        assert f"{leaf}:" in " ".join(health["down_ports"]), health["down_ports"]
        assert health["reroutes"], health
        assert health["converged"] and not health["errors"]
        links = {ln["name"]: ln for ln in lab.client().links()["links"]}
        dead = next(ln for ln in links.values() if {ln["a"], ln["b"]} == {leaf, "spine1"})
        assert dead["state"] == "down"
        print(f"{where}: worst gap {gaps[-1] * 1000:.0f} ms, median {gaps[16] * 1000:.0f} ms, "
              f"reroute installed in {health['reroutes'][-1]['installed_s'] * 1000:.0f} ms")
    assert_clean(plan)


def test_controller_killed_and_restarted_while_traffic_runs(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = small()
    with Lab(plan, lb="planned", poll_interval=0.5) as lab:
        c = lab.client()
        c.post_traffic(flows_between("s0g0", "s2g1"))
        paths_before = {p: c.paths("s0g0", "s2g1", sport=p)["path"] for p in SPORTS}
        with Stream(lab, "s0g0", "s2g1", sports=SPORTS, pps=100, duration=6) as st:
            time.sleep(1)
            lab.kill_controller()
            time.sleep(2)  # switches forward on their own (fail_mode=secure keeps flows)
            lab.restart_controller()
        for sport, f in st.result["flows"].items():
            # no packet lost, and no silence anywhere near the 2 s the controller was away
            assert f["lost"] == 0 and f["max_gap_s"] < 1.0, (sport, f)
        health = lab.health()
        assert health["converged"] and health["lb"] == "planned" and health["pinned"] == 16
        # the restarted controller read every switch back and changed no entry
        assert health["resync"]["entries_set"] == 0, health["resync"]
        assert health["resync"]["entries_del"] == 0, health["resync"]
        assert health["resync"]["read_back"] > 0
        c = lab.client()
        assert {p: c.paths("s0g0", "s2g1", sport=p)["path"] for p in SPORTS} == paths_before
    assert_clean(plan)


def raw(port: int, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, json.loads(data)


def test_rest_api_answers_every_endpoint_and_errors_are_json(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = small()
    with Lab(plan, poll_interval=0.5) as lab:
        c = lab.client()
        port = lab.rest_port
        wait_poll(lab)
        assert c.health()["converged"]
        assert c.topology()["topology"] == "astral3"
        links = c.links()["links"]
        assert len(links) == len(plan.links) and all(ln["state"] == "up" for ln in links)
        assert all(ln["a_to_b"]["utilization"] is not None for ln in links)
        assert set(c.port_stats()) == {s.name for s in plan.switches}
        assert c.group_stats("lf0r0")["lf0r0"]
        flows = c.flows("lf0r0")["lf0r0"]
        assert flows[-1]["priority"] == 0 and flows[-1]["actions"] == ["drop"]
        assert len(c.paths("s0g0", "s2g1")["candidates"]) == 4
        assert c.lb()["mode"] == "ecmp"
        assert c.post_traffic(flows_between("s0g0", "s2g1"))["pinned"] == 0  # ecmp pins none
        assert len(c.traffic()["flows"]) == 16
        assert c.clear_traffic()["flows"] == []
        bad = [
            ("GET", "/nope", None, 404),
            ("POST", "/health", b"{}", 405),
            ("PUT", "/lb", b"{not json", 400),
            ("PUT", "/lb", b'{"mode": "fastest"}', 400),
            ("PUT", "/lb", b'{"mode": "adaptive", "threshold": 7}', 400),
            ("POST", "/traffic", b'{"flows": [{"src": "s0g0", "dst": "nobody", "sport": 1}]}',
             400),
            ("POST", "/traffic", b'[{"src": "s0g0", "dst": "s2g1", "sport": 70000}]', 400),
            ("GET", "/paths?src=s0g0", None, 400),
            ("GET", "/paths?src=s0g0&dst=zz", None, 404),
            ("GET", "/paths?src=s0g0&dst=s2g1&sport=x", None, 400),
            ("GET", "/flows?switch=nosuch", None, 404),
        ]
        for method, path, body, status in bad:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            got, answer = raw(port, method, path, body, headers)
            assert got == status, (method, path, got, answer)
            assert isinstance(answer.get("error"), str) and "Traceback" not in answer["error"]
        with pytest.raises(ControllerError) as err:
            c.set_lb("fastest")
        assert err.value.status == 400
        assert c.health()["converged"] and c.lb()["mode"] == "ecmp"  # nothing half-applied
    assert_clean(plan)


def test_adaptive_moves_a_colliding_elephant_by_measured_counters(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    """Two 12 Mb/s flows that ECMP's hash puts on one 20 Mb/s lane: adaptive splits them."""
    from controllers import lb
    from controllers.paths import PathFinder
    from vocab.flows import Flow

    plan = small()
    src, dst = "s0g0", "s2g1"
    finder = PathFinder(plan)
    by_uplink: dict[object, list[int]] = {}
    for sport in range(50000, 50100):
        by_uplink.setdefault(lb.ecmp_path(Flow(src, dst, sport), finder)[0], []).append(sport)
    sports = next(v for v in by_uplink.values() if len(v) >= 2)[:2]
    with Lab(plan, lb="adaptive", poll_interval=0.5) as lab:
        c = lab.client()
        c.post_traffic([{"src": src, "dst": dst, "sport": p, "bytes": 10**7} for p in sports])
        first = {p: c.paths(src, dst, sport=p)["path"][0]["out_port"] for p in sports}
        assert len(set(first.values())) == 1  # they start together, as ECMP put them
        # 1,500 packets/s of 1,000 bytes = 12 Mb/s each; together 24 Mb/s on a 20 Mb/s lane
        with Stream(lab, src, dst, sports=sports, pps=1500, duration=6, size=1000):
            time.sleep(4)
            moved = c.lb()["adaptive_moves"]
            after = {p: c.paths(src, dst, sport=p)["path"][0]["out_port"] for p in sports}
            time.sleep(1.5)
            assert c.lb()["adaptive_moves"] == moved  # and then it stays put: no flapping
        assert moved == 1, c.health()
        assert len(set(after.values())) == 2, after
    assert_clean(plan)
