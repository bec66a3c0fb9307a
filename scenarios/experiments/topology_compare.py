"""``topology-compare``: one MoE All-to-All step on the four fabric designs, equal GPU count.

The question: what does flattening the rail fabric to two tiers (``astral3``) buy over the
three-tier rail-optimized fabric it replaces (``rail3``), a rail-only network (``railonly``,
cross-rail traffic relayed over NVLink) and a textbook fat-tree (``fattree``)? Hops,
completion time, and where the load lands, beside the cost model's price of each design.

Two kernels (traffic/kernels.py), both from the same DeepSeek-V3 step
(``traffic.workload.simulate_step``; uniform gating, seeded):

* ``high_bandwidth`` (training/prefill, DeepEP "normal"): RDMA only between same-index GPUs
  (one rail), NVLink forwarding inside the server. Rail-aligned by construction, so on rail
  fabrics it stays under one leaf within a block.
* ``flat``: NCCL-style equal-split all-to-all: every GPU to every GPU, cross-rail. This is
  what a rail-only network cannot carry without relaying over NVLink, and what a two-tier
  fabric routes leaf - spine - leaf.

Tokens per GPU are chosen so the astral3 NIC bound of the dispatch phase is ``seconds``
(emulated); every design replays exactly the same flows. Each design is its own fabric,
brought up, measured (switch interface counters per link) and torn down in turn.

**Draws.** Under ECMP a flow's path is a hash of its UDP source port, and the step's bytes
per GPU come from a seeded gate, so one replay is one sample. Each design replays the step
``draws`` times: draw k uses gating seed ``seed + k`` and shifts every QP by k x 1000 (new
source ports, another hash outcome); completion is quoted as median [p25-p75] over the
draws. Switch hops per byte are a property of the design (deterministic). **Ideal**: the flow
model (``testbed.models.flowmodel``) of the same plan, kernel and policy over ``model_draws`` draws
(gating seed ``seed + j``, hash seed j), dispatch plus combine, on the frame bytes the shapers
count; **ratio** = measured median / ideal median; **bound**: the analytic lower bound of the
same flows (NIC and uplink capacity, flows unsplit).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from controllers.paths import PathFinder
from scenarios.base import (
    DRAWS,
    FABRIC_GPUS,
    GPUS,
    MODEL_DRAWS,
    PHASE_SECONDS,
    SCALE,
    Param,
    Run,
    scenario,
    servers_of,
)
from scenarios.common import (
    DRAW_QP_STRIDE,
    compare,
    distribution,
    fmt_distribution,
    in_band,
    link_counters,
    link_loads,
    mean_hops,
    plot_draws,
    rank_in,
    real_time_factor,
    replay_lead,
    shift_qps,
    wire_flows,
)
from scenarios.findings import margin_text, pace_caveats
from scenarios.prose import Prose
from testbed.models.bounds import bounds
from testbed.models.cost import cost_table, format_table
from testbed.models.perflow import model_flows
from testbed.topologies import build_for_gpus
from traffic.kernels import flat_all_to_all, high_bandwidth
from traffic.shell.replay import replay
from traffic.workload import Phase, simulate_step
from vocab.plan import WiringPlan
from vocab.validate import SEED

ORDER = 20  # where it lists in astral-lab list (vocab.plugins.listing_key)
WORDS = Prose.of_module(__name__)  # the report's prose: scenarios/templates/<this file's name>.md
DESIGNS = ("astral3", "rail3", "railonly", "fattree")  # chosen: the designs the paper compares
KERNELS = ("high_bandwidth", "flat")


def kernel_traffic(kernel: str, step: Any, plan: WiringPlan) -> Any:
    if kernel == "high_bandwidth":
        return high_bandwidth(step, plan, message_bytes=256_000)
    return flat_all_to_all(step, plan, message_bytes=256_000)


def tokens_for(p: dict[str, Any], plan: WiringPlan) -> int:
    """Tokens per GPU so the astral3 dispatch phase's NIC bound is ``seconds``."""
    probe = 16
    worst = 0.0
    for kernel in p["kernels"]:
        step = simulate_step("deepseek-v3", servers_of(p), p["gpus_per_server"], probe,
                             seed=p["seed"])
        flows = [f for f in kernel_traffic(kernel, step, plan).flows if f.phase == Phase.DISPATCH]
        worst = max(worst, bounds(plan, flows, unit="mbps")["host_start"])
    return max(1, round(probe * p["seconds"] / worst)) if worst else probe


