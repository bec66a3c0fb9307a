"""The Lab's direct calls into this machine's kernel: a free TCP port, checksum offloads
turned off by ioctl, entering a host's network namespace, the machine-wide fabric lock,
and a raised default socket receive buffer.

Each is a system call or a ``/proc`` file rather than a command, and none knows about
fabrics, plans or Mininet; they are apart from ``testbed.shell.lab`` so that module reads as the
bring-up and teardown of a fabric. They still need Linux (and mostly root), so this module
is not pure. ``testbed.shell.lab`` re-exports every name.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

from testbed.shell import preflight


def free_port() -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- checksum offload by ioctl (no ethtool fork per interface) ----------------------------
_SIOCETHTOOL = 0x8946
_ETHTOOL_SRXCSUM = 0x15
_ETHTOOL_STXCSUM = 0x17


def disable_offloads(ifname: str, sock: socket.socket) -> None:
    """``ethtool -K IF rx off tx off`` for a root-namespace interface, via SIOCETHTOOL.

    Userspace OVS reads packets with AF_PACKET; with TX checksum offload on, veth
    hands it packets whose checksum is never filled in, so TCP stalls (ping works).
    Turning TX checksumming off also turns off TSO, which depends on it.
    """
    for cmd in (_ETHTOOL_STXCSUM, _ETHTOOL_SRXCSUM):
        value = ctypes.create_string_buffer(struct.pack("II", cmd, 0))
        ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(value)).ljust(40, b"\0")
        fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, ifreq)


_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def in_netns(pid: int) -> Iterator[None]:
    """Run the block in the network namespace of process ``pid`` (this thread only).

    ``setns(2)`` through libc (``os.setns`` arrives in Python 3.12); sockets opened
    inside the block belong to that namespace, which is all we need for ioctls.
    """
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if _libc.setns(target, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the namespace of pid {pid}")
        try:
            yield
        finally:
            if _libc.setns(own, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to our own namespace")
    finally:
        os.close(target)
        os.close(own)


#: One fabric at a time per machine: node names (lf0r0, s0g0, ...) are machine-wide.
LOCK_PATH = "/run/astral-lab.lock"


def lock_holder(f: Any) -> str | None:
    """PID holding the flock on ``f``'s file, from ``/proc/locks`` (None if not found).

    The file itself names the last lab process that wrote its pid into it, which may be
    stale: a holder that writes none (``flock /run/astral-lab.lock mn -c``) leaves the
    previous pid there, possibly this very process's, which must not be mistaken for
    "this process already holds the lock".
    """
    try:
        st = os.fstat(f.fileno())
        want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks") as fh:
            for line in fh:  # "1: FLOCK  ADVISORY  WRITE <pid> <maj:min:inode> 0 EOF"
                parts = line.split()  # waiters read "1: -> FLOCK ..." and are skipped
                if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want:
                    return parts[4]
    except (OSError, ValueError):
        return None
    return None


def fabric_lock(log: Callable[[str], None]) -> Any:
    """Take the machine's fabric lock (an flock, released when the process dies).

    Another live fabric owns the switch and interface names, so a second bring-up would
    fail on them. By default that is an immediate error naming the owner;
    ``ASTRAL_LAB_WAIT=<seconds>`` waits for it instead (the integration tests set it, so
    test runs started side by side queue rather than fail).
    """
    wait = float(os.environ.get("ASTRAL_LAB_WAIT", "0") or 0)
    f = open(LOCK_PATH, "a+")  # noqa: SIM115 - held for the fabric's life
    deadline = time.monotonic() + wait
    said = False
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            f.seek(0)
            owner = lock_holder(f) or f.read().strip() or "?"
            if time.monotonic() >= deadline or owner == str(os.getpid()):
                f.close()
                raise preflight.LabError(
                    f"another fabric is up on this machine (pid {owner}); one fabric at a "
                    "time (names are machine-wide). Stop it, or set ASTRAL_LAB_WAIT=SECONDS "
                    "to wait; after a crash: sudo astral-lab clean") from None
            if not said:
                log(f"waiting for another fabric (pid {owner}) to finish ...")
                said = True
            time.sleep(0.5)
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


_RMEM_DEFAULT = "/proc/sys/net/core/rmem_default"


@contextlib.contextmanager
def socket_buffers(size: int) -> Iterator[None]:
    """Raise the machine's default socket receive buffer to ``size`` for the duration."""
    try:
        with open(_RMEM_DEFAULT) as f:
            old = int(f.read())
    except OSError:
        yield
        return
    if old >= size:
        yield
        return
    with open(_RMEM_DEFAULT, "w") as f:
        f.write(str(size))
    try:
        yield
    finally:
        with open(_RMEM_DEFAULT, "w") as f:
            f.write(str(old))


def ensure_neighbour_capacity(n: int, log: Callable[[str], None]) -> None:
    """Make room for every host's ARP entries in the kernel's neighbour table.

    The table and its ``gc_thresh`` limits are shared by all namespaces on the
    machine. An all-pairs exchange over n hosts needs n(n-1) entries: 65,280 at
    256 GPUs, well above common defaults (1,024 or 16,384), and past the limit
    the kernel drops ARP, so pings fail for no fault of the fabric. We raise the
    limits when they are too low (and say so); we never lower them.
    """
    need = n * (n - 1) + 1024
    base = "/proc/sys/net/ipv4/neigh/default/"
    try:
        with open(base + "gc_thresh3") as f:
            current = int(f.read())
    except OSError:
        return
    if current >= need:
        return
    for name, value in (("gc_thresh2", need), ("gc_thresh3", 2 * need)):
        with open(base + name, "w") as f:
            f.write(str(value))
    log(f"note: raised net.ipv4.neigh.default.gc_thresh3 from {current} to {2 * need} "
        f"so {n} hosts can all resolve each other (machine-wide, not reverted)")
