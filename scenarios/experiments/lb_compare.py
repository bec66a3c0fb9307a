"""``lb-compare``: every load-balancing mode on astral3, switch-side and host-side.

The question: how much does per-flow hashing (ECMP) lose to collisions on a rail fabric,
and do the controller's planned and adaptive modes, or the host-side policies that change
what the switches hash (spray, qp-scaling, flowlet, plb), win it back? Every policy the
controller runs (``controllers/policies/``) is a mode here. Two workloads:

* **permutation**: every GPU sends to one partner under another leaf, over ``qps`` QPs
  (bytes split evenly). With as many QPs per leaf as uplink lanes, a perfect placement puts
  one QP on each lane; a hash puts some on the same lane (balls into bins), and those run
  at half speed while other lanes idle. This is the workload where ECMP hurts most.
* **alltoall**: every GPU sends the same bytes to every other GPU. Many flows per lane,
  so hashing averages out better.

Each workload is sized so its ideal completion (NIC-bound, all lanes perfectly used) is
``seconds`` of emulated time. One fabric serves every mode (the controller switches with
``PUT /lb``).

**Draws.** Where a QP lands under ECMP is a hash of its UDP source port, so one ECMP run is
one sample of a random variable. ECMP, and adaptive (which starts from the hash placement),
are run ``ecmp_samples`` times, each with other QP numbers (other source ports, i.e. other
hash outcomes), and reported as median [p25-p75] over the draws. Planned placement is
deterministic: one run, labelled so.

**Ideal** = the flow model (``testbed.models.flowmodel``) of the same plan, flows and policy:
ECMP over ``model_draws`` seeds of the controller's hash model (OVS's ``dp_hash`` is another
hash, so model and emulation agree in distribution, not draw by draw), adaptive over as many
seeds (its final paths), planned once. ``ratio`` = measured median / ideal median. The
analytic lower bound (NIC and leaf-uplink capacity, flows unsplit) is its own column.
Measured besides completion: bytes on every leaf-spine lane (switch interface counters),
the busiest lane over the mean, bytes per spine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from controllers import policies
from controllers.fabric import MODES
from scenarios.base import (
    DRAWS,
    FABRIC_GPUS,
    GPUS,
    MODEL_DRAWS,
    PHASE_SECONDS,
    QPS,
    SCALE,
    Param,
    Run,
    scenario,
    servers_of,
)
from scenarios.common import (
    DRAW_QP_STRIDE,
    RANDOM_POLICIES,
    all_to_all_flows,
    bytes_per_node,
    compare,
    distribution,
    fmt_distribution,
    in_band,
    leaf_fanout,
    link_counters,
    link_loads,
    median_chance,
    model_draws,
    permutation_flows,
    plot_draws,
    rank_in,
    real_time_factor,
    replay_lead,
    wire_flows,
)
from scenarios.findings import margin_text, pace_caveats
from scenarios.prose import Prose
from testbed.models.bounds import bounds
from testbed.topologies import build_for_gpus
from traffic.shell.replay import replay
from vocab.plan import WiringPlan
from vocab.validate import SEED

ORDER = 30  # where it lists in astral-lab list (vocab.plugins.listing_key)
WORDS = Prose.of_module(__name__)  # the report's prose: scenarios/templates/<this file's name>.md
WORKLOADS = ("permutation", "alltoall")
_COLOURS = {"ecmp": "tab:red", "planned": "tab:blue", "adaptive": "tab:green"}
_PALETTE = ("tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
#: a colour per mode: the shipped ones fixed, any other from the palette by position
COLOURS = {m: _COLOURS.get(m) or _PALETTE[i % len(_PALETTE)] for i, m in enumerate(MODES)}


def _flows(plan: WiringPlan, workload: str, seconds: float, qps: int, seed: int, qp_base: int
           ) -> list[Any]:
    nic_bytes = int(min(plan.host_link_mbps().values()) * 1e6 / 8 * seconds)
    if workload == "permutation":
        return permutation_flows(plan, nic_bytes, qps=qps, seed=seed, qp_base=qp_base)
    n = len(plan.hosts)
    return all_to_all_flows(plan, nic_bytes // (n - 1), qp_base=qp_base)


def lane_skew(rows: list[dict[str, Any]]) -> float | None:
    """Bytes on the busiest leaf-spine lane (either direction) over the mean lane."""
    lane = [r["bytes"] for r in rows if r["tier"] == "leaf-spine"]
    mean = sum(lane) / len(lane) if lane else 0
    return max(lane) / mean if mean else None


def model_lane_skew(result: Any) -> float | None:
    """The same quantity in a flow-model result (its leaf->spine and spine->leaf tiers)."""
    tiers = [result.tiers[t] for t in ("leaf->spine", "spine->leaf") if t in result.tiers]
    links = sum(t["links"] for t in tiers)
    total = sum(t["total_bytes"] for t in tiers)
    if not links or not total:
        return None
    return max(t["max_bytes"] for t in tiers) / (total / links)


def draws_for(mode: str, samples: int) -> int:
    """Emulated runs of a mode: one per hash draw where the mode's paths depend on it."""
    return max(1, int(samples)) if mode in RANDOM_POLICIES else 1


