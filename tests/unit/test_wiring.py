"""The wiring check's pure half: probes, the rules and frames it sends, what it concludes."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from controllers import discovery
from controllers.shell import app as app_module
from controllers.shell.app import AstralController
from controllers.shell.ofmsgs import protocol
from ops.agent import Tools
from ops.telemetry import History
from testbed import wiring
from testbed.faultspec import link_name
from testbed.topologies import build
from vocab.plan import WiringPlan

PLAN = build("astral3", servers=4, gpus=2, servers_per_block=2)
OF13, OF15 = 4, 6


def test_one_numbered_probe_leaves_each_end_of_every_switch_link() -> None:
    probes = wiring.probes(PLAN)
    lanes = [ln for ln in PLAN.links if ln.kind == "lane"]
    assert len(probes) == 2 * len(lanes) == 32 and [p.n for p in probes] == list(range(32))
    assert [(p.switch, p.port) for p in probes] == discovery.probe_ends(PLAN)
    first = probes[0]  # lf0r0:3 -> spine0:1 and back
    assert (first.link, first.switch, first.port, first.far) == (
        "lf0r0~spine0#0", "lf0r0", 3, ("spine0", 1))
    assert (probes[1].switch, probes[1].port, probes[1].far) == ("spine0", 1, ("lf0r0", 3))


def test_a_probe_frame_names_its_check_and_number_and_nothing_else_reads_as_one() -> None:
    frame = discovery.frame(300, 0x0102)
    assert len(frame) == 60 and frame[:6] == bytes.fromhex("0ea5772c0102")  # 300 % 256
    assert frame[12:14] == b"\x88\xb5"
    assert discovery.read_frame(frame) == (44, 0x0102)
    assert discovery.read_frame(frame[:12] + b"\x08\x00" + frame[14:]) is None  # IPv4
    assert discovery.read_frame(bytes.fromhex("ffffffffffff") + frame[6:]) is None
    assert discovery.read_frame(b"") is None
    with pytest.raises(ValueError, match="probe number"):
        discovery.frame(1, 1 << 16)
    trap = discovery.trap_entry(0xFFFFFFFD)
    assert (trap.priority, trap.match, trap.actions, trap.cookie) == (
        65000, (("eth_type", 0x88B5),), (("output", 0xFFFFFFFD),), 0xA57FF0A1)


class Cabled:
    """An os-ken datapath stand-in whose packet-outs cross ``cables`` (switch, port) ->
    (switch, port) and come back to the controller as the far switch's packet-ins."""

    def __init__(self, ctl: AstralController, name: str, dpid: int, version: int,
                 cables: dict[tuple[str, int], tuple[str, int]]) -> None:
        desc = protocol(version)
        self.ofproto, self.ofproto_parser = desc.ofproto, desc.ofproto_parser
        self.ctl, self.name, self.id, self.cables = ctl, name, dpid, cables
        self.sent: list[Any] = []
        self.xids = itertools.count(1)

    def set_xid(self, msg: Any) -> None:
        msg.set_xid(next(self.xids))

    def send_msg(self, msg: Any) -> None:
        self.sent.append(msg)
        if type(msg).__name__ != "OFPPacketOut":
            return
        msg.serialize()  # what the switch would receive must encode
        (out,) = msg.actions
        far = self.cables.get((self.name, out.port))
        if far is None:  # the cable is down: the frame is lost
            return
        there = self.ctl.dps[far[0]]
        self.ctl.on_packet_in(SimpleNamespace(msg=SimpleNamespace(
            datapath=there, data=msg.data, match={"in_port": far[1]})))


def _controller(monkeypatch: pytest.MonkeyPatch, plan: WiringPlan, version: int,
                cables: dict[tuple[str, int], tuple[str, int]]) -> AstralController:
    monkeypatch.setitem(app_module.SETTINGS, "plan", plan)
    monkeypatch.setitem(app_module.SETTINGS, "poll_interval", 3600.0)  # no poller of its own
    c = AstralController()
    for dpid, name in c.expected.items():
        c.dps[name] = Cabled(c, name, dpid, version, cables)
        c.synced.add(name)
    return c


def _cables(plan: WiringPlan) -> dict[tuple[str, int], tuple[str, int]]:
    out = {}
    for p in wiring.probes(plan):
        out[(p.switch, p.port)] = p.far
    return out


