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

from collections import defaultdict
from typing import Any

from scenarios.base import (
    DRAWS,
    GPUS,
    MODEL_DRAWS,
    SCALE,
    SECONDS,
    SEED,
    SERVERS,
    Param,
    Run,
    scenario,
)
from scenarios.common import (
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
from testbed.topologies import build

DESIGNS = ("astral3", "rail3", "railonly", "fattree")
KERNELS = ("high_bandwidth", "flat")
PHASES = ("dispatch", "combine")
#: QP numbers of draw k are shifted by k x this (every draw its own UDP source ports)
DRAW_QP_STRIDE = 1000


def _traffic(kernel: str, step: Any, plan: Any) -> Any:
    from traffic.kernels import flat_all_to_all, high_bandwidth

    if kernel == "high_bandwidth":
        return high_bandwidth(step, plan, message_bytes=256_000)
    return flat_all_to_all(step, plan, message_bytes=256_000)


def _tokens_for(p: dict[str, Any], plan: Any) -> int:
    """Tokens per GPU so the astral3 dispatch phase's NIC bound is ``seconds``."""
    from testbed.models.flowmodel import bounds
    from traffic.workload import simulate_step

    probe = 16
    worst = 0.0
    for kernel in p["kernels"]:
        step = simulate_step("deepseek-v3", p["servers"], p["gpus"], probe, seed=p["seed"])
        flows = [f for f in _traffic(kernel, step, plan).flows if f.phase == "dispatch"]
        worst = max(worst, bounds(plan, flows, unit="mbps")["host_start"])
    return max(1, round(probe * p["seconds"] / worst)) if worst else probe


def _phase_flows(kernel: str, p: dict[str, Any], plan: Any, tokens: int, draw: int
                 ) -> tuple[Any, dict[str, list[Any]]]:
    """Draw ``draw``'s step on ``plan``: its traffic and per-phase flows (QPs shifted)."""
    from traffic.workload import simulate_step

    step = simulate_step("deepseek-v3", p["servers"], p["gpus"], tokens, seed=p["seed"] + draw)
    traffic = _traffic(kernel, step, plan)
    return traffic, {ph: shift_qps([f for f in traffic.flows if f.phase == ph],
                                   DRAW_QP_STRIDE * draw) for ph in PHASES}


def model_step(kernel: str, p: dict[str, Any], plan: Any, tokens: int, draws: int
               ) -> dict[str, Any]:
    """The flow model's dispatch + combine completion (and bound) over ``draws`` draws:
    gating seed ``seed + j`` and hash seed j, the controller's policy, frame bytes."""
    from testbed.models.flowmodel import bounds, model_flows

    policy = "ecmp" if p["lb"] == "ecmp" else "planned"
    total, bound, top = [], [], []
    for j in range(max(1, draws)):
        _traffic_j, flows = _phase_flows(kernel, p, plan, tokens, j)
        t = b = 0.0
        for ph in PHASES:
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
    "topology-compare", "one MoE All-to-All on astral3, rail3, railonly, fattree: "
    "completion, hops, per-tier load, cost",
    Param("servers", 4, "servers (equal GPU count on every design)", quick=2, rule=SERVERS),
    Param("gpus", 4, "GPUs (NICs, rails) per server", rule=GPUS),
    Param("scale", 1e-5, "emulated rate = real rate x scale (1e-5: a 400G NIC is 4 Mb/s)",
          rule=SCALE),
    Param("designs", list(DESIGNS), "fabric designs", choices=DESIGNS),
    Param("kernels", list(KERNELS), "All-to-All kernels", quick=["flat"], choices=KERNELS),
    Param("seconds", 3.0, "astral3 NIC bound of one dispatch phase (emulated s)", quick=0.8,
          rule=SECONDS),
    Param("lb", "ecmp", "controller mode on every fabric", choices=("ecmp", "planned")),
    Param("draws", 5, "emulated draws of the step per design (gating seed and ECMP source "
          "ports)", quick=3, rule=DRAWS),
    Param("model_draws", 100, "flow-model draws per design beside them", quick=40,
          rule=MODEL_DRAWS),
    Param("seed", 0, "first gating seed (draw k uses seed + k)", rule=SEED),
)
def topology_compare(run: Run) -> None:
    """See the module docstring."""
    from testbed.models.cost import cost_table
    from traffic.shell.replay import replay

    p = run.params
    if p["draws"] < 1 or p["model_draws"] < 1:
        raise ValueError("--draws and --model-draws must be >= 1")
    ref = build("astral3", servers=p["servers"], gpus=p["gpus"], scale=p["scale"])
    tokens = _tokens_for(p, ref)
    run.config["tokens_per_gpu"] = tokens
    raw: list[dict[str, Any]] = []
    results: dict[str, dict[str, Any]] = {}
    n = int(p["draws"])
    for design in p["designs"]:
        plan = build(design, servers=p["servers"], gpus=p["gpus"], scale=p["scale"])
        models = {k: model_step(k, p, plan, tokens, int(p["model_draws"]))
                  for k in p["kernels"]}
        run.stage(f"{design}: modelled {p['model_draws']} draws")
        with run.lab(plan, label=design, lb=p["lb"]) as lab:
            for kernel in p["kernels"]:
                traffic, flows0 = _phase_flows(kernel, p, plan, tokens, 0)
                margin = min(run.guard(lab, flows0[ph], f"{design}/{kernel}/{ph}")["margin"]
                             for ph in PHASES if flows0[ph])
                per_draw = []
                for k in range(n):
                    traffic, flows = _phase_flows(kernel, p, plan, tokens, k)
                    before = link_counters(plan)
                    total_t, lost, skew, plane = 0.0, 0, 0.0, None
                    for ph in PHASES:
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


