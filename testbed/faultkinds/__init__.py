"""Fault kinds, one module each: ``testbed/faultkinds/<name>.py``, what a kind *is*. Pure.

A kind's name is its module's name with ``_`` written as ``-`` (``nic_loss.py`` is
``nic-loss``). A kind has two halves, found by the same module name:

* here, what it is: plain declarations, no root needed. ``testbed.faultspec`` builds its
  ``KINDS`` and ``TARGET_KIND`` from them, so ``Fault`` validation, ``resolve``,
  ``random_schedule`` and every list of kinds (``astral-lab run ops-eval --kinds``,
  ``ops.evaluate``) take a new kind with no other change;
* ``testbed/shell/faults/<name>.py``, what it does to a running lab (``apply``/``revert``,
  an optional background ``worker`` and capability ``check``); it needs root, so it sits
  in the shell, and ``testbed.shell.faults.FaultInjector`` dispatches to it by name.

Why two files and not one: the injector half runs commands and processes on the lab
(``lab.set_link``, ``tc``, ``nft``, ``subprocess.Popen`` for the hot receiver's streams),
which ``tests/unit/test_layers.py`` keeps inside ``shell/``; ``testbed.faultspec`` is pure
and may not import the shell, yet must know every kind. So the facts the pure side needs
live here and the actions there. A new kind is these two new files (copy the closest pair
under a new name), and ``tests/unit/test_faultkinds.py`` checks that the two registries
(``FAULT_KINDS`` here, ``testbed.shell.faults.INJECTORS``) name the same kinds.

What a module here declares and implements is ``FaultKindModule``: every question the
rest of the lab asks of a kind is one of its declarations or hooks, each with a default
written once in the contract (left out, a kind gets it), so no module outside the two
halves names a kind. Besides what makes a ``Fault`` (``TARGET``, ``SETTINGS``,
``validate``, ``span``, ``check_plan``) and a random schedule (``random_targets``,
``SEVERITIES``, ``random_knobs``), a kind says what the operations layer sees of it:

* ``EVIDENCE``: what its faults show a detector (``vocab.evidence``: loss, errors, down,
  slow, misroute). An alert is evidence of a kind when it gives one of these words and
  points at the kind's ``TARGET`` (``shown_by``), so ``ops-eval`` classifies a new kind
  with the detectors already there;
* ``EFFECT`` and ``INTERMITTENT``: what it does to traffic in an operator's words
  (``Effect``: takes links down, drops, slows, misroutes; and whether it comes and goes),
  which ``ops.questions`` asks about;
* ``affected(plan, component)``: the components beyond its target a fault acts on.

Its shell half has a hook of the same kind, ``clean_crashed``, for what a crashed run
leaves (``testbed.shell.faults.InjectorModule``).

**Severity.** A kind declares the severities its random knobs can draw (``SEVERITIES``):
``gray`` is degraded, not dead (a lane at three quarters of its rate, a fraction of a
percent of loss, a link that flaps now and then at irregular times: the subtle faults a
production fault-finder must catch), ``hard`` is obvious (a cut, a lane at a fraction of
its rate, loss in percent). ``random_knobs(rng, span, severity)`` draws for one of them;
``testbed.faultspec.random_schedule(..., severity=...)`` asks for one, or for ``mixed``.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from vocab.evidence import evidence
from vocab.plan import Link, WiringPlan
from vocab.plugins import Plugin, Plugins

#: What a kind's ``TARGET`` may be.
TARGETS = ("link", "host", "switch", "controller")
#: Which way along a link a link fault acts (a ``direction`` knob): from its ``a`` end (the
#: lower tier: leaf before spine, host before leaf) to ``b``, from ``b`` to ``a``, or both.
LINK_DIRECTIONS = ("a-to-b", "b-to-a", "both")


class Severity(StrEnum):
    """How bad a drawn fault is: ``gray`` degraded but working, ``hard`` obviously broken."""

    GRAY = "gray"
    HARD = "hard"


#: What a kind's ``SEVERITIES`` may name.
SEVERITIES = tuple(s.value for s in Severity)
#: A schedule of faults whose severity is drawn, each from what its kind declares.
MIXED = "mixed"
#: What a schedule may ask for: one severity for every fault, or ``mixed``.
SCHEDULE_SEVERITIES = (*SEVERITIES, MIXED)


class Effect(StrEnum):
    """What a fault does to traffic, in the words of an operator's questions
    (``ops.questions``: "which links are down?", "which lanes drop packets?", ...)."""

    DOWN = "down"  # takes links down: traffic moves off them
    DROPS = "drops"  # packets are lost or refused on the way
    SLOWS = "slows"  # packets arrive, late: a slow lane, a queue that holds
    MISROUTES = "misroutes"  # packets go where the plan does not send them


#: What a kind's ``EFFECT`` may be (or None).
EFFECTS = tuple(e.value for e in Effect)


@dataclass(frozen=True)
class NoSettings:
    """The settings of a kind that has no knobs of its own."""


class FaultKindModule(Protocol):
    """What a fault kind's pure module declares and implements; ``FaultKind`` reads it.

    ``fault`` arguments are ``testbed.faultspec.Fault`` s (not imported here: faultspec
    imports this package). Only ``TARGET`` is required.
    """

    TARGET: str
    """What a fault's ``target`` names: ``"link"``, ``"host"`` (its NIC), ``"switch"`` or
    ``"controller"`` (the target is then always ``controller``)."""
    SETTINGS: type = NoSettings
    """The kind's own knobs: a frozen dataclass with their defaults, whose ``__post_init__``
    refuses a bad value with a message starting with the knob's name (``number`` and
    ``whole`` help). ``Fault(kind, target, fraction=0.25)`` makes one (``fault.settings``);
    a knob the kind does not have is refused, naming the ones it has."""
    validate: Callable[[Any], None] | None = None
    """``validate(fault)``: raise ``ValueError`` (message starting with the field's name)
    for a combination of fields this kind refuses; called once ``target``, ``at`` and
    ``duration`` are checked, before the knobs (every knob is range-checked for every kind
    by ``Fault`` itself)."""
    span: Callable[[Any], float | None] | None = None
    """``span(fault)``: seconds from injection to undo (None: open-ended); left out,
    ``fault.duration``."""
    check_plan: Callable[[WiringPlan, Any], None] | None = None
    """``check_plan(plan, fault)``: (after ``resolve`` found the target in the plan) raise
    ``ValueError`` if this plan cannot carry the fault."""
    random_targets: Callable[[WiringPlan, list[str]], list[str]] | None = None
    """``random_targets(plan, pool)``: which of ``pool`` (the schedule's candidates for its
    ``TARGET``: leaf-spine lanes, leaf switches, hosts, the controller) ``random_schedule``
    may pick; left out, all."""
    SEVERITIES: tuple[str, ...] = ("hard",)
    """The severities (``Severity``: ``"gray"``, ``"hard"``) ``random_knobs`` can draw, one
    or both; ``random_schedule`` draws a kind only for a severity it declares."""
    random_knobs: Callable[[random.Random, float, str], dict[str, Any]] | None = None
    """``random_knobs(rng, span, severity)``: ``Fault`` fields ``random_schedule`` draws for
    a fault of ``severity`` (one of ``SEVERITIES``) lasting about ``span`` seconds
    (``duration`` defaults to ``span``; return ``duration=None`` for a kind without one);
    left out, none."""
    EVIDENCE: tuple[str, ...] = ()
    """What its faults show a detector: words of ``vocab.evidence.EVIDENCE`` (``loss``,
    ``errors``, ``down``, ``slow``, ``misroute``). An alert that gives one of them and
    points at this kind's ``TARGET`` is evidence of it (``shown_by``: ``ops-eval``'s kind
    accuracy). Left out, none: no alert classifies it."""
    EFFECT: str | None = None
    """What it does to traffic, one of ``Effect`` (``down``, ``drops``, ``slows``,
    ``misroutes``): which of an operator's questions (``ops.questions``) its live faults
    answer. Left out (None), not said: questions that depend on it are not asked while one
    of its faults is live. A controller kind needs none: traffic does not see it."""
    INTERMITTENT: bool = False
    """True when its faults come and go (a flapping link): "is any link flapping?" is then
    about it, and "which links are down?" is not asked while it is live."""
    affected: Callable[[WiringPlan, str], Iterable[str]] | None = None
    """``affected(plan, component)``: the components other than ``component`` (its
    target's canonical name, ``a~b#k`` for a link) a fault of this kind on it acts on (a
    miswired lane's partners, a hot receiver's leaf's lanes), named as ``Fault.component``
    names them; left out, none."""


@dataclass(frozen=True)
class FaultKind(Plugin):
    """A kind module read against ``FaultKindModule``."""

    CONTRACT = FaultKindModule

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.module.TARGET not in TARGETS:
            raise ValueError(f"fault kind module {self.module.__name__}: TARGET must be one "
                             f"of {', '.join(TARGETS)} (got {self.module.TARGET!r})")
        sev = self.declared("SEVERITIES")
        if (not isinstance(sev, tuple) or not sev or len(set(sev)) != len(sev)
                or any(s not in SEVERITIES for s in sev)):
            raise ValueError(f"fault kind module {self.module.__name__}: SEVERITIES must be a "
                             f"tuple of one or both of {', '.join(SEVERITIES)} (got {sev!r})")
        evidence(self.declared("EVIDENCE"), f"fault kind module {self.module.__name__}")
        effect = self.declared("EFFECT")
        if effect is not None and effect not in EFFECTS:
            raise ValueError(f"fault kind module {self.module.__name__}: EFFECT must be one of "
                             f"{', '.join(EFFECTS)} or None (got {effect!r})")

    @property
    def target(self) -> str:
        return str(self.module.TARGET)

    @property
    def severities(self) -> tuple[str, ...]:
        """The severities the kind's random knobs can draw (``SEVERITIES``)."""
        return tuple(str(s) for s in self.declared("SEVERITIES"))

    @property
    def evidence(self) -> tuple[str, ...]:
        """What its faults show a detector (``EVIDENCE``)."""
        return evidence(self.declared("EVIDENCE"), self.module.__name__)

    @property
    def effect(self) -> str | None:
        """What it does to traffic (``EFFECT``), None when not said."""
        effect = self.declared("EFFECT")
        return None if effect is None else str(effect)

    @property
    def intermittent(self) -> bool:
        """Whether its faults come and go (``INTERMITTENT``)."""
        return bool(self.declared("INTERMITTENT"))

    def affected(self, plan: WiringPlan, component: str) -> list[str]:
        """The other components a fault on ``component`` acts on (``affected``)."""
        fn = self.hook("affected")
        return [] if fn is None else list(fn(plan, component))

    @property
    def knobs(self) -> tuple[str, ...]:
        """The names of the kind's own settings (``SETTINGS``' fields)."""
        return tuple(f.name for f in dataclasses.fields(self.declared("SETTINGS")))

    def settings(self, knobs: Mapping[str, Any]) -> Any:
        """The kind's ``SETTINGS`` made from ``knobs`` (the rest at their defaults), each
        checked; a ValueError naming a knob the kind does not have."""
        for knob in knobs:
            if knob not in self.knobs:
                raise ValueError(f"{knob}: {self.name} has no setting {knob!r} (its settings: "
                                 f"{', '.join(self.knobs) or 'none'})")
        return self.declared("SETTINGS")(**knobs)

    def validate(self, fault: Any) -> None:
        fn = self.hook("validate")
        if fn is not None:
            fn(fault)

    def span(self, fault: Any) -> float | None:
        fn = self.hook("span")
        return fault.duration if fn is None else fn(fault)

    def check_plan(self, plan: WiringPlan, fault: Any) -> None:
        fn = self.hook("check_plan")
        if fn is not None:
            fn(plan, fault)

    def random_targets(self, plan: WiringPlan, pool: list[str]) -> list[str]:
        fn = self.hook("random_targets")
        return pool if fn is None else list(fn(plan, pool))

    def random_knobs(self, rng: random.Random, span: float, severity: str) -> dict[str, Any]:
        """The module's draw for ``severity``; a ValueError for one the kind does not declare."""
        if severity not in self.severities:
            raise ValueError(f"severity: {self.name} draws no {severity!r} faults (its "
                             f"severities: {', '.join(self.severities)})")
        fn = self.hook("random_knobs")
        return {} if fn is None else dict(fn(rng, span, str(severity)))


#: Every kind, in listing order (and the order a random schedule's draws are made in):
#: each module's ``ORDER``, then the rest by name.
FAULT_KINDS: Plugins[FaultKind] = Plugins("fault kind", __name__, FaultKind)


def shown_by(words: Iterable[str], parts: Iterable[str] = TARGETS) -> tuple[str, ...]:
    """The kinds, in listing order, an alert giving evidence ``words`` is evidence of: those
    whose ``EVIDENCE`` has one of them and whose ``TARGET`` is one of ``parts`` (the parts
    of the fabric the alert may point at: a NIC's loss may be its own or its cable's, not a
    switch rule's). None for an alert that gives no evidence (a symptom)."""
    want, where = set(evidence(words, "alert")), set(parts)
    return tuple(n for n, k in FAULT_KINDS.all().items()
                 if want & set(k.evidence) and k.target in where)


def link_component(plan: WiringPlan, link: Link) -> str:
    """A plan link as ``Fault.component`` names it: ``a~b#k``, ``k`` counting the cables
    between ``a`` and ``b`` in plan order."""
    same = [ln for ln in plan.links if (ln.a, ln.b) == (link.a, link.b)]
    return f"{link.a}~{link.b}#{same.index(link)}"


def number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, why: str = "") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite number in the range
    (``low_open``/``high_open``: the bound itself is outside)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        left = "(" if low_open or low is None else "["
        right = ")" if high_open or high is None else "]"
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        rng = f"{left}{lo}, {hi}{right}"
        raise ValueError(f"{name} must be a number in {rng} (got {value!r})"
                         + (f": {why}" if why else ""))


def whole(name: str, value: Any, low: int) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an integer >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low} (got {value!r})")
