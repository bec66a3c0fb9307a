"""``decode-latency``: low-latency dispatch/combine message latency vs EP size, with background
training traffic, with and without traffic-class isolation.

The questions: how does decode All-to-All latency grow with the expert-parallel (EP) size on
the Astral 3.0 fabric, compared with DeepEP's published EP8 -> EP256 curve; and what does a
bulk training job sharing the fabric do to it, with one FIFO per port and with the decode
class in its own strict-priority queue (``testbed.shell.qos``)?

Per EP size, one ``astral3`` fabric of ``EP / gpus_per_server`` servers. The workload is one
DeepSeek-V3 decode step (``traffic.workload.simulate_step``) put on the wire by the
DeepEP-style low-latency kernel model (``traffic.kernels.low_latency``: one 7,408-byte FP8
message per token copy for dispatch, 14,336-byte BF16 for combine, all ranks at once,
copies inside a server over NVLink, i.e. not on the fabric, as DeepEP's default). Three cases,
each replayed phase by phase (dispatch, then combine, as ``replay_step`` does):

* ``alone``: the decode step on an idle fabric;
* ``background``: every GPU's NIC also carries one long bulk training flow (DSCP 26, one QP,
  like a pipeline or data-parallel transfer) to a GPU under another leaf, started
  ``fill_s`` before the decode burst. A 400G NIC is two 200G lanes, so each bulk flow alone
  overloads the lane ECMP puts it on and builds a standing queue there; decode packets that
  hash onto that lane wait behind it in the port's one FIFO;
* ``isolated``: the same, after ``testbed.shell.qos.enable``: strict priority for DSCP 46 on every
  port, so decode packets pass the bulk queue.

Only decode-class messages are measured (the receiver's per-message latency: first packet
sent to last packet received), as p50 and p99 per replay.

**Draws.** Which GPU gets which token copy depends on the gating seed, and which lane a
decode or bulk QP takes on its UDP source port (the ECMP hash). Every case is replayed
``draws`` times: draw k uses gating and permutation seed ``seed + k`` and shifts every QP by
k x 1000 (new source ports), and p50/p99 are quoted as median [p25-p75] over the draws. The
background cases are the expensive ones (the bulk flows fill queues for ``fill_s``), so they
run on the EP sizes in ``background_eps`` (quick: the smallest). **Ideal**: the flow model's
latency of every message of the same flows (``scenarios.common.message_latencies``: a
QP's messages back to back on the frame bytes the shapers count, over the span the
receiver measures, first frame sent to last frame received), under the ECMP hash the
controller runs, over ``model_draws`` draws (gating seed ``seed + j``, source ports shifted
by j x 1000); its p50/p99 per draw, median over draws. The model shares every link max-min
fairly and has no queues and no priorities, so with background it predicts fair sharing:
FIFO queueing shows up as a ratio far above 1, strict priority as one at or below 1.
**Bound**: one message's serialisation at the NIC. DeepEP's published low-latency figures
are compared by *shape* (growth normalised to the smallest EP), since the lab's rates are
scaled.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from scenarios.base import (
    DRAWS,
    GPUS,
    MODEL_DRAWS,
    PHASE_SECONDS,
    SCALE,
    SERVERS,
    TOKENS,
    Param,
    Run,
    scenario,
)
from scenarios.common import (
    DRAW_QP_STRIDE,
    compare,
    distribution,
    fmt_distribution,
    in_band,
    message_times,
    permutation_flows,
    plot_draws,
    replay_lead,
    shift_qps,
)
from scenarios.decode_findings import DEEPEP_TOKENS, gap_line, growth_why, isolation_why
from scenarios.prose import Prose
from testbed.models.perflow import model_flows
from testbed.shell import qos
from testbed.topologies import build_for_gpus
from traffic.kernels import low_latency
from traffic.roce import DEFAULT_PMTU, message_wire_bytes
from traffic.shell.replay import percentile, replay
from traffic.workload import PRESETS, Phase, simulate_step
from vocab.plan import WiringPlan
from vocab.validate import SEED, count

ORDER = 40  # where it lists in astral-lab list (vocab.plugins.listing_key)
WORDS = Prose.of_module(__name__)  # the report's prose: scenarios/templates/<this file's name>.md

#: DeepEP V1 low-latency kernels (docs/legacy.md, "Low-latency kernels with pure RDMA"; the
#: README's table before V2): H800, CX7 InfiniBand 400 Gb/s, 128 tokens per batch, hidden
#: 7168, top-8 experts, FP8 dispatch, BF16 combine. Latency in microseconds per EP size.
DEEPEP_US = {
    "dispatch": {8: 77, 16: 118, 32: 155, 64: 173, 128: 192, 256: 194},
    "combine": {8: 114, 16: 195, 32: 273, 64: 314, 128: 369, 256: 360},
}
DEEPEP_SOURCE = ("DeepEP V1 docs/legacy.md (github.com/deepseek-ai/DeepEP), low-latency "
                 "kernels, H800 + CX7 IB 400 Gb/s, 128 tokens, top-8")
CASES = ("alone", "background", "isolated")
CASE_LABEL = {"alone": "no background", "background": "background, one FIFO",
              "isolated": "background + isolation"}
#: QP numbers of the bulk flows: far above any decode QP (destination slot numbers)
BULK_QP = 8000
BULK_MESSAGE = 256_000  # bytes per bulk message (``permutation_flows``' size)


#: an EP size in GPUs: a fabric of at most SERVERS x GPUS
EP_SIZE = count(2, (SERVERS.high or 0) * (GPUS.high or 0))


@scenario(
    "decode dispatch/combine latency vs EP size, with background bulk traffic, "
    "with and without traffic-class isolation",
    Param("ep_sizes", [8, 16, 32], "EP sizes in GPUs, one fabric each; each a multiple of "
          "2 x gpus-per-server (astral3 pairs servers in blocks)", quick=[4, 8],
          rule=EP_SIZE),
    Param("background_eps", [8], "EP sizes that also run the background and isolated "
          "cases (the others run the decode step alone)", quick=[4], rule=EP_SIZE),
    Param("gpus_per_server", 2, "GPUs (NICs, rails) per server", rule=GPUS),
    Param("tokens", 128, "decode tokens per GPU (128: DeepEP's benchmark)", quick=2,
          rule=TOKENS),
    Param("scale", 2e-5, "emulated rate = real rate x scale (2e-5: a 400G NIC is 8 Mb/s)",
          quick=1e-5, rule=SCALE),
    Param("fill_s", 0.5, "seconds the background runs before the decode burst (emulated)",
          rule=PHASE_SECONDS),
    Param("intra_server", "nvlink", "same-server copies: nvlink (DeepEP default, off the "
          "fabric) or fabric (through the NICs, V1 pure RDMA)", choices=("nvlink", "fabric")),
    Param("model", "deepseek-v3", "model preset (traffic.workload.preset)",
          choices=tuple(PRESETS)),
    Param("draws", 3, "emulated draws per case (gating seed, permutation, source ports)",
          rule=DRAWS),
    Param("model_draws", 30, "flow-model draws per case beside them", rule=MODEL_DRAWS),
    Param("seed", 0, "first routing and permutation seed (draw k uses seed + k)", rule=SEED),
    fabrics=lambda p: _fabrics(p),
)
def decode_latency(run: Run) -> None:
    """See the module docstring."""
    p = run.params
    _check_params(p)
    results: list[dict[str, Any]] = []
    latencies: dict[str, list[list[float]]] = {}  # "ep/case/phase" -> per draw, latencies (us)
    classes: dict[int, dict[str, Any]] = {}
    for ep in p["ep_sizes"]:
        r, lat, cls = _one_ep(run, ep)
        results += r
        latencies.update(lat)
        classes[ep] = cls
    run.save_json("latency.json", {"unit": "us (emulated)", "scale": p["scale"],
                                   "per_draw": True, "messages": latencies})
    run.save_json("runs.json", {"cases": results, "qos_classes": classes})
    _plots(run, latencies, results)
    _report(run, classes, results)


def _fabrics(p: dict[str, Any]) -> dict[str, Any]:
    """One astral3 fabric per EP size, as the run brings them up."""
    _check_params(p)
    return {f"astral3-ep{ep}": build_for_gpus("astral3", ep, p["gpus_per_server"],
                                              scale=p["scale"]) for ep in p["ep_sizes"]}


def _tokens_note(tokens: int) -> str:
    """How the run's batch compares with DeepEP's benchmark (128 tokens per GPU)."""
    if tokens == DEEPEP_TOKENS:
        return "DeepEP's benchmark shape"
    return (f"DeepEP's benchmark uses {DEEPEP_TOKENS}, so the step moves "
            f"{tokens}/{DEEPEP_TOKENS} of its bytes per GPU")


def _check_params(p: dict[str, Any]) -> None:
    gps = p["gpus_per_server"]
    if gps < 1:
        raise ValueError(f"--gpus-per-server must be >= 1 (got {gps})")
    for ep in p["ep_sizes"]:
        if ep < 2 * gps or ep % (2 * gps):
            raise ValueError(f"--ep-sizes: {ep} is not an even number (>= 2) of servers of "
                             f"{gps} GPUs (astral3 groups servers in blocks of two)")
    if p["tokens"] < 1:
        raise ValueError(f"--tokens must be >= 1 (got {p['tokens']})")
    if not p["fill_s"] > 0:
        raise ValueError(f"--fill-s must be > 0 (got {p['fill_s']})")
    if not 0 < p["scale"] <= 1e-2:
        raise ValueError(f"--scale must be in (0, 0.01] (got {p['scale']})")
    if p["draws"] < 1 or p["model_draws"] < 1:
        raise ValueError("--draws and --model-draws must be >= 1")


def decode_flows(plan: WiringPlan, p: dict[str, Any], draw: int = 0) -> dict[str, list[Any]]:
    """Draw ``draw``'s decode step (gating seed ``seed + draw``), QPs shifted per draw."""
    servers = len(plan.hosts) // p["gpus_per_server"]
    step = simulate_step(p["model"], servers, p["gpus_per_server"], p["tokens"],
                         seed=p["seed"] + draw)
    traffic = low_latency(step, plan, intra_server=p["intra_server"])
    return {ph: shift_qps([f for f in traffic.flows if f.phase == ph], DRAW_QP_STRIDE * draw)
            for ph in Phase}


