"""Fault kinds are modules, found by name: ``testbed/faultkinds/<name>.py`` says what a kind
is (pure), ``testbed/shell/faults/<name>.py`` what it does to a lab.

The contract a newcomer relies on: a new kind is that pair of new files and nothing else.
So the checks run over the registries (every kind there is, not a table of them), and the
test copies each shipped pair under a new name and checks, in a fresh interpreter
(``KINDS`` is read at import), that the copy is a valid ``Fault`` kind, is listed and
drawn like its original, is classified by the same alerts and asked the same questions,
that the injector runs it exactly like its original (the same commands, lab calls,
processes and event log) and that the crash cleanup, iterating the injector registry,
removes what it leaves as it removes the original's. The lab is ``FakeLab`` of
test_faults.py with a recording ``sh`` in the injector's ``FaultContext`` (nothing runs; no
root needed).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from test_faults import FakeLab

from controllers.flowtable import OWN_COOKIES, PRIO_PIN
from controllers.routing import PRIO_LOCAL, PRIO_ROUTE
from ops.detectors import DETECTORS
from testbed import faultkinds, faultmarks, faultspec
from testbed.faultkinds import EFFECTS, FAULT_KINDS, TARGETS, corruption
from testbed.faultkinds import mtu_mismatch as mtu
from testbed.faultkinds import partial_blackhole as blackhole
from testbed.faultkinds import shuffle_miswiring as wire
from testbed.faultkinds._loss import iptables_loss_commands, nft_loss_commands
from testbed.faultkinds._ports import alias_command
from testbed.faultspec import KINDS, TARGET_KIND, Fault
from testbed.shell import cleanup
from testbed.shell import faults as F
from testbed.shell.faults import INJECTORS, FaultInjector
from testbed.shell.faults.link_degrade import htb_rate_command
from testbed.shell.mntopo import OF_PROTOCOLS
from testbed.topologies import build
from traffic.roce import ETH_LEN, LAB_PMTU, OP_WRITE_MIDDLE, frame_len
from vocab.evidence import EVIDENCE
from vocab.flows import sport_for_qp
from vocab.plan import WiringPlan
from vocab.plugins import Plugins

REPO = Path(__file__).resolve().parents[2]

#: Every kind this checkout has: the tests below run over all of them.
SHIPPED = FAULT_KINDS.names()


def small_plan() -> WiringPlan:
    """test_faults.py's ``small``: 4 servers x 2 GPUs, 2 blocks (20 Mb/s lanes, 40 Mb/s NICs)."""
    return build("astral3", servers=4, gpus=2, servers_per_block=2)


# --- the registries ---------------------------------------------------------------------------
def test_every_kind_is_a_pair_of_modules_that_keeps_the_contract() -> None:
    """Both registries name the same kinds in the same order, each kind a pure module and an
    injector module of its name, and each declares what the rest of the lab asks of it:
    its target, the evidence its faults give (and an alert that gives it), what it does to
    traffic (questions are asked about it), and only hooks that are functions."""
    assert INJECTORS.names() == FAULT_KINDS.names() == KINDS and KINDS
    assert set(TARGET_KIND) == set(KINDS) and set(TARGET_KIND.values()) <= set(TARGETS)
    alerts = [k for d in DETECTORS.all().values() for k in d.alerts.values()]
    plan = small_plan()
    for name, injector in INJECTORS.all().items():
        mod = injector.module
        assert callable(mod.apply) and callable(mod.revert), name
        for hook in ("worker", "check", "clean_crashed"):
            assert callable(getattr(mod, hook, None)) or not hasattr(mod, hook), (name, hook)
        assert mod.__name__ == f"testbed.shell.faults.{name.replace('-', '_')}"
        pure = FAULT_KINDS.get(name)
        assert pure.module.__name__ == f"testbed.faultkinds.{name.replace('-', '_')}"
        for doc in (mod.__doc__, pure.module.__doc__):  # what it emulates, in one line
            assert doc and doc.strip().splitlines()[0].endswith("."), (name, doc)
            assert len(doc.strip().splitlines()[0]) <= 100
        assert pure.summary and TARGET_KIND[name] == pure.target
        assert pure.evidence and set(pure.evidence) <= set(EVIDENCE), name
        assert any(name in a.fault_kinds for a in alerts), f"no alert classifies {name}"
        assert pure.effect in EFFECTS or (pure.effect is None and pure.target == "controller")
        for f in faultspec.random_schedule(plan, kinds=[name], n=2, duration_s=60,
                                           severity=pure.severities[0]):
            for c in pure.affected(plan, f.component):  # named as a fault names its target
                assert faultspec.parse_target(plan, c).name == c != f.component, (name, c)


