"""The link-failure scenario's results: from the runs' records to summary.csv,
summary.json, metrics.json, the two figures and REPORT.md.

``analyse`` takes every run's metrics and their distributions over the draws beside the
flow model's (``scenarios.link_failure_metrics.aggregate``); ``_row`` and ``_summary_entry``
write them out, ``_plot_timeline`` and ``_plot_completion`` draw them and ``_write_report``
explains them, in the words of ``scenarios/templates/link_failure.md``.
``scenarios.experiments.link_failure`` (the parameters, the traffic and the runs on a
fabric) calls ``analyse`` once every run is done.
"""

from __future__ import annotations

import json
import os
from typing import Any

from controllers import policies
from controllers.paths import PathFinder
from scenarios.base import Run, servers_of
from scenarios.common import (
    DRAW_QP_STRIDE,
    compare,
    fmt_distribution,
    in_band,
    median_chance,
    plot_draws,
    real_time_factor,
)
from scenarios.findings import caveat_text, margin_text, pace_caveats
from scenarios.link_failure_metrics import CASES, MESSAGE_BYTES, aggregate, draws_for, rates
from scenarios.prose import Prose
from testbed.shaping import LOSSLESS_QUEUE_S
from traffic.kernels import FlowSpec
from vocab.plan import Link, WiringPlan

WORDS = Prose("link_failure")  # the report's prose: scenarios/templates/link_failure.md
PUBLISHED_FAILOVER = WORDS("published_failover")


def analyse(run: Run, plan: WiringPlan, flows: list[FlowSpec], fluid: Any,
            failures: dict[str, list[Link]], results: dict[str, dict[str, Any]],
            lane: tuple[str, str]) -> None:
    """Per mode and case: the draws' metrics, their distributions, the model's beside them,
    written out as rows, summary, metrics.json, the figures and REPORT.md."""
    p = run.params
    modes = list(p["modes"])
    margin = {v["label"]: v["margin"] for v in run.config.get("fidelity", [])}
    metrics, agg = aggregate(p, margin, plan, flows, fluid, failures, results)
    for key, a in agg.items():
        _row(run, a)
        _summary_entry(run, key, a)
    run.save_json("metrics.json", {"runs": metrics, "cases": agg})
    run.summary.update({"fluid_baseline_s": fluid.completion_s, "scale": float(p["scale"]),
                        "lane": list(lane)})
    _plot_timeline(run, results, metrics, modes)
    _plot_completion(run, agg, modes)
    _write_report(run, plan, flows, fluid, failures, agg, lane)


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
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
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
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
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


