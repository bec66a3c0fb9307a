"""Traffic-class isolation on a running Lab: strict priority for the decode class on every link.

Why: decode All-to-All messages are a few KB and latency-bound; training and prefill move MB
messages and fill queues. On one FIFO per port, a decode packet waits behind every bulk byte
queued ahead of it (head-of-line blocking), so a background training job can multiply decode
latency. Real fabrics separate the two into traffic classes (DeepEP's README recommends
separate InfiniBand virtual lanes for normal-kernel, low-latency-kernel and other traffic);
this module does the same to the lab's emulated ports, so a scenario can measure the
difference.

**What the Lab has** (``testbed.shaping.htb_commands``): every shaped interface (a host's NIC
egress inside its namespace, every switch port in the root namespace) carries::

    qdisc htb 5: root default 1
      class 5:1  rate LINK ceil LINK            one class at the link rate
        qdisc pfifo 10: limit queue_packets()  the deep "lossless" queue (Lab(lossless=True))

**What ``enable`` makes of it** (same root and link class, so the shaping is unchanged)::

    class 5:1 rate LINK ceil LINK                       (now an inner class)
      class 5:10 decode  prio 0  rate LINK*(1-floor) ceil LINK   pfifo 11: (decode queue)
      class 5:20 bulk    prio 1  rate LINK*floor     ceil LINK   pfifo 12: (the deep queue)
    filter prio 1: u32 match ip dsfield 0xb8 0xfc -> 5:10   (DSCP 46, ECN bits ignored)
    filter prio 2: u32 match u32 0 0           -> 5:20   (everything else, ARP included)

HTB serves leaf classes that are within their rate in ``prio`` order and lends spare link
rate in ``prio`` order too, so whenever a decode packet is queued it is the next one sent:
strict priority, with a small guaranteed ``floor`` (1% by default) so bulk is never starved
to zero, as a real switch's strict-priority queue usually sits beside a min-rate guarantee.
Both classes may borrow up to the link rate, so either alone still gets the whole link. The
catch-all filter is the "default class": HTB's own ``default`` cannot be changed on a
running qdisc (the kernel has no ``change`` for HTB), and it points at 5:1, which is no longer
a leaf. ``disable`` deletes the filters and the two classes (5:1 becomes a leaf again) and
puts back the Lab's ``pfifo 10:`` queue: exactly the single-class setup (checked by reading
it back). Both are batched (one ``tc -batch`` per namespace: the root namespace holds every
switch port, each host namespace one NIC) and idempotent: ports already in the wanted state
are left alone, a port in neither state is an error naming it.

Read-back uses ``tc qdisc/class/filter show`` as text: iproute2 6.1 (Debian 12) prints HTB
classes in text even with ``-j``. ``status`` parses it (pure functions, unit-tested).

**Mapping to a real RoCE fabric.** The sender marks the IP DSCP (``traffic.kernels
.TRAFFIC_CLASSES``: bulk 26, decode 46; on a NIC that is the QP's traffic class, e.g.
NVSHMEM's ``NVSHMEM_IB_TRAFFIC_CLASS`` or, on InfiniBand, the service level/VL). Switches
``trust dscp`` and map DSCP to a switch priority / traffic class (26 -> 3, the usual lossless
RoCE priority; 46 -> 5), each with its own egress queue. The egress scheduler is configured
per traffic class: decode as **strict priority** (what this module emulates) or as an **ETS**
class with a large weight; bulk as ETS. PFC is enabled per priority (3 for bulk, and 5 as a
second lossless priority if decode must be lossless too), so a pause on the bulk priority
does not stop decode: that is the isolation a shared FIFO lacks. The NIC needs the same
treatment (``mlnx_qos --trust dscp``, per-TC ETS/strict) because it too has one queue per
traffic class.

**Limits.** No PFC and no ECN/DCQCN in the lab: a bulk queue grows until its deep FIFO is
full (``testbed.shell.lab.LOSSLESS_QUEUE_S`` of line rate) instead of being held at a pause or
marking threshold, so head-of-line blocking *without* isolation is much worse here than on a
tuned fabric, and isolation's gain larger. Isolation acts only at egress qdiscs: one
``ovs-vswitchd`` thread forwards every packet first-come first-served (far below saturation at the
scaled rates, so it adds little), and the sender agents serve their QPs round-robin, not by
class, so a NIC shared by both classes is not prioritised inside the sender. A decode packet
can still wait for the one bulk packet already being transmitted (~0.4 ms at 20 Mb/s: one
1 KB frame), and HTB's 15 KB burst allowance lets a class send a few back-to-back frames.
Enabling or disabling drops the packets queued on a port at that instant (the kernel purges
a class whose role changes): switch between traffic phases, not during one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from testbed import daemons
from testbed.shaping import HTB_QUANTUM, queue_packets, root_ends
from testbed.shell import procs
from testbed.shell.preflight import LabError
from traffic.kernels import TRAFFIC_CLASSES
from traffic.shell.running import RunningLab
from vocab.plan import WiringPlan, intf_node

ROOT = "5:"
LINK_CLASS = "5:1"
DECODE_CLASS = "5:10"
BULK_CLASS = "5:20"
LINK_QDISC = "10:"  # the Lab's deep queue under 5:1 (lossless mode)
DECODE_QDISC = "11:"
BULK_QDISC = "12:"
#: bulk's guaranteed share of the link while decode is backlogged (the rest is decode's first)
BULK_FLOOR = 0.01
#: decode queue: seconds of line rate (>= 1000 packets). Only decode competes in it, so its
#: depth is about not dropping a decode incast, not about latency (priority does that).
DECODE_QUEUE_S = 0.25
DROPTAIL_PACKETS = 1000  # queue of a non-lossless Lab (Mininet's default)
RATE_TOLERANCE = 0.02  # tc prints rates rounded; compare within 2%


class QosMode(StrEnum):
    """The two setups a shaped port may be in (anything else reads as "other")."""

    ISOLATED = "isolated"  # decode in a strict-priority class of its own, bulk below it
    SINGLE = "single"  # one class and queue, as the Lab made it


def tos_match(dscp: int) -> str:
    """The u32 ``match`` of a DSCP as tc prints it back: 32-bit word at IP offset 0."""
    if not 0 <= dscp < 64:
        raise ValueError(f"dscp must be in [0, 63] (got {dscp})")
    return f"{dscp << 18:08x}/00fc0000"


DECODE_MATCH = tos_match(TRAFFIC_CLASSES["decode"])
ANY_MATCH = "00000000/00000000"


@dataclass(frozen=True)
class Port:
    """One shaped interface: its name, emulated rate, and whose namespace (None = root)."""

    dev: str
    mbps: float
    host: str | None = None


def ports(plan: WiringPlan) -> list[Port]:
    """Every interface the Lab shapes: host NICs (in their namespaces) and switch ports.

    The same set ``Lab._configure_interfaces`` gives an HTB: the switch-side ends of all
    links in the root namespace, and ``<host>-eth0`` in each host's namespace.
    """
    nic = plan.host_link_mbps()
    out = [Port(f"{h}-eth0", nic[h], h) for h in sorted(nic)]
    return out + [Port(intf, mbps) for intf, mbps in root_ends(plan)]


# --- tc commands (pure) ------------------------------------------------------------------
def _rate(mbps: float) -> str:
    return f"{mbps:.6g}Mbit"


def _check(dev: str, mbps: float, bulk_floor: float) -> None:
    if not dev or " " in dev:
        raise ValueError(f"dev must be an interface name (got {dev!r})")
    if mbps <= 0:
        raise ValueError(f"mbps must be > 0 (got {mbps} for {dev})")
    if not 0 < bulk_floor < 0.5:
        raise ValueError(f"bulk_floor must be in (0, 0.5) (got {bulk_floor})")


def bulk_queue(mbps: float, lossless: bool) -> int:
    """Packets of the bulk queue: the Lab's deep lossless queue, or drop-tail's 1,000."""
    return queue_packets(mbps) if lossless else DROPTAIL_PACKETS


def decode_queue(mbps: float) -> int:
    return queue_packets(mbps, DECODE_QUEUE_S)


def isolation_commands(dev: str, mbps: float, lossless: bool = True, *, prefix: str = "",
                       bulk_floor: float = BULK_FLOOR,
                       decode_dscp: int = TRAFFIC_CLASSES["decode"]) -> list[str]:
    """``tc`` lines that turn the Lab's single class on ``dev`` into decode/bulk classes.

    Classes first, their queues, then the filters: until the filters exist, packets still
    reach the link through HTB's direct path for the few microseconds the batch takes.
    """
    _check(dev, mbps, bulk_floor)
    dsfield = f"0x{decode_dscp << 2:02x}"
    burst = f"burst 15k quantum {HTB_QUANTUM}"
    return [
        f"{prefix}class add dev {dev} parent {LINK_CLASS} classid {DECODE_CLASS} htb "
        f"rate {_rate(mbps * (1 - bulk_floor))} ceil {_rate(mbps)} prio 0 {burst}",
        f"{prefix}class add dev {dev} parent {LINK_CLASS} classid {BULK_CLASS} htb "
        f"rate {_rate(mbps * bulk_floor)} ceil {_rate(mbps)} prio 1 {burst}",
        f"{prefix}qdisc add dev {dev} parent {DECODE_CLASS} handle {DECODE_QDISC} pfifo "
        f"limit {decode_queue(mbps)}",
        f"{prefix}qdisc add dev {dev} parent {BULK_CLASS} handle {BULK_QDISC} pfifo "
        f"limit {bulk_queue(mbps, lossless)}",
        f"{prefix}filter add dev {dev} parent {ROOT} protocol ip prio 1 u32 "
        f"match ip dsfield {dsfield} 0xfc flowid {DECODE_CLASS}",
        f"{prefix}filter add dev {dev} parent {ROOT} protocol all prio 2 u32 "
        f"match u32 0 0 flowid {BULK_CLASS}",
    ]


def restore_commands(dev: str, mbps: float, lossless: bool = True, *,
                     prefix: str = "") -> list[str]:
    """``tc`` lines that put ``dev`` back to the Lab's single class (``htb_commands``).

    Deleting the last child makes 5:1 a leaf again with the kernel's default pfifo; the
    Lab's lossless queue replaces it (a non-lossless Lab had that very default).
    """
    _check(dev, mbps, BULK_FLOOR)
    cmds = [f"{prefix}filter del dev {dev} parent {ROOT}",
            f"{prefix}class del dev {dev} classid {DECODE_CLASS}",
            f"{prefix}class del dev {dev} classid {BULK_CLASS}"]
    if lossless:
        cmds.append(f"{prefix}qdisc replace dev {dev} parent {LINK_CLASS} handle {LINK_QDISC} "
                    f"pfifo limit {queue_packets(mbps)}")
    return cmds


def show_commands(devs: Iterable[str]) -> list[str]:
    """Read-back lines for ``tc -s -batch``: qdiscs, classes, filters of each dev in turn."""
    out = []
    for dev in devs:
        out += [f"qdisc show dev {dev}", f"class show dev {dev}",
                f"filter show dev {dev} parent {ROOT}"]
    return out


# --- parsing tc's text (pure) ------------------------------------------------------------
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rate(text: str) -> float:
    """``2Mbit`` / ``19800Kbit`` / ``500bit`` -> bits per second."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?bit)", text, flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"not a tc rate: {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


