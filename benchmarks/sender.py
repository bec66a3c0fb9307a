"""Sender benchmark: packets/s of the RoCEv2 replay sender beside Python's ceiling and Scapy.

Two network namespaces joined by a veth pair (no Mininet, no OVS: nothing but the
sender's own cost is measured). Each repeat measures, side by side:

``raw``
    the ceiling for Python here: a tight loop sending one prebuilt 1,098-byte RoCEv2
    frame (a WRITE FIRST at PMTU 1024, the agent's largest; RoCE frames are 2 mod 4 bytes
    long, so "1,100 bytes" exactly is not one) on a bound ``AF_PACKET`` socket for
    ``--seconds``;
``agent``
    ``python -m astral_lab.agent_cli send`` with one long unpaced flow (rate 0) of 1 MiB RDMA
    WRITEs at PMTU 1024 (1,098/1,082-byte frames): PSN, replay header and ICRC patched
    per packet; the figure is the agent's own ``pps`` (first packet to last);
``scapy``
    ``scapy.sendp`` of the same frames built as Scapy layers (``--scapy-packets``, far
    fewer: it is slow); the time includes Scapy's serialisation (with the ICRC), as a
    Scapy user pays it: that is the per-packet Scapy way the templates replace, and the
    goal's figure. ``scapy_prebuilt_pps`` also reports ``sendp`` of the frames already
    serialised (``Raw`` bytes): Scapy's send loop alone, a floor for any Scapy sender.

The raw loop runs just before and just after the agent in each repeat and its sample is
the mean of the two, so drift from other work on a shared machine falls on both.

In ``raw`` and ``agent`` a receiver agent is bound on the peer, so both pay the same
kernel receive path (veth delivers in the sender's context). For ``agent`` the
receiver's report answers whether it kept up at that rate: packets received ==
sent, no PSN loss, and zero kernel drops (``SO_RXQ_OVFL``, ``/proc/net/udp`` drops,
``RcvbufErrors``). Reported: medians over ``--repeats``, ratios of the medians agent/raw
(goal >= 0.5) and agent/scapy (goal >= 25), and the median of the per-repeat agent/raw
ratios (paired with the raw runs around each agent run: steadier on a busy machine).

    python -m benchmarks.sender [--repeats 3] [--seconds 3] [--scapy-packets 3000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks.common import summarize, write
from traffic.roce import DEFAULT_PMTU, MAX_OVERHEAD, Endpoints, FrameBuilder, segment
from traffic.shell.agent import open_raw
from vocab.flows import ROCE_PORT

GOAL_RAW = 0.5
GOAL_SCAPY = 25.0
FRAME_BYTES = DEFAULT_PMTU + MAX_OVERHEAD  # one RDMA WRITE ONLY frame at the default pmtu
MESSAGE_BYTES = 1 << 20
PY = sys.executable


@dataclass(frozen=True)
class Side:
    """One end of a veth pair: namespace, interface, IP and MAC."""

    ns: str
    intf: str
    ip: str
    mac: str

    def cmd(self, *args: str) -> list[str]:
        """A command line run inside this namespace."""
        return ["ip", "netns", "exec", self.ns, *args]


def _ip(*args: str) -> str:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


@contextlib.contextmanager
def netns_pair(tag: str = "b", mtu: int = 1500) -> Iterator[tuple[Side, Side]]:
    """Two fresh namespaces joined by a veth pair, removed on exit even after an error.

    Names carry the PID so parallel runs do not collide; deleting a namespace deletes
    its end of the veth, and with it the pair.
    """
    base = f"alx{tag}{os.getpid() % 100000}"
    sides = []
    made: list[str] = []
    try:
        for end, octet in (("a", 1), ("b", 2)):
            ns = f"{base}{end}"
            _ip("netns", "add", ns)
            made.append(ns)
            sides.append((ns, f"{base}{end}"[-15:], f"10.253.0.{octet}"))
        (na, ia, _), (nb, ib, _) = sides
        _ip("link", "add", ia, "netns", na, "type", "veth", "peer", "name", ib, "netns", nb)
        out = []
        for ns, intf, ip in sides:
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", intf)
            _ip("-n", ns, "link", "set", intf, "mtu", str(mtu), "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            mac = json.loads(_ip("-j", "-n", ns, "link", "show", intf))[0]["address"]
            out.append(Side(ns, intf, ip, mac))
        yield out[0], out[1]
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def start_receiver(side: Side, workdir: str, name: str, *extra: str) -> tuple[Any, str]:
    """Start a receiver agent in ``side``'s namespace; return once its socket is bound."""
    out = os.path.join(workdir, f"{name}.json")
    ready = os.path.join(workdir, f"{name}.ready")
    proc = subprocess.Popen(side.cmd(PY, "-m", "astral_lab.agent_cli", "recv", "--out", out,
                                     "--ready", ready, *extra),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"receiver did not start: {proc.communicate()[1][-1000:]}")
        time.sleep(0.02)
    return proc, out


