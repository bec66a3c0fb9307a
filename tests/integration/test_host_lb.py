"""Host-side load balancing on real packets: a sprayed message over every spine, and flowlet
and PLB moving QPs off a slow lane that ECMP's hash put them on.

One pair of NICs on different rails of one server (``s0g0 -> s0g1``): every packet goes
leaf ``lf0r0`` -> one of four spines -> leaf ``lf0r1``, so the four uplinks of ``lf0r0``
are the four paths and their transmit counters say which paths a QP used.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable

from testbed.faultspec import Fault
from testbed.shell.faults import FaultInjector
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.roce import packets_for
from traffic.shell.replay import replay
from vocab.plan import WiringPlan

SRC, DST, LEAF = "s0g0", "s0g1", "lf0r0"
#: PLB's promise here: a QP on the slow lane re-paths within this many seconds of its start
#: (3 congested rounds of one RTT each, plus the queue the feedback waits behind)
PLB_MOVE_S = 1.5
#: a QP whose packets are always spaced more than the flowlet gap moves at its second packet
FLOWLET_MOVE_S = 0.1


def plan_() -> WiringPlan:
    return build("astral3", servers=4, gpus=2)


def tx_packets(bridge: str) -> dict[int, int]:
    """Transmitted packets per OpenFlow port, from ``ovs-ofctl dump-ports``."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", bridge],
                         capture_output=True, text=True, check=True).stdout
    counts, port = {}, None
    for line in out.splitlines():
        if m := re.match(r"\s*port\s+(\d+):", line):
            port = int(m.group(1))
        if (m := re.search(r"tx pkts=(\d+)", line)) and port is not None:
            counts[port] = int(m.group(1))
    return counts


def uplinks(plan: WiringPlan) -> dict[int, str]:
    """``lf0r0``'s uplink ports and the spine each reaches."""
    return {ln.a_port: ln.b for ln in plan.links if ln.a == LEAF and ln.kind == "lane"}


