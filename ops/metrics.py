"""Prometheus text exposition (format 0.0.4) of the live view's state, for ``GET /metrics``.

Pure: it renders ``ops.dashboard.DashboardState.snapshot()``, so a scrape shows exactly
what the page shows. Written by hand rather than with ``prometheus_client``: the format is
a few lines of text per family, and the lab then needs no extra package on an offline
machine. Every family has HELP and TYPE lines; counters end in ``_total`` and only grow
(they are the state's running totals); label values are escaped as the format says.

Names (``astral_`` prefix; labels in brackets):

* ``astral_link_utilisation_ratio`` [link, a, b, kind, direction]: rate over emulated rate
* ``astral_link_up`` [link, a, b, kind]: 1 up, 0 down (kernel operstate)
* ``astral_link_controller_up`` [link, ...]: the controller's view of the same link
* ``astral_link_capacity_bytes_per_second`` [link, ...]: the link's emulated rate
* ``astral_link_throughput_bytes_per_second`` [link, ..., direction]
* ``astral_link_transmit_bytes_total`` [link, ..., direction]
* ``astral_link_queue_backlog_bytes`` [link, ..., direction]: the sending port's queue
* ``astral_link_queue_drops_total`` [link, ..., direction]: packets its queue dropped
* ``astral_switch_port_drops_total`` [switch]: OpenFlow port drop and error counters
* ``astral_group_bucket_bytes_total`` [switch, port]: select-group bucket bytes
* ``astral_spine_forwarded_bytes_total`` [spine]
* ``astral_alerts`` [severity]: active alerts; ``astral_alert_active`` [detector,
  component, severity]: one series per active alert
* ``astral_fault_injected`` [kind, component]: 1 for each fault an evaluation run
  (``ops-eval``) has injected right now, to set beside the alerts it causes
* ``astral_controller_up``, ``astral_controller_converged``, ``astral_controller_down_ports``
* ``astral_lb_mode`` [mode]: 1 for the load-balancing mode in force
* ``astral_telemetry_polls_total``, ``astral_telemetry_last_poll_timestamp_seconds``
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ops.detectors import ALERT_SEVERITIES

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

DIRECTIONS = {"ab": "up", "ba": "down"}  # a is the lower-tier end: ab goes up the tree


def escape(value: str) -> str:
    """A label value as the text format wants it (backslash, double quote, newline)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


class _Family:
    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name, self.kind, self.help = name, kind, help_text
        self.samples: list[tuple[dict[str, str], float]] = []

    def add(self, value: float | None, **labels: Any) -> None:
        if value is None:
            return
        self.samples.append(({k: str(v) for k, v in labels.items()}, float(value)))

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} {self.kind}"
        for labels, value in self.samples:
            inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
            yield f"{self.name}{{{inner}}} {_fmt(value)}" if inner else \
                f"{self.name} {_fmt(value)}"


