"""Every packet of a QP carries its own entropy value, so one message spreads over every path.

Packet spraying as Ultra Ethernet 1.0 specifies it, done from the host: the sender draws
each packet's UDP source port from a set of ``entropies`` values (round-robin over the
set), and the switches' ordinary ECMP hash sends packets of one message over all their
equal-cost ports. No collisions last longer than a packet; the price is reordering, so
the receiver must accept packets out of order within a message (the replay's receiver
counts how far out of order and how much buffer that would take). A dead lane still
listed in a select group gets its share of every message until the controller drops it.
"""

from __future__ import annotations

from vocab.flows import QP_SPORTS
from vocab.validate import count

PINS = False
RANDOM = True  # the hash of a finite set of ports is still a draw (small spread)
ENTROPY = "packet"
OPTIONS = {"entropies": 256}
#: a sender has QP_SPORTS source ports to spray over
RULES = {"entropies": count(1, QP_SPORTS)}
SPLIT = True  # the flow model: the fluid limit of spraying
METHOD = "per-hop equal split (next_hops): spraying's fluid limit"
NOTE = "fluid limit of spraying: no reordering cost, no imbalance of hashing a finite set"
PUBLISHED = ('per-packet spraying over every path, with out-of-order delivery at the receiver, '
             'uses the whole fabric')
SOURCE = ('Ultra Ethernet 1.0 (2025)')
DIFFERS = ('no congestion control here: a slow lane gets its share of every message, and a '
           'dead lane still in a select group takes a packet of every message until the '
           'controller drops its bucket, with nothing to retransmit it')
WHATIF = "fluid"
