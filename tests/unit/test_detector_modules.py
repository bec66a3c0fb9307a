"""Detectors are modules of ops/detectors/, found by the engine, the agent and ops-eval.

A new detector is one new file: the test copies each shipped module under a new name, with
its alerts' weights raised by one and their advice marked (what a newcomer changes in a
copy), and checks in a fresh interpreter (the registry is read once) that the copy is
listed, raises its own alerts beside its original's on the same fault, and that the agent
ranks a suspect by the copy's declared weight and gives the copy's advice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ops.agent import next_action
from ops.detectors import DETECTORS, AlertKind, alert_kind

REPO = Path(__file__).resolve().parents[2]

#: the alerts beyond its own name that some shipped detectors raise: a check of those
#: modules, not a list of the detectors there are
MORE_ALERTS = {"link-down": ["link-down", "switch-down"],
               "job-loss": ["job-loss", "job-loss-switch"]}


def test_every_detector_keeps_the_contract() -> None:
    """Whatever modules the folder holds: each raises an alert named after itself (a copy
    raises its own), says what it is in one line, and weighs what it declares."""
    dets = DETECTORS.all()
    for name, det in dets.items():
        assert det.module.__name__ == f"ops.detectors.{name.replace('-', '_')}"
        assert name in det.alerts, f"{name} declares no alert of its own name"
        assert det.summary and "\n" not in det.summary, name
        for alert, kind in det.alerts.items():
            assert alert_kind(alert) is not None and (kind.symptom or kind.weight > 0), alert
    for name, want in MORE_ALERTS.items():
        if name in dets:
            assert sorted(dets[name].alerts) == want
    kinds = {a: k for d in dets.values() for a, k in d.alerts.items()}
    if "job-slow" in dets:  # the one detector against a baseline, and its symptom
        assert dets["job-slow"].baseline and kinds["job-slow"].symptom
    weights = {a: k.weight for a, k in kinds.items() if not k.symptom}
    if "switch-down" in kinds:  # a dead switch outweighs any one link or NIC
        assert max(weights, key=lambda a: weights[a]) == "switch-down"
    for name, kind in kinds.items():  # the advice names what it is about
        assert "{component}" in kind.advice or name in ("controller-down", "job-slow"), name


def test_the_agent_gives_each_alert_its_detectors_advice() -> None:
    assert next_action("degraded", "a~b#0", "4 of 20 Mb/s").startswith("drain lane a~b#0")
    assert next_action("degraded", "a~b#0", "4 of 20 Mb/s").endswith("; 4 of 20 Mb/s")
    assert next_action("switch-down", "spine2", "") == alert_kind("switch-down").action(
        "spine2")
    assert next_action("no-such-alert", "x", "") == "inspect x"
    assert alert_kind("no-such-alert") is None
    assert AlertKind(None, "look at {component}").action("job") == "look at job"


def test_a_detector_raising_an_undeclared_alert_is_named() -> None:
    from types import ModuleType

    from ops.detectors import Detector, Finding, Topo
    from ops.telemetry import History

    mod = ModuleType("ops.detectors.sloppy")
    mod.ALERTS = {"sloppy": AlertKind(10, "fix {component}")}
    mod.detect = lambda hist, topo: [Finding("other", "x", "warning", "s", {}, 0.0)]
    with pytest.raises(ValueError, match="detector sloppy raised 'other', which its ALERTS "
                                         "do not declare"):
        Detector("sloppy", mod).detect(History(), Topo({}, set(), {}, {}, {}))
    with pytest.raises(ValueError, match="defines no ALERTS, detect"):
        Detector("empty", ModuleType("ops.detectors.empty"))


# Runs in a fresh interpreter: puts a copy of detector ORIG, named NEW, on the package's path
# (its weights + 1, its advice marked), plays ORIG's fault through the engine and the agent.
_CHECK = textwrap.dedent("""
    import json, random, sys
    import ops.detectors as pkg
    pkg.__path__.append(sys.argv[1])
    orig, new = sys.argv[2], sys.argv[3]
    from ops.agent import Tools, diagnose
    from ops.detectors import DETECTORS, Engine, alert_kind
    from ops.telemetry import History
    from vocab.plan import link_components
    from testbed.topologies import build
    from tests.unit.test_ops_detectors import LANE, NIC, clean_poll

    plan = build("astral3", servers=2, gpus=2)
    comps = link_components(plan)
    lanes = [c for c in comps if c.startswith("lf0r1~")]
    nic_link = next(c for c in comps if c.startswith(f"{NIC}~"))

    def fault(i, v):  # ORIG's fault, from i = 40 on (a detector's tests have the same)
        if i < 40:
            return
        if orig == "link-down":
            v[(LANE, "up")] = 0.0
        elif orig == "flapping" and i in (40, 42, 44, 46):
            v[(LANE, "carrier_changes")] = 2.0
        elif orig == "degraded":
            v[(LANE, "mbps_ab")], v[(LANE, "backlog_ab")] = 5.0, 375_000.0 * (i - 39)
        elif orig == "loss":
            v[(NIC, "in_drop_pps")], v[(NIC, "out_drop_pps")] = 100.0, 80.0
        elif orig == "link-drops":
            v[(LANE, "rxdrops_ab")] = 30.0
        elif orig == "ecmp-imbalance":
            for c in lanes:
                v[(c, "mbps_ab")] = 1.0
            v[(lanes[2], "mbps_ab")] = 18.0
        elif orig == "hot-receiver":
            v[(nic_link, "mbps_ba")], v[(nic_link, "backlog_ba")] = 39.5, 1_000_000.0
        elif orig == "controller-down":
            v[("controller", "up")] = 0.0
        elif orig == "job-slow":
            for h in plan.hosts:
                v[(h.name, "rx_mbps")] *= 0.4
        elif orig == "job-loss":
            v[("job", f"lost:{NIC}>s0g0")] = v[("job", f"lost:s1g0>{NIC}")] = 2.0
        elif orig == "lane-loss":  # the job's packets lost on two paths, both across LANE
            v[("job", f"path_lost:{LANE}>{lanes[0]}")] = 4.0
            v[("job", f"path_lost:{LANE}>{lanes[1]}")] = 2.0
        elif orig == "miswired" and i == 40:
            v[("wiring", "checked")] = v[(LANE, "miswired")] = 1.0

    rng, hist, eng = random.Random(1), History(), Engine(plan)
    opened = []
    for i in range(60):
        v = clean_poll(plan, rng)
        fault(i, v)
        hist.add(1000.0 + i, v)
        opened += [[i, a.detector, a.component] for a in eng.step(hist)]
    d = diagnose(Tools(plan, history=hist, engine=eng))
    kind = alert_kind(new)
    print(json.dumps({
        "names": list(DETECTORS.names()), "opened": opened,
        "declared": [kind.weight, kind.advice, alert_kind(orig).weight],
        "suspects": [[s.component, s.detector, s.action] for s in d.suspects],
        "notes": d.notes}))
