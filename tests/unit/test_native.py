"""The compiled traffic plane without a network: the C sender's frames against Python's, its
report, pacing and interruption, and the accounting of receiver records.

The helper is compiled from the checked-out source into a temporary folder, so these tests
always test the C that is in the tree. ``send --dump`` writes frames to a file instead of a
socket (no root needed).
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from traffic import native
from traffic.roce import (
    ECN_ECT0,
    OP_WRITE_FIRST,
    OP_WRITE_LAST,
    OP_WRITE_MIDDLE,
    OP_WRITE_ONLY,
    PSN_MASK,
    Endpoints,
    FrameBuilder,
    ReplaySpec,
    burst_s,
    icrc,
    verify_icrc,
)
from traffic.rxstate import receiver_report
from traffic.shell import pktio as helper


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(helper.build(tmp_path_factory.mktemp("pktio") / "astral-pktio", force=True))


def spec(flows: list[dict[str, Any]], rate: float = 0.0, pmtu: int = 1024,
         **kw: Any) -> ReplaySpec:
    return ReplaySpec.from_dict({"intf": "h-eth0", "src_mac": "02:00:00:00:00:01",
                                 "src_ip": "10.0.0.1", "rate_mbps": rate, "pmtu": pmtu,
                                 "flows": flows, **kw})


def send_ns(frame: bytes) -> int:
    """The send time a replay frame carries (after the RETH on FIRST/ONLY)."""
    return struct.unpack_from(">Q", frame, 78 if frame[42] in (OP_WRITE_FIRST, OP_WRITE_ONLY)
                              else 62)[0]


def with_send_ns(frame: bytes, t: int) -> bytes:
    """``frame`` carrying send time ``t``, its ICRC recomputed."""
    buf = bytearray(frame)
    struct.pack_into(">Q", buf, 78 if buf[42] in (OP_WRITE_FIRST, OP_WRITE_ONLY) else 62, t)
    struct.pack_into("<I", buf, len(buf) - 4, icrc(buf))
    return bytes(buf)


def flow(dst: int, qp: int, messages: int, size: int, **kw: Any) -> dict[str, Any]:
    return {"dst_ip": f"10.0.0.{dst}", "dst_mac": f"02:00:00:00:00:{dst:02x}", "qp": qp,
            "sport": 49152 + qp, "dscp": 26, "messages": messages, "message_bytes": size,
            **kw}


def run(exe: str, sp: ReplaySpec, tmp: Path) -> tuple[dict[str, Any], list[bytes]]:
    plan = native.write_plan(sp, str(tmp / "plan"))
    proc = subprocess.run([exe, "send", "--plan", str(tmp / "plan"), "--out",
                           str(tmp / "sent"), "--dump", str(tmp / "frames")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return native.read_sent(str(tmp / "sent"), plan, None), frames_of(tmp / "frames")


def frames_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out, off = [], 0
    while off < len(data):
        (n,) = struct.unpack_from("<I", data, off)
        out.append(data[off + 4:off + 4 + n])
        off += 4 + n
    return out


def qp_of(frame: bytes) -> int:
    return int.from_bytes(frame[47:50], "big")  # BTH destination QP


def test_c_frames_are_pythons_frames_byte_for_byte(exe: str, tmp_path: Path) -> None:
    """Every frame equals what FrameBuilder builds for the same message number, except that
    each packet carries its own send time (the first packet's is the message's, later ones
    are not earlier); a QP's second work request continues its PSNs and message numbers;
    PSNs wrap at 2^24."""
    sp = spec([flow(2, 7, 3, 5000), flow(3, 8, 2, 700, psn=PSN_MASK - 1),
               flow(2, 7, 1, 3000, start=0.001), flow(4, 9, 1, 2500, bytes=2100)])
    sent, frames = run(exe, sp, tmp_path)
    assert all(verify_icrc(f) for f in frames)
    by_qp: dict[int, list[bytes]] = defaultdict(list)
    for f in frames:
        by_qp[qp_of(f)].append(f)
    for qp, rows in ((7, [0, 2]), (8, [1]), (9, [3])):
        want = []
        for i in rows:
            f, row = sp.flows[i], sent["flows"][i]
            ep = Endpoints(sp.src_mac, f.dst_mac, sp.src_ip, f.dst_ip, f.qp, f.sport, f.dscp,
                           ECN_ECT0)
            b = FrameBuilder(ep, sp.pmtu, psn=row["first_psn"])
            for k, size in enumerate(f.sizes()):
                want += [bytes(x) for x in b.frames(size, row["first_seq"] + k,
                                                    row["message_start_ns"][k])]
        got = by_qp[qp]
        assert [with_send_ns(w, send_ns(g)) for w, g in zip(want, got, strict=True)] == got
        firsts = [i for i, w in enumerate(want) if w[42] in (OP_WRITE_FIRST, OP_WRITE_ONLY)]
        assert [send_ns(got[i]) for i in firsts] == [send_ns(want[i]) for i in firsts], qp
        assert all(send_ns(a) <= send_ns(b) for a, b in zip(got, got[1:], strict=False)), qp
    assert [r["first_seq"] for r in sent["flows"]] == [0, 0, 3, 0]
    assert sent["flows"][2]["first_psn"] == sent["flows"][0]["next_psn"] == 15
    assert sent["flows"][1]["next_psn"] == 0  # 2^24 - 2, 2^24 - 1, then 0
    assert sent["flows"][3]["bytes"] == 2100 and sent["packets"] == len(frames)
    assert sent["wire_bytes"] == sum(len(f) for f in frames)
    assert all(r["complete"] for r in sent["flows"]) and not sent["interrupted"]


def test_active_qps_are_served_a_packet_each_in_turn(exe: str, tmp_path: Path) -> None:
    sp = spec([flow(2, 1, 1, 4096), flow(3, 2, 1, 4096), flow(4, 3, 1, 4096)])
    _sent, frames = run(exe, sp, tmp_path)
    assert [qp_of(f) for f in frames] == [1, 2, 3] * 4
    ops = [f[42] for f in frames]
    assert ops == [OP_WRITE_FIRST] * 3 + [OP_WRITE_MIDDLE] * 6 + [OP_WRITE_LAST] * 3


def test_a_later_start_waits_and_only_messages_are_single_packets(exe: str,
                                                                  tmp_path: Path) -> None:
    sp = spec([flow(2, 1, 2, 64), flow(3, 2, 1, 64, start=0.05)])
    sent, frames = run(exe, sp, tmp_path)
    assert [f[42] for f in frames] == [OP_WRITE_ONLY] * 3
    assert [qp_of(f) for f in frames] == [1, 1, 2]
    late = sent["flows"][1]["start_ns"] - sent["first_ns"]
    assert late >= 0.05e9  # a start offset is a floor: nothing leaves before it


def test_pacing_never_sends_faster_than_the_rate(exe: str, tmp_path: Path) -> None:
    """A lower bound only (sleeping longer is always possible on a busy machine): 400 kB at
    20 Mb/s cannot leave in less than its wire time less one bucket."""
    sp = spec([flow(2, 1, 4, 100_000)], rate=20.0)
    sent, frames = run(exe, sp, tmp_path)
    wire = sum(len(f) for f in frames)
    span = (sent["finished_ns"] - sent["first_ns"]) / 1e9
    assert span >= wire * 8 / 20e6 - burst_s(sp) - 1e-3, span
    assert burst_s(sp) == pytest.approx(2 * (1024 + 74) * 8 / 20e6)


def test_sigterm_stops_the_sender_and_reports_whole_messages(exe: str, tmp_path: Path) -> None:
    sp = spec([flow(2, 1, 1000, 10_000)], rate=5.0)  # 80 s of traffic
    plan = native.write_plan(sp, str(tmp_path / "plan"))
    p = subprocess.Popen([exe, "send", "--plan", str(tmp_path / "plan"), "--out",
                          str(tmp_path / "sent"), "--dump", str(tmp_path / "frames")])
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    sent = native.read_sent(str(tmp_path / "sent"), plan, None)
    row = sent["flows"][0]
    assert sent["interrupted"] and not row["complete"] and row["next_psn"] is None
    assert 0 < row["messages"] < 1000 and row["bytes"] == row["messages"] * 10_000


@pytest.mark.parametrize("damage", ["truncate", "magic"])
def test_a_bad_plan_is_one_clear_error_and_no_report(exe: str, tmp_path: Path,
                                                     damage: str) -> None:
    native.write_plan(spec([flow(2, 1, 2, 3000)]), str(tmp_path / "plan"))
    data = (tmp_path / "plan").read_bytes()
    (tmp_path / "plan").write_bytes(data[:-7] if damage == "truncate" else b"XXXX" + data[4:])
    proc = subprocess.run([exe, "send", "--plan", str(tmp_path / "plan"), "--out",
                           str(tmp_path / "sent"), "--dump", str(tmp_path / "frames")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "plan" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "sent").exists()


def test_unknown_options_are_refused(exe: str) -> None:
    proc = subprocess.run([exe, "send", "--bogus", "1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--bogus" in proc.stderr


# --- receiver records --------------------------------------------------------------------------
def records(rows: list[tuple[int, ...]]) -> np.ndarray:
    """(stamp, psn, seq, op, plen, dma, sent) rows of one QP from 10.0.0.1:49153."""
    recs = np.zeros(len(rows), dtype=native.RECORD)
    for i, (stamp, psn, seq, op, plen, dma, sent) in enumerate(rows):
        recs[i] = (stamp, sent, 0x0A000001, psn, seq, plen, dma, 7, 49153, op, 0, 64, (0, 0, 0))
    return recs


def test_a_corrupt_frame_is_dropped_lost_and_counted_and_marks_are_counted_per_qp() -> None:
    """A frame the receiver flagged (bad IPv4 header checksum, bad ICRC) is not data: its PSN
    is a gap (lost) and the QP counts an error; a QP whose first frame was corrupt still
    counts it lost. The good frames' TTLs (lane marks) are counted per QP."""
    one = OP_WRITE_ONLY
    recs = records([(100, 0, 0, one, 64, 64, 50), (101, 1, 1, one, 64, 64, 51),
                    (102, 2, 2, one, 64, 64, 52), (103, 3, 3, one, 64, 64, 53)])
    recs["bad"] = [0, 1, 2, 0]  # PSN 1: header checksum; PSN 2: ICRC
    recs["ttl"] = [129, 129, 129, 130]
    rep = receiver_report(native.fold_records(recs), 4791, True, "idle", 200, 0)
    row = rep["flows"]["10.0.0.1/7"]
    assert (row["packets"], row["lost"], row["errors"]) == (2, 2, 2)
    assert row["marks"] == {"129": 1, "130": 1} and rep["errors"] == 2
    assert [m["seq"] for m in rep["messages"]] == [0, 3]
    head = records([(100, 0, 0, one, 64, 64, 50), (101, 1, 1, one, 64, 64, 51)])
    head["bad"] = [1, 0]
    row = receiver_report(native.fold_records(head), 4791, True, "idle", 200, 0
                          )["flows"]["10.0.0.1/7"]
    assert (row["packets"], row["lost"], row["errors"], row["first_psn"]) == (1, 1, 1, 0)


