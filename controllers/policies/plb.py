"""A QP takes a new entropy value when the receiver reports congestion rounds in a row (PLB).

Protective Load Balancing (Google, SIGCOMM 2022) for RoCE: the receiver measures each
packet's one-way delay (all hosts of the lab share one clock) and, at the end of each
round of a QP (``round_rtts`` base RTTs of arrivals, as PLB's rounds are RTTs), answers
with an RC ACKNOWLEDGE (the round was fine) or a CNP (at least half of its packets queued
more than ``delay_frames`` frame times); the feedback crosses the fabric like real ACKs.
After ``rounds`` CNPs in a row the sender re-draws the QP's source port, so a flow stuck
on a hot lane moves and a healthy one stays put.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Mapping

from controllers import lb
from controllers.paths import Path, PathFinder
from controllers.policies import HostTimes, ModelContext
from vocab.flows import QP_SPORT_BASE, QP_SPORTS, Flow
from vocab.validate import count, positive

PINS = False
RANDOM = True
ENTROPY = "plb"
OPTIONS = {"rounds": 3, "round_rtts": 1.0, "delay_frames": 4.0}
RULES = {"rounds": count(1, 1000), "round_rtts": positive(1000), "delay_frames": positive(10_000)}
PUBLISHED = ('re-pathing a connection after a few congested rounds (ECN) evens out link load '
             'and cuts tail latency in a production fabric')
SOURCE = ('PLB (SIGCOMM 2022)')
DIFFERS = ('the senders here have no congestion control: until a QP moves it keeps its full '
           'rate into the hot lane, and what queued there before the move drains at that '
           "lane's rate; a move is a random re-draw, which in a fully loaded fabric often "
           'lands on another busy lane and moves again')
WHATIF = None
#: re-draw passes of the flow model at most
PASSES = 8
#: a link is hot when its load time exceeds the job's NIC bound by more than this factor
HOT = 1.05
METHOD = f"lb.ecmp_assign, then up to {PASSES} passes: a QP on a link whose load time is " \
         f"> {HOT:g} x the NIC bound when its turn comes re-draws its source port"
NOTE = "PLB's steady state under the fluid model's loads (link bytes / capacity against " \
       f"{HOT:g} x the host tx/rx bound), from the seed's ECMP draw; QPs take turns in an " \
       "order fixed by the seed and each sees the loads the moves before it left (a link " \
       "that cooled stops signalling), the last pass's paths are kept if links stay hot; " \
       "the time moving takes (rounds of CNPs before a re-draw, queues meanwhile) and the " \
       "rounds themselves are not modelled, and the paths found are kept for the whole job"


def sender_settings(options: Mapping[str, float], times: HostTimes) -> dict[str, int]:
    """A sender moves a QP after ``rounds`` CNPs in a row."""
    return {"plb_rounds": int(options["rounds"])}


def receiver_args(options: Mapping[str, float], times: HostTimes) -> list[str]:
    """The receivers answer each round (``round_rtts`` base RTTs) with an ACK, or a CNP
    when half its packets queued more than ``delay_frames`` frame times beyond the base."""
    base = times.rtt_s
    delay = base + options["delay_frames"] * times.frame_s
    return ["--feedback-round-us", f"{options['round_rtts'] * base * 1e6:.1f}",
            "--feedback-delay-us", f"{delay * 1e6:.1f}"]


def _port(flow: Flow, seed: int, step: int) -> int:
    """Another source port for ``flow`` in pass ``step``: fixed by seed, flow and pass."""
    data = f"plb|{seed}|{step}|{flow.src}|{flow.dst}|{flow.proto}|{flow.sport}|{flow.dport}"
    h = int.from_bytes(hashlib.blake2b(data.encode(), digest_size=8).digest(), "big")
    port = QP_SPORT_BASE + h % QP_SPORTS
    return port if port != flow.sport else QP_SPORT_BASE + (h + 1) % QP_SPORTS


def nic_limit(flows: list[Flow], finder: PathFinder) -> float:
    """The load time (seconds at real rates) above which a link is hot: ``HOT`` x the
    job's NIC bound (``lb.lower_bounds`` host_tx / host_rx, what the flow model reports)."""
    bnd = lb.lower_bounds(finder, flows)
    return HOT * max(bnd["host_tx"], bnd["host_rx"])


def model(flows: list[Flow], finder: PathFinder, ctx: ModelContext) -> Mapping[Flow, Path]:
    """Where re-drawing settles: QPs on links hotter than the NIC bound move, pass by pass.

    A QP's new path is the ECMP hash of the same 5-tuple with the new source port, so a
    re-draw can land on a hot link again. Loads follow every move: moving every QP of
    every hot link at once would pile them onto the links that were cool (a herd that
    real PLB avoids because a cooled link stops sending CNPs), so QPs take turns.
    """
    assign = dict(ctx.ecmp())
    limit = nic_limit(flows, finder)
    room = {h: c * 1e9 / 8 * limit for h, c in finder.capacity().items()}  # bytes at limit
    load = dict.fromkeys(room, 0.0)
    for hop, b in lb.link_loads(assign).items():
        load[hop] = b
    for step in range(PASSES):
        if all(load[h] <= room[h] for h in room):
            break
        order = list(range(len(flows)))
        random.Random(f"plb|{ctx.seed}|{step}").shuffle(order)
        for i in order:
            f = flows[i]
            path = assign[f]
            if all(load[h] <= room[h] for h in path):
                continue
            new = lb.ecmp_path(dataclasses.replace(f, sport=_port(f, ctx.seed, step)),
                               finder, ctx.seed)
            for h in path:
                load[h] -= f.bytes
            for h in new:
                load[h] += f.bytes
            assign[f] = new
    return assign
