"""Draw a wiring plan as a PNG, so a student can see the fabric before running it.

The picture is built from the same ``WiringPlan`` that Mininet, the controller
and the agents read, so it cannot show a different fabric from the one that is
emulated. Tiers are rows (``Node.level`` 0, the GPU NICs, at the bottom) and
every node sits in an order that makes the design visible:

* hosts grouped by server, leaves/ToRs by block then rail, per-rail switches
  by rail, spines and cores by index. Hosts, rail switches and the links that
  stay on one rail share the rail's colour, so rail alignment shows up as
  same-coloured fans (and its absence, in the fat-tree, as mixed colours);
* for ``astral3`` an extra row holds the optical shuffle boxes and every lane
  link is drawn on its own, leaf -> box input -> box output -> spine, coloured
  by lane index, so one uplink port visibly fans out to several spines and the
  box interior shows the lane transpose.

Big plans stay fast and legible by simplifying, and the caption says what was
simplified: more than ``HOST_DETAIL_MAX`` hosts become a coloured strip,
more than ``LANE_DETAIL_MAX`` lanes are drawn as fibres (leaf port -> box) and
trunks (box output -> spine) instead of one line per lane.

Rendering uses an explicit Agg canvas on a bare ``Figure`` rather than pyplot:
it needs no display, leaves the caller's matplotlib backend and pyplot state
untouched, and is safe to call from worker threads.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from PIL import Image

from vocab.plan import Link, Node, WiringPlan
from vocab.validate import replaceable

#: Above this many hosts, hosts are drawn as a coloured strip (no markers, no labels).
HOST_DETAIL_MAX = 300
#: Rows with at most this many nodes get a name label under each node.
LABEL_MAX = 64
#: Above this many shuffle lanes, draw fibres and trunks instead of single lanes.
LANE_DETAIL_MAX = 2048
#: Rail legend entries shown before eliding (the colours cycle beyond the palette anyway).
LEGEND_RAILS_MAX = 16

NEUTRAL = "#7f7f7f"
SWITCH_FACE = "#404040"
BOX_FACE = "#ece3c8"

TIER_TITLES = {
    "gpu": "GPU NICs",
    "leaf": "leaf",
    "tor": "rail ToR",
    "edge": "edge",
    "agg": "aggregation",
    "spine": "spine",
    "core": "core",
    "nvswitch": "NVLink switch",
}

DESCRIPTIONS = {
    "astral3": "flattened two-tier rail fabric; optical shuffles give every leaf every spine",
    "rail3": "three-tier rail-optimized fabric (ToR, per-rail aggregation, core)",
    "railonly": "per-rail two-tier networks; cross-rail traffic relays over NVLink",
    "fattree": "textbook k-ary fat-tree, NICs not rail-aligned",
}

#: Location keys, most significant first: gives block-then-rail leaves, server-grouped
#: hosts, rail-then-index per-rail switches and pod-then-index fat-tree switches.
_ORDER_KEYS = ("pod", "block", "server", "rail", "gpu", "edge", "slot", "index")


@dataclass
class _Row:
    """One horizontal row of the drawing: a tier (or the shuffle boxes)."""

    y: float
    label: str
    names: list[str] = field(default_factory=list)
    xs: list[float] = field(default_factory=list)
    w_pt: float = 10.0  # marker width and height in points, set once the figure size is known
    h_pt: float = 10.0

    @property
    def spacing(self) -> float:
        """Distance between neighbours, in axis units (the row spans 0..1)."""
        return 1.0 / max(len(self.xs), 1)


@dataclass
class _Layout:
    """Where everything goes; kept apart from drawing so the geometry is easy to reason about."""

    rows: list[_Row]
    pos: dict[str, tuple[float, float]]
    host_row: _Row | None
    box_row: _Row | None
    box_x: dict[int, float]
    lanes_per_port: int
    leaf_y: float
    spine_y: float


# --------------------------------------------------------------------------------------
def draw_plan(plan: WiringPlan, path: str, title: str | None = None) -> str:
    """Render ``plan`` to a PNG at ``path`` (written atomically) and return ``path``.

    Atomic because the README image and CI artifacts are read by other tools; a
    reader must never see a half-written PNG, and a failed render must not
    clobber the previous good picture.
    """
    layout = _layout(plan)
    fig = _render(plan, layout, title)
    _save_atomic(fig, path)
    return path


# --- layout ---------------------------------------------------------------------------
def plan_layout(plan: WiringPlan) -> _Layout:
    """The drawing's geometry (rows, node positions in 0..1, shuffle boxes), for other
    renderers: the live dashboard (``ops.dashboard``) places every node where this picture
    does, so the two views of one fabric read the same."""
    return _layout(plan)


def lane_links(plan: WiringPlan) -> list[Link]:
    """The lanes drawn through the shuffle boxes (see ``_lane_links``)."""
    return _lane_links(plan)


def link_rail(link: Link, nodes: dict[str, Node]) -> int | None:
    """The rail a link stays on, if any (see ``_link_rail``)."""
    return _link_rail(link, nodes)


def _order_key(node: Node) -> tuple[int | str, ...]:
    """Sort key from location numbers, so neighbours on a row are neighbours in the fabric."""
    return (*(node.loc.get(k, -1) for k in _ORDER_KEYS), node.name)


def _lane_links(plan: WiringPlan) -> list[Link]:
    """Lane links that carry their shuffle route (box, box_in, box_out): astral3's uplinks."""
    return [link for link in plan.links if link.kind == "lane" and "box" in link.info]