@dataclass
class TcState:
    """What tc reports for one interface (from ``show_commands`` output)."""

    qdiscs: list[dict[str, Any]] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    filters: list[dict[str, Any]] = field(default_factory=list)

    def root(self) -> dict[str, Any] | None:
        return next((q for q in self.qdiscs if q["parent"] == "root"), None)

    def cls(self, classid: str) -> dict[str, Any] | None:
        return next((c for c in self.classes if c["classid"] == classid), None)

    def child_qdisc(self, classid: str) -> dict[str, Any] | None:
        return next((q for q in self.qdiscs if q["parent"] == classid), None)


_STATS = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+)")


def _stats_into(item: dict[str, Any] | None, line: str) -> None:
    m = _STATS.search(line)
    if m and item is not None:
        item.update(bytes=int(m.group(1)), packets=int(m.group(2)), dropped=int(m.group(3)))


def _word(line: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s)\*?{key} (\S+)", line)
    return m.group(1) if m else None


def parse_device(text: str) -> TcState:
    """Parse the qdisc, class and filter lines tc printed for one interface."""
    st = TcState()
    last: dict[str, Any] | None = None
    for line in text.splitlines():
        if line.startswith("qdisc "):
            parts = line.split()
            parent = "root" if " root " in f" {line} " else _word(line, "parent")
            last = {"kind": parts[1], "handle": parts[2], "parent": parent}
            limit = re.search(r" limit (\d+)p?", line)
            if limit:
                last["limit"] = int(limit.group(1))
            default = _word(line, "default")
            if default:
                last["default"] = default
            st.qdiscs.append(last)
        elif line.startswith("class "):
            parts = line.split()
            parent = "root" if " root " in f" {line} " else _word(line, "parent")
            prio = _word(line, "prio")
            rate, ceil = _word(line, "rate"), _word(line, "ceil")
            last = {"kind": parts[1], "classid": parts[2], "parent": parent,
                    "leaf": _word(line, "leaf"), "prio": int(prio) if prio else None,
                    "rate_bps": parse_rate(rate) if rate else None,
                    "ceil_bps": parse_rate(ceil) if ceil else None}
            st.classes.append(last)
        elif line.startswith("filter "):
            flowid = _word(line, "flowid")
            if flowid:  # the header lines of a u32 filter carry no flowid
                last = {"flowid": flowid, "protocol": _word(line, "protocol"),
                        "pref": int(_word(line, "pref") or 0), "matches": []}
                st.filters.append(last)
            else:
                last = None
        elif line.strip().startswith("match ") and st.filters and last is st.filters[-1]:
            m = re.search(r"match (\S+) at (\d+)", line)
            if m:
                last["matches"].append(f"{m.group(1)}@{m.group(2)}")
        elif line.startswith(" Sent "):
            _stats_into(last, line)
    return st


