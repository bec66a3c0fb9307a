"""expert-skew: what a skewed MoE gate does to the network, and what EPLB gives back.

One MoE layer step is routed three times with the same seed (``traffic.workload``):

1. **uniform** gating: every expert equally popular (the balanced router a textbook assumes);
2. **skewed** gating (Zipf or a hot set, scattered over expert ids): a few experts take a
   large share of the tokens, so the GPUs holding them receive far more token copies;
3. **skewed + EPLB**: the same gate, with experts replicated and packed by the EPLB-like
   balancer (``balancer="auto"``: DeepSeek EPLB's hierarchical policy when groups fit).

Each step's *dispatch* is replayed on an astral3 fabric as RoCEv2 packets with the
**low-latency kernel model** (``traffic.kernels.low_latency``): every token copy goes
straight to the GPU holding its expert, so a hot expert is a hot *receiver NIC* (incast).
Why not the high-bandwidth (hierarchical) kernel: it sends each token once per destination
*server* to the same-rail GPU and forwards over NVLink, so the network sees per-server,
not per-GPU, skew; on small fabrics it hides the incast entirely. The report shows that
contrast from the kernel models (no replay needed) so the choice is visible.

**Draws.** Which GPUs are hot depends on the gating seed (tokens are sampled, and hot experts
are scattered over ids by the seed), and where a token copy's QP lands depends on the ECMP
hash of its UDP source port. So the three cases are replayed ``draws`` times: draw k uses
gating seed ``seed + k`` and QP numbers shifted by k x 1000 (new source ports), and every
figure is quoted as median [p25-p75] over the draws. The flow model
(``testbed.models.perflow.model_flows``) runs beside them over ``model_draws`` draws (gating seed
``seed + j`` and hash seed j; the first ``draws`` are the emulated steps) with the policy the
controller ran: its completion distribution is the **ideal**, and measured median / ideal
median is the **ratio**. The NIC bound of the hottest receiver (its bytes / its NIC rate:
nothing can finish sooner) is the **bound**.

Per case the report gives the rank imbalance (``StepTraffic.realized_imbalance``, and the
balancer's expected ``imbalance_after``), the bytes every GPU's NIC receives (the hottest
receiver against the mean), and the dispatch completion measured in Mininet beside the
model and the bound.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from controllers import policies
from scenarios.base import (
    DRAWS,
    FABRIC_GPUS,
    GPUS,
    MODEL_DRAWS,
    SCALE,
    TOKENS,
    ZIPF_EXPONENT,
    Param,
    Run,
    paired_servers,
    scenario,
    servers_of,
)
from scenarios.common import (
    DRAW_QP_STRIDE,
    compare,
    distribution,
    fmt_distribution,
    in_band,
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
from testbed.models.perflow import model_flows
from testbed.topologies import build_for_gpus
from traffic.kernels import FlowSpec, high_bandwidth, low_latency
from traffic.shell.replay import replay
from traffic.workload import (
    PRESETS,
    Gating,
    Phase,
    StepTraffic,
    hotset,
    simulate_step,
    uniform,
    zipf,
)
from vocab.plan import WiringPlan
from vocab.validate import SEED, real

ORDER = 50  # where it lists in astral-lab list (vocab.plugins.listing_key)
CASES = ("uniform", "skewed", "skewed+eplb")

WORDS = Prose.of_module(__name__)  # the report's prose: scenarios/templates/<this file's name>.md
EPLB_README = WORDS("eplb_readme")


# --- pure helpers (unit-tested) ----------------------------------------------------------
def skewed_gating(kind: str, zipf_exponent: float, hot_fraction: float,
                  hot_share: float) -> Gating:
    """The skewed gate of the scenario (scattered over expert ids, as real hot experts are)."""
    if kind == "zipf":
        return zipf(zipf_exponent)
    if kind == "hotset":
        return hotset(hot_fraction, hot_share)
    raise ValueError(f"--skew must be 'zipf' or 'hotset' (got {kind!r})")


def receive_bytes(flows: Iterable[FlowSpec], hosts: Iterable[str]) -> dict[str, int]:
    """Network bytes each host's NIC receives (every host listed, 0 when it gets nothing)."""
    out = {h: 0 for h in hosts}
    for f in flows:
        if f.dst not in out:
            raise ValueError(f"flow to {f.dst!r}, which is not among the hosts")
        out[f.dst] += f.bytes
    return out


