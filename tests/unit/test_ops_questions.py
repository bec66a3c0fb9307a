"""The operator's questions: templates, their right answers from the injection log, the
agent's answers on synthetic telemetry, and the scoring (``ops.questions``)."""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace

import pytest

from ops import questions as Q
from ops.agent import Tools
from ops.detectors import Engine
from ops.evaluate import GroundTruth
from ops.shell.experiment import Asker, stream_pairs
from ops.shell.monitor import Monitor
from ops.telemetry import History
from testbed.wiring import Misdelivery
from tests.unit.fabrics import plan_of
from tests.unit.test_ops_detectors import clean_poll

LANE = "lf0r0~spine2#0"
INF = float("inf")
#: one fault of each target on the standard small plan (4 leaves, 4 spines, 8 NICs)
FAULTS = [("link-degrade", LANE), ("link-down", "lf1r1~spine0#0"), ("link-flap", LANE),
          ("gray-loss", LANE), ("nic-loss", "s1g1"), ("hot-receiver", "s2g1"),
          ("switch-down", "lf1r0"), ("partial-blackhole", "lf0r1"),
          ("controller-kill", "controller"), ("shuffle-miswiring", LANE)]


@pytest.fixture(scope="module")
def plan():  # noqa: ANN201
    return plan_of("astral3")


def scene(plan, kind: str, comp: str, seed: int = 0) -> Q.Scene:  # noqa: ANN001
    return Q.Scene(plan, [GroundTruth(kind, comp, 1040.0, INF)], job_pairs=stream_pairs(plan),
                   rng=random.Random(seed))


def feed(plan, fault, polls: int = 60):  # noqa: ANN001, ANN201
    rng = random.Random(3)
    hist, eng = History(), Engine(plan)
    for i in range(polls):
        v = clean_poll(plan, rng)
        fault(i, v)
        hist.add(1000.0 + i, v)
        eng.step(hist)
    return hist, eng


def degrade(i: int, v: dict) -> None:
    if i >= 40:
        v[(LANE, "mbps_ab")] = 5.0
        v[(LANE, "backlog_ab")] = 375_000.0 * (i - 39)


def nic_loss(i: int, v: dict) -> None:
    if i >= 40:
        v[("s1g1", "in_drop_pps")] = 200.0


def answers(plan, sc: Q.Scene, hist, eng, **kw):  # noqa: ANN001, ANN003, ANN201
    return {q: Q.answer(q, Tools(plan, history=hist, engine=eng, **kw))
            for q in Q.all_questions(sc)}


def by_text(got: dict, text: str) -> tuple[Q.Question, Q.Answer]:
    return next((q, a) for q, a in got.items() if q.text == text)


def test_twenty_templates_cover_every_component_and_each_asks_on_the_small_plan(plan) -> None:  # noqa: ANN001
    assert len(Q.TEMPLATES) >= 20
    abouts = {t.about for t in Q.TEMPLATES.values()}
    assert {"leaf", "spine", "lane", "nic", "controller", "job", "wiring", "change"} <= abouts
    asked = {q.template for kind, comp in FAULTS for q in Q.all_questions(scene(plan, kind, comp))}
    assert asked == set(Q.TEMPLATES)
    for kind, comp in FAULTS:  # every fault gets questions both ways
        qs = Q.all_questions(scene(plan, kind, comp))
        assert any(not q.healthy for q in qs) and sum(q.healthy for q in qs) >= 5, kind


def test_healthy_subjects_are_far_from_the_fault(plan) -> None:  # noqa: ANN001
    qs = Q.all_questions(scene(plan, "link-degrade", LANE))
    named = {q.text: q for q in qs}
    assert named["is spine2 healthy?"].accept == {LANE, "spine2"}
    assert named["which lanes drop packets?"].accept == {LANE}
    assert named["which switch is down?"].healthy and named["is the controller up?"].healthy
    for q in qs:
        if q.healthy and q.template.endswith("-health"):
            assert "spine2" not in q.text and "lf0r0" not in q.text, q.text
    # a flapping link is down half the time: "which links are down?" is not asked
    assert "links-down" not in {q.template for q in Q.all_questions(scene(plan, "link-flap",
                                                                            LANE))}


