"""Datapath benchmark: does another OVS port type or thread layout raise the switch's
ceiling, and does every link stay shaped when it does?

The capacity benchmark found the traffic plane bound by the switch: one ovs-vswitchd main
thread polls every ``system`` (AF_PACKET) port. This measures, on the same fabric and
pattern (``benchmarks.capacity``'s counted trial: trafgen senders, receivers that only
count, the calibration's ramp) and side by side on one Lab, each variant of the switch:

``system``        the Lab's ports as they are (the baseline);
``system+pmd``    the same ports with ``other_config:pmd-cpu-mask`` set: netdev-linux ports
                  are not PMD ports, so no change is expected; measured, not assumed;
``afxdp-nonpmd``  every switch port ``type=afxdp-nonpmd options:xdp-mode=generic``;
``afxdp``         every switch port ``type=afxdp`` with a PMD thread (``pmd-cpu-mask``).

Trials run at each of ``--pmtus``: the Lab's 4,096-byte path MTU, and a smaller one,
because an AF_XDP port in OVS drops every frame larger than its umem frame (the port's
``xsk_queue_0_rx_dropped`` counts them, see ``port_statistics_delta`` in the JSON).

A ceiling is worth nothing if the links stop being links, so each variant also gets a
**shaping check**: one switch egress port the Lab shapes with HTB has its class lowered to
``SHAPE_MBPS`` (the Lab's own rate is above what one shaped sender can offer), one sender
offers ``SHAPE_OVER`` x that through it, and the receiver's counter gives the rate that came
out. A variant keeps shaping when that rate is within ``SHAPE_TOLERANCE`` of the class
(and the port carried at least half of it: a port that drops everything is not shaped).

Every OVS change is undone when the variant ends, on error or Ctrl-C too: port types back
to what they were (with the Lab's deep receive buffers), the pmd-cpu-mask back to its old
value, the HTB class back to the plan's rate.

Each round applies every variant in turn (order rotated per round); a variant's ceiling is
the median of its rounds, and counts as raised only when every round beats every round of
``system`` (the ramp's steps are coarse, and rounds of one variant can end a step apart).
Not part of ``benchmarks.run``: three rounds of four variants at two pmtus take longer than
that suite's per-benchmark budget; run it on its own.

    python -m benchmarks.datapath [-o FILE.json] [--variants system,afxdp] [--attempts 2]
                                  [--pmtus 4096,2048] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks import capacity
from benchmarks.common import exit_once, write
from scenarios import fidelity
from testbed.shaping import root_ends
from testbed.shell.faults.link_degrade import htb_rate_command
from testbed.shell.lab import OVS_PORT_RCVBUF, Lab
from testbed.shell.machine import socket_buffers
from traffic.roce import LAB_PMTU, OP_WRITE_MIDDLE, PMTUS, frame_len, mtu_for
from traffic.shell.replay import drop_roce
from traffic.shell.running import RunningLab
from vocab.plan import WiringPlan, write_json_atomic

#: HTB rate (Mb/s) the shaping check gives its port, and the offered multiple of it
SHAPE_MBPS = 20.0
SHAPE_OVER = 4.0
#: seconds the check's sender runs, and the window (from its start) the rate is read over
SHAPE_SEND_S = 2.5
SHAPE_WINDOW_S = (0.5, 2.0)
#: a port is shaped when it delivers at most this multiple of its class rate...
SHAPE_TOLERANCE = 1.1
#: ...and at least this multiple (a port that passes nothing shapes nothing)
SHAPE_FLOOR = 0.5
#: a variant raises the ceiling when it holds at least this multiple of ``system``'s
RAISE_MIN = 1.1
PMD_MASK = "0x2"


@dataclass(frozen=True)
class Variant:
    """One switch configuration: the type every switch port gets (None: leave them) and
    the pmd-cpu-mask (None: none)."""

    name: str
    port_type: str | None = None
    pmd_mask: str | None = None


VARIANTS = {v.name: v for v in (
    Variant("system"),
    Variant("system+pmd", pmd_mask=PMD_MASK),
    Variant("afxdp-nonpmd", port_type="afxdp-nonpmd"),
    Variant("afxdp", port_type="afxdp", pmd_mask=PMD_MASK),
)}
#: variants the brief lists but this benchmark does not implement, with the reason
NOT_IMPLEMENTED = {
    "two-vswitchd": "not implemented here: several switch daemons, each in its own network "
                    "namespace, are measured side by side by `python -m benchmarks.capacity "
                    "--daemons 1,2` (testbed.shell.switch_daemons)",
}


def parse_variants(text: str) -> list[Variant]:
    """``"system,afxdp"`` -> Variants in the order given; ``system`` is put first when
    missing, because every ratio is to it. Unknown or repeated names are errors."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("no variants given")
    for n in names:
        if n in NOT_IMPLEMENTED:
            raise ValueError(f"{n}: {NOT_IMPLEMENTED[n]}")
        if n not in VARIANTS:
            raise ValueError(f"unknown variant {n!r} (known: {', '.join(VARIANTS)})")
    if len(set(names)) != len(names):
        raise ValueError(f"variant repeated in {text!r}")
    if "system" not in names:
        names.insert(0, "system")
    return [VARIANTS[n] for n in names]


