"""Host-side balancing, the pure half: what each policy asks of senders and receivers, and
QP scaling's stripes of the replay's flows (the C sender's per-packet choice is tested in
test_native.py from its dumped frames)."""

from __future__ import annotations

import pytest

from controllers import policies
from testbed.topologies import build
from traffic import hostlb
from traffic.hostlb import entropy_ports
from traffic.kernels import FlowSpec
from traffic.roce import OP_WRITE_MIDDLE, ReplaySpec, frame_len
from vocab.flows import sport_for_qp


@pytest.fixture(scope="module")
def plan():  # type: ignore[no-untyped-def]
    return build("astral3", servers=4, gpus=2)


def test_frame_time_and_base_delay_follow_the_slowest_fabric_link(plan) -> None:  # type: ignore[no-untyped-def]
    lane = min(ln.mbps for ln in plan.links if ln.kind == "lane")
    frame = frame_len(OP_WRITE_MIDDLE, 4096)  # a full MIDDLE frame, headers and ICRC
    assert hostlb.frame_s(plan, 4096) == pytest.approx(frame * 8 / (lane * 1e6))
    hops = plan.counts["max_switch_hops"]
    assert hostlb.base_one_way_s(plan, 4096) == pytest.approx((hops + 1) *
                                                              hostlb.frame_s(plan, 4096))


def test_each_policy_asks_the_sender_for_its_entropy_rule(plan) -> None:  # type: ignore[no-untyped-def]
    assert hostlb.sender_settings(policies.POLICIES.get("ecmp"), plan, 4096) == {}
    assert hostlb.sender_settings(policies.POLICIES.get("qp-scaling"), plan, 4096) == {}
    assert hostlb.sender_settings(policies.parse("spray:entropies=16"), plan, 4096) == \
        {"entropy": "packet", "entropies": 16}
    fl = hostlb.sender_settings(policies.parse("flowlet:gap_rtts=3"), plan, 4096)
    assert fl["entropy"] == "flowlet"
    assert fl["flowlet_gap_us"] == pytest.approx(3e6 * hostlb.base_one_way_s(plan, 4096))
    assert hostlb.sender_settings(policies.parse("plb:rounds=5"), plan, 4096) == \
        {"entropy": "plb", "plb_rounds": 5}
    for name in policies.POLICIES.names():  # whatever a policy asks, a sender's spec accepts
        extra = hostlb.sender_settings(policies.POLICIES.get(name), plan, 4096)
        ReplaySpec.from_dict({"intf": "h-eth0", "src_mac": "02:00:00:00:00:01",
                              "src_ip": "10.0.0.1", "rate_mbps": 1.0, "flows": [], **extra})


def test_only_plb_receivers_answer_with_feedback(plan) -> None:  # type: ignore[no-untyped-def]
    for name in ("ecmp", "spray", "flowlet", "qp-scaling", "planned"):
        assert hostlb.receiver_args(policies.POLICIES.get(name), plan, 4096) == []
    args = hostlb.receiver_args(policies.parse("plb:round_rtts=2:delay_frames=2"), plan, 4096)
    base = hostlb.base_one_way_s(plan, 4096)
    want = (base + 2 * hostlb.frame_s(plan, 4096)) * 1e6
    assert args[0] == "--feedback-round-us" and args[2] == "--feedback-delay-us"
    assert float(args[1]) == pytest.approx(2 * base * 1e6, abs=0.1)
    assert float(args[3]) == pytest.approx(want, abs=0.1)


