"""Fake servers on this machine for Cluster Edition tests, the way Mininet's own
``examples/fakecluster.py`` tests its cluster code on one machine.

Each fake server is a network namespace with its own ``sshd`` (Debian's openssh-server,
started with a config made for the test) and its own Open vSwitch: an ``ovsdb-server`` and
``ovs-vswitchd`` pair started by the lab's own code for extra switch daemons
(``testbed.shell.switch_daemons.start_ovs``), its files in a scratch folder. Mininet mounts private
``/run/openvswitch`` folders for that; here sshd's ``SetEnv OVS_RUNDIR=...`` points every
``ovs-*`` command of an SSH session at the server's own daemons instead, which is how the
lab aims commands at its extra daemons too (``SwitchDaemon.ovs``).

Each sshd also has a ``/tmp`` of its own (a private mount namespace), so what the lab writes
to its scratch folder here is not there unless the lab copies it, as between real machines.

The servers and this machine meet on a Linux bridge in the root namespace (the servers'
network, ``NET``), so tunnels between any two of them cross real kernel interfaces. SSH
uses a key, a host key and an ssh_config made for the test (``ASTRAL_LAB_SSH_CONFIG``
hands the config to the lab), so nothing in ``/root/.ssh`` or ``/etc/hosts`` changes.
``close`` removes everything (processes, namespaces, bridge, keys), also half-started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from testbed.daemons import SwitchDaemon
from testbed.shell import switch_daemons
from testbed.shell.procs import kill_pids

NET = "10.250.0."  # this machine .1, fake server i at .(i + 2), on BRIDGE
BRIDGE = "astral-fkbr"
NETNS = "astral-fk"  # fake server i: namespace astral-fk<i>, its veth's root end too
SSHD = "/usr/sbin/sshd"
#: index of fake server i's SwitchDaemon: names no controller link (astral-ovs9<i>) that
#: a lab's own extra daemons (1, 2, ...) would use
DAEMON_INDEX = 90
#: the interfaces a fake server has with no fabric on it (its OVS keeps its datapath's)
BASE_LINKS = {"lo", "eth0", "ovs-netdev", "ovs-system"}


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {exc.timeout} s")


def _must(*argv: str) -> None:
    proc = _run(list(argv))
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()[:300]}")


def _under_tmp() -> list[str]:
    """This checkout and the Python running the lab, relative to /tmp, where they are under
    it (a fresh clone there, as a test run from a temporary folder makes)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = {os.path.realpath(repo), os.path.realpath(sys.prefix)}
    rel = sorted(os.path.relpath(p, "/tmp") for p in paths if p.startswith("/tmp/"))
    return [r for r in rel if not any(r.startswith(o + "/") for o in rel if o != r)]


def available() -> str | None:
    """Why fake servers cannot be made here (None: they can). ``scripts/setup.sh`` installs
    all of it, so a test asserts this rather than skipping."""
    missing = [t for t in (SSHD, "/usr/bin/sudo", "/usr/bin/ssh", "/usr/bin/ssh-keygen")
               if not os.path.exists(t)]
    return f"missing {', '.join(missing)} (sudo make setup installs them)" if missing else None