@scenario(
    f"every load-balancing mode ({', '.join(MODES)}) on astral3: completion, "
    "lane load, spines",
    Param("gpus", 16, "GPUs in all (at most 64 servers of --gpus-per-server)", quick=8,
          rule=FABRIC_GPUS),
    Param("gpus_per_server", 4, "GPUs (NICs, rails) per server", rule=GPUS),
    Param("scale", 2e-5, "emulated rate = real rate x scale (2e-5: a 400G NIC is 8 Mb/s)",
          rule=SCALE),
    Param("modes", list(MODES), "load-balancing modes to compare", quick=["ecmp", "planned"],
          choices=MODES),
    Param("workloads", list(WORKLOADS), "workloads", choices=WORKLOADS),
    Param("seconds", 6.0, "ideal completion time of each workload (emulated s)", quick=1.5,
          rule=PHASE_SECONDS),
    Param("qps", 2, "QPs per GPU pair in the permutation", rule=QPS),
    Param("ecmp_samples", 5, "emulated ECMP (and adaptive) runs, each with other UDP source "
          "ports (hash draws)", quick=3, rule=DRAWS),
    Param("model_draws", 200, "flow-model hash draws beside them (seeds of its hash)",
          rule=MODEL_DRAWS),
    Param("seed", 1, "permutation seed", rule=SEED),
    fabrics=lambda p: {"astral3": build_for_gpus("astral3", p["gpus"], p["gpus_per_server"],
                                                 scale=p["scale"])},
)
def lb_compare(run: Run) -> None:
    """See the module docstring."""
    p = run.params
    if p["ecmp_samples"] < 1 or p["model_draws"] < 1:
        raise ValueError("--ecmp-samples and --model-draws must be >= 1")
    plan = run.fabric("astral3")
    results: dict[str, dict[str, Any]] = {}
    raw: list[dict[str, Any]] = []
    with run.lab(plan, label="astral3", lb="ecmp") as lab:
        client = lab.client()
        for workload in p["workloads"]:
            base = _flows(plan, workload, p["seconds"], p["qps"], p["seed"], 0)
            bound = bounds(plan, wire_flows(base), unit="mbps")  # what the shapers count
            for mode in p["modes"]:
                client.set_lb(mode)
                lab.wait_converged()
                key = f"{workload}/{mode}"
                margin = run.guard(lab, base, key)["margin"]
                n = draws_for(mode, p["ecmp_samples"])
                per_draw = []
                for k in range(n):
                    flows = _flows(plan, workload, p["seconds"], p["qps"], p["seed"],
                                   qp_base=DRAW_QP_STRIDE * k)
                    before = link_counters(plan)
                    res = replay(lab, flows, label=f"{key} {k + 1}/{n}" if n > 1 else key,
                                 lead_s=replay_lead(flows))
                    t = res.job_completion_s
                    loads = link_loads(plan, before, link_counters(plan), t)
                    # adaptive starts from the controller's hash model (seed 0) on exactly
                    # these 5-tuples: the model's answer for this draw; ECMP's data-plane
                    # hash (OVS dp_hash) has no per-draw counterpart
                    exact = None
                    if policies.POLICIES.get(mode).pins:
                        exact = model_draws(plan, flows, mode, 1)[0]
                    per_draw.append({"draw": k, "completion_s": t, "loads": loads,
                                     "lane_skew": lane_skew(loads), "lost": res.lost_packets,
                                     "host": host_effects(res),
                                     "start_skew_s": res.start_skew_s, "plane": res.plane,
                                     "model_s": exact.completion_s if exact else None,
                                     "sports": [min(f.sport for f in flows),
                                                max(f.sport for f in flows)]})
                    raw.append({"key": key, "draw": k, "summary": res.summary(),
                                "flows": res.flows, "messages": res.messages, "links": loads,
                                "model": exact.to_dict(per_flow_limit=0) if exact else None,
                                "bounds": bound})
                    run.stage(f"{key} draw {k + 1}/{n}: {t:.2f} s (bound "
                              f"{bound['unsplit']:.2f} s)")
                models = model_draws(plan, base, mode, p["model_draws"])
                hashed = not policies.POLICIES.get(mode).pins  # the switches hash: beside its mean
                fluid = model_draws(plan, base, "ecmp-fluid", 1)[0] if hashed else None
                results[key] = _summarise(workload, mode, per_draw, models, fluid, bound,
                                          margin)
                _row(run, results[key])
    run.save_json("runs.json", raw)
    run.save_json("draws.json", {k: _without_loads(v) for k, v in results.items()})
    _plots(run, results)
    _report(run, plan, results)
    _summary(run, results)