def bench_failover() -> str:
    """The lab's own failover benchmark, quoted from results/bench/controller.json if present
    (a seam: a report built in a test quotes a fixed sentence instead of this machine's file)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "results", "bench", "controller.json")
    try:
        with open(path) as f:
            fo = json.load(f)["failover"]
        return WORDS("bench_found", leaf_ms=1e3 * fo["leaf-uplink"]["outage_s"]["median"],
                     spine_ms=1e3 * fo["spine-downlink"]["outage_s"]["median"])
    except (OSError, KeyError, ValueError, TypeError):
        return WORDS("bench_missing")


def _dt(d: dict[str, Any], unit: str = "", nd: int = 2) -> str:
    """A distribution over the draws as the report shows it ('-' for none, a value for one)."""
    if not d.get("draws"):
        return "-"
    if d["draws"] == 1:
        return f"{d['median']:.{nd}f}{unit}"
    return fmt_distribution(d, unit, nd)


def _write_report(run: Run, plan: WiringPlan, flows: list[FlowSpec], fluid: Any,
                  failures: dict[str, list[Link]], agg: dict[str, dict[str, Any]],
                  lane: tuple[str, str]) -> None:
    p = run.params
    modes = list(p["modes"])
    real = real_time_factor(plan)
    nic = min(plan.host_link_mbps().values())
    uplinks = len(PathFinder(plan).uplinks(lane[0]))
    spines = sum(1 for s in plan.switches if s.tier == "spine")
    rep = run.report
    rep.section("Setup", WORDS(
        "setup", servers=servers_of(p), gpus_per_server=p["gpus_per_server"],
        gpus=len(plan.hosts), switches=len(plan.switches), spines=spines, uplinks=uplinks,
        scale=p["scale"], nic=nic, lane_mbps=nic / 2, real=real, flows=len(flows),
        mbytes=sum(f.bytes for f in flows) / 1e6, fluid_s=fluid.completion_s,
        cut_fraction=p["cut_fraction"], leaf=lane[0], spine=lane[1],
        spine_lanes=len(failures["spine"]),
        draws=", ".join(f"{m} {draws_for(m, int(p['draws']))}" for m in modes),
        stride=DRAW_QP_STRIDE, model_draws=p["model_draws"],
        recover_to=100 - float(p["recover_pct"])))
    rep.table([_table_row(a) for a in agg.values()])
    rep.text(WORDS("table_note"))
    rep.image("timeline.png", WORDS("timeline_caption"))
    rep.image("completion.png", WORDS("completion_caption"))
    rep.section("Findings")

    def per(case: str, key: str, unit: str = "", nd: int = 2) -> str:
        return ", ".join(f"{m} {_dt(agg[f'{m}/{case}'][key], unit, nd)}" for m in modes)

    rep.finding(
        "Completion-time penalty",
        measured=WORDS("penalty_measured", lane=per("lane", "penalty"),
                       spine=per("spine", "penalty")),
        ideal=WORDS("penalty_ideal", lane_model=per("lane", "model_penalty"),
                    spine_model=per("spine", "model_penalty"),
                    lane_fluid=per("lane", "ideal_penalty"),
                    spine_fluid=per("spine", "ideal_penalty"), uplinks=uplinks, spines=spines),
        published=WORDS("penalty_published"),
        why=penalty_why(agg, modes, uplinks))
    rep.finding(
        "Recovery time",
        measured=WORDS("recovery_measured", lane=per("lane", "recovery_s", " s"),
                       spine=per("spine", "recovery_s", " s"), recovered=", ".join(
                           f"{m} {agg[f'{m}/{c}']['recovered']}/{agg[f'{m}/{c}']['draws']} {c}"
                           for m in modes for c in ("lane", "spine"))),
        ideal=WORDS("recovery_ideal"),
        published=PUBLISHED_FAILOVER,
        why=recovery_why(agg, modes, spines, real))
    rep.finding(
        "Control plane and data-plane gap",
        measured=WORDS("gap_measured", lane_reroute=per("lane", "reroute_ms", " ms", 1),
                       spine_reroute=per("spine", "reroute_ms", " ms", 1),
                       lane_gap=per("lane", "probe_gap_ms", " ms", 0),
                       spine_gap=per("spine", "probe_gap_ms", " ms", 0)),
        ideal=WORDS("gap_ideal"),
        published=WORDS("gap_published", bench=bench_failover(),
                        published_failover=PUBLISHED_FAILOVER),
        why=WORDS("gap_why", queue_s=LOSSLESS_QUEUE_S))
    pols = {m: policies.POLICIES.get(m) for m in modes}
    host = [m for m in modes if pols[m].entropy != "qp" or pols[m].expands]
    if host:
        rep.finding(
            "Whole messages under host-side balancing",
            measured="; ".join(
                WORDS("host_measured", mode=m,
                      **{c: _dt(agg[f"{m}/{c}"]["incomplete"], "", 3) for c in CASES})
                for m in ["ecmp", *host] if f"{m}/lane" in agg),
            ideal=WORDS("host_ideal"),
            published="; ".join(f"{m}: {pols[m].published} ({pols[m].source})"
                                for m in host),
            why=(WORDS("host_why", kib=MESSAGE_BYTES // 1024,
                       packets=-(-MESSAGE_BYTES // run.pmtu))
                 + " " + _host_loss_verdict(agg, host) + " "
                 + " ".join(f"{m}: {pols[m].differs}." for m in host if pols[m].differs)))


def _table_row(a: dict[str, Any]) -> dict[str, Any]:
    """One mode and case in the report's table."""
    base = a["case"] == "baseline"
    return {
        "mode": a["mode"], "case": a["case"], "draws": a["draws"],
        "completion (s)": _dt(a["completion_s"]), "model (s)": _dt(a["model_s"]),
        "penalty": "1" if base else _dt(a["penalty"]),
        "ideal penalty (model)": "1" if base else _dt(a["model_penalty"]),
        "ratio": _ratio(a, "completion_s", "model_s") if base
        else _ratio(a, "penalty", "model_penalty"),
        "fluid penalty": "-" if base else _dt(a["ideal_penalty"]),
        "recovery (s)": "-" if base else f"{_dt(a['recovery_s'])} ({a['recovered']}/"
                                         f"{a['draws']} recovered)",
        "reroute (ms)": "-" if base else _dt(a["reroute_ms"], "", 1),
        "probe gap (ms)": "-" if base else _dt(a["probe_gap_ms"], "", 0),
        "lost": a["lost"]}