class FakeCluster:
    """``n`` fake servers beside this machine: ``head`` is this machine's address on their
    network, ``ips`` theirs, ``ssh_config`` the ssh_config that logs in to them."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.head = f"{NET}1"
        self.ips = [f"{NET}{i + 2}" for i in range(n)]
        self.netns = [f"{NETNS}{i}" for i in range(n)]
        self.dir = ""
        self.ssh_config = ""
        self.daemons: list[SwitchDaemon] = []
        self.sshd: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> FakeCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- bring-up ------------------------------------------------------------------------
    def _start(self) -> None:
        # short: OVS's unix socket paths in it must stay under 108 bytes; not in /tmp, which
        # each fake server has a private one of (see _sshd)
        self.dir = tempfile.mkdtemp(prefix="astral-fk-", dir="/run")
        key, host_key = os.path.join(self.dir, "id"), os.path.join(self.dir, "host")
        for path in (key, host_key):
            _must("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "astral-fakecluster",
                  "-f", path)
        shutil.copy(key + ".pub", os.path.join(self.dir, "authorized_keys"))
        with open(host_key + ".pub") as f:
            host_pub = " ".join(f.read().split()[:2])
        with open(os.path.join(self.dir, "known_hosts"), "w") as f:
            f.write(f"{','.join(self.ips)} {host_pub}\n")
        self.ssh_config = os.path.join(self.dir, "ssh_config")
        with open(self.ssh_config, "w") as f:
            f.write(f"Host {' '.join(self.ips)}\n  User root\n  IdentityFile {key}\n"
                    "  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {self.dir}/known_hosts\n"
                    "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 10\n"
                    "  LogLevel ERROR\n")
        _must("ip", "link", "add", BRIDGE, "type", "bridge")
        _must("ip", "addr", "add", f"{self.head}/24", "dev", BRIDGE)
        _must("ip", "link", "set", BRIDGE, "up")
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        for i, (ns, ip) in enumerate(zip(self.netns, self.ips, strict=True)):
            _must("ip", "netns", "add", ns)
            _must("ip", "link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _must("ip", "link", "set", ns, "master", BRIDGE, "up")
            _must("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _must("ip", "-n", ns, "link", "set", "eth0", "up")
            _must("ip", "-n", ns, "link", "set", "lo", "up")
            d = SwitchDaemon(DAEMON_INDEX + i, ns, os.path.join(self.dir, f"ovs{i}"))
            os.makedirs(d.rundir or "")
            self.daemons.append(d)
            switch_daemons.start_ovs(d)
            switch_daemons.wait_ready(d)
            self.sshd.append(self._sshd(i, host_key))
        for i, ip in enumerate(self.ips):
            try:
                _wait_listening(ip, 22, self.sshd[i])
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}; its log: {self.log(i)}") from None

    def _sshd(self, i: int, host_key: str) -> subprocess.Popen[bytes]:
        """Server ``i``'s sshd: its address only, the test's keys, every session's ``ovs-*``
        commands aimed at its own daemons, room for one session per Mininet node."""
        d = self.daemons[i]
        cfg = os.path.join(self.dir, f"sshd{i}.conf")
        with open(cfg, "w") as f:
            f.write(f"ListenAddress {self.ips[i]}\nHostKey {host_key}\n"
                    f"PidFile {self.dir}/sshd{i}.pid\n"
                    f"AuthorizedKeysFile {self.dir}/authorized_keys\n"
                    "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\nUsePAM no\nUseDNS no\n"
                    "StrictModes no\n"
                    "MaxStartups 200:30:400\nPrintMotd no\n"
                    f"SetEnv OVS_RUNDIR={d.rundir} OVS_DBDIR={d.rundir} "
                    f"OVS_LOGDIR={d.rundir}\n")
        log = open(os.path.join(self.dir, f"sshd{i}.log"), "wb")  # noqa: SIM115
        try:
            # a /tmp of its own, as a real server has: the lab's scratch folder (a replay's
            # specs and reports) exists there only if the lab copies it there. A checkout
            # (and its venv) under /tmp stays visible: a real server has its own copy there
            host_tmp = os.path.join(self.dir, f"host-tmp{i}")
            os.makedirs(host_tmp, exist_ok=True)
            keep = "".join(f" && mkdir -p /tmp/{r} && mount --bind {host_tmp}/{r} /tmp/{r}"
                           for r in _under_tmp())
            private_tmp = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f"mount --bind /tmp {host_tmp} && mount -t tmpfs astral-fk{i} /tmp"
                           f"{keep} && exec {SSHD} -D -e -f {cfg}"]
            return subprocess.Popen(d.ns(private_tmp), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        finally:
            log.close()

    # --- use -----------------------------------------------------------------------------
    def ssh(self) -> list[str]:
        """The ssh command line (without the destination) that logs in to any fake server."""
        return ["ssh", "-F", self.ssh_config]

    def run(self, i: int, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``command`` on fake server ``i``, over its sshd as the lab reaches it."""
        return _run([*self.ssh(), f"root@{self.ips[i]}", command], timeout=timeout)

    def vsctl(self, i: int, *args: str) -> str:
        """``ovs-vsctl ARGS`` against fake server ``i``'s own Open vSwitch (from here)."""
        return _run(self.daemons[i].ovs(["ovs-vsctl", "--timeout=10", *args])).stdout

    def links(self, i: int) -> set[str]:
        """Names of the interfaces in fake server ``i``'s network namespace."""
        out = _run(["ip", "-n", self.netns[i], "-o", "link", "show"]).stdout
        return {x.split(":")[1].strip().split("@")[0] for x in out.splitlines() if ":" in x}

    def ifindex(self, i: int) -> dict[str, int]:
        """``interface -> ifindex`` in fake server ``i``'s namespace."""
        out = _run(["ip", "-n", self.netns[i], "-o", "link", "show"]).stdout
        return {x.split(":")[1].strip().split("@")[0]: int(x.split(":")[0])
                for x in out.splitlines() if ":" in x}

    def sessions(self) -> dict[int, str]:
        """``pid -> command`` of every process below the fake servers' sshds: SSH sessions
        and what they started (none once a fabric is down)."""
        roots = {p.pid for p in self.sshd if p.poll() is None}
        return {pid: cmd for pid, cmd in _descendants(roots).items() if pid not in roots}

    def connections(self, i: int) -> int:
        """SSH connections server ``i``'s sshd has accepted so far (one log line each)."""
        return sum(line.startswith("Accepted ") for line in self._log(i).splitlines())

    def log(self, i: int) -> str:
        return self._log(i)[-2000:]

    def _log(self, i: int) -> str:
        """Server ``i``'s whole sshd log ("" before it has one)."""
        with contextlib.suppress(OSError), \
                open(os.path.join(self.dir, f"sshd{i}.log"), errors="replace") as f:
            return f.read()
        return ""

    # --- teardown ------------------------------------------------------------------------
    def close(self) -> None:
        """Every process of every fake server (sshd, its sessions and their children, its
        Open vSwitch), the namespaces, veths, bridge, keys and scratch folder."""
        roots = {p.pid for p in self.sshd if p.poll() is None}
        kill_pids(sorted(_descendants(roots)), grace=1.0)
        for p in self.sshd:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        self.sshd = []
        for d in self.daemons:
            switch_daemons.stop_daemon(d)  # its ovsdb-server, ovs-vswitchd, the rest of its netns
        self.daemons = []
        for ns in self.netns:
            if os.path.exists(f"/run/netns/{ns}"):
                _run(["ip", "netns", "del", ns])
            if os.path.exists(f"/sys/class/net/{ns}"):
                _run(["ip", "link", "del", ns])
        if os.path.exists(f"/sys/class/net/{BRIDGE}"):
            _run(["ip", "link", "del", BRIDGE])
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of the fake servers is still here; empty once ``close`` has run."""
        found = [f"namespace {n}" for n in self.netns if os.path.exists(f"/run/netns/{n}")]
        found += [f"interface {i}" for i in [BRIDGE, *self.netns]
                  if os.path.exists(f"/sys/class/net/{i}")]
        found += [f"folder {self.dir}"] if self.dir and os.path.exists(self.dir) else []
        for pid, cmd in _processes().items():
            if self.dir and self.dir in cmd:  # sshd -f, the daemons' --pidfile=
                found.append(f"pid {pid} ({cmd[:80]})")
        return found


def _processes() -> dict[int, str]:
    """``pid -> command line`` of every process."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{name}/cmdline", "rb") as f:
                out[int(name)] = f.read().replace(b"\0", b" ").decode(errors="replace")
    return out


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(roots: set[int]) -> dict[int, str]:
    """``pid -> command line`` of ``roots`` and every process below them."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid in procs:
        parent = _parent(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    out, todo = {}, list(roots)
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in out:
            out[pid] = procs[pid]
            todo += children.get(pid, [])
    return out


def _wait_listening(ip: str, port: int, proc: subprocess.Popen[bytes],
                    timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex((ip, port)) == 0:
                return
        if proc.poll() is not None:
            raise RuntimeError(f"sshd for {ip} exited ({proc.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd on {ip}:{port} did not listen within {timeout:g} s")
        time.sleep(0.2)


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise ``TimeoutError`` naming ``what`` if the block runs longer than ``seconds``:
    a wait that hangs (a pipe nobody writes to) fails the test instead of stalling it."""
    def expire(_sig: int, _frame: Any) -> None:
        raise TimeoutError(f"{what}: still running after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