def split_devices(text: str) -> list[str]:
    """Cut ``show_commands`` output into one chunk per interface.

    tc does not name the interface in per-device output, but each interface has exactly one
    root qdisc and ``qdisc show`` comes first, so every root-qdisc line starts a new chunk.
    """
    chunks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("qdisc ") and " root " in f" {line} ":
            chunks.append([])
        if chunks:
            chunks[-1].append(line)
    return ["\n".join(c) for c in chunks]


def _close(bps: float | None, mbps: float) -> bool:
    return bps is not None and abs(bps - mbps * 1e6) <= RATE_TOLERANCE * mbps * 1e6 + 1


def problems(st: TcState, mode: QosMode, mbps: float, lossless: bool = True,
             bulk_floor: float = BULK_FLOOR) -> list[str]:
    """How ``st`` differs from ``mode`` ("isolated" or "single") at ``mbps``; [] = matches."""
    if mode not in tuple(QosMode):
        raise ValueError(f"mode must be one of {tuple(m.value for m in QosMode)} "
                         f"(got {mode!r})")
    out: list[str] = []
    root = st.root()
    if not root or root["kind"] != "htb" or root["handle"] != ROOT:
        return [f"root qdisc is not htb {ROOT} (the Lab shapes every port with one)"]
    link = st.cls(LINK_CLASS)
    if link is None or link["parent"] != "root" or not _close(link["rate_bps"], mbps) \
            or not _close(link["ceil_bps"], mbps):
        out.append(f"class {LINK_CLASS} is not the link class at {mbps:g} Mb/s")
    if mode == QosMode.SINGLE:
        want_classes = {LINK_CLASS}
        want_qdiscs = {LINK_CLASS: (LINK_QDISC, queue_packets(mbps))} if lossless else {}
        want_filters: set[tuple[str, str]] = set()
    else:
        want_classes = {LINK_CLASS, DECODE_CLASS, BULK_CLASS}
        want_qdiscs = {DECODE_CLASS: (DECODE_QDISC, decode_queue(mbps)),
                       BULK_CLASS: (BULK_QDISC, bulk_queue(mbps, lossless))}
        want_filters = {(DECODE_CLASS, f"{DECODE_MATCH}@0"), (BULK_CLASS, f"{ANY_MATCH}@0")}
        for classid, prio, share in ((DECODE_CLASS, 0, 1 - bulk_floor),
                                     (BULK_CLASS, 1, bulk_floor)):
            c = st.cls(classid)
            if c is None:
                continue  # reported below as a missing class
            if c["parent"] != LINK_CLASS or c["prio"] != prio:
                out.append(f"class {classid} should be prio {prio} under {LINK_CLASS}")
            if not _close(c["rate_bps"], mbps * share) or not _close(c["ceil_bps"], mbps):
                out.append(f"class {classid} should have rate {mbps * share:g} and ceil "
                           f"{mbps:g} Mb/s")
    have_classes = {c["classid"] for c in st.classes}
    if have_classes != want_classes:
        out.append(f"classes {sorted(have_classes)}, expected {sorted(want_classes)}")
    have_q = {q["parent"]: (q["handle"], q.get("limit")) for q in st.qdiscs
              if q["parent"] != "root" and q["kind"] == "pfifo"}
    others = [q for q in st.qdiscs if q["parent"] != "root" and q["kind"] != "pfifo"]
    if have_q != want_qdiscs or others:
        out.append(f"leaf queues {have_q}, expected {want_qdiscs}")
    have_f = {(f["flowid"], m) for f in st.filters for m in f["matches"]}
    if have_f != want_filters:
        out.append(f"filters {sorted(have_f)}, expected {sorted(want_filters)}")
    return out


