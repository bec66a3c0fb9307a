"""Preflight checks: say clearly what this machine can and cannot do before building anything.

Mininet reports many failures only as a printed ``*** Error`` and carries on (a
missing netem qdisc, an over-limit ``bw``), and a userspace OVS without
offloads turned off passes ping but stalls TCP. The lab checks first and
refuses with one message that lists every problem and its fix. The probes of what
fault injection needs (``loss_backend_problems``, ``nft_rules_problem``) are here for the
same reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from testbed.datapath import Datapath, choose_datapath, kernel_ovs_available
from testbed.fabricspec import MAX_EMULATED_MBPS
from testbed.faultkinds._loss import iptables_loss_commands, nft_loss_commands
from testbed.shell import cleanup, procs, signals
from vocab.plan import WiringPlan

#: Mininet silently ignores ``bw`` above this (Mb/s).
OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"


class LabError(RuntimeError):
    """A lab cannot be brought up here; the message says why and what to do."""


@dataclass
class Preflight:
    """What preflight found; ``problems`` stop the lab, ``warnings`` are printed."""

    datapath: Datapath = Datapath.USER
    netem: bool = False
    ovs_version: str = ""
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def raise_if_problems(self) -> None:
        if self.problems:
            raise LabError("cannot bring up the lab:\n  - " + "\n  - ".join(self.problems))


def ovs_running() -> bool:
    """Both daemons answer: the database (``ovs-vsctl show``) and the switch itself. A start
    cut short can leave ovsdb-server up without ovs-vswitchd, and then every bridge change
    waits for a switch that never comes."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return all(subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0
                   for cmd in (["ovs-vsctl", "--timeout=5", "show"],
                               ["ovs-appctl", "--timeout=5", "-t", "ovs-vswitchd", "version"]))
    return False


def start_ovs() -> bool:
    """Start ovsdb-server and ovs-vswitchd (as ``make setup`` does) if they are not both
    running. A stop that lands meanwhile waits until the start is over: cut short, it would
    leave one daemon up without the other."""
    if ovs_running():
        return True
    with signals.held():
        if os.path.isdir("/run/systemd/system"):
            subprocess.run(["systemctl", "start", "openvswitch-switch"], capture_output=True)
        if not ovs_running() and os.path.exists(OVS_CTL):
            subprocess.run([OVS_CTL, "start", "--system-id=random"], capture_output=True)
    return ovs_running()


def namespace_problem() -> str:
    """Why ``mnexec -n`` fails here, or "" when it works.

    Checked up front because when Mininet cannot start a host shell it waits for
    the shell's prompt forever instead of failing.
    """
    try:
        probe = subprocess.run(["mnexec", "-n", "ip", "link", "show", "lo"],
                               capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if probe.returncode != 0:
        return (probe.stderr or probe.stdout).strip()[:200] or f"exit {probe.returncode}"
    return ""


_NETEM_CACHE: dict[str, bool] = {}


def netem_available() -> bool:
    """Try a netem qdisc on a dummy device in a throwaway namespace (leaves nothing behind)."""
    if "netem" in _NETEM_CACHE:
        return _NETEM_CACHE["netem"]
    ns = f"{cleanup.PROBE_NS}{uuid.uuid4().hex[:8]}"
    ok = False
    try:
        if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode == 0:
            subprocess.run(["ip", "-n", ns, "link", "add", "d0", "type", "dummy"],
                           capture_output=True)
            ok = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "d0", "root", "netem",
                                 "delay", "1ms"], capture_output=True).returncode == 0
    finally:
        with signals.held():  # a second stop must not leave the namespace behind
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    _NETEM_CACHE["netem"] = ok
    return ok


_BACKEND_CACHE: dict[str, dict[str, str]] = {}


@contextlib.contextmanager
def _probe_namespace() -> Iterator[list[str] | None]:
    """A throwaway namespace with a veth ``fp0`` (peer ``fp1``) to try rules on: yields
    the ``ip netns exec`` prefix (None when no namespace can be made), deletes it after."""
    ns = f"{cleanup.PROBE_NS}f{uuid.uuid4().hex[:8]}"
    try:
        if procs.run(["ip", "netns", "add", ns]).returncode != 0:
            yield None
            return
        procs.run(["ip", "-n", ns, "link", "add", "fp0", "type", "veth", "peer", "name",
                     "fp1"])
        yield ["ip", "netns", "exec", ns]
    finally:
        with signals.held():
            procs.run(["ip", "netns", "del", ns])


def loss_backend_problems() -> dict[str, str]:
    """``{"nft": why not or "", "iptables": why not or ""}`` for a nic-loss fault, probed once.

    Like ``netem_available``: the exact rules a nic-loss uses are tried on a
    veth in a throwaway namespace, which is deleted again (nothing is left behind).
    """
    if "result" in _BACKEND_CACHE:
        return _BACKEND_CACHE["result"]
    found = {"nft": "", "iptables": ""}
    with _probe_namespace() as nsx:
        if nsx is None:
            why = "cannot create a network namespace to test in"
            found = {"nft": why, "iptables": why}
        else:
            setup, script, _undo = nft_loss_commands("fp0", 0.5, "both")
            found["nft"] = _load_problem(nsx, setup, script)
            setup_i, _u = iptables_loss_commands("fp0", 0.5, "both")
            for argv in setup_i:
                proc = procs.run(nsx + argv)
                if proc.returncode != 0:
                    found["iptables"] = (proc.stderr or proc.stdout).strip()[:200]
                    break
    _BACKEND_CACHE["result"] = found
    return found


