"""Fault injection on a running ``Lab``: break a named part of the fabric on a schedule, mend it.

    from testbed.faults import Fault, FaultInjector, random_schedule

    with Lab(plan) as lab, FaultInjector(lab) as inj:
        h = inj.inject(Fault("link-degrade", "lf0r1~spine2#0", fraction=0.25))
        ...                                     # measure: the lane now carries 1/4 of its rate
        inj.undo(h)                             # the exact previous rate is back
        run = inj.run_schedule(random_schedule(plan, n=8, duration_s=120, seed=1))
        run.wait()                              # run.events is the ground truth, with times
    # leaving the block undoes whatever is still active, also on an error or Ctrl-C

Why a module of its own: the operations layer (telemetry, detectors, the diagnosis
agent and its scored evaluation) needs faults whose *where* and *when* are known
exactly, so it can score an answer. Every fault therefore has a ground-truth
``component`` named the way the wiring plan names things (a lane ``lf0r1~spine2#0``,
a switch ``spine2``, a NIC by its host ``s1g3``, or ``controller``), and every
change the injector makes is written to an event log with wall-clock times.

The kinds, and how each is realised on Linux (docs/faults.md has the long version):

``link-down``      ``Lab.set_link(..., up=False)``: both ends, so both switches see port status.
``link-flap``      down/up every ``period/2`` seconds, ``count`` times, then left up.
``link-degrade``   the HTB class of *both* ends changed to ``fraction`` x its rate
                   (``tc class change``), read back, and the exact previous rate restored.
``nic-loss``       random loss of IPv4 frames (not ARP) on a host NIC, inside the host's
                   namespace, with an nftables table ``astral_lab_faults`` (netdev
                   ingress/egress hooks on the NIC; iptables ``statistic`` as a fallback).
``switch-down``    every link of a switch down (those that were up), restored after.
``controller-kill`` / ``controller-restart``  ``Lab.kill_controller`` / ``restart_controller``.
``hot-receiver``   incast onto one host: the per-source shares of an MoE dispatch whose hot
                   experts sit on the target's GPU (``traffic.workload`` + ``traffic.kernels``),
                   played as steady UDP streams (``testbed.probe``) at ``overload`` x its NIC.

Pure parts (no root, unit-tested): ``Fault`` and its validation, ``parse_target``,
``resolve``, ``canonical_component``, the exact ``tc``/``nft``/``iptables`` commands,
``incast_weights`` and ``random_schedule``. The shell part is ``FaultInjector``.
Removing what a crashed run left (``cleanup_faults``, re-exported here) belongs to
``testbed.cleanup``, and the names it goes by to ``testbed.faultmarks``, so that
``astral-lab clean`` needs no injector and ``cleanup`` never imports this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from testbed import cleanup
from testbed.cleanup import cleanup_faults as cleanup_faults
from testbed.cleanup import fault_processes as fault_processes
from testbed.cleanup import nic_loss_leftovers
from testbed.faultmarks import (
    ENV_MARK,
    IPT_IN,
    IPT_OUT,
    NFT_FAMILY,
    NFT_TABLE,
    SINK,
    SINK_PEER,
)
from testbed.lab import htb_commands
from testbed.plan import Link, WiringPlan
from testbed.preflight import LabError

KINDS = ("link-down", "link-flap", "link-degrade", "nic-loss", "switch-down",
         "controller-kill", "controller-restart", "hot-receiver")
#: What each kind's ``target`` must name.
TARGET_KIND = {"link-down": "link", "link-flap": "link", "link-degrade": "link",
               "nic-loss": "host", "switch-down": "switch", "controller-kill": "controller",
               "controller-restart": "controller", "hot-receiver": "host"}
DIRECTIONS = ("ingress", "egress", "both")
CONTROLLER = "controller"

#: ``numgen random mod NUMGEN_MOD < k``: a probability in steps of one in a million.
NUMGEN_MOD = 1_000_000
#: UDP port of hot-receiver streams (4791 stays free for RoCE replay receivers on the target).
HOT_PORT = 4792
HOT_PAYLOAD = 1000  # UDP payload bytes of hot-receiver packets
HOT_SPORT_BASE = 52000  # sender i of fault id f: UDP source port 52000 + 200 * (f % 64) + i
MAX_HOT_SENDERS = 200
WIRE_OVERHEAD = 42  # Ethernet 14 + IPv4 20 + UDP 8 bytes around a UDP payload


class FaultError(LabError):
    """A fault cannot be applied or undone here; the message says what is missing or wrong."""


# ----------------------------------------------------------------------------------------
# Fault descriptions (plain data) and their names
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    """One fault: what, where, when, and the knobs of its kind.

    ``target`` uses the wiring plan's names: a link ``a~b`` or ``a~b#k`` (k = which of
    several parallel cables between a and b, in plan order, as ``Lab.set_link``'s
    ``lane``), a switch, a host (its NIC), or ``controller``. ``at`` is seconds after
    the start of a schedule (``inject`` applies a fault at once and ignores it);
    ``duration`` is seconds until it is undone (None: until ``undo``). ``link-flap``
    lasts ``count * period`` and takes no duration; for ``controller-restart`` the
    duration is the downtime between kill and start (None = 0).

    Kind knobs: ``period``, ``count`` (link-flap); ``fraction`` (link-degrade: new rate
    = fraction x configured rate); ``probability``, ``direction`` (nic-loss);
    ``overload``, ``hot_share``, ``senders``, ``seed`` (hot-receiver: offered load as a
    multiple of the target's NIC rate, share of routing that goes to the hot experts,
    at most this many sources (0 = all), the workload seed). Every knob is validated
    whatever the kind, so a typo is caught even where the knob is unused.
    """

    kind: str
    target: str = ""
    at: float = 0.0
    duration: float | None = None
    period: float = 1.0
    count: int = 3
    fraction: float = 0.25
    probability: float = 0.1
    direction: str = "both"
    overload: float = 2.0
    hot_share: float = 0.5
    senders: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)} (got {self.kind!r})")
        if TARGET_KIND[self.kind] == CONTROLLER:
            if self.target not in ("", CONTROLLER):
                raise ValueError(f"target of {self.kind} must be 'controller' (got "
                                 f"{self.target!r})")
            object.__setattr__(self, "target", CONTROLLER)
        elif not isinstance(self.target, str) or not self.target:
            raise ValueError(f"target: {self.kind} needs a {TARGET_KIND[self.kind]} name")
        _number("at", self.at, low=0.0)
        if self.duration is not None:
            _number("duration", self.duration, low=0.0)
            if self.kind == "link-flap":
                raise ValueError("duration: a link-flap lasts count x period; leave duration "
                                 "None and set period and count")
        _number("period", self.period, low=0.0, low_open=True)
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"count must be an integer >= 1 (got {self.count!r})")
        _number("fraction", self.fraction, low=0.0, high=1.0, low_open=True, high_open=True,
                why="link-degrade sets the rate to fraction x the configured rate")
        _number("probability", self.probability, low=0.0, high=1.0, low_open=True,
                why="nic-loss drops each IPv4 frame with this probability")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)} "
                             f"(got {self.direction!r})")
        _number("overload", self.overload, low=0.0, low_open=True)
        _number("hot_share", self.hot_share, low=0.0, high=1.0, low_open=True, high_open=True)
        for name in ("senders", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (got {value!r})")

    @property
    def span(self) -> float | None:
        """Seconds from injection to undo (None: open-ended, until ``undo``)."""
        if self.kind == "link-flap":
            return self.period * self.count
        if self.kind == "controller-restart":
            return self.duration or 0.0
        return self.duration

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
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown fault field(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(known))}")
        return cls(**data)


def _number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, high_open: bool = False, why: str = "") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite number in the range."""
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
    wrong kind of thing (e.g. a host for switch-down). Pure.
    """
    want = TARGET_KIND[fault.kind]
    target = parse_target(plan, fault.target)
    if target.kind != want:
        raise ValueError(f"target {fault.target!r} is a {target.kind}; {fault.kind} needs a "
                         f"{want} ({_example(plan, want)})")
    if fault.kind == "hot-receiver":
        incast_weights(plan, target.name, hot_share=fault.hot_share, seed=fault.seed)
    return dataclasses.replace(fault, target=target.name)


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
# Pure command construction
# ----------------------------------------------------------------------------------------
def link_ends(plan: WiringPlan, link: Link) -> list[tuple[str, str, bool]]:
    """``(node, interface, in a host namespace?)`` for both ends of ``link``."""
    hosts = {h.name for h in plan.hosts}
    return [(link.a, link.a_intf, link.a in hosts), (link.b, link.b_intf, link.b in hosts)]


def htb_rate_command(dev: str, mbps: float) -> list[str]:
    """``tc class change`` of the lab's HTB class 5:1 on ``dev`` to ``mbps``.

    Built from ``testbed.lab.htb_commands`` (its ``class add`` line, verb changed) so
    burst and quantum stay exactly what bring-up used; only the rate differs.
    """
    add = next(c for c in htb_commands(dev, mbps) if c.startswith("class add "))
    return ["tc", *("class change " + add[len("class add "):]).split()]


def degrade_commands(plan: WiringPlan, link: Link, mbps: float
                     ) -> list[tuple[str | None, list[str]]]:
    """The commands that set both ends of ``link`` to ``mbps``: ``(host or None, argv)``.

    ``host`` names the namespace a host-side end lives in; None is the root namespace
    (switch ports).
    """
    return [(node if in_host else None, htb_rate_command(intf, mbps))
            for node, intf, in_host in link_ends(plan, link)]


def nft_loss_script(dev: str, probability: float, direction: str = "both") -> str:
    """``nft -f`` input: drop IPv4 frames with ``probability`` on ``dev`` (netdev hooks).

    Only ``meta protocol ip`` frames are touched, so ARP keeps working (a lossy link
    loses ARP too, but then a loss fault turns into reachability noise). Ingress losses
    are dropped before the host's stack sees them; egress losses are forwarded to the
    ``astral-sink`` veth (see ``SINK``) so the sending socket is not told.
    """
    k = max(1, round(probability * NUMGEN_MOD))
    # nft refuses a bound equal to the modulus: probability 1 simply matches every frame
    chance = f"numgen random mod {NUMGEN_MOD} < {k} " if k < NUMGEN_MOD else ""
    lines = [f"table {NFT_FAMILY} {NFT_TABLE} {{"]
    hooks = (("ingress", "drop"), ("egress", f'fwd to "{SINK}"'))
    for hook, verdict in hooks:
        if direction in (hook, "both"):
            lines += [f"  chain {hook} {{",
                      f'    type filter hook {hook} device "{dev}" priority -500; '
                      "policy accept;",
                      f"    meta protocol ip {chance}counter {verdict}",
                      "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def nft_loss_commands(dev: str, probability: float, direction: str = "both"
                      ) -> tuple[list[list[str]], str, list[list[str]]]:
    """``(setup argv list, nft script, undo argv list)`` for a nic-loss with nftables.

    Run inside the host's namespace: setup first (the egress sink), then
    ``nft -f -`` with the script; undo deletes the table and the sink.
    """
    setup: list[list[str]] = []
    undo = [["nft", "delete", "table", NFT_FAMILY, NFT_TABLE]]
    if direction in ("egress", "both"):
        setup = [["ip", "link", "add", SINK, "type", "veth", "peer", "name", SINK_PEER],
                 ["ip", "link", "set", SINK, "up"]]
        undo.append(["ip", "link", "del", SINK])
    return setup, nft_loss_script(dev, probability, direction), undo


def iptables_loss_commands(dev: str, probability: float, direction: str = "both"
                           ) -> tuple[list[list[str]], list[list[str]]]:
    """``(setup, undo)`` argv lists for a nic-loss with iptables' ``statistic`` match.

    The fallback where nftables cannot be used. IPv4 only (ARP untouched), and only
    what the host's own IP stack sends or receives: INPUT sees every frame for the
    host, but OUTPUT misses raw-socket senders (the replay agents), and a DROP in
    OUTPUT is reported to the sending socket (EPERM).
    """
    p = f"{probability:.6f}"
    setup: list[list[str]] = []
    undo: list[list[str]] = []
    for chain, parent, flag, hook in ((IPT_IN, "INPUT", "-i", "ingress"),
                                      (IPT_OUT, "OUTPUT", "-o", "egress")):
        if direction not in (hook, "both"):
            continue
        setup += [["iptables", "-w", "-N", chain],
                  ["iptables", "-w", "-A", chain, flag, dev, "-m", "statistic", "--mode",
                   "random", "--probability", p, "-j", "DROP"],
                  ["iptables", "-w", "-I", parent, "1", "-j", chain]]
        undo += [["iptables", "-w", "-D", parent, "-j", chain],
                 ["iptables", "-w", "-F", chain], ["iptables", "-w", "-X", chain]]
    return setup, undo


_RATE = re.compile(r"\brate (?P<num>[0-9.]+)(?P<unit>[KMGT]?)bit\b")
_UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_htb_rate(tc_class_show: str) -> float | None:
    """Rate in Mb/s of the first HTB class in ``tc class show`` output (None if none)."""
    m = _RATE.search(tc_class_show)
    return None if m is None else float(m["num"]) * _UNITS[m["unit"]] / 1e6


# ----------------------------------------------------------------------------------------
# Hot receiver: the incast's shape from the MoE workload model
# ----------------------------------------------------------------------------------------
def incast_bytes(plan: WiringPlan, target: str, *, hot_share: float = 0.5, seed: int = 0,
                 tokens_per_gpu: int = 128, intra_server: str = "nvlink") -> dict[str, int]:
    """Bytes each source host's NIC sends to ``target`` in one hot decode step. Pure.

    One decode step of DeepSeek-V3 (``traffic.workload.simulate_step``; node-limited
    routing off, so any plan size works) with hot-set gating: the experts of one GPU
    take ``hot_share`` of the routing. Contiguous placement puts those experts on GPU
    0 of server 0, so the ranks are relabelled (servers rotated, GPU indexes rotated
    within a server: a relabelling the model is symmetric under) to put that GPU on
    ``target``. The low-latency kernel (``traffic.kernels.low_latency``) then says how
    many bytes each other GPU's NIC sends to it; with ``intra_server="nvlink"`` GPUs
    of the target's own server use NVLink and are not sources.
    """
    from traffic.kernels import Cluster, low_latency
    from traffic.workload import hotset, preset, simulate_step

    node = plan.node(target)
    if node.kind != "host":
        raise ValueError(f"target {target!r} is not a host")
    try:
        cluster = Cluster.from_plan(plan)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"target: this plan has no (server, gpu) grid for an incast: {exc}"
                         ) from None
    S, P = cluster.servers, cluster.gpus_per_server
    t_server, t_gpu = int(node.loc["server"]), int(node.loc["gpu"])
    model = dataclasses.replace(preset("deepseek-v3"), max_nodes_per_token=None)
    experts = model.routed_experts
    hot = max(1, experts // (S * P))
    step = simulate_step(model, S, P, tokens_per_gpu,
                         gating=hotset(hot / experts, hot_share, shuffle=False), seed=seed)
    flows = low_latency(step, phases=("dispatch",), intra_server=intra_server).flows
    rank_of = {name: r for r, name in enumerate(Cluster.default(S, P).hosts)}
    sent: dict[str, int] = {}
    for f in flows:
        if rank_of[f.dst] != 0:
            continue
        s, g = divmod(rank_of[f.src], P)
        src = cluster.host(((s + t_server) % S) * P + (g + t_gpu) % P)
        sent[src] = sent.get(src, 0) + f.bytes
    if not sum(sent.values()):
        raise ValueError(f"target {target!r}: no host sends to it over the fabric in this plan "
                         "(a single server talks over NVLink); use a plan with 2+ servers")
    return {h: sent[h] for h in sorted(sent, key=lambda h: (-sent[h], h))}


def incast_weights(plan: WiringPlan, target: str, *, hot_share: float = 0.5, seed: int = 0,
                   intra_server: str = "nvlink") -> dict[str, float]:
    """Share of the hot-receiver incast each source sends (sums to 1; heaviest first). Pure."""
    sent = incast_bytes(plan, target, hot_share=hot_share, seed=seed, intra_server=intra_server)
    total = sum(sent.values())
    return {h: b / total for h, b in sent.items()}


def hot_streams(plan: WiringPlan, fault: Fault, sport_base: int = HOT_SPORT_BASE
                ) -> list[dict[str, Any]]:
    """The hot-receiver's UDP streams: ``{src, sport, mbps, pps}`` per source. Pure.

    Offered load is ``overload`` x the target's NIC rate, split by ``incast_weights``
    (the ``senders`` heaviest sources when ``senders`` > 0, at most ``MAX_HOT_SENDERS``),
    each capped at its own NIC's rate; packets carry ``HOT_PAYLOAD`` bytes (+42 on the
    wire). Source i sends from UDP port ``sport_base + i`` (the receiver tells sources
    apart by it).
    """
    weights = incast_weights(plan, fault.target, hot_share=fault.hot_share, seed=fault.seed)
    chosen = list(weights)[:min(fault.senders or MAX_HOT_SENDERS, MAX_HOT_SENDERS)]
    norm = sum(weights[h] for h in chosen)
    nic = plan.host_link_mbps()
    offered = fault.overload * nic[fault.target]
    out = []
    for i, src in enumerate(chosen):
        mbps = min(nic[src], offered * weights[src] / norm)
        pps = mbps * 1e6 / (8 * (HOT_PAYLOAD + WIRE_OVERHEAD))
        if pps >= 1:
            out.append({"src": src, "sport": sport_base + i, "mbps": round(mbps, 4),
                        "pps": round(pps, 2)})
    return out


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


def random_schedule(plan: WiringPlan, kinds: Iterable[str] | None = None, n: int = 8,
                    duration_s: float = 120.0, seed: int = 0, min_gap_s: float = 5.0,
                    overlap: bool = False) -> list[Fault]:
    """``n`` faults within ``duration_s`` seconds, reproducible for a ``seed``. Pure.

    Kinds are spread evenly (a seeded order of ``kinds`` repeated, so counts differ by
    at most one and every kind appears once ``n >= len(kinds)``). Targets: links
    among ``traffic_links`` (leaf-spine lanes), switches among ``leaf_switches``,
    NICs among the hosts. Without ``overlap`` the run is cut into ``n`` equal slots
    and each fault, with its recovery gap of ``min_gap_s``, fits in its own slot, so
    faults never overlap and are ``min_gap_s`` apart. Kind knobs are drawn from ranges
    a detector should see: degrade to 10-50%, loss 2-20%, 2-4 flaps.
    """
    kinds = list(KINDS if kinds is None else kinds)
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"kinds: unknown kind {k!r}; choose from {', '.join(KINDS)}")
    if not kinds:
        raise ValueError("kinds must name at least one kind")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1 (got {n!r})")
    _number("duration_s", duration_s, low=0.0, low_open=True)
    _number("min_gap_s", min_gap_s, low=0.0)
    slot = duration_s / n
    room = slot - min_gap_s
    if not overlap and room < 1.0:
        raise ValueError(f"duration_s={duration_s:g} is too short for n={n} faults with "
                         f"min_gap_s={min_gap_s:g}: each needs >= {min_gap_s + 1:g} s")
    rng = random.Random(seed)
    pools = {"link": [link_name(plan, ln) for ln in traffic_links(plan)],
             "switch": leaf_switches(plan), "host": [h.name for h in plan.hosts],
             CONTROLLER: [CONTROLLER]}
    if "hot-receiver" in kinds:
        pools["hot"] = pools["host"] if _has_incast(plan) else []
    for k in kinds:
        pool = pools["hot" if k == "hot-receiver" else TARGET_KIND[k]]
        if not pool:
            raise ValueError(f"kinds: this plan has no target for {k}")
    order = kinds[:]
    rng.shuffle(order)
    faults = []
    for i in range(n):
        kind = order[i % len(order)]
        pool = pools["hot" if kind == "hot-receiver" else TARGET_KIND[kind]]
        target = rng.choice(pool)
        span = rng.uniform(0.5, 1.0) * (room if not overlap else min(slot, duration_s / 2))
        span = max(span, 0.5)
        if overlap:
            at = rng.uniform(0.0, max(0.0, duration_s - span))
        else:
            at = i * slot + rng.uniform(0.0, room - span)
        knobs: dict[str, Any] = {}
        if kind == "link-flap":
            count = rng.randint(2, 4)
            knobs = {"count": count, "period": round(span / count, 3)}
        elif kind == "link-degrade":
            knobs = {"fraction": round(rng.uniform(0.1, 0.5), 3)}
        elif kind == "nic-loss":
            knobs = {"probability": round(rng.uniform(0.02, 0.2), 3)}
        elif kind == "hot-receiver":
            knobs = {"seed": rng.randrange(1 << 16)}
        duration = None if kind == "link-flap" else round(span, 3)
        faults.append(Fault(kind, target, at=round(at, 3), duration=duration, **knobs))
    return sorted(faults, key=lambda f: f.at)


def _has_incast(plan: WiringPlan) -> bool:
    """Can a hot receiver get traffic over the fabric here? (GPUs on 2+ servers.)"""
    from traffic.kernels import Cluster

    try:
        return Cluster.from_plan(plan).servers >= 2
    except (KeyError, ValueError):
        return False


# ----------------------------------------------------------------------------------------
# The injector (shell)
# ----------------------------------------------------------------------------------------
@dataclass(eq=False)
class Handle:
    """One injected fault: its resolved description, state and what undo needs."""

    id: int
    fault: Fault
    component: str
    injected_at: float = 0.0  # time.time()
    state: str = "active"  # active -> undoing -> undone (or failed)
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _worker: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    @property
    def active(self) -> bool:
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the fault has been undone (by a timer, a flap's end, or ``undo``)."""
        return self._done.wait(timeout)