def classify(st: TcState, mbps: float, lossless: bool = True,
             bulk_floor: float = BULK_FLOOR) -> tuple[QosMode | Literal["other"], str]:
    """``(mode, "")`` for one interface's state, or ``("other", why)``."""
    for mode in QosMode:
        if not problems(st, mode, mbps, lossless, bulk_floor):
            return mode, ""
    single = problems(st, QosMode.SINGLE, mbps, lossless, bulk_floor)
    iso = problems(st, QosMode.ISOLATED, mbps, lossless, bulk_floor)
    return "other", "; ".join(single if len(single) <= len(iso) else iso)


# --- the thin shell: run tc in the Lab's namespaces --------------------------------------
def _require(lab: RunningLab) -> None:
    if not getattr(lab, "hosts", None):
        raise LabError("qos: the Lab is not running (no hosts); start it first")
    if not getattr(lab, "shape", True):
        raise LabError("qos: this Lab was started with shape=False: its ports have no HTB "
                       "shaper to divide into traffic classes")


def _groups(lab: RunningLab) -> dict[str | None, list[Port]]:
    """Ports by where they are: a host's name, a switch daemon's namespace, None (root)."""
    out: dict[str | None, list[Port]] = {}
    for p in ports(lab.plan):
        where = p.host if p.host is not None else daemons.of(lab, intf_node(p.dev)).netns
        out.setdefault(where, []).append(p)
    return out


