"""Interface discards as an operator's switch shows them: the collector's ``rxdrops_*`` and
the link-drops detector that reads them (the signal of an mtu-mismatch fault).

The collector is fed fake ``/proc/net/dev`` and ``/sys`` files through its public seam
(``read_kernel_file``); the detector runs on synthetic histories through the ``Engine``.
"""

from __future__ import annotations

import random

import pytest
from test_ops_detectors import LANE, NIC, Values, clean_poll, first, run

from ops import detectors as D
from ops.detectors import link_drops
from ops.shell import collector as col
from ops.telemetry import History, parse_proc_net_dev
from testbed.topologies import build
from vocab.plan import WiringPlan, link_components

_HEAD = ("Inter-|   Receive                                                |  Transmit\n"
         " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
         "errs drop fifo colls carrier compressed\n")


@pytest.fixture(scope="module")
def plan():  # noqa: ANN201
    return build("astral3", servers=2, gpus=2)


def _dev(drops: dict[str, tuple[int, int]], names: list[str]) -> str:
    """A /proc/net/dev with every interface of ``names``, (rx_drop, tx_drop) from ``drops``."""
    lines = []
    for n in names:
        rx, tx = drops.get(n, (0, 0))
        lines.append(f"{n}: 1000 10 0 {rx} 0 0 0 0 2000 20 0 {tx} 0 0 0 0")
    return _HEAD + "\n".join(lines) + "\n"


def _poll(c: col.Collector, monkeypatch: pytest.MonkeyPatch, t: float,
          drops: dict[str, tuple[int, int]]) -> dict[tuple[str, str], float]:
    files = {"/proc/net/dev": _dev(drops, list(c.root_ends))}
    files |= {f"/sys/class/net/{i}/operstate": "up\n" for i in c.root_ends}
    monkeypatch.setattr(col, "read_kernel_file", lambda p: files.get(p))
    monkeypatch.setattr(col, "read_tc", lambda: {})
    values: dict[tuple[str, str], float] = {}
    c._poll_kernel(t, values)
    return values


def test_the_parser_reads_both_drop_columns() -> None:
    dev = parse_proc_net_dev(_dev({"spine0-eth1": (7, 3)}, ["spine0-eth1"]))
    assert (dev["spine0-eth1"]["rx_drop"], dev["spine0-eth1"]["tx_drop"]) == (7, 3)