def test_records_fold_into_loss_reordering_duplicates_and_latency() -> None:
    f, m, last = OP_WRITE_FIRST, OP_WRITE_MIDDLE, OP_WRITE_LAST
    recs = records([(100, 5, 0, f, 1024, 3000, 50), (110, 7, 0, last, 952, 0, 50),
                    (120, 6, 0, m, 1024, 0, 50),  # late: reordered, not lost
                    (130, 6, 0, m, 1024, 0, 50),  # again: a duplicate
                    (140, 9, 1, OP_WRITE_ONLY, 100, 100, 60)])  # PSN 8 never comes
    flows = native.fold_records(recs)
    state = flows[("10.0.0.1", 7)]  # a QP is named by its number, not its port
    rep = receiver_report(flows, 4791, True, "idle", 200, 0)
    row = rep["flows"]["10.0.0.1/7"]
    assert (row["lost"], row["reordered"], row["duplicates"]) == (1, 1, 1)
    assert row["sport"] == 49153
    # PSN 6 came after 7 (one packet overtook it); the window spanned the hole at 6 up to 7,
    # then from the hole at 8 (never filled) to 9
    assert (row["reorder_distance_max"], row["reorder_window_max"]) == (1, 2)
    assert row["bytes"] == 3000 + 100 and row["packets"] == 4 and row["qp"] == 7
    assert (row["first_psn"], row["next_psn"]) == (5, 10)
    msgs = {x["seq"]: x for x in rep["messages"]}
    assert msgs[0]["complete"] and msgs[0]["latency_ns"] == 120 - 50
    assert msgs[1]["complete"] and msgs[1]["latency_ns"] == 140 - 60
    assert state[0] == 3100


