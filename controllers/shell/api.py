"""What the REST endpoints answer, computed from the running app (``controllers.shell.rest``
maps HTTP).

Kept apart from the os-ken app so the JSON shapes live in one readable place.
Every method takes the app's lock only briefly; none of them waits while holding it.
"""

from __future__ import annotations

from typing import Any

from controllers.fabric import ADAPTIVE_DEFAULTS, MODES
from controllers.flowtable import COOKIE_KINDS, entry_from_stats, stat_counter
from vocab.flows import PROTOS, parse_flows


class AppAPI:
    """Implements ``controllers.shell.rest.ControllerAPI`` over an ``AstralController``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.plan = app.plan
        self.names = {s.name for s in self.plan.switches}
        self.host_of = {h.name: h.name for h in self.plan.hosts}
        self.host_of.update({h.ip: h.name for h in self.plan.hosts if h.ip})

    def _switches(self, switch: str | None) -> list[str]:
        if switch is None:
            return sorted(self.names)
        if switch not in self.names:
            raise KeyError(f"no switch {switch!r} in the plan")
        return [switch]

    def _host(self, name: str, what: str) -> str:
        host = self.host_of.get(name)
        if host is None:
            raise KeyError(f"{what}: no host or host IP {name!r} in the plan")
        return host

    # --- endpoints -------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self.app.health()

    def topology(self) -> dict[str, Any]:
        return self.plan.to_dict()

    def links(self) -> dict[str, Any]:
        """Every link: state, configured rate, and current rate/utilisation each way.

        A direction's rate is the sending switch port's transmit rate; for the
        host-to-switch direction of a NIC link it is the switch port's receive rate.
        """
        app = self.app
        with app.lock:
            samples = app.port_samples
            down = set(app.logic.down)
            out = []
            for link in self.plan.links:
                row: dict[str, Any] = {"name": link.name, "a": link.a, "a_port": link.a_port,
                                       "b": link.b, "b_port": link.b_port, "kind": link.kind,
                                       "gbps": link.gbps, "mbps": link.mbps}
                row["state"] = ("down" if (link.a, link.a_port) in down
                                or (link.b, link.b_port) in down else "up")
                for direction, (src, sp, dst, dp_) in (
                        ("a_to_b", (link.a, link.a_port, link.b, link.b_port)),
                        ("b_to_a", (link.b, link.b_port, link.a, link.a_port))):
                    rate = None
                    if src in samples and "tx_mbps" in samples[src].get(sp, {}):
                        rate = samples[src][sp]["tx_mbps"]
                    elif dst in samples and "rx_mbps" in samples[dst].get(dp_, {}):
                        rate = samples[dst][dp_]["rx_mbps"]
                    row[direction] = {"mbps": None if rate is None else round(rate, 4),
                                      "utilization": None if rate is None or not link.mbps
                                      else round(rate / link.mbps, 4)}
                out.append(row)
            return {"interval_s": app.poll_interval, "links": out}

    def port_stats(self, switch: str | None) -> dict[str, Any]:
        with self.app.lock:
            return {name: {str(port): {k: (round(v, 4) if isinstance(v, float) else v)
                                       for k, v in s.items() if k != "t"}
                           for port, s in sorted(self.app.port_samples.get(name, {}).items())}
                    for name in self._switches(switch)}

    def group_stats(self, switch: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self.app.lock:
            for name in self._switches(switch):
                table = self.app.logic.tables.get(name)
                groups = {}
                for gid, s in sorted(self.app.group_samples.get(name, {}).items()):
                    spec = table.groups.get(gid) if table else None
                    row = dict(s)
                    if spec is not None:
                        row["type"] = spec.kind
                        for bucket, port in zip(row["buckets"], spec.ports, strict=False):
                            bucket["port"] = port
                    groups[str(gid)] = row
                out[name] = groups
        return out

    def flows(self, switch: str | None) -> dict[str, Any]:
        """Entries read from the switches now, with counters (ovs-ofctl dump-flows, as JSON)."""
        got = self.app.read_flows(self._switches(switch))
        out = {}
        for name, stats in sorted(got.items()):
            rows = []
            for stat in stats:
                e = entry_from_stats(stat)
                rows.append({"priority": e.priority,
                             "match": {k: (list(v) if isinstance(v, tuple) else v)
                                       for k, v in e.match},
                             "actions": [f"{kind}:{arg}" for kind, arg in e.actions] or ["drop"],
                             "cookie": hex(e.cookie),
                             "kind": COOKIE_KINDS.get(e.cookie, "foreign"),
                             "packets": stat_counter(stat, "packet_count"),
                             "bytes": stat_counter(stat, "byte_count")})
            rows.sort(key=lambda r: -r["priority"])
            out[name] = rows
        return out

    def check_wiring(self) -> dict[str, Any]:
        """A wiring check now: where each switch link end's probe frame arrived."""
        return self.app.check_wiring()

    def paths(self, src: str, dst: str, sport: int | None, dport: int | None,
              proto: str) -> dict[str, Any]:
        if proto not in PROTOS:
            raise ValueError(f"proto must be one of {sorted(PROTOS)} (got {proto!r})")
        s, d = self._host(src, "src"), self._host(dst, "dst")
        if s == d:
            raise ValueError("src and dst are the same host")
        lg = self.app.logic
        with self.app.lock:
            candidates = lg.finder.paths(s, d)
            flow = lg.flow_for(s, d, sport, dport, proto)
            chosen = lg.assign.get(flow) if flow is not None else None
            result: dict[str, Any] = {
                "src": s, "dst": d, "mode": lg.mode,
                "candidates": [lg.path_view(p) for p in candidates],
                "flow": flow.to_dict() if flow else None,
            }
            if chosen is not None:
                result["path"] = lg.path_view(chosen)
                result["how"] = f"pinned by {lg.mode} mode"
            else:
                result["path"] = None
                result["how"] = ("hashed by the switches onto one of the candidates "
                                 "(5-tuple incl. UDP source port)")
            return result

    def get_lb(self) -> dict[str, Any]:
        lg = self.app.logic
        with self.app.lock:
            return {"mode": lg.mode, "modes": list(MODES), "pins": lg.balancer.pins,
                    "polls": lg.balancer.polls, "adaptive": dict(lg.adaptive_params),
                    "poll_interval_s": self.app.poll_interval, "flows": len(lg.flows),
                    "pinned": len(lg.assign), "adaptive_moves": lg.moves}

    def set_lb(self, body: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body, dict) or "mode" not in body:
            raise ValueError('body must be a JSON object with "mode" '
                             f'(one of {list(MODES)})')
        extra = {k: v for k, v in body.items() if k != "mode"}
        unknown = set(extra) - set(ADAPTIVE_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)}; "
                             f"known: mode, {', '.join(sorted(ADAPTIVE_DEFAULTS))}")
        self.app.set_lb(body["mode"], **extra)
        return self.get_lb()

    def post_traffic(self, body: Any) -> dict[str, Any]:
        replace = True
        if isinstance(body, dict):
            extra = set(body) - {"flows", "replace"}
            if extra:
                raise ValueError(f"unknown field(s) {sorted(extra)}; known: flows, replace")
            replace = body.get("replace", True)
            if not isinstance(replace, bool):
                raise ValueError("replace must be true or false")
        flows = parse_flows(body, self.plan)
        self.app.set_traffic(flows, replace=replace)
        return self.get_traffic()

    def get_traffic(self) -> dict[str, Any]:
        lg = self.app.logic
        with self.app.lock:
            rows = []
            for f in sorted(lg.flows.values()):
                d = f.to_dict()
                path = lg.assign.get(f)
                d["path"] = [sw for sw, _ in path] if path else None
                sample = self.app.flow_samples.get(f.key)
                d["mbps"] = round(sample["mbps"], 4) if sample and sample["mbps"] else None
                rows.append(d)
            return {"mode": lg.mode, "flows": rows, "pinned": len(lg.assign)}

    def clear_traffic(self) -> dict[str, Any]:
        self.app.set_traffic([], replace=True)
        return self.get_traffic()
