"""A switch's table as plain data, and the smallest change that turns one table into another.

The controller never "reprograms" a switch by wiping it: that would drop
traffic. Instead it keeps, per switch, the ``Table`` it wants (groups and flow
entries, as hashable values), and ``diff`` compares it with the table the switch
has (what the controller installed before, or what it read back after a
restart) and yields only the differences, in an order that never leaves a
packet without a rule (make before break):

1. groups are created or replaced in place (OVS's ``add_or_mod`` group command,
   so a group that may or may not exist after a controller restart is simply
   (re)defined; buckets are swapped atomically);
2. flow entries are added or replaced (``OFPFC_ADD`` with the same match and
   priority replaces an entry's actions atomically);
3. entries that are no longer wanted are removed one by one (strict delete);
4. groups nothing points to any more are deleted.

This module is plain data and never imports os-ken: ``controllers.shell.ofmsgs.messages``
turns ``Changes`` into the OpenFlow messages, in that order.

Group ids are kept stable: a group with the same kind and ports keeps its id
from one table to the next, and a *new* group never reuses an id the previous
table used, so no in-flight entry ever points at a group that changed meaning.

Two kinds of rules exist. *Routes* (``controllers.routing``) match a destination
and spread over equal-cost ports with a select group (ECMP). *Pins* (planned and
adaptive modes) match one transport flow exactly and send it out of the port its
assigned path names, through a fast-failover group whose later buckets are the
other equal-cost ports, so a failed link is still skipped by the switch alone.

*Probe lanes* (``vocab.lanemark``): a host-facing switch holds one entry per lane slot
above its routes, matching the probe streams' destination ports and the slot's bits of
the source port, whose failover group starts with the slot's uplink: the prober, not the
hash, picks the lane. A route that lost an uplink gets entries of its own above those,
which spread that slot over the ports it has left.

*Lane marks* (``vocab.lanemark``): on a host-facing switch, every IPv4 decision that
leaves by one of its uplinks sets the IPv4 TTL to that uplink's mark before the output,
so a receiver can name the lane an ECMP-hashed flow took. ``build_table`` takes the
switch's marks (port -> TTL): a single-port IPv4 route or pin becomes
``("set_nw_ttl", ttl), ("output", port)``, and a group's buckets carry their marks in
``GroupSpec.marks``. ARP entries and their groups never carry one (OVS refuses
``set_nw_ttl`` on an entry that does not match IP), and since the marks are part of a
group's content, an ARP group never shares an id with a marked IPv4 group.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controllers.routing import PRIO_MISS, Route
from vocab.flows import PROTOS, Flow
from vocab.lanemark import PROBE_DPORT, PROBE_DPORT_MASK, lane_match, lane_slots

ETH_IPV4 = 0x0800
ETH_ARP = 0x0806

#: Every entry carries a cookie saying who made it: routes, per-flow pins, or probe lanes.
COOKIE_ROUTE = 0xA5700001
COOKIE_PIN = 0xA5700002
COOKIE_PROBE = 0xA5700003
#: What each of them made, as ``GET /flows`` says it (any other cookie: ``foreign``).
COOKIE_KINDS = {COOKIE_ROUTE: "route", COOKIE_PIN: "pin", COOKIE_PROBE: "probe-lane"}
#: The controller owns the entries with its cookies; an entry with any other cookie is
#: another agent's (an operator's rule, an injected fault) and is left alone.
OWN_COOKIES = frozenset(COOKIE_KINDS)
#: Pins sit above the ECMP routes and below local delivery (see ``routing``).
PRIO_PIN = 250

#: Select (ECMP) groups are numbered from 1, fast-failover groups from here.
FF_GROUP_BASE = 0x10000
_ID_RANGES = {"select": (1, FF_GROUP_BASE), "ff": (FF_GROUP_BASE, 0xFFFFFF00)}

#: How a select (ECMP) group picks its bucket on OpenFlow 1.5 (``controllers.shell.ofmsgs``):
#: ``dp_hash`` in the datapath, or ``hash`` over the group's fields.
SELECT_METHODS = ("dp_hash", "hash")
DEFAULT_SELECT_METHOD = "dp_hash"

#: OVS extension: "create the group if it does not exist, otherwise modify it".
OFPGC_ADD_OR_MOD = 0x8000

Match = tuple[tuple[str, Any], ...]  # sorted (field, value or (value, mask)) pairs
Action = tuple[str, int]  # ("output", port) | ("group", group id) | ("set_nw_ttl", ttl)


@dataclass(frozen=True)
class GroupSpec:
    """A group by content: ``select`` spreads over ``ports``; ``ff`` takes the first live one.

    ``marks`` is, per bucket, the IPv4 TTL the bucket sets before its output (None: it
    sets none), or empty when no bucket sets one. It is part of the group's identity, so
    a marked IPv4 group and an unmarked ARP group over the same ports stay two groups.
    """

    kind: str
    ports: tuple[int, ...]
    marks: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class Entry:
    """One flow entry as data; ``key`` (priority, match) is what OpenFlow identifies it by."""

    priority: int
    match: Match
    actions: tuple[Action, ...]
    cookie: int = COOKIE_ROUTE

    @property
    def key(self) -> tuple[int, Match]:
        return (self.priority, self.match)


@dataclass(frozen=True)
class Pin:
    """At ``switch``, send ``flow`` out of ``ports[0]``; fail over to the later ports in order.

    ``match`` is the flow's exact match (``pin_match``); callers that pin many flows
    compute it once per flow and pass it, since it is the same at every switch.
    """

    switch: str
    flow: Flow
    ports: tuple[int, ...]
    match: Match = ()


@dataclass
class Table:
    """What one switch should hold (or holds): groups by id and entries by key."""

    groups: dict[int, GroupSpec] = field(default_factory=dict)
    entries: dict[tuple[int, Match], Entry] = field(default_factory=dict)

    def group_ids(self) -> dict[GroupSpec, int]:
        return {spec: gid for gid, spec in self.groups.items()}


@dataclass
class Changes:
    """The messages' content, in the order they must be sent (see the module docstring)."""

    groups_set: list[tuple[int, GroupSpec]] = field(default_factory=list)
    entries_set: list[Entry] = field(default_factory=list)
    entries_del: list[Entry] = field(default_factory=list)
    groups_del: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return (len(self.groups_set) + len(self.entries_set) + len(self.entries_del)
                + len(self.groups_del))


