"""Which uplink a packet left its first switch by, stamped in its IPv4 TTL. Pure.

Under ECMP each switch's hash picks a flow's lane, and neither the controller nor the hosts
can compute Open vSwitch's hash. So the switch says what it picked: every bucket of a
host-facing switch's groups that leaves by one of its uplinks sets the IPv4 TTL to
``MARK_BASE`` plus that uplink's rank (by port number among the switch's uplinks). A
receiver reads the TTL and, knowing the sender's switch from the source address, names the
lane the packet crossed: a path trace carried in the header (as INT and PathDump do),
without one extra packet. A frame between two hosts of one switch crosses no uplink and
keeps the sender's TTL, which is below ``MARK_BASE``. The ICRC masks the TTL, so a marked
RoCE frame stays valid; the switch fixes the IPv4 header checksum as it rewrites the TTL.

Uplinks are the links of kind ``lane`` or ``uplink`` whose lower end (``a``) is the switch;
a host-facing switch is one a host's NIC link ends at (none on railonly, whose NICs meet the
server's NVLink switch first: its frames go unmarked).
"""

from __future__ import annotations

from vocab.plan import Link, WiringPlan, link_components

#: marked TTLs are MARK_BASE .. MARK_BASE + uplinks - 1; senders use a TTL below it
MARK_BASE = 128
UPLINK_KINDS = ("lane", "uplink")


class LaneMarks:
    """A plan's marks: the TTL a host-facing switch's uplink port sets, and back."""

    def __init__(self, plan: WiringPlan) -> None:
        hosts = {h.name for h in plan.hosts}
        self.switch_of: dict[str, str] = {}  # host (and its IP) -> the switch its NIC meets
        self._nic: dict[str, int] = {}  # host -> its NIC's port
        for ln in plan.links:
            if ln.kind == "nic" and ln.a in hosts:
                self.switch_of[ln.a] = ln.b
                self._nic[ln.a] = ln.a_port
        for h in plan.hosts:
            if h.name in self.switch_of and h.ip:
                self.switch_of[h.ip] = self.switch_of[h.name]
        facing = set(self.switch_of.values())
        self.uplinks: dict[str, list[Link]] = {}
        for ln in plan.links:
            if ln.kind in UPLINK_KINDS and ln.a in facing:
                self.uplinks.setdefault(ln.a, []).append(ln)
        for sw, links in self.uplinks.items():
            links.sort(key=lambda ln: ln.a_port)
            if MARK_BASE + len(links) > 255:
                raise ValueError(f"{sw} has {len(links)} uplinks: more than a TTL can mark "
                                 f"({255 - MARK_BASE})")
        self._ttl = {(sw, port): ttl for sw in self.uplinks
                     for port, ttl in self.ports(sw).items()}
        self.name = {(ln.a, ln.a_port): name for name, ln in link_components(plan).items()}
        self._nic_names = {self.name[(h, p)] for h, p in self._nic.items()}
        #: (upper switch, host-facing switch) -> the links between them
        self._down: dict[tuple[str, str], list[Link]] = {}
        for links in self.uplinks.values():
            for ln in links:
                self._down.setdefault((ln.b, ln.a), []).append(ln)

    def ports(self, switch: str) -> dict[int, int]:
        """The TTL each uplink port of ``switch`` sets (empty: it marks nothing)."""
        return {ln.a_port: MARK_BASE + i for i, ln in enumerate(self.uplinks.get(switch, []))}

    def ttl(self, switch: str, port: int) -> int | None:
        """The TTL a bucket of ``switch`` leaving by ``port`` sets (None: it sets none)."""
        return self._ttl.get((switch, port))

    def link(self, src: str, ttl: int) -> Link | None:
        """The uplink a frame from ``src`` (a host name or its IP) arriving with ``ttl``
        left its first switch by (None: unmarked, or not a mark of that switch)."""
        links = self.uplinks.get(self.switch_of.get(src, ""), [])
        i = ttl - MARK_BASE
        return links[i] if 0 <= i < len(links) else None

    def path(self, src: str, dst: str, ttl: int) -> list[str]:
        """The links a frame from host ``src`` to host ``dst`` that arrived with ``ttl``
        crossed, as far as the mark settles it: both NIC links, and across switches the
        marked uplink and, when one link alone joins that uplink's upper end to ``dst``'s
        switch (a two-tier fabric), that link down. Link names as ``link_components``."""
        a, b = self.switch_of.get(src), self.switch_of.get(dst)
        out = [self.name[(src, p)] for p in self._nic_port(src)]
        if a is not None and b is not None and a != b:
            up = self.link(src, ttl)
            if up is not None:
                out.append(self.name[(up.a, up.a_port)])
                down = self._down.get((up.b, b), [])
                if len(down) == 1:
                    out.append(self.name[(down[0].a, down[0].a_port)])
        return out + [self.name[(dst, p)] for p in self._nic_port(dst)]

    def inner_path(self, src: str, dst: str, ttl: int) -> list[str]:
        """``path`` without its NIC links: the links between switches the mark names."""
        return [n for n in self.path(src, dst, ttl) if n not in self._nic_names]

    def _nic_port(self, host: str) -> list[int]:
        return [self._nic[host]] if host in self._nic else []

