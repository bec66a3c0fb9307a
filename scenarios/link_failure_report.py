"""The link-failure scenario's results: from the runs' records to summary.csv,
summary.json, metrics.json, the two figures and REPORT.md.

``_analyse`` takes every run's metrics (``scenarios.link_failure_metrics``), their
distributions over the draws and the flow model's beside them; ``_row`` and
``_summary_entry`` write them out, ``_plot_timeline`` and ``_plot_completion`` draw them and
``_write_report`` explains them. Apart from ``scenarios.link_failure`` (the parameters,
the traffic and the runs on a fabric), which calls ``_analyse`` once every run is done and
re-exports ``CASES`` and ``PUBLISHED_FAILOVER``, so each of the two reads on its own.
"""

from __future__ import annotations

import json
import os
from typing import Any

from controllers import policies
from controllers.paths import PathFinder
from scenarios.base import Run
from scenarios.common import (
    compare,
    distribution,
    fmt_distribution,
    in_band,
    median_chance,
    plot_draws,
    real_time_factor,
)
from scenarios.findings import margin_text, pace_caveats
from scenarios.link_failure_metrics import (
    DRAW_QP_STRIDE,
    MESSAGE_BYTES,
    _failure_metrics,
    _model_baselines,
    draws_for,
    model_penalties,
    rates,
)
from testbed.shaping import LOSSLESS_QUEUE_S
from traffic.kernels import FlowSpec
from vocab.plan import Link, WiringPlan

CASES = ("baseline", "lane", "spine")
PUBLISHED_FAILOVER = ("no published recovery figure for Astral 3.0 was found in the stored "
                      "sources; TENT (arXiv 2604.00368) reports sub-50 ms self-healing around "
                      "link failures in production GPU clusters")


def _analyse(run: Run, plan: WiringPlan, flows: list[FlowSpec], fluid: Any,
             failures: dict[str, list[Link]], results: dict[str, dict[str, Any]],
             lane: tuple[str, str]) -> None:
    """Per mode and case: the draws' metrics, their distributions, the model's beside them."""
    p = run.params
    modes = list(p["modes"])
    nd = int(p["model_draws"])
    metrics: dict[str, dict[str, Any]] = {}  # "mode/draw/case" -> one run's metrics
    agg: dict[str, dict[str, Any]] = {}  # "mode/case" -> distributions and ideals
    margin = {v["label"]: v["margin"] for v in run.config.get("fidelity", [])}
    for mode in modes:
        n = draws_for(mode, int(p["draws"]))
        for k in range(n):
            base = results[f"{mode}/{k}/baseline"]
            metrics[f"{mode}/{k}/baseline"] = {
                "completion_s": base["completion_s"], "penalty": 1.0,
                "pace": fluid.completion_s / base["completion_s"],
                "lost_packets": base["summary"]["lost_packets"],
                "start_skew_s": base["summary"]["start_skew_s"]}
            for case in ("lane", "spine"):
                m = _failure_metrics(results[f"{mode}/{k}/{case}"], base, plan, flows, fluid,
                                     failures[case], float(p["recover_pct"]))
                metrics[f"{mode}/{k}/{case}"] = {
                    **m, "completion_s": results[f"{mode}/{k}/{case}"]["completion_s"],
                    "start_skew_s": results[f"{mode}/{k}/{case}"]["summary"]["start_skew_s"]}
        base_model = [m.completion_s for m in _model_baselines(plan, flows, mode, nd)]
        runs = [metrics[f"{mode}/{k}/baseline"] for k in range(n)]
        agg[f"{mode}/baseline"] = {
            "mode": mode, "case": "baseline", "draws": n,
            "completion_s": distribution([r["completion_s"] for r in runs]),
            "model_s": distribution(base_model),
            "pace": distribution([r["pace"] for r in runs]),
            "lost": sum(r["lost_packets"] for r in runs),
            "start_skew_s": max(r["start_skew_s"] for r in runs), "margin": margin.get(mode),
            "plane": _plane(results, mode, n, "baseline")}
        for case in ("lane", "spine"):
            runs = [metrics[f"{mode}/{k}/{case}"] for k in range(n)]
            frac = distribution([r["cut_s"] / metrics[f"{mode}/{k}/baseline"]["completion_s"]
                                 for k, r in enumerate(runs)])["median"]
            model = model_penalties(plan, flows, mode, failures[case], frac, nd)
            agg[f"{mode}/{case}"] = {
                "mode": mode, "case": case, "draws": n, "cut_fraction": frac,
                **{key: distribution([r[key] for r in runs]) for key in (
                    "completion_s", "penalty", "ideal_penalty", "recovery_s", "cut_s",
                    "pre_mbps", "post_ideal_mbps", "dip_mbps", "reroute_ms", "probe_gap_ms",
                    "cut_action_ms")},
                "model_penalty": distribution([x["penalty"] for x in model]),
                "model_s": distribution([x["failed_s"] for x in model]),
                "recovered": sum(1 for r in runs if r["recovery_s"] is not None),
                "lost": sum(r["lost_packets"] for r in runs),
                "start_skew_s": max(r["start_skew_s"] for r in runs),
                "margin": margin.get(mode), "plane": _plane(results, mode, n, case)}
    for mode in modes:  # what each failure did to whole messages (no retransmission)
        for case in ("baseline", "lane", "spine"):
            rs = [results[f"{mode}/{k}/{case}"] for k in range(agg[f"{mode}/{case}"]["draws"])]
            agg[f"{mode}/{case}"]["incomplete"] = distribution(
                [r.get("incomplete_messages", 0) / max(r.get("messages", 0), 1) for r in rs])
    for key, a in agg.items():
        _row(run, a)
        _summary_entry(run, key, a)
    run.save_json("metrics.json", {"runs": metrics, "cases": agg})
    run.summary.update({"fluid_baseline_s": fluid.completion_s, "scale": float(p["scale"]),
                        "lane": list(lane)})
    _plot_timeline(run, results, metrics, modes)
    _plot_completion(run, agg, modes)
    _write_report(run, plan, flows, fluid, failures, agg, lane)