def incast(per_host: dict[str, float]) -> tuple[str, float]:
    """``(hottest host, its value / the mean)``: 1.0 is perfectly even."""
    if not per_host:
        raise ValueError("no hosts")
    values = np.array(list(per_host.values()), dtype=np.float64)
    mean = float(values.mean())
    hottest = max(per_host, key=lambda h: per_host[h])
    return hottest, (float(per_host[hottest]) / mean if mean > 0 else 1.0)


def nic_bound_s(per_host_bytes: dict[str, int], nic_mbps: dict[str, float]) -> float:
    """Largest bytes / NIC rate over hosts, in seconds: a host cannot receive faster."""
    return max((b * 8 / (nic_mbps[h] * 1e6) for h, b in per_host_bytes.items()), default=0.0)


def make_steps(model: str, servers: int, gpus_per_server: int, tokens: int, skew: Gating,
               seed: int) -> dict[str, StepTraffic]:
    """The three steps of the scenario, same seed: uniform, skewed, skewed + EPLB."""
    return {
        "uniform": simulate_step(model, servers, gpus_per_server, tokens, gating=uniform(),
                                 seed=seed),
        "skewed": simulate_step(model, servers, gpus_per_server, tokens, gating=skew, seed=seed),
        "skewed+eplb": simulate_step(model, servers, gpus_per_server, tokens, gating=skew,
                                     seed=seed, balancer="auto"),
    }


def analyse(plan: WiringPlan, step: StepTraffic, qp_offset: int = 0) -> dict[str, Any]:
    """Everything the report needs about one step that does not need a fabric.

    ``qp_offset`` shifts the dispatch flows' QPs (another ECMP hash draw, same bytes);
    ``model_s`` is the fluid model (ECMP split evenly: the hash's expectation)."""
    hosts = [h.name for h in plan.hosts]
    ll = low_latency(step, plan, phases=(Phase.DISPATCH,))
    ll_flows = shift_qps(ll.flows, qp_offset)
    hb = high_bandwidth(step, plan, phases=(Phase.DISPATCH,))
    rx = receive_bytes(ll.flows, hosts)
    rx_hb = receive_bytes(hb.flows, hosts)
    hot, ratio = incast(rx)
    _, ratio_hb = incast(rx_hb)
    nic = plan.host_link_mbps()
    wire = wire_flows(ll.flows)  # the frame bytes the shapers count: emulated times
    fluid = model_flows(plan, wire, "ecmp-fluid", unit="mbps")
    bnd = bounds(plan, wire, unit="mbps")
    rx_wire = receive_bytes(wire, hosts)
    load = {h: float(v) for h, v in zip(hosts, step.gpu_load, strict=True)}
    return {
        "flows": ll_flows, "rx_bytes": rx, "rx_bytes_hb": rx_hb,
        "hottest": hot, "incast": ratio, "incast_hb": ratio_hb,
        "copies_per_gpu": load, "copies_max_over_mean": incast(load)[1],
        "imbalance_before": step.imbalance_before, "imbalance_after": step.imbalance_after,
        "realized_imbalance": step.realized_imbalance, "placement": step.placement.policy,
        "wire_bytes": ll.wire_bytes(), "accounting": ll.accounting["dispatch"],
        "model_s": fluid.completion_s, "model_bound_s": fluid.bound_s,
        "host_rx_bound_s": bnd["host_rx"], "host_tx_bound_s": bnd["host_tx"],
        "hot_nic_bound_s": nic_bound_s({hot: rx_wire[hot]}, nic),
    }