def _phase_flows(kernel: str, p: dict[str, Any], plan: WiringPlan, tokens: int, draw: int
                 ) -> tuple[Any, dict[str, list[Any]]]:
    """Draw ``draw``'s step on ``plan``: its traffic and per-phase flows (QPs shifted)."""
    step = simulate_step("deepseek-v3", servers_of(p), p["gpus_per_server"], tokens,
                         seed=p["seed"] + draw)
    traffic = kernel_traffic(kernel, step, plan)
    return traffic, {ph: shift_qps([f for f in traffic.flows if f.phase == ph],
                                   DRAW_QP_STRIDE * draw) for ph in Phase}


def model_step(kernel: str, p: dict[str, Any], plan: WiringPlan, tokens: int, draws: int
               ) -> dict[str, Any]:
    """The flow model's dispatch + combine completion (and bound) over ``draws`` draws:
    gating seed ``seed + j`` and hash seed j, the controller's policy, frame bytes."""
    policy = "ecmp" if p["lb"] == "ecmp" else "planned"
    total, bound, top = [], [], []
    for j in range(max(1, draws)):
        _traffic_j, flows = _phase_flows(kernel, p, plan, tokens, j)
        t = b = 0.0
        for ph in Phase:
            wire = wire_flows(flows[ph])
            if not wire:
                continue
            bnd = bounds(plan, wire, unit="mbps")
            m = model_flows(plan, wire, policy, seed=j, unit="mbps", bound=bnd)
            t += m.completion_s or 0.0
            b += bnd["unsplit"]
            if m.bottlenecks:
                top.append(m.bottlenecks[0]["tier"])
        total.append(t)
        bound.append(b)
    return {"policy": policy, "completion_s": distribution(total),
            "bound_s": distribution(bound), "bottleneck_tiers": top}