def _plane(results: dict[str, dict[str, Any]], mode: str, n: int, case: str) -> str | None:
    """The traffic plane of a mode's runs of one case (the last draw's)."""
    return results[f"{mode}/{n - 1}/{case}"]["summary"].get("plane")


def _ratio(a: dict[str, Any], measured: str, ideal: str) -> float | None:
    m, i = a[measured]["median"], a[ideal]["median"]
    return m / i if m is not None and i else None


def _row(run: Run, a: dict[str, Any]) -> None:
    """One summary.csv row per mode and case: medians and quartiles over the draws."""
    c = a["completion_s"]
    row: dict[str, Any] = {"mode": a["mode"], "case": a["case"], "draws": a["draws"],
                           "completion_s": _r(c["median"]), "p25_s": _r(c["p25"]),
                           "p75_s": _r(c["p75"]), "model_s": _r(a["model_s"]["median"])}
    if a["case"] == "baseline":
        row.update(ratio=_r(_ratio(a, "completion_s", "model_s")), penalty=1.0,
                   ideal_penalty=1.0, pace=_r(a["pace"]["median"]), lost_packets=a["lost"])
    else:
        pen = a["penalty"]
        row.update(ratio=_r(_ratio(a, "penalty", "model_penalty")),
                   penalty=_r(pen["median"]), penalty_p25=_r(pen["p25"]),
                   penalty_p75=_r(pen["p75"]), ideal_penalty=_r(a["model_penalty"]["median"]),
                   ideal_penalty_p25=_r(a["model_penalty"]["p25"]),
                   ideal_penalty_p75=_r(a["model_penalty"]["p75"]),
                   fluid_penalty=_r(a["ideal_penalty"]["median"]),
                   cut_s=_r(a["cut_s"]["median"], 2), cut_ms=_r(a["cut_action_ms"]["median"], 1),
                   recovery_s=_r(a["recovery_s"]["median"]), recovered=a["recovered"],
                   pre_mbps=_r(a["pre_mbps"]["median"], 1),
                   post_ideal_mbps=_r(a["post_ideal_mbps"]["median"], 1),
                   dip_mbps=_r(a["dip_mbps"]["median"], 1),
                   reroute_ms=_r(a["reroute_ms"]["median"], 1),
                   probe_gap_ms=_r(a["probe_gap_ms"]["median"], 1), lost_packets=a["lost"])
    run.row(**row)


