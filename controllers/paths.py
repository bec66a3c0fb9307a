"""Whole paths through a wiring plan: every minimal path a flow may take. Pure.

Routing (``controllers.routing``) answers a per-switch question: "at this switch,
which ports lead toward that attach switch?". Load balancing needs a per-flow
one: "which complete paths could this flow take, and which links does each one
load?". This module turns the first answer into the second.

Vocabulary, used by ``controllers.lb`` too:

``Hop``
    ``(switch, out_port)``. A directed link is named by its egress end, because
    that is where a switch queues packets and where the controller chooses
    (a select-group bucket or an explicit output action is a port).
``Path``
    The hops a flow takes, from its source host's attach switch to its
    destination host. The last hop is the destination attach switch's port
    toward the host; hosts on the same attach switch have a one-hop path. The
    source host's own NIC transmit link is not a hop: no switch chooses it.
``trunk``
    A path without its last hop: the switch-to-switch part between two attach
    switches. Every host under one attach switch shares the trunks toward every
    host under another, so trunks are what we enumerate and cache.

The candidate paths of a flow are *all* minimal paths: at each switch every
ECMP port that ``routing.next_hops`` offers, combined hop by hop. They therefore
inherit routing's rules for free: failed links (``down``) are avoided, and in
``railonly`` no per-server NVLink switch carries transit traffic.
"""

from __future__ import annotations

from collections.abc import Iterable

from controllers.routing import attach_points, next_hops
from vocab.plan import Link, WiringPlan

Hop = tuple[str, int]
Path = tuple[Hop, ...]

#: Bits per second of one unit of link capacity. ``gbps`` is the real fabric (what the paper's
#: hardware does); ``mbps`` is the emulated one (what the Mininet veths are shaped to).
UNITS = {"gbps": 1e9, "mbps": 1e6}


