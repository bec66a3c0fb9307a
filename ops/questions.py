"""Interactive diagnosis, scored: operators' questions asked while a fault is live.

``ops.evaluate`` scores the agent's answer to one question ("what is wrong?"). An operator
asks more: "is spine2 healthy?", "which lanes drop packets?", "is the controller up?",
"is the wiring as planned?". This module turns the injection log's ground truth (which
fault kind, on which component, live at the moment asked: ``ops.evaluate.GroundTruth``)
into such questions with their right answers, asks them through the agent's tools, and
scores each answer. Pure: the experiment (``ops.shell.experiment``) asks them on a live
fabric, the unit tests on synthetic telemetry.

**A question** (``Question``) carries ``accept``: the components (or, for a few
questions, the words) a right answer names *first*; empty means the right answer is
"nothing is wrong" / "none" / "yes, healthy". Every template yields both kinds when it
can: about the live fault's component, and about a component far from every live (and
recently repaired) fault, so an agent that blames everything scores badly.

**An answer** (``Answer``) is what the agent names, best first, read from its tools the
way an operator would read them: for most questions the deterministic planner's ranking
(``ops.agent.diagnose``) restricted to what the question asks about (the suspects at or
inside the asked switch, the lanes, the NICs ...), keeping suspects scored at least
``BLAME_SCORE`` (an active alert of any detector; an alert cleared a while ago only
when it names the asked component); for direct tool questions the tool itself (active
alerts of one detector, the controller's ``up`` counter, the wiring check).

**Scoring** (``grade``): a question whose ``accept`` is empty is answered right when the
agent names nothing; otherwise when the first thing it names is in ``accept`` (names
compared with ``ops.telemetry.canonical``, so a NIC's cable is the NIC), and, for "since
when", when the time it gives is within ``SINCE_TOLERANCE_S`` of the injection. An
answer the tools could not give (no wiring check here, a tool error) is wrong.
Questions a fault makes ambiguous (is a lane "dropping packets" while its switch is
down?) are not asked: a template yields nothing then.

**A new question** is one function decorated with ``@template(name, about)``: it gets
the ``Scene`` (plan, live faults, the job's host pairs, a seeded ``rng``) and returns the
questions it can ask now, each made with ``Scene.ask``. Kind sets (``which``) cover
the "which X ...?" questions: the kinds whose component is the answer and the kinds
under which the answer is "none". No template names a kind: each set is read off the
kinds' declarations (``testbed.faultkinds``: ``TARGET``, ``EFFECT``, ``INTERMITTENT``,
``affected``) when the question is asked, so a new kind is asked about, or left out of
the questions its fault would make ambiguous, with no edit here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from controllers.paths import PathFinder
from ops.agent import Tools, diagnose
from ops.detectors import alert_kind
from ops.evaluate import GroundTruth
from ops.telemetry import CONTROLLER, canonical
from testbed.faultkinds import FAULT_KINDS, Effect, FaultKind
from vocab.plan import WiringPlan, link_components

#: A suspect counts as the agent blaming it from this score on: every active alert does
#: (the weakest detector weighs 40), an alert cleared a while ago only with the bonus for
#: being the component asked about (``ops.agent``: 0.3 x weight + 15).
BLAME_SCORE = 40.0
#: "Since when?": the time the agent gives is right within this many seconds of injection.
SINCE_TOLERANCE_S = 5.0
#: A fault repaired less than this long ago (``ops.agent.RECENT_S``: its alerts still
#: count, cleared) is neither a healthy nor a faulty subject: no question names it.
RECENT_S = 60.0
#: The words a "what kind of fault" answer uses, by a kind's ``TARGET``.
CLASS_OF_TARGET = {"link": "link", "switch": "switch", "host": "NIC", CONTROLLER: "controller"}
#: What a fault does to traffic when the job can feel it (``Effect``): a crossed lane or a
#: dead controller leaves the job's rate as it was.
FELT = frozenset({Effect.DOWN, Effect.DROPS, Effect.SLOWS})


# --- the kinds, by what they declare ----------------------------------------------------------
def kinds(keep: Callable[[FaultKind], bool]) -> frozenset[str]:
    """The fault kinds ``keep`` accepts (read when asked, so a kind added since counts)."""
    return frozenset(n for n, k in FAULT_KINDS.all().items() if keep(k))


def aimed(target: str) -> frozenset[str]:
    """The kinds whose faults target a ``target`` (link, switch, host, controller)."""
    return kinds(lambda k: k.target == target)


def said(k: FaultKind) -> bool:
    """Whether we know what ``k`` does to traffic: its ``EFFECT``, or it is the controller's
    (traffic does not see it). One that says nothing makes what depends on it ambiguous."""
    return k.effect is not None or k.target == CONTROLLER


def unseen_on_lanes(k: FaultKind) -> bool:
    """Lanes and switches do not show it: the controller's, a NIC's own, a crossed lane."""
    return k.target == CONTROLLER or (said(k) and (k.target == "host"
                                                   or k.effect == Effect.MISROUTES))


# --- questions and answers --------------------------------------------------------------------
@dataclass
class Answer:
    """What the agent names, best first (empty: nothing wrong / none), and how it said it."""

    names: list[str]
    text: str
    since: float | None = None
    error: str | None = None


Reader = Callable[[Tools, "Question"], Answer]


@dataclass(frozen=True)
class Question:
    """One question, its right answer(s) and how the agent answers it (``read``)."""

    template: str
    text: str
    accept: frozenset[str]
    read: Reader = field(compare=False, repr=False)
    since: float | None = None
    job_hosts: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        """True when the right answer is "nothing is wrong"."""
        return not self.accept

    def expected(self) -> str:
        if not self.accept:
            return "nothing wrong / none"
        names = " or ".join(sorted(self.accept))
        if self.since is None:
            return names
        return f"{names}, since {datetime.fromtimestamp(self.since, UTC):%H:%M:%S} UTC"


def grade(q: Question, a: Answer, plan: WiringPlan | None = None) -> tuple[bool, str]:
    """``(correct, reason)`` of answer ``a`` to ``q`` (the rule: module docstring); names
    compare canonically (``plan``: a link's ends in either order, a NIC's cable is the NIC)."""
    if a.error is not None:
        return False, f"no answer: {a.error}"
    if not q.accept:
        if not a.names:
            return True, "rightly said nothing is wrong"
        return False, f"blamed {a.names[0]}, nothing is wrong with it"
    if not a.names:
        return False, f"missed: said nothing is wrong, expected {q.expected()}"
    first = canonical(a.names[0], plan)
    if first not in q.accept:
        return False, f"named {first} first, expected {q.expected()}"
    if q.since is not None:
        if a.since is None:
            return False, f"named {first} but gave no start time"
        off = a.since - q.since
        if abs(off) > SINCE_TOLERANCE_S:
            return False, f"named {first} but its start is {off:+.1f} s off"
    return True, f"named {first} first"


def answer(q: Question, tools: Tools) -> Answer:
    """Ask ``q`` through ``tools``; a failing tool is an answer with an error, not a crash."""
    try:
        return q.read(tools, q)
    except Exception as exc:  # an answer the tools could not give
        return Answer([], "", error=f"{type(exc).__name__}: {exc}")


# --- the fabric, as questions name it -------------------------------------------------------
class Fabric:
    """The plan's names by role: leaves (where NICs attach), spines (the rest), lanes."""

    def __init__(self, plan: WiringPlan) -> None:
        self.plan = plan
        self.links = link_components(plan)
        self.hosts = [h.name for h in plan.hosts]
        host_set = set(self.hosts)
        self.leaf_of = {ln.a: ln.b for ln in self.links.values() if ln.a in host_set}
        self.leaves = sorted(set(self.leaf_of.values()))
        self.spines = sorted(s.name for s in plan.switches if s.name not in self.leaves)
        self.lanes = [c for c, ln in self.links.items()
                      if ln.a not in host_set and ln.b not in host_set]
        self.lane_set = set(self.lanes)
        self.switch_lanes: dict[str, list[str]] = {s.name: [] for s in plan.switches}
        for c in self.lanes:
            for end in (self.links[c].a, self.links[c].b):
                self.switch_lanes[end].append(c)
        self._paths = PathFinder(plan)
        self._on_paths: dict[tuple[str, str], set[str]] = {}

    def ends(self, comp: str) -> tuple[str, str]:
        ln = self.links[comp]
        return ln.a, ln.b

    def near(self, comp: str) -> set[str]:
        """A component and what shares a switch with it: a lane and its two switches, a
        switch and its lanes, a NIC and its leaf."""
        if comp in self.links:
            return {comp, *self.ends(comp)}
        if comp in self.switch_lanes:
            return {comp, *self.switch_lanes[comp]}
        if comp in self.leaf_of:
            return {comp, self.leaf_of[comp]}
        return {comp}

    def on_paths(self, src: str, dst: str) -> set[str]:
        """Every component the plan's paths from ``src`` to ``dst`` cross, switches too."""
        if (src, dst) in self._on_paths:
            return self._on_paths[(src, dst)]
        by_hop = {}
        for c, ln in self.links.items():
            by_hop[(ln.a, ln.a_port)] = by_hop[(ln.b, ln.b_port)] = c
        out = {src, dst}
        for hops in self._paths.paths(src, dst):
            for sw, port in hops:
                out.add(sw)
                if (sw, port) in by_hop:
                    out.add(canonical(by_hop[(sw, port)], self.plan))
        self._on_paths[(src, dst)] = out
        return out

    def category(self, comp: str) -> str:
        """The word a "what kind of fault" answer uses for ``comp``."""
        if comp == CONTROLLER:
            return "controller"
        if comp in self.leaf_of:
            return "NIC"
        if comp in self.switch_lanes:
            return "switch"
        return "link"


