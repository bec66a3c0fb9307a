"""Put a flow list on a running fabric as RoCEv2 packets and measure what arrives.

One call, ``replay(lab, flows)``, does what an experimenter would do by hand:

1. if the controller's mode pins flows (``GET /lb`` says ``"pins": true``), post the flows
   to it (``POST /traffic``) and wait until every switch has its pins;
2. start one receiver agent (``python -m astral_lab.agent_cli recv``) in every
   destination host and wait until each has bound UDP 4791 (or, given ``agents``, hand the
   same command to a persistent compiled agent per host: ``traffic.shell.agents``);
3. write one spec per source host and start its sender agent with a common
   start instant a moment ahead (all hosts share the machine's clock, so "start
   at the same time" and one-way latency are exact);
4. show a progress bar while the senders run, collect every agent's JSON,
   stop the receivers, and clean up every agent even on error or Ctrl-C;
5. return a ``ReplayResult``: per flow (bytes sent/received, loss, reordering,
   completion time), per message (latency), per traffic class latency
   percentiles, and the job's completion time.

Senders pace to the NIC's emulated rate (the plan's NIC link), so latency is
what the fabric adds, not a burst queued in the sender. A flow list must not
repeat a 5-tuple (one QP is one PSN sequence); replay the phases of a step one
after the other with ``replay_step``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from controllers import policies
from controllers.fabric import DEFAULT_MODE
from traffic import hostlb, native, rxsink
from traffic.kernels import FlowSpec, KernelTraffic, controller_body
from traffic.roce import Plane, ReplaySpec
from traffic.shell import pktio as helper
from traffic.shell import programs
from traffic.shell.launch import Launcher, Program, Spawner
from traffic.shell.running import AGENT_START_S, RunningLab, pull_written, wait_ready
from traffic.workload import Phase
from vocab.flows import ROCE_PORT
from vocab.plan import WiringPlan

AGENT = programs.python_module(programs.AGENT_MODULE)
DEFAULT_PLANE = Plane.NATIVE
#: an nftables table that drops RoCE frames in a receiving host after the compiled receiver's
#: ring has seen them, so the host's UDP stack does not process (and answer) each one
_RX_TABLE = "astral_rx"


@dataclass
class ReplayResult:
    """What arrived, per flow and per message, and the summary numbers a report quotes."""

    flows: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    start_ns: int
    job_completion_s: float
    bytes_sent: int
    bytes_received: int
    latency_us: dict[str, dict[str, float]] = field(default_factory=dict)  # class -> stats
    #: packets that never arrived: gaps the receivers saw, and the packets at a QP's head or
    #: tail that the senders sent and no receiver saw (a receiver cannot tell those apart)
    lost_packets: int = 0
    mode: str = DEFAULT_MODE
    start_skew_s: float = 0.0  # how late the last sender started after the common instant
    plane: Plane = DEFAULT_PLANE
    cpu_s: dict[str, float] = field(default_factory=dict)  # senders / receivers, summed
    feedback: dict[str, int] = field(default_factory=dict)  # ACK/CNP frames receivers sent
    #: packets the receivers' own sockets or rings dropped (counted lost too): a measurement
    #: artifact, not the fabric's loss
    receiver_drops: int = 0
    #: the folder of the agents' specs and reports (in the lab's scratch folder, which goes
    #: with the lab; a caller that replays again and again removes each when done)
    workdir: str = ""

    def summary(self) -> dict[str, Any]:
        return {"flows": len(self.flows), "messages": len(self.messages),
                "bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "lost_packets": self.lost_packets, "receiver_drops": self.receiver_drops,
                "job_completion_s": round(self.job_completion_s, 6),
                "latency_us": self.latency_us, "mode": self.mode,
                "start_skew_s": round(self.start_skew_s, 4), "plane": self.plane,
                "cpu_s": self.cpu_s, **({"feedback": self.feedback} if self.feedback else {})}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that was actually measured."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]


def _check(flows: list[FlowSpec], lab: RunningLab) -> None:
    names = {h.name for h in lab.plan.hosts}
    seen: set[tuple[str, str, str, int, int]] = set()
    for f in flows:
        for end in (f.src, f.dst):
            if end not in names:
                raise ValueError(f"flow {f.key}: no host {end!r} in this lab's plan")
        if f.key in seen:
            raise ValueError(f"5-tuple {f.key} appears twice; one QP is one PSN sequence: "
                             "replay phases separately (replay_step)")
        seen.add(f.key)
        if f.bytes and not f.message_bytes:
            raise ValueError(f"flow {f.key} has bytes but no message_bytes")


class TrafficPlane(ABC):
    """The hooks the replay calls on a traffic plane, the programs that send and receive.

    Which hosts run what, when they start and how the reports are joined is the replay's,
    the same for every plane; a plane says only how its programs are started and how their
    reports are read. One instance serves one replay (it holds what its senders were given).
    """

    name: ClassVar[Plane]
    #: whether the senders can change a QP's source port per packet or path (host-side load
    #: balancing: spray, flowlet, plb)
    moves_ports: ClassVar[bool]
    #: whether its programs also run as persistent agents (``replay(agents=...)``)
    serves: ClassVar[bool] = False

    def __init__(self, policy: policies.Policy, plan: WiringPlan, pmtu: int) -> None:
        #: receiver options that make receivers answer the senders (empty: they do not)
        self.feedback: list[str] = []

    @classmethod
    def refuse(cls, policy: policies.Policy) -> None:
        """Raise ``ValueError`` when this plane cannot do what ``policy`` asks of the hosts
        (called before anything starts)."""
        if policy.entropy != "qp" and not cls.moves_ports:
            raise ValueError(f"{policy.name} changes source ports per packet or path; only "
                             "the native plane does that (plane='native')")

    def dropping(self, dsts: Iterable[str], srcs: Iterable[str]) -> list[str]:
        """The hosts whose own stacks must not see the replay's frames (see ``drop_roce``)."""
        return []

    @abstractmethod
    def recv_cmd(self, dst: str, out: str, ready: str) -> list[str]:
        """The receiver's command line in host ``dst``: report to ``out``, touch ``ready``."""

    @abstractmethod
    def write_spec(self, src: str, spec: dict[str, Any], work: str) -> str:
        """Write what sender ``src`` is to send into ``work``; return the file's path."""

    @abstractmethod
    def lead_s(self, senders: int) -> float:
        """How far ahead of now the common start goes, for this many senders."""

    @abstractmethod
    def send_cmd(self, src: str, spec_path: str, out: str, start_at: float) -> list[str]:
        """The sender's command line in host ``src``, to start at ``start_at`` (epoch s)."""

    @abstractmethod
    def read_sent(self, src: str, path: str, start_at: float) -> dict[str, Any]:
        """Sender ``src``'s report as ``SENT.json``'s dict."""

    @abstractmethod
    def read_received(self, out: str) -> dict[str, Any]:
        """A receiver's report as ``RECV.json``'s dict."""

    def received_files(self, out: str) -> list[str]:
        """The files a receiver told to report to ``out`` writes (``read_received`` reads)."""
        return [out]


