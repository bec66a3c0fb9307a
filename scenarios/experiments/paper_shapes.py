"""``paper-shapes``: one table of the published shapes the lab reproduces.

Each row is one figure from a paper or a project's documentation, beside the lab's own value
of the same quantity and the flow model's (``testbed.models.flowmodel``). The lab's value comes from
packets where packets can show it, and says so where they cannot:

1. **ECMP on a permutation** (emulated): every GPU sends to a partner under another leaf over
   ``qps`` QPs, with as many QPs per leaf as uplink lanes; per-flow hashing puts some on the
   same lane. Measured: the mean flow throughput as a fraction of its ideal (the planned
   model's completion of that flow over its measured completion), over ``ecmp_draws`` hash
   draws (different QP numbers, hence UDP source ports, hence OVS ``dp_hash`` outcomes).
   For equal long flows this fraction is the balls-into-bins share of paths in use.
2. **DeepEP low-latency dispatch growth with EP size** (emulated): one decode burst per EP
   size on its own ``astral3`` fabric, dispatch phase only (the functions of
   ``decode-latency``), over ``ep_seeds`` gating seeds; the growth EP16/EP8 and EP32/EP8 of
   the phase's completion, paired by seed, against DeepEP's 77 -> 118 -> 155 us. An EP size
   the fidelity guard would refuse on this machine is skipped, and its row says so.
3. **EPLB rank imbalance** (workload simulation, not emulated): max/mean token copies per
   GPU before and after expert replication (``traffic.workload``), over seeds.
4. **Rail-only relay** (emulated): a flat All-to-All dispatch on ``railonly`` (cross-rail
   bytes relayed over NVLink) and on ``astral3``, both in planned mode so hash collisions do
   not hide the relay; the completion ratio.
5. **Two tiers vs three**: switch hops (the lab's wiring plans, checked by the controller's
   path finder) and network cost (``testbed.models.cost``) of ``astral3`` against ``rail3``, at the
   lab's size and at the paper's (``cost_gpus``, ``cost_radix``).

Every figure that depends on a random draw is given as median [p25-p75], N. ``summary.json``
has one entry per row: ``measured`` (the lab), ``ideal`` (the flow model's value of the same
quantity), ``ratio`` = measured / ideal, the distribution where there is one, and the
published value with its source. The pure parts (``PUBLISHED``, ``build_rows``, the
per-row arithmetic) need no fabric and are unit-tested; they live in
``scenarios.paper_shapes_table``. This module runs the measurements and writes the plot
and the report (its words in ``scenarios/templates/paper_shapes.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from controllers.paths import PathFinder
from scenarios.base import (
    DRAWS,
    FABRIC_GPUS,
    GPUS,
    MODEL_DRAWS,
    PHASE_SECONDS,
    QPS,
    SCALE,
    TOKENS,
    ZIPF_EXPONENT,
    Param,
    Run,
    paired_servers,
    scenario,
    servers_of,
)
from scenarios.common import DRAW_QP_STRIDE, fmt_distribution, permutation_flows
from scenarios.experiments.decode_latency import decode_flows, decode_stats
from scenarios.experiments.topology_compare import kernel_traffic, tokens_for
from scenarios.fidelity import REFUSE_BELOW, calibrate, offered, verdict
from scenarios.paper_shapes_table import PUBLISHED, build_rows, dist, flow_throughput
from scenarios.prose import Prose
from testbed.fabricspec import FABRIC_RULES, GPU_COUNT, CostSpec, FabricSpec
from testbed.models.bounds import bounds
from testbed.models.cost import Prices, analyze, counts_for_spec, price
from testbed.models.perflow import model_flows
from testbed.topologies import build_for_gpus
from traffic.roce import DEFAULT_PMTU
from traffic.shell.replay import replay
from traffic.shell.running import RunningLab
from traffic.workload import Phase, simulate_step, zipf
from vocab.plan import WiringPlan
from vocab.validate import SEED, count

ORDER = 80  # where it lists in astral-lab list (vocab.plugins.listing_key)
WORDS = Prose.of_module(__name__)  # the report's prose: scenarios/templates/<this file's name>.md

#: DeepEP's EP sizes the table compares (the flow model always covers all three).
EP_SIZES = (8, 16, 32)


def _check_params(p: dict[str, Any]) -> None:
    for name in ("ecmp_draws", "model_draws", "ep_seeds", "ep_model_draws", "eplb_seeds",
                 "relay_repeats", "qps", "ep_tokens", "eplb_tokens"):
        if int(p[name]) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1 (got {p[name]})")
    paired_servers(p)
    gps = p["ep_gpus_per_server"]
    eps = sorted(p["ep_sizes"])
    if not {8, 16} <= set(eps) <= set(EP_SIZES):
        raise ValueError(f"--ep-sizes must hold 8 and 16, and may add 32 (DeepEP's points; "
                         f"got {p['ep_sizes']})")
    for ep in eps:
        if ep % (2 * gps):
            raise ValueError(f"--ep-sizes: {ep} is not an even number of servers of {gps} GPUs "
                             "(astral3 groups servers in blocks of two)")
    for name in ("scale", "ep_scale"):
        if not 0 < p[name] <= 1e-2:
            raise ValueError(f"--{name.replace('_', '-')} must be in (0, 0.01] (got {p[name]})")


# --- the scenario ------------------------------------------------------------------------------
@scenario(
    "one table: published shapes (ECMP collisions, DeepEP EP growth, EPLB, rail-only relay, "
    "2 vs 3 tiers) beside the lab's emulated value and the flow model's",
    Param("gpus", 16, "GPUs in all of the ECMP and relay fabrics (astral3/railonly, at most "
          "64 servers of --gpus-per-server, 2 per block)", quick=8, rule=FABRIC_GPUS),
    Param("gpus_per_server", 4, "GPUs (NICs, rails) per server of those fabrics", rule=GPUS),
    Param("scale", 1e-5, "emulated rate = real rate x scale for rows 1 and 4 (1e-5: a 400G "
          "NIC is 4 Mb/s)", rule=SCALE),
    Param("seconds", 3.0, "ideal length of the permutation and of the relay all-to-all "
          "(emulated s)", quick=2.0, rule=PHASE_SECONDS),
    Param("qps", 2, "QPs per GPU pair in the permutation", rule=QPS),
    Param("ecmp_draws", 10, "emulated ECMP hash draws (QP source ports)", quick=4, rule=DRAWS),
    Param("model_draws", 200, "flow-model hash draws for row 1", rule=MODEL_DRAWS),
    Param("ep_sizes", [8, 16, 32], "EP sizes of the decode burst emulated, one fabric each: "
          "8 and 16, optionally 32 (DeepEP's points); one the fidelity guard would refuse here "
          "is skipped, and its row says so", rule=count(2, 1024)),
    Param("ep_gpus_per_server", 4, "GPUs per server of the EP fabrics", rule=GPUS),
    Param("ep_tokens", 4, "decode tokens per GPU (DeepEP's benchmark uses 128)", quick=2,
          rule=TOKENS),
    Param("ep_scale", 5e-6, "emulated rate = real rate x scale for the EP fabrics",
          rule=SCALE),
    Param("ep_seeds", 4, "emulated gating seeds per EP size", quick=2, rule=DRAWS),
    Param("ep_model_draws", 50, "flow-model seeds per EP size", quick=20, rule=MODEL_DRAWS),
    Param("eplb_tokens", 4096, "tokens per GPU of the EPLB step (DeepSeek-V3 prefill batch)",
          rule=count(1, 1 << 20)),
    Param("eplb_seeds", 20, "seeds of the EPLB step", quick=10, rule=DRAWS),
    Param("zipf_exponent", 1.0, "Zipf exponent of the skewed gate EPLB balances (assumption)",
          rule=ZIPF_EXPONENT),
    Param("relay_repeats", 2, "emulated repeats of the relay all-to-all per fabric", quick=1,
          rule=DRAWS),
    Param("cost_gpus", 65536, "GPU count of the paper-scale cost and hops", rule=GPU_COUNT),
    Param("cost_radix", 1024, "switch radix in 200G lanes at that scale (1024: the model's "
          "64K what-if, a pure two-tier fabric; 256 = 51.2T today)",
          rule=FABRIC_RULES["radix"]),
    Param("seed", 1, "permutation and gating seed", rule=SEED),
    fabrics=lambda p: _fabrics(p),
)
def paper_shapes(run: Run) -> None:
    """See the module docstring."""
    p = run.params
    _check_params(p)
    raw: dict[str, Any] = {}
    m: dict[str, Any] = {"eplb": eplb_imbalance(p), "tiers": tiers(p)}
    run.stage(f"EPLB and tiers computed (no fabric): max/mean "
              f"{_median(m['eplb']['before']):.2f} -> {_median(m['eplb']['after']):.2f}")
    plan, rail = run.fabric("astral3"), run.fabric("railonly")
    m["ecmp"] = ecmp_model(plan, p)
    relay_flows = _relay_flows(p, plan, rail)
    m["relay"] = {"model": _relay_model(plan, rail, relay_flows), "lab": []}
    run.stage(f"flow model: ECMP {fmt_distribution(dist(m['ecmp']['model']))}")
    with run.lab(plan, label="astral3", lb="ecmp") as lab:
        _emulate_ecmp(run, lab, plan, m["ecmp"], raw)
        astral = _emulate_relay(run, lab, "astral3", relay_flows["astral3"], raw)
    with run.lab(rail, label="railonly", lb="planned") as lab:
        railonly = _emulate_relay(run, lab, "railonly", relay_flows["railonly"], raw)
    m["relay"]["lab"] = [r / a for a, r in zip(astral, railonly, strict=True)]
    m["ep"] = _ep_growth(run, p, raw)
    publish(run, m, plan, raw)


def _fabrics(p: dict[str, Any]) -> dict[str, Any]:
    """The fabrics the run brings up: the ECMP and relay ones, and one per EP size."""
    _check_params(p)
    return {**{d: build_for_gpus(d, p["gpus"], p["gpus_per_server"], scale=p["scale"])
               for d in ("astral3", "railonly")},
            **{f"astral3-ep{ep}": _ep_plan(p, ep) for ep in sorted(p["ep_sizes"])}}


def publish(run: Run, m: dict[str, Any], plan: WiringPlan, raw: dict[str, Any] | None = None
            ) -> None:
    """Table rows, summary.json, runs.json, the plot and REPORT.md from the measurements."""
    rows, summary = build_rows(m)
    for r in rows:
        run.row(**r)
    run.summary = summary
    run.save_json("runs.json", {"measurements": m, "replays": raw or {}})
    _plot(run, summary)
    _report(run, plan, summary)


def _median(values: Sequence[float]) -> float:
    return dist(values)["median"] or math.nan


# --- row 1: ECMP on a permutation -------------------------------------------------------------
def _perm(plan: WiringPlan, p: dict[str, Any], draw: int) -> list[Any]:
    nbytes = int(min(plan.rdma_nic().values()) * 1e6 / 8 * p["seconds"])
    return permutation_flows(plan, nbytes, qps=p["qps"], seed=p["seed"],
                             qp_base=DRAW_QP_STRIDE * draw)


def _paths_per_hash(plan: WiringPlan, flows: list[Any]) -> int:
    """Lanes one leaf hashes a flow over (what the balls-into-bins figure is computed for)."""
    finder = PathFinder(plan)
    return len(finder.uplinks(finder.attach(flows[0].src)))


def ecmp_model(plan: WiringPlan, p: dict[str, Any]) -> dict[str, Any]:
    """The flow model's ECMP hash draws of row 1 (draw s: QPs shifted by s, hash seed s)."""
    flows = _perm(plan, p, 0)
    ideal = model_flows(plan, flows, "planned", unit="mbps")
    ideal_fct = [float(x) for x in ideal.flow_finish_s]
    bound = bounds(plan, flows, unit="mbps")["unsplit"]
    model, job = [], []
    for s in range(p["model_draws"]):
        res = model_flows(plan, _perm(plan, p, s), "ecmp", unit="mbps", seed=s)
        model.append(flow_throughput([float(x) for x in res.flow_finish_s], ideal_fct))
        job.append(bound / res.completion_s)
    return {"model": model, "model_job": job, "ideal_fct": ideal_fct, "bound_s": bound,
            "paths": _paths_per_hash(plan, flows), "lab": [], "lab_job": [], "lab_lost": [],
            "planned_lab": None}