_FABRICS: dict[int, Fabric] = {}


def fabric(plan: WiringPlan) -> Fabric:
    """The ``Fabric`` of ``plan``, made once per plan object (readers run per question)."""
    fab = _FABRICS.get(id(plan))
    if fab is None or fab.plan is not plan:
        if len(_FABRICS) > 16:
            _FABRICS.clear()
        fab = _FABRICS[id(plan)] = Fabric(plan)
    return fab


@dataclass
class Scene:
    """What a template sees: the plan, the faults live when asked (and those repaired in
    the last ``RECENT_S``), the job's (src, dst) host pairs and a seeded ``rng``."""

    plan: WiringPlan
    live: list[GroundTruth]
    recent: list[GroundTruth] = field(default_factory=list)
    job_pairs: list[tuple[str, str]] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    @cached_property
    def fab(self) -> Fabric:
        return fabric(self.plan)

    def comp(self, f: GroundTruth) -> str:
        return canonical(f.component, self.plan)

    def live_of(self, kinds: Iterable[str]) -> list[GroundTruth]:
        kinds = set(kinds)
        return [f for f in self.live if f.kind in kinds]

    @cached_property
    def faulty(self) -> set[str]:
        """The components a live or recent fault acts on: its target, a switch's lanes,
        and what its kind says it affects (``affected``: the lanes a miswired lane may be
        crossed with, a hot receiver's leaf lanes)."""
        out: set[str] = set()
        for f in self.live + self.recent:
            c = self.comp(f)
            out.add(c)
            if c in self.fab.switch_lanes:
                out.update(self.fab.switch_lanes[c])
            out.update(self.affected(f))
        return out

    @cached_property
    def touched(self) -> set[str]:
        """``faulty`` and everything that shares a switch with it (a down switch: its
        neighbours too): no question asks whether these are healthy."""
        out: set[str] = set()
        for c in self.faulty:
            out |= self.fab.near(c)
        for f in self.live + self.recent:
            k = FAULT_KINDS.find(f.kind)  # None: a kind this checkout does not have
            if k is not None and k.target == "switch" and k.effect == Effect.DOWN \
                    and self.comp(f) in self.fab.switch_lanes:
                for lane in self.fab.switch_lanes[self.comp(f)]:
                    out.update(self.fab.ends(lane))
        return out

    def far(self, comp: str) -> bool:
        return not self.fab.near(comp) & self.touched

    def affected(self, f: GroundTruth) -> list[str]:
        """The components other than its own a live fault acts on, by its kind."""
        k = FAULT_KINDS.find(f.kind)
        return [] if k is None else [canonical(c, self.plan)
                                     for c in k.affected(self.plan, self.comp(f))]

    def pick(self, candidates: Iterable[str]) -> str | None:
        """One of ``candidates`` (sorted, so the draw depends only on the seed)."""
        pool = sorted(set(candidates))
        return self.rng.choice(pool) if pool else None

    def ask(self, name: str, text: str, accept: Iterable[str], read: Reader, *,
            since: float | None = None, job_hosts: Iterable[str] = ()) -> Question:
        return Question(name, text, frozenset(accept), read, since, tuple(job_hosts))