@pytest.mark.parametrize("version", [OF13, OF15])
def test_the_controllers_check_finds_a_crossed_pair_and_only_it(
        monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """The real app, its packet-outs crossing stand-in cables: as planned the answer reads
    clean; with lf0r0's lanes to spine1 and spine2 crossed at the spines, the frames of
    those two lanes, and no other, arrive elsewhere, from all four ends; a cable that
    carries nothing is seen nowhere and is not miswired; a switch not connected sends
    nothing and says nothing."""
    cables = _cables(PLAN)
    ctl = _controller(monkeypatch, PLAN, version, cables)
    answer = ctl.check_wiring(settle=0.0)
    assert answer["check"] == 1 and all(r["sent"] for r in answer["probes"])
    assert wiring.findings(PLAN, answer) == []
    sent = [m for dp in ctl.dps.values() for m in dp.sent if type(m).__name__ == "OFPPacketOut"]
    assert len(sent) == 2 * 32  # each end's frame twice

    x = next(ln for ln in PLAN.links if (ln.a, ln.b) == ("lf0r0", "spine1"))
    y = next(ln for ln in PLAN.links if (ln.a, ln.b) == ("lf0r0", "spine2"))
    xb, yb = (x.b, x.b_port), (y.b, y.b_port)
    xa, ya = (x.a, x.a_port), (y.a, y.a_port)
    cables.update({xa: yb, yb: xa, ya: xb, xb: ya})  # the fibres cross
    lost = wiring.probes(PLAN)[-1]
    del cables[(lost.switch, lost.port)]
    found = wiring.findings(PLAN, ctl.check_wiring(settle=0.0))
    assert wiring.miswired(found) == sorted([link_name(PLAN, x), link_name(PLAN, y)])
    assert {f.sent: f.seen for f in found} == {xa: yb, ya: xb, xb: ya, yb: xa,
                                               (lost.switch, lost.port): None}
    assert found[-1].to_dict() == {"link": lost.link, "sent_from": f"{lost.switch}:{lost.port}",
                                   "planned": f"{lost.far[0]}:{lost.far[1]}", "seen": None}

    ctl.synced.discard("spine1")  # not synced: its trap may not be in; it sends nothing
    answer = ctl.check_wiring(settle=0.0)
    unsent = [tuple(r["from"]) for r in answer["probes"] if not r["sent"]]
    assert unsent and all(sw == "spine1" for sw, _ in unsent)
    assert all(f.sent[0] != "spine1" for f in wiring.findings(PLAN, answer))


def test_a_late_frame_of_an_earlier_check_is_not_read_as_this_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ctl = _controller(monkeypatch, PLAN, OF15, {})  # every cable down: nothing comes back
    ctl.check_wiring(settle=0.0)
    first = ctl.probe_check
    ctl.probe_check += 1  # a new check is under way; a copy of the first one's frame arrives
    dp = ctl.dps["spine0"]
    ctl.on_packet_in(SimpleNamespace(msg=SimpleNamespace(
        datapath=dp, data=discovery.frame(first, 0), match={"in_port": 1})))
    ctl.on_packet_in(SimpleNamespace(msg=SimpleNamespace(  # not a probe at all
        datapath=dp, data=bytes(60), match={"in_port": 1})))
    assert ctl.arrivals == {}
    ctl.on_packet_in(SimpleNamespace(msg=SimpleNamespace(
        datapath=dp, data=discovery.frame(ctl.probe_check, 0), match={"in_port": 1})))
    assert ctl.arrivals == {0: {("spine0", 1)}}


def test_an_answer_for_another_plan_is_refused() -> None:
    answer = {"probes": [{"from": ["lf0r0", 3], "sent": True, "seen": []}]}
    with pytest.raises(ValueError, match="does not match this plan"):
        wiring.findings(PLAN, answer)
    rows = [{"from": [sw, port], "sent": True, "seen": []}
            for sw, port in reversed(discovery.probe_ends(PLAN))]
    with pytest.raises(ValueError, match="another plan"):
        wiring.findings(PLAN, {"probes": rows})


def test_every_synced_switch_gets_the_trap_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-back sync sends the trap with the routes, and a later sync that reads it
    back leaves it as it is (a foreign cookie) and sends it again, unchanged."""
    ctl = _controller(monkeypatch, PLAN, OF15, {})
    dp = ctl.dps["lf0r0"]
    ctl._finish_sync("lf0r0", dp, [], [])
    traps = [m for m in dp.sent if type(m).__name__ == "OFPFlowMod"
             and m.cookie == discovery.COOKIE_TRAP]
    assert len(traps) == 1 and traps[0].priority == discovery.PRIORITY
    assert dict(traps[0].match.items()) == {"eth_type": discovery.ETHERTYPE}
    (inst,) = traps[0].instructions
    assert [a.port for a in inst.actions] == [dp.ofproto.OFPP_CONTROLLER]


def test_the_agent_asks_the_wiring_check_when_it_has_one() -> None:
    tools = Tools(PLAN, history=History())
    assert "error" in tools.call("wiring")
    found = [wiring.Misdelivery("lf0r0~spine1#0", ("lf0r0", 4), ("spine1", 1), ("spine2", 1)),
             wiring.Misdelivery("lf0r1~spine0#0", ("lf0r1", 3), ("spine0", 2), None)]
    tools = Tools(PLAN, history=History(), wiring=lambda: found)
    got = tools.call("wiring")
    assert got["miswired"] == ["lf0r0~spine1#0"] and got["unseen"] == ["lf0r1~spine0#0"]
    assert got["frames"][0]["seen"] == "spine2:1"
