"""The Lab's traffic shaping as plain arithmetic: the ``tc`` lines of an HTB port and the
interfaces that get them.

``htb_commands`` is the one HTB class (and, for a lossless fabric, the deep queue under it)
every shaped interface gets at bring-up, ``queue_packets`` sizes that queue and
``root_ends`` lists the switch-side ends the Lab shapes. ``testbed.shell.qos`` re-shapes the
same ports and ``testbed.shell.faults`` changes their rate, so they build on these lines rather
than copies. Apart from ``testbed.shell.lab`` (the root shell that runs the commands) and
``testbed.shell.mntopo`` (which loads Mininet) because nothing here needs root or Mininet: it is
unit-tested as text. ``testbed.shell.lab`` re-exports every name, ``testbed.shell.mntopo``
``HTB_QUANTUM``.
"""

from __future__ import annotations

from vocab.plan import WiringPlan

#: Bytes an HTB class may send per round: one full frame. Without it HTB uses rate / r2q
#: (r2q = 10), which at the lab's tens of Mb/s is far above the kernel's sane range, so
#: every shaped interface makes tc print "quantum of class ... is big" (Mininet shows it
#: as ``*** Error``). One class per interface, so the quantum only sets the round size.
HTB_QUANTUM = 1514


#: Seconds of line rate a shaped port may queue before it drops (see ``htb_commands``).
LOSSLESS_QUEUE_S = 8.0


def queue_packets(mbps: float, seconds: float = LOSSLESS_QUEUE_S) -> int:
    """Queue limit in packets that holds ``seconds`` of ``mbps`` in ~1 KB frames (>= 1000)."""
    return max(1000, int(mbps * 1e6 * seconds / 8 / 1000))


def htb_commands(dev: str, mbps: float, prefix: str = "", lossless: bool = True) -> list[str]:
    """Shape ``dev`` to ``mbps`` with one HTB class, as Mininet's TCLink does.

    RoCE fabrics are lossless: PFC pauses a sender instead of dropping, and the
    replay agents, like RDMA NICs, have no TCP-style retransmission to hide a drop.
    The emulator has no PFC, so with ``lossless`` each port's queue holds eight
    seconds of its line rate (``queue_packets``) instead of Mininet's 1,000
    packets: a burst waits at the bottleneck rather than vanishing, so completion
    times match a lossless fabric's (what PFC's head-of-line blocking adds
    upstream is not modelled). ``lossless=False`` keeps the drop-tail default.
    """
    cmds = [
        f"{prefix}qdisc add dev {dev} root handle 5:0 htb default 1",
        f"{prefix}class add dev {dev} parent 5:0 classid 5:1 htb rate {mbps:g}Mbit burst 15k "
        f"quantum {HTB_QUANTUM}",
    ]
    if lossless:
        cmds.append(f"{prefix}qdisc add dev {dev} parent 5:1 handle 10: pfifo limit "
                    f"{queue_packets(mbps)}")
    return cmds


def root_ends(plan: WiringPlan) -> list[tuple[str, float]]:
    """``(interface, emulated Mb/s)`` of every link end in the root namespace: the switch
    side of every link (a host's end lives in its namespace). The Lab shapes exactly
    these and each host's ``<host>-eth0``; ``testbed.shell.qos`` re-shapes the same set."""
    hosts = {h.name for h in plan.hosts}
    ends = []
    for link in plan.links:
        if link.a not in hosts:
            ends.append((link.a_intf, link.mbps))
        ends.append((link.b_intf, link.mbps))
    return ends

