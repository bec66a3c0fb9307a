"""``demo``: the tour behind ``sudo make demo`` (about 3 minutes on a 2-core machine).

Four stops, each a small version of a full scenario, on real packets:

1. **The fabric**: the default 32-GPU ``astral3`` (rail leaves, spines through optical
   shuffles) comes up under the controller; every GPU pings every other; the wiring is drawn.
2. **ECMP vs planned** on it: a cross-leaf permutation, 2 QPs per GPU pair, first with
   per-flow hashing, then with the controller placing every QP (``PUT /lb``). Where a QP
   lands under ECMP is a hash of its UDP source port, so ECMP is run over several draws
   (new source ports each time) and reported as a distribution.
3. **One decode burst**: DeepSeek-V3 low-latency dispatch and combine (one 7,408-byte
   message per token copy, all ranks at once): message latency p50/p99, over a few
   gating seeds.
4. **The three-tier baseline**: the same permutation on ``rail3`` (rail ToR, aggregation,
   core) at the same GPU count: hops and completion, ECMP draws and planned.

Beside every measurement stands the flow model's number for the same plan, flows and
policy (``ideal``; for ECMP its distribution over many more hash draws than the emulation
can afford) and the analytic lower bound. It ends with one table, three plots and
REPORT.md, and says where they are. The full versions: ``astral-lab run lb-compare``,
``decode-latency``, ``topology-compare``.
"""

from __future__ import annotations

from typing import Any

from controllers import policies
from scenarios.base import (
    DRAWS,
    FABRIC_GPUS,
    GPUS,
    MODEL_DRAWS,
    PHASE_SECONDS,
    SCALE,
    TOKENS,
    Param,
    Run,
    RunResult,
    scenario,
    servers_of,
)
from scenarios.common import (
    RATIO_BAND,
    compare,
    distribution,
    fmt_distribution,
    in_band,
    leaf_fanout,
    link_counters,
    link_loads,
    load_stats,
    mean_hops,
    median_chance,
    message_times,
    permutation_flows,
    real_time_factor,
    wire_flows,
)
from scenarios.findings import margin_text, pace_caveats
from scenarios.prose import Prose
from testbed.models.bounds import bounds
from testbed.models.perflow import model_flows
from testbed.topologies import build_for_gpus
from traffic.kernels import low_latency
from traffic.shell.replay import percentile, replay, replay_step
from traffic.shell.running import RunningLab
from traffic.workload import Phase, simulate_step
from vocab.plan import WiringPlan
from vocab.validate import SEED

ORDER = 10  # where it lists in astral-lab list (vocab.plugins.listing_key)
WORDS = Prose.of_module(__name__)  # the report's prose: scenarios/templates/<this file's name>.md

#: QPs per GPU pair in the permutation (each QP is one 5-tuple, hashed on its own)
QPS = 2


def _flows(plan: WiringPlan, nbytes: int, seed: int, draw: int) -> list[Any]:
    """The permutation of ``seed`` with draw ``draw``'s source ports (its hash draw)."""
    return permutation_flows(plan, nbytes, qps=QPS, seed=seed, qp_base=QPS * draw)


def _busiest(plan: WiringPlan, loads: list[dict[str, Any]], qp_wire: int) -> dict[str, Any]:
    """The fabric link that took longest to drain, in "QPs' worth" of bytes (``qp_wire``:
    one QP's frame bytes, what the link counters count).

    A QP runs at its NIC share (NIC rate / QPS); a link of rate R holds R / share of them
    at full speed. Carrying k QPs' bytes it needs k x share / R times a QP's ideal time:
    that factor is what a collision costs on this link.
    """
    share = min(plan.rdma_nic().values()) / QPS
    top = max(loads, key=lambda r: r["bytes"] * 8 / (r["mbps"] * 1e6))
    qps = top["bytes"] / qp_wire
    return {"link": top["link"], "direction": top["direction"], "tier": top["tier"],
            "mbps": top["mbps"], "qps": round(qps, 2), "holds_qps": top["mbps"] / share,
            "slowdown": max(1.0, qps * share / top["mbps"])}