def _summary_entry(run: Run, key: str, a: dict[str, Any]) -> None:
    """summary.json: the penalty (failures) or completion (baseline) as measured / ideal."""
    what, ideal = (("completion_s", "model_s") if a["case"] == "baseline"
                   else ("penalty", "model_penalty"))
    m, i = a[what], a[ideal]
    extra = {k: v for k, v in a.items() if k not in (what, ideal, "draws")}
    run.summary[key] = compare(
        m["median"], i["median"],
        quantity="completion (emulated s)" if a["case"] == "baseline" else
        "completion with the failure / baseline completion, same mode",
        policy=a["mode"], draws=a["draws"], median=m["median"], p25=m["p25"], p75=m["p75"],
        values=m["values"], model=i, **extra)
    if a["case"] != "baseline":  # recovery: the fluid model's is 0 s (no ratio)
        r = a["recovery_s"]
        run.summary[f"{key}/recovery_s"] = compare(
            r["median"], 0.0, quantity="recovery time (emulated s)", draws=r["draws"],
            median=r["median"], p25=r["p25"], p75=r["p75"], values=r["values"],
            recovered=a["recovered"], of=a["draws"])


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or v != v else round(v, nd)


def _plot_timeline(run: Run, results: dict[str, dict[str, Any]],
                   metrics: dict[str, dict[str, Any]], modes: list[str]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 2.6 * len(modes)))
    axes = fig.subplots(len(modes), 1, squeeze=False)[:, 0]
    colours = {"baseline": "tab:gray", "lane": "tab:blue", "spine": "tab:red"}
    for ax, mode in zip(axes, modes, strict=True):
        n = draws_for(mode, int(run.params["draws"]))
        for k in range(n):  # every draw; the first solid, the others faint
            for case in CASES:
                r = results[f"{mode}/{k}/{case}"]
                t, mbps = rates(r["samples"], r["start_ns"])
                sel = (t > -0.5) & (t < r["completion_s"] + 0.5)  # not the receivers' wait
                ax.plot(t[sel], mbps[sel], color=colours[case], lw=1.2 if k == 0 else 0.7,
                        alpha=1.0 if k == 0 else 0.4, label=case if k == 0 else None)
                if case != "baseline" and k == 0:
                    m = metrics[f"{mode}/{k}/{case}"]
                    ax.axvline(m["cut_s"], color=colours[case], ls="--", lw=1)
                    ax.hlines(m["post_ideal_mbps"], m["cut_s"], r["completion_s"],
                              color=colours[case], ls=":", lw=1.2)
        ax.set_title(f"{mode}: delivered to the GPUs, {n} draw(s) (solid: the first; dashed: "
                     "failure; dotted: fluid ideal mean rate after it)", fontsize=8)
        ax.set_ylabel("Mb/s (emulated)")
        ax.legend(fontsize=8, loc="lower left")
    axes[-1].set_xlabel("seconds after the common start (emulated)")
    fig.tight_layout()
    run.save_figure(fig, "timeline.png")


def _plot_completion(run: Run, agg: dict[str, dict[str, Any]], modes: list[str]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 3.8))
    ax = fig.add_subplot()
    keys = [f"{m}/{c}" for m in modes for c in ("lane", "spine")]
    colours = {"lane": "tab:blue", "spine": "tab:red"}
    plot_draws(ax, [k.replace("/", "\n") for k in keys],
               [agg[k]["penalty"]["values"] for k in keys],
               [agg[k]["model_penalty"]["values"] for k in keys],
               colours=[colours[k.split("/")[1]] for k in keys])
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    ax.set_ylabel("completion / baseline (same mode)")
    ax.set_title(f"completion penalty: emulated draws (dots), flow model with the mode's "
                 f"policy over {run.params['model_draws']} hash draws (box; tick: one answer)",
                 fontsize=8)
    run.save_figure(fig, "completion.png")