# --- how the agent answers --------------------------------------------------------------------
Lens = Callable[[Fabric, str], str | None]


def everything(_fab: Fabric, comp: str) -> str | None:
    return comp


def lanes(fab: Fabric, comp: str) -> str | None:
    return comp if comp in fab.lane_set else None


def nics(fab: Fabric, comp: str) -> str | None:
    return comp if comp in fab.leaf_of else None


def switches(fab: Fabric, comp: str) -> str | None:
    return comp if comp in fab.switch_lanes else None


def inside(subject: str) -> Lens:
    """The subject itself, or (a switch) one of its lanes."""
    def lens(fab: Fabric, comp: str) -> str | None:
        return comp if comp == subject or comp in fab.switch_lanes.get(subject, ()) else None
    return lens


def switch_of(tier: str) -> Lens:
    """A switch of ``tier`` ("leaf"/"spine") named by the suspect: itself or a lane's end."""
    def lens(fab: Fabric, comp: str) -> str | None:
        pool = fab.leaves if tier == "leaf" else fab.spines
        if comp in pool:
            return comp
        if comp in fab.lane_set:
            return next((e for e in fab.ends(comp) if e in pool), None)
        return None
    return lens


def on_path(src: str, dst: str) -> Lens:
    """What the plan's paths from ``src`` to ``dst`` cross (the hosts, switches, lanes)."""
    def lens(fab: Fabric, comp: str) -> str | None:
        return comp if comp in fab.on_paths(src, dst) else None
    return lens