def _model(plan: WiringPlan, nbytes: int, seed: int, mode: str, draws: int) -> dict[str, Any]:
    """The flow model's completion (and busiest-link factor) for the same flows and policy.

    ECMP: over ``draws`` hash draws (source ports and the model's hash salt); planned: the
    controller's own placement, one answer.
    """
    n = draws if policies.POLICIES.get(mode).random else 1
    done, slow = [], []
    for d in range(n):
        flows = wire_flows(_flows(plan, nbytes, seed, d))
        r = model_flows(plan, flows, mode, seed=d, unit="mbps")
        done.append(r.completion_s)
        nic_time = QPS * flows[0].bytes * 8 / (min(plan.rdma_nic().values()) * 1e6)
        slow.append((r.max_link_time_s or 0) / nic_time)
    return {"completion_s": distribution(done), "slowdown": distribution(slow)}


def _permutation(run: Run, lab: RunningLab, plan: WiringPlan, mode: str, label: str
                 ) -> dict[str, Any]:
    """One permutation under ``mode``: ECMP over ``draws`` hash draws, planned once."""
    p = run.params
    client = lab.client()
    client.set_lb(mode)
    lab.wait_converged()
    nbytes = int(min(plan.rdma_nic().values()) * 1e6 / 8 * p["seconds"])
    n = p["draws"] if policies.POLICIES.get(mode).random else 1
    margin = run.guard(lab, _flows(plan, nbytes, p["seed"], 0), label)["margin"]
    per_draw = []
    for d in range(n):
        flows = _flows(plan, nbytes, p["seed"], d)
        before = link_counters(plan)
        res = replay(lab, flows, label=f"{label} {d + 1}/{n}" if n > 1 else label)
        loads = link_loads(plan, before, link_counters(plan), res.job_completion_s)
        per_draw.append({"draw": d, "completion_s": res.job_completion_s,
                         "lost": res.lost_packets, "start_skew_s": res.start_skew_s,
                         "max_over_mean": load_stats(loads)["max_over_mean"],
                         "busiest": _busiest(plan, loads, wire_flows(flows)[0].bytes),
                         "sports": sorted({f.sport for f in flows}), "links": loads,
                         "plane": res.plane})
    flows = _flows(plan, nbytes, p["seed"], 0)
    model = _model(plan, nbytes, p["seed"], mode, p["model_draws"])
    measured = distribution([r["completion_s"] for r in per_draw])
    return {"mode": mode, "measured": measured, "model": model,
            "slowdown": distribution([r["busiest"]["slowdown"] for r in per_draw]),
            "bound_s": bounds(plan, wire_flows(flows), unit="mbps")["unsplit"],
            "hops": mean_hops(plan, flows), "lost": sum(r["lost"] for r in per_draw),
            "margin": margin, "plane": per_draw[-1]["plane"],
            "start_skew_s": max(r["start_skew_s"] for r in per_draw), "draws": per_draw}


def _permutation_row(run: Run, stop: str, fabric: str, r: dict[str, Any], note: str) -> None:
    m, i = r["measured"], r["model"]["completion_s"]
    run.row(stop=stop, fabric=fabric, what=f"permutation, {r['mode']}",
            measured=fmt_distribution(m, " s") if m["draws"] > 1 else f"{m['median']:.2f} s",
            ideal=fmt_distribution(i, " s") if i["draws"] > 1 else f"{i['median']:.2f} s",
            ratio=f"{m['median'] / i['median']:.2f}", bound=f"{r['bound_s']:.2f} s",
            note=note)


