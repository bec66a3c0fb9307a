"""Is the fabric cabled as planned? The pure half of a check with real frames.

Counters cannot see a miswired cable: every port is up and every packet arrives, only at
another switch than the plan says. So the check asks the cables themselves, as LLDP
does: one identifiable frame leaves each end of every switch-to-switch link of the plan
(an OpenFlow packet-out of the plan's port number), and every switch records where such
frames arrive. The controller does not speak LLDP and drops what no route matches, so
the record is made in the switches: one rule per switch (``learn_flow``, above every
rule of the controller's, with its own ``COOKIE``) matches the probe's ethertype and
``learn``s an entry in a table the pipeline never visits (``LEARN_TABLE``) matching
the frame's destination MAC (which numbers the probe) and its in_port. Dumping that
table says which probe arrived on which switch and port; deleting by the cookie leaves
nothing. ``testbed.shell.wiring.check_wiring`` runs the commands built here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from testbed.faultspec import link_name
from vocab.plan import WiringPlan

#: IEEE 802 local experimental ethertype: no host stack or controller rule takes it.
ETHERTYPE = 0x88B5
#: Cookie of the check's rules and of the entries they learn (none of the controller's,
#: which leaves other cookies alone, and not fault injection's).
COOKIE = 0xA57FF0A1
#: Above every rule of the controller's and of fault injection's.
PRIORITY = 65000
#: The table the learned entries go to: no rule sends a packet there.
LEARN_TABLE = 250
#: Probe ``n``'s destination MAC: a locally administered unicast address ending in ``n``.
MAC_PREFIX = "0e:a5:77"
SRC_MAC = "0e:a5:77:ff:ff:ff"
#: How the check talks to the lab's bridges (bundles, which carry the packet-outs, need 1.4+).
OFCTL = ("ovs-ofctl", "-O", "OpenFlow15", "--no-names")


@dataclass(frozen=True)
class Probe:
    """Frame ``n``: out of ``switch`` port ``port``; the plan puts ``far`` at the other end."""

    n: int
    link: str  # the plan's name for the link (``lf0r0~spine1#0``)
    switch: str
    port: int
    far: tuple[str, int]


@dataclass(frozen=True)
class Finding:
    """A probe that arrived elsewhere than planned (``seen``), or nowhere (None)."""

    link: str
    sent: tuple[str, int]
    planned: tuple[str, int]
    seen: tuple[str, int] | None

    def to_dict(self) -> dict[str, Any]:
        def end(e: tuple[str, int] | None) -> str | None:
            return None if e is None else f"{e[0]}:{e[1]}"
        return {"link": self.link, "sent_from": end(self.sent), "planned": end(self.planned),
                "seen": end(self.seen)}


def probes(plan: WiringPlan) -> list[Probe]:
    """One probe out of each end of every link between two switches, numbered from 1."""
    switches = {s.name for s in plan.switches}
    out: list[Probe] = []
    for ln in plan.links:
        if ln.a in switches and ln.b in switches:
            name = link_name(plan, ln)
            for here, port, far in ((ln.a, ln.a_port, (ln.b, ln.b_port)),
                                    (ln.b, ln.b_port, (ln.a, ln.a_port))):
                out.append(Probe(len(out) + 1, name, here, port, far))
    return out


def probe_mac(n: int) -> str:
    if not 0 < n < 1 << 24:
        raise ValueError(f"probe number must be in [1, 2^24) (got {n})")
    return f"{MAC_PREFIX}:{n >> 16:02x}:{(n >> 8) & 0xFF:02x}:{n & 0xFF:02x}"


def frame_hex(n: int) -> str:
    """Probe ``n`` as a minimal Ethernet frame (60 bytes, zero padded), in hex."""
    head = (probe_mac(n) + SRC_MAC).replace(":", "") + f"{ETHERTYPE:04x}"
    return head + "00" * (60 - len(head) // 2)


def learn_flow() -> str:
    """The rule that records, on a switch, each probe that arrives and on which port."""
    return (f"cookie={COOKIE:#x},priority={PRIORITY},dl_type={ETHERTYPE:#x},actions=learn("
            f"table={LEARN_TABLE},cookie={COOKIE:#x},NXM_OF_ETH_DST[],NXM_OF_IN_PORT[])")


def bundle_lines(batch: Iterable[Probe], repeat: int = 2) -> str:
    """``ovs-ofctl bundle`` input sending each probe of ``batch`` (one switch's) ``repeat``
    times out of its port: a lost copy is not a missing cable."""
    return "".join(f"packet-out in_port=controller packet={frame_hex(p.n)} "
                   f"actions=output:{p.port}\n" for _ in range(repeat) for p in batch)


def add_command(bridge: str) -> list[str]:
    return [*OFCTL, "add-flow", bridge, learn_flow()]


def bundle_command(bridge: str) -> list[str]:
    """Run the packet-outs of ``bundle_lines`` (on stdin) on ``bridge``."""
    return [*OFCTL, "bundle", bridge, "-"]


def dump_command(bridge: str) -> list[str]:
    """The entries the probes taught ``bridge``."""
    return [*OFCTL, "dump-flows", bridge, f"table={LEARN_TABLE},cookie={COOKIE:#x}/-1"]


def delete_command(bridge: str) -> list[str]:
    """Every rule and learned entry of the check on ``bridge``, and nothing else."""
    return [*OFCTL, "del-flows", bridge, f"cookie={COOKIE:#x}/-1"]


_MAC = re.compile(rf"\bdl_dst={MAC_PREFIX}:([0-9a-f]{{2}}):([0-9a-f]{{2}}):([0-9a-f]{{2}})\b")
_IN_PORT = re.compile(r"\bin_port=(\d+)\b")


def parse_learned(dump: str) -> dict[int, int]:
    """``probe number -> in_port`` of the entries in ``dump_command``'s output."""
    out = {}
    for line in dump.splitlines():
        mac, port = _MAC.search(line), _IN_PORT.search(line)
        if mac and port:
            out[int("".join(mac.groups()), 16)] = int(port[1])
    return out


def compare(sent: Iterable[Probe], seen: Mapping[str, Mapping[int, int]]) -> list[Finding]:
    """The probes that arrived elsewhere than planned or nowhere, given ``seen[switch]``
    (``parse_learned`` of each switch's dump). A probe seen twice counts where the plan
    says if that is one of the places."""
    where: dict[int, list[tuple[str, int]]] = {}
    for switch, learned in seen.items():
        for n, port in learned.items():
            where.setdefault(n, []).append((switch, port))
    found = []
    for p in sent:
        got = sorted(where.get(p.n, []))
        if p.far not in got:
            found.append(Finding(p.link, (p.switch, p.port), p.far, got[0] if got else None))
    return found


def miswired(findings: Iterable[Finding]) -> list[str]:
    """The links some of whose frames arrived at another port than planned (not those
    that arrived nowhere: a cable down is another fault)."""
    return sorted({f.link for f in findings if f.seen is not None})