class NativePlane(TrafficPlane):
    """The compiled sender and receiver (``astral-pktio``): frames are built before the clock
    starts, and host-side policies that move source ports (or answer with feedback) work."""

    name = Plane.NATIVE
    moves_ports = True
    serves = True  # astral-pktio serve

    def __init__(self, policy: policies.Policy, plan: WiringPlan, pmtu: int) -> None:
        super().__init__(policy, plan, pmtu)
        self.exe = helper.path()
        self.feedback = hostlb.receiver_args(policy, plan, pmtu)
        self._plans: dict[str, Any] = {}

    def dropping(self, dsts: Iterable[str], srcs: Iterable[str]) -> list[str]:
        # the receivers read a packet ring; feedback goes to senders, whose stacks must
        # not answer it either
        return sorted(set(dsts) | (set(srcs) if self.feedback else set()))

    def recv_cmd(self, dst: str, out: str, ready: str) -> list[str]:
        return [self.exe, "recv", "--intf", f"{dst}-eth0", "--out", out, "--ready", ready,
                *self.feedback]

    def write_spec(self, src: str, spec: dict[str, Any], work: str) -> str:
        path = os.path.join(work, f"plan-{src}.bin")  # frames are built here
        self._plans[src] = native.write_plan(ReplaySpec.from_dict(spec), path)
        return path

    def lead_s(self, senders: int) -> float:
        return 0.3 + 0.02 * senders

    def send_cmd(self, src: str, spec_path: str, out: str, start_at: float) -> list[str]:
        return [self.exe, "send", "--plan", spec_path, "--out", out, "--intf", f"{src}-eth0",
                "--start-at", str(int(start_at * 1e9))]

    def read_sent(self, src: str, path: str, start_at: float) -> dict[str, Any]:
        return native.read_sent(path, self._plans[src], start_at)

    def read_received(self, out: str) -> dict[str, Any]:
        return native.read_received(out, ROCE_PORT)

    def received_files(self, out: str) -> list[str]:
        return [out, f"{out}.bin"]  # the report and its packet records