def _decode(run: Run, lab: RunningLab, plan: WiringPlan) -> dict[str, Any]:
    """The decode burst over ``decode_draws`` gating seeds; the model on each draw's flows
    (its message latencies, and the phase's completion: do the bytes arrive on time?)."""
    p = run.params
    mode = lab.client().lb()["mode"]
    out: dict[str, Any] = {"mode": mode, "draws": []}
    lat: dict[str, list[float]] = {}
    for d in range(p["decode_draws"]):
        seed = p["seed"] + d
        step = simulate_step("deepseek-v3", servers_of(p), p["gpus_per_server"],
                             p["decode_tokens"], seed=seed)
        traffic = low_latency(step, plan)
        if d == 0:
            out["margin"] = run.guard(lab, [f for f in traffic.flows if f.phase == Phase.DISPATCH],
                                      "decode burst")["margin"]
        res = replay_step(lab, traffic)
        draw: dict[str, Any] = {"seed": seed}
        for phase, r in res.items():
            got = [m["latency_ns"] / 1e6 for m in r.messages
                   if m.get("complete") and m.get("latency_ns") is not None]
            flows = [f for f in traffic.flows if f.phase == phase]
            times, ends = message_times(plan, flows, mode)
            ideal = [t * 1e3 for t in times]
            start = min((f.start for f in flows), default=0.0)
            draw[phase] = {"p50": percentile(got, 50), "p99": percentile(got, 99),
                           "ideal_p50": percentile(ideal, 50),
                           "ideal_p99": percentile(ideal, 99),
                           "floor_ms": _serial_ms(flows, plan), "messages": len(got),
                           "incomplete": sum(max(1, f.messages) for f in flows) - len(got),
                           "lost": r.lost_packets, "completion_s": r.job_completion_s,
                           "ideal_completion_s": max(ends, default=start) - start,
                           "start_skew_s": r.start_skew_s, "plane": r.plane}
            lat.setdefault(phase, []).extend(got)
            if d == 0:
                run.save_json(f"decode_{phase}_messages.json", r.messages)
        out["draws"].append(draw)
        run.stage(f"decode burst, gating seed {seed}")
    for phase in lat:
        rows = [dr[phase] for dr in out["draws"]]
        out[phase] = {q: {"measured": distribution([r[q] for r in rows]),
                          "ideal": distribution([r[f"ideal_{q}"] for r in rows]),
                          "ratio": distribution([r[q] / r[f"ideal_{q}"] for r in rows])}
                      for q in ("p50", "p99")}
        out[phase]["completion_ratio"] = distribution(
            [r["completion_s"] / r["ideal_completion_s"] for r in rows
             if r["ideal_completion_s"]])
        out[phase]["floor_ms"] = max(r["floor_ms"] for r in rows)
        out[phase]["messages"] = sum(r["messages"] for r in rows)
        for k in ("lost", "incomplete"):
            out[phase][k] = sum(r[k] for r in rows)
        out[phase]["start_skew_s"] = max(r["start_skew_s"] for r in rows)
        out[phase]["completion_s"] = distribution([r["completion_s"] for r in rows])
        out[phase]["plane"] = rows[-1]["plane"]
    out["latencies_ms"] = {k: sorted(v) for k, v in lat.items()}
    return out


def where(result: RunResult) -> str:
    """The closing lines of `make demo` (its ``epilogue``): what was produced and where."""
    return "\n".join([
        f"\nEverything is in {result.path}/:",
        "  REPORT.md       the table, the plots and what they mean",
        "  fabric.png      the fabric that ran (rail leaves, spines, optical shuffle lanes)",
        "  permutation.png ECMP draws vs planned, astral3 vs rail3, beside the flow model",
        "  decode_cdf.png  decode message latency",
        "  summary.csv, summary.json, runs.json, config.json   the numbers, raw and with "
        "every parameter",
        "Next: astral-lab list   (all scenarios)   |   docs/walkthrough.md"])


