"""Fake servers on this machine for Cluster Edition tests, made the way Mininet's own
``examples/fakecluster.py`` makes them.

Each "server" is a network namespace with a private mount namespace (its own
``/run/openvswitch``, ``/etc/openvswitch`` and ``/var/log/openvswitch``), so it runs its own
Open vSwitch daemons, and its own ``sshd`` (Debian's openssh-server) that accepts a key made
for the test. The servers and this machine meet on a Linux bridge in the root namespace, so
GRE or VXLAN tunnels between any two of them cross real kernel interfaces. Everything
(processes, namespaces, bridge, keys) is removed on exit.

    with FakeCluster(2) as fc:
        lab = ClusterLab(plan, ["localhost", *fc.ips], ssh=fc.ssh)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time

BRIDGE = "astral-fkbr"
PREFIX = "10.254.77."  # this machine .1, server i at .(i + 2)
NETNS = "astral-fake-"
SSHD = "/usr/sbin/sshd"
PRIVATE_DIRS = ("/run/openvswitch", "/etc/openvswitch", "/var/log/openvswitch")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


def _must(*argv: str) -> None:
    proc = _run(*argv)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()[:300]}")


class FakeCluster:
    """``n`` fake servers; ``ips`` their addresses, ``ssh`` the ssh command that logs in."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.ips = [f"{PREFIX}{i + 2}" for i in range(n)]
        self.names = [f"{NETNS}{i}" for i in range(n)]
        self.dir = ""
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ssh: list[str] = []

    def __enter__(self) -> FakeCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="astral-fakecluster-")
        key, host_key = os.path.join(self.dir, "id"), os.path.join(self.dir, "host")
        for path in (key, host_key):
            _must("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path)
        shutil.copy(key + ".pub", os.path.join(self.dir, "authorized_keys"))
        self.ssh = ["ssh", "-i", key, "-o", "UserKnownHostsFile=/dev/null",
                    "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes",
                    "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR"]
        _must("ip", "link", "add", BRIDGE, "type", "bridge")
        _must("ip", "addr", "add", f"{PREFIX}1/24", "dev", BRIDGE)
        _must("ip", "link", "set", BRIDGE, "up")
        for i, (ns, ip) in enumerate(zip(self.names, self.ips, strict=True)):
            _must("ip", "netns", "add", ns)
            _must("ip", "link", "add", f"fk{i}", "type", "veth", "peer", "name", "eth0",
                  "netns", ns)
            _must("ip", "link", "set", f"fk{i}", "master", BRIDGE, "up")
            _must("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _must("ip", "-n", ns, "link", "set", "eth0", "up")
            _must("ip", "-n", ns, "link", "set", "lo", "up")
            self.procs.append(self._server(i, ns, ip, host_key))
        for i, ip in enumerate(self.ips):
            try:
                _wait_listening(ip, 22)
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}; its log: {self.log(i)}") from None

    def _server(self, i: int, ns: str, ip: str, host_key: str) -> subprocess.Popen[bytes]:
        cfg = os.path.join(self.dir, f"sshd-{i}.conf")
        with open(cfg, "w") as f:
            f.write(f"Port 22\nListenAddress {ip}\nHostKey {host_key}\n"
                    f"PidFile {self.dir}/sshd-{i}.pid\n"
                    f"AuthorizedKeysFile {self.dir}/authorized_keys\n"
                    "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n"
                    "PermitUserEnvironment no\nAcceptEnv LANG LC_*\n")
        mounts = "; ".join(f"mount -t tmpfs none {d}" for d in PRIVATE_DIRS)
        script = (f"set -e; {mounts}; "
                  "ovsdb-tool create /etc/openvswitch/conf.db "
                  "/usr/share/openvswitch/vswitch.ovsschema; "
                  "ovsdb-server --remote=punix:/run/openvswitch/db.sock --pidfile --detach "
                  "--log-file -vconsole:emer; "
                  "ovs-vsctl --no-wait init; "
                  "ovs-vswitchd --pidfile --detach --log-file -vconsole:emer; "
                  "mkdir -p /run/sshd; "  # sshd's privilege separation directory
                  f"exec {SSHD} -D -e -f {cfg}")
        log = open(os.path.join(self.dir, f"server-{i}.log"), "wb")  # noqa: SIM115
        return subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "--mount",
                                 "--propagation", "private", "sh", "-c", script],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

    def run(self, i: int, command: str) -> subprocess.CompletedProcess[str]:
        """``command`` on server ``i`` over its sshd, as the cluster code reaches it."""
        return subprocess.run([*self.ssh, f"root@{self.ips[i]}", command],
                              capture_output=True, text=True, timeout=60)

    def log(self, i: int) -> str:
        with contextlib.suppress(OSError), \
                open(os.path.join(self.dir, f"server-{i}.log"), errors="replace") as f:
            return f.read()[-2000:]
        return ""

    def close(self) -> None:
        """Every process in every server's namespace, the namespaces, the bridge, the keys."""
        for ns in self.names:
            pids = _run("ip", "netns", "pids", ns).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        self.procs = []
        for ns in self.names:
            _run("ip", "netns", "del", ns)
        _run("ip", "link", "del", BRIDGE)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of the fake cluster is still here (for the test's last check)."""
        found = [f"namespace {n}" for n in self.names if os.path.exists(f"/run/netns/{n}")]
        found += [f"interface {BRIDGE}"] if os.path.exists(f"/sys/class/net/{BRIDGE}") else []
        found += [f"folder {self.dir}"] if self.dir and os.path.exists(self.dir) else []
        return found


def _wait_listening(ip: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex((ip, port)) == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd on {ip}:{port} did not start listening in {timeout:g} s")
        time.sleep(0.2)


def available() -> str | None:
    """Why fake servers cannot be made here (None: they can)."""
    missing = [t for t in (SSHD, "/usr/bin/sudo", "/usr/bin/unshare")
               if not os.path.exists(t)]
    return f"missing {', '.join(missing)} (sudo make setup installs them)" if missing else None

