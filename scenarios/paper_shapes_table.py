"""The ``paper-shapes`` table on paper: the published figures and the rows built from numbers.

``PUBLISHED`` holds each figure the scenario reproduces with what its source says;
``build_rows`` turns the scenario's measurements (plain numbers: per-draw throughputs,
completions, imbalances, hops, costs) into the table's rows and the ``summary.json``
entries, with the per-row arithmetic (``balls_into_bins``, ``flow_throughput``,
``paired_growth``). None of it needs a fabric, which is why it is apart from
``scenarios.experiments.paper_shapes`` (the runs that make the measurements, the plot and the
report) and unit-tested on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scenarios.common import compare, distribution, fmt_distribution
from scenarios.experiments.decode_latency import DEEPEP_SOURCE, DEEPEP_US
from scenarios.experiments.expert_skew import EPLB_README

#: Rows of the table, in order (the keys of ``summary.json``).
ROWS = ("1", "2a", "2b", "3", "4", "5a", "5b")


def balls_into_bins(n: int) -> float:
    """Expected share of ``n`` equal paths used when ``n`` flows are hashed onto them.

    ``1 - (1 - 1/n)^n`` (-> 1 - 1/e = 0.632). For equal, long flows it is also the mean
    flow's share of its ideal rate: a flow sharing its path with X others runs at 1/(1+X),
    and E[1/(1+X)] for X ~ Binomial(n-1, 1/n) is the same expression.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    return 1.0 - (1.0 - 1.0 / n) ** n


#: The published figures, each with what its source says (checked against the source where
#: marked; derived numbers say how they were derived).
PUBLISHED: dict[str, dict[str, Any]] = {
    "ecmp": {
        "value": (0.45, balls_into_bins(10**9)),
        "text": "0.45-0.63",
        "short": "Hedera NSDI'10; 1-1/e",
        "source": (
            "Balls into bins: n flows hashed onto n equal paths use 1-(1-1/n)^n of them, "
            "-> 1-1/e = 63.2%; for equal long flows that is also the mean flow's share of "
            "its ideal rate. Hedera (Al-Fares, Radhakrishnan, Raghavan, Huang, Vahdat, NSDI "
            "2010), abstract (checked): 'for a simulated 8,192 host data center, Hedera "
            "delivers bisection bandwidth that is 96% of optimal and up to 113% better than "
            "static load-balancing methods' (static = per-flow ECMP hashing), so ECMP "
            "reached as little as 0.96/2.13 = 45% of optimal on its worst pattern (derived "
            "here; the paper does not state 45%). C4 (Dong et al., Alibaba, HPCA 2025, "
            "arXiv 2406.04594) attributes lost bandwidth in production LLM training to ECMP "
            "collisions of a few long-lived flows and plans paths instead; its figures were "
            "not checked against the paper here, so none is quoted."),
    },
    "deepep": {
        "value": {ep: DEEPEP_US["dispatch"][ep] / DEEPEP_US["dispatch"][8] for ep in (16, 32)},
        "us": {ep: DEEPEP_US["dispatch"][ep] for ep in (8, 16, 32)},
        "text": "1.53x, 2.01x",
        "short": "DeepEP docs/legacy.md",
        "source": (f"{DEEPEP_SOURCE}, hidden 7168, FP8 dispatch: dispatch 77 us at EP8, "
                   "118 us at EP16, 155 us at EP32 (checked): x1.53 and x2.01 of EP8"),
    },
    "eplb": {
        "value": None,
        "text": "drops; no figure",
        "short": "DeepSeek EPLB; V3 report 3.4.1",
        "source": (EPLB_README + " DeepSeek-V3 technical report (arXiv 2412.19437) section "
                   "3.4.1: in prefill (EP32) each GPU hosts its 8 experts plus one redundant "
                   "one, chosen from high-load experts; the setting replayed here."),
    },
    "railonly": {
        "value": (1.082, 1.112),
        "text": "1.082-1.112x",
        "short": "Rail-only arXiv 2307.12169",
        "source": ("Rail-only (Wang, Ghobadi, Shakeri, Zhang, Hasani, arXiv 2307.12169), "
                   "abstract (checked): MoE all-to-all through forwarding 'with only 8.2% to "
                   "11.2% completion time overhead for all-to-all traffic', against an "
                   "any-to-any full-bisection network."),
    },
    "hops": {
        "value": 3 / 5,
        "text": "3 vs 5",
        "short": "Astral 3.0 (design notes)",
        "source": ("Astral 3.0 (Telecommunications Science, 2026), as the lab's design notes "
                   "summarise it: any GPU reaches any other in at most leaf-spine-leaf (3 "
                   "switch hops) instead of ToR-aggregation-core-aggregation-ToR (5) in the "
                   "three-tier rail-optimized fabric of Astral/Xingmai 2.0."),
    },
    "cost": {
        "value": None,
        "text": "fewer switches, optics; no ratio",
        "short": "Astral 3.0 (design notes)",
        "source": ("Astral 3.0, as the lab's design notes summarise it: the optical shuffle "
                   "raises the effective radix, so two tiers reach a scale that otherwise "
                   "needs three, with fewer switches and optics. No cost ratio is given in the "
                   "lab's sources; the cost model's prices are stated assumptions "
                   "(testbed/models/cost.py)."),
    },
}