@scenario(
    "the 3-minute tour: astral3 up, ECMP vs planned, a decode burst, vs rail3",
    Param("gpus", 32, "GPUs in all, at most 64 servers of --gpus-per-server (4 x 8: the "
          "default 32-GPU astral3)", quick=8, rule=FABRIC_GPUS),
    Param("gpus_per_server", 8, "GPUs (NICs, rails) per server", quick=4, rule=GPUS),
    Param("scale", 1e-5, "emulated rate = real rate x scale (1e-5: a 400G NIC is 4 Mb/s; "
          "keeps rail3's 5-hop paths within this machine's switching)", rule=SCALE),
    Param("seconds", 2.5, "ideal length of each permutation (emulated s)", quick=2.0,
          rule=PHASE_SECONDS),
    Param("draws", 7, "ECMP hash draws emulated per fabric (new source ports each)",
          quick=5, rule=DRAWS),
    Param("model_draws", 200, "ECMP hash draws in the flow model (its distribution)",
          rule=MODEL_DRAWS),
    Param("decode_tokens", 8, "decode tokens per GPU in the burst", quick=4, rule=TOKENS),
    Param("decode_draws", 3, "decode bursts emulated (one gating seed each)", quick=2,
          rule=DRAWS),
    Param("baseline", True, "also run the permutation on rail3"),
    Param("seed", 1, "permutation and (first) gating seed", rule=SEED),
    fabrics=lambda p: {d: build_for_gpus(d, p["gpus"], p["gpus_per_server"], scale=p["scale"])
                       for d in ("astral3", "rail3")[:2 if p["baseline"] else 1]},
    epilogue=where,
)
def demo(run: Run) -> None:
    """See the module docstring."""
    # lazy: testbed.draw loads matplotlib (~0.2 s); astral-lab list loads every scenario
    from testbed.draw import draw_plan

    p = run.params
    if p["draws"] < 1 or p["model_draws"] < 1 or p["decode_draws"] < 1:
        raise ValueError("draws, model_draws and decode_draws must be >= 1")
    plan = run.fabric("astral3")
    draw_plan(plan, run.path("fabric.png"))
    results: dict[str, dict[str, Any]] = {}
    with run.lab(plan, label="astral3", lb="ecmp") as lab:
        reach = lab.reachability()
        run.log(str(reach))
        run.row(stop="1 fabric", fabric="astral3", what="all-pairs ping",
                measured=f"{reach.received}/{reach.pairs} pairs", ideal="all", ratio="",
                bound="", note=f"up in {lab.timings.get('total', 0):.1f} s")
        run.summary["reachability"] = {"pairs": reach.pairs, "received": reach.received}
        run.stage("astral3 up, all pairs reached")
        for mode in ("ecmp", "planned"):
            r = _permutation(run, lab, plan, mode, f"astral3 {mode}")
            results[f"astral3/{mode}"] = r
            _permutation_row(run, "2 load balancing", "astral3", r,
                             f"busiest link carried {r['slowdown']['median']:.1f}x its "
                             f"share (median), {r['lost']} lost")
            run.stage(f"astral3 permutation under {mode}: "
                      f"{fmt_distribution(r['measured'], ' s')}")
        decode = _decode(run, lab, plan)
        rtf = real_time_factor(plan)
        for phase in Phase:
            if phase not in decode:
                continue
            d = decode[phase]
            m50, m99 = d["p50"]["measured"], d["p99"]["measured"]
            i50, i99 = d["p50"]["ideal"], d["p99"]["ideal"]
            run.row(stop="3 decode burst", fabric="astral3", what=f"{phase} latency p50/p99",
                    measured=f"{m50['median']:.0f}/{m99['median']:.0f} ms",
                    ideal=f"{i50['median']:.0f}/{i99['median']:.0f} ms",
                    ratio=f"{d['p50']['ratio']['median']:.2f}/"
                          f"{d['p99']['ratio']['median']:.2f}",
                    bound=f"{d['floor_ms']:.1f} ms",
                    note=f"medians of {m50['draws']} gating seeds; = "
                         f"{m50['median'] * 1e3 * rtf:.2f}/{m99['median'] * 1e3 * rtf:.2f} us "
                         f"at real rates, {d['messages']} messages")
        results["decode"] = decode
        run.stage("decode bursts replayed")
    if p["baseline"]:
        r3 = run.fabric("rail3")
        with run.lab(r3, label="rail3", lb="ecmp") as lab:
            for mode in ("ecmp", "planned"):
                r = _permutation(run, lab, r3, mode, f"rail3 {mode}")
                results[f"rail3/{mode}"] = r
                _permutation_row(run, "4 baseline", "rail3", r,
                                 f"{r['hops']:.1f} switch hops vs "
                                 f"{results['astral3/' + mode]['hops']:.1f} on astral3; "
                                 f"busiest link {r['slowdown']['median']:.1f}x its share")
                run.stage(f"rail3 permutation under {mode}: "
                          f"{fmt_distribution(r['measured'], ' s')}")
    run.save_json("runs.json", results)
    _plots(run, results)
    _report(run, plan, results)
    _summary(run, results)


