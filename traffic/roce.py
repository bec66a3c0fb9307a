"""RoCEv2 frames for the replay engine: built once with Scapy, then patched as bytes. Pure.

An RDMA WRITE of N bytes on a reliable-connected (RC) queue pair leaves a RoCEv2 NIC
as a train of frames::

    Ethernet / IPv4 / UDP (sport = the QP's port, dport 4791) / BTH [/ RETH] / payload / ICRC

``BTH`` (base transport header, 12 bytes) carries the opcode, the destination QP and
the 24-bit packet sequence number (PSN) that the receiving NIC uses to detect loss.
``RETH`` (16 bytes: virtual address, rkey, DMA length) is present on the FIRST and ONLY
packet of a WRITE, as the InfiniBand spec (vol. 1, 9.4.3) requires, so tshark
decodes the payload boundary right. The ICRC is a CRC-32 over an "invariant" view of
the packet (IBTA RoCEv2 annex A17.3.3: 8 bytes of 0xff for the absent LRH, IPv4 with
TOS, TTL and checksum set to all ones, UDP checksum all ones, BTH byte 4 all ones),
stored little-endian, exactly what ``scapy.contrib.roce.BTH.compute_icrc`` computes
(the unit tests check byte equality).

Segmentation follows the IB rules: every packet but the last carries exactly PMTU
payload bytes; the last carries the rest, padded to a 4-byte boundary (BTH pad
count). **Default PMTU 1,024 bytes** (IB MTU 1024, the usual RoCE setting on a
1,500-byte Ethernet MTU: a full FIRST frame is 1,098 bytes on the wire, a MIDDLE one
1,082); 256, 512, 2048 and 4096 are the other IB MTUs and need an Ethernet MTU of at
least PMTU + 74.

The first 16 payload bytes of every packet hold the replay header ``(message sequence
number u32, packet index in the message u32, message send time ns u64)``, all
big-endian: the receiver then times each message without trusting the PSN alone
(a PSN gap says "something was lost", the header says which message). The send time
is the wall clock (``time.time_ns()``) when the message's first packet was produced:
all emulated hosts share the machine's clock, so arrival minus send time is the exact
one-way latency of the message. The rest of the payload is zeros. Every packet must
carry the header, so a message is at least 16 bytes and must not end in a packet of
1-15 bytes (``validate_message_bytes``).

Speed: Scapy costs ~1 ms per packet; the sender needs ~µs. ``FrameBuilder`` takes
one Scapy-built header template per (flow, opcode) (Scapy lays out each opcode once per
process; the flow's addresses are written in), derives one preallocated ``bytearray`` per
(opcode, payload length) with lengths, IP checksum, pad count and DMA length patched
in, and per packet only writes the PSN word, the replay header (and the RETH address),
then the ICRC: CRC-32 of the constant invariant prefix is cached, so one
``zlib.crc32`` call over the variable part finishes it.

``ReplaySpec`` is the sender agent's input (``astral_lab.agent_cli send --spec``), validated
here so a bad spec fails with one ``ValueError`` naming the field before any socket
is opened.
"""

from __future__ import annotations

import ipaddress
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from time import time_ns
from typing import Any, NamedTuple

from vocab.flows import ENTROPY_MODES, QP_SPORTS, ROCE_PORT, sport_for_qp


class Plane(StrEnum):
    """Which programs put the frames on the wire: both send the same frames and report in
    the same shape (``sender_report``, ``traffic.rxstate``), so a result names its plane
    only to say how far its pacing can be trusted."""

    NATIVE = "native"  # the compiled sender/receiver, astral-pktio
    PYTHON = "python"  # the Python agents, traffic.shell.agent


# --- wire constants ----------------------------------------------------------------------------
OP_WRITE_FIRST = 0x06
OP_WRITE_MIDDLE = 0x07
OP_WRITE_LAST = 0x08
OP_WRITE_ONLY = 0x0A
OPCODE_NAMES = {OP_WRITE_FIRST: "RC_RDMA_WRITE_FIRST", OP_WRITE_MIDDLE: "RC_RDMA_WRITE_MIDDLE",
                OP_WRITE_LAST: "RC_RDMA_WRITE_LAST", OP_WRITE_ONLY: "RC_RDMA_WRITE_ONLY"}
RETH_OPCODES = frozenset({OP_WRITE_FIRST, OP_WRITE_ONLY})
ACKREQ_OPCODES = frozenset({OP_WRITE_LAST, OP_WRITE_ONLY})