def test_qp_scaling_stripes_every_message_over_its_own_qps() -> None:
    f = FlowSpec.make("s0g0", "s1g0", 1_000_003, qp=5, message_bytes=100_000)
    got = policies.parse("qp-scaling:qps=3").expand([f])
    assert [g.qp for g in got] == [15, 16, 17]
    assert all(g.sport == sport_for_qp(g.qp) for g in got)
    assert sum(g.bytes for g in got) == f.bytes
    assert {g.message_bytes for g in got} == {33_334}
    assert all(g.messages == -(-g.bytes // g.message_bytes) for g in got)
    assert policies.POLICIES.get("spray").expand([f]) == [f]


def test_policy_options_are_checked_once() -> None:
    with pytest.raises(ValueError, match="has no option 'qp'"):
        policies.parse("qp-scaling:qp=2")
    with pytest.raises(ValueError, match="whole number"):
        policies.parse("qp-scaling:qps=2.5")
    with pytest.raises(ValueError, match=r"spray:entropies must be a whole number in 1\.\.16384"):
        policies.parse("spray:entropies=-1")
    assert policies.parse("plb:rounds=2").label == "plb:rounds=2"
    assert policies.parse("plb:rounds=3").label == "plb"  # the default is not repeated


def test_host_side_policies_leave_the_switches_as_ecmp_does(plan) -> None:  # type: ignore[no-untyped-def]
    """The controller's flow tables under spray, qp-scaling, flowlet and plb are ECMP's: the
    hosts balance, the switches only hash (no pins even for posted flows)."""
    from controllers.fabric import FabricLogic
    from vocab.flows import Flow

    hosts = [h.name for h in plan.hosts]
    flows = [Flow(hosts[0], hosts[-1], 49152 + q, bytes=1 << 20) for q in range(4)]
    ecmp = FabricLogic(plan, "ecmp")
    ecmp.set_flows(flows)
    for name in ("spray", "qp-scaling", "flowlet", "plb"):
        logic = FabricLogic(plan, name)
        logic.set_flows(flows)
        assert not logic.assign, name
        assert all(logic.table(s) == ecmp.table(s) for s in logic.switch_names), name


def test_a_sprayed_qp_reaches_every_equal_cost_port_of_its_leaf(plan) -> None:  # type: ignore[no-untyped-def]
    """The entropy set of one QP, through the controller's hash model of the switches: its
    packets leave the source leaf by every uplink, in near-equal shares; one port (what
    ecmp and the QP's first packet use) takes one uplink."""
    from collections import Counter

    from controllers import lb
    from controllers.paths import PathFinder
    from vocab.flows import Flow

    finder = PathFinder(plan)
    src, dst = "s0g0", "s0g1"  # different rails: leaf, one of the spines, leaf
    ups = {h for p in finder.candidates(src, dst) for h in p[:1]}
    assert len(ups) == 4
    ports = entropy_ports(sport_for_qp(3), 256)
    assert len(set(ports)) == 256
    first = Counter(lb.ecmp_path(Flow(src, dst, p), finder)[0] for p in ports)
    assert set(first) == ups
    assert max(first.values()) / min(first.values()) < 1.6, first


def test_stripes_of_a_plain_flow_take_their_own_source_ports() -> None:
    from vocab.flows import Flow

    got = policies.stripe([Flow("a", "b", sport_for_qp(1), bytes=10)], 3)
    assert [g.bytes for g in got] == [4, 3, 3]
    assert [g.sport for g in got] == [sport_for_qp(3), sport_for_qp(4), sport_for_qp(5)]


def test_the_python_plane_refuses_a_host_side_policy_before_anything_starts(
        tmp_path, plan) -> None:  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from traffic.shell.replay import replay

    client = SimpleNamespace(lb=lambda: {"mode": "spray", "pins": False})
    lab = SimpleNamespace(plan=plan, client=lambda: client, workdir=str(tmp_path),
                          lb_policy=policies.POLICIES.get("spray"))
    flows = [FlowSpec.make("s0g0", "s0g1", 10_000, qp=1, message_bytes=5_000)]
    with pytest.raises(ValueError, match="only the native plane"):
        replay(lab, flows, plane="python")
    with pytest.raises(ValueError, match="has no option"):
        replay(lab, flows, policy="spray:qps=2")
    assert list(tmp_path.iterdir()) == []  # no replay folder, no agents