def test_a_degraded_lane_is_answered_right(plan) -> None:  # noqa: ANN001
    hist, eng = feed(plan, degrade)
    got = answers(plan, scene(plan, "link-degrade", LANE), hist, eng)
    for text in ("which lanes drop packets?", "is spine2 healthy?", "what is wrong?",
                 "which spine has a problem?", "is lane lf0r0~spine2#0 ok?"):
        q, a = by_text(got, text)
        assert Q.grade(q, a)[0], (text, a)
    q, a = by_text(got, "which spine has a problem?")
    assert a.names == ["spine2"]
    healthy = [(q, a) for q, a in got.items() if q.healthy and q.template != "wiring"]
    assert len(healthy) >= 10
    for q, a in healthy:  # asked about healthy components: answered healthy
        assert Q.grade(q, a) == (True, "rightly said nothing is wrong"), (q.text, a)
    # no wiring check here: that answer is wrong, with the reason
    q, a = by_text(got, "is the wiring as planned?")
    ok, why = Q.grade(q, a)
    assert not ok and why.startswith("no answer: no wiring check")
    q, a = by_text(got, "since when has something been wrong?")
    assert Q.grade(q, a)[0] and abs(a.since - 1040.0) <= Q.SINCE_TOLERANCE_S


def test_a_lossy_nic_and_a_dead_controller_are_answered_right(plan) -> None:  # noqa: ANN001
    hist, eng = feed(plan, nic_loss)
    got = answers(plan, scene(plan, "nic-loss", "s1g1"), hist, eng)
    for text in ("is s1g1's NIC ok?", "which NICs lose packets?", "which lanes drop packets?",
                 "is it a link, a switch, a NIC or the controller?"):
        q, a = by_text(got, text)
        assert Q.grade(q, a)[0], (text, a)
    assert by_text(got, "which lanes drop packets?")[1].names == []

    def dead(i: int, v: dict) -> None:
        if i >= 40:
            v[("controller", "up")] = 0.0

    hist, eng = feed(plan, dead)
    got = answers(plan, scene(plan, "controller-kill", "controller"), hist, eng)
    q, a = by_text(got, "is the controller up?")
    assert a.names == ["controller"] and Q.grade(q, a)[0]
    q, a = by_text(got, "which switch is down?")
    assert q.healthy and Q.grade(q, a)[0]


def test_wrong_answers_score_wrong_and_blaming_everything_scores_badly(plan) -> None:  # noqa: ANN001
    qs = Q.all_questions(scene(plan, "link-degrade", LANE))
    q = next(q for q in qs if q.text == "which lanes drop packets?")
    assert Q.grade(q, Q.Answer(["lf0r1~spine3#0", LANE], "")) == \
        (False, f"named lf0r1~spine3#0 first, expected {LANE}")
    assert not Q.grade(q, Q.Answer([], "nothing wrong"))[0]
    assert Q.grade(q, Q.Answer(["spine2~lf0r0"], ""), plan)[0]  # names compare canonically
    ok = next(q for q in qs if q.text == "is spine1 healthy?")
    assert Q.grade(ok, Q.Answer(["spine1"], "")) == (False, "blamed spine1, nothing is wrong "
                                                             "with it")
    since = next(q for q in qs if q.template == "since-when")
    assert not Q.grade(since, Q.Answer([LANE], "", since=1040.0 + 2 * Q.SINCE_TOLERANCE_S))[0]
    # an agent that names the fault's component in every answer
    rows = [Q.row(q, Q.Answer(sorted(q.accept) or [LANE], "", since=q.since)) for q in qs]
    summary = Q.summarize(rows)
    assert summary["healthy"]["accuracy"] == 0.0 and summary["faulty"]["accuracy"] == 1.0
    assert summary["accuracy"] <= 0.5 and set(summary["per_template"]) == {q.template for q in qs}


def test_the_wiring_question_reads_the_wiring_tool(plan) -> None:  # noqa: ANN001
    hist, eng = feed(plan, lambda i, v: None)
    crossed = [Misdelivery(LANE, ("lf0r0", 7), ("spine2", 1), ("spine3", 1)),
               Misdelivery("lf0r0~spine3#0", ("lf0r0", 8), ("spine3", 1), ("spine2", 1))]
    sc = scene(plan, "shuffle-miswiring", LANE)
    q = next(q for q in Q.all_questions(sc) if q.template == "wiring")
    a = Q.answer(q, Tools(plan, history=hist, engine=eng, wiring=lambda: crossed))
    assert Q.grade(q, a)[0] and a.names == [LANE, "lf0r0~spine3#0"]
    q = next(q for q in Q.all_questions(scene(plan, "nic-loss", "s1g1"))
             if q.template == "wiring")
    assert q.healthy
    assert Q.grade(q, Q.answer(q, Tools(plan, history=hist, engine=eng, wiring=lambda: [])))[0]
    assert not Q.grade(q, Q.answer(q, Tools(plan, history=hist, engine=eng,
                                            wiring=lambda: crossed)))[0]