def blamed(lens: Lens) -> Reader:
    """The planner's suspects scored >= BLAME_SCORE, seen through ``lens``, best first."""
    def read(tools: Tools, q: Question) -> Answer:
        fab = fabric(tools.plan)
        d = diagnose(tools, q.text, job_hosts=list(q.job_hosts) or None, probe=False)
        names: list[str] = []
        said = []
        for s in d.suspects:
            seen = lens(fab, s.component) if s.score >= BLAME_SCORE else None
            if seen is not None and seen not in names:
                names.append(seen)
                said.append(f"{s.component} ({s.detector}, {s.score:.0f})")
        return Answer(names, "; ".join(said) or "nothing wrong")
    return read


def alerted(*detectors: str, lens: Lens = everything) -> Reader:
    """Components of the active alerts of ``detectors`` (the alerts tool), oldest first."""
    def read(tools: Tools, _q: Question) -> Answer:
        fab = fabric(tools.plan)
        rows = sorted((a for a in tools.call("alerts")
                       if a["detector"] in detectors and a["cleared"] is None),
                      key=lambda a: a["opened"] or a["first_seen"])
        names = list(dict.fromkeys(n for a in rows
                                   if (n := lens(fab, canonical(a["component"], tools.plan)))))
        return Answer(names, ", ".join(f"{a['detector']}: {a['component']}" for a in rows)
                      or f"no active {'/'.join(detectors)} alert")
    return read


def newest_change(tools: Tools, _q: Question) -> Answer:
    """Active alerts opened in the last minute, the first opened first (the cause comes
    before what it sets off); the job's own alert says that, not where."""
    now = tools.now()
    rows = sorted((a for a in tools.call("alerts") if a["cleared"] is None
                   and not _symptom(a["detector"])
                   and now - RECENT_S <= (a["opened"] or a["first_seen"]) <= now),
                  key=lambda a: a["opened"] or a["first_seen"])
    names = list(dict.fromkeys(canonical(a["component"], tools.plan) for a in rows))
    return Answer(names, ", ".join(f"{a['detector']}: {a['component']}" for a in rows)
                  or "no new alert in the last minute")


def _symptom(detector: str) -> bool:
    kind = alert_kind(detector)
    return kind is not None and kind.symptom


def controller_down(tools: Tools, _q: Question) -> Answer:
    """The controller's latest ``up`` counter (the counters tool)."""
    up = tools.call("counters", {"component": CONTROLLER}).get("up")
    if up is None:
        return Answer([], "", error="no reading of the controller's up counter")
    return Answer([] if up else [CONTROLLER], "up" if up else "not answering (up=0)")