@scenario(
    "one MoE All-to-All on astral3, rail3, railonly, fattree: "
    "completion, hops, per-tier load, cost",
    Param("gpus", 16, "GPUs in all (equal on every design; at most 64 servers of "
          "--gpus-per-server)", quick=8, rule=FABRIC_GPUS),
    Param("gpus_per_server", 4, "GPUs (NICs, rails) per server", rule=GPUS),
    Param("scale", 1e-5, "emulated rate = real rate x scale (1e-5: a 400G NIC is 4 Mb/s)",
          rule=SCALE),
    Param("designs", list(DESIGNS), "fabric designs", choices=DESIGNS),
    Param("kernels", list(KERNELS), "All-to-All kernels", quick=["flat"], choices=KERNELS),
    Param("seconds", 3.0, "astral3 NIC bound of one dispatch phase (emulated s)", quick=0.8,
          rule=PHASE_SECONDS),
    Param("lb", "ecmp", "controller mode on every fabric", choices=("ecmp", "planned")),
    Param("draws", 5, "emulated draws of the step per design (gating seed and ECMP source "
          "ports)", quick=3, rule=DRAWS),
    Param("model_draws", 100, "flow-model draws per design beside them", quick=40,
          rule=MODEL_DRAWS),
    Param("seed", 0, "first gating seed (draw k uses seed + k)", rule=SEED),
    fabrics=lambda p: {d: build_for_gpus(d, p["gpus"], p["gpus_per_server"], scale=p["scale"])
                       for d in p["designs"]},
)
def topology_compare(run: Run) -> None:
    """See the module docstring."""
    p = run.params
    if p["draws"] < 1 or p["model_draws"] < 1:
        raise ValueError("--draws and --model-draws must be >= 1")
    ref = build_for_gpus("astral3", p["gpus"], p["gpus_per_server"], scale=p["scale"])
    tokens = tokens_for(p, ref)
    run.config["tokens_per_gpu"] = tokens
    raw: list[dict[str, Any]] = []
    results: dict[str, dict[str, Any]] = {}
    n = int(p["draws"])
    for design in p["designs"]:
        plan = run.fabric(design)
        models = {k: model_step(k, p, plan, tokens, int(p["model_draws"]))
                  for k in p["kernels"]}
        run.stage(f"{design}: modelled {p['model_draws']} draws")
        with run.lab(plan, label=design, lb=p["lb"]) as lab:
            for kernel in p["kernels"]:
                traffic, flows0 = _phase_flows(kernel, p, plan, tokens, 0)
                margin = min(run.guard(lab, flows0[ph], f"{design}/{kernel}/{ph}")["margin"]
                             for ph in Phase if flows0[ph])
                per_draw = []
                for k in range(n):
                    traffic, flows = _phase_flows(kernel, p, plan, tokens, k)
                    before = link_counters(plan)
                    total_t, lost, skew, plane = 0.0, 0, 0.0, None
                    for ph in Phase:
                        if not flows[ph]:
                            continue
                        res = replay(lab, flows[ph], label=f"{design} {kernel} {ph} "
                                     f"{k + 1}/{n}", lead_s=replay_lead(flows[ph]))
                        total_t += res.job_completion_s
                        lost += res.lost_packets
                        skew = max(skew, res.start_skew_s)
                        plane = res.plane
                        raw.append({"design": design, "kernel": kernel, "phase": ph,
                                    "draw": k, "summary": res.summary(), "flows": res.flows,
                                    "messages": res.messages})
                    loads = link_loads(plan, before, link_counters(plan), total_t)
                    raw.append({"design": design, "kernel": kernel, "draw": k,
                                "links": loads})
                    busiest = max(loads, key=lambda r: r["utilisation"]) if loads else None
                    per_draw.append({"draw": k, "seed": p["seed"] + k,
                                     "completion_s": total_t, "lost": lost,
                                     "start_skew_s": skew, "plane": plane, "loads": loads,
                                     "busiest_link": busiest["link"] if busiest else "-",
                                     "busiest_util": busiest["utilisation"] if busiest
                                     else None})
                    run.stage(f"{design}/{kernel} draw {k + 1}/{n}: {total_t:.2f} s")
                results[f"{design}/{kernel}"] = _summarise(
                    design, kernel, plan, traffic, per_draw, models[kernel], margin)
                _row(run, results[f"{design}/{kernel}"])
    run.save_json("runs.json", raw)
    run.save_json("draws.json", {k: {**v, "per_draw": [{kk: vv for kk, vv in d.items()
                                                          if kk != "loads"}
                                                         for d in v["per_draw"]]}
                                 for k, v in results.items()})
    cost = cost_table([len(ref.hosts), 8192], designs=p["designs"])
    run.save_json("cost.json", cost)
    _plots(run, results)
    _report(run, ref, cost, tokens, results)
    _summary(run, results)


def idle_candidates(plan: WiringPlan, flows: list[Any], loads: list[dict[str, Any]]
                    ) -> dict[str, dict[str, int]]:
    """Per tier and direction: fabric links on some candidate path of ``flows`` (where ECMP
    may send them), and how many of those carried (almost) nothing in this run.

    Hashing a handful of flows leaves a few candidates idle by chance; most of a tier idle
    means the switches' choices are correlated (every hop hashing the packet alike)."""
    finder = PathFinder(plan)
    cand: set[Any] = set()
    for a, b in {(f.src, f.dst) for f in flows}:
        for path in finder.candidates(a, b):
            cand.update(path)
    by_name = {ln.name: ln for ln in plan.links}
    tiers: dict[str, list[int]] = defaultdict(list)
    for r in loads:
        ln = by_name[r["link"]]
        hop = (ln.a, ln.a_port) if r["direction"] == "up" else (ln.b, ln.b_port)
        if hop in cand:
            tiers[f"{r['tier']} {r['direction']}"].append(r["bytes"])
    out = {}
    for tier, vals in tiers.items():
        top = max(vals)
        out[tier] = {"candidates": len(vals),
                     "idle": sum(1 for v in vals if v < 0.02 * top) if top else len(vals)}
    return out


