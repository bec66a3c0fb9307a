"""The miswired detector and the wiring check as the agent uses it (``WiringWatch``), with the
check faked: no root, no fabric (the real check on a real fabric: tests/integration)."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from test_ops_detectors import LANE, clean_poll, first, run

from ops.detectors import miswired as M
from ops.shell.monitor import WiringWatch, at_switch, check_cost, check_soon, unexplained
from testbed.wiring import Misdelivery

OTHER = "lf0r0~spine1#0"


@pytest.fixture(scope="module")
def plan():  # noqa: ANN201
    from testbed.topologies import build

    return build("astral3", servers=2, gpus=2)


def _checked(at: int, links: list[str]):  # noqa: ANN202
    def fault(i: int, v: dict[tuple[str, str], float]) -> None:
        if i == at:
            v[(M.COMPONENT, M.CHECKED)] = 1.0
            v.update({(link, M.METRIC): 1.0 for link in links})
    return fault


def test_a_check_that_saw_crossed_lanes_names_both_until_it_goes_stale(plan) -> None:  # noqa: ANN001
    eng, opened = run(plan, 60, _checked(20, [LANE, OTHER]))
    assert sorted((i, a.detector, a.component) for i, got in opened.items() for a in got) == \
        sorted([(20, "miswired", LANE), (20, "miswired", OTHER)])
    # the check stands HOLD_POLLS polls, then clears CLEAR_POLLS polls later
    assert {a.cleared for a in eng.closed} == {1000.0 + 20 + M.HOLD_POLLS + 1}


def test_a_newer_clean_check_clears_it_and_no_check_says_nothing(plan) -> None:  # noqa: ANN001
    def two_checks(i: int, v: dict[tuple[str, str], float]) -> None:
        _checked(10, [LANE])(i, v)
        _checked(15, [])(i, v)
    eng, opened = run(plan, 25, two_checks)
    i, a = first(opened)
    assert (i, a.component) == (10, LANE)
    assert [x.cleared for x in eng.closed] == [1000.0 + 16]
    _, opened = run(plan, 40)
    assert opened == {}
    hist_values = clean_poll(plan, random.Random(1))
    assert (M.COMPONENT, M.CHECKED) not in hist_values


def _finding(link: str, seen: bool = True) -> Misdelivery:
    return Misdelivery(link, ("lf0r0", 3), ("spine1", 1), ("spine2", 1) if seen else None)


def test_the_watch_checks_once_at_a_time_and_not_too_often(plan) -> None:  # noqa: ANN001
    gate = threading.Event()
    calls: list[float] = []

    def check() -> list[Misdelivery]:
        calls.append(time.monotonic())
        gate.wait(5)
        return [_finding(LANE), _finding(OTHER, seen=False)]  # OTHER arrived nowhere: down

    w = WiringWatch(check, every_s=10.0, log=lambda _m: None)
    assert w.maybe(100.0) and not w.maybe(100.5)  # one running
    gate.set()
    deadline = time.monotonic() + 5
    while w._busy.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.take_values() == {(M.COMPONENT, M.CHECKED): 1.0, (LANE, M.METRIC): 1.0}
    assert w.take_values() == {}  # handed over once
    assert not w.maybe(105.0) and w.maybe(110.0)  # not within every_s of the last
    assert w.checks >= 1 and len(calls) >= 1


def test_a_failed_check_is_said_and_the_watch_goes_on(plan) -> None:  # noqa: ANN001
    said: list[str] = []

    def broken() -> list[Any]:
        raise RuntimeError("controller unreachable")

    w = WiringWatch(broken, every_s=0.0, log=said.append)
    assert w.maybe(1.0)
    deadline = time.monotonic() + 5
    while w._busy.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert said == ["ops-eval: wiring check failed: controller unreachable"]
    assert w.take_values() == {} and w.maybe(2.0)


def test_a_questions_check_never_reaches_the_detectors(plan) -> None:  # noqa: ANN001
    """The harness asks "is the wiring as planned?" while a miswiring is live: the check it
    runs answers the question only; the detectors see the agent's own checks alone."""
    w = WiringWatch(lambda: [_finding(LANE)], every_s=10.0, log=lambda _m: None)
    assert [f.link for f in w.look()] == [LANE]
    assert w.take_values() == {} and w.checks == 1 and len(w.spans) == 1
    w.run()  # the agent's own
    assert w.take_values()[(LANE, M.METRIC)] == 1.0


