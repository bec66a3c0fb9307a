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
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controllers.paths import Hop, PathFinder
from scenarios.base import Param, Run, as_dict, scenario
from scenarios.common import _tx_bytes, real_time_factor
from testbed.flowmodel import model_flows
from testbed.lab import LOSSLESS_QUEUE_S
from testbed.plan import Link, WiringPlan
from testbed.probe import Stream
from testbed.topologies import build
from traffic.kernels import FlowSpec, flat_all_to_all
from traffic.replay import replay
from traffic.workload import preset, simulate_step, uniform

MODES = ("ecmp", "planned", "adaptive")
CASES = ("baseline", "lane", "spine")
MESSAGE_BYTES = 64 * 1024
SMOOTH = 3  # samples averaged, and samples held, for the recovery rule
TAIL_FRACTION = 0.9  # recovery is searched until this share of the bytes has arrived
PROBE_PORT = 4792  # the replay's receivers own 4791
PROBE_SPORTS = range(50100, 50108)
PROBE_PPS = 40.0  # per source port: 8 x 40 x ~110 B frames = 0.28 Mb/s in all
PROBE_BYTES = 64
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

    A flow finished by ``t`` has none left; otherwise it has sent at least its first rate
    times ``t`` (max-min rates only rise as other flows leave, so this is exact when no flow
    finishes before ``t``, as in an equal All-to-All, and otherwise a slight overestimate of
    what is left). Flows with nothing left are dropped.
    """
    if t < 0:
        raise ValueError("t must be >= 0")
    out = []
    for f, fin, rate in zip(flows, finish_s, start_rate_bps, strict=True):
        if fin <= t:
            continue
        left = f.bytes - int(rate * t / 8)
        if left > 0:
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
    Param("duration_s", 15.0, "emulated length of the failure-free All-to-All", quick=6.0),
    Param("modes", list(MODES), "load-balancing modes to compare", quick=["ecmp", "planned"],
          choices=MODES),
    Param("cut_fraction", 0.33, "when the failure lands, as a fraction of the baseline"),
    Param("recover_pct", 10.0,
          "recovered = rate back within this many percent of the post-failure target"),
    Param("sample_ms", 100.0, "throughput sampling interval (ms)"),
    Param("qps_per_peer", 2, "QPs (UDP source ports) per GPU pair"),
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
    fluid = model_flows(plan, flows, "ecmp-fluid", unit="mbps")
    run.save_json("flows.json", [as_dict(f) for f in flows])
    run.stage(f"{len(flows)} flows; failing {leaf}-{spine} and then {spine}")

    results: dict[str, dict[str, Any]] = {}
    modes = list(p["modes"])
    with run.lab(plan, label="astral3", lb=modes[0]) as lab:
        client = lab.client()
        for mode in modes:
            if client.lb()["mode"] != mode:
                client.set_lb(mode)
            if mode == "ecmp":
                client.clear_traffic()
            client.wait_converged(timeout=60)
            run.guard(lab, flows, label=mode)
            base = _one_run(run, lab, flows, mode, "baseline", [], None, (probe_src, probe_dst))
            results[f"{mode}/baseline"] = base
            delay = float(p["cut_fraction"]) * base["completion_s"]
            for case in ("lane", "spine"):
                results[f"{mode}/{case}"] = _one_run(
                    run, lab, flows, mode, case, failures[case], delay, (probe_src, probe_dst))
    _analyse(run, plan, flows, fluid, failures, results, (leaf, spine))


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
             links: Sequence[Link], delay_s: float | None, probe: tuple[str, str]
             ) -> dict[str, Any]:
    """One replay with the sampler (and, for a failure, the cut and a probe stream)."""
    p = run.params
    plan = lab.plan
    nic = plan.host_link_mbps()
    delivered = [ln.b_intf for ln in plan.links if ln.kind == "nic"]
    watch = sorted({ln.a_intf for ln in links} | {ln.b_intf for ln in links})
    senders = len({f.src for f in flows})
    lead = 1.0 + 0.25 * senders  # replay's own default, made explicit for the probe's length
    sampler = Sampler(delivered=delivered, watch=watch, interval_s=float(p["sample_ms"]) / 1e3,
                      start_mbps=0.3 * sum(nic[f] for f in {f.src for f in flows}),
                      delay_s=delay_s,
                      action=(lambda: _set_links(lab, links, up=False)) if links else None)
    stream = None
    if links:
        stream = Stream(lab, probe[0], probe[1], sports=PROBE_SPORTS, pps=PROBE_PPS,
                        duration=lead + 3.0 + (delay_s or 0.0) + 2.5, port=PROBE_PORT,
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
        res = replay(lab, flows, lead_s=lead, label=f"{mode} {case}")
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
    out = {"mode": mode, "case": case, "completion_s": res.job_completion_s,
           "summary": res.summary(), "start_ns": res.start_ns, "samples": sampler.samples,
           "watched": sampler.watched, "action_ns": sampler.action_ns,
           "links": [f"{ln.a}:{ln.a_port}-{ln.b}:{ln.b_port}" for ln in links],
           "health": health, "probe": probe_result}
    run.save_json(f"run-{mode}-{case}.json", out)
    run.stage(f"{mode} {case}: {res.job_completion_s:.2f} s, {res.lost_packets} packets lost")
    return out


def _failure_metrics(r: dict[str, Any], base: dict[str, Any], plan: WiringPlan,
                     flows: list[FlowSpec], fluid: Any, links: Sequence[Link],
                     recover_pct: float) -> dict[str, Any]:
    """Recovery, penalty and their ideals for one failure run (see the module docstring)."""
    t, mbps = rates(r["samples"], r["start_ns"])
    cut_s = (r["action_ns"][0] - r["start_ns"]) / 1e9
    frac = cut_s / base["completion_s"]
    t_model = frac * fluid.completion_s
    left = remaining_after(flows, fluid.flow_finish_s, fluid.flow_start_rate_bps, t_model)
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
    p = run.params
    modes = list(p["modes"])
    metrics: dict[str, dict[str, Any]] = {}
    for mode in modes:
        base = results[f"{mode}/baseline"]
        model_mode = model_flows(plan, flows, mode, unit="mbps")  # same policy
        pace = fluid.completion_s / base["completion_s"]
        run.row(mode=mode, case="baseline", completion_s=round(base["completion_s"], 3),
                model_s=round(model_mode.completion_s, 3), penalty=1.0, ideal_penalty=1.0,
                pace=round(pace, 3), lost_packets=base["summary"]["lost_packets"])
        metrics[f"{mode}/baseline"] = {"model_s": model_mode.completion_s, "pace": pace}
        for case in ("lane", "spine"):
            m = _failure_metrics(results[f"{mode}/{case}"], base, plan, flows, fluid,
                                 failures[case], float(p["recover_pct"]))
            metrics[f"{mode}/{case}"] = m
            run.row(mode=mode, case=case,
                    completion_s=round(results[f"{mode}/{case}"]["completion_s"], 3),
                    model_s=round(fluid.completion_s * m["ideal_penalty"], 3),
                    penalty=round(m["penalty"], 3), ideal_penalty=round(m["ideal_penalty"], 3),
                    cut_s=round(m["cut_s"], 2), cut_ms=round(m["cut_action_ms"], 1),
                    recovery_s=_r(m["recovery_s"]),
                    pre_mbps=_r(m["pre_mbps"], 1), post_ideal_mbps=_r(m["post_ideal_mbps"], 1),
                    dip_mbps=_r(m["dip_mbps"], 1), reroute_ms=_r(m["reroute_ms"], 1),
                    probe_gap_ms=_r(m["probe_gap_ms"], 1), lost_packets=m["lost_packets"])
    run.save_json("metrics.json", metrics)
    run.summary.update({"metrics": metrics, "fluid_baseline_s": fluid.completion_s,
                        "scale": float(p["scale"]), "lane": list(lane)})
    _plot_timeline(run, results, metrics, modes)
    _plot_completion(run, results, metrics, modes)
    _write_report(run, plan, flows, fluid, failures, metrics, lane, results)


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or v != v else round(v, nd)


def _plot_timeline(run: Run, results: dict[str, dict[str, Any]],
                   metrics: dict[str, dict[str, Any]], modes: list[str]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 2.6 * len(modes)))
    axes = fig.subplots(len(modes), 1, squeeze=False)[:, 0]
    colours = {"baseline": "tab:gray", "lane": "tab:blue", "spine": "tab:red"}
    for ax, mode in zip(axes, modes, strict=True):
        for case in CASES:
            r = results[f"{mode}/{case}"]
            t, mbps = rates(r["samples"], r["start_ns"])
            sel = (t > -0.5) & (t < r["completion_s"] + 0.5)  # not the receivers' idle wait
            ax.plot(t[sel], mbps[sel], color=colours[case], lw=1.2, label=case)
            if case != "baseline":
                m = metrics[f"{mode}/{case}"]
                ax.axvline(m["cut_s"], color=colours[case], ls="--", lw=1)
                ax.hlines(m["post_ideal_mbps"], m["cut_s"], r["completion_s"],
                          color=colours[case], ls=":", lw=1.2)
        ax.set_title(f"{mode}: delivered to the GPUs (dashed: failure; dotted: fluid ideal "
                     "mean rate after it)", fontsize=9)
        ax.set_ylabel("Mb/s (emulated)")
        ax.legend(fontsize=8, loc="lower left")
    axes[-1].set_xlabel("seconds after the common start (emulated)")
    fig.tight_layout()
    run.save_figure(fig, "timeline.png")


def _plot_completion(run: Run, results: dict[str, dict[str, Any]],
                     metrics: dict[str, dict[str, Any]], modes: list[str]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 3.6))
    ax = fig.add_subplot()
    x = np.arange(len(modes))
    w = 0.27
    for k, case in enumerate(CASES):
        vals = [results[f"{m}/{case}"]["completion_s"] for m in modes]
        ax.bar(x + (k - 1) * w, vals, w, label=case)
        base = [results[f"{m}/baseline"]["completion_s"] for m in modes]
        ideal = [b * (metrics[f"{m}/{case}"].get("ideal_penalty", 1.0)) for m, b in
                 zip(modes, base, strict=True)]
        ax.plot(x + (k - 1) * w, ideal, "k_", markersize=14,
                label="fluid ideal (x baseline)" if k == 0 else None)
    ax.set_xticks(x, modes)
    ax.set_ylabel("All-to-All completion (emulated s)")
    ax.legend(fontsize=8)
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


def _fmt(v: float | None, unit: str = "", nd: int = 2) -> str:
    return "-" if v is None or v != v else f"{v:.{nd}f}{unit}"


def _write_report(run: Run, plan: WiringPlan, flows: list[FlowSpec], fluid: Any,
                  failures: dict[str, list[Link]], metrics: dict[str, dict[str, Any]],
                  lane: tuple[str, str], results: dict[str, dict[str, Any]]) -> None:
    p = run.params
    modes = list(p["modes"])
    real = real_time_factor(plan)
    nic = min(plan.host_link_mbps().values())
    finder = PathFinder(plan)
    uplinks = len(finder.uplinks(lane[0]))
    spines = sum(1 for s in plan.switches if s.tier == "spine")
    rep = run.report
    rep.section("Setup", (
        f"astral3, {p['servers']} servers x {p['gpus_per_server']} GPUs ({len(plan.hosts)} GPUs, "
        f"{len(plan.switches)} switches, {spines} spines; each leaf has {uplinks} uplink lanes). "
        f"Scale {p['scale']:g}: a 400G NIC is {nic:g} Mb/s, a 200G lane "
        f"{nic / 2:g} Mb/s; time at real rates = emulated time x {real:g}. Traffic: "
        f"{len(flows)} flows, an equal-split All-to-All through the NICs "
        f"({sum(f.bytes for f in flows) / 1e6:.1f} MB; fluid model {fluid.completion_s:.2f} s). "
        f"Failures at {p['cut_fraction']:g} x the mode's baseline completion: the lane "
        f"{lane[0]}-{lane[1]} (1 of {uplinks} uplink lanes of {lane[0]}), then the whole "
        f"{lane[1]} (1 of {spines} spines: {len(failures['spine'])} lanes), both restored only "
        "after the run (all ends of a failure in one `ip -batch`; cut_ms in the table). "
        f"Recovery = back to {100 - float(p['recover_pct']):g}% of min(post-"
        "failure fluid ideal, pre-failure level) for 3 samples (module docstring). Replayed "
        "packets lost at the cut are not retransmitted (the replay agents, like RDMA without "
        "go-back-N, do not), so completion is the last byte that arrived."))
    rep.table(run.rows)
    rep.image("timeline.png", "Aggregate delivered throughput per mode (dashed: the failure; "
              "dotted: the fluid ideal mean rate for the rest of the job)")
    rep.image("completion.png", "Completion per mode: baseline, lane cut, spine down (bars), "
              "fluid ideal penalty x the baseline (marks)")
    rep.section("Findings")

    def per(case: str, key: str, unit: str = "", nd: int = 2) -> str:
        return ", ".join(f"{m} {_fmt(metrics[f'{m}/{case}'][key], unit, nd)}" for m in modes)

    paces = ", ".join(f"{m} {100 * metrics[f'{m}/baseline']['pace']:.0f}%" for m in modes)
    rep.finding(
        "Completion-time penalty",
        measured=f"lane cut: {per('lane', 'penalty')}; spine down: {per('spine', 'penalty')}",
        ideal=(f"fluid model: lane {per('lane', 'ideal_penalty')}; spine "
               f"{per('spine', 'ideal_penalty')} (capacity lost: 1/{uplinks} of one leaf's "
               f"uplinks, or 1/{spines} of every leaf's)"),
        published=("no published completion penalty for a lane or spine loss in Astral 3.0 "
                   "was found in the stored sources"),
        why=("The ideal penalty is what losing the capacity costs if traffic rebalanced "
             "perfectly and at once: a leaf's surviving lanes carry its cross-leaf bytes. The "
             "flat All-to-All loads a leaf's uplinks at (G-2)/(G-1) of its NICs' rate (one "
             "peer per GPU shares the leaf), so with one lane of "
             f"{uplinks} gone the leaf's uplinks bind and its flows finish late: the cost "
             "lands in the job's tail, on the GPUs under the failed lane (see the timeline). "
             "Two things move the measurement away from the ideal. (1) The Python senders "
             f"ran at {paces} of the NIC rate in the baselines (fluid time / measured time), "
             "so the fabric had that much slack before the failure and a lost lane binds "
             "less than in the model, which assumes full-rate NICs: a penalty below the "
             "ideal is that slack, not a faster fabric. (2) Hash ECMP re-spreads the dead "
             "lane's flows over the survivors unevenly (OVS dp_hash), so some lanes are "
             "oversubscribed and their flows form a long tail; planned mode re-places the "
             "flows that crossed the dead link onto the least loaded lanes, and adaptive mode "
             "moves flows one poll (1 s) at a time. Packets queued on the failed ports are "
             "lost and not retransmitted (lost_packets), which shortens, not lengthens, the "
             "measured time. Each number is one run: expect run-to-run spread of a few "
             "percent on a shared 2-core machine."))
    rep.finding(
        "Recovery time",
        measured=(f"lane: {per('lane', 'recovery_s', ' s')}; spine: "
                  f"{per('spine', 'recovery_s', ' s')} (emulated; '-' = not back before the "
                  "tail)"),
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