def _serial_ms(flows: list[Any], plan: WiringPlan) -> float:
    """One message's serialisation at the NIC: the floor under any message latency."""
    sizes = [f.message_bytes for f in flows if f.message_bytes]
    nic = min(plan.rdma_nic().values())
    return (max(sizes) if sizes else 0) * 8 / (nic * 1e6) * 1e3


def _plots(run: Run, results: dict[str, Any]) -> None:
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: pyplot loads a backend: only after matplotlib.use("Agg") above
    import matplotlib.pyplot as plt

    keys = [k for k in ("astral3/ecmp", "astral3/planned", "rail3/ecmp", "rail3/planned")
            if k in results]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for i, k in enumerate(keys):
        r = results[k]
        model = r["model"]["completion_s"]["values"]
        colour = "tab:red" if k.endswith("ecmp") else "tab:blue"
        ax.boxplot([model], positions=[i - 0.18], widths=0.3, patch_artist=True,
                   boxprops={"facecolor": "0.88", "edgecolor": "0.5"},
                   medianprops={"color": "0.3"}, whiskerprops={"color": "0.5"},
                   capprops={"color": "0.5"}, flierprops={"markersize": 2})
        got = r["measured"]["values"]
        ax.scatter([i + 0.18 + 0.04 * ((j % 5) - 2) for j in range(len(got))], got,
                   color=colour, s=16, zorder=3)
        ax.hlines(r["measured"]["median"], i + 0.05, i + 0.31, color=colour, lw=2)
    ax.axhline(results[keys[0]]["bound_s"], color="k", ls="--", lw=1, label="lower bound")
    ax.set_xticks(range(len(keys)), keys)
    ax.set_ylabel("permutation completion, emulated s")
    ax.set_title("grey box: flow model over hash draws; dots: emulated draws (bar = median)",
                 fontsize=8)
    ax.legend(fontsize=7)
    run.save_figure(fig, "permutation.png")

    fig, ax = plt.subplots(figsize=(5, 3.4))
    for phase, vals in results.get("decode", {}).get("latencies_ms", {}).items():
        if vals:
            ax.step(vals, [(i + 1) / len(vals) for i in range(len(vals))],
                    where="post", label=f"{phase} (emulated)")
    ax.set_xlabel("message latency, emulated ms")
    ax.set_ylabel("fraction of messages")
    ax.set_title("decode bursts: message latency CDF (all gating seeds)")
    ax.legend(fontsize=7)
    run.save_figure(fig, "decode_cdf.png")