def test_a_sprayed_message_crosses_every_spine_and_arrives_complete(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    plan = plan_()
    ups = uplinks(plan)
    assert len(ups) == 4
    flows = [FlowSpec.make(SRC, DST, 2_000_000, qp=1, message_bytes=500_000)]
    with Lab(plan, lb="spray") as lab:
        before = tx_packets(LEAF)
        r = replay(lab, flows, progress=False)
        after = tx_packets(LEAF)
    per_spine = {ups[p]: after[p] - before[p] for p in ups}
    sent = sum(per_spine.values())
    print(f"spray: packets per spine {per_spine}, {r.flows[0]}")
    assert r.mode == "spray"
    assert sent >= 2_000_000 // 4096  # every data packet went up one of them
    assert all(n >= 0.15 * sent for n in per_spine.values()), per_spine
    (row,) = r.flows
    # the accounting is whole: every packet sent arrived or is counted lost, a QP's first and
    # last included (a receiver sees no gap when one of those is missing)
    assert row["received_packets"] + row["lost_packets"] == row["sent_packets"] \
        == 4 * packets_for(500_000, 4096), row
    # and nothing is lost: spraying reorders (the QP's first packet too, now and then, on a
    # busy machine), and a packet that comes late is data
    assert r.lost_packets == 0 and row["received"] == row["bytes"] == 2_000_000, \
        (row, r.summary())
    assert all(m["complete"] for m in r.messages) and len(r.messages) == 4
    assert row["reordered"] >= 0 and row["reorder_window_max"] >= row["reorder_distance_max"]
    assert_clean(plan)


def test_flowlet_and_plb_move_qps_off_the_slow_lane_ecmp_left_them_on(
        assert_clean: Callable[[WiringPlan], None]) -> None:
    """ECMP hashes 8 QPs onto the four uplinks; the busiest uplink is then cut to a quarter
    of its rate. Under ECMP its QPs crawl. PLB's receivers report their queueing (CNPs) and
    the senders re-draw those QPs' ports within ``PLB_MOVE_S``, so the job ends well before
    ECMP's. Flowlet re-draws a QP whose packets are spaced more than its gap: with the
    default gap (2 RTTs) the sender's round-robin over 8 QPs leaves no such gap and no QP
    moves; with a gap of half an RTT every QP moves within ``FLOWLET_MOVE_S``."""
    plan = plan_()
    ups = uplinks(plan)
    flows = [FlowSpec.make(SRC, DST, 400_000, qp=q, message_bytes=100_000) for q in range(1, 9)]
    with Lab(plan) as lab, FaultInjector(lab) as inj:
        before = tx_packets(LEAF)
        replay(lab, flows, progress=False)
        after = tx_packets(LEAF)
        busiest = max(ups, key=lambda p: after[p] - before[p])
        inj.inject(Fault("link-degrade", f"{LEAF}~{ups[busiest]}#0", fraction=0.25))
        got = {pol: replay(lab, flows, policy=pol, progress=False, recv_grace_s=60)
               for pol in ("ecmp", "plb", "flowlet", "flowlet:gap_rtts=0.5")}
    ecmp, plb = got["ecmp"], got["plb"]
    fct = {f["qp"]: f["fct_s"] for f in ecmp.flows}
    slow = [q for q, t in fct.items() if t > 2 * min(fct.values())]
    print(f"slow lane {ups[busiest]}: QPs {slow}; completion "
          + ", ".join(f"{p} {r.job_completion_s:.2f} s" for p, r in got.items())
          + f"; plb feedback {plb.feedback}")
    assert slow, fct  # the busiest lane carried at least one QP
    for p, r in got.items():
        print(f"  {p}: {r.bytes_received} of {r.bytes_sent} bytes, {r.lost_packets} lost")
    # the slow lane's queue overflows under ECMP (its tail packets are lost: a drop-tail
    # queue and no retransmission); PLB moves the QPs away before that
    assert plb.lost_packets == 0 and plb.bytes_received == plb.bytes_sent
    rows = {f["qp"]: f for f in plb.flows}
    for q in slow:
        assert rows[q]["entropy_moves"] >= 1, rows[q]
        assert rows[q]["first_move_s"] < PLB_MOVE_S, rows[q]
        assert rows[q]["feedback"]["cnps"] >= 3, rows[q]
    assert plb.feedback["acks_sent"] > 0 and plb.feedback["cnps_sent"] > 0
    assert plb.job_completion_s < 0.85 * ecmp.job_completion_s
    # the default gap is rarely reached (a sender descheduled on a busy machine leaves a real
    # idle gap, and flowlet rightly moves that QP): far fewer moves than with half an RTT
    short = {f["qp"]: f for f in got["flowlet:gap_rtts=0.5"].flows}
    default_moves = sum(f["entropy_moves"] for f in got["flowlet"].flows)
    assert default_moves < sum(f["entropy_moves"] for f in short.values()) / 2, \
        (default_moves, short)
    assert got["flowlet:gap_rtts=0.5"].mode == "flowlet:gap_rtts=0.5"
    for q in slow:
        assert short[q]["entropy_moves"] >= 1 and short[q]["first_move_s"] < FLOWLET_MOVE_S
    assert_clean(plan)


def test_plb_feedback_is_roce_that_tshark_decodes(assert_clean: Callable[[WiringPlan], None],
                                                  tmp_path: str) -> None:
    """The receivers' ACKs and CNPs, captured on the sender's NIC: RC ACKNOWLEDGE (opcode 17)
    with an AETH, CNP (opcode 0x81) with BECN, the data's QP, a correct ICRC; two QPs at the
    NIC's rate fill their lanes, so both kinds occur."""
    import os
    import signal
    import time

    from scapy.utils import rdpcap

    from traffic.roce import verify_icrc

    plan = plan_()
    pcap = os.path.join(str(tmp_path), "feedback.pcap")
    flows = [FlowSpec.make(SRC, DST, 400_000, qp=q, message_bytes=100_000) for q in (1, 2)]
    with Lab(plan, lb="plb") as lab:
        # the ACK/CNP opcodes (the first byte after the UDP header): feedback, not data
        dump = lab.hosts[SRC].popen(["tcpdump", "-i", f"{SRC}-eth0", "--immediate-mode", "-U",
                                     "-s", "128", "-w", pcap,
                                     "udp dst port 4791 and (udp[8] == 0x11 or udp[8] == 0x81)"])
        try:
            _wait_for(lambda: os.path.exists(pcap))
            time.sleep(1.0)  # the file exists before the capture runs
            r = replay(lab, flows, progress=False)
            time.sleep(0.5)
        finally:
            dump.send_signal(signal.SIGINT)
            dump.wait(timeout=10)
    out = subprocess.run(["tshark", "-r", pcap, "-T", "fields", "-e", "infiniband.bth.opcode",
                          "-e", "infiniband.bth.destqp", "-e", "infiniband.aeth.syndrome"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines() if line.strip()]
    kinds = {row[0] for row in rows}
    print(f"feedback frames: {len(rows)}, opcodes {sorted(kinds)}, replay {r.feedback}")
    assert {"17", "129"} <= kinds, rows[:5]
    assert {int(row[1], 16) for row in rows} <= {1, 2}
    assert all(row[2] == "31" for row in rows if row[0] == "17")  # ACK, credits not used
    frames = [bytes(p) for p in rdpcap(pcap)]
    assert frames and all(verify_icrc(f) for f in frames)
    assert all(f[46] & 0x40 for f in frames if f[42] == 0x81)  # BECN set on a CNP
    assert len(rows) == r.feedback["acks_sent"] + r.feedback["cnps_sent"]
    assert_clean(plan)


def _wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)
