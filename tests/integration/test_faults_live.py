"""Every fault kind injected into a real fabric, its effect measured, then undone exactly.

One small astral3 fabric (4 servers x 2 GPUs, 2 blocks: 4 leaves, 4 spines, one 20 Mb/s
lane per leaf-spine pair, 40 Mb/s NICs) serves the whole module, in ``planned`` mode so a
measured flow's lane is known. Effects are measured in the data plane (probe streams,
pings, rates) or read from the kernel (operstate, ``tc``, ``nft``) and the controller's
API, never taken from the injector's word. Every test leaves the fabric as it found it,
which the ``injector`` fixture checks (links up, rates as planned, no fault leftovers).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ops.telemetry import parse_snmp
from testbed import faultspec
from testbed.faultkinds import partial_blackhole
from testbed.faultkinds.link_degrade import parse_htb_rate
from testbed.faultkinds.link_flap import phases
from testbed.faultkinds.shuffle_miswiring import partner
from testbed.faultspec import Fault
from testbed.shell import cleanup
from testbed.shell.faults import INJECTORS, FaultInjector
from testbed.shell.faults.nic_loss import leftovers
from testbed.shell.faults.partial_blackhole import blackhole_rules
from testbed.shell.lab import Lab
from testbed.shell.probe import Stream
from testbed.topologies import build
from testbed.wiring import Misdelivery, findings, miswired
from traffic.roce import LAB_PMTU, OP_WRITE_FIRST, frame_len
from vocab.plan import Link

PLAN = build("astral3", servers=4, gpus=2, servers_per_block=2)


def check_wiring(lab: Lab) -> list[Misdelivery]:
    """The controller's wiring check, read against the plan."""
    return findings(PLAN, lab.client().check_wiring())


_ports = itertools.count(6000)  # a fresh receiver port per stream, unless its flows are pinned


@pytest.fixture(autouse=True)
def _start_clean() -> None:
    """Overrides the conftest's per-test ``clean()``: that would tear down the module's lab
    (its record is owned by this very process). The module fixture cleans once instead."""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    cleanup.clean(verbose=False, kinds=INJECTORS.all().values())
    with Lab(PLAN, lb="planned", poll_interval=0.5) as lab:
        yield lab
    assert not cleanup.leftovers(PLAN), cleanup.leftovers(PLAN)
    assert not [p for p, run in cleanup.fault_processes().items() if run == lab.run_id]


def host_sh(lab: Lab, host: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mnexec", "-a", str(lab.hosts[host].pid), *argv],
                          capture_output=True, text=True, timeout=30)


def link_state(lab: Lab, node: str, intf: str) -> tuple[bool, str]:
    """(administratively up, operstate) of an interface, in its own namespace."""
    argv = ["ip", "-j", "link", "show", "dev", intf]
    out = (host_sh(lab, node, *argv) if node in lab.hosts else
           subprocess.run(argv, capture_output=True, text=True)).stdout
    info = json.loads(out)[0]
    return "UP" in info["flags"], info["operstate"]


def htb_line(lab: Lab, node: str, intf: str) -> str:
    argv = ["tc", "class", "show", "dev", intf, "classid", "5:1"]
    return (host_sh(lab, node, *argv) if node in lab.hosts else
            subprocess.run(argv, capture_output=True, text=True)).stdout.strip()


def link_info(lab: Lab, node: str, intf: str) -> dict[str, Any]:
    """``ip -j -s link show`` of an interface, in its own namespace."""
    argv = ["ip", "-j", "-s", "link", "show", "dev", intf]
    out = (host_sh(lab, node, *argv) if node in lab.hosts else
           subprocess.run(argv, capture_output=True, text=True)).stdout
    return dict(json.loads(out)[0])


def ovs_interfaces() -> dict[str, tuple[Any, Any]]:
    """Open vSwitch's view of every interface: ``name -> (mtu, mtu_request)``."""
    out = subprocess.run(["ovs-vsctl", "--format=json", "--columns=name,mtu,mtu_request",
                          "list", "Interface"], capture_output=True, text=True).stdout
    return {name: (str(mtu), str(req)) for name, mtu, req in json.loads(out)["data"]}


def ovs_ports() -> dict[str, tuple[str, int]]:
    """Open vSwitch's wiring of the plan's switches: ``port -> (bridge, OpenFlow number)``."""
    def rows(table: str, columns: str) -> list[list[Any]]:
        out = subprocess.run(["ovs-vsctl", "--format=json", f"--columns={columns}", "list",
                              table], capture_output=True, text=True).stdout
        return list(json.loads(out)["data"])
    names = {uuid[1]: name for uuid, name in rows("Port", "_uuid,name")}
    ofport = {name: n for name, n in rows("Interface", "name,ofport")}
    found = {}
    switches = {s.name for s in PLAN.switches}
    for bridge, ports in rows("Bridge", "name,ports"):
        for uuid in (ports[1] if ports[0] == "set" else [ports]):
            if bridge in switches:
                found[names[uuid[1]]] = (bridge, ofport[names[uuid[1]]])
    return found


def fabric_state(lab: Lab) -> dict[str, Any]:
    """Admin state, MTU, alias and HTB class of every link end, OVS's interface MTUs and
    its ports' bridges and numbers, and fault leftovers in every host's namespace, in the
    root one (link faults on switch ports) and on every switch."""
    ends = {}
    for ln in PLAN.links:
        for n, i in ((ln.a, ln.a_intf), (ln.b, ln.b_intf)):
            info = link_info(lab, n, i)
            ends[f"{n}/{i}"] = ("UP" in info["flags"], info["mtu"], info.get("ifalias"),
                                htb_line(lab, n, i))
    sh = FaultInjector(lab).context.sh
    left = {h: sorted({*leftovers(sh, h), *cleanup.fault_leftovers(sh, h)})
            for h in lab.hosts}
    left["root"] = cleanup.fault_leftovers(sh)
    rules = {s.name: blackhole_rules(sh, s.name) for s in PLAN.switches}
    return {"ends": ends, "ovs": ovs_interfaces(), "ports": ovs_ports(),
            "leftovers": {h: v for h, v in left.items() if v},
            "rules": {s: r for s, r in rules.items() if r}}


