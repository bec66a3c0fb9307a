"""What ``astral-lab dashboard --demo`` shows: one permutation, round after round, under ECMP
then planned, so the class watches hash collisions pile onto a few lanes and then the spines
fill evenly. Not a registered scenario: it measures nothing and runs until stopped.

Each round is a cross-leaf permutation (``scenarios.common.permutation_flows``, 2 QPs per
GPU pair, a new source-port draw every round) replayed at NIC rate for ``seconds``; the
progress file the live view shows says which mode and round is on the wire.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from scenarios.common import permutation_flows
from traffic.shell.replay import replay
from traffic.shell.running import RunningLab
from vocab.plan import write_json_atomic

#: the modes the demo alternates between, in order
MODES = ("ecmp", "planned")
#: QPs per GPU pair (each its own 5-tuple, hashed on its own under ECMP)
QPS = 2


def progress_record(mode: str, round_no: int, rounds_done: int, elapsed_s: float) -> dict[str,
                                                                                        Any]:
    """What the live view's progress box shows for one round."""
    return {"scenario": "dashboard demo", "stage": f"{mode}: permutation round {round_no}",
            "mode": mode, "done": rounds_done, "elapsed_s": round(elapsed_s, 1),
            "updated": time.time()}


def alternate(lab: RunningLab, progress: str, *, seconds: float = 6.0,
              stop: threading.Event | None = None, rounds_per_mode: int = 2,
              max_rounds: int | None = None) -> int:
    """Replay rounds on ``lab`` (ECMP ``rounds_per_mode`` times, then planned, and again)
    until ``stop`` is set, Ctrl-C, or ``max_rounds``; returns the rounds completed."""
    plan = lab.plan
    client = lab.client()
    nbytes = int(min(plan.rdma_nic().values()) * 1e6 / 8 * seconds)
    t0 = time.monotonic()
    done = 0
    while (stop is None or not stop.is_set()) and (max_rounds is None or done < max_rounds):
        mode = MODES[(done // rounds_per_mode) % len(MODES)]
        if done == 0 or done % rounds_per_mode == 0:
            client.set_lb(mode)
            lab.wait_converged()
        write_json_atomic(progress, progress_record(mode, done + 1, done,
                                                    time.monotonic() - t0))
        flows = permutation_flows(plan, nbytes, qps=QPS, seed=0, qp_base=QPS * done)
        replay(lab, flows, label=f"{mode} round {done + 1}", progress=False)
        done += 1
    return done
