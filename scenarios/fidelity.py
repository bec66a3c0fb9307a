"""The fidelity guard: is this run network-bound (honest) or CPU-bound (meaningless)?

Every emulated switch is software: one ``ovs-vswitchd`` forwards the whole fabric, and the
senders and receivers are processes on the same cores. If a scenario offers more packets per
second than this machine can switch, completion times measure the CPU, not the fabric. So
before traffic starts, a scenario compares what it will offer with what this machine was
measured to carry, and refuses (or warns) when the margin is thin.

**Capacity** (``calibrate``) is measured once per machine and cached: a small ``astral3``
fabric at a scale where no link binds (NIC 400 Mb/s), eight senders each blasting one
cross-rail flow (leaf - spine - leaf, 3 switch hops) at once; the receivers' delivered rate,
times the hops each packet took, is the machine's capacity in *switch-hop packets per
second* (and in Mb/s at the same frame size). It includes the senders' and receivers' own
CPU, because a scenario's traffic pays for those too.

**Offered load** (``offered``) of a flow list is each flow's rate at the start of the run
under fluid max-min (``testbed.models.flowmodel``, ECMP spread evenly: the fabric's own limits
applied, so a flow behind a 20 Mb/s lane counts 20 Mb/s), times the switch hops of its path,
in packets of the replay's frame size.

**Verdict**: margin = capacity / offered. Below ``REFUSE_BELOW`` the scenario stops with an
error naming both numbers (``--force`` runs it anyway and the report says so); below
``WARN_BELOW`` it warns. The report states the margin. A machine that cannot hold even the
lowest calibration rate has no capacity to compare with: ``calibrate`` raises
``CalibrationError`` saying what it measured, and a ``--force`` run goes ahead unguarded
(``Run.lab``), its report saying so. Measured separately: a
Python sender holds ~96% of a 20 Mb/s pace and ~90% of 40 Mb/s when 8 senders share two
cores with the switch, which is why the warning starts at a margin of 2.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

from controllers.paths import PathFinder
from scenarios.common import mean_hops
from testbed.daemons import resolve_count
from testbed.datapath import choose_datapath
from testbed.models.perflow import model_flows
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.roce import (
    DEFAULT_PMTU,
    LAB_PMTU,
    OP_WRITE_MIDDLE,
    Plane,
    frame_len,
    message_wire_bytes,
    packets_for,
)
from traffic.shell.replay import DEFAULT_PLANE, replay
from traffic.shell.running import RunningLab
from vocab.plan import WiringPlan, write_json_atomic

REFUSE_BELOW = 1.0
WARN_BELOW = 2.0
CACHE_VERSION = 5
#: per-sender rates tried by ``calibrate`` (Mb/s), each for TRIAL_S seconds of traffic
RAMP_MBPS = (5.0, 10.0, 14.0, 20.0, 28.0, 40.0, 56.0, 80.0, 113.0, 160.0, 226.0, 320.0)
TRIAL_S = 1.5
#: a rate is "held" when every byte arrives within this factor of the paced time
HOLD_SLACK = 1.15
#: tries per rate before the ramp stops (a shared machine has noisy moments)
ATTEMPTS = 2
#: after the steps, the ramp bisects until the last held and first failed rates are this close
REFINE = 1.05


class CapacityError(RuntimeError):
    """The run would measure this machine's CPU instead of the emulated network."""