def _summarise(design: str, kernel: str, plan: WiringPlan, traffic: Any,
               per_draw: list[dict[str, Any]], model: dict[str, Any], margin: float
               ) -> dict[str, Any]:
    tiers: dict[str, list[float]] = defaultdict(list)
    for d in per_draw:
        by: dict[str, list[float]] = defaultdict(list)
        for r in d["loads"]:
            by[f"{r['tier']} {r['direction']}"].append(r["utilisation"])
        for tier, vals in by.items():
            tiers[tier].append(sum(vals) / len(vals))
    common = Counter(d["busiest_link"] for d in per_draw).most_common(1)
    idle: dict[str, dict[str, float]] = {}
    for d in per_draw:
        for tier, v in idle_candidates(plan, traffic.flows, d["loads"]).items():
            idle.setdefault(tier, {"candidates": v["candidates"], "idle": []})["idle"].append(
                v["idle"])
    idle = {t: {"candidates": v["candidates"], "idle": float(np.median(v["idle"]))}
            for t, v in idle.items()}
    return {
        "design": design, "kernel": kernel, "flows": len(traffic.flows),
        "rdma_MB": traffic.wire_bytes() / 1e6, "nvlink_MB": traffic.nvlink_bytes() / 1e6,
        "hops": mean_hops(plan, traffic.flows, by_bytes=True),
        "measured": distribution([d["completion_s"] for d in per_draw]),
        "model": model["completion_s"], "model_bound": model["bound_s"],
        "policy": model["policy"], "bottleneck_tiers": model["bottleneck_tiers"],
        "busiest_link": common[0][0] if common else "-",
        "busiest_link_draws": common[0][1] if common else 0,
        "busiest_util": distribution([d["busiest_util"] for d in per_draw]),
        "tier_load": {t: sum(v) / len(v) for t, v in tiers.items()},
        "idle_candidates": idle,
        "lost": sum(d["lost"] for d in per_draw), "margin": margin,
        "start_skew_s": max(d["start_skew_s"] for d in per_draw),
        "plane": per_draw[-1].get("plane"), "per_draw": per_draw,
    }


def _ratio(r: dict[str, Any]) -> float | None:
    m, i = r["measured"]["median"], r["model"]["median"]
    return m / i if m is not None and i else None


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def _row(run: Run, r: dict[str, Any]) -> None:
    m, i, b = r["measured"], r["model"], r["model_bound"]["median"]
    run.row(design=r["design"], kernel=r["kernel"], flows=r["flows"],
            rdma_MB=round(r["rdma_MB"], 2), nvlink_MB=round(r["nvlink_MB"], 2),
            hops=round(r["hops"], 2), draws=m["draws"], completion_s=_r(m["median"]),
            p25_s=_r(m["p25"]), p75_s=_r(m["p75"]), ideal_s=_r(i["median"]),
            ideal_p25_s=_r(i["p25"]), ideal_p75_s=_r(i["p75"]), model_draws=i["draws"],
            ratio=_r(_ratio(r)), bound_s=_r(b), vs_bound=_r(m["median"] / b if b else None),
            busiest_link=r["busiest_link"], busiest_util=_r(r["busiest_util"]["median"]),
            lost=r["lost"], start_skew_s=_r(r["start_skew_s"]))


