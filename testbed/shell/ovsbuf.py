"""Give the userspace OVS datapath's transmit socket room for deep (lossless) port queues.

With the userspace datapath, ovs-vswitchd sends every packet it forwards through
one shared, unbound ``AF_PACKET`` socket (created at its first transmit, with the
machine's default send buffer, 208 KiB here). A packet waiting in a port's
qdisc (our HTB shaper) is still charged to that socket, so once ~150 packets
queue anywhere in the fabric, ovs-vswitchd's sends fail and it drops packets
silently: no OVS, qdisc or interface counter sees them. A 40 Mb/s flow into a
20 Mb/s lane lost 60% of its packets that way (measured), whatever queue length
tc was given. OVS has no setting for this buffer, so the Lab enlarges it in
place: it borrows the socket from ovs-vswitchd with ``pidfd_getfd(2)`` (Linux
5.6+, root) and sets ``SO_SNDBUFFORCE``. The change lasts as long as that
ovs-vswitchd runs and does nothing else to it.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess

SO_SNDBUFFORCE = 32
_SYS_PIDFD_OPEN = 434  # same number on x86_64 and aarch64
_SYS_PIDFD_GETFD = 438

#: Send buffer to ask for: queues of a few seconds at the emulated rates fit easily.
TX_SOCKET_BYTES = 128 << 20


def vswitchd_pid() -> int | None:
    """The machine's own ovs-vswitchd (its pid file; a lab's extra daemons have their own).
    ``OVS_RUNDIR``, which the OVS tools honour, is looked in first: a cluster server whose
    sessions are pointed at another run directory (the fake cluster test's) means that one."""
    rundir = os.environ.get("OVS_RUNDIR")
    for path in ([f"{rundir}/ovs-vswitchd.pid"] if rundir else []) + [
            "/run/openvswitch/ovs-vswitchd.pid", "/var/run/openvswitch/ovs-vswitchd.pid"]:
        try:
            with open(path) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if os.path.exists(f"/proc/{pid}"):
            return pid
    out = subprocess.run(["pidof", "ovs-vswitchd"], capture_output=True, text=True)
    pids = out.stdout.split()
    return int(pids[0]) if pids else None


def _unbound_packet_inodes(pid: int) -> set[str]:
    """Inodes of AF_PACKET sockets bound to no interface (``Iface`` 0 in the packet table
    of ``pid``'s network namespace)."""
    try:
        with open(f"/proc/{pid}/net/packet") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return set()
    return {r.split()[-1] for r in rows if len(r.split()) >= 9 and r.split()[4] == "0"}


def tx_socket_fds(pid: int) -> list[int]:
    """ovs-vswitchd's fds that are unbound packet sockets (its shared transmit socket)."""
    inodes = _unbound_packet_inodes(pid)
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            fds.append(int(fd))
    return fds


def raise_tx_buffer(size: int = TX_SOCKET_BYTES, pid: int | None = None
                    ) -> dict[str, int] | str:
    """Enlarge the transmit socket buffers of ovs-vswitchd ``pid`` (default: the machine's
    own) to ``size``.

    Returns ``{"sockets": n, "before": bytes, "after": bytes}``, or a one-line
    reason why it could not (no ovs-vswitchd, no such socket yet, no pidfd_getfd).
    """
    pid = pid or vswitchd_pid()
    if pid is None:
        return "ovs-vswitchd is not running"
    fds = tx_socket_fds(pid)
    if not fds:
        return "ovs-vswitchd has no transmit packet socket yet (it opens one at its first send)"
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(_SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        return f"pidfd_open failed: {os.strerror(ctypes.get_errno())}"
    before = after = 0
    try:
        for fd in fds:
            local = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
            if local < 0:
                return f"pidfd_getfd failed: {os.strerror(ctypes.get_errno())}"
            sock = socket.socket(fileno=local)
            try:
                before = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
                if before < size:
                    sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, size)
                after = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            finally:
                sock.close()  # closes our duplicate only; ovs-vswitchd keeps its own
    finally:
        os.close(pidfd)
    return {"sockets": len(fds), "before": before, "after": after}
