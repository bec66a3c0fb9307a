"""The replay orchestration's pure parts: input checks, percentiles, joining agent outputs;
and what it waits for after posting a job to the controller."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.roce import OP_WRITE_MIDDLE
from traffic.rxstate import fold, new_flow, receiver_report
from traffic.shell.replay import _check, _result, percentile, sender_spec
from vocab.flows import sport_for_qp


@pytest.fixture(scope="module")
def lab() -> SimpleNamespace:
    return SimpleNamespace(plan=build("astral3", servers=4, gpus=2, servers_per_block=2))


def flow(src: str, dst: str, qp: int, n: int = 2, size: int = 1000, **kw: object) -> FlowSpec:
    return FlowSpec(src, dst, bytes=n * size, qp=qp, sport=sport_for_qp(qp),
                    message_bytes=size, messages=n, **kw)  # type: ignore[arg-type]


def test_percentile_is_a_measured_value() -> None:
    vals = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(vals, 50) == 3.0
    assert percentile(vals, 99) == 5.0
    assert percentile(vals, 0) == 1.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_bad_flow_lists_are_refused_with_the_reason(lab: SimpleNamespace) -> None:
    with pytest.raises(ValueError, match="no host 'nobody'"):
        _check([flow("s0g0", "nobody", 1)], lab)
    with pytest.raises(ValueError, match="appears twice"):
        _check([flow("s0g0", "s2g1", 1), flow("s0g0", "s2g1", 1)], lab)
    _check([flow("s0g0", "s2g1", 1), flow("s0g0", "s2g1", 2)], lab)


def test_sender_spec_names_the_plan_addresses_and_the_nic_rate(lab: SimpleNamespace) -> None:
    spec = sender_spec(lab, "s0g0", [flow("s0g0", "s2g1", 5, traffic_class="decode", dscp=46)],
                       1024, None)
    dst = lab.plan.node("s2g1")
    assert spec["src_ip"] == lab.plan.node("s0g0").ip and spec["rate_mbps"] == 40.0
    (f,) = spec["flows"]
    assert (f["dst_ip"], f["dst_mac"], f["sport"], f["dscp"]) == (dst.ip, dst.mac,
                                                                  sport_for_qp(5), 46)


def test_results_join_receivers_to_flows_by_source_ip_and_qp(lab: SimpleNamespace) -> None:
    flows = [flow("s0g0", "s2g1", 1), flow("s1g0", "s2g1", 2, traffic_class="decode",
                                                 dscp=46)]
    ip0, ip1 = lab.plan.node("s0g0").ip, lab.plan.node("s1g0").ip
    t0 = 1_000_000_000_000
    received = {"s2g1": {
        "flows": {
            f"{ip0}/1": {"src_ip": ip0, "sport": sport_for_qp(1) + 64, "qp": 1, "bytes": 2000,
                         "lost": 0, "reordered": 0, "last_ns": t0 + 5_000_000},
            f"{ip1}/2": {"src_ip": ip1, "sport": sport_for_qp(2), "qp": 2, "bytes": 1000,
                         "lost": 1, "reordered": 0, "last_ns": t0 + 9_000_000},
        },
        "messages": [
            {"flow": f"{ip0}/1", "seq": 0, "bytes": 1000, "complete": True,
             "latency_ns": 2_000_000},
            {"flow": f"{ip0}/1", "seq": 1, "bytes": 1000, "complete": True,
             "latency_ns": 4_000_000},
            {"flow": f"{ip1}/2", "seq": 0, "bytes": 1000, "complete": True,
             "latency_ns": 7_000_000},
            {"flow": f"{ip1}/2", "seq": 1, "bytes": 0, "complete": False,
             "latency_ns": None},
        ]}}
    r = _result(lab, flows, {}, received, t0, "planned")
    assert r.bytes_sent == 4000 and r.bytes_received == 3000 and r.lost_packets == 1
    assert r.job_completion_s == pytest.approx(0.009)
    assert [row["fct_s"] for row in r.flows] == [pytest.approx(0.005), pytest.approx(0.009)]
    assert r.latency_us["bulk"]["count"] == 2 and r.latency_us["bulk"]["max"] == 4000.0
    assert r.latency_us["decode"] == {"count": 1, "p50": 7000.0, "p99": 7000.0,
                                      "max": 7000.0, "mean": 7000.0}


def arrived(ip: str, qp: int, psns: list[int]) -> dict[str, Any]:
    """A receiver's report (both planes fold through ``traffic.rxstate``) of QP ``qp`` from
    ``ip`` when 1,000-byte packets with these PSNs arrived, in this order."""
    flows: dict[tuple[str, int], list[Any]] = {}
    for i, psn in enumerate(psns):
        f = flows.setdefault((ip, qp), new_flow(psn, qp, 100 + i))
        fold(f, OP_WRITE_MIDDLE, psn, 0, 1000, 0, 50, 100 + i)
    return receiver_report(flows, 4791, True, "idle", 1000, 0)


def test_packets_missing_at_a_qps_head_or_tail_are_counted_lost(lab: SimpleNamespace) -> None:
    """A receiver sees no gap when a QP's last packets (or its first) never come: the
    senders' packet counts make them lost, so received + lost = sent on every flow."""
    ips = {h: lab.plan.node(h).ip for h in ("s0g0", "s1g0", "s2g1", "s3g1")}
    flows = [flow("s0g0", "s2g1", 1, n=2, size=3000), flow("s1g0", "s2g1", 2, n=2, size=3000),
             flow("s0g0", "s3g1", 1, n=2, size=3000), flow("s1g0", "s3g1", 2, n=2, size=3000)]
    sent = {src: {"flows": [{"dst_ip": ips[dst], "qp": qp, "packets": 6}
                            for dst, qp in dq]}  # 3 packets of 1,024 bytes per message
            for src, dq in (("s0g0", [("s2g1", 1), ("s3g1", 1)]),
                            ("s1g0", [("s2g1", 2), ("s3g1", 2)]))}
    r2 = arrived(ips["s0g0"], 1, [1, 0, 2, 3])  # the tail (PSNs 4, 5) never came
    r2["flows"].update(arrived(ips["s1g0"], 2, [1, 2, 3, 4, 5])["flows"])  # nor PSN 0
    r3 = arrived(ips["s0g0"], 1, [0, 2, 3])  # PSN 1 a gap, then the tail
    r3["receiver_drops"] = 2  # (its ring was full twice); s1g0's QP 2 sent it nothing
    assert r2["lost"] == 0 and r3["lost"] == 1  # what the receivers can see
    r = _result(lab, flows, sent, {"s2g1": r2, "s3g1": r3}, 0, "spray")
    got = [(f["sent_packets"], f["received_packets"], f["lost_packets"]) for f in r.flows]
    assert got == [(6, 4, 2), (6, 5, 1), (6, 3, 3), (6, 0, 6)]
    assert [f["received"] for f in r.flows] == [4000, 5000, 3000, 0]
    assert r.lost_packets == 12 and r.receiver_drops == 2
    assert r.summary()["lost_packets"] == 12 and r.summary()["receiver_drops"] == 2