def _load_problem(nsx: list[str], setup: list[list[str]], script: str) -> str:
    """Run ``setup``, then ``nft -f`` the script, behind the prefix ``nsx``: why it failed
    or ""."""
    for argv in setup:
        procs.run(nsx + argv)
    proc = procs.run(nsx + ["nft", "-f", "-"], stdin=script)
    if proc.returncode != 0:
        return (proc.stderr or proc.stdout).strip()[:200] or "nft failed"
    return ""


_RULES_CACHE: dict[str, str] = {}


def nft_rules_problem(name: str, rules: Callable[[str], tuple[list[list[str]], str]]) -> str:
    """Why the nftables rules ``rules(dev)`` gives (setup argv list, ``nft -f`` script)
    cannot be loaded here, or "" when they load; probed once per ``name``.

    As ``loss_backend_problems`` does for a nic-loss: a link fault's exact rules (the
    netdev egress hook, ``fwd`` to a sink, a payload statement) are tried on a veth in a
    throwaway namespace, which is deleted again.
    """
    if name not in _RULES_CACHE:
        with _probe_namespace() as nsx:
            _RULES_CACHE[name] = ("cannot create a network namespace to test in"
                                  if nsx is None else _load_problem(nsx, *rules("fp0")))
    return _RULES_CACHE[name]


def existing_bridges() -> set[str]:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True,
                              text=True, timeout=10)
        if proc.returncode == 0:
            return set(proc.stdout.split())
    return set()


def check(plan: WiringPlan, datapath: str = "auto", start_daemons: bool = True) -> Preflight:
    """Run every check; never raises (call ``raise_if_problems``)."""
    pf = Preflight()
    if os.geteuid() != 0:
        pf.problems.append("must run as root (Mininet creates namespaces and veths): "
                           "use sudo, e.g. `sudo make demo`")
    for tool, pkg in (("mnexec", "mininet"), ("ovs-vsctl", "openvswitch-switch"),
                      ("ip", "iproute2"), ("tc", "iproute2"), ("ethtool", "ethtool"),
                      ("fping", "fping")):
        if shutil.which(tool) is None:
            pf.problems.append(f"{tool} not found: install {pkg} (`sudo make setup` does)")
    if pf.problems:
        return pf
    why = namespace_problem()
    if why:
        pf.problems.append(f"mnexec cannot create a network namespace here ({why}); Mininet "
                           "hosts need it (a chroot or a restricted container is not enough)")
    if not ovs_running() and not (start_daemons and start_ovs()):
        pf.problems.append("Open vSwitch daemons are not running and could not be started: "
                           f"try `sudo {OVS_CTL} start --system-id=random`")
    try:
        pf.datapath = choose_datapath(datapath)
    except ValueError as exc:
        pf.problems.append(str(exc))
    if pf.datapath == Datapath.KERNEL and not kernel_ovs_available():
        pf.problems.append("datapath=kernel asked for, but the openvswitch kernel module is not "
                           "loaded (`modprobe openvswitch`), or use datapath=user")
    if pf.datapath == Datapath.USER:
        pf.warnings.append("no openvswitch kernel module: using the userspace datapath "
                           "(one ovs-vswitchd forwards for the whole fabric, ~1 Gb/s in total)")
    pf.netem = netem_available()
    if not pf.netem:
        pf.warnings.append("no sch_netem in this kernel: link delay, jitter and loss emulation "
                           "are unavailable (bandwidth shaping with HTB works)")
    # Rates Mininet would silently ignore.
    fast = [link for link in plan.links if link.mbps > MAX_EMULATED_MBPS]
    if fast:
        worst = max(fast, key=lambda x: x.mbps)
        pf.problems.append(
            f"{len(fast)} link(s) would be emulated above {MAX_EMULATED_MBPS:g} Mb/s, which "
            f"Mininet ignores (e.g. {worst.kind} {worst.gbps:g} Gb/s -> {worst.mbps:g} Mb/s at "
            f"scale {plan.scale:g}); lower --scale")
    # Names already taken (a crashed run, or someone else's bridge).
    taken_if = cleanup.existing_interfaces()
    mine = {link.b_intf for link in plan.links} | {link.a_intf for link in plan.links}
    clash = sorted(mine & taken_if)
    bridges = sorted({s.name for s in plan.switches} & (existing_bridges() | taken_if))
    if clash or bridges:
        what = ", ".join((bridges + clash)[:5])
        pf.problems.append(f"names already in use on this machine ({what}...): a crashed run? "
                           "run `sudo astral-lab clean`")
    return pf