def test_the_agent_checks_the_cabling_on_its_own_period_sooner_when_unexplained(plan) -> None:  # noqa: ANN001
    """The Monitor asks the watch after every poll; only the alerts (never a fault log)
    decide whether that is urgent: the job suffers and no alert says where."""
    from ops.shell.monitor import Monitor

    asked: list[tuple[float, bool]] = []
    w = WiringWatch(lambda: [], every_s=30.0, soon_s=10.0, log=lambda _m: None)
    w.maybe = lambda now, urgent=False, at_once=False: asked.append(  # type: ignore[method-assign]
        (now, urgent or at_once))
    mon = Monitor(SimpleNamespace(plan=plan, rest_port=None, hosts={}), None, 1.0, wiring=w)
    for i in range(3):
        mon.collector.history.add(1000.0 + i, {})
        mon.collector.on_poll(1000.0 + i, {})  # type: ignore[misc]
    assert [u for _, u in asked] == [False] * 3 and mon.engine.active == {}
    # the gaps: every_s normally, soon_s when urgent
    real = WiringWatch(lambda: [], every_s=30.0, soon_s=10.0, log=lambda _m: None)
    real._last = 100.0
    assert not real.maybe(115.0) and not real.maybe(105.0, urgent=True)
    assert real.maybe(111.0, urgent=True)
    # at once (loss newly placed at a switch): whenever no check is running
    deadline = time.monotonic() + 5
    while real._busy.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not real.maybe(111.5, urgent=True) and real.maybe(111.5, at_once=True)


def test_loss_newly_placed_at_a_switch_is_what_has_the_wiring_checked_at_once() -> None:
    def alert(detector: str, component: str) -> Any:
        return SimpleNamespace(detector=detector, component=component)

    leaf = alert("lane-loss-switch", "lf0r6")
    assert at_switch([leaf, alert("lane-loss", "lf0r6~spine1#0"), alert("job-slow", "job"),
                      alert("miswired", "lf0r6~spine1#0")]) == [leaf]
    assert at_switch([alert("job-loss-switch", "lf1r2")]) and not at_switch([])


def test_the_agent_looks_at_the_cabling_sooner_only_when_the_job_suffers_unexplained() -> None:
    def alert(detector: str, component: str = "lf0r0~spine1#0") -> Any:
        return SimpleNamespace(detector=detector, component=component)

    assert unexplained([alert("job-slow", "job")])
    assert not unexplained([alert("job-slow", "job"), alert("loss")])  # something says where
    assert not unexplained([alert("loss")]) and not unexplained([])
    # packets lost at a leaf and no link of it named: what a miswired lane looks like
    assert unexplained([alert("lane-loss-switch", "lf0r6")])
    assert unexplained([alert("job-loss-switch", "lf0r6"), alert("job-slow", "job")])
    assert not unexplained([alert("lane-loss-switch", "lf0r6"), alert("lane-loss")])


def test_while_a_lane_is_miswired_the_agent_checks_soon_to_see_the_repair() -> None:
    """The miswired alert holds until a check finds the cabling as planned: checking at
    the period only, it would outlive the recabling by up to 10 s."""
    def alert(detector: str, component: str = "lf0r0~spine1#0") -> Any:
        return SimpleNamespace(detector=detector, component=component)

    assert check_soon([alert("miswired")]) and not unexplained([alert("miswired")])
    assert check_soon([alert("job-slow", "job")])  # what is unexplained is due soon too
    assert not check_soon([alert("lane-loss")]) and not check_soon([])


def test_what_a_check_costs_is_the_poll_and_the_job_beside_and_without_it() -> None:
    spans = [(10.0, 12.0), (30.0, 31.0)]
    polls = [(9.0, 0.1), (11.0, 0.3), (20.0, 0.1), (30.5, 0.2)]
    its = [{"started": 11.5, "ended": 13.0, "iter_s": 0.9, "error": None},
           {"started": 14.0, "ended": 15.0, "iter_s": 0.5, "error": None},
           {"started": 16.0, "ended": 17.0, "iter_s": 0.0, "error": "boom"}]
    c = check_cost(spans, polls, its)
    assert (c["checks"], c["check_s_median"], c["check_s_max"]) == (2, 1.5, 2.0)
    assert (c["poll_s_median_checking"], c["poll_s_median_not"]) == (0.25, 0.1)
    assert (c["iter_s_median_checking"], c["iter_s_median_not"]) == (0.9, 0.5)


def test_the_collectors_poll_never_waits_for_a_check(plan) -> None:  # noqa: ANN001
    """A check waits for its frames (and for a controller that may be slow to answer);
    the poll that asks for its result meanwhile gets the previous one (or nothing) at
    once."""
    gate, started = threading.Event(), threading.Event()

    def slow() -> list[Misdelivery]:
        started.set()
        gate.wait(10)
        return [_finding(LANE)]

    w = WiringWatch(slow, every_s=0.0, log=lambda _m: None)
    assert w.maybe(1.0) and started.wait(5)
    got: list[dict[Any, float]] = []
    poll = threading.Thread(target=lambda: got.append(w.take_values()), daemon=True)
    poll.start()
    poll.join(8)  # the check holds its gate for 10 s: a poll that waited would still be here
    assert got == [{}] and not gate.is_set()  # nothing yet, handed over without waiting
    gate.set()
    deadline = time.monotonic() + 5
    while w._busy.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.take_values()[(LANE, M.METRIC)] == 1.0