PMTUS = (256, 512, 1024, 2048, 4096)
#: the RoCE payload bytes per packet when nothing says otherwise (IB MTU 1024)
DEFAULT_PMTU = 1024
#: the path MTU a lab on one machine replays at: AI fabrics run 4,096 (every emulated
#: interface then gets an MTU that carries it; cluster mode keeps what its tunnels carry)
LAB_PMTU = 4096
#: a sender's token bucket holds this much time at its rate (and at least two full frames)
BURST_S = 200e-6
PSN_MASK = 0xFFFFFF
PSN_MOD = 1 << 24
ACKREQ_BIT = 0x80000000
ECN_ECT0 = 2
MAX_MESSAGE_BYTES = 1 << 31  # IB limit on one message (RETH DMA length is u32)

ETH_LEN, IP_LEN, UDP_LEN, BTH_LEN, RETH_LEN, ICRC_LEN = 14, 20, 8, 12, 16, 4
OFF_IP = ETH_LEN
OFF_UDP = OFF_IP + IP_LEN  # 34
OFF_BTH = OFF_UDP + UDP_LEN  # 42
OFF_PSN = OFF_BTH + 8  # 50: first byte the ICRC covers unmasked
OFF_RETH = OFF_BTH + BTH_LEN  # 54
#: Ethernet + IPv4 + UDP + BTH + RETH + ICRC: what a FIRST/ONLY frame adds to its payload.
MAX_OVERHEAD = OFF_RETH + RETH_LEN + ICRC_LEN  # 74

#: The replay header at the start of every packet's payload: message seq, packet index, send ns.
PAYLOAD_HDR = struct.Struct(">IIQ")
PAYLOAD_HDR_LEN = PAYLOAD_HDR.size  # 16
_PACK_PLAIN = struct.Struct(">IIIQ")  # PSN word, seq, index, send ns (MIDDLE, LAST)
_PACK_RETH = struct.Struct(">IQIIIIQ")  # PSN word, VA, rkey, DMA length, seq, index, send ns
_ICRC = struct.Struct("<I")
_BTH = struct.Struct(">BBHI I")  # opcode, flags, pkey, (resv8 | dest QP), (ackreq | PSN)
_RETH = struct.Struct(">QII")
DEFAULT_VA = 0x7F00_0000_0000  # a plausible user-space buffer address for the RETH
DEFAULT_RKEY_BASE = 0x1000


#: Ethernet MTU the lab gives every interface for a path MTU above 1,024 (what RoCE NICs are
#: usually set to for IB MTU 4096: 4,200)
MTU_HEADROOM = 104


def largest_roce_pmtu(mtu: int) -> int:
    """The largest InfiniBand PMTU whose RoCEv2 packets fit an Ethernet MTU of ``mtu``.

    A RoCE packet is PMTU payload plus ``MAX_OVERHEAD`` (74) bytes of IPv4, UDP, BTH, RETH
    and ICRC. Returns 0 when not even 256 fits.
    """
    fitting = [p for p in PMTUS if p + MAX_OVERHEAD <= mtu]
    return max(fitting, default=0)


def mtu_for(pmtu: int) -> int | None:
    """The interface MTU for ``pmtu``: ``None`` (the kernel's 1,500) when that fits."""
    if pmtu not in PMTUS:
        raise ValueError(f"pmtu must be one of {PMTUS} (got {pmtu!r})")
    return None if pmtu + MAX_OVERHEAD <= 1500 else pmtu + MTU_HEADROOM