# --- pure arithmetic (unit-tested) --------------------------------------------------------------
def flow_throughput(fct_s: Sequence[float | None], ideal_s: Sequence[float],
                    delivered: Sequence[float] | None = None) -> float:
    """Mean over flows of ideal completion / completion (a flow that never finished counts 0).

    Every flow of a permutation has the same ideal, so this is the mean flow rate as a
    fraction of the ideal rate, the figure the balls-into-bins argument predicts.
    ``delivered`` (share of each flow's bytes that arrived) scales each flow by its goodput,
    so packets lost in the emulated switch are not counted as carried.
    """
    if len(fct_s) != len(ideal_s) or not ideal_s:
        raise ValueError("need one ideal per flow, and at least one flow")
    got = [1.0] * len(ideal_s) if delivered is None else list(delivered)
    if len(got) != len(ideal_s):
        raise ValueError("need one delivered share per flow")
    return sum((g * i / t) if t and t > 0 else 0.0
               for t, i, g in zip(fct_s, ideal_s, got, strict=True)) / len(ideal_s)


def paired_growth(base: Sequence[float], other: Sequence[float]) -> list[float]:
    """``other[i] / base[i]`` for every draw both have (draw i: the same seed at both sizes)."""
    return [o / b for b, o in zip(base, other, strict=False) if b and b > 0 and o == o]


def dist(values: Sequence[float]) -> dict[str, Any]:
    d = distribution(list(values))
    d.pop("values", None)  # the raw values are kept once, in runs.json
    return d


def _entry(shape: str, measured: float | None, ideal: float | None, *, kind: str,
           published_key: str, published_value: Any = None, published_text: str | None = None,
           lab: dict[str, Any] | None = None, model: dict[str, Any] | None = None,
           **extra: Any) -> dict[str, Any]:
    pub = PUBLISHED[published_key]
    out = compare(measured, ideal, shape=shape, lab_is=kind,
                  published=published_text or pub["text"],
                  published_value=pub["value"] if published_value is None else published_value,
                  source=pub["source"], **extra)
    if lab is not None:  # randomized: draws, median, p25, p75 of the lab's figure
        out.update({k: lab[k] for k in ("draws", "median", "p25", "p75")})
        out["model_distribution"] = model
    return out