@pytest.fixture(scope="module")
def baseline(lab: Lab) -> dict[str, Any]:
    state = fabric_state(lab)
    assert all(e[0] and e[1] == lab.mtu for e in state["ends"].values())
    assert not state["leftovers"] and not state["rules"]
    return state


@pytest.fixture
def injector(lab: Lab, baseline: dict[str, Any]) -> Iterator[FaultInjector]:
    with FaultInjector(lab) as inj:
        yield inj
    assert not inj.active
    assert fabric_state(lab) == baseline  # exactly as before: links, rates, no leftovers
    lab.wait_converged(timeout=30)


def stream(lab: Lab, src: str, dst: str, sports: range, pps: float, duration: float,
           size: int = 200, port: int | None = None) -> Stream:
    return Stream(lab, src, dst, sports=sports, pps=pps, duration=duration,
                  port=port or next(_ports), size=size)


def received(st: Stream) -> int:
    return sum(f["received"] for f in st.result["flows"].values())


def test_link_down_cuts_both_ends_and_traffic_is_rerouted(lab: Lab,
                                                          injector: FaultInjector) -> None:
    link = faultspec.parse_target(PLAN, "lf0r0~spine1").link
    with stream(lab, "s0g0", "s2g1", range(50000, 50016), pps=100, duration=3.0) as st:
        time.sleep(1.0)
        t_cut = time.time()
        h = injector.inject(Fault("link-down", "spine1~lf0r0"))
        time.sleep(0.5)
        assert link_state(lab, link.a, link.a_intf) == (False, "DOWN")
        assert link_state(lab, link.b, link.b_intf) == (False, "DOWN")
        health = lab.health()
        assert {f"{link.a}:{link.a_port}", f"{link.b}:{link.b_port}"} <= set(
            health["down_ports"])
        assert any(r["at"] >= t_cut and not r["up"] for r in health["reroutes"]), health
        rows = {r["name"]: r["state"] for r in lab.client().links()["links"]}
        assert rows[link.name] == "down"
    for sport, f in st.result["flows"].items():  # every flow kept arriving after the cut
        assert f["last"] > t_cut + 1.0 and f["max_gap_s"] < 1.0, (sport, f)
    injector.undo(h)
    assert link_state(lab, link.a, link.a_intf) == (True, "UP")
    assert link_state(lab, link.b, link.b_intf) == (True, "UP")
    time.sleep(0.3)
    assert {r["name"]: r["state"] for r in lab.client().links()["links"]}[link.name] == "up"
    assert [e["action"] for e in injector.events] == ["inject", "undo"]
    assert injector.events[0]["component"] == "lf0r0~spine1#0"