class CalibrationError(CapacityError):
    """Even the lowest calibration rate was not held: there is no capacity to guard with.

    ``measured`` says what was seen in one clause; ``trials`` keeps every trial (the same
    dicts the capacity cache stores).
    """

    def __init__(self, message: str, measured: str, trials: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.measured = measured
        self.trials = trials


def calibration_failed(trials: list[dict[str, Any]], senders: int) -> CalibrationError:
    """The one-line error for a ramp that held nothing: what was measured, what to do."""
    best = max(trials, key=lambda t: (t.get("delivered_fraction", 0.0),
                                      -(t.get("completion_s") or 0.0)), default={})
    seen = ""
    if best.get("timed_out"):
        seen = f"; every one of {len(trials)} tries timed out: {best['timed_out']}"
    elif best:
        seen = (f"; best of {len(trials)} tries: {100 * best.get('delivered_fraction', 0):.1f}% "
                f"of the bytes, in {best.get('completion_s', 0):.2f} s for "
                f"{best.get('ideal_s', TRIAL_S):g} s of traffic")
    measured = (f"this machine could not hold even {RAMP_MBPS[0]:g} Mb/s per sender in the "
                f"capacity calibration ({senders} cross-rail senders{seen})")
    return CalibrationError(
        f"{measured}, so the fidelity guard cannot vouch for any run here. Stop other "
        "CPU-heavy jobs and try again, or pass --force to run without the guard (the report "
        "will say so).", measured, trials)


def cache_path(pmtu: int = LAB_PMTU, daemons: int = 1) -> str:
    """One capacity per path MTU (a switch's packet rate depends on the frame size) and per
    number of switch daemons (each forwards on a core of its own)."""
    root = os.environ.get("ASTRAL_LAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "astral-lab")
    return os.path.join(root, f"capacity-pmtu{pmtu}" + (f"-d{daemons}" if daemons > 1 else "")
                        + ".json")


def machine_key(pmtu: int = LAB_PMTU, daemons: int = 1) -> dict[str, Any]:
    """What the measured capacity depends on; a change means calibrate again."""
    datapath = choose_datapath()
    try:
        ovs = subprocess.run(["ovs-vswitchd", "--version"], capture_output=True, text=True,
                             timeout=5).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        ovs = "unknown"

    return {"host": socket.gethostname(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "ovs": ovs, "datapath": datapath, "plane": DEFAULT_PLANE, "pmtu": pmtu,
            "version": CACHE_VERSION, **({"daemons": daemons} if daemons > 1 else {})}


def load_cached(pmtu: int = LAB_PMTU, daemons: int = 1) -> dict[str, Any] | None:
    try:
        with open(cache_path(pmtu, daemons)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if data.get("key") == machine_key(pmtu, daemons) else None


def calibration_plan() -> Any:
    """The calibration's fabric: astral3, 2 servers x 4 GPUs in one rail block, NIC 400
    Mb/s so no link binds."""
    return build("astral3", servers=2, gpus=4, servers_per_block=2, scale=1e-3)


def calibrate(log: Callable[[str], None] = print, *, force: bool = False,
              pmtu: int = LAB_PMTU, switch_daemons: int | str = 1) -> dict[str, Any]:
    """Measure (or read the cached) switching capacity of this machine at ``pmtu`` with
    ``switch_daemons`` daemons (``testbed.shell.switch_daemons``). Needs root.

    Call it before bringing up a scenario's own fabric: the calibration fabric uses the
    same node names, and two fabrics cannot share them.
    """
    plan = calibration_plan()
    n = resolve_count(switch_daemons, choose_datapath(), len(plan.switches))
    cached = None if force else load_cached(pmtu, n)
    if cached:
        return cached

    with Lab(plan, log=log, pmtu=pmtu, switch_daemons=n) as lab:
        log(f"calibrating this machine's switching capacity at pmtu {pmtu} with {n} switch "
            f"daemon(s) (once; cached in {cache_path(pmtu, n)}) ...")
        pairs = calibration_pairs(plan)
        best, trials = ramp(lambda rate: paced_trial(lab, plan, pairs, rate, log, pmtu=pmtu))
        if best is None:
            raise calibration_failed(trials, len(pairs))
        capacity = {
            "key": machine_key(pmtu, n), "pmtu": pmtu, "daemons": n,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "hop_pps": best["hop_pps"], "delivered_mbps": best["delivered_mbps"],
            "senders": len(pairs), "hops_per_packet": 3, "trials": trials,
            "method": f"{len(pairs)} senders, one cross-rail flow each (3 switch hops), NIC "
                      "400 Mb/s so no link binds; per-sender rate raised along "
                      f"{RAMP_MBPS} Mb/s, then bisected between the last held and the "
                      f"first failed to within {100 * (REFINE - 1):g}%, {ATTEMPTS} tries per "
                      "rate; capacity = the load "
                      f"offered at the highest rate held (all bytes delivered within "
                      f"{HOLD_SLACK:g}x the paced time after the last sender started), in "
                      "switch-hop packets per second",
        }
    os.makedirs(os.path.dirname(cache_path(pmtu, n)), exist_ok=True)
    write_json_atomic(cache_path(pmtu, n), capacity)
    log(f"capacity: {capacity['hop_pps']:,} switch-hop packets/s "
        f"({capacity['delivered_mbps']} Mb/s delivered by {len(pairs)} senders)")
    return capacity


def calibration_pairs(plan: WiringPlan) -> list[tuple[str, str]]:
    """The calibration's senders and receivers: s0gI -> s1g(I+1) and back, so every flow
    crosses leaf - spine - leaf."""
    hosts = [h.name for h in plan.hosts]
    half = len(hosts) // 2
    pairs = []
    for i in range(half):
        pairs += [(hosts[i], hosts[half + (i + 1) % half]),
                  (hosts[half + i], hosts[(i + 1) % half])]
    return pairs


def ramp(try_rate: Callable[[float], dict[str, Any]], attempts: int | None = None,
         refine: float = REFINE) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Raise the per-sender rate along RAMP_MBPS until one is not held ``attempts`` times
    (default ATTEMPTS) in a row, then bisect between the last rate held and the first not
    held until they are within ``refine`` of each other; return the highest held trial
    (None if even the first rate failed) and every trial.

    The coarse steps find the knee cheaply; the bisection keeps a capacity from being
    quantised to the step below it, which would scale every guarded run down further than
    the machine needs.
    """
    trials: list[dict[str, Any]] = []

    def held_at(rate: float) -> dict[str, Any] | None:
        for attempt in range(attempts or ATTEMPTS):  # one noisy trial must not end the ramp
            trial = dict(try_rate(rate), attempt=attempt + 1)
            trials.append(trial)
            if trial["held"]:
                return trial
        return None

    best, failed = None, None
    for rate in RAMP_MBPS:
        trial = held_at(rate)
        if trial is None:
            failed = rate
            break
        best = trial
    if best is not None and failed is not None:
        lo, hi = float(best["rate_mbps_per_sender"]), failed
        while hi / lo > refine:
            mid = round(math.sqrt(lo * hi), 1)  # geometric: the steps are ratios
            if not lo < mid < hi:
                break
            trial = held_at(mid)
            if trial is None:
                hi = mid
            else:
                best, lo = trial, mid
    return best, trials


def paced_trial(lab: RunningLab, plan: WiringPlan, pairs: list[tuple[str, str]], rate: float,
                log: Callable[[str], None], plane: Plane | None = None,
                pmtu: int = DEFAULT_PMTU) -> dict[str, Any]:
    """Every sender paced at ``rate`` for TRIAL_S seconds: was it held?

    Held = every byte arrived, within HOLD_SLACK x the paced time counted from the moment
    the last sender actually started (start skew is process start-up, not switching).
    The capacity it stands for is the load offered, in the guard's own units (switch-hop
    packets of full frames at ``pmtu``). ``plane`` and ``pmtu`` are the replay's.

    Public: the capacity benchmark paces its own ramps with it, and it is the seam (the one
    step that needs a running fabric) a test replaces to check ``calibrate``'s verdicts.
    """
    frame = frame_len(OP_WRITE_MIDDLE, pmtu)

    nbytes = int(rate * 1e6 / 8 * TRIAL_S)
    flows = [FlowSpec.make(a, b, nbytes, qp=i, message_bytes=256_000)
             for i, (a, b) in enumerate(pairs)]
    hops = mean_hops(plan, flows)
    try:
        res = replay(lab, flows, rate_mbps=rate, progress=False, label="calibrate",
                     plane=plane, pmtu=pmtu)
    except TimeoutError as exc:
        # senders still running long after their paced time: as clear a "not held" as any
        log(f"  {rate:g} Mb/s x {len(flows)} senders: not held ({exc})")
        return {"rate_mbps_per_sender": rate, "offered_mbps": rate * len(flows),
                "delivered_mbps": 0.0, "delivered_fraction": 0.0, "completion_s": None,
                "start_skew_s": None, "ideal_s": TRIAL_S, "held": False,
                "hop_pps": round(rate * 1e6 / 8 / frame * len(flows) * hops),
                "timed_out": str(exc)}
    t = res.job_completion_s
    busy = max(t - res.start_skew_s, 1e-9)
    fraction = res.bytes_received / res.bytes_sent
    held = fraction >= 0.999 and busy <= TRIAL_S * HOLD_SLACK
    log(f"  {rate:g} Mb/s x {len(flows)} senders: {100 * fraction:.1f}% of bytes in "
        f"{busy:.2f} s for {TRIAL_S:g} s of traffic (start skew {res.start_skew_s:.2f} s): "
        f"{'held' if held else 'not held'}")
    return {"rate_mbps_per_sender": rate, "offered_mbps": rate * len(flows),
            "delivered_mbps": round(res.bytes_received * 8 / busy / 1e6, 1),
            "delivered_fraction": round(fraction, 4), "completion_s": round(t, 3),
            "start_skew_s": round(res.start_skew_s, 3), "ideal_s": TRIAL_S, "held": held,
            "hop_pps": round(rate * 1e6 / 8 / frame * len(flows) * hops),
            "cpu_s": res.cpu_s}


def offered(plan: WiringPlan, flows: list[FlowSpec], rate_mbps: float | None = None,
            pmtu: int = DEFAULT_PMTU) -> dict[str, Any]:
    """Offered switch-hop packets/s of ``flows`` at their first fluid max-min rates.

    ``rate_mbps`` caps every flow (for senders paced below their NIC, e.g. probe streams).
    Packets are counted as the replay segments each flow's messages at ``pmtu``.
    """
    flows = [f for f in flows if f.bytes > 0]
    if not flows:
        return {"hop_pps": 0, "mbps": 0.0, "flows": 0}
    start = min(f.start for f in flows)
    first = [f for f in flows if f.start <= start + 1e-9]
    finder = PathFinder(plan)
    res = model_flows(finder, first, "ecmp-fluid", unit="mbps")
    rates = res.flow_start_rate_bps
    if rates is None or len(rates) != len(first):  # should not happen; fall back to the NICs
        nic = plan.rdma_nic()
        rates = [nic[f.src] * 1e6 / sum(g.src == f.src for g in first) for f in first]
    hop_pps = 0.0
    mbps = 0.0
    for f, r in zip(first, rates, strict=True):
        r = min(float(r), rate_mbps * 1e6) if rate_mbps else r
        hops = len(finder.candidates(f.src, f.dst)[0])
        size = f.message_bytes or f.bytes
        frame = message_wire_bytes(size, pmtu) / packets_for(size, pmtu)  # mean frame bytes
        hop_pps += float(r) / 8 / frame * hops
        mbps += float(r) / 1e6
    return {"hop_pps": round(hop_pps), "mbps": round(mbps, 1), "flows": len(first)}


def verdict(capacity: dict[str, Any], load: dict[str, Any], force: bool = False
            ) -> dict[str, Any]:
    """Pure decision: the margin and what to do about it."""
    margin = capacity["hop_pps"] / load["hop_pps"] if load["hop_pps"] else float("inf")
    if margin < REFUSE_BELOW:
        what = "forced" if force else "refused"
    elif margin < WARN_BELOW:
        what = "warn"
    else:
        what = "ok"
    return {"margin": round(margin, 2) if margin != float("inf") else 999.0,
            "verdict": what, "offered_hop_pps": load["hop_pps"],
            "offered_mbps": load["mbps"], "capacity_hop_pps": capacity["hop_pps"],
            "capacity_measured": capacity.get("measured")}


def check(lab: RunningLab, flows: list[FlowSpec], *, force: bool = False,
          log: Callable[[str], None] = print, rate_mbps: float | None = None
          ) -> dict[str, Any]:
    """The guard itself (see the module docstring); raises CapacityError when refused."""
    pmtu = lab.pmtu
    n = len(getattr(lab, "daemons", [])) or 1
    capacity = load_cached(pmtu, n)
    if capacity is None:
        raise CapacityError(f"no calibration for this machine at pmtu {pmtu} with {n} switch "
                            "daemon(s): call scenarios.fidelity.calibrate() before bringing the "
                            "fabric up (Run.lab does)")
    load = offered(lab.plan, flows, rate_mbps, pmtu=pmtu)
    v = verdict(capacity, load, force)
    msg = (f"fidelity guard: offered {load['hop_pps']:,} switch-hop pkt/s "
           f"({load['mbps']:g} Mb/s) vs capacity {capacity['hop_pps']:,}: margin "
           f"{v['margin']:.2f}x")
    if v["verdict"] == "refused":
        raise CapacityError(msg + f" (< {REFUSE_BELOW}): this run would measure the CPU, not the "
                            "network. Lower --scale or the GPU count, or pass --force.")
    if v["verdict"] in ("warn", "forced"):
        log(f"WARNING: {msg}: close to what this machine can switch; completion times may "
            "include CPU queueing" + (" (--force)" if v["verdict"] == "forced" else ""))
    else:
        log(msg)
    return v