def canon_match(items: Iterable[tuple[str, Any]]) -> Match:
    """Sorted match fields; a mask of all ones is the same as no mask (OVS reports it so)."""
    out = []
    for name, value in items:
        if isinstance(value, tuple) and value[1] in ("255.255.255.255", 0xFFFF, 0xFFFFFFFF):
            value = value[0]
        out.append((name, value))
    return tuple(sorted(out))


def route_matches(route: Route) -> tuple[Match, Match]:
    """The two matches of a route: IPv4 by destination and ARP by target address."""
    dst: Any = route.value if route.mask == "255.255.255.255" else (route.value, route.mask)
    return (canon_match([("eth_type", ETH_IPV4), ("ipv4_dst", dst)]),
            canon_match([("eth_type", ETH_ARP), ("arp_tpa", dst)]))


def pin_match(flow: Flow, ip_of: Mapping[str, str]) -> Match:
    """Exact 5-tuple match of one flow (OVS requires ``ip_proto`` before transport ports)."""
    proto = flow.proto
    return canon_match([("eth_type", ETH_IPV4), ("ip_proto", PROTOS[proto]),
                        ("ipv4_src", ip_of[flow.src]), ("ipv4_dst", ip_of[flow.dst]),
                        (f"{proto}_src", flow.sport), (f"{proto}_dst", flow.dport)])


