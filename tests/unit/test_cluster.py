"""Cluster mode without root: placement, the plan's server field, MTU, prechecks, CLI hook.

Placement is checked against its contract (every node once, blocks whole, only
shared-tier links cross) and, on small fabrics, against a brute-force search over
every balanced placement, so "minimised" is proven rather than asserted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from testbed.clusterplace import crossing_links, parse_servers, place, placement_units, with_servers
from testbed.shell import cleanup, cluster, clustercheck, procs
from testbed.shell.cluster import CLUSTER_MTU, GRETAP_OVERHEAD, ClusterLab
from testbed.shell.clustercheck import (
    TIMED_OUT,
    CommandResult,
    SharedConnections,
    SSHRunner,
    estimate_offset,
    precheck_servers,
)
from testbed.shell.lab import Lab
from testbed.shell.preflight import LabError
from testbed.topologies import BUILDERS, build
from traffic import roce
from traffic.roce import DEFAULT_PMTU, MAX_OVERHEAD
from vocab.plan import WiringPlan

SERVERS = ["lab", "w1", "w2", "w3"]


def _plans() -> list[tuple[str, WiringPlan]]:
    return [(f"{t}-{n}", build(t, servers=n, gpus=g))
            for t in BUILDERS for n, g in ((4, 2), (8, 4), (16, 2))]


PLANS = _plans()


# --- placement ----------------------------------------------------------------------------
@pytest.mark.parametrize("name,plan", PLANS, ids=[p[0] for p in PLANS])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_every_node_placed_once_and_blocks_whole(name: str, plan: WiringPlan, k: int) -> None:
    servers = SERVERS[:k]
    placement = place(plan, servers)
    assert sorted(placement) == sorted(n.name for n in plan.nodes)
    assert set(placement.values()) <= set(servers)
    units = placement_units(plan)
    by_unit: dict[object, set[str]] = {}
    for node, unit in units.items():
        by_unit.setdefault(unit, set()).add(placement[node])
    assert all(len(s) == 1 for s in by_unit.values()), "a block or pod was split"
    hosts = {h.name for h in plan.hosts}
    for link in crossing_links(plan, placement):
        assert link.a not in hosts and link.b not in hosts, f"{link.name} crosses with a GPU"
        assert link.kind in ("lane", "uplink"), link.name
        assert not (link.a in units and link.b in units), f"{link.name} joins two blocks"
    if k == 1:
        assert crossing_links(plan, placement) == []


def test_astral3_only_lanes_cross_and_count_is_the_bound() -> None:
    plan = build("astral3", servers=8, gpus=4)  # 4 blocks
    lanes = [ln for ln in plan.links if ln.kind == "lane"]
    for k in (1, 2, 4):
        placement = place(plan, SERVERS[:k])
        crossing = crossing_links(plan, placement)
        assert {ln.kind for ln in crossing} <= {"lane"}
        # every leaf reaches every spine equally: the best any spine can do is keep the
        # lanes of the blocks on its own server, 1/k of them
        assert len(crossing) == len(lanes) * (k - 1) // k
        blocks = Counter(placement[n.name] for n in plan.switches if n.tier == "leaf")
        assert len(set(blocks.values())) == 1  # blocks spread evenly
        spines = Counter(placement[n.name] for n in plan.switches if n.tier == "spine")
        assert max(spines.values()) - min(spines.values()) <= 1
        assert len(spines) == k


def _brute_force_min(plan: WiringPlan, servers: list[str]) -> int:
    """Fewest crossing links over every placement that keeps units whole and balanced."""
    units = placement_units(plan)
    names = sorted(set(units.values()))
    size = Counter(units.values())
    shared = [n.name for n in plan.nodes if n.name not in units]
    best = None
    for assign in itertools.product(servers, repeat=len(names)):
        load = Counter()
        for u, s in zip(names, assign, strict=True):
            load[s] += size[u]
        if max(load.values()) - min(load[s] for s in servers) > max(size.values()):
            continue  # not balanced
        for sh in itertools.product(servers, repeat=len(shared)):
            placement = {n: assign[names.index(u)] for n, u in units.items()}
            placement.update(zip(shared, sh, strict=True))
            c = len(crossing_links(plan, placement))
            best = c if best is None else min(best, c)
    assert best is not None
    return best


@pytest.mark.parametrize("topology", ["astral3", "railonly"])
def test_crossing_is_minimal_by_brute_force(topology: str) -> None:
    plan = build(topology, servers=4, gpus=2)
    for servers in (SERVERS[:2], SERVERS[:3]):
        ours = len(crossing_links(plan, place(plan, servers)))
        assert ours == _brute_force_min(plan, servers)


def test_placement_follows_server_order_and_is_deterministic() -> None:
    plan = build("astral3", servers=8, gpus=2)
    a = place(plan, ["x", "y"])
    assert a == place(plan, ["x", "y"])
    assert a["lf0r0"] == "x" and a["s0g0"] == "x" and a["lf1r0"] == "y"
    b = place(plan, ["y", "x"])
    assert b["lf0r0"] == "y"


def test_more_servers_than_blocks_leaves_extra_servers_empty() -> None:
    plan = build("astral3", servers=4, gpus=2)  # 2 blocks
    placement = place(plan, SERVERS)
    assert set(placement.values()) == {"lab", "w1"}


@pytest.mark.parametrize("bad", ["", "a,,b", "a,a", "a b", " ,x", "-oProxyCommand=x"])
def test_bad_server_lists(bad: str) -> None:
    with pytest.raises(ValueError, match="--cluster"):
        parse_servers(bad)
    with pytest.raises(ValueError, match="--cluster"):
        place(build("astral3", servers=4, gpus=2), bad.split(","))


def test_crossing_links_needs_every_node() -> None:
    plan = build("astral3", servers=4, gpus=2)
    placement = place(plan, ["a", "b"])
    del placement["spine0"]
    with pytest.raises(ValueError, match="spine0"):
        crossing_links(plan, placement)


# --- the plan records the server ----------------------------------------------------------
def test_plan_records_servers_and_old_plans_still_load() -> None:
    plan = build("astral3", servers=4, gpus=2)
    old_json = json.dumps(plan.to_dict())
    assert all("server" not in n for n in plan.to_dict()["nodes"])  # no new key when unset
    placed = with_servers(plan, place(plan, ["a", "b"]))
    assert plan.nodes[0].server is None  # the input is not changed
    again = WiringPlan.from_dict(json.loads(json.dumps(placed.to_dict())))
    assert {n.name: n.server for n in again.nodes} == place(plan, ["a", "b"])
    old = WiringPlan.from_dict(json.loads(old_json))
    assert all(n.server is None for n in old.nodes)


# --- MTU ----------------------------------------------------------------------------------
def test_mtu_leaves_room_for_gre_and_roce() -> None:
    assert CLUSTER_MTU + GRETAP_OVERHEAD <= 1500
    assert DEFAULT_PMTU + MAX_OVERHEAD <= CLUSTER_MTU  # a RoCE FIRST frame still fits
    assert roce.largest_roce_pmtu(CLUSTER_MTU) == 1024
    assert roce.largest_roce_pmtu(1024 + MAX_OVERHEAD - 1) == 512
    assert roce.largest_roce_pmtu(9000) == 4096
    assert roce.largest_roce_pmtu(100) == 0


# --- prechecks ----------------------------------------------------------------------------
class FakeServers:
    """A runner that answers like servers would; records every command."""

    def __init__(self, user: str = "vagrant", **broken: str) -> None:
        self.user = user  # who logs in: a user's PATH on Debian has no /sbin, /usr/sbin
        self.broken = broken  # server -> what is wrong with it
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, server: str, argv: Sequence[str], stdin: str | None) -> CommandResult:
        argv = list(argv)
        self.calls.append((server, argv))
        fault = self.broken.get(server, "")
        text = " ".join(argv)
        if argv == ["true"]:
            return CommandResult(255 if fault == "ssh" else 0, "",
                                 "Permission denied (publickey)." if fault == "ssh" else "")
        if argv[:2] == ["sudo", "-n"] and argv[2:] == ["true"]:
            return CommandResult(1 if fault == "sudo" else 0)
        if "testbed.version.__version__" in text:
            if fault == "noversion":
                return CommandResult(1, "", "No module named testbed")
            return CommandResult(0, "0.0.9\n" if fault == "version" else "1.2.3\n")
        if "astral-tchk" in text:
            return CommandResult(2 if fault == "nogre" else 0, "", "Unknown device type")
        if "command -v" in text:
            if self.user != "root" and argv[:2] != ["sudo", "-n"]:
                return CommandResult(0, "ethtool\ntc\n")
            return CommandResult(0, "fping\n" if fault == "tools" else "")
        if "ovs-vsctl" in argv:
            return CommandResult(1 if fault == "ovs" else 0)
        if argv[:2] == ["test", "-d"]:
            return CommandResult(0 if fault == "kernel" else 1)
        raise AssertionError(f"unexpected command {argv}")


def _check(runner: FakeServers, servers: list[str], **kw: object) -> clustercheck.ClusterPrecheck:
    return precheck_servers(servers, runner, user="vagrant", local=["lab"], version="1.2.3",
                            python="/opt/lab/.venv/bin/python", **kw)  # type: ignore[arg-type]


def test_precheck_all_good_and_local_server_skipped() -> None:
    runner = FakeServers(w2="kernel")
    res = _check(runner, ["lab", "w1", "w2"])
    assert res.problems == [] and res.warnings == []
    assert res.datapaths == {"w1": "user", "w2": "kernel"}
    here = [a for s, a in runner.calls if s == "lab"]  # no SSH here: only the tunnel probe
    assert len(here) == 1 and "astral-tchk" in " ".join(here[0])
    assert ["sudo", "-n", "ovs-vsctl", "--timeout=5", "show"] in [a for _, a in runner.calls]
    res.raise_if_problems()


@pytest.mark.parametrize("fault,words", [
    ("ssh", ["w1", "passwordless SSH", "vagrant", "ssh-copy-id", "Permission denied"]),
    ("sudo", ["w1", "sudo", "password", "NOPASSWD"]),
    ("version", ["w1", "0.0.9", "1.2.3"]),
    ("noversion", ["w1", "no astral-lab", "/opt/lab/.venv/bin/python"]),
    ("tools", ["w1", "missing fping"]),
    ("ovs", ["w1", "Open vSwitch is not running", "ovs-ctl start"]),
    ("nogre", ["w1", "cannot make gre tunnels", "modprobe ip_gre"]),
])
def test_precheck_names_server_and_what_is_missing(fault: str, words: list[str]) -> None:
    res = _check(FakeServers(w1=fault), ["lab", "w1", "w2"])
    assert len(res.problems) == 1, res.problems
    for w in words:
        assert w in res.problems[0]
    with pytest.raises(LabError, match="w1"):
        res.raise_if_problems()


def test_precheck_skips_clock_of_a_broken_server() -> None:
    asked: list[str] = []
    res = _check(FakeServers(w1="ovs"), ["lab", "w1", "w2"],
                 clock_probe=lambda server: asked.append(server) or [(1.0, 1.0, 1.0)])
    assert asked == ["w2"] and len(res.problems) == 1 and res.one_way_latency


def test_precheck_checks_tunnels_here_too() -> None:
    res = _check(FakeServers(lab="nogre"), ["lab", "w1"], tunnel="gre")
    assert res.problems == ["lab: this kernel cannot make gre tunnels (no gretap device: "
                            "modprobe ip_gre, or try --tunnel vxlan)"]
    runner = FakeServers(lab="nogre")
    assert _check(runner, ["lab"]).problems == []  # one server: no tunnels, no check
    assert runner.calls == []
    runner = FakeServers()
    _check(runner, ["lab", "w1"], tunnel="ssh")
    assert not any("astral-tchk" in " ".join(a) for _, a in runner.calls)


def test_precheck_stops_at_failed_login() -> None:
    runner = FakeServers(w1="ssh")
    _check(runner, ["lab", "w1"])
    assert [c for c in runner.calls if c[0] == "w1"] == [("w1", ["true"])]


def test_precheck_root_needs_no_sudo() -> None:
    runner = FakeServers()
    precheck_servers(["lab", "w1"], runner, user="root", local=["lab"], version="1.2.3")
    assert all(a[0] != "sudo" for _, a in runner.calls)


def test_default_version_is_the_packages_and_needs_no_cli_import() -> None:
    """The prechecks compare each server's ``testbed.version.__version__`` with this
    machine's, so that testbed never imports the CLI package."""
    from testbed.version import __version__

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml")) as f:
        declared = re.search(r'^version = "([^"]+)"', f.read(), re.M)
    assert declared is not None and declared.group(1) == __version__
    probe = "import sys, testbed.shell.cluster; print('astral_lab' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"
    servers = FakeServers(user="root")

    def same_version(server: str, argv: Sequence[str], stdin: str | None) -> CommandResult:
        if "testbed.version.__version__" in " ".join(argv):
            return CommandResult(0, __version__ + "\n")
        return servers(server, argv, stdin)

    assert not precheck_servers(["lab", "w1"], same_version, user="root",
                                local=["lab"]).problems


