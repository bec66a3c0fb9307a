"""The thin layers that need no root: the Mininet Topo, the CLI's topo verb, preflight's
rules, and parsing fping's summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testbed.datapath import choose_datapath
from testbed.reachability import Reachability, fping_unreached
from testbed.shaping import HTB_QUANTUM, htb_commands, queue_packets
from testbed.shell import preflight
from testbed.shell.mntopo import OF_PROTOCOLS, PlanTopo
from testbed.topologies import build

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_plan_topo_is_exactly_the_plan() -> None:
    """What `mn --custom testbed/shell/mntopo.py` builds: the plan's nodes, ports, DPIDs and
    rates."""
    plan = build("astral3", servers=4, gpus=2)
    topo = PlanTopo(plan, datapath="user")
    assert sorted(topo.hosts()) == sorted(h.name for h in plan.hosts)
    assert sorted(topo.switches()) == sorted(s.name for s in plan.switches)
    for s in plan.switches:
        info = topo.nodeInfo(s.name)
        assert info["dpid"] == s.dpid and info["datapath"] == "user"
        assert info["protocols"] == OF_PROTOCOLS and info["failMode"] == "secure"
    for h in plan.hosts:
        assert topo.nodeInfo(h.name)["ip"] == f"{h.ip}/8"
        assert topo.nodeInfo(h.name)["mac"] == h.mac
    links = {(a, b): info for a, b, info in topo.links(withInfo=True)}
    assert len(links) == len(plan.links)
    for link in plan.links:
        info = links.get((link.a, link.b)) or links[(link.b, link.a)]
        ports = {info["node1"]: info["port1"], info["node2"]: info["port2"]}
        assert ports == {link.a: link.a_port, link.b: link.b_port}
        assert info["bw"] == link.mbps
        assert info["cls"].__name__ == "TCULink"  # offloads off for the userspace datapath


@pytest.mark.parametrize("scale", [1e-6, 1e-4, 2.5e-3])
def test_plan_topo_htb_classes_carry_a_quantum_the_kernel_accepts(scale: float) -> None:
    """Mininet's own HTB class (``TCIntf.bwCmds``) leaves the quantum at rate / r2q, which
    the kernel flags as "big" above 200,000 bytes (and "small" under 1,000): every shaped
    link then printed a ``*** Error: Warning: sch_htb: quantum ...`` line under `mn`."""
    plan = build("astral3", servers=4, gpus=2, scale=scale)
    topo = PlanTopo(plan, datapath="user")
    assert 1000 <= HTB_QUANTUM <= 200_000
    for _a, _b, info in topo.links(withInfo=True):
        for side in ("cls1", "cls2"):
            intf = object.__new__(info[side])  # bwCmds needs no live interface
            cmds, parent = intf.bwCmds(bw=info["bw"])
            classes = [c for c in cmds if " class add " in c]
            assert len(classes) == 1 and parent == " parent 5:1 "
            assert classes[0].split()[-2:] == ["quantum", str(HTB_QUANTUM)], classes[0]
    assert all(c.split()[-2:] == ["quantum", str(HTB_QUANTUM)]
               for c in htb_commands("x-eth1", 40.0) if " class " in f" {c} ")


def test_datapath_choice() -> None:
    assert choose_datapath("user") == "user" and choose_datapath("kernel") == "kernel"
    assert choose_datapath("auto") == ("kernel" if os.path.isdir("/sys/module/openvswitch")
                                       else "user")
    with pytest.raises(ValueError, match="datapath"):
        choose_datapath("dpdk")


def _cli(*args: str, cwd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "astral_lab.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "PYTHONPATH": REPO})


def test_cli_topo_writes_plan_and_drawing(tmp_path: object) -> None:
    out = _cli("topo", "railonly", "--gpus", "8", "--gpus-per-server", "2", "-o", "p/plan.json",
               cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "nvswitch=4" in out.stdout and "wiring plan: p/plan.json" in out.stdout
    with open(os.path.join(str(tmp_path), "p", "plan.json")) as f:
        assert json.load(f)["topology"] == "railonly"
    with open(os.path.join(str(tmp_path), "p", "plan.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_cli_topo_default_output_is_a_results_folder(tmp_path: object) -> None:
    out = _cli("topo", "astral3", "--gpus", "8", "--gpus-per-server", "2", "--no-png",
               cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    (folder,) = os.listdir(os.path.join(str(tmp_path), "results"))
    assert folder.endswith("-topo-astral3") and not folder.endswith(".partial")


@pytest.mark.parametrize("args,needle", [
    (["topo", "astral3", "--servers", "5"], "servers=5 must be a multiple of servers_per_block"),
    (["topo", "fattree", "--gpus-per-server", "0"],
     "argument --gpus-per-server: must be a whole number in 1..255"),
    (["topo", "astral3", "--radix", "8"], "radix=8 lanes is too small"),
])
def test_cli_bad_parameters_give_one_line_and_exit_2(tmp_path: object, args: list[str],
                                                      needle: str) -> None:
    out = _cli(*args, cwd=str(tmp_path))
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not os.path.exists(os.path.join(str(tmp_path), "results"))  # nothing half-written


def test_preflight_refuses_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    pf = preflight.check(build("astral3", gpus=2), start_daemons=False)
    assert any("must run as root" in p for p in pf.problems)
    with pytest.raises(preflight.LabError, match="must run as root"):
        pf.raise_if_problems()


def test_preflight_refuses_rates_mininet_would_ignore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(preflight, "ovs_running", lambda: True)
    monkeypatch.setattr(preflight, "netem_available", lambda: False)
    monkeypatch.setattr(preflight, "existing_bridges", lambda: set())
    monkeypatch.setattr(preflight, "namespace_problem", lambda: "")
    monkeypatch.setattr(preflight.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    fast = build("astral3", gpus=2)
    for link in fast.links:  # a plan file written by hand: the builder refuses such a scale
        link.mbps = link.gbps * 10.0
    pf = preflight.check(fast, start_daemons=False)
    assert any("lower --scale" in p for p in pf.problems), pf.problems
    assert any("netem" in w for w in pf.warnings)
    ok = preflight.check(build("astral3", gpus=2), start_daemons=False)
    assert not any("scale" in p for p in ok.problems)
    monkeypatch.setattr(preflight, "namespace_problem", lambda: "remount: Invalid argument")
    bad = preflight.check(build("astral3", gpus=2), start_daemons=False)
    assert any("cannot create a network namespace" in p for p in bad.problems)


FPING = """10.0.0.2 : xmt/rcv/%loss = 1/1/0%, min/avg/max = 0.41/0.41/0.41
10.0.1.1 : xmt/rcv/%loss = 1/0/100%
10.0.1.2 : xmt/rcv/%loss = 3/1/66%, min/avg/max = 2.1/2.1/2.1
"""


def test_fping_summary_parsing() -> None:
    targets = ["10.0.0.2", "10.0.1.1", "10.0.1.2", "10.0.9.9"]  # the last one never answered
    assert fping_unreached(FPING, targets) == ["10.0.1.1", "10.0.9.9"]


def test_reachability_reports_loss_and_retries_honestly() -> None:
    r = Reachability(pairs=200, received=199, first_try_lost=7, failed=[("s0g0", "s1g1")])
    assert r.loss_pct == pytest.approx(0.5)
    text = str(r)
    assert "199/200" in text and "0.5% loss" in text and "7 needed a retry" in text
    assert "s0g0->s1g1" in text


def test_htb_shaping_commands() -> None:
    qdisc, cls, queue = htb_commands("lf0r0-eth3", 20.0)
    assert qdisc == "qdisc add dev lf0r0-eth3 root handle 5:0 htb default 1"
    assert "rate 20Mbit" in cls and "classid 5:1" in cls
    # lossless: eight seconds of 20 Mb/s in 1 KB frames, not the 1,000-packet drop-tail
    assert queue == "qdisc add dev lf0r0-eth3 parent 5:1 handle 10: pfifo limit 20000"
    assert len(htb_commands("x", 20.0, lossless=False)) == 2
    assert queue_packets(0.5) == 1000
