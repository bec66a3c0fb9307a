"""Topologies, one module each: ``testbed/topologies/<name>.py``. Pure, no root.

A topology's name is its module's name. The module holds the design's rules once
(``TopologyModule``: its builder, its closed-form counts for the cost model, what the flow
model needs, and the ``FabricSpec`` fields it reads); what every design is built and counted
with is ``testbed.fabricspec``. ``astral-lab topo``, ``up``, ``cost``, ``model``, the ``mn
--custom testbed/shell/mntopo.py`` file and the scenarios find topologies in ``TOPOLOGIES``,
so a new design is a new file: copy the closest one under a new name and change its rules.

The four shipped designs, all built from the same ``FabricSpec`` so comparisons are at
equal GPU count and equal NIC speed:

``astral3``
    Astral 3.0's flattened two-tier, single-rail fabric. NIC *i* of every server
    in a block attaches to leaf *i* of that block (rail-aligned). Each leaf's
    uplink ports are split lane by lane by an optical shuffle so every leaf
    reaches every spine: any GPU reaches any other in leaf-spine-leaf.
``rail3``
    The three-tier rail-optimized fabric of Astral/Xingmai 2.0: rail ToRs,
    aggregation switches per rail (same-rail traffic turns there) and a core
    for cross-rail traffic. Uplink ports are cabled whole (no shuffle).
``railonly``
    Per-rail two-tier networks with no switch across rails. Cross-rail traffic is
    relayed inside the source server over NVLink to the GPU on the destination's
    rail; the NVLink domain is a per-server switch (``nvsN``) with its own rate.
``fattree``
    A textbook k-ary fat-tree with the GPU NICs as hosts (a server's NICs on
    consecutive edge ports, as in a cluster that is not rail-optimized).

Switch capacity is given as ``radix`` in SerDes lanes of ``lane_gbps``
(51.2 Tb/s = 256 x 200G), so one number bounds NIC ports, multi-lane uplink
ports and single lanes alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from testbed.fabricspec import (
    COMMON_OPTIONS,
    FABRIC_RULES,
    GPU_COUNT,
    CostSpec,
    Fabric,
    FabricSpec,
    check_options,
    fill_servers_per_block,
)
from vocab.plan import WiringPlan
from vocab.plugins import Plugin, Plugins


class TopologyModule(Protocol):
    """What a topology module declares and implements; ``Topology`` reads it.

    ``build``, ``counts`` and ``size`` are required (each gets the design's name to write
    into what it returns, so a copied module names itself); the rest have defaults.
    """

    OPTIONS: tuple[str, ...] | None = None
    """The ``FabricSpec`` fields it reads beyond the common ones (``COMMON_OPTIONS``), so
    that any other field given a value other than its default is an error naming it
    instead of being ignored. None: it reads them all."""
    BLOCKS: bool = False
    """Servers are grouped into blocks that share leaves (the flow model fills leaves)."""
    BISECTION: bool = False
    """The flow model's bisection bound between halves of the blocks applies."""
    two_tier: Callable[..., tuple[int, int, int]] | None = None
    """``two_tier(spec, ...)``: the rules the flow model's aggregate what-if uses (left out:
    no what-if for this design)."""

    def build(self, spec: FabricSpec, name: str) -> WiringPlan:
        """The wiring plan of ``spec`` (real units in, the emulated plan out)."""

    def counts(self, spec: FabricSpec, name: str) -> Fabric:
        """Closed-form counts of the fabric ``build`` wires for ``spec`` (the same fabric)."""

    def size(self, gpus: int, spec: CostSpec, name: str) -> Fabric:
        """Closed-form counts of a ``gpus``-GPU fabric sized as a buyer would, any scale."""


