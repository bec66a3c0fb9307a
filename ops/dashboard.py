"""The live view's data: where the page draws each node and link, and what they show now.

Pure: the numbers come from the telemetry collector's polls (``ops.shell.collector``, the
same poll ``astral-lab ops watch`` runs), the alerts from the detector engine
(``ops.detectors.Engine``); this module only turns consecutive polls into one JSON state
that the page (``ops/static/``) and ``/metrics`` (``ops.metrics``) both read, so the
browser and a Prometheus scrape can never disagree about a link.

* ``layout(plan)``: the wiring plan as SVG geometry. Node positions come from the PNG
  drawing's own layout (``testbed.draw.plan_layout``): same rows, same order, shuffle
  boxes in their row, every lane routed leaf -> box input -> box output -> spine.
* ``DashboardState``: fed one poll at a time (``update``); keeps each link's utilisation
  per direction (the poll's rate over the link's emulated rate), state (kernel operstate,
  and the controller's view), queue backlog, and running byte and drop totals (rates
  integrated over the poll interval, drops summed), per-spine forwarded bytes, select-group
  bucket bytes, and the controller's health; ``snapshot()`` is the JSON.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

from ops.telemetry import CONTROLLER
from testbed.draw import TIER_TITLES, lane_links, link_rail, plan_layout
from vocab.plan import Link, WiringPlan, link_components

#: SVG user units of the drawing (the page scales it to the window).
WIDTH = 1200.0
ROW_H = 120.0
MARGIN_X = 60.0
MARGIN_Y = 50.0
#: Alerts cleared less than this many seconds ago are still listed (greyed) on the page.
RECENT_ALERT_S = 60.0
#: Tiers whose switches count as "spines" for the per-spine bytes (the top of each design).
SPINE_TIERS = ("spine", "core")


def _switch_box(tier: str, n_in_row: int) -> tuple[float, float]:
    """Width and height of a node's rectangle, narrow enough for its row."""
    room = (WIDTH - 2 * MARGIN_X) / max(n_in_row, 1)
    if tier == "gpu":
        return min(34.0, 0.8 * room), 18.0
    return min(70.0, 0.85 * room), 26.0


def layout(plan: WiringPlan) -> dict[str, Any]:
    """The plan as drawing geometry: ``{"width", "height", "rows", "nodes", "boxes", "links"}``.

    Every link carries its telemetry component name (``a~b#lane``, the page's
    ``data-link``), both ends, kind, emulated rate, rail (when it stays on one) and lane,
    and ``points``: a straight segment, or for shuffle lanes the four-point route through
    the box. Hosts are row 0 at the bottom, as in the PNG.
    """
    lay = plan_layout(plan)
    nrows = len(lay.rows)
    height = 2 * MARGIN_Y + (nrows - 1) * ROW_H

    def at(x: float, y: float) -> tuple[float, float]:
        return (round(MARGIN_X + x * (WIDTH - 2 * MARGIN_X), 1),
                round(MARGIN_Y + (nrows - 1 - y) * ROW_H, 1))

    nodes_by = {n.name: n for n in plan.nodes}
    row_len = {name: len(r.names) for r in lay.rows for name in r.names}
    nodes = []
    for n in plan.nodes:
        x, y = at(*lay.pos[n.name])
        w, h = _switch_box(n.tier, row_len.get(n.name, 1))
        nodes.append({"name": n.name, "tier": n.tier, "kind": n.kind, "x": x, "y": y,
                      "w": round(w, 1), "h": h, "rail": _rail(n.loc, n.kind)})
    rows = [{"y": at(0, r.y)[1], "label": r.label.replace("\n", " ")} for r in lay.rows]
    boxes = []
    box_w = box_h = 0.0
    if lay.box_row is not None:
        box_w = 0.78 * lay.box_row.spacing * (WIDTH - 2 * MARGIN_X)
        box_h = 40.0
        for name, bx in zip(lay.box_row.names, lay.box_row.xs, strict=True):
            x, y = at(bx, lay.box_row.y)
            boxes.append({"name": name, "x": x, "y": y, "w": round(box_w, 1), "h": box_h})
    lanes = {id(ln) for ln in lane_links(plan)} if lay.box_row is not None else set()
    pos = {n["name"]: n for n in nodes}
    links = []
    for comp, ln in link_components(plan).items():
        if id(ln) in lanes:
            points = _lane_points(plan, lay, ln, pos, at, box_w, box_h)
        else:
            a, b = pos[ln.a], pos[ln.b]
            points = [[a["x"], a["y"] - a["h"] / 2], [b["x"], b["y"] + b["h"] / 2]]
        links.append({"id": comp, "a": ln.a, "b": ln.b, "kind": ln.kind, "mbps": ln.mbps,
                      "gbps": ln.gbps, "rail": link_rail(ln, nodes_by),
                      "lane": ln.info.get("lane"), "points": points})
    return {"topology": plan.topology, "scale": plan.scale, "width": WIDTH,
            "height": round(height, 1), "rows": rows, "nodes": nodes, "boxes": boxes,
            "links": links, "tiers": TIER_TITLES}


