"""Two lanes of an optical shuffle crossed against the wiring plan: traffic flows, wrongly.

A shuffle box (``testbed.shuffle``) takes a leaf's multi-lane uplink port apart lane by
lane, each lane to a different spine. Two fibres crossed in its breakout (at a patch
panel, or a cassette built wrong) put a leaf's lane for spine X on spine Y and its lane
for spine Y on spine X. Every spine still reaches the leaf on the port the plan names
(both lanes are the same leaf's), so routing by destination works and nothing is down;
only the leaf's view is wrong: what it sends "to spine X" goes through spine Y. Flows
pinned to a path cross the wrong spine, and load the controller spreads by the plan
lands elsewhere. Counters look healthy: a check of the discovered wiring against the
plan (the controller's wiring check, ``testbed.wiring.findings``) finds it.

The partner lane is another lane of the same leaf through the same box (the same uplink
port) to a different spine, picked by ``seed``. Why not a lane of another leaf of the
box: a spine's port for one leaf would then reach another, and the spine's routes would
deliver to the wrong leaf: packets lost, a hard fault of another kind.

The shell half moves the two lanes' spine-side veth ends between the two spine bridges
in one ``ovs-vsctl`` transaction (``move_command``), each keeping the other's OpenFlow
port number and the lab's QoS row (which keeps OVS off the HTB shaper). Each moved
port carries an alias (``mark``) naming its run and home, for ``astral-lab clean``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import link_component, whole
from vocab.plan import Link, WiringPlan

TARGET = "link"
ORDER = 100  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("misroute",)  # frames arrive through the wrong spine
EFFECT = "misroutes"
SEVERITIES = ("gray",)
#: Start of the alias of a switch port this kind moved to another bridge: ``<WIRE_MARK>
#: run=<run id> home=<bridge> ofport=<n> qos=<uuid>``, where it belongs, so ``astral-lab
#: clean`` can put a crashed run's swapped lanes back.
WIRE_MARK = "astral-lab-fault-wire"


@dataclass(frozen=True)
class Settings:
    """``seed`` picks the partner lane among the candidates (``partners``)."""

    seed: int = 0

    def __post_init__(self) -> None:
        whole("seed", self.seed, 0)


SETTINGS = Settings


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """Which partner lane (gray only: nothing is down, no packet is lost)."""
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {', '.join(SEVERITIES)} (got {severity!r})")
    return {"seed": rng.randrange(1 << 16)}


def target_link(plan: WiringPlan, target: str) -> Link | None:
    """The plan link a canonical link target (``a~b#k``) names; None if none does."""
    pair, _, k = target.partition("#")
    a, _, b = pair.partition("~")
    cables = [ln for ln in plan.links if {ln.a, ln.b} == {a, b}]
    index = int(k) if k.isdigit() else 0
    return cables[index] if index < len(cables) else None


def partners(plan: WiringPlan, link: Link) -> list[Link]:
    """The lanes ``link`` may be crossed with: the same leaf's lanes through the same
    shuffle box (same uplink port) to another spine, in plan order."""
    box = link.info.get("box")
    if link.kind != "lane" or box is None:
        return []
    return [ln for ln in plan.links if ln.kind == "lane" and ln.a == link.a
            and ln.info.get("box") == box and ln.b != link.b]


def partner(plan: WiringPlan, link: Link, seed: int) -> Link:
    """The lane ``seed`` picks from ``partners``; ValueError if there is none."""
    found = partners(plan, link)
    if not found:
        raise ValueError(f"target {link.a}~{link.b}: shuffle-miswiring crosses two lanes of "
                         "one leaf's shuffled uplink port, and no other lane of this one "
                         "reaches another spine (an astral3 lane with lanes_per_uplink >= 2 "
                         "and 2+ spines has one)")
    return found[random.Random(seed).randrange(len(found))]


def check_plan(plan: WiringPlan, fault: Any) -> None:
    """The target must be a shuffled lane with a partner."""
    link = target_link(plan, fault.target)
    assert link is not None  # resolve found it
    partner(plan, link, fault.settings.seed)


def random_targets(plan: WiringPlan, pool: list[str]) -> list[str]:
    """The lanes that have a partner."""
    return [t for t in pool if (ln := target_link(plan, t)) is not None and partners(plan, ln)]


def affected(plan: WiringPlan, component: str) -> list[str]:
    """The lanes it may be crossed with: the log names the target, the other end of the
    swap is one of these."""
    link = target_link(plan, component)
    return [] if link is None else [link_component(plan, ln) for ln in partners(plan, link)]


@dataclass(frozen=True)
class Home:
    """Where a switch port belongs: its bridge, OpenFlow port number and QoS row."""

    bridge: str
    ofport: int
    qos: str


def swapped(a: tuple[str, Home], b: tuple[str, Home]) -> dict[str, Home]:
    """Where two ports go to cross them: each to the other's bridge and port number,
    keeping its own QoS row."""
    (ia, ha), (ib, hb) = a, b
    return {ia: Home(hb.bridge, hb.ofport, ha.qos), ib: Home(ha.bridge, ha.ofport, hb.qos)}


def move_command(moves: Mapping[str, Home]) -> list[str]:
    """One ``ovs-vsctl`` transaction putting each interface of ``moves`` on its bridge,
    at its port number, with its QoS row: every port removed first, so two ports can
    trade places (and numbers) at once."""
    cmd = ["ovs-vsctl", "--timeout=60"]
    for intf in moves:
        cmd += ["--", "--if-exists", "del-port", intf]
    for intf, home in moves.items():
        cmd += ["--", "add-port", home.bridge, intf, f"qos={home.qos}",
                "--", "set", "Interface", intf, f"ofport_request={home.ofport}"]
    return cmd


def mark(run_id: str, home: Home) -> str:
    """The alias of a moved port: its run and its home, so a crashed run can be undone."""
    return f"{WIRE_MARK} run={run_id} home={home.bridge} ofport={home.ofport} qos={home.qos}"


def parse_mark(alias: str) -> tuple[str, Home] | None:
    """``(run id, home)`` of a ``mark``; None for any other alias."""
    words = (alias or "").split()
    if len(words) != 5 or words[0] != WIRE_MARK:
        return None
    fields = dict(w.partition("=")[::2] for w in words[1:])
    if set(fields) != {"run", "home", "ofport", "qos"} or not fields["ofport"].isdigit() \
            or not all(fields.values()):
        return None
    return fields["run"], Home(fields["home"], int(fields["ofport"]), fields["qos"])


def locate_command(intf: str) -> list[str]:
    """Where Open vSwitch has ``intf``: its bridge, port number and QoS row, one a line."""
    return ["ovs-vsctl", "--timeout=10", "iface-to-br", intf, "--", "get", "Interface", intf,
            "ofport", "--", "get", "Port", intf, "qos"]


def parse_locate(out: str) -> Home | None:
    """``locate_command``'s output as a ``Home``; None unless it is complete."""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if len(lines) != 3 or not lines[1].lstrip("-").isdigit():
        return None
    return Home(lines[0], int(lines[1]), lines[2])
