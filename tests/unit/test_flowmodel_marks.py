"""The solver's rate trace and ``sent_by``: when a flow had sent part of its bytes.

A QP's messages end when the QP has sent each running total of its bytes; the flow model
reads those times off one simulation (``model_flows(marks=...)``) instead of iterating over
message starts. Checked here against a plain from-scratch filling that records the same
crossings, against chaining each message as a flow of its own, and through the solver's
reductions (components, identical copies, multiplicities).
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from scenarios.common import message_sizes
from testbed.models import solver
from testbed.models.perflow import model_flows
from tests.unit.test_flowmodel import coupled_groups, plain_filling, random_instance, sim
from traffic.kernels import FlowSpec
from traffic.roce import message_wire_bytes
from vocab.flows import sport_for_qp


def reference_marks(cap, rows, bits, start, marks):
    """Plain progressive filling from scratch at every event, noting when each class's sent
    bits cross each of its marks."""
    left, sent = list(bits), [0.0] * len(bits)
    finish: list[float | None] = [None] * len(bits)
    at: list[list[float | None]] = [[None] * len(m) for m in marks]
    t = 0.0
    while any(f is None for f in finish):
        active = [c for c in range(len(bits)) if finish[c] is None and start[c] <= t + 1e-12]
        if not active:
            t = min(start[c] for c in range(len(bits)) if finish[c] is None)
            continue
        r = plain_filling(cap, rows, active)[0]
        dt = min(left[c] / r[c] for c in active)
        dt = min([dt, *(start[c] - t for c in range(len(bits))
                        if finish[c] is None and start[c] > t)])
        for c in active:
            for k, m in enumerate(marks[c]):
                if at[c][k] is None and sent[c] < m <= sent[c] + r[c] * dt * (1 + 1e-12):
                    at[c][k] = t + (m - sent[c]) / r[c]
            left[c] -= r[c] * dt
            sent[c] += r[c] * dt
        t += dt
        for c in active:
            if left[c] <= 1e-9 * bits[c]:
                finish[c] = t
                at[c] = [t if x is None else x for x in at[c]]
    return finish, at


def _random_marks(rng, bits):
    out = []
    for b in bits:
        cuts = sorted(rng.uniform(0, b) for _ in range(rng.randint(0, 4)))
        out.append([*cuts, b])
    return out


def test_marks_match_a_plain_filling_on_random_instances():
    rng = random.Random(11)
    for _ in range(120):
        cap, rows, bits, start = random_instance(rng, 7, 12, (1.0, 1.0, 0.5))
        n = len(bits)
        marks = _random_marks(rng, bits)
        row = [c for c, r in enumerate(rows) for _ in r]
        tl = solver.simulate(np.array(cap), row, [lk for r in rows for lk, _ in r],
                             [w for r in rows for _, w in r], np.ones(n), np.array(bits),
                             np.array(start), trace=True)
        cls = np.repeat(np.arange(n), [len(m) for m in marks])
        got = tl.sent_by(cls, np.concatenate(marks), np.array(start))
        _, want = reference_marks(cap, rows, bits, start, marks)
        assert got.tolist() == pytest.approx([x for m in want for x in m], rel=1e-9)
        # the last mark of every class is its finish
        assert got[np.cumsum([len(m) for m in marks]) - 1].tolist() == pytest.approx(
            tl.finish.tolist(), rel=1e-12)


def traced(cap, rows, bits, start, mult=None):
    row = [c for c, r in enumerate(rows) for _ in r]
    return solver.simulate(np.array(cap, float), row, [lk for r in rows for lk, _ in r],
                           [w for r in rows for _, w in r],
                           np.ones(len(rows)) if mult is None else np.array(mult, float),
                           np.array(bits, float), np.array(start, float), trace=True)


@pytest.mark.parametrize("seed", range(4))
def test_marks_survive_components_and_identical_copies(seed):
    """Identical components are simulated once and cached: their traces must reach every
    copy under its own class numbers, and a cached run must give the same marks."""
    rng = random.Random(200 + seed)
    for _ in range(8):
        cap, rows, bits, start = coupled_groups(rng, rng.randint(1, 3), rng.randint(2, 3))
        marks = _random_marks(rng, bits)
        cls = np.repeat(np.arange(len(bits)), [len(m) for m in marks])
        flat = np.concatenate(marks)
        solver._COMPONENT_CACHE.clear()
        got = traced(cap, rows, bits, start).sent_by(cls, flat, np.array(start))
        _, want = reference_marks(cap, rows, bits, start, marks)
        assert got.tolist() == pytest.approx([x for m in want for x in m], rel=1e-9)
        again = traced(cap, rows, bits, start).sent_by(cls, flat, np.array(start))
        assert again.tolist() == got.tolist()


def test_a_class_of_several_flows_marks_each_flow():
    # two identical flows as one class of multiplicity 2 share the link: each sends at 1/2
    tl = traced([2.0], [[(0, 1.0)]], [4.0], [0.0], mult=[2])
    assert tl.sent_by(np.array([0, 0]), np.array([1.0, 4.0]), np.zeros(1)).tolist() == \
        pytest.approx([1.0, 4.0])


def test_sent_by_needs_a_trace_and_marks_need_one_list_per_flow():
    tl = sim([1.0], [[(0, 1.0)]], [2.0])
    with pytest.raises(ValueError, match="trace=True"):
        tl.sent_by(np.array([0]), np.array([1.0]), np.zeros(1))
    plan = fm_plan()
    f = Msg("s0g0", "s1g1", 49152, 1000, 0.0)
    with pytest.raises(ValueError, match="one list per flow"):
        model_flows(plan, [f], "ecmp", marks=[[1.0], [2.0]])


def fm_plan():
    from testbed.topologies import build

    return build("astral3", servers=2, gpus=2, servers_per_block=2, scale=1e-5)


@dataclasses.dataclass(frozen=True)
class Msg:
    src: str
    dst: str
    sport: int
    bytes: int
    start: float


def chained(plan, flows, policy, pmtu):
    """The definition: each message a flow of its own, started when its QP's previous
    message ends, iterated to the fixed point."""
    index = [(i, message_wire_bytes(s, pmtu)) for i, f in enumerate(flows)
             for s in message_sizes(f)]
    starts = [flows[i].start for i, _ in index]
    for _ in range(60):
        msgs = [Msg(flows[i].src, flows[i].dst, flows[i].sport, b, s)
                for (i, b), s in zip(index, starts, strict=True)]
        fin = model_flows(plan, msgs, policy, unit="mbps").flow_finish_s.tolist()
        nxt = [flows[i].start if k == 0 or index[k - 1][0] != i else fin[k - 1]
               for k, (i, _) in enumerate(index)]
        if nxt == pytest.approx(starts, rel=1e-12, abs=1e-15):
            break
        starts = nxt
    return [f - s for f, s in zip(fin, starts, strict=True)]


@pytest.mark.parametrize("policy", ["ecmp", "ecmp-fluid"])
def test_message_ends_equal_each_message_chained_as_its_own_flow(policy):
    """One flow per QP with its message ends as marks is the fixed point of chaining each
    message as a flow of its own that starts when the previous one ends."""
    plan = fm_plan()
    gpus = sorted(plan.rdma_nic())
    rng = random.Random(3)
    flows = []
    for qp, (a, b) in enumerate(((a, b) for a in gpus for b in gpus if a != b), start=1):
        msgs = rng.randint(1, 5)
        size = rng.choice([3000, 7408, 14336])
        flows.append(FlowSpec(a, b, bytes=size * msgs - rng.randint(0, 2000), qp=qp,
                              sport=sport_for_qp(qp), messages=msgs, message_bytes=size,
                              start=rng.choice([0.0, 0.0, 0.01])))
    flows.append(dataclasses.replace(flows[0], qp=99, sport=sport_for_qp(99), start=0.02))
    wire = [[message_wire_bytes(s, 4096) for s in message_sizes(f)] for f in flows]
    qps = [Msg(f.src, f.dst, f.sport, sum(w), f.start) for f, w in zip(flows, wire, strict=True)]
    res = model_flows(plan, qps, policy, unit="mbps",
                      marks=[np.cumsum(w).tolist() for w in wire])
    got = []
    for f, ends in zip(flows, res.flow_mark_s, strict=True):
        got += np.diff(np.r_[f.start, ends]).tolist()
    assert len(got) == sum(len(w) for w in wire)
    assert got == pytest.approx(chained(plan, flows, policy, 4096), rel=1e-7)