def model_case_draws(plan: WiringPlan, p: dict[str, Any], skew: Gating, policy: str, n: int
                ) -> dict[str, list[dict[str, Any]]]:
    """Per case, ``n`` model draws: gating seed ``seed + j`` and hash seed ``j``.

    Each draw: the step's realised imbalance and incast, the hottest receiver's NIC bound,
    and the flow model's dispatch completion under ``policy`` (the controller's mode)."""
    hosts = [h.name for h in plan.hosts]
    nic = plan.host_link_mbps()
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
    for j in range(n):
        steps = make_steps(p["model"], servers_of(p), int(p["gpus_per_server"]),
                           int(p["tokens_per_gpu"]), skew, int(p["seed"]) + j)
        for case, step in steps.items():
            flows = wire_flows(low_latency(step, plan, phases=(Phase.DISPATCH,)).flows)
            rx = receive_bytes(flows, hosts)
            hot, ratio = incast(rx)
            m = model_flows(plan, flows, policy, seed=j, unit="mbps")
            out[case].append({"seed": int(p["seed"]) + j, "model_s": m.completion_s,
                              "imbalance": step.realized_imbalance,
                              "imbalance_after": step.imbalance_after, "incast": ratio,
                              "hot_nic_bound_s": nic_bound_s({hot: rx[hot]}, nic)})
    return out


# --- the scenario ------------------------------------------------------------------------


@scenario(
    "uniform vs skewed gating vs skewed + EPLB: rank imbalance, hot-receiver incast, completion",
    Param("model", "deepseek-v3", "MoE model preset", choices=tuple(PRESETS)),
    Param("gpus", 16, "GPUs in all (astral3, at most 64 servers of --gpus-per-server, 2 "
          "per block)", quick=8, rule=FABRIC_GPUS),
    Param("gpus_per_server", 4, "GPUs (NICs) per server", rule=GPUS),
    Param("tokens_per_gpu", 64, "tokens per GPU in the step (DeepEP's decode batch is 128)",
          quick=24, rule=TOKENS),
    Param("skew", "zipf", "the skewed gate", choices=("zipf", "hotset")),
    Param("zipf_exponent", 1.0, "Zipf exponent of the skewed gate (--skew zipf)",
          rule=ZIPF_EXPONENT),
    Param("hot_fraction", 0.05, "share of experts that are hot (--skew hotset)",
          rule=real(0, 1, low_open=True)),
    Param("hot_share", 0.5, "share of the tokens the hot experts take (--skew hotset)",
          rule=real(0, 1, low_open=True, high_open=True)),
    Param("seed", 1, "first random seed (draw k uses seed + k for all three cases)", rule=SEED),
    Param("draws", 5, "emulated draws (gating seed and ECMP source ports) per case", quick=3,
          rule=DRAWS),
    Param("model_draws", 60, "flow-model draws per case beside them", quick=20,
          rule=MODEL_DRAWS),
    Param("scale", 1e-5, "emulated rate = real rate x scale (1e-5: a 400G NIC is 4 Mb/s)",
          quick=2e-5, rule=SCALE),
    Param("lb", "ecmp", "load-balancing mode of the controller",
          choices=policies.CONTROLLER_MODES.names()),
    fabrics=lambda p: {"astral3": build_for_gpus(
        "astral3", p["gpus"], p["gpus_per_server"], servers=paired_servers(p),
        servers_per_block=2, scale=float(p["scale"]))},
)
def expert_skew(run: Run) -> None:
    """Replay one MoE dispatch under uniform, skewed and skewed+EPLB gating (module docstring)."""
    p = run.params
    for name in ("gpus", "gpus_per_server", "tokens_per_gpu", "draws", "model_draws"):
        if int(p[name]) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1 (got {p[name]})")
    servers = paired_servers(p)
    skew = skewed_gating(p["skew"], float(p["zipf_exponent"]), float(p["hot_fraction"]),
                         float(p["hot_share"]))
    plan = run.fabric("astral3")
    n = int(p["draws"])
    steps = [make_steps(p["model"], servers, int(p["gpus_per_server"]),
                        int(p["tokens_per_gpu"]), skew, int(p["seed"]) + k) for k in range(n)]
    info = [{case: analyse(plan, step, DRAW_QP_STRIDE * k) for case, step in st.items()}
            for k, st in enumerate(steps)]
    model = model_case_draws(plan, p, skew, p["lb"], max(n, int(p["model_draws"])))
    run.stage(f"routed {n} x 3 steps; modelled {max(n, int(p['model_draws']))} draws per case")

    measured: list[dict[str, Any]] = [{} for _ in range(n)]
    with run.lab(plan, label="astral3", lb=p["lb"]) as lab:
        for case in CASES:
            run.guard(lab, info[0][case]["flows"], label=case)
        for k in range(n):
            for case in CASES:
                flows = info[k][case]["flows"]
                res = replay(lab, flows, label=f"{case} dispatch {k + 1}/{n}",
                             lead_s=replay_lead(flows))
                measured[k][case] = res
                run.save_json(f"replay-{case}-{k}.json", {"summary": res.summary(),
                                                          "flows": res.flows,
                                                          "messages": res.messages})
                run.stage(f"draw {k + 1}/{n} (seed {int(p['seed']) + k}) {case}: "
                          f"{res.job_completion_s:.2f} s")
    _report(run, plan, steps, info, measured, model)