def _plots(run: Run, results: dict[str, dict[str, Any]]) -> None:
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: pyplot loads a backend: only after matplotlib.use("Agg") above
    import matplotlib.pyplot as plt

    p = run.params
    kernels, designs = p["kernels"], p["designs"]
    fig, axes = plt.subplots(1, len(kernels), figsize=(6 * len(kernels), 3.8), squeeze=False)
    for ax, kernel in zip(axes[0], kernels, strict=True):
        rs = [results[f"{d}/{kernel}"] for d in designs]
        plot_draws(ax, list(designs), [r["measured"]["values"] for r in rs],
                   [r["model"]["values"] for r in rs],
                   bound=[r["model_bound"]["median"] for r in rs],
                   colours=["tab:red"] * len(designs))
        ax.set_ylabel("dispatch + combine, emulated s")
        ax.set_title(f"{kernel}: step completion per design", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"dots: emulated draws (bar: median, N={p['draws']}); grey box: flow model "
                 f"({p['lb']}) over {p['model_draws']} draws; dashed: lower bound", fontsize=8)
    fig.tight_layout()
    run.save_figure(fig, "completion.png")

    keys = list(results)
    cols = sorted({t for r in results.values() for t in r["tier_load"]})
    grid = np.full((len(keys), len(cols)), np.nan)
    for i, k in enumerate(keys):
        for j, c in enumerate(cols):
            grid[i, j] = results[k]["tier_load"].get(c, np.nan)
    fig, ax = plt.subplots(figsize=(1.5 + 0.9 * len(cols), 0.8 + 0.4 * len(keys)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(cols)), cols, rotation=40, ha="right", fontsize=7)
    ax.set_yticks(range(len(keys)), keys, fontsize=7)
    for i in range(len(keys)):
        for j in range(len(cols)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="w" if grid[i, j] < 0.6 else "k")
    ax.set_title(f"mean link utilisation per tier and direction, mean of {p['draws']} draws "
                 "(blank: tier absent)", fontsize=8)
    fig.colorbar(im, ax=ax)
    run.save_figure(fig, "tier_load_heatmap.png")


def _dt(d: dict[str, Any], unit: str = " s") -> str:
    return fmt_distribution(d, unit) if d["draws"] > 1 else f"{d['median']:.2f}{unit}"


def _gap(r: dict[str, Any]) -> str:
    """Why a ratio is outside 0.7-1.3, with the evidence at hand (empty when inside)."""
    ratio = _ratio(r)
    if in_band(ratio):
        return ""
    at = rank_in(r["measured"]["median"], r["model"]["values"])
    idle = {t: v for t, v in r["idle_candidates"].items()
            if v["candidates"] >= 4 and v["idle"] >= 0.25 * v["candidates"]}
    polar = ""
    if idle and ratio and ratio > 1:
        polar = WORDS("polar", idle=", ".join(
            WORDS("polar_idle", idle=v["idle"], candidates=v["candidates"], tier=t)
            for t, v in idle.items()))
    caveats = pace_caveats(margin=r["margin"], plane=r.get("plane"), lost=r["lost"],
                           start_skew_s=r["start_skew_s"], span_s=r["measured"]["median"])
    tiers = sorted(set(r["bottleneck_tiers"]), key=r["bottleneck_tiers"].count)[-1:] \
        if r["bottleneck_tiers"] else ["-"]
    inside = (r["model"]["min"] * 0.97 <= r["measured"]["median"]
              <= r["model"]["max"] * 1.03)
    if caveats:
        tail = WORDS("gap_caveats", caveats="; ".join(caveats))
    elif polar:
        tail = polar
    else:
        tail = WORDS("gap_queues" if ratio and ratio > 1 else "gap_faster")
    return " " + " ".join([
        WORDS("gap", design=r["design"], kernel=r["kernel"], ratio=ratio, pct=100 * at,
              lo=r["model"]["min"], hi=r["model"]["max"], tier=tiers[0],
              busiest=r["busiest_link"], busiest_draws=r["busiest_link_draws"],
              draws=r["measured"]["draws"], util=r["busiest_util"]["median"],
              margin=margin_text(r["margin"]), skew=r["start_skew_s"], lost=r["lost"]),
        WORDS("gap_inside" if inside else "gap_outside"), tail])