def stop_receiver(proc: Any, out: str, timeout: float = 60) -> dict[str, Any]:
    """SIGTERM the receiver (it drains, then writes its report) and read the report."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"receiver failed: {err[-1000:]}")
    with open(out) as f:
        return json.load(f)


def spec_dict(a: Side, b: Side, flows: list[dict[str, Any]], rate_mbps: float = 0.0,
              pmtu: int = DEFAULT_PMTU) -> dict[str, Any]:
    """A sender spec from ``a`` to ``b`` (flows need only qp/messages/message_bytes)."""
    full = [{"dst_ip": b.ip, "dst_mac": b.mac, "dscp": 26, "start": 0.0,
             "traffic_class": "bulk", **f} for f in flows]
    return {"intf": a.intf, "src_mac": a.mac, "src_ip": a.ip, "rate_mbps": rate_mbps,
            "pmtu": pmtu, "flows": full}


# --- children: run inside the sender namespace --------------------------------------------------
def _roce_frame(args: argparse.Namespace) -> bytes:
    ep = Endpoints(args.src_mac, args.dst_mac, args.src_ip, args.dst_ip, qp=1, dscp=26)
    builder = FrameBuilder(ep, pmtu=DEFAULT_PMTU)
    frame = bytes(next(builder.frames(FRAME_BYTES - MAX_OVERHEAD)))  # one ONLY of 1,024
    assert len(frame) == FRAME_BYTES, len(frame)
    return frame


def child_raw(args: argparse.Namespace) -> dict[str, Any]:
    """The ceiling: one prebuilt frame, sent in a tight loop (clock read every 256 sends)."""
    frame = _roce_frame(args)
    sock = open_raw(args.intf)
    send = sock.send
    mono = time.monotonic
    n = errors = 0
    t0 = mono()
    end = t0 + args.seconds
    while True:
        for _ in range(256):
            try:
                send(frame)
            except OSError:
                errors += 1
        n += 256
        if mono() >= end:
            break
    elapsed = mono() - t0
    return {"packets": n - errors, "seconds": elapsed, "pps": (n - errors) / elapsed,
            "errors": errors}


def child_scapy(args: argparse.Namespace) -> dict[str, Any]:
    """``sendp`` of Scapy-built RoCEv2 frames (the same headers and sizes as the agent's)."""
    # lazy: Scapy takes ~0.4 s to load; only the Scapy sender child uses it
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    from scapy.sendrecv import sendp

    pkts = []
    psn = 0
    while len(pkts) < args.packets:
        for op, n in segment(MESSAGE_BYTES):
            pkts.append(Ether(src=args.src_mac, dst=args.dst_mac)
                        / IP(src=args.src_ip, dst=args.dst_ip, tos=26 << 2 | 2, flags="DF")
                        / UDP(sport=49153, dport=ROCE_PORT, chksum=0)
                        / BTH(opcode=op, dqpn=1, psn=psn, ackreq=int(op in (8, 10)))
                        / Raw(bytes(n + (16 if op in (6, 10) else 0))))
            psn += 1
            if len(pkts) >= args.packets:
                break
    t0 = time.monotonic()
    sendp(pkts, iface=args.intf, verbose=False)
    elapsed = time.monotonic() - t0
    frames = [Raw(bytes(p)) for p in pkts]  # serialised beforehand: Scapy's send loop alone
    t1 = time.monotonic()
    sendp(frames, iface=args.intf, verbose=False)
    prebuilt = time.monotonic() - t1
    return {"packets": len(pkts), "seconds": elapsed, "pps": len(pkts) / elapsed,
            "prebuilt_seconds": prebuilt, "prebuilt_pps": len(pkts) / prebuilt}


def _child(a: Side, b: Side, kind: str, **kw: Any) -> dict[str, Any]:
    argv = [PY, "-m", "benchmarks.sender", "--child", kind, "--intf", a.intf,
            "--src-mac", a.mac, "--dst-mac", b.mac, "--src-ip", a.ip, "--dst-ip", b.ip]
    for k, v in kw.items():
        argv += [f"--{k}", str(v)]
    out = subprocess.run(a.cmd(*argv), capture_output=True, text=True, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-2000:]}")
    return json.loads(lines[-1])


