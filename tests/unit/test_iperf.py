"""The iperf3 runner's command lines and parsing, with stand-in hosts (no fabric)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.shell.iperf import WINDOW_BYTES, run_iperf, tcp_window


class Proc:
    """A finished iperf3: its ``-J`` output."""

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = json.dumps(out).encode()

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        return self.out, b""

    def poll(self) -> int:
        return 0


def fake_lab(cmds: list[list[str]]) -> SimpleNamespace:
    plan = build("astral3", servers=2)
    end = {"end": {"sum_received": {"bytes": 1_000_000, "seconds": 0.4,
                                    "bits_per_second": 2e7}}}

    def host(_name: str) -> SimpleNamespace:
        def popen(cmd: list[str]) -> Proc:
            cmds.append(cmd)
            return Proc(end)
        return SimpleNamespace(popen=popen)

    client = SimpleNamespace(lb=lambda: {"pins": False})
    return SimpleNamespace(plan=plan, client=lambda: client,
                           hosts={h.name: host(h.name) for h in plan.hosts})


def test_tcp_clients_get_a_window_sized_to_their_nic_and_udp_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A TCP client's buffer is bounded (or a -n test ends in its slow start); UDP is paced."""
    monkeypatch.setattr("time.sleep", lambda _s: None)
    cmds: list[list[str]] = []
    lab = fake_lab(cmds)
    flows = [FlowSpec.make("s0g0", "s1g1", 1_000_000, qp=1)]
    res = run_iperf(lab, flows, proto="tcp")
    client = [c for c in cmds if "-c" in c][0]
    window = int(client[client.index("-w") + 1])
    assert window == tcp_window(lab.plan.rdma_nic()["s0g0"])
    assert WINDOW_BYTES[0] <= window <= WINDOW_BYTES[1]
    assert res.flows[0]["mbps"] == 20 and res.flows[0]["error"] is None
    cmds.clear()
    run_iperf(lab, flows, proto="udp", udp_mbps=18)
    client = [c for c in cmds if "-c" in c][0]
    assert "-w" not in client and client[client.index("-b") + 1] == "18M"


def test_the_window_covers_the_nic_s_bytes_in_flight_within_its_bounds() -> None:
    low, high = WINDOW_BYTES
    assert tcp_window(40) == low  # 50 kB in 10 ms: the floor
    assert tcp_window(100, rtt_s=0.01) == 125_000
    assert tcp_window(10_000) == high