def test_a_sprayed_qp_is_one_flow_whatever_its_ports_and_completes_out_of_order() -> None:
    """Packets of one QP from several source ports fold into one QP; a message whose LAST
    packet arrives before its MIDDLE ones is complete once every byte is in; its send time is
    the earliest any of its packets carries."""
    f, m, last = OP_WRITE_FIRST, OP_WRITE_MIDDLE, OP_WRITE_LAST
    recs = records([(100, 0, 0, f, 1000, 4000, 50), (101, 3, 0, last, 1000, 0, 80),
                    (102, 2, 0, m, 1000, 0, 70), (103, 1, 0, m, 1000, 0, 60)])
    recs["sport"] = [49153, 49160, 49170, 49180]
    flows = native.fold_records(recs)
    assert list(flows) == [("10.0.0.1", 7)]
    rep = receiver_report(flows, 4791, True, "idle", 200, 0)
    row = rep["flows"]["10.0.0.1/7"]
    assert (row["lost"], row["reordered"], row["packets"]) == (0, 2, 4)
    assert (row["reorder_distance_max"], row["reorder_window_max"]) == (2, 3)
    (msg,) = rep["messages"]
    assert msg["complete"] and msg["latency_ns"] == 103 - 50


def test_a_qp_whose_first_packet_was_overtaken_is_whole() -> None:
    """Sprayed over four spines, a QP's PSN 1 can arrive before its PSN 0: the records fold
    into every byte, no loss, the first message complete, PSN 0 reordered (not a duplicate)."""
    f, m, last = OP_WRITE_FIRST, OP_WRITE_MIDDLE, OP_WRITE_LAST
    recs = records([(101, 1, 0, m, 4096, 0, 50), (102, 2, 0, m, 4096, 0, 50),
                    (103, 0, 0, f, 4096, 12_588, 50), (104, 3, 0, last, 300, 0, 50),
                    (105, 4, 1, OP_WRITE_ONLY, 64, 64, 60)])
    rep = receiver_report(native.fold_records(recs), 4791, True, "idle", 200, 0)
    row = rep["flows"]["10.0.0.1/7"]
    assert row["bytes"] == 3 * 4096 + 300 + 64 and row["packets"] == 5
    assert (row["lost"], row["reordered"], row["duplicates"], row["first_psn"]) == (0, 1, 0, 0)
    assert all(x["complete"] for x in rep["messages"]) and len(rep["messages"]) == 2


