"""RoCEv2 frames of the replay engine: byte-equal to Scapy's, segmented as IB requires."""

from __future__ import annotations

import copy
import struct
from typing import Any

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from traffic import roce
from traffic.roce import (
    OP_WRITE_FIRST,
    OP_WRITE_LAST,
    OP_WRITE_MIDDLE,
    OP_WRITE_ONLY,
    PAYLOAD_HDR,
    PSN_MASK,
    Endpoints,
    FrameBuilder,
    ReplaySpec,
)
from traffic.rxstate import _F_DUP, _F_EXP, _F_LOST, _F_MISSING, _F_REORD
from traffic.rxstate import psn_event as _psn_event
from vocab.flows import sport_for_qp

EP = Endpoints("02:00:00:00:00:01", "02:00:00:01:00:02", "10.0.0.1", "10.1.0.2", qp=7, dscp=26)
T_NS = 1_790_000_000_123_456_789


def scapy_frame(ep: Endpoints, opcode: int, psn: int, payload: bytes, va: int, rkey: int,
                dma_len: int) -> Any:
    """The same frame built independently, layer by layer, by Scapy (ICRC computed by it)."""
    pad = -len(payload) % 4
    reth = struct.pack(">QII", va, rkey, dma_len) if opcode in (6, 10) else b""
    return (Ether(src=ep.src_mac, dst=ep.dst_mac)
            / IP(src=ep.src_ip, dst=ep.dst_ip, tos=ep.dscp << 2 | ep.ecn, ttl=64, flags="DF", id=0)
            / UDP(sport=sport_for_qp(ep.qp), dport=4791, chksum=0)
            / BTH(opcode=opcode, dqpn=ep.qp, psn=psn, padcount=pad,
                  ackreq=int(opcode in (8, 10)))
            / Raw(reth + payload + bytes(pad)))


def expected_payload(seq: int, index: int, n: int) -> bytes:
    return PAYLOAD_HDR.pack(seq, index, T_NS) + bytes(n - 16)


@pytest.mark.parametrize("pmtu", [256, 1024, 4096])
@pytest.mark.parametrize("size", [16, 101, 256, 1023, 1024, 1040, 3001, 7408, 14336])
def test_frames_equal_scapy_bytes_and_icrc(size: int, pmtu: int) -> None:
    if roce.validate_message_bytes(size, pmtu):
        pytest.skip("size not replayable at this pmtu (tested separately)")
    b = FrameBuilder(EP, pmtu=pmtu, psn=100)
    b.seq = 5
    frames = [bytes(f) for f in b.frames(size, t_ns=T_NS)]
    segs = roce.segment(size, pmtu)
    assert len(frames) == len(segs)
    for i, (frame, (op, n)) in enumerate(zip(frames, segs, strict=True)):
        want = scapy_frame(EP, op, 100 + i, expected_payload(5, i, n),
                           va=roce.DEFAULT_VA + 5 * size, rkey=b.rkey, dma_len=size)
        assert frame == bytes(want), f"packet {i} ({roce.OPCODE_NAMES[op]}) differs from Scapy"
        assert frame[-4:] == want[BTH].compute_icrc(b"")
        assert struct.unpack("<I", frame[-4:])[0] == roce.icrc(frame)
        assert roce.verify_icrc(frame)


def test_icrc_equal_to_scapy_for_each_opcode_and_psn_wrap() -> None:
    b = FrameBuilder(EP, psn=PSN_MASK - 1)
    seen = {}
    for size in (3000, 500):
        for frame in b.frames(size, t_ns=T_NS):
            frame = bytes(frame)
            h = roce.parse(frame)
            icrc = Ether(frame)[BTH].compute_icrc(b"")  # Scapy recomputes from the parsed layers
            assert frame[-4:] == icrc
            seen[h.opcode] = True
    assert set(seen) == {OP_WRITE_FIRST, OP_WRITE_MIDDLE, OP_WRITE_LAST, OP_WRITE_ONLY}