def miswired(tools: Tools, _q: Question) -> Answer:
    """The wiring tool's miswired links (those whose frames arrive nowhere are not)."""
    got = tools.call("wiring")
    if "error" in got:
        return Answer([], "", error=got["error"])
    names = [canonical(c, tools.plan) for c in got["miswired"]]
    return Answer(names, "miswired: " + ", ".join(names) if names else "as planned")


def top_class(tools: Tools, q: Question) -> Answer:
    """The class (link, switch, NIC, controller) of the planner's top suspect."""
    a = blamed(everything)(tools, q)
    fab = fabric(tools.plan)
    return Answer([fab.category(n) for n in a.names[:1]], a.text)


def top_since(tools: Tools, q: Question) -> Answer:
    """The planner's top suspect and the earliest first-seen of its active alerts."""
    a = blamed(everything)(tools, q)
    if not a.names:
        return a
    top = a.names[0]
    seen = [r["first_seen"] for r in tools.call("alerts")
            if r["cleared"] is None and canonical(r["component"], tools.plan) == top]
    return Answer([top], a.text, since=min(seen) if seen else None)


# --- the templates ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Template:
    name: str
    about: str  # leaf, spine, lane, nic, controller, job, wiring, change, fabric
    make: Callable[[Scene], list[Question]]


TEMPLATES: dict[str, Template] = {}


def template(name: str, about: str) -> Callable[[Callable[[Scene], list[Question]]],
                                                Callable[[Scene], list[Question]]]:
    """Register a template: ``make(scene)`` returns the questions it can ask now."""
    def register(fn: Callable[[Scene], list[Question]]) -> Callable[[Scene], list[Question]]:
        if name in TEMPLATES:
            raise ValueError(f"template {name!r} defined twice")
        TEMPLATES[name] = Template(name, about, fn)
        return fn
    return register


def which(s: Scene, name: str, text: str, *, answer: Iterable[str], none: Iterable[str],
          read: Reader, to: Callable[[Scene, GroundTruth], Iterable[str]] | None = None
          ) -> list[Question]:
    """A "which X ...?" question: live faults of kinds ``answer`` are the answer (their
    component, or the names ``to(scene, fault)`` gives); when every live fault is of a
    kind in ``none``, the answer is "none"; any other live kind makes it ambiguous: not
    asked (nor when ``to`` has no name for a fault)."""
    answer, none = set(answer), set(none)
    if any(f.kind not in answer | none for f in s.live):
        return []
    accept: set[str] = set()
    for f in s.live:
        if f.kind in answer:
            names = set(to(s, f)) if to else {s.comp(f)}
            if not names:
                return []
            accept |= names
    return [s.ask(name, text, accept, read)]


def _end(tier: str) -> Callable[[Scene, GroundTruth], list[str]]:
    """The switch of ``tier`` a fault's component is or ends at (none: not asked)."""
    def to(s: Scene, f: GroundTruth) -> list[str]:
        found = switch_of(tier)(s.fab, s.comp(f))
        return [found] if found else []
    return to


def subject(s: Scene, name: str, text: str, faulty: dict[str, set[str]], pool: list[str],
            read: Callable[[str], Reader]) -> list[Question]:
    """A question about one component: each ``faulty`` subject (with the names a right
    answer may give first) and one far healthy subject of ``pool`` drawn by the seed."""
    out = [s.ask(name, text.format(x=x), acc, read(x)) for x, acc in sorted(faulty.items())]
    ok = s.pick(x for x in pool if s.far(x) and x not in faulty)
    if ok is not None:
        out.append(s.ask(name, text.format(x=ok), (), read(ok)))
    return out


def _switch_faults(s: Scene, pool: list[str], lane_end: int) -> dict[str, set[str]]:
    """Switches of ``pool`` with a live fault: their own, or one of their lanes' (the
    lane's end ``lane_end``: 0 the leaf, 1 the spine)."""
    out: dict[str, set[str]] = {}
    switch_kinds, link_kinds = aimed("switch"), aimed("link")
    for f in s.live:
        c = s.comp(f)
        if f.kind in switch_kinds and c in pool:
            out.setdefault(c, set()).add(c)
        elif f.kind in link_kinds and c in s.fab.lane_set and s.fab.ends(c)[lane_end] in pool:
            sw = s.fab.ends(c)[lane_end]
            out.setdefault(sw, set()).update({c, sw})
    return out