def _layout(plan: WiringPlan) -> _Layout:
    """Rows bottom-up by level, nodes spread evenly; a shuffle row below the lane tier."""
    by_level: dict[int, list[Node]] = defaultdict(list)
    for node in plan.nodes:
        by_level[node.level].append(node)
    level_of = {n.name: n.level for n in plan.nodes}
    lanes = _lane_links(plan)
    # the boxes get their own row just below the tier the lanes go up to (the spines)
    shuffle_below = min((level_of[x.b] for x in lanes), default=None)

    rows: list[_Row] = []
    pos: dict[str, tuple[float, float]] = {}
    host_row = box_row = None
    box_x: dict[int, float] = {}
    y = 0.0
    lanes_per_port = 1
    for level in sorted(by_level):
        if level == shuffle_below:
            box_row, box_x, lanes_per_port = _shuffle_row(plan, lanes, y)
            rows.append(box_row)
            y += 1.0
        nodes = sorted(by_level[level], key=_order_key)
        tiers: dict[str, int] = {}
        for n in nodes:
            tiers[n.tier] = tiers.get(n.tier, 0) + 1
        label = "\n".join(f"{TIER_TITLES.get(t, t)}\n×{c}" for t, c in tiers.items())
        row = _Row(y=y, label=label)
        for i, n in enumerate(nodes):
            x = (i + 0.5) / len(nodes)
            row.names.append(n.name)
            row.xs.append(x)
            pos[n.name] = (x, y)
        if level == 0:
            host_row = row
        rows.append(row)
        y += 1.0
    leaf_y = pos[lanes[0].a][1] if lanes else 0.0
    spine_y = pos[lanes[0].b][1] if lanes else 0.0
    return _Layout(rows=rows, pos=pos, host_row=host_row, box_row=box_row, box_x=box_x,
                   lanes_per_port=lanes_per_port, leaf_y=leaf_y, spine_y=spine_y)