def _received(res: Any, hosts: list[str]) -> tuple[dict[str, int], dict[str, float]]:
    """Per destination: bytes received and the last arrival (s after the common start)."""
    got: dict[str, int] = {h: 0 for h in hosts}
    done: dict[str, float] = defaultdict(float)
    for r in res.flows:
        got[r["dst"]] += int(r["received"])
        if r["fct_s"] is not None:
            done[r["dst"]] = max(done[r["dst"]], float(r["fct_s"]))
    return got, dict(done)


def _case(case: str, steps: list[dict[str, StepTraffic]], info: list[dict[str, Any]],
          measured: list[dict[str, Any]], model: list[dict[str, Any]], hosts: list[str]
          ) -> dict[str, Any]:
    """One case over the draws: the distributions the table, findings and plots quote."""
    per = []
    for k, (i, res) in enumerate(zip((x[case] for x in info), (m[case] for m in measured),
                                     strict=True)):
        got, done = _received(res, hosts)
        per.append({
            "draw": k, "seed": steps[k][case].seed, "measured_s": res.job_completion_s,
            "model_s": model[k]["model_s"], "fluid_s": i["model_s"],
            "hot_nic_bound_s": i["hot_nic_bound_s"], "hottest": i["hottest"],
            "hottest_done_s": done.get(i["hottest"], float("nan")),
            "median_rx_done_s": float(np.median(list(done.values()))) if done
            else float("nan"),
            "imbalance": i["realized_imbalance"], "imbalance_after": i["imbalance_after"],
            "incast": i["incast"], "incast_hb": i["incast_hb"], "lost": res.lost_packets,
            "delivered": res.bytes_received / max(res.bytes_sent, 1),
            "start_skew_s": res.start_skew_s, "plane": res.plane, "rx_bytes_measured": got,
            "rx_bytes_model": i["rx_bytes"]})
    dist = {key: distribution([d[key] for d in per]) for key in
            ("measured_s", "hot_nic_bound_s", "hottest_done_s", "median_rx_done_s",
             "imbalance", "incast", "incast_hb", "fluid_s")}
    return {
        "case": case, "gating": steps[0][case].gating.kind,
        "placement": info[0][case]["placement"], "per_draw": per, **dist,
        "model_s": distribution([m["model_s"] for m in model]),
        "model_bound_s": distribution([m["hot_nic_bound_s"] for m in model]),
        "model_imbalance": distribution([m["imbalance"] for m in model]),
        "model_incast": distribution([m["incast"] for m in model]),
        "imbalance_expected": distribution([d["imbalance_after"] for d in per]),
        "lost": sum(d["lost"] for d in per), "delivered": min(d["delivered"] for d in per),
        "start_skew_s": max(d["start_skew_s"] for d in per), "plane": per[-1]["plane"],
        "per_draw_ratio": distribution([d["measured_s"] / d["model_s"] for d in per
                                        if d["model_s"]]),
    }


def _ratio(c: dict[str, Any]) -> float | None:
    m, i = c["measured_s"]["median"], c["model_s"]["median"]
    return m / i if m is not None and i else None


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or v != v else round(v, nd)


