"""``loss-sweep``: one lane at a time losing (or corrupting) a small share of its frames;
how soon does the operations layer name it?

The question: at the loss rates of a dirty optic (0.05% to 1% of the frames), how many
seconds, and how many of the job's iterations, pass before the agent names the faulty
lane first? The fabric carries what ops-eval's does (a MoE job and the probe streams,
``ops.shell.experiment.eval_on_lab``); after a short fault-free phase (its false alarms
are counted), ``tries`` faults of ``kind`` at each rate of RATES hit a lane drawn from
``seed`` (``testbed.faultspec.sweep_schedule``), one at a time, each lasting ``fault_s``.
A fault is localized when the agent's answer first names its lane first (``ops.evaluate``:
``localize_s``, the time to localize). Beside: SprayCheck localizes one link dropping
0.5% within 5 training iterations and 1.5% within one; the goals are 0.1% within 20 s in
at least 8 of 10 tries and 1% within 5 s in 10 of 10.

**Numbers and their ideal.** Each figure is a distribution over the tries of a rate (the
lanes are drawn; median [p25-p75], N), and its reference is the goals above, not a model
quantity.
"""

from __future__ import annotations

import statistics
from typing import Any

from ops.evaluate import EvalSpec, score_run
from ops.probes import budget
from ops.shell.experiment import eval_on_lab, stream_flows
from scenarios.base import (
    FABRIC_GPUS,
    GPUS,
    PHASE_SECONDS,
    TOKENS,
    Param,
    Run,
    scenario,
    servers_of,
)
from scenarios.common import distribution, fmt_distribution
from scenarios.prose import Prose
from testbed.fabricspec import MAX_EMULATED_MBPS
from testbed.faultspec import sweep_schedule
from testbed.topologies import build_for_gpus
from traffic.shell.moejob import job_traffic
from vocab.validate import SEED, count, positive, real

ORDER = 75  # where it lists in astral-lab list (vocab.plugins.listing_key)
#: the loss rates swept, as probabilities per frame
RATES = (0.0005, 0.001, 0.002, 0.005, 0.01)
#: the kinds a sweep can inject: link faults with a per-frame probability
SWEPT = ("gray-loss", "corruption")
#: the goals: (rate, within seconds, share of the tries)
GOALS = ((0.001, 20.0, 0.8), (0.01, 5.0, 1.0))
#: the probe streams' datagram payload (ops-eval's)
PAYLOAD = 1000
WORDS = Prose.of_module(__name__)  # the report's prose: scenarios/templates/<this file's name>.md


@scenario(
    "one lane at a time losing 0.05-1% of its frames: how soon the agent names it",
    Param("kind", "gray-loss", "what the lane does to its frames: gray-loss (drops them) or "
          "corruption (a bad checksum)", choices=SWEPT),
    Param("tries", 10, "lanes tried at each rate", quick=2, rule=count(1, 50)),
    Param("gpus", 32, "GPUs in all (at most 64 servers of --gpus-per-server)", quick=4,
          rule=FABRIC_GPUS),
    Param("gpus_per_server", 8, "GPUs (NICs, rails) per server", quick=2, rule=GPUS),
    Param("job_tokens", 16, "tokens per GPU in the MoE job's training step", rule=TOKENS),
    Param("job_mbps", 10.0, "what each NIC of the MoE job sends at (emulated Mb/s)",
          quick=40.0, rule=positive(MAX_EMULATED_MBPS)),
    Param("mbps_per_host", 4.0, "probe streams each NIC sends (emulated Mb/s)", quick=20.0,
          rule=positive(MAX_EMULATED_MBPS)),
    Param("fault_s", 20.0, "how long each fault lasts (s)", quick=10.0, rule=PHASE_SECONDS),
    Param("gap_s", 16.0, "gap between faults (s): longer than the detectors hold what they "
          "saw (lane-loss pools the job's last 15 polls), so each try starts on a quiet "
          "fabric", quick=6.0, rule=PHASE_SECONDS),
    Param("clean_s", 60.0, "fault-free phase (s) before the faults (its false alarms count)",
          quick=20.0, rule=real(0, 3600)),
    Param("interval", 1.0, "telemetry polling interval (s)", rule=positive(60)),
    Param("seed", 1, "which lanes are drawn", rule=SEED),
    fabrics=lambda p: {"astral3": build_for_gpus("astral3", p["gpus"], p["gpus_per_server"])},
)
def loss_sweep(run: Run) -> None:
    """See the module docstring."""
    p = run.params
    plan = run.fabric("astral3")
    faults = sweep_schedule(plan, p["kind"], RATES, p["tries"], p["fault_s"] + p["gap_s"],
                            p["fault_s"], p["seed"])
    spec = EvalSpec(per_kind=len(faults), kinds=(p["kind"],), severity="gray",
                    concurrent=1, fault_s=p["fault_s"], gap_s=p["gap_s"], seed=p["seed"],
                    interval=p["interval"], mbps_per_host=p["mbps_per_host"], controls=0.0,
                    calibrate_s=30 * p["interval"], clean_s=p["clean_s"], questions=0,
                    healthy_questions=0, job_mbps=p["job_mbps"], faults=tuple(faults))
    with run.lab(plan, label="astral3", poll_interval=p["interval"]) as lab:
        guard = run.guard(lab, stream_flows(lab.plan), "steady probe streams",
                          rate_mbps=p["mbps_per_host"])
        job = job_traffic(plan, servers_of(p), p["gpus_per_server"], p["job_tokens"],
                          p["seed"])
        res = eval_on_lab(lab, spec, job=job, store_path=run.path("telemetry.sqlite"),
                          log=run.log, on_faults=run.show_faults)
    run.stage("the sweep is done")
    run.save_json("loss_sweep.json", res)
    scored = score_run(res, plan)["agent"]
    rows = sweep_rows(scored["faults"]["per_fault"], res["schedule"], res.get("job") or [])
    for r in rows:
        run.row(**{k: v for k, v in r.items() if k != "values"})
    run.summary = {"kind": p["kind"], "rates": rows, "goals": goals_met(rows),
                   "false_alarms_clean": scored["clean"]["false_alarms"],
                   "probe_budget": budget(plan, p["mbps_per_host"], PAYLOAD, p["fault_s"],
                                          guard)}
    _report(run, rows)