def build_table(routes: list[Route], pins: Iterable[Pin] = (),
                ip_of: Mapping[str, str] | None = None,
                previous: Table | None = None,
                marks: Mapping[int, int] | None = None) -> Table:
    """The table for one switch: routes, then pins, then the table-miss drop.

    IPv4 routes with several ports take a select group (ECMP). ARP routes take a
    fast-failover group over the same ports, rotated per destination so ARP
    spreads too: ARP needs no per-flow hash, and a failover group lets OVS cache
    one datapath flow per destination rather than per host pair. Group ids are
    reused from ``previous`` for identical groups (see ``_allocate``).

    ``marks`` are the switch's lane marks (port -> TTL, ``vocab.lanemark``): every IPv4
    route or pin leaving by a marked port sets the TTL first, per bucket in a group,
    so the mark names the port the packet really took even after the group skipped a
    dead one. ARP is never marked.
    """
    marks = marks or {}
    wanted: dict[GroupSpec, None] = {}  # insertion-ordered set
    # priority, match, (spec of the group to use | the actions themselves), cookie
    pending: list[tuple[int, Match, GroupSpec | tuple[Action, ...], int]] = []
    ttls_of: dict[tuple[int, ...], tuple[int | None, ...]] = {}  # pins share port tuples

    def via(ports: tuple[int, ...], kind: str, marked: bool) -> GroupSpec | tuple[Action, ...]:
        ttls: tuple[int | None, ...] = ()
        if marked and marks:
            got = ttls_of.get(ports)
            if got is None:
                got = tuple(marks.get(p) for p in ports)
                if all(t is None for t in got):
                    got = ()  # no bucket marks: the same group as an unmarked one
                ttls_of[ports] = got
            ttls = got
        if len(ports) == 1:
            out: Action = ("output", ports[0])
            if ttls and ttls[0] is not None:
                return (("set_nw_ttl", ttls[0]), out)
            return (out,)
        spec = GroupSpec(kind, ports, ttls)
        wanted.setdefault(spec)
        return spec

    for route in routes:
        ip_match, arp_match = route_matches(route)
        pending.append((route.priority, ip_match, via(route.ports, "select", True),
                        COOKIE_ROUTE))
        shift = zlib.crc32(route.dest.encode()) % len(route.ports)
        order = route.ports[shift:] + route.ports[:shift]
        pending.append((route.priority, arp_match, via(order, "ff", False), COOKIE_ROUTE))
    pending.extend(_probe_lanes(routes, marks, via))
    for pin in pins:
        match = pin.match
        if not match:
            if ip_of is None:
                raise ValueError("pins without a match need ip_of (host name -> IP)")
            match = pin_match(pin.flow, ip_of)
        pending.append((PRIO_PIN, match, via(pin.ports, "ff", True), COOKIE_PIN))

    ids = _allocate(list(wanted), previous)
    table = Table(groups={ids[s]: s for s in wanted})
    for priority, match, out, cookie in pending:
        actions = (("group", ids[out]),) if isinstance(out, GroupSpec) else out
        entry = Entry(priority, match, actions, cookie)
        table.entries[entry.key] = entry
    miss = Entry(PRIO_MISS, (), ())
    table.entries[miss.key] = miss
    return table


def _probe_lanes(routes: list[Route], marks: Mapping[int, int],
                 via: Any) -> list[tuple[int, Match, GroupSpec | tuple[Action, ...], int]]:
    """The probe-lane entries of a switch (see the module docstring): one per lane slot
    for every destination its routes reach over all its marked uplinks, and one per slot
    above those for each route over some of them only (it lost one), so a probe never
    goes up a lane from which its destination is not reached. Slot ``k`` goes out of
    the uplink of rank ``k % uplinks`` (ranked by mark), or, when the route lacks that
    one, out of its port ``k % ports``; the later ports of the failover group are the
    route's others, so a dead first port is skipped by the switch alone."""
    ranked = sorted(marks, key=marks.__getitem__)
    if len(ranked) < 2:
        return []
    slots = lane_slots(len(ranked))
    block = (("eth_type", ETH_IPV4), ("ip_proto", PROTOS["udp"]),
             ("udp_dst", (PROBE_DPORT, PROBE_DPORT_MASK)))
    out = []

    def add(priority: int, where: tuple[tuple[str, Any], ...], ports: tuple[int, ...]) -> None:
        for k in range(slots):
            first = ranked[k % len(ranked)]
            if first not in ports:
                first = ports[k % len(ports)]
            order = (first,) + tuple(p for p in ports if p != first)
            match = canon_match(block + where + (("udp_src", lane_match(k, slots)),))
            out.append((priority, match, via(order, "ff", True), COOKIE_PROBE))

    whole = set(ranked)
    if any(set(r.ports) == whole for r in routes):
        add(PRIO_PIN - 1, (), tuple(ranked))
    for route in routes:
        if len(route.ports) > 1 and whole > set(route.ports):
            dst = next(f for f in route_matches(route)[0] if f[0] == "ipv4_dst")
            add(PRIO_PIN, (dst,), route.ports)
    return out


