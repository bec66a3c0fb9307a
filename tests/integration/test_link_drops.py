"""An mtu-mismatch seen as an operator's switch shows it: discards on one port.

One small astral3 fabric (2 servers x 2 GPUs). Full-size RoCE frames (4,096-byte payloads)
from s0g0 to a GPU on the other leaf cross s0g0's NIC cable, whose leaf end is lowered to
MTU 1500: every such frame is refused there. The collector (polled by hand, as ``ops
watch`` does in its thread) must count them on that cable, a->b, and nowhere else, the
engine must raise link-drops on it, and once the MTU is back the counters stay at 0 under
the same traffic. A clean fabric carrying the same frames shows no discard at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ops.detectors import Alert, Engine
from ops.shell.collector import Collector
from testbed.faultspec import Fault
from testbed.shell.faults import FaultInjector
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.shell.replay import replay

INTERVAL = 0.5
CABLE = "s0g0~lf0r0#0"  # s0g0's NIC cable; its b end (the leaf's port) is the lowered one


def _flows(qp_base: int, nbytes: int) -> list[FlowSpec]:
    """Two QPs s0g0 -> s0g1 (other leaf): every frame crosses CABLE a->b."""
    return [FlowSpec.make("s0g0", "s0g1", nbytes, qp=qp_base + q, message_bytes=64_000)
            for q in range(2)]


def _replay_polled(lab: Lab, col: Collector, eng: Engine, opened: list[Alert],
                   flows: list[FlowSpec]) -> tuple[float, float]:
    """Replay ``flows`` while polling every INTERVAL, then 3 polls more (the alert's
    clearing needs 2); return the time of the first and the last poll."""
    t0 = time.time()
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(replay, lab, flows, progress=False, recv_idle_s=1.0,
                        recv_grace_s=1.0)
        extra = 3
        while extra:
            col.poll_once()
            opened.extend(eng.step(col.history))
            extra -= fut.done()
            time.sleep(INTERVAL)
        fut.result()
    return t0, time.time()


def _drops(col: Collector, since: float, until: float
           ) -> dict[tuple[str, str], float | None]:
    """Sum of every link's ``rxdrops_*`` over the polls in [since, until] (None: the
    series has no value there, so a missing metric cannot pass for a clean one)."""
    times = list(col.history.times)
    out: dict[tuple[str, str], float | None] = {}
    for comp in col.links:
        for d in ("ab", "ba"):
            vals = [v for t, v in zip(times, col.history.values(comp, f"rxdrops_{d}"),
                                      strict=True) if since <= t <= until and v is not None]
            out[(comp, f"rxdrops_{d}")] = sum(vals) if vals else None
    return out


def test_mtu_mismatch_is_counted_on_the_lowered_link_and_raises_link_drops(
        assert_clean: Callable[[Any], None]) -> None:
    plan = build("astral3", servers=2, gpus=2)
    with Lab(plan, log=lambda m: None) as lab:
        col = Collector.for_lab(lab, None, interval=INTERVAL)
        eng = Engine(plan)
        opened: list[Alert] = []
        clean = _replay_polled(lab, col, eng, opened, _flows(0, 1_000_000))
        assert set(_drops(col, *clean).values()) == {0.0}  # full frames, nothing discarded
        with FaultInjector(lab) as inj:
            h = inj.inject(Fault("mtu-mismatch", CABLE, mtu=1500))
            faulty = _replay_polled(lab, col, eng, opened, _flows(10, 5_000_000))
            inj.undo(h)
            refused = inj.events[-1]["detail"]["rx_dropped"]  # the kernel's own count
        drops = _drops(col, *faulty)
        seen = {k: v for k, v in drops.items() if v}
        per_poll = [v for t, v in zip(col.history.times, col.history.values(
            CABLE, "rxdrops_ab"), strict=True) if faulty[0] <= t <= faulty[1]]
        print(f"mtu-mismatch on {CABLE}: kernel counted {refused}, telemetry {seen}, "
              f"per poll {per_poll}")
        # every refused frame, counted once, on that cable, in the way they travelled
        assert seen == {(CABLE, "rxdrops_ab"): refused} and refused > 0
        raised = [(a.detector, a.component) for a in opened]
        assert ("link-drops", CABLE) in raised, raised
        assert [r for r in raised if r[0] == "link-drops" and r[1] != CABLE] == []
        # a lowered MTU leaves the carrier alone (link-drops ignores polls where it changed)
        assert ("link-down", CABLE) not in raised, raised
        assert all(a.cleared for a in opened if a.detector == "link-drops")  # cleared after
        after = _replay_polled(lab, col, eng, opened, _flows(20, 1_000_000))
        assert set(_drops(col, *after).values()) == {0.0}  # MTU back: full frames pass
        assert [a for a in opened if a.opened and a.opened >= after[0]] == []
    assert_clean(plan)
