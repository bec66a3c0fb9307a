"""The controller's counter poller against fake datapaths: it never stacks questions up.

A switch answers a poll when the controller's event loop gets to its reply; a controller
slower than the poll interval (an emulated CPU) must not keep asking, or the replies queue
without bound and the barrier reply a push waits for sits behind them. These tests build
the real os-ken app on a plan, hand it datapaths that record what it sends, and answer
(or do not answer) its requests by hand.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from controllers.flowtable import COOKIE_PIN
from controllers.shell import app as app_module
from controllers.shell.app import STALE_REQUEST_S, AstralController
from controllers.shell.ofmsgs import messages, protocol
from tests.unit.fabrics import plan_of
from vocab.flows import Flow

OF15 = 6


class FakeDatapath:
    """What the app uses of an os-ken Datapath: protocol objects, xids, a send log."""

    def __init__(self, dpid: int, xids: Iterator[int]) -> None:
        desc = protocol(OF15)
        self.ofproto, self.ofproto_parser = desc.ofproto, desc.ofproto_parser
        self.id = dpid
        self.sent: list[Any] = []
        self._xids = xids

    def set_xid(self, msg: Any) -> None:
        msg.set_xid(next(self._xids))

    def send_msg(self, msg: Any) -> None:
        self.sent.append(msg)

    def asked(self) -> list[str]:
        """Kinds of the multipart requests sent since the last call (and forget them)."""
        kinds = [type(m).__name__ for m in self.sent]
        self.sent.clear()
        return kinds


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch) -> AstralController:
    """The app on a small astral3 plan, every switch connected and synced, in planned mode."""
    plan = plan_of("astral3")
    monkeypatch.setitem(app_module.SETTINGS, "plan", plan)
    monkeypatch.setitem(app_module.SETTINGS, "lb", "planned")
    monkeypatch.setitem(app_module.SETTINGS, "poll_interval", 3600.0)  # no poller of its own
    c = AstralController()
    xids = itertools.count(1)
    for dpid, name in c.expected.items():
        c.dps[name] = FakeDatapath(dpid, xids)
        c.synced.add(name)
    hosts = [h.name for h in plan.hosts]
    c.logic.set_flows([Flow(s, d, 49152) for s, d in itertools.permutations(hosts, 2)])
    return c


def answer(c: AstralController, name: str, kind: str, bodies: list[Any] = ()) -> None:
    """The switch's whole reply to the open request of ``kind``, as on_multipart delivers it."""
    (xid,) = [x for (n, x), p in c.pending.items() if n == name and p.kind == kind]
    p = c.pending.pop((name, xid))
    p.callback(list(bodies))


REQUESTS = ["OFPPortStatsRequest", "OFPGroupStatsRequest", "OFPFlowDescStatsRequest"]


def test_an_unanswered_question_is_not_asked_again(ctl: AstralController) -> None:
    leaf = sorted(ctl.synced)[0]
    dp = ctl.dps[leaf]
    ctl.poll_once()
    assert dp.asked() == REQUESTS
    for _ in range(5):  # a slow event loop: no reply arrives for five rounds
        ctl.poll_once()
        assert dp.asked() == []
    assert len(ctl.pending) == 3 * len(ctl.synced)  # bounded: one of each kind per switch
    answer(ctl, leaf, "ports")
    ctl.poll_once()
    assert dp.asked() == ["OFPPortStatsRequest"]  # only what was answered is asked again


def test_a_question_unanswered_too_long_is_dropped_and_asked_again(
        ctl: AstralController) -> None:
    leaf = sorted(ctl.synced)[0]
    ctl.poll_once()
    ctl.dps[leaf].asked()
    for p in ctl.pending.values():
        p.sent -= STALE_REQUEST_S + 1
    ctl.poll_once()
    assert ctl.dps[leaf].asked() == REQUESTS
    assert len(ctl.pending) == 3 * len(ctl.synced)


def test_a_read_back_is_not_held_back_by_an_open_poll(ctl: AstralController) -> None:
    leaf = sorted(ctl.synced)[0]
    ctl.poll_once()
    ctl.dps[leaf].asked()
    ctl._read_back(leaf)
    assert ctl.dps[leaf].asked() == ["OFPFlowDescStatsRequest", "OFPGroupStatsRequest"]


def pinned_entries(c: AstralController, switch: str, byte_count: int) -> list[Any]:
    """The pinned flow-mods the app would send ``switch``, read back with a byte counter."""
    ch, _want = c.logic.changes([switch])[switch]
    mods = [m for m in messages(protocol(OF15), ch, "dp_hash")
            if type(m).__name__ == "OFPFlowMod" and m.cookie == COOKIE_PIN]
    for m in mods:
        m.byte_count = byte_count
    return mods


def test_pinned_counters_reach_the_flow_each_counts(ctl: AstralController) -> None:
    pinned = {f.key for f, path in ctl.logic.assign.items() if len(path) > 1}
    firsts = {path[0][0] for path in ctl.logic.assign.values() if len(path) > 1}
    assert firsts, "planned mode pinned nothing"
    for switch in sorted(firsts):
        for count in (1000, 126000):
            ctl.poll_once()
            answer(ctl, switch, "pins", pinned_entries(ctl, switch, count))
    counted = {f.key: s for f, s in ((f, ctl.flow_samples.get(f.key))
                                     for f in ctl.logic.assign) if s}
    assert set(counted) == pinned
    assert all(s["bytes"] == 126000 and s["mbps"] > 0 for s in counted.values())
