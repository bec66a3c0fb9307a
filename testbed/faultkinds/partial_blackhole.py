"""A bad hardware table entry: one switch silently drops the UDP flows of some source ports.

RoCEv2 puts a queue pair's entropy in the UDP source port (``vocab.flows.sport_for_qp``:
the QP number is the port's low bits), so a switch whose table drops a slice of that
space stalls some QPs while pings and every other QP pass: the partial blackhole that
ping-based checks miss. The slice is ``share`` of the port space, made of masked matches
on the port's low bits (``port_matches``); ``seed`` picks which values.

The shell half adds the rules with ``ovs-ofctl`` at ``PRIORITY``, above every rule the
controller installs, with the cookie ``OF_COOKIE``, so undo and
``astral-lab clean`` delete exactly them. The commands and their parsing are here (pure).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from testbed.faultkinds import number, whole
from vocab.flows import QP_SPORTS

TARGET = "switch"
ORDER = 80  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("loss",)  # the matched flows' packets vanish at the switch
EFFECT = "drops"
SEVERITIES = ("gray", "hard")
#: Cookie of every OpenFlow rule this kind adds to a switch. The controller's own cookies
#: are others (``controllers.flowtable.OWN_COOKIES``), and it leaves rules with a cookie
#: not its own alone, so these survive its resyncs.
OF_COOKIE = 0xA57FF001

#: The low bits of the source port a match may use: those the QPs vary.
BITS = QP_SPORTS.bit_length() - 1
#: Above every rule the controller installs (local delivery, pins, routes, table miss).
PRIORITY = 1000
#: How ``ovs-ofctl`` talks to the lab's bridges (they speak OpenFlow 1.3 and 1.5; 1.0,
#: ovs-ofctl's default, is refused, and masked port matches need 1.2 or later).
OFCTL = ("ovs-ofctl", "-O", "OpenFlow13")


@dataclass(frozen=True)
class Settings:
    """``share`` of the UDP source-port space dropped; ``seed`` picks which ports."""

    share: float = 0.125
    seed: int = 0

    def __post_init__(self) -> None:
        number("share", self.share, low=0.0, high=1.0, low_open=True, high_open=True,
               why="partial-blackhole drops this fraction of the UDP source ports")
        steps = self.share * (1 << BITS)
        if abs(steps - round(steps)) > 1e-9:
            raise ValueError(f"share must be a multiple of 1/{1 << BITS} (a union of masked "
                             f"matches on the port's low {BITS} bits: 1/8, 3/32, ...; got "
                             f"{self.share!r})")
        whole("seed", self.seed, 0)


SETTINGS = Settings


def random_knobs(rng: random.Random, span: float, severity: str) -> dict[str, Any]:
    """Gray: 1/32 to 1/8 of the flows stall (few enough to hide in the averages);
    hard: 1/4 to 1/2."""
    if severity == "gray":
        share = rng.choice((1, 2, 3, 4)) / 32
    elif severity == "hard":
        share = rng.choice((2, 3, 4)) / 8
    else:
        raise ValueError(f"severity must be one of {', '.join(SEVERITIES)} (got {severity!r})")
    return {"share": share, "seed": rng.randrange(1 << 16)}


def port_matches(share: float, seed: int = 0) -> list[tuple[int, int]]:
    """``(value, mask)`` matches on the UDP source port whose union is ``share`` of the ports.

    One match per 1 in ``share``'s binary expansion (3/8 = 1/4 + 1/8: two matches): the
    match for 2^-i fixes the port's low ``i`` bits, in the half of the ports the previous
    matches left, so no two overlap. ``seed`` picks the halves.
    """
    steps = round(share * (1 << BITS))
    if not 0 < steps < 1 << BITS:
        raise ValueError(f"share must be in (0, 1) (got {share!r})")
    rng = random.Random(seed)
    out: list[tuple[int, int]] = []
    value = 0  # the low bits fixed so far: the ports no match has taken yet
    for i in range(1, BITS + 1):
        bit = rng.randrange(2) << (i - 1)
        digit = 1 << (BITS - i)  # the 2^-i place of share
        if steps & digit:
            out.append((value | bit, (1 << i) - 1))
            value |= bit ^ (1 << (i - 1))  # go on in the other half
            steps -= digit
            if not steps:
                break
        else:
            value |= bit
    return out


def dropped(sport: int, matches: list[tuple[int, int]]) -> bool:
    """Does one of ``matches`` cover source port ``sport``?"""
    return any(sport & mask == value for value, mask in matches)


def flow_lines(matches: list[tuple[int, int]]) -> str:
    """``ovs-ofctl add-flows`` input: one drop rule per match, with the fault's cookie."""
    return "".join(f"cookie={OF_COOKIE:#x},priority={PRIORITY},udp,udp_src={v:#x}/{m:#x},"
                   "actions=drop\n" for v, m in matches)


def add_command(bridge: str) -> list[str]:
    """Add the rules of ``flow_lines`` (given on stdin) to ``bridge``."""
    return [*OFCTL, "add-flows", bridge, "-"]


def dump_command(bridge: str) -> list[str]:
    """List the fault's rules on ``bridge`` (and only them), with their counters."""
    return [*OFCTL, "dump-flows", bridge, f"cookie={OF_COOKIE:#x}/-1"]


def delete_command(bridge: str) -> list[str]:
    """Delete every rule with the fault's cookie from ``bridge``, and nothing else."""
    return [*OFCTL, "del-flows", bridge, f"cookie={OF_COOKIE:#x}/-1"]


_PORT = re.compile(r"\b(?:tp_src|udp_src)=(0x[0-9a-f]+|\d+)(?:/(0x[0-9a-f]+|\d+))?")
_PACKETS = re.compile(r"\bn_packets=(\d+)")


def parse_rules(dump: str) -> list[tuple[int, int, int]]:
    """``(value, mask, packets dropped)`` of each rule in ``dump_command``'s output."""
    rules = []
    for line in dump.splitlines():
        port, packets = _PORT.search(line), _PACKETS.search(line)
        if "cookie=" not in line or port is None:
            continue
        mask = int(port[2], 0) if port[2] else 0xFFFF
        rules.append((int(port[1], 0), mask, int(packets[1]) if packets else 0))
    return rules