def _bulk_flows(plan: WiringPlan, p: dict[str, Any], draw: int, seconds: float) -> list[Any]:
    """One long bulk flow per GPU to a GPU under another leaf, ``seconds`` at the NIC rate,
    in whole messages (the replay's receivers stop once they have the flows' total bytes,
    so a short last message would end them early)."""
    nic = min(plan.rdma_nic().values())
    messages = math.ceil(nic * 1e6 / 8 * seconds / BULK_MESSAGE)
    return permutation_flows(plan, messages * BULK_MESSAGE, qps=1, seed=p["seed"] + draw,
                             qp_base=BULK_QP + DRAW_QP_STRIDE * draw)


def _serial_s(flows: list[Any], nic_mbps: float, pmtu: int = DEFAULT_PMTU) -> float:
    """One message alone at the NIC: the floor under any message latency."""
    size = max(f.message_bytes for f in flows)
    return message_wire_bytes(size, pmtu) * 8 / (nic_mbps * 1e6)


def decode_stats(res: Any, flows: list[Any]) -> tuple[list[float], dict[str, Any]]:
    """Latencies (us) of the complete decode messages, and the decode phase's numbers."""
    lat = sorted(m["latency_ns"] / 1e3 for m in res.messages
                 if m["traffic_class"] == "decode" and m.get("complete")
                 and m.get("latency_ns") is not None)
    rows = [f for f in res.flows if f["traffic_class"] == "decode"]
    expected = sum(f.messages for f in flows if f.traffic_class == "decode")
    fcts = [f["fct_s"] for f in rows if f["fct_s"] is not None]
    bulk = [f for f in res.flows if f["traffic_class"] == "bulk"]
    return lat, {
        "count": len(lat), "incomplete": expected - len(lat),
        "p50_us": percentile(lat, 50), "p99_us": percentile(lat, 99),
        "max_us": max(lat) if lat else math.nan,
        "completion_s": max(fcts) if fcts else math.nan,
        "decode_lost_packets": sum(f["lost_packets"] for f in rows),
        "bulk_bytes": sum(f["bytes"] for f in bulk),
        "bulk_received": sum(f["received"] for f in bulk),
        "start_skew_s": res.start_skew_s, "plane": res.plane,
    }


