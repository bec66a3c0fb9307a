"""The names fault injection gives what it adds to a machine, and nothing else.

``testbed.shell.faults`` puts these on a running lab (nftables tables and sink veths in host
namespaces and, for link faults on switch ports, in the root namespace; iptables chains in
host namespaces; a marker in its traffic processes' environment), and
``testbed.shell.cleanup`` removes what a crashed run left by the same names. They live here,
below both, so ``astral-lab clean`` finds fault leftovers without importing the injector.
"""

from __future__ import annotations

import zlib

#: nftables table (netdev family) that holds every nic-loss rule in a host's namespace.
NFT_TABLE = "astral_lab_faults"
NFT_FAMILY = "netdev"
#: Egress losses are forwarded into this veth (its peer stays down, so the kernel frees
#: them): unlike ``drop``, the sender sees a successful send, as with a real lossy optic.
SINK, SINK_PEER = "astral-sink", "astral-sink-p"
#: Every nftables table fault injection makes is named with this prefix (``NFT_TABLE`` too),
#: so ``cleanup_faults`` finds them all, in host namespaces and in the root namespace.
NFT_PREFIX = "astral_lab_"
#: Link faults (gray-loss, corruption) keep one table per link end and kind, in the
#: namespace the end lives in: these prefixes + the interface's name (``-`` written ``_``).
LOSS_TABLE, CORRUPT_TABLE = NFT_PREFIX + "loss_", NFT_PREFIX + "corrupt_"
#: A gray-loss end's own sink veth (``SINK``'s role): these prefixes + six hex digits
#: naming its interface, so concurrent faults on one namespace's ends never share one.
LINK_SINK, LINK_SINK_PEER = "astral-sk", "astral-sp"
#: iptables fallback chains (filter table, IPv4 only).
IPT_IN, IPT_OUT = "ASTRAL_LAB_FAULTS_IN", "ASTRAL_LAB_FAULTS_OUT"
#: Environment marker on hot-receiver traffic processes, so ``cleanup_faults`` finds orphans.
ENV_MARK = "ASTRAL_LAB_FAULT"


def link_table(prefix: str, dev: str) -> str:
    """The nft table of a link fault's end on ``dev``: ``prefix`` (``LOSS_TABLE``,
    ``CORRUPT_TABLE``) + the interface's name with ``-`` written ``_``."""
    return prefix + dev.replace("-", "_")


def link_sink(dev: str) -> tuple[str, str]:
    """``(sink, peer)``: the veth pair a gray-loss on ``dev`` forwards its losses into,
    named by a hash of ``dev`` (interface names are capped at 15 characters)."""
    tag = f"{zlib.crc32(dev.encode()) & 0xFFFFFF:06x}"
    return LINK_SINK + tag, LINK_SINK_PEER + tag