@dataclass(frozen=True)
class Topology(Plugin):
    """A topology module read against ``TopologyModule``."""

    CONTRACT = TopologyModule

    @property
    def blocks(self) -> bool:
        """Servers are grouped into blocks that share leaves (the flow model fills leaves)."""
        return bool(self.declared("BLOCKS"))

    @property
    def bisection(self) -> bool:
        """The flow model's bisection bound between halves of the blocks applies."""
        return bool(self.declared("BISECTION"))

    @property
    def options(self) -> tuple[str, ...]:
        """The ``FabricSpec`` fields the design reads: the common ones and its ``OPTIONS``
        (a module without ``OPTIONS`` is taken to read them all)."""
        extra = self.declared("OPTIONS")
        if extra is None:
            return tuple(FabricSpec.field_names())
        return tuple(f for f in FabricSpec.field_names()
                     if f in COMMON_OPTIONS or f in extra)

    def check(self, spec: FabricSpec) -> None:
        """A ValueError naming any parameter set to other than its default that the
        design does not read (it would be ignored, not built)."""
        check_options(spec, self.name, self.options)

    def resolve(self, spec: FabricSpec) -> FabricSpec:
        """``spec`` as built: ``servers_per_block=0`` filled (a design that reads it), so
        every verb means the same fabric by it; checked as ``check`` does."""
        self.check(spec)
        return fill_servers_per_block(spec) if "servers_per_block" in self.options else spec

    @property
    def two_tier(self) -> Callable[..., tuple[int, int, int]] | None:
        """The rules the flow model's aggregate what-if uses, if the design has them."""
        rules = self.hook("two_tier")
        if rules is None:
            return None

        def checked(spec: FabricSpec, *args: object, **kwargs: object) -> tuple[int, int, int]:
            return rules(self.resolve(spec), *args, **kwargs)
        return checked

    def build(self, spec: FabricSpec) -> WiringPlan:
        return self.module.build(self.resolve(spec), self.name)

    def counts(self, spec: FabricSpec) -> Fabric:
        return self.module.counts(self.resolve(spec), self.name)

    def size(self, gpus: int, spec: CostSpec) -> Fabric:
        return self.module.size(gpus, spec, self.name)


#: Every topology, in listing order (each module's ``ORDER``, then the rest by name).
TOPOLOGIES: Plugins[Topology] = Plugins("topology", __name__, Topology, dashes=False)


class _Builders(Mapping[str, Callable[[FabricSpec], WiringPlan]]):
    """name -> builder, read from ``TOPOLOGIES`` each time (so a new module is seen)."""

    def __getitem__(self, name: str) -> Callable[[FabricSpec], WiringPlan]:
        topo = TOPOLOGIES.find(name)
        if topo is None:
            raise KeyError(name)
        return topo.build

    def __iter__(self) -> Iterator[str]:
        return iter(TOPOLOGIES.names())

    def __len__(self) -> int:
        return len(TOPOLOGIES.names())


#: name -> builder; ``astral-lab topo <name>`` and ``mn --topo <name>`` use this.
BUILDERS: Mapping[str, Callable[[FabricSpec], WiringPlan]] = _Builders()


def build(topology: str, **params: object) -> WiringPlan:
    """Build a wiring plan by topology name; unknown names and parameters are clear errors."""
    return TOPOLOGIES.get(topology).build(fabric_spec(topology, **params))


def fabric_spec(topology: str, **params: object) -> FabricSpec:
    """The spec every verb builds for ``topology`` from these ``FabricSpec`` fields: each
    checked by its rule (``FABRIC_RULES``), the rest ``FabricSpec``'s defaults, and
    ``servers_per_block=0`` filled (``Topology.resolve``). ``topo``, ``up``, ``model``, the
    scenarios and ``mn --custom`` all come here, so the same words give the same fabric."""
    topo = TOPOLOGIES.get(topology)
    known = set(FabricSpec.field_names())
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    typed = {name: FABRIC_RULES[name].check(value, name) for name, value in params.items()}
    return topo.resolve(FabricSpec(**typed))  # type: ignore[arg-type]


#: how a verb's user names the three size options in a message: its flags (``topo``,
#: ``up``, ``model``, the scenarios) or ``mn --topo NAME,key=value`` words
CLI_WORDS = ("--gpus", "--gpus-per-server", "--servers")
MN_WORDS = ("gpus=", "gpus_per_server=", "servers=")
#: the most servers a fabric has (``FABRIC_RULES``)
MAX_SERVERS = int(FABRIC_RULES["servers"].high or 0)


def _said(word: str, value: object) -> str:
    return f"{word}{value}" if word.endswith("=") else f"{word} {value}"