def _emulate_ecmp(run: Run, lab: RunningLab, plan: WiringPlan, e: dict[str, Any],
                  raw: dict[str, Any]) -> None:
    p = run.params
    client = lab.client()
    for mode, draws in (("ecmp", p["ecmp_draws"]), ("planned", 1)):
        client.set_lb(mode)
        lab.wait_converged()
        for k in range(draws):
            flows = _perm(plan, p, k)
            label = f"permutation {mode} draw {k}"
            run.guard(lab, flows, label)
            res = replay(lab, flows, label=label)
            thr = flow_throughput([f["fct_s"] for f in res.flows], e["ideal_fct"],
                                  [f["received"] / f["bytes"] for f in res.flows])
            job = e["bound_s"] / res.job_completion_s if res.job_completion_s > 0 else 0.0
            if mode == "ecmp":
                e["lab"].append(thr)
                e["lab_job"].append(job)
                e["lab_lost"].append(res.lost_packets)
            else:
                e["planned_lab"] = thr
            raw[label] = {"summary": res.summary(), "flows": res.flows,
                          "flow_throughput": thr, "job_fraction": job}
            run.stage(f"{label}: flow throughput {thr:.2f} of ideal, job "
                      f"{res.job_completion_s:.2f} s (bound {e['bound_s']:.2f} s), "
                      f"{res.lost_packets} lost")