def _report(run: Run, plan: WiringPlan, steps: list[dict[str, StepTraffic]],
            info: list[dict[str, Any]], measured: list[dict[str, Any]],
            model: dict[str, list[dict[str, Any]]]) -> None:
    p = run.params
    hosts = [h.name for h in plan.hosts]
    nic = plan.host_link_mbps()[hosts[0]]
    real = real_time_factor(plan)  # real seconds per emulated second
    margin = {v["label"]: v["margin"] for v in run.config.get("fidelity", [])}
    cases = {c: _case(c, steps, info, measured, model[c], hosts) for c in CASES}
    for c, r in cases.items():
        m, i = r["measured_s"], r["model_s"]
        run.row(case=c, gating=r["gating"], placement=r["placement"], draws=m["draws"],
                imbalance=_r(r["imbalance"]["median"]),
                imbalance_p25=_r(r["imbalance"]["p25"]),
                imbalance_p75=_r(r["imbalance"]["p75"]),
                imbalance_expected=_r(r["imbalance_expected"]["median"]),
                rx_max_over_mean=_r(r["incast"]["median"]),
                measured_s=_r(m["median"]), p25_s=_r(m["p25"]), p75_s=_r(m["p75"]),
                ideal_s=_r(i["median"]), ideal_p25_s=_r(i["p25"]), ideal_p75_s=_r(i["p75"]),
                model_draws=i["draws"], ratio=_r(_ratio(r)),
                hot_nic_bound_s=_r(r["hot_nic_bound_s"]["median"]),
                vs_bound=_r(m["median"] / r["hot_nic_bound_s"]["median"]
                            if r["hot_nic_bound_s"]["median"] else None),
                fluid_s=_r(r["fluid_s"]["median"]),
                hottest_done_s=_r(r["hottest_done_s"]["median"]),
                median_rx_done_s=_r(r["median_rx_done_s"]["median"]),
                lost_packets=r["lost"], delivered=round(r["delivered"], 4))
        run.summary[c] = compare(
            m["median"], i["median"], quantity="dispatch completion (emulated s)",
            policy=p["lb"], draws=m["draws"], median=m["median"], p25=m["p25"], p75=m["p75"],
            values=m["values"], model=i, bound=r["hot_nic_bound_s"]["median"],
            bound_name="NIC of the hottest receiver", fluid_s=r["fluid_s"]["median"],
            imbalance=r["imbalance"], model_imbalance=r["model_imbalance"],
            rx_max_over_mean=r["incast"], model_rx_max_over_mean=r["model_incast"],
            per_draw_ratio=r["per_draw_ratio"], lost_packets=r["lost"],
            delivered=r["delivered"], start_skew_s=r["start_skew_s"],
            fidelity_margin=margin.get(c))
    run.summary["scale"] = float(p["scale"])
    run.save_json("cases.json", {c: {**{k: v for k, v in r.items() if k != "per_draw"},
                                     "per_draw": r["per_draw"],
                                     "steps": [st[c].summary() for st in steps],
                                     "accounting": info[0][c]["accounting"]}
                                 for c, r in cases.items()})
    run.save_json("model_draws.json", model)

    _plot_rx(run, hosts, cases)
    _plot_completion(run, cases)

    rep = run.report
    u, s, e = (cases[c] for c in CASES)
    n = p["draws"]
    rep.section("Setup", WORDS(
        "setup", model=p["model"], servers=servers_of(p), gpus_per_server=p["gpus_per_server"],
        gpus=len(hosts), switches=len(plan.switches), tokens_per_gpu=p["tokens_per_gpu"],
        gate=_gate_text(p), message_bytes=steps[0]["uniform"].model.ll_dispatch_message_bytes,
        lb=p["lb"], draws=n, seed=p["seed"], model_draws=u["model_s"]["draws"],
        scale=p["scale"], nic=nic, real=real))
    dt = _dt
    rep.table([{"case": c, "placement": r["placement"],
                "imbalance": dt(r["imbalance"]), "rx max/mean": dt(r["incast"]),
                "measured (s)": dt(r["measured_s"]), "ideal: model (s)": dt(r["model_s"]),
                "ratio": _ratio(r), "bound: hottest NIC (s)": r["hot_nic_bound_s"]["median"],
                "lost": r["lost"]} for c, r in cases.items()])
    rep.text(WORDS("table_note", lb=p["lb"]))
    short = [c for c, r in cases.items() if r["delivered"] < 0.999]
    if short:
        rep.text(WORDS("short", cases=", ".join(short)))
    rep.image("rx_bytes.png", WORDS("rx_caption"))
    rep.image("completion.png", WORDS("completion_caption"))
    rep.section("Findings")
    rep.finding(
        WORDS("imbalance_title"),
        measured=WORDS("imbalance_measured", uniform=dt(u["imbalance"]),
                       skewed=dt(s["imbalance"]), eplb=dt(e["imbalance"])),
        ideal=WORDS("imbalance_ideal", seeds=u["model_imbalance"]["draws"],
                    uniform=dt(u["model_imbalance"]), skewed=dt(s["model_imbalance"]),
                    eplb=dt(e["model_imbalance"])),
        published=EPLB_README,
        why=WORDS("imbalance_why", placement=e["placement"],
                  expected=dt(e["imbalance_expected"])))
    rep.finding(**incast_finding(u, s, e, nic))
    rep.finding(**completion_finding(cases, margin, p["lb"], real))


