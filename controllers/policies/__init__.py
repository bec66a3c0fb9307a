"""Load-balancing policies, one module each: ``controllers/policies/<name>.py``. Pure.

A policy's name is its module's name with ``_`` written as ``-`` (``ecmp_fluid.py`` is
``ecmp-fluid``). Every consumer finds policies in ``POLICIES`` (the controller's ``--lb``
and ``PUT /lb`` in ``CONTROLLER_MODES``, ``Lab(lb=...)``, the flow model's ``--lb``, the
scenarios' policy lists, ``astral-lab policies``), so a new policy is a new file and
nothing else: copy the closest module under a new name and change what it does.
``PolicyModule`` is what a module declares and implements; consumers read those
declarations (through ``Policy``), never a policy's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from controllers import lb
from controllers.paths import Path, PathFinder
from vocab.flows import QP_SPORT_BASE, Flow, sport_for_qp
from vocab.plugins import Plugin, Plugins
from vocab.validate import BadValue, Rule


class PolicyModule(Protocol):
    """What a policy module declares (module attributes) and implements (functions).

    Every member here has a value: a module that leaves one out gets it. ``Policy`` reads
    them; no consumer asks for a policy by name.
    """

    PINS: bool = False
    """True: the controller gives each flow it was told about an explicit path, so whoever
    starts traffic must post the flows first (``POST /traffic``; the replay and iperf
    runners do it when ``GET /lb`` says ``"pins": true``). False: switches hash."""
    CONTROLLER: bool = True
    """True: the controller can run it. False: only the flow model knows it (an
    idealisation such as a fluid split no switch implements)."""
    POLLS: bool = False
    """True: every poll the controller re-paths flows from measured rates with the shared
    adaptive options (threshold, hysteresis, hold); its paths depend on history, so a
    restarted controller restores them instead of recomputing them."""
    RANDOM: bool = False
    """True: its paths depend on the ECMP hash seed, so scenarios report it over many draws."""
    SPLIT: bool | Callable[[list[Flow], PathFinder, ModelContext], bool] = False
    """True: the flow model splits each flow evenly over every switch's equal-cost ports
    (no paths). A function ``(flows, finder, ctx) -> bool`` decides per job instead
    (``ctx.options`` then holds the policy's options too); when it says False the flow
    model asks ``model`` for paths."""
    METHOD: str = ""
    """How the flow model computes it (default: the module's name)."""
    NOTE: str = ""
    """What the flow model's method leaves out, for its report."""
    PUBLISHED: str = ""
    """The shape the policy's source reported; the scenarios' reports put it beside theirs."""
    SOURCE: str = ""
    """Where that was published."""
    DIFFERS: str = ""
    """Where the lab's version differs from the published one, and why."""
    WHATIF: str | None = None
    """Which closed form the flow model's aggregate what-if (64K GPUs) uses: ``"fluid"``,
    ``"lanes"`` (a collision-free lane colouring), ``"hash"`` (exact lane loads of the
    hash), or None (not computed there)."""
    ENTROPY: str = "qp"
    """Host-side balancing: how a sender picks each packet's UDP source port, the entropy
    RoCEv2 switches hash (``vocab.flows.ENTROPY_MODES``): ``"qp"`` (one port per QP, what a NIC does
    unaided), ``"packet"`` (every packet its own value: spraying), ``"flowlet"`` (a new
    value after an idle gap), ``"plb"`` (a new value after the receiver reported
    congestion for some rounds in a row)."""
    OPTIONS: Mapping[str, float] = {}
    """The policy's options and their defaults (numbers); ``parse("name:key=value")`` sets
    them, e.g. ``qp-scaling:qps=8``."""
    RULES: Mapping[str, Rule] = {}
    """Each option's rule (``vocab.validate``: finite, in its range, whole where it counts
    things), which ``parse`` checks; every option in ``OPTIONS`` has one."""
    place: Callable[[list[Flow], PathFinder, Mapping[Flow, Path]],
                    Mapping[Flow, Path]] | None = None
    """(when ``PINS``) ``place(flows, finder, current)``: the path of every flow, given the
    paths they have now (``current``, still-valid paths only). Called when the mode is set
    and when a job posts its flows."""
    model: Callable[[list[Flow], PathFinder, ModelContext], Mapping[Flow, Path]] | None = None
    """(unless ``SPLIT`` is True) ``model(flows, finder, ctx)``: the flow model's view, the
    path of every flow (``ctx.seed``, ``ctx.options``, ``ctx.ecmp()`` = the seed's cached
    ECMP assignment)."""
    expand: Callable[[Sequence[Any], Mapping[str, float]], Sequence[Any]] | None = None
    """``expand(flows, options)``: the flows the host actually opens for ``flows`` (left
    out: the same). QP scaling stripes each flow over several QPs. The replay and the flow
    model both call it."""
    sender_settings: Callable[[Mapping[str, float], HostTimes], Mapping[str, Any]] | None = None
    """``sender_settings(options, times)``: what the replay's senders need beyond the
    entropy rule itself (``ReplaySpec`` fields, e.g. flowlet's gap in microseconds from
    ``times.rtt_s``). Left out: nothing more; ``ENTROPY`` and an ``entropies`` option
    are passed on whatever the module says (``Policy.sender_settings``)."""
    receiver_args: Callable[[Mapping[str, float], HostTimes], Sequence[str]] | None = None
    """``receiver_args(options, times)``: ``astral-pktio recv`` options, for a policy whose
    receivers answer the senders (PLB's rounds). Left out: none."""


@dataclass(frozen=True)
class HostTimes:
    """The fabric's times a host-side policy sets its senders and receivers by, in seconds
    (``traffic.hostlb`` takes them from the plan and the path MTU; ``base_rtt_s`` is the
    unit both are made of)."""

    rtt_s: float
    """A full frame's unloaded one-way delay over the longest minimal path, which is also
    the base RTT (the ACK's way back is a tiny frame)."""
    frame_s: float
    """A full frame's time on the slowest link between switches."""


@dataclass(frozen=True)
class Policy(Plugin):
    """A policy module read against ``PolicyModule`` (``options``: set by ``parse``)."""

    options: Mapping[str, float] = field(default_factory=dict)

    CONTRACT = PolicyModule

    @property
    def pins(self) -> bool:
        return bool(self.declared("PINS"))

    @property
    def controller(self) -> bool:
        return bool(self.declared("CONTROLLER"))

    @property
    def polls(self) -> bool:
        return bool(self.declared("POLLS"))

    @property
    def random(self) -> bool:
        return bool(self.declared("RANDOM"))

    @property
    def split(self) -> bool:
        """True when the flow model always splits (a ``SPLIT`` rule decides per job: False
        here, see ``split_rule`` and ``splits``)."""
        rule = self.declared("SPLIT")
        return False if callable(rule) else bool(rule)

    @property
    def split_rule(self) -> bool:
        """True when ``SPLIT`` is a function that decides per job whether to split."""
        return callable(self.declared("SPLIT"))

    def splits(self, flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> bool:
        """Whether the flow model splits ``flows``: ``SPLIT`` itself, or its rule's answer.

        The rule sees ``ctx`` with the policy's options (defaults, then ``parse``'s) laid
        over ``ctx.options``, since a rule such as flowlet's gap depends on them.
        """
        rule = self.declared("SPLIT")
        if not callable(rule):
            return bool(rule)
        opts = {**ctx.options, **self.defaults, **self.options}
        sub = ModelContext(ctx.finder, ctx.flows, ctx.seed, opts, ctx._cache)
        return bool(rule(flows, finder, sub))

    @property
    def method(self) -> str:
        return str(self.declared("METHOD") or f"controllers.policies.{self.module_name}")

    @property
    def note(self) -> str:
        return str(self.declared("NOTE"))

    @property
    def published(self) -> str:
        """The shape its source reported (``PUBLISHED``), for the scenarios' reports."""
        return str(self.declared("PUBLISHED"))

    @property
    def source(self) -> str:
        """Where that was published (``SOURCE``)."""
        return str(self.declared("SOURCE"))

    @property
    def differs(self) -> str:
        """Where the lab's version differs from the published one, and why (``DIFFERS``)."""
        return str(self.declared("DIFFERS"))

    @property
    def whatif(self) -> str | None:
        return self.declared("WHATIF")

    @property
    def entropy(self) -> str:
        return str(self.declared("ENTROPY"))

    @property
    def defaults(self) -> dict[str, float]:
        """The module's options with their default values."""
        return dict(self.declared("OPTIONS"))

    @property
    def rules(self) -> dict[str, Rule]:
        """Each option's rule (``RULES``)."""
        return dict(self.declared("RULES"))

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
        return self.hook("expand") is not None

    def sender_settings(self, times: HostTimes) -> dict[str, Any]:
        """The ``ReplaySpec`` fields of this policy's entropy rule: none for one port per
        QP; else ``ENTROPY``, its ``entropies`` option if it has one, and whatever the
        module's ``sender_settings`` adds (its options: defaults, then ``parse``'s)."""
        if self.entropy == "qp":
            return {}
        out: dict[str, Any] = {"entropy": self.entropy}
        if "entropies" in self.defaults:
            out["entropies"] = int(self.option("entropies"))
        fn = self.hook("sender_settings")
        if fn is not None:
            out.update(fn({**self.defaults, **self.options}, times))
        return out

    def receiver_args(self, times: HostTimes) -> list[str]:
        """The receivers' ``astral-pktio recv`` options (the module's ``receiver_args``)."""
        fn = self.hook("receiver_args")
        return [] if fn is None else list(fn({**self.defaults, **self.options}, times))

    def expand(self, flows: Sequence[Any]) -> list[Any]:
        """The flows the host opens for ``flows`` (``expand`` of the module, if any)."""
        fn = self.hook("expand")
        if fn is None:
            return list(flows)
        return list(fn(flows, {**self.defaults, **self.options}))

    def place(self, flows: list[Flow], finder: PathFinder,
              current: Mapping[Flow, Path]) -> dict[Flow, Path]:
        """The controller's paths for ``flows`` (only for a policy that pins)."""
        fn = self.hook("place")
        if not self.pins or fn is None:
            return {}
        return dict(fn(flows, finder, current))

    def model(self, flows: list[Flow], finder: PathFinder, ctx: ModelContext
              ) -> dict[Flow, Path]:
        """The flow model's paths for ``flows`` (not for a split policy)."""
        fn = self.hook("model")
        if fn is None:
            raise ValueError(f"policy {self.name} has no model(flows, finder, ctx) and does "
                             "not SPLIT: the flow model cannot route it")
        return dict(fn(flows, finder, ctx))


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
        if self.seed not in self._cache:
            self._cache[self.seed] = lb.ecmp_assign(self.flows, self.finder, self.seed)
        return self._cache[self.seed]


#: Every policy, in listing order (each module's ``ORDER``, then the rest by name).
POLICIES: Plugins[Policy] = Plugins("policy", __name__, Policy)
#: The policies the controller runs (``CONTROLLER``): its modes.
CONTROLLER_MODES: Plugins[Policy] = POLICIES.where("controller mode", lambda p: p.controller)


def parse(spec: str, controller: bool = False) -> Policy:
    """A policy with options: ``"name"`` or ``"name:key=value:key=value"``.

    One ``ValueError`` for an unknown name, an unknown option (naming the known ones), an
    option given twice or a value outside the option's rule (``RULES``), so a value that
    would make the model or a sender churn is refused here, before any work.
    """
    name, *pairs = spec.strip().split(":")
    pol = (CONTROLLER_MODES if controller else POLICIES).get(name)
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
    pols = POLICIES.all()
    return tuple(n for n in (pols if policies is None else policies)
                 if n in pols and pols[n].random)


def table() -> list[dict[str, Any]]:
    """One row per policy for ``astral-lab policies``: name, where it runs, what it does."""
    rows = []
    for p in POLICIES.all().values():
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
