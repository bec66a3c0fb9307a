"""Cost model: what each fabric design needs, and costs, at any GPU count. Pure, no root.

The wiring-plan builders (``testbed.topologies``) enumerate every node and lane, which is
right for emulation and wrong for "what does a 65,536-GPU fabric cost": this module counts
the same things in closed form, so its cost does not grow with the fabric. For every design
(``astral3``, ``rail3``, ``railonly``, ``fattree``) at a GPU count, GPUs per server, NIC
speed, switch radix (in lanes of ``lane_gbps``) and oversubscription it reports switches per
tier, switch lanes used, transceivers, fibres, optical shuffle boxes, the maximum number of
switch hops, bisection bandwidth and a cost from editable per-item ``Prices``.

Two ways in, one arithmetic:

``counts_for_spec(design, FabricSpec)``
    The builder's own semantics and defaults (``spines=0`` means one per uplink lane, and so
    on). At small sizes its numbers must equal those of ``testbed.topologies.build`` exactly;
    the unit tests build real plans and compare. This is what keeps the model honest.
``analyze(design, gpus, CostSpec)``
    Sizes the fabric the way a buyer would: fill every leaf (largest servers-per-block the
    radix allows), fewest spines/cores that still reach everything, and, where one structure
    cannot reach the size, the standard way that design grows (below). A design that cannot
    reach the size at all comes back as a row with ``feasible=False`` and the reason.

How each design grows past one structure (said in the row's ``notes``, never silently):

* ``astral3`` is two tiers. A spine has ``radix`` lane ports and, through the shuffle, one
  lane reaches one leaf, so one spine layer joins at most ``radix`` leaves. Past that the
  rails are split into **rail groups**, each with its own shuffled spine layer; traffic
  between groups is relayed over NVLink inside the server, as in ``railonly``. If even one
  rail per group has more leaves than a spine has lanes, the design is infeasible.
* ``rail3`` is three tiers. Past what one aggregation layer holds, blocks are split into
  **pods** and the cores are grouped by aggregation index (the usual folded-Clos core
  planes). Infeasible once a core cannot reach one aggregation switch of every pod x rail.
* ``railonly`` is per-rail two tiers with whole uplink ports (as its builder cables it);
  infeasible once a rail has more leaves than a rail spine has ports.
* ``fattree`` is the textbook k-ary fat-tree with the smallest k that holds the GPUs (as its
  builder), each switch k ports at NIC speed; infeasible when k NIC ports exceed the radix.

Conventions (the counts are only as good as these; the builder counts a plan's ``optics``
from its links by the same ones, a part-full astral3 shuffle box included):

* **Transceivers**: one module per port end. A NIC cable has one at the NIC and one at the
  leaf (``nic_gbps/lane_gbps`` lanes each); a multi-lane uplink port has one module of
  ``lanes_per_uplink`` lanes at each end. In ``astral3`` the leaf side is one module per
  uplink port; the spine side is one module per shuffle-box output (a trunk of L lanes from
  L leaves, all to one spine); the passive box has none. Everything is optical (no copper
  DACs): an assumption; the NIC-to-leaf cables, the likeliest to be copper, are the same in
  every design, and ``price(..., nic_cables=False)`` leaves them out.
* **Fibres**: two strands (Tx, Rx) per lane per cable segment (parallel single-mode optics,
  e.g. DR4 = 8 fibres). ``astral3`` uplinks have two segments: leaf -> box -> spine.
* **Switch lanes used**: every lane-port in use on a network switch (NIC ports count
  ``nic_gbps/lane_gbps`` lanes). Per-server NVLink switches and NICs are part of the server,
  the same in every design, and are not counted or priced.
* **Bisection**: the capacity between two halves of the servers (servers kept whole, so
  NVLink relay inside a server is free), one direction: ``GPUs/2 x NIC rate /
  oversubscription`` when the halves are in different blocks; with one block, or
  oversubscription below 1 (uplinks beyond the NICs), the NIC limit ``GPUs/2 x NIC rate``.
  For a non-blocking design that is the NIC limit, the same for all four designs; the
  difference between them is the path (``max_switch_hops``, NVLink relay). Where the
  halves split no block, it is the max-flow between them in the builder's plan (tested).
* **Switch hops**: network switches on the worst GPU pair's shortest path (NVLink relay
  not counted); the builder reads it off its plan's links, the model's closed form agrees.

Published checks: ``two_tier_capacity`` (k^2/2 hosts per plane) and ``three_tier_capacity``
(k^3/4) are tested against both the model and real plans; ``rail_only_reduction`` sets our
railonly saving beside the rail-only paper's 38-77 % and documents the gap.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from testbed import topologies
from testbed.fabricspec import CostSpec, Fabric, FabricSpec, Infeasible
from vocab.validate import replaceable

#: every topology module (testbed/topologies/), in listing order
DESIGNS = topologies.TOPOLOGIES.names()

#: The counting conventions, written into cost.json so a reader of the numbers has them.
CONVENTIONS = {
    "transceivers": "one module per port end; NIC cable: NIC + leaf module (NIC lanes each); "
                    "uplink port: one L-lane module per end; astral3: one per leaf uplink "
                    "port + one per shuffle-box output trunk at the spine",
    "fibers": "2 strands (Tx, Rx) per lane per cable segment; astral3 uplinks have two "
              "segments (leaf -> box -> spine)",
    "switch_lanes_used": "lane-ports in use on network switches; NVLink switches and NICs "
                         "are part of the server and not counted",
    "bisection": "GPUs/2 x NIC rate / oversubscription between halves of the servers "
                 "(servers kept whole: NVLink relay inside a server is free); the NIC limit "
                 "GPUs/2 x NIC rate with one block or oversubscription below 1",
    "cost": "switch lanes x switch_port + switches x switch_box + modules x optic_module + "
            "module lanes x optic_lane + fibers x fiber + boxes x shuffle_box; all optical",
}


# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prices:
    """Per-item prices in US dollars. Every default is an ASSUMPTION (order-of-magnitude 2024-25
    street prices, not quotes); edit them: the relative ranking depends mostly on the ratio of
    switch-port to transceiver prices, which is why both are separate knobs.

    * ``switch_port``: per lane-port of switch capacity in use. Assumption: a 51.2 Tb/s box
      (256 x 200G lanes) at about $38k, i.e. ~$150 per 200G lane-port.
    * ``switch_box``: fixed cost per switch on top of its ports (chassis, CPU, PSUs).
      Assumption: 0, so small and large switches cost the same per lane; raise it to
      penalise designs with many small switches (the k-ary fat-tree).
    * ``optic_module`` + ``optic_lane`` x lanes: one transceiver. Assumption: $100 + $125/lane
      gives ~$350 for 400G (2 lanes), ~$600 for 800G (4), ~$1,100 for 1.6T (8).
    * ``fiber``: per strand including its share of connectors and patching. Assumption: $4.
    * ``shuffle_box``: one passive L x L fibre shuffle cassette. Assumption: $250.
    """

    switch_port: float = 150.0
    switch_box: float = 0.0
    optic_module: float = 100.0
    optic_lane: float = 125.0
    fiber: float = 4.0
    shuffle_box: float = 250.0

    def validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
                raise ValueError(f"price {f.name} must be a number >= 0 (got {value!r})")


# --- way in 1: the builder's semantics (cross-checked against real plans) -------------------
def counts_for_spec(design: str, spec: FabricSpec) -> Fabric:
    """Closed-form counts for exactly the plan ``testbed.topologies.build`` would make.

    Same defaults (``0`` = the builder's automatic choice) and the same ValueErrors for
    unbuildable specs, without enumerating anything, so the model and the emulator describe
    one fabric. Addressing limits of the emulator (<= 256 blocks, k <= 254) are not modelled.
    The arithmetic and what is buildable are the design's own (``counts`` in
    ``testbed/topologies/<design>.py``, which applies its builder's rules), and so is the
    error for a parameter the design does not use.
    """
    return topologies.TOPOLOGIES.get(design).counts(spec)


# --- way in 2: sized as a buyer would, at any scale ------------------------------------------
def analyze(design: str, gpus: int, spec: CostSpec | None = None) -> Fabric:
    """Size one design for ``gpus`` GPUs. Raises ValueError for bad input, Infeasible when the
    design cannot reach the size (the message says why). The sizing rules are the design's
    own (``size`` in ``testbed/topologies/<design>.py``)."""
    spec = spec or CostSpec()
    spec.validate()
    topo = topologies.TOPOLOGIES.get(design)
    if not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"GPU count must be a positive integer (got {gpus!r})")
    if gpus % spec.gpus_per_server:
        raise ValueError(f"{gpus} GPUs is not a whole number of {spec.gpus_per_server}-GPU "
                         "servers")
    return topo.size(gpus, spec)


# --- prices and the table -----------------------------------------------------------------
def price(fab: Fabric, prices: Prices, nic_cables: bool = True) -> dict[str, float]:
    """Cost by component; the total is what the table and chart compare.

    ``nic_cables=False`` leaves out the optics and fibres of the NIC-to-leaf cables (the leaf
    port itself stays: it is switch capacity). Those cables are identical in every design,
    so they dilute relative savings; published comparisons differ on whether they count them.
    """
    cables = 0 if nic_cables else fab.links_per_kind["nic"]
    modules = fab.optics - 2 * cables  # a module at each end of a NIC cable
    lanes = fab.optic_lanes - 2 * cables * fab.nic_lanes
    fibers = fab.fibers - 2 * cables * fab.nic_lanes  # two strands per lane
    parts = {
        "switches": fab.switch_lanes_used * prices.switch_port + fab.switches * prices.switch_box,
        "optics": modules * prices.optic_module + lanes * prices.optic_lane,
        "fibers": fibers * prices.fiber,
        "shuffle": fab.shuffle_boxes * prices.shuffle_box,
    }
    parts["total"] = sum(parts.values())
    return {k: round(v, 2) for k, v in parts.items()}


def _row(design: str, gpus: int, spec: CostSpec, prices: Prices) -> dict[str, Any]:
    try:
        fab = analyze(design, gpus, spec)
    except Infeasible as exc:
        return {"design": design, "gpus": gpus, "feasible": False, "reason": str(exc),
                "notes": []}
    cost = price(fab, prices)
    return {
        "design": design, "gpus": gpus, "feasible": True, "reason": "",
        "servers": fab.servers, "layout": fab.layout,
        "switches_per_tier": {t: c for t, c in fab.switches_per_tier.items() if t != "nvswitch"},
        "switches": fab.switches, "links_per_kind": fab.links_per_kind,
        "switch_lanes_used": fab.switch_lanes_used,
        "switch_lanes_capacity": fab.switch_lanes_capacity,
        "optics": fab.optics, "optic_lanes": fab.optic_lanes, "fibers": fab.fibers,
        "shuffle_boxes": fab.shuffle_boxes, "max_switch_hops": fab.max_switch_hops,
        "bisection_tbps": round(fab.bisection_gbps / 1000, 3),
        "cost": cost, "cost_per_gpu": round(cost["total"] / gpus, 2),
        "notes": list(fab.notes),
    }


def cost_table(gpus: Sequence[int], designs: Sequence[str] = DESIGNS,
               spec: CostSpec | None = None, prices: Prices | None = None,
               baseline: str = "rail3") -> list[dict[str, Any]]:
    """One row per design x GPU count, with cost relative to ``baseline`` at the same size.

    The baseline defaults to ``rail3`` because the three-tier rail-optimized fabric is what
    Astral 3.0 replaces; ``relative`` is None where the baseline is absent or infeasible.
    """
    spec, prices = spec or CostSpec(), prices or Prices()
    spec.validate()
    prices.validate()
    if not gpus:
        raise ValueError("give at least one GPU count")
    if not designs:
        raise ValueError("give at least one design")
    for d in designs:
        topologies.TOPOLOGIES.get(d)
    rows = [_row(d, n, spec, prices) for n in gpus for d in designs]
    for n in gpus:
        base = next((r for r in rows if r["gpus"] == n and r["design"] == baseline
                     and r["feasible"]), None)
        for r in rows:
            if r["gpus"] == n:
                r["relative"] = (round(r["cost"]["total"] / base["cost"]["total"], 3)
                                 if base and r["feasible"] else None)
    return rows


def _tiers(row: dict[str, Any]) -> str:
    return " ".join(f"{t} {c}" for t, c in row["switches_per_tier"].items())


def format_table(rows: list[dict[str, Any]]) -> str:
    """Aligned text table; notes and infeasibility reasons follow as numbered footnotes."""
    head = ["design", "GPUs", "switches by tier", "switches", "lanes used", "optics",
            "fibers", "shuffles", "hops", "bisect Tb/s", "cost $M", "$/GPU", "rel"]
    body: list[list[str]] = []
    foot: list[str] = []
    for r in rows:
        mark = ""
        for text in ([r["reason"]] if not r["feasible"] else []) + r.get("notes", []):
            foot.append(f"[{len(foot) + 1}] {r['design']} @ {r['gpus']}: {text}")
            mark += f"[{len(foot)}]"
        name = r["design"] + mark
        if not r["feasible"]:
            body.append([name, str(r["gpus"]), "infeasible"] + ["-"] * (len(head) - 3))
            continue
        rel = "-" if r.get("relative") is None else f"{r['relative']:.2f}"
        body.append([name, str(r["gpus"]), _tiers(r), f"{r['switches']:,}",
                     f"{r['switch_lanes_used']:,}", f"{r['optics']:,}", f"{r['fibers']:,}",
                     f"{r['shuffle_boxes']:,}", str(r["max_switch_hops"]),
                     f"{r['bisection_tbps']:,.1f}", f"{r['cost']['total'] / 1e6:,.2f}",
                     f"{r['cost_per_gpu']:,.0f}", rel])
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    left = {0, 2}

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    for i, cells in enumerate(body):
        if i and rows[i]["gpus"] != rows[i - 1]["gpus"]:
            out.append("")
        out.append(line(cells))
    return "\n".join(out + ([""] + foot if foot else []))


# --- chart -----------------------------------------------------------------------------------
def plot_costs(rows: list[dict[str, Any]], path: str | os.PathLike[str],
               title: str = "") -> None:
    """Grouped, stacked bars of cost per GPU by component, one group per GPU count.

    Per GPU rather than total so 8K and 64K share an axis; infeasible designs keep their
    slot with a label, so a missing bar is never mistaken for a cheap one. Written to a
    temporary file and renamed, so a reader never sees half a PNG.
    """
    # lazy: matplotlib takes ~0.2 s to load and only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: pyplot loads a backend: only after matplotlib.use("Agg") above
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    sizes = list(dict.fromkeys(r["gpus"] for r in rows))
    designs = list(dict.fromkeys(r["design"] for r in rows))
    parts = [("switches", "#4c72b0"), ("optics", "#dd8452"), ("fibers", "#55a868"),
             ("shuffle", "#c44e52")]
    width = 0.8 / max(len(designs), 1)
    fig, ax = plt.subplots(figsize=(max(6.4, 0.75 * len(sizes) * len(designs) + 1.5), 4.8))
    top = max((r["cost_per_gpu"] for r in rows if r["feasible"]), default=1.0)
    ticks, labels = [], []
    for i, n in enumerate(sizes):
        for j, design in enumerate(designs):
            r = next(x for x in rows if x["gpus"] == n and x["design"] == design)
            x = i + (j - (len(designs) - 1) / 2) * width
            ticks.append(x)
            labels.append(design)
            if not r["feasible"]:
                ax.text(x, top * 0.03, "infeasible", rotation=90, ha="center", va="bottom",
                        fontsize=8, color="#444444")
                continue
            bottom = 0.0
            for part, color in parts:
                v = r["cost"][part] / n
                ax.bar(x, v, width * 0.9, bottom=bottom, color=color,
                       label=part if not ax.get_legend_handles_labels()[1].count(part)
                       else None)
                bottom += v
            if r.get("relative") is not None:
                ax.text(x, bottom, f"{r['relative']:.2f}", ha="center", va="bottom",
                        fontsize=7)
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, rotation=90, fontsize=8)
    under = blended_transform_factory(ax.transData, ax.transAxes)
    for i, n in enumerate(sizes):
        ax.text(i, -0.24, f"{n:,} GPUs", transform=under, ha="center", va="top", fontsize=9)
    ax.set_ylabel("network cost per GPU ($, assumed prices)")
    ax.set_title(title or "Network cost per GPU by design\n(bar label: cost relative to rail3)",
                 fontsize=10)
    if ax.get_legend_handles_labels()[1]:  # no bar at all: no legend (matplotlib warns)
        ax.legend(loc="upper left", fontsize=8, ncol=len(parts))
    ax.set_ylim(0, top * 1.25)
    fig.tight_layout()
    path = os.fspath(path)
    replaceable(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=directory)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=120)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        plt.close(fig)


# --- published facts --------------------------------------------------------------------------
def two_tier_capacity(k: int) -> int:
    """Hosts of a non-blocking two-tier leaf-spine of radix-k switches, one plane: k^2/2.

    k leaves (one spine port each), each with k/2 host ports. In ``astral3`` the spine's unit
    is a lane (the shuffle), so k = radix in lanes and hosts are counted in lanes.
    """
    return k * k // 2


def three_tier_capacity(k: int) -> int:
    """Hosts of a k-ary fat-tree (Al-Fares et al., SIGCOMM 2008): k^3/4."""
    return k ** 3 // 4


#: Rail-only paper (Wang, Ghobadi et al., arXiv 2307.12169, abstract): 38-77 % lower network
#: cost than a conventional rail-optimized any-to-any GPU datacenter.
RAIL_ONLY_PAPER_REDUCTION = (0.38, 0.77)


def rail_only_reduction(gpus: Sequence[int] = (4096, 8192, 16384, 32768),
                        hb_domains: Sequence[int] = (8, 256), spec: CostSpec | None = None,
                        prices: Prices | None = None,
                        nic_cables: bool = True) -> list[dict[str, Any]]:
    """Our railonly cost reduction against the any-to-any baselines, in the paper's setting.

    Published (verified: the paper's abstract): Rail-only cuts network cost by 38-77 %
    against a conventional rail-optimized any-to-any GPU datacenter
    (``RAIL_ONLY_PAPER_REDUCTION``). From memory of the paper's body, NOT verified here:
    its settings span HB (NVLink) domains of 8 GPUs (DGX H100) and 256 (GH200) at tens of
    thousands of GPUs; its switch radix and price list are not reproduced.

    Our comparable setting: those HB domains as ``gpus_per_server``, 4K-32K GPUs, 400G NICs,
    51.2T switches (256 x 200G lanes), default ``Prices``. Baselines: ``rail3`` (the
    rail-optimized three tiers, the paper's baseline) and ``fattree`` (the only any-to-any
    baseline at HB 256, where a rail3 core cannot reach 256 rails); ``astral3``, the
    two-tier any-to-any design, for contrast. Each entry: ``1 - cost(railonly)/cost(base)``,
    None where a design is infeasible. Results with the defaults:

    ====================  ==============  ==============  ====================
    HB domain              vs rail3        vs fattree      vs astral3
    ====================  ==============  ==============  ====================
    8, NIC cables priced   35.3 %          38.8-44.1 %     2.1 %
    8, without             44.5 %          48.3-53.7 %     3.0 %
    256, NIC cables        infeasible      72.1-74.5 %     55.4 %
    256, without           infeasible      89.8-90.8 %     80.8 %
    ====================  ==============  ==============  ====================

    So our range, NIC cables priced, is 35-75 % against the paper's 38-77 %: the same shape
    (small HB domain: railonly drops one of three switch tiers; large HB domain: a rail fits
    one switch). The low end is 3 points lower, the high end 2.5 points lower. Whether the
    NIC-to-leaf cables are priced moves the low end between 35 % and 45 %, bracketing the
    paper's 38 %; we cannot tell which convention, radix or prices the paper used, so the
    gap is attributed to those, not claimed as agreement. Note the contrast the paper does
    not make: against a two-tier any-to-any fabric (astral3) rail-only saves only 2-3 % at
    HB 8, because the shuffle already removes the third tier.
    """
    base = spec or CostSpec()
    prices = prices or Prices()
    out = []
    for hb in hb_domains:
        s = dataclasses.replace(base, gpus_per_server=hb)
        for n in gpus:
            total: dict[str, float | None] = {}
            for d in DESIGNS:
                try:
                    total[d] = price(analyze(d, n, s), prices, nic_cables)["total"]
                except Infeasible:
                    total[d] = None
            ro = total["railonly"]
            entry: dict[str, Any] = {"hb_domain": hb, "gpus": n}
            for b in ("rail3", "fattree", "astral3"):  # chosen: what rail-only is priced against
                other = total[b]
                entry[f"vs_{b}"] = round(1 - ro / other, 3) if ro and other else None
            out.append(entry)
    return out


__all__ = [
    "DESIGNS", "CONVENTIONS", "Prices", "analyze", "counts_for_spec", "price", "cost_table",
    "format_table", "plot_costs", "two_tier_capacity", "three_tier_capacity", "rail_only_reduction",
    "RAIL_ONLY_PAPER_REDUCTION",
]