def _dt(d: dict[str, Any], unit: str = "", digits: int = 2) -> str:
    return fmt_distribution(d, unit, digits)


def incast_finding(u: dict[str, Any], s: dict[str, Any], e: dict[str, Any], nic: float
                   ) -> dict[str, str]:
    """The hot expert's NIC as a hot receiver, as far as the draws show it."""
    hot, mid = s["hottest_done_s"]["median"], s["median_rx_done_s"]["median"]
    why = WORDS("incast_why", nic=nic)
    if hot == hot and mid == mid and hot > 1.2 * mid:
        why += WORDS("incast_idle_others", mid=mid, hot=hot)
    else:
        why += WORDS("incast_no_idle", mid=_fmt(mid), hot=_fmt(hot))
    hb, ll = s["incast_hb"]["median"], s["incast"]["median"]
    why += " " + WORDS("incast_hb_lower" if hb < ll else "incast_hb_not_lower", hb=hb, ll=ll)
    return {
        "title": WORDS("incast_title"),
        "measured": WORDS("incast_measured", uniform=_dt(u["incast"]), skewed=_dt(s["incast"]),
                          eplb=_dt(e["incast"]), hot_done=_dt(s["hottest_done_s"], " s"),
                          mid_done=_dt(s["median_rx_done_s"], " s")),
        "ideal": WORDS("incast_ideal", hb=_dt(s["incast_hb"])),
        "published": WORDS("incast_published"),
        "why": why}


def completion_finding(cases: dict[str, dict[str, Any]], margin: dict[str, float],
                       lb: str, real: float) -> dict[str, str]:
    """Dispatch completion per case against the hottest receiver's NIC bound and the model,
    with the reasons the draws support."""
    u, s, e = (cases[c] for c in CASES)
    um, sm, em = (x["measured_s"]["median"] for x in (u, s, e))
    vs = {c: r["measured_s"]["median"] / r["hot_nic_bound_s"]["median"]
          for c, r in cases.items() if r["hot_nic_bound_s"]["median"]}
    follows = vs.get("skewed", math.inf) <= 1.3
    why = " ".join([
        WORDS("completion_why", vs=", ".join(f"{c} {v:.2f}x" for c, v in vs.items())),
        WORDS("completion_follows" if follows else "completion_not_follows"), ""])
    x = {"skewed_x": sm / um, "eplb_x": em / um}
    why += WORDS("eplb_back" if em <= um * 1.1 else "eplb_cut" if em < sm
                 else "eplb_no_gain", **x) + " "
    ratios = {c: _ratio(r) for c, r in cases.items()}
    inside = [r for r in ratios.values() if r is not None and in_band(r)]
    if inside and len(inside) == len(ratios):
        why += WORDS("agree", off_pct=100 * max(abs(1 - r) for r in inside),
                     skew_ms=1e3 * max(r["start_skew_s"] for r in cases.values()))
    for c, r in cases.items():
        ratio = ratios[c]
        if in_band(ratio):
            continue
        why += " " + WORDS("gap_head", case=c, ratio=_fmt(ratio),
                           pct=100 * rank_in(r["measured_s"]["median"], r["model_s"]["values"]),
                           hot_done=_dt(r["hottest_done_s"], " s"),
                           bound=_dt(r["hot_nic_bound_s"], " s")) + " "
        late = (r["hottest_done_s"]["median"] or 0) / (r["hot_nic_bound_s"]["median"] or 1)
        caveats = pace_caveats(margin=margin.get(c), plane=r.get("plane"), lost=r["lost"],
                               start_skew_s=r["start_skew_s"],
                               span_s=r["measured_s"]["median"])
        if caveats:
            why += WORDS("gap_caveats", caveats="; ".join(caveats))
        elif ratio is not None and ratio > 1:
            why += WORDS("gap_late" if late > 1.3 else "gap_slow", late=late)
        else:
            why += WORDS("gap_fast")
        why += " " + WORDS("gap_tail", margin=margin_text(margin.get(c)),
                           skew=r["start_skew_s"], lost=r["lost"],
                           delivered_pct=100 * r["delivered"])
    return {
        "title": WORDS("completion_title_follows" if follows else "completion_title"),
        "measured": WORDS("completion_measured", uniform=_dt(u["measured_s"], " s"),
                          skewed=_dt(s["measured_s"], " s"), eplb=_dt(e["measured_s"], " s"),
                          real_ms=s["measured_s"]["median"] * real * 1e3, **x),
        "ideal": WORDS("completion_ideal", lb=lb, uniform=_dt(u["model_s"], " s"),
                       skewed=_dt(s["model_s"], " s"), eplb=_dt(e["model_s"], " s"),
                       ratios=", ".join(_fmt(_ratio(r)) for r in cases.values()),
                       bound_u=u["hot_nic_bound_s"]["median"],
                       bound_s=s["hot_nic_bound_s"]["median"],
                       bound_e=e["hot_nic_bound_s"]["median"]),
        "published": WORDS("completion_published"),
        "why": why}


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}"