def test_the_question_set_is_deterministic_for_a_seed(plan) -> None:  # noqa: ANN001
    live = [GroundTruth("link-degrade", LANE, 1040.0, INF)]

    def draw(seed: int) -> list[tuple[str, str, frozenset[str]]]:
        return [(q.template, q.text, q.accept) for q in
                Q.question_set(plan, live, seed=seed, job_pairs=stream_pairs(plan))]

    assert draw(7) == draw(7)
    assert len(draw(7)) == 7 and sum(not a for _t, _x, a in draw(7)) == 3
    assert len({tuple(draw(s)) for s in range(6)}) > 1


def test_the_experiment_asks_each_live_fault_once_and_marks_stale_answers(plan) -> None:  # noqa: ANN001
    hist, eng = feed(plan, degrade)
    clock = [1000.0]
    asker = Asker(plan, lambda spec, timeout: Q.answer_questions(
        spec.questions(plan), lambda **kw: Tools(plan, history=hist, engine=eng, **kw)),
                  seed=1, delay_s=4.0, job_pairs=stream_pairs(plan), clock=lambda: clock[0],
                  log=lambda _m: None)
    events = [{"time": 1040.0, "kind": "link-degrade", "component": LANE, "action": "inject",
               "fault_id": 1},
              {"time": 1041.0, "kind": "nic-loss", "component": "s1g1", "action": "inject",
               "fault_id": 2},
              {"time": 1043.0, "kind": "nic-loss", "component": "s1g1", "action": "undo",
               "fault_id": 2}]
    clock[0] = 1043.0
    asker.step(events)
    assert asker.rows == []  # not due yet
    clock[0] = 1046.0
    asker.step(events)
    asker.step(events)  # once per fault
    assert asker.missed == [2] and {r["fault_id"] for r in asker.rows} == {1}
    assert len(asker.rows) == 7
    out = asker.result([GroundTruth("link-degrade", LANE, 1040.0, 1070.0)])
    s = out["summary"]
    assert (s["asked"], s["stale"], s["faults_missed"]) == (7, 0, 1)
    assert s["correct"] == sum(r["correct"] for r in out["rows"]) and s["accuracy"] > 0.5
    assert set(out["rows"][0]) >= {"fault_id", "kind", "question", "expected", "answer",
                                   "correct", "reason"}
    # the fault was over before the poll the answers were read at: not scored
    out = asker.result([GroundTruth("link-degrade", LANE, 1040.0, 1050.0)])
    assert out["summary"]["stale"] == 7 and out["summary"]["asked"] == 0


def test_monitor_consult_runs_in_the_collectors_thread_after_a_poll(plan) -> None:  # noqa: ANN001
    mon = Monitor(SimpleNamespace(plan=plan, rest_port=None, hosts={}), None, 1.0)
    got = {}

    def ask() -> None:
        got["n"] = mon.consult(lambda make: (threading.current_thread().name,
                                             len(make().plan.hosts)), timeout=10.0)

    t = threading.Thread(target=ask, name="asker")
    t.start()
    while not mon._consults:
        threading.Event().wait(0.01)
    v = clean_poll(plan, random.Random(1))
    mon.collector.history.add(1000.0, v)
    mon.collector.on_poll(1000.0, v)  # type: ignore[misc]
    t.join(5)
    assert got["n"] == (threading.current_thread().name, 8)
    with pytest.raises(TimeoutError):
        mon.consult(lambda make: None, timeout=0.05)
    assert mon._consults == []


def test_a_since_when_answer_is_expected_at_a_wall_clock_time() -> None:
    from ops.questions import Question

    q = Question("since-when", "since when has something been wrong?", frozenset({"lf0r0"}),
                 lambda _t, _q: None, since=1796252967.1)  # type: ignore[arg-type,return-value]
    assert q.expected() == "lf0r0, since 23:09:27 UTC"
