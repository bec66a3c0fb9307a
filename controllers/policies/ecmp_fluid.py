"""Every flow split evenly over every switch's equal-cost ports: ECMP's expectation.

No switch does this (a flow rides one port); it is what hashing gives on average over
many draws, and what packet spraying approaches. The flow model only: ``SPLIT`` tells it
to spread each flow's rate over the ports instead of asking for paths.
"""

from __future__ import annotations

ORDER = 20  # where it lists among the policies (vocab.plugins.listing_key)
CONTROLLER = False
SPLIT = True
METHOD = "per-hop equal split (next_hops)"
WHATIF = "fluid"
