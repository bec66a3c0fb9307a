"""``ops-eval``: inject a seeded series of faults of every kind during traffic; score the ops layer.

The question: does the operations layer (``ops/``: telemetry, detectors, diagnosis agent)
see every fault, only faults, soon enough, and name the right component? One fabric
carries a MoE job (``traffic.shell.moejob``: training iterations of dispatch then combine,
a decode burst every other one, the iteration time measured; ``job="probes"`` leaves it
out) and steady probe streams (every NIC to a NIC under another leaf, many source ports
so ECMP spreads them) for a fault-free phase and then a fault phase of equal length, in
which ``testbed.faultspec.random_schedule`` injects ``per_kind`` faults of every kind
(each module of ``testbed/faultkinds/``), ``concurrent`` at a time in different parts of
the fabric. The
collector polls every ``interval``; the detectors run after every poll; the deterministic
agent is asked "what is wrong?" at every poll with an open alert, and its answer two polls
after a detection is scored: where (the component it names first) and what (the fault
kinds its first suspect's alert is evidence of; the scoring is ``ops.evaluate.score``).
The same polls feed two
baselines (``ops.baselines``: static per-counter thresholds, and a job-level detector that
flags the host farthest from its peers), scored the same way beside it.

How bad the faults are is ``severity``: ``hard`` (the default) draws each kind's obvious
range, ``gray`` only the kinds that have a degraded-but-working range, drawn in it (a lane
at 50-90% of its rate, 0.05-1% loss, a few irregular flaps), ``mixed`` each fault's
severity from what its kind has. The default ``kinds`` (every kind) means every kind with
that severity.

Goals: >= 95% detection, 0 false alarms in the fault-free phase,
top-1 localization >= 90%, detection within 3 polling intervals.

**Numbers and their ideal.** The scores are counts over the N faults of one seeded schedule
(quoted as k/N; the time to detect as median [p25-p75] over the detected faults), not a
model quantity: their reference is the goals above. The one figure the flow model predicts
is the steady job's receive rate (the detectors' baseline): the stream flows (every source
port its own flow, ECMP-hashed) capped at their paced rate, each at min(cap, its max-min
rate), over ``model_draws`` hash draws, in frame bytes as the interface counters count them.
The emulation has one hash draw of those source ports (N=1).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from ops.detectors.job_slow import ITER_RATIO
from ops.evaluate import (
    GOALS,
    NO_GUESS,
    EvalSpec,
    fault_kinds,
    ground_truth,
    score_run,
    strict_window,
    summaries,
)
from ops.probes import budget
from ops.shell.experiment import eval_on_lab, stream_flows, stream_pairs, stream_sports
from scenarios.base import (
    FABRIC_GPUS,
    GPUS,
    MODEL_DRAWS,
    PHASE_SECONDS,
    TOKENS,
    Param,
    Run,
    scenario,
    servers_of,
)
from scenarios.common import compare, distribution, fmt_distribution, in_band
from scenarios.findings import margin_text, pace_caveats
from scenarios.prose import Prose, snippets
from testbed.fabricspec import MAX_EMULATED_MBPS
from testbed.faultkinds import SCHEDULE_SEVERITIES
from testbed.faultspec import KINDS, schedule_kinds
from testbed.models.perflow import model_flows
from testbed.topologies import build_for_gpus
from traffic.kernels import FlowSpec
from traffic.shell.moejob import job_traffic
from traffic.workload import Phase
from vocab.flows import QP_SPORT_BASE
from vocab.lanemark import PROBE_SPORTS
from vocab.plan import WiringPlan
from vocab.validate import SEED, count, positive, real

ORDER = 70  # where it lists in astral-lab list (vocab.plugins.listing_key)
#: what the faults land in (``--job``)
JOB_TRAFFIC = ("moe", "probes")
WORDS = Prose.of_module(__name__)  # the report's prose: scenarios/templates/<this file's name>.md


@scenario(
    "seeded faults of every kind during traffic: detection, false alarms, "
    "time to detect, lead time, localization",
    Param("gpus", 32, "GPUs in all (at most 64 servers of --gpus-per-server)", quick=4,
          rule=FABRIC_GPUS),
    Param("gpus_per_server", 8, "GPUs (NICs, rails) per server", quick=2, rule=GPUS),
    Param("per_kind", 8, "faults of each kind", quick=1, rule=count(1, 100)),
    Param("concurrent", 2, "faults injected at once, in different parts of the fabric",
          rule=count(1, 4)),
    Param("job", "moe", "what the faults land in: moe (a MoE job's training iterations and "
          "decode bursts, beside the probe streams) or probes (the streams alone)",
          choices=JOB_TRAFFIC),
    Param("job_tokens", 16, "tokens per GPU in the MoE job's training step", rule=TOKENS),
    Param("job_mbps", 10.0, "what each NIC of the MoE job sends at (emulated Mb/s, paced "
          "below the NIC so the job and the probes fit the machine's switching capacity)",
          quick=40.0, rule=positive(MAX_EMULATED_MBPS)),
    Param("kinds", list(KINDS), "fault kinds (the default, every kind: those that have "
          "--severity's faults)",
          choices=KINDS),
    Param("severity", "hard", "how bad the faults are: gray (degraded, working), hard "
          "(obvious) or mixed (each fault drawn from its kind's)", choices=SCHEDULE_SEVERITIES),
    Param("fault_s", 10.0, "longest fault (s)", quick=8.0, rule=PHASE_SECONDS),
    Param("gap_s", 12.0, "gap between faults (s): recovery before the next", quick=10.0,
          rule=PHASE_SECONDS),
    Param("clean_s", 0.0, "fault-free phase (s) before the faults; 0 makes it as long as the "
          "fault phase (a long one shows whether the job slows as its observer runs)",
          rule=real(0, 3600)),
    Param("interval", 1.0, "telemetry polling interval (s)", rule=positive(60)),
    Param("mbps_per_host", 4.0, "probe streams each NIC sends (emulated Mb/s)", quick=20.0,
          rule=positive(MAX_EMULATED_MBPS)),
    Param("model_draws", 100, "flow-model hash draws for the steady rate", rule=MODEL_DRAWS),
    Param("seed", 1, "schedule seed", rule=SEED),
    fabrics=lambda p: {"astral3": build_for_gpus("astral3", p["gpus"], p["gpus_per_server"])},
)
def ops_eval(run: Run) -> None:
    """See the module docstring."""
    p = run.params
    if p["model_draws"] < 1:
        raise ValueError("--model-draws must be >= 1")
    # before any fabric: kinds without a range of this severity are refused here
    kinds = schedule_kinds(None if list(p["kinds"]) == list(KINDS) else p["kinds"],
                           p["severity"])
    spec = eval_spec(p, kinds)
    plan = run.fabric("astral3")
    with run.lab(plan, label="astral3", poll_interval=p["interval"]) as lab:
        run.guard(lab, stream_flows(lab.plan), "steady probe streams",
                  rate_mbps=p["mbps_per_host"])
        job = job_traffic(plan, servers_of(p), p["gpus_per_server"], p["job_tokens"], p["seed"]) \
            if p["job"] == "moe" else None
        if job is not None:  # its heavier phase (combine: BF16), each NIC at its pace
            combine = [f for f in job[0].flows if f.phase == Phase.COMBINE]
            per_nic = max(Counter(f.src for f in combine).values())
            run.guard(lab, combine, "MoE job (training combine)",
                      rate_mbps=p["job_mbps"] / per_nic)
        res = eval_on_lab(lab, spec, job=job, store_path=run.path("telemetry.sqlite"),
                          log=run.log, on_faults=run.show_faults)
    run.stage("fault-free and fault phases done")
    run.save_json("ops_eval.json", res)
    scored = score_run(res, plan)
    clean, faults = scored["agent"]["clean"], scored["agent"]["faults"]
    for r in faults["per_fault"]:
        run.row(kind=r["kind"], component=r["component"], detected=r["detected"],
                detect_s=r["detect_s"], first_alert=r["first_alert"], lead_s=r["lead_s"],
                top1=r["top1"], top3=r["top3"], answer=" ".join(r["ranked"][:3]),
                kind_guess=r["kind_guess"], kind_correct=r["kind_correct"])
    model = steady_model(plan, p["mbps_per_host"], int(p["model_draws"]))
    detect = distribution([r["detect_s"] / res["interval_s"] for r in faults["per_fault"]
                           if r["detect_s"] is not None])
    run.summary = {**summaries(scored),
                   "detection_rate": faults["detection_rate"],
                   "detect_polls_median": faults["detect_polls_median"],
                   "detect_polls_max": faults["detect_polls_max"],
                   "within_3_polls": faults["within_3_polls"],
                   # scores over N faults (not a model quantity: the goals are the reference)
                   "detect_polls": {"draws": detect["draws"], "median": detect["median"],
                                    "p25": detect["p25"], "p75": detect["p75"],
                                    "values": detect["values"], "goal": GOALS["detect_polls"]},
                   "baseline_mbps": compare(
                       res["baseline_mbps"], model["median"],
                       quantity="steady job receive rate (emulated Mb/s, frame bytes)",
                       policy="ecmp", draws=1, median=res["baseline_mbps"],
                       p25=res["baseline_mbps"], p75=res["baseline_mbps"],
                       values=[res["baseline_mbps"]], model=model,
                       bound=model["offered_mbps"], bound_name="offered (paced) rate")}
    run.summary["probe_budget"] = budget(
        plan, p["mbps_per_host"], STREAM_PAYLOAD, p["fault_s"],
        next((v for v in run.config.get("fidelity", [])
              if v.get("label") == "steady probe streams"), None))
    if res.get("job") is not None:  # the MoE job's iterations: what the job felt
        run.summary["job"] = job_summary(res["job"], res["phases"], ground_truth_of(res),
                                         res["interval_s"])
    run.summary["shortfalls"] = shortfalls(
        faults["per_fault"], res.get("alerts") or [],
        ground_truth_of(res), res["interval_s"],
        (run.summary.get("job") or {}).get("per_kind"))
    if res.get("questions"):  # the operator's questions, asked while each fault was live
        qs = res["questions"]["summary"]
        run.summary["questions"] = {k: qs[k] for k in ("asked", "correct", "accuracy",
                                                       "faulty", "healthy", "stale")}
    _report(run, res, clean, faults, GOALS, model, detect)
    _plot(run, res["interval_s"], faults)


def shortfalls(per_fault: list[dict[str, Any]], alerts: list[dict[str, Any]],
               truth: list[Any], interval: float, felt: dict[str, dict[str, int]] | None,
               recall: float = 0.9, top1: float = 0.8) -> list[dict[str, Any]]:
    """Per kind where the agent's recall or top-1 falls short of the goals, the evidence
    of why: how many of its faults an alert that names the kind (declares it among its
    ``fault_kinds``) was raised for in the fault's window, which alerts came first
    instead, and how many the job felt (``felt``: ``job_summary``'s per kind). An alert
    naming the kind that never fired is the signal missing; a job that did not feel the
    fault says the fault was also harmless to it."""
    out = []
    for kind in dict.fromkeys(r["kind"] for r in per_fault):
        rows = [r for r in per_fault if r["kind"] == kind]
        n = len(rows)
        det, right = sum(r["detected"] for r in rows), sum(r["top1"] for r in rows)
        if det >= recall * n and right >= top1 * n:
            continue
        named = 0
        for lo, hi in (strict_window(g, interval) for g in truth if g.kind == kind):
            named += any(kind in fault_kinds(a["detector"]) for a in alerts
                         if lo <= a["opened"] <= hi)
        first = Counter(r["first_alert"].split(":")[0] for r in rows if r["first_alert"])
        out.append({"kind": kind, "faults": n, "detected": det, "top1": right,
                    "named": named, "first_alerts": dict(first.most_common()),
                    "felt": (felt or {}).get(kind, {}).get("felt")})
    return out


def ground_truth_of(res: dict[str, Any]) -> list[Any]:
    """The faults of a run's injector log (``ops.evaluate.ground_truth``)."""
    if not res.get("events"):
        return []
    return ground_truth(res["events"], res.get("phases", {}).get("end", float("inf")))


def job_summary(iterations: list[dict[str, Any]], phases: dict[str, float],
                truth: list[Any], interval: float) -> dict[str, Any]:
    """What the MoE job felt: its iteration time in the fault-free phase (median
    [p25-p75], N), and per fault the iterations that overlapped it: the slowest against
    that median, packets lost, failed replays; ``felt`` when one of them was at least
    ``ops.detectors.job_slow.ITER_RATIO`` x slower, lost packets or failed (what the
    job-slow detector would see). Per kind: faults the job felt / faults. ``by_phase``:
    the iteration time in the calibration, the fault-free phase, the fault phase's healthy
    time (no fault window open) and during faults, and its p95/p50 over the fault-free
    time of both phases: whether the job ran alike early and late."""
    ok = [it for it in iterations if it["error"] is None and not it.get("receiver_drops")]
    clean = [it["iter_s"] for it in ok if phases["clean"] <= it["started"] < phases["faults"]]
    base = distribution(clean) if clean else None
    rows, kinds = [], {}
    for r in truth:  # ops.evaluate.GroundTruth: the injector's log
        hit = [it for it in iterations if it["started"] <= r.end and it["ended"] >= r.start
               and not it.get("receiver_drops")]
        timed = [it["iter_s"] for it in hit if it["error"] is None]
        slowest = round(max(timed) / base["median"], 2) if timed and base else None
        lost = sum(it["lost_packets"] + it["decode_lost"] for it in hit)
        failed = sum(it["error"] is not None for it in hit)
        felt = bool(lost or failed or (slowest is not None and slowest >= ITER_RATIO))
        rows.append({"kind": r.kind, "component": r.component, "iterations": len(hit),
                     "slowest_x": slowest, "lost_packets": lost, "failed": failed,
                     "felt": felt})
        k = kinds.setdefault(r.kind, {"faults": 0, "felt": 0})
        k["faults"] += 1
        k["felt"] += felt
    spans = [strict_window(g, interval) for g in truth]

    def faulty(it: dict[str, Any]) -> bool:
        return any(lo <= it["ended"] and it["started"] <= hi for lo, hi in spans)

    fault_phase = [it for it in ok if it["started"] >= phases["faults"]]
    by_phase = {
        "calibrate": [it["iter_s"] for it in ok
                      if phases.get("calibrate", phases["clean"]) <= it["started"]
                      < phases["clean"]],
        "clean": clean,
        "healthy": [it["iter_s"] for it in fault_phase if not faulty(it)],
        "faults": [it["iter_s"] for it in fault_phase if faulty(it)]}
    fault_free = by_phase["clean"] + by_phase["healthy"]
    p50 = statistics.median(fault_free) if fault_free else None
    clean_its = [it for it in ok if phases["clean"] <= it["started"] < phases["faults"]]
    first = [it["iter_s"] for it in clean_its if it["started"] < phases["clean"] + 60]
    last = [it["iter_s"] for it in clean_its if it["started"] >= phases["faults"] - 60]
    return {"iterations": len(iterations),
            "failed": sum(it["error"] is not None for it in iterations),
            "receiver_drops": sum(bool(it.get("receiver_drops")) for it in iterations),
            "lossy": sum(1 for it in ok if it["lost_packets"] or it["decode_lost"]),
            "iter_s_clean": base,
            "by_phase": {k: distribution(v) if v else None for k, v in by_phase.items()},
            "fault_free_p95_over_p50": round(_p95(fault_free) / p50, 3) if p50 else None,
            # the fault-free phase alone: a run with no fault at all (the healthy slots
            # above follow faults, whose recovery the job may still be feeling)
            "clean_p95_over_p50": round(_p95(clean) / base["median"], 3) if base else None,
            # the fault-free phase's first and last minute: does the job slow as it runs?
            "clean_first_minute_s": round(statistics.median(first), 4) if first else None,
            "clean_last_minute_s": round(statistics.median(last), 4) if last else None,
            "clean_last_over_first": round(statistics.median(last) / statistics.median(first),
                                           3) if first and last else None,
            "skew_s_median": round(statistics.median(
                [max(it.get("skew_s", {}).values(), default=0.0) for it in ok]), 4)
            if ok else None,
            "per_fault": rows, "per_kind": kinds}


def _p95(values: list[float]) -> float:
    v = sorted(values)
    pos = 0.95 * (len(v) - 1)
    lo = int(pos)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (pos - lo)


#: the UDP payload bytes of what ``ops.shell.experiment.steady_traffic`` sends
STREAM_PAYLOAD = 1000
#: Ethernet + IPv4 + UDP headers around a probe datagram (the counters count them)
STREAM_HEADERS = 14 + 20 + 8


def steady_model(plan: WiringPlan, mbps_per_host: float, draws: int) -> dict[str, Any]:
    """The flow model's steady receive rate of the job (Mb/s of frames), over hash draws.

    Every stream source port is a flow (the model hashes each; the controller pins them
    to lanes evenly, which spreads them no worse), paced at its share of
    ``mbps_per_host``: each gets min(that cap, its uncapped max-min rate), exact when the
    fabric carries every stream at its cap (then the capped max-min solution is the caps),
    a lower estimate otherwise."""
    frame = (STREAM_PAYLOAD + STREAM_HEADERS) / STREAM_PAYLOAD
    cap = mbps_per_host / PROBE_SPORTS * frame
    flows = [FlowSpec.make(a, b, 1_000_000, qp=sp - QP_SPORT_BASE)
             for (a, b), sports in zip(stream_pairs(plan), stream_sports(plan), strict=True)
             for sp in sports]
    rates = []
    for s in range(max(1, draws)):
        m = model_flows(plan, flows, "ecmp", seed=s, unit="mbps")
        rates.append(sum(min(cap, r / 1e6) for r in m.flow_start_rate_bps))
    return {**distribution(rates), "offered_mbps": cap * len(flows)}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _count(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _pct2(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _report(run: Run, res: dict[str, Any], clean: dict[str, Any], faults: dict[str, Any],
            goals: dict[str, float], model: dict[str, Any], detect: dict[str, Any]) -> None:
    n = faults["faults"]
    rep = run.report
    rep.section("What was measured", __doc__.split("\n\n")[1])
    ok = {"det": (faults["detection_rate"] or 0) >= goals["detection_rate"],
          "fa": clean["false_alarms"] == goals["false_alarms_clean"],
          "top1": (faults["top1"] or 0) >= goals["top1"],
          "ttd": (faults["within_3_polls"] or 0) >= 1.0}
    rep.section("Scores against the goals", "")
    rep.table([
        {"score": "detection rate", "measured": f"{_pct(faults['detection_rate'])} "
                                                f"({faults['detected']}/{n} faults)",
         "goal": ">= 95%", "met": ok["det"]},
        {"score": "false alarms, fault-free phase (same length)",
         "measured": f"{clean['false_alarms']} ({clean['false_alarms_per_hour']}/h)",
         "goal": "0", "met": ok["fa"]},
        {"score": "false alarms per hour, fault phase (its time outside every window)",
         "measured": faults["false_alarms_per_hour"], "goal": "-", "met": "-"},
        {"score": "alert precision (alerts that detected a fault / non-symptom alerts)",
         "measured": f"{_pct(run.summary['precision'])} ({run.summary['credited']}/"
                     f"{run.summary['alerts']})", "goal": "-", "met": "-"},
        {"score": "pair F1 ((component, kind) stated while faults were live)",
         "measured": run.summary["pair_f1"], "goal": "-", "met": "-"},
        {"score": "time to detect (polls: median [p25-p75], N=detected faults; max)",
         "measured": f"{fmt_distribution(detect, '', 2)}; max {faults['detect_polls_max']}",
         "goal": "<= 3 polls", "met": ok["ttd"]},
        {"score": "time to localize (s from injection to the agent naming it first: p50 / "
                   "p95, N)",
         "measured": f"{faults['ttl_s']['p50']} / {faults['ttl_s']['p95']} "
                     f"(N={sum(r['localize_s'] is not None for r in faults['per_fault'])})",
         "goal": "-", "met": "-"},
        {"score": "warning lead time before the job suffered (median s, n)",
         "measured": f"{faults['lead_s_median']} (n={faults['lead_n']})", "goal": "> 0",
         "met": "-" if faults["lead_s_median"] is None else faults["lead_s_median"] > 0},
        {"score": "localization top-1", "measured": f"{_pct(faults['top1'])} "
                                                    f"({round((faults['top1'] or 0) * n)}/{n})",
         "goal": ">= 90%",
         "met": ok["top1"]},
        {"score": "localization top-3", "measured": _pct(faults["top3"]), "goal": "-",
         "met": "-"},
        {"score": "kind classification (said what is wrong)",
         "measured": f"{_pct(faults['kind_accuracy'])} "
                     f"({sum(r['kind_correct'] for r in faults['per_fault'])}/{n})",
         "goal": "-", "met": "-"},
    ])
    _strict_vs_lenient(run, run.summary)
    rep.section("By fault kind", "")
    rep.table([{"kind": k, **v} for k, v in faults["by_kind"].items()])
    job = run.summary.get("job")
    if job is not None:
        clean_iter = job["iter_s_clean"]
        rep.section("What the job felt", WORDS(
            "job", tokens=run.params["job_tokens"], iterations=job["iterations"],
            lossy=job["lossy"], failed=job["failed"], ratio=ITER_RATIO,
            rxdrops=job["receiver_drops"],
            clean=fmt_distribution(clean_iter, " s", 3) if clean_iter else "none measured"))
        rep.table([{"kind": k, "faults": v["faults"], "felt by the job": v["felt"]}
                   for k, v in job["per_kind"].items()])
        rep.text(WORDS("job_phases", ratio=job["fault_free_p95_over_p50"],
                       clean_ratio=job["clean_p95_over_p50"],
                       skew=job["skew_s_median"], first=job["clean_first_minute_s"],
                       last=job["clean_last_minute_s"], drift=job["clean_last_over_first"]))
        rep.table([{"phase": k, "iteration time": fmt_distribution(v, " s", 3)
                    if v else "none"} for k, v in job["by_phase"].items()])
    pb = run.summary.get("probe_budget")
    if pb:
        rep.section("The probe budget", WORDS(
            "probe_budget", pps=f"{pb['pps_per_host']:,g}", dirs=pb["lane_directions"],
            per_dir=f"{pb['pps_per_lane_direction']:,g}", fault_s=run.params["fault_s"],
            seen=_pct2(pb["loss_seen"]), hop=_count(pb.get("offered_hop_pps")),
            cap=_count(pb.get("capacity_hop_pps")), share=_pct(pb.get("share_of_capacity"))))
    rep.section("What kind of fault it said", WORDS("kinds"))
    rep.table(confusion_rows(faults["confusion"]))
    rep.section("Every fault", WORDS("every_fault"))
    rep.table(run.rows)
    if clean["false_alarm_list"] or faults["false_alarm_list"]:
        rep.section("False alarms", WORDS(
            "false_alarms", clean=", ".join(clean["false_alarm_list"]) or "none",
            faults=", ".join(faults["false_alarm_list"]) or "none"))
    rep.section("Findings")
    base = run.summary["baseline_mbps"]
    gap = steady_gap(base["ratio"], model["offered_mbps"], model["median"],
                     next((v["margin"] for v in run.config.get("fidelity", [])
                           if v.get("label") == "steady probe streams"), None))
    rep.finding(
        WORDS("finding_title"),
        measured=WORDS("finding_measured", detected=faults["detected"], n=n,
                       false_alarms=clean["false_alarms"], top1=_pct(faults["top1"]),
                       ttd=fmt_distribution(detect, " polls"), baseline=res["baseline_mbps"]),
        ideal=WORDS("finding_ideal", model=fmt_distribution(model, " Mb/s", 1),
                    ratio=base["ratio"], offered=model["offered_mbps"]),
        published=WORDS("finding_published"),
        why=WORDS("finding_why", n=n, seed=run.params["seed"],
                  kinds=len({r["kind"] for r in faults["per_fault"]})) + gap)
    if run.summary["baselines"]:
        _versus_baselines(run, run.summary)
    short = run.summary.get("shortfalls")
    if short:
        rep.section("Where the agent falls short, and the signal it lacked", WORDS("short"))
        rep.table([{"kind": s["kind"], "detected": f"{s['detected']}/{s['faults']}",
                    "top-1": f"{s['top1']}/{s['faults']}",
                    "an alert naming the kind fired": f"{s['named']}/{s['faults']}",
                    "first alerts": ", ".join(f"{k} {v}" for k, v in
                                                      s["first_alerts"].items()) or "none",
                    "felt by the job": "-" if s["felt"] is None
                    else f"{s['felt']}/{s['faults']}", "why": _why(s["kind"])} for s in short])
    if res.get("questions"):
        _questions(run, res["questions"])
    tel = res.get("telemetry", {})
    rep.section("Telemetry cost", WORDS(
        "telemetry", polls=tel.get("polls"), poll_median=tel.get("poll_s_median"),
        poll_max=tel.get("poll_s_max"), rows=tel.get("rows"),
        baseline=res.get("baseline_mbps")))
    wiring = tel.get("wiring")
    if wiring:
        rep.text(WORDS("wiring_cost", **wiring))
    if res.get("injector_errors"):
        rep.section("Injector errors", "\n".join(f"- {e}" for e in res["injector_errors"]))


def eval_spec(p: dict[str, Any], kinds: list[str]) -> EvalSpec:
    """The campaign the scenario's parameters ``p`` describe, with ``kinds`` as
    ``schedule_kinds`` checked them (``--clean-s 0``: as long as the fault phase)."""
    return EvalSpec(per_kind=p["per_kind"], kinds=tuple(kinds), severity=p["severity"],
                    concurrent=p["concurrent"], fault_s=p["fault_s"], gap_s=p["gap_s"],
                    seed=p["seed"], interval=p["interval"], mbps_per_host=p["mbps_per_host"],
                    clean_s=p["clean_s"] or None, job_mbps=p["job_mbps"])


def _strict_vs_lenient(run: Run, summary: dict[str, Any]) -> None:
    """Every source's strict scores beside the lenient ones of earlier runs."""
    every = {"agent": summary, **summary.get("baselines", {})}
    run.report.section("Strict and lenient scores", WORDS("strict"))
    run.report.table([{
        "source": name, "recall": s["recall"], "alert precision": s["precision"],
        "F1": s["f1"], "top-1": s["top1"], "kind": s["kind_accuracy"],
        "kind given the right component": s["kind_accuracy_given_component"],
        "pair F1": s["pair_f1"], "false alarms/h (fault-free)": s["false_alarms_per_hour_clean"],
        "false alarms/h (between faults)": s["false_alarms_per_hour_fault_phase"],
        "any-alert recall": s.get("any_alert_recall"),
        "any-alert precision": s.get("any_alert_precision"),
        "any-alert F1": s.get("any_alert_f1"), "any-alert top-1": s.get("any_alert_top1")}
        for name, s in every.items()])


def _why(kind: str) -> str:
    """Why the lab's signals fall short for ``kind``: the template's ``why_<kind>`` (``-``
    written ``_``), or ``why_other`` for a kind it has no words for."""
    name = kind.replace("-", "_")
    return WORDS(f"why_{name}") if f"why_{name}" in snippets(WORDS.report, WORDS.folder) \
        else WORDS("why_other")


def _versus_baselines(run: Run, summary: dict[str, Any]) -> None:
    """Agent vs each baseline, overall and per kind, with a line of words each (computed)."""
    rep = run.report
    names = list(summary["baselines"])
    every = {"agent": summary, **summary["baselines"]}
    rep.section("Beside the baselines", WORDS("baselines"))
    overall = [("precision", "precision", True), ("recall", "recall", True),
               ("F1", "f1", True), ("top-1", "top1", True), ("top-3", "top3", True),
               ("kind accuracy", "kind_accuracy", True), ("pair F1", "pair_f1", True),
               ("fault-free false alarms", "false_alarms_clean", False),
               ("false alarms per hour between faults", "false_alarms_per_hour_fault_phase",
                False),
               ("median polls to detect", "ttd_polls.p50", False),
               ("p95 polls to detect", "ttd_polls.p95", False),
               ("median s to localize", "ttl_s.p50", False),
               ("median warning lead (s)", "lead_s_median", True)]
    rep.table([{"score": label, **{n: _get(s, key) for n, s in every.items()}}
               for label, key, _ in overall])
    scores = [(label, key, up, None) for label, key, up in overall]
    rep.text("\n".join("- " + WORDS("versus_overall", verdict=versus(
        summary, summary["baselines"][n], n, scores)) for n in names) + "\n")
    rows, lines = [], []
    for kind, ag in summary["per_kind"].items():
        row: dict[str, Any] = {"kind": kind, "faults": ag["faults"]}
        verdicts = []
        for n, s in every.items():
            k = s["per_kind"].get(kind) or {}
            row[f"{n} recall"] = _of(k.get("recall"), ag["faults"])
            row[f"{n} top-1"] = _of(k.get("top1"), ag["faults"])
            row[f"{n} kind"] = _of(k.get("kind_accuracy"), ag["faults"])
            if n != "agent":
                verdicts.append(versus(ag, k, n, [("recall", "recall", True, ag["faults"]),
                                                  ("top-1", "top1", True, ag["faults"]),
                                                  ("kind", "kind_accuracy", True,
                                                   ag["faults"])]))
        rows.append(row)
        lines.append(f"- **{kind}**: " + WORDS("versus_kind", verdicts="; ".join(verdicts)))
    rep.table(rows)
    rep.text("\n".join(lines) + "\n")


def _questions(run: Run, questions: dict[str, Any]) -> None:
    """The operator's questions: accuracy per template, and the ones answered wrong."""
    s = questions["summary"]
    run.report.section("Questions an operator asks", WORDS(
        "questions", asked=s["asked"], correct=s["correct"], accuracy=_pct(s["accuracy"]),
        faulty=_of(s["faulty"]["accuracy"], s["faulty"]["asked"]),
        healthy=_of(s["healthy"]["accuracy"], s["healthy"]["asked"]), stale=s["stale"]))
    run.report.table([{"question": t, "asked": v["asked"], "right": v["correct"]}
                      for t, v in s["per_template"].items()])
    wrong = [r for r in questions["rows"] if not r["correct"] and not r["stale"]]
    if wrong:
        run.report.table([{"fault": f"{r['kind']} {r['component']}", "question": r["question"],
                           "expected": r["expected"], "answer": r["answer"],
                           "why wrong": r["reason"]} for r in wrong])


def confusion_rows(matrix: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """The confusion matrix as table rows: a row per true kind, a column per guess (by
    name, ``none`` last), a blank for zero so the guesses made stand out."""
    guesses = sorted({g for row in matrix.values() for g in row} - {NO_GUESS})
    if any(NO_GUESS in row for row in matrix.values()):
        guesses.append(NO_GUESS)
    return [{"true kind": kind, **{g: row.get(g) or "" for g in guesses}}
            for kind, row in matrix.items()]


def _get(scores: dict[str, Any], key: str) -> Any:
    """``scores[key]``, ``a.b`` reaching into a nested dict (None when absent)."""
    for part in key.split("."):
        scores = scores.get(part) if isinstance(scores, dict) else None  # type: ignore[assignment]
    return scores


def _of(ratio: float | None, n: int) -> str:
    return "-" if ratio is None else f"{round(ratio * n)}/{n}"


def versus(agent: dict[str, Any], base: dict[str, Any], name: str,
           scores: list[tuple[str, str, bool, int | None]]) -> str:
    """Where the agent does better and where worse than baseline ``name``, in words.

    ``scores``: (label, key, higher is better, N: quote the ratio as k/N, or None: as is);
    a score either side lacks (None) is not compared."""
    better, worse, same = [], [], []
    for label, key, up, n in scores:
        a, b = _get(agent, key), _get(base, key)
        if a is None or b is None:
            continue
        text = f"{label} ({_of(a, n)} vs {_of(b, n)})" if n else f"{label} ({a} vs {b})"
        if a == b:
            same.append(text)
        elif (a > b) == up:
            better.append(text)
        else:
            worse.append(text)
    level = WORDS("versus_level", same=", ".join(same)) if same and (better or worse) else ""
    return WORDS("versus_mixed" if better and worse else "versus_better" if better
                 else "versus_worse" if worse else "versus_tie", name=name,
                 better=", ".join(better), worse=", ".join(worse),
                 same=", ".join(same) or "nothing comparable", level=level)


def steady_gap(ratio: float | None, offered: float, carried: float,
               margin: float | None) -> str:
    """Why the steady job rate differs from the model's ('' inside 0.7-1.3)."""
    if in_band(ratio) or ratio is None:
        return ""
    out = " " + WORDS("steady_gap", ratio=ratio, offered=offered, carried=carried)
    caveats = pace_caveats(margin=margin)
    if caveats:
        return out + WORDS("steady_caveats", caveats="; ".join(caveats))
    if ratio < 1:
        return out + WORDS("steady_slow", margin=margin_text(margin))
    return out + WORDS("steady_fast")


def _plot(run: Run, interval: float, faults: dict[str, Any]) -> None:
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: pyplot loads a backend: only after matplotlib.use("Agg") above
    import matplotlib.pyplot as plt

    rows = [r for r in faults["per_fault"] if r["detect_s"] is not None]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(7, 3.2))
    kinds = sorted({r["kind"] for r in rows})
    for i, k in enumerate(kinds):
        ys = [r["detect_s"] / interval for r in rows if r["kind"] == k]
        ax.scatter([i] * len(ys), ys, color=["tab:green" if r["top1"] else "tab:red"
                                             for r in rows if r["kind"] == k])
    ax.axhline(3, ls="--", color="gray", label="goal: 3 polls")
    ax.set_xticks(range(len(kinds)), kinds, rotation=30, ha="right")
    ax.set_ylabel("time to detect (polls)")
    ax.set_title("ops-eval: detection time per fault (green: agent's top-1 right)")
    ax.legend()
    run.save_figure(fig, "detect_time.png")
    run.report.image("detect_time.png", WORDS("detect_caption"))