def test_estimate_offset_uses_shortest_round_trip() -> None:
    samples = [(10.0, 10.5, 10.2), (20.0, 20.0105, 20.001), (30.0, 29.0, 30.5)]
    offset, unc = estimate_offset(samples)
    assert offset == pytest.approx(0.01)
    assert unc == pytest.approx(0.0005)
    with pytest.raises(ValueError):
        estimate_offset([])


@pytest.mark.parametrize("samples,one_way,warn", [
    ([(1.0, 1.0002, 1.0002)], True, None),         # 0.1 ms off, +-0.1 ms: in sync
    ([(1.0, 1.0101, 1.0002)], False, "+10.00 ms off"),
    ([(1.0, 1.01, 1.02)], False, "cannot be measured"),  # 20 ms round trip
    ([], False, "could not read its clock"),
])
def test_clock_check_marks_round_trip_only(samples: list[tuple[float, float, float]],
                                           one_way: bool, warn: str | None) -> None:
    res = _check(FakeServers(), ["lab", "w1"], clock_probe=lambda server: samples)
    assert res.one_way_latency is one_way
    assert res.problems == []
    if warn:
        assert len(res.warnings) == 1 and warn in res.warnings[0] and "w1" in res.warnings[0]
        assert "round-trip only" in res.warnings[0]
    else:
        assert res.warnings == []