# --- row 2: DeepEP dispatch growth ------------------------------------------------------------
def _ep_params(p: dict[str, Any], seed: int) -> dict[str, Any]:
    """The parameter dict ``decode_latency``'s functions read."""
    return {"gpus_per_server": p["ep_gpus_per_server"], "model": "deepseek-v3",
            "tokens": p["ep_tokens"], "seed": seed, "intra_server": "nvlink"}


def _ep_plan(p: dict[str, Any], ep: int) -> Any:
    gps = p["ep_gpus_per_server"]
    return build_for_gpus("astral3", ep, gps, scale=p["ep_scale"])


def ep_model(p: dict[str, Any]) -> dict[int, list[float]]:
    """Flow-model dispatch completion per EP size and seed (gating seed s, hash seed s)."""
    out: dict[int, list[float]] = {}
    for ep in EP_SIZES:
        plan = _ep_plan(p, ep)
        out[ep] = [model_flows(plan, decode_flows(plan, _ep_params(p, s))["dispatch"], "ecmp",
                               unit="mbps", seed=s).completion_s
                   for s in range(p["ep_model_draws"])]
    return out


def _ep_growth(run: Run, p: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"model": ep_model(p), "lab": {}, "skipped": {}, "start_skew_s": {}}
    run.stage("flow model of the decode bursts done")
    for ep in (e for e in EP_SIZES if e not in p["ep_sizes"]):
        out["skipped"][ep] = "not in --ep-sizes"
    for ep in sorted(p["ep_sizes"]):
        plan = _ep_plan(p, ep)
        seeds = {s: decode_flows(plan, _ep_params(p, s))["dispatch"]
                 for s in range(p["ep_seeds"])}
        # the guard's own arithmetic before bringing the fabric up: a size this machine
        # cannot switch is skipped (and said so) instead of failing the whole table
        pmtu = getattr(run, "pmtu", DEFAULT_PMTU)
        load = max((offered(plan, f, pmtu=pmtu) for f in seeds.values()),
                   key=lambda x: x["hop_pps"])
        unguarded = getattr(run, "unguarded", None) is not None  # --force, guard off
        pre = None if unguarded else verdict(calibrate(run.log, pmtu=pmtu), load, run.force)
        if pre is not None and pre["verdict"] == "refused":
            out["skipped"][ep] = (f"guard margin {pre['margin']:.2f} < {REFUSE_BELOW:g} at "
                                  f"EP{ep} here (--force, or a lower --ep-scale)")
            run.stage(f"EP{ep} skipped: {out['skipped'][ep]}")
            continue
        done, skew = [], []
        with run.lab(plan, label=f"astral3-ep{ep}", lb="ecmp") as lab:
            for s, flows in seeds.items():
                label = f"EP{ep} seed {s} dispatch"
                run.guard(lab, flows, label)
                res = replay(lab, flows, label=label, progress=False)
                _lat, st = decode_stats(res, flows)
                done.append(st["completion_s"])
                skew.append(res.start_skew_s)
                raw[label] = dict(st)
                run.stage(f"{label}: completion {st['completion_s'] * 1e3:.0f} ms "
                          f"({st['count']} messages, {st['incomplete']} incomplete, start "
                          f"skew {res.start_skew_s * 1e3:.0f} ms)")
        out["lab"][ep] = done
        out["start_skew_s"][ep] = skew
    return out


