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
name the same kinds.

What a module here declares (module attributes, read by ``FaultKind``; only ``TARGET``
is required):

``TARGET``
    what a fault's ``target`` names: ``"link"``, ``"host"`` (its NIC), ``"switch"`` or
    ``"controller"`` (the target is then always ``controller``).
``validate(fault)``
    raise ``ValueError`` (message starting with the field's name) for a combination of
    fields this kind refuses; called once ``target``, ``at`` and ``duration`` are checked,
    before the knobs (every knob is range-checked for every kind by ``Fault`` itself).
``span(fault)``
    seconds from injection to undo (None: open-ended); default ``fault.duration``.
``check_plan(plan, fault)``
    (after ``resolve`` found the target in the plan) raise ``ValueError`` if this plan
    cannot carry the fault.
``random_targets(plan, pool)``
    which of ``pool`` (the schedule's candidates for its ``TARGET``: leaf-spine lanes,
    leaf switches, hosts, the controller) ``random_schedule`` may pick; default all.
``random_knobs(rng, span)``
    ``Fault`` fields ``random_schedule`` draws for a fault lasting about ``span`` seconds
    (``duration`` defaults to ``span``; return ``duration=None`` for a kind without one).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from vocab.plan import WiringPlan
from vocab.plugins import discover

#: What a kind's ``TARGET`` may be.
TARGETS = ("link", "host", "switch", "controller")

#: The order kinds are listed (and a random schedule's draws are made) in: these first,
#: then the rest by name.
_FIRST = ("link-down", "link-flap", "link-degrade", "nic-loss", "switch-down",
          "controller-kill", "controller-restart", "hot-receiver")


@dataclass(frozen=True)
class FaultKind:
    """A kind module, with its declarations defaulted. ``fault`` arguments are
    ``testbed.faultspec.Fault`` s (not imported here: faultspec imports this package)."""

    name: str
    module: ModuleType

    @property
    def summary(self) -> str:
        """The first line of the module's docstring: what the fault emulates."""
        doc = (self.module.__doc__ or "").strip()
        return doc.splitlines()[0].rstrip(".") if doc else ""

    @property
    def target(self) -> str:
        return str(self.module.TARGET)

    @property
    def module_name(self) -> str:
        return self.module.__name__.rpartition(".")[2]

    def validate(self, fault: Any) -> None:
        fn = getattr(self.module, "validate", None)
        if fn is not None:
            fn(fault)

    def span(self, fault: Any) -> float | None:
        fn = getattr(self.module, "span", None)
        return fault.duration if fn is None else fn(fault)

    def check_plan(self, plan: WiringPlan, fault: Any) -> None:
        fn = getattr(self.module, "check_plan", None)
        if fn is not None:
            fn(plan, fault)

    def random_targets(self, plan: WiringPlan, pool: list[str]) -> list[str]:
        fn = getattr(self.module, "random_targets", None)
        return pool if fn is None else list(fn(plan, pool))

    def random_knobs(self, rng: random.Random, span: float) -> dict[str, Any]:
        fn = getattr(self.module, "random_knobs", None)
        return {} if fn is None else dict(fn(rng, span))


@cache
def available() -> dict[str, FaultKind]:
    """Every kind, by name, in listing order (``_FIRST``, then the rest by name)."""
    found = {}
    for name, mod in discover(__name__, __path__, _FIRST).items():
        target = getattr(mod, "TARGET", None)
        if target not in TARGETS:
            raise ValueError(f"fault kind module {mod.__name__}: TARGET must be one of "
                             f"{', '.join(TARGETS)} (got {target!r})")
        found[name] = FaultKind(name, mod)
    return found


def names() -> tuple[str, ...]:
    """Kind names, in listing order."""
    return tuple(available())


def get(name: str) -> FaultKind:
    """The kind called ``name``; a ValueError naming the known ones otherwise."""
    kinds = available()
    if name not in kinds:
        raise ValueError(f"unknown fault kind {name!r}; choose from {', '.join(kinds)}")
    return kinds[name]