class PythonPlane(TrafficPlane):
    """The Python agents (``traffic.shell.agent``): they read a JSON spec and build their
    frames after they start, and keep one source port per QP."""

    name = Plane.PYTHON
    moves_ports = False

    def recv_cmd(self, dst: str, out: str, ready: str) -> list[str]:
        return AGENT + ["recv", "--out", out, "--ready", ready]

    def write_spec(self, src: str, spec: dict[str, Any], work: str) -> str:
        path = os.path.join(work, f"spec-{src}.json")
        with open(path, "w") as fh:
            json.dump(spec, fh)
        return path

    def lead_s(self, senders: int) -> float:
        return 1.0 + 0.25 * senders  # a Python sender builds its frames after it starts

    def send_cmd(self, src: str, spec_path: str, out: str, start_at: float) -> list[str]:
        return AGENT + ["send", "--spec", spec_path, "--out", out,
                        "--start-at", f"{start_at:.6f}"]

    def read_sent(self, src: str, path: str, start_at: float) -> dict[str, Any]:
        with open(path) as fh:
            return json.load(fh)

    def read_received(self, out: str) -> dict[str, Any]:
        with open(out) as fh:
            return json.load(fh)


#: every traffic plane, by the name a caller passes (``replay(plane=...)``)
PLANES: dict[Plane, type[TrafficPlane]] = {Plane.NATIVE: NativePlane, Plane.PYTHON: PythonPlane}


def _plane(name: Plane | str) -> type[TrafficPlane]:
    """The plane class of ``name``, or the ``ValueError`` a caller can act on."""
    try:
        return PLANES[Plane(name)]
    except ValueError:
        raise ValueError(f"plane must be one of {tuple(p.value for p in PLANES)} "
                         f"(got {name!r})") from None