def _report(run: Run, plan: WiringPlan, results: dict[str, Any]) -> None:
    rep = run.report
    rtf = real_time_factor(plan)
    rep.section("The tour", __doc__.split("\n\n", 1)[1].split("It ends")[0])
    rep.section("Summary", WORDS("summary"))
    rep.table(run.rows, ["stop", "fabric", "what", "measured", "ideal", "ratio", "bound",
                         "note"])
    rep.image("fabric.png", WORDS("fabric_caption"))
    rep.image("permutation.png", WORDS("permutation_caption"))
    rep.image("decode_cdf.png", WORDS("decode_caption"))
    rep.section("Findings")
    e, pl = results["astral3/ecmp"], results["astral3/planned"]
    rep.finding(**ecmp_finding(e, pl, leaf_fanout(plan, _flows(plan, 1, run.params["seed"], 0))))
    if "rail3/ecmp" in results:
        rep.finding(**fabric_finding(e, results["rail3/ecmp"], pl, results["rail3/planned"]))
    dec = results.get("decode", {})
    if dec.get("dispatch"):
        rep.finding(**decode_finding(dec, run.params["decode_tokens"], rtf))
    rep.section("Where next", WORDS("where_next"))


# --- findings: each reason chosen from the run's own evidence -------------------------------
#: a median within this factor of the bound "reaches" it; a busiest-link factor above
#: 1 + this counts as a collision
NEAR = 0.05


def _caveats(r: dict[str, Any], span_s: float | None = None) -> list[str]:
    return pace_caveats(margin=r.get("margin"), plane=r.get("plane"), lost=r.get("lost", 0),
                        start_skew_s=r.get("start_skew_s"), span_s=span_s)


def _vs_model(r: dict[str, Any]) -> str:
    """A permutation's measured-vs-model gap, when its ratio is outside the band: why."""
    m, i = r["measured"], r["model"]["completion_s"]
    ratio = m["median"] / i["median"]
    if in_band(ratio):
        return ""
    head = " " + WORDS("vs_model_head", ratio=ratio, mode=r["mode"]) + " "
    caveats = _caveats(r, m["median"])
    if caveats:
        return head + "; ".join(caveats) + "."
    if i["draws"] > 1:  # the placement is a hash draw
        chance = median_chance(i["values"], m["median"], m["draws"])
        return head + WORDS("vs_model_luck" if chance >= 0.05 else "vs_model_hash",
                            n=m["draws"], pct=100 * chance)
    return head + WORDS("vs_model_nothing")


def ecmp_finding(e: dict[str, Any], pl: dict[str, Any], fanout: tuple[int, int]
                 ) -> dict[str, str]:
    """ECMP against planned placement on astral3: the collision cost the draws show."""
    b = pl["bound_s"]
    m = e["measured"]
    ex, px = m["median"] / b, pl["measured"]["median"] / b
    slow = e["slowdown"]["median"]
    qps, lanes = fanout
    why = WORDS("ecmp_why", qps=qps, lanes=lanes) + " "
    if ex > 1 + NEAR and slow > 1 + NEAR:
        why += WORDS("ecmp_collided", slow=slow, draws=m["draws"], ex=ex)
        title = WORDS("ecmp_collided_title")
    elif ex > 1 + NEAR:
        why += WORDS("ecmp_slow", ex=ex, slow=slow)
        title = WORDS("ecmp_slow_title")
    else:
        lucky = sum(v <= b * (1 + NEAR) for v in e["model"]["completion_s"]["values"])
        why += WORDS("ecmp_lucky", draws=m["draws"], pct=100 * abs(ex - 1), slow=slow,
                     lucky=lucky, model_draws=e["model"]["completion_s"]["draws"])
        title = WORDS("ecmp_lucky_title")
    if m["draws"] > 1 and m["p75"] > m["p25"] * (1 + NEAR / 5):
        why += WORDS("ecmp_spread", lo=m["p25"] / b, hi=m["p75"] / b) + " "
    else:
        why += WORDS("ecmp_same") + " "
    if px <= 1 + NEAR:
        why += WORDS("planned_near", pct=100 * abs(px - 1))
    else:
        caveats = _caveats(pl, pl["measured"]["median"])
        why += WORDS("planned_slow", px=px) + " " + (
            WORDS("planned_caveats", caveats="; ".join(caveats)) if caveats
            else WORDS("planned_nothing"))
    why += _vs_model(e) + _vs_model(pl)
    return {
        "title": title,
        "measured": WORDS("ecmp_measured", ecmp=fmt_distribution(m, " s"),
                          planned=pl["measured"]["median"]),
        "ideal": WORDS("ecmp_ideal", model=fmt_distribution(e["model"]["completion_s"], " s"),
                       planned=pl["model"]["completion_s"]["median"], bound=b),
        "published": WORDS("ecmp_published"),
        "why": why}