def _tc(lab: RunningLab, host: str | None, lines: list[str], *, force: bool) -> str:
    """One ``tc -batch`` in the root namespace (host None), in ``host``'s namespace, or in
    a switch daemon's (``host`` is then its namespace's name).

    ``force`` (reads): keep going past a failing line and print counters (``-s``).
    """
    argv = ["tc", *(["-s", "-force"] if force else []), "-batch", "-"]
    if host in lab.hosts:
        argv = ["nsenter", f"--net=/proc/{lab.hosts[host].pid}/ns/net", *argv]
    elif host is not None:
        argv = ["tc", "-n", host, *argv[1:]]
    proc = procs.run(argv, stdin="\n".join(lines) + "\n", timeout=300)
    if proc.returncode != 0 and not force:
        where = f"namespace of {host}" if host else "root namespace"
        raise LabError(f"qos: tc failed in the {where}: {proc.stderr.strip()[:400]}")
    return proc.stdout


def _each_namespace(lab: RunningLab, fn: Any) -> dict[str | None, Any]:
    """``fn(host, ports)`` for the root namespace and every host namespace (in parallel)."""
    groups = _groups(lab)
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = {h: pool.submit(fn, h, ps) for h, ps in groups.items()}
        return {h: f.result() for h, f in futures.items()}


def read(lab: RunningLab) -> list[tuple[Port, TcState]]:
    """Every shaped port of ``lab`` with its parsed tc state (one batch per namespace)."""
    def one(host: str | None, ps: list[Port]) -> list[tuple[Port, TcState]]:
        text = _tc(lab, host, show_commands(p.dev for p in ps), force=True)
        chunks = split_devices(text)
        if len(chunks) != len(ps):
            where = host or "root namespace"
            raise LabError(f"qos: read {len(chunks)} interfaces in {where}, expected "
                           f"{len(ps)} (an interface is missing?)")
        return [(p, parse_device(c)) for p, c in zip(ps, chunks, strict=True)]

    return [pair for pairs in _each_namespace(lab, one).values() for pair in pairs]