def sweep_rows(per_fault: list[dict[str, Any]], schedule: list[dict[str, Any]],
               iterations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rate: the tries, how many the agent localized (named first) at all, within
    5 s and within 20 s, and the time to localize in seconds and in the job's iterations
    that ended meanwhile (median [p25-p75] over the localized tries). ``per_fault``: the
    strict score's rows, in injection order; ``schedule``: the run's, whose entries give
    each fault's probability."""
    by_rate: dict[float, list[tuple[float | None, int | None]]] = {}
    left = list(schedule)
    for row in per_fault:  # each injected fault, matched to its entry in the schedule
        fault = next((f for f in left if f["kind"] == row["kind"]
                      and f["component"] == row["component"]), None)
        if fault is None:
            continue
        left.remove(fault)
        rate = float(fault["probability"])
        secs = row.get("localize_s")
        its = None if secs is None else sum(
            1 for it in iterations if row["start"] < it["ended"] <= row["start"] + secs)
        by_rate.setdefault(rate, []).append((secs, its))
    out = []
    for rate, tries in sorted(by_rate.items()):
        secs = [s for s, _ in tries if s is not None]
        its = [float(i) for _, i in tries if i is not None]
        out.append({"rate": rate, "tries": len(tries), "localized": len(secs),
                    "within_5s": sum(s <= 5.0 for s in secs),
                    "within_20s": sum(s <= 20.0 for s in secs),
                    "localize_s": distribution(secs) if secs else None,
                    "iterations": distribution(its) if its else None})
    return out


def goals_met(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each goal of GOALS against the rows: the tries within its time, and whether they
    reach its share (None: the rate was not swept)."""
    out = []
    for rate, within, share in GOALS:
        row = next((r for r in rows if abs(r["rate"] - rate) < 1e-12), None)
        got = None if row is None else row[f"within_{within:g}s"]
        out.append({"rate": rate, "within_s": within, "share": share,
                    "got": got, "tries": None if row is None else row["tries"],
                    "met": None if row is None else got >= share * row["tries"]})
    return out


def _report(run: Run, rows: list[dict[str, Any]]) -> None:
    rep = run.report
    rep.section("What was measured", __doc__.split("\n\n")[1])
    rep.section("Time to localize, per loss rate", WORDS("table", kind=run.params["kind"]))
    rep.table([{"loss": f"{100 * r['rate']:g}%", "tries": r["tries"],
                "named first": r["localized"], "within 5 s": r["within_5s"],
                "within 20 s": r["within_20s"],
                "time to localize": fmt_distribution(r["localize_s"], " s", 1)
                if r["localize_s"] else "-",
                "job iterations": fmt_distribution(r["iterations"], "", 1)
                if r["iterations"] else "-"} for r in rows])
    rep.section("Against the goals", WORDS("goals"))
    rep.table([{"goal": f"{100 * g['rate']:g}% within {g['within_s']:g} s in >= "
                        f"{100 * g['share']:.0f}% of the tries",
                "measured": "-" if g["got"] is None else f"{g['got']}/{g['tries']}",
                "met": "-" if g["met"] is None else g["met"]}
               for g in run.summary["goals"]])
    pb = run.summary["probe_budget"]
    rep.text(WORDS("budget", clean=run.summary["false_alarms_clean"],
                   per_dir=pb["pps_per_lane_direction"], seen=f"{100 * pb['loss_seen']:.2f}%"
                   if pb["loss_seen"] else "-", fault_s=run.params["fault_s"],
                   median=_median_iter(rows)))


def _median_iter(rows: list[dict[str, Any]]) -> str:
    vals = [v for r in rows if r["iterations"] for v in r["iterations"]["values"]]
    return f"{statistics.median(vals):g}" if vals else "-"