@template("what-is-wrong", "fabric")
def what_is_wrong(s: Scene) -> list[Question]:
    return [s.ask("what-is-wrong", "what is wrong?", {s.comp(f) for f in s.live},
                  blamed(everything))] if s.live else []


@template("job-slow", "job")
def job_slow(s: Scene) -> list[Question]:
    """The whole job: a dead controller or a crossed lane does not slow it (ambiguous)."""
    hosts = sorted({h for p in s.job_pairs for h in p})
    if not hosts or not s.live or s.live_of(kinds(lambda k: k.effect not in FELT)):
        return []
    return [s.ask("job-slow", "why is the job slow?", {s.comp(f) for f in s.live},
                  blamed(everything), job_hosts=hosts)]


@template("pair-slow", "job")
def pair_slow(s: Scene) -> list[Question]:
    """One of the job's flows: one whose paths cross the fault, and one whose do not."""
    if s.live_of(kinds(lambda k: k.effect not in FELT)):
        return []
    out = []
    crossing, clear = [], []
    for src, dst in sorted(s.job_pairs):
        on = s.fab.on_paths(src, dst)
        hit = {s.comp(f) for f in s.live} & on
        if hit:
            crossing.append((src, dst, hit))
        elif not on & s.faulty:
            clear.append((src, dst))
    text = "why is {} -> {} slow?"
    if crossing:
        src, dst, hit = crossing[s.rng.randrange(len(crossing))]
        out.append(s.ask("pair-slow", text.format(src, dst), hit, blamed(on_path(src, dst))))
    if clear:
        src, dst = clear[s.rng.randrange(len(clear))]
        out.append(s.ask("pair-slow", text.format(src, dst), (), blamed(on_path(src, dst))))
    return out


@template("leaf-health", "leaf")
def leaf_health(s: Scene) -> list[Question]:
    return subject(s, "leaf-health", "is {x} healthy?", _switch_faults(s, s.fab.leaves, 0),
                   s.fab.leaves, lambda x: blamed(inside(x)))


@template("spine-health", "spine")
def spine_health(s: Scene) -> list[Question]:
    return subject(s, "spine-health", "is {x} healthy?", _switch_faults(s, s.fab.spines, 1),
                   s.fab.spines, lambda x: blamed(inside(x)))


@template("lane-health", "lane")
def lane_health(s: Scene) -> list[Question]:
    bad = {s.comp(f): {s.comp(f)} for f in s.live_of(aimed("link")) if s.comp(f) in s.fab.lane_set}
    return subject(s, "lane-health", "is lane {x} ok?", bad, s.fab.lanes,
                   lambda x: blamed(inside(x)))


@template("nic-health", "nic")
def nic_health(s: Scene) -> list[Question]:
    bad = {s.comp(f): {s.comp(f)} for f in s.live_of(aimed("host"))}
    return subject(s, "nic-health", "is {x}'s NIC ok?", bad, s.fab.hosts,
                   lambda x: blamed(inside(x)))


@template("controller-health", "controller")
def controller_health(s: Scene) -> list[Question]:
    ctl = aimed(CONTROLLER)
    return which(s, "controller-health", "is the controller healthy?",
                 answer=ctl, none=kinds(lambda _k: True) - ctl,
                 read=blamed(inside(CONTROLLER)))


@template("controller-up", "controller")
def controller_up(s: Scene) -> list[Question]:
    ctl = aimed(CONTROLLER)
    return which(s, "controller-up", "is the controller up?", answer=ctl,
                 none=kinds(lambda _k: True) - ctl, read=controller_down)


@template("switch-down", "leaf")
def switch_down(s: Scene) -> list[Question]:
    down = kinds(lambda k: k.target == "switch" and k.effect == Effect.DOWN)
    return which(s, "switch-down", "which switch is down?", answer=down,
                 none=kinds(said) - down, read=alerted("switch-down"))


@template("links-down", "lane")
def links_down(s: Scene) -> list[Question]:
    """A flapping link is down half the time and a dead switch's links all are: ambiguous."""
    return which(s, "links-down", "which links are down?",
                 answer=kinds(lambda k: k.target == "link" and k.effect == Effect.DOWN
                              and not k.intermittent),
                 none=kinds(lambda k: said(k) and k.effect != Effect.DOWN),
                 read=alerted("link-down", lens=lanes))