def test_discards_are_per_poll_deltas_by_the_direction_of_the_dropped_frames(
        plan: WiringPlan, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane's spine end refusing 186 frames (its leaf end counts them as tx_dropped too:
    one event, counted once) is a->b; a NIC cable's frames toward the host, refused inside
    the host's namespace, show as the leaf end's tx_dropped, b->a."""
    comps = link_components(plan)
    lane, nic = comps["lf0r0~spine0#0"], comps["s0g0~lf0r0#0"]
    c = col.Collector(plan, None)
    first_poll = _poll(c, monkeypatch, 0.0, {})
    assert not [k for k in first_poll if k[1].startswith("rxdrops")]  # no delta yet
    base = {lane.b_intf: (5, 0), lane.a_intf: (0, 5), nic.b_intf: (2, 0)}
    v = _poll(c, monkeypatch, 1.0, base)
    assert v[("lf0r0~spine0#0", "rxdrops_ab")] == 5.0
    assert v[("s0g0~lf0r0#0", "rxdrops_ab")] == 2.0
    v = _poll(c, monkeypatch, 2.0, base)
    rx = {k: x for k, x in v.items() if k[1].startswith("rxdrops")}
    assert rx and set(rx.values()) == {0.0}  # counters still: nothing this poll
    # every link, both ways, has the metric (a NIC cable's a->b from its leaf end only)
    assert set(rx) == {(comp, f"rxdrops_{d}") for comp in comps for d in ("ab", "ba")}
    v = _poll(c, monkeypatch, 3.0, {lane.b_intf: (191, 0), lane.a_intf: (0, 191),
                                    nic.b_intf: (2, 40)})
    assert v[("lf0r0~spine0#0", "rxdrops_ab")] == 186.0
    assert v[("lf0r0~spine0#0", "rxdrops_ba")] == 0.0
    assert v[("s0g0~lf0r0#0", "rxdrops_ba")] == 40.0
    assert v[("s0g0~lf0r0#0", "rxdrops_ab")] == 0.0
    others = {k: x for k, x in v.items() if k[1].startswith("rxdrops")
              and k[0] not in ("lf0r0~spine0#0", "s0g0~lf0r0#0")}
    assert set(others.values()) == {0.0}


def test_a_clean_history_raises_nothing(plan: WiringPlan) -> None:
    """Healthy polls under steady load: every discard counter at 0, no alert of any kind."""
    for seed in range(3):
        eng, opened = run(plan, 120, seed=seed)
        assert opened == {}, opened
        assert link_drops.detect(eng_hist(plan, seed), eng.topo) == []


def eng_hist(plan: WiringPlan, seed: int) -> History:
    """The clean history ``run`` fed its engine, rebuilt (``run`` keeps it to itself)."""
    rng, hist = random.Random(seed), History()
    for i in range(120):
        hist.add(1000.0 + i, clean_poll(plan, rng))
    return hist


def test_one_discard_burst_on_one_lane_raises_link_drops_on_that_lane(plan: WiringPlan) -> None:
    """Full-size frames refused at the spine end for 10 polls: link-drops on that lane only,
    from the burst's second poll (its first is ``first_seen``), cleared after it ends."""
    def fault(i: int, v: Values) -> None:
        if 40 <= i < 50:
            v[(LANE, "rxdrops_ab")] = 186.0

    eng, opened = run(plan, 70, fault)
    i, a = first(opened)
    assert (i, a.detector, a.component) == (41, "link-drops", LANE)
    assert a.first_seen == 1040.0
    assert a.evidence["receiver"] == "spine2" and a.evidence["rxdrops_ab"][-1] == 186.0
    assert [(x.detector, x.component) for xs in opened.values() for x in xs] == [
        ("link-drops", LANE)]
    assert a.cleared is not None and 1050 <= a.cleared <= 1052
    assert "compare the MTU" in D.alert_kind("link-drops").action(LANE)


def test_one_poll_or_a_frame_below_the_floor_is_not_a_fault(plan: WiringPlan) -> None:
    """A single poll of discards (frames caught in flight as a link goes down) raises
    nothing, on a lane or toward a NIC."""
    def fault(i: int, v: Values) -> None:
        if i in (40, 45, 50):
            v[(LANE, "rxdrops_ab")] = 3.0
        if i == 60:
            v[(f"{NIC}~lf0r1#0", "rxdrops_ba")] = 1.0

    _eng, opened = run(plan, 70, fault)
    assert not [a for xs in opened.values() for a in xs if a.detector == "link-drops"]


def test_discards_as_a_link_goes_down_or_flaps_are_not_an_mtu(plan: WiringPlan) -> None:
    """What a real lane showed going down and flapping: a few discards in the poll its
    carrier changed and the next (still down). Link-down and flapping own those polls."""
    def fault(i: int, v: Values) -> None:
        if i in (40, 41, 44, 45, 48, 49):  # down at 40, 44, 48; up at 42, 46, 50
            v[(LANE, "carrier_changes")] = 1.0 if i % 4 == 0 else 0.0
            v[(LANE, "up")] = 0.0
            v[(LANE, "rxdrops_ba")] = 4.0
        if i in (42, 46, 50):
            v[(LANE, "carrier_changes")] = 1.0

    _eng, opened = run(plan, 70, fault)
    raised = [a.detector for xs in opened.values() for a in xs]
    assert "link-drops" not in raised and {"link-down", "flapping"} <= set(raised), raised


def test_the_thresholds_are_the_documented_ones() -> None:
    assert (link_drops.DROPS_MIN, link_drops.DROPS_POLLS) == (1.0, 2)
    kind = D.alert_kind("link-drops")
    assert kind is not None and kind.weight == 85 and kind.fault_kinds == ("mtu-mismatch",)