def test_header_fields() -> None:
    frame = bytes(next(FrameBuilder(EP).frames(7408, t_ns=T_NS)))
    h = roce.parse_frame(frame)
    assert (h.src_mac, h.dst_mac, h.src_ip, h.dst_ip) == (EP.src_mac, EP.dst_mac, EP.src_ip,
                                                         EP.dst_ip)
    assert (h.sport, h.dport, h.dscp, h.ecn, h.ttl) == (sport_for_qp(7), 4791, 26, 2, 64)
    assert frame[14 + 6] & 0x40, "DF must be set"
    assert frame[40:42] == b"\0\0", "RoCEv2 UDP checksum is 0"
    assert roce.ip_checksum(frame[14:34]) == 0, "IP header checksum must verify"
    assert (h.dest_qp, h.psn, h.opcode) == (7, 0, OP_WRITE_FIRST)
    no_ecn = Endpoints(**{**EP.__dict__, "ecn": 0, "dscp": 46})
    h2 = roce.parse_frame(bytes(next(FrameBuilder(no_ecn).frames(64))))
    assert (h2.dscp, h2.ecn) == (46, 0)


@pytest.mark.parametrize(("size", "pmtu", "opcodes", "last"), [
    (16, 1024, [OP_WRITE_ONLY], 16),
    (1024, 1024, [OP_WRITE_ONLY], 1024),
    (1040, 1024, [OP_WRITE_FIRST, OP_WRITE_LAST], 16),
    (7408, 1024, [OP_WRITE_FIRST] + [OP_WRITE_MIDDLE] * 6 + [OP_WRITE_LAST], 240),
    (14336, 1024, [OP_WRITE_FIRST] + [OP_WRITE_MIDDLE] * 12 + [OP_WRITE_LAST], 1024),
    (7408, 4096, [OP_WRITE_FIRST, OP_WRITE_LAST], 3312),
    (1 << 20, 1024, [OP_WRITE_FIRST] + [OP_WRITE_MIDDLE] * 1022 + [OP_WRITE_LAST], 1024),
])
def test_segmentation(size: int, pmtu: int, opcodes: list[int], last: int) -> None:
    assert [op for op, _ in roce.segment(size, pmtu)] == opcodes
    assert roce.packets_for(size, pmtu) == len(opcodes)
    b = FrameBuilder(EP, pmtu=pmtu)
    headers = [roce.parse(bytes(f)) for f in b.frames(size, t_ns=T_NS)]
    assert [h.opcode for h in headers] == opcodes
    assert headers[-1].payload_len == last
    assert sum(h.payload_len for h in headers) == size
    assert all(h.payload_len == pmtu for h in headers[:-1])
    for h in headers:
        has_reth = h.opcode in (OP_WRITE_FIRST, OP_WRITE_ONLY)
        assert (h.dma_len is not None) == has_reth, "RETH only on FIRST and ONLY"
        if has_reth:
            assert h.dma_len == size
        assert h.ackreq == (h.opcode in (OP_WRITE_LAST, OP_WRITE_ONLY))
    assert [h.index for h in headers] == list(range(len(headers)))
    assert b.prepare(size) == roce.message_wire_bytes(size, pmtu)


def test_pad_count_for_unaligned_last_packet() -> None:
    frames = [bytes(f) for f in FrameBuilder(EP).frames(1024 + 101, t_ns=T_NS)]
    h = roce.parse(frames[-1])
    assert (h.pad, h.payload_len, len(frames[-1])) == (3, 101, 14 + 20 + 8 + 12 + 104 + 4)


def test_psn_and_message_numbers_continue_and_wrap() -> None:
    b = FrameBuilder(EP, psn=PSN_MASK - 2)
    psns = [roce.parse(bytes(f)).psn for f in b.frames(5 * 1024)]
    assert psns == [PSN_MASK - 2, PSN_MASK - 1, PSN_MASK, 0, 1]
    assert b.psn == 2
    nxt = [roce.parse(bytes(f)) for f in b.frames(100)]
    assert (nxt[0].psn, nxt[0].seq, b.seq) == (2, 1, 2)


def test_parse_round_trip_frame_and_udp_payload() -> None:
    for frame in FrameBuilder(EP).frames(3000, seq=42, t_ns=T_NS):
        frame = bytes(frame)
        full = roce.parse(frame)
        bare = roce.parse(frame[42:])
        assert full[:12] == bare[:12]
        assert (full.seq, full.send_ns, full.src_ip, bare.src_ip) == (42, T_NS, "10.0.0.1", None)
    with pytest.raises(ValueError, match="too short"):
        roce.parse_udp_payload(bytes(20))
    with pytest.raises(ValueError, match="opcode"):
        roce.parse_udp_payload(bytes([0x04]) + bytes(40))


def test_corrupted_frame_fails_icrc() -> None:
    frame = bytearray(next(FrameBuilder(EP).frames(2000, t_ns=T_NS)))
    frame[200] ^= 1
    assert not roce.verify_icrc(frame)
    frame[200] ^= 1
    frame[15] = 0  # TOS is masked out of the ICRC: a switch may re-mark DSCP/ECN
    assert roce.verify_icrc(frame)


