"""A QP takes a new entropy value when the receiver reports congestion ``rounds`` rounds in a row.

Protective Load Balancing (Google, SIGCOMM 2022) for RoCE: the receiver measures each
packet's one-way delay (all hosts of the lab share one clock) and, every
``round_packets`` packets of a QP, answers with an RC ACKNOWLEDGE (the round was fine)
or a CNP (most of its packets queued more than ``delay_frames`` frame times); the
feedback crosses the fabric like real ACKs. After ``rounds`` CNPs in a row the sender
re-draws the QP's source port, so a flow stuck on a hot lane moves and a healthy one
stays put.
"""

from __future__ import annotations

from collections.abc import Mapping

from controllers.flows import Flow
from controllers.paths import Path, PathFinder
from controllers.policies import ModelContext

PINS = False
RANDOM = True
ENTROPY = "plb"
OPTIONS = {"rounds": 3, "round_packets": 1, "delay_frames": 4.0}
WHATIF = None


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    raise NotImplementedError("plb's flow model is being written")
