"""The cluster's servers before a bring-up: running commands on them, and the prechecks.

``SSHRunner`` runs a command on a server (locally for this machine, over SSH for the
others; with a lab's ``SharedConnections``, over one connection per server) and
``ssh_clock_probe`` samples a server's clock; ``precheck_servers`` checks every
other server through such a runner (passwordless SSH and sudo, the same lab version at
the same path, the tools, Open vSwitch, the datapath, the tunnel kind, the clock) and
lists every problem at once; ``resolve_ipv4``, ``is_this_machine`` and ``source_address``
tell which server is this machine. It is apart from ``testbed.shell.cluster`` (the Mininet
bring-up) because none of it builds anything: it is pure over an injectable runner and
clock probe, which the unit tests replace. ``testbed.shell.cluster`` re-exports every name.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from testbed.datapath import Datapath
from testbed.shell import cleanup, preflight, procs
from testbed.version import __version__


# --- commands on servers -------------------------------------------------------------------
@dataclass
class CommandResult:
    """What a command on a server returned (``subprocess.CompletedProcess``, minus argv)."""

    returncode: int
    stdout: str = ""
    stderr: str = ""


#: ``runner(server, argv, stdin) -> CommandResult``: run one command on one server.
Runner = Callable[[str, Sequence[str], "str | None"], CommandResult]
#: ``probe(server) -> [(local send time, server's clock, local receive time), ...]``.
ClockProbe = Callable[[str], list[tuple[float, float, float]]]

#: the exit status of a command the runner gave up waiting for (as timeout(1)'s)
TIMED_OUT = 124

SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR"]


def default_user() -> str:
    """The account SSH logs in as: the user behind ``sudo``, as Mininet's ``findUser``."""
    return os.environ.get("SUDO_USER") or getpass.getuser()


def ssh_prefix(server: str, user: str, ssh: Sequence[str] | None = None) -> list[str]:
    """``ssh`` as ``user`` to ``server``, run as that local user (where their keys are)."""
    cmd = [*(ssh or ["ssh", *SSH_OPTIONS]), f"{user}@{server}"]
    if os.geteuid() == 0 and user != "root":
        cmd = ["sudo", "-E", "-u", user, *cmd]
    return cmd


