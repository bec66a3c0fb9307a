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
* *post-failure ideal*: the mean delivered rate the fluid max-min model (``testbed.flowmodel``,
  ECMP split evenly per hop) needs to finish the bytes still to send at the cut in its ideal
  time on the plan with the failed links removed (``PathFinder(plan, down=...)``): bytes left
  / that ideal time. (The model's *first* rates after the cut would sum to every NIC's full
  rate, because max-min hands the slack of the constrained flows to the leaf-local ones for
  as long as those last; a level held for the rest of the job is the fairer target);
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
``testbed.probe.Stream``, from a GPU under the failed lane's leaf, that began at the cut)
are recorded for each failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controllers import policies
from controllers.paths import Hop, PathFinder
from scenarios.base import Param, Run, as_dict, scenario
from scenarios.common import (
    RANDOM_POLICIES,
    _tx_bytes,
    compare,
    distribution,
    fmt_distribution,
    in_band,
    median_chance,
    plot_draws,
    real_time_factor,
    replay_lead,
    shift_qps,
    wire_flows,
)
from testbed.lab import LOSSLESS_QUEUE_S
from testbed.models.flowmodel import model_flows
from testbed.plan import Link, WiringPlan
from testbed.probe import Stream
from testbed.topologies import build
from traffic.kernels import FlowSpec, flat_all_to_all
from traffic.replay import replay
from traffic.workload import preset, simulate_step, uniform

#: every policy the controller runs (controllers/policies/)
MODES = policies.names(controller=True)
CASES = ("baseline", "lane", "spine")
MESSAGE_BYTES = 64 * 1024
SMOOTH = 3  # samples averaged, and samples held, for the recovery rule
TAIL_FRACTION = 0.9  # recovery is searched until this share of the bytes has arrived
PROBE_PORT = 4792  # the replay's receivers own 4791
PROBE_SPORTS = range(50100, 50108)
PROBE_PPS = 40.0  # per source port: 8 x 40 x ~110 B frames = 0.28 Mb/s in all
PROBE_BYTES = 64
#: receivers' idle timeout in a failure run: seconds without a packet before they stop
RECV_IDLE_S = 2.0
PUBLISHED_FAILOVER = ("no published recovery figure for Astral 3.0 was found in the stored "
                      "sources; TENT (arXiv 2604.00368) reports sub-50 ms self-healing around "
                      "link failures in production GPU clusters")


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
                           phases=("dispatch",), intra_server="fabric").flows


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


def down_hops(links: Sequence[Link]) -> set[Hop]:
    """Both switch ends of each link, as ``PathFinder(down=...)`` takes them."""
    return {(ln.a, ln.a_port) for ln in links} | {(ln.b, ln.b_port) for ln in links}


def remaining_after(flows: Sequence[FlowSpec], finish_s: Sequence[float],
                    start_rate_bps: Sequence[float], t: float) -> list[FlowSpec]:
    """The bytes each flow still has at ``t`` s, given the model's first rates and finishes.

    A flow finished by ``t`` has none left; otherwise it has sent its first rate times ``t``.
    Rates are constant until the first flow finishes, so this is exact when none finishes
    before ``t`` (as in an equal All-to-All under fluid ECMP); after a departure max-min
    rates can move either way, so it is then an approximation. Flows with nothing left are
    dropped. Wire-bytes flows (``message_bytes`` 0) stay so.
    """
    if t < 0:
        raise ValueError("t must be >= 0")
    out = []
    for f, fin, rate in zip(flows, finish_s, start_rate_bps, strict=True):
        if fin <= t:
            continue
        left = f.bytes - int(rate * t / 8)
        if left > 0 and not f.message_bytes:  # a wire-bytes flow (scenarios.common.wire_flows)
            out.append(dataclasses.replace(f, bytes=left, start=max(0.0, f.start - t)))
        elif left > 0:
            out.append(FlowSpec.make(f.src, f.dst, left, f.qp, message_bytes=f.message_bytes,
                                     start=max(0.0, f.start - t),
                                     traffic_class=f.traffic_class, phase=f.phase,
                                     kernel=f.kernel))
    return out