def _report(run: Run, ref: Any, cost: list[dict[str, Any]], tokens: int,
            results: dict[str, dict[str, Any]]) -> None:
    p = run.params
    rep = run.report
    n = len(ref.hosts)
    rep.section("Setup", WORDS(
        "setup", gpus=n, servers=servers_of(p), gpus_per_server=p["gpus_per_server"],
        scale=p["scale"],
        nic=ref.host_link_mbps()[ref.hosts[0].name], real=real_time_factor(ref),
        tokens=tokens, lb=p["lb"], draws=p["draws"], seed=p["seed"], stride=DRAW_QP_STRIDE,
        model_draws=p["model_draws"]))
    rep.section("Results")
    rep.table([{"design": r["design"], "kernel": r["kernel"], "flows": r["flows"],
                "rdma MB": r["rdma_MB"], "hops (deterministic)": r["hops"],
                "measured (s)": _dt(r["measured"]), "ideal: model (s)": _dt(r["model"]),
                "ratio": _ratio(r), "bound (s)": r["model_bound"]["median"],
                "vs bound": r["measured"]["median"] / r["model_bound"]["median"]
                if r["model_bound"]["median"] else None,
                "busiest link (draws)": f"{r['busiest_link']} ({r['busiest_link_draws']}/"
                                        f"{r['measured']['draws']})",
                "busiest util": _dt(r["busiest_util"], ""), "lost": r["lost"]}
               for r in results.values()])
    rep.text(WORDS("table_note", lb=p["lb"]))
    rep.image("completion.png", WORDS("completion_caption"))
    rep.image("tier_load_heatmap.png", WORDS("heatmap_caption"))
    rep.section("Cost model", WORDS("cost", table=format_table(cost)))
    rep.section("Findings")
    k = "flat" if "flat" in p["kernels"] else p["kernels"][0]
    gaps = "".join(_gap(r) for r in results.values())
    if f"astral3/{k}" in results and f"rail3/{k}" in results:
        c = {row["design"]: row for row in cost if row["gpus"] == 8192 and row["feasible"]}
        rel = c["astral3"].get("relative") if "astral3" in c else None
        rep.finding(**tiers_finding(results[f"astral3/{k}"], results[f"rail3/{k}"], k, rel,
                                    gaps))
        gaps = ""
    if "railonly/flat" in results and "astral3/flat" in results:
        rep.finding(**railonly_finding(results["railonly/flat"], results["astral3/flat"], gaps))
        gaps = ""
    if "astral3/high_bandwidth" in results:
        rep.finding(**high_bandwidth_finding(results, gaps))
        gaps = ""
    if gaps:
        rep.finding(WORDS("gaps_title"), measured="see the table", ideal="see the table",
                    published="-", why=gaps.strip())


def _spread(results: dict[str, dict[str, Any]], kernel: str) -> float | None:
    """Slowest design's median completion over the fastest's, for one kernel."""
    meds = [r["measured"]["median"] for r in results.values() if r["kernel"] == kernel]
    return max(meds) / min(meds) if len(meds) > 1 and min(meds) else None