# --- row 3: EPLB --------------------------------------------------------------------------------
def eplb_imbalance(p: dict[str, Any]) -> dict[str, list[float]]:
    """Max/mean token copies per GPU, DeepSeek-V3 at EP32 (4 servers x 8 GPUs), per seed.

    ``before``: contiguous placement (exact); ``after``: realised after the EPLB-like
    balancer (replica choice per copy is random); ``expected``: the balancer's own figure
    (each expert's load split evenly over its replicas).
    """
    out: dict[str, list[float]] = {"before": [], "after": [], "expected": []}
    for s in range(p["eplb_seeds"]):
        st = simulate_step("deepseek-v3", 4, 8, p["eplb_tokens"], gating=zipf(p["zipf_exponent"]),
                           seed=p["seed"] + s, balancer="auto")
        out["before"].append(1 + st.imbalance_before)
        out["after"].append(1 + st.realized_imbalance)
        out["expected"].append(1 + st.imbalance_after)
    return out


# --- row 4: rail-only relay ----------------------------------------------------------------------
def _relay_flows(p: dict[str, Any], plan: WiringPlan, rail: Any) -> dict[str, list[Any]]:
    """One flat All-to-All dispatch (topology-compare's kernel and sizing) on both fabrics."""
    tp = {"gpus": p["gpus"], "gpus_per_server": p["gpus_per_server"],
          "seconds": p["seconds"], "kernels": ["flat"], "seed": p["seed"]}
    step = simulate_step("deepseek-v3", servers_of(p), p["gpus_per_server"],
                         tokens_for(tp, plan), seed=p["seed"])
    return {name: [f for f in kernel_traffic("flat", step, pl).flows if f.phase == Phase.DISPATCH]
            for name, pl in (("astral3", plan), ("railonly", rail))}