def _caveats(a: dict[str, Any]) -> list[str]:
    return pace_caveats(margin=a.get("margin"), plane=a.get("plane"), lost=a["lost"],
                        start_skew_s=a["start_skew_s"],
                        span_s=a["completion_s"]["median"])


def penalty_why(agg: dict[str, dict[str, Any]], modes: list[str], uplinks: int) -> str:
    """Why the measured penalties differ from the model's, from the runs' own evidence."""
    why = WORDS("penalty_why", uplinks=uplinks) + " "
    pace = {m: _ratio(agg[f"{m}/baseline"], "completion_s", "model_s") for m in modes}
    slow = [m for m, r in pace.items() if r is not None and r > 1.05]
    paces = ", ".join(f"{m} {_fmt(r)}x" for m, r in pace.items())
    if slow:
        why += WORDS("penalty_slow", paces=paces, slow=", ".join(slow))
        caveats = sorted({c for m in slow for c in _caveats(agg[f"{m}/baseline"])})
        why += (" " + WORDS("penalty_slow_caveats", caveats="; ".join(caveats)) if caveats
                else WORDS("penalty_slow_unexplained")) + " "
    else:
        why += WORDS("penalty_even", paces=paces) + " "
    if "planned" in modes:
        why += WORDS("penalty_planned") + " "
    if "adaptive" in modes:
        why += WORDS("penalty_adaptive") + " "
    why += WORDS("penalty_lost")
    gaps = []
    for key, a in agg.items():
        base = a["case"] == "baseline"
        ratio = _ratio(a, "completion_s", "model_s") if base else \
            _ratio(a, "penalty", "model_penalty")
        if in_band(ratio):
            continue
        m = a["completion_s" if base else "penalty"]
        i = a["model_s" if base else "model_penalty"]
        text = WORDS("gap_head", key=key, what="completion" if base else "penalty",
                     ratio=_fmt(ratio)) + " "
        caveats = _caveats(a)
        if caveats:
            text += caveat_text(caveats)
        else:
            text += WORDS("gap_nothing", margin=margin_text(a.get("margin")),
                          skew=a["start_skew_s"], lost=a["lost"])
        if i["draws"] > 1 and m["draws"] > 1:
            chance = median_chance(i["values"], m["median"], m["draws"])
            text += " " + WORDS("gap_chance", draws=m["draws"], pct=100 * chance) + WORDS(
                "gap_luck" if chance >= 0.05 else "gap_not_luck")
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

    got, of, worst = back("lane")
    lane = (WORDS("recovery_lane_all", worst=worst) if got == of
            else WORDS("recovery_lane_some", got=got, of=of))
    got, of, worst = back("spine")
    spine = (WORDS("recovery_spine_all", worst=worst) if got == of
             else WORDS("recovery_spine_some", stuck=of - got, of=of))
    return " ".join([WORDS("recovery_why"), lane, WORDS("recovery_spine", spines=spines),
                     spine, WORDS("recovery_real", real_ms=real * 1e3, speedup=1 / real)])


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
        out.append(WORDS("host_verdict", mode=m, share=x, word=word, ecmp=e))
    return " ".join(out)