def model_case(plan: WiringPlan, p: dict[str, Any], case: str, phase: str, draws: int,
               bulk_s: float) -> dict[str, Any]:
    """The flow model's decode message latencies for one case and phase, over ``draws``
    draws (gating seed ``seed + j``, QPs shifted by j x 1000 under the ECMP hash): per draw
    the p50/p99 (us) of the decode messages, the phase's completion (s) and when the last
    byte of any flow, bulk included, arrived (s)."""
    p50, p99, done, last = [], [], [], []
    for j in range(max(1, draws)):
        decode = decode_flows(plan, p, j)[phase]
        if case == "alone":
            flows = decode
        else:
            flows = _bulk_flows(plan, p, j, bulk_s) + [dataclasses.replace(f, start=p["fill_s"])
                                                       for f in decode]
        lat, end_at = message_times(plan, flows, "ecmp")
        dec, k = [], 0
        ends = []
        every = []
        for f in flows:
            n = max(1, f.messages)
            end = end_at[k + n - 1]  # the QP's last message
            if f.traffic_class == "decode":
                dec += [x * 1e6 for x in lat[k:k + n]]
                ends.append(end - f.start)
            every.append(end)
            k += n
        p50.append(percentile(sorted(dec), 50))
        p99.append(percentile(sorted(dec), 99))
        done.append(max(ends) if ends else math.nan)
        last.append(max(every))
    return {"p50_us": distribution(p50), "p99_us": distribution(p99),
            "completion_s": distribution(done), "last_byte_s": distribution(last)}


