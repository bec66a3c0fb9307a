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

The same switches pin *probe lanes* (``PROBE_DPORT``): a probe datagram's source port
names the uplink it leaves by, so a prober knows in advance which lane each of its flows
rides, and the marks confirm it.
"""

from __future__ import annotations

from vocab.plan import Link, WiringPlan, link_components

#: marked TTLs are MARK_BASE .. MARK_BASE + uplinks - 1; senders use a TTL below it
MARK_BASE = 128
UPLINK_KINDS = ("lane", "uplink")

#: *Probe lanes*: UDP datagrams to a destination port in this block (``port & PROBE_DPORT_MASK
#: == PROBE_DPORT``: 1,024 ports, one per probe stream) leave a host-facing switch by the uplink
#: their source port names, not by the ECMP hash, so a prober chooses the lane each of its
#: flows rides (as path-aware probers such as R-Pingmesh do) and can aim at one lane
PROBE_DPORT = 0x2000
PROBE_DPORT_MASK = 0xFC00
#: the source port's bits from this one up name the lane slot; the bits below it are free,
#: so a stream's ports can take every value of the low bits on every lane
LANE_SHIFT = 5
#: a probe stream's source ports: this many, 1 << LANE_SHIFT, one per value of the low bits
PROBE_SPORTS = 1 << LANE_SHIFT
#: the first of them (a multiple of 1 << (LANE_SHIFT + 5): up to 32 lane slots)
PROBE_SPORT_BASE = 50176


def lane_slots(uplinks: int) -> int:
    """How many lane slots a switch with ``uplinks`` uplinks pins probes to: the power of
    two at or above it (slot ``k`` is the uplink of rank ``k % uplinks``)."""
    if not 1 <= uplinks <= 32:
        raise ValueError(f"probe lanes need 1 to 32 uplinks (got {uplinks})")
    return 1 << (uplinks - 1).bit_length()


def lane_match(slot: int, slots: int) -> tuple[int, int]:
    """``(value, mask)`` of the UDP source ports a switch with ``slots`` lane slots pins
    to ``slot``."""
    return slot << LANE_SHIFT, (slots - 1) << LANE_SHIFT


def probe_sports(color: int, slots: int) -> list[int]:
    """A probe stream's PROBE_SPORTS source ports, the same number on every lane slot of
    ``slots``. Port ``r`` (its low bits) rides slot ``(r * slots // PROBE_SPORTS + color)
    % slots``: streams of different ``color`` put a given value of the low bits on
    different lanes, so a rule dropping those ports (a partial blackhole) loses them on
    several lanes of its switch, not on one, and is not taken for a lossy lane."""
    if slots < 1 or slots & (slots - 1) or slots > PROBE_SPORTS:
        raise ValueError(f"slots must be a power of two up to {PROBE_SPORTS} (got {slots})")
    return [PROBE_SPORT_BASE + (((r * slots // PROBE_SPORTS + color) % slots) << LANE_SHIFT)
            + r for r in range(PROBE_SPORTS)]


def probe_slot(sport: int, slots: int) -> int:
    """The lane slot source port ``sport`` is pinned to on a switch with ``slots``."""
    return (sport >> LANE_SHIFT) & (slots - 1)


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