def _shuffle_row(plan: WiringPlan, lanes: list[Link], y: float
                 ) -> tuple[_Row, dict[int, float], int]:
    """Boxes ordered by leaf group, then uplink port, so each box sits above its leaves.

    Box ``b`` serves uplink port ``b // groups`` of leaf group ``b % groups``
    (see ``testbed.shuffle``); sorting by (group, port) keeps leaf->box fibres
    short, and the long box->spine trunks are then exactly the shuffle's spread.
    """
    sh = plan.shuffle or {}
    L = int(sh.get("lanes_per_uplink") or (max(int(x.info["lane"]) for x in lanes) + 1))
    leaves = int(sh.get("leaves") or len({x.a for x in lanes}))
    groups = max(1, -(-leaves // L))
    boxes = sorted({int(x.info["box"]) for x in lanes}, key=lambda b: (b % groups, b // groups))
    size = sh.get("box_size", f"{L}x{L}")
    row = _Row(y=y, label=f"optical shuffle\n×{len(boxes)} boxes ({size})")
    box_x: dict[int, float] = {}
    for i, b in enumerate(boxes):
        x = (i + 0.5) / len(boxes)
        row.names.append(f"box{b}")
        row.xs.append(x)
        box_x[b] = x
    return row, box_x, L


# --- colours --------------------------------------------------------------------------
def _palette(n: int, name: str) -> list[tuple[float, float, float, float]]:
    cmap = colormaps[name]
    size = getattr(cmap, "N", 256)
    return [cmap(i % size) for i in range(max(n, 1))]


def _rail_colors(n: int) -> list[tuple[float, float, float, float]]:
    return _palette(n, "tab10" if n <= 10 else "tab20")


def _lane_colors(n: int) -> list[tuple[float, float, float, float]]:
    """Lanes get a dark, ordered palette so they read differently from the rail colours."""
    cmap = colormaps["plasma"]
    if n == 1:
        return [cmap(0.0)]
    return [cmap(0.85 * i / (n - 1)) for i in range(n)]


def _rail_of(node: Node) -> int | None:
    """The rail a node belongs to: its ``rail``, or for hosts the GPU/NIC index."""
    if "rail" in node.loc:
        return int(node.loc["rail"])
    if node.kind == "host" and "gpu" in node.loc:
        return int(node.loc["gpu"])
    return None


def _link_rail(link: Link, nodes: dict[str, Node]) -> int | None:
    """Colour a link by rail only when it stays on one rail (NIC cables always do)."""
    ra, rb = _rail_of(nodes[link.a]), _rail_of(nodes[link.b])
    if link.kind == "nic":
        return ra if ra is not None else rb
    if link.kind == "nvlink":
        return None
    return ra if ra is not None and ra == rb else None


# --- rendering ------------------------------------------------------------------------
def _render(plan: WiringPlan, lay: _Layout, title: str | None) -> Figure:
    """Build the figure: size from the layout, then links, nodes, legend and caption."""
    nodes = {n.name: n for n in plan.nodes}
    hosts = plan.hosts
    many_hosts = len(hosts) > HOST_DETAIL_MAX
    rails = sorted({r for n in plan.nodes if (r := _rail_of(n)) is not None})
    n_rails = (max(rails) + 1) if rails else 0
    rail_col = _rail_colors(n_rails)
    rail_word = "rail" if any("rail" in h.loc for h in hosts) else "NIC"

    # Width follows the widest row (so labels fit) up to a cap; rows get taller as the
    # figure widens so the picture never turns into a thin ribbon.
    widest = max((len(r.xs) for r in lay.rows), default=1)
    if many_hosts:
        widest = max(widest, 80)
    n_rows = len(lay.rows)
    width = min(max(3.0 + 0.3 * widest, 11.0), 24.0)
    row_h = max(1.75, 0.5 * width / n_rows)
    caption_lines = _caption(plan, lay, many_hosts)
    rail_handles = _rail_handles(rails, rail_col, rail_word)
    top_in = 0.6 + 0.3 * (bool(rail_handles) + bool(lay.box_row))
    caption_in = 0.2 + 0.17 * len(caption_lines)
    y_lo = -0.2 if many_hosts or (lay.host_row and len(lay.host_row.xs) > LABEL_MAX) else -0.33
    y_hi = n_rows - 1 + 0.3
    plot_in = row_h * (y_hi - y_lo)
    height = top_in + caption_in + plot_in
    dpi = 110 if widest <= LABEL_MAX else 100
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    left_in, right_in = 1.5, 0.3
    ax = fig.add_axes((left_in / width, (caption_in + 0.05) / height,
                       1 - (left_in + right_in) / width, plot_in / height))
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(y_lo, y_hi)
    ax.set_axis_off()
    axes_w_pt = (width - left_in - right_in) * 72.0
    for row in lay.rows:
        _size_markers(row, nodes, axes_w_pt)

    # links, bottom layer
    _draw_plain_links(ax, plan, lay, nodes, rail_col)
    lane_handles = _draw_shuffle(ax, plan, lay, axes_w_pt, row_h) if lay.box_row else []

    # nodes
    for row in lay.rows:
        if row is lay.box_row or not row.names:
            continue
        if row is lay.host_row and many_hosts:
            _host_strip(ax, row, nodes, rail_col)
        else:
            _draw_row_nodes(ax, row, nodes, rail_col, axes_w_pt, row_h,
                            above=row is lay.rows[-1])
        _row_title(ax, row, "#222222")
    if lay.box_row:
        _row_title(ax, lay.box_row, "#5a4a1a")

    # title, legend, caption
    head = title or f"{plan.topology}: {DESCRIPTIONS.get(plan.topology, 'wiring plan')}"
    fig.text(0.5, 1 - 0.3 / height, head, ha="center", va="center", fontsize=14,
             fontweight="bold")
    y_leg = 0.75
    for handles in (rail_handles, lane_handles):
        if handles:
            fig.legend(handles=handles, loc="center", bbox_to_anchor=(0.5, 1 - y_leg / height),
                       ncol=len(handles), fontsize=9, frameon=False, handlelength=1.6,
                       handletextpad=0.5, columnspacing=1.1, borderpad=0.1)
            y_leg += 0.3
    fig.text(0.012, 0.1 / height, "\n".join(caption_lines), ha="left", va="bottom",
             fontsize=9, family="monospace", color="#222222", linespacing=1.35)
    return fig


def _row_title(ax: Axes, row: _Row, color: str) -> None:
    """Tier name in the left margin, a fixed distance from the plot whatever its width."""
    ax.annotate(row.label, xy=(0.0, row.y), xycoords=("axes fraction", "data"),
                xytext=(-10, 0), textcoords="offset points", ha="right", va="center",
                fontsize=10, fontweight="bold", color=color)


def _draw_plain_links(ax: Axes, plan: WiringPlan, lay: _Layout, nodes: dict[str, Node],
                      rail_col: Sequence[tuple[float, float, float, float]]) -> None:
    """Every non-lane link as one straight segment; same-rail links in the rail's colour.

    Width and opacity are set per link kind from that kind's count, so a few hundred
    uplinks stay visible next to thousands of NIC cables.
    """
    grey = (0.5, 0.5, 0.5, 1.0)
    by_kind: dict[str, tuple[list[tuple[tuple[float, float], tuple[float, float]]],
                             list[tuple[float, float, float, float]]]] = {}
    for link in plan.links:
        if link.kind == "lane" and lay.box_row is not None:
            continue  # drawn through the shuffle boxes
        segs, cols = by_kind.setdefault(link.kind, ([], []))
        r = _link_rail(link, nodes)
        segs.append((lay.pos[link.a], lay.pos[link.b]))
        cols.append(rail_col[r % len(rail_col)] if r is not None else grey)
    for segs, cols in by_kind.values():
        n = len(segs)
        lw = float(np.clip(20.0 / math.sqrt(n), 0.25, 1.6))
        alpha = float(np.clip(12.0 / math.sqrt(n), 0.25, 0.85))
        ax.add_collection(LineCollection(segs, colors=cols, linewidths=lw, alpha=alpha,
                                         zorder=1))


def _draw_shuffle(ax: Axes, plan: WiringPlan, lay: _Layout, axes_w_pt: float, row_h: float
                  ) -> list[Line2D]:
    """Lanes leaf -> box -> spine, and the boxes; returns legend handles for the lanes.

    Each lane gets its own start point on the leaf, its own slot on the box's
    input and output edges and its own end point on the spine, so separate
    lanes stay separate lines and the box interior shows the transpose
    (input ``i`` lane ``o`` -> output ``o``).
    """
    assert lay.box_row is not None
    lanes = _lane_links(plan)
    L = lay.lanes_per_port
    lane_col = _lane_colors(L)
    row = lay.box_row
    bw = 0.78 * row.spacing
    bh = 0.6 / row_h  # about 0.6 inch tall whatever the row height
    yb = row.y
    # lanes leave from along the leaf's top edge and land along the spine's bottom edge
    leaf_row, spine_row = _row_of(lay, lay.leaf_y), _row_of(lay, lay.spine_y)
    leaf_w = 0.85 * leaf_row.w_pt / axes_w_pt
    spine_w = 0.9 * spine_row.w_pt / axes_w_pt
    leaf_top = leaf_row.h_pt / 2 / 72.0 / row_h
    spine_bottom = spine_row.h_pt / 2 / 72.0 / row_h

    per_leaf = max(int((plan.shuffle or {}).get("uplinks_per_leaf", 1)), 1) * L
    spine_ports = max(int(x.b_port) for x in lanes)
    detailed = len(lanes) <= LANE_DETAIL_MAX

    def slot(box: int, port: int, sub: int) -> float:
        """x of sub-slot ``sub`` inside port ``port`` of a box edge."""
        x0 = lay.box_x[box] - bw / 2
        return x0 + (port + 0.5) * bw / L + (sub - (L - 1) / 2) * (0.75 * bw / L) / max(L, 1)

    paths: list[list[tuple[float, float]]] = []
    cols: list[tuple[float, float, float, float]] = []
    if detailed:
        for x in lanes:
            box, bi, bo = int(x.info["box"]), int(x.info["box_in"]), int(x.info["box_out"])
            lane = int(x.info["lane"])
            k = int(x.info.get("uplink", 0)) * L + lane
            lx, ly = lay.pos[x.a]
            sx, sy = lay.pos[x.b]
            p0 = (lx + ((k + 0.5) / per_leaf - 0.5) * leaf_w, ly + leaf_top)
            p1 = (slot(box, bi, lane), yb - bh / 2)
            p2 = (slot(box, bo, bi), yb + bh / 2)
            p3 = (sx + ((x.b_port - 0.5) / spine_ports - 0.5) * spine_w, sy - spine_bottom)
            paths.append([p0, p1, p2, p3])
            cols.append(lane_col[bo % L])
        n = len(paths)
        lw = float(np.clip(25.0 / math.sqrt(n), 0.3, 1.6))
        alpha = 0.9 if n <= 256 else 0.6
    else:
        fibres: set[tuple[str, int, int, int]] = set()
        trunks: set[tuple[int, int, str]] = set()
        for x in lanes:
            box, bi, bo = int(x.info["box"]), int(x.info["box_in"]), int(x.info["box_out"])
            fibres.add((x.a, int(x.info.get("uplink", 0)), box, bi))
            trunks.add((box, bo, x.b))
        for leaf, _port, box, bi in sorted(fibres):
            paths.append([lay.pos[leaf], (slot(box, bi, (L - 1) // 2), yb - bh / 2)])
            cols.append((0.45, 0.45, 0.45, 1.0))
        for box, bo, spine in sorted(trunks):
            paths.append([(slot(box, bo, (L - 1) // 2), yb + bh / 2), lay.pos[spine]])
            cols.append(lane_col[bo % L])
        lw, alpha = 0.4, 0.45
    ax.add_collection(LineCollection(paths, colors=cols, linewidths=lw, alpha=alpha,
                                     zorder=2))

    rects = [Rectangle((bx - bw / 2, yb - bh / 2), bw, bh) for bx in row.xs]
    face = BOX_FACE if detailed else "#d9d2bf"
    ax.add_collection(PatchCollection(rects, facecolor=face, edgecolor="#5a4a1a",
                                      linewidth=0.8, alpha=0.55 if detailed else 0.95,
                                      zorder=1.5 if detailed else 3))
    if (1 - 0.78) * row.spacing * axes_w_pt >= 12:  # room for a vertical label in the gap
        for name, bx in zip(row.names, row.xs, strict=True):
            ax.text(bx + bw / 2 + 0.002, yb, name, ha="left", va="center", fontsize=7,
                    color="#5a4a1a", zorder=4, rotation=90)
    what = "lanes of a leaf uplink port:" if detailed else "trunks (box output = lane):"
    handles = [Line2D([], [], ls="", label=what)]
    handles += [Line2D([], [], color=lane_col[i], lw=2.5, label=f"lane {i}") for i in range(L)]
    return handles


def _row_of(lay: _Layout, y: float) -> _Row:
    return next(r for r in lay.rows if r.y == y)


def _label_size(n: int) -> float:
    return 8.0 if n <= 16 else (7.0 if n <= 40 else 6.0)


def _draw_row_nodes(ax: Axes, row: _Row, nodes: dict[str, Node],
                    rail_col: Sequence[tuple[float, float, float, float]],
                    axes_w_pt: float, row_h: float, above: bool = False) -> None:
    """Markers for one tier (hosts round, switches as wide boxes) and, when few, names."""
    sp_pt = row.spacing * axes_w_pt
    cols = []
    for name in row.names:
        r = _rail_of(nodes[name])
        cols.append(rail_col[r % len(rail_col)] if r is not None else SWITCH_FACE)
    edge_lw = 0.6 if min(row.w_pt, row.h_pt) > 5 else 0.0
    if nodes[row.names[0]].kind == "host":
        ax.scatter(row.xs, [row.y] * len(row.xs), s=row.h_pt ** 2, c=cols, marker="o",
                   edgecolors="black", linewidths=edge_lw, zorder=5)
    else:
        w, h = row.w_pt / axes_w_pt, row.h_pt / 72.0 / row_h
        rects = [Rectangle((x - w / 2, row.y - h / 2), w, h) for x in row.xs]
        ax.add_collection(PatchCollection(rects, facecolor=cols, edgecolor="black",
                                          linewidth=edge_lw, zorder=5))
    if len(row.names) > LABEL_MAX:
        return
    fs = _label_size(len(row.names))
    longest = max(len(n) for n in row.names)
    rotate = longest * fs * 0.7 > 0.9 * sp_pt
    off = (row.h_pt / 2 + 2.5) / 72.0 / row_h  # half a marker plus a gap, in row units
    for name, x in zip(row.names, row.xs, strict=True):
        ax.text(x, row.y + off if above else row.y - off, name, ha="center",
                va="bottom" if above else "top", fontsize=fs,
                rotation=90 if rotate else 0, zorder=6, color="#111111",
                bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none",
                      "alpha": 0.7})


def _size_markers(row: _Row, nodes: dict[str, Node], axes_w_pt: float) -> None:
    """Marker size from the spacing: as big as fits, capped so small plans don't look toy.

    Switches are wider than tall (like the 1U boxes they are), which also gives lanes
    distinct landing points along their edge.
    """
    sp_pt = row.spacing * axes_w_pt
    first = nodes.get(row.names[0]) if row.names else None  # None for the shuffle-box row
    is_host = first is not None and first.kind == "host"
    row.h_pt = float(np.clip(0.7 * sp_pt, 2.0, 16.0 if is_host else 13.0))
    row.w_pt = row.h_pt if is_host else float(np.clip(0.75 * sp_pt, 2.0, 72.0))


def _host_strip(ax: Axes, row: _Row, nodes: dict[str, Node],
                rail_col: Sequence[tuple[float, float, float, float]]) -> None:
    """Many hosts as one strip of colour (one column per GPU NIC): fast at any size."""
    rgba = np.array([rail_col[r % len(rail_col)] if (r := _rail_of(nodes[n])) is not None
                     else (0.5, 0.5, 0.5, 1.0) for n in row.names])
    ax.imshow(rgba[np.newaxis, :, :], extent=(0.0, 1.0, row.y - 0.09, row.y + 0.09),
              aspect="auto", interpolation="nearest", zorder=5)


def _rail_handles(rails: list[int], rail_col: Sequence[tuple[float, float, float, float]],
                  word: str) -> list[Line2D]:
    shown = rails[:LEGEND_RAILS_MAX]
    if not shown:
        return []
    what = ("rails (hosts, rail switches, same-rail links):" if word == "rail"
            else f"{word} index of each GPU (not rail-aligned):")
    handles = [Line2D([], [], ls="", label=what)]
    handles += [Line2D([], [], marker="o", ls="", color=rail_col[r % len(rail_col)],
                      markeredgecolor="black", markersize=8, label=f"{word} {r}")
               for r in shown]
    if len(rails) > len(shown):
        handles.append(Line2D([], [], ls="", label=f"... {word} {rails[-1]}"))
    return handles


def _caption(plan: WiringPlan, lay: _Layout, many_hosts: bool) -> list[str]:
    """Counts and speeds, so the picture alone says how big the fabric is and how fast."""
    c = plan.counts
    gpus = c.get("gpus", len(plan.hosts))
    servers = c.get("servers")
    tiers = c.get("switches_per_tier") or {}
    if not tiers:
        for n in plan.switches:
            tiers[n.tier] = tiers.get(n.tier, 0) + 1
    kinds = c.get("links_per_kind") or {}
    if not kinds:
        for link in plan.links:
            kinds[link.kind] = kinds.get(link.kind, 0) + 1
    first = f"{gpus} GPUs"
    if servers:
        first += f" ({servers} servers × {gpus // max(servers, 1)})"
    if c.get("blocks"):
        first += f" in {c['blocks']} blocks"
    if c.get("k"):
        used, pods = c.get("pods_with_gpus", "?"), c.get("pods", "?")
        first += f" · k={c['k']}, GPUs in {used} of {pods} pods"
    first += " · switches: " + ", ".join(f"{t} {v}" for t, v in tiers.items())
    first += f" · links {len(plan.links)} (" + ", ".join(f"{k} {v}" for k, v in kinds.items())
    first += ")"
    lines = [first]
    lanes = c.get("lanes", kinds.get("lane", 0))
    boxes = c.get("shuffle_boxes", 0)
    if lanes or boxes:
        sh = plan.shuffle or {}
        line = f"optical shuffle: {lanes} lanes through {boxes} shuffle boxes"
        if sh.get("box_size"):
            line += f" ({sh['box_size']})"
        if "spines_reached_per_leaf" in c:
            line += (f"; each leaf reaches {c['spines_reached_per_leaf']} spines "
                     f"({c.get('spines_reached_without_shuffle', '?')} if cabled without shuffle)")
        lines.append(line)
        lines.append("  a box is a passive fibre transpose: input i = one leaf uplink port, "
                     "output o = lane o of every input, cabled to one spine")
    else:
        lines.append("optical shuffle: none (uplink ports cabled whole)")
    rates = sorted({(link.kind, link.gbps, link.mbps) for link in plan.links})
    lines.append("link speeds, real -> emulated: " + " · ".join(
        f"{k} {g:g} Gb/s -> {m:g} Mb/s" for k, g, m in rates))
    lines.append(f"scale {plan.scale:g}: emulated Mb/s = real Gb/s × {1000 * plan.scale:g}")
    simplified = []
    if many_hosts:
        simplified.append(f"hosts drawn as a strip ({len(plan.hosts)} > {HOST_DETAIL_MAX})")
    if lay.box_row is not None and lanes > LANE_DETAIL_MAX:
        simplified.append(f"lanes drawn as fibres and trunks ({lanes} > {LANE_DETAIL_MAX})")
    if simplified:
        lines.append("simplified: " + "; ".join(simplified))
    return lines


# --- output ---------------------------------------------------------------------------
def _save_atomic(fig: Figure, path: str) -> None:
    """Render to a temp file next to ``path``, then rename: readers never see a partial PNG.

    The picture is flat colours and thin lines, so a 256-colour palette PNG looks the
    same and is several times smaller than RGBA (it matters for the README copy).
    """
    replaceable(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white")
    buf.seek(0)
    with Image.open(buf) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE,
                                            dither=Image.Dither.NONE)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            small.save(f, format="PNG", optimize=True)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a picture is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
