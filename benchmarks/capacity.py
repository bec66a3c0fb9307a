"""Capacity benchmark: how much traffic this machine's emulated fabric holds, and who pays.

The fidelity guard's calibration fabric (astral3, 2 servers x 4 GPUs, NIC 400 Mb/s so no
link binds, eight cross-rail flows of 3 switch hops) with every interface at an MTU that fits
a 4,096-byte path MTU. Measured side by side in one run, each by the calibration's own
method (``fidelity.ramp``: per-sender rate raised along ``RAMP_MBPS``, then bisected near the
knee; held = every byte delivered within ``HOLD_SLACK`` x the paced time; the figure is the
highest held rate):

``old``      the Python agents at pmtu 1024 (the plane before the compiled one);
``new``      the compiled plane (``astral-pktio``) at each pmtu;
``ceiling``  compiled senders and receivers that only count (frames dropped at the host's
             ingress hook, counted by the interface), at each pmtu: trafgen (netsniff-ng,
             one full frame per gap, through the host qdisc like the agents) and
             ``astral-pktio send`` (the plane's own sender); the highest held of the two
             and of ``new`` is the switch's limit on this pattern, with the same shaping
             and queues. Held here: every frame counted within the slack of the sender's
             own sending time.

Each held trial also reports CPU seconds by component: ``switch`` (ovs-vswitchd),
``senders`` and ``receivers`` (the agents' own accounts; trafgen's from its rusage; the
ceiling's receivers are the kernel) and ``orchestrator`` (this process).

Then the same at the largest pmtu with several switch daemons (``testbed.shell.switch_daemons``,
``--daemons``, default one per core): ``by_daemons`` has each count's held figures and CPU
seconds per daemon, ``by_daemons_over_one`` their ratios to one daemon's in the same run.
The top-level figures are one daemon's.

    python -m benchmarks.capacity [-o FILE.json] [--pmtus 1024,2048,4096] [--attempts 2]
                                  [--daemons 1,auto]

Goals: ``new_mbps`` >= 4x ``old_mbps`` and ``new_hop_pps`` >= 0.8x ``ceiling_hop_pps`` (both
at the default pmtu, the largest measured); two daemons hold >= 1.5x one's switch-hop packets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from benchmarks.common import write
from scenarios import fidelity
from scenarios.common import mean_hops
from testbed.daemons import ROOT, resolve_count
from testbed.datapath import choose_datapath
from testbed.shell.lab import Lab
from testbed.shell.switch_daemons import vswitchd_pids
from traffic import native
from traffic.kernels import FlowSpec
from traffic.roce import (
    LAB_PMTU,
    OP_WRITE_MIDDLE,
    Endpoints,
    FrameBuilder,
    Plane,
    ReplaySpec,
    frame_len,
    mtu_for,
)
from traffic.shell import pktio as helper
from traffic.shell.replay import drop_roce, sender_spec
from traffic.shell.running import RunningLab
from vocab.plan import WiringPlan, write_json_atomic

#: frame sources of the ceiling (receivers only count): the highest held is the ceiling
SOURCES = ("trafgen", "pktio")
GOAL_OLD = 4.0
GOAL_CEILING = 0.8
GOAL_DAEMONS = 1.5


def cpu_of(pid: int, tid: str | None = None) -> float:
    with open(f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switch_pids() -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() == "ovs-vswitchd":
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def _daemon_pids(lab: RunningLab) -> list[int]:
    """The lab's switch daemons' ovs-vswitchd processes, daemon 0 (the machine's) first."""
    return [p for p in vswitchd_pids(getattr(lab, "daemons", [ROOT])) if p]


class _Meter:
    """CPU seconds of each switch daemon and of this process over one trial."""

    def __init__(self, lab: RunningLab) -> None:
        self.pids = _daemon_pids(lab)

    def __enter__(self) -> _Meter:
        self.sw0 = [cpu_of(p) for p in self.pids]
        t = os.times()
        self.me0 = t.user + t.system
        return self

    def __exit__(self, *_exc: object) -> None:
        self.per_daemon = [round(cpu_of(p) - c, 3) for p, c in zip(self.pids, self.sw0,
                                                                   strict=True)]
        self.switch = sum(self.per_daemon)
        t = os.times()
        self.orchestrator = t.user + t.system - self.me0


def _forwarding_cpu(pids: list[int]) -> float:
    """CPU seconds of the switch's threads except PMD threads (``pmd-c01/id:N``), which
    busy-poll a core whether or not there is traffic, so they never look idle."""
    total = 0.0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().startswith("pmd"):
                        continue
                total += cpu_of(pid, tid)
            except OSError:
                pass
    return total


def settle(limit_s: float = 30.0) -> None:
    """Wait until the switch is idle: a trial that was not held leaves deep queues behind,
    and the next trial must not pay for draining them."""
    pids = switch_pids()
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        c0 = _forwarding_cpu(pids)
        time.sleep(0.3)
        if _forwarding_cpu(pids) - c0 < 0.03:  # under 10% of a core
            return


def _replay_trial(lab: RunningLab, plan: WiringPlan, pairs: list[tuple[str, str]], plane: Plane,
                  pmtu: int, rate: float) -> dict[str, Any]:
    settle()
    with _Meter(lab) as m:
        t = fidelity.paced_trial(lab, plan, pairs, rate, lambda msg: print(f"  {plane} {pmtu}: "
                                                                      f"{msg.strip()}"),
                            plane=plane, pmtu=pmtu)
    cpu = t.pop("cpu_s", None) or {}
    t["cpu_s"] = {"switch": round(m.switch, 3), "switch_per_daemon": m.per_daemon,
                  "senders": cpu.get("senders"),
                  "receivers": cpu.get("receivers"), "orchestrator": round(m.orchestrator, 3)}
    return t


def port_rx_packets(host: Any, intf: str) -> int:
    out = host.cmd(f"ip -s -j link show dev {intf}")
    return int(json.loads(out)[0]["stats64"]["rx"]["packets"])


def sender_cmd(lab: RunningLab, plan: WiringPlan, a: str, b: str, i: int, pmtu: int, rate: float,
               count: int, source: str, work: str) -> list[str]:
    """One frame source for a counted trial: trafgen, or the replay's own compiled sender."""
    if source == "trafgen":
        cfg = os.path.join(work, f"trafgen-{a}-{pmtu}.cfg")
        with open(cfg, "w") as fh:
            fh.write("{ " + ", ".join(f"0x{x:02x}" for x in _frame(plan, a, b, i, pmtu))
                     + " }\n")
        # -t: one frame per gap (trafgen's -b rate sends ahead of the rate, in bursts that
        # overflow the host link's queue); -q: through the host qdisc, as the agents
        gap_ns = int(frame_len(OP_WRITE_MIDDLE, pmtu) * 8 / (rate * 1e6) * 1e9)
        return ["trafgen", "--dev", f"{a}-eth0", "--conf", cfg, "-n", str(count), "-t",
                f"{gap_ns}ns", "-q", "-P", "1", "-Q", "-C"]

    flow = FlowSpec.make(a, b, count * pmtu, qp=i, message_bytes=64 * pmtu)
    path = os.path.join(work, f"count-{a}-{pmtu}.plan")
    native.write_plan(ReplaySpec.from_dict(sender_spec(lab, a, [flow], pmtu, rate)), path)
    return [helper.path(), "send", "--plan", path, "--out", path + ".sent", "--intf",
            f"{a}-eth0"]


def counted_trial(lab: RunningLab, plan: WiringPlan, pairs: list[tuple[str, str]], pmtu: int,
                  rate: float, work: str, source: str = "trafgen") -> dict[str, Any]:
    """Every sender's frame source at ``rate`` for TRIAL_S seconds, receivers that only
    count: did every frame arrive in time?"""
    frame_bytes = frame_len(OP_WRITE_MIDDLE, pmtu)
    count = max(1, int(rate * 1e6 / 8 * fidelity.TRIAL_S / frame_bytes))
    hops = mean_hops(plan, [_flow(a, b) for a, b in pairs])
    dsts = sorted({b for _a, b in pairs})
    settle()
    drop_roce(lab, dsts)
    procs = []
    try:
        before = {d: port_rx_packets(lab.hosts[d], f"{d}-eth0") for d in dsts}
        cmds = [sender_cmd(lab, plan, a, b, i, pmtu, rate, count, source, work)
                for i, (a, b) in enumerate(pairs)]
        for (a, _b), cmd in zip(pairs, cmds, strict=True):
            procs.append(lab.hosts[a].popen(cmd))
        sent = count * len(pairs)
        with _Meter(lab) as m:
            t0 = time.monotonic()
            cpu, sent_end, got, last_rise = 0.0, None, 0, t0
            while True:  # until every frame arrived, or none arrived for a second
                for p in procs:
                    if p.returncode is None:
                        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                        if pid:
                            p.returncode = os.waitstatus_to_exitcode(status)
                            cpu += usage.ru_utime + usage.ru_stime
                now = time.monotonic()
                if sent_end is None and all(p.returncode is not None for p in procs):
                    sent_end = now
                n = sum(port_rx_packets(lab.hosts[d], f"{d}-eth0") - before[d] for d in dsts)
                if n > got:
                    got, last_rise = n, now
                if sent_end is not None and (got >= sent or now - last_rise > 1.0):
                    break
                if now - t0 > 10 * fidelity.TRIAL_S + 30:
                    raise TimeoutError("trafgen senders still running")
                time.sleep(0.05)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                p.wait()
        drop_roce(lab, dsts, undo=True)
    fraction = got / sent
    send_s = sent_end - t0
    deliver_s = last_rise - t0
    # the replay's rule: every frame delivered within the slack of the sending time
    # (trafgen's own, which its per-frame sleeps may stretch past the rate asked)
    held = fraction >= 0.999 and deliver_s <= send_s + (fidelity.HOLD_SLACK - 1) * max(
        send_s, fidelity.TRIAL_S) + 0.05
    pps = got / max(send_s, 1e-9)
    print(f"  {source} {pmtu} (counted): {rate:g} Mb/s x {len(pairs)}: "
          f"{100 * fraction:.1f}% of frames, "
          f"sent in {send_s:.2f} s, delivered by {deliver_s:.2f} s: "
          f"{'held' if held else 'not held'}")
    return {"rate_mbps_per_sender": rate, "delivered_fraction": round(fraction, 4),
            "completion_s": round(deliver_s, 3), "send_s": round(send_s, 3), "held": held,
            "delivered_mbps": round(got * frame_bytes * 8 / max(send_s, 1e-9) / 1e6, 1),
            "hop_pps": round(pps * hops), "asked_hop_pps": round(rate * 1e6 / 8 / frame_bytes
                                                                 * len(pairs) * hops),
            "cpu_s": {"switch": round(m.switch, 3), "switch_per_daemon": m.per_daemon,
                      "senders": round(cpu, 3), "receivers": 0.0,
                      "orchestrator": round(m.orchestrator, 3)}}


def _flow(a: str, b: str) -> Any:
    return FlowSpec.make(a, b, 1, qp=0)


def _frame(plan: WiringPlan, a: str, b: str, qp: int, pmtu: int) -> bytes:
    """One full MIDDLE frame of the flow a -> b, as the replay would send it."""
    src, dst = plan.node(a), plan.node(b)
    fb = FrameBuilder(Endpoints(src.mac, dst.mac, src.ip, dst.ip, qp), pmtu)
    frames = [bytes(f) for f in fb.frames(3 * pmtu)]
    return frames[1]


def rate_ramp(fn: Any, attempts: int) -> dict[str, Any]:
    best, trials = fidelity.ramp(fn, attempts)
    return {"best": best, "trials": trials,
            "capped": bool(best and best["rate_mbps_per_sender"] >= fidelity.RAMP_MBPS[-1])}


def ceiling_of(runs: dict[str, Any], pmtu: int) -> dict[str, Any]:
    """The switch's limit at ``pmtu``: the most any frame source held in this run.

    The counted sources usually hold the most (their receivers cost nothing), but the
    replay's own plane holding more is just as much proof of what the switch carries, so a
    ceiling is never below a plane measured beside it.
    """
    names = [f"ceiling-{so}/{pmtu}" for so in SOURCES] + [f"new/{pmtu}"]
    name = max((n for n in names if n in runs),
               key=lambda n: (runs[n]["best"] or {}).get("hop_pps", 0))
    return {"best": runs[name]["best"], "trials": [], "capped": runs[name]["capped"],
            "source": name.split("/")[0].removeprefix("ceiling-")}


def measure(lab: RunningLab, plan: WiringPlan, pmtus: list[int], attempts: int,
            python_plane: bool) -> dict[str, Any]:
    """Every ramp on one running lab: the Python plane (if asked), then per pmtu the
    compiled plane and each counted source, and the ceiling they make."""
    pairs = fidelity.calibration_pairs(plan)
    runs: dict[str, Any] = {}
    if python_plane:
        runs["old/1024"] = rate_ramp(
            lambda r: _replay_trial(lab, plan, pairs, Plane.PYTHON, 1024, r), attempts)
    for pmtu in pmtus:
        runs[f"new/{pmtu}"] = rate_ramp(
            lambda r, pm=pmtu: _replay_trial(lab, plan, pairs, Plane.NATIVE, pm, r), attempts)
        for source in SOURCES:
            runs[f"ceiling-{source}/{pmtu}"] = rate_ramp(
                lambda r, pm=pmtu, so=source: counted_trial(lab, plan, pairs, pm, r,
                                                            lab.workdir, so), attempts)
        runs[f"ceiling/{pmtu}"] = ceiling_of(runs, pmtu)
    return runs


def _fig(runs: dict[str, Any], key: str, what: str) -> Any:
    best = (runs.get(key) or {}).get("best")
    return best[what] if best else None


def by_daemons_row(runs: dict[str, Any], pmtu: int) -> dict[str, Any]:
    """One daemon count's figures at ``pmtu`` (the ``by_daemons`` entries)."""
    return {"new_hop_pps": _fig(runs, f"new/{pmtu}", "hop_pps"),
            "new_mbps": _fig(runs, f"new/{pmtu}", "delivered_mbps"),
            "ceiling_hop_pps": _fig(runs, f"ceiling/{pmtu}", "hop_pps"),
            "ceiling_source": (runs.get(f"ceiling/{pmtu}") or {}).get("source"),
            "cpu_s": {"new": _fig(runs, f"new/{pmtu}", "cpu_s"),
                      "ceiling": _fig(runs, f"ceiling/{pmtu}", "cpu_s")}}


def ratios(by: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each daemon count's held figures over one daemon's, measured in the same run."""
    one = by.get("1") or {}
    out: dict[str, dict[str, float | None]] = {}
    for n, row in by.items():
        if n == "1":
            continue
        out[n] = {k: (round(row[k] / one[k], 2) if row.get(k) and one.get(k) else None)
                  for k in ("new_hop_pps", "ceiling_hop_pps")}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", help="write the JSON here (default results/bench/)")
    p.add_argument("--pmtus", default="1024,2048,4096")
    p.add_argument("--attempts", type=int, default=2, help="tries per rate before the ramp "
                   "stops (default 2)")
    p.add_argument("--daemons", default="1,auto",
                   help="switch daemon counts measured side by side, at the largest pmtu "
                        "(default 1,auto: one, and one per core)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("the capacity benchmark brings up a real fabric: run as root", file=sys.stderr)
        return 2
    pmtus = sorted(int(x) for x in args.pmtus.split(","))

    plan = fidelity.calibration_plan()
    counts = sorted({resolve_count(x, choose_datapath(), len(plan.switches))
                     for x in args.daemons.split(",")} | {1})
    runs: dict[str, Any] = {}
    with Lab(plan, pmtu=LAB_PMTU, log=lambda _m: None) as lab:
        runs = measure(lab, plan, pmtus, args.attempts, python_plane=True)
    default = pmtus[-1]
    by = {"1": by_daemons_row(runs, default)}
    runs_by = {}
    for n in counts[1:]:
        with Lab(plan, pmtu=LAB_PMTU, log=lambda _m: None, switch_daemons=n) as lab:
            runs_by[str(n)] = measure(lab, plan, [default], args.attempts, python_plane=False)
        by[str(n)] = by_daemons_row(runs_by[str(n)], default)

    result: dict[str, Any] = {
        "fabric": "astral3 2x4, NIC 400 Mb/s, 8 cross-rail senders (3 switch hops), "
                  f"MTU {mtu_for(4096)} on every interface",
        "old_hop_pps": _fig(runs, "old/1024", "hop_pps"),
        "old_mbps": _fig(runs, "old/1024", "delivered_mbps"),
        "new_pmtu": default,
        "new_hop_pps": _fig(runs, f"new/{default}", "hop_pps"),
        "new_mbps": _fig(runs, f"new/{default}", "delivered_mbps"),
        "ceiling_hop_pps": _fig(runs, f"ceiling/{default}", "hop_pps"),
        "per_pmtu": {str(pm): {k: _fig(runs, f"{k}/{pm}", "hop_pps") for k in ("new", "ceiling")}
                     | {f"{k}_mbps": _fig(runs, f"{k}/{pm}", "delivered_mbps")
                        for k in ("new", "ceiling")} for pm in pmtus},
        "by_daemons": by,
        "by_daemons_over_one": ratios(by),
        "cores": len(os.sched_getaffinity(0)),
        "cpu_s_at_best": {k: (v["best"] or {}).get("cpu_s") for k, v in runs.items()},
        "capped": [k for k, v in runs.items() if v["capped"]]
                  + [f"{n}:{k}" for n, r in runs_by.items() for k, v in r.items() if v["capped"]],
        "runs": runs,
        "runs_by_daemons": runs_by,
    }
    old, new, ceil = result["old_mbps"], result["new_mbps"], result["ceiling_hop_pps"]
    result["new_over_old_mbps"] = round(new / old, 2) if old and new else None
    result["new_over_ceiling_hop_pps"] = (round(result["new_hop_pps"] / ceil, 2)
                                          if ceil and result["new_hop_pps"] else None)
    result["goals"] = {"new_over_old_mbps": GOAL_OLD, "new_over_ceiling_hop_pps": GOAL_CEILING,
                       "two_daemons_over_one_hop_pps": GOAL_DAEMONS}
    path = write("capacity", result)
    if args.output:
        with open(path) as fh:
            write_json_atomic(args.output, json.load(fh))
        path = args.output
    print(json.dumps({k: v for k, v in result.items()
                      if k not in ("runs", "runs_by_daemons", "cpu_s_at_best")}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