def rates(samples: Sequence[tuple[int, int]], start_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Counter samples ``(wall ns, total bytes)`` -> (mid-interval s after start, Mb/s)."""
    if len(samples) < 2:
        return np.zeros(0), np.zeros(0)
    t = np.array([s[0] for s in samples], dtype=np.float64)
    b = np.array([s[1] for s in samples], dtype=np.float64)
    dt = np.diff(t) / 1e9
    keep = dt > 0
    mid = ((t[:-1] + t[1:]) / 2 - start_ns) / 1e9
    return mid[keep], (np.diff(b) * 8 / 1e6)[keep] / dt[keep]


def smooth(values: np.ndarray, window: int = SMOOTH) -> np.ndarray:
    """Trailing moving average (the first samples average what exists so far)."""
    if window < 1:
        raise ValueError("window must be >= 1")
    c = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def level(t: np.ndarray, mbps: np.ndarray, t0: float, t1: float) -> float:
    """Mean rate of the samples whose midpoint lies in ``[t0, t1)`` (NaN if none)."""
    sel = (t >= t0) & (t < t1)
    return float(mbps[sel].mean()) if sel.any() else math.nan


def recovery_time(t: np.ndarray, mbps: np.ndarray, cut_s: float, target_mbps: float,
                  until_s: float, hold: int = SMOOTH) -> float | None:
    """Seconds from ``cut_s`` until the smoothed rate is >= target for ``hold`` samples.

    Only samples after the cut and before ``until_s`` count. The answer is measured from the
    cut to the start of the first sample of the held run (0 if the rate never fell below the
    target); ``None`` if no such run exists before ``until_s``.
    """
    if hold < 1:
        raise ValueError("hold must be >= 1")
    s = smooth(mbps)
    idx = np.flatnonzero((t > cut_s) & (t < until_s))
    run = 0
    for k, i in enumerate(idx):
        run = run + 1 if s[i] >= target_mbps else 0
        if run >= hold:
            first = idx[k - hold + 1]
            half = (t[first] - t[first - 1]) / 2 if first > 0 else 0.0
            return max(0.0, float(t[first] - half - cut_s))
    return None


def time_of_fraction(t: np.ndarray, mbps: np.ndarray, fraction: float) -> float:
    """When the cumulative delivered bytes first reach ``fraction`` of their total."""
    if not len(t):
        return math.nan
    dt = np.diff(np.concatenate(([t[0] - (t[1] - t[0]) if len(t) > 1 else 0.0], t)))
    cum = np.cumsum(mbps * dt)
    if cum[-1] <= 0:
        return math.nan
    return float(t[int(np.searchsorted(cum, fraction * cum[-1]))])


def probe_gap(result: dict[str, Any], cut_wall_s: float, window_s: float = 1.0
              ) -> tuple[float | None, int]:
    """Longest probe silence that began within ``window_s`` around the cut, and how many
    probe ports had one (a port that never crossed the failed link has none there)."""
    gaps = []
    for f in result.get("flows", {}).values():
        at = f.get("gap_at")
        if at is not None and cut_wall_s - 0.2 <= at <= cut_wall_s + window_s:
            gaps.append(float(f["max_gap_s"]))
    return (max(gaps) if gaps else None), len(gaps)


def model_penalties(plan: WiringPlan, flows: Sequence[FlowSpec], policy: str,
                    links: Sequence[Link], fraction: float, draws: int
                    ) -> list[dict[str, float]]:
    """The flow model's completion penalty of a failure at ``fraction`` of the baseline,
    under ``policy`` (the controller's mode), over ``draws`` seeds of its hash (one for a
    policy without a draw): per seed the baseline completion, the completion with the links
    cut at that instant (what was left at the cut, re-routed by the same policy on the
    failed fabric), and their ratio. Frame bytes, as the shapers count."""
    wire = wire_flows(list(flows))
    failed = PathFinder(plan, down=down_hops(links))
    out = []
    for s in range(max(1, draws) if policy in RANDOM_POLICIES else 1):
        base = model_flows(plan, wire, policy, seed=s, unit="mbps")
        t = fraction * base.completion_s
        left = remaining_after(wire, base.flow_finish_s, base.flow_start_rate_bps, t)
        after = model_flows(failed, left, policy, seed=s, unit="mbps") if left else None
        total = t + (after.completion_s if after else 0.0)
        out.append({"seed": s, "baseline_s": base.completion_s, "failed_s": total,
                    "penalty": total / base.completion_s})
    return out


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

    read = staticmethod(_tx_bytes)  # one counter, 0 if the interface is gone

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
    "link-failure",
    "fail a leaf-spine lane, then a whole spine, mid All-to-All: throughput timeline, "
    "recovery time, completion penalty, per mode",
    Param("servers", 4, "servers (astral3, 2 per block)", quick=2),
    Param("gpus_per_server", 4, "GPUs (NICs) per server"),
    Param("scale", 1e-5, "emulated rate = real rate x scale (1e-5: a 400G NIC is 4 Mb/s)",
          quick=2e-5),
    Param("duration_s", 15.0, "emulated length of the failure-free All-to-All", quick=4.0),
    Param("modes", list(MODES), "load-balancing modes to compare", quick=["ecmp", "planned"],
          choices=MODES),
    Param("cut_fraction", 0.33, "when the failure lands, as a fraction of the baseline"),
    Param("recover_pct", 10.0,
          "recovered = rate back within this many percent of the post-failure target"),
    Param("sample_ms", 100.0, "throughput sampling interval (ms)"),
    Param("qps_per_peer", 2, "QPs (UDP source ports) per GPU pair"),
    Param("draws", 3, "emulated hash draws of ecmp and adaptive (baseline, lane and spine "
          "each; planned is deterministic: one)"),
    Param("model_draws", 100, "flow-model hash draws beside them", quick=50),
    Param("seed", 1, "random seed (the step's token routing)"),
)
def link_failure(run: Run) -> None:
    """Fail a lane, then a spine, in the middle of an All-to-All (see the module docstring)."""
    p = run.params
    _check(p)
    plan = build("astral3", servers=int(p["servers"]), gpus=int(p["gpus_per_server"]),
                 servers_per_block=2, scale=float(p["scale"]))
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
            if not policies.get(mode).pins:  # switches hash: no flows to hold
                client.clear_traffic()
            client.wait_converged(timeout=60)
            run.guard(lab, flows, label=mode)
            for k in range(draws_for(mode, int(p["draws"]))):
                fk = shift_qps(flows, DRAW_QP_STRIDE * k)
                base = _one_run(run, lab, fk, mode, "baseline", [], None,
                                (probe_src, probe_dst), k)
                results[f"{mode}/{k}/baseline"] = base
                delay = float(p["cut_fraction"]) * base["completion_s"]
                for case in ("lane", "spine"):
                    results[f"{mode}/{k}/{case}"] = _one_run(
                        run, lab, fk, mode, case, failures[case], delay,
                        (probe_src, probe_dst), k)
    _analyse(run, plan, flows, fluid, failures, results, (leaf, spine))


#: QP numbers of draw k are shifted by k x this (every draw its own UDP source ports)
DRAW_QP_STRIDE = 1000


def draws_for(mode: str, draws: int) -> int:
    """Emulated draws of a mode: one per hash draw where its paths depend on the hash."""
    return max(1, draws) if mode in RANDOM_POLICIES else 1


def _check(p: dict[str, Any]) -> None:
    for name in ("servers", "gpus_per_server", "qps_per_peer"):
        if int(p[name]) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1 (got {p[name]})")
    if int(p["servers"]) % 2:
        raise ValueError(f"--servers must be even (astral3 blocks of 2; got {p['servers']})")
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


def _set_links(lab: Any, links: Sequence[Link], up: bool) -> None:
    lab.set_links(list(links), up=up)  # one `ip -batch` for every switch-side end


def _restore(lab: Any, links: Sequence[Link]) -> None:
    """Bring failed links back and wait until the controller has seen every port up."""
    _set_links(lab, links, up=True)
    client = lab.client()
    deadline = time.monotonic() + 30
    while client.health().get("down_ports") and time.monotonic() < deadline:
        time.sleep(0.05)
    client.wait_converged(timeout=60)


def _one_run(run: Run, lab: Any, flows: list[FlowSpec], mode: str, case: str,
             links: Sequence[Link], delay_s: float | None, probe: tuple[str, str],
             draw: int = 0) -> dict[str, Any]:
    """One replay with the sampler (and, for a failure, the cut and a probe stream)."""
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
           "health": health, "probe": probe_result}
    run.save_json(f"run-{mode}-{case}-{draw}.json", out)
    run.stage(f"{mode} draw {draw + 1} {case}: {res.job_completion_s:.2f} s, "
              f"{res.lost_packets} packets lost")
    return out


def _failure_metrics(r: dict[str, Any], base: dict[str, Any], plan: WiringPlan,
                     flows: list[FlowSpec], fluid: Any, links: Sequence[Link],
                     recover_pct: float) -> dict[str, Any]:
    """Recovery, penalty and their ideals for one failure run (see the module docstring)."""
    t, mbps = rates(r["samples"], r["start_ns"])
    cut_s = (r["action_ns"][0] - r["start_ns"]) / 1e9
    frac = cut_s / base["completion_s"]
    t_model = frac * fluid.completion_s
    wire = wire_flows(list(flows))  # the fluid model runs on frame bytes, as the counters
    left = remaining_after(wire, fluid.flow_finish_s, fluid.flow_start_rate_bps, t_model)
    failed = PathFinder(plan, down=down_hops(links))
    after = model_flows(failed, left, "ecmp-fluid", unit="mbps") if left else None
    ideal_total = t_model + (after.completion_s if after else 0.0)
    post_ideal = 8 * sum(f.bytes for f in left) / after.completion_s / 1e6 if after else 0.0
    first = float(np.sum(after.flow_start_rate_bps)) / 1e6 if after else 0.0
    pre = level(t, mbps, cut_s / 2, cut_s)
    target = (1 - recover_pct / 100) * min(post_ideal, pre if pre == pre else post_ideal)
    until = time_of_fraction(t, mbps, TAIL_FRACTION)
    rec = recovery_time(t, mbps, cut_s, target, until)
    sm = smooth(mbps)
    win = (t > cut_s) & (t < cut_s + 1.0)
    dip = float(sm[win].min()) if win.any() else math.nan
    reroutes = [x for x in r["health"].get("reroutes", [])
                if not x.get("up") and x.get("at", 0) >= r["action_ns"][0] / 1e9 - 0.5]
    gap, ports = probe_gap(r["probe"], r["action_ns"][0] / 1e9)
    return {
        "cut_s": cut_s, "cut_action_ms": (r["action_ns"][1] - r["action_ns"][0]) / 1e6,
        "pre_mbps": pre, "post_ideal_mbps": post_ideal, "fluid_first_mbps": first,
        "target_mbps": target,
        "dip_mbps": dip, "recovery_s": rec, "tail_s": until,
        "penalty": r["completion_s"] / base["completion_s"],
        "ideal_penalty": ideal_total / fluid.completion_s,
        "reroute_ms": max((1e3 * x.get("installed_s", 0.0) for x in reroutes), default=None),
        "reroute_switches": max((x.get("switches_changed", 0) for x in reroutes), default=None),
        "reroutes_seen": len(reroutes), "probe_gap_ms": None if gap is None else 1e3 * gap,
        "probe_ports_hit": ports,
        "lost_packets": r["summary"]["lost_packets"],
        "delivered": r["summary"]["bytes_received"] / max(1, r["summary"]["bytes_sent"]),
    }


def _analyse(run: Run, plan: WiringPlan, flows: list[FlowSpec], fluid: Any,
             failures: dict[str, list[Link]], results: dict[str, dict[str, Any]],
             lane: tuple[str, str]) -> None:
    """Per mode and case: the draws' metrics, their distributions, the model's beside them."""
    p = run.params
    modes = list(p["modes"])
    nd = int(p["model_draws"])
    metrics: dict[str, dict[str, Any]] = {}  # "mode/draw/case" -> one run's metrics
    agg: dict[str, dict[str, Any]] = {}  # "mode/case" -> distributions and ideals
    margin = {v["label"]: v["margin"] for v in run.config.get("fidelity", [])}
    for mode in modes:
        n = draws_for(mode, int(p["draws"]))
        for k in range(n):
            base = results[f"{mode}/{k}/baseline"]
            metrics[f"{mode}/{k}/baseline"] = {
                "completion_s": base["completion_s"], "penalty": 1.0,
                "pace": fluid.completion_s / base["completion_s"],
                "lost_packets": base["summary"]["lost_packets"],
                "start_skew_s": base["summary"]["start_skew_s"]}
            for case in ("lane", "spine"):
                m = _failure_metrics(results[f"{mode}/{k}/{case}"], base, plan, flows, fluid,
                                     failures[case], float(p["recover_pct"]))
                metrics[f"{mode}/{k}/{case}"] = {
                    **m, "completion_s": results[f"{mode}/{k}/{case}"]["completion_s"],
                    "start_skew_s": results[f"{mode}/{k}/{case}"]["summary"]["start_skew_s"]}
        base_model = [m.completion_s for m in _model_baselines(plan, flows, mode, nd)]
        runs = [metrics[f"{mode}/{k}/baseline"] for k in range(n)]
        agg[f"{mode}/baseline"] = {
            "mode": mode, "case": "baseline", "draws": n,
            "completion_s": distribution([r["completion_s"] for r in runs]),
            "model_s": distribution(base_model),
            "pace": distribution([r["pace"] for r in runs]),
            "lost": sum(r["lost_packets"] for r in runs),
            "start_skew_s": max(r["start_skew_s"] for r in runs), "margin": margin.get(mode)}
        for case in ("lane", "spine"):
            runs = [metrics[f"{mode}/{k}/{case}"] for k in range(n)]
            frac = distribution([r["cut_s"] / metrics[f"{mode}/{k}/baseline"]["completion_s"]
                                 for k, r in enumerate(runs)])["median"]
            model = model_penalties(plan, flows, mode, failures[case], frac, nd)
            agg[f"{mode}/{case}"] = {
                "mode": mode, "case": case, "draws": n, "cut_fraction": frac,
                **{key: distribution([r[key] for r in runs]) for key in (
                    "completion_s", "penalty", "ideal_penalty", "recovery_s", "cut_s",
                    "pre_mbps", "post_ideal_mbps", "dip_mbps", "reroute_ms", "probe_gap_ms",
                    "cut_action_ms")},
                "model_penalty": distribution([x["penalty"] for x in model]),
                "model_s": distribution([x["failed_s"] for x in model]),
                "recovered": sum(1 for r in runs if r["recovery_s"] is not None),
                "lost": sum(r["lost_packets"] for r in runs),
                "start_skew_s": max(r["start_skew_s"] for r in runs),
                "margin": margin.get(mode)}
    for key, a in agg.items():
        _row(run, a)
        _summary_entry(run, key, a)
    run.save_json("metrics.json", {"runs": metrics, "cases": agg})
    run.summary.update({"fluid_baseline_s": fluid.completion_s, "scale": float(p["scale"]),
                        "lane": list(lane)})
    _plot_timeline(run, results, metrics, modes)
    _plot_completion(run, agg, modes)
    _write_report(run, plan, flows, fluid, failures, agg, lane)


def _model_baselines(plan: WiringPlan, flows: Sequence[FlowSpec], mode: str, draws: int
                     ) -> list[Any]:
    wire = wire_flows(list(flows))
    return [model_flows(plan, wire, mode, seed=s, unit="mbps")
            for s in range(max(1, draws) if mode in RANDOM_POLICIES else 1)]


def _ratio(a: dict[str, Any], measured: str, ideal: str) -> float | None:
    m, i = a[measured]["median"], a[ideal]["median"]
    return m / i if m is not None and i else None


def _row(run: Run, a: dict[str, Any]) -> None:
    """One summary.csv row per mode and case: medians and quartiles over the draws."""
    c = a["completion_s"]
    row: dict[str, Any] = {"mode": a["mode"], "case": a["case"], "draws": a["draws"],
                           "completion_s": _r(c["median"]), "p25_s": _r(c["p25"]),
                           "p75_s": _r(c["p75"]), "model_s": _r(a["model_s"]["median"])}
    if a["case"] == "baseline":
        row.update(ratio=_r(_ratio(a, "completion_s", "model_s")), penalty=1.0,
                   ideal_penalty=1.0, pace=_r(a["pace"]["median"]), lost_packets=a["lost"])
    else:
        pen = a["penalty"]
        row.update(ratio=_r(_ratio(a, "penalty", "model_penalty")),
                   penalty=_r(pen["median"]), penalty_p25=_r(pen["p25"]),
                   penalty_p75=_r(pen["p75"]), ideal_penalty=_r(a["model_penalty"]["median"]),
                   ideal_penalty_p25=_r(a["model_penalty"]["p25"]),
                   ideal_penalty_p75=_r(a["model_penalty"]["p75"]),
                   fluid_penalty=_r(a["ideal_penalty"]["median"]),
                   cut_s=_r(a["cut_s"]["median"], 2), cut_ms=_r(a["cut_action_ms"]["median"], 1),
                   recovery_s=_r(a["recovery_s"]["median"]), recovered=a["recovered"],
                   pre_mbps=_r(a["pre_mbps"]["median"], 1),
                   post_ideal_mbps=_r(a["post_ideal_mbps"]["median"], 1),
                   dip_mbps=_r(a["dip_mbps"]["median"], 1),
                   reroute_ms=_r(a["reroute_ms"]["median"], 1),
                   probe_gap_ms=_r(a["probe_gap_ms"]["median"], 1), lost_packets=a["lost"])
    run.row(**row)


def _summary_entry(run: Run, key: str, a: dict[str, Any]) -> None:
    """summary.json: the penalty (failures) or completion (baseline) as measured / ideal."""
    what, ideal = (("completion_s", "model_s") if a["case"] == "baseline"
                   else ("penalty", "model_penalty"))
    m, i = a[what], a[ideal]
    extra = {k: v for k, v in a.items() if k not in (what, ideal, "draws")}
    run.summary[key] = compare(
        m["median"], i["median"],
        quantity="completion (emulated s)" if a["case"] == "baseline" else
        "completion with the failure / baseline completion, same mode",
        policy=a["mode"], draws=a["draws"], median=m["median"], p25=m["p25"], p75=m["p75"],
        values=m["values"], model=i, **extra)
    if a["case"] != "baseline":  # recovery: the fluid model's is 0 s (no ratio)
        r = a["recovery_s"]
        run.summary[f"{key}/recovery_s"] = compare(
            r["median"], 0.0, quantity="recovery time (emulated s)", draws=r["draws"],
            median=r["median"], p25=r["p25"], p75=r["p75"], values=r["values"],
            recovered=a["recovered"], of=a["draws"])


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or v != v else round(v, nd)


def _plot_timeline(run: Run, results: dict[str, dict[str, Any]],
                   metrics: dict[str, dict[str, Any]], modes: list[str]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 2.6 * len(modes)))
    axes = fig.subplots(len(modes), 1, squeeze=False)[:, 0]
    colours = {"baseline": "tab:gray", "lane": "tab:blue", "spine": "tab:red"}
    for ax, mode in zip(axes, modes, strict=True):
        n = draws_for(mode, int(run.params["draws"]))
        for k in range(n):  # every draw; the first solid, the others faint
            for case in CASES:
                r = results[f"{mode}/{k}/{case}"]
                t, mbps = rates(r["samples"], r["start_ns"])
                sel = (t > -0.5) & (t < r["completion_s"] + 0.5)  # not the receivers' wait
                ax.plot(t[sel], mbps[sel], color=colours[case], lw=1.2 if k == 0 else 0.7,
                        alpha=1.0 if k == 0 else 0.4, label=case if k == 0 else None)
                if case != "baseline" and k == 0:
                    m = metrics[f"{mode}/{k}/{case}"]
                    ax.axvline(m["cut_s"], color=colours[case], ls="--", lw=1)
                    ax.hlines(m["post_ideal_mbps"], m["cut_s"], r["completion_s"],
                              color=colours[case], ls=":", lw=1.2)
        ax.set_title(f"{mode}: delivered to the GPUs, {n} draw(s) (solid: the first; dashed: "
                     "failure; dotted: fluid ideal mean rate after it)", fontsize=8)
        ax.set_ylabel("Mb/s (emulated)")
        ax.legend(fontsize=8, loc="lower left")
    axes[-1].set_xlabel("seconds after the common start (emulated)")
    fig.tight_layout()
    run.save_figure(fig, "timeline.png")


def _plot_completion(run: Run, agg: dict[str, dict[str, Any]], modes: list[str]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 3.8))
    ax = fig.add_subplot()
    keys = [f"{m}/{c}" for m in modes for c in ("lane", "spine")]
    colours = {"lane": "tab:blue", "spine": "tab:red"}
    plot_draws(ax, [k.replace("/", "\n") for k in keys],
               [agg[k]["penalty"]["values"] for k in keys],
               [agg[k]["model_penalty"]["values"] for k in keys],
               colours=[colours[k.split("/")[1]] for k in keys])
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    ax.set_ylabel("completion / baseline (same mode)")
    ax.set_title(f"completion penalty: emulated draws (dots), flow model with the mode's "
                 f"policy over {run.params['model_draws']} hash draws (box; tick: one answer)",
                 fontsize=8)
    run.save_figure(fig, "completion.png")


def _bench_failover() -> str:
    """The lab's own failover benchmark, quoted from results/bench/controller.json if present."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "results", "bench", "controller.json")
    try:
        with open(path) as f:
            fo = json.load(f)["failover"]
        return (f"the lab's failover benchmark (results/bench/controller.json, idle fabric): "
                f"{1e3 * fo['leaf-uplink']['outage_s']['median']:.0f} ms (leaf uplink) and "
                f"{1e3 * fo['spine-downlink']['outage_s']['median']:.0f} ms (spine side) median "
                "data-plane outage")
    except (OSError, KeyError, ValueError, TypeError):
        return "the lab's failover benchmark (make bench) measured ~20 ms median outages"


def _write_report(run: Run, plan: WiringPlan, flows: list[FlowSpec], fluid: Any,
                  failures: dict[str, list[Link]], agg: dict[str, dict[str, Any]],
                  lane: tuple[str, str]) -> None:
    p = run.params
    modes = list(p["modes"])
    real = real_time_factor(plan)
    nic = min(plan.host_link_mbps().values())
    finder = PathFinder(plan)
    uplinks = len(finder.uplinks(lane[0]))
    spines = sum(1 for s in plan.switches if s.tier == "spine")
    rep = run.report
    draws = ", ".join(f"{m} {draws_for(m, int(p['draws']))}" for m in modes)
    rep.section("Setup", (
        f"astral3, {p['servers']} servers x {p['gpus_per_server']} GPUs ({len(plan.hosts)} GPUs, "
        f"{len(plan.switches)} switches, {spines} spines; each leaf has {uplinks} uplink lanes). "
        f"Scale {p['scale']:g}: a 400G NIC is {nic:g} Mb/s, a 200G lane "
        f"{nic / 2:g} Mb/s; time at real rates = emulated time x {real:g}. Traffic: "
        f"{len(flows)} flows, an equal-split All-to-All through the NICs "
        f"({sum(f.bytes for f in flows) / 1e6:.1f} MB; fluid model {fluid.completion_s:.2f} s "
        "on the frame bytes the shapers count). "
        f"Failures at {p['cut_fraction']:g} x the mode's baseline completion: the lane "
        f"{lane[0]}-{lane[1]} (1 of {uplinks} uplink lanes of {lane[0]}), then the whole "
        f"{lane[1]} (1 of {spines} spines: {len(failures['spine'])} lanes), both restored only "
        "after the run (all ends of a failure in one `ip -batch`; cut_ms in the table). "
        f"**Draws** (baseline, lane and spine runs each): {draws}; draw k shifts every QP by "
        f"k x {DRAW_QP_STRIDE} (new UDP source ports: another ECMP hash draw, and another "
        "starting placement for adaptive); planned placement is deterministic. The flow model "
        f"runs with each mode's policy over {p['model_draws']} hash draws (one for planned). "
        f"Recovery = back to {100 - float(p['recover_pct']):g}% of min(post-"
        "failure fluid ideal, pre-failure level) for 3 samples (module docstring). Replayed "
        "packets lost at the cut are not retransmitted (the replay agents, like RDMA without "
        "go-back-N, do not), so completion is the last byte that arrived."))

    def dt(d: dict[str, Any], unit: str = "", nd: int = 2) -> str:
        if not d.get("draws"):
            return "-"
        if d["draws"] == 1:
            return f"{d['median']:.{nd}f}{unit}"
        return fmt_distribution(d, unit, nd)

    table = []
    for a in agg.values():
        base = a["case"] == "baseline"
        table.append({
            "mode": a["mode"], "case": a["case"], "draws": a["draws"],
            "completion (s)": dt(a["completion_s"]), "model (s)": dt(a["model_s"]),
            "penalty": "1" if base else dt(a["penalty"]),
            "ideal penalty (model)": "1" if base else dt(a["model_penalty"]),
            "ratio": _ratio(a, "completion_s", "model_s") if base
            else _ratio(a, "penalty", "model_penalty"),
            "fluid penalty": "-" if base else dt(a["ideal_penalty"]),
            "recovery (s)": "-" if base else f"{dt(a['recovery_s'])} ({a['recovered']}/"
                                             f"{a['draws']} recovered)",
            "reroute (ms)": "-" if base else dt(a["reroute_ms"], "", 1),
            "probe gap (ms)": "-" if base else dt(a["probe_gap_ms"], "", 0),
            "lost": a["lost"]})
    rep.table(table)
    rep.text("*penalty*: completion with the failure / the same mode's baseline completion "
             "(per draw), median [p25-p75] over the draws; *ideal penalty*: the flow model's "
             "penalty for the same flows, failure instant and links under the mode's own "
             "policy (ecmp: its hash over many draws; planned: re-planned on the failed "
             "fabric; adaptive: its final paths), median [p25-p75]; *ratio* = measured median "
             "/ ideal median (baseline rows: completion / model completion); *fluid "
             "penalty*: the same with ECMP split evenly (the perfect-rebalancing reference). "
             "Per-run numbers: metrics.json; summary.csv has the medians and quartiles.")
    rep.image("timeline.png", "Aggregate delivered throughput per mode, every draw (dashed: "
              "the failure; dotted: the fluid ideal mean rate for the rest of the job)")
    rep.image("completion.png", "Completion penalty per mode and failure: emulated draws "
              "beside the flow model's draws under the same policy")
    rep.section("Findings")

    def per(case: str, key: str, unit: str = "", nd: int = 2) -> str:
        return ", ".join(f"{m} {dt(agg[f'{m}/{case}'][key], unit, nd)}" for m in modes)

    paces = ", ".join(f"{m} {_ratio(agg[f'{m}/baseline'], 'completion_s', 'model_s'):.2f}x"
                      for m in modes)
    gaps = []
    for key, a in agg.items():
        ratio = _ratio(a, "completion_s", "model_s") if a["case"] == "baseline" else \
            _ratio(a, "penalty", "model_penalty")
        if in_band(ratio):
            continue
        what = "completion" if a["case"] == "baseline" else "penalty"
        m = a["completion_s" if a["case"] == "baseline" else "penalty"]
        i = a["model_s" if a["case"] == "baseline" else "model_penalty"]
        luck = ""
        if i["draws"] > 1 and m["draws"] > 1:
            chance = median_chance(i["values"], m["median"], m["draws"])
            luck = (f" The model's own draws give a median of {m['draws']} this far from "
                    f"theirs in {100 * chance:.0f}% of samples"
                    + (", so the draws' luck is a candidate." if chance >= 0.05 else
                       ": not luck."))
        gaps.append(f"**{key}: {what} ratio {ratio:.2f}, outside 0.7-1.3.** Fidelity margin "
                    f"{a['margin'] or float('nan'):.2f}x, start skew up to "
                    f"{a['start_skew_s']:.3f} s, {a['lost']} packets lost." + luck)
    rep.finding(
        "Completion-time penalty",
        measured=f"lane cut: {per('lane', 'penalty')}; spine down: {per('spine', 'penalty')}",
        ideal=(f"flow model, each mode's policy: lane {per('lane', 'model_penalty')}; spine "
               f"{per('spine', 'model_penalty')}; fluid (perfect rebalancing): lane "
               f"{per('lane', 'ideal_penalty')}, spine {per('spine', 'ideal_penalty')} "
               f"(capacity lost: 1/{uplinks} of one leaf's uplinks, or 1/{spines} of every "
               "leaf's)"),
        published=("no published completion penalty for a lane or spine loss in Astral 3.0 "
                   "was found in the stored sources"),
        why=("The fluid penalty is what losing the capacity costs if traffic rebalanced "
             "perfectly and at once: a leaf's surviving lanes carry its cross-leaf bytes. The "
             "flat All-to-All loads a leaf's uplinks at (G-2)/(G-1) of its NICs' rate (one "
             "peer per GPU shares the leaf), so with one lane of "
             f"{uplinks} gone the leaf's uplinks bind and its flows finish late: the cost "
             "lands in the job's tail, on the GPUs under the failed lane (see the timeline). "
             "The model under the mode's own policy adds what that policy does with the "
             "survivors: hash ECMP re-spreads the dead lane's flows unevenly, so its penalty "
             "is a spread over hash draws (and its baseline is already above the fluid one; a "
             "hash over fewer ports re-spreads every flow, so a draw can even collide less "
             "after the cut than before it, a penalty below 1); "
             "planned mode re-places every flow on the failed fabric. Two things move the "
             "measurement away from the model. (1) The baselines took "
             f"{paces} the model's time under the same policy (medians); a mode slower "
             "than its model (the Python senders pacing under the NIC rate, start skew) had "
             "that much slack before the failure, so a lost lane binds less there than in "
             "the model: a penalty below the ideal is that slack, not a faster fabric. (2) "
             "The controller's planned mode re-places only the flows that crossed the dead "
             "link (onto the least loaded lanes), not all of them, and adaptive mode moves "
             "flows one poll (1 s) at a time. Packets queued on the failed ports are "
             "lost and not retransmitted (lost_packets), which shortens, not lengthens, the "
             "measured time. On a shared 2-core machine expect run-to-run spread of a few "
             "percent on top of the hash's." + (" " + " ".join(gaps) if gaps else "")))
    rep.finding(
        "Recovery time",
        measured=(f"lane: {per('lane', 'recovery_s', ' s')}; spine: "
                  f"{per('spine', 'recovery_s', ' s')} (emulated; over the draws that got back "
                  "before the tail: "
                  + ", ".join(f"{m} {agg[f'{m}/{c}']['recovered']}/{agg[f'{m}/{c}']['draws']} "
                              f"{c}" for m in modes for c in ("lane", "spine")) + ")"),
        ideal="0 s: the fluid model moves traffic at the instant of the failure",
        published=PUBLISHED_FAILOVER,
        why=("Recovery is a throughput measure at the sampling resolution. The data plane "
             "re-routes in tens of ms (next finding), and when one lane fails most flows never "
             "used it, so the aggregate is back within the target almost at once; what does "
             "not come back is the capacity, and the flows behind the failed lane finish late "
             "(the penalty). A whole spine takes a quarter of every leaf's uplinks: the rate "
             "drops to about what the surviving lanes carry and may stay under the target, "
             "because the target is a fluid mean that assumes the leaf-local flows pick up "
             "the slack (max-min, as congestion control would), while the replay's senders "
             "keep their round-robin pace and let packets queue in the lossless fabric. At "
             f"real rates every emulated second is {real * 1e3:g} ms, while the control "
             "plane's reaction time is not scaled: at full speed the same tens of ms of "
             f"outage would fall on a job {1 / real:g}x shorter, a relatively larger hit."))
    rep.finding(
        "Control plane and data-plane gap",
        measured=(f"controller reroute (port status to last barrier): lane "
                  f"{per('lane', 'reroute_ms', ' ms', 1)}, spine "
                  f"{per('spine', 'reroute_ms', ' ms', 1)}; probe silence at the cut: lane "
                  f"{per('lane', 'probe_gap_ms', ' ms', 0)}, spine "
                  f"{per('spine', 'probe_gap_ms', ' ms', 0)}"),
        ideal="0 ms (a hop that dies is skipped at once)",
        published=f"{_bench_failover()}; {PUBLISHED_FAILOVER}",
        why=("The sender's leaf skips a dead uplink in its own select/fast-failover group "
             "with no controller; other leaves keep sending toward the dead spine port "
             "until the controller's reroute reaches them. Under load the probe's silence "
             "also includes queueing behind the All-to-All on the surviving, now busier "
             f"lanes (each port queues up to {LOSSLESS_QUEUE_S:g} s of its rate: the lab's "
             "lossless emulation), "
             "so it is longer than the idle-fabric benchmark, most of all under hash ECMP. "
             "The probe (8 UDP ports, 40 packets/s each) follows the ECMP routes in every "
             "mode, and testbed.probe keeps only each port's longest silence: '-' means no "
             "port's longest silence began at the cut (none crossed the failed link, or a "
             "longer queueing gap happened elsewhere)."))


__all__ = ["Sampler", "all_to_all", "down_hops", "link_failure", "pick_lane", "probe_gap",
           "rates", "recovery_time", "remaining_after", "smooth", "spine_links",
           "time_of_fraction"]