def test_message_sizes_that_cannot_carry_the_header() -> None:
    assert "replay header" in roce.validate_message_bytes(15, 1024)
    assert "ends in a packet of 1 bytes" in roce.validate_message_bytes(1025, 1024)
    assert roce.validate_message_bytes(1040, 1024) is None
    with pytest.raises(ValueError, match="1025 bytes"):
        list(FrameBuilder(EP).frames(1025))
    with pytest.raises(ValueError, match="pmtu"):
        FrameBuilder(EP, pmtu=1500)


# --- spec -------------------------------------------------------------------------------------
GOOD: dict[str, Any] = {
    "intf": "s0g0-eth0", "src_mac": "02:00:00:00:00:01", "src_ip": "10.0.0.1",
    "rate_mbps": 40.0, "pmtu": 1024,
    "flows": [{"dst_ip": "10.1.0.2", "dst_mac": "02:00:00:01:00:02", "sport": 49159, "qp": 7,
               "dscp": 26, "messages": 3, "message_bytes": 7408, "start": 0.0,
               "traffic_class": "decode", "flow_id": "a"},
              {"dst_ip": "10.1.0.2", "dst_mac": "02:00:00:01:00:02", "qp": 8, "dscp": 26,
               "messages": 2, "message_bytes": 1 << 20, "bytes": (1 << 20) + 7392,
               "start": 0.5}]}


def test_spec_parses_and_round_trips() -> None:
    spec = ReplaySpec.from_dict(GOOD)
    assert spec.flows[1].sport == sport_for_qp(8)
    assert spec.flows[1].sizes() == [1 << 20, 7392]
    assert spec.flows[0].sizes() == [7408] * 3
    assert (spec.flows[1].flow_id, spec.flows[1].traffic_class) == ("1", "bulk")
    assert ReplaySpec.from_dict(spec.to_dict()) == spec