def idle_candidates(plan: Any, flows: list[Any], loads: list[dict[str, Any]]
                    ) -> dict[str, dict[str, int]]:
    """Per tier and direction: fabric links on some candidate path of ``flows`` (where ECMP
    may send them), and how many of those carried (almost) nothing in this run.

    Hashing a handful of flows leaves a few candidates idle by chance; most of a tier idle
    means the switches' choices are correlated (every hop hashing the packet alike)."""
    from controllers.paths import PathFinder

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


def _summarise(design: str, kernel: str, plan: Any, traffic: Any,
               per_draw: list[dict[str, Any]], model: dict[str, Any], margin: float
               ) -> dict[str, Any]:
    from collections import Counter

    import numpy as np

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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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
        polar = ("the per-link counters show why: of the links ECMP could use, "
                 + ", ".join(f"{v['idle']:g} of {v['candidates']} {t}" for t, v in
                             idle.items())
                 + " carried nothing (median over the draws). The switches' choices are "
                 "correlated: OVS's dp_hash is the same function of the same 5-tuple at "
                 "every hop, so a packet that took one half of the upward ports at the first "
                 "switch takes the same half at the next (hash polarization), leaving the "
                 "other uplinks idle. The model hashes every switch independently (salted "
                 "by switch name), as switches with per-hop seeds do, so it spreads over "
                 "all of them.")
    caveats = pace_caveats(margin=r["margin"], plane=r.get("plane"), lost=r["lost"],
                           start_skew_s=r["start_skew_s"], span_s=r["measured"]["median"])
    tiers = sorted(set(r["bottleneck_tiers"]), key=r["bottleneck_tiers"].count)[-1:] \
        if r["bottleneck_tiers"] else ["-"]
    return (f" **{r['design']}/{r['kernel']}: the ratio ({ratio:.2f}) is outside 0.7-1.3.** "
            f"The measured median falls at the {100 * at:.0f}th percentile of the model's "
            f"draws (range {r['model']['min']:.2f}-{r['model']['max']:.2f} s); the model's "
            f"bottleneck is mostly on {tiers[0]} links, the emulation's busiest link was "
            f"{r['busiest_link']} ({r['busiest_link_draws']} of {r['measured']['draws']} "
            f"draws) at {r['busiest_util']['median']:.2f} utilisation; fidelity margin "
            f"{margin_text(r['margin'])}, start skew up to {r['start_skew_s']:.3f} s, "
            f"{r['lost']} packets lost. "
            + ("Inside the model's range, so the hash's luck over few draws is a candidate; "
               if r["model"]["min"] * 0.97 <= r["measured"]["median"] <= r["model"]["max"]
               * 1.03 else "Outside the model's whole range: not luck; ")
            + ("the run itself may be the cause: " + "; ".join(caveats) + "." if caveats else
               polar if polar else
               "the fabric's queues (FIFO, not max-min fair) and the senders' round-robin "
               "pacing are what the fluid model leaves out." if ratio and ratio > 1 else
               "a measurement faster than the fluid model means the model charged a "
               "bottleneck the emulation did not have (e.g. a relay the replay skips)."))