def _relay_model(plan: WiringPlan, rail: Any, flows: dict[str, list[Any]]) -> float:
    a = model_flows(plan, flows["astral3"], "planned", unit="mbps").completion_s
    r = model_flows(rail, flows["railonly"], "planned", unit="mbps").completion_s
    return r / a


def _emulate_relay(run: Run, lab: RunningLab, name: str, flows: list[Any], raw: dict[str, Any]
                   ) -> list[float]:
    client = lab.client()
    client.set_lb("planned")
    lab.wait_converged()
    out = []
    for k in range(run.params["relay_repeats"]):
        label = f"relay all-to-all on {name} #{k}"
        run.guard(lab, flows, label)
        res = replay(lab, flows, label=label)
        out.append(res.job_completion_s)
        raw[label] = {"summary": res.summary(), "flows": res.flows}
        run.stage(f"{label}: {res.job_completion_s:.2f} s, {res.lost_packets} lost")
    return out


# --- row 5: two tiers vs three -----------------------------------------------------------------
def tiers(p: dict[str, Any]) -> dict[str, Any]:
    """Hops from the lab's plans (every GPU pair, controller paths) and cost, lab and paper size."""
    hops, lab_cost, model_cost, model_hops = [], [], [], []
    spec = FabricSpec(servers=servers_of(p), gpus=p["gpus_per_server"], scale=p["scale"])
    for design in ("astral3", "rail3"):
        plan = build_for_gpus(design, p["gpus"], p["gpus_per_server"], scale=p["scale"])
        finder = PathFinder(plan)
        names = [h.name for h in plan.hosts]
        hops.append(max(len(finder.candidates(a, b)[0]) for a in names for b in names if a != b))
        lab_cost.append(price(counts_for_spec(design, spec), Prices())["total"])
        fab = analyze(design, p["cost_gpus"], CostSpec(radix=p["cost_radix"]))
        model_hops.append(fab.max_switch_hops)
        model_cost.append(price(fab, Prices())["total"])
    return {"lab_hops": tuple(hops), "model_hops": tuple(model_hops),
            "lab_cost": tuple(lab_cost), "model_cost": tuple(model_cost),
            "lab_gpus": p["gpus"], "paper_gpus": p["cost_gpus"]}