# --- one repeat -----------------------------------------------------------------------------------
def measure_raw(a: Side, b: Side, workdir: str, seconds: float) -> dict[str, Any]:
    proc, out = start_receiver(b, workdir, "raw-recv")
    try:
        res = _child(a, b, "raw", seconds=seconds)
    finally:
        recv = stop_receiver(proc, out)
    res["received"] = recv["packets"] + sum(f["duplicates"] for f in recv["flows"].values())
    return res


def measure_agent(a: Side, b: Side, workdir: str, packets: int) -> dict[str, Any]:
    """The agent sending ``packets`` (rounded up to whole 1 MiB messages) as fast as it can."""
    messages = max(1, -(-packets // (MESSAGE_BYTES // 1024)))
    spec = os.path.join(workdir, "spec.json")
    sent_path = os.path.join(workdir, "sent.json")
    with open(spec, "w") as f:
        json.dump(spec_dict(a, b, [{"qp": 1, "messages": messages,
                                    "message_bytes": MESSAGE_BYTES}]), f)
    proc, out = start_receiver(b, workdir, "agent-recv", "--expect-bytes",
                               str(messages * MESSAGE_BYTES), "--idle-timeout", "3",
                               "--timeout", "600")
    try:
        run = subprocess.run(a.cmd(PY, "-m", "astral_lab.agent_cli", "send", "--spec", spec,
                                   "--out", sent_path, "--rate-mbps", "0"),
                             capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            raise RuntimeError(f"sender failed: {run.stderr[-2000:]}")
        proc.wait(timeout=30)  # it stops itself at --expect-bytes or after 3 s idle
    finally:
        recv = stop_receiver(proc, out)
    with open(sent_path) as f:
        sent = json.load(f)
    drops = recv["kernel_drops"]
    kept_up = (recv["packets"] == sent["packets"] and recv["bytes"] == sent["bytes"]
               and recv["lost"] == 0 and not any(drops.values()))
    lag = (recv["stopped_ns"] - recv["last_ns"]) / 1e9 if recv["last_ns"] else None
    return {"pps": sent["pps"], "packets": sent["packets"], "seconds": sent["duration_s"],
            "wire_mbps": sent["wire_mbps"], "send_retries": sent["send_retries"],
            "received": recv["packets"], "lost": recv["lost"], "kernel_drops": drops,
            "receiver_done_after_last_packet_s": lag, "receiver_kept_up": kept_up}


def measure(repeats: int, seconds: float, scapy_packets: int,
            log: Any = print) -> dict[str, Any]:
    raws, agents, scapys = [], [], []
    load0 = list(os.getloadavg())  # other work on the machine shows up here and in the spread
    with tempfile.TemporaryDirectory(prefix="astral-sender-") as workdir, \
            netns_pair("s") as (a, b):
        for r in range(repeats):
            before = measure_raw(a, b, workdir, seconds)
            agent = measure_agent(a, b, workdir, int(before["pps"] * seconds))
            after = measure_raw(a, b, workdir, seconds)
            # the ceiling around the agent's run: drift on a shared machine hits both sides
            raw = {"pps": (before["pps"] + after["pps"]) / 2, "before": before, "after": after}
            scapy = _child(a, b, "scapy", packets=scapy_packets)
            raws.append(raw)
            agents.append(agent)
            scapys.append(scapy)
            log(f"  repeat {r + 1}/{repeats}: raw {before['pps']:.0f}/{after['pps']:.0f} pps "
                f"(before/after), agent {agent['pps']:.0f} pps (receiver kept up: "
                f"{agent['receiver_kept_up']}, drops {agent['kernel_drops']}), scapy "
                f"{scapy['pps']:.0f} pps ({scapy['prebuilt_pps']:.0f} pps pre-serialised)")
    a_pps = summarize([s["pps"] for s in raws])
    b_pps = summarize([s["pps"] for s in agents])
    c_pps = summarize([s["pps"] for s in scapys])
    c_pre = summarize([s["prebuilt_pps"] for s in scapys])
    ratio_raw = round(b_pps["median"] / a_pps["median"], 3)
    ratio_scapy = round(b_pps["median"] / c_pps["median"], 1)
    return {
        "goal": f"agent pps >= {GOAL_RAW} x raw AF_PACKET loop and >= {GOAL_SCAPY} x Scapy "
                "sendp, receiver without kernel drops at that rate",
        "setup": {"link": "veth pair between two network namespaces", "seconds": seconds,
                  "raw_frame_bytes": FRAME_BYTES, "agent_message_bytes": MESSAGE_BYTES,
                  "pmtu": 1024, "scapy_packets": scapy_packets},
        "raw_pps": a_pps, "agent_pps": b_pps, "scapy_pps": c_pps,
        "ratio_agent_vs_raw": ratio_raw, "ratio_agent_vs_scapy": ratio_scapy,
        "ratio_agent_vs_raw_paired": summarize([b["pps"] / a["pps"]
                                                for a, b in zip(raws, agents, strict=True)]),
        "scapy_prebuilt_pps": c_pre,
        "ratio_agent_vs_scapy_prebuilt": round(b_pps["median"] / c_pre["median"], 1),
        "load_average": {"start": load0, "end": list(os.getloadavg())},
        "receiver_kept_up": all(s["receiver_kept_up"] for s in agents),
        "receiver_kernel_drops": [s["kernel_drops"] for s in agents],
        "meets_goal": (ratio_raw >= GOAL_RAW and ratio_scapy >= GOAL_SCAPY
                       and all(s["receiver_kept_up"] for s in agents)),
        "samples": {"raw": raws, "agent": agents, "scapy": scapys},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sender", description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0, help="raw loop length; the agent "
                   "sends about as many packets as the raw loop did in that time")
    p.add_argument("--scapy-packets", type=int, default=3000)
    p.add_argument("--child", choices=["raw", "scapy"], help=argparse.SUPPRESS)
    for opt in ("--intf", "--src-mac", "--dst-mac", "--src-ip", "--dst-ip"):
        p.add_argument(opt, help=argparse.SUPPRESS)
    p.add_argument("--packets", type=int, default=3000, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        fn = child_raw if args.child == "raw" else child_scapy
        print(json.dumps(fn(args)), flush=True)
        return 0
    if os.geteuid() != 0:
        print("benchmarks.sender makes network namespaces: run as root", file=sys.stderr)
        return 2
    result = measure(args.repeats, args.seconds, args.scapy_packets)
    path = write("sender", {"repeats": args.repeats, **result})
    print(f"sender: agent {result['agent_pps']['median']:.0f} pps = "
          f"{result['ratio_agent_vs_raw']:.2f} x raw loop ({result['raw_pps']['median']:.0f} pps;"
          f" goal >= {GOAL_RAW}) = {result['ratio_agent_vs_scapy']:.1f} x Scapy sendp "
          f"({result['scapy_pps']['median']:.0f} pps; goal >= {GOAL_SCAPY}); receiver kept up: "
          f"{result['receiver_kept_up']}; paired agent/raw median "
          f"{result['ratio_agent_vs_raw_paired']['median']:.2f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