class _Progress:
    """A one-line progress bar on stderr (quiet when stderr is not a terminal)."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label = max(total, 1), label
        self.enabled = enabled and sys.stderr.isatty()

    def show(self, done: int, extra: str = "") -> None:
        if not self.enabled:
            return
        frac = min(1.0, done / self.total)
        bar = "#" * int(30 * frac)
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}% {extra}   ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def sender_timeout(ideal_s: float) -> float:
    """How long senders whose slowest flow ideally takes ``ideal_s`` may run: four times that,
    plus the time a program may take to start (``AGENT_START_S``). Generous because a sender
    that exits is reported at once; one only slow to start (an emulated VM, a remote server
    reached over SSH) must not fail a replay."""
    return 4 * ideal_s + AGENT_START_S


def replay(lab: RunningLab, flows: Iterable[FlowSpec], *, pmtu: int | None = None,
           rate_mbps: float | None = None, post: bool | None = None,
           lead_s: float | None = None,
           timeout: float | None = None, progress: bool = True,
           label: str = "replay", recv_idle_s: float = 5.0,
           recv_grace_s: float = 10.0, plane: Plane | str | None = None,
           policy: str | policies.Policy | None = None,
           lb: dict[str, Any] | None = None,
           agents: Launcher | None = None) -> ReplayResult:
    """Replay ``flows`` on ``lab`` and measure them (see the module docstring).

    ``rate_mbps`` overrides the senders' pacing (default: each source NIC's
    emulated rate). ``post`` defaults to "when the controller's mode pins flows".
    ``timeout`` (``sender_timeout``) bounds how long the senders may run. ``lead_s`` is
    how far ahead the common start is set (default 1 s + 0.25 s per sender: each
    sender is a Python process that builds its frame templates before the start,
    and the senders share the machine's few cores); ``start_skew_s`` in the result says how late
    the last sender actually started. A receiver stops once it has every expected byte, or
    ``recv_idle_s`` after its last packet (packets were lost), and is stopped
    ``recv_grace_s`` after the last sender finished (an incast receiver behind a deep queue
    may need longer: raise it). ``plane`` picks the traffic plane (``PLANES``; default the
    compiled ``native`` one, ``python`` for the Python agents): same frames, same report.
    ``pmtu`` defaults to the lab's (``Lab(pmtu=...)``, 4,096 on one machine).
    ``policy`` (a name with options, ``"qp-scaling:qps=8"``) is what the hosts do: which QPs
    they open (``expand``) and how they pick source ports; default the controller's mode.
    ``lb`` is the controller's ``GET /lb`` answer, read once by a caller that replays again
    and again (a job's iterations), which must go on while the controller is down. Such a
    caller also passes ``agents`` (``traffic.shell.agents.HostAgents``): the receivers and
    senders then run as commands of a compiled agent per host started once, instead of as a
    process each started here (the ``native`` plane only); the result is the same.
    """
    flows = [f for f in flows if f.bytes > 0]
    if not flows:
        raise ValueError("no flows with bytes to replay")
    _check(flows, lab)
    client = lab.client()
    state = lb if lb is not None else client.lb()
    mode = state["mode"]
    own = lab.lb_policy  # Lab(lb="name:key=value"): the lab's options
    pol = policy if isinstance(policy, policies.Policy) else policies.parse(policy) \
        if policy else own if own.name == mode else policies.parse(mode)
    kind = _plane(plane or DEFAULT_PLANE)
    kind.refuse(pol)
    if agents is not None and not kind.serves:
        raise ValueError(f"the {kind.name} plane has no persistent agents (plane='native')")
    launcher: Launcher = agents if agents is not None else Spawner(lab)
    if pol.expands:
        flows = pol.expand(flows)
        _check(flows, lab)  # the QPs the hosts open must still be distinct
    if post if post is not None else state["pins"]:  # the mode gives flows their own paths
        client.post_traffic(controller_body(flows)["flows"])
        lab.wait_converged()

    pmtu = pmtu or lab.pmtu  # the lab's interfaces carry its pmtu
    tp = kind(pol, lab.plan, pmtu)  # the compiled plane finds its program here
    work = os.path.join(lab.workdir, f"replay-{time.time_ns()}")
    os.makedirs(work)
    lab.files.makedirs(sorted({f.src for f in flows} | {f.dst for f in flows}), work)
    by_src: dict[str, list[FlowSpec]] = defaultdict(list)
    for f in flows:
        by_src[f.src].append(f)
    dsts = sorted({f.dst for f in flows})
    expect = defaultdict(int)
    for f in flows:
        expect[f.dst] += f.bytes
    progs: list[Program] = []  # every program started, to end them all whatever happens
    recv: dict[str, tuple[Program, str]] = {}  # receiver, its report
    sent_files: dict[str, str] = {}
    dropping: list[str] = []
    nic = lab.plan.rdma_nic()
    slowest = max(f.bytes / ((rate_mbps or nic[f.src]) * 1e6 / 8) + f.start for f in flows)
    entropy = hostlb.sender_settings(pol, lab.plan, pmtu)
    timeout = timeout if timeout is not None else sender_timeout(slowest)
    bar = _Progress(len(by_src), label, progress)
    try:
        dropping = tp.dropping(dsts, by_src)
        drop_roce(lab, dropping)
        for dst in dsts:
            out = os.path.join(work, f"recv-{dst}.json")
            cmd = tp.recv_cmd(dst, out, out + ".ready")
            p = launcher.run(dst, "recv", cmd + ["--expect-bytes", str(expect[dst]),
                                                 "--idle-timeout", f"{recv_idle_s:g}"], out)
            progs.append(p)
            recv[dst] = (p, out)
        wait_ready(lab.files, {dst: (p, out + ".ready") for dst, (p, out) in recv.items()})
        spec_paths = {}
        for src, mine in sorted(by_src.items()):
            spec = sender_spec(lab, src, mine, pmtu, rate_mbps) | entropy
            sent_files[src] = os.path.join(work, f"sent-{src}.json")
            spec_paths[src] = tp.write_spec(src, spec, work)  # before the clock starts
        lab.files.push({src: [path] for src, path in spec_paths.items()})
        if lead_s is None:
            lead_s = tp.lead_s(len(by_src))
        start_at = time.time() + lead_s
        senders: dict[str, Program] = {}
        for src in sorted(by_src):
            p = launcher.run(src, "send", tp.send_cmd(src, spec_paths[src], sent_files[src],
                                                      start_at), sent_files[src])
            progs.append(p)
            senders[src] = p
        end_by = time.monotonic() + lead_s + timeout
        while True:
            done = sum(p.poll() is not None for p in senders.values())
            bar.show(done, f"{time.time() - start_at:6.1f} s")
            if done == len(senders):
                break
            if time.monotonic() > end_by:
                raise TimeoutError(f"senders still running after {timeout:.0f} s")
            time.sleep(0.1)
        bar.close()
        failed = {s: p.error() for s, p in senders.items() if p.returncode != 0}
        if failed:
            raise RuntimeError(f"sender agents failed: {failed}")
        # receivers stop once they have every expected byte, or idle after the last packet
        end_by = time.monotonic() + recv_grace_s
        for p, _out in recv.values():
            while p.poll() is None and time.monotonic() < end_by:
                time.sleep(0.05)
            if p.poll() is None:
                p.stop()
                p.wait(timeout=10)
        reports: dict[str, list[str]] = defaultdict(list)
        for src, path in sent_files.items():
            reports[src].append(path)
        for dst, (_p, out) in recv.items():
            reports[dst] += tp.received_files(out)
        pull_written(lab.files, reports)
        sent = {src: tp.read_sent(src, path, start_at) for src, path in sent_files.items()}
        received = {dst: tp.read_received(out) for dst, (_p, out) in recv.items()}
    finally:
        bar.close() if bar.enabled else None
        launcher.end(progs)
        drop_roce(lab, dropping, undo=True)
    result = _result(lab, flows, sent, received, int(start_at * 1e9), pol.label
                     if pol.name != mode or pol.options else mode)
    result.start_skew_s = max((float(d.get("late_s", 0.0)) for d in sent.values()), default=0.0)
    result.workdir = work
    result.plane = tp.name
    fb = [d.get("feedback") or {} for d in received.values()]
    if tp.feedback:  # the receivers answered rounds (plb)
        result.feedback = {k: sum(int(x.get(k, 0)) for x in fb)
                           for k in ("acks_sent", "cnps_sent", "seen")}
    result.cpu_s = {"senders": round(sum(d.get("cpu_s") or 0.0 for d in sent.values()), 3),
                    "receivers": round(sum(d.get("cpu_s") or 0.0 for d in received.values()), 3)}
    return result


def drop_roce(lab: RunningLab, hosts: list[str], undo: bool = False) -> None:
    """Drop RoCE frames at each host's ingress hook (after packet taps, before IP), or stop.

    Every host's shell gets its command first, then every answer is read: one round trip
    for the lot instead of one per host. Telemetry is told (``traffic.rxsink``), so the
    deliberate drop is not read as a NIC losing packets.
    """
    for name in hosts:
        (rxsink.unmark if undo else rxsink.mark)(lab.hosts[name].pid)
        if undo:
            cmd = f"nft delete table netdev {_RX_TABLE} 2>/dev/null; true"
        else:
            rules = (f"add table netdev {_RX_TABLE}\n"
                     f"add chain netdev {_RX_TABLE} in {{ type filter hook ingress device "
                     f"{name}-eth0 priority 0 ; }}\n"
                     f"add rule netdev {_RX_TABLE} in udp dport {ROCE_PORT} drop\n")
            cmd = f"nft -f - <<'EOF'\n{rules}EOF"
        lab.hosts[name].sendCmd(cmd)
    for name in hosts:
        lab.hosts[name].waitOutput()


def sender_spec(lab: RunningLab, src: str, flows: list[FlowSpec], pmtu: int,
                rate_mbps: float | None) -> dict[str, Any]:
    node = lab.plan.node(src)
    out = {"intf": f"{src}-eth0", "src_mac": node.mac, "src_ip": node.ip,
           "rate_mbps": rate_mbps or lab.plan.rdma_nic()[src], "pmtu": pmtu,
           "flows": []}
    for i, f in enumerate(flows):
        dst = lab.plan.node(f.dst)
        out["flows"].append({"flow_id": i, "dst_ip": dst.ip, "dst_mac": dst.mac,
                             "sport": f.sport, "qp": f.qp, "dscp": f.dscp,
                             "messages": f.messages, "message_bytes": f.message_bytes,
                             "bytes": f.bytes,  # the last message may be shorter
                             "start": f.start, "traffic_class": f.traffic_class})
    return out


def _result(lab: RunningLab, flows: list[FlowSpec], sent: dict[str, Any],
            received: dict[str, Any], start_ns: int, mode: str) -> ReplayResult:
    """Join what senders sent and receivers got, by (receiver, source IP, QP number).

    A receiver counts as lost only the PSNs missing between the first and the newest it saw
    (``traffic.rxstate``); the senders' packet counts give the rest, so a packet missing at a
    QP's head or tail is lost too: per flow, ``received_packets + lost_packets`` is
    ``sent_packets`` (``None`` without a sender's report).
    """
    ip_of = {h.name: h.ip for h in lab.plan.hosts}
    rx_flows: dict[tuple[str, str, int], dict[str, Any]] = {}
    rx_msgs: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    drops = 0
    for dst, data in received.items():  # the receiver keys flows and messages by "ip/qp"
        for rf in data.get("flows", {}).values():
            rx_flows[(dst, rf["src_ip"], int(rf["qp"]))] = rf
        for m in data.get("messages", []):
            ip, _, qp = m["flow"].rpartition("/")
            rx_msgs[(dst, ip, int(qp))].append(m)
        drops += int(data.get("receiver_drops") or 0)
    moves: dict[tuple[str, int], dict[str, Any]] = {}
    tx_packets: dict[tuple[str, str, int], int] = defaultdict(int)  # (src, dst IP, QP)
    for src, data in sent.items():
        for row in data.get("flows", []):
            tx_packets[(src, row["dst_ip"], int(row["qp"]))] += int(row["packets"])
            if "entropy" in row:
                moves[(src, int(row["qp"]))] = row["entropy"]
    rows, messages = [], []
    lat: dict[str, list[float]] = defaultdict(list)
    lost = 0
    job_end = start_ns
    for f in flows:
        key = (f.dst, ip_of[f.src], f.qp)
        rf = rx_flows.get(key, {})
        got = int(rf.get("bytes", 0))
        packets = int(rf.get("packets", 0))
        tx = tx_packets.get((f.src, ip_of[f.dst], f.qp))
        # gaps the receiver saw, then what it never saw at the head or tail of the QP
        missed = int(rf.get("lost", 0))
        if tx is not None:
            missed = max(missed, tx - packets)
        lost += missed
        end = int(rf.get("last_ns", 0) or 0)
        begin = start_ns + int(f.start * 1e9)
        row = {"src": f.src, "dst": f.dst, "qp": f.qp, "sport": f.sport,
               "traffic_class": f.traffic_class, "bytes": f.bytes, "received": got,
               "sent_packets": tx, "received_packets": packets,
               "lost_packets": missed, "errors": int(rf.get("errors", 0)),
               "marks": {int(t): int(n) for t, n in rf.get("marks", {}).items()},
               "reordered": int(rf.get("reordered", 0)),
               "reorder_distance_max": int(rf.get("reorder_distance_max", 0)),
               "reorder_window_max": int(rf.get("reorder_window_max", 0)),
               "fct_s": (end - begin) / 1e9 if end else None}
        if (f.src, f.qp) in moves:  # the sender's entropy moves and the feedback it had
            e = moves[(f.src, f.qp)]
            row["entropy_moves"] = e["moves"]
            row["first_move_s"] = (e["first_move_ns"] - begin) / 1e9 \
                if e["first_move_ns"] else None
            row["feedback"] = {"acks": e["acks"], "cnps": e["cnps"]}
        rows.append(row)
        if end:
            job_end = max(job_end, end)
        for m in rx_msgs.get(key, []):
            m = dict(m, src=f.src, dst=f.dst, traffic_class=f.traffic_class)
            messages.append(m)
            if m.get("complete") and m.get("latency_ns") is not None:
                lat[f.traffic_class].append(m["latency_ns"] / 1e3)
    stats = {cls: {"count": len(v), "p50": round(percentile(v, 50), 1),
                   "p99": round(percentile(v, 99), 1), "max": round(max(v), 1),
                   "mean": round(sum(v) / len(v), 1)} for cls, v in lat.items() if v}
    return ReplayResult(flows=rows, messages=messages, start_ns=start_ns,
                        job_completion_s=(job_end - start_ns) / 1e9,
                        bytes_sent=sum(f.bytes for f in flows),
                        bytes_received=sum(r["received"] for r in rows),
                        latency_us=stats, lost_packets=lost, mode=mode,
                        receiver_drops=drops)


def replay_step(lab: RunningLab, traffic: KernelTraffic, **kw: Any) -> dict[Phase, ReplayResult]:
    """Replay a kernel model's step phase by phase (dispatch, then combine)."""
    phases: dict[Phase, list[FlowSpec]] = defaultdict(list)
    for f in traffic.flows:
        phases[f.phase].append(f)
    order = [p for p in Phase if p in phases] + [p for p in phases if p not in tuple(Phase)]
    return {p: replay(lab, phases[p], label=f"{traffic.kernel} {p}", **kw) for p in order}