def _report(run: Run, ref: Any, cost: list[dict[str, Any]], tokens: int,
            results: dict[str, dict[str, Any]]) -> None:
    from testbed.models.cost import format_table

    p = run.params
    rep = run.report
    n = len(ref.hosts)
    rep.section("Setup", f"""
Every design built from the same spec: {n} GPUs ({p['servers']} servers x {p['gpus']}),
400G NICs and 200G lanes at scale {p['scale']:g} (a NIC is
{ref.host_link_mbps()[ref.hosts[0].name]:g} Mb/s emulated; real-rate times are emulated
times x {real_time_factor(ref):g}, the scale). One DeepSeek-V3 step, {tokens} tokens per
GPU, uniform gating, replayed as RoCEv2 with the controller in `{p['lb']}` mode; dispatch
then combine. **{p['draws']} draws per design**: draw k uses gating seed {p['seed']} + k and
QPs shifted by k x {DRAW_QP_STRIDE} (new source ports: another ECMP hash draw). The flow model
runs beside them over {p['model_draws']} draws (gating seed {p['seed']} + j, hash seed j) on
the frame bytes the shapers count. NVLink legs of the kernels are accounted (nvlink_MB) but
not sent as packets; on `railonly` the cross-rail RDMA flows cross the server's NVLink
switch (`nvsN`).""")
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
    rep.text("*measured*: dispatch + combine completion, median [p25-p75] over N draws; "
             "*ideal*: the flow model's completion of the same kernel's flows under the "
             f"controller's policy ({p['lb']}) over its own draws; *ratio* = measured median / "
             "ideal median; *bound*: the analytic lower bound (median over the model's "
             "draws); hops per byte are the design's, the same in every draw. Per-draw "
             "numbers: draws.json; raw flows, messages and link counters: runs.json.")
    rep.image("completion.png", "Step completion per design and kernel: emulated draws, the "
              "flow model's draws, the lower bound")
    rep.image("tier_load_heatmap.png", "Mean link utilisation per tier (rows: design/kernel), "
              "mean over the draws")
    rep.section("Cost model", "At this size and at 8,192 GPUs, assumed list prices "
                "(`astral-lab cost --help`):\n\n```\n" + format_table(cost) + "\n```")
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
        rep.finding("measured vs model", measured="see the table", ideal="see the table",
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
    rel = f"; cost at 8,192 GPUs {relative_cost:.2f}x rail3" if relative_cost else ""
    if equal:
        why = ("Both fabrics have the same bound here, so neither design's tiers limit "
               "completion below it: the NICs and hash collisions set it, not the tier "
               "count; ")
    else:
        why = (f"The bounds differ ({ba:.2f} s vs {br:.2f} s): at this size one fabric "
               f"binds before the NICs, {'rail3' if br > ba else 'astral3'} the tighter; ")
    fewer = a["hops"] < r3["hops"]
    why += (f"astral3 crosses {a['hops']:.2f} switch hops per byte against rail3's "
            f"{r3['hops']:.2f}" + (" (latency, fewer places to collide or fail)" if fewer
                                   else "") + rel.replace("; cost", ", and costs")
            + ". Collisions differ per design because each hashes over a different number "
            "of parallel paths, which is why each design's completion is a spread over "
            "draws." + gaps)
    return {
        "title": f"{kernel}: two tiers vs three",
        "measured": f"astral3 {a['hops']:.2f} switch hops per byte, {_dt(a['measured'])}; "
                    f"rail3 {r3['hops']:.2f} hops, {_dt(r3['measured'])}",
        "ideal": f"flow model astral3 {_dt(a['model'])}, rail3 {_dt(r3['model'])} (ratios "
                 f"{_fmt(_ratio(a))}, {_fmt(_ratio(r3))}); bounds {ba:.2f} s vs {br:.2f} s"
                 + (" (equal: both non-blocking here)" if equal else "") + rel,
        "published": "Astral 3.0: cross-rail traffic in at most leaf-spine-leaf (3 hops) "
                     "instead of 5 through aggregation and core; fewer switches and optics",
        "why": why}


def railonly_finding(ro: dict[str, Any], a: dict[str, Any], gaps: str = "") -> dict[str, str]:
    """Flat (cross-rail) traffic on railonly against astral3."""
    x = ro["measured"]["median"] / a["measured"]["median"]
    xm = ro["model"]["median"] / a["model"]["median"]
    why = ("Cross-rail bytes first cross NVLink inside the source server to the GPU of the "
           "destination's rail, then the rail network: the NVLink switch and the relaying "
           "NIC carry extra load. ")
    if x > 1.05:
        why += (f"Here railonly took {x:.2f}x astral3's time (the model {xm:.2f}x): an MoE "
                "dispatch that is not rail-aligned pays for the missing spine layer.")
    else:
        why += (f"Here railonly took {x:.2f}x astral3's time (the model {xm:.2f}x): the "
                "relay cost no completion time at this size, because the NVLink links and "
                "the relaying NICs had capacity to spare.")
    return {
        "title": "flat (cross-rail) traffic on a rail-only network",
        "measured": f"railonly {_dt(ro['measured'])} vs astral3 {_dt(a['measured'])}; "
                    f"railonly busiest link {ro['busiest_link']} at "
                    f"{_dt(ro['busiest_util'], '')}",
        "ideal": f"flow model railonly {_dt(ro['model'])} vs astral3 {_dt(a['model'])}; "
                 f"bounds {ro['model_bound']['median']:.2f} s vs "
                 f"{a['model_bound']['median']:.2f} s",
        "published": "Rail-only (Wang et al., arXiv 2307.12169): cheaper, and fine when "
                     "traffic is rail-aligned; cross-rail traffic must relay over NVLink",
        "why": why + gaps}


def high_bandwidth_finding(results: dict[str, dict[str, Any]], gaps: str = ""
                           ) -> dict[str, str]:
    """The hierarchical kernel on astral3, and how much the design mattered for it."""
    hb = results["astral3/high_bandwidth"]
    why = ("Hierarchical dispatch sends each token once per destination server over its own "
           "rail, so on rail fabrics most bytes stay under one leaf or cross one spine")
    s_hb, s_flat = _spread(results, "high_bandwidth"), _spread(results, "flat")
    if s_hb is not None and s_flat is not None:
        word = "much less" if s_hb - 1 < 0.5 * (s_flat - 1) else "not much less"
        why += (f": across the designs its completion varied {s_hb:.2f}x (slowest over "
                f"fastest) against {s_flat:.2f}x for the flat kernel, so the design mattered "
                f"{word} than for cross-rail traffic.")
    else:
        why += "."
    return {
        "title": "high-bandwidth (rail-aligned) kernel",
        "measured": f"astral3 {hb['hops']:.2f} hops per byte, {_dt(hb['measured'])} "
                    f"({hb['measured']['median'] / hb['model_bound']['median']:.2f}x bound)",
        "ideal": f"flow model {_dt(hb['model'])}; bound {hb['model_bound']['median']:.2f} s",
        "published": "DeepEP normal kernels: ~43-58 GB/s RDMA per GPU on 400G NICs "
                     "(DeepEP README), i.e. close to the NIC",
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