def _summarise(workload: str, mode: str, per_draw: list[dict[str, Any]], models: list[Any],
               fluid: Any, bound: dict[str, float], margin: float) -> dict[str, Any]:
    """One (workload, mode): the emulated draws, the model's draws, the bound."""
    model_t = [m.completion_s for m in models]
    model_skew = [s for s in (model_lane_skew(m) for m in models) if s is not None]
    return {
        "workload": workload, "mode": mode, "randomized": len(per_draw) > 1 or
        mode in RANDOM_POLICIES,
        "measured": distribution([d["completion_s"] for d in per_draw]),
        "model": distribution(model_t), "model_policy": mode,
        "lane_skew": distribution([d["lane_skew"] for d in per_draw]),
        "model_lane_skew": distribution(model_skew),
        "fluid_s": fluid.completion_s if fluid is not None else None,
        "bound_s": bound["unsplit"], "bounds": bound, "margin": margin,
        "lost": sum(d["lost"] for d in per_draw),
        "start_skew_s": max(d["start_skew_s"] for d in per_draw),
        "plane": per_draw[-1].get("plane"),
        # measured / the model of the very same 5-tuples, where one exists (not ECMP)
        "per_draw_ratio": distribution([d["completion_s"] / d["model_s"] for d in per_draw
                                        if d["model_s"]]),
        "per_draw": per_draw,
    }


def host_effects(res: Any) -> dict[str, Any]:
    """What a host-side policy did in one run: QPs opened, packets that arrived out of order
    (and the widest reorder window a receiver needed), entropy moves, ACK/CNP feedback."""
    rows = res.flows
    return {"qps": len(rows), "reordered": sum(r.get("reordered", 0) for r in rows),
            "reorder_window_max": max((r.get("reorder_window_max", 0) for r in rows),
                                      default=0),
            "moves": sum(r.get("entropy_moves", 0) or 0 for r in rows),
            "feedback": dict(res.feedback)}


def _without_loads(r: dict[str, Any]) -> dict[str, Any]:
    """A result for draws.json: every draw's numbers, not its link rows (runs.json has them)."""
    return {**r, "per_draw": [{k: v for k, v in d.items() if k != "loads"}
                              for d in r["per_draw"]]}


def _ratio(r: dict[str, Any]) -> float | None:
    m, i = r["measured"]["median"], r["model"]["median"]
    return m / i if m is not None and i else None