def _pause(stop: threading.Event, seconds: float, clock: Callable[[], float]) -> bool:
    """Sleep ``seconds`` of ``clock`` time; True if ``stop`` was set meanwhile."""
    end = clock() + seconds
    while True:
        left = end - clock()
        if left <= 0:
            return stop.is_set()
        if stop.wait(min(left, 0.05)):
            return True


class FaultInjector:
    """Applies ``Fault``s to a running ``Lab`` and undoes them; a context manager.

    Every change is logged in ``events`` (dicts: ``time`` = ``time.time()``, ``kind``,
    ``component``, ``action`` in inject / undo / flap-down / flap-up / error, ``fault_id``,
    and ``detail`` where there is something to say). Leaving the ``with`` block (also on
    an exception or Ctrl-C) stops running schedules and undoes every active fault.

    ``nic_loss_backend``: "auto" (nftables, else iptables), "nft" or "iptables".
    ``clock`` is the monotonic time source for durations, flaps and schedules.
    """

    def __init__(self, lab: Any, *, nic_loss_backend: str = "auto",
                 clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] | None = None) -> None:
        if nic_loss_backend not in ("auto", "nft", "iptables"):
            raise ValueError("nic_loss_backend must be auto, nft or iptables "
                             f"(got {nic_loss_backend!r})")
        self.lab = lab
        self.plan: WiringPlan = lab.plan
        self.nic_loss_backend = nic_loss_backend
        self.clock = clock
        self.log = log or (lambda _msg: None)
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._handles: dict[int, Handle] = {}
        self._next_id = 1
        self._schedules: list[ScheduleRun] = []

    # --- context manager ---------------------------------------------------------------
    def __enter__(self) -> FaultInjector:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        errors = self.undo_all()
        if errors and exc_type is None:
            raise FaultError("could not undo every fault: " + "; ".join(errors))
        for e in errors:
            self.log(f"fault undo failed: {e}")

    # --- state -------------------------------------------------------------------------
    @property
    def events(self) -> list[dict[str, Any]]:
        """A copy of the event log, in the order things happened."""
        with self._lock:
            return [dict(e) for e in self._events]

    @property
    def active(self) -> list[Handle]:
        with self._lock:
            return [h for h in self._handles.values() if h.active]

    def _event(self, handle: Handle, action: str, **detail: Any) -> dict[str, Any]:
        ev = {"time": time.time(), "kind": handle.fault.kind, "component": handle.component,
              "action": action, "fault_id": handle.id}
        if detail:
            ev["detail"] = detail
        with self._lock:
            self._events.append(ev)
        self.log(f"fault {handle.id} {handle.fault.kind} {handle.component}: {action}")
        return ev

    # --- shell helpers -----------------------------------------------------------------
    def _sh(self, argv: list[str], host: str | None = None, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the root namespace, or in ``host``'s (``mnexec -a``: thread-safe,
        unlike the host's interactive shell)."""
        prefix = ["mnexec", "-a", str(self.lab.hosts[host].pid)] if host is not None else []
        proc = cleanup.run(prefix + argv, stdin=stdin, timeout=60)
        if check and proc.returncode != 0:
            where = f" in {host}'s namespace" if host else ""
            raise FaultError(f"`{' '.join(argv[:8])}`{where} failed: "
                             f"{(proc.stderr or proc.stdout).strip()[:300]}")
        return proc

    def _admin_up(self, node: str, intf: str, in_host: bool) -> bool:
        """Is the interface administratively up (``ip link set ... up``)?"""
        out = self._sh(["ip", "-j", "link", "show", "dev", intf], node if in_host else None)
        return "UP" in json.loads(out.stdout)[0].get("flags", [])

    def _link_up(self, link: Link) -> bool:
        return all(self._admin_up(n, i, h) for n, i, h in link_ends(self.plan, link))

    # --- inject ------------------------------------------------------------------------
    def inject(self, fault: Fault) -> Handle:
        """Apply ``fault`` now (``at`` is ignored) and return its handle.

        Checks everything first (``ValueError`` for bad input, ``FaultError`` for what
        this machine or lab cannot do, or a target that already has that fault), so a
        refused fault changes nothing. With a ``duration`` it is undone automatically.
        """
        return self._inject(fault, self.clock)

    def _inject(self, fault: Fault, clock: Callable[[], float]) -> Handle:
        fault = resolve(self.plan, fault)
        self._check_capability(fault)
        with self._lock:
            for h in self._handles.values():
                if h.active and h.fault.kind == fault.kind and h.component == fault.component:
                    raise FaultError(f"{fault.component} already has an active {fault.kind} "
                                     f"(fault {h.id}); undo it first")
            handle = Handle(self._next_id, fault, fault.component, _clock=clock)
            self._next_id += 1
            self._handles[handle.id] = handle
        try:
            getattr(self, "_apply_" + fault.kind.replace("-", "_"))(handle)
        except BaseException:
            with self._lock:
                del self._handles[handle.id]
            handle._done.set()
            raise
        handle.injected_at = time.time()
        self._event(handle, "inject", **handle.info.get("detail", {}))
        work = self._worker_for(handle)
        if work is not None:
            handle._worker = threading.Thread(target=self._run_worker, args=(handle, work),
                                              name=f"fault-{handle.id}", daemon=True)
            handle._worker.start()
        return handle

    def _check_capability(self, fault: Fault) -> None:
        lab = self.lab
        if fault.kind.startswith("controller") and not getattr(lab, "use_controller", True):
            raise FaultError(f"{fault.kind}: this lab runs no controller (Lab(controller=False))")
        if fault.kind == "link-degrade" and not getattr(lab, "shape", True):
            raise FaultError("link-degrade changes the links' HTB rate, but this lab was "
                             "brought up without shaping (Lab(shape=False))")
        if fault.kind == "nic-loss":
            self._loss_backend()

    def _loss_backend(self) -> str:
        if self.nic_loss_backend != "auto":
            why = loss_backend_problems().get(self.nic_loss_backend)
            if why:
                raise FaultError(f"nic-loss backend {self.nic_loss_backend} cannot be used "
                                 f"here: {why}")
            return self.nic_loss_backend
        problems = loss_backend_problems()
        for backend in ("nft", "iptables"):
            if not problems.get(backend):
                return backend
        raise FaultError("nic-loss needs nftables (nft with netdev ingress/egress hooks, "
                         f"Linux >= 5.16: {problems['nft']}) or iptables with the statistic "
                         f"match ({problems['iptables']}); install nftables or iptables")

    # --- undo --------------------------------------------------------------------------
    def undo(self, handle: Handle) -> None:
        """Undo one fault and restore the exact previous state. Idempotent; waits for an
        undo already under way in another thread."""
        with handle._lock:
            if handle.state != "active":
                mine = False
            else:
                handle.state = "undoing"
                mine = True
        if not mine:
            handle._done.wait()
            return
        handle._stop.set()
        worker = handle._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        try:
            detail = getattr(self, "_revert_" + handle.fault.kind.replace("-", "_"))(handle)
        except BaseException as exc:
            handle.state, handle.error = "failed", str(exc)
            self._event(handle, "error", error=str(exc))
            handle._done.set()
            raise
        handle.state = "undone"
        self._event(handle, "undo", **(detail or {}))
        handle._done.set()

    def undo_all(self) -> list[str]:
        """Stop every schedule, undo every active fault (newest first); return the errors."""
        for run in list(self._schedules):
            run.stop(undo=False)
        errors = []
        for handle in sorted(self.active, key=lambda h: -h.id):
            try:
                self.undo(handle)
            except Exception as exc:  # keep undoing the others
                errors.append(f"{handle.fault.kind} {handle.component}: {exc}")
        return errors

    # --- background work (timers, flaps, restarts) -------------------------------------
    def _worker_for(self, handle: Handle) -> Callable[[Handle], None] | None:
        kind = handle.fault.kind
        if kind == "link-flap":
            return self._flap
        if kind == "controller-restart":
            return self._timed
        return self._timed if handle.fault.duration is not None else None

    def _run_worker(self, handle: Handle, work: Callable[[Handle], None]) -> None:
        try:
            work(handle)
        except Exception as exc:
            handle.error = str(exc)
            self._event(handle, "error", error=str(exc))
        if not handle._stop.is_set():
            with contextlib.suppress(Exception):
                self.undo(handle)

    def _timed(self, handle: Handle) -> None:
        _pause(handle._stop, handle.fault.span or 0.0, handle._clock)

    def _flap(self, handle: Handle) -> None:
        f = handle.fault
        link, lane = handle.info["link"], handle.info["lane"]
        half = f.period / 2
        for i in range(f.count):
            if i and _pause(handle._stop, half, handle._clock):  # up phase of the last cycle
                return
            if handle._stop.is_set():
                return
            self.lab.set_link(link.a, link.b, up=False, lane=lane)
            handle.info["down"] = True
            self._event(handle, "flap-down", cycle=i + 1)
            if _pause(handle._stop, half, handle._clock):
                return
            self.lab.set_link(link.a, link.b, up=True, lane=lane)
            handle.info["down"] = False
            self._event(handle, "flap-up", cycle=i + 1)
        _pause(handle._stop, half, handle._clock)

    # --- schedules ---------------------------------------------------------------------
    def run_schedule(self, faults: Iterable[Fault], clock: Callable[[], float] | None = None
                     ) -> ScheduleRun:
        """Apply ``faults`` at their ``at`` (seconds after now) in a background thread.

        Every fault is resolved first, so a bad one raises ``ValueError`` before anything
        runs. Returns a ``ScheduleRun``: ``wait()``, ``stop()`` (undoes what it injected),
        ``events`` (this run's part of the log, with ``t`` = seconds since the start).
        """
        resolved = [resolve(self.plan, f) for f in faults]
        run = ScheduleRun(self, sorted(resolved, key=lambda f: f.at), clock or self.clock)
        with self._lock:
            self._schedules.append(run)
        run.start()
        return run

    # --- link-down ---------------------------------------------------------------------
    def _link_target(self, handle: Handle) -> tuple[Link, int]:
        t = parse_target(self.plan, handle.fault.target)
        assert t.link is not None
        handle.info.update(link=t.link, lane=t.lane)
        return t.link, t.lane

    def _apply_link_down(self, handle: Handle) -> None:
        link, lane = self._link_target(handle)
        handle.info["was_up"] = [self._admin_up(n, i, h) for n, i, h in
                                 link_ends(self.plan, link)]
        self.lab.set_link(link.a, link.b, up=False, lane=lane)

    def _revert_link_down(self, handle: Handle) -> dict[str, Any]:
        link, lane = handle.info["link"], handle.info["lane"]
        was = handle.info["was_up"]
        if all(was):
            self.lab.set_link(link.a, link.b, up=True, lane=lane)
        else:  # only ends that were up before come back up
            for (node, intf, in_host), up in zip(link_ends(self.plan, link), was, strict=True):
                if up:
                    self._sh(["ip", "link", "set", "dev", intf, "up"], node if in_host else None)
        return {}

    # --- link-flap ---------------------------------------------------------------------
    def _apply_link_flap(self, handle: Handle) -> None:
        link, _lane = self._link_target(handle)
        if not self._link_up(link):
            raise FaultError(f"link-flap: {handle.component} is down already; a flap needs "
                             "a link that is up")
        handle.info["down"] = False
        handle.info["detail"] = {"period": handle.fault.period, "count": handle.fault.count}

    def _revert_link_flap(self, handle: Handle) -> dict[str, Any]:
        if handle.info.get("down"):
            link, lane = handle.info["link"], handle.info["lane"]
            self.lab.set_link(link.a, link.b, up=True, lane=lane)
            handle.info["down"] = False
        return {}

    # --- link-degrade ------------------------------------------------------------------
    def _class_show(self, node: str, intf: str, in_host: bool) -> str:
        out = self._sh(["tc", "class", "show", "dev", intf, "classid", "5:1"],
                       node if in_host else None).stdout.strip()
        if parse_htb_rate(out) is None:
            raise FaultError(f"link-degrade: {intf} has no HTB class 5:1 (is the lab shaped?): "
                             f"{out[:120]!r}")
        return out

    def _apply_link_degrade(self, handle: Handle) -> None:
        link, _lane = self._link_target(handle)
        ends = link_ends(self.plan, link)
        before = [self._class_show(*end) for end in ends]
        old = [parse_htb_rate(text) or 0.0 for text in before]
        # restore the plan's exact rate when that is what runs (tc prints rates rounded)
        restore = [link.mbps if abs(r - link.mbps) <= 1e-3 * link.mbps else r for r in old]
        new = [r * handle.fault.fraction for r in restore]
        handle.info.update(before=before, restore=restore, changed=[])
        try:
            for end, mbps in zip(ends, new, strict=True):
                node, intf, in_host = end
                self._sh(htb_rate_command(intf, mbps), node if in_host else None)
                handle.info["changed"].append(end)
                got = parse_htb_rate(self._class_show(*end)) or 0.0
                if abs(got - mbps) > 0.01 * mbps:
                    raise FaultError(f"link-degrade: {intf} reads back {got:g} Mb/s after "
                                     f"setting {mbps:g}")
        except BaseException:
            self._restore_rates(handle)
            raise
        handle.info["detail"] = {"mbps_before": restore, "mbps": [round(m, 6) for m in new]}

    def _restore_rates(self, handle: Handle) -> list[str]:
        link = handle.info["link"]
        after = []
        for end in link_ends(self.plan, link):
            if end not in handle.info["changed"]:
                continue
            i = link_ends(self.plan, link).index(end)
            node, intf, in_host = end
            self._sh(htb_rate_command(intf, handle.info["restore"][i]), node if in_host else None)
            after.append(self._class_show(*end))
        return after

    def _revert_link_degrade(self, handle: Handle) -> dict[str, Any]:
        after = self._restore_rates(handle)
        for was, now, mbps in zip(handle.info["before"], after, handle.info["restore"],
                                  strict=True):
            got = parse_htb_rate(now) or 0.0
            # exact when the plan's rate was running; a rate tc printed rounded (6666Kbit)
            # can only come back to within its rounding
            if now != was and abs(got - mbps) > 1e-3 * mbps:
                raise FaultError(f"link-degrade: {handle.component} did not return to its "
                                 f"previous class: {was!r} -> {now!r}")
        return {"mbps": handle.info["restore"]}

    # --- nic-loss ----------------------------------------------------------------------
    def _apply_nic_loss(self, handle: Handle) -> None:
        f = handle.fault
        host = f.target
        dev = next(ln.a_intf for ln in self.plan.links if ln.a == host)
        backend = self._loss_backend()
        handle.info.update(host=host, backend=backend)
        if backend == "nft":
            setup, script, undo = nft_loss_commands(dev, f.probability, f.direction)
        else:
            setup, undo = iptables_loss_commands(dev, f.probability, f.direction)
            script = None
        handle.info["undo"] = undo
        try:
            for argv in setup:
                self._sh(argv, host)
            if script is not None:
                self._sh(["nft", "-f", "-"], host, stdin=script)
        except BaseException:
            for argv in undo:
                self._sh(argv, host, check=False)
            raise
        handle.info["detail"] = {"probability": f.probability, "direction": f.direction,
                                 "backend": backend}

    def _loss_counters(self, host: str, backend: str) -> dict[str, int]:
        """Frames the fault's rules dropped, per direction."""
        out: dict[str, int] = {}
        if backend == "nft":
            proc = self._sh(["nft", "-j", "list", "table", NFT_FAMILY, NFT_TABLE], host,
                            check=False)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                for item in json.loads(proc.stdout)["nftables"]:
                    rule = item.get("rule")
                    for expr in (rule or {}).get("expr", []):
                        if "counter" in expr:
                            out[rule["chain"]] = int(expr["counter"]["packets"])
        else:
            for chain, name in ((IPT_IN, "ingress"), (IPT_OUT, "egress")):
                proc = self._sh(["iptables", "-w", "-L", chain, "-v", "-n", "-x"], host,
                                check=False)
                rows = [ln.split() for ln in proc.stdout.splitlines()[2:] if ln.strip()]
                if rows and rows[0][0].isdigit():
                    out[name] = int(rows[0][0])
        return out

    def _revert_nic_loss(self, handle: Handle) -> dict[str, Any]:
        host, backend = handle.info["host"], handle.info["backend"]
        dropped = self._loss_counters(host, backend)
        for argv in handle.info["undo"]:
            self._sh(argv, host, check=False)
        left = nic_loss_leftovers(self._sh, host)
        if left:
            raise FaultError(f"nic-loss on {host}: still present after undo: {left}")
        return {"dropped": dropped}

    # --- switch-down -------------------------------------------------------------------
    def _apply_switch_down(self, handle: Handle) -> None:
        sw = handle.fault.target
        taken: list[tuple[Link, int]] = []
        handle.info["taken"] = taken
        links = [ln for ln in self.plan.links if sw in (ln.a, ln.b)]
        try:
            for link in links:
                lane = parallel_links(self.plan, link.a, link.b).index(link)
                if self._link_up(link):
                    self.lab.set_link(link.a, link.b, up=False, lane=lane)
                    taken.append((link, lane))
        except BaseException:
            self._revert_switch_down(handle)
            raise
        handle.info["detail"] = {"links_down": len(taken), "links": len(links)}

    def _revert_switch_down(self, handle: Handle) -> dict[str, Any]:
        for link, lane in reversed(handle.info["taken"]):
            self.lab.set_link(link.a, link.b, up=True, lane=lane)
        return {"links_up": len(handle.info["taken"])}

    # --- controller --------------------------------------------------------------------
    def _apply_controller_kill(self, handle: Handle) -> None:
        proc = getattr(self.lab, "controller_proc", None)
        if proc is None:
            raise FaultError(f"{handle.fault.kind}: the controller is not running")
        handle.info["detail"] = {"pid": proc.pid}
        self.lab.kill_controller()

    def _revert_controller_kill(self, handle: Handle) -> dict[str, Any]:
        self.lab.restart_controller(wait=True)
        proc = getattr(self.lab, "controller_proc", None)
        return {"pid": proc.pid if proc is not None else None}

    _apply_controller_restart = _apply_controller_kill
    _revert_controller_restart = _revert_controller_kill

    # --- hot-receiver ------------------------------------------------------------------
    def _apply_hot_receiver(self, handle: Handle) -> None:
        f = handle.fault
        streams = hot_streams(self.plan, f, HOT_SPORT_BASE + MAX_HOT_SENDERS * (handle.id % 64))
        lab = self.lab
        tag = f"{getattr(lab, 'run_id', 'lab')}:{handle.id}"
        env = dict(os.environ, **{ENV_MARK: tag})
        seconds = (f.duration + 5.0) if f.duration is not None else 24 * 3600.0  # bounded
        out = os.path.join(lab.workdir, f"hot-{handle.id}-{uuid.uuid4().hex[:6]}.json")
        py = [sys.executable, "-m", "testbed.probe"]
        procs: list[subprocess.Popen[bytes]] = []
        handle.info.update(procs=procs, out=out, streams=streams)
        try:
            recv = lab.hosts[f.target].popen(
                py + ["recv", "--port", str(HOT_PORT), "--out", out,
                      "--duration", f"{seconds:.1f}"], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            procs.append(recv)
            handle.info["recv"] = recv
            deadline = time.monotonic() + 15
            while not os.path.exists(out + ".ready"):
                if recv.poll() is not None or time.monotonic() > deadline:
                    raise FaultError(f"hot-receiver: receiver on {f.target} did not start")
                time.sleep(0.02)
            ip = self.plan.node(f.target).ip
            for s in streams:
                procs.append(lab.hosts[s["src"]].popen(
                    py + ["send", "--dst", str(ip), "--port", str(HOT_PORT),
                          "--sports", str(s["sport"]), "--pps", str(s["pps"]),
                          "--duration", f"{seconds:.1f}", "--size", str(HOT_PAYLOAD)],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except BaseException:
            self._stop_hot(handle)
            raise
        handle.info["detail"] = {"sources": [s["src"] for s in streams],
                                 "offered_mbps": round(sum(s["mbps"] for s in streams), 3)}

    def _stop_hot(self, handle: Handle) -> None:
        procs = handle.info.get("procs", [])
        recv = handle.info.get("recv")
        for p in procs:
            if p is not recv and p.poll() is None:
                p.kill()
        for p in procs:
            if p is not recv:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
        if recv is not None and recv.poll() is None:
            time.sleep(0.2)  # packets in flight land
            recv.send_signal(signal.SIGTERM)
            try:
                recv.wait(timeout=5)
            except subprocess.TimeoutExpired:
                recv.kill()
                recv.wait()

    def _revert_hot_receiver(self, handle: Handle) -> dict[str, Any]:
        self._stop_hot(handle)
        left = [p.pid for p in handle.info["procs"] if p.poll() is None]
        if left:
            raise FaultError(f"hot-receiver: processes still running: {left}")
        received: dict[str, int] = {}
        src_of = {str(s["sport"]): s["src"] for s in handle.info["streams"]}
        with contextlib.suppress(OSError, ValueError), open(handle.info["out"]) as fh:
            for sport, flow in json.load(fh).get("flows", {}).items():
                if sport in src_of:
                    received[src_of[sport]] = int(flow["received"])
        handle.info["received"] = received
        return {"received_packets": received}


class ScheduleRun:
    """A schedule running in a background thread (see ``FaultInjector.run_schedule``)."""

    def __init__(self, injector: FaultInjector, faults: list[Fault],
                 clock: Callable[[], float]) -> None:
        self.injector = injector
        self.faults = faults
        self.clock = clock
        self.handles: list[Handle] = []
        self.errors: list[str] = []
        self.started = 0.0  # time.time() at the start
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-schedule", daemon=True)
        self._injected = threading.Event()
        self._error_events: list[dict[str, Any]] = []

    def start(self) -> None:
        self.started = time.time()
        self._t0 = self.clock()
        self._thread.start()

    def _run(self) -> None:
        for fault in self.faults:
            if _pause(self._stop, fault.at - (self.clock() - self._t0), self.clock):
                break
            try:
                self.handles.append(self.injector._inject(fault, self.clock))
            except Exception as exc:  # logged; the schedule carries on
                self.errors.append(f"{fault.kind} {fault.target} at {fault.at:g} s: {exc}")
                ev = {"time": time.time(), "kind": fault.kind, "component": fault.component,
                      "action": "error", "fault_id": None, "detail": {"error": str(exc)}}
                self._error_events.append(ev)
                with self.injector._lock:
                    self.injector._events.append(ev)
        self._injected.set()

    @property
    def running(self) -> bool:
        """True until every fault was injected and every one with a finite span undone."""
        if not self._injected.is_set():
            return True
        return any(h.active for h in self.handles if h.fault.span is not None)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the schedule has played out (open-ended faults stay); False on timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.running:
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.05)
        return True

    def stop(self, undo: bool = True) -> list[str]:
        """Stop injecting; with ``undo``, undo every fault this run injected. Returns errors."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        with self.injector._lock:
            if self in self.injector._schedules:
                self.injector._schedules.remove(self)
        errors = []
        if undo:
            for h in reversed(self.handles):
                try:
                    self.injector.undo(h)
                except Exception as exc:
                    errors.append(f"{h.fault.kind} {h.component}: {exc}")
        return errors

    @property
    def events(self) -> list[dict[str, Any]]:
        """This run's events (those of its faults, and its errors), with ``t`` added."""
        ids = {h.id for h in self.handles}
        mine = [e for e in self.injector.events if e["fault_id"] in ids]
        out = sorted(mine + [dict(e) for e in self._error_events], key=lambda e: e["time"])
        for ev in out:
            ev["t"] = round(ev["time"] - self.started, 4)
        return out


# ----------------------------------------------------------------------------------------
# Capability probe (shell)
# ----------------------------------------------------------------------------------------
_BACKEND_CACHE: dict[str, dict[str, str]] = {}


def loss_backend_problems() -> dict[str, str]:
    """``{"nft": why not or "", "iptables": why not or ""}``, probed once per process.

    Like ``preflight.netem_available``: the exact rules a nic-loss uses are tried on a
    veth in a throwaway namespace, which is deleted again (nothing is left behind).
    """
    if "result" in _BACKEND_CACHE:
        return _BACKEND_CACHE["result"]
    ns = f"astral-fprobe-{uuid.uuid4().hex[:8]}"
    found = {"nft": "", "iptables": ""}
    try:
        if cleanup.run(["ip", "netns", "add", ns]).returncode != 0:
            why = "cannot create a network namespace to test in"
            found = {"nft": why, "iptables": why}
        else:
            cleanup.run(["ip", "-n", ns, "link", "add", "fp0", "type", "veth", "peer", "name",
                         "fp1"])
            nsx = ["ip", "netns", "exec", ns]
            setup, script, _undo = nft_loss_commands("fp0", 0.5, "both")
            for argv in setup:
                cleanup.run(nsx + argv)
            proc = cleanup.run(nsx + ["nft", "-f", "-"], stdin=script)
            if proc.returncode != 0:
                found["nft"] = (proc.stderr or proc.stdout).strip()[:200] or "nft failed"
            setup_i, _u = iptables_loss_commands("fp0", 0.5, "both")
            for argv in setup_i:
                proc = cleanup.run(nsx + argv)
                if proc.returncode != 0:
                    found["iptables"] = (proc.stderr or proc.stdout).strip()[:200]
                    break
    finally:
        cleanup.run(["ip", "netns", "del", ns])
    _BACKEND_CACHE["result"] = found
    return found