def test_read_received_joins_the_metadata_and_the_records(tmp_path: Path) -> None:
    recs = records([(100, 0, 0, OP_WRITE_ONLY, 64, 64, 90)])
    out = tmp_path / "recv.json"
    with open(f"{out}.bin", "wb") as fh:
        fh.write(struct.pack("<II", native.REC_MAGIC, native.VERSION))
        recs.tofile(fh)
    out.write_text('{"stop_reason": "expect_bytes", "stopped_ns": 5, "packets": 1, '
                   '"bytes": 64, "malformed": 0, "other": 0, "ring_packets": 1, '
                   '"ring_drops": 3, "ring_freezes": 0}')
    got = native.read_received(str(out), 4791)
    assert got["stop_reason"] == "expect_bytes" and got["bytes"] == 64
    assert got["kernel_drops"]["ring"] == 3 and got["messages"][0]["latency_ns"] == 10
    assert got["receiver_drops"] == 3  # the receiver's own loss, for the replay to report
    (tmp_path / "bad.json.bin").write_bytes(b"nope")
    with pytest.raises(ValueError, match="not a receiver record file"):
        native.read_records(str(tmp_path / "bad.json.bin"))


def test_the_helper_is_found_only_when_current(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASTRAL_PKTIO", raising=False)
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    monkeypatch.setattr(helper.sys, "executable", str(fake))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(helper.HelperMissing, match="make setup"):
        helper.path()
    (fake.parent / helper.NAME).write_text("")
    os.utime(fake.parent / helper.NAME, (1, 1))  # older than the source
    with pytest.raises(helper.HelperMissing, match="older than its source"):
        helper.path()
    os.utime(fake.parent / helper.NAME)
    assert helper.path() == str(fake.parent / helper.NAME)


def sport_of(frame: bytes) -> int:
    return struct.unpack_from(">H", frame, 34)[0]


def test_spray_gives_each_packet_the_next_port_of_its_qps_set(exe: str, tmp_path: Path) -> None:
    """spray: packet i of a QP carries port i mod N of the QP's set (every port distinct,
    in the QP's source-port range); every frame's ICRC is right for the port it carries."""
    sp = spec([flow(2, 7, 2, 20 * 1024), flow(3, 9, 1, 10 * 1024)], entropy="packet",
              entropies=8)
    _sent, frames = run(exe, sp, tmp_path)
    assert all(verify_icrc(f) for f in frames)
    by_qp: dict[int, list[int]] = defaultdict(list)
    for f in frames:
        by_qp[qp_of(f)].append(sport_of(f))
    from traffic.hostlb import entropy_ports

    for qp, ports in by_qp.items():
        assert ports[0] == 49152 + qp  # the first value is the QP's own port
        assert ports[:8] == entropy_ports(49152 + qp, 8)[:len(ports[:8])]
        assert len(set(ports[:8])) == 8 and ports[8:16] == ports[:len(ports[8:16])], qp
        assert all(49152 <= p < 65536 for p in ports)
    assert len(by_qp[7]) == 40 and len(by_qp[9]) == 10


def test_one_port_per_qp_unless_told(exe: str, tmp_path: Path) -> None:
    _sent, frames = run(exe, spec([flow(2, 7, 3, 5000)]), tmp_path)
    assert {sport_of(f) for f in frames} == {49152 + 7}


def test_flowlet_moves_a_qp_only_after_an_idle_gap(exe: str, tmp_path: Path) -> None:
    """flowlet: back-to-back packets keep their port; a work request that starts after a
    pause longer than the gap starts on another port of the set, and the report counts it."""
    sp = spec([flow(2, 7, 2, 4096), flow(2, 7, 2, 4096, start=0.3)], entropy="flowlet",
              entropies=16, flowlet_gap_us=100_000)
    sent, frames = run(exe, sp, tmp_path)
    assert all(verify_icrc(f) for f in frames)
    ports = [sport_of(f) for f in frames]
    assert len(set(ports[:8])) == 1 and len(set(ports[8:])) == 1 and ports[8] != ports[0]
    moves = [r["entropy"]["moves"] for r in sent["flows"]]
    assert moves == [1, 1]  # one lane: its one move, reported on both work requests
    assert sent["flows"][0]["entropy"]["first_move_ns"] >= sent["first_ns"] + 0.29e9


def test_bad_entropy_settings_are_one_clear_error() -> None:
    with pytest.raises(ValueError, match="entropy must be one of"):
        spec([flow(2, 7, 1, 100)], entropy="sprinkle")
    with pytest.raises(ValueError, match="entropies must be"):
        spec([flow(2, 7, 1, 100)], entropy="packet", entropies=0)