def parse_pmtus(text: str) -> list[int]:
    """``"4096,2048"`` -> [4096, 2048]: path MTUs the Lab's 4,096-byte interfaces carry."""
    try:
        pmtus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"pmtus must be integers (got {text!r})") from None
    bad = [pm for pm in pmtus if pm not in PMTUS or pm > 4096]
    if not pmtus or bad or len(set(pmtus)) != len(pmtus):
        raise ValueError(f"pmtus must be distinct values of {PMTUS} (got {text!r})")
    return pmtus


def parse_ovs_map(text: str) -> dict[str, int]:
    """``{rx_packets=5, xsk_queue_0_rx_dropped=0}`` (ovs-vsctl's map) -> its integer
    entries; others are left out."""
    out: dict[str, int] = {}
    for item in text.strip().strip("{}").split(","):
        key, sep, value = item.strip().partition("=")
        if sep and value.strip('"').lstrip("-").isdigit():
            out[key] = int(value.strip('"'))
    return out


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """After minus before for every counter in both (a port type change renames some)."""
    return {k: after[k] - before[k] for k in after if k in before}


# --- pure: the shaping check's and the verdict's logic ----------------------------------
def keeps_shaping(delivered_mbps: float | None, configured_mbps: float) -> bool:
    """Did the port deliver its class rate and no more (within the tolerance)?"""
    if delivered_mbps is None or configured_mbps <= 0:
        return False
    ratio = delivered_mbps / configured_mbps
    return SHAPE_FLOOR <= ratio <= SHAPE_TOLERANCE


def ceiling_over(hop_pps: float | None, system_hop_pps: float | None) -> float | None:
    if not hop_pps or not system_hop_pps:
        return None
    return round(hop_pps / system_hop_pps, 2)