def segment(size: int, pmtu: int = DEFAULT_PMTU) -> list[tuple[int, int]]:
    """``(opcode, payload bytes)`` of every packet of one RDMA WRITE of ``size`` bytes.

    IB segmentation: FIRST and MIDDLE packets carry exactly ``pmtu`` bytes, LAST the rest;
    a message that fits in one packet is a single ONLY packet.
    """
    if size < 1:
        raise ValueError(f"message size must be >= 1 (got {size})")
    if pmtu not in PMTUS:
        raise ValueError(f"pmtu must be one of {PMTUS} (got {pmtu})")
    if size <= pmtu:
        return [(OP_WRITE_ONLY, size)]
    n = -(-size // pmtu)
    last = size - (n - 1) * pmtu
    return ([(OP_WRITE_FIRST, pmtu)] + [(OP_WRITE_MIDDLE, pmtu)] * (n - 2)
            + [(OP_WRITE_LAST, last)])


def packets_for(size: int, pmtu: int = DEFAULT_PMTU) -> int:
    """How many packets a message of ``size`` bytes takes."""
    return -(-size // pmtu)


def frame_len(opcode: int, payload: int) -> int:
    """Bytes of one frame on the wire (without FCS): headers, payload, pad and ICRC."""
    reth = RETH_LEN if opcode in RETH_OPCODES else 0
    return OFF_RETH + reth + payload + (-payload % 4) + ICRC_LEN


def message_wire_bytes(size: int, pmtu: int = DEFAULT_PMTU) -> int:
    """Frame bytes (without FCS, preamble, IFG) of one message: what an HTB shaper counts."""
    return sum(frame_len(op, n) for op, n in segment(size, pmtu))


def validate_message_bytes(size: int, pmtu: int = DEFAULT_PMTU) -> str | None:
    """Why ``size`` cannot be replayed (``None`` if it can).

    Every packet carries the 16-byte replay header, so no packet may carry fewer bytes.
    """
    if size < PAYLOAD_HDR_LEN:
        return f"must be >= {PAYLOAD_HDR_LEN} (the replay header is in every packet)"
    if size > MAX_MESSAGE_BYTES:
        return f"must be <= {MAX_MESSAGE_BYTES} (RETH DMA length is 32 bits)"
    rest = size % pmtu
    if size > pmtu and 0 < rest < PAYLOAD_HDR_LEN:
        return (f"ends in a packet of {rest} bytes at pmtu {pmtu}; every packet carries the "
                f"{PAYLOAD_HDR_LEN}-byte replay header (choose a size with size % pmtu == 0 "
                f"or >= {PAYLOAD_HDR_LEN})")
    return None


def ip_checksum(header: bytes | bytearray | memoryview) -> int:
    """RFC 1071 checksum of an IPv4 header whose checksum field is zero."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _invariant_prefix(frame: bytes | bytearray | memoryview) -> bytes:
    """The masked pseudo-header that the ICRC covers before frame offset ``OFF_PSN``."""
    ip = bytearray(frame[OFF_IP:OFF_UDP])
    ip[1] = 0xFF  # TOS (DSCP + ECN): switches may rewrite it
    ip[8] = 0xFF  # TTL
    ip[10:12] = b"\xff\xff"  # header checksum
    udp = bytearray(frame[OFF_UDP:OFF_BTH])
    udp[6:8] = b"\xff\xff"
    bth = bytearray(frame[OFF_BTH:OFF_PSN])
    bth[4] = 0xFF  # FECN, BECN, reserved: set by switches (ECN notification)
    return b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth)


def icrc(frame: bytes | bytearray | memoryview) -> int:
    """The ICRC of a full RoCEv2/IPv4 frame (its last 4 bytes are ignored and may be anything)."""
    crc = zlib.crc32(_invariant_prefix(frame))
    return zlib.crc32(memoryview(frame)[OFF_PSN:len(frame) - ICRC_LEN], crc)


def verify_icrc(frame: bytes | bytearray | memoryview) -> bool:
    """Whether the frame's trailing ICRC is right (a receiving NIC drops the frame otherwise)."""
    return _ICRC.unpack_from(frame, len(frame) - ICRC_LEN)[0] == icrc(frame)


# --- parsing (receiver side; pure struct, no Scapy) --------------------------------------------
class RoceHeader(NamedTuple):
    """Fields of one RoCEv2 WRITE packet. ``va``/``rkey``/``dma_len`` are ``None`` without RETH;
    the IP/UDP fields are ``None`` when only the UDP payload was parsed."""

    opcode: int
    pad: int
    dest_qp: int
    ackreq: bool
    psn: int
    va: int | None
    rkey: int | None
    dma_len: int | None
    seq: int
    index: int
    send_ns: int
    payload_len: int
    src_ip: str | None = None
    dst_ip: str | None = None
    sport: int | None = None
    dport: int | None = None
    dscp: int | None = None
    ecn: int | None = None
    ttl: int | None = None
    src_mac: str | None = None
    dst_mac: str | None = None


def parse_udp_payload(data: bytes | bytearray | memoryview) -> RoceHeader:
    """Parse BTH, RETH and the replay header from a UDP payload (BTH ... ICRC)."""
    n = len(data)
    if n < BTH_LEN + PAYLOAD_HDR_LEN + ICRC_LEN:
        raise ValueError(f"{n} bytes is too short for BTH + replay header + ICRC")
    opcode, flags, _pkey, qpw, psnw = _BTH.unpack_from(data, 0)
    if opcode not in OPCODE_NAMES:
        raise ValueError(f"opcode 0x{opcode:02x} is not an RC RDMA WRITE")
    pad = (flags >> 4) & 3
    va = rkey = dma = None
    off = BTH_LEN
    if opcode in RETH_OPCODES:
        if n < BTH_LEN + RETH_LEN + PAYLOAD_HDR_LEN + ICRC_LEN:
            raise ValueError(f"{n} bytes is too short for BTH + RETH + replay header + ICRC")
        va, rkey, dma = _RETH.unpack_from(data, off)
        off += RETH_LEN
    seq, index, send_ns = PAYLOAD_HDR.unpack_from(data, off)
    return RoceHeader(opcode, pad, qpw & PSN_MASK, bool(psnw & ACKREQ_BIT), psnw & PSN_MASK,
                      va, rkey, dma, seq, index, send_ns, n - off - pad - ICRC_LEN)


def _mac(b: bytes | bytearray | memoryview) -> str:
    return ":".join(f"{x:02x}" for x in bytes(b))


def parse_frame(frame: bytes | bytearray | memoryview) -> RoceHeader:
    """Parse a whole Ethernet/IPv4/UDP 4791 frame (e.g. one read from a pcap)."""
    if len(frame) < OFF_BTH or frame[12:14] != b"\x08\x00":
        raise ValueError("not an Ethernet/IPv4 frame")
    ihl = (frame[OFF_IP] & 0x0F) * 4
    if frame[OFF_IP + 9] != 17:
        raise ValueError("not UDP")
    udp = OFF_IP + ihl
    sport, dport, ulen = struct.unpack_from("!HHH", frame, udp)
    h = parse_udp_payload(memoryview(frame)[udp + UDP_LEN:udp + ulen])
    tos = frame[OFF_IP + 1]
    return h._replace(src_ip=str(ipaddress.IPv4Address(bytes(frame[OFF_IP + 12:OFF_IP + 16]))),
                      dst_ip=str(ipaddress.IPv4Address(bytes(frame[OFF_IP + 16:OFF_IP + 20]))),
                      sport=sport, dport=dport, dscp=tos >> 2, ecn=tos & 3,
                      ttl=frame[OFF_IP + 8], dst_mac=_mac(frame[0:6]), src_mac=_mac(frame[6:12]))


def parse(data: bytes | bytearray | memoryview) -> RoceHeader:
    """Parse a full frame or a bare UDP payload (a frame is recognised by IPv4 + UDP dport 4791)."""
    if (len(data) >= OFF_BTH and data[12:14] == b"\x08\x00" and data[OFF_IP] == 0x45
            and data[OFF_IP + 9] == 17
            and struct.unpack_from("!H", data, OFF_UDP + 2)[0] == ROCE_PORT):
        return parse_frame(data)
    return parse_udp_payload(data)


# --- building ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoints:
    """Addresses of one QP's frames: L2 next hop, IPs, the QP's UDP source port, marking."""

    src_mac: str
    dst_mac: str
    src_ip: str
    dst_ip: str
    qp: int
    sport: int = -1  # -1: sport_for_qp(qp)
    dscp: int = 0
    ecn: int = ECN_ECT0
    ttl: int = 64

    @property
    def udp_sport(self) -> int:
        return sport_for_qp(self.qp) if self.sport < 0 else self.sport


class _Kind(NamedTuple):
    """One preallocated frame for (opcode, payload length, DMA length) and how to finish it."""

    buf: bytearray
    reth: bool
    ack: int
    crc_view: memoryview
    crc0: int
    icrc_off: int


class FrameBuilder:
    """Frames of one QP: Scapy templates once, then bytes patched per packet.

    ``frames(size)`` yields the frames of the next message (RDMA WRITE) in order, PSN
    continuing from the previous message and wrapping at 2^24. **A yielded frame is a
    reused buffer: send (or copy) it before asking for the next.** The builder keeps the
    QP's state: ``psn`` (next PSN), ``seq`` (next message number) and
    ``message_start_ns`` (send time of the message being produced).
    """

    def __init__(self, ep: Endpoints, pmtu: int = DEFAULT_PMTU, psn: int = 0,
                 rkey: int | None = None, va: int = DEFAULT_VA) -> None:
        if pmtu not in PMTUS:
            raise ValueError(f"pmtu must be one of {PMTUS} (got {pmtu})")
        if not 0 <= psn <= PSN_MASK:
            raise ValueError(f"psn must be in [0, {PSN_MASK}] (got {psn})")
        self.ep, self.pmtu, self.psn, self.seq = ep, pmtu, psn, 0
        self.rkey = (DEFAULT_RKEY_BASE + ep.qp) & 0xFFFFFFFF if rkey is None else rkey
        self.va = va
        self.message_start_ns = 0
        self.templates = {op: self._scapy_template(op) for op in OPCODE_NAMES}
        self._kinds: dict[tuple[int, int, int], _Kind] = {}
        self._plans: dict[int, list[_Kind]] = {}

    def _scapy_template(self, opcode: int) -> bytes:
        """Headers of one opcode: Scapy's layout, with this QP's addresses written in.

        Scapy builds each (opcode, marking) layout once per process (~1 ms each; a decode
        sender has hundreds of QPs); the addresses are then plain byte fields. The unit
        tests check the result byte for byte against frames Scapy builds per flow.
        """
        ep = self.ep
        key = (opcode, ep.dscp, ep.ecn, ep.ttl)
        base = _TEMPLATES.get(key)
        if base is None:
            base = _TEMPLATES[key] = _scapy_headers(*key)
        tpl = bytearray(base)
        tpl[0:6] = bytes.fromhex(ep.dst_mac.replace(":", ""))
        tpl[6:12] = bytes.fromhex(ep.src_mac.replace(":", ""))
        tpl[OFF_IP + 12:OFF_IP + 16] = ipaddress.IPv4Address(ep.src_ip).packed
        tpl[OFF_IP + 16:OFF_IP + 20] = ipaddress.IPv4Address(ep.dst_ip).packed
        struct.pack_into("!H", tpl, OFF_UDP, ep.udp_sport)
        tpl[OFF_BTH + 5:OFF_BTH + 8] = ep.qp.to_bytes(3, "big")
        if opcode in RETH_OPCODES:
            _RETH.pack_into(tpl, OFF_RETH, self.va, self.rkey, 0)
        return bytes(tpl)

    def _kind(self, opcode: int, payload: int, dma_len: int) -> _Kind:
        key = (opcode, payload, dma_len if opcode in RETH_OPCODES else 0)
        kind = self._kinds.get(key)
        if kind is not None:
            return kind
        tpl = self.templates[opcode]
        pad = -payload % 4
        size = len(tpl) + payload + pad + ICRC_LEN
        buf = bytearray(size)
        buf[:len(tpl)] = tpl
        struct.pack_into("!H", buf, OFF_IP + 2, size - OFF_IP)
        struct.pack_into("!H", buf, OFF_IP + 10, 0)
        struct.pack_into("!H", buf, OFF_IP + 10, ip_checksum(buf[OFF_IP:OFF_UDP]))
        struct.pack_into("!H", buf, OFF_UDP + 4, size - OFF_UDP)
        buf[OFF_BTH + 1] = (buf[OFF_BTH + 1] & ~0x30) | (pad << 4)
        reth = opcode in RETH_OPCODES
        if reth:
            struct.pack_into("!I", buf, OFF_RETH + 12, dma_len)
        crc0 = zlib.crc32(_invariant_prefix(buf))
        kind = _Kind(buf, reth, ACKREQ_BIT if opcode in ACKREQ_OPCODES else 0,
                     memoryview(buf)[OFF_PSN:size - ICRC_LEN], crc0, size - ICRC_LEN)
        self._kinds[key] = kind
        return kind

    def prepare(self, size: int) -> int:
        """Build (once) the frames of messages of ``size`` bytes; return their wire bytes.

        Call it before the clock starts so the first message costs no more than the rest.
        """
        return sum(len(k.buf) for k in self._plan(size))

    def _plan(self, size: int) -> list[_Kind]:
        plan = self._plans.get(size)
        if plan is None:
            why = validate_message_bytes(size, self.pmtu)
            if why:
                raise ValueError(f"message of {size} bytes {why}")
            plan = [self._kind(op, n, size) for op, n in segment(size, self.pmtu)]
            self._plans[size] = plan
        return plan

    def frames(self, size: int, seq: int | None = None,
               t_ns: int | None = None) -> Iterator[bytearray]:
        """Yield the frames of one message of ``size`` bytes (each valid until the next).

        ``seq`` defaults to the builder's next message number; ``t_ns`` (the send time
        written into every packet) to the wall clock when the first frame is produced.
        """
        plan = self._plan(size)
        if seq is None:
            seq = self.seq
        self.seq = (seq + 1) & 0xFFFFFFFF
        psn = self.psn
        self.psn = (psn + len(plan)) & PSN_MASK
        if t_ns is None:
            t_ns = time_ns()
        self.message_start_ns = t_ns
        va = (self.va + seq * size) & 0xFFFFFFFFFFFFFFFF
        rkey = self.rkey
        pack_plain = _PACK_PLAIN.pack_into
        pack_reth = _PACK_RETH.pack_into
        pack_icrc = _ICRC.pack_into
        crc32 = zlib.crc32
        for idx, (buf, reth, ack, view, crc0, icrc_off) in enumerate(plan):
            if reth:
                pack_reth(buf, OFF_PSN, psn | ack, va, rkey, size, seq, idx, t_ns)
            else:
                pack_plain(buf, OFF_PSN, psn | ack, seq, idx, t_ns)
            pack_icrc(buf, icrc_off, crc32(view, crc0))
            psn = (psn + 1) & PSN_MASK
            yield buf


_TEMPLATES: dict[tuple[int, int, int, int], bytes] = {}


def _scapy_headers(opcode: int, dscp: int, ecn: int, ttl: int) -> bytes:
    """Ethernet/IPv4/UDP/BTH[/RETH] of ``opcode`` built by Scapy, addresses zero, no payload."""
    # lazy: Scapy takes ~0.4 s to load; only frame templates need it, not roce's importers
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    reth = bytes(RETH_LEN) if opcode in RETH_OPCODES else b""
    pkt = (Ether(src="00:00:00:00:00:00", dst="00:00:00:00:00:00")
           / IP(src="0.0.0.0", dst="0.0.0.0", tos=(dscp << 2) | ecn, ttl=ttl, flags="DF", id=0)
           / UDP(sport=0, dport=ROCE_PORT, chksum=0)
           / BTH(opcode=opcode, dqpn=0, psn=0, ackreq=int(opcode in ACKREQ_OPCODES))
           / Raw(reth))
    return bytes(pkt)[:-ICRC_LEN]


# --- the sender's spec -------------------------------------------------------------------------
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


@dataclass(frozen=True)
class ReplayFlow:
    """One QP's work in a replay: ``messages`` WRITEs of ``message_bytes`` (the last may be
    shorter when ``bytes`` is given), starting ``start`` seconds after the common start."""

    dst_ip: str
    dst_mac: str
    qp: int
    sport: int
    dscp: int
    messages: int
    message_bytes: int
    start: float = 0.0
    traffic_class: str = "bulk"
    flow_id: str = ""
    bytes: int = 0  # total; 0 = messages * message_bytes
    psn: int = 0  # first PSN of this QP

    @property
    def total_bytes(self) -> int:
        return self.bytes or self.messages * self.message_bytes

    def sizes(self) -> list[int]:
        """The size of every message, in order."""
        if not self.messages:
            return []
        last = self.total_bytes - (self.messages - 1) * self.message_bytes
        return [self.message_bytes] * (self.messages - 1) + [last]


@dataclass(frozen=True)
class ReplaySpec:
    """What one sender agent sends (the JSON of ``astral_lab.agent_cli send --spec``)."""

    intf: str
    src_mac: str
    src_ip: str
    rate_mbps: float
    pmtu: int = DEFAULT_PMTU
    flows: tuple[ReplayFlow, ...] = field(default_factory=tuple)
    overhead_bytes: int = 0
    ecn: bool = True
    #: how each packet's UDP source port is picked (``vocab.flows.ENTROPY_MODES``),
    #: from a set of ``entropies`` ports per QP; ``flowlet_gap_us``: the flowlet mode's idle
    #: gap; ``plb_rounds``: congested rounds in a row before the plb mode re-draws
    entropy: str = "qp"
    entropies: int = 256
    flowlet_gap_us: float = 0.0
    plb_rounds: int = 3

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flows"] = [asdict(f) for f in self.flows]
        return d

    @classmethod
    def from_dict(cls, data: Any) -> ReplaySpec:
        """Validate a spec; raise one ``ValueError`` naming the first bad field."""
        if not isinstance(data, dict):
            raise ValueError("spec must be a JSON object")
        intf = _str(data, "intf", "")
        if not 0 < len(intf) <= 15:
            raise ValueError(f"intf must be an interface name of 1-15 characters (got {intf!r})")
        src_mac = _mac_field(data, "src_mac", "")
        src_ip = _ip_field(data, "src_ip", "")
        rate = _num(data, "rate_mbps", "", 0.0, 1e6)
        pmtu = data.get("pmtu", DEFAULT_PMTU)
        if pmtu not in PMTUS or isinstance(pmtu, bool):
            raise ValueError(f"pmtu must be one of {PMTUS} (got {pmtu!r})")
        overhead = int(_num(data, "overhead_bytes", "", 0, 64, 0, integer=True))
        ecn = data.get("ecn", True)
        if not isinstance(ecn, bool):
            raise ValueError(f"ecn must be true or false (got {ecn!r})")
        items = data.get("flows")
        if not isinstance(items, list):
            raise ValueError("flows must be a list")
        flows = []
        sports: dict[tuple[str, int], tuple[int, int]] = {}
        for i, item in enumerate(items):
            flow = _flow(item, i, pmtu)
            other = sports.setdefault((flow.dst_ip, flow.sport), (i, flow.qp))
            if other[1] != flow.qp:
                raise ValueError(f"flows[{i}].sport {flow.sport} to {flow.dst_ip} is already "
                                 f"QP {other[1]}'s (flows[{other[0]}]); one source port per QP")
            flows.append(flow)
        entropy = data.get("entropy", "qp")
        if entropy not in ENTROPY_MODES:
            raise ValueError(f"entropy must be one of {ENTROPY_MODES} (got {entropy!r})")
        entropies = int(_num(data, "entropies", "", 1, QP_SPORTS, 256, integer=True))
        gap = float(_num(data, "flowlet_gap_us", "", 0.0, 1e9, 0.0))
        rounds = int(_num(data, "plb_rounds", "", 1, 1 << 16, 3, integer=True))
        return cls(intf, src_mac, src_ip, float(rate), pmtu, tuple(flows), overhead, ecn,
                   entropy, entropies, gap, rounds)


def _where(name: str, ctx: str) -> str:
    return f"{ctx}.{name}" if ctx else name


def _str(d: dict[str, Any], name: str, ctx: str, default: str | None = None) -> str:
    if name not in d and default is not None:
        return default
    v = d.get(name)
    if not isinstance(v, str):
        raise ValueError(f"{_where(name, ctx)} must be a string (got {v!r})")
    return v


def _num(d: dict[str, Any], name: str, ctx: str, lo: float, hi: float,
         default: float | None = None, integer: bool = False) -> float:
    if name not in d and default is not None:
        return default
    v = d.get(name)
    kind = "an integer" if integer else "a number"
    if (isinstance(v, bool) or not isinstance(v, int if integer else (int, float))
            or not lo <= v <= hi or v != v):
        raise ValueError(f"{_where(name, ctx)} must be {kind} in [{lo}, {hi}] (got {v!r})")
    return v


def _mac_field(d: dict[str, Any], name: str, ctx: str) -> str:
    v = d.get(name)
    if not isinstance(v, str) or not _MAC_RE.match(v):
        raise ValueError(f"{_where(name, ctx)} must be a MAC address like 02:00:00:00:00:01 "
                         f"(got {v!r})")
    return v.lower()


def _ip_field(d: dict[str, Any], name: str, ctx: str) -> str:
    v = d.get(name)
    try:
        return str(ipaddress.IPv4Address(v))
    except (ValueError, TypeError):
        raise ValueError(f"{_where(name, ctx)} must be an IPv4 address (got {v!r})") from None


def _flow(item: Any, i: int, pmtu: int) -> ReplayFlow:
    ctx = f"flows[{i}]"
    if not isinstance(item, dict):
        raise ValueError(f"{ctx} must be an object")
    dst_ip = _ip_field(item, "dst_ip", ctx)
    dst_mac = _mac_field(item, "dst_mac", ctx)
    qp = int(_num(item, "qp", ctx, 0, PSN_MASK, integer=True))
    sport = int(_num(item, "sport", ctx, 1, 65535, sport_for_qp(qp), integer=True))
    dscp = int(_num(item, "dscp", ctx, 0, 63, 0, integer=True))
    messages = int(_num(item, "messages", ctx, 0, 0xFFFFFFFF, integer=True))
    mbytes = int(_num(item, "message_bytes", ctx, 0, MAX_MESSAGE_BYTES, integer=True))
    start = float(_num(item, "start", ctx, 0.0, 86400.0, 0.0))
    tclass = _str(item, "traffic_class", ctx, "bulk")
    fid = item.get("flow_id", str(i))
    if not isinstance(fid, (str, int)) or isinstance(fid, bool):
        raise ValueError(f"{ctx}.flow_id must be a string or an integer (got {fid!r})")
    total = int(_num(item, "bytes", ctx, 0, 1 << 50, 0, integer=True))
    psn = int(_num(item, "psn", ctx, 0, PSN_MASK, 0, integer=True))
    why = validate_message_bytes(mbytes, pmtu) if messages else None
    if why:
        raise ValueError(f"{ctx}.message_bytes {mbytes} {why}")
    if total:
        want = -(-total // mbytes)
        if messages != want:
            raise ValueError(f"{ctx}.messages must be {want} for bytes {total} in messages of "
                             f"{mbytes} (got {messages})")
        last = total - (messages - 1) * mbytes
        why = validate_message_bytes(last, pmtu)
        if why:
            raise ValueError(f"{ctx}.bytes {total} leaves a last message of {last} bytes that "
                             f"{why}")
    return ReplayFlow(dst_ip, dst_mac, qp, sport, dscp, messages, mbytes, start, tclass,
                      str(fid), total, psn)


def flow_entry(flow: Any, dst_ip: str, dst_mac: str, flow_id: str | None = None,
               start_offset: float = 0.0) -> dict[str, Any]:
    """One ``flows`` item of a sender spec from a ``traffic.kernels.FlowSpec``.

    ``bytes`` is carried so the last message may be shorter, as the kernel model cut it;
    ``start_offset`` shifts the flow's start (e.g. combine after dispatch).
    """
    return {"dst_ip": dst_ip, "dst_mac": dst_mac, "qp": flow.qp, "sport": flow.sport,
            "dscp": flow.dscp, "messages": flow.messages, "message_bytes": flow.message_bytes,
            "bytes": flow.bytes, "start": flow.start + start_offset,
            "traffic_class": flow.traffic_class,
            "flow_id": flow_id if flow_id is not None else
            f"{flow.src}>{flow.dst}/qp{flow.qp}/{flow.phase}"}


def burst_s(spec: ReplaySpec) -> float:
    """Seconds of credit a sender's bucket holds: ``BURST_S``, or two full frames if longer
    (0 for an unpaced sender). After a stall, the frame then due and this much credit leave
    back to back."""
    if spec.rate_mbps <= 0:
        return 0.0
    frame = spec.pmtu + MAX_OVERHEAD + spec.overhead_bytes
    return max(BURST_S, 2 * frame * 8 / (spec.rate_mbps * 1e6))


def flow_report(flow: ReplayFlow, builder: FrameBuilder, pmtu: int, starts: list[int], *,
                first_seq: int, first_psn: int, next_psn: int, end_ns: int,
                done: bool) -> dict[str, Any]:
    """One flow entry's row of ``SENT.json``; after an interruption the counts cover the
    messages sent completely (``starts`` holds their send times)."""
    sizes = flow.sizes()[:len(starts)]
    return {"flow_id": flow.flow_id, "dst_ip": flow.dst_ip, "qp": flow.qp,
            "sport": flow.sport, "dscp": flow.dscp, "traffic_class": flow.traffic_class,
            "messages": len(sizes), "message_bytes": flow.message_bytes, "bytes": sum(sizes),
            "packets": sum(packets_for(s, pmtu) for s in sizes),
            "wire_bytes": sum(builder.prepare(s) for s in sizes),
            "first_seq": first_seq, "first_psn": first_psn,
            "next_psn": next_psn if done else None,
            "start_ns": starts[0] if starts else None, "end_ns": end_ns or None,
            "complete": bool(done), "message_start_ns": starts}


def sender_report(spec: ReplaySpec, flows: list[dict[str, Any]], *, start_at: float,
                  started_ns: int, finished_ns: int, retries: int, interrupted: bool,
                  plane: Plane, cpu_s: float) -> dict[str, Any]:
    """A sender's ``SENT.json``: its per-flow rows and the totals a replay joins on; one
    shape for either traffic plane."""
    starts = [f["start_ns"] for f in flows if f["start_ns"]]
    first_ns = min(starts) if starts else None
    packets = sum(f["packets"] for f in flows)
    duration = (finished_ns - first_ns) / 1e9 if first_ns else 0.0
    wire = sum(f["wire_bytes"] for f in flows)
    return {
        "intf": spec.intf, "src_ip": spec.src_ip, "rate_mbps": spec.rate_mbps,
        "pmtu": spec.pmtu, "overhead_bytes": spec.overhead_bytes, "start_at": start_at,
        "late_s": round(started_ns / 1e9 - start_at, 6), "started_ns": started_ns,
        "first_ns": first_ns, "finished_ns": finished_ns, "duration_s": round(duration, 6),
        "packets": packets, "bytes": sum(f["bytes"] for f in flows), "wire_bytes": wire,
        "pps": round(packets / duration, 1) if duration > 0 else None,
        "wire_mbps": round(wire * 8 / duration / 1e6, 3) if duration > 0 else None,
        "send_retries": retries, "interrupted": interrupted, "plane": plane,
        "cpu_s": cpu_s, "flows": flows}