def fabric_finding(e: dict[str, Any], r3: dict[str, Any], pl: dict[str, Any],
                   pl3: dict[str, Any]) -> dict[str, str]:
    """astral3's thin shuffled lanes against rail3's fat uplinks, under ECMP and planned."""
    eb, rb = e["draws"][0]["busiest"], r3["draws"][0]["busiest"]
    a, r = e["slowdown"]["median"], r3["slowdown"]["median"]
    ma, mr = e["model"]["slowdown"]["median"], r3["model"]["slowdown"]["median"]
    links = WORDS("fabric_links", tier_a=eb["tier"], mbps_a=eb["mbps"],
                  holds_a=eb["holds_qps"], tier_r=rb["tier"], mbps_r=rb["mbps"],
                  holds_r=rb["holds_qps"])
    model = (WORDS("fabric_as_model" if (ma > mr) == (a > r) else "fabric_unlike_model")
             + " " + WORDS("fabric_model_draws", ma=ma, mr=mr))
    fill = {"a": a, "r": r, "model": model, "links": links}
    if a > r * (1 + 2 * NEAR):
        title, why = WORDS("fabric_thin_title"), WORDS("fabric_thin", **fill)
    elif r > a * (1 + 2 * NEAR):
        title, why = WORDS("fabric_fat_title"), WORDS("fabric_fat", **fill)
    else:
        title, why = WORDS("fabric_alike_title"), WORDS("fabric_alike", **fill)
    b, b3 = pl["bound_s"], pl3["bound_s"]
    pa, pr = pl["measured"]["median"] / b, pl3["measured"]["median"] / b3
    hops = WORDS("fabric_hops", hops_a=e["hops"], hops_r=r3["hops"])
    off = max(abs(pa - 1), abs(pr - 1))
    if abs(b - b3) <= NEAR * b and off <= NEAR:
        why += " " + WORDS("fabric_planned_same", pct=100 * off, b=b, pa=pa, pr=pr, hops=hops)
    else:
        why += " " + WORDS("fabric_planned_differ", pa=pa, b=b, pr=pr, b3=b3, hops=hops)
    completion = WORDS("fabric_completion", a=e["measured"]["median"],
                       r=r3["measured"]["median"])
    return {
        "title": title,
        "measured": WORDS("fabric_measured", a=fmt_distribution(e["slowdown"], "x"),
                          r=fmt_distribution(r3["slowdown"], "x"), completion=completion),
        "ideal": WORDS("fabric_ideal", a=fmt_distribution(e["model"]["slowdown"], "x"),
                       r=fmt_distribution(r3["model"]["slowdown"], "x"),
                       pa=pl["model"]["slowdown"]["median"],
                       pr=pl3["model"]["slowdown"]["median"]),
        "published": WORDS("fabric_published"),
        "why": why}


