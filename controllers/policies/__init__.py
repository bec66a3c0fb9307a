"""Load-balancing policies, one module each: ``controllers/policies/<name>.py``. Pure.

A policy's name is its module's name with ``_`` written as ``-`` (``ecmp_fluid.py`` is
``ecmp-fluid``). Every consumer finds policies here (the controller's ``--lb`` and
``PUT /lb``, ``Lab(lb=...)``, the flow model's ``--lb``, the scenarios' policy lists,
``astral-lab policies``), so a new policy is a new file and nothing else: copy the
closest module under a new name and change what it does.

What a module declares (plain module attributes, read by ``Policy``):

``PINS``
    True: the controller gives each flow it was told about an explicit path, so whoever
    starts traffic must post the flows first (``POST /traffic``; the replay and iperf
    runners do it when ``GET /lb`` says ``"pins": true``). False: switches hash.
``CONTROLLER``
    True (default): the controller can run it. False: only the flow model knows it (an
    idealisation such as a fluid split no switch implements).
``POLLS``
    True: every poll the controller re-paths flows from measured rates with the shared
    adaptive options (threshold, hysteresis, hold); its paths depend on history, so a
    restarted controller restores them instead of recomputing them.
``RANDOM``
    True: its paths depend on the ECMP hash seed, so scenarios report it over many draws.
``place(flows, finder, current)``
    (when ``PINS``) the path of every flow, given the paths they have now (``current``,
    still-valid paths only). Called when the mode is set and when a job posts its flows.
``model(flows, finder, ctx)``
    the flow model's view: the path of every flow (``ctx.seed``, ``ctx.options``,
    ``ctx.ecmp()`` = the seed's cached ECMP assignment). ``SPLIT = True`` instead says the
    flow model splits each flow evenly over every switch's equal-cost ports (no paths).
    ``SPLIT`` may also be a function ``(flows, finder, ctx) -> bool`` that decides per job
    (``ctx.options`` then holds the policy's options too); when it says False the flow
    model asks ``model`` for paths.
``METHOD``, ``NOTE``
    how the flow model computes it and what that leaves out, for its report.
``PUBLISHED``, ``SOURCE``, ``DIFFERS``
    the shape the policy's source reported, where, and where the lab's version differs
    and why: the scenarios' reports put each policy beside them.
``WHATIF``
    which closed form the flow model's aggregate what-if (64K GPUs) uses: ``"fluid"``,
    ``"lanes"`` (a collision-free lane colouring), ``"hash"`` (exact lane loads of the
    hash), or None (not computed there).

Host-side balancing (the switches only hash; the sender changes what they hash):

``ENTROPY``
    how a sender picks each packet's UDP source port, the entropy RoCEv2 switches hash
    (``ENTROPY_MODES``): ``"qp"`` (default: one port per QP, what a NIC does unaided),
    ``"packet"`` (every packet its own value: spraying), ``"flowlet"`` (a new value after
    an idle gap), ``"plb"`` (a new value after the receiver reported congestion for
    some rounds in a row).
``OPTIONS``
    the policy's options and their defaults (numbers); ``parse("name:key=value")`` sets
    them, e.g. ``qp-scaling:qps=8``.
``RULES``
    each option's rule (``vocab.validate``: finite, in its range, whole where it
    counts things), which ``parse`` checks; every option in ``OPTIONS`` has one.
``expand(flows, options)``
    the flows the host actually opens for ``flows`` (default: the same): QP scaling
    stripes each flow over several QPs. The replay and the flow model both call it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import Any

from controllers.paths import Path, PathFinder
from vocab.flows import ENTROPY_MODES, QP_SPORT_BASE, Flow, sport_for_qp
from vocab.plugins import discover
from vocab.validate import BadValue, Rule


@dataclass(frozen=True)
class Policy:
    """A policy module, with its declarations defaulted (``options``: set by ``parse``)."""

    name: str
    module: ModuleType
    options: Mapping[str, float] = field(default_factory=dict)

    def _get(self, attr: str, default: Any) -> Any:
        return getattr(self.module, attr, default)

    @property
    def summary(self) -> str:
        """The first line of the module's docstring."""
        return (self.module.__doc__ or "").strip().splitlines()[0].rstrip(".") \
            if self.module.__doc__ else ""

    @property
    def pins(self) -> bool:
        return bool(self._get("PINS", False))

    @property
    def controller(self) -> bool:
        return bool(self._get("CONTROLLER", True))

    @property
    def polls(self) -> bool:
        return bool(self._get("POLLS", False))

    @property
    def random(self) -> bool:
        return bool(self._get("RANDOM", False))

    @property
    def split(self) -> bool:
        """True when the flow model always splits (a ``SPLIT`` rule decides per job: False
        here, see ``split_rule`` and ``splits``)."""
        rule = self._get("SPLIT", False)
        return False if callable(rule) else bool(rule)

    @property
    def split_rule(self) -> bool:
        """True when ``SPLIT`` is a function that decides per job whether to split."""
        return callable(self._get("SPLIT", False))

    def splits(self, flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> bool:
        """Whether the flow model splits ``flows``: ``SPLIT`` itself, or its rule's answer.

        The rule sees ``ctx`` with the policy's options (defaults, then ``parse``'s) laid
        over ``ctx.options``, since a rule such as flowlet's gap depends on them.
        """
        rule = self._get("SPLIT", False)
        if not callable(rule):
            return bool(rule)
        opts = {**ctx.options, **self.defaults, **self.options}
        sub = ModelContext(ctx.finder, ctx.flows, ctx.seed, opts, ctx._cache)
        return bool(rule(flows, finder, sub))

    @property
    def method(self) -> str:
        return str(self._get("METHOD", f"controllers.policies.{self.module_name}"))

    @property
    def note(self) -> str:
        return str(self._get("NOTE", ""))

    @property
    def published(self) -> str:
        """The shape its source reported (``PUBLISHED``), for the scenarios' reports."""
        return str(self._get("PUBLISHED", ""))

    @property
    def source(self) -> str:
        """Where that was published (``SOURCE``)."""
        return str(self._get("SOURCE", ""))

    @property
    def differs(self) -> str:
        """Where the lab's version differs from the published one, and why (``DIFFERS``)."""
        return str(self._get("DIFFERS", ""))

    @property
    def whatif(self) -> str | None:
        return self._get("WHATIF", None)

    @property
    def entropy(self) -> str:
        return str(self._get("ENTROPY", "qp"))

    @property
    def defaults(self) -> dict[str, float]:
        """The module's options with their default values."""
        return dict(self._get("OPTIONS", {}))

    @property
    def rules(self) -> dict[str, Rule]:
        """Each option's rule (``RULES``)."""
        return dict(self._get("RULES", {}))

    def option(self, key: str) -> float:
        """An option's value: set by ``parse``, else the module's default."""
        return self.options.get(key, self.defaults[key])

    @property
    def label(self) -> str:
        """The name with the options that differ from the defaults (``qp-scaling:qps=8``)."""
        extra = [f"{k}={v:g}" for k, v in sorted(self.options.items())
                 if v != self.defaults.get(k)]
        return ":".join([self.name] + extra)

    @property
    def expands(self) -> bool:
        """Whether the hosts open other flows than they are given (the module has
        ``expand``)."""
        return hasattr(self.module, "expand")

    def expand(self, flows: Sequence[Any]) -> list[Any]:
        """The flows the host opens for ``flows`` (``expand`` of the module, if any)."""
        if not self.expands:
            return list(flows)
        return list(self.module.expand(flows, {**self.defaults, **self.options}))

    @property
    def module_name(self) -> str:
        return self.module.__name__.rpartition(".")[2]

    def place(self, flows: list[Flow], finder: PathFinder,
              current: Mapping[Flow, Path]) -> dict[Flow, Path]:
        """The controller's paths for ``flows`` (only for a policy that pins)."""
        if not self.pins:
            return {}
        return dict(self.module.place(flows, finder, current))

    def model(self, flows: list[Flow], finder: PathFinder, ctx: ModelContext
              ) -> dict[Flow, Path]:
        """The flow model's paths for ``flows`` (not for a split policy)."""
        return dict(self.module.model(flows, finder, ctx))


class ModelContext:
    """What a policy's ``model`` may use besides the flows: the hash seed, the shared
    adaptive options, and the seed's ECMP assignment computed once for every policy."""

    def __init__(self, finder: PathFinder, flows: list[Flow], seed: int = 0,
                 options: Mapping[str, Any] | None = None,
                 ecmp_cache: dict[int, dict[Flow, Path]] | None = None) -> None:
        self.finder, self.flows, self.seed = finder, flows, seed
        self.options = dict(options or {})
        self._cache = {} if ecmp_cache is None else ecmp_cache

    def ecmp(self) -> dict[Flow, Path]:
        """Every flow's ECMP path for this seed (cached across policies)."""
        from controllers import lb

        if self.seed not in self._cache:
            self._cache[self.seed] = lb.ecmp_assign(self.flows, self.finder, self.seed)
        return self._cache[self.seed]


#: the order policies are listed and compared in: these first, then the rest by name
_FIRST = ("ecmp", "ecmp-fluid", "planned", "adaptive")


@cache
def _all() -> dict[str, Policy]:
    return {n: Policy(n, m) for n, m in discover(__name__, __path__, _FIRST).items()}


__all__ = ["ENTROPY_MODES", "ModelContext", "Policy", "available", "base_rtt_s", "get", "names",
           "parse", "random_names", "stripe", "table"]


def available(controller: bool | None = None) -> dict[str, Policy]:
    """Every policy (``controller=True``: those the controller runs; False: model-only)."""
    return {n: p for n, p in _all().items() if controller is None or p.controller == controller}


def names(controller: bool | None = None) -> tuple[str, ...]:
    """Policy names, in listing order (``controller`` as for ``available``)."""
    return tuple(available(controller))


def get(name: str, controller: bool = False) -> Policy:
    """The policy called ``name``; a ValueError naming the known ones otherwise
    (``controller=True``: only policies the controller runs)."""
    pols = available(True if controller else None)
    if name not in pols:
        what = "controller mode" if controller else "policy"
        raise ValueError(f"unknown {what} {name!r}; choose from {', '.join(pols)}")
    return pols[name]


def parse(spec: str, controller: bool = False) -> Policy:
    """A policy with options: ``"name"`` or ``"name:key=value:key=value"``.

    One ``ValueError`` for an unknown name, an unknown option (naming the known ones), an
    option given twice or a value outside the option's rule (``RULES``), so a value that
    would make the model or a sender churn is refused here, before any work.
    """
    name, *pairs = spec.strip().split(":")
    pol = get(name, controller)
    opts: dict[str, float] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if key not in pol.defaults:
            known = ", ".join(pol.defaults) or "none"
            raise BadValue(f"policy {name} has no option {key!r} (options: {known})")
        if key in opts:
            raise BadValue(f"{name}:{key} is given twice")
        rule = pol.rules.get(key)
        if rule is None:
            raise ValueError(f"policy {name} declares no rule for its option {key!r} (RULES)")
        opts[key] = rule.check(value if eq else "", f"{name}:{key}")
    return dataclasses.replace(pol, options=opts)


def base_rtt_s(links: int, frame_bytes: float, rate_bps: float) -> float:
    """A host-side policy's unit of time: a full frame stored and forwarded by each of the
    ``links`` links of a path at ``rate_bps``, the ACK's way back (a tiny frame) left out.
    The replay's senders (flowlet gap, plb rounds) and the flow model use this one."""
    return links * frame_bytes * 8 / rate_bps


def stripe(flows: Sequence[Any], n: int) -> list[Any]:
    """Each flow as ``n`` flows on their own QPs (source ports), its bytes split evenly.

    Works on ``vocab.flows.Flow`` (a new source port per stripe) and on
    ``traffic.kernels.FlowSpec`` (a new QP and its port; each message striped, so a
    stripe carries ``ceil(message_bytes / n)``-byte messages). QP ``q``'s stripes are
    QPs ``q * n .. q * n + n - 1``, so stripes of different flows never share a QP.
    """
    if n < 1:
        raise ValueError(f"qps must be >= 1 (got {n})")
    if n == 1:
        return list(flows)
    out = []
    for f in flows:
        for k in range(n):
            share = f.bytes // n + (k < f.bytes % n)
            if share <= 0 and f.bytes > 0:
                continue
            if hasattr(f, "message_bytes"):  # a replay's FlowSpec: QPs and messages
                qp = f.qp * n + k
                mb = -(-f.message_bytes // n) if f.message_bytes else 0
                msgs = -(-share // mb) if mb and share else 0
                out.append(dataclasses.replace(f, bytes=share, qp=qp, sport=sport_for_qp(qp),
                                               message_bytes=mb, messages=msgs))
            else:
                port = sport_for_qp((f.sport - QP_SPORT_BASE) * n + k)
                out.append(dataclasses.replace(f, bytes=share, sport=port))
    return out


def random_names(policies: Iterable[str] | None = None) -> tuple[str, ...]:
    """The policies (of ``policies``, default all) whose paths depend on a hash draw."""
    pols = available()
    return tuple(n for n in (pols if policies is None else policies)
                 if n in pols and pols[n].random)


def table() -> list[dict[str, Any]]:
    """One row per policy for ``astral-lab policies``: name, where it runs, what it does."""
    rows = []
    for p in available().values():
        where = ["model"] + (["controller"] if p.controller else [])
        traits = [t for t, on in (("pins flows", p.pins), ("polls counters", p.polls),
                                  ("hash-dependent", p.random), ("fluid split", p.split),
                                  ("split or hash by a rule per job", p.split_rule),
                                  (f"entropy per {p.entropy}", p.entropy != "qp"),
                                  ("expands flows", p.expands)) if on]
        rows.append({"name": p.name, "runs_in": where, "traits": traits,
                     "options": p.defaults, "summary": p.summary,
                     "module": p.module.__name__})
    return rows
