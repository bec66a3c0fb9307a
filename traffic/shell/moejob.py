"""A MoE job on a running lab: training iterations and decode bursts, one after the other.

What operators watch is the job, not the links: a training job's iteration time is the
signal production fault-finders start from (a slow or stalled iteration says *that*
something is wrong; the counters say where). ``MoeJob`` runs, in a background thread,
iteration after iteration of the high-bandwidth (training/prefill) kernel's step: its
dispatch flows, then its combine flows, each replayed as real RoCE packets
(``traffic.shell.replay.replay``), and every ``decode_every``-th iteration one decode burst
(the low-latency kernel's dispatch). The step is the same seeded one every iteration, so a
change in iteration time is the fabric's doing.

An iteration's time is what its traffic took on the wire: the dispatch's completion time
plus the combine's, each from its last sender's real start to its last byte (how late that
sender was after the common instant, the machine's start-up, is kept as ``skew_s``). The
seconds between iterations, when the lab starts the next replay's senders and receivers, are
the emulator's own and are not counted. The lab's senders do not retransmit: a packet lost
in an iteration is counted (``lost_packets``, and which flows lost it) rather than timed; on
an RC connection it would stall its queue pair until a retransmission, so a lossy iteration
is a slow one.

The job starts a compiled sender and receiver per host once, in ``start()``
(``traffic.shell.agents.HostAgents``), and hands them every replay's commands: no iteration
starts a process (two per host and replay, each a fork of this large Python process, took
the cores the emulated switch needs). ``stop()`` ends them.

``take_values(t)`` hands the collector (``ops.shell.collector.Collector(extra=...)``) the
iterations that ended since its last poll as telemetry (``traffic.iterations``).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from traffic.iterations import Iteration, add_paths, iteration_values
from traffic.kernels import FlowSpec, KernelTraffic, high_bandwidth, low_latency
from traffic.roce import Plane
from traffic.shell.agents import HostAgents
from traffic.shell.replay import DEFAULT_PLANE, ReplayResult, replay
from traffic.shell.running import RunningLab
from traffic.workload import Phase, simulate_step
from vocab.lanemark import LaneMarks
from vocab.plan import WiringPlan


def _keep(result: ReplayResult, kernel: str) -> list[dict[str, Any]]:
    """What an iteration keeps of a replay besides its times: the flows that lost packets
    or received corrupt ones.
    The rest, the replay's files, goes (megabytes a replay, and a job replays thousands of
    times)."""
    if result.workdir:
        shutil.rmtree(result.workdir, ignore_errors=True)
    return [{"src": r["src"], "dst": r["dst"], "sport": r["sport"], "lost": r["lost_packets"],
             "errors": r.get("errors", 0), "kernel": kernel}
            for r in result.flows if r["lost_packets"] or r.get("errors")]



def job_traffic(plan: WiringPlan, servers: int, gpus: int, tokens: int, seed: int
                ) -> tuple[KernelTraffic, KernelTraffic]:
    """What a ``MoeJob`` runs on ``plan``: DeepSeek-V3's training step (the high-bandwidth
    kernel's dispatch and combine, ``tokens`` per GPU) and a decode burst (the low-latency
    kernel's dispatch, DeepEP's decode shape at 2 tokens per GPU), each one seeded step."""
    train = high_bandwidth(simulate_step("deepseek-v3", servers, gpus, tokens, seed=seed), plan)
    decode = low_latency(simulate_step("deepseek-v3", servers, gpus, 2, seed=seed + 1), plan,
                         phases=(Phase.DISPATCH,))
    return train, decode

class MoeJob:
    """Iterations of ``train`` (dispatch then combine), a burst of ``decode`` every
    ``decode_every`` iterations, until ``stop()``. ``replay_kw`` go to every replay
    (e.g. ``rate_mbps``); receivers give up ``recv_idle_s`` after a flow's last packet,
    so a lossy iteration ends soon. ``on_iteration`` is told each iteration as it ends.
    """

    def __init__(self, lab: RunningLab, train: KernelTraffic,
                 decode: KernelTraffic | None = None, *, decode_every: int = 2,
                 recv_idle_s: float = 1.0,
                 on_iteration: Callable[[Iteration], None] | None = None,
                 log: Callable[[str], None] = print, **replay_kw: Any) -> None:
        if decode_every < 1:
            raise ValueError(f"decode_every must be >= 1 (got {decode_every})")
        self.lab = lab
        self.phases: list[tuple[str, list[FlowSpec]]] = [
            (str(p), [f for f in train.flows if f.phase == p]) for p in Phase]
        self.phases = [(p, fl) for p, fl in self.phases if fl]
        if not self.phases:
            raise ValueError("the training step has no flows to replay")
        self.decode = [f for f in decode.flows if f.bytes > 0] if decode is not None else []
        self.decode_every = decode_every
        self.on_iteration = on_iteration
        self.log = log
        self.replay_kw = {"recv_idle_s": recv_idle_s, "recv_grace_s": 8.0, "progress": False,
                          **replay_kw}
        self.iterations: list[Iteration] = []
        self._taken = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.marks = LaneMarks(lab.plan)
        self._seen: dict[tuple[str, str, int], int] = {}  # a flow's last lane mark
        #: the job's senders and receivers, one per host and role (native plane; else None)
        self.agents: HostAgents | None = None

    # --- the loop ------------------------------------------------------------------------
    def start(self) -> MoeJob:
        """Start iterating in a background thread (the controller's LB mode is read once,
        here: the job goes on while the controller is down, as a real one would). The
        hosts' agents are started here, in the caller's thread, which must outlive the job
        (an agent ends with the thread that started it)."""
        if self._thread is not None:
            raise RuntimeError("the job is running already")
        self.replay_kw.setdefault("lb", self.lab.client().lb())
        if Plane(self.replay_kw.get("plane") or DEFAULT_PLANE) is Plane.NATIVE:
            flows = [f for _name, fl in self.phases for f in fl if f.bytes > 0] + self.decode
            self.agents = HostAgents(self.lab).start(senders=sorted({f.src for f in flows}),
                                                     receivers=sorted({f.dst for f in flows}))
            self.replay_kw["agents"] = self.agents
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="moe-job", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        index = 0
        while not self._stop.is_set():
            it = self.iterate(index)
            with self._lock:
                self.iterations.append(it)
            if self.on_iteration is not None:
                self.on_iteration(it)
            if it.error is not None:
                self._stop.wait(1.0)  # a broken replay: do not spin
            index += 1

    def iterate(self, index: int) -> Iteration:
        """Run one iteration now (in the caller's thread) and return what it measured."""
        phases: dict[str, float] = {}
        lossy: list[dict[str, Any]] = []
        lost, started = 0, time.time()
        it = Iteration(index, started, started, 0.0, phases, 0, lossy=lossy)
        try:
            for name, flows in self.phases:
                r = replay(self.lab, flows, label=f"iteration {index} {name}", **self.replay_kw)
                if name == self.phases[0][0]:
                    it.started = r.start_ns / 1e9 + r.start_skew_s
                phases[name] = round(max(0.0, r.job_completion_s - r.start_skew_s), 6)
                it.skew_s[name] = round(r.start_skew_s, 6)
                lost += r.lost_packets
                it.receiver_drops += r.receiver_drops
                lossy += _keep(r, "train")
                add_paths(it.paths, r.flows, self.marks, self._seen)
            it.iter_s = round(sum(phases.values()), 6)
            it.lost_packets = lost
            if self.decode and index % self.decode_every == 0 and not self._stop.is_set():
                r = replay(self.lab, self.decode, label=f"iteration {index} decode",
                           **self.replay_kw)
                it.decode_s = round(max(0.0, r.job_completion_s - r.start_skew_s), 6)
                it.skew_s["decode"] = round(r.start_skew_s, 6)
                it.decode_lost = r.lost_packets
                it.receiver_drops += r.receiver_drops
                lossy += _keep(r, "decode")
                add_paths(it.paths, r.flows, self.marks, self._seen)
        except Exception as exc:  # a failed replay is a data point, not the end of the job
            it.error = f"{type(exc).__name__}: {exc}"[:300]
            self.log(f"moe-job: iteration {index} failed: {it.error}")
        it.ended = time.time()
        return it

    def stop(self, timeout: float = 120.0) -> None:
        """Stop after the replay in flight, then end the hosts' agents (even when the
        replay does not end in time: that ends it)."""
        self._stop.set()
        try:
            if self._thread is not None:
                self._thread.join(timeout)
        finally:
            if self.agents is not None:
                self.agents.close()
                self.agents = None
                self.replay_kw.pop("agents", None)
        if self._thread is not None:
            if self._thread.is_alive():
                raise TimeoutError(f"the MoE job did not stop within {timeout:g} s")
            self._thread = None

    def __enter__(self) -> MoeJob:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what the collector reads -------------------------------------------------------
    def take_values(self, _t: float | None = None) -> dict[tuple[str, str], float]:
        """Telemetry of the iterations that ended since the last call (``iteration_values``)."""
        with self._lock:
            done = self.iterations[self._taken:]
            self._taken = len(self.iterations)
        return iteration_values(done)
