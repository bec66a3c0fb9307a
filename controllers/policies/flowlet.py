"""A QP takes a new entropy value after an idle gap of at least gap_rtts base RTTs (LetFlow).

LetFlow at the host: packets of a burst keep one path (no reordering as long as the gap
exceeds the difference between paths' delays); after a pause long enough for the old
path's packets to have arrived, the next burst may take another. How often a QP pauses
decides everything: a sender serving many QPs round-robin spaces each QP's packets, and
with few packets in flight per path those spaces are already gaps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controllers.paths import Path, PathFinder
from controllers.policies import HostTimes, ModelContext, base_rtt_s
from vocab.flows import Flow
from vocab.validate import positive

PINS = False
RANDOM = True
ENTROPY = "flowlet"
OPTIONS = {"gap_rtts": 2.0}
RULES = {"gap_rtts": positive(1000)}
PUBLISHED = ('re-pathing flowlets at random after idle gaps performs close to congestion-aware '
             'balancing (CONGA) in symmetric and asymmetric fabrics')
SOURCE = ('LetFlow (NSDI 2017)')
DIFFERS = ("the senders here pace open-loop and serve their QPs round-robin, so a QP's "
           'packets are evenly spaced by (QPs at its sender) x frame time: with fewer QPs '
           'than the gap spans no gap opens and flowlet is ECMP, with more every packet is a '
           "flowlet and it is spraying; LetFlow's elasticity comes from TCP's ACK-clocked "
           'bursts, which these senders do not have')
WHATIF = None
#: the flow model puts the bytes of one full-size frame (payload at its path MTU plus
#: headers) under this key of ``ctx.options``: the rule is about packets, the model is not
FRAME_BYTES = "frame_bytes"
METHOD = "flowlet rule per job: fluid split (next_hops) if the median sender's packet " \
         "spacing >= the gap, else lb.ecmp_assign (hash per QP)"
NOTE = "decided once per job at the median sender: a QP's packets are spaced by its " \
       "sender's QPs (all counted as active together) x the frame time at its NIC rate; " \
       "the gap is gap_rtts x base RTT, (switch hops of the longest minimal path + 1) x " \
       "the frame time at the slowest fabric link (policies.base_rtt_s, as the replay); " \
       "spacing >= gap: every packet a new flowlet, modelled as the fluid split (no " \
       "reordering, no hashing of finite flowlets); else one hash per QP (re-hashes at " \
       "idle gaps between messages are not modelled)"


def rule(flows: list[Flow], finder: PathFinder, options: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers the decision rests on (seconds): the median sender's packet spacing,
    the base RTT, the gap, and ``split`` = spacing >= gap.

    Per job rather than per QP because the fluid model either splits a job or routes it;
    the median sender stands for the job (most of an all-to-all's senders look alike).
    """
    if FRAME_BYTES not in options:
        raise ValueError(f"flowlet's rule needs ctx.options[{FRAME_BYTES!r}] (the flow model "
                         "sets it)")
    frame_bits = float(options[FRAME_BYTES]) * 8
    qps: dict[str, int] = {}
    pairs: dict[tuple[str, str], Flow] = {}
    for f in {f.key: f for f in flows}.values():  # a 5-tuple is one QP however many specs
        qps[f.src] = qps.get(f.src, 0) + 1
        pairs.setdefault((finder.attach(f.src), finder.attach(f.dst)), f)
    if not qps:
        return {"spacing_s": 0.0, "rtt_s": 0.0, "gap_s": 0.0, "split": False}
    spacing = sorted(n * frame_bits / (finder.nic_capacity(h) * 1e9) for h, n in qps.items())
    median = spacing[(len(spacing) - 1) // 2]
    hops = max(len(finder.candidates(f.src, f.dst)[0]) for f in pairs.values())
    cap = finder.capacity()
    fabric = [c for h, c in cap.items() if finder.is_fabric(h)] or list(cap.values())
    rtt = base_rtt_s(hops + 1, frame_bits / 8, min(fabric) * 1e9)
    gap = float(options["gap_rtts"]) * rtt
    return {"spacing_s": median, "rtt_s": rtt, "gap_s": gap, "split": median >= gap}


def sender_settings(options: Mapping[str, float], times: HostTimes) -> dict[str, float]:
    """The senders' gap, in microseconds: ``gap_rtts`` base RTTs (the data's one-way delay
    plus the tiny ACK's)."""
    return {"flowlet_gap_us": options["gap_rtts"] * times.rtt_s * 1e6}


def split(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> bool:
    """The flow model's ``SPLIT`` for this job: ``rule``'s answer."""
    return bool(rule(flows, finder, ctx.options)["split"])


SPLIT = split


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    """When the rule says the QPs keep their paths: one hash per QP, as ``ecmp``."""
    return ctx.ecmp()