def build_rows(m: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The table's rows and the ``summary.json`` entries from the measurements ``m``.

    ``m`` holds plain numbers (see ``paper_shapes`` for how each is made):
    ``ecmp``: ``lab``/``model`` (flow throughput per draw), ``lab_job``/``model_job`` (job
    bound / completion per draw), ``planned_lab`` (same fabric, planned mode), ``paths``
    (lanes a leaf hashes over); ``ep``: ``lab``/``model`` (EP size -> phase completion per
    seed), ``skipped`` (EP size -> why it was not emulated); ``eplb``: ``before``/``after``/
    ``expected`` (max/mean per seed); ``relay``: ``lab`` (railonly / astral3 completion per
    repeat), ``model``; ``tiers``: ``lab_hops``/``model_hops`` ((two-tier, three-tier)),
    ``lab_cost``/``model_cost`` ((two-tier $, three-tier $)), ``lab_gpus``, ``paper_gpus``.
    """
    rows: list[dict[str, Any]] = []
    summary: dict[str, dict[str, Any]] = {}

    def add(key: str, shape: str, lab: str, model: str, pub_key: str, kind: str,
            entry: dict[str, Any], published: str | None = None) -> None:
        rows.append({"row": key, "shape": shape, "lab": lab, "lab is": kind, "model": model,
                     "published": published or PUBLISHED[pub_key]["text"],
                     "source": PUBLISHED[pub_key]["short"]})
        summary[key] = entry

    # 1. ECMP
    e = m["ecmp"]
    lab, mod = dist(e["lab"]), dist(e["model"])
    bib = balls_into_bins(e["paths"])
    add("1", "ECMP permutation: flow throughput / ideal", fmt_distribution(lab),
        fmt_distribution(mod), "ecmp", "emulated",
        _entry("ECMP permutation: mean flow throughput / ideal", lab["median"], mod["median"],
               kind="emulated", published_key="ecmp", lab=lab, model=mod,
               balls_into_bins_here=bib, paths_per_hash=e["paths"],
               job_lab=dist(e["lab_job"]), job_model=dist(e["model_job"]),
               planned_lab=e.get("planned_lab"), lost_packets=list(e.get("lab_lost", []))))

    # 2. DeepEP growth
    ep = m["ep"]
    base = min(ep["model"])
    for key, size in (("2a", 16), ("2b", 32)):
        pub = PUBLISHED["deepep"]
        shape = f"DeepEP LL dispatch EP{base}->EP{size}"
        text = f"{pub['value'][size]:.2f}x ({pub['us'][8]}->{pub['us'][size]} us)"
        mod = dist(paired_growth(ep["model"][base], ep["model"].get(size, [])))
        if size in ep["lab"] and base in ep["lab"]:
            lab = dist(paired_growth(ep["lab"][base], ep["lab"][size]))
            cell, measured = fmt_distribution(lab, "x"), lab["median"]
        else:
            why = ep.get("skipped", {}).get(size) or ep.get("skipped", {}).get(base) \
                or "not run"
            lab, cell, measured = None, f"skipped: {why}", None
        entry = _entry(shape + " (growth of the phase completion)", measured, mod["median"],
                       kind="emulated", published_key="deepep",
                       published_value=pub["value"][size], published_text=text, lab=lab,
                       model=mod,
                       published_us=pub["us"], ep_sizes=[base, size])
        if lab is None:
            entry.update(skipped=cell, model_distribution=mod)
        add(key, shape, cell, fmt_distribution(mod, "x"), "deepep", "emulated", entry,
            published=text)

    # 3. EPLB
    b = m["eplb"]
    before, after, exp = dist(b["before"]), dist(b["after"]), dist(b["expected"])
    add("3", "EPLB: max/mean tokens per GPU after", f"{fmt_distribution(after)} "
        f"(before {before['median']:.2f})", f"{fmt_distribution(exp)}", "eplb",
        "workload sim",
        _entry("EPLB: max/mean token copies per GPU after replication", after["median"],
               exp["median"], kind="workload simulation (traffic/workload.py), not emulated",
               published_key="eplb", lab=after, model=exp, before=before,
               drop=before["median"] / after["median"] if after["median"] else None))

    # 4. rail-only relay
    r = m["relay"]
    lab = dist(r["lab"])
    lo, hi = PUBLISHED["railonly"]["value"]
    add("4", "rail-only relay: A2A time / any-to-any", fmt_distribution(lab, "x"),
        f"{r['model']:.2f}x", "railonly", "emulated",
        _entry("rail-only relay: all-to-all completion, railonly / astral3 (planned)",
               lab["median"], r["model"], kind="emulated", published_key="railonly",
               lab=lab, model=None, published_range=[lo, hi]))

    # 5. two tiers vs three
    t = m["tiers"]
    (la, lr), (ma, mr) = t["lab_hops"], t["model_hops"]
    add("5a", "switch hops: 2-tier vs 3-tier", f"{la} vs {lr} ({t['lab_gpus']} GPUs)",
        f"{ma} vs {mr} ({t['paper_gpus']:,} GPUs)", "hops", "wiring plan",
        _entry("max switch hops, astral3 / rail3", la / lr, ma / mr,
               kind="the lab's wiring plans (controller paths), not a timing",
               published_key="hops", lab_hops=[la, lr], model_hops=[ma, mr],
               lab_gpus=t["lab_gpus"], paper_gpus=t["paper_gpus"]))
    (ca, cr), (pa, pr) = t["lab_cost"], t["model_cost"]
    add("5b", "network cost: 2-tier / 3-tier", f"{ca / cr:.2f}x ({t['lab_gpus']} GPUs)",
        f"{pa / pr:.2f}x ({t['paper_gpus']:,} GPUs)", "cost", "cost model",
        _entry("network cost, astral3 / rail3", ca / cr, pa / pr,
               kind="cost model of the lab's wiring plans (testbed/models/cost.py counts_for_spec)",
               published_key="cost", lab_cost_usd=[ca, cr], model_cost_usd=[pa, pr],
               lab_gpus=t["lab_gpus"], paper_gpus=t["paper_gpus"]))
    return rows, summary