def _mutate(path: str, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    target: Any = spec
    *parents, last = path.split(".")
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return spec


@pytest.mark.parametrize(("path", "value", "message"), [
    ("intf", "a-very-long-interface-name", "intf"),
    ("src_mac", "02:00:00:00:00", "src_mac"),
    ("src_ip", "10.0.0.300", "src_ip"),
    ("rate_mbps", -1, "rate_mbps"),
    ("rate_mbps", "fast", "rate_mbps"),
    ("pmtu", 1500, "pmtu"),
    ("ecn", "yes", "ecn"),
    ("flows", {}, "flows must be a list"),
    ("flows.0.dst_ip", None, r"flows\[0\].dst_ip"),
    ("flows.0.dst_mac", "zz:00:00:00:00:01", r"flows\[0\].dst_mac"),
    ("flows.0.qp", 1 << 24, r"flows\[0\].qp"),
    ("flows.0.qp", KeyError, r"flows\[0\].qp"),
    ("flows.0.sport", 0, r"flows\[0\].sport"),
    ("flows.0.dscp", 64, r"flows\[0\].dscp"),
    ("flows.0.messages", -1, r"flows\[0\].messages"),
    ("flows.0.messages", 1.5, r"flows\[0\].messages"),
    ("flows.0.message_bytes", 8, r"flows\[0\].message_bytes 8 must be >= 16"),
    ("flows.0.message_bytes", 1025, r"flows\[0\].message_bytes 1025 ends in a packet"),
    ("flows.0.start", -0.1, r"flows\[0\].start"),
    ("flows.0.flow_id", [1], r"flows\[0\].flow_id"),
    ("flows.1.bytes", (1 << 20) * 3, r"flows\[1\].messages must be 3"),
    ("flows.1.bytes", (1 << 20) + 3, r"flows\[1\].bytes .* last message of 3 bytes"),
    ("flows.1.sport", 49159, r"flows\[1\].sport 49159 .* QP 7"),
])
def test_spec_errors_name_the_field(path: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReplaySpec.from_dict(_mutate(path, value))


def test_spec_must_be_an_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        ReplaySpec.from_dict([GOOD])


# --- the receiver's PSN bookkeeping (pure) ------------------------------------------------------
def _flow_state(expected: int) -> list[Any]:
    from traffic.rxstate import new_flow

    f = new_flow(expected, 7, None)
    assert f[2] == expected and f[9] == 7
    return f


def test_psn_gap_then_late_packet_is_reordered_not_lost() -> None:
    f = _flow_state(10)
    assert _psn_event(f, 13)  # 10, 11, 12 missing
    assert (f[_F_LOST], f[_F_EXP], f[_F_MISSING]) == (3, 14, {10, 11, 12})
    assert _psn_event(f, 11)  # late
    assert (f[_F_LOST], f[_F_REORD]) == (2, 1)
    assert not _psn_event(f, 11)  # seen twice
    assert not _psn_event(f, 13)
    assert f[_F_DUP] == 2


def test_psn_gap_across_the_wrap() -> None:
    f = _flow_state(PSN_MASK)
    assert _psn_event(f, 1)  # PSN_MASK and 0 missing
    assert (f[_F_LOST], f[_F_EXP], f[_F_MISSING]) == (2, 2, {PSN_MASK, 0})


def test_a_packet_from_before_the_first_psn_seen_is_late_data_not_a_duplicate() -> None:
    """Spraying can deliver a QP's second packet before its first: the first, when it comes,
    is data that came late (reordered), and its message completes."""
    from traffic.rxstate import fold, new_flow, receiver_report

    f = new_flow(1, 7, 101)
    assert fold(f, OP_WRITE_MIDDLE, 1, 0, 1000, 0, 50, 101) == 1000  # PSN 0 was overtaken
    assert fold(f, OP_WRITE_MIDDLE, 2, 0, 1000, 0, 50, 102) == 1000
    assert fold(f, OP_WRITE_FIRST, 0, 0, 1000, 4000, 50, 103) == 1000  # late, not a duplicate
    assert fold(f, OP_WRITE_LAST, 3, 0, 1000, 0, 50, 104) == 1000
    assert fold(f, OP_WRITE_FIRST, 0, 0, 1000, 4000, 50, 105) == 0  # again: a duplicate
    row = receiver_report({("10.0.0.1", 7): f}, 4791, True, "idle", 200, 0)["flows"]["10.0.0.1/7"]
    assert (row["lost"], row["reordered"], row["duplicates"]) == (0, 1, 1)
    assert (row["first_psn"], row["next_psn"], row["packets"], row["bytes"]) == (0, 4, 4, 4000)
    # two packets overtook PSN 0; a receiver that knew the start held PSNs 0..2 open
    assert (row["reorder_distance_max"], row["reorder_window_max"]) == (2, 3)
    assert row["complete_messages"] == 1


def test_packets_between_a_late_first_packet_and_the_first_seen_are_holes() -> None:
    from traffic.rxstate import _F_HOLE, _F_PSN0, fold, new_flow

    f = new_flow(5, 7, 0)
    fold(f, OP_WRITE_MIDDLE, 5, 0, 100, 0, 0, 0)
    assert _psn_event(f, 2)  # 3 and 4 have not come either
    assert (f[_F_LOST], f[_F_REORD], f[_F_MISSING], f[_F_PSN0]) == (2, 1, {3, 4}, 2)
    assert f[_F_HOLE] == 3
    assert _psn_event(f, 4) and _psn_event(f, 3)
    assert (f[_F_LOST], f[_F_REORD], f[_F_MISSING], f[_F_HOLE]) == (0, 3, set(), -1)
    assert not _psn_event(f, 2) and f[_F_DUP] == 1
    g = new_flow(1, 7, 0)  # across the wrap: PSN_MASK is one before 0
    fold(g, OP_WRITE_MIDDLE, 1, 0, 100, 0, 0, 0)
    assert _psn_event(g, PSN_MASK)
    assert (g[_F_LOST], g[_F_MISSING], g[_F_PSN0]) == (1, {0}, PSN_MASK)


def test_kernel_flows_become_valid_specs() -> None:
    """Every flow the kernel models emit (DeepSeek-V3 decode and prefill) is replayable."""
    from traffic.kernels import high_bandwidth, low_latency
    from traffic.workload import simulate_step, zipf

    step = simulate_step("deepseek-v3", 2, 8, 32, seed=3, gating=zipf(1.0))
    for model in (low_latency, high_bandwidth):
        flows = [f for f in model(step).flows if f.src == "s0g0"]
        assert flows
        items = [roce.flow_entry(f, "10.1.0.1", "02:00:00:01:00:01", start_offset=1.0)
                 for f in flows]
        spec = ReplaySpec.from_dict({**GOOD, "flows": items})
        for f, rf in zip(flows, spec.flows, strict=True):
            assert sum(rf.sizes()) == f.bytes and rf.sport == f.sport
            assert rf.start == f.start + 1.0 and rf.dscp == f.dscp
