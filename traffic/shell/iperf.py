"""The same flow list as iperf3 bulk flows: line-rate throughput, and a cross-check of replay.

Each flow becomes one iperf3 test: a one-off server (``iperf3 -s -1``) on the
destination host on its own port (an iperf3 server runs one test at a time),
and a client on the source host that sends exactly the flow's bytes (``-n``)
from a fixed source port (``--cport``, so a planned controller's pin for that
5-tuple matches) over TCP, or UDP at a given rate. ``-J`` JSON from both ends is
parsed into per-flow bytes, duration and throughput. All clients start together.

iperf3 ends a ``-n`` test once the client has handed its last byte to the socket,
so ``bytes_received`` (TCP or UDP) can be short of ``bytes`` by what was in flight:
use the throughput (``mbps``) from this mode, and the replay engine for exact
bytes and completion times. For that throughput to be the flow's, a TCP client's
socket buffers are sized to the path (``tcp_window``), not left to Linux's autotuning:
with megabytes of buffer a 1 MB flow is all "sent" within a few round trips, and
iperf3 would report the rate of its slow start.

    res = run_iperf(lab, flows, proto="tcp")
    res.flows[0]["mbps"], res.job_completion_s
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from traffic.kernels import FlowSpec
from traffic.shell import programs
from traffic.shell.running import RunningLab

BASE_PORT = 5201
#: the transports iperf3 runs a flow over
Proto = Literal["tcp", "udp"]


@dataclass
class IperfResult:
    flows: list[dict[str, Any]]
    job_completion_s: float
    proto: Proto

    def summary(self) -> dict[str, Any]:
        rates = [f["mbps"] for f in self.flows if f["mbps"] is not None]
        return {"flows": len(self.flows), "proto": self.proto,
                "job_completion_s": round(self.job_completion_s, 4),
                "mean_mbps": round(sum(rates) / len(rates), 3) if rates else None,
                "bytes": sum(f["bytes_received"] or 0 for f in self.flows)}


#: the bounds of ``tcp_window``: the low one holds a slow lab lane through a loaded
#: machine's delays, the high one stays under Linux's default ``net.core.wmem_max``
#: (iperf3 refuses a buffer smaller than it asked for)
WINDOW_BYTES = (64 * 1024, 192 * 1024)


def tcp_window(mbps: float, rtt_s: float = 0.01) -> int:
    """The socket buffer (``iperf3 -w``) for a TCP flow from a ``mbps`` NIC: its bytes in
    flight over ``rtt_s``, within ``WINDOW_BYTES``."""
    low, high = WINDOW_BYTES
    return int(min(high, max(low, mbps * 1e6 / 8 * rtt_s)))


def iperf_flows(flows: Iterable[FlowSpec], proto: Proto = "tcp") -> list[dict[str, Any]]:
    """The controller's view of the iperf3 flows: 5-tuples with the iperf3 ports."""
    return [{"src": f.src, "dst": f.dst, "sport": f.sport, "dport": BASE_PORT + i,
             "proto": proto, "bytes": f.bytes} for i, f in enumerate(flows)]


def run_iperf(lab: RunningLab, flows: Iterable[FlowSpec], *, proto: Proto = "tcp",
              udp_mbps: float | None = None, post: bool | None = None,
              timeout: float = 300.0) -> IperfResult:
    """Run every flow as an iperf3 test at once; see the module docstring."""
    if proto not in get_args(Proto):
        raise ValueError(f"proto must be tcp or udp (got {proto!r})")
    flows = [f for f in flows if f.bytes > 0]
    if not flows:
        raise ValueError("no flows with bytes")
    if len(flows) > 10000:
        raise ValueError("iperf3 runs one process pair per flow; keep it under 10,000 flows")
    client = lab.client()
    if post if post is not None else client.lb()["pins"]:  # the mode gives flows their own paths
        client.post_traffic(iperf_flows(flows, proto))
        lab.wait_converged()
    servers, clients = [], []
    try:
        for i, f in enumerate(flows):
            port = BASE_PORT + i
            servers.append(lab.hosts[f.dst].popen(
                [programs.IPERF, "-s", "-1", "-p", str(port), "-J"]))
        time.sleep(0.5)  # iperf3 has no "listening" signal; it binds within milliseconds
        t0 = time.monotonic()
        nic = lab.plan.rdma_nic()
        for i, f in enumerate(flows):
            ip = lab.plan.node(f.dst).ip
            cmd = [programs.IPERF, "-c", ip, "-p", str(BASE_PORT + i), "-n", str(f.bytes),
                   "--cport", str(f.sport), "-J"]
            if proto == "udp":
                rate = udp_mbps or nic[f.src]
                cmd += ["-u", "-b", f"{rate}M", "-l", "1400"]
            else:
                cmd += ["-w", str(tcp_window(nic[f.src]))]
            clients.append(lab.hosts[f.src].popen(cmd))
        rows = []
        end_by = time.monotonic() + timeout
        for f, c, s in zip(flows, clients, servers, strict=True):
            out, err = c.communicate(timeout=max(1.0, end_by - time.monotonic()))
            sout, _ = s.communicate(timeout=30)
            rows.append(_parse(f, out, sout, err))
        job = time.monotonic() - t0
    finally:
        for p in servers + clients:
            if p.poll() is None:
                p.kill()
                p.wait()
    return IperfResult(flows=rows, job_completion_s=job, proto=proto)


def _parse(f: FlowSpec, client_out: bytes, server_out: bytes, err: bytes) -> dict[str, Any]:
    row: dict[str, Any] = {"src": f.src, "dst": f.dst, "sport": f.sport, "bytes": f.bytes,
                           "bytes_received": None, "seconds": None, "mbps": None, "error": None}
    try:
        data = json.loads(client_out or b"{}")
    except ValueError:
        data = {}
    if "error" in data or not data:
        row["error"] = data.get("error") or (err or b"").decode(errors="replace")[-300:]
        return row
    end = data.get("end", {})
    summ = end.get("sum_received") or end.get("sum") or {}
    # With -n the client stops once its last byte is in the socket; the receiver's own
    # count (server JSON) can be higher than what the client heard before the test ended.
    try:
        server_end = json.loads(server_out or b"{}").get("end", {})
    except ValueError:
        server_end = {}
    srv = server_end.get("sum_received") or server_end.get("sum") or {}
    row["bytes_received"] = max(int(summ.get("bytes", 0)), int(srv.get("bytes", 0)))
    row["seconds"] = float(summ.get("seconds", 0.0))
    row["mbps"] = summ.get("bits_per_second", 0.0) / 1e6
    if "lost_percent" in summ:
        row["lost_percent"] = summ["lost_percent"]
    return row