def test_ports_in_a_switch_daemons_namespace_are_read_there(
        plan: WiringPlan, monkeypatch: pytest.MonkeyPatch) -> None:
    """With several switch daemons, a port's counters, state and queue are read in its
    daemon's namespace (``/proc/<pid>/net/dev``, ``ip -n``, ``tc -n``), not the root's."""
    comps = link_components(plan)
    lane = comps["lf0r0~spine0#0"]
    away = {lane.b_intf}  # spine0's end lives with daemon 1
    c = col.Collector(plan, None, sources=[col.netns_source("astral-ovs-x-1", 4242)])
    home = [i for i in c.root_ends if i not in away]

    def poll(t: float, rx: int, oper: str) -> dict[tuple[str, str], float]:
        files = {"/proc/net/dev": _dev({}, home),
                 "/proc/4242/net/dev": _dev({lane.b_intf: (rx, 0)}, sorted(away))}
        files |= {f"/sys/class/net/{i}/operstate": "up\n" for i in home}
        monkeypatch.setattr(col, "read_kernel_file", lambda p: files.get(p))
        monkeypatch.setattr(col, "read_tc", lambda netns=None: (
            {lane.b_intf: {"bytes": 1000 * t, "backlog": 7, "drops": 0}} if netns else {}))
        monkeypatch.setattr(col, "read_link_state", lambda netns: (
            {lane.b_intf: (oper, 3)} if netns == "astral-ovs-x-1" else {}))
        values: dict[tuple[str, str], float] = {}
        c._poll_kernel(t, values)
        return values

    poll(0.0, 0, "up")
    v = poll(1.0, 9, "up")
    assert v[("lf0r0~spine0#0", "rxdrops_ab")] == 9.0
    assert v[("lf0r0~spine0#0", "backlog_ba")] == 7.0
    assert v[("lf0r0~spine0#0", "up")] == 1.0
    v = poll(2.0, 9, "down")
    assert v[("lf0r0~spine0#0", "up")] == 0.0
    # a tunnel end (a lane between a cluster's servers) that is up says "unknown"
    v = poll(3.0, 9, "unknown")
    assert v[("lf0r0~spine0#0", "up")] == 1.0


def test_a_cluster_servers_ports_come_in_one_command() -> None:
    """Another server's ports: ``tc``, ``/proc/net/dev`` and ``ip -j link`` in one SSH round
    trip per poll, split and parsed; a server that does not answer gives nothing."""
    import json
    import subprocess

    tc = [{"kind": "htb", "handle": "5:", "dev": "spine0-eth1", "root": True,
           "bytes": 4000, "packets": 4, "drops": 1, "backlog": 0, "qlen": 0}]
    link = [{"ifname": "spine0-eth1", "operstate": "UP",
             "stats64": {"tx": {"carrier_changes": 2}}}]
    seen: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        text = (json.dumps(tc) + "\n" + col._SPLIT + "\n" + _dev({"spine0-eth1": (3, 0)},
                ["spine0-eth1"]) + col._SPLIT + "\n" + json.dumps(link))
        return subprocess.CompletedProcess(argv, 0, text, "")

    got_tc, dev, state = col.cluster_source(run)()
    assert seen == [["sh", "-c", col.PORTS_SCRIPT]]
    assert got_tc["spine0-eth1"]["drops"] == 1
    assert dev["spine0-eth1"]["rx_drop"] == 3
    assert state == {"spine0-eth1": ("up", 2)}
    down = col.cluster_source(lambda argv: subprocess.CompletedProcess(argv, 255, "", "x"))
    assert down() == ({}, {}, {})


def test_a_cluster_collector_reads_host_namespaces_only_on_this_machine() -> None:
    """A host on another server has a pid there, not here: reading ``/proc/<pid>`` here
    would read some other process's namespace. Its link is read at its switch port, through
    that server's source (one per other server)."""
    from types import SimpleNamespace

    plan = build("astral3", servers=4, gpus=2)
    servers = ["lab", "w1"]
    where = {h.name: servers[i % 2] for i, h in enumerate(plan.hosts)}
    ran: list[str] = []
    lab = SimpleNamespace(
        plan=plan, rest_port=None, servers=servers, server_of=where.__getitem__,
        hosts={h.name: SimpleNamespace(pid=100 + i) for i, h in enumerate(plan.hosts)},
        run_on=lambda server, argv: ran.append(server))
    c = col.Collector.for_lab(lab, None)
    assert set(c.host_pids) == {h for h, s in where.items() if s == "lab"}
    assert len(c.sources) == 1
    c.sources[0]()
    assert ran == ["w1"]
    lab.servers, lab.server_of = [], None  # one machine: every host's namespace
    assert set(col.Collector.for_lab(lab, None).host_pids) == set(where)
