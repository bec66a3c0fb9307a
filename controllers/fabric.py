"""The controller's decisions, without os-ken: what every switch should hold, and why.

``FabricLogic`` owns the state a network engineer reasons about: the wiring
plan, the links that are down, the load-balancing mode, the job's flows and the
path each flow is pinned to. From these it derives every switch's ``Table``
(``controllers.flowtable``) and, when something changes (a port goes down, the
mode is switched, a job posts its flows, the adaptive policy moves a flow), the
*difference* to send to each switch. The os-ken app (``controllers.shell.app``) only
moves messages; the unit tests drive this class directly and apply its
messages to the fake fabric (``tests/unit/fakeof.py``).

Modes are the policy modules the controller runs (``controllers.policies``): one that
does not pin leaves every flow on the destination routes over select groups, where each
switch hashes the 5-tuple (UDP source port included) onto one of its equal-cost ports;
one that pins gives the job's flows (``POST /traffic``) explicit paths with exact-match
entries above those routes; one that polls also moves pinned flows on measured rates
(``lb.AdaptivePolicy``). Flows the controller was not told about always follow the ECMP
routes.

Every switch's table also carries its *lane marks* (``vocab.lanemark``): ``table`` hands
``flowtable.build_table`` the TTL each uplink port of a host-facing switch stamps, so
every IPv4 packet leaves its first switch with the mark of the uplink it took (set in
each select or failover bucket, or before a direct output), and a receiver can name the
lane even under ECMP, whose choice only the switch's hash knows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from controllers import lb, policies
from controllers.flowtable import (
    OWN_COOKIES,
    Changes,
    Entry,
    GroupSpec,
    Pin,
    Table,
    build_table,
    diff,
    pin_match,
)
from controllers.flowtable import infer_groups as _infer_groups
from controllers.paths import Path, PathFinder
from controllers.routing import attach_points, compute_routes, next_hops
from vocab.flows import Flow
from vocab.lanemark import LaneMarks
from vocab.plan import WiringPlan

#: the modes the controller runs: every policy module that declares it can
MODES = policies.CONTROLLER_MODES.names()
#: the mode a controller starts in unless told otherwise
DEFAULT_MODE = "ecmp"
#: seconds between the controller's counter polls (links, adaptive mode) unless told otherwise
POLL_INTERVAL_S = 1.0
#: seconds either end of an OpenFlow connection bears the other's silence before dropping it
#: (os-ken's send timeout and OVS's inactivity probe both default to 5): a controller computing
#: thousands of entries, or a switch applying them, on a slow machine is busy for longer, and
#: a dropped connection comes back as a full resync, which makes every switch slower still
PEER_SILENCE_S = 60.0
ADAPTIVE_DEFAULTS: dict[str, float] = {"threshold": 0.8, "hysteresis": 0.1, "hold": 3}


def _mode(name: str) -> policies.Policy:
    """The controller policy called ``name``, or the one ValueError listing the modes."""
    return policies.CONTROLLER_MODES.get(name)


@dataclass
class Event:
    """Something the fabric did, kept for ``/health`` and the benchmarks."""

    kind: str  # "port", "reroute", "mode", "traffic", "adaptive"
    at: float
    detail: dict[str, Any] = field(default_factory=dict)


class _Kept(Mapping[Flow, Path]):
    """The paths a policy may keep: assigned flows still posted whose path is still alive.

    Checked only when a policy reads it (one that plans afresh never pays for the check,
    which is a path lookup per pinned flow)."""

    def __init__(self, logic: FabricLogic) -> None:
        self._logic = logic
        self._kept: dict[Flow, Path] | None = None

    def _all(self) -> dict[Flow, Path]:
        if self._kept is None:
            lg = self._logic
            self._kept = {f: p for f, p in lg.assign.items()
                          if f.key in lg.flows and lg._valid(f, p)}
        return self._kept

    def __getitem__(self, flow: Flow) -> Path:
        return self._all()[flow]

    def __iter__(self) -> Iterator[Flow]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class FabricLogic:
    """Plan + failures + mode + flows -> per-switch tables and minimal changes."""

    def __init__(self, plan: WiringPlan, mode: str = DEFAULT_MODE,
                 adaptive: Mapping[str, float] | None = None) -> None:
        self.balancer = _mode(mode)
        self.plan = plan
        self.ip_of = {h.name: h.ip or "" for h in plan.hosts}
        self.attach = attach_points(plan)
        self.switch_names = [s.name for s in plan.switches]
        lanes = LaneMarks(plan)  # ValueError if a switch has more uplinks than a TTL can mark
        #: per host-facing switch, the TTL each of its uplink ports stamps (port -> TTL)
        self.marks: dict[str, dict[int, int]] = {sw: lanes.ports(sw) for sw in lanes.uplinks}
        self.mode = mode
        self.adaptive_params = dict(ADAPTIVE_DEFAULTS)
        self.adaptive_params.update(adaptive or {})
        self.policy = self.new_policy(self.adaptive_params)
        self.down: set[tuple[str, int]] = set()
        self.flows: dict[tuple[str, str, str, int, int], Flow] = {}
        self.assign: dict[Flow, Path] = {}
        self.tables: dict[str, Table] = {}  # what each switch holds, as far as we know
        self.events: list[Event] = []
        self.moves = 0
        self._vacated: dict[Any, int] = {}  # hop -> tick a flow was last moved off it
        self._matches: dict[Flow, Any] = {}  # flow -> its exact match (same at every switch)
        self._inputs: dict[str, tuple[Any, Any]] = {}  # switch -> (routes, pins) of its table
        self._pending_inputs: dict[str, tuple[Any, Any]] = {}
        self._refresh_routes()

    # --- derived state ---------------------------------------------------------------
    @staticmethod
    def new_policy(params: Mapping[str, Any]) -> lb.AdaptivePolicy:
        # hold is passed as given: AdaptivePolicy refuses a non-integer instead of int()
        # silently truncating it
        return lb.AdaptivePolicy(threshold=float(params["threshold"]),
                                 hysteresis=float(params["hysteresis"]),
                                 hold=params["hold"])

    def _refresh_routes(self) -> None:
        self.hops = next_hops(self.plan, self.down)
        self.routes = compute_routes(self.plan, self.down)
        self.finder = PathFinder(self.plan, self.down)

    def _valid(self, flow: Flow, path: Path) -> bool:
        try:
            return path in self.finder.candidates(flow.src, flow.dst)
        except ValueError:
            return False

    def _place(self) -> None:
        """(Re)assign paths for the current mode, keeping what is still valid where allowed."""
        if not self.balancer.pins:
            self.assign = {}
            return
        flows = self._routable(sorted(self.flows.values()))
        self.assign = self.balancer.place(flows, self.finder, _Kept(self))

    def _repair(self) -> None:
        """After a failure: keep every flow whose path survives, re-place only the others.

        Re-planning everything could be a little better balanced but would move
        flows that were fine; an engineer wants a failure to disturb as little as
        possible. Broken flows go, largest first, onto the candidate path whose
        busiest link would be least loaded (counting the flows that stayed).
        """
        if not self.balancer.pins:
            return
        kept = {f: p for f, p in self.assign.items() if self._valid(f, p)}
        broken = [f for f in self._routable(sorted(self.flows.values())) if f not in kept]
        loads = lb.link_loads(kept)
        cap = self.finder.capacity("gbps")
        for f in sorted(broken, key=lambda x: (-x.bytes, x)):
            best = min(self.finder.paths(f.src, f.dst),
                       key=lambda p: (max((loads.get(h, 0.0) + f.bytes) / cap[h] for h in p), p))
            kept[f] = best
            for h in best:
                loads[h] = loads.get(h, 0.0) + f.bytes
        self.assign = kept

    def _routable(self, flows: Iterable[Flow]) -> list[Flow]:
        """Flows that have a path at all (a partitioned pair stays on the ECMP routes)."""
        out = []
        for f in flows:
            try:
                self.finder.paths(f.src, f.dst)
            except ValueError:
                continue
            out.append(f)
        return out

    def pins(self) -> dict[str, list[Pin]]:
        """Per switch, the exact-match pins of every assigned flow.

        A flow is pinned at every switch of its path but the last (the
        destination's attach switch delivers by its local route anyway). Each pin's
        later ports are the switch's other equal-cost ports toward the destination,
        so a fast-failover group skips a dead chosen port without the controller.
        """
        out: dict[str, list[Pin]] = {}
        ports_for: dict[tuple[str, str, int], tuple[int, ...]] = {}
        for flow, path in self.assign.items():
            target = self.attach[flow.dst][0]
            match = self.match_of(flow)
            for sw, port in path[:-1]:
                key = (sw, target, port)
                ports = ports_for.get(key)
                if ports is None:
                    alt = tuple(p for p in self.hops.get(sw, {}).get(target, ()) if p != port)
                    ports = ports_for[key] = (port,) + alt
                out.setdefault(sw, []).append(Pin(sw, flow, ports, match))
        return out

    def match_of(self, flow: Flow) -> Any:
        """The exact match that pins ``flow``: the same at every switch, so built once."""
        match = self._matches.get(flow)
        if match is None:
            match = self._matches[flow] = pin_match(flow, self.ip_of)
        return match

    def table(self, switch: str, pins: Mapping[str, list[Pin]] | None = None,
              previous: Table | None = None) -> Table:
        """The table ``switch`` should hold now (lane marks included)."""
        pins = self.pins() if pins is None else pins
        prev = self.tables.get(switch) if previous is None else previous
        return build_table(self.routes.get(switch, []), pins.get(switch, []), self.ip_of,
                           previous=prev, marks=self.marks.get(switch))

    # --- changes ---------------------------------------------------------------------
    def changes(self, switches: Iterable[str]) -> dict[str, tuple[Changes, Table]]:
        """Per switch (of those given) with something to change: the changes and new table.

        Call ``commit`` with the new table once the messages are sent (os-ken keeps
        them in order per connection). A switch whose routes and pins are the same
        as when its table was last committed is skipped without rebuilding it, which
        keeps a reroute cheap when tens of thousands of flows are pinned.
        """
        pins = self.pins()
        out = {}
        for sw in switches:
            inputs = (self.routes.get(sw, []), pins.get(sw, []))
            if sw in self.tables and self._inputs.get(sw) == inputs:
                continue
            want = self.table(sw, pins)
            ch = diff(self.tables.get(sw), want)
            self._pending_inputs[sw] = inputs
            if len(ch):
                out[sw] = (ch, want)
            else:
                self._inputs[sw] = inputs
        return out

    def commit(self, switch: str, table: Table) -> None:
        self.tables[switch] = table
        inputs = self._pending_inputs.pop(switch, None)
        if inputs is not None:
            self._inputs[switch] = inputs
        else:
            self._inputs.pop(switch, None)

    def forget(self, switch: str) -> None:
        """The switch disconnected: what it holds is unknown until it is read back."""
        self.tables.pop(switch, None)
        self._inputs.pop(switch, None)

    def sync(self, switch: str, read_back: Mapping[tuple[int, Any], Entry],
             group_ids: Iterable[int]) -> tuple[Changes, Table]:
        """Changes that bring a (re)connected switch from what it holds to what it should.

        ``read_back`` are its entries (flow stats), ``group_ids`` the groups it has
        (group stats). Group contents cannot be read back (see
        ``flowtable.infer_groups``), so every wanted group is re-sent with
        ``add_or_mod`` (atomic, harmless); identical entries are left alone, so
        forwarding never stops. Entries without one of the controller's cookies
        (``OWN_COOKIES``) are someone else's and are neither changed nor deleted.
        """
        read_back = {k: e for k, e in read_back.items() if e.cookie in OWN_COOKIES}
        fresh = self.table(switch, previous=Table())
        guess = _infer_groups(read_back, fresh)
        for gid in group_ids:  # groups we cannot explain: avoid their ids, then delete them
            guess.groups.setdefault(gid, GroupSpec("unknown", ()))
        for entry in read_back.values():
            for kind, gid in entry.actions:
                if kind == "group":
                    guess.groups.setdefault(gid, GroupSpec("unknown", ()))
        want = self.table(switch, previous=guess)
        return diff(guess, want, have_groups_known=False), want

    # --- inputs ----------------------------------------------------------------------
    def set_port(self, switch: str, port: int, up: bool) -> bool:
        """Record a port's state; True if routing changed (callers then send ``changes``)."""
        key = (switch, port)
        if (key not in self.down) == up:
            return False
        before = self.down.copy()
        self.down.discard(key) if up else self.down.add(key)
        if self._link_state(before) == self._link_state(self.down):
            return False  # the other end of that link already told us
        self._refresh_routes()
        self._repair()
        self.events.append(Event("port", time.time(), {"switch": switch, "port": port,
                                                       "up": up}))
        return True

    def _link_state(self, down: set[tuple[str, int]]) -> frozenset[int]:
        """Indexes of links with an end in ``down`` (a link is down if either end is)."""
        return frozenset(i for i, ln in enumerate(self.plan.links)
                         if (ln.a, ln.a_port) in down or (ln.b, ln.b_port) in down)

    def set_mode(self, mode: str, **adaptive: float) -> None:
        new = _mode(mode)
        params = dict(self.adaptive_params)
        for name, value in adaptive.items():
            if name not in ADAPTIVE_DEFAULTS:
                raise ValueError(f"unknown adaptive parameter {name!r} "
                                 f"(known: {sorted(ADAPTIVE_DEFAULTS)})")
            # JSON gives bools and floats where a client meant neither: hold counts polls,
            # so 1.5 or true must be refused, not truncated to 1
            if isinstance(ADAPTIVE_DEFAULTS[name], int):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{name} must be an integer (got {value!r})")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number (got {value!r})")
            params[name] = value
        policy = self.new_policy(params)  # validates before anything changes
        changed_mode = mode != self.mode
        self.adaptive_params, self.policy, self.mode, self.balancer = params, policy, mode, new
        if changed_mode:
            self.assign = {}
            self._place()
        self.events.append(Event("mode", time.time(), {"mode": mode}))

    def set_flows(self, flows: list[Flow], replace: bool = True) -> None:
        if replace:
            self.flows = {}
        for f in flows:
            self.flows[f.key] = f
        self._place()
        self.events.append(Event("traffic", time.time(), {"flows": len(self.flows)}))

    def link_estimate(self, flow_rates: Mapping[Flow, float], link_rates: Mapping[Any, float],
                      tick: int) -> dict[Any, float]:
        """Each link's load as the adaptive policy should see it (Mb/s).

        A link carries the measured rates of the pinned flows now assigned to it, plus
        whatever else its counters show (traffic the controller was not told about).
        Counters alone mislead right after a move: the link a flow left keeps sending
        at full rate while its queue drains (seconds, with lossless queues), and would
        look hot enough to push the next flow off too. So for a link vacated within
        the last ``hold + 2`` polls, only the pinned flows count.
        """
        demand: dict[Any, float] = {}
        for f, path in self.assign.items():
            rate = flow_rates.get(f)
            if rate:
                for hop in path:
                    demand[hop] = demand.get(hop, 0.0) + rate
        window = self.policy.hold + 2
        est = dict(demand)
        for hop, measured in link_rates.items():
            if tick - self._vacated.get(hop, -window - 1) > window:
                est[hop] = demand.get(hop, 0.0) + max(0.0, measured - demand.get(hop, 0.0))
        return est

    def adaptive_step(self, flow_rates: Mapping[Flow, float], link_rates: Mapping[Any, float],
                      tick: int) -> dict[Flow, Path]:
        """One adaptive round on measured rates (Mb/s); returns and applies the moves."""
        if not self.balancer.polls or not self.assign:
            return {}
        est = self.link_estimate(flow_rates, link_rates, tick)
        moves = self.policy.step(self.assign, dict(flow_rates), est,
                                 self.finder.capacity("mbps"), self.finder, tick)
        for f, new in moves.items():
            for hop in set(self.assign[f]) - set(new):
                self._vacated[hop] = tick
        self.assign.update(moves)
        self.moves += len(moves)
        if moves:
            self.events.append(Event("adaptive", time.time(), {"moved": len(moves)}))
        return moves

    # --- views -----------------------------------------------------------------------
    def flow_for(self, src: str, dst: str, sport: int | None, dport: int | None,
                 proto: str) -> Flow | None:
        for f in self.flows.values():
            if (f.src, f.dst, f.proto) == (src, dst, proto) and sport in (None, f.sport) \
                    and dport in (None, f.dport):
                return f
        return None

    def path_view(self, path: Path) -> list[dict[str, Any]]:
        """A path as a reader wants it: switch, out port, and where that port leads."""
        return [{"switch": sw, "out_port": port, "to": self.finder.peer((sw, port))[0]}
                for sw, port in path]
