"""Several switch daemons, the parts that need no root: counting, placing switches,
aiming commands at a daemon, and finding what a crashed run left."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from testbed import daemons
from testbed.datapath import Datapath
from testbed.shaping import root_ends
from testbed.shell import switch_daemons
from testbed.topologies import build
from vocab.plan import intf_node


@pytest.mark.parametrize(("text", "want"), [("auto", "auto"), (" AUTO ", "auto"), ("1", 1),
                                            ("4", 4), (2, 2)])
def test_parse_request(text: Any, want: Any) -> None:
    assert daemons.parse_request(text) == want


@pytest.mark.parametrize("text", ["0", "-1", "two", "", "1.5"])
def test_bad_requests_are_one_line_errors(text: str) -> None:
    with pytest.raises(ValueError, match="switch daemons") as info:
        daemons.parse_request(text)
    assert "\n" not in str(info.value)


def test_resolve_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    assert daemons.resolve_count("auto", Datapath.USER, 20) == 4
    assert daemons.resolve_count("auto", Datapath.USER, 3) == 3  # never more than switches
    assert daemons.resolve_count("auto", Datapath.KERNEL, 20) == 1
    assert daemons.resolve_count(1, Datapath.KERNEL, 20) == 1
    assert daemons.resolve_count("2", Datapath.USER, 20) == 2
    with pytest.raises(ValueError, match="userspace datapath"):
        daemons.resolve_count(2, Datapath.KERNEL, 20)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_assign_balances_ports(n: int) -> None:
    for plan in (build("astral3"), build("astral3", servers=2, gpus=4, servers_per_block=2)):
        owner = daemons.assign(plan, n)
        assert set(owner) == {s.name for s in plan.switches}
        assert set(owner.values()) == set(range(min(n, len(plan.switches))))
        ports: Counter[int] = Counter()
        for link in plan.links:
            for node in (link.a, link.b):
                if node in owner:
                    ports[owner[node]] += 1
        degree: Counter[str] = Counter()
        for link in plan.links:
            degree[link.a] += 1
            degree[link.b] += 1
        largest = max(degree[s.name] for s in plan.switches)
        # greedy largest-first: no daemon carries more than the least loaded + one switch
        assert max(ports.values()) - min(ports.values()) <= largest
        assert owner == daemons.assign(plan, n)  # the same every time


def test_calibration_fabric_splits_leaves_and_spines() -> None:
    """One rail block: keeping it together (as the cluster does) would leave daemon 1 idle."""
    plan = build("astral3", servers=2, gpus=4, servers_per_block=2)
    owner = daemons.assign(plan, 2)
    leaves = {owner[s.name] for s in plan.switches if s.name.startswith("lf")}
    spines = {owner[s.name] for s in plan.switches if s.name.startswith("spine")}
    assert leaves == {0, 1} and spines == {0, 1}


def test_commands_are_aimed_at_their_daemon() -> None:
    d = daemons.SwitchDaemon(2, "astral-ovs-abcdef0123-2", "/run/astral-lab-ovs/abcdef0123-2")
    assert d.ovs(["ovs-vsctl", "show"])[:2] == ["env", "OVS_RUNDIR=/run/astral-lab-ovs/"
                                                "abcdef0123-2"]
    assert d.ovs(["ovs-vsctl", "show"])[-2:] == ["ovs-vsctl", "show"]
    assert d.ns(["tc", "qdisc"]) == ["ip", "netns", "exec", "astral-ovs-abcdef0123-2", "tc",
                                     "qdisc"]
    assert d.ip() == ["-n", "astral-ovs-abcdef0123-2"]
    assert d.mgmt_ip == "169.254.77.3" and daemons.CONTROLLER_IP == "169.254.77.1"
    root = daemons.ROOT
    assert root.ovs(["ovs-vsctl"]) == ["ovs-vsctl"] and root.ns(["tc"]) == ["tc"]
    assert root.ip() == [] and root.pids() == []


def test_group_ends_puts_each_port_with_its_switch() -> None:
    plan = build("astral3", servers=2, gpus=4, servers_per_block=2)
    owner = daemons.assign(plan, 2)
    running = [daemons.ROOT, daemons.SwitchDaemon(1, "ns1", "/x")]
    groups = daemons.group_ends(root_ends(plan), lambda sw: running[owner[sw]])
    assert sum(len(v) for v in groups.values()) == len(root_ends(plan))
    node_of = {ln.b_intf: ln.b for ln in plan.links} | {ln.a_intf: ln.a for ln in plan.links}
    assert all(intf_node(i) == n for i, n in node_of.items())
    for d, ends in groups.items():
        assert all(owner[node_of[name]] == d.index for name, _mbps in ends)


def test_stale_finds_dead_runs_namespaces_and_folders(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    netns, state = tmp_path / "netns", tmp_path / "state"
    netns.mkdir()
    state.mkdir()
    monkeypatch.setattr(daemons, "DAEMON_DIR", str(state))
    for name in ("astral-ovs-aaaaaaaaaa-1", "astral-ovs-bbbbbbbbbb-1", "astral-probe-x", "other"):
        (netns / name).touch()
    (state / "cccccccccc-2").mkdir()  # a folder whose namespace is gone
    (state / "bbbbbbbbbb-1").mkdir()
    (state / "notes").mkdir()  # not a daemon's folder
    found = switch_daemons.stale({"bbbbbbbbbb"}, root=str(netns))
    assert [(d["netns"], d["index"]) for d in found] == [
        ("astral-ovs-aaaaaaaaaa-1", 1), ("astral-ovs-cccccccccc-2", 2)]
    assert found[1]["rundir"] == str(state / "cccccccccc-2")
    assert daemons.running() == []  # folders without live pid files are no running daemons