def _row(run: Run, r: dict[str, Any]) -> None:
    m, i = r["measured"], r["model"]
    run.row(workload=r["workload"], mode=r["mode"], draws=m["draws"],
            completion_s=_r(m["median"]), p25_s=_r(m["p25"]), p75_s=_r(m["p75"]),
            ideal_s=_r(i["median"]), ideal_p25_s=_r(i["p25"]), ideal_p75_s=_r(i["p75"]),
            model_draws=i["draws"], ratio=_r(_ratio(r)), bound_s=_r(r["bound_s"]),
            vs_bound=_r(m["median"] / r["bound_s"] if r["bound_s"] else None),
            lane_max_over_mean=_r(r["lane_skew"]["median"]),
            model_lane_max_over_mean=_r(r["model_lane_skew"]["median"]),
            lost_packets=r["lost"], start_skew_s=_r(r["start_skew_s"]))


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def _dist_text(d: dict[str, Any], unit: str, randomized: bool, digits: int = 2) -> str:
    if randomized:
        return fmt_distribution(d, unit, digits)
    return f"{d['median']:.{digits}f}{unit} (deterministic, 1 run)"


def _plots(run: Run, results: dict[str, dict[str, Any]]) -> None:
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: pyplot loads a backend: only after matplotlib.use("Agg") above
    import matplotlib.pyplot as plt

    p = run.params
    modes, wls = p["modes"], p["workloads"]
    fig, axes = plt.subplots(1, len(wls), figsize=(5 * len(wls), 3.8), squeeze=False)
    for ax, wl in zip(axes[0], wls, strict=True):
        rs = [results[f"{wl}/{m}"] for m in modes]
        plot_draws(ax, list(modes), [r["measured"]["values"] for r in rs],
                   [r["model"]["values"] for r in rs], bound=[r["bound_s"] for r in rs],
                   colours=[COLOURS[m] for m in modes])
        ax.set_title(f"{wl}: completion", fontsize=9)
        ax.set_ylabel("seconds (emulated)")
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"dots: emulated draws (bar: median; ECMP N={p['ecmp_samples']}); grey box and "
                 f"faint dots: flow model over {p['model_draws']} hash draws (grey tick: one "
                 "answer)",
                 fontsize=8)
    fig.tight_layout()
    run.save_figure(fig, "completion.png")

    fig, axes = plt.subplots(1, len(wls), figsize=(5 * len(wls), 3.6), squeeze=False)
    for ax, wl in zip(axes[0], wls, strict=True):
        width = 0.8 / len(modes)
        names: list[str] = []
        for i, mode in enumerate(modes):
            draws = results[f"{wl}/{mode}"]["per_draw"]
            per = [bytes_per_node(d["loads"], "spine") for d in draws]
            names = list(per[0])
            for j, name in enumerate(names):
                vals = [q[name] / 1e6 for q in per]
                x = j + i * width
                ax.scatter([x] * len(vals), vals, color=COLOURS[mode], s=14, zorder=3,
                           label=f"{mode} (N={len(vals)})" if j == 0 else None)
                ax.hlines(float(np.median(vals)), x - width / 3, x + width / 3,
                          color=COLOURS[mode], lw=2)
        ax.set_xticks([j + width * (len(modes) - 1) / 2 for j in range(len(names))], names,
                      fontsize=7)
        ax.set_title(f"{wl}: bytes each spine forwarded (dots: draws, bar: median)",
                     fontsize=9)
        ax.set_ylabel("MB")
        ax.legend(fontsize=7)
    fig.tight_layout()
    run.save_figure(fig, "spine_load.png")

    # lane heatmap: leaf->spine lanes (rows) x every emulated run, bytes over the mean
    wl = wls[0]
    cols = [(m, d) for m in modes for d in results[f"{wl}/{m}"]["per_draw"]]
    lanes = sorted({r["link"] for r in cols[0][1]["loads"] if r["tier"] == "leaf-spine"})
    grid = np.zeros((len(lanes), len(cols)))
    for j, (_mode, d) in enumerate(cols):
        by = {r["link"]: r["bytes"] for r in d["loads"]
              if r["tier"] == "leaf-spine" and r["direction"] == "up"}
        vals = np.array([by.get(ln, 0) for ln in lanes], dtype=float)
        grid[:, j] = vals / vals.mean() if vals.mean() else vals
    labels = [f"{m} #{d['draw'] + 1}" if draws_for(m, p["ecmp_samples"]) > 1 else m
              for m, d in cols]
    fig, ax = plt.subplots(figsize=(2 + 0.9 * len(cols), 0.5 + 0.16 * len(lanes)))
    im = ax.imshow(grid, aspect="auto", cmap="magma_r")
    ax.set_xticks(range(len(cols)), labels, rotation=30, ha="right", fontsize=7)
    ax.set_yticks(range(len(lanes)), lanes, fontsize=5)
    ax.set_title(f"{wl}: leaf->spine lane load / mean, every run", fontsize=9)
    fig.colorbar(im, ax=ax)
    run.save_figure(fig, "lane_heatmap.png")