def test_cluster_lab_refuses_before_building_anything() -> None:
    plan = build("astral3", servers=4, gpus=2)
    remote_head = ClusterLab(plan, ["192.0.2.1", "localhost"])  # TEST-NET: never local
    with pytest.raises(LabError, match="first --cluster server .*192.0.2.1.* must be this"):
        remote_head.start()
    assert remote_head.workdir == "" and remote_head.net is None
    broken = ClusterLab(plan, ["localhost", "192.0.2.7"], runner=FakeServers(**{
        "192.0.2.7": "ovs"}), user="vagrant", clock_probe=lambda server: [])
    with pytest.raises(LabError, match="192.0.2.7: Open vSwitch is not running"):
        broken.start()
    assert broken.workdir == "" and broken.controller_proc is None


# --- what bring-up will run on each server ------------------------------------------------
def test_server_script_puts_noop_qos_before_shaping_on_every_port() -> None:
    plan = build("astral3", servers=4, gpus=2)
    lab = ClusterLab(plan, ["localhost", "w1"], user="root")
    lab.datapaths = {"localhost": "user", "w1": "user"}
    ends = lab._root_ends_by_server()
    assert sorted(ends) == ["localhost", "w1"]
    assert sum(len(v) for v in ends.values()) == 2 * len(plan.links) - len(plan.hosts)
    script = lab._server_script("w1", ends["w1"], hosts_here=4, n_hosts=8)
    lines = script.splitlines()
    qos = next(i for i, ln in enumerate(lines) if "linux-noop" in ln)
    tc = lines.index("tc -batch - <<'EOF'")
    assert qos < tc
    for intf, _mbps in ends["w1"]:
        assert f"link set dev {intf} mtu {CLUSTER_MTU}" in lines
        assert f"Port {intf} qos=@noop" in lines[qos]
        assert f"qdisc add dev {intf} root handle 5:0 htb default 1" in lines
        assert f"ethtool -K {intf} rx off tx off >/dev/null 2>&1 || true" in lines
    on_w1 = {n for n, s in lab.placement.items() if s == "w1"}
    for sw in plan.switches:
        assert (f"Bridge {sw.name} external_ids" in lines[qos]) == (sw.name in on_w1)
    assert "gc_thresh3" in script  # a worker's neighbour table is raised there
    assert lines[-1] == "echo astral-ok"


