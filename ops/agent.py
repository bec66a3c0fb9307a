"""The diagnosis agent: tools over telemetry and the fabric, and a deterministic planner.

The agent answers "why is job X slow?" (or "what is wrong?") with a ranked list of
suspect components, each with its evidence and the next action, e.g.::

    1. lf0r1~spine2#0  degraded: 4.9 of 20 Mb/s (25%) with 820 kB queued for 40 polls
       next: drain lane lf0r1~spine2#0 (ip link set ... down: ECMP moves its flows to the
       other lanes) and replace its optic

Its **tools** (``Tools``) are the only way it looks at the fabric, whether the
deterministic planner here or an LLM (``ops.llm``) drives them: the alerts, a metric's
recent series, the latest counters of a component, path lookup (the controller's
``/paths``, or the plan's minimal paths when the controller is down), the counters of
every link along those paths, an active probe (ping between two NICs, run inside the
source host's namespace), and comparison with a baseline run's telemetry.

The **deterministic planner** (``diagnose``) works offline and always the same way:
read the alerts; if the question names hosts (or a job), look up their paths and read
the counters along them; score every component that has evidence (alerts weigh by
how specific their detector is; a component on the asked-about path weighs more; a
counter anomaly without an alert weighs less); probe the top suspect when it can.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controllers.paths import PathFinder
from controllers.shell.client import ControllerClient, ControllerError
from ops.detectors import Engine, Topo, alert_kind
from ops.detectors.degraded import DEGRADED_BACKLOG_S, DEGRADED_RATE_RATIO
from ops.telemetry import CONTROLLER, History, Store, canonical
from testbed.wiring import Misdelivery, miswired
from vocab.plan import WiringPlan, link_components

#: Weight of an alert no detector here declares (``ops.detectors.alert_kind``: each
#: detector's ``ALERTS`` say how much its alerts say about *where* the fault is).
UNDECLARED_WEIGHT = 20
#: Score of a counter anomaly on an asked-about path that no detector has flagged (yet).
UNALERTED_WEIGHT = 30
#: Bonus for a suspect on the paths of the hosts the question names.
ON_PATH_BONUS = 15
#: Alerts cleared less than this many seconds ago still count (a flap between polls) ...
RECENT_S = 60.0
#: ... at this fraction of their weight, falling to 0 over RECENT_S: what is wrong *now*
#: outranks what was wrong, and what was wrong a moment ago (a flapping link up again)
#: what was wrong before it.
CLEARED_FACTOR = 0.3
#: A fresh alert gets up to this bonus, falling to 0 over FRESH_S seconds: after one fault,
#: its lingering alerts (a flap window, a cleared switch) must not outrank the next fault.
FRESH_BONUS = 30.0
FRESH_S = 30.0

HOST_RE = re.compile(r"\bs\d+g\d+\b")


def next_action(detector: str, component: str, summary: str) -> str:
    """What an operator should do next about a suspect: the advice the detector of its
    alert declares (``AlertKind.advice``)."""
    kind = alert_kind(detector)
    return f"inspect {component}" if kind is None else kind.action(component, summary)


@dataclass
class Suspect:
    """One ranked answer: a component, why it is suspected, what to do next."""

    component: str
    score: float
    detector: str
    evidence: list[str] = field(default_factory=list)
    action: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"component": self.component, "score": round(self.score, 1),
                "detector": self.detector, "evidence": self.evidence, "action": self.action}


@dataclass
class Diagnosis:
    """The agent's answer: suspects best first, and the tool calls that produced it."""

    question: str
    suspects: list[Suspect]
    steps: list[dict[str, Any]] = field(default_factory=list)
    planner: str = "deterministic"
    notes: list[str] = field(default_factory=list)

    def components(self) -> list[str]:
        return [s.component for s in self.suspects]

    def record(self, t: float) -> tuple[float, list[str], str | None]:
        """The answer as a run keeps it, one per poll: ``(t, the first five suspects, the
        top suspect's detector)``; the live observer and a replay both keep this, so a
        replay's answers are scored as the live ones were."""
        return (t, self.components()[:5], self.suspects[0].detector if self.suspects else None)

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "planner": self.planner,
                "suspects": [s.to_dict() for s in self.suspects], "steps": self.steps,
                "notes": self.notes}

    def text(self, top: int = 5) -> str:
        if not self.suspects:
            return "no suspect: no alert and no counter anomaly on the paths looked at"
        lines = []
        for i, s in enumerate(self.suspects[:top], 1):
            lines.append(f"{i}. {s.component}  [{s.detector}, score {s.score:.0f}]")
            for e in s.evidence[:4]:
                lines.append(f"     evidence: {e}")
            lines.append(f"     next: {s.action}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


class Tools:
    """The agent's tools over one run's telemetry; each returns JSON-able data.

    ``history``/``engine`` are the live collector's (in-process); without them the tools
    read the ``store`` (another process's SQLite file). ``client`` is the controller's
    REST client (None or unreachable: paths come from the plan). ``host_pids`` lets the
    probe enter host namespaces, and ``prober`` is the probe itself (the live one is
    ``ops.shell.probe.ping``, given by the caller beside a lab so the agent stays pure;
    None: no probe). ``wiring`` checks the cabling against the plan (the live one asks
    the controller, ``ControllerClient.check_wiring`` read by ``testbed.wiring.findings``;
    None: no check): a tool the agent calls, not a detector, because it sends frames out
    of every switch link, which a collector polling every second should not do. ``baseline`` is a
    baseline run's store.
    """

    SPECS: dict[str, dict[str, Any]] = {
        "alerts": {"description": "Active alerts and those cleared in the last minute: "
                                  "detector, severity, component, summary, evidence.",
                   "parameters": {}},
        "series": {"description": "Recent values of one metric of one component "
                                  "(e.g. component lf0r1~spine2#0, metric mbps_ab).",
                   "parameters": {"component": "string", "metric": "string",
                                  "seconds": "number"}},
        "counters": {"description": "Latest value of every metric of one component, with "
                                    "its configured rate when it is a link.",
                     "parameters": {"component": "string"}},
        "paths": {"description": "Candidate paths between two hosts (GPU NICs), as the "
                                 "link components they cross.",
                  "parameters": {"src": "string", "dst": "string"}},
        "path_counters": {"description": "Latest counters of every link on the paths "
                                         "between two hosts, with anomalies marked.",
                          "parameters": {"src": "string", "dst": "string"}},
        "probe": {"description": "Active probe: ping from src host to dst host through the "
                                 "fabric; loss % and average RTT.",
                  "parameters": {"src": "string", "dst": "string", "count": "integer"}},
        "baseline": {"description": "Compare a component's recent metrics with a baseline "
                                    "run's median of the same metrics.",
                     "parameters": {"component": "string"}},
        "wiring": {"description": "Is the wiring as planned? Sends a frame out of each end of "
                                  "every switch-to-switch link and lists the links whose "
                                  "frames arrive at another switch port than the plan says "
                                  "(miswired: healthy counters, wrong spine) or nowhere.",
                   "parameters": {}},
    }

    def __init__(self, plan: WiringPlan, *, store: Store | None = None,
                 history: History | None = None, engine: Engine | None = None,
                 client: ControllerClient | None = None, host_pids: dict[str, int] | None = None,
                 baseline: Store | None = None, now: float | None = None,
                 prober: Callable[[int, str, int], str] | None = None,
                 wiring: Callable[[], list[Misdelivery]] | None = None) -> None:
        if store is None and history is None:
            raise ValueError("Tools need a store or a history to read telemetry from")
        self.plan = plan
        self.store, self.history, self.engine = store, history, engine
        self.client = client
        self.host_pids = host_pids or {}
        #: ping from a host's namespace: (shell pid, destination IP, count) -> ping's summary
        self.prober = prober
        self.wiring = wiring
        self.baseline_store = baseline
        self.topo = Topo.from_plan(plan)
        self.links = link_components(plan)
        self.by_hop = {}
        for comp, ln in self.links.items():
            self.by_hop[(ln.a, ln.a_port)] = comp
            self.by_hop[(ln.b, ln.b_port)] = comp
        self.hosts = {h.name: h for h in plan.hosts}
        self._now = now
        self.log: list[dict[str, Any]] = []

    def now(self) -> float:
        if self._now is not None:
            return self._now
        if self.history is not None and len(self.history):
            return self.history.now
        return time.time()

    def call(self, name: str, args: dict[str, Any] | None = None) -> Any:
        """Run tool ``name`` with ``args`` (what an LLM's tool call asks for); logged."""
        if name not in self.SPECS:
            raise ValueError(f"unknown tool {name!r}; tools: {', '.join(self.SPECS)}")
        args = dict(args or {})
        allowed = set(self.SPECS[name]["parameters"])
        unknown = set(args) - allowed
        if unknown:
            raise ValueError(f"tool {name}: unknown argument(s) {sorted(unknown)}")
        try:
            result = getattr(self, f"tool_{name}")(**args)
        except (KeyError, ValueError, TypeError) as exc:
            result = {"error": str(exc)}
        self.log.append({"tool": name, "args": args, "result": result})
        return result

    # --- tools ---------------------------------------------------------------------------
    def tool_alerts(self) -> list[dict[str, Any]]:
        now = self.now()
        if self.engine is not None:
            rows = [a.to_dict() for a in self.engine.all_alerts()]
        elif self.store is not None:
            rows = self.store.alerts()
        else:
            rows = []
        return [r for r in rows if r["first_seen"] <= now and
                (r["cleared"] is None or r["cleared"] >= now - RECENT_S)]

    def tool_series(self, component: str, metric: str,
                    seconds: float = 30) -> list[list[float | None]]:
        now = self.now()
        if self.history is not None:
            pairs = zip(self.history.times, self.history.values(component, metric), strict=True)
            return [[round(t, 2), None if v is None else round(v, 3)] for t, v in pairs
                    if now - seconds <= t <= now]
        assert self.store is not None
        return [[round(t, 2), round(v, 3)]
                for t, v in self.store.series(component, metric, now - seconds, now)]

    def _latest(self, component: str) -> dict[str, float]:
        if self.history is not None:
            out = {}
            for c, m in list(self.history.keys()):
                if c == component:
                    v = self.history.latest(c, m)
                    if v is not None:
                        out[m] = round(v, 3)
            return out
        assert self.store is not None
        return {m: round(v, 3) for (_c, m), (_t, v) in self.store.latest(component).items()}

    def tool_counters(self, component: str) -> dict[str, Any]:
        comp = canonical(component, self.plan) if "~" in component else component
        if comp in self.hosts:  # a NIC: its own counters and its link's
            out: dict[str, Any] = {"component": comp, "host": self._latest(comp)}
            link = self.topo.nic_link.get(comp)
            if link:
                out["link"] = {"name": link, "configured_mbps": self.topo.mbps(link),
                               **self._latest(link)}
            return out
        if comp not in self.links and comp not in self.topo.switch_links and comp != CONTROLLER:
            raise KeyError(f"no component {component!r} in the plan")
        out = {"component": comp, **self._latest(comp)}
        if comp in self.links:
            out["configured_mbps"] = self.topo.mbps(comp)
        return out

    def _host(self, name: str) -> str:
        if name in self.hosts:
            return name
        for h in self.plan.hosts:
            if h.ip == name:
                return h.name
        raise KeyError(f"no host {name!r} in the plan")

    def tool_paths(self, src: str, dst: str) -> dict[str, Any]:
        s, d = self._host(src), self._host(dst)
        hops_list: list[list[tuple[str, int]]] = []
        source = "plan"
        if self.client is not None:
            try:
                ans = self.client.paths(s, d)
                hops_list = [[(h["switch"], int(h["out_port"])) for h in p]
                             for p in ans.get("candidates", [])]
                source = "controller"
            except ControllerError:
                hops_list = []
        if not hops_list:
            hops_list = [list(p) for p in PathFinder(self.plan).paths(s, d)]
        paths = []
        for hops in hops_list:
            comps = [self.topo.nic_link[s]] + [self.by_hop[h] for h in hops if h in self.by_hop]
            paths.append(comps)
        return {"src": s, "dst": d, "source": source, "paths": paths}

    def link_anomaly(self, comp: str) -> str | None:
        """A counter anomaly on a link right now (no detector needed), or None."""
        c = self._latest(comp)
        rate = self.topo.mbps(comp)
        if c.get("up") == 0.0:
            return f"{comp} is down (up=0)"
        for d in ("ab", "ba"):
            back, mbps = c.get(f"backlog_{d}"), c.get(f"mbps_{d}")
            if (back is not None and mbps is not None
                    and back >= DEGRADED_BACKLOG_S * rate * 1e6 / 8
                    and mbps < DEGRADED_RATE_RATIO * rate):
                return (f"{comp} {d[0]}->{d[1]}: {mbps:.1f} of {rate:g} Mb/s "
                        f"({100 * mbps / rate:.0f}%) with {back / 1e3:.0f} kB queued")
            if (c.get(f"qdrops_{d}") or 0) > 0:
                return f"{comp} {d[0]}->{d[1]}: queue dropping {c[f'qdrops_{d}']:.0f}/s"
        return None

    def tool_path_counters(self, src: str, dst: str) -> dict[str, Any]:
        p = self.tool_paths(src, dst)
        seen: dict[str, Any] = {}
        for path in p["paths"]:
            for comp in path:
                if comp in seen:
                    continue
                row = {"configured_mbps": self.topo.mbps(comp), **self._latest(comp)}
                anomaly = self.link_anomaly(comp)
                if anomaly:
                    row["anomaly"] = anomaly
                seen[comp] = row
        return {"src": p["src"], "dst": p["dst"], "links": seen}

    def tool_probe(self, src: str, dst: str, count: int = 20) -> dict[str, Any]:
        s, d = self._host(src), self._host(dst)
        if not 1 <= int(count) <= 200:
            raise ValueError("count must be in [1, 200]")
        if self.prober is None:
            return {"error": "no prober here (probes run beside a live lab)"}
        pid = self.host_pids.get(s)
        if pid is None:
            return {"error": f"no namespace known for host {s} (is the lab running here?)"}
        ip = self.hosts[d].ip
        out = self.prober(pid, str(ip), int(count))
        loss = re.search(r"([\d.]+)% packet loss", out)
        rtt = re.search(r"= [\d.]+/([\d.]+)/", out)
        return {"src": s, "dst": d, "sent": int(count),
                "loss_pct": float(loss.group(1)) if loss else None,
                "avg_rtt_ms": float(rtt.group(1)) if rtt else None}

    def tool_wiring(self) -> dict[str, Any]:
        if self.wiring is None:
            return {"error": "no wiring check here (it runs beside a live lab)"}
        found = self.wiring()
        return {"miswired": miswired(found),
                "unseen": sorted({f.link for f in found if f.seen is None}),
                "frames": [f.to_dict() for f in found]}

    def tool_baseline(self, component: str) -> dict[str, Any]:
        if self.baseline_store is None:
            return {"error": "no baseline run given (--baseline FILE)"}
        now = self.tool_counters(component)
        flat = now.get("host", now) if component in self.hosts else now
        out: dict[str, Any] = {"component": component, "metrics": {}}
        for metric, value in flat.items():
            if not isinstance(value, (int, float)) or metric == "configured_mbps":
                continue
            base = [v for _t, v in self.baseline_store.series(component, metric)]
            if base:
                med = statistics.median(base)
                out["metrics"][metric] = {"now": value, "baseline_median": round(med, 3)}
        return out


# --- the deterministic planner ---------------------------------------------------------------
def parse_question(question: str, plan: WiringPlan) -> dict[str, Any]:
    """Hosts, links and switches a question names (``why is s0g0 -> s1g1 slow?``)."""
    hosts = {h.name for h in plan.hosts}
    named_hosts = [h for h in HOST_RE.findall(question) if h in hosts]
    link_re = r"\b\w+~\w+(?:#\d+)?"
    comps = [canonical(m, plan) for m in re.findall(link_re, question)]
    names = {s.name for s in plan.switches}
    switches = [w for w in re.findall(r"\b\w+\b", re.sub(link_re, " ", question))
                if w in names]
    return {"hosts": list(dict.fromkeys(named_hosts)), "components": comps,
            "switches": switches}


def diagnose(tools: Tools, question: str = "what is wrong?", *, job_hosts: list[str] | None = None,
             probe: bool = True) -> Diagnosis:
    """Rank suspect components for ``question`` using only ``tools`` (deterministic)."""
    plan = tools.plan
    asked = parse_question(question, plan)
    hosts = asked["hosts"] or list(job_hosts or [])
    suspects: dict[str, Suspect] = {}
    notes: list[str] = []

    def add(comp: str, score: float, detector: str, evidence: str, summary: str = "") -> None:
        comp = canonical(comp, plan)
        s = suspects.get(comp)
        if s is None:
            s = suspects[comp] = Suspect(comp, 0.0, detector,
                                         action=next_action(detector, comp, summary))
        if score > s.score:
            s.score, s.detector = score, detector
            s.action = next_action(detector, comp, summary)
        if evidence not in s.evidence:
            s.evidence.append(evidence)

    alerts = tools.call("alerts")
    for a in alerts:
        kind = alert_kind(a["detector"])
        if kind is not None and kind.symptom:  # says that the job suffers, not where
            notes.append(f"{a['component']}: {a['summary']}")
            continue
        w = float(UNDECLARED_WEIGHT if kind is None else kind.weight or 0.0)
        if a["cleared"] is not None:  # still relevant, but the condition has ended
            w *= CLEARED_FACTOR * max(0.0, 1.0 - (tools.now() - a["cleared"]) / RECENT_S)
        else:
            age = tools.now() - (a.get("opened") or a["first_seen"])
            w += FRESH_BONUS * max(0.0, 1.0 - age / FRESH_S)
        age = f"since {time.strftime('%H:%M:%S', time.localtime(a['first_seen']))}"
        add(a["component"], w, a["detector"], f"{a['summary']} ({a['severity']}, {age})",
            a["summary"])

    on_path: set[str] = set()
    pairs = [(a, b) for a in hosts for b in hosts if a != b][:12]
    for src, dst in pairs:
        pc = tools.call("path_counters", {"src": src, "dst": dst})
        for comp, row in pc.get("links", {}).items():
            on_path.add(canonical(comp, plan))
            if "anomaly" in row:
                add(comp, UNALERTED_WEIGHT, "counters", f"on path {src}->{dst}: {row['anomaly']}")
    for h in hosts:
        on_path.add(h)
    for comp in asked["components"] + asked["switches"]:
        on_path.add(comp)
    for comp, s in suspects.items():
        on_path_here = comp in on_path or any(
            comp in tools.topo.switch_links and c in on_path
            for c in tools.topo.switch_links.get(comp, []))
        if on_path and on_path_here:
            s.score += ON_PATH_BONUS
            s.evidence.append("on the paths of the hosts asked about")

    if not suspects:  # nothing flagged: scan every link's counters for an anomaly
        for comp in tools.links:
            anomaly = tools.link_anomaly(comp)
            if anomaly:
                add(comp, UNALERTED_WEIGHT - 10, "counters", anomaly)
    ranked = sorted(suspects.values(), key=lambda s: (-s.score, s.component))
    if probe and ranked and tools.host_pids and tools.prober is not None:
        _probe_top(tools, ranked[0])
    return Diagnosis(question, ranked, steps=list(tools.log), notes=notes)


def _probe_top(tools: Tools, top: Suspect) -> None:
    """Ping through the top suspect when it is a NIC (from another NIC to it): confirms loss."""
    if top.component not in tools.hosts:
        return
    others = [h for h in tools.hosts if h != top.component and h in tools.host_pids]
    if not others:
        return
    r = tools.call("probe", {"src": others[0], "dst": top.component, "count": 50})
    if r.get("loss_pct") is not None:
        top.evidence.append(f"probe {others[0]}->{top.component}: {r['loss_pct']:.0f}% loss, "
                            f"rtt {r['avg_rtt_ms']} ms")
