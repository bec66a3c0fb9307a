"""Severities in the fault-kind contract, gray and hard ranges, irregular flaps, and schedules
of concurrent faults in different parts of the fabric. No root: the flap worker runs against
``test_faults.FakeLab``; the real flap's timing is measured in
tests/integration/test_faults_live.py."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from test_faults import FakeLab

from testbed import faultkinds, faultspec
from testbed.faultkinds import FAULT_KINDS, SCHEDULE_SEVERITIES, SEVERITIES, Severity
from testbed.faultkinds.link_flap import phases
from testbed.faultspec import Fault
from testbed.shell.faults import FaultInjector
from testbed.topologies import build
from vocab.plan import WiringPlan
from vocab.plugins import Plugins

#: The kinds there were before severities and concurrent schedules (``BEFORE`` draws them):
#: a fixed list on purpose, so the same seed keeps drawing the same faults.
ORIGINAL = ("link-down", "link-flap", "link-degrade", "nic-loss", "switch-down",
            "controller-kill", "controller-restart", "hot-receiver")

#: Kinds with both severities whose draws ``gray`` tells apart by their knobs.
BOTH = ("link-flap", "link-degrade", "nic-loss")

#: ``random_schedule(small, kinds=ORIGINAL, n=8, duration_s=80, seed=1)`` as the code drew it
#: before severities and concurrent schedules existed (``Fault.to_dict`` of each).
BEFORE = [
    {"kind": "nic-loss", "target": "s3g1", "at": 0.687, "duration": 4.129,
     "probability": 0.037, "direction": "both"},
    {"kind": "controller-restart", "target": "controller", "at": 10.104, "duration": 4.733},
    {"kind": "link-flap", "target": "lf0r0~spine0#0", "at": 20.203, "duration": None,
     "period": 2.12, "count": 2},
    {"kind": "controller-kill", "target": "controller", "at": 30.008, "duration": 4.754},
    {"kind": "hot-receiver", "target": "s0g0", "at": 40.008, "duration": 4.124,
     "overload": 2.0, "hot_share": 0.5, "senders": 0, "seed": 49965},
    {"kind": "link-down", "target": "lf0r1~spine2#0", "at": 50.056, "duration": 4.923},
    {"kind": "switch-down", "target": "lf0r1", "at": 60.555, "duration": 4.409},
    {"kind": "link-degrade", "target": "lf0r1~spine3#0", "at": 71.107, "duration": 3.364,
     "fraction": 0.404},
]


@pytest.fixture(scope="module")
def small() -> WiringPlan:
    return build("astral3", servers=4, gpus=2, servers_per_block=2)


def gray(f: Fault) -> bool:
    """Was ``f`` drawn gray? (The gray and hard ranges of the three kinds do not meet.)"""
    s = f.settings
    return {"nic-loss": lambda: s.probability <= 0.01, "link-degrade": lambda: s.fraction > 0.5,
            "link-flap": lambda: s.jitter > 0}.get(f.kind, lambda: False)()


# --- the contract ------------------------------------------------------------------------------
def test_kinds_declare_their_severities_and_draw_only_those(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    assert SEVERITIES == ("gray", "hard") == tuple(Severity)
    assert SCHEDULE_SEVERITIES == ("gray", "hard", "mixed")
    rng = random.Random(0)
    for name, kind in FAULT_KINDS.all().items():  # every kind draws what it declares, only that
        assert kind.severities and set(kind.severities) <= set(SEVERITIES), name
        for severity in SEVERITIES:
            if severity in kind.severities:
                assert isinstance(kind.random_knobs(rng, 5.0, severity), dict)
            else:
                with pytest.raises(ValueError, match=f"^severity: {name} draws no"):
                    kind.random_knobs(rng, 5.0, severity)
    with pytest.raises(ValueError, match=r"^severity: link-down draws no 'gray' faults "
                                         r"\(its severities: hard\)$"):
        FAULT_KINDS.get("link-down").random_knobs(rng, 5.0, "gray")
    with pytest.raises(ValueError, match="severity: nic-loss draws no 'soft'"):
        FAULT_KINDS.get("nic-loss").random_knobs(rng, 5.0, "soft")
    assert FAULT_KINDS.get("link-down").random_knobs(rng, 5.0, Severity.HARD) == {}
    (tmp_path / "soft_kind.py").write_text('"""Soft."""\nTARGET = "link"\n'
                                           'SEVERITIES = ("soft",)\n')
    monkeypatch.setattr(faultkinds, "__path__", [*faultkinds.__path__, str(tmp_path)])
    try:
        with pytest.raises(ValueError, match=r"soft_kind: SEVERITIES must be a tuple of one "
                                             r"or both of gray, hard \(got \('soft',\)\)"):
            Plugins("fault kind", "testbed.faultkinds", faultkinds.FaultKind).all()
    finally:
        monkeypatch.undo()
        sys.modules.pop("testbed.faultkinds.soft_kind", None)


@pytest.mark.parametrize("kind, knob, ranges", [
    ("nic-loss", "probability", {"gray": (0.0005, 0.01), "hard": (0.02, 0.2)}),
    ("link-degrade", "fraction", {"gray": (0.5, 0.9), "hard": (0.1, 0.5)}),
])
def test_gray_and_hard_ranges(kind: str, knob: str, ranges: dict[str, tuple[float, float]]
                              ) -> None:
    spec = FAULT_KINDS.get(kind)
    for severity, (low, high) in ranges.items():
        rng = random.Random(severity)
        got = [spec.random_knobs(rng, 5.0, severity)[knob] for _ in range(500)]
        assert low <= min(got) < low + 0.05 * (high - low), (severity, min(got))
        assert high - 0.05 * (high - low) < max(got) <= high, (severity, max(got))
        Fault(kind, "s0g0" if kind == "nic-loss" else "a~b", **{knob: got[0]})  # valid


# --- irregular flaps ---------------------------------------------------------------------------
def test_flap_phases_are_seeded_irregular_and_make_the_span() -> None:
    regular = Fault("link-flap", "a~b", period=0.5, count=4)
    assert phases(regular.settings) == [0.25] * 8 and regular.span == 2.0
    f = Fault("link-flap", "a~b", period=2.0, count=3, jitter=0.5, seed=3)
    got = phases(f.settings)
    assert len(got) == 6 and all(0.5 <= p <= 1.5 for p in got)
    assert max(got) - min(got) > 0.3  # irregular
    assert got == phases(Fault("link-flap", "a~b", period=2.0, count=3, jitter=0.5,
                               seed=3).settings)
    assert got != phases(Fault("link-flap", "a~b", period=2.0, count=3, jitter=0.5,
                               seed=4).settings)
    assert f.span == pytest.approx(sum(got))


def test_flap_draws_hard_regular_and_gray_few_long_irregular() -> None:
    spec = FAULT_KINDS.get("link-flap")
    rng = random.Random(1)
    spreads = []
    for span in (4.0, 9.0, 30.0):
        for _ in range(100):
            hard = Fault("link-flap", "a~b", **spec.random_knobs(rng, span, "hard"))
            assert hard.settings.jitter == 0 and 2 <= hard.settings.count <= 4
            assert hard.span == pytest.approx(span, abs=0.01)
            f = Fault("link-flap", "a~b", **spec.random_knobs(rng, span, "gray"))
            s = f.settings
            assert 2 <= s.count <= 3 and 0.3 <= s.jitter <= 0.7
            assert span - 0.01 <= f.span <= span  # fills the span, never past it
            got = phases(s)
            assert len(set(got)) == len(got)
            spreads.append((max(got) - min(got)) / (f.span / len(got)))
    assert sorted(spreads)[len(spreads) // 2] > 0.5  # phases differ by half their mean


def test_the_flap_worker_plays_the_phases(small: WiringPlan) -> None:
    """Each down and up lasts its drawn phase (on the injector's clock: a virtual one, so
    the check holds however busy the machine is)."""
    now = [0.0]

    def clock() -> float:  # each read moves it a little, so pauses end by reading
        now[0] += 0.02
        return now[0]

    lab = FakeLab(small)
    inj = FaultInjector(lab, clock=clock)
    inj.context.sh = lab.sh  # type: ignore[method-assign]
    at: list[float] = []
    set_link = lab.set_link
    lab.set_link = lambda *a, **kw: (at.append(now[0]),  # type: ignore[method-assign]
                                     set_link(*a, **kw))[1]
    f = Fault("link-flap", "lf0r0~spine1", period=0.6, count=3, jitter=0.6, seed=15)
    want = phases(f.settings)
    assert max(want) - min(want) > 0.3
    h = inj.inject(f)
    assert h.wait(10)
    assert [c[3] for c in lab.calls] == [False, True] * 3
    assert [b - a for a, b in zip(at, at[1:], strict=False)] == pytest.approx(want[:-1],
                                                                              abs=0.05)
    assert now[0] - at[0] == pytest.approx(f.span, abs=0.1)  # the last phase is played too
    assert inj.events[0]["detail"] == {"period": 0.6, "count": 3, "jitter": 0.6, "seed": 15}


# --- schedules of a severity -------------------------------------------------------------------
def test_hard_draws_what_the_code_drew_before(small: WiringPlan) -> None:
    want = [Fault.from_dict(d) for d in BEFORE]
    assert faultspec.random_schedule(small, kinds=ORIGINAL, n=8, duration_s=80, seed=1) == want
    assert faultspec.random_schedule(small, kinds=ORIGINAL, n=8, duration_s=80, seed=1,
                                     severity="hard", concurrent=1) == want


def test_gray_and_mixed_schedules(small: WiringPlan) -> None:
    grays = faultspec.random_schedule(small, n=30, duration_s=300, seed=4, severity="gray")
    assert faultspec.schedule_kinds(None, "gray") == [k for k in faultspec.KINDS
                                                      if "gray" in FAULT_KINDS.get(k).severities]
    assert {f.kind for f in grays} == set(faultspec.schedule_kinds(None, "gray")) >= set(BOTH)
    assert all(gray(f) for f in grays if f.kind in BOTH)
    mixed = faultspec.random_schedule(small, n=48, duration_s=480, seed=4, severity="mixed")
    assert mixed == faultspec.random_schedule(small, n=48, duration_s=480, seed=4, severity="mixed")
    assert {f.kind for f in mixed} == set(faultspec.KINDS)
    for kind in BOTH:  # both severities drawn for the kinds that have both
        assert {gray(f) for f in mixed if f.kind == kind} == {True, False}, kind
    with pytest.raises(ValueError, match=r"^kinds: link-down, switch-down have no gray faults "
                                         r"\(kinds with gray faults: link-flap, link-degrade, "
                                         r"nic-loss"):
        faultspec.random_schedule(small, kinds=["link-down", "nic-loss", "switch-down"],
                                  severity="gray")
    with pytest.raises(ValueError, match="^severity must be one of gray, hard, mixed"):
        faultspec.random_schedule(small, severity="grey")


# --- concurrent faults in different parts ------------------------------------------------------
def test_fabric_parts(small: WiringPlan) -> None:
    part = lambda kind, target: faultspec.fabric_part(small, Fault(kind, target))  # noqa: E731
    assert part("link-down", "spine2~lf0r1") == {"lf0r1", "spine2"}
    assert part("nic-loss", "s1g1") == {"lf0r1"}
    assert part("switch-down", "lf1r0") == {"lf1r0"}
    assert part("controller-kill", "") == {"controller"}


@pytest.mark.parametrize("topology, params, seeds", [
    ("astral3", {"servers": 4, "gpus": 2, "servers_per_block": 2}, range(150)),
    ("rail3", {"servers": 4, "gpus": 2}, range(25)),
    ("fattree", {"servers": 4, "gpus": 2}, range(25)),
])
def test_concurrent_faults_overlap_in_different_parts(topology: str, params: dict[str, int],
                                                      seeds: range) -> None:
    plan = build(topology, **params)
    n, duration, gap = 10, 100.0, 3.0
    slot = duration / (n // 2)
    for seed in seeds:
        sched = faultspec.random_schedule(plan, n=n, duration_s=duration, seed=seed, min_gap_s=gap,
                                          severity="mixed", concurrent=2)
        assert len(sched) == n
        counts = [sum(f.kind == k for f in sched) for k in faultspec.KINDS]
        assert max(counts) - min(counts) <= 1
        groups: dict[int, list[Fault]] = {}
        for f in sched:
            assert faultspec.resolve(plan, f) == f
            groups.setdefault(int(f.at // slot), []).append(f)
        assert sorted(groups) == list(range(n // 2)) and all(len(g) == 2 for g in
                                                             groups.values())
        for i, (a, b) in groups.items():
            assert max(a.at, b.at) + 0.1 * (slot - gap) < min(a.end, b.end), (seed, a, b)
            assert not faultspec.fabric_part(plan, a) & faultspec.fabric_part(plan, b), (seed, a, b)
            assert a.component != b.component
            assert max(a.end, b.end) + gap <= (i + 1) * slot + 0.01  # recovery before next


def test_concurrent_bad_input(small: WiringPlan) -> None:
    with pytest.raises(ValueError, match="^concurrent: cannot place controller-kill, "
                                         "controller-restart"):
        faultspec.random_schedule(small, kinds=["controller-kill", "controller-restart"], n=4,
                                  concurrent=2)
    with pytest.raises(ValueError, match="^concurrent: faults overlap within their group"):
        faultspec.random_schedule(small, concurrent=2, overlap=True)
    with pytest.raises(ValueError, match="^concurrent must be an integer >= 1"):
        faultspec.random_schedule(small, concurrent=0)
    with pytest.raises(ValueError, match="each group of 3 needs >= 6 s"):
        faultspec.random_schedule(small, n=9, duration_s=15, concurrent=3)


# --- ops-eval's --severity ---------------------------------------------------------------------
def test_ops_eval_passes_the_severity_and_refuses_kinds_without_it(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from scen_fakes import install
    from test_scen_ops_eval import _canned

    from scenarios.experiments import ops_eval as oe

    labs = install(monkeypatch, oe)
    seen: list[Any] = []
    monkeypatch.setattr(oe, "eval_on_lab",
                        lambda lab, spec, **kw: seen.append(spec) or _canned(lab, spec, **kw))
    out = os.path.join(str(tmp_path), "run")
    oe.ops_eval(quick=True, output=out, log=lambda _m: None, model_draws=2, severity="gray")
    assert seen[0].severity == "gray"
    assert list(seen[0].kinds) == faultspec.schedule_kinds(None, "gray")
    with pytest.raises(ValueError, match="kinds: link-down has no gray faults"):
        oe.ops_eval(quick=True, output=os.path.join(str(tmp_path), "r2"),
                    log=lambda _m: None, severity="gray", kinds=["link-down", "nic-loss"])
    assert len(seen) == len(labs) == 1  # refused before a fabric