# --- CLI hook -----------------------------------------------------------------------------
def test_cli_option_and_factory() -> None:
    from astral_lab.cluster_cli import add_cluster_option

    p = argparse.ArgumentParser()
    add_cluster_option(p)
    args = p.parse_args(["--cluster", "lab,worker1", "--tunnel", "ssh"])
    assert args.cluster == ["lab", "worker1"] and args.tunnel == "ssh"
    assert p.parse_args([]).cluster is None
    with pytest.raises(SystemExit):
        p.parse_args(["--cluster", "a,a"])
    plan = build("astral3", servers=4, gpus=2)
    assert type(cluster.make_lab(plan, None)) is Lab
    made = cluster.make_lab(plan, ["localhost"], lb="planned")
    assert isinstance(made, ClusterLab) and made.lb == "planned"
    assert all(n.server == "localhost" for n in made.plan.nodes)
    with pytest.raises(ValueError, match="tunnel"):
        ClusterLab(plan, ["localhost"], tunnel="l2tp")


def test_run_on_adds_sudo_only_on_other_servers() -> None:
    plan = build("astral3", servers=4, gpus=2)
    runner = FakeServers()
    lab = ClusterLab(plan, ["localhost", "w1"], user="vagrant", runner=runner)
    assert lab.server_of("lf0r0") == "localhost" and lab.server_of("s3g1") == "w1"
    lab.run_on("w1", ["true"])
    lab.run_on("localhost", ["true"])
    assert runner.calls == [("w1", ["sudo", "-n", "true"]), ("localhost", ["true"])]
    root = ClusterLab(plan, ["localhost", "w1"], user="root", runner=runner)
    root.run_on("w1", ["true"])
    assert runner.calls[-1] == ("w1", ["true"])