def _timed_set_link(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """Each ``lab.set_link`` call's wall-clock start and end, in order. On a busy machine one
    link command can take a good part of a phase, so the kernel's edges are checked against
    the windows the commands took here, not against the plan with a fixed tolerance (that the
    schedule absorbs a slow command is a unit test's, on a fake clock)."""
    calls: list[tuple[float, float]] = []
    real = lab.set_link

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.time()
        try:
            return real(*args, **kwargs)
        finally:
            calls.append((t0, time.time()))

    monkeypatch.setattr(lab, "set_link", timed)
    return calls


class _Operstate:
    """Polls interfaces' operstate every 5 ms in a thread: the lane is up when every end is
    ("lowerlayerdown", a peer gone first, counts as down). Records each change with the time
    of the sample that saw it and of the sample before (the edge lies between the two)."""

    def __init__(self, intfs: list[str]) -> None:
        self.paths = [f"/sys/class/net/{i}/operstate" for i in intfs]
        self.changes: list[tuple[float, float, str]] = []  # (previous sample, seen, state)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        prev = time.time()
        while not self._stop.is_set():
            states = []
            for path in self.paths:
                with open(path) as fh:
                    states.append(fh.read().strip())
            now = time.time()
            state = "up" if all(st == "up" for st in states) else "down"
            if not self.changes or self.changes[-1][2] != state:
                self.changes.append((prev, now, state))
            prev = now
            time.sleep(0.005)

    def __enter__(self) -> _Operstate:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def states(self) -> list[str]:
        return [st for _, _, st in self.changes]


#: Seconds the kernel may take to show a link's new operstate after the command that set it
#: returned (its link watcher runs deferred).
OPERSTATE_LAG_S = 0.15
#: Slack on "no command before its planned offset from the first": offsets are taken from
#: the first command's start, which comes a few statements after the schedule's clock read.
FIRST_START_SLACK_S = 0.05


def _edges_inside_their_commands(seen: _Operstate, calls: list[tuple[float, float]]) -> None:
    """Each edge the kernel showed (after the first, "up" before the fault) came while the
    injector's command for it ran: after the command began, and before it returned (plus the
    kernel's lag)."""
    edges = seen.changes[1:]
    assert len(edges) == len(calls), (edges, calls)
    for (before, at, state), (t0, t1) in zip(edges, calls, strict=True):
        assert at >= t0 and before <= t1 + OPERSTATE_LAG_S, (state, before, at, t0, t1)


def test_link_flap_goes_down_and_up_count_times(lab: Lab, injector: FaultInjector,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    link = faultspec.parse_target(PLAN, "lf1r1~spine3").link
    calls = _timed_set_link(lab, monkeypatch)
    fault = Fault("link-flap", "lf1r1~spine3", period=0.6, count=3)
    with _Operstate([link.b_intf]) as seen:
        h = injector.inject(fault)
        assert h.wait(10)
    assert seen.states() == ["up", "down"] * 3 + ["up"], seen.changes
    acts = [e["action"] for e in injector.events]
    assert acts == ["inject"] + ["flap-down", "flap-up"] * 3 + ["undo"]
    _edges_inside_their_commands(seen, calls)
    # each command went out no earlier than its planned offset from the first
    planned = [0.3 * k for k in range(len(calls))]
    starts = [t0 - calls[0][0] for t0, _ in calls]
    assert all(s >= p - FIRST_START_SLACK_S for s, p in zip(starts, planned, strict=True)), \
        (starts, planned)


def test_a_gray_link_flap_flaps_at_its_irregular_intervals(lab: Lab, injector: FaultInjector,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A gray flap drawn by ``random_schedule``: 3 flaps, each phase stretched or shortened
    by up to 69% (0.57-1.64 s). Both ends' operstate, polled every 5 ms from the kernel,
    go down and up while the injector's commands for those phases run, the commands go out
    at the phases' planned offsets (never before), and the lane ends up."""
    (f,) = faultspec.random_schedule(PLAN, kinds=["link-flap"], n=1, duration_s=8, seed=0,
                                     min_gap_s=1, severity="gray")
    want = phases(f.settings)
    assert f.settings.jitter > 0.5 and max(want) - min(want) > 1.0  # irregular by design
    link = faultspec.parse_target(PLAN, f.target).link
    calls = _timed_set_link(lab, monkeypatch)
    with _Operstate([link.a_intf, link.b_intf]) as seen:
        time.sleep(0.1)
        h = injector.inject(f)
        assert h.wait(30)
        time.sleep(0.3)
    assert seen.states() == ["up"] + ["down", "up"] * f.settings.count, seen.changes
    _edges_inside_their_commands(seen, calls)
    planned = [sum(want[:k]) for k in range(len(calls))]
    starts = [t0 - calls[0][0] for t0, _ in calls]
    print("gray flap: planned offsets (s)", [round(x, 3) for x in planned],
          "commands went out at", [round(x, 3) for x in starts])
    assert all(s >= p - FIRST_START_SLACK_S for s, p in zip(starts, planned, strict=True)), \
        (starts, planned)
    flaps = [e for e in injector.events if e["action"].startswith("flap-")]
    assert [e["action"] for e in flaps] == ["flap-down", "flap-up"] * f.settings.count
    # the injector logs each edge once its command has returned
    assert all(t1 <= e["time"] for (_, t1), e in zip(calls, flaps, strict=True))
    for node, intf in ((link.a, link.a_intf), (link.b, link.b_intf)):
        assert link_state(lab, node, intf) == (True, "UP")
    assert injector.events[0]["detail"]["jitter"] == f.settings.jitter


def test_link_degrade_cuts_a_lanes_measured_rate_to_the_fraction(lab: Lab,
                                                                  injector: FaultInjector
                                                                  ) -> None:
    """A 10 Mb/s stream pinned on one 20 Mb/s lane; the lane degraded to 25% (5 Mb/s).

    The lane's queue is deep (2 s of its rate), so nothing is dropped: packets leave at
    the degraded rate, and the receiver's arrival rate is that rate. HTB counts whole
    frames (1,042 bytes for a 1,000-byte payload), so the payload arrives at
    5 x 1000/1042 Mb/s. Tolerance 10%: measured 4.79-4.81 Mb/s over repeated runs (HTB's
    burst and the userspace switch's batching add jitter at the start, not to the rate).
    """
    c = lab.client()
    sport = 50100
    c.post_traffic([{"src": "s0g0", "dst": "s2g1", "sport": sport, "bytes": 10**7}])
    c.wait_converged()
    try:
        hop = c.paths("s0g0", "s2g1", sport=sport)["path"][0]
        assert hop["switch"] == "lf0r0"
        lane = PLAN.ports()["lf0r0"][hop["out_port"]][2]
        target = faultspec.link_name(PLAN, lane)
        before = [htb_line(lab, lane.a, lane.a_intf), htb_line(lab, lane.b, lane.b_intf)]
        h = injector.inject(Fault("link-degrade", target, fraction=0.25))
        for node, intf in ((lane.a, lane.a_intf), (lane.b, lane.b_intf)):
            assert parse_htb_rate(htb_line(lab, node, intf)) == pytest.approx(5.0)
        pps = 10e6 / 8 / 1042  # 10 Mb/s of frames, twice what the lane now carries
        with stream(lab, "s0g0", "s2g1", range(sport, sport + 1), pps=pps, duration=2.5,
                    size=1000) as st:
            pass
        f = st.result["flows"][str(sport)]
        mbps = (f["received"] - 1) * 1000 * 8 / (f["last"] - f["first"]) / 1e6
        print(f"degraded lane {target}: {mbps:.2f} Mb/s of payload (expect {5e3 / 1042:.2f})")
        assert mbps == pytest.approx(5.0 * 1000 / 1042, rel=0.10)
        assert c.paths("s0g0", "s2g1", sport=sport)["path"][0] == hop  # it stayed on the lane
        injector.undo(h)
        assert [htb_line(lab, lane.a, lane.a_intf), htb_line(lab, lane.b, lane.b_intf)] == before
        assert injector.events[0]["detail"]["mbps"] == [5.0, 5.0]
    finally:
        c.clear_traffic()
        time.sleep(2.0)  # the lane's backlog drains at full rate before the next test


def loss_of(st: Stream) -> float:
    sent = st.sent["sent_per_sport"] * len(st.sports)
    return 1 - received(st) / sent


def within(p: float, n: int, loss: float, sigmas: float = 5.0) -> bool:
    return abs(loss - p) <= sigmas * (p * (1 - p) / n) ** 0.5


def test_nic_loss_drops_both_directions_at_the_probability(lab: Lab,
                                                           injector: FaultInjector) -> None:
    """p = 0.2 on s0g0's NIC: 2,400 packets each way, loss within 5 sigma (+-0.041)."""
    h = injector.inject(Fault("nic-loss", "s0g0", probability=0.2))
    assert h.info["backend"] == "nft"
    inbound = stream(lab, "s2g1", "s0g0", range(50200, 50204), pps=200, duration=3.0).start()
    outbound = stream(lab, "s0g0", "s2g1", range(50300, 50304), pps=200, duration=3.0).start()
    try:
        inbound.wait()
        outbound.wait()
    finally:
        inbound.stop()
        outbound.stop()
    for st in (inbound, outbound):
        n = st.sent["sent_per_sport"] * 4
        print(f"nic-loss p=0.2 {st.src}->{st.dst}: {loss_of(st):.3f} of {n} lost")
        assert n >= 2000 and within(0.2, n, loss_of(st)), (n, loss_of(st))
        assert st.sent["errors"] == 0  # egress loss is silent: the sender is not told
    # ARP is not dropped: with every IPv4 frame lost, the neighbour still resolves
    injector.undo(h)
    h = injector.inject(Fault("nic-loss", "s0g0", probability=1.0))
    peer = str(PLAN.node("s2g1").ip)
    host_sh(lab, "s0g0", "ip", "neigh", "flush", "dev", "s0g0-eth0")
    ping = host_sh(lab, "s0g0", "ping", "-c", "2", "-i", "0.2", "-W", "1", peer)
    assert ping.returncode != 0 and " 0 received" in ping.stdout, ping.stdout
    neigh = host_sh(lab, "s0g0", "ip", "neigh", "show", peer).stdout
    assert "lladdr" in neigh and "FAILED" not in neigh, neigh
    injector.undo(h)
    dropped = injector.events[-1]["detail"]["dropped"]
    assert dropped["egress"] >= 2 and set(dropped) == {"ingress", "egress"}
    assert host_sh(lab, "s0g0", "fping", "-q", "-c", "20", "-p", "20", peer
                   ).returncode == 0  # no loss once undone


def test_nic_loss_with_the_iptables_fallback(lab: Lab, baseline: dict[str, Any]) -> None:
    with FaultInjector(lab, nic_loss_backend="iptables") as inj:
        h = inj.inject(Fault("nic-loss", "s3g1", probability=0.3, direction="ingress"))
        left = leftovers(inj.context.sh, "s3g1")
        assert left == ["iptables chain ASTRAL_LAB_FAULTS_IN"]
        with stream(lab, "s1g0", "s3g1", range(50400, 50404), pps=200, duration=2.0) as st:
            pass
        n = st.sent["sent_per_sport"] * 4
        print(f"nic-loss (iptables) p=0.3 ingress: {loss_of(st):.3f} of {n} lost")
        assert within(0.3, n, loss_of(st)), (n, loss_of(st))
        inj.undo(h)
        assert inj.events[-1]["detail"]["dropped"]["ingress"] == n - received(st)
    assert fabric_state(lab) == baseline


@contextlib.contextmanager
def pinned(lab: Lab, src: str, dst: str, sport: int) -> Iterator[tuple[Link, int]]:
    """A flow ``src`` -> ``dst`` from ``sport`` to a fresh port, pinned by the planned
    controller (an exact 5-tuple match); yields the leaf-spine lane it leaves the source
    leaf on (the lane's ``a`` end sends it) and the port."""
    c = lab.client()
    port = next(_ports)
    c.post_traffic([{"src": src, "dst": dst, "sport": sport, "dport": port, "bytes": 10**7}])
    c.wait_converged()
    try:
        hop = c.paths(src, dst, sport=sport, dport=port)["path"][0]
        lane = PLAN.ports()[hop["switch"]][hop["out_port"]][2]
        assert lane.kind == "lane" and lane.a == hop["switch"], lane
        yield lane, port
        assert c.paths(src, dst, sport=sport, dport=port)["path"][0] == hop  # stayed there
    finally:
        c.clear_traffic()


def port_packets(lane: Link) -> tuple[int, int]:
    """(frames sent by the lane's ``a`` port, frames received by its ``b`` port): the
    kernel's counters of the two switch ports (root namespace)."""
    got = []
    for intf, what in ((lane.a_intf, "tx_packets"), (lane.b_intf, "rx_packets")):
        with open(f"/sys/class/net/{intf}/statistics/{what}") as fh:
            got.append(int(fh.read()))
    return got[0], got[1]


def ip_counters(lab: Lab, host: str) -> dict[str, int]:
    """The host kernel's IP counters (``/proc/net/snmp`` and ``netstat``), read from its
    namespace as the telemetry collector reads them."""
    pid = lab.hosts[host].pid
    with open(f"/proc/{pid}/net/snmp") as a, open(f"/proc/{pid}/net/netstat") as b:
        return parse_snmp(a.read() + b.read())


def test_gray_loss_drops_one_way_on_a_lane_at_the_probability(lab: Lab,
                                                             injector: FaultInjector) -> None:
    """p = 0.05 leaf -> spine on the lane a pinned flow takes: 3,000 packets, loss within
    5 sigma (+-0.02); the switch port's rule counted exactly the frames the stream lost,
    the sender was not told, neither port counted them, and once undone nothing is
    lost."""
    sport = 50600
    with pinned(lab, "s0g0", "s2g1", sport) as (lane, port):
        target = faultspec.link_name(PLAN, lane)
        h = injector.inject(Fault("gray-loss", target, probability=0.05, direction="a-to-b"))
        assert injector.events[-1]["detail"]["interfaces"] == [lane.a_intf]
        before = port_packets(lane)
        with stream(lab, "s0g0", "s2g1", range(sport, sport + 1), pps=1000, duration=3.0,
                    port=port) as st:
            pass
        tx, rx = (x - b for x, b in zip(port_packets(lane), before, strict=True))
        injector.undo(h)
        dropped = injector.events[-1]["detail"]["dropped"]
        with stream(lab, "s0g0", "s2g1", range(sport, sport + 1), pps=500, duration=1.0,
                    port=port) as clean:
            pass
    n = st.sent["sent_per_sport"]
    lost = n - received(st)
    print(f"gray-loss p=0.05 a-to-b on {target}: {lost} of {n} lost, rule counted {dropped}")
    assert n >= 2500 and within(0.05, n, lost / n), (n, lost)
    assert dropped == {"a-to-b": lost} and st.sent["errors"] == 0
    assert tx == rx >= n - lost  # the lost frames left no trace in either port's counters
    assert received(clean) == clean.sent["sent_per_sport"]


def test_gray_loss_on_a_nic_cable_both_ways_at_a_gray_setting(lab: Lab,
                                                             injector: FaultInjector) -> None:
    """p = 0.01 (the gray range's top) both ways on s0g0's cable: the host's NIC drops
    what it sends (its namespace), the leaf's port what it sends toward the host (root
    namespace). 3,200 packets each way: a few dozen lost, within 5 sigma. ARP is not
    dropped: with every IPv4 frame lost both ways the neighbour still resolves."""
    h = injector.inject(Fault("gray-loss", "lf0r0~s0g0", probability=0.01))
    inbound = stream(lab, "s2g1", "s0g0", range(50700, 50704), pps=200, duration=4.0).start()
    outbound = stream(lab, "s0g0", "s2g1", range(50710, 50714), pps=200, duration=4.0).start()
    try:
        inbound.wait()
        outbound.wait()
    finally:
        inbound.stop()
        outbound.stop()
    injector.undo(h)
    dropped = injector.events[-1]["detail"]["dropped"]
    lost = {}
    for way, st in (("a-to-b", outbound), ("b-to-a", inbound)):
        n = st.sent["sent_per_sport"] * 4
        lost[way] = n - received(st)
        print(f"gray-loss p=0.01 {way} on s0g0~lf0r0#0: {lost[way]} of {n} lost")
        assert n >= 2500 and lost[way] > 0 and within(0.01, n, lost[way] / n), (n, lost)
        assert st.sent["errors"] == 0
    assert dropped == lost
    h = injector.inject(Fault("gray-loss", "s0g0~lf0r0", probability=1.0))
    peer = str(PLAN.node("s2g1").ip)
    host_sh(lab, "s0g0", "ip", "neigh", "flush", "dev", "s0g0-eth0")
    ping = host_sh(lab, "s0g0", "ping", "-c", "2", "-i", "0.2", "-W", "1", peer)
    assert ping.returncode != 0 and " 0 received" in ping.stdout, ping.stdout
    neigh = host_sh(lab, "s0g0", "ip", "neigh", "show", peer).stdout
    assert "lladdr" in neigh and "FAILED" not in neigh, neigh
    injector.undo(h)
    assert host_sh(lab, "s0g0", "fping", "-q", "-c", "20", "-p", "20", peer
                   ).returncode == 0  # no loss once undone


def test_corruption_is_dropped_and_counted_by_the_receivers_kernel(lab: Lab,
                                                                  injector: FaultInjector
                                                                  ) -> None:
    """p = 0.05 on the lane a pinned flow takes: corrupted frames cross the spine and the
    far leaf (OVS forwards them) and the receiving host's IP layer drops them, counting
    each in ``Ip: InHdrErrors`` and ``IpExt: InCsumErrors``: exactly the frames the stream
    lost and the rule corrupted, within 5 sigma of the knob. Once undone, none."""
    sport = 50800
    with pinned(lab, "s0g0", "s2g1", sport) as (lane, port):
        target = faultspec.link_name(PLAN, lane)
        h = injector.inject(Fault("corruption", target, probability=0.05))
        before = ip_counters(lab, "s2g1")
        with stream(lab, "s0g0", "s2g1", range(sport, sport + 1), pps=1000, duration=3.0,
                    port=port) as st:
            pass
        after = ip_counters(lab, "s2g1")
        injector.undo(h)
        corrupted = injector.events[-1]["detail"]["corrupted"]
        with stream(lab, "s0g0", "s2g1", range(sport, sport + 1), pps=500, duration=1.0,
                    port=port) as clean:
            pass
        final = ip_counters(lab, "s2g1")
    n = st.sent["sent_per_sport"]
    lost = n - received(st)
    counted = {k: after[k] - before[k] for k in ("Ip.InHdrErrors", "IpExt.InCsumErrors")}
    print(f"corruption p=0.05 on {target}: {lost} of {n} lost; receiver counted {counted}; "
          f"rules corrupted {corrupted}")
    assert n >= 2500 and within(0.05, n, lost / n), (n, lost)
    assert counted == {"Ip.InHdrErrors": lost, "IpExt.InCsumErrors": lost}
    assert corrupted["a-to-b"] == lost
    assert received(clean) == clean.sent["sent_per_sport"]
    assert final["Ip.InHdrErrors"] == after["Ip.InHdrErrors"]


def test_switch_down_isolates_its_hosts_only_and_restores_exactly(lab: Lab,
                                                                  injector: FaultInjector
                                                                  ) -> None:
    """lf1r0 carries s2g0 and s3g0. A lane of it is already down (another fault): the
    switch's undo must leave that lane down, and the lane's own undo brings it back."""
    sw = "lf1r0"
    mine = [ln for ln in PLAN.links if sw in (ln.a, ln.b)]
    lane = injector.inject(Fault("link-down", "lf1r0~spine0"))
    h = injector.inject(Fault("switch-down", sw))
    assert injector.events[-1]["detail"] == {"links_down": len(mine) - 1, "links": len(mine)}
    for ln in mine:
        for node, intf in ((ln.a, ln.a_intf), (ln.b, ln.b_intf)):
            assert link_state(lab, node, intf)[1] == "DOWN", intf
    r = lab.reachability(retries=1)
    cut = {"s2g0", "s3g0"}
    assert sorted(r.failed) == sorted((a, b) for a, b in itertools.permutations(
        [n.name for n in PLAN.hosts], 2) if {a, b} & cut)
    assert r.received == 56 - 26  # every pair that does not need lf1r0 still reaches
    injector.undo(h)
    spine0 = faultspec.parse_target(PLAN, "lf1r0~spine0").link
    assert link_state(lab, spine0.a, spine0.a_intf) == (False, "DOWN")
    for ln in mine:
        if ln is not spine0:
            assert link_state(lab, ln.a, ln.a_intf) == (True, "UP")
    injector.undo(lane)
    lab.wait_converged(timeout=30)
    assert lab.reachability().received == 56


def alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}") and "zombie" not in open(f"/proc/{pid}/status").read()


def test_controller_kill_and_restart(lab: Lab, injector: FaultInjector) -> None:
    old = lab.controller_proc.pid
    h = injector.inject(Fault("controller-kill"))
    assert not alive(old) and lab.health() is None
    # the switches keep forwarding on their own
    with stream(lab, "s0g0", "s3g1", range(50500, 50504), pps=100, duration=1.0) as st:
        pass
    assert received(st) == st.sent["sent_per_sport"] * 4
    injector.undo(h)
    new = lab.controller_proc.pid
    assert new != old and alive(new) and lab.health()["converged"]
    h = injector.inject(Fault("controller-restart", duration=1.0))
    assert not alive(new)
    assert h.wait(60)
    assert alive(lab.controller_proc.pid) and lab.controller_proc.pid != new
    assert lab.health()["converged"]
    inj_t, undo_t = (e["time"] for e in injector.events if e["kind"] == "controller-restart")
    assert undo_t - inj_t >= 1.0
    assert [e["component"] for e in injector.events] == ["controller"] * 4


def test_a_random_schedule_plays_on_the_fabric_and_stop_undoes(lab: Lab,
                                                               injector: FaultInjector) -> None:
    sched = faultspec.random_schedule(PLAN, kinds=["link-down", "link-degrade", "nic-loss"], n=3,
                                      duration_s=4.5, seed=5, min_gap_s=0.3)
    t0 = time.time()
    run = injector.run_schedule(sched)
    assert run.wait(30) and not run.errors
    evs = run.events
    # each fault's own inject and undo; a late undo may land after the next fault's inject
    # on a busy machine (the faults are 0.3 s apart), so there is no one global order
    by_id: dict[int, list[dict[str, Any]]] = {}
    for e in evs:
        by_id.setdefault(e["fault_id"], []).append(e)
    assert [h.component for h in run.handles] == [f.component for f in sched]
    assert [[e["action"] for e in by_id[h.id]] for h in run.handles] == [["inject", "undo"]] * 3
    for f, h in zip(sched, run.handles, strict=True):
        ev_in, ev_out = by_id[h.id]
        assert f.at - 0.05 <= ev_in["t"] <= f.at + 1.0, (f, ev_in)
        assert ev_out["time"] - ev_in["time"] >= f.duration
    assert max(e["time"] for e in evs) - t0 < 10
    # an open-ended fault is still active when the schedule has played out; stop undoes it
    run = injector.run_schedule([Fault("nic-loss", "s1g1", probability=0.5, at=0.2)])
    assert run.wait(5)
    assert run.handles[0].active and leftovers(injector.context.sh, "s1g1")
    assert run.stop() == []
    assert not run.handles[0].active


def test_cleanup_faults_removes_what_a_crashed_injector_left(lab: Lab,
                                                             baseline: dict[str, Any]) -> None:
    inj = FaultInjector(lab)
    inj.inject(Fault("nic-loss", "s2g0", probability=0.1))
    inj.inject(Fault("gray-loss", "lf1r1~spine3", probability=0.1))  # root namespace
    inj.inject(Fault("corruption", "s1g0~lf0r0", probability=0.1))  # s1g0's and root
    hot = inj.inject(Fault("hot-receiver", "s1g1", senders=2, overload=0.5))
    inj.inject(Fault("partial-blackhole", "spine2", share=0.25))
    low = inj.inject(Fault("mtu-mismatch", "lf1r1~spine3", mtu=2200))
    crossed = inj.inject(Fault("shuffle-miswiring", "lf0r1~spine0", seed=1))
    procs = [p.pid for p in hot.info["procs"]]
    assert len(procs) == 3 and all(alive(p) for p in procs)
    assert len(cleanup.fault_leftovers(inj.context.sh)) == 5  # 3 tables, 2 sinks
    assert blackhole_rules(inj.context.sh, "spine2")
    assert link_info(lab, "spine3", low.info["intf"])["mtu"] == 2200
    assert len(miswired(check_wiring(lab))) == 2 and crossed.active
    # the injector "crashes": nothing is undone; the cleanup hook finds it all
    done = cleanup.cleanup_faults(host_pids=[h.pid for h in lab.hosts.values()],
                                  runs=[lab.run_id], kinds=INJECTORS.all().values())
    assert done == {"namespaces": 3, "processes": 3, "switches": 1, "ports": 3}
    assert not any(alive(p) for p in procs)
    assert fabric_state(lab) == baseline
    assert check_wiring(lab) == []
    assert inj.undo_all() == []  # undoing what is already gone is harmless


def test_hot_receiver_incast_saturates_the_targets_nic(lab: Lab,
                                                       injector: FaultInjector) -> None:
    """s0g0's experts are hot: 6 GPUs on the other servers send it 1.5x its 40 Mb/s NIC.

    The leaf port toward it runs at line rate (the detectors' signal) and it receives
    from every source; its queue is deep, so the excess waits (and drains after undo).
    """
    h = injector.inject(Fault("hot-receiver", "s0g0", overload=1.5, duration=3.0))
    srcs = h.info["detail"]["sources"]
    assert len(srcs) == 6 and not {"s0g0", "s0g1"} & set(srcs)
    time.sleep(2.0)
    port = PLAN.ports()["s0g0"][0][1]  # the leaf's port toward the target
    tx = lab.client().port_stats("lf0r0")["lf0r0"][str(port)]["tx_mbps"]
    print(f"hot-receiver: leaf port toward s0g0 at {tx:.1f} Mb/s of 40")
    assert tx >= 0.85 * 40, tx
    assert h.wait(30)
    got = injector.events[-1]["detail"]["received_packets"]
    assert set(got) == set(srcs) and min(got.values()) > 100, got
    procs = h.info["procs"]
    assert all(p.poll() is not None for p in procs)
    assert not [p for p, run in cleanup.fault_processes().items() if run == lab.run_id]
    time.sleep(1.5)  # the leaf port's backlog toward s0g0 drains


def pinned_paths(lab: Lab, src: str, dst: str, sports: range, port: int) -> dict[int, list[str]]:
    """Pin ``src -> dst`` flows (planned mode) with the probe's destination port, so the
    stream's packets take the controller's paths; ``sport -> switches crossed``."""
    c = lab.client()
    c.post_traffic([{"src": src, "dst": dst, "sport": p, "dport": port, "bytes": 10**7}
                    for p in sports])
    c.wait_converged()
    return {p: [hop["switch"] for hop in c.paths(src, dst, sport=p, dport=port)["path"]]
            for p in sports}


def test_partial_blackhole_drops_exactly_the_matched_flows_through_its_switch(
        lab: Lab, injector: FaultInjector) -> None:
    """64 pinned flows s0g0 -> s2g1 spread over the 4 spines; the spine most of them cross
    drops 3/8 of the source ports: exactly the matched flows through it vanish, every other
    flow (matched ones on other spines too) arrives in full, pings pass. The rules outlive
    a controller restart (its resync leaves foreign cookies alone); undo leaves none."""
    sports, port = range(50600, 50664), next(_ports)
    try:
        crossed = pinned_paths(lab, "s0g0", "s2g1", sports, port)
        matches = partial_blackhole.port_matches(0.375, 3)
        matched = {p for p in sports if partial_blackhole.dropped(p, matches)}

        def lost_on(spine: str) -> set[int]:
            return {p for p in matched if spine in crossed[p]}

        # the spine whose flows the matches hit most (paths follow the ports' low bits,
        # as the matches do, so on some spines they hit all flows or none)
        spines = sorted({sw for p in sports for sw in crossed[p] if sw.startswith("spine")})
        target = max(spines, key=lambda sw: len(lost_on(sw)))
        lost = lost_on(target)
        elsewhere = matched - lost
        assert lost and elsewhere, (target, crossed)
        h = injector.inject(Fault("partial-blackhole", target, share=0.375, seed=3))
        assert h.info["matches"] == matches
        with stream(lab, "s0g0", "s2g1", sports, pps=10, duration=2.0, port=port) as st:
            pass
        sent = st.sent["sent_per_sport"]
        got = {int(p): f["received"] for p, f in st.result["flows"].items()}
        print(f"partial-blackhole on {target}, share 3/8 {matches}: {len(lost)} of 64 flows "
              f"lost, {len(elsewhere)} matched flows on other spines arrived")
        assert set(got) == set(sports) - lost  # none of a lost flow's packets arrives
        assert all(n == sent for n in got.values()), got  # all the others in full
        assert lab.reachability(retries=1).received == 56  # ICMP passes
        lab.restart_controller()
        assert sorted(r[:2] for r in blackhole_rules(injector.context.sh, target)) == \
            sorted(matches)
        assert lab.health()["resync"]["entries_del"] == 0
        injector.undo(h)
        assert injector.events[-1]["detail"]["dropped"] == len(lost) * sent
        assert blackhole_rules(injector.context.sh, target) == []
        with stream(lab, "s0g0", "s2g1", sports, pps=10, duration=1.0, port=port) as st:
            pass
        assert received(st) == st.sent["sent_per_sport"] * 64  # everything passes again
    finally:
        lab.client().clear_traffic()


def test_mtu_mismatch_drops_full_frames_toward_the_lowered_end(lab: Lab,
                                                               injector: FaultInjector
                                                               ) -> None:
    """One lane's spine end at MTU 1500: full-size frames (a 4,096-byte RoCE payload's
    4,170) from the leaf die on arrival, counted by the kernel; 1,000-byte frames and
    pings pass. Undo puts the kernel's and OVS's MTUs back exactly and everything passes."""
    sport, port = 50700, next(_ports)
    try:
        hops = pinned_paths(lab, "s0g0", "s2g1", range(sport, sport + 1), port)[sport]
        lane = faultspec.parse_target(PLAN, f"{hops[0]}~{hops[1]}").link
        target = faultspec.link_name(PLAN, lane)
        ovs_before = ovs_interfaces()
        h = injector.inject(Fault("mtu-mismatch", target, mtu=1500))
        assert h.info["intf"] == lane.b_intf  # the spine's end: frames going up die
        assert set(h.info["ovs"]) == {lane.b_intf, lane.b}  # OVS's view was read: port, bridge
        assert link_info(lab, lane.b, lane.b_intf)["mtu"] == 1500
        before = link_info(lab, lane.b, lane.b_intf)["stats64"]["rx"]["dropped"]
        full = frame_len(OP_WRITE_FIRST, LAB_PMTU) - 14 - 20 - 8  # UDP payload of a full frame
        sizes = {}
        for size in (full, 1000):
            with stream(lab, "s0g0", "s2g1", range(sport, sport + 1), pps=20,
                        duration=1.0, size=size, port=port) as st:
                pass
            sizes[size] = (st.sent["sent_per_sport"], received(st))
        dropped = link_info(lab, lane.b, lane.b_intf)["stats64"]["rx"]["dropped"] - before
        print(f"mtu-mismatch on {target} (1500): {sizes}, {dropped} counted dropped")
        assert sizes[full][1] == 0 and dropped == sizes[full][0]
        assert sizes[1000][1] == sizes[1000][0]
        peer = str(PLAN.node("s2g1").ip)
        assert host_sh(lab, "s0g0", "fping", "-q", "-c", "5", "-p", "20", peer).returncode == 0
        injector.undo(h)
        assert injector.events[-1]["detail"] == {"mtu": lab.mtu, "rx_dropped": dropped}
        assert link_info(lab, lane.b, lane.b_intf)["mtu"] == lab.mtu
        assert ovs_interfaces() == ovs_before  # OVS's view too, internal ports included
        with stream(lab, "s0g0", "s2g1", range(sport, sport + 1), pps=20, duration=1.0,
                    size=full, port=port) as st:
            pass
        assert received(st) == st.sent["sent_per_sport"]  # full frames pass again
    finally:
        lab.client().clear_traffic()


def of_rx(switch: str, port: int) -> int:
    """Frames Open vSwitch counted in on ``switch``'s OpenFlow port ``port``."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", switch, str(port)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split("rx pkts=")[1].split(",")[0])


def test_shuffle_miswiring_sends_traffic_through_the_wrong_spine_and_the_check_finds_it(
        lab: Lab, injector: FaultInjector) -> None:
    """lf0r0's lanes to spine0 and spine1 crossed at their spine ends: the flows the
    controller pins through spine0 arrive, in full, through spine1's port (OVS's counters),
    every host still reaches every other, and only the frames of the two lanes arrive
    elsewhere than planned; undo puts the ports back on their bridges at their numbers
    and the check finds nothing."""
    assert check_wiring(lab) == []
    lane = faultspec.parse_target(PLAN, "lf0r0~spine0").link
    sports, port = range(50800, 50816), next(_ports)
    before = ovs_ports()
    h = injector.inject(Fault("shuffle-miswiring", "lf0r0~spine0#0", seed=2))
    other = partner(PLAN, lane, 2)
    try:
        assert h.info["partner"] == other and (other.a, other.b) == ("lf0r0", "spine1")
        now = ovs_ports()
        assert now[lane.b_intf] == before[other.b_intf]
        assert now[other.b_intf] == before[lane.b_intf]
        crossed = (lane.b_intf, other.b_intf)
        assert {k: v for k, v in now.items() if k not in crossed} == \
            {k: v for k, v in before.items() if k not in crossed}
        lab.wait_converged(timeout=30)
        # flows s0g0 -> s2g0 pinned by the plan: those through spine0 leave lf0r0 by the lane
        paths = pinned_paths(lab, "s0g0", "s2g0", sports, port)
        via = [p for p in sports if paths[p][1] == lane.b]
        assert via, paths
        planned_rx, wrong_rx = of_rx(lane.b, lane.b_port), of_rx(other.b, other.b_port)
        with stream(lab, "s0g0", "s2g0", range(via[0], via[0] + 1), pps=20, duration=1.0,
                    port=port) as st:
            pass
        sent = st.sent["sent_per_sport"]
        planned_rx = of_rx(lane.b, lane.b_port) - planned_rx
        wrong_rx = of_rx(other.b, other.b_port) - wrong_rx
        found = check_wiring(lab)
        reach = lab.reachability(retries=1)
        names = faultspec.link_name(PLAN, lane), faultspec.link_name(PLAN, other)
        print(f"shuffle-miswiring {names[0]} x {names[1]}: "
              f"flow pinned via {paths[via[0]]}: {received(st)}/{sent} received, {wrong_rx} "
              f"in at {other.b}:{other.b_port}, {planned_rx} at {lane.b}:{lane.b_port}; "
              f"pings {reach.received}/{reach.pairs}; check: {[f.to_dict() for f in found]}")
        assert received(st) == sent  # traffic flows ...
        assert wrong_rx >= sent and planned_rx < sent  # ... through the wrong spine
        assert reach.failed == []
        assert miswired(found) == sorted(names)
        seen = {f.sent: f.seen for f in found}
        assert seen == {(lane.a, lane.a_port): (other.b, other.b_port),
                        (other.a, other.a_port): (lane.b, lane.b_port),
                        (lane.b, lane.b_port): (other.a, other.a_port),
                        (other.b, other.b_port): (lane.a, lane.a_port)}
    finally:
        lab.client().clear_traffic()
    injector.undo(h)
    assert ovs_ports() == before
    assert check_wiring(lab) == []