def _bench_failover() -> str:
    """The lab's own failover benchmark, quoted from results/bench/controller.json if present."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "results", "bench", "controller.json")
    try:
        with open(path) as f:
            fo = json.load(f)["failover"]
        return (f"the lab's failover benchmark (results/bench/controller.json, idle fabric): "
                f"{1e3 * fo['leaf-uplink']['outage_s']['median']:.0f} ms (leaf uplink) and "
                f"{1e3 * fo['spine-downlink']['outage_s']['median']:.0f} ms (spine side) median "
                "data-plane outage")
    except (OSError, KeyError, ValueError, TypeError):
        return "the lab's failover benchmark (make bench) measured ~20 ms median outages"


def _write_report(run: Run, plan: WiringPlan, flows: list[FlowSpec], fluid: Any,
                  failures: dict[str, list[Link]], agg: dict[str, dict[str, Any]],
                  lane: tuple[str, str]) -> None:
    p = run.params
    modes = list(p["modes"])
    real = real_time_factor(plan)
    nic = min(plan.host_link_mbps().values())
    finder = PathFinder(plan)
    uplinks = len(finder.uplinks(lane[0]))
    spines = sum(1 for s in plan.switches if s.tier == "spine")
    rep = run.report
    draws = ", ".join(f"{m} {draws_for(m, int(p['draws']))}" for m in modes)
    rep.section("Setup", (
        f"astral3, {p['servers']} servers x {p['gpus_per_server']} GPUs ({len(plan.hosts)} GPUs, "
        f"{len(plan.switches)} switches, {spines} spines; each leaf has {uplinks} uplink lanes). "
        f"Scale {p['scale']:g}: a 400G NIC is {nic:g} Mb/s, a 200G lane "
        f"{nic / 2:g} Mb/s; time at real rates = emulated time x {real:g}. Traffic: "
        f"{len(flows)} flows, an equal-split All-to-All through the NICs "
        f"({sum(f.bytes for f in flows) / 1e6:.1f} MB; fluid model {fluid.completion_s:.2f} s "
        "on the frame bytes the shapers count). "
        f"Failures at {p['cut_fraction']:g} x the mode's baseline completion: the lane "
        f"{lane[0]}-{lane[1]} (1 of {uplinks} uplink lanes of {lane[0]}), then the whole "
        f"{lane[1]} (1 of {spines} spines: {len(failures['spine'])} lanes), both restored only "
        "after the run (all ends of a failure in one `ip -batch`; cut_ms in the table). "
        f"**Draws** (baseline, lane and spine runs each): {draws}; draw k shifts every QP by "
        f"k x {DRAW_QP_STRIDE} (new UDP source ports: another ECMP hash draw, and another "
        "starting placement for adaptive); planned placement is deterministic. The flow model "
        f"runs with each mode's policy over {p['model_draws']} hash draws (one for planned). "
        f"Recovery = back to {100 - float(p['recover_pct']):g}% of min(post-"
        "failure fluid ideal, pre-failure level) for 3 samples (module docstring). Replayed "
        "packets lost at the cut are not retransmitted (the replay agents, like RDMA without "
        "go-back-N, do not), so completion is the last byte that arrived."))

    def dt(d: dict[str, Any], unit: str = "", nd: int = 2) -> str:
        if not d.get("draws"):
            return "-"
        if d["draws"] == 1:
            return f"{d['median']:.{nd}f}{unit}"
        return fmt_distribution(d, unit, nd)

    table = []
    for a in agg.values():
        base = a["case"] == "baseline"
        table.append({
            "mode": a["mode"], "case": a["case"], "draws": a["draws"],
            "completion (s)": dt(a["completion_s"]), "model (s)": dt(a["model_s"]),
            "penalty": "1" if base else dt(a["penalty"]),
            "ideal penalty (model)": "1" if base else dt(a["model_penalty"]),
            "ratio": _ratio(a, "completion_s", "model_s") if base
            else _ratio(a, "penalty", "model_penalty"),
            "fluid penalty": "-" if base else dt(a["ideal_penalty"]),
            "recovery (s)": "-" if base else f"{dt(a['recovery_s'])} ({a['recovered']}/"
                                             f"{a['draws']} recovered)",
            "reroute (ms)": "-" if base else dt(a["reroute_ms"], "", 1),
            "probe gap (ms)": "-" if base else dt(a["probe_gap_ms"], "", 0),
            "lost": a["lost"]})
    rep.table(table)
    rep.text("*penalty*: completion with the failure / the same mode's baseline completion "
             "(per draw), median [p25-p75] over the draws; *ideal penalty*: the flow model's "
             "penalty for the same flows, failure instant and links under the mode's own "
             "policy (ecmp: its hash over many draws; planned: re-planned on the failed "
             "fabric; adaptive: its final paths), median [p25-p75]; *ratio* = measured median "
             "/ ideal median (baseline rows: completion / model completion); *fluid "
             "penalty*: the same with ECMP split evenly (the perfect-rebalancing reference). "
             "Per-run numbers: metrics.json; summary.csv has the medians and quartiles.")
    rep.image("timeline.png", "Aggregate delivered throughput per mode, every draw (dashed: "
              "the failure; dotted: the fluid ideal mean rate for the rest of the job)")
    rep.image("completion.png", "Completion penalty per mode and failure: emulated draws "
              "beside the flow model's draws under the same policy")
    rep.section("Findings")

    def per(case: str, key: str, unit: str = "", nd: int = 2) -> str:
        return ", ".join(f"{m} {dt(agg[f'{m}/{case}'][key], unit, nd)}" for m in modes)

    rep.finding(
        "Completion-time penalty",
        measured=f"lane cut: {per('lane', 'penalty')}; spine down: {per('spine', 'penalty')}",
        ideal=(f"flow model, each mode's policy: lane {per('lane', 'model_penalty')}; spine "
               f"{per('spine', 'model_penalty')}; fluid (perfect rebalancing): lane "
               f"{per('lane', 'ideal_penalty')}, spine {per('spine', 'ideal_penalty')} "
               f"(capacity lost: 1/{uplinks} of one leaf's uplinks, or 1/{spines} of every "
               "leaf's)"),
        published=("no published completion penalty for a lane or spine loss in Astral 3.0 "
                   "was found in the stored sources"),
        why=penalty_why(agg, modes, uplinks))
    rep.finding(
        "Recovery time",
        measured=(f"lane: {per('lane', 'recovery_s', ' s')}; spine: "
                  f"{per('spine', 'recovery_s', ' s')} (emulated; over the draws that got back "
                  "before the tail: "
                  + ", ".join(f"{m} {agg[f'{m}/{c}']['recovered']}/{agg[f'{m}/{c}']['draws']} "
                              f"{c}" for m in modes for c in ("lane", "spine")) + ")"),
        ideal="0 s: the fluid model moves traffic at the instant of the failure",
        published=PUBLISHED_FAILOVER,
        why=recovery_why(agg, modes, spines, real))
    rep.finding(
        "Control plane and data-plane gap",
        measured=(f"controller reroute (port status to last barrier): lane "
                  f"{per('lane', 'reroute_ms', ' ms', 1)}, spine "
                  f"{per('spine', 'reroute_ms', ' ms', 1)}; probe silence at the cut: lane "
                  f"{per('lane', 'probe_gap_ms', ' ms', 0)}, spine "
                  f"{per('spine', 'probe_gap_ms', ' ms', 0)}"),
        ideal="0 ms (a hop that dies is skipped at once)",
        published=f"{_bench_failover()}; {PUBLISHED_FAILOVER}",
        why=("The sender's leaf skips a dead uplink in its own select/fast-failover group "
             "with no controller; other leaves keep sending toward the dead spine port "
             "until the controller's reroute reaches them. Under load the probe's silence "
             "also includes queueing behind the All-to-All on the surviving, now busier "
             f"lanes (each port queues up to {LOSSLESS_QUEUE_S:g} s of its rate: the lab's "
             "lossless emulation), "
             "so it can be longer than the idle-fabric benchmark. "
             "The probe (8 UDP ports, 40 packets/s each) follows the ECMP routes in every "
             "mode, and testbed.shell.probe keeps only each port's longest silence: '-' means no "
             "port's longest silence began at the cut (none crossed the failed link, or a "
             "longer queueing gap happened elsewhere)."))
    host = [m for m in modes if policies.get(m).entropy != "qp" or policies.get(m).expands]
    if host:
        msg = MESSAGE_BYTES
        rep.finding(
            "Whole messages under host-side balancing",
            measured="; ".join(
                f"{m}: messages incomplete (lost packets, never retransmitted) baseline "
                f"{dt(agg[f'{m}/baseline']['incomplete'], '', 3)}, lane "
                f"{dt(agg[f'{m}/lane']['incomplete'], '', 3)}, spine "
                f"{dt(agg[f'{m}/spine']['incomplete'], '', 3)} (fraction of messages)"
                for m in ["ecmp", *host] if f"{m}/lane" in agg),
            ideal="0: the flow model moves bytes, not packets, and loses none",
            published="; ".join(f"{m}: {policies.get(m).published} ({policies.get(m).source})"
                                for m in host),
            why=(f"A message missing one packet never completes (the replay does not "
                 f"retransmit), and the packets lost are those queued on the dead link at the "
                 f"cut plus those sent into it before each switch stopped using it: the leaf "
                 f"skips its own dead port at once, the far leaves keep sending toward the dead "
                 f"spine port until the controller's reroute. A hashed QP loses only if it used "
                 f"that lane; a sprayed {msg // 1024} KiB message "
                 f"({-(-msg // run.pmtu)} packets) has packets on every lane, so "
                 f"every message in flight in that window is exposed. "
                 + _host_loss_verdict(agg, host) + " "
                 + " ".join(f"{m}: {policies.get(m).differs}." for m in host
                            if policies.get(m).differs)))


def _caveats(a: dict[str, Any]) -> list[str]:
    return pace_caveats(margin=a.get("margin"), plane=a.get("plane"), lost=a["lost"],
                        start_skew_s=a["start_skew_s"],
                        span_s=a["completion_s"]["median"])


def penalty_why(agg: dict[str, dict[str, Any]], modes: list[str], uplinks: int) -> str:
    """Why the measured penalties differ from the model's, from the runs' own evidence."""
    why = ("The fluid penalty is what losing the capacity costs if traffic rebalanced "
           "perfectly and at once: a leaf's surviving lanes carry its cross-leaf bytes. The "
           "flat All-to-All loads a leaf's uplinks at (G-2)/(G-1) of its NICs' rate (one "
           f"peer per GPU shares the leaf), so with one lane of {uplinks} gone the leaf's "
           "uplinks bind and its flows finish late: the cost lands in the job's tail, on the "
           "GPUs under the failed lane (see the timeline). The model under the mode's own "
           "policy adds what that policy does with the survivors: hash ECMP re-spreads the "
           "dead lane's flows unevenly, so its penalty is a spread over hash draws (and its "
           "baseline is already above the fluid one; a hash over fewer ports re-spreads "
           "every flow, so a draw can even collide less after the cut than before it, a "
           "penalty below 1); planned mode re-places every flow on the failed fabric. ")
    pace = {m: _ratio(agg[f"{m}/baseline"], "completion_s", "model_s") for m in modes}
    slow = [m for m, r in pace.items() if r is not None and r > 1.05]
    paces = ", ".join(f"{m} {_fmt(r)}x" for m, r in pace.items())
    if slow:
        why += (f"The baselines took {paces} the model's time under the same policy "
                f"(medians): {', '.join(slow)} ran slower than its model before the failure, "
                "so a lost lane binds less there than in the model, and a penalty below the "
                "ideal there is that slack, not a faster fabric")
        caveats = sorted({c for m in slow for c in _caveats(agg[f"{m}/baseline"])})
        why += (" (in this run " + "; ".join(caveats) + "). " if caveats else
                "; the runs' margins, plane, losses and start skew show nothing that "
                "explains the slack. ")
    else:
        why += (f"The baselines ran at their model's pace ({paces}, medians), so no slack "
                "before the failure hides its cost. ")
    if "planned" in modes:
        why += ("The controller's planned mode re-places only the flows that crossed the "
                "dead link (onto the least loaded lanes), not all of them, as the model "
                "does. ")
    if "adaptive" in modes:
        why += "Adaptive mode moves flows one poll (1 s) at a time. "
    why += ("Packets queued on the failed ports are lost and not retransmitted "
            "(lost_packets), which shortens, not lengthens, the measured time.")
    gaps = []
    for key, a in agg.items():
        base = a["case"] == "baseline"
        ratio = _ratio(a, "completion_s", "model_s") if base else \
            _ratio(a, "penalty", "model_penalty")
        if in_band(ratio):
            continue
        what = "completion" if base else "penalty"
        m = a["completion_s" if base else "penalty"]
        i = a["model_s" if base else "model_penalty"]
        text = f"**{key}: {what} ratio {_fmt(ratio)}, outside 0.7-1.3.** "
        caveats = _caveats(a)
        if caveats:
            text += "In this run " + "; ".join(caveats) + "."
        else:
            text += (f"Fidelity margin {margin_text(a.get('margin'))}, start skew up to "
                     f"{a['start_skew_s']:.3f} s, {a['lost']} packets lost: nothing in the "
                     "run itself.")
        if i["draws"] > 1 and m["draws"] > 1:
            chance = median_chance(i["values"], m["median"], m["draws"])
            text += (f" The model's own draws give a median of {m['draws']} this far from "
                     f"theirs in {100 * chance:.0f}% of samples"
                     + (", so the draws' luck is a candidate." if chance >= 0.05 else
                        ": not luck."))
        gaps.append(text)
    return why + (" " + " ".join(gaps) if gaps else "")


def recovery_why(agg: dict[str, dict[str, Any]], modes: list[str], spines: int,
                 real: float) -> str:
    """What the recovery times show: how soon the aggregate got back, per failure."""
    def back(case: str) -> tuple[int, int, float]:
        got = sum(agg[f"{m}/{case}"]["recovered"] for m in modes)
        of = sum(agg[f"{m}/{case}"]["draws"] for m in modes)
        worst = max((agg[f"{m}/{case}"]["recovery_s"]["median"] or 0.0) for m in modes)
        return got, of, worst

    why = ("Recovery is a throughput measure at the sampling resolution. The data plane "
           "re-routes in tens of ms (next finding); what does not come back is the "
           "capacity, and the flows behind the failed lane finish late (the penalty). ")
    got, of, worst = back("lane")
    if got == of:
        why += (f"After a lane cut every run got back to the target (median recovery at "
                f"most {worst:.2f} s): most flows never used that lane. ")
    else:
        why += (f"After a lane cut {got} of {of} runs got back to the target before the "
                "tail. ")
    got, of, worst = back("spine")
    why += (f"A whole spine takes 1/{spines} of every leaf's uplinks, and the rate drops to "
            "about what the surviving lanes carry; ")
    if got == of:
        why += f"every run got back to the target (median at most {worst:.2f} s). "
    else:
        why += (f"{of - got} of {of} runs stayed under the target: the target is a fluid "
                "mean that assumes the leaf-local flows pick up the slack (max-min, as "
                "congestion control would), while the replay's senders keep their "
                "round-robin pace and let packets queue in the lossless fabric. ")
    why += (f"At real rates every emulated second is {real * 1e3:g} ms, while the control "
            "plane's reaction time is not scaled: at full speed the same tens of ms of "
            f"outage would fall on a job {1 / real:g}x shorter, a relatively larger hit.")
    return why


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}"


def _host_loss_verdict(agg: dict[str, dict[str, Any]], host: list[str]) -> str:
    """What the measured incomplete fractions say, sprayed against hashed, lane case."""
    if "ecmp/lane" not in agg:
        return ""
    e = agg["ecmp/lane"]["incomplete"]["median"] or 0.0
    out = []
    for m in host:
        x = agg[f"{m}/lane"]["incomplete"]["median"] or 0.0
        word = ("more than" if x > 1.5 * e + 1e-9 else "fewer than" if x < e / 1.5 - 1e-9
                else "about as many as")
        out.append(f"Measured with a lane cut: {m} lost whole messages at {x:.3f} of its "
                   f"messages, {word} ECMP ({e:.3f}).")
    return " ".join(out)
