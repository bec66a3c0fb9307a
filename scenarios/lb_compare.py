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

from controllers import policies
from scenarios.base import (
    DRAWS,
    GPUS,
    MODEL_DRAWS,
    QPS,
    SCALE,
    SECONDS,
    SEED,
    SERVERS,
    Param,
    Run,
    scenario,
)
from scenarios.common import (
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
from testbed.topologies import build

#: every policy the controller runs (controllers/policies/)
MODES = policies.names(controller=True)
WORKLOADS = ("permutation", "alltoall")
#: flow-model policy that predicts each controller mode: the same module
MODEL_POLICY = {m: m for m in MODES}
#: QP numbers of draw k start at k x this (far apart: every draw has its own source ports)
DRAW_QP_STRIDE = 1000
_COLOURS = {"ecmp": "tab:red", "planned": "tab:blue", "adaptive": "tab:green"}
_PALETTE = ("tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
#: a colour per mode: the shipped ones fixed, any other from the palette by position
COLOURS = {m: _COLOURS.get(m) or _PALETTE[i % len(_PALETTE)] for i, m in enumerate(MODES)}


def _flows(plan: Any, workload: str, seconds: float, qps: int, seed: int, qp_base: int
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
    return max(1, int(samples)) if MODEL_POLICY[mode] in RANDOM_POLICIES else 1


@scenario(
    "lb-compare", f"every load-balancing mode ({', '.join(MODES)}) on astral3: completion, "
    "lane load, spines",
    Param("servers", 4, "servers (of `gpus` GPUs each)", quick=2, rule=SERVERS),
    Param("gpus", 4, "GPUs (NICs, rails) per server", rule=GPUS),
    Param("scale", 2e-5, "emulated rate = real rate x scale (2e-5: a 400G NIC is 8 Mb/s)",
          rule=SCALE),
    Param("modes", list(MODES), "load-balancing modes to compare", quick=["ecmp", "planned"],
          choices=MODES),
    Param("workloads", list(WORKLOADS), "workloads", choices=WORKLOADS),
    Param("seconds", 6.0, "ideal completion time of each workload (emulated s)", quick=1.5,
          rule=SECONDS),
    Param("qps", 2, "QPs per GPU pair in the permutation", rule=QPS),
    Param("ecmp_samples", 5, "emulated ECMP (and adaptive) runs, each with other UDP source "
          "ports (hash draws)", quick=3, rule=DRAWS),
    Param("model_draws", 200, "flow-model hash draws beside them (seeds of its hash)",
          rule=MODEL_DRAWS),
    Param("seed", 1, "permutation seed", rule=SEED),
)
def lb_compare(run: Run) -> None:
    """See the module docstring."""
    from testbed.models.flowmodel import bounds
    from traffic.shell.replay import replay

    p = run.params
    if p["ecmp_samples"] < 1 or p["model_draws"] < 1:
        raise ValueError("--ecmp-samples and --model-draws must be >= 1")
    plan = build("astral3", servers=p["servers"], gpus=p["gpus"], scale=p["scale"])
    results: dict[str, dict[str, Any]] = {}
    raw: list[dict[str, Any]] = []
    with run.lab(plan, label="astral3", lb="ecmp") as lab:
        client = lab.client()
        for workload in p["workloads"]:
            base = _flows(plan, workload, p["seconds"], p["qps"], p["seed"], 0)
            bound = bounds(plan, wire_flows(base), unit="mbps")  # what the shapers count
            for mode in p["modes"]:
                client.set_lb(mode)
                client.wait_converged()
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
                    if policies.get(mode).pins:
                        exact = model_draws(plan, flows, MODEL_POLICY[mode], 1)[0]
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
                models = model_draws(plan, base, MODEL_POLICY[mode], p["model_draws"])
                hashed = not policies.get(mode).pins  # the switches hash: beside its mean
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
        MODEL_POLICY[mode] in RANDOM_POLICIES,
        "measured": distribution([d["completion_s"] for d in per_draw]),
        "model": distribution(model_t), "model_policy": MODEL_POLICY[mode],
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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


def _report(run: Run, plan: Any, results: dict[str, dict[str, Any]]) -> None:
    p = run.params
    rep = run.report
    rtf = real_time_factor(plan)
    rep.section("Setup", f"""
astral3 with {len(plan.hosts)} GPUs ({p['servers']} servers x {p['gpus']}), {len(plan.switches)}
switches, at scale {plan.scale:g}: a 400G NIC is {plan.host_link_mbps()[plan.hosts[0].name]:g}
Mb/s, a 200G lane {min(ln.mbps for ln in plan.links if ln.kind == 'lane'):g} Mb/s. Each
workload is sized to take {p['seconds']:g} s (emulated) at the NIC bound; at real rates that
is {p['seconds'] * rtf * 1e6:g} us (emulated time x scale). Modes:
{', '.join(p['modes'])} (one fabric, switched with `PUT /lb`). ECMP and adaptive depend on
the hash: each is run {p['ecmp_samples']} times with other UDP source ports (QP numbers
{DRAW_QP_STRIDE} x draw upward) and quoted as median [p25-p75], N=draws; planned is
deterministic (one run). The flow model runs beside them over {p['model_draws']} draws of
its hash; model and bound count the frame bytes (headers and ICRC) the shapers count, so
they are emulated times of the same flows. RoCEv2 packets from the lab's paced sender agents;
lossless (deep) queues.""")
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
    rep.text("*measured*: emulated completion, median [p25-p75] over N hash draws (one run "
             "where the mode is deterministic); *ideal*: the flow model's completion for the "
             "same plan, flows and policy (ECMP and adaptive: over many draws of its hash); "
             "*ratio* = measured median / ideal median; *bound*: the analytic floor (NIC and "
             "leaf-uplink capacity, flows unsplit) that no routing beats. Per-draw numbers "
             "are in draws.json; raw flows and messages in runs.json.")
    _published(run, results)
    rep.image("completion.png", "Completion per mode: emulated draws (dots) beside the flow "
              "model's distribution over hash draws (box) and the lower bound (dashed)")
    rep.image("spine_load.png", "Bytes each spine forwarded, every draw of every mode")
    rep.image("lane_heatmap.png", "Leaf-to-spine lane load relative to the mean, every run")
    rep.section("Findings")
    fanout = leaf_fanout(plan, _flows(plan, "permutation", 1.0, p["qps"], p["seed"], 0))
    for wl in p["workloads"]:
        if f"{wl}/ecmp" in results:
            rep.finding(**ecmp_finding(results, wl, p["qps"], fanout))
    for r in results.values():
        if policies.get(r["mode"]).pins and not in_band(_ratio(r)):
            rep.finding(**gap_finding(r, results.get(f"{r['workload']}/ecmp")))
    if "adaptive" in p["modes"]:
        wl = p["workloads"][0]
        rep.finding(**adaptive_finding(results[f"{wl}/adaptive"], p["seconds"],
                                       results.get(f"{wl}/ecmp")))
    rep.section("How to read this", """
`ratio` is measured median over ideal median: 1.0 means the emulation did what the flow
model predicts for these flows under this policy. `vs bound` is measured over the lower
bound. `busiest lane / mean` is the bytes on the busiest leaf-spine lane (either direction)
over the mean lane: 1.0 is perfect balance; the model's column is the same quantity on its
paths. A ratio outside 0.7-1.3 has its own finding with the evidence.""")


def _published(run: Run, results: dict[str, dict[str, Any]]) -> None:
    """Each policy beside the shape its source published, and what the lab saw besides
    completion (reordering, moves, feedback) that explains where it differs."""
    rows = []
    for r in results.values():
        pol = policies.get(r["mode"])
        m, b = r["measured"]["median"], r["bound_s"]
        host = [d.get("host", {}) for d in r["per_draw"]]
        seen = []
        if any(h.get("reordered") for h in host):
            seen.append(f"{max(h['reordered'] for h in host)} packets out of order, window "
                        f"<= {max(h['reorder_window_max'] for h in host)} packets")
        if any(h.get("moves") for h in host):
            seen.append(f"{max(h['moves'] for h in host)} entropy moves")
        fb = [h.get("feedback") or {} for h in host]
        if any(fb):
            seen.append(f"{max(f.get('acks_sent', 0) for f in fb)} ACKs / "
                        f"{max(f.get('cnps_sent', 0) for f in fb)} CNPs")
        if host and pol.expands:
            seen.append(f"{host[0].get('qps')} QPs opened")
        rows.append({"workload": r["workload"], "policy": r["mode"],
                     "measured / bound": m / b if m is not None and b else None,
                     "model / bound": r["model"]["median"] / b if b else None,
                     "published": pol.published or "-", "source": pol.source or "-",
                     "the lab saw": "; ".join(seen) or "-"})
    run.report.text("Each policy beside its published shape (medians over the draws; "
                    "*the lab saw*: the worst draw):")
    run.report.table(rows)
    notes = [f"**{n}**: {policies.get(n).differs}" for n in run.params["modes"]
             if policies.get(n).differs]
    if notes:
        run.report.text("Where the lab differs from the published shape, and why:\n\n"
                        + "\n".join(f"* {n}" for n in notes))


def _caveats(r: dict[str, Any]) -> list[str]:
    return pace_caveats(margin=r["margin"], plane=r.get("plane"), lost=r["lost"],
                        start_skew_s=r["start_skew_s"], span_s=r["measured"]["median"])


def _nothing(r: dict[str, Any]) -> str:
    return (f"this run's fidelity margin ({margin_text(r['margin'])}), plane "
            f"({r.get('plane')}), losses ({r['lost']}) and start skew "
            f"({r['start_skew_s']:.3f} s) show nothing that would explain it")


def ecmp_finding(results: dict[str, dict[str, Any]], wl: str, qps: int,
                 fanout: tuple[int, int]) -> dict[str, str]:
    """ECMP's collision penalty on one workload, with the reasons its draws support."""
    e = results[f"{wl}/ecmp"]
    pl = results.get(f"{wl}/planned")
    m, i = e["measured"], e["model"]
    ratio = _ratio(e)
    b = e["bound_s"]
    measured = (f"ECMP {fmt_distribution(m, ' s')} = {m['median'] / b:.2f}x the bound "
                f"(busiest lane {fmt_distribution(e['lane_skew'], 'x')} the mean)")
    if pl is not None:
        measured += f"; planned {pl['measured']['median']:.2f} s (1 run)"
    ideal = (f"flow model ECMP {fmt_distribution(i, ' s')} over its hash draws (ratio "
             f"{ratio:.2f}); busiest lane {fmt_distribution(e['model_lane_skew'], 'x')}; "
             f"ecmp-fluid (the hash's expectation) {e['fluid_s']:.2f} s; bound {b:.2f} s")
    if pl is not None:
        ideal += f"; planned {pl['model']['median']:.2f} s"
    steps = sorted({round(v / b, 1) for v in m["values"]})
    took = ", ".join(f"{x:g}x" for x in steps)
    if wl == "permutation":
        published = ("random hashing of n flows onto n paths leaves ~1/e (37%) of paths idle "
                     "(balls into bins); Hedera (NSDI 2010) and later fabric papers report "
                     "ECMP losing a large share of bisection bandwidth to collisions")
        why = (f"With {qps} QPs per GPU pair the busiest leaf sends {fanout[0]} QPs over "
               f"{fanout[1]} uplink lanes; QPs the hash puts on one lane share its rate "
               "while another lane idles, and the slowest QP sets the job's completion, so "
               "completion takes few values: here the draws took "
               f"{took} the bound. Planned mode colours the leaf-to-leaf flow multigraph so "
               "no lane carries more than its share.")
    else:
        published = ("all-to-all spreads n-1 flows per GPU: hashing averages out (the "
                     "lab's model: busiest lane 1.3-1.5x its share at 64-256 GPUs, "
                     "docs/controller.md, 'Load-balancing quality')")
        why = ("Every lane carries many flows, so the hash's imbalance is a few flows more "
               "or less per lane rather than two on one and none on another")
        perm = results.get("permutation/ecmp")
        x = m["median"] / b
        if perm is not None:
            px = perm["measured"]["median"] / perm["bound_s"]
            word = "smaller than" if x < px else "not smaller than"
            why += (f": here ECMP took {x:.2f}x the bound, {word} the permutation's "
                    f"{px:.2f}x")
        else:
            why += f": here ECMP took {x:.2f}x the bound"
        why += (". Flows that stay under one leaf (same rail) never touch a lane.")
    why += (" The emulated draws are OVS's dp_hash of the real source ports, the model's "
            "are the controller's hash model under other seeds: they agree in distribution, "
            "not draw by draw.")
    if not in_band(ratio):
        at = rank_in(m["median"], i["values"])
        why += (f" **The ratio ({ratio:.2f}) is outside 0.7-1.3.** The measured median "
                f"falls at the {100 * at:.0f}th percentile of the model's {i['draws']} "
                f"draws (range {i['min']:.2f}-{i['max']:.2f} s), and the emulated busiest "
                f"lane carried {e['lane_skew']['median']:.2f}x the mean against the model's "
                f"{e['model_lane_skew']['median']:.2f}x: ")
        inside = i["min"] * 0.97 <= m["median"] <= i["max"] * 1.03
        chance = median_chance(i["values"], m["median"], m["draws"])
        caveats = _caveats(e)
        if caveats:
            why += "the run itself may be the cause: " + "; ".join(caveats) + "."
        elif inside and chance >= 0.05:
            why += (f"the model's own draws give a median of {m['draws']} this far from "
                    f"theirs in {100 * chance:.0f}% of samples, so with N={m['draws']} "
                    "emulated draws the gap may be the draws' luck (more --ecmp-samples "
                    "narrow it).")
        elif inside:
            why += (f"the model's own draws give a median of {m['draws']} this far from "
                    f"theirs in only {100 * chance:.1f}% of samples: the lane loads differ "
                    "systematically, i.e. OVS's hash spreads these source ports differently "
                    "from the model's hash (a different hash function).")
        else:
            why += f"outside the model's whole range, so not luck; {_nothing(e)}."
    return {"title": f"{wl}: ECMP collision penalty", "measured": measured, "ideal": ideal,
            "published": published, "why": why}


def gap_finding(r: dict[str, Any], ecmp: dict[str, Any] | None = None) -> dict[str, str]:
    """A deterministic (or adaptive) row whose ratio is outside the band: why."""
    ratio = _ratio(r)
    m = r["measured"]
    lanes = r["lane_skew"]["median"]
    why = (f"The emulated busiest lane carried {lanes:.2f}x the mean (model "
           f"{r['model_lane_skew']['median']:.2f}x); fidelity margin "
           f"{margin_text(r['margin'])}, start skew {r['start_skew_s']:.3f} s, {r['lost']} "
           "packets lost. ")
    caveats = _caveats(r)
    if caveats:
        why += "The run itself may be the cause: " + "; ".join(caveats) + "."
    elif r["mode"] == "adaptive":
        why += _adaptive_position(r, ecmp)
    else:
        why += ("The controller pins every flow on its planned path, so the paths are the "
                f"model's; {_nothing(r)}.")
    return {"title": f"{r['workload']}/{r['mode']}: measured vs model",
            "measured": _dist_text(m, " s", m["draws"] > 1),
            "ideal": f"{_dist_text(r['model'], ' s', r['model']['draws'] > 1)} (ratio "
                     f"{ratio:.2f})" if ratio else "-",
            "published": "-", "why": why}


def _adaptive_position(a: dict[str, Any], ecmp: dict[str, Any] | None) -> str:
    """Where adaptive's measurement sits between the hash placement and its final paths."""
    got, final = a["measured"]["median"], a["model"]["median"]
    hashed = ecmp["measured"]["median"] if ecmp else None
    out = ("Adaptive moves flows only after the controller's polls (1 s, hold 3 polls), "
           "while the model keeps its final paths from the start. ")
    if got > final * 1.05 and hashed is not None and got < hashed * 0.95:
        return out + (f"Here it took {got:.2f} s, between ECMP's {hashed:.2f} s and the "
                      f"final paths' {final:.2f} s: the first polls ran on the hash "
                      "placement.")
    if got > final * 1.05 and hashed is not None:
        return out + (f"Here it took {got:.2f} s, no faster than ECMP's {hashed:.2f} s: "
                      "no move paid off within the job.")
    if got > final * 1.05:
        return out + (f"Here it took {got:.2f} s against the final paths' {final:.2f} s: "
                      "the first polls ran on the hash placement.")
    return out + (f"Here it took {got:.2f} s, as fast as the final paths ({final:.2f} s): "
                  "the moves came early enough to pay off.")


def adaptive_finding(a: dict[str, Any], seconds: float, ecmp: dict[str, Any] | None
                     ) -> dict[str, str]:
    """Adaptive mode against its final paths and the hash placement it starts from."""
    return {
        "title": "adaptive mode",
        "measured": f"{fmt_distribution(a['measured'], ' s')} "
                    f"({a['measured']['median'] / a['bound_s']:.2f}x the bound)",
        "ideal": f"flow model, adaptive's final paths: {fmt_distribution(a['model'], ' s')}",
        "published": "Hedera's global first fit recovers most of the ECMP loss for long "
                     "flows",
        "why": ("Adaptive starts from the hash placement (the controller's hash model, the "
                "same as the flow model's seed 0 on these 5-tuples) and moves flows off "
                f"lanes above its threshold; the job is sized to {seconds:g} s at the "
                "bound. "
                + _adaptive_position(a, ecmp) + " The model is the ideal of a long job.")}


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
