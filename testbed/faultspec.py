"""Faults as plain data: what breaks, where and when, for any kind.

Everything here is pure (no root, no commands run; unit-tested): ``Fault`` and its
validation, target names resolved against a wiring plan (``parse_target``, ``resolve``,
``canonical_component``), where a link fault acts (``link_ends``, ``sending_ends``) and
seeded ``random_schedule``s. Nothing here is one kind's: the kinds are the modules of
``testbed.faultkinds`` (``KINDS``, ``TARGET_KIND`` and each kind's own rules, knobs and
commands come from there), so a new kind module is a valid ``Fault`` kind here with no
edit to this file. ``testbed.shell.faults`` applies faults to a running lab.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import (
    FAULT_KINDS,
    LINK_DIRECTIONS,
    MIXED,
    SCHEDULE_SEVERITIES,
    number,
    whole,
)
from vocab.plan import Link, WiringPlan
from vocab.plugins import unknown

__all__ = [
    "CONTROLLER", "KINDS", "TARGET_KIND", "Fault", "Target", "canonical_component",
    "fabric_part", "leaf_switches", "link_ends", "link_name", "parallel_links", "parse_target",
    "random_schedule", "resolve", "schedule_kinds", "sending_ends", "traffic_links",
]

#: Every kind (``testbed.faultkinds``: one module each), in listing order.
_KINDS = FAULT_KINDS.all()
KINDS = tuple(_KINDS)
#: What each kind's ``target`` must name.
TARGET_KIND = {name: kind.target for name, kind in _KINDS.items()}
CONTROLLER = "controller"



# ----------------------------------------------------------------------------------------
# Fault descriptions (plain data) and their names
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True, init=False)
class Fault:
    """One fault: what, where, when, and the settings of its kind.

    ``target`` uses the wiring plan's names: a link ``a~b`` or ``a~b#k`` (k = which of
    several parallel cables between a and b, in plan order, as ``Lab.set_link``'s
    ``lane``), a switch, a host (its NIC), or ``controller``. ``at`` is seconds after
    the start of a schedule (``inject`` applies a fault at once and ignores it);
    ``duration`` is seconds until it is undone (None: until ``undo``); a kind may say
    otherwise (its ``span``: a flap lasts its phases and takes no duration).

    ``settings`` holds the knobs of the kind, declared by its module (``SETTINGS``, a
    dataclass with their defaults). Give them as keywords (``Fault(kind, target,
    fraction=0.25)``); each is checked by its kind, and a knob the kind does not have is
    refused, naming the ones it has.
    """

    kind: str
    target: str = ""
    at: float = 0.0
    duration: float | None = None
    settings: Any = None

    def __init__(self, kind: str, target: str = "", at: float = 0.0,
                 duration: float | None = None, settings: Any = None, **knobs: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind: {unknown('fault kind', kind, KINDS)}")
        spec = _KINDS[kind]
        if TARGET_KIND[kind] == CONTROLLER:
            if target not in ("", CONTROLLER):
                raise ValueError(f"target of {kind} must be 'controller' (got {target!r})")
            target = CONTROLLER
        elif not isinstance(target, str) or not target:
            raise ValueError(f"target: {kind} needs a {TARGET_KIND[kind]} name")
        number("at", at, low=0.0)
        if duration is not None:
            number("duration", duration, low=0.0)
        if settings is not None:  # another fault's settings, knobs laid over (``replace``)
            knobs = {**dataclasses.asdict(settings), **knobs}
        for name, value in (("kind", kind), ("target", target), ("at", at),
                            ("duration", duration), ("settings", spec.settings(knobs))):
            object.__setattr__(self, name, value)
        spec.validate(self)

    @property
    def span(self) -> float | None:
        """Seconds from injection to undo (None: open-ended, until ``undo``)."""
        return _KINDS[self.kind].span(self)

    @property
    def end(self) -> float | None:
        """Schedule time when the fault is undone (None: open-ended)."""
        span = self.span
        return None if span is None else self.at + span

    @property
    def component(self) -> str:
        """The ground-truth component a diagnosis should name.

        Links read ``a~b#k`` (``#0`` added when the target gives no cable index),
        switches and hosts their own name, controller faults ``controller``. Exact
        for a target ``resolve`` returned (plan order of ``a`` and ``b``); use
        ``canonical_component`` to compare any other spelling.
        """
        if TARGET_KIND[self.kind] == "link" and "#" not in self.target:
            return f"{self.target}#0"
        return self.target

    def to_dict(self) -> dict[str, Any]:
        """The fault as flat JSON-able data: its fields and its kind's settings."""
        return {"kind": self.kind, "target": self.target, "at": self.at,
                "duration": self.duration, **dataclasses.asdict(self.settings)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        """A fault from ``to_dict``'s data; a ValueError naming any field it does not know."""
        knobs = _KINDS[data["kind"]].knobs if data.get("kind") in _KINDS else ()
        known = {"kind", "target", "at", "duration", *knobs}
        extra = sorted(set(data) - known)
        if extra:
            raise ValueError(f"unknown fault field(s) {', '.join(extra)}; known: "
                             f"{', '.join(sorted(known))}")
        return cls(**data)


@dataclass(frozen=True)
class Target:
    """A fault target resolved against a plan. ``name`` is the canonical component."""

    kind: str  # "link", "switch", "host" or "controller"
    name: str
    link: Link | None = None
    lane: int = 0  # index among the parallel cables between link.a and link.b (plan order)


_INTF = re.compile(r"^(?P<node>.+)-eth(?P<port>\d+)$")


def parallel_links(plan: WiringPlan, a: str, b: str) -> list[Link]:
    """The plan's cables between two nodes, in plan order (``Lab.links_between`` order)."""
    return [ln for ln in plan.links if {ln.a, ln.b} == {a, b}]


def link_name(plan: WiringPlan, link: Link) -> str:
    """Canonical name of a plan link: ``a~b#k`` with the plan's (lower tier first) order."""
    return f"{link.a}~{link.b}#{parallel_links(plan, link.a, link.b).index(link)}"


def parse_target(plan: WiringPlan, text: str) -> Target:
    """Resolve a target name against ``plan``; ``ValueError`` naming ``target`` if unknown.

    Accepted: ``controller``; a node name (host or switch); a link ``a~b`` or ``a~b#k``
    in either order (``#k`` may be left out only where a single cable joins a and b);
    an interface name ``node-ethN`` (the link through that port).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"target must be a non-empty name (got {text!r})")
    text = text.strip()
    if text == CONTROLLER:
        return Target(CONTROLLER, CONTROLLER)
    names = {n.name: n for n in plan.nodes}
    if "~" in text:
        pair, _, lane_text = text.partition("#")
        a, _, b = pair.partition("~")
        for end in (a, b):
            if end not in names:
                raise ValueError(f"target {text!r}: no node {end!r} in the plan")
        cables = parallel_links(plan, a, b)
        if not cables:
            raise ValueError(f"target {text!r}: no link between {a} and {b} in the plan")
        if lane_text:
            if not lane_text.isdigit() or int(lane_text) >= len(cables):
                raise ValueError(f"target {text!r}: cable index must be 0..{len(cables) - 1} "
                                 f"({len(cables)} cable(s) join {a} and {b})")
            lane = int(lane_text)
        elif len(cables) == 1:
            lane = 0
        else:
            raise ValueError(f"target {text!r}: {len(cables)} cables join {a} and {b}; name "
                             f"one as {cables[0].a}~{cables[0].b}#0 .. #{len(cables) - 1}")
        link = cables[lane]
        return Target("link", f"{link.a}~{link.b}#{lane}", link, lane)
    if text in names:
        node = names[text]
        return Target("host" if node.kind == "host" else "switch", node.name)
    m = _INTF.match(text)
    if m and m["node"] in names:
        peer = plan.ports()[m["node"]].get(int(m["port"]))
        if peer is None:
            raise ValueError(f"target {text!r}: {m['node']} has no port {m['port']}")
        link = peer[2]
        lane = parallel_links(plan, link.a, link.b).index(link)
        return Target("link", f"{link.a}~{link.b}#{lane}", link, lane)
    example = plan.hosts[0].name if plan.hosts else "s0g0"
    raise ValueError(f"target {text!r} is not in the plan: name a host ({example}), a switch, "
                     "a link a~b[#k], an interface node-ethN, or 'controller'")


def resolve(plan: WiringPlan, fault: Fault) -> Fault:
    """``fault`` with its target checked against ``plan`` and written canonically.

    Raises ``ValueError`` naming ``target`` when the name is unknown or names the
    wrong kind of thing (e.g. a host for switch-down), or when the kind's ``check_plan``
    says the plan cannot carry it (a hot receiver needs senders on other servers). Pure.
    """
    want = TARGET_KIND[fault.kind]
    target = parse_target(plan, fault.target)
    if target.kind != want:
        raise ValueError(f"target {fault.target!r} is a {target.kind}; {fault.kind} needs a "
                         f"{want} ({_example(plan, want)})")
    resolved = dataclasses.replace(fault, target=target.name)
    _KINDS[fault.kind].check_plan(plan, resolved)
    return resolved


def canonical_component(plan: WiringPlan, name: str) -> str:
    """Any spelling of a component (``spine2~lf0r1``, ``lf0r1-eth5``, ``s1g3``) -> its
    canonical name, so an answer can be compared with ``Fault.component``. Pure."""
    return parse_target(plan, name).name


def _example(plan: WiringPlan, kind: str) -> str:
    if kind == "link":
        lanes = traffic_links(plan) or plan.links
        return f"e.g. {link_name(plan, lanes[0])}" if lanes else "a~b"
    if kind == "host":
        return f"e.g. {plan.hosts[0].name}"
    if kind == "switch":
        return f"e.g. {plan.switches[0].name}"
    return CONTROLLER


# ----------------------------------------------------------------------------------------
# Where a link fault acts (each kind's commands are its own: ``testbed/faultkinds/<name>.py``)
# ----------------------------------------------------------------------------------------
def link_ends(plan: WiringPlan, link: Link) -> list[tuple[str, str, bool]]:
    """``(node, interface, in a host namespace?)`` for both ends of ``link``."""
    hosts = {h.name for h in plan.hosts}
    return [(link.a, link.a_intf, link.a in hosts), (link.b, link.b_intf, link.b in hosts)]


def sending_ends(plan: WiringPlan, link: Link, direction: str = "both"
                 ) -> list[tuple[str, str, str, bool]]:
    """``(way, node, interface, in a host namespace?)`` of the ends of ``link`` that send
    frames ``direction``: a frame going a->b leaves through a's interface, so a link fault
    acts there, at the egress hook, before the frame is on the wire."""
    if direction not in LINK_DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(LINK_DIRECTIONS)} "
                         f"(got {direction!r})")
    a, b = link_ends(plan, link)
    ends = [("a-to-b", *a), ("b-to-a", *b)]
    return [e for e in ends if direction in (e[0], "both")]


# ----------------------------------------------------------------------------------------
# Random schedules for evaluations
# ----------------------------------------------------------------------------------------
def traffic_links(plan: WiringPlan) -> list[Link]:
    """Switch-to-switch links that carry fabric traffic (astral3 lanes, other designs'
    uplinks); NIC and NVLink cables are left out."""
    return [ln for ln in plan.links if ln.kind in ("lane", "uplink")]


def leaf_switches(plan: WiringPlan) -> list[str]:
    """Switches the GPU NICs attach to (leaf, ToR, edge)."""
    return [s.name for s in plan.switches if s.tier in ("leaf", "tor", "edge")]


def schedule_kinds(kinds: Iterable[str] | None = None, severity: str = "hard") -> list[str]:
    """The kinds a schedule of ``severity`` draws: ``kinds`` checked, or (None) every kind
    that declares ``severity`` (``mixed``: every kind). A ValueError starting with
    ``severity`` or ``kinds`` names what is wrong: an unknown kind, or kinds that have no
    ``severity`` draw. Pure."""
    if severity not in SCHEDULE_SEVERITIES:
        raise ValueError(f"severity must be one of {', '.join(SCHEDULE_SEVERITIES)} "
                         f"(got {severity!r})")
    if kinds is None:
        return [k for k in KINDS if severity == MIXED or severity in _KINDS[k].severities]
    kinds = list(kinds)
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"kinds: {unknown('fault kind', k, KINDS)}")
    lacking = [k for k in kinds if severity != MIXED and severity not in _KINDS[k].severities]
    if lacking:
        able = [k for k in KINDS if severity in _KINDS[k].severities]
        raise ValueError(f"kinds: {', '.join(lacking)} {'has' if len(lacking) == 1 else 'have'}"
                         f" no {severity} faults (kinds with {severity} faults: "
                         f"{', '.join(able) or 'none'}; severity mixed takes every kind)")
    return kinds


def fabric_part(plan: WiringPlan, fault: Fault) -> frozenset[str]:
    """The part of the fabric ``fault`` touches: the switches whose ports it changes or
    whose queues show it. Pure.

    A link: its switch ends (a leaf-spine lane both, a NIC cable its leaf); a switch:
    itself; a host (its NIC): the switch its NIC is cabled to; the controller:
    ``{"controller"}``, a part of its own. Two faults with disjoint parts are in
    different parts of the fabric (``random_schedule``'s ``concurrent``). A switch-down's
    neighbours see their ports toward it go down too, but counting them would tie every
    leaf to every spine of a leaf-spine fabric, so a switch's part is the switch.
    """
    return _part(plan, TARGET_KIND[fault.kind], fault.target)


def _part(plan: WiringPlan, target_kind: str, target: str) -> frozenset[str]:
    switches = {s.name for s in plan.switches}
    if target_kind == CONTROLLER:
        return frozenset({CONTROLLER})
    if target_kind == "switch":
        return frozenset({target})
    if target_kind == "host":
        return frozenset(ln.b if ln.a == target else ln.a for ln in plan.links
                         if target in (ln.a, ln.b) and {ln.a, ln.b} - {target} <= switches)
    link = parse_target(plan, target).link
    assert link is not None
    return frozenset({link.a, link.b} & switches)


def _disjoint_targets(group: Sequence[str], pools: dict[str, list[str]],
                      parts: dict[str, frozenset[str]], rng: random.Random | None
                      ) -> list[str] | None:
    """One target for each kind of ``group``, their parts pairwise disjoint, or None when
    there is no such choice. Seeded choices with ``rng``; without, the first choice found."""
    def search(i: int, used: frozenset[str]) -> list[str] | None:
        if i == len(group):
            return []
        free = [t for t in pools[group[i]] if not parts[t] & used]
        if rng is not None:
            rng.shuffle(free)
        for t in free:
            rest = search(i + 1, used | parts[t])
            if rest is not None:
                return [t, *rest]
        return None

    return search(0, frozenset())


def _groups(seq: list[str], size: int, fits: Callable[[list[str]], bool]) -> list[list[str]]:
    """``seq`` (kinds in draw order) cut into groups of ``size`` (the last one smaller when
    ``size`` does not divide it) whose kinds can be placed in different parts at once.

    In order: a group takes the next kinds that fit with it; when the rest cannot fill it,
    a kind is swapped with one of an earlier group. A ValueError when no swap helps."""
    pending, groups = list(seq), []
    sizes = [size] * (len(seq) // size) + ([len(seq) % size] if len(seq) % size else [])
    for want in sizes:
        group = [pending.pop(0)]
        j = 0
        while len(group) < want and j < len(pending):
            if fits([*group, pending[j]]):
                group.append(pending.pop(j))
            else:
                j += 1
        while len(group) < want:
            swap = next(((g, k, j) for g in groups for k in range(len(g))
                         for j in range(len(pending)) if fits([*group, g[k]])
                         and fits([*g[:k], *g[k + 1:], pending[j]])), None)
            if swap is None:
                stuck = sorted({*group, *pending})
                raise ValueError(f"concurrent: cannot place {', '.join(stuck)} with other "
                                 f"faults in different parts of this plan at once (a part: "
                                 "the switches a fault touches, or the controller)")
            g, k, j = swap
            group.append(g[k])
            g[k] = pending.pop(j)
        groups.append(group)
    return groups


def sweep_schedule(plan: WiringPlan, kind: str, rates: Iterable[float], tries: int,
                   slot_s: float, fault_s: float, seed: int = 0) -> list[Fault]:
    """A sweep over ``rates``: ``tries`` faults of ``kind`` (a link kind whose knob is
    ``probability``: gray-loss, corruption) at each rate, each on a lane drawn from
    ``seed`` (never the one before), one per slot of ``slot_s`` seconds (slot i at
    i x slot_s) lasting ``fault_s``; the rates in turn, lowest first. Pure."""
    if TARGET_KIND.get(kind) != "link" or "probability" not in _KINDS[kind].knobs:
        raise ValueError(f"kind: a sweep needs a link kind with a probability (got {kind!r})")
    whole("tries", tries, 1)
    number("fault_s", fault_s, low=0.0, low_open=True)
    if slot_s <= fault_s:
        raise ValueError(f"slot_s ({slot_s:g}) must exceed fault_s ({fault_s:g})")
    lanes = [link_name(plan, ln) for ln in traffic_links(plan)]
    if not lanes:
        raise ValueError("this plan has no lanes to sweep")
    rng = random.Random(seed)
    faults: list[Fault] = []
    for rate in sorted(rates):
        for _ in range(tries):  # never the lane just tried: its recovery is not the next's
            pool = [ln for ln in lanes if not faults or ln != faults[-1].target] or lanes
            faults.append(Fault(kind, rng.choice(pool), at=len(faults) * slot_s,
                                duration=fault_s, probability=rate))
    return faults


def random_schedule(plan: WiringPlan, kinds: Iterable[str] | None = None, n: int = 8,
                    duration_s: float = 120.0, seed: int = 0, min_gap_s: float = 5.0,
                    overlap: bool = False, severity: str = "hard",
                    concurrent: int = 1) -> list[Fault]:
    """``n`` faults within ``duration_s`` seconds, reproducible for a ``seed``. Pure.

    Kinds are spread evenly (a seeded order of ``kinds`` repeated, so counts differ by
    at most one and every kind appears once ``n >= len(kinds)``). Targets: links
    among ``traffic_links`` (leaf-spine lanes), switches among ``leaf_switches``,
    NICs among the hosts. Without ``overlap`` the run is cut into ``n`` equal slots
    and each fault, with its recovery gap of ``min_gap_s``, fits in its own slot, so
    faults never overlap and are ``min_gap_s`` apart. Kind knobs are drawn by each
    kind's ``random_knobs`` for ``severity`` from ranges a detector should see (hard:
    degrade to 10-50%, loss 2-20%, 2-4 flaps; gray: degrade to 50-90%, loss 0.05-1%, a
    few irregular flaps); a kind's ``random_targets`` may narrow its pool (a hot
    receiver needs a plan with GPUs on two servers).

    ``severity`` ``gray`` or ``hard`` draws only kinds declaring it (``kinds`` None: all
    of them that have a target on ``plan``; a listed kind without it, or without a
    target, is an error, ``schedule_kinds``); ``mixed`` draws
    each fault's severity from what its kind declares. ``concurrent`` > 1 places the
    faults in groups of that many (the last smaller when it does not divide ``n``), one
    group per slot: the faults of a group overlap in time (each covers the middle fifth
    of the slot's room), their targets lie in different parts of the fabric
    (``fabric_part``: disjoint sets of switches, the controller a part of its own), so
    never two on one component. ``concurrent`` 1 with ``severity`` hard draws what this
    function drew before either existed, for the same seed.
    """
    every = kinds is None
    kinds = schedule_kinds(kinds, severity)
    if not kinds:
        raise ValueError("kinds must name at least one kind")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1 (got {n!r})")
    number("duration_s", duration_s, low=0.0, low_open=True)
    number("min_gap_s", min_gap_s, low=0.0)
    whole("concurrent", concurrent, 1)
    if concurrent > 1 and overlap:
        raise ValueError("concurrent: faults overlap within their group already; "
                         "overlap=True places faults anywhere and cannot keep groups apart")
    slot = duration_s / math.ceil(n / concurrent)
    room = slot - min_gap_s
    if not overlap and room < 1.0:
        each = "each" if concurrent == 1 else f"each group of {concurrent}"
        raise ValueError(f"duration_s={duration_s:g} is too short for n={n} faults with "
                         f"min_gap_s={min_gap_s:g}: {each} needs >= {min_gap_s + 1:g} s")
    rng = random.Random(seed)
    by_target = {"link": [link_name(plan, ln) for ln in traffic_links(plan)],
                 "switch": leaf_switches(plan), "host": [h.name for h in plan.hosts],
                 CONTROLLER: [CONTROLLER]}
    pools = {k: _KINDS[k].random_targets(plan, by_target[TARGET_KIND[k]])
             for k in dict.fromkeys(kinds)}
    if every:  # every kind this plan can carry (a shuffle-miswiring needs shuffled lanes)
        kinds = [k for k in kinds if pools[k]]
    for k in kinds:
        if not pools[k]:
            raise ValueError(f"kinds: this plan has no target for {k}")
    order = kinds[:]
    rng.shuffle(order)
    seq = [order[i % len(order)] for i in range(n)]
    if concurrent == 1:
        groups = [[k] for k in seq]
    else:
        parts = {t: _part(plan, TARGET_KIND[k], t) for k in pools for t in pools[k]}
        fit_cache: dict[tuple[str, ...], bool] = {}

        def fits(group: list[str]) -> bool:
            key = tuple(sorted(group))
            if key not in fit_cache:
                fit_cache[key] = _disjoint_targets(key, pools, parts, None) is not None
            return fit_cache[key]

        groups = _groups(seq, concurrent, fits)
    faults = []
    for i, group in enumerate(groups):
        if concurrent == 1:
            targets = [rng.choice(pools[group[0]])]
        else:
            found = _disjoint_targets(group, pools, parts, rng)
            assert found is not None  # _groups kept only groups that fit
            targets = found
        for kind, target in zip(group, targets, strict=True):
            if concurrent == 1:
                span = rng.uniform(0.5, 1.0) * (room if not overlap else
                                                min(slot, duration_s / 2))
                span = max(span, 0.5)
                if overlap:
                    at = rng.uniform(0.0, max(0.0, duration_s - span))
                else:
                    at = i * slot + rng.uniform(0.0, room - span)
            else:  # every fault of the group covers [0.4, 0.6] x room of the slot
                span = rng.uniform(0.6, 1.0) * room
                at = i * slot + rng.uniform(0.0, room - span)
            sev = rng.choice(_KINDS[kind].severities) if severity == MIXED else severity
            knobs = {"duration": round(span, 3), **_KINDS[kind].random_knobs(rng, span, sev)}
            faults.append(Fault(kind, target, at=round(at, 3), **knobs))
    return sorted(faults, key=lambda f: f.at)