def tiers_finding(a: dict[str, Any], r3: dict[str, Any], kernel: str,
                  relative_cost: float | None, gaps: str = "") -> dict[str, str]:
    """astral3 against rail3 on one kernel: hops, completion, bounds, cost."""
    ba, br = a["model_bound"]["median"], r3["model_bound"]["median"]
    equal = abs(ba - br) <= 0.02 * max(ba, br)
    rel = WORDS("tiers_cost", relative=relative_cost) if relative_cost else ""
    fewer = a["hops"] < r3["hops"]
    why = (WORDS("tiers_equal") if equal else
           WORDS("tiers_bounds_differ", ba=ba, br=br, tighter="rail3" if br > ba else "astral3")
           ) + " " + WORDS("tiers_hops", hops_a=a["hops"], hops_r=r3["hops"]) \
        + (" " + WORDS("tiers_fewer") if fewer else "") + rel.replace("; cost", ", and costs") \
        + WORDS("tiers_spread") + gaps
    return {
        "title": WORDS("tiers_title", kernel=kernel),
        "measured": WORDS("tiers_measured", hops_a=a["hops"], measured_a=_dt(a["measured"]),
                          hops_r=r3["hops"], measured_r=_dt(r3["measured"])),
        "ideal": WORDS("tiers_ideal", model_a=_dt(a["model"]), model_r=_dt(r3["model"]),
                       ratio_a=_fmt(_ratio(a)), ratio_r=_fmt(_ratio(r3)), ba=ba, br=br)
                 + (" " + WORDS("tiers_ideal_equal") if equal else "") + rel,
        "published": WORDS("tiers_published"),
        "why": why}


def railonly_finding(ro: dict[str, Any], a: dict[str, Any], gaps: str = "") -> dict[str, str]:
    """Flat (cross-rail) traffic on railonly against astral3."""
    x = ro["measured"]["median"] / a["measured"]["median"]
    xm = ro["model"]["median"] / a["model"]["median"]
    why = WORDS("railonly_why") + " " + WORDS(
        "railonly_slower" if x > 1.05 else "railonly_same", x=x, xm=xm)
    return {
        "title": WORDS("railonly_title"),
        "measured": WORDS("railonly_measured", measured_ro=_dt(ro["measured"]),
                          measured_a=_dt(a["measured"]), busiest=ro["busiest_link"],
                          util=_dt(ro["busiest_util"], "")),
        "ideal": WORDS("railonly_ideal", model_ro=_dt(ro["model"]), model_a=_dt(a["model"]),
                       bound_ro=ro["model_bound"]["median"],
                       bound_a=a["model_bound"]["median"]),
        "published": WORDS("railonly_published"),
        "why": why + gaps}


def high_bandwidth_finding(results: dict[str, dict[str, Any]], gaps: str = ""
                           ) -> dict[str, str]:
    """The hierarchical kernel on astral3, and how much the design mattered for it."""
    hb = results["astral3/high_bandwidth"]
    why = WORDS("hb_why")
    s_hb, s_flat = _spread(results, "high_bandwidth"), _spread(results, "flat")
    if s_hb is not None and s_flat is not None:
        why += WORDS("hb_spread", s_hb=s_hb, s_flat=s_flat,
                     word="much less" if s_hb - 1 < 0.5 * (s_flat - 1) else "not much less")
    else:
        why += "."
    return {
        "title": WORDS("hb_title"),
        "measured": WORDS("hb_measured", hops=hb["hops"], measured=_dt(hb["measured"]),
                          x=hb["measured"]["median"] / hb["model_bound"]["median"]),
        "ideal": WORDS("hb_ideal", model=_dt(hb["model"]), bound=hb["model_bound"]["median"]),
        "published": WORDS("hb_published"),
        "why": why + gaps}


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}"


def _summary(run: Run, results: dict[str, dict[str, Any]]) -> None:
    """summary.json: per design/kernel, ``measured``/``ideal``/``ratio`` and the draws."""
    for key, r in results.items():
        m, i, b = r["measured"], r["model"], r["model_bound"]["median"]
        run.summary[key] = compare(
            m["median"], i["median"], quantity="dispatch + combine completion (emulated s)",
            policy=r["policy"], draws=m["draws"], median=m["median"], p25=m["p25"],
            p75=m["p75"], values=m["values"], model=i, bound=b,
            vs_bound=m["median"] / b if b else None, hops=r["hops"],
            hops_deterministic=True, busiest_link=r["busiest_link"],
            busiest_util=r["busiest_util"], tier_load=r["tier_load"], lost_packets=r["lost"],
            start_skew_s=r["start_skew_s"], fidelity_margin=r["margin"])
