"""link-failure: a leaf-spine lane, then a whole spine, fails in the middle of an All-to-All.

For every load-balancing mode (``ecmp``, ``planned``, ``adaptive``) the same All-to-All runs
three times on one astral3 fabric:

1. **baseline**: no failure; its completion time T sets when the failures land;
2. **lane**: one leaf-spine lane (one 200G optical lane of a leaf's uplink) is cut at
   ``cut_fraction`` x T, both ends at once as a fibre cut would (``Lab.set_link``);
3. **spine**: every link of one spine is cut at the same instant (a spine switch dies).

Failed links stay down until the run ends, then are restored before the next run.

**Traffic.** A DeepSeek-V3 dispatch volume per GPU, sized so the failure-free run lasts about
``duration_s`` emulated seconds, moved as an equal-split flat All-to-All through the NICs
(``traffic.kernels.flat_all_to_all`` with ``intra_server="fabric"``: NCCL's ``all_to_all``
without NVLink, or DeepEP's pure-RDMA kernel). Why not the hierarchical high-bandwidth
kernel: it only sends between same-rail GPUs, and on astral3 same-rail GPUs of one block
share a leaf, so its RDMA traffic barely touches the spines a failure would take away.

**Throughput timeline.** A background thread reads the byte counters of every leaf port that
faces a GPU (``/sys/class/net/<port>/statistics/tx_bytes`` in the root namespace: what the
fabric delivered to the receivers) every ``sample_ms``. The same thread notices when the
traffic starts and fires the failure ``cut_fraction`` x T later; the exact instant of the cut
is recorded and set against the replay's common start.

**Definitions** (all in emulated seconds; real time = emulated x scale):

* *pre-failure level*: mean delivered rate over the second half of the time before the cut
  (after the start-up ramp);
* *post-failure ideal*: the mean delivered rate the fluid max-min model
  (``testbed.models.flowmodel``, ECMP split evenly per hop) needs to finish the bytes still
  to send at the cut in its ideal time on the plan with the failed links removed
  (``PathFinder(plan, down=...)``): bytes left / that ideal time. (The model's *first* rates
  after the cut would sum to every NIC's full rate, because max-min hands the slack of the
  constrained flows to the leaf-local ones for as long as those last; a level held for the
  rest of the job is the fairer target);
* *recovery time*: from the cut until the delivered rate, averaged over 3 samples, is at
  least ``(100 - recover_pct)%`` of min(post-failure ideal, pre-failure level) and stays
  there for 3 samples; searched until 90% of the bytes have arrived (the job's tail is not
  a failure effect). Using the minimum means a mode that never reached the fluid ideal even
  before the failure (hash ECMP) is judged against where it was, not against an ideal it
  never had; ``None`` if it never got back before the tail;
* *completion penalty*: completion with the failure / baseline completion of the same mode;
  the *ideal penalty* is the same ratio in the fluid model: the bytes left at the same
  fraction of the model's own baseline, finished on the failed fabric.

The controller's part (``/health`` ``reroutes``: switches changed and time to the last
barrier) and the data-plane gap (the longest silence of a light probe stream,
``testbed.shell.probe.Stream``, from a GPU under the failed lane's leaf, that began at the cut)
are recorded for each failure.

Where things live: this module holds the parameters, the traffic, the links to fail, the
sampler and the runs on the fabric. The arithmetic on the runs' records (rates, recovery
time, bytes left at the cut, the flow model's penalties, their distributions over the
draws) is in ``scenarios.link_failure_metrics`` (pure); the tables, figures and report in
``scenarios.link_failure_report`` (its words in ``scenarios/templates/link_failure.md``).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from controllers import policies
from controllers.fabric import MODES
from controllers.paths import PathFinder
from scenarios.base import (
    DRAWS,
    FABRIC_GPUS,
    GPUS,
    MODEL_DRAWS,
    PHASE_SECONDS,
    QPS,
    SCALE,
    Param,
    Run,
    as_dict,
    paired_servers,
    scenario,
)
from scenarios.common import (
    DRAW_QP_STRIDE,
    port_tx_bytes,
    replay_lead,
    shift_qps,
    wire_flows,
)
from scenarios.link_failure_metrics import MESSAGE_BYTES, draws_for
from scenarios.link_failure_report import analyse
from testbed.models.perflow import model_flows
from testbed.shell.probe import Stream
from testbed.topologies import build_for_gpus
from traffic.kernels import FlowSpec, flat_all_to_all
from traffic.shell.replay import replay
from traffic.shell.running import RunningLab
from traffic.workload import Phase, preset, simulate_step, uniform
from vocab.plan import Link, WiringPlan
from vocab.validate import SEED, real

ORDER = 60  # where it lists in astral-lab list (vocab.plugins.listing_key)
PROBE_PORT = 4792  # the replay's receivers own 4791
PROBE_SPORTS = range(50100, 50108)
PROBE_PPS = 40.0  # per source port: 8 x 40 x ~110 B frames = 0.28 Mb/s in all
PROBE_BYTES = 64
#: receivers' idle timeout in a failure run: seconds without a packet before they stop
RECV_IDLE_S = 2.0


# --- pure helpers (unit-tested) ----------------------------------------------------------
def all_to_all(plan: WiringPlan, duration_s: float, *, qps_per_peer: int = 2, seed: int = 1,
               model: str = "deepseek-v3") -> list[FlowSpec]:
    """An equal-split All-to-All through the NICs that lasts ~``duration_s`` when NIC-bound.

    The volume is one dispatch of ``model`` (token copies x FP8 bytes) with as many tokens per
    GPU as one NIC sends in ``duration_s`` (every GPU sends ``(G-1)/G`` of its volume).
    """
    if duration_s <= 0:
        raise ValueError(f"--duration-s must be > 0 (got {duration_s})")
    m = preset(model)
    servers, gps = int(plan.params["servers"]), int(plan.params["gpus"])
    gpus = servers * gps
    if gpus < 2:
        raise ValueError("an All-to-All needs at least 2 GPUs")
    nic_bps = min(plan.host_link_mbps().values()) * 1e6
    volume = duration_s * nic_bps / 8 * gpus / (gpus - 1)
    tokens = max(1, math.ceil(volume / (m.top_k * m.dispatch_bytes)))
    step = simulate_step(m, servers, gps, tokens, gating=uniform(), seed=seed)
    return flat_all_to_all(step, plan, qps_per_peer=qps_per_peer, message_bytes=MESSAGE_BYTES,
                           phases=(Phase.DISPATCH,), intra_server="fabric").flows


def pick_lane(plan: WiringPlan) -> tuple[str, str, str, str]:
    """``(leaf, spine, probe_src, probe_dst)``: the first minimal path's leaf uplink.

    The first GPU's leaf and the spine its first candidate path to a GPU on another leaf
    crosses; in an All-to-All every lane of that leaf carries traffic, and the probe pair
    (that GPU and that peer) crosses the lane on some of its source ports.
    """
    finder = PathFinder(plan)
    src = plan.hosts[0].name
    leaf = finder.attach(src)
    for h in plan.hosts[1:]:
        if finder.attach(h.name) != leaf:
            hop = finder.candidates(src, h.name)[0][0]
            spine = finder.peer(hop)[0]
            return leaf, spine, src, h.name
    raise ValueError("every GPU hangs off one leaf: no lane to fail")


def spine_links(plan: WiringPlan, spine: str) -> list[Link]:
    """Every cable of a spine (all its lanes to all leaves)."""
    links = [ln for ln in plan.links if spine in (ln.a, ln.b)]
    if not links:
        raise ValueError(f"no links at {spine!r}")
    return links


# --- the sampler -------------------------------------------------------------------------
@dataclass
class Sampler:
    """Reads root-namespace interface byte counters in a thread; fires one action on time.

    ``delivered``: interfaces whose ``tx_bytes`` sum is the delivered total. ``watch``: extra
    interfaces recorded as they are (e.g. the lane that will fail). Once the delivered rate
    over one interval exceeds ``start_mbps``, traffic has started: ``action`` (if any) runs
    ``delay_s`` later in its own timer thread, and its wall-clock start and end are kept.
    """

    delivered: list[str]
    watch: list[str]
    interval_s: float
    start_mbps: float
    delay_s: float | None = None
    action: Callable[[], None] | None = None
    samples: list[tuple[int, int]] = field(default_factory=list)
    watched: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    started_ns: int | None = None
    action_ns: tuple[int, int] | None = None
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="link-failure-sampler",
                                        daemon=True)
        self._timer: threading.Timer | None = None

    read = staticmethod(port_tx_bytes)  # one counter, 0 if the interface is gone

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join(timeout=30)  # an action under way finishes (links in a known state)
        self._thread.join(timeout=5)

    def _fire(self) -> None:
        t0 = time.time_ns()
        try:
            assert self.action is not None
            self.action()
        except BaseException as exc:  # reported by the scenario after the run
            self.error = exc
        self.action_ns = (t0, time.time_ns())

    def _loop(self) -> None:
        nxt = time.monotonic()
        prev: tuple[int, int] | None = None
        while not self._stop.is_set():
            now = time.time_ns()
            total = sum(self.read(i) for i in self.delivered)
            self.samples.append((now, total))
            if self.watch:
                self.watched.append((now, {i: self.read(i) for i in self.watch}))
            if self.started_ns is None and prev is not None:
                mbps = (total - prev[1]) * 8 / max(1, now - prev[0]) * 1e3
                if mbps > self.start_mbps:
                    self.started_ns = prev[0]
                    if self.action is not None and self.delay_s is not None:
                        wait = self.delay_s - (now - prev[0]) / 1e9
                        self._timer = threading.Timer(max(0.0, wait), self._fire)
                        self._timer.start()
            prev = (now, total)
            nxt += self.interval_s
            self._stop.wait(max(0.0, nxt - time.monotonic()))


# --- the scenario ------------------------------------------------------------------------
@scenario(
    "fail a leaf-spine lane, then a whole spine, mid All-to-All: throughput timeline, "
    "recovery time, completion penalty, per mode",
    Param("gpus", 16, "GPUs in all (astral3, at most 64 servers of --gpus-per-server, 2 "
          "per block)", quick=8, rule=FABRIC_GPUS),
    Param("gpus_per_server", 4, "GPUs (NICs) per server", rule=GPUS),
    Param("scale", 1e-5, "emulated rate = real rate x scale (1e-5: a 400G NIC is 4 Mb/s)",
          quick=2e-5, rule=SCALE),
    Param("duration_s", 15.0, "emulated length of the failure-free All-to-All", quick=4.0,
          rule=PHASE_SECONDS),
    Param("modes", list(MODES), "load-balancing modes to compare", quick=["ecmp", "planned"],
          choices=MODES),
    Param("cut_fraction", 0.33, "when the failure lands, as a fraction of the baseline",
          rule=real(0, 1, low_open=True, high_open=True)),
    Param("recover_pct", 10.0,
          "recovered = rate back within this many percent of the post-failure target",
          rule=real(0, 100, low_open=True, high_open=True)),
    Param("sample_ms", 100.0, "throughput sampling interval (ms)", rule=real(10, 1000)),
    Param("qps_per_peer", 2, "QPs (UDP source ports) per GPU pair", rule=QPS),
    Param("draws", 3, "emulated hash draws of ecmp and adaptive (baseline, lane and spine "
          "each; planned is deterministic: one)", rule=DRAWS),
    Param("model_draws", 100, "flow-model hash draws beside them", quick=50, rule=MODEL_DRAWS),
    Param("seed", 1, "random seed (the step's token routing)", rule=SEED),
    fabrics=lambda p: _fabrics(p),
)
def link_failure(run: Run) -> None:
    """Fail a lane, then a spine, in the middle of an All-to-All (see the module docstring)."""
    p = run.params
    _check(p)
    plan = run.fabric("astral3")
    flows = all_to_all(plan, float(p["duration_s"]), qps_per_peer=int(p["qps_per_peer"]),
                       seed=int(p["seed"]))
    leaf, spine, probe_src, probe_dst = pick_lane(plan)
    lane = [ln for ln in plan.links if {ln.a, ln.b} == {leaf, spine}][:1]
    failures = {"lane": lane, "spine": spine_links(plan, spine)}
    fluid = model_flows(plan, wire_flows(flows), "ecmp-fluid", unit="mbps")
    run.save_json("flows.json", [as_dict(f) for f in flows])
    run.stage(f"{len(flows)} flows; failing {leaf}-{spine} and then {spine}")

    results: dict[str, dict[str, Any]] = {}
    modes = list(p["modes"])
    with run.lab(plan, label="astral3", lb=modes[0]) as lab:
        client = lab.client()
        for mode in modes:
            if client.lb()["mode"] != mode:
                client.set_lb(mode)
            if not policies.POLICIES.get(mode).pins:  # switches hash: no flows to hold
                client.clear_traffic()
            lab.wait_converged()
            run.guard(lab, flows, label=mode)
            for k in range(draws_for(mode, int(p["draws"]))):
                fk = shift_qps(flows, DRAW_QP_STRIDE * k)
                base = one_run(run, lab, fk, mode, "baseline", [], None,
                                (probe_src, probe_dst), k)
                results[f"{mode}/{k}/baseline"] = base
                delay = float(p["cut_fraction"]) * base["completion_s"]
                for case in ("lane", "spine"):
                    results[f"{mode}/{k}/{case}"] = one_run(
                        run, lab, fk, mode, case, failures[case], delay,
                        (probe_src, probe_dst), k)
    analyse(run, plan, flows, fluid, failures, results, (leaf, spine))


def _fabrics(p: dict[str, Any]) -> dict[str, Any]:
    """The one fabric the run brings up: astral3 in blocks of two servers."""
    _check(p)
    return {"astral3": build_for_gpus("astral3", p["gpus"], p["gpus_per_server"],
                                      servers_per_block=2, scale=float(p["scale"]))}


def _check(p: dict[str, Any]) -> None:
    for name in ("gpus", "gpus_per_server", "qps_per_peer"):
        if int(p[name]) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1 (got {p[name]})")
    paired_servers(p)
    if not 0 < float(p["cut_fraction"]) < 1:
        raise ValueError(f"--cut-fraction must be in (0, 1) (got {p['cut_fraction']})")
    if not 0 < float(p["recover_pct"]) < 100:
        raise ValueError(f"--recover-pct must be in (0, 100) (got {p['recover_pct']})")
    if not 10 <= float(p["sample_ms"]) <= 1000:
        raise ValueError(f"--sample-ms must be in [10, 1000] (got {p['sample_ms']})")
    if not p["modes"]:
        raise ValueError("--modes needs at least one mode")
    if int(p["draws"]) < 1 or int(p["model_draws"]) < 1:
        raise ValueError("--draws and --model-draws must be >= 1")


def _set_links(lab: RunningLab, links: Sequence[Link], up: bool) -> None:
    lab.set_links(list(links), up=up)  # one `ip -batch` for every switch-side end


def _restore(lab: RunningLab, links: Sequence[Link]) -> None:
    """Bring failed links back and wait until the controller has seen every port up."""
    _set_links(lab, links, up=True)
    client = lab.client()
    deadline = time.monotonic() + 30
    while client.health().get("down_ports") and time.monotonic() < deadline:
        time.sleep(0.05)
    lab.wait_converged()


def one_run(run: Run, lab: RunningLab, flows: list[FlowSpec], mode: str, case: str,
             links: Sequence[Link], delay_s: float | None, probe: tuple[str, str],
             draw: int = 0) -> dict[str, Any]:
    """One replay with the sampler (and, for a failure, the cut and a probe stream).

    Public as a seam: the only step that needs a running fabric, so a test replaces it and
    checks the draws, the model beside them and the report."""
    p = run.params
    plan = lab.plan
    nic = plan.host_link_mbps()
    delivered = [ln.b_intf for ln in plan.links if ln.kind == "nic"]
    watch = sorted({ln.a_intf for ln in links} | {ln.b_intf for ln in links})
    lead = replay_lead(flows)  # made explicit for the probe's length
    sampler = Sampler(delivered=delivered, watch=watch, interval_s=float(p["sample_ms"]) / 1e3,
                      start_mbps=0.3 * sum(nic[f] for f in {f.src for f in flows}),
                      delay_s=delay_s,
                      action=(lambda: _set_links(lab, links, up=False)) if links else None)
    stream = None
    if links:
        stream = Stream(lab, probe[0], probe[1], sports=PROBE_SPORTS, pps=PROBE_PPS,
                        duration=lead + 1.5 + (delay_s or 0.0) + 2.0, port=PROBE_PORT,
                        size=PROBE_BYTES)
        for stale in (stream.out, stream.out + ".ready"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(stale)
    health: dict[str, Any] = {}
    probe_result: dict[str, Any] = {}
    try:
        if stream is not None:
            stream.start()
        sampler.start()
        # packets lost at the cut never arrive, so a receiver waits out its idle timeout:
        # keep it short (the lossless queues behind the survivors keep packets flowing)
        res = replay(lab, flows, lead_s=lead, label=f"{mode} {case} (draw {draw + 1})",
                     recv_idle_s=RECV_IDLE_S if links else 5.0)
        if stream is not None:
            probe_result = stream.wait()
    finally:
        sampler.stop()
        if stream is not None:
            stream.stop()
        if links and sampler.action_ns is not None:
            health = lab.client().health()
            _restore(lab, links)
    if sampler.error is not None:
        raise RuntimeError(f"{mode}/{case}: failing the links raised {sampler.error!r}")
    if links and sampler.action_ns is None:
        raise RuntimeError(f"{mode}/{case}: the traffic never started, so nothing was cut")
    out = {"mode": mode, "case": case, "draw": draw, "completion_s": res.job_completion_s,
           "summary": res.summary(), "start_ns": res.start_ns, "samples": sampler.samples,
           "watched": sampler.watched, "action_ns": sampler.action_ns,
           "links": [f"{ln.a}:{ln.a_port}-{ln.b}:{ln.b_port}" for ln in links],
           "health": health, "probe": probe_result,
           "messages": len(res.messages),
           "incomplete_messages": sum(1 for m in res.messages if not m.get("complete"))}
    run.save_json(f"run-{mode}-{case}-{draw}.json", out)
    run.stage(f"{mode} draw {draw + 1} {case}: {res.job_completion_s:.2f} s, "
              f"{res.lost_packets} packets lost")
    return out


__all__ = [
    "PROBE_PORT", "PROBE_SPORTS", "PROBE_PPS", "PROBE_BYTES", "RECV_IDLE_S", "Sampler",
    "all_to_all", "link_failure", "pick_lane", "spine_links",
]