@template("lanes-drop", "lane")
def lanes_drop(s: Scene) -> list[Question]:
    """A lane under load at a fraction of its rate overflows its queue: it drops too."""
    lossy = kinds(lambda k: k.target == "link" and k.effect in (Effect.DROPS, Effect.SLOWS))
    return which(s, "lanes-drop", "which lanes drop packets?", answer=lossy,
                 none=kinds(unseen_on_lanes), read=blamed(lanes))


@template("lane-slow", "lane")
def lane_slow(s: Scene) -> list[Question]:
    return which(s, "lane-slow", "which lane runs below its configured rate?",
                 answer=kinds(lambda k: k.target == "link" and k.effect == Effect.SLOWS),
                 none=kinds(unseen_on_lanes), read=alerted("degraded", lens=lanes))


@template("flapping", "lane")
def flapping(s: Scene) -> list[Question]:
    flaps = kinds(lambda k: k.intermittent and k.effect == Effect.DOWN)
    return which(s, "flapping", "is any link flapping?", answer=flaps,
                 none=kinds(said) - flaps, read=alerted("flapping"))


@template("nics-lose", "nic")
def nics_lose(s: Scene) -> list[Question]:
    """A hot receiver's queue drops at its NIC, a lossy lane's packets never reach one, a
    flapping link loses what is in flight at every change: ambiguous."""
    def clear(k: FaultKind) -> bool:  # no NIC loses packets under it
        return k.target == CONTROLLER or k.effect == Effect.MISROUTES or (
            k.effect == Effect.DOWN and not k.intermittent) or (
            k.effect == Effect.SLOWS and k.target != "host")

    return which(s, "nics-lose", "which NICs lose packets?",
                 answer=kinds(lambda k: k.target == "host" and k.effect == Effect.DROPS),
                 none=kinds(clear), read=blamed(nics))


@template("incast", "nic")
def incast(s: Scene) -> list[Question]:
    hot = kinds(lambda k: k.target == "host" and k.effect == Effect.SLOWS)
    return which(s, "incast", "is any GPU receiving more than its NIC can take?",
                 answer=hot, none=kinds(said) - hot, read=alerted("hot-receiver", lens=nics))


@template("blackhole", "leaf")
def blackhole(s: Scene) -> list[Question]:
    return which(s, "blackhole", "which switch silently drops some flows?",
                 answer=kinds(lambda k: k.target == "switch" and k.effect == Effect.DROPS),
                 none=kinds(unseen_on_lanes), read=blamed(switches))


@template("spine-which", "spine")
def spine_which(s: Scene) -> list[Question]:
    """The spine end of a faulty lane; a faulty leaf touches every spine, a crossed lane
    two, a hot receiver's incast crosses them: ambiguous (a NIC's own loss touches none)."""
    return which(s, "spine-which", "which spine has a problem?",
                 answer=kinds(lambda k: k.target == "link" and said(k)
                              and k.effect != Effect.MISROUTES),
                 none=kinds(lambda k: k.target == CONTROLLER or (
                     k.target == "host" and k.effect == Effect.DROPS)),
                 read=blamed(switch_of("spine")), to=_end("spine"))


@template("leaf-which", "leaf")
def leaf_which(s: Scene) -> list[Question]:
    """The leaf of a faulty lane or the faulty leaf; a NIC hangs off a leaf: ambiguous."""
    return which(s, "leaf-which", "which leaf has a problem?",
                 answer=aimed("link") | aimed("switch"), none=aimed(CONTROLLER),
                 read=blamed(switch_of("leaf")), to=_end("leaf"))


@template("wiring", "wiring")
def wiring(s: Scene) -> list[Question]:
    """The crossed lane or the one it was crossed with (the log names only the first)."""
    crossed = kinds(lambda k: k.effect == Effect.MISROUTES)
    return which(s, "wiring", "is the wiring as planned?", answer=crossed,
                 none=kinds(said) - crossed, read=miswired,
                 to=lambda sc, f: [sc.comp(f), *sc.affected(f)])


@template("recent-change", "change")
def recent_change(s: Scene) -> list[Question]:
    return [s.ask("recent-change", "what changed in the last minute?",
                  {s.comp(f) for f in s.live}, newest_change)] if s.live else []