class SSHRunner:
    """Run commands locally for this machine's server name, over SSH for the others."""

    def __init__(self, user: str, local: Iterable[str] = ("localhost",),
                 ssh: Sequence[str] | None = None) -> None:
        self.user = user
        self.local = set(local)
        self.ssh = ssh
        self.shared: list[str] = []  # SharedConnections.options while a lab holds them

    def __call__(self, server: str, argv: Sequence[str], stdin: str | None = None,
                 timeout: float = 120.0) -> CommandResult:
        ssh = [*(self.ssh or ["ssh", *SSH_OPTIONS]), *self.shared]
        cmd = list(argv) if server in self.local else (
            [*ssh_prefix(server, self.user, ssh), shlex.join(argv)])
        try:
            proc = procs.run(cmd, stdin=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            return CommandResult(TIMED_OUT, "", f"timed out after {timeout:g} s")
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


class SharedConnections:
    """One SSH connection per server for a lab's short commands (OpenSSH ``ControlMaster``).

    Mininet runs every command outside a node's shell (each interface it creates, moves or
    sets on another server) as an ``ssh`` of its own, each with a full key exchange; on a
    slow server those handshakes, not the commands, are what a bring-up spends its time on.
    Commands given ``options`` share one connection per server, which closes itself
    ``PERSIST_S`` after its last command, or at ``close``. Node shells and programs keep
    connections of their own: sshd allows only a few sessions per connection
    (``MaxSessions``, 10 by default), and a fabric has more nodes than that on a server.
    """

    PERSIST_S = 60

    def __init__(self, user: str, prefix: str = "astral-lab-ssh-") -> None:
        self.user = user
        # the sockets live where the account ssh runs as (ssh_prefix) may create them
        self.dir = tempfile.mkdtemp(prefix=prefix, dir=cleanup.scratch_root())
        if os.geteuid() == 0 and user != "root":
            with contextlib.suppress(KeyError):  # no such account: the precheck says so
                os.chown(self.dir, pwd.getpwnam(user).pw_uid, -1)
        self.options = ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.dir}/%C",
                        "-o", f"ControlPersist={self.PERSIST_S}"]

    def close(self, servers: Iterable[str], ssh: Sequence[str] | None = None) -> None:
        """End every server's shared connection (its session on the server too), then
        remove the sockets' folder. No socket in it: nothing was shared, nothing to end."""
        exit_cmd = [*(ssh or ["ssh", *SSH_OPTIONS]), *self.options, "-O", "exit"]
        open_sockets = os.path.isdir(self.dir) and os.listdir(self.dir)
        for server in servers if open_sockets else ():
            with contextlib.suppress(subprocess.TimeoutExpired):
                procs.run(ssh_prefix(server, self.user, exit_cmd), timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def ssh_clock_probe(user: str, count: int = 8, ssh: Sequence[str] | None = None) -> ClockProbe:
    """Clock samples over one SSH session (its round trip bounds the error, as NTP's does).

    One connection answers ``count`` requests, so each sample costs a network round
    trip (well under a millisecond on a LAN), not an SSH handshake.
    """

    def probe(server: str) -> list[tuple[float, float, float]]:
        try:
            proc = subprocess.Popen(
                [*ssh_prefix(server, user, ssh), "while read -r _; do date +%s.%N; done"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, bufsize=1)
        except OSError:
            return []
        samples = []
        try:
            assert proc.stdin is not None and proc.stdout is not None
            for _ in range(count):
                t0 = time.time()
                proc.stdin.write("\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                t1 = time.time()
                if not line:
                    break
                samples.append((t0, float(line), t1))
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return samples

    return probe


# --- prechecks (pure over a runner) -------------------------------------------------------
#: Largest clock error (s) for which one-way latencies are reported. At the default scale a
#: 7,408-byte decode message takes 1.5 ms to serialise on a 40 Mb/s NIC, so an error of a
#: millisecond is already a visible fraction of what is measured.
CLOCK_TOLERANCE_S = 1e-3
#: Programs a server needs beyond Python and OVS (host shells, ping, offloads, shaping).
REQUIRED_TOOLS = ("mnexec", "fping", "ethtool", "tc", "ip")


def estimate_offset(samples: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """``(offset, uncertainty)`` in seconds of a server's clock against ours.

    From the sample with the shortest round trip, as NTP does: the server read its
    clock somewhere between our send and receive times, so the offset is its reading
    minus the midpoint, give or take half the round trip.
    """
    if not samples:
        raise ValueError("no clock samples")
    t0, remote, t1 = min(samples, key=lambda s: s[2] - s[0])
    return remote - (t0 + t1) / 2, (t1 - t0) / 2


@dataclass
class ClusterPrecheck:
    """What the prechecks found; ``problems`` stop the bring-up before anything is built."""

    servers: list[str]
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    datapaths: dict[str, str] = field(default_factory=dict)
    clock: dict[str, tuple[float, float]] = field(default_factory=dict)
    one_way_latency: bool = True

    def raise_if_problems(self) -> None:
        if self.problems:
            raise preflight.LabError("cannot bring up the cluster:\n  - "
                                     + "\n  - ".join(self.problems))


def tunnel_probe(tunnel: str) -> list[str] | None:
    """A command that creates and deletes one tunnel device of this kind (None: nothing to
    check). Some kernels lack GRE; Mininet would only fail half-way through the build."""
    kind = {"gre": "type gretap local 127.0.0.1 remote 127.0.0.2",
            "vxlan": "type vxlan id 1 local 127.0.0.1 dstport 4789"}.get(tunnel)
    if kind is None:
        return None
    return ["sh", "-c", f"ip link add name astral-tchk {kind} && ip link del astral-tchk"]


def precheck_servers(servers: Sequence[str], runner: Runner, *, user: str,
                     local: Iterable[str] = ("localhost",), version: str | None = None,
                     python: str | None = None, datapath: str = "auto", tunnel: str = "gre",
                     clock_probe: ClockProbe | None = None,
                     tolerance: float = CLOCK_TOLERANCE_S) -> ClusterPrecheck:
    """Check every server other than this machine; say per server what is missing.

    For each remote server, in order (a failed login stops that server's checks):
    passwordless SSH as ``user`` (``ssh -o BatchMode=yes SERVER true``), passwordless
    sudo, the same astral-lab version importable by the same Python path as here
    (hosts there run the lab's agents with that interpreter), the tools, Open
    vSwitch answering, the datapath it can use, and its clock against ours. A
    clock out of tolerance, or one that cannot be measured closely enough, is a
    warning and turns ``one_way_latency`` off: latency is then reported round-trip.
    """
    version = __version__ if version is None else version
    python = python or sys.executable
    local = set(local)
    result = ClusterPrecheck(servers=list(servers))
    sudo = [] if user == "root" else ["sudo", "-n"]
    probe = tunnel_probe(tunnel) if len(servers) > 1 else None
    for server in servers:
        if server in local:
            if probe and runner(server, probe, None).returncode != 0:
                device, module = {"gre": ("gretap", "ip_gre")}.get(tunnel, (tunnel, tunnel))
                result.problems.append(f"{server}: this kernel cannot make {tunnel} tunnels (no "
                                       f"{device} device: modprobe {module}, or try --tunnel "
                                       f"{'vxlan' if tunnel == 'gre' else 'gre'})")
            continue
        say = result.problems.append
        known = len(result.problems)

        def run(argv: list[str], server: str = server) -> CommandResult:
            return runner(server, argv, None)

        login = run(["true"])
        if login.returncode != 0:
            say(f"{server}: passwordless SSH as {user} failed ({_first_line(login)}); set up "
                f"a key: ssh-copy-id {user}@{server} (and accept its host key once)")
            continue
        if sudo and run([*sudo, "true"]).returncode != 0:
            say(f"{server}: sudo asks {user} for a password; allow it: "
                f"'{user} ALL=(ALL) NOPASSWD: ALL' in /etc/sudoers.d/")
            continue
        got = run([python, "-c", "import testbed.version; print(testbed.version.__version__)"])
        if got.returncode != 0:
            say(f"{server}: no astral-lab at {python} (install the same checkout at the "
                f"same path there: scripts/setup.sh)")
        elif got.stdout.strip() != version:
            say(f"{server}: astral-lab {got.stdout.strip()} installed, this machine runs "
                f"{version}; install the same version on every server")
        # as root, as the lab will run them: a user's PATH may lack /sbin (ethtool, tc)
        tools = run([*sudo, "sh", "-c", " ; ".join(f"command -v {t} >/dev/null || echo {t}"
                                                   for t in REQUIRED_TOOLS)])
        missing = tools.stdout.split()
        if tools.returncode != 0 or missing:
            say(f"{server}: missing {', '.join(missing) or 'tools'} (run scripts/setup.sh)")
        if probe and run([*sudo, *probe]).returncode != 0:
            say(f"{server}: its kernel cannot make {tunnel} tunnels (modprobe "
                f"{'ip_gre' if tunnel == 'gre' else 'vxlan'}, or another --tunnel)")
        if run([*sudo, "ovs-vsctl", "--timeout=5", "show"]).returncode != 0:
            say(f"{server}: Open vSwitch is not running (sudo {preflight.OVS_CTL} start "
                "--system-id=random)")
        if datapath == "auto":
            kernel = run(["test", "-d", "/sys/module/openvswitch"]).returncode == 0
            result.datapaths[server] = Datapath.KERNEL if kernel else Datapath.USER
        else:
            result.datapaths[server] = datapath
        if clock_probe is not None and len(result.problems) == known:
            _check_clock(result, server, clock_probe, tolerance)
    return result


def _check_clock(result: ClusterPrecheck, server: str, probe: ClockProbe,
                 tolerance: float) -> None:
    try:
        offset, unc = estimate_offset(probe(server))
    except ValueError:
        result.one_way_latency = False
        result.warnings.append(f"{server}: could not read its clock; latency metrics are "
                               "round-trip only")
        return
    result.clock[server] = (offset, unc)
    if abs(offset) + unc > tolerance:
        result.one_way_latency = False
        why = (f"its clock is {offset * 1e3:+.2f} ms off ours (+-{unc * 1e3:.2f} ms)"
               if abs(offset) > unc else
               f"its clock offset cannot be measured to better than +-{unc * 1e3:.2f} ms")
        result.warnings.append(
            f"{server}: {why}, tolerance {tolerance * 1e3:g} ms: latency metrics are "
            "round-trip only (sync the clocks, e.g. chrony on every server)")


def _first_line(res: CommandResult) -> str:
    text = (res.stderr or res.stdout).strip().splitlines()
    return text[0][:160] if text else f"exit {res.returncode}"


# --- which server is this machine ------------------------------------------------------------
def resolve_ipv4(server: str) -> str:
    """The server's IPv4 address (``localhost`` is 127.0.0.1); ValueError if it has none."""
    if server == "localhost":
        return "127.0.0.1"
    try:
        infos = socket.getaddrinfo(server, None, socket.AF_INET)
    except OSError as exc:
        raise ValueError(f"--cluster: cannot resolve {server!r}: {exc}") from None
    return str(infos[0][4][0])


def is_this_machine(server: str) -> bool:
    """True when ``server`` names this machine (loopback or one of its own addresses)."""
    try:
        ip = resolve_ipv4(server)
    except ValueError:
        return False
    if ip.startswith("127."):
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((ip, 0))
        except OSError:
            return False
    return True


def source_address(remote_ip: str) -> str:
    """This machine's address on the route to ``remote_ip`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((remote_ip, 9))
        return str(s.getsockname()[0])
