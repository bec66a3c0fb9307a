"""Per-port packet capture on request (``--capture PORT[,PORT...]``): names and commands.

Pure: which switch ports a request names, checked against the wiring plan before anything
is built, and the capture command for one of them. The Lab (``testbed.shell.lab``) starts
one capture per port after the switches exist and stops it (SIGINT: the tool flushes and
closes its file) before tearing the fabric down.

A port is a switch-side interface, written as Mininet names it (``lf0r0-eth3``) or as
``switch:port`` (``lf0r0:3``, the OpenFlow port number the plan gives). A GPU NIC's own end
(``s0g0-eth0``) lives inside its host's namespace; its switch end carries the same packets
and is what a request names instead. Captures use ``tcpdump`` (``scripts/setup.sh``
installs it with tshark): ``-U`` writes every packet as it arrives, so a pcap is readable
while the run goes on and complete after it; tshark decodes UDP port 4791 as RoCE.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from vocab.plan import WiringPlan

#: The capture program (argv[0]); ``astral-lab clean`` recognises its processes by it.
TOOL = "tcpdump"
_SPELLING = re.compile(r"(?P<node>[A-Za-z0-9_]+)(?:-eth|:)(?P<port>\d+)")


def parse_ports(text: str | Iterable[str] | None) -> list[str]:
    """``"lf0r0-eth3, lf0r1:4"`` -> ``["lf0r0-eth3", "lf0r1:4"]``; a malformed name is a
    ``ValueError`` (checked before any fabric exists; the plan check is ``resolve``)."""
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    out = [p.strip() for p in items if p.strip()]
    for p in out:
        if not _SPELLING.fullmatch(p):
            raise ValueError(f"--capture: {p!r} is not a switch port; write it as Mininet "
                             "names the interface (lf0r0-eth3) or as SWITCH:PORT (lf0r0:3)")
    if len(set(out)) != len(out):
        raise ValueError(f"--capture: a port is named twice in {', '.join(out)}")
    return out


def switch_ports(plan: WiringPlan) -> list[str]:
    """Every switch-side interface of the plan, in plan order."""
    switches = {s.name for s in plan.switches}
    out = []
    for ln in plan.links:
        for node, intf in ((ln.a, ln.a_intf), (ln.b, ln.b_intf)):
            if node in switches:
                out.append(intf)
    return out


def resolve(plan: WiringPlan, ports: Iterable[str]) -> list[str]:
    """The interface name of each requested port; ``ValueError`` naming the first one the
    plan has no switch port for (with examples of ones it has)."""
    known = switch_ports(plan)
    have = set(known)
    hosts = {h.name for h in plan.hosts}
    out = []
    for p in parse_ports(list(ports)):
        m = _SPELLING.fullmatch(p)
        assert m is not None
        intf = f"{m['node']}-eth{m['port']}"
        if intf not in have:
            if m["node"] in hosts:
                peer = next((ln.b_intf for ln in plan.links if ln.a == m["node"]), None)
                hint = (f"{p} is a GPU NIC inside its host's namespace; capture its switch "
                        f"end instead ({peer})")
            else:
                hint = (f"{plan.topology} has no switch port {p}; its ports look like "
                        + ", ".join(known[:3]) + f" ({len(known)} in all)")
            raise ValueError(f"--capture: {hint}")
        out.append(intf)
    return out


def check_ports(plans: Sequence[WiringPlan], ports: Iterable[str]) -> None:
    """The check before anything is built, for ``up`` (its one plan) and ``run`` (the
    fabrics its scenario declares) alike: every port must be a switch port of at least one
    of ``plans`` (``resolve``); else ``resolve``'s ValueError on the first plan."""
    if not plans:
        raise ValueError("--capture: there is no fabric to capture on")
    for p in parse_ports(list(ports)):
        errors = []
        for plan in plans:
            try:
                resolve(plan, [p])
                break
            except ValueError as exc:
                errors.append(exc)
        else:
            raise errors[0]


def pcap_path(folder: str, intf: str) -> str:
    return os.path.join(folder, f"{intf}.pcap")


def command(intf: str, path: str) -> list[str]:
    """The capture of one root-namespace interface into ``path``: whole packets, written
    per packet (``-U``), no name lookups, and no privilege drop (``-Z root``: the results
    folder belongs to the user who ran the lab, not to tcpdump's own user)."""
    return [TOOL, "-i", intf, "-w", path, "-U", "-s", "0", "-n", "-Z", "root"]


def is_capture(argv: list[str], interface: re.Pattern[str]) -> bool:
    """Whether a command line is a lab capture: the tool on an interface named like the
    lab's (``interface``: ``testbed.shell.cleanup.INTF_RE``), writing a file."""
    if not argv or os.path.basename(argv[0]) != TOOL or "-w" not in argv or "-i" not in argv:
        return False
    i = argv.index("-i")
    return i + 1 < len(argv) and bool(interface.fullmatch(argv[i + 1]))