def _rail(loc: dict[str, int], kind: str) -> int | None:
    if "rail" in loc:
        return int(loc["rail"])
    if kind == "host" and "gpu" in loc:
        return int(loc["gpu"])
    return None


def _lane_points(plan: WiringPlan, lay: Any, ln: Link, pos: dict[str, dict[str, Any]],
                 at: Any, box_w: float, box_h: float) -> list[list[float]]:
    """Leaf top -> box input slot -> box output slot -> spine bottom (the PNG's route)."""
    L = max(lay.lanes_per_port, 1)
    box, bi, bo = int(ln.info["box"]), int(ln.info["box_in"]), int(ln.info["box_out"])
    lane = int(ln.info["lane"])
    per_leaf = max(int((plan.shuffle or {}).get("uplinks_per_leaf", 1)), 1) * L
    k = int(ln.info.get("uplink", 0)) * L + lane
    bx, by = at(lay.box_x[box], lay.box_row.y)

    def slot(port: int, sub: int) -> float:
        x0 = bx - box_w / 2
        return round(x0 + (port + 0.5) * box_w / L + (sub - (L - 1) / 2) * (0.75 * box_w / L) / L,
                     1)

    leaf, spine = pos[ln.a], pos[ln.b]
    spine_ports = max(int(x.b_port) for x in lane_links(plan))
    p0 = [round(leaf["x"] + ((k + 0.5) / per_leaf - 0.5) * 0.85 * leaf["w"], 1),
          leaf["y"] - leaf["h"] / 2]
    p1 = [slot(bi, lane), by + box_h / 2]
    p2 = [slot(bo, bi), by - box_h / 2]
    p3 = [round(spine["x"] + ((ln.b_port - 0.5) / spine_ports - 0.5) * 0.9 * spine["w"], 1),
          spine["y"] + spine["h"] / 2]
    return [p0, p1, p2, p3]