""")

#: what the copy changes: every alert it declares weighs one more and says it is the copy's
_CHANGE = """

ALERTS = {name: AlertKind(None if k.weight is None else k.weight + 1, "copy: " + k.advice)
          for name, k in ALERTS.items()}
"""


@pytest.mark.parametrize("orig", DETECTORS.names())
def test_a_copied_detector_raises_its_own_alerts_with_its_own_advice(orig: str,
                                                                     tmp_path: Path) -> None:
    new = f"copy-of-{orig}"
    extra = tmp_path / "extra"
    extra.mkdir()
    copy = extra / f"{new.replace('-', '_')}.py"
    shutil.copy(DETECTORS.get(orig).module.__file__, copy)
    copy.write_text(copy.read_text() + _CHANGE)
    proc = subprocess.run([sys.executable, "-c", _CHECK, str(extra), orig, new],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    # listed beside its original (the same ORDER), the others as before
    assert new in rep["names"] and [n for n in rep["names"] if n != new] == list(DETECTORS.names())
    # the same fault opens the copy's alert on the same component in the same poll
    by_alert = {a: (i, c) for i, a, c in rep["opened"]}
    assert orig in by_alert and by_alert[new] == by_alert[orig], rep["opened"]
    weight, advice, orig_weight = rep["declared"]
    assert advice.startswith("copy: ")
    component = by_alert[orig][1]
    if orig_weight is None:  # a symptom: the agent notes it (both), ranks nothing by it
        assert weight is None
        assert len([n for n in rep["notes"] if n.startswith(f"{component}:")]) == 2
        assert component not in [s[0] for s in rep["suspects"]]
    else:  # the copy outweighs its original on the component, and its advice is given
        assert weight == orig_weight + 1
        suspect = next(s for s in rep["suspects"] if s[0] == component)
        assert suspect[1] == new and suspect[2].startswith("copy: "), suspect