def _one_ep(run: Run, ep: int) -> tuple[list[dict[str, Any]], dict[str, list[list[float]]],
                                        dict[str, Any]]:
    """Bring up the EP's fabric, replay its cases over the draws; rows, latencies, qos."""
    p = run.params
    n = int(p["draws"])
    plan = run.fabric(f"astral3-ep{ep}")
    nic = min(plan.rdma_nic().values())
    decode = [decode_flows(plan, p, k) for k in range(n)]
    phase_s = {ph: model_flows(plan, decode[0][ph], "ecmp-fluid", unit="mbps").completion_s
               for ph in Phase}
    serial = {ph: _serial_s(decode[0][ph], nic, run.pmtu) for ph in Phase}
    # the bulk flows must still be sending when the slower decode phase ends; what they
    # queued by then drains at the lane rate before the replay returns
    bulk_s = p["fill_s"] + max(phase_s.values()) + 0.1
    cases = CASES if ep in p["background_eps"] else ("alone",)
    model: dict[tuple[str, str], dict[str, Any]] = {}
    for c in cases:  # the model has no priorities: isolation is the background case to it
        for ph in Phase:
            model[(c, ph)] = model[("background", ph)] if c == "isolated" else \
                model_case(plan, p, c, ph, max(n, int(p["model_draws"])), bulk_s)
    run.stage(f"EP{ep}: modelled {max(n, int(p['model_draws']))} draws per case and phase")
    per: dict[tuple[str, str], list[dict[str, Any]]] = {(c, ph): [] for c in cases
                                                         for ph in Phase}
    lat: dict[str, list[list[float]]] = {f"{ep}/{c}/{ph}": [] for c in cases for ph in Phase}
    with run.lab(plan, label=f"astral3-ep{ep}", lb="ecmp") as lab:
        # the heaviest moment: bulk and a decode phase sending at once (NICs shared)
        heavy = (_bulk_flows(plan, p, 0, bulk_s) if len(cases) > 1 else []) + \
            decode[0]["dispatch"]
        margin = run.guard(lab, heavy, f"EP{ep}")["margin"]
        cls: dict[str, Any] = {}
        for case in cases:
            if case == "isolated":
                cls["enable"] = qos.enable(lab)
            for k in range(n):
                bulk = _bulk_flows(plan, p, k, bulk_s)
                for ph in Phase:
                    flows = decode[k][ph] if case == "alone" else bulk + [
                        dataclasses.replace(f, start=p["fill_s"]) for f in decode[k][ph]]
                    # what bulk flows queued on a lane drains after the senders stop (in
                    # FIFO order, the decode messages behind it): give the receivers that
                    # long, by the model's last byte, before they are stopped
                    grace = 10 + 1.5 * model[(case, ph)]["last_byte_s"]["max"]
                    res = replay(lab, flows, label=f"EP{ep} {case} {ph} {k + 1}/{n}",
                                 progress=False, lead_s=replay_lead(flows),
                                 recv_grace_s=grace)
                    msgs, st = decode_stats(res, flows)
                    lat[f"{ep}/{case}/{ph}"].append(msgs)
                    per[(case, ph)].append({**st, "draw": k, "seed": p["seed"] + k,
                                            "flows": len(flows)})
                    run.stage(f"EP{ep} {CASE_LABEL[case]} {ph} draw {k + 1}/{n}: decode "
                              f"p50/p99 {_ms(st['p50_us'])}/{_ms(st['p99_us'])} ms, "
                              f"{st['count']} messages")
        cls["status"] = qos.status(lab) if "isolated" in cases else {}
    rows = []
    for (case, ph), draws in per.items():
        r = _row(run, ep, case, ph, draws, model[(case, ph)], serial[ph], margin)
        rows.append({**r, "per_draw": draws, "gpus": ep, "scale": p["scale"]})
    return rows, lat, cls


