"""Two private network namespaces joined by a veth pair, for tests of the compiled plane on a
real interface without Mininet or a switch.

Everything is made inside namespaces of the test's own (named after its process), never in
the machine's: another run's fabric on the same machine sees nothing of it, and deleting the
namespaces takes the veth pair with them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

_serial = itertools.count()


@dataclass(frozen=True)
class VethPair:
    """Namespace ``ns_a`` holds interface ``a``, ``ns_b`` holds ``b``; a frame sent on one
    arrives on the other."""

    ns_a: str
    ns_b: str
    a: str
    b: str

    def run_in(self, ns: str, argv: list[str]) -> list[str]:
        """``argv`` run inside namespace ``ns`` (``ip netns exec`` execs it: same PID)."""
        return ["ip", "netns", "exec", ns, *argv]


def need_root() -> None:
    """Skip unless this test can make namespaces (root, iproute2)."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to make a private network namespace")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def veth_pair(a: str = "tx0", b: str = "rx0",
              macs: tuple[str, str] = ("02:00:00:00:00:01", "02:00:00:00:00:02"),
              mtu: int = 1500) -> Iterator[VethPair]:
    """The pair, up, with IPv6 off (no router solicitations on the wire); both namespaces,
    and so the pair, are deleted on the way out, whatever happened."""
    need_root()
    base = f"apk{os.getpid()}x{next(_serial)}"
    pair = VethPair(f"{base}a", f"{base}b", a, b)
    made: list[str] = []
    try:
        for ns in (pair.ns_a, pair.ns_b):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("-n", pair.ns_a, "link", "add", a, "address", macs[0], "mtu", str(mtu), "type",
            "veth", "peer", "name", b, "address", macs[1], "mtu", str(mtu), "netns", pair.ns_b)
        for ns, intf in ((pair.ns_a, a), (pair.ns_b, b)):
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                            "net.ipv6.conf.all.disable_ipv6=1"], capture_output=True, timeout=30)
            _ip("-n", ns, "link", "set", intf, "up")
        yield pair
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