def _report(run: Run, plan: WiringPlan, results: dict[str, dict[str, Any]]) -> None:
    p = run.params
    rep = run.report
    rtf = real_time_factor(plan)
    rep.section("Setup", WORDS(
        "setup", gpus=len(plan.hosts), servers=servers_of(p),
        gpus_per_server=p["gpus_per_server"],
        switches=len(plan.switches), scale=plan.scale,
        nic=plan.host_link_mbps()[plan.hosts[0].name],
        lane=min(ln.mbps for ln in plan.links if ln.kind == "lane"), seconds=p["seconds"],
        real_us=p["seconds"] * rtf * 1e6, modes=", ".join(p["modes"]),
        samples=p["ecmp_samples"], stride=DRAW_QP_STRIDE, model_draws=p["model_draws"]))
    rep.section("Results")
    table = []
    for r in results.values():
        rnd = r["randomized"]
        ratio = _ratio(r)
        table.append({
            "workload": r["workload"], "mode": r["mode"],
            "measured (s)": _dist_text(r["measured"], "", rnd and r["measured"]["draws"] > 1),
            "ideal: model (s)": _dist_text(r["model"], "", r["model"]["draws"] > 1),
            "ratio": ratio, "bound (s)": r["bound_s"],
            "vs bound": r["measured"]["median"] / r["bound_s"] if r["bound_s"] else None,
            "busiest lane / mean": _dist_text(r["lane_skew"], "", r["lane_skew"]["draws"] > 1),
            "model: busiest lane / mean": _dist_text(r["model_lane_skew"], "",
                                                     r["model_lane_skew"]["draws"] > 1),
            "lost": r["lost"]})
    rep.table(table)
    rep.text(WORDS("table_note"))
    _published(run, results)
    rep.image("completion.png", WORDS("completion_caption"))
    rep.image("spine_load.png", WORDS("spine_caption"))
    rep.image("lane_heatmap.png", WORDS("lane_caption"))
    rep.section("Findings")
    fanout = leaf_fanout(plan, _flows(plan, "permutation", 1.0, p["qps"], p["seed"], 0))
    for wl in p["workloads"]:
        if f"{wl}/ecmp" in results:
            rep.finding(**ecmp_finding(results, wl, p["qps"], fanout))
    for r in results.values():
        if policies.POLICIES.get(r["mode"]).pins and not in_band(_ratio(r)):
            rep.finding(**gap_finding(r, results.get(f"{r['workload']}/ecmp")))
    if "adaptive" in p["modes"]:
        wl = p["workloads"][0]
        rep.finding(**adaptive_finding(results[f"{wl}/adaptive"], p["seconds"],
                                       results.get(f"{wl}/ecmp")))
    rep.section("How to read this", WORDS("how_to_read"))