def _row(run: Run, ep: int, case: str, ph: str, draws: list[dict[str, Any]],
         model: dict[str, Any], serial_s: float, margin: float) -> dict[str, Any]:
    """One summary row (and summary.json entries) for one EP, case and phase."""
    p = run.params
    d = {k: distribution([x[k] for x in draws if x[k] == x[k]])
         for k in ("p50_us", "p99_us", "max_us", "completion_s", "count")}
    i50, i99, idone = model["p50_us"], model["p99_us"], model["completion_s"]
    row = {"ep": ep, "case": case, "phase": ph, "draws": len(draws),
           "count": _r(d["count"]["median"], 0),
           "p50_ms": _ms(d["p50_us"]["median"]), "p50_p25_ms": _ms(d["p50_us"]["p25"]),
           "p50_p75_ms": _ms(d["p50_us"]["p75"]),
           "p99_ms": _ms(d["p99_us"]["median"]), "p99_p25_ms": _ms(d["p99_us"]["p25"]),
           "p99_p75_ms": _ms(d["p99_us"]["p75"]), "max_ms": _ms(d["max_us"]["median"]),
           "ideal_p50_ms": _ms(i50["median"]), "ideal_p99_ms": _ms(i99["median"]),
           "ratio_p50": _r(_div(d["p50_us"]["median"], i50["median"])),
           "ratio_p99": _r(_div(d["p99_us"]["median"], i99["median"])),
           "completion_ms": _ms(d["completion_s"]["median"] * 1e6),
           "ideal_completion_ms": _ms(idone["median"] * 1e6),
           "serial_ms": _ms(serial_s * 1e6),
           "p99_real_us": round(d["p99_us"]["median"] * p["scale"], 4),
           "incomplete": sum(x["incomplete"] for x in draws),
           "lost": sum(x["decode_lost_packets"] for x in draws)}
    run.row(**row)
    for q, m, i in (("p50", d["p50_us"], i50), ("p99", d["p99_us"], i99)):
        run.summary[f"EP{ep}/{case}/{ph}/{q}"] = compare(
            _ms(m["median"]), _ms(i["median"]),
            quantity=f"decode {ph} message latency {q} (emulated ms)", policy="ecmp",
            draws=m["draws"], median=_ms(m["median"]), p25=_ms(m["p25"]),
            p75=_ms(m["p75"]), values=[_ms(v) for v in m["values"]],
            model={k: (_ms(v) if k in ("median", "p25", "p75", "min", "max") else v)
                   for k, v in i.items() if k != "values"},
            bound=_ms(serial_s * 1e6), bound_name="one message's serialisation at the NIC",
            incomplete=row["incomplete"], lost_packets=row["lost"],
            start_skew_s=max(x["start_skew_s"] for x in draws), fidelity_margin=margin)
    return {**row, "measured": d, "model": model, "margin": margin}


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b and a == a and b == b else None


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or v != v else round(v, nd)


def _ms(us: float | None) -> float:
    return round(us / 1e3, 2) if us is not None and us == us else math.nan


# --- numbers the report and plots share ------------------------------------------------------
def _get(rows: list[dict[str, Any]], ep: int, case: str, phase: str, col: str) -> float:
    for r in rows:
        if (r["ep"], r["case"], r["phase"]) == (ep, case, phase):
            return float(r[col])
    return math.nan


def _growth(run: Run, phase: str, col: str) -> list[float]:
    """``col`` of the ``alone`` case per EP, over its value at the smallest EP (medians)."""
    eps = run.params["ep_sizes"]
    base = _get(run.rows, eps[0], "alone", phase, col)
    return [_get(run.rows, ep, "alone", phase, col) / base for ep in eps]


def _deepep_growth(phase: str) -> tuple[list[int], list[float]]:
    pts = DEEPEP_US[phase]
    eps = sorted(pts)
    return eps, [pts[e] / pts[eps[0]] for e in eps]