def test_short_commands_share_one_ssh_connection_per_server(monkeypatch: Any) -> None:
    """The runner's commands and Mininet's ``rcmd`` carry the run's ControlMaster options,
    before the destination; node shells (``sshcmd`` outside ``rcmd``) do not."""
    ran: list[list[str]] = []
    monkeypatch.setattr(procs, "run", lambda cmd, **_kw: ran.append(cmd) or
                        subprocess.CompletedProcess(cmd, 0, "", ""))
    shared = SharedConnections("root")
    try:
        assert os.path.isdir(shared.dir)
        assert f"ControlPath={shared.dir}/%C" in shared.options
        assert "ControlMaster=auto" in shared.options

        runner = SSHRunner("root", local=["lab"])
        runner("w1", ["true"], None)
        runner.shared = shared.options
        runner("w1", ["true"], None)
        runner("lab", ["true"], None)
        plain, with_opts, local = ran
        assert not any("ControlPath" in a for a in plain) and plain[-2:] == ["root@w1", "true"]
        assert with_opts[-2:] == ["root@w1", "true"]
        assert with_opts[with_opts.index("root@w1") - len(shared.options):
                         with_opts.index("root@w1")] == shared.options
        assert local == ["true"]

        class Node:  # Mininet's RemoteMixin, as far as rcmd goes
            isRemote = True
            sshcmd = ["sudo", "-E", "-u", "root", "ssh", "-tt", "root@10.0.0.2"]

            def rcmd(self, *cmd: str, **_opts: Any) -> list[str]:
                if cmd == ("fail",):
                    raise RuntimeError("ssh died")
                return list(self.sshcmd)

        class Shared(cluster.SharedRcmd, Node):
            shared_ssh = shared.options

        node = Shared()
        assert node.rcmd("ip link") == [*Node.sshcmd[:-1], *shared.options, "root@10.0.0.2"]
        with pytest.raises(RuntimeError):
            node.rcmd("fail")
        assert node.sshcmd == Node.sshcmd  # the shell's own command, also after a failure
        local_node = Shared()
        local_node.isRemote = False
        assert local_node.rcmd("ip link") == Node.sshcmd
        assert type("Unshared", (cluster.SharedRcmd, Node), {})().rcmd("x") == Node.sshcmd

        ran.clear()
        shared.close(["w1"])
        assert ran == [] and not os.path.exists(shared.dir)  # no socket: none was opened
        shared = SharedConnections("root")
        open(os.path.join(shared.dir, "sock"), "w").close()  # a master's socket
        shared.close(["w1", "10.0.0.2"])
        assert [c[-3:] for c in ran] == [["-O", "exit", "root@w1"], ["-O", "exit", "root@10.0.0.2"]]
        assert all(c[c.index("-O") - len(shared.options):c.index("-O")] == shared.options
                   for c in ran)
    finally:
        shared.close([])
    assert not os.path.exists(shared.dir)