def _num(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


class DashboardState:
    """Consecutive telemetry polls in, one JSON state out (see the module docstring).

    ``update(t, values)`` takes what ``Collector.poll_once`` returns (``{(component,
    metric): value}``: rates in Mb/s per direction, ``up``, backlogs, per-poll drop
    counts, bucket rates, controller health). Totals integrate a rate over the time since
    the previous poll, which is exactly the interval the collector measured it over.
    """

    def __init__(self, plan: WiringPlan) -> None:
        self.plan = plan
        self.links = link_components(plan)
        self.spines = [s.name for s in plan.switches if s.tier in SPINE_TIERS]
        hosts = {h.name for h in plan.hosts}
        #: spine -> [(link component, direction that leaves the spine)]
        self._spine_out: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for comp, ln in self.links.items():
            if ln.b in self.spines:
                self._spine_out[ln.b].append((comp, "ba"))
            if ln.a in self.spines and ln.a not in hosts:
                self._spine_out[ln.a].append((comp, "ab"))
        self.t: float | None = None
        self.polls = 0
        self.values: dict[tuple[str, str], float] = {}
        self.bytes: dict[tuple[str, str], float] = defaultdict(float)  # (link, dir) -> bytes
        self.qdrops: dict[tuple[str, str], float] = defaultdict(float)
        self.port_drops: dict[str, float] = defaultdict(float)  # switch -> drops + errors
        self.group_bytes: dict[tuple[str, int], float] = defaultdict(float)  # (switch, port)
        self.alerts: list[dict[str, Any]] = []
        self.lb: dict[str, Any] = {}
        self.progress: dict[str, Any] | None = None

    def update(self, t: float, values: dict[tuple[str, str], float]) -> None:
        """Fold one poll in (polls must come in time order; an older one is ignored)."""
        if self.t is not None and t <= self.t:
            return
        dt = 0.0 if self.t is None else t - self.t
        for (comp, metric), v in values.items():
            v = _num(v)
            if v is None:
                continue
            if metric.startswith("mbps_") and comp in self.links:
                self.bytes[(comp, metric[5:])] += max(0.0, v) * 1e6 / 8 * dt
            elif metric.startswith("qdrops_") and comp in self.links:
                self.qdrops[(comp, metric[7:])] += max(0.0, v)
            elif metric == "port_drops":
                self.port_drops[comp] += max(0.0, v)
            elif metric.startswith("bucket") and metric.endswith("_mbps"):
                port = int(metric[len("bucket"):-len("_mbps")])
                self.group_bytes[(comp, port)] += max(0.0, v) * 1e6 / 8 * dt
        self.values = dict(values)
        self.t = t
        self.polls += 1

    def set_alerts(self, alerts: list[dict[str, Any]], now: float | None = None) -> None:
        """The detector engine's alerts (``Alert.to_dict()``): active ones and those cleared
        in the last ``RECENT_ALERT_S`` seconds, newest first."""
        now = self.t if now is None else now
        keep = [a for a in alerts if a.get("cleared") is None or now is None
                or a["cleared"] >= now - RECENT_ALERT_S]
        self.alerts = sorted(keep, key=lambda a: (a.get("cleared") is not None,
                                                  -(a.get("first_seen") or 0)))

    def _v(self, comp: str, metric: str) -> float | None:
        return _num(self.values.get((comp, metric)))

    def link_state(self, comp: str) -> str:
        """``up``/``down`` from the kernel's operstate; the controller's view when the
        kernel said nothing; ``unknown`` before the first poll that saw the link."""
        up = self._v(comp, "up")
        if up is None:
            up = self._v(comp, "ctl_up")
        if up is None:
            return "unknown"
        return "up" if up > 0 else "down"

    def link(self, comp: str) -> dict[str, Any]:
        ln = self.links[comp]
        row: dict[str, Any] = {"state": self.link_state(comp), "mbps_capacity": ln.mbps}
        utils = []
        for d in ("ab", "ba"):
            mbps = self._v(comp, f"mbps_{d}")
            util = None if mbps is None or ln.mbps <= 0 else max(0.0, mbps) / ln.mbps
            row[f"mbps_{d}"] = None if mbps is None else round(mbps, 4)
            row[f"util_{d}"] = None if util is None else round(util, 4)
            row[f"backlog_{d}"] = self._v(comp, f"backlog_{d}")
            row[f"bytes_{d}"] = round(self.bytes.get((comp, d), 0.0))
            row[f"qdrops_{d}"] = round(self.qdrops.get((comp, d), 0.0))
            if util is not None:
                utils.append(util)
        row["util"] = round(max(utils), 4) if utils else None
        ctl = self._v(comp, "ctl_up")
        row["ctl_state"] = None if ctl is None else ("up" if ctl > 0 else "down")
        return row

    def spine(self, name: str) -> dict[str, Any]:
        """Bytes a spine forwarded (sent out of any of its ports) and its current rate."""
        total = sum(self.bytes.get(k, 0.0) for k in self._spine_out[name])
        rate = sum(self._v(c, f"mbps_{d}") or 0.0 for c, d in self._spine_out[name])
        return {"bytes": round(total), "mbps": round(rate, 4),
                "links": len(self._spine_out[name])}

    def controller(self) -> dict[str, Any]:
        up = self._v(CONTROLLER, "up")
        conv = self._v(CONTROLLER, "converged")
        down = self._v(CONTROLLER, "down_ports")
        return {"up": None if up is None else up > 0,
                "converged": None if conv is None else conv > 0,
                "down_ports": None if down is None else int(down)}

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-able data (``/api/state``; ``ops.metrics`` reads it)."""
        groups: dict[str, dict[str, int]] = defaultdict(dict)
        for (sw, port), b in sorted(self.group_bytes.items()):
            groups[sw][str(port)] = round(b)
        return {
            "t": self.t, "polls": self.polls, "topology": self.plan.topology,
            "links": {c: self.link(c) for c in self.links},
            "spines": {s: self.spine(s) for s in self.spines},
            "switches": {s.name: {"port_drops": round(self.port_drops.get(s.name, 0.0))}
                         for s in self.plan.switches},
            "groups": dict(groups),
            "controller": self.controller(),
            "lb": dict(self.lb),
            "alerts": list(self.alerts),
            "progress": self.progress,
        }


def read_progress(text: str | None) -> dict[str, Any] | None:
    """A scenario run's ``progress.json`` (``scenarios.base.Run``), or None when absent or
    half-written (the runner replaces it atomically, so that is only ever a stale read)."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
