"""The wiring check's pure half: probes, the rules and frames it sends, what it concludes."""

from __future__ import annotations

import pytest

from ops.agent import Tools
from ops.telemetry import History
from testbed import wiring
from testbed.faultspec import link_name
from testbed.topologies import build

PLAN = build("astral3", servers=4, gpus=2, servers_per_block=2)


def test_one_numbered_probe_leaves_each_end_of_every_switch_link() -> None:
    probes = wiring.probes(PLAN)
    lanes = [ln for ln in PLAN.links if ln.kind == "lane"]
    assert len(probes) == 2 * len(lanes) == 32 and [p.n for p in probes] == list(range(1, 33))
    first = probes[0]  # lf0r0:3 -> spine0:1 and back
    assert (first.link, first.switch, first.port, first.far) == (
        "lf0r0~spine0#0", "lf0r0", 3, ("spine0", 1))
    assert (probes[1].switch, probes[1].port, probes[1].far) == ("spine0", 1, ("lf0r0", 3))


def test_a_probe_frame_and_the_rules_that_see_it() -> None:
    assert wiring.probe_mac(0x010203) == "0e:a5:77:01:02:03"
    frame = bytes.fromhex(wiring.frame_hex(5))
    assert len(frame) == 60 and frame[:6] == bytes.fromhex("0ea577000005")
    assert frame[12:14] == b"\x88\xb5"
    with pytest.raises(ValueError, match="probe number"):
        wiring.probe_mac(0)
    assert wiring.learn_flow() == (
        "cookie=0xa57ff0a1,priority=65000,dl_type=0x88b5,actions=learn(table=250,"
        "cookie=0xa57ff0a1,NXM_OF_ETH_DST[],NXM_OF_IN_PORT[])")
    lines = wiring.bundle_lines(wiring.probes(PLAN)[:2], repeat=2).splitlines()
    assert len(lines) == 4 and lines[0] == (
        f"packet-out in_port=controller packet={wiring.frame_hex(1)} actions=output:3")
    assert wiring.delete_command("spine1")[-1] == "cookie=0xa57ff0a1/-1"


def test_learned_entries_parse_back_to_probe_and_port() -> None:
    dump = (" cookie=0xa57ff0a1, duration=0.3s, table=250, n_packets=0, n_bytes=0, "
            "in_port=2,dl_dst=0e:a5:77:00:01:0a actions=drop\n"
            " cookie=0xa57ff0a1, duration=0.3s, table=250, n_packets=0, n_bytes=0, "
            "dl_dst=0e:a5:77:00:00:07,in_port=14 actions=drop\n"
            "NXST_FLOW reply (xid=0x4):\n")
    assert wiring.parse_learned(dump) == {0x10A: 2, 7: 14}


def test_a_crossed_pair_of_lanes_is_found_from_all_four_ends() -> None:
    """lf0r0's lanes to spine1 and spine2 crossed at the spines: the frames of those two
    lanes, and no other, arrive elsewhere; a frame seen nowhere is not miswired."""
    probes = wiring.probes(PLAN)
    x = next(ln for ln in PLAN.links if (ln.a, ln.b) == ("lf0r0", "spine1"))
    y = next(ln for ln in PLAN.links if (ln.a, ln.b) == ("lf0r0", "spine2"))
    moved = {(x.b, x.b_port): (y.b, y.b_port), (y.b, y.b_port): (x.b, x.b_port)}
    seen: dict[str, dict[int, int]] = {}
    lost = probes[-1]
    for p in probes:
        far = p.far
        if (p.switch, p.port) in moved:  # sent from a crossed spine port: its cable's far end
            src = moved[(p.switch, p.port)]
            far = next(q.far for q in probes if (q.switch, q.port) == src)
        elif p.far in moved:
            far = moved[p.far]
        if p is not lost:
            seen.setdefault(far[0], {})[p.n] = far[1]
    found = wiring.compare(probes, seen)
    assert wiring.miswired(found) == sorted([link_name(PLAN, x), link_name(PLAN, y)])
    by_end = {f.sent: f.seen for f in found}
    assert by_end == {("lf0r0", x.a_port): (y.b, y.b_port), ("lf0r0", y.a_port): (x.b, x.b_port),
                      (x.b, x.b_port): ("lf0r0", y.a_port), (y.b, y.b_port): ("lf0r0", x.a_port),
                      (lost.switch, lost.port): None}
    assert found[-1].to_dict() == {"link": lost.link, "sent_from": f"{lost.switch}:{lost.port}",
                                   "planned": f"{lost.far[0]}:{lost.far[1]}", "seen": None}


def test_the_agent_asks_the_wiring_check_when_it_has_one() -> None:
    tools = Tools(PLAN, history=History())
    assert "error" in tools.call("wiring")
    found = [wiring.Finding("lf0r0~spine1#0", ("lf0r0", 4), ("spine1", 1), ("spine2", 1)),
             wiring.Finding("lf0r1~spine0#0", ("lf0r1", 3), ("spine0", 2), None)]
    tools = Tools(PLAN, history=History(), wiring=lambda: found)
    got = tools.call("wiring")
    assert got["miswired"] == ["lf0r0~spine1#0"] and got["unseen"] == ["lf0r1~spine0#0"]
    assert got["frames"][0]["seen"] == "spine2:1"
