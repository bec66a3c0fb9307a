"""The names fault injection gives what it adds to a machine, and nothing else.

``testbed.shell.faults`` puts these on a running lab (nftables table, sink veth and iptables
chains in host namespaces; a marker in its traffic processes' environment; a cookie on the
OpenFlow rules it adds to a switch; an alias on a switch port whose MTU it lowered), and
``testbed.shell.cleanup`` removes what a crashed run left by the same names. They live here,
below both, so ``astral-lab clean`` finds fault leftovers without importing the injector.
"""

from __future__ import annotations

#: nftables table (netdev family) that holds every nic-loss rule in a host's namespace.
NFT_TABLE = "astral_lab_faults"
NFT_FAMILY = "netdev"
#: Egress losses are forwarded into this veth (its peer stays down, so the kernel frees
#: them): unlike ``drop``, the sender sees a successful send, as with a real lossy optic.
SINK, SINK_PEER = "astral-sink", "astral-sink-p"
#: iptables fallback chains (filter table, IPv4 only).
IPT_IN, IPT_OUT = "ASTRAL_LAB_FAULTS_IN", "ASTRAL_LAB_FAULTS_OUT"
#: Environment marker on hot-receiver traffic processes, so ``cleanup_faults`` finds orphans.
ENV_MARK = "ASTRAL_LAB_FAULT"
#: Cookie of every OpenFlow rule a fault adds to a switch (partial-blackhole). The
#: controller's own cookies are others (``controllers.flowtable.OWN_COOKIES``), and it
#: leaves rules with a cookie not its own alone, so these survive its resyncs.
OF_COOKIE = 0xA57FF001
#: Start of the alias (``ip link set dev X alias``) of a switch port whose MTU an
#: mtu-mismatch lowered: ``<MTU_MARK> run=<run id> <intf>=<mtu> ...``, the run and the
#: MTUs to restore (the port's and its bridge's internal port's), for a crashed run.
MTU_MARK = "astral-lab-fault-mtu"