class PathFinder:
    """All minimal paths of a plan, with the failed link ends ``down`` avoided.

    ``next_hops`` is computed once here; trunks are enumerated lazily per
    (attach switch, attach switch) and cached, and full candidate lists per
    (source attach switch, destination host), because a 256-GPU all-to-all asks
    for 65,280 flows but only 128 x 127 distinct leaf pairs.
    """

    def __init__(self, plan: WiringPlan, down: Iterable[Hop] | None = None) -> None:
        self.plan = plan
        self.down: frozenset[Hop] = frozenset(down or ())
        self.next_hops = next_hops(plan, set(self.down))
        self._ports = plan.ports()
        self._attach = attach_points(plan)
        self._switches = {s.name for s in plan.switches}
        self._trunks: dict[tuple[str, str], tuple[Path, ...]] = {}
        self._cands: dict[tuple[str, str], tuple[Path, ...]] = {}
        self._choices: dict[tuple[str, str], tuple[frozenset[Hop], tuple[Path, ...]]] = {}
        self._pair_choices: dict[tuple[str, str], tuple[frozenset[Hop], tuple[Path, ...]]] = {}

    # --- lookups ------------------------------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        """Host names in plan order."""
        return [h.name for h in self.plan.hosts]

    def attach(self, host: str) -> str:
        """The one switch a host hangs off (leaf, ToR, edge, or the server's NVLink switch)."""
        try:
            return self._attach[host][0]
        except KeyError:
            raise ValueError(f"no host {host!r} in the plan") from None

    def host_hop(self, host: str) -> Hop:
        """The last hop of every path to ``host``: its attach switch's port toward it."""
        self.attach(host)
        return self._attach[host]

    def peer(self, hop: Hop) -> tuple[str, int]:
        """``(node, port)`` at the far end of a hop's link."""
        peer, peer_port, _link = self._ports[hop[0]][hop[1]]
        return peer, peer_port

    def link(self, hop: Hop) -> Link:
        return self._ports[hop[0]][hop[1]][2]

    def is_fabric(self, hop: Hop) -> bool:
        """True for switch-to-switch hops, False for a switch's port toward a host."""
        return self._ports[hop[0]][hop[1]][0] in self._switches

    def is_down(self, hop: Hop) -> bool:
        """True if either end of the hop's link is in ``down``."""
        return hop in self.down or self.peer(hop) in self.down

    def nodes(self, path: Path) -> list[str]:
        """The switches a path crosses, then the destination host (for humans and tests)."""
        return [sw for sw, _ in path] + [self.peer(path[-1])[0]]

    # --- paths --------------------------------------------------------------------------
    def trunks(self, src_switch: str, dst_switch: str) -> tuple[Path, ...]:
        """Every minimal switch-to-switch hop sequence between two switches, sorted.

        ``()`` (one empty trunk) when they are the same switch; no trunks at all when
        ``down`` cuts them apart. Suffixes are shared through the cache, so a fat-tree's
        k^2/4 core paths cost one walk per (switch, destination), not one per path.
        """
        key = (src_switch, dst_switch)
        cached = self._trunks.get(key)
        if cached is not None:
            return cached
        if src_switch == dst_switch:
            out: list[Path] = [()]
        else:
            out = []
            for port in self.next_hops.get(src_switch, {}).get(dst_switch, ()):
                nxt = self._ports[src_switch][port][0]
                for rest in self.trunks(nxt, dst_switch):  # strictly closer: no loops
                    out.append(((src_switch, port),) + rest)
        result = tuple(sorted(out))
        self._trunks[key] = result
        return result

    def candidates(self, src: str, dst: str) -> tuple[Path, ...]:
        """Like ``paths`` but the cached tuple itself (no copy): for hot loops in ``lb``."""
        if src == dst:
            raise ValueError(f"{src} to itself is not a flow")
        a = self.attach(src)
        if self.down and self.is_down(self._attach[src]):  # not part of the cache key: check
            raise ValueError(f"no path from {src} to {dst}: the NIC link of {src} is down")
        key = (a, dst)
        cached = self._cands.get(key)
        if cached is not None:
            return cached
        b = self.attach(dst)
        if self.is_down(self._attach[dst]):
            raise ValueError(f"no path from {src} to {dst}: the NIC link of {dst} is down")
        last = self._attach[dst]
        result = tuple(trunk + (last,) for trunk in self.trunks(a, b))
        if not result:
            raise ValueError(f"no path from {src} to {dst}: {a} cannot reach {b} "
                             f"with {len(self.down)} link end(s) down")
        self._cands[key] = result
        return result

    def paths(self, src: str, dst: str) -> list[Path]:
        """All minimal paths from host ``src`` to host ``dst``, sorted (deterministic).

        Raises ``ValueError`` naming both hosts when none exists (unknown host, a failed
        NIC link, or a fabric partitioned by ``down``).
        """
        return list(self.candidates(src, dst))

    def choices(self, src: str, dst: str) -> tuple[frozenset[Hop], tuple[Path, ...]]:
        """``(fixed, varying)``: hops every candidate shares, and each candidate without them.

        ``varying[i]`` lists the hops of ``candidates(src, dst)[i]`` that some other
        candidate avoids. Only those are a choice: the last hop to the host (and, in
        ``railonly``, a forced NVLink relay) load the same link whatever a policy does, so
        policies compare candidates on ``varying`` and leave fixed hot spots alone.
        """
        key = (self.attach(src), dst)
        cached = self._choices.get(key)
        if cached is not None and not self.down and src != dst:
            return cached  # what candidates() would check holds for every src of a cached key
        self.candidates(src, dst)  # the checks, and the ValueError naming both hosts
        if cached is None:
            # per (attach, attach) pair: every destination under b has the same trunks and
            # its own last hop, which every candidate shares
            b = self.attach(dst)
            trunks = self.trunks(key[0], b)
            pair = self._pair_choices.get((key[0], b))
            if pair is None:
                common = frozenset(trunks[0]).intersection(*trunks[1:])
                pair = (common, tuple(tuple(h for h in t if h not in common) for t in trunks))
                self._pair_choices[(key[0], b)] = pair
            cached = (pair[0] | {self._attach[dst]}, pair[1])
            self._choices[key] = cached
        return cached

    def uplinks(self, switch: str) -> list[Hop]:
        """Live switch-to-switch egress hops of ``switch`` (its ways into the network)."""
        return [(switch, port) for port in sorted(self._ports[switch])
                if self.is_fabric((switch, port)) and not self.is_down((switch, port))]

    def capacity(self, unit: str = "gbps") -> dict[Hop, float]:
        """Rate of every live switch egress (fabric and switch->host), in ``unit``.

        ``gbps`` is the real rate, ``mbps`` the emulated one. Failed links are left out:
        they carry nothing, and a missing key is louder than a zero if a bug routes over one.
        """
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {sorted(UNITS)} (got {unit!r})")
        out: dict[Hop, float] = {}
        for sw in sorted(self._switches):
            for port, (_peer, _pp, link) in sorted(self._ports[sw].items()):
                if not self.is_down((sw, port)):
                    out[(sw, port)] = link.gbps if unit == "gbps" else link.mbps
        return out

    def nic_capacity(self, host: str, unit: str = "gbps") -> float:
        """Rate of a host's own link (its transmit side is not a ``Hop``, see module doc)."""
        link = self.link(self.host_hop(host))
        return link.gbps if unit == "gbps" else link.mbps