def _allocate(wanted: list[GroupSpec], previous: Table | None) -> dict[GroupSpec, int]:
    """Ids for ``wanted``: the previous id for an identical group, else a never-used one."""
    before = previous.group_ids() if previous else {}
    taken = set(previous.groups) if previous else set()
    ids: dict[GroupSpec, int] = {}
    for spec in wanted:
        if spec in before:
            ids[spec] = before[spec]
    used = taken | set(ids.values())
    nxt = {kind: lo for kind, (lo, _hi) in _ID_RANGES.items()}
    for spec in wanted:
        if spec in ids:
            continue
        lo, hi = _ID_RANGES[spec.kind]
        gid = nxt[spec.kind]
        while gid in used and gid < hi:
            gid += 1
        if gid >= hi:  # ranges exhausted by history: fall back to ids free in this table
            gid = next(g for g in range(lo, hi) if g not in set(ids.values()))
        ids[spec] = gid
        used.add(gid)
        nxt[spec.kind] = gid + 1
    return ids


def diff(have: Table | None, want: Table, *, have_groups_known: bool = True) -> Changes:
    """What to send so a switch holding ``have`` ends up holding ``want`` (make before break).

    ``have=None`` means an empty switch. With ``have_groups_known=False`` (entries
    read back from a switch whose group contents cannot be read) every wanted
    group is (re)defined, which is harmless: ``add_or_mod`` replaces buckets
    atomically.
    """
    have = have or Table()
    ch = Changes()
    for gid, spec in sorted(want.groups.items()):
        if not have_groups_known or have.groups.get(gid) != spec:
            ch.groups_set.append((gid, spec))
    for key, entry in want.entries.items():
        if have.entries.get(key) != entry:
            ch.entries_set.append(entry)
    ch.entries_del = [e for k, e in have.entries.items() if k not in want.entries]
    ch.groups_del = sorted(g for g in have.groups if g not in want.groups)
    return ch


def infer_groups(read_back: Mapping[tuple[int, Match], Entry], want: Table) -> Table:
    """A best guess of the groups a switch holds, from entries read back after a restart.

    OpenFlow 1.5 group descriptions from OVS cannot be parsed by os-ken, so after
    a controller restart we only see entries. Where a read-back entry has the same
    key as a wanted one and points at a group, that group most likely has the
    wanted content; reusing its id means unchanged state yields no changes.
    """
    guess: dict[int, GroupSpec] = {}
    conflict: set[int] = set()
    want_by_id = want.groups
    for key, entry in read_back.items():
        target = want.entries.get(key)
        if target is None:
            continue
        gid, t_gid = _group_of(entry.actions), _group_of(target.actions)
        if gid is None or t_gid is None:
            continue
        spec = want_by_id[t_gid]
        if guess.get(gid, spec) != spec:
            conflict.add(gid)
        guess[gid] = spec
    return Table(groups={g: s for g, s in guess.items() if g not in conflict},
                 entries=dict(read_back))


def _group_of(actions: tuple[Action, ...]) -> int | None:
    """The group an entry's actions send to (None: they output directly, or drop)."""
    return next((arg for kind, arg in actions if kind == "group"), None)


def action_of(act: Any) -> Action:
    """An os-ken action as ``("output", port)`` / ``("group", id)`` / ``("set_nw_ttl",
    ttl)``; anything else as ``(class name, 0)``, which never equals one of ours.

    The lane marks' TTL action must read back as what was sent, or every marked entry
    would look changed to a controller resyncing a switch and be rewritten."""
    name = type(act).__name__
    if name == "OFPActionOutput":
        return ("output", act.port)
    if name == "OFPActionGroup":
        return ("group", act.group_id)
    if name == "OFPActionSetNwTtl":
        return ("set_nw_ttl", act.nw_ttl)
    return (name, 0)


def instruction_actions(instructions: Any) -> list[Action]:
    """The actions of a flow's instructions, in order (``action_of`` each)."""
    return [action_of(act) for inst in instructions or []
            for act in getattr(inst, "actions", []) or []]


def entry_from_stats(stat: Any) -> Entry:
    """An ``Entry`` from an os-ken flow-stats / flow-desc body item (read back from a switch).

    A foreign action is kept as ``(name, 0)``: never equal to ours, so the entry is replaced.
    """
    return Entry(stat.priority, canon_match(stat.match.items()),
                 tuple(instruction_actions(getattr(stat, "instructions", []))), stat.cookie)


def stat_counter(stat: Any, name: str) -> int | None:
    """``packet_count``/``byte_count`` of a flow-stats entry; OpenFlow 1.5 keeps them in OXS."""
    if hasattr(stat, name):
        return int(getattr(stat, name))
    stats = getattr(stat, "stats", None)
    return int(stats.get(name, 0)) if stats is not None else None