def fabric_size(gpus: int | None = None, gpus_per_server: int | None = None,
                servers: int | None = None, *, max_servers: int = MAX_SERVERS,
                words: tuple[str, str, str] = CLI_WORDS, taker: str = "the builders take"
                ) -> tuple[int, int]:
    """``(servers, GPUs per server)`` of a fabric sized as users size it: ``gpus`` is the
    total GPU count and ``gpus_per_server`` the server's, in every verb, so one word means
    one thing; ``servers`` (where a verb offers it) is another way to give the total.

    Left out, ``gpus_per_server`` is ``FabricSpec``'s, and the total is ``servers`` of
    those or else ``FabricSpec``'s (``model --gpus-per-server 4`` keeps the 32 GPUs). A
    total that does not split evenly, or a ``servers`` that disagrees with it, is a
    ValueError in one line naming the options as ``words`` spells them; so is a fabric of
    more than ``max_servers`` servers (``taker``: who refuses it, and the verb).
    """
    g_word, gps_word, s_word = words
    defaults = FabricSpec()
    gps = defaults.gpus if gpus_per_server is None else \
        FABRIC_RULES["gpus"].check(gpus_per_server, gps_word.rstrip("="))
    per = f"servers of {gps} GPUs ({gps_word.rstrip('=')})"
    if servers is not None:
        servers = FABRIC_RULES["servers"].check(servers, s_word.rstrip("="))
    if gpus is None:
        if servers is not None:
            return servers, gps
        total = defaults.gpu_count
        if total % gps:
            raise ValueError(f"{_said(g_word, total)} (the default) does not split evenly "
                             f"over {per}: give {g_word.rstrip('=')} as a multiple of {gps}")
    else:
        total = GPU_COUNT.check(gpus, g_word.rstrip("="))
        if servers is not None and servers * gps != total:
            raise ValueError(f"{_said(s_word, servers)} and {_said(g_word, total)} disagree: "
                             f"{servers:,} {per} are {servers * gps:,} GPUs; give one of "
                             f"{s_word.rstrip('=')} and {g_word.rstrip('=')}")
        if total % gps:
            raise ValueError(f"{_said(g_word, total)} does not split evenly over {per}: "
                             f"give a multiple of {gps}")
    n = total // gps
    if n > max_servers:
        raise ValueError(f"{_said(g_word, total)} is {n:,} servers of {gps} GPUs; {taker} "
                         f"at most {max_servers:,} ({max_servers * gps:,} GPUs; more per "
                         f"server with {gps_word.rstrip('=')})")
    return n, gps


def spec_for_gpus(topology: str, gpus: int | None = None, gpus_per_server: int | None = None,
                  servers: int | None = None, *, words: tuple[str, str, str] = CLI_WORDS,
                  **params: object) -> FabricSpec:
    """``spec`` from the words users size a fabric with (``fabric_size``: ``gpus`` in all,
    ``gpus_per_server`` each, or ``servers``) and the other ``FabricSpec`` fields; left
    out, the size is ``FabricSpec``'s, so ``model astral3`` is the fabric ``topo astral3``
    draws. ``FabricSpec.gpus`` itself is GPUs per server: it is set here, never passed."""
    n, gps = fabric_size(gpus, gpus_per_server, servers, words=words)
    return fabric_spec(topology, servers=n, gpus=gps, **params)


def build_for_gpus(topology: str, gpus: int | None = None, gpus_per_server: int | None = None,
                   servers: int | None = None, *, words: tuple[str, str, str] = CLI_WORDS,
                   **params: object) -> WiringPlan:
    """The wiring plan of ``spec_for_gpus``: what ``topo``, ``up``, the scenarios and ``mn
    --custom`` build from the size their user gives."""
    spec = spec_for_gpus(topology, gpus, gpus_per_server, servers, words=words, **params)
    return TOPOLOGIES.get(topology).build(spec)


def describe(plan: WiringPlan) -> str:
    """The counts table that ``astral-lab topo`` prints."""
    rows = [("topology", plan.topology)]
    for key, value in plan.counts.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        rows.append((key.replace("_", " "), str(value)))
    rates = sorted({(link.kind, link.gbps, link.mbps) for link in plan.links})
    for kind, gbps, mbps in rates:
        rows.append((f"{kind} link", f"{gbps:g} Gb/s real -> {mbps:g} Mb/s emulated"))
    rows.append(("scale", f"{plan.scale:g} (emulated Mb/s = real Gb/s x {1000 * plan.scale:g})"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