@template("since-when", "change")
def since_when(s: Scene) -> list[Question]:
    if len(s.live) != 1:
        return []
    f = s.live[0]
    return [s.ask("since-when", "since when has something been wrong?", {s.comp(f)},
                  top_since, since=f.start)]


@template("fault-class", "fabric")
def fault_class(s: Scene) -> list[Question]:
    classes = {CLASS_OF_TARGET[k.target] for f in s.live if (k := FAULT_KINDS.find(f.kind))}
    return [s.ask("fault-class", "is it a link, a switch, a NIC or the controller?", classes,
                  top_class)] if classes else []


# --- the question set ------------------------------------------------------------------------
def all_questions(scene: Scene) -> list[Question]:
    """Every question every template can ask in ``scene``, in template order."""
    return [q for t in TEMPLATES.values() for q in t.make(scene)]


def question_set(plan: WiringPlan, live: list[GroundTruth], *, seed: int,
                 recent: list[GroundTruth] | None = None,
                 job_pairs: list[tuple[str, str]] | None = None, relevant: int = 4,
                 healthy: int = 3) -> list[Question]:
    """A seeded sample: ``relevant`` questions whose answer is a live fault and ``healthy``
    whose answer is "nothing wrong" (fewer when fewer can be asked); the same for a seed."""
    rng = random.Random(seed)
    scene = Scene(plan, list(live), list(recent or []), list(job_pairs or []), rng)
    qs = all_questions(scene)
    bad = [q for q in qs if not q.healthy]
    ok = [q for q in qs if q.healthy]
    return (rng.sample(bad, min(relevant, len(bad))) + rng.sample(ok, min(healthy, len(ok))))


def live_at(truth: list[GroundTruth], t: float) -> tuple[list[GroundTruth], list[GroundTruth]]:
    """``(live, recent)`` at time ``t``: faults injected and not yet undone, and those
    undone in the last ``RECENT_S``."""
    live = [g for g in truth if g.start <= t < g.end]
    recent = [g for g in truth if t - RECENT_S <= g.end <= t]
    return live, recent


def row(q: Question, a: Answer, plan: WiringPlan | None = None, **extra: Any
        ) -> dict[str, Any]:
    """One scored row: the question, the right answer, the agent's, and the verdict."""
    ok, why = grade(q, a, plan)
    return {**extra, "template": q.template, "question": q.text, "expected": q.expected(),
            "healthy": q.healthy, "answer": a.text if a.error is None else a.error,
            "named": a.names[:3], "correct": ok, "reason": why}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``{asked, correct, accuracy, per_template, faulty, healthy}`` over scored rows."""
    def part(rs: list[dict[str, Any]]) -> dict[str, Any]:
        n, c = len(rs), sum(bool(r["correct"]) for r in rs)
        return {"asked": n, "correct": c, "accuracy": round(c / n, 4) if n else None}

    return {**part(rows),
            "per_template": {t: part([r for r in rows if r["template"] == t])
                             for t in sorted({r["template"] for r in rows})},
            "faulty": part([r for r in rows if not r["healthy"]]),
            "healthy": part([r for r in rows if r["healthy"]])}


@dataclass(frozen=True)
class QuestionSpec:
    """What draws one fault's questions (``ops.questions.question_set``), picklable, so an
    observer in another process draws the very same."""

    live: tuple[GroundTruth, ...]
    recent: tuple[GroundTruth, ...]
    seed: int
    job_pairs: tuple[tuple[str, str], ...]
    relevant: int
    healthy: int

    def questions(self, plan: WiringPlan) -> list[Question]:
        return question_set(plan, list(self.live), seed=self.seed, recent=list(self.recent),
                              job_pairs=list(self.job_pairs), relevant=self.relevant,
                              healthy=self.healthy)


def answer_questions(qs: list[Question], make: Callable[..., Tools],
                     found: list[Any] | None = None
                     ) -> list[tuple[Question, Answer, float]]:
    """Each question answered through fresh tools (``found``: a wiring check's findings,
    for the questions about the cabling), with the telemetry's time of the answer."""
    kw = {} if found is None else {"wiring": lambda: found}
    out = []
    for q in qs:
        tools = make(**kw)
        out.append((q, answer(q, tools), tools.now()))
    return out