def _published(run: Run, results: dict[str, dict[str, Any]]) -> None:
    """Each policy beside the shape its source published, and what the lab saw besides
    completion (reordering, moves, feedback) that explains where it differs."""
    rows = []
    for r in results.values():
        pol = policies.POLICIES.get(r["mode"])
        m, b = r["measured"]["median"], r["bound_s"]
        host = [d.get("host", {}) for d in r["per_draw"]]
        seen = []
        if any(h.get("reordered") for h in host):
            seen.append(WORDS("seen_reordered", packets=max(h["reordered"] for h in host),
                              window=max(h["reorder_window_max"] for h in host)))
        if any(h.get("moves") for h in host):
            seen.append(WORDS("seen_moves", moves=max(h["moves"] for h in host)))
        fb = [h.get("feedback") or {} for h in host]
        if any(fb):
            seen.append(WORDS("seen_feedback", acks=max(f.get("acks_sent", 0) for f in fb),
                              cnps=max(f.get("cnps_sent", 0) for f in fb)))
        if host and pol.expands:
            seen.append(WORDS("seen_qps", qps=host[0].get("qps")))
        rows.append({"workload": r["workload"], "policy": r["mode"],
                     "measured / bound": m / b if m is not None and b else None,
                     "model / bound": r["model"]["median"] / b if b else None,
                     "published": pol.published or "-", "source": pol.source or "-",
                     "the lab saw": "; ".join(seen) or "-"})
    run.report.text(WORDS("published_intro"))
    run.report.table(rows)
    notes = [f"**{n}**: {policies.POLICIES.get(n).differs}" for n in run.params["modes"]
             if policies.POLICIES.get(n).differs]
    if notes:
        run.report.text(WORDS("differs_intro") + "\n\n"
                        + "\n".join(f"* {n}" for n in notes))


def _caveats(r: dict[str, Any]) -> list[str]:
    return pace_caveats(margin=r["margin"], plane=r.get("plane"), lost=r["lost"],
                        start_skew_s=r["start_skew_s"], span_s=r["measured"]["median"])


def _nothing(r: dict[str, Any]) -> str:
    return WORDS("nothing", margin=margin_text(r["margin"]), plane=r.get("plane"),
                 lost=r["lost"], skew=r["start_skew_s"])


def ecmp_finding(results: dict[str, dict[str, Any]], wl: str, qps: int,
                 fanout: tuple[int, int]) -> dict[str, str]:
    """ECMP's collision penalty on one workload, with the reasons its draws support."""
    e = results[f"{wl}/ecmp"]
    pl = results.get(f"{wl}/planned")
    m, i = e["measured"], e["model"]
    ratio = _ratio(e)
    b = e["bound_s"]
    measured = WORDS("ecmp_measured", ecmp=fmt_distribution(m, " s"), x=m["median"] / b,
                     lanes=fmt_distribution(e["lane_skew"], "x"))
    if pl is not None:
        measured += WORDS("ecmp_measured_planned", planned=pl["measured"]["median"])
    ideal = WORDS("ecmp_ideal", model=fmt_distribution(i, " s"), ratio=ratio,
                  lanes=fmt_distribution(e["model_lane_skew"], "x"), fluid=e["fluid_s"], bound=b)
    if pl is not None:
        ideal += WORDS("ecmp_ideal_planned", planned=pl["model"]["median"])
    steps = sorted({round(v / b, 1) for v in m["values"]})
    took = ", ".join(f"{x:g}x" for x in steps)
    if wl == "permutation":
        published = WORDS("perm_published")
        why = WORDS("perm_why", qps=qps, qps_out=fanout[0], lanes=fanout[1], took=took)
    else:
        published = WORDS("a2a_published")
        why = WORDS("a2a_why")
        perm = results.get("permutation/ecmp")
        x = m["median"] / b
        if perm is not None:
            px = perm["measured"]["median"] / perm["bound_s"]
            why += WORDS("a2a_vs_perm", x=x, px=px,
                         word="smaller than" if x < px else "not smaller than")
        else:
            why += WORDS("a2a_alone", x=x)
        why += WORDS("a2a_local")
    why += " " + WORDS("ecmp_hashes")
    if not in_band(ratio):
        why += " " + WORDS("ecmp_gap", ratio=ratio, pct=100 * rank_in(m["median"], i["values"]),
                           draws=i["draws"], lo=i["min"], hi=i["max"],
                           lanes=e["lane_skew"]["median"],
                           model_lanes=e["model_lane_skew"]["median"]) + " "
        inside = i["min"] * 0.97 <= m["median"] <= i["max"] * 1.03
        chance = median_chance(i["values"], m["median"], m["draws"])
        caveats = _caveats(e)
        if caveats:
            why += WORDS("ecmp_gap_caveats", caveats="; ".join(caveats))
        elif inside:
            why += WORDS("ecmp_gap_luck" if chance >= 0.05 else "ecmp_gap_hash", n=m["draws"],
                         pct=100 * chance)
        else:
            why += WORDS("ecmp_gap_outside", nothing=_nothing(e))
    return {"title": WORDS("ecmp_title", workload=wl), "measured": measured, "ideal": ideal,
            "published": published, "why": why}