def status(lab: RunningLab, bulk_floor: float = BULK_FLOOR) -> dict[str, Any]:
    """The isolation state of every shaped port, and per-class packet counters.

    ``mode``: "isolated" (every port), "single" (every port as the Lab made it), or
    "mixed". ``classes``: packets/bytes/drops summed over all ports for the decode and bulk
    classes (and "link" for 5:1), so a run can show which class its traffic went through.
    """
    _require(lab)
    lossless = getattr(lab, "lossless", True)
    counts = {"isolated": 0, "single": 0, "other": 0}
    other: dict[str, str] = {}
    totals = {name: {"packets": 0, "bytes": 0, "dropped": 0}
              for name in ("decode", "bulk", "link")}
    for port, st in read(lab):
        mode, why = classify(st, port.mbps, lossless, bulk_floor)
        counts[mode] += 1
        if why:
            other[port.dev] = why
        for name, classid in (("decode", DECODE_CLASS), ("bulk", BULK_CLASS),
                              ("link", LINK_CLASS)):
            c = st.cls(classid)
            if c is not None:
                for k in totals[name]:
                    totals[name][k] += int(c.get(k, 0))
    n = sum(counts.values())
    mode = next((m for m in QosMode if counts[m] == n), "mixed")
    return {"mode": mode, "interfaces": n, **counts, "problems": dict(list(other.items())[:20]),
            "classes": totals}


def _switch(lab: RunningLab, want: QosMode, bulk_floor: float) -> dict[str, Any]:
    """Bring every port to ``want`` ("isolated" or "single"); verify by reading back."""
    _require(lab)
    t0 = time.monotonic()
    lossless = getattr(lab, "lossless", True)
    plan: dict[str | None, list[str]] = {}
    bad: dict[str, str] = {}
    changed = 0
    where = {p.dev: w for w, ps in _groups(lab).items() for p in ps}
    for port, st in read(lab):
        mode, why = classify(st, port.mbps, lossless, bulk_floor)
        if mode == want:
            continue
        if mode == "other":
            bad[port.dev] = why
            continue
        if want == QosMode.ISOLATED:
            cmds = isolation_commands(port.dev, port.mbps, lossless, bulk_floor=bulk_floor)
        else:
            cmds = restore_commands(port.dev, port.mbps, lossless)
        plan.setdefault(where[port.dev], []).extend(cmds)
        changed += 1
    if bad:
        first = "; ".join(f"{d}: {w}" for d, w in list(bad.items())[:3])
        raise LabError(f"qos: {len(bad)} port(s) are in neither the Lab's single-class nor "
                       f"the isolated setup (changed by hand?), nothing was changed: {first}")

    def apply(host: str | None, _ports: list[Port]) -> int:
        lines = plan.get(host, [])
        if lines:
            _tc(lab, host, lines, force=False)
        return len(lines)

    _each_namespace(lab, apply)
    after = status(lab, bulk_floor)
    if after["mode"] != want:
        raise LabError(f"qos: after switching to '{want}', {after['interfaces'] - after[want]} "
                       f"port(s) are not: {after['problems']}")
    return {"mode": want, "interfaces": after["interfaces"], "changed": changed,
            "seconds": round(time.monotonic() - t0, 3)}


def enable(lab: RunningLab, bulk_floor: float = BULK_FLOOR) -> dict[str, Any]:
    """Strict priority for the decode class (DSCP 46) on every shaped port of ``lab``.

    Idempotent (ports already isolated are left alone). Returns ``{"mode": "isolated",
    "interfaces": n, "changed": k, "seconds": s}``; raises LabError (changing nothing) if a
    port is in an unknown state, or if the read-back after the change disagrees.
    """
    return _switch(lab, QosMode.ISOLATED, bulk_floor)


def disable(lab: RunningLab, bulk_floor: float = BULK_FLOOR) -> dict[str, Any]:
    """Put every port back to the Lab's single class and queue (inverse of ``enable``)."""
    return _switch(lab, QosMode.SINGLE, bulk_floor)
