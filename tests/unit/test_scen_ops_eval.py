"""ops-eval without a fabric: the flow model's steady rate, and a run on a canned evaluation
whose report and summary.json are checked (scores with their N, the rate beside the model)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from scen_fakes import check_entry, install, read_json, read_text

from ops.evaluate import EvalSpec
from scenarios.experiments import ops_eval as oe
from testbed.faultspec import KINDS
from testbed.topologies import build


def test_steady_model_carries_the_paced_streams() -> None:
    plan = build("astral3", servers=2, gpus=2)
    m = oe.steady_model(plan, 20.0, 10)
    # 4 hosts x 20 Mb/s of payload, plus 42 header bytes per 1000-byte datagram
    assert m["offered_mbps"] == pytest.approx(4 * 20 * 1042 / 1000)
    assert m["draws"] == 10 and m["median"] == pytest.approx(m["offered_mbps"])
    # paced far above what the fabric carries, the model says so
    assert oe.steady_model(plan, 400.0, 3)["median"] < 4 * 400


#: the detector of the agent's first suspect, per kind in the canned run (others: loss):
#: right about the kind for most, a counter anomaly (no kind) for partial-blackhole,
#: ECMP imbalance (no kind) for shuffle-miswiring, wrong for mtu-mismatch and hot-receiver
SAID = {"link-down": "link-down", "link-flap": "link-down", "link-degrade": "degraded",
        "switch-down": "switch-down", "partial-blackhole": "counters",
        "shuffle-miswiring": "ecmp-imbalance", "controller-kill": "controller-down",
        "controller-restart": "controller-down", "hot-receiver": "degraded"}


def _canned(lab: Any, spec: EvalSpec, **kw: Any) -> dict[str, Any]:
    """One fault of every kind, raw as ``eval_on_lab`` returns it (the scenario scores it
    with ``ops.evaluate.score_run``): the agent detects all (wrong first suspect for kinds
    2 and 5; the kind its first suspect's detector says is ``SAID``); static-thresholds
    alerts in the windows of the even-numbered kinds, naming the fault for every 4th and a
    component nowhere near for the others (``static:up``, a link down), and rings once in
    the fault-free phase; peer-outlier alerts on a host near no fault during kinds 0
    and 1."""
    from ops.evaluate import GroundTruth

    truth = [GroundTruth(k, f"c{i}", 100.0 * (i + 1), 100.0 * (i + 1) + 8)
             for i, k in enumerate(KINDS)]

    def alert(det: str, comp: str, t: float) -> dict[str, Any]:
        return {"detector": det, "component": comp, "opened": t, "first_seen": t}

    agent = [alert("loss", f"c{i}", f.start + 1.0 + 0.1 * i) for i, f in enumerate(truth)]
    diag = [[f.start + 3.0 + 0.1 * i, ["x", "y"] if i in (2, 5) else [f"c{i}", "b"],
             SAID.get(f.kind, "loss")] for i, f in enumerate(truth)]
    static = [alert("static:up", f"c{i}" if i % 4 == 0 else "z", f.start + 1.0)
              for i, f in enumerate(truth) if i % 2 == 0]
    peer = [alert("peer-outlier", "h", f.start + 3.0) for f in truth[:2]]
    events = [e for i, f in enumerate(truth) for e in (
        {"action": "inject", "kind": f.kind, "component": f.component, "time": f.start,
         "apply_start": f.start, "fault_id": i + 1},
        {"action": "undo", "kind": f.kind, "component": f.component, "time": f.end,
         "fault_id": i + 1})]
    return {"baseline_mbps": 83.3, "interval_s": 1.0, "questions": _questions(),
            "plan": build("astral3", servers=2, gpus=2).to_dict(),
            "events": events, "phases": {"calibrate": 0.0, "clean": 0.0, "faults": 100.0,
                                         "end": 2000.0},
            "alerts": agent, "diagnoses": diag,
            "baseline_alerts": {"static-thresholds": [alert("static:up", "z", 5.0), *static],
                                "peer-outlier": peer},
            "job": _iterations(truth),
            "telemetry": {"polls": 10, "poll_s_median": 0.1, "poll_s_max": 0.2, "rows": 5,
                          "wiring": {"checks": 3, "check_s_median": 0.5, "check_s_max": 0.6,
                                     "poll_s_median_checking": 0.12,
                                     "poll_s_median_not": 0.1,
                                     "iter_s_median_checking": 0.52,
                                     "iter_s_median_not": 0.5}}}


def _iterations(truth: list[Any]) -> list[dict[str, Any]]:
    """The MoE job: 0.5 s iterations every 4 s from t=0 (fault-free until 100); during the
    first fault they take 1.0 s, during the second each loses 3 packets, during the third each
    fails; the rest of the faults pass unfelt."""
    its = []
    for i in range(500):
        start = 4.0 * i
        hit = [k for k, f in enumerate(truth[:3]) if start <= f.end and start + 1 >= f.start]
        its.append({"index": i, "started": start, "ended": start + 1.0,
                    "iter_s": 1.0 if hit == [0] else 0.5 if hit != [2] else 0.0,
                    "lost_packets": 3 if hit == [1] else 0, "decode_lost": 0,
                    "error": "RuntimeError: boom" if hit == [2] else None,
                    "receiver_drops": 50 if i == 3 else 0})
    its[3]["iter_s"] = 9.0  # its receivers fell behind: left out
    return its


def test_the_job_summary_says_which_faults_the_job_felt() -> None:
    from ops.evaluate import GroundTruth

    truth = [GroundTruth(k, f"c{i}", 100.0 * (i + 1), 100.0 * (i + 1) + 8)
             for i, k in enumerate(KINDS[:4])]
    s = oe.job_summary(_iterations(truth), {"clean": 0.0, "faults": 100.0, "end": 500.0},
                       truth, 1.0)
    assert s["iter_s_clean"]["median"] == 0.5 and s["iter_s_clean"]["draws"] == 24
    assert s["iter_s_clean"]["max"] == 0.5 and s["receiver_drops"] == 1
    assert [(r["slowest_x"], r["lost_packets"], r["failed"], r["felt"])
            for r in s["per_fault"]] == [(2.0, 0, 0, True), (1.0, 9, 0, True),
                                         (None, 0, 3, True), (1.0, 0, 0, False)]
    assert s["failed"] == 3 and s["lossy"] == 3 and s["iterations"] == 500
    assert s["per_kind"][KINDS[3]] == {"faults": 1, "felt": 0}
    # by phase: the fault-free phase, the fault phase's time outside every window, faults
    assert (s["clean_first_minute_s"], s["clean_last_over_first"]) == (0.5, 1.0)
    assert s["by_phase"]["clean"]["draws"] == 24 and s["by_phase"]["calibrate"] is None
    assert s["by_phase"]["faults"]["max"] == 1.0  # the slow iterations of the first fault
    assert s["by_phase"]["healthy"]["max"] == 0.5 and s["fault_free_p95_over_p50"] == 1.0
    assert s["clean_p95_over_p50"] == 1.0


def test_the_fault_free_phase_is_judged_apart_from_the_healthy_slots_after_faults() -> None:
    """The job still recovering from a fault in the healthy slot after it slows the
    fault-free time of the fault phase; the fault-free phase, a run with no fault at all,
    is judged on its own, and its own slow tail shows."""
    from ops.evaluate import GroundTruth

    truth = [GroundTruth(KINDS[0], "c0", 100.0, 108.0)]
    its = _iterations(truth)
    for it in its:
        if 120 < it["started"] < 240:  # after the fault: the job four times slower a while
            it["iter_s"] = 2.0
    s = oe.job_summary(its, {"clean": 0.0, "faults": 100.0, "end": 2000.0}, truth, 1.0)
    assert s["clean_p95_over_p50"] == 1.0 and s["fault_free_p95_over_p50"] > 1.3
    its[10]["iter_s"] = its[11]["iter_s"] = 0.8  # two slow iterations of the 24 fault-free
    s = oe.job_summary(its, {"clean": 0.0, "faults": 100.0, "end": 2000.0}, truth, 1.0)
    assert s["clean_p95_over_p50"] > 1.3


def _questions() -> dict[str, Any]:
    """Three operator questions: one right, one blaming a healthy spine, one answered after
    its fault ended (not scored)."""
    from ops.questions import summarize

    def q(template: str, expected: str, answer: str, ok: bool, healthy: bool,
          stale: bool = False) -> dict[str, Any]:
        return {"kind": "link-down", "component": "c0", "template": template,
                "question": f"{template}?", "expected": expected, "healthy": healthy,
                "answer": answer, "named": [answer], "correct": ok,
                "reason": "" if ok else f"named {answer}", "stale": stale}

    rows = [q("links-down", "c0", "c0", True, False),
            q("spine-health", "nothing wrong", "spine2", False, True),
            q("lane-health", "c0", "nothing", False, False, stale=True)]
    return {"rows": rows, "summary": {**summarize([r for r in rows if not r["stale"]]),
                                      "stale": 1}}


def test_a_run_quotes_scores_with_their_n_and_the_rate_beside_the_model(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, oe)
    monkeypatch.setattr(oe, "eval_on_lab", _canned)
    out = os.path.join(str(tmp_path), "run")
    oe.ops_eval(quick=True, output=out, log=lambda _m: None, model_draws=5)
    s = read_json(out, "summary.json")
    check_entry(s["baseline_mbps"], draws=1)
    assert s["baseline_mbps"]["model"]["draws"] == 5
    assert s["detect_polls"]["draws"] == len(KINDS)
    assert s["detect_polls"]["p25"] <= s["detect_polls"]["median"] <= s["detect_polls"]["p75"]
    report = read_text(out, "REPORT.md")
    n = len(KINDS)
    assert f"{n}/{n} faults" in report and f"{n - 2}/{n}" in report
    assert "N=5 over hash draws" in report
    # the baselines beside the agent, the same keys, scored on the same run
    base = s["baselines"]
    assert set(base) == {"static-thresholds", "peer-outlier"}
    assert set(base["peer-outlier"]) == set(base["static-thresholds"]) <= set(s)
    assert (s["recall"], s["precision"], s["false_alarms_per_hour"]) == (1.0, 1.0, 0.0)
    st = base["static-thresholds"]
    # it alerts during kinds 0, 2, 4, ...; only the alerts naming the fault (0, 4, ...)
    # detect it strictly, while the lenient score counted every one
    alerted, right = (n + 1) // 2, (n + 3) // 4
    assert st["recall"] == round(right / n, 4) and st["false_alarms_clean"] == 1
    assert st["any_alert_recall"] == round(alerted / n, 4)
    assert st["precision"] == round(right / (alerted + 1), 4)
    assert st["astray"] == alerted - right
    assert st["top1"] == round(right / n, 4)
    assert base["peer-outlier"]["top1"] == 0.0
    # what it said was wrong: a set where the alert cannot tell kinds apart, right whatever
    # the component (link-degrade and corruption: wrong suspect, right kind)
    conf = s["confusion"]
    assert conf["link-flap"] == {"link-down/link-flap": 1}
    assert conf["corruption"] == {"nic-loss/gray-loss/corruption": 1}
    assert conf["mtu-mismatch"] == {"nic-loss/gray-loss/corruption": 1}
    assert conf["partial-blackhole"] == conf["shuffle-miswiring"] == {"none": 1}
    assert conf["hot-receiver"] == {"link-degrade": 1}
    assert s["kind_accuracy"] == round(9 / n, 4)  # a kind SAID does not name: loss, wrong
    assert s["per_kind"]["link-degrade"]["kind_accuracy"] == 1.0
    assert s["per_kind"]["link-degrade"]["top1"] == 0.0
    assert st["kind_accuracy"] == round(1 / n, 4)  # link-down only (switch-down: astray)
    assert st["confusion"]["link-flap"] == {"none": 1}  # missed
    assert base["peer-outlier"]["kind_accuracy"] == 0.0 == base["peer-outlier"]["recall"]
    assert base["peer-outlier"]["confusion"]["link-down"] == {"none": 1}
    assert f"| kind classification (said what is wrong) | {100 * 9 / n:.0f}% (9/{n}) |" \
        in report
    assert "| true kind | controller-kill/controller-restart | link-degrade | " in report
    assert "Beside the baselines" in report
    # one computed line per kind and per baseline, from the scores
    assert "- **link-down**: the agent is level with static-thresholds on recall (1/1 vs " \
           "1/1), top-1 (1/1 vs 1/1), kind (1/1 vs 1/1); beats peer-outlier on recall (1/1 " \
           "vs 0/1), top-1 (1/1 vs 0/1), kind (1/1 vs 0/1)." in report
    assert "- **link-flap**: the agent beats static-thresholds on recall (1/1 vs 0/1), " \
           "top-1 (1/1 vs 0/1), kind (1/1 vs 0/1);" in report
    assert "- **mtu-mismatch**: the agent is level with static-thresholds on recall (1/1 " \
           "vs 1/1), top-1 (1/1 vs 1/1), kind (0/1 vs 0/1);" in report
    assert "Overall, the agent beats static-thresholds on precision (1.0 vs " \
           f"{round(right / (alerted + 1), 4)})" in report
    # strict beside lenient, every source; what the wiring check cost
    assert "Strict and lenient scores" in report and "any-alert recall" in report
    assert "checked the wiring 3 times" in report
    agent_polls = round(1.0 + 0.1 * (n - 1) / 2, 2)  # the median of 1.0 + 0.1 i
    assert f"median polls to detect ({agent_polls:g} vs 1.0)" in report  # static is faster
    # the operator's questions: the stale one not scored, the wrong one shown with why
    assert s["questions"]["accuracy"] == 0.5 and s["questions"]["stale"] == 1
    assert (s["questions"]["faulty"]["correct"], s["questions"]["healthy"]["correct"]) == (1, 0)
    assert "1/2 right (50%): about the fault 1/1, about healthy components 0/1" in report
    assert "| link-down c0 | spine-health? | nothing wrong | spine2 | named spine2 |" in report


def test_a_run_is_scored_again_from_its_file_alone(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """``astral-lab ops rescore RUN_DIR`` gives back summary.json's scores from
    ops_eval.json, for the agent and every baseline, and leaves the folder as it was."""
    import hashlib

    from astral_lab import ops_cli

    install(monkeypatch, oe)
    monkeypatch.setattr(oe, "eval_on_lab", _canned)
    out = os.path.join(str(tmp_path), "run")
    oe.ops_eval(quick=True, output=out, log=lambda _m: None, model_draws=5)
    s = read_json(out, "summary.json")

    def digest() -> dict[str, str]:
        return {n: hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest()
                for n in sorted(os.listdir(out)) if os.path.isfile(os.path.join(out, n))}

    before = digest()
    again = ops_cli.rescore(out)
    keys = ("precision", "recall", "f1", "top1", "top3", "kind_accuracy", "pair_f1",
            "false_alarms_per_hour_clean", "false_alarms_per_hour_fault_phase", "ttd_s",
            "any_alert_recall", "any_alert_precision", "any_alert_top1", "confusion")
    assert {k: again[k] for k in keys} == {k: s[k] for k in keys}
    for name, b in s["baselines"].items():
        assert {k: again["baselines"][name][k] for k in keys} == {k: b[k] for k in keys}
    assert ops_cli.main(["rescore", out]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["source", "recall", "alert"]
    assert "static-thresholds" in table and f"{len(KINDS)} faults" in table
    assert digest() == before  # read, never written
    empty = os.path.join(str(tmp_path), "empty")
    os.makedirs(empty)
    assert ops_cli.main(["rescore", empty]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ops_eval.json" in err[0] and "no such file" in err[0]


def test_shortfalls_say_which_signal_a_missed_kind_lacked() -> None:
    from ops.evaluate import GroundTruth

    truth = [GroundTruth("gray-loss", "L", 100.0, 108.0), GroundTruth("gray-loss", "L", 200.0,
                                                                      208.0),
             GroundTruth("link-down", "M", 300.0, 308.0)]
    per_fault = [{"kind": "gray-loss", "detected": True, "top1": False,
                  "first_alert": "job-slow:job"},
                 {"kind": "gray-loss", "detected": False, "top1": False, "first_alert": None},
                 {"kind": "link-down", "detected": True, "top1": True,
                  "first_alert": "link-down:M"}]
    alerts = [{"detector": "job-slow", "opened": 101.0}, {"detector": "loss", "opened": 103.0},
              {"detector": "link-down", "opened": 301.0}]
    got = oe.shortfalls(per_fault, alerts, truth, 1.0, {"gray-loss": {"faults": 2, "felt": 1}})
    assert got == [{"kind": "gray-loss", "faults": 2, "detected": 1, "top1": 0, "named": 1,
                    "first_alerts": {"job-slow": 1}, "felt": 1}]  # link-down met the goals


def test_each_shortfall_says_why_and_an_unknown_kind_points_to_the_docs() -> None:
    assert "0.05-1%" in oe._why("gray-loss") and "wiring check" in oe._why("shuffle-miswiring")
    assert oe._why("no-such-kind") == oe.WORDS("why_other")