def gap_finding(r: dict[str, Any], ecmp: dict[str, Any] | None = None) -> dict[str, str]:
    """A deterministic (or adaptive) row whose ratio is outside the band: why."""
    ratio = _ratio(r)
    m = r["measured"]
    why = WORDS("gap_why", lanes=r["lane_skew"]["median"],
                model_lanes=r["model_lane_skew"]["median"], margin=margin_text(r["margin"]),
                skew=r["start_skew_s"], lost=r["lost"]) + " "
    caveats = _caveats(r)
    if caveats:
        why += WORDS("gap_caveats", caveats="; ".join(caveats))
    elif policies.POLICIES.get(r["mode"]).polls:  # re-paths on measured rates
        why += _adaptive_position(r, ecmp)
    else:
        why += WORDS("gap_pinned", nothing=_nothing(r))
    return {"title": WORDS("gap_title", workload=r["workload"], mode=r["mode"]),
            "measured": _dist_text(m, " s", m["draws"] > 1),
            "ideal": WORDS("gap_ideal", model=_dist_text(r["model"], " s",
                                                         r["model"]["draws"] > 1),
                           ratio=ratio) if ratio else "-",
            "published": "-", "why": why}


def _adaptive_position(a: dict[str, Any], ecmp: dict[str, Any] | None) -> str:
    """Where adaptive's measurement sits between the hash placement and its final paths."""
    got, final = a["measured"]["median"], a["model"]["median"]
    hashed = ecmp["measured"]["median"] if ecmp else None
    out = WORDS("adaptive_polls") + " "
    if got > final * 1.05 and hashed is not None and got < hashed * 0.95:
        return out + WORDS("adaptive_between", got=got, hashed=hashed, final=final)
    if got > final * 1.05 and hashed is not None:
        return out + WORDS("adaptive_no_gain", got=got, hashed=hashed)
    if got > final * 1.05:
        return out + WORDS("adaptive_late", got=got, final=final)
    return out + WORDS("adaptive_early", got=got, final=final)


def adaptive_finding(a: dict[str, Any], seconds: float, ecmp: dict[str, Any] | None
                     ) -> dict[str, str]:
    """Adaptive mode against its final paths and the hash placement it starts from."""
    return {
        "title": WORDS("adaptive_title"),
        "measured": WORDS("adaptive_measured", measured=fmt_distribution(a["measured"], " s"),
                          x=a["measured"]["median"] / a["bound_s"]),
        "ideal": WORDS("adaptive_ideal", model=fmt_distribution(a["model"], " s")),
        "published": WORDS("adaptive_published"),
        "why": " ".join([WORDS("adaptive_why", seconds=seconds), _adaptive_position(a, ecmp),
                         WORDS("adaptive_why_tail")])}


def _summary(run: Run, results: dict[str, dict[str, Any]]) -> None:
    """summary.json: per workload/mode, ``measured``/``ideal``/``ratio`` and the draws."""
    for key, r in results.items():
        m, i = r["measured"], r["model"]
        run.summary[key] = compare(
            m["median"], i["median"], quantity="completion (emulated s)",
            policy=r["model_policy"], randomized=r["randomized"], draws=m["draws"],
            median=m["median"], p25=m["p25"], p75=m["p75"], values=m["values"], model=i,
            bound=r["bound_s"], vs_bound=m["median"] / r["bound_s"] if r["bound_s"] else None,
            fluid_s=r["fluid_s"], lane_max_over_mean=r["lane_skew"],
            model_lane_max_over_mean=r["model_lane_skew"], lost_packets=r["lost"],
            start_skew_s=r["start_skew_s"], fidelity_margin=r["margin"],
            per_draw_ratio=r["per_draw_ratio"])