def verdict(variants: dict[str, dict[str, Any]]) -> str:
    """One sentence: which variant, if any, raises the ceiling while every link stays
    shaped; and which raise it only by giving shaping up."""
    if not (variants.get("system") or {}).get("hop_pps"):
        return "no verdict: the system baseline has no held ceiling"
    good, unshaped, failed, within = [], [], [], []
    for name, v in variants.items():
        if name == "system":
            continue
        if v.get("error"):
            failed.append(name)
            continue
        ratio = v.get("ceiling_over_system")
        # and beyond the noise: every repeat above every repeat of the baseline
        clear = min(v.get("hop_pps_per_repeat") or [0]) > max(
            variants["system"].get("hop_pps_per_repeat") or [0])
        if ratio is not None and ratio >= RAISE_MIN and not clear:
            within.append((ratio, name))
        elif ratio is not None and ratio >= RAISE_MIN:
            (good if v.get("keeps_shaping") else unshaped).append((ratio, name))
    parts = []
    if good:
        ratio, name = max(good)
        parts.append(f"{name} raises the ceiling {ratio:g}x over system and keeps shaping")
    else:
        parts.append("no variant that keeps shaping raises the ceiling "
                     f"(>= {RAISE_MIN:g}x system)")
    if unshaped:
        parts.append("raised only without shaping: " + ", ".join(
            f"{n} {r:g}x" for r, n in sorted(unshaped, reverse=True)))
    if within:
        parts.append("within the repeats' spread (not counted): " + ", ".join(
            f"{n} {r:g}x" for r, n in sorted(within, reverse=True)))
    if failed:
        parts.append("failed to configure: " + ", ".join(failed))
    if not variants["system"].get("keeps_shaping"):
        parts.append("note: even system did not pass the shaping check")
    return "; ".join(parts)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summary(name: str, ramps: list[dict[str, Any] | None],
            shapings: list[dict[str, Any] | None], system_hop_pps: float | None,
            error: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A variant's row of the JSON from its ramps (``capacity.rate_ramp``, one per repeat) and
    shaping checks. The ceiling is the median over repeats (a repeat that held nothing
    counts as 0); ``max_hop_pps`` is what the switch delivered at its most loaded trial,
    held or not, which is finer-grained than the ramp's steps. Shaping must hold in
    every repeat."""
    bests = [(r or {}).get("best") or {} for r in ramps]
    per_repeat = [b.get("hop_pps") or 0 for b in bests]
    trials = [(r or {}).get("trials") or [] for r in ramps]
    ramp_cpu = [round(sum((t.get("cpu_s") or {}).get("switch") or 0.0 for t in ts), 3)
                for ts in trials]
    hop_pps = _median(per_repeat) if any(per_repeat) else None
    delivered = [(s or {}).get("delivered_mbps") for s in shapings]
    configured = [(s or {}).get("configured_mbps") or 0.0 for s in shapings]
    return {
        "variant": name,
        "error": error,
        "hop_pps": hop_pps,
        "hop_pps_per_repeat": per_repeat,
        "max_hop_pps": _median([max((t.get("hop_pps") or 0 for t in ts), default=0)
                                for ts in trials]),
        "delivered_mbps": _median([b.get("delivered_mbps") or 0.0 for b in bests]),
        "rate_mbps_per_sender": [b.get("rate_mbps_per_sender") for b in bests],
        "capped": any(bool((r or {}).get("capped")) for r in ramps),
        "ceiling_over_system": ceiling_over(hop_pps, system_hop_pps),
        "switch_cpu_s": {
            "at_best": _median([(b.get("cpu_s") or {}).get("switch") or 0.0 for b in bests
                                if b]),
            "ramp": _median(ramp_cpu),
            "ramp_per_repeat": ramp_cpu,
        },
        "shaping": shapings,
        "shaping_delivered_mbps": delivered,
        "keeps_shaping": bool(shapings) and not error and all(
            keeps_shaping(d, c) for d, c in zip(delivered, configured, strict=True)),
        "trials": trials,
        **(extra or {}),
    }


# --- OVS changes (root) -----------------------------------------------------------------
def _vsctl(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["ovs-vsctl", "--timeout=60", *args], capture_output=True,
                          text=True, timeout=90)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ovs-vsctl {' '.join(args[:4])}: {proc.stderr.strip()[:300]}")
    return proc.stdout.strip()


def _get(table: str, record: str, column: str) -> str:
    out = _vsctl("--if-exists", "get", table, record, column, check=False)
    return out.strip('"')


def _pmd_mask() -> str | None:
    out = _vsctl("--if-exists", "get", "Open_vSwitch", ".", "other_config:pmd-cpu-mask",
                 check=False)
    return out.strip('"') or None


def _set_pmd_mask(mask: str | None) -> None:
    if mask is None:
        _vsctl("remove", "Open_vSwitch", ".", "other_config", "pmd-cpu-mask")
    else:
        _vsctl("set", "Open_vSwitch", ".", f"other_config:pmd-cpu-mask={mask}")


def _set_types(ports: list[str], port_type: str) -> None:
    """Every port to ``port_type`` ("" = system) in one transaction; afxdp in generic
    (skb) mode, which works on veth, and without that option for system ports."""
    cmd: list[str] = []
    for p in ports:
        cmd += ["--", "set", "Interface", p, f'type="{port_type}"']
        if port_type.startswith("afxdp"):
            cmd += ["options:xdp-mode=generic"]
        else:
            cmd += ["--", "remove", "Interface", p, "options", "xdp-mode"]
    # system ports reopen their packet sockets: give them the Lab's deep receive buffers
    with socket_buffers(OVS_PORT_RCVBUF):
        _vsctl(*cmd)
        time.sleep(1.0)  # let ovs-vswitchd reconfigure (ovs-vsctl waits for the db only)
        _vsctl("--timeout=30", "wait-until", "Interface", ports[-1], f'type="{port_type}"')


def port_errors(ports: list[str], port_type: str) -> str | None:
    """None when every port has ``port_type`` and no error; else what OVS says (first 3)."""
    bad = []
    for p in ports:
        typ, err = _get("Interface", p, "type"), _get("Interface", p, "error")
        if typ != port_type or err not in ("", "[]"):
            bad.append(f"{p}: type={typ or 'system'} error={err or '[]'}")
    return "; ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "") \
        if bad else None


@contextlib.contextmanager
def applied(variant: Variant, ports: list[str]) -> Iterator[dict[str, Any]]:
    """The variant's OVS configuration for the duration; yields what OVS reports (and an
    ``error`` when it did not take). Restores types and mask however the block ends."""
    old_mask = _pmd_mask()
    old_type = _get("Interface", ports[0], "type")
    info: dict[str, Any] = {"port_type": variant.port_type or "system",
                            "pmd_cpu_mask": variant.pmd_mask, "error": None}
    try:
        if variant.pmd_mask is not None:
            _set_pmd_mask(variant.pmd_mask)
        if variant.port_type is not None:
            try:
                _set_types(ports, variant.port_type)
            except RuntimeError as exc:
                info["error"] = str(exc)
            info["error"] = info["error"] or port_errors(ports, variant.port_type)
            info["status_example"] = {ports[0]: _get("Interface", ports[0], "status")}
        time.sleep(1.0)
        yield info
    finally:
        try:
            if variant.port_type is not None:
                _set_types(ports, old_type)
        finally:
            if variant.pmd_mask is not None:
                _set_pmd_mask(old_mask)


def _htb(dev: str) -> str:
    return subprocess.run(["tc", "qdisc", "show", "dev", dev], capture_output=True,
                          text=True).stdout


def shaping_check(lab: RunningLab, plan: WiringPlan, pair: tuple[str, str], pmtu: int, work: str
                  ) -> dict[str, Any]:
    """Lower the HTB class of the switch port towards ``pair``'s receiver to SHAPE_MBPS,
    offer SHAPE_OVER x that from its sender, and read the rate the receiver got."""
    a, b = pair
    link = next(ln for ln in plan.links if ln.a == b)  # the receiver's NIC cable
    port, plan_mbps = link.b_intf, link.mbps
    if "htb" not in _htb(port):
        return {"port": port, "error": f"no HTB on {port}", "configured_mbps": SHAPE_MBPS,
                "delivered_mbps": None}
    offered = SHAPE_MBPS * SHAPE_OVER
    frame_bytes = frame_len(OP_WRITE_MIDDLE, pmtu)
    count = int(offered * 1e6 / 8 * SHAPE_SEND_S / frame_bytes)
    capacity.settle()
    subprocess.run(htb_rate_command(port, SHAPE_MBPS), check=True, capture_output=True)
    drop_roce(lab, [b])
    proc = None
    try:
        cmd = capacity.sender_cmd(lab, plan, a, b, 0, pmtu, offered, count, "trafgen", work)
        rx = lab.hosts[b]
        t0 = time.monotonic()
        proc = lab.hosts[a].popen(cmd)
        marks = []
        for at in SHAPE_WINDOW_S:
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            marks.append((time.monotonic(), capacity.port_rx_packets(rx, f"{b}-eth0")))
        (t1, n1), (t2, n2) = marks
        delivered = (n2 - n1) * frame_bytes * 8 / (t2 - t1) / 1e6
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
        # back to the plan's rate first: the backlog then drains at once
        subprocess.run(htb_rate_command(port, plan_mbps), check=True, capture_output=True)
        drop_roce(lab, [b], undo=True)
    return {"port": port, "plan_mbps": plan_mbps, "configured_mbps": SHAPE_MBPS,
            "offered_mbps": offered, "delivered_mbps": round(delivered, 2),
            "over_configured": round(delivered / SHAPE_MBPS, 2),
            "htb_after": "htb" in _htb(port)}


def run_variant(lab: RunningLab, plan: WiringPlan, pairs: list[tuple[str, str]], variant: Variant,
                ports: list[str], pmtus: list[int], attempts: int) -> dict[str, Any]:
    """The ceiling ramp and the shaping check at each pmtu under one variant (applied
    once); OVS restored after. Returns ``info`` and ``{pmtu: (ramp, shaping)}``."""
    t0 = time.monotonic()
    sw = capacity.switch_pids()
    cpu0 = sum(capacity.cpu_of(p) for p in sw)
    per: dict[int, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}
    with applied(variant, ports) as info:
        if info["error"]:
            print(f"== {variant.name}: did not take: {info['error']}", flush=True)
            return {"info": info, "per_pmtu": {pm: (None, None) for pm in pmtus}}
        # OVS's counters of the first switch port a sender's frames enter and of the port
        # towards its receiver, over each pmtu's ramp: where frames were lost, if they were
        a, b = pairs[0]
        watched = [next(ln.b_intf for ln in plan.links if ln.a == h) for h in (a, b)]
        for pmtu in pmtus:
            print(f"== {variant.name} pmtu {pmtu}", flush=True)
            before = {w: parse_ovs_map(_get("Interface", w, "statistics")) for w in watched}
            ramp = capacity.rate_ramp(lambda r, pm=pmtu: capacity.counted_trial(
                lab, plan, pairs, pm, r, lab.workdir, "trafgen"), attempts)
            shaping = shaping_check(lab, plan, pairs[0], pmtu, lab.workdir)
            print(f"  shaping: {shaping}", flush=True)
            info.setdefault("port_statistics_delta", {})[str(pmtu)] = {
                w: counter_delta(before[w], parse_ovs_map(_get("Interface", w, "statistics")))
                for w in watched}
            per[pmtu] = (ramp, shaping)
    info["wall_s"] = round(time.monotonic() - t0, 1)
    info["switch_cpu_s_total"] = round(sum(capacity.cpu_of(p) for p in sw) - cpu0, 2)
    info["htb_on_every_port_after"] = all("htb" in _htb(p) for p in ports)
    return {"info": info, "per_pmtu": per}


def rows_at(raw: dict[str, list[dict[str, Any]]], pmtu: int) -> dict[str, dict[str, Any]]:
    """Every variant's summary row at one pmtu over its repeats, ratios to ``system``'s
    median at that pmtu."""
    rows: dict[str, dict[str, Any]] = {}
    for name in ["system", *[n for n in raw if n != "system"]]:
        reps = raw[name]
        error = next((r["info"]["error"] for r in reps if r["info"]["error"]), None)
        rows[name] = summary(name, [r["per_pmtu"][pmtu][0] for r in reps],
                             [r["per_pmtu"][pmtu][1] for r in reps],
                             rows["system"]["hop_pps"] if rows else None, error,
                             {"config": [r["info"] for r in reps]})
    rows["system"]["ceiling_over_system"] = 1.0 if rows["system"]["hop_pps"] else None
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.datapath", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", help="write the JSON here (default results/bench/)")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated, of {', '.join(VARIANTS)} (default all)")
    p.add_argument("--pmtus", default="4096,2048",
                   help="frame sizes of the trials, comma-separated; the first is the headline "
                   "(default 4096,2048: the Lab's, and one that fits an AF_XDP frame)")
    p.add_argument("--attempts", type=int, default=2, help="tries per rate before the ramp "
                   "stops (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="rounds over every variant, "
                   "interleaved, each round's order rotated (default 3)")
    args = p.parse_args(argv)
    try:
        variants = parse_variants(args.variants)
        pmtus = parse_pmtus(args.pmtus)
    except ValueError as exc:
        p.error(str(exc))
    if os.geteuid() != 0:
        print("the datapath benchmark brings up a real fabric: run as root", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, exit_once)  # SIGTERM leaves through the finally blocks

    plan = fidelity.calibration_plan()
    pairs = fidelity.calibration_pairs(plan)
    ports = [intf for intf, _mbps in root_ends(plan)]
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    raw: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    t0 = time.monotonic()
    with Lab(plan, pmtu=LAB_PMTU, log=lambda _m: None) as lab:
        for rnd in range(args.repeats):
            print(f"-- round {rnd + 1}/{args.repeats}", flush=True)
            # rotated so no variant always runs first after bring-up or after another
            for v in variants[rnd % len(variants):] + variants[:rnd % len(variants)]:
                raw[v.name].append(run_variant(lab, plan, pairs, v, ports, pmtus,
                                               args.attempts))
    wall = time.monotonic() - t0
    per_pmtu = {pm: rows_at(raw, pm) for pm in pmtus}
    rows = per_pmtu[pmtus[0]]
    result: dict[str, Any] = {
        "fabric": "astral3 2x4, NIC 400 Mb/s, 8 cross-rail senders (3 switch hops), "
                  f"MTU {mtu_for(4096)} on every interface",
        "pmtu": pmtus[0],
        "frame_bytes": frame_len(OP_WRITE_MIDDLE, pmtus[0]),
        "method": "benchmarks.capacity counted trials (trafgen), ramp per "
                  f"scenarios.fidelity.ramp ({fidelity.RAMP_MBPS[-1]:g} Mb/s per sender "
                  f"at most); shaping: HTB {SHAPE_MBPS:g} Mbit on one switch egress, "
                  f"{SHAPE_OVER:g}x offered",
        "variants": rows,
        "per_pmtu": {str(pm): {"frame_bytes": frame_len(OP_WRITE_MIDDLE, pm),
                               "variants": per_pmtu[pm], "verdict": verdict(per_pmtu[pm])}
                     for pm in pmtus[1:]},
        "not_measured": NOT_IMPLEMENTED,
        "verdict": "; ".join(f"pmtu {pm}: {verdict(per_pmtu[pm])}" for pm in pmtus),
        "repeats": args.repeats,
        "wall_s": round(wall, 1),
    }
    path = write("datapath", result)
    if args.output:
        with open(path) as fh:
            write_json_atomic(args.output, json.load(fh))
        path = args.output
    for pm in pmtus:
        print(f"pmtu {pm}:")
        for n, r in per_pmtu[pm].items():
            print(f"  {n}:", json.dumps({k: r[k] for k in (
                "error", "hop_pps", "hop_pps_per_repeat", "max_hop_pps",
                "ceiling_over_system", "capped", "switch_cpu_s", "shaping_delivered_mbps",
                "keeps_shaping")}))
    print(result["verdict"])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