def decode_gap(d: dict[str, Any], margin: float | None) -> str:
    """Why the decode ratios are outside 0.7-1.3, from the burst's own evidence ('' inside)."""
    r50, r99 = d["p50"]["ratio"]["median"], d["p99"]["ratio"]["median"]
    if in_band(r50) and in_band(r99):
        return ""
    done = d["completion_ratio"]["median"]
    head = " " + WORDS("decode_gap_head", r50=r50, r99=r99)
    caveats = pace_caveats(margin=margin, plane=d.get("plane"), lost=d.get("lost", 0),
                           start_skew_s=d.get("start_skew_s"),
                           span_s=d["completion_s"]["median"])
    if caveats:
        return head + WORDS("decode_gap_caveats", caveats="; ".join(caveats))
    if max(r50, r99) > RATIO_BAND[1]:
        return head + WORDS("decode_gap_queues" if in_band(done) else "decode_gap_late",
                            done=done, margin=margin_text(margin), plane=d.get("plane"))
    return head + " " + WORDS("decode_gap_low", done=_fmt(done))


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}"


def decode_finding(dec: dict[str, Any], tokens: int, rtf: float) -> dict[str, str]:
    """The decode burst's dispatch latency beside the model's, and what sets it."""
    d = dec["dispatch"]
    m50, m99 = d["p50"]["measured"], d["p99"]["measured"]
    i50, i99 = d["p50"]["ideal"], d["p99"]["ideal"]
    phase_ms = d["completion_s"]["median"] * 1e3
    why = WORDS("decode_why")
    if m99["median"] >= 0.7 * phase_ms:
        why += WORDS("decode_burst", p99=m99["median"], phase=phase_ms)
    else:
        why += WORDS("decode_share", p99=m99["median"], pct=100 * m99["median"] / phase_ms,
                     phase=phase_ms)
    gap = decode_gap(d, dec.get("margin"))
    if not gap:
        why += WORDS("decode_predicted", r50=d["p50"]["ratio"]["median"],
                     r99=d["p99"]["ratio"]["median"])
    else:
        why += "." + gap
    why += " " + WORDS("decode_real", tokens=tokens)
    return {
        "title": WORDS("decode_title"),
        "measured": WORDS("decode_measured", p50=fmt_distribution(m50, " ms", 0),
                          p99=fmt_distribution(m99, " ms", 0), p50_us=m50["median"] * 1e3 * rtf,
                          p99_us=m99["median"] * 1e3 * rtf,
                          completion=fmt_distribution(d["completion_ratio"], "x")),
        "ideal": WORDS("decode_ideal", mode=dec["mode"], p50=i50["median"], p99=i99["median"],
                       floor=d["floor_ms"]),
        "published": WORDS("decode_published"),
        "why": why}


def _summary(run: Run, results: dict[str, Any]) -> None:
    """summary.json: ``measured``/``ideal``/``ratio`` per figure; draws for random ones."""
    for key, r in results.items():
        if key == "decode":
            continue
        m, i = r["measured"], r["model"]["completion_s"]
        run.summary[key] = compare(
            m["median"], i["median"], quantity="permutation completion (emulated s)",
            draws=m["draws"], median=m["median"], p25=m["p25"], p75=m["p75"],
            values=m["values"], model=i, bound_s=r["bound_s"], hops=r["hops"],
            lost=r["lost"], busiest_slowdown=r["slowdown"],
            model_busiest_slowdown=r["model"]["slowdown"])
    dec = results.get("decode", {})
    for phase in Phase:
        if phase not in dec:
            continue
        for q in ("p50", "p99"):
            m, i = dec[phase][q]["measured"], dec[phase][q]["ideal"]
            run.summary[f"decode/{phase}/{q}"] = compare(
                m["median"], i["median"], quantity=f"{phase} message latency {q} (emulated ms)",
                draws=m["draws"], median=m["median"], p25=m["p25"], p75=m["p75"],
                values=m["values"], model=i, per_draw_ratio=dec[phase][q]["ratio"],
                floor_ms=dec[phase]["floor_ms"], lost=dec[phase]["lost"],
                policy=dec["mode"], phase_completion_ratio=dec[phase]["completion_ratio"],
                fidelity_margin=dec.get("margin"), plane=dec[phase]["plane"])