# --- plot and report -------------------------------------------------------------------------
def position(value: float | None, d: dict[str, Any] | None) -> str:
    """Where ``value`` lies against a distribution's p25-p75: 'inside', 'below' or 'above'."""
    if value is None or not d or d.get("p25") is None:
        return "n/a"
    if value < d["p25"]:
        return "below"
    return "above" if value > d["p75"] else "inside"


def overlap(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Do the p25-p75 ranges of two distributions overlap?"""
    if not a or not b or a.get("p25") is None or b.get("p25") is None:
        return False
    return a["p25"] <= b["p75"] and b["p25"] <= a["p75"]


def _lab(entry: dict[str, Any]) -> dict[str, Any] | None:
    return ({k: entry[k] for k in ("draws", "median", "p25", "p75")}
            if entry.get("draws") else None)


def _plot(run: Run, summary: dict[str, dict[str, Any]]) -> None:
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: pyplot loads a backend: only after matplotlib.use("Agg") above
    import matplotlib.pyplot as plt

    shapes = {r["row"]: r["shape"] for r in run.rows}
    fig, ax = plt.subplots(figsize=(8, 4))
    keys = list(summary)
    for i, key in enumerate(keys):
        s = summary[key]
        y = len(keys) - 1 - i
        pub = s.get("published_value")
        if isinstance(pub, (list, tuple)):
            ax.fill_betweenx([y - 0.3, y + 0.3], pub[0], pub[1], color="0.8", zorder=1)
        elif isinstance(pub, (int, float)):
            ax.plot([pub, pub], [y - 0.3, y + 0.3], color="0.55", lw=4, zorder=1)
        if isinstance(s.get("before"), dict) and s["before"].get("median") is not None:
            ax.plot([s["before"]["median"]], [y + 0.12], "o", mfc="none", color="tab:blue",
                    label="lab, before EPLB", zorder=3)
        lab = _lab(s)
        md = s.get("model_distribution")
        for val, iqr, dy, style, colour, label in (
                (lab["median"] if lab else s["measured"], lab, 0.12, "o", "tab:blue", "lab"),
                (md["median"] if md else s["ideal"], md, -0.12, "D", "tab:orange",
                 "flow / cost model")):
            if val is None:
                continue
            err = [[val - iqr["p25"]], [iqr["p75"] - val]] if iqr else None
            ax.errorbar([val], [y + dy], xerr=err, fmt=style, ms=5, capsize=2, color=colour,
                        label=label if i == 0 else None, zorder=3)
    ax.set_yticks(range(len(keys)), [f"{k}  {shapes.get(k, summary[k]['shape'])}"
                                     for k in keys][::-1], fontsize=7)
    ax.set_xlabel("value (dimensionless: fraction of ideal, growth, max/mean or ratio)")
    ax.plot([], [], color="0.7", lw=6, label="published")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("published shapes: the lab (median, p25-p75), the model, the published value",
                 fontsize=9)
    fig.tight_layout()
    run.save_figure(fig, "shapes.png")


def _report(run: Run, plan: WiringPlan, summary: dict[str, dict[str, Any]]) -> None:
    p = run.params
    rep = run.report
    nic = min(plan.rdma_nic().values())
    rep.section("Setup", WORDS(
        "setup", gpus=len(plan.hosts), servers=servers_of(p),
        gpus_per_server=p["gpus_per_server"],
        scale=p["scale"], nic=nic, seconds=p["seconds"],
        eps=", ".join(f"EP{e}" for e in sorted(p["ep_sizes"])),
        ep_gpus_per_server=p["ep_gpus_per_server"], ep_scale=p["ep_scale"],
        ep_tokens=p["ep_tokens"], eplb_tokens=p["eplb_tokens"],
        zipf_exponent=p["zipf_exponent"], cost_gpus=p["cost_gpus"], cost_radix=p["cost_radix"]))
    rep.section("The table")
    rep.table(run.rows, ["row", "shape", "lab", "lab is", "model", "published", "source"])
    rep.text(WORDS("table_note"))
    rep.image("shapes.png", WORDS("shapes_caption"))
    rep.section("Findings")
    _findings(run, summary)
    rep.section("Sources", "\n".join(f"* **{k}**: {v['source']}" for k, v in PUBLISHED.items()))


def _f(d: dict[str, Any] | None, unit: str = "", digits: int = 2) -> str:
    return fmt_distribution(d, unit, digits) if d else "n/a"


def _pub(key: str) -> str:
    return WORDS("published", text=PUBLISHED[key]["text"], short=PUBLISHED[key]["short"])


def _findings(run: Run, s: dict[str, dict[str, Any]]) -> None:
    p = run.params
    rep = run.report
    e = s["1"]
    lab, mod = _lab(e), e["model_distribution"]
    planned = e.get("planned_lab")
    lo, hi = PUBLISHED["ecmp"]["value"]
    vs_model = ("overlaps" if overlap(lab, mod) else "does not overlap")
    in_pub = ("n/a" if not lab else "below" if lab["median"] < lo
              else "above" if lab["median"] > hi else "inside")
    own = (" " + WORDS("ecmp_own", planned=planned, own=lab["median"] / planned)
           if planned and lab else "")
    lost = [n for n in e.get("lost_packets", []) if n]
    if lost:
        own += " " + WORDS("ecmp_lost", lost=len(lost), draws=e["draws"], most=max(lost))
    paths, bins = e["paths_per_hash"], e["balls_into_bins_here"]
    rep.finding(
        WORDS("ecmp_title"),
        measured=WORDS("ecmp_measured", lab=_f(lab), draws=e["draws"], job=_f(e["job_lab"]),
                       planned="-" if planned is None else f"{planned:.2f}"),
        ideal=WORDS("ecmp_ideal", model=_f(mod), job=_f(e["job_model"]), paths=paths,
                    bins=bins),
        published=_pub("ecmp"),
        why=WORDS("ecmp_why", paths=paths, bins=bins, model_median=mod["median"],
                  in_pub=in_pub, vs_model=vs_model, own=own))
    gps = p["ep_gpus_per_server"]
    shares = {ep: 1 - gps / ep for ep in (8, 16, 32)}
    parts, where = [], []
    for key, size in (("2a", 16), ("2b", 32)):
        x = s[key]
        lx = _lab(x)
        parts.append(WORDS("deepep_part", size=size,
                           growth=_f(lx, "x") if lx else x.get("skipped", "not run")))
        if lx:
            pub = x["published_value"]
            where.append(WORDS("deepep_where", pub=pub, vs_lab=position(pub, lx),
                               vs_model=position(pub, x["model_distribution"]), size=size))
    rep.finding(
        WORDS("deepep_title"),
        measured=WORDS("deepep_measured", parts="; ".join(parts)),
        ideal=WORDS("deepep_ideal", ep16=_f(s["2a"]["model_distribution"], "x"),
                    ep32=_f(s["2b"]["model_distribution"], "x")),
        published=WORDS("deepep_published", ep16=s["2a"]["published_value"],
                        ep32=s["2b"]["published_value"], short=PUBLISHED["deepep"]["short"]),
        why=(WORDS("deepep_why", tokens=p["ep_tokens"], gps=gps,
                   shares=", ".join(f"EP{k} {100 * v:.1f}%" for k, v in shares.items()),
                   x16=shares[16] / shares[8], x32=shares[32] / shares[8])
             + " " + ("; ".join(where) + ". " if where else "") + WORDS("deepep_why_tail")))
    b = s["3"]
    rep.finding(
        WORDS("eplb_title"),
        measured=WORDS("eplb_measured", before=_f(b["before"]), after=_f(_lab(b)),
                       drop=b["drop"]),
        ideal=WORDS("eplb_ideal", model=_f(b["model_distribution"])),
        published=_pub("eplb"),
        why=eplb_why(b, p["zipf_exponent"]))
    r = s["4"]
    rl = _lab(r)
    rep.finding(
        WORDS("relay_title"),
        measured=WORDS("relay_measured", lab=_f(rl, "x")),
        ideal=WORDS("relay_ideal", ideal=r["ideal"]),
        published=_pub("railonly"),
        why=relay_why(r["ideal"], rl))
    h, c = s["5a"], s["5b"]
    rep.finding(
        WORDS("tiers_title"),
        measured=WORDS("tiers_measured", lab_two=h["lab_hops"][0], lab_three=h["lab_hops"][1],
                       lab_gpus=h["lab_gpus"], cost=c["measured"]),
        ideal=WORDS("tiers_ideal", paper_gpus=h["paper_gpus"], model_two=h["model_hops"][0],
                    model_three=h["model_hops"][1], cost=c["ideal"],
                    usd_two=c["model_cost_usd"][0] / 1e6,
                    usd_three=c["model_cost_usd"][1] / 1e6),
        published=WORDS("tiers_published", hops=_pub("hops"), cost=_pub("cost")),
        why=tiers_why(h, c))


def eplb_why(b: dict[str, Any], zipf_exponent: float) -> str:
    """Row 3's reason, as far as its numbers go."""
    after = b["median"] if b.get("median") is not None else math.nan
    return (WORDS("eplb_why")
            + (WORDS("eplb_uneven", zipf=zipf_exponent, after=after) if after > 1.05
               else WORDS("eplb_even", after=after))
            + " " + WORDS("eplb_why_tail"))


def relay_why(ideal: float, lab: dict[str, Any] | None) -> str:
    """Row 4's reason: the relay's cost in the model, and whether the emulation agrees."""
    why = WORDS("relay_why", ideal=ideal) + " "
    if lab and abs(lab["median"] - ideal) <= 0.05 * ideal:
        why += WORDS("relay_agrees", lab=lab["median"]) + " "
    elif lab:
        why += WORDS("relay_differs", lab=lab["median"],
                     word="more" if lab["median"] > ideal else "less") + " "
    return why + WORDS("relay_why_tail")


def tiers_why(h: dict[str, Any], c: dict[str, Any]) -> str:
    """Row 5's reason: hops from the plans at both sizes, the cost ratio's change with size."""
    lab, paper = tuple(h["lab_hops"]), tuple(h["model_hops"])
    x, y = c["measured"], c["ideal"]
    return " ".join([
        WORDS("tiers_same" if lab == paper else "tiers_differ", lab_two=lab[0],
              lab_three=lab[1], lab_gpus=h["lab_gpus"], model_two=paper[0],
              model_three=paper[1], paper_gpus=h["paper_gpus"]),
        WORDS("tiers_cost"),
        WORDS("tiers_cost_flat" if abs(x - y) <= 0.1 * y else "tiers_cost_moves", x=x, y=y),
        WORDS("tiers_tail")])


__all__ = [
    "EP_SIZES", "paper_shapes", "publish", "ecmp_model", "ep_model",
    "eplb_imbalance", "tiers", "position", "overlap",
]