# --- plots ---------------------------------------------------------------------------------
def _plots(run: Run, latencies: dict[str, list[list[float]]], cases: list[dict[str, Any]]
           ) -> None:
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: pyplot loads a backend: only after matplotlib.use("Agg") above
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    p = run.params
    eps = p["ep_sizes"]
    colors = {"alone": "tab:green", "background": "tab:red", "isolated": "tab:blue"}
    fig, axes = plt.subplots(len(Phase), len(eps), figsize=(4 * len(eps), 6.4),
                             squeeze=False, sharey=True)
    for i, ph in enumerate(Phase):
        for j, ep in enumerate(eps):
            ax = axes[i][j]
            for case in CASES:
                draws = latencies.get(f"{ep}/{case}/{ph}", [])
                for k, v in enumerate(draws):  # one CDF per draw: the spread is visible
                    v = sorted(v)
                    if v:
                        ax.step([x / 1e3 for x in v], [(q + 1) / len(v) for q in range(len(v))],
                                where="post", color=colors[case], lw=1, alpha=0.75,
                                label=f"{CASE_LABEL[case]} ({len(draws)} draws)" if k == 0
                                else None)
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_title(f"EP{ep} {ph}", fontsize=9)
            ax.set_xlabel("message latency (emulated ms, log)")
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("fraction of decode messages")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    run.save_figure(fig, "latency_cdf.png")

    fig, axes = plt.subplots(1, len(Phase), figsize=(10, 3.8), squeeze=False)
    for ax, ph in zip(axes[0], Phase, strict=True):
        d_eps, d_growth = _deepep_growth(ph)
        ax.plot(d_eps, d_growth, "k--o", label="DeepEP (H800, /EP8)")
        for col, lo, hi, style, colour, what in (
                ("completion_ms", None, None, "-o", "tab:green", "phase completion"),
                ("p99_ms", "p99_p25_ms", "p99_p75_ms", "-s", "tab:olive", "message p99"),
                ("ideal_p99_ms", None, None, ":", "tab:gray", "flow model p99")):
            g = _growth(run, ph, col)
            who = "" if col == "ideal_p99_ms" else "lab: "
            ax.plot(eps, g, style, color=colour, label=f"{who}{what} (/EP{eps[0]}, median "
                    f"of {p['draws'] if col != 'ideal_p99_ms' else p['model_draws']})")
            if lo:  # the draws' quartiles, on the same normalisation
                base = _get(run.rows, eps[0], "alone", ph, col)
                ax.vlines(eps, [_get(run.rows, e, "alone", ph, lo) / base for e in eps],
                          [_get(run.rows, e, "alone", ph, hi) / base for e in eps],
                          color=colour, lw=3, alpha=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(eps) | set(d_eps)),
                      [str(e) for e in sorted(set(eps) | set(d_eps))])
        ax.set_xlabel("EP size (GPUs)")
        ax.set_ylabel("latency / latency at the smallest EP")
        ax.set_title(f"{ph}: growth with EP size (no background; bars: p25-p75 of draws)",
                     fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    run.save_figure(fig, "latency_vs_ep.png")

    fig, axes = plt.subplots(1, len(Phase), figsize=(11, 3.8), squeeze=False)
    keys = [(ep, c) for ep in eps for c in CASES if f"{ep}/{c}/dispatch" in latencies]
    for ax, ph in zip(axes[0], Phase, strict=True):
        rows = {(r["ep"], r["case"]): r for r in cases if r["phase"] == ph}
        plot_draws(ax, [f"EP{ep}\n{c}" for ep, c in keys],
                   [[x["p99_us"] / 1e3 for x in rows[k]["per_draw"]] for k in keys],
                   [[v / 1e3 for v in rows[k]["model"]["p99_us"]["values"]] for k in keys],
                   bound=[rows[k]["serial_ms"] for k in keys],
                   colours=[colors[c] for _ep, c in keys],
                   bound_label="one message's serialisation")
        ax.set_yscale("log")
        ax.set_ylabel("decode p99 (emulated ms, log)")
        ax.set_title(f"{ph}: p99 per case (dots: draws; box: flow model)", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=7)
    fig.tight_layout()
    run.save_figure(fig, "p99_by_case.png")


# --- report --------------------------------------------------------------------------------
def _ratio(a: float, b: float) -> float:
    return a / b if b and b == b and a == a else math.nan


def _dt(r: dict[str, Any], q: str) -> str:
    """A row's measured ``q`` (p50/p99) as median [p25-p75] ms, N=draws."""
    d = r["measured"][f"{q}_us"]
    return fmt_distribution({**d, **{k: d[k] / 1e3 for k in ("median", "p25", "p75")}},
                            " ms", 0)


def _report(run: Run, classes: dict[int, dict[str, Any]], cases: list[dict[str, Any]]
            ) -> None:
    p = run.params
    rep = run.report
    eps = p["ep_sizes"]
    scale = p["scale"]
    nic = 400 * 1000 * scale
    bg = [e for e in eps if e in p["background_eps"]]
    rep.section("Setup", WORDS(
        "setup", eps=", ".join(f"EP{e}" for e in eps), gpus_per_server=p["gpus_per_server"],
        scale=scale, nic=nic, lane=nic / 2, model=p["model"], tokens=p["tokens"],
        tokens_note=_tokens_note(p["tokens"]), intra_server=p["intra_server"],
        intra_note=WORDS("intra_nvlink" if p["intra_server"] == "nvlink" else "intra_nics"),
        draws=p["draws"], seed=p["seed"], stride=DRAW_QP_STRIDE, model_draws=p["model_draws"],
        example_us=100e-3 * scale * 1e6,
        background=", ".join(f"EP{e}" for e in bg) or WORDS("no_background"),
        fill_s=p["fill_s"]))
    rep.section("Results")
    rep.table([{"EP": r["ep"], "case": r["case"], "phase": r["phase"],
                "messages": r["count"], "p50 measured": _dt(r, "p50"),
                "p50 ideal": r["ideal_p50_ms"], "ratio p50": r["ratio_p50"],
                "p99 measured": _dt(r, "p99"), "p99 ideal": r["ideal_p99_ms"],
                "ratio p99": r["ratio_p99"], "bound (ms)": r["serial_ms"],
                "completion (ms)": r["completion_ms"],
                "p99 real (us)": r["p99_real_us"], "lost": r["lost"]} for r in cases])
    rep.text(WORDS("table_note"))
    rep.image("latency_cdf.png", WORDS("cdf_caption"))
    rep.image("latency_vs_ep.png", WORDS("growth_caption"))
    rep.image("p99_by_case.png", WORDS("p99_caption"))
    rep.section("Findings")
    _finding_growth(run)
    if bg:
        _finding_isolation(run, classes, cases)
    _finding_gaps(run, cases)
    rep.section("How to read this", WORDS("how_to_read"))
    run.summary["growth"] = {ph: {"lab_completion": _growth(run, ph, "completion_ms"),
                                  "lab_p99": _growth(run, ph, "p99_ms"),
                                  "model_p99": _growth(run, ph, "ideal_p99_ms"),
                                  "deepep": dict(zip(*_deepep_growth(ph), strict=True))}
                             for ph in Phase}


def _finding_gaps(run: Run, cases: list[dict[str, Any]]) -> None:
    """Rows whose p50 or p99 ratio is outside 0.7-1.3, and why, from their own evidence."""
    told: set[str] = set()
    lines = [gap_line(r, run.params["fill_s"], told) for r in cases]
    lines = [x for x in lines if x]
    if lines:
        run.report.finding(
            "3. Where measurement and model differ (ratio outside 0.7-1.3)",
            measured="; ".join(f"EP{r['ep']} {r['case']} {r['phase']} p50/p99 ratios "
                               f"{_fmt(r['ratio_p50'])}/{_fmt(r['ratio_p99'])}" for r in cases
                               if not (in_band(r["ratio_p50"]) and in_band(r["ratio_p99"]))),
            ideal="1.0 (the flow model's message latencies for the same flows and hash)",
            published="-", why=" ".join(lines))


def _finding_growth(run: Run) -> None:
    p = run.params
    eps = p["ep_sizes"]
    lo, hi = eps[0], eps[-1]
    doublings = math.log2(hi / lo)
    meas, ideal, pub = [], [], []
    for ph in Phase:
        g = _growth(run, ph, "completion_ms")[-1]
        g99 = _growth(run, ph, "p99_ms")[-1]
        gm = _growth(run, ph, "ideal_p99_ms")[-1]
        d = DEEPEP_US[ph]
        same = d[min(8 * 2 ** round(doublings), 256)] / d[8]
        meas.append(f"{ph}: completion x{g:.2f}, p99 x{g99:.2f} from EP{lo} to EP{hi} "
                    f"(medians of {p['draws']} draws)")
        ideal.append(f"{ph}: p99 x{gm:.2f}")
        pub.append(f"{ph}: x{same:.2f} over the same {doublings:g} doubling(s) from EP8 "
                   f"(EP8 {d[8]} us -> EP{min(8 * 2 ** round(doublings), 256)}); "
                   f"x{d[256] / d[8]:.2f} to EP256")
    remote = {ep: _remote_share(ep, p) for ep in eps}
    grow = {ph: (_growth(run, ph, "completion_ms")[-1], _growth(run, ph, "ideal_p99_ms")[-1])
            for ph in Phase}
    why = growth_why(remote, grow, p["gpus_per_server"], p["tokens"],
                     {ph: DEEPEP_US[ph][256] / DEEPEP_US[ph][8] for ph in Phase})
    run.report.finding("1. Decode latency growth with EP size", measured="; ".join(meas),
                       ideal="flow model (same flows, ECMP, medians of its draws) "
                             + "; ".join(ideal),
                       published="DeepEP: " + "; ".join(pub) + f" ({DEEPEP_SOURCE})", why=why)


def _remote_share(ep: int, p: dict[str, Any]) -> float:
    if p["intra_server"] == "fabric":
        return 1 - 1 / ep
    return 1 - p["gpus_per_server"] / ep


def _finding_isolation(run: Run, classes: dict[int, dict[str, Any]],
                       cases: list[dict[str, Any]]) -> None:
    p = run.params
    eps = [e for e in p["ep_sizes"] if e in p["background_eps"]]
    parts, model, moved = [], [], []
    for ep in eps:
        for ph in Phase:
            x = {q: [_get(run.rows, ep, c, ph, f"{q}_ms") for c in CASES]
                 for q in ("p50", "p99")}
            a, b, i = x["p99"]
            rows = {r["case"]: r for r in cases if (r["ep"], r["phase"]) == (ep, ph)}
            parts.append(f"EP{ep} {ph}: p99 {_dt(rows['alone'], 'p99')} alone -> "
                         f"{_dt(rows['background'], 'p99')} (x{_ratio(b, a):.1f}) with "
                         f"background, {_dt(rows['isolated'], 'p99')} (x{_ratio(i, a):.2f} of "
                         "alone) with isolation")
            model.append(f"EP{ep} {ph}: p99 {rows['alone']['ideal_p99_ms']:.0f} ms alone, "
                         f"{rows['background']['ideal_p99_ms']:.0f} ms with the bulk flows "
                         f"(ratios {rows['background']['ratio_p99']:.2f} FIFO, "
                         f"{rows['isolated']['ratio_p99']:.2f} isolated)")
            moved.append({"p50": _ratio(x["p50"][1], x["p50"][0]), "p99": _ratio(b, a),
                          "isolated": _ratio(i, a)})
    counters = []
    for ep, cls in classes.items():
        c = cls.get("status", {}).get("classes", {})
        if c:
            counters.append(f"EP{ep}: decode class {c['decode']['packets']:,} packets, bulk "
                            f"class {c['bulk']['packets']:,} on {cls['status']['interfaces']} "
                            "ports")
    fill = p["fill_s"]
    worst = max((m["isolated"] for m in moved if m["isolated"] == m["isolated"]),
                default=math.nan)
    run.report.finding(
        "2. Background traffic and traffic-class isolation",
        measured="; ".join(parts),
        ideal=("flow model, same flows, max-min fair sharing (no queues, no priorities): "
               + "; ".join(model) + f". Queueing on top of it: FIFO adds fill x (offered - "
               f"lane) / lane per bulk-overloaded hop on a message's path: +{fill:g} s behind "
               f"one 400G bulk flow on a 200G lane, +{3 * fill:g} s where ECMP put two on one "
               "lane; strict priority: the alone value plus at most one bulk frame per hop "
               f"(worst measured here: x{worst:.2f} of alone)"),
        published=("DeepEP recommends separate InfiniBand virtual lanes for normal-kernel, "
                   "low-latency-kernel and other traffic (traffic isolation, docs/legacy.md); "
                   "no figure is published for the penalty without it"),
        why=isolation_why(fill, moved, counters))