def test_a_refused_cluster_lab_leaves_no_shared_connection_folder(monkeypatch: Any) -> None:
    made: list[SharedConnections] = []

    class Recorded(SharedConnections):
        def __init__(self, user: str, prefix: str) -> None:
            super().__init__(user, prefix)
            made.append(self)

    monkeypatch.setattr(cluster, "SharedConnections", Recorded)
    plan = build("astral3", servers=4, gpus=2)
    broken = ClusterLab(plan, ["localhost", "192.0.2.7"], runner=FakeServers(**{
        "192.0.2.7": "ovs"}), user="vagrant", clock_probe=lambda server: [])
    with pytest.raises(LabError, match="Open vSwitch is not running"):
        broken.start()
    assert len(made) == 1 and not os.path.exists(made[0].dir) and broken.shared is None
    # named as the run's scratch folders, so `astral-lab clean` sweeps it after a kill -9
    assert cleanup.scratch_owner(made[0].dir) == (broken.run_id, os.getpid())


def test_server_files_carry_a_replays_files_to_and_from_another_server(tmp_path: Any) -> None:
    """``ServerFiles`` over a fake runner whose "w1" has a file system of its own: every
    path under ``here`` is under ``there`` on w1. Specs reach w1, ready files and reports
    are looked for and read there, hosts on this machine cost no command, and the folder
    made on w1 goes with the lab."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    calls: list[str] = []

    def runner(server: str, argv: Sequence[str], stdin: str | None) -> CommandResult:
        assert server == "w1"
        calls.append(" ".join(argv))
        if argv[0] == "rm":
            argv = [a.replace(str(here), str(there)) for a in argv]
            p = subprocess.run(list(argv), capture_output=True, text=True)
        else:
            assert list(argv) == ["sh", "-s"] and stdin is not None
            p = subprocess.run(["sh", "-s"], input=stdin.replace(str(here), str(there)),
                               capture_output=True, text=True)
        return CommandResult(p.returncode, p.stdout.replace(str(there), str(here)), p.stderr)

    plan = build("astral3", servers=4, gpus=2)
    lab = ClusterLab(plan, ["localhost", "w1"], user="root", runner=runner)
    local, remote = "s0g0", "s3g1"
    assert lab.server_of(local) == "localhost" and lab.server_of(remote) == "w1"
    work = here / "scratch" / "replay-1"
    work.mkdir(parents=True)
    lab.files.makedirs([local, remote], str(work))
    assert (there / "scratch" / "replay-1").is_dir() and len(calls) == 1
    lab.files.makedirs([remote], str(here / "scratch"))  # there already: not w1's to remove
    assert lab.files.made == {"w1": [str(here / "scratch")]}  # the outermost it made

    spec, mine = work / "plan-s3g1.bin", work / "plan-s0g0.bin"
    spec.write_bytes(bytes(range(256)) * 3 + b"\n\x00end")
    mine.write_bytes(b"stays here")
    lab.files.push({remote: [str(spec)], local: [str(mine)]})
    assert (there / "scratch" / "replay-1" / "plan-s3g1.bin").read_bytes() == spec.read_bytes()
    assert not (there / "scratch" / "replay-1" / "plan-s0g0.bin").exists()

    ready = {remote: [str(work / "recv-s3g1.json.ready")], local: [str(work / "l.ready")]}
    assert sorted(lab.files.missing(ready)) == sorted(p for ps in ready.values() for p in ps)
    (there / "scratch" / "replay-1" / "recv-s3g1.json.ready").touch()
    (work / "l.ready").touch()
    assert lab.files.missing(ready) == []

    (there / "scratch" / "replay-1" / "recv-s3g1.json").write_text('{"bytes": 262144}')
    (there / "scratch" / "replay-1" / "empty.json").write_text("")
    reports = [str(work / n) for n in ("recv-s3g1.json", "empty.json", "never.json")]
    lab.files.pull({remote: reports})
    assert (work / "recv-s3g1.json").read_text() == '{"bytes": 262144}'
    assert (work / "empty.json").read_text() == ""
    assert not (work / "never.json").exists()

    n = len(calls)
    lab.files.push({local: [str(mine)]})
    lab.files.pull({local: [str(mine)]})
    assert len(calls) == n  # hosts on this machine share its files

    lab.files.remove()
    assert not (there / "scratch").exists() and work.is_dir()


def test_server_files_name_the_server_when_a_copy_fails(tmp_path: Any) -> None:
    plan = build("astral3", servers=4, gpus=2)
    lab = ClusterLab(plan, ["localhost", "w1"], user="root",
                     runner=lambda s, a, i: CommandResult(1, "", "sh: 1: cannot create: "
                                                               "Read-only file system"))
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    with pytest.raises(LabError, match=r"^w1: copying 1 file\(s\): sh: 1: cannot create"):
        lab.files.push({"s3g1": [str(spec)]})


def test_a_server_too_busy_to_answer_a_look_is_asked_again(tmp_path: Any) -> None:
    """A look for ready files that timed out is not "missing" for good: ``wait_ready`` asks
    again until its own deadline; any other failure, or a copy that timed out, is one error."""
    from traffic.shell.running import NotAnswered, wait_ready

    answers = [CommandResult(TIMED_OUT, "", "timed out after 120 s")] * 3
    plan = build("astral3", servers=4, gpus=2)
    lab = ClusterLab(plan, ["localhost", "w1"], user="root",
                     runner=lambda s, a, i: answers.pop(0) if answers else CommandResult(0, "", ""))
    ready = {"s3g1": [str(tmp_path / "recv.ready")]}
    with pytest.raises(NotAnswered, match="^w1: looking for files: timed out"):
        lab.files.missing(ready)

    class Running:
        stderr = None

        def poll(self) -> None:
            return None

    wait_ready(lab.files, {"s3g1": (Running(), ready["s3g1"][0])})
    assert answers == []  # the two other timed-out looks were asked again, then it was there

    answers[:] = [CommandResult(TIMED_OUT, "", "timed out after 120 s")] * 10**6
    with pytest.raises(NotAnswered):  # until the deadline, then the server's own words
        wait_ready(lab.files, {"s3g1": (Running(), ready["s3g1"][0])}, timeout=0.2)
    answers[:] = [CommandResult(TIMED_OUT, "", "timed out after 120 s")]
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    with pytest.raises(LabError, match=r"^w1: copying 1 file\(s\): timed out"):
        lab.files.push({"s3g1": [str(spec)]})