def _gate_text(p: dict[str, Any]) -> str:
    if p["skew"] == "zipf":
        return WORDS("gate_zipf", exponent=p["zipf_exponent"])
    return WORDS("gate_hot", hot_pct=100 * p["hot_fraction"], share_pct=100 * p["hot_share"])


def _plot_rx(run: Run, hosts: list[str], cases: dict[str, dict[str, Any]]) -> None:
    """Receivers ranked by their bytes in each draw (which GPU is hot changes with the seed),
    so the median over draws at each rank keeps the incast's shape."""
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 0.45 * len(hosts) + 2), 3.6))
    ax = fig.add_subplot()
    x = np.arange(len(hosts))
    width = 0.8 / len(CASES)
    for k, case in enumerate(CASES):
        per = cases[case]["per_draw"]
        order = [sorted(hosts, key=lambda h, d=d: -d["rx_bytes_model"][h]) for d in per]
        mb = [float(np.median([d["rx_bytes_model"][o[r]] for d, o in zip(per, order,
                                                                      strict=True)])) / 1e6
              for r in range(len(hosts))]
        ax.bar(x + (k - 1) * width, mb, width, label=f"{case} (max/mean "
               f"{cases[case]['incast']['median']:.2f}, median of {len(per)})")
        for d, o in zip(per, order, strict=True):
            got = [d["rx_bytes_measured"][h] / 1e6 for h in o]
            ax.plot(x + (k - 1) * width, got, "k.", markersize=3)
    ax.set_xticks(x, [str(r + 1) for r in range(len(hosts))], fontsize=7)
    ax.set_xlabel("receiver, ranked by its bytes in each draw (1 = hottest)")
    ax.set_ylabel("MB received by the NIC (dispatch)")
    ax.set_title("Per-GPU receive bytes (bars: model, median over draws at each rank; dots: "
                 "measured, each draw)", fontsize=8)
    ax.legend(fontsize=8)
    run.save_figure(fig, "rx_bytes.png")


def _plot_completion(run: Run, cases: dict[str, dict[str, Any]]) -> None:
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 3.8))
    ax = fig.add_subplot()
    plot_draws(ax, list(CASES), [cases[c]["measured_s"]["values"] for c in CASES],
               [cases[c]["model_s"]["values"] for c in CASES],
               bound=[cases[c]["hot_nic_bound_s"]["median"] for c in CASES],
               colours=["tab:green", "tab:red", "tab:blue"], bound_label="hottest NIC's bound")
    ax.set_ylabel("dispatch completion (emulated s)")
    ax.set_title(f"dots: emulated draws (N={len(cases['uniform']['per_draw'])}); box: flow "
                 f"model ({cases['uniform']['model_s']['draws']} draws); dashed: hottest "
                 "NIC's bound", fontsize=8)
    ax.legend(fontsize=8)
    run.save_figure(fig, "completion.png")
