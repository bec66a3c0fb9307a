"""The names fault injection gives what any kind adds to a machine, and nothing else.

``testbed.shell.faults`` puts these on a running lab (nftables tables and sink veths in host
namespaces and, for link faults on switch ports, in the root namespace; iptables chains in
host namespaces; a marker in its traffic processes' environment), and
``testbed.shell.cleanup`` removes what a crashed run left by the same names, for every kind
at once. They live here, below both, so ``astral-lab clean`` finds them without importing
the injector. A mark only one kind uses (a cookie on its OpenFlow rules, an alias on a port
it changed) is that kind's own, in its module (``testbed/faultkinds/<name>.py``), and so is
the hook that removes it (``clean_crashed``).
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


def fault_tables(nft_list_tables: str) -> list[str]:
    """Names of fault injection's tables in ``nft list tables netdev`` output."""
    return [w[2] for w in (ln.split() for ln in nft_list_tables.splitlines())
            if len(w) == 3 and w[0] == "table" and w[2].startswith(NFT_PREFIX)]


def is_sink(name: str) -> bool:
    """Is ``name`` a sink veth of fault injection (``SINK``, a gray-loss end's)?"""
    return name == SINK or (name.startswith(LINK_SINK) and len(name) == len(LINK_SINK) + 6)


def sinks(ip_o_link: str) -> list[str]:
    """Sink veths (``SINK``, a gray-loss end's ``LINK_SINK...``) in ``ip -o link`` output."""
    names = [ln.split(": ", 2)[1].split("@")[0] for ln in ip_o_link.splitlines()
             if ln.count(": ") >= 2]
    return [n for n in names if is_sink(n)]


#: One shell script per namespace (``cleanup_faults`` runs it in each host's: a subprocess
#: each is what cleanup costs): remove what a nic-loss or a link fault leaves, print 1 if
#: something was there.
CLEAN_NAMESPACE = f"""n=0
for t in $(nft list tables {NFT_FAMILY} 2>/dev/null | awk '$3 ~ /^{NFT_PREFIX}/ {{print $3}}'); do
  nft delete table {NFT_FAMILY} $t && n=1
done
for i in $(ip -o link show 2>/dev/null | awk -F'[@: ]+' '$2 == "{SINK}" ||
    ($2 ~ /^{LINK_SINK}[0-9a-f]+$/ && length($2) == {len(LINK_SINK) + 6}) {{print $2}}'); do
  ip link del $i 2>/dev/null && n=1
done
if iptables -w -S 2>/dev/null | grep -q ASTRAL_LAB_FAULTS; then
  n=1
  while iptables -w -D INPUT -j {IPT_IN} 2>/dev/null; do :; done
  while iptables -w -D OUTPUT -j {IPT_OUT} 2>/dev/null; do :; done
  for c in {IPT_IN} {IPT_OUT}; do iptables -w -F $c 2>/dev/null; iptables -w -X $c 2>/dev/null; done
fi
echo $n
"""
