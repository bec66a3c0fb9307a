"""What the kinds that lose or spoil frames share (not a kind: ``_`` keeps it out of discovery).

The nftables rules that drop frames at a NIC or a link end (nic-loss, gray-loss, and the
probe of what this machine's nftables loads, ``testbed.shell.preflight``), iptables'
fallback for a NIC, the ``numgen`` match every probability is written with (corruption's
too), and the draw of a loss probability per severity. Pure: argument lists and scripts.
"""

from __future__ import annotations

import math
import random

from testbed.faultmarks import IPT_IN, IPT_OUT, NFT_FAMILY, NFT_TABLE, SINK, SINK_PEER

#: ``numgen random mod NUMGEN_MOD < k``: a probability in steps of one in a million.
NUMGEN_MOD = 1_000_000
#: The loss probability ``draw_probability`` draws, per severity: 0.05-1% and 2-10%.
RANGES = {"gray": (0.0005, 0.01), "hard": (0.02, 0.10)}


def chance(probability: float) -> str:
    """The ``numgen`` match that is true with ``probability`` (in steps of ``1/NUMGEN_MOD``,
    at least one step); empty for 1, since nft refuses a bound equal to the modulus."""
    k = max(1, round(probability * NUMGEN_MOD))
    return f"numgen random mod {NUMGEN_MOD} < {k} " if k < NUMGEN_MOD else ""


def nft_loss_script(dev: str, probability: float, direction: str = "both",
                    table: str = NFT_TABLE, sink: str = SINK) -> str:
    """``nft -f`` input: drop IPv4 frames with ``probability`` on ``dev`` (netdev hooks).

    Only ``meta protocol ip`` frames are touched, so ARP keeps working (a lossy link
    loses ARP too, but then a loss fault turns into reachability noise). Ingress losses
    are dropped before the host's stack sees them; egress losses are forwarded to the
    ``sink`` veth (see ``SINK``) so the sending socket is not told.
    """
    match = chance(probability)
    lines = [f"table {NFT_FAMILY} {table} {{"]
    hooks = (("ingress", "drop"), ("egress", f'fwd to "{sink}"'))
    for hook, verdict in hooks:
        if direction in (hook, "both"):
            lines += [f"  chain {hook} {{",
                      f'    type filter hook {hook} device "{dev}" priority -500; '
                      "policy accept;",
                      f"    meta protocol ip {match}counter {verdict}",
                      "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def nft_loss_commands(dev: str, probability: float, direction: str = "both",
                      table: str = NFT_TABLE, sink: tuple[str, str] = (SINK, SINK_PEER)
                      ) -> tuple[list[list[str]], str, list[list[str]]]:
    """``(setup argv list, nft script, undo argv list)`` for a loss with nftables.

    Run in the namespace ``dev`` lives in: setup first (the egress sink veth pair
    ``sink``), then ``nft -f -`` with the script; undo deletes the table and the sink.
    A nic-loss uses the defaults; a gray-loss gives each link end its own ``table``
    and ``sink`` (``testbed.faultmarks.link_table``, ``link_sink``).
    """
    setup: list[list[str]] = []
    undo = [["nft", "delete", "table", NFT_FAMILY, table]]
    if direction in ("egress", "both"):
        setup = [["ip", "link", "add", sink[0], "type", "veth", "peer", "name", sink[1]],
                 ["ip", "link", "set", sink[0], "up"]]
        undo.append(["ip", "link", "del", sink[0]])
    return setup, nft_loss_script(dev, probability, direction, table, sink[0]), undo


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


def draw_probability(rng: random.Random, severity: str) -> float:
    """A probability from ``RANGES[severity]``, log-uniform (as likely in each decade: the
    gray range spans twenty times its low end), rounded to 1e-5."""
    if severity not in RANGES:
        raise ValueError(f"severity must be one of {', '.join(RANGES)} (got {severity!r})")
    low, high = RANGES[severity]
    return round(math.exp(rng.uniform(math.log(low), math.log(high))), 5)