def test_a_kind_says_what_it_affects_beyond_its_target() -> None:
    plan = small_plan()
    assert FAULT_KINDS.get("shuffle-miswiring").affected(plan, "lf0r0~spine1#0") == [
        "lf0r0~spine0#0", "lf0r0~spine2#0", "lf0r0~spine3#0"]  # the lanes it may cross
    assert FAULT_KINDS.get("hot-receiver").affected(plan, "s0g0") == [
        f"lf0r0~spine{i}#0" for i in range(4)]  # its leaf's lanes carry the incast
    assert FAULT_KINDS.get("link-down").affected(plan, "lf0r0~spine1#0") == []  # default


def test_an_unknown_kind_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown fault kind 'link-cut'; choose from link-down"):
        FAULT_KINDS.get("link-cut")
    with pytest.raises(ValueError, match="kind: unknown fault kind 'link-cut'; choose from "
                                         "link-down"):
        Fault("link-cut", "a~b")


def test_a_kind_module_without_a_valid_target_is_named(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad_kind.py").write_text('"""No target."""\nTARGET = "cable"\n')
    monkeypatch.setattr(faultkinds, "__path__", [*faultkinds.__path__, str(tmp_path)])
    fresh = Plugins("fault kind", "testbed.faultkinds", faultkinds.FaultKind)
    try:
        with pytest.raises(ValueError, match=r"testbed.faultkinds.bad_kind: TARGET must be one "
                                             r"of link, host, switch, controller \(got 'cable'\)"):
            fresh.all()
    finally:
        monkeypatch.undo()
        sys.modules.pop("testbed.faultkinds.bad_kind", None)
    assert FAULT_KINDS.names() == SHIPPED


# --- partial-blackhole and mtu-mismatch: their matches, knobs and commands --------------------
@pytest.mark.parametrize("share", [1 / 2, 3 / 8, 3 / 32, 1 / 16384, 16383 / 16384])
def test_a_blackholes_matches_cover_exactly_its_share_of_the_qps(share: float) -> None:
    """Disjoint masked matches, one per 1 in the share's binary expansion; the QPs' source
    ports (their low bits are the QP number) are hit in exactly that share; seeds differ."""
    seen = set()
    for seed in range(4):
        matches = blackhole.port_matches(share, seed)
        assert len(matches) == bin(round(share * 16384)).count("1")
        hits = [sum(p & m == v for v, m in matches) for p in range(1 << 16)]
        assert max(hits) == 1 and sum(hits) == share * (1 << 16)
        qps = [blackhole.dropped(sport_for_qp(q), matches) for q in range(16384)]
        assert sum(qps) == share * 16384
        seen.add(tuple(matches))
    assert len(seen) > 1


def test_blackhole_rules_sit_above_the_controllers_and_parse_back() -> None:
    assert max(PRIO_LOCAL, PRIO_PIN, PRIO_ROUTE) < blackhole.PRIORITY
    assert blackhole.OF_COOKIE not in OWN_COOKIES  # so the controller's resync leaves them alone
    assert blackhole.OFCTL[2] in OF_PROTOCOLS.split(",")  # a version the bridges speak
    assert blackhole.flow_lines([(3, 3), (1, 7)]) == (
        "cookie=0xa57ff001,priority=1000,udp,udp_src=0x3/0x3,actions=drop\n"
        "cookie=0xa57ff001,priority=1000,udp,udp_src=0x1/0x7,actions=drop\n")
    dump = ("OFPST_FLOW reply (OF1.3) (xid=0x6):\n"  # as ovs-ofctl 3.1 prints them
            " cookie=0xa57ff001, duration=2.063s, table=0, n_packets=60, n_bytes=14520, "
            "priority=1000,udp,tp_src=0x5/0x7 actions=drop\n"
            " cookie=0xa57ff001, duration=2.063s, table=0, n_packets=0, n_bytes=0, "
            "priority=1000,udp,tp_src=0/0x1 actions=drop\n")
    assert blackhole.parse_rules(dump) == [(5, 7, 60), (0, 1, 0)]


def test_the_new_kinds_knobs_follow_the_severity() -> None:
    rng = random.Random(1)
    gray = [blackhole.random_knobs(rng, 10.0, "gray") for _ in range(40)]
    hard = [blackhole.random_knobs(rng, 10.0, "hard") for _ in range(40)]
    assert {k["share"] for k in gray} == {1 / 32, 2 / 32, 3 / 32, 4 / 32}
    assert {k["share"] for k in hard} == {2 / 8, 3 / 8, 4 / 8}
    assert all(Fault("partial-blackhole", "lf0r0", **k) for k in gray + hard)
    assert blackhole.SEVERITIES == ("gray", "hard") and mtu.SEVERITIES == ("hard",)
    mtus = {mtu.random_knobs(rng, 10.0, "hard")["mtu"] for _ in range(40)}
    full = frame_len(OP_WRITE_MIDDLE, LAB_PMTU) - ETH_LEN  # the IP length of a full frame
    assert mtus == {1500, 2200, 4096} and max(mtus) < full  # every draw drops full frames
    for kind in (blackhole, mtu):
        with pytest.raises(ValueError, match="^severity must be one of"):
            kind.random_knobs(rng, 10.0, "mild")


def test_an_mtu_mark_names_its_run_and_what_to_restore() -> None:
    text = mtu.mark("abc123", {"spine1-eth1": 4200, "spine1": 1500})
    assert text == "astral-lab-fault-mtu run=abc123 spine1-eth1=4200 spine1=1500"
    assert mtu.parse_mark(text) == ("abc123", {"spine1-eth1": 4200, "spine1": 1500})
    for other in ("", "uplink to spine1", "astral-lab-fault-mtu", "astral-lab-fault-mtu run=x a=b"):
        assert mtu.parse_mark(other) is None


def test_a_miswiring_crosses_a_lane_with_another_of_its_leafs_shuffled_port() -> None:
    plan = small_plan()
    lane = faultspec.parse_target(plan, "lf0r0~spine1").link
    assert [ln.b for ln in wire.partners(plan, lane)] == ["spine0", "spine2", "spine3"]
    assert {wire.partner(plan, lane, s).b for s in range(20)} == {"spine0", "spine2", "spine3"}
    nic = faultspec.parse_target(plan, "s0g0~lf0r0").link
    assert wire.partners(plan, nic) == []
    with pytest.raises(ValueError, match="no other lane of this one reaches another spine"):
        faultspec.resolve(plan, Fault("shuffle-miswiring", "s0g0~lf0r0"))
    fat = build("fattree", servers=4, gpus=2, k=4)  # no shuffle boxes: no target at all
    pool = [faultspec.link_name(fat, ln) for ln in faultspec.traffic_links(fat)]
    assert pool and wire.random_targets(fat, pool) == []
    rng = random.Random(1)
    knobs = wire.random_knobs(rng, 10.0, "gray")
    assert set(knobs) == {"seed"} and wire.SEVERITIES == ("gray",)
    with pytest.raises(ValueError, match="^severity must be one of gray"):
        wire.random_knobs(rng, 10.0, "hard")


def test_crossing_two_ports_trades_bridges_and_numbers_in_one_transaction() -> None:
    a = ("spine1-eth1", wire.Home("spine1", 1, "q1"))
    b = ("spine2-eth1", wire.Home("spine2", 1, "q2"))
    moves = wire.swapped(a, b)
    assert moves == {"spine1-eth1": wire.Home("spine2", 1, "q1"),
                     "spine2-eth1": wire.Home("spine1", 1, "q2")}
    assert wire.move_command(moves) == [
        "ovs-vsctl", "--timeout=60", "--", "--if-exists", "del-port", "spine1-eth1",
        "--", "--if-exists", "del-port", "spine2-eth1",
        "--", "add-port", "spine2", "spine1-eth1", "qos=q1",
        "--", "set", "Interface", "spine1-eth1", "ofport_request=1",
        "--", "add-port", "spine1", "spine2-eth1", "qos=q2",
        "--", "set", "Interface", "spine2-eth1", "ofport_request=1"]
    text = wire.mark("abc123", a[1])
    assert text == "astral-lab-fault-wire run=abc123 home=spine1 ofport=1 qos=q1"
    assert wire.parse_mark(text) == ("abc123", a[1])
    for other in ("", "astral-lab-fault-wire run=x home=s ofport=one qos=q", mtu.mark("x", {})):
        assert wire.parse_mark(other) is None
    assert wire.parse_locate("spine1\n1\n5e1f\n") == wire.Home("spine1", 1, "5e1f")
    assert wire.parse_locate("spine1\n") is None


# --- a lab that records what the injector would run -------------------------------------------
class FakeProc:
    """A process the fake hosts started: alive until killed or signalled."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9

    def send_signal(self, sig: int) -> None:
        self.returncode = -sig

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


class RecordingLab(FakeLab):
    """``FakeLab`` whose ``sh`` (the fault context's ``sh``) records every command and answers
    like a shaped lab (``tc class show``/``change``, no nic-loss leftovers, interface MTUs
    and aliases, a bridge's rules by cookie), and whose hosts start fake processes
    (recorded; a receiver reports ready at once). Reads are answered, not recorded."""

    def __init__(self, plan: WiringPlan, workdir: str) -> None:
        super().__init__(plan)
        self.workdir = workdir
        self.commands: list[tuple[str | None, list[str], str | None]] = []
        self.rates = {i: htb_rate_command(i, ln.mbps)[-5] for ln in plan.links
                      for i in (ln.a_intf, ln.b_intf)}
        self.mtus = {**{i: 4200 for ln in plan.links for i in (ln.a_intf, ln.b_intf)},
                     **{s.name: 1500 for s in plan.switches}}  # bridges' internal ports
        self.aliases: dict[str, str] = {}
        self.rules: dict[str, str] = {}  # bridge -> add-flows lines
        self.homes = {i: wire.Home(n, p, "noop") for ln in plan.links  # OVS's switch ports
                      for n, p, i in ((ln.a, ln.a_port, ln.a_intf), (ln.b, ln.b_port, ln.b_intf))
                      if n.startswith(("lf", "spine"))}
        self.hosts = {h: _FakeHost(self, h, ns.pid) for h, ns in self.hosts.items()}
        self.pids = 5000

    def sh(self, argv: list[str], host: str | None = None, stdin: str | None = None,
           check: bool = True) -> subprocess.CompletedProcess[str]:
        if argv[:4] == ["ip", "-j", "link", "show"]:
            return super().sh(argv, host, stdin, check)
        if argv[:5] == ["ip", "-j", "-s", "link", "show"]:
            alias = {"ifalias": self.aliases[argv[-1]]} if self.aliases.get(argv[-1]) else {}
            return _done(argv, json.dumps([{"mtu": self.mtus[argv[-1]], **alias,
                                            "stats64": {"rx": {"dropped": 0}}}]))
        if argv[:3] == wire.locate_command("x")[:3]:
            h = self.homes[argv[3]]
            return _done(argv, f"{h.bridge}\n{h.ofport}\n{h.qos}\n")
        if argv[0] == "ovs-vsctl" and "list" in argv:
            names = argv[argv.index("Interface") + 1:]
            return _done(argv, json.dumps({"data": [[n, self.mtus[n]] for n in names]}))
        if argv[0] == "ovs-ofctl" and argv[3] == "dump-flows":
            return _done(argv, "".join(
                " cookie=0xa57ff001, duration=1s, table=0, n_packets=2, n_bytes=9, "
                + line.split(",", 1)[1].replace("udp_src", "tp_src").replace(",actions", " actions")
                for line in self.rules.get(argv[4], "").splitlines(keepends=True)))
        self.commands.append((host, list(argv), stdin))
        out, rc = "", 0
        if argv[:3] == ["tc", "class", "show"]:
            out = (f"class htb 5:1 root leaf 10: prio 0 rate {self.rates[argv[4]]} ceil "
                   f"{self.rates[argv[4]]} burst 15Kb cburst 1600b\n")
        elif argv[:3] == ["tc", "class", "change"]:
            self.rates[argv[4]] = argv[argv.index("rate") + 1]
        elif argv[:3] == ["ip", "link", "show"]:
            rc = 1  # no sink veth left
        elif argv[:4] == ["ip", "link", "set", "dev"] and argv[5] == "mtu":
            self.mtus[argv[4]] = int(argv[6])
        elif argv[:4] == ["ip", "link", "set", "dev"] and argv[5] == "alias":
            self.aliases[argv[4]] = argv[6]
        elif argv[0] == "ovs-vsctl" and "add-port" in argv:  # a move_command
            for i in (i for i, a in enumerate(argv) if a == "add-port"):
                self.homes[argv[i + 2]] = wire.Home(argv[i + 1], int(argv[i + 8][15:]),
                                                    argv[i + 3][4:])
        elif argv[0] == "ovs-ofctl":
            self.rules[argv[4]] = stdin or "" if argv[3] == "add-flows" else ""
        return _done(argv, out, rc)


def _done(argv: list[str], out: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(argv, rc, out, "")


class _FakeHost:
    def __init__(self, lab: RecordingLab, name: str, pid: int) -> None:
        self.lab, self.name, self.pid = lab, name, pid

    def popen(self, argv: list[str], **_kw: Any) -> FakeProc:
        if "--out" in argv:  # the receiver: says it is ready
            out = argv[argv.index("--out") + 1]
            Path(out + ".ready").touch()
            argv = [a if a != out else "<out>" for a in argv]
        self.lab.calls.append(("popen", self.name, [a for a in argv if a != sys.executable]))
        self.lab.pids += 1
        return FakeProc(self.lab.pids)


#: One fault of every shipped kind, played to its end (``wait``) or undone.
SCENARIOS: dict[str, tuple[dict[str, Any], str]] = {
    "link-down": ({"target": "spine2~lf0r1"}, "undo"),
    "link-flap": ({"target": "lf0r0~spine1", "period": 0.1, "count": 2}, "wait"),
    "link-degrade": ({"target": "s1g1~lf0r1", "fraction": 0.25}, "undo"),
    "nic-loss": ({"target": "s1g1", "probability": 0.2, "direction": "both"}, "undo"),
    "gray-loss": ({"target": "s1g1~lf0r1", "probability": 0.05, "direction": "both"}, "undo"),
    "corruption": ({"target": "spine2~lf0r1", "probability": 0.05}, "undo"),
    "switch-down": ({"target": "lf0r0"}, "undo"),
    "partial-blackhole": ({"target": "spine1", "share": 0.375, "seed": 3}, "undo"),
    "mtu-mismatch": ({"target": "lf0r0~spine1", "mtu": 1500}, "undo"),
    "shuffle-miswiring": ({"target": "lf0r0~spine1", "seed": 0}, "undo"),
    "controller-kill": ({}, "undo"),
    "controller-restart": ({"duration": 0.05}, "wait"),
    "hot-receiver": ({"target": "s0g0", "senders": 2}, "undo"),
}


def scenario(kind: str) -> tuple[dict[str, Any], str]:
    """One fault of ``kind`` and how it ends: ``SCENARIOS``' (chosen for the checks below),
    else the first a random schedule draws for it on ``small_plan``, undone."""
    if kind in SCENARIOS:
        return SCENARIOS[kind]
    spec = FAULT_KINDS.get(kind)
    f = faultspec.random_schedule(small_plan(), kinds=[kind], n=1, duration_s=60,
                                  severity=spec.severities[-1])[0]
    return {k: v for k, v in f.to_dict().items() if k not in ("kind", "at")}, "undo"


def record(plan: WiringPlan, kind: str, knobs: dict[str, Any], how: str, workdir: str,
           backend: str = "nft") -> dict[str, Any]:
    """Inject one fault on a fresh recording lab, end it, and return what happened."""
    lab = RecordingLab(plan, workdir)
    inj = FaultInjector(lab)
    inj.context.sh = lab.sh  # type: ignore[method-assign]
    inj.context.loss_backend = lambda: backend  # type: ignore[method-assign]  # no probe: no root
    inj.context.require_nft = lambda *_a: None  # type: ignore[method-assign]
    h = inj.inject(Fault(kind, **knobs))
    if how == "wait":
        assert h.wait(10)
    else:
        inj.undo(h)
    events = [{k: v for k, v in e.items() if k not in ("time", "apply_start")}
              for e in inj.events]
    return {"calls": lab.calls, "commands": lab.commands, "events": events,
            "state": h.state}


@pytest.mark.parametrize("kind", SHIPPED)
def test_the_injector_dispatches_every_kind_to_its_module(kind: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Each kind's apply/revert/worker run through the registry; replacing the module's
    functions replaces what the injector does."""
    knobs, how = scenario(kind)
    got = record(small_plan(), kind, knobs, how, str(tmp_path))
    assert got["state"] == "undone" and [e["action"] for e in got["events"]][0] == "inject"
    assert got["events"][-1]["action"] == "undo"
    mod = INJECTORS.get(kind).module
    seen: list[str] = []
    monkeypatch.setattr(mod, "apply", lambda inj, h: seen.append(f"apply {h.fault.kind}"))
    monkeypatch.setattr(mod, "revert", lambda inj, h: seen.append("revert") or {"x": 1})
    if hasattr(mod, "worker"):
        monkeypatch.setattr(mod, "worker", lambda inj, h: seen.append("worker"))
    lab = RecordingLab(small_plan(), str(tmp_path))
    inj = FaultInjector(lab)
    inj.context.loss_backend = lambda: "nft"  # type: ignore[method-assign]
    inj.context.require_nft = lambda *_a: None  # type: ignore[method-assign]
    h = inj.inject(Fault(kind, **knobs))
    if hasattr(mod, "worker"):
        assert h.wait(5)
    else:
        inj.undo(h)
    assert seen == [f"apply {kind}", *(["worker"] if hasattr(mod, "worker") else []), "revert"]
    assert lab.calls == [] and lab.commands == [] and inj.events[-1]["detail"] == {"x": 1}


def test_the_recorded_commands_are_the_kinds_own(tmp_path: Path) -> None:
    """What the recording lab saw, checked for the kinds whose commands it answers."""
    plan = small_plan()
    deg = record(plan, "link-degrade", *SCENARIOS["link-degrade"], str(tmp_path))
    changes = [c for c in deg["commands"] if c[1][:3] == ["tc", "class", "change"]]
    assert changes == [("s1g1", htb_rate_command("s1g1-eth0", 10), None),
                       ("lf0r1", htb_rate_command("lf0r1-eth2", 10), None),
                       ("s1g1", htb_rate_command("s1g1-eth0", 40), None),
                       ("lf0r1", htb_rate_command("lf0r1-eth2", 40), None)]
    assert deg["events"][0]["detail"] == {"mbps_before": [40.0, 40.0], "mbps": [10.0, 10.0]}
    loss = record(plan, "nic-loss", *SCENARIOS["nic-loss"], str(tmp_path), backend="iptables")
    setup, undo = iptables_loss_commands("s1g1-eth0", 0.2, "both")
    ran = [argv for host, argv, _ in loss["commands"] if host == "s1g1"]
    assert ran[:len(setup)] == setup and all(u in ran for u in undo)
    gray = record(plan, "gray-loss", *SCENARIOS["gray-loss"], str(tmp_path))
    nic, port = "s1g1-eth0", faultspec.parse_target(plan, "s1g1~lf0r1").link.b_intf
    want = []  # each end where its node's interfaces are: the host's, the leaf's daemon's
    for where, dev in (("s1g1", nic), ("lf0r1", port)):
        setup, script, undo = nft_loss_commands(
            dev, 0.05, "egress", sink=faultmarks.link_sink(dev),
            table=faultmarks.link_table(faultmarks.LOSS_TABLE, dev))
        want += [(where, argv, None) for argv in setup] + [(where, ["nft", "-f", "-"], script)]
    assert [c for c in gray["commands"] if c[1][:2] != ["nft", "-j"]][:len(want)] == want
    assert gray["events"][0]["detail"] == {"probability": 0.05, "direction": "both",
                                           "interfaces": [nic, port]}
    assert gray["events"][-1]["detail"] == {"dropped": {"a-to-b": 0, "b-to-a": 0}}
    bad = record(plan, "corruption", *SCENARIOS["corruption"], str(tmp_path))
    lane = faultspec.parse_target(plan, "lf0r1~spine2").link
    loads = [(host, stdin) for host, argv, stdin in bad["commands"] if argv[:2] == ["nft", "-f"]]
    assert loads == [(node, corruption.nft_corruption_script(
                         dev, 0.05, faultmarks.link_table(faultmarks.CORRUPT_TABLE, dev)))
                     for node, dev in ((lane.a, lane.a_intf), (lane.b, lane.b_intf))]
    assert bad["events"][-1]["detail"] == {"corrupted": {"a-to-b": 0, "b-to-a": 0}}
    hole = record(plan, "partial-blackhole", *SCENARIOS["partial-blackhole"], str(tmp_path))
    matches = blackhole.port_matches(0.375, 3)
    assert hole["commands"] == [("spine1", blackhole.add_command("spine1"),
                                 blackhole.flow_lines(matches)),
                                ("spine1", blackhole.delete_command("spine1"), None)]
    assert hole["events"][0]["detail"]["udp_src"] == [f"{v:#x}/{m:#x}" for v, m in matches]
    assert hole["events"][-1]["detail"] == {"dropped": 4, "rules": 2, "rules_added": 2}
    low = record(plan, "mtu-mismatch", *SCENARIOS["mtu-mismatch"], str(tmp_path))
    intf = faultspec.parse_target(plan, "lf0r0~spine1").link.b_intf  # the spine's end
    assert intf.startswith("spine1-") and low["commands"] == [
        ("spine1", alias_command(intf, mtu.mark("fake", {intf: 4200, "spine1": 1500})),
         None),
        ("spine1", mtu.mtu_command(intf, 1500), None),
        ("spine1", mtu.mtu_command(intf, 4200), None),
        ("spine1", alias_command(intf, ""), None)]
    assert low["events"][-1]["detail"] == {"mtu": 4200, "rx_dropped": 0}
    crossed = record(plan, "shuffle-miswiring", *SCENARIOS["shuffle-miswiring"], str(tmp_path))
    x, y = "spine1-eth1", "spine2-eth1"  # lf0r0's lanes to spine1 and (seed 0) spine2
    hx, hy = wire.Home("spine1", 1, "noop"), wire.Home("spine2", 1, "noop")
    assert [c for c in crossed["commands"] if c[1][0] != "tc"] == [
        ("spine1", alias_command(x, wire.mark("fake", hx)), None),
        ("spine1", alias_command(y, wire.mark("fake", hy)), None),
        ("spine1", wire.move_command({x: hy, y: hx}), None),
        ("spine1", wire.move_command({x: hx, y: hy}), None),
        ("spine1", alias_command(x, ""), None), ("spine1", alias_command(y, ""), None)]
    assert crossed["events"][0]["detail"] == {"partner": "lf0r0~spine2",
                                              "affects": ["lf0r0~spine2#0"],
                                              "ports": {x: "spine2:1", y: "spine1:1"}}
    hot = record(plan, "hot-receiver", *SCENARIOS["hot-receiver"], str(tmp_path))
    popens = [c for c in hot["calls"] if c[0] == "popen"]
    assert [p[1] for p in popens] == ["s0g0", *hot["events"][0]["detail"]["sources"]]
    assert popens[0][2][:3] == ["-m", "astral_lab.probe_cli", "recv"]


# --- what a crashed run leaves, removed by every kind's hook -----------------------------------
def crash_and_clean(plan: WiringPlan, kind: str, knobs: dict[str, Any], workdir: str,
                    kinds: list[Any] | None = None) -> dict[str, Any]:
    """Inject one fault on a recording lab and let its injector "crash" (nothing undone),
    then run the crash cleanup, ``cleanup_faults`` with the kinds' hooks (the injector
    registry's, as ``astral-lab clean`` hands them, or ``kinds``), its root-namespace
    commands answered by the lab: what it ran, what it counted, and which of the lab's
    port states (rules, aliases, MTUs, bridges) still differ from before the fault."""
    lab = RecordingLab(plan, workdir)
    inj = FaultInjector(lab)
    inj.context.sh = lab.sh  # type: ignore[method-assign]
    inj.context.loss_backend = lambda: "nft"  # type: ignore[method-assign]
    inj.context.require_nft = lambda *_a: None  # type: ignore[method-assign]

    def ports() -> dict[str, Any]:
        return {"rules": {b: r for b, r in lab.rules.items() if r},
                "aliases": {i: a for i, a in lab.aliases.items() if a},
                "mtus": dict(lab.mtus), "homes": dict(lab.homes)}

    def root(argv: list[str], _host: str | None = None, stdin: str | None = None,
             check: bool = False, timeout: float = 0.0) -> subprocess.CompletedProcess[str]:
        return lab.sh(argv, None, stdin, check)

    before = ports()
    inj.inject(Fault(kind, **knobs))
    lab.commands.clear()
    fakes = {"root_sh": root, "run": root,
             "tagged_bridges": lambda: {s.name: lab.run_id for s in plan.switches},
             "marked_ports": lambda parse: {i: a for i, a in lab.aliases.items()
                                            if parse(a) is not None},
             "_clean_root": lambda _keep: False, "fault_processes": dict}
    saved = [(m, n, getattr(m, n)) for m in (cleanup, *(i.module for i in INJECTORS.all().values()))
             for n in fakes if hasattr(m, n)]
    try:
        for m, n, _ in saved:
            setattr(m, n, fakes[n])
        done = cleanup.cleanup_faults(host_pids=[], runs=[lab.run_id],
                                      kinds=INJECTORS.all().values() if kinds is None else kinds)
    finally:
        for m, n, old in saved:
            setattr(m, n, old)
    after, ran = ports(), list(lab.commands)
    inj.undo_all()  # the handles the "crash" left (their workers stop)
    return {"done": done, "commands": ran,
            "left": sorted(k for k in before if after[k] != before[k])}


@pytest.mark.parametrize("kind", SHIPPED)
def test_the_crash_cleanup_puts_back_what_every_kind_leaves(kind: str, tmp_path: Path) -> None:
    """``cleanup_faults`` over the injector registry (``astral-lab clean``): whatever a
    crashed fault left on the switches' ports (drop rules, a lowered MTU, crossed lanes,
    their marks) is back as before it; a kind that leaves nothing there has no hook."""
    knobs, _how = scenario(kind)
    got = crash_and_clean(small_plan(), kind, knobs, str(tmp_path))
    assert got["left"] == []
    hook = INJECTORS.get(kind).hook("clean_crashed")
    assert (hook is None) == (sum(got["done"].values()) == 0), got["done"]


def test_the_crash_cleanup_counts_what_each_hook_put_right(tmp_path: Path) -> None:
    plan = small_plan()
    hole = crash_and_clean(plan, "partial-blackhole", *SCENARIOS["partial-blackhole"][:1],
                           str(tmp_path))
    assert hole["done"] == {"namespaces": 0, "processes": 0, "switches": 1, "ports": 0}
    assert hole["commands"] == [(None, blackhole.delete_command("spine1"), None)]
    crossed = crash_and_clean(plan, "shuffle-miswiring", *SCENARIOS["shuffle-miswiring"][:1],
                              str(tmp_path))
    assert crossed["done"]["ports"] == 2 and crossed["commands"][0][1][0] == "ovs-vsctl"
    alone = crash_and_clean(plan, "mtu-mismatch", *SCENARIOS["mtu-mismatch"][:1],
                            str(tmp_path), kinds=[INJECTORS.get("partial-blackhole")])
    assert alone["left"] == ["aliases", "mtus"]  # only the kind's own hook undoes its change


# --- a copied pair of modules is a new kind, everywhere ---------------------------------------
# Runs in a fresh interpreter: puts a copy of kind ORIG's two modules, named NEW, on the two
# packages' paths (and a pure module only, named ORPHAN, with no injector), then uses NEW
# and ORIG side by side.
_CHECK = textwrap.dedent("""
    import json, sys
    pure_dir, shell_dir, orig, new, orphan, work, tests = sys.argv[1:8]
    sys.path.insert(0, tests)
    import testbed.faultkinds as pure
    pure.__path__.append(pure_dir)
    import testbed.shell.faults as F
    F.__path__.append(shell_dir)
    from testbed import faultspec
    from testbed.faultspec import Fault
    from testbed.shell.faults import FaultError, FaultInjector
    from scenarios.experiments.ops_eval import KINDS as scenario_kinds
    from ops.baselines import SHOWS
    from ops.detectors import DETECTORS
    from ops.evaluate import GroundTruth
    from ops.questions import Scene, all_questions
    from test_faultkinds import RecordingLab, crash_and_clean, record, scenario, small_plan

    plan = small_plan()
    knobs, how = scenario(orig)
    rep = {"kinds": list(faultspec.KINDS), "shell": list(F.INJECTORS.names()),
           "scenario": list(scenario_kinds), "target": faultspec.TARGET_KIND[new]}
    f_new, f_orig = Fault(new, **knobs), Fault(orig, **knobs)
    rep["fault"] = [f_new.span == f_orig.span, f_new.component == f_orig.component,
                    faultspec.resolve(plan, f_new).target == faultspec.resolve(plan, f_orig).target]
    rep["schedule"] = []
    for sev in pure.FAULT_KINDS.get(orig).severities:
        a = faultspec.random_schedule(plan, kinds=[orig], n=3, duration_s=60, seed=5,
                                      severity=sev)
        b = faultspec.random_schedule(plan, kinds=[new], n=3, duration_s=60, seed=5,
                                      severity=sev)
        rep["schedule"] += [dict(x.to_dict(), kind=None) == dict(y.to_dict(), kind=None)
                            for x, y in zip(a, b)]
    rep["drawn"] = sorted({f.kind for f in faultspec.random_schedule(
        plan, n=3 * len(faultspec.KINDS), duration_s=20 * len(faultspec.KINDS),
        severity="mixed")})
    rep["orig"] = record(plan, orig, knobs, how, work)
    rep["new"] = record(plan, new, knobs, how, work)
    # classified by the alerts that classify the original: each is evidence of both or neither
    shows = {a: k.fault_kinds for d in DETECTORS.all().values() for a, k in d.alerts.items()}
    shows.update({a: s.fault_kinds for a, s in SHOWS.items()})
    rep["alerts"] = {a: [orig in kinds, new in kinds] for a, kinds in shows.items()}
    # asked the same questions while live
    comp = faultspec.resolve(plan, f_orig).component
    rep["questions"] = [[(q.template, q.text, sorted(q.accept)) for q in all_questions(
        Scene(plan, [GroundTruth(k, comp, 0.0, 10.0)], job_pairs=[("s0g0", "s2g1")]))]
        for k in (orig, new)]
    # what a crashed run leaves of it, removed by its own hook and by the registry's
    rep["crash"] = [crash_and_clean(plan, k, knobs, work, kinds=[F.INJECTORS.get(k)])
                    for k in (orig, new)]
    rep["swept"] = crash_and_clean(plan, new, knobs, work)["left"]
    lab = RecordingLab(plan, work)
    inj = FaultInjector(lab)
    try:
        inj.inject(Fault(orphan, **knobs))
        rep["orphan"] = "injected"
    except FaultError as exc:
        rep["orphan"] = [str(exc), lab.calls, lab.commands, inj.events]
    print(json.dumps(rep, default=str))
""")


@pytest.mark.parametrize("orig", SHIPPED)
def test_a_copied_kind_is_a_fault_kind_listed_drawn_and_injected(orig: str,
                                                                 tmp_path: Path) -> None:
    new, orphan = f"copy-of-{orig}", f"lonely-{orig}"
    stem = orig.replace("-", "_")
    dirs = {}
    for side, pkg in (("pure", faultkinds), ("shell", F)):
        d = tmp_path / side
        d.mkdir()
        shutil.copy(Path(pkg.__path__[0]) / f"{stem}.py", d / f"{new.replace('-', '_')}.py")
        dirs[side] = d
    shutil.copy(Path(faultkinds.__path__[0]) / f"{stem}.py",
                dirs["pure"] / f"{orphan.replace('-', '_')}.py")
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", _CHECK, str(dirs["pure"]), str(dirs["shell"]),
                           orig, new, orphan, str(work), str(Path(__file__).parent)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    # listed with the shipped kinds by the pure registry, the injector and ops-eval
    assert set(rep["kinds"]) == {*SHIPPED, new, orphan} and rep["kinds"] == rep["scenario"]
    assert rep["shell"] == [k for k in rep["kinds"] if k != orphan]
    assert rep["target"] == TARGET_KIND[orig]
    assert rep["fault"] == [True, True, True] and all(rep["schedule"])
    assert new in rep["drawn"] and orig in rep["drawn"]
    # the injector ran the copy exactly as the original: commands, calls, events
    o, n = rep["orig"], rep["new"]
    assert n["calls"] == o["calls"] and n["commands"] == o["commands"] and n["state"] == "undone"
    assert [dict(e, kind=None) for e in n["events"]] == [dict(e, kind=None) for e in o["events"]]
    assert {e["kind"] for e in n["events"]} == {new}
    # classified by evidence: every alert that is evidence of the original is of the copy
    assert all(o == c for o, c in rep["alerts"].values()) and any(
        o for o, _ in rep["alerts"].values())
    assert rep["questions"][0] == rep["questions"][1]
    # a crashed run's leftovers: the copy's hook removes them as the original's does
    assert rep["crash"][0] == rep["crash"][1] and rep["swept"] == []
    # a kind without an injector module is refused before anything changes
    msg, calls, commands, events = rep["orphan"]
    assert msg.startswith(f"{orphan}: no injector for this kind")
    assert f"testbed/shell/faults/{orphan.replace('-', '_')}.py is missing" in msg
    assert calls == commands == events == []