# --- the two traffic planes behind one interface --------------------------------------------
def test_each_plane_starts_its_own_programs_with_the_replay_s_files(
        lab: SimpleNamespace, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The command lines the replay runs in the hosts, per plane: the compiled receiver reads
    the host's NIC and the sender a prebuilt plan, started at an integer nanosecond; the
    Python agents read a JSON spec, started at a float second."""
    from controllers import policies
    from traffic.roce import Plane
    from traffic.shell.replay import AGENT, PLANES, NativePlane, PythonPlane

    assert set(PLANES) == set(Plane) and PLANES[Plane.NATIVE] is NativePlane
    monkeypatch.setenv("ASTRAL_PKTIO", "/opt/pktio")
    ecmp = policies.POLICIES.get("ecmp")
    spec = sender_spec(lab, "s0g0", [flow("s0g0", "s2g1", 5)], 1024, None)
    nat, py = NativePlane(ecmp, lab.plan, 1024), PythonPlane(ecmp, lab.plan, 1024)
    assert (nat.name, py.name) == (Plane.NATIVE, Plane.PYTHON)
    assert nat.recv_cmd("s2g1", "o", "r") == ["/opt/pktio", "recv", "--intf", "s2g1-eth0",
                                              "--out", "o", "--ready", "r"]
    assert py.recv_cmd("s2g1", "o", "r") == AGENT + ["recv", "--out", "o", "--ready", "r"]
    plan_path = nat.write_spec("s0g0", spec, str(tmp_path))
    assert plan_path == str(tmp_path / "plan-s0g0.bin") and (tmp_path / "plan-s0g0.bin").exists()
    spec_path = py.write_spec("s0g0", spec, str(tmp_path))
    assert json.loads((tmp_path / "spec-s0g0.json").read_text()) == spec
    assert nat.send_cmd("s0g0", plan_path, "s", 1.5) == [
        "/opt/pktio", "send", "--plan", plan_path, "--out", "s", "--intf", "s0g0-eth0",
        "--start-at", "1500000000"]
    assert py.send_cmd("s0g0", spec_path, "s", 1.5) == AGENT + [
        "send", "--spec", spec_path, "--out", "s", "--start-at", "1.500000"]
    assert (nat.lead_s(10), py.lead_s(10)) == (pytest.approx(0.5), pytest.approx(3.5))
    assert nat.dropping(["b", "a"], ["c"]) == ["a", "b"] and py.dropping(["a"], ["c"]) == []


def test_only_the_compiled_plane_moves_source_ports_and_answers_senders(
        lab: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    from controllers import policies
    from traffic.shell.replay import NativePlane, PythonPlane, _plane

    monkeypatch.setenv("ASTRAL_PKTIO", "/opt/pktio")
    plb = policies.POLICIES.get("plb")
    NativePlane.refuse(plb)
    with pytest.raises(ValueError, match="only the native plane"):
        PythonPlane.refuse(plb)
    PythonPlane.refuse(policies.POLICIES.get("ecmp"))
    nat = NativePlane(plb, lab.plan, 1024)
    assert nat.feedback and nat.recv_cmd("d", "o", "r")[-len(nat.feedback):] == nat.feedback
    assert nat.dropping(["d"], ["s"]) == ["d", "s"]  # feedback's senders drop too
    assert _plane("python") is PythonPlane
    with pytest.raises(ValueError, match=r"plane must be one of \('native', 'python'\)"):
        _plane("rust")


def test_senders_slow_to_start_are_given_the_agents_start_time() -> None:
    """A short replay across a slow cluster (senders started over SSH on an emulated VM) must not
    time out while its senders are still starting: the default bound is the agents' start time
    on top of four times the ideal duration, so it grows with the flows too."""
    from traffic.shell.replay import sender_timeout
    from traffic.shell.running import AGENT_START_S

    quick = 256 * 1024 * 8 / 40e6  # 256 KiB at 40 Mb/s
    assert sender_timeout(quick) >= AGENT_START_S > 60
    assert sender_timeout(100.0) >= 400 + AGENT_START_S


class _Posted(Exception):
    """Stops the replay once it has posted the job and waited, before any agent starts."""


def test_a_pinned_job_waits_for_the_lab_to_converge(lab: SimpleNamespace) -> None:
    """After posting the job's flows the replay waits as the lab does (its converge timeout,
    a dead controller noticed), not with a short wait of its own: in an emulated VM the
    switches took over a minute to apply a decode burst's entries."""
    from traffic.shell.replay import replay

    calls: list[str] = []

    class Client:
        def lb(self) -> dict[str, Any]:
            return {"mode": "planned", "pins": True}

        def post_traffic(self, flows: list[dict[str, Any]]) -> None:
            calls.append(f"post {len(flows)}")

        def wait_converged(self, timeout: float = 60) -> None:
            calls.append(f"client wait {timeout:g} s")

    def wait_converged(timeout: float | None = None) -> None:
        calls.append("lab wait" if timeout is None else f"lab wait {timeout:g} s")
        raise _Posted

    from controllers import policies

    running = SimpleNamespace(plan=lab.plan, client=Client, wait_converged=wait_converged,
                              lb_policy=policies.parse("planned", controller=True))
    with pytest.raises(_Posted):
        replay(running, [flow("s0g0", "s2g0", 1), flow("s2g0", "s0g0", 2)], progress=False)
    assert calls == ["post 2", "lab wait"]