def exposition(state: dict[str, Any], layout: dict[str, Any] | None = None) -> str:
    """The text a Prometheus server scrapes, from a ``DashboardState.snapshot()``.

    ``layout`` (``ops.dashboard.layout``) adds each link's ends and kind as labels; without
    it a link is labelled by its component name only.
    """
    ends = {ln["id"]: ln for ln in (layout or {}).get("links", [])}
    fam: dict[str, _Family] = {}

    def f(name: str, kind: str, help_text: str) -> _Family:
        fam[name] = _Family(f"astral_{name}", kind, help_text)
        return fam[name]

    util = f("link_utilisation_ratio", "gauge",
             "Link rate over its emulated rate, per direction (up = towards the spines).")
    up = f("link_up", "gauge", "1 when both ends of the link are up (kernel operstate), else 0.")
    ctl = f("link_controller_up", "gauge", "1 when the controller sees the link up, else 0.")
    cap = f("link_capacity_bytes_per_second", "gauge",
            "Emulated rate of the link, in bytes per second.")
    thr = f("link_throughput_bytes_per_second", "gauge",
            "Bytes per second the link carried over the last poll, per direction.")
    tx = f("link_transmit_bytes_total", "counter",
           "Bytes the link carried since the dashboard started, per direction.")
    backlog = f("link_queue_backlog_bytes", "gauge",
                "Bytes queued at the link's sending port, per direction.")
    qdrops = f("link_queue_drops_total", "counter",
               "Packets the link's sending queue dropped since the dashboard started.")
    for comp, row in sorted(state.get("links", {}).items()):
        ln = ends.get(comp, {})
        base = {"link": comp}
        if ln:
            base.update(a=ln["a"], b=ln["b"], kind=ln["kind"])
        st = row.get("state")
        up.add(None if st in (None, "unknown") else float(st == "up"), **base)
        cst = row.get("ctl_state")
        ctl.add(None if cst is None else float(cst == "up"), **base)
        cap.add(row.get("mbps_capacity", 0) * 1e6 / 8, **base)
        for d, word in DIRECTIONS.items():
            labels = {**base, "direction": word}
            util.add(row.get(f"util_{d}"), **labels)
            mbps = row.get(f"mbps_{d}")
            thr.add(None if mbps is None else mbps * 1e6 / 8, **labels)
            tx.add(row.get(f"bytes_{d}", 0), **labels)
            backlog.add(row.get(f"backlog_{d}"), **labels)
            qdrops.add(row.get(f"qdrops_{d}", 0), **labels)

    pdrops = f("switch_port_drops_total", "counter",
               "Drop and error counts of the switch's OpenFlow ports since the dashboard started.")
    for sw, row in sorted(state.get("switches", {}).items()):
        pdrops.add(row.get("port_drops", 0), switch=sw)
    groups = f("group_bucket_bytes_total", "counter",
               "Bytes the switch's select-group buckets sent out of each port (ECMP spread).")
    for sw, ports in sorted(state.get("groups", {}).items()):
        for port, b in sorted(ports.items(), key=lambda kv: int(kv[0])):
            groups.add(b, switch=sw, port=port)
    spine = f("spine_forwarded_bytes_total", "counter",
              "Bytes the spine sent out of its ports since the dashboard started.")
    for name, row in sorted(state.get("spines", {}).items()):
        spine.add(row.get("bytes", 0), spine=name)

    alerts = [a for a in state.get("alerts", []) if a.get("cleared") is None]
    count = f("alerts", "gauge", "Active ops alerts by severity.")
    for sev in ALERT_SEVERITIES:
        count.add(sum(1 for a in alerts if a.get("severity") == sev), severity=sev)
    active = f("alert_active", "gauge", "1 for each active ops alert.")
    seen: set[tuple[str, str, str]] = set()
    for a in alerts:
        key = (a.get("detector", ""), a.get("component", ""), a.get("severity", ""))
        if key not in seen:  # one series per alert: the engine deduplicates, be sure here
            seen.add(key)
            active.add(1, detector=key[0], component=key[1], severity=key[2])

    injected = f("fault_injected", "gauge",
                 "1 for each fault an evaluation run has injected and not yet undone.")
    for fault in (state.get("progress") or {}).get("faults") or []:
        injected.add(1, kind=fault.get("kind", ""), component=fault.get("component", ""))

    c = state.get("controller", {})
    f("controller_up", "gauge", "1 when the controller's REST API answers.").add(
        None if c.get("up") is None else float(c["up"]))
    f("controller_converged", "gauge", "1 when every switch is programmed.").add(
        None if c.get("converged") is None else float(c["converged"]))
    f("controller_down_ports", "gauge", "Switch ports the controller considers down.").add(
        c.get("down_ports"))
    lb = state.get("lb") or {}
    mode = f("lb_mode", "gauge", "1 for the load-balancing mode in force, 0 for the others.")
    for m in lb.get("modes") or ([lb["mode"]] if lb.get("mode") else []):
        mode.add(float(m == lb.get("mode")), mode=m)
    f("telemetry_polls_total", "counter", "Telemetry polls folded into this state.").add(
        state.get("polls", 0))
    f("telemetry_last_poll_timestamp_seconds", "gauge",
      "Unix time of the latest telemetry poll.").add(state.get("t"))
    out = [line for family in fam.values() if family.samples for line in family.lines()]
    return "\n".join(out) + "\n"
