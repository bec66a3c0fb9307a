"""An incast onto one host's NIC: MoE dispatch to its hot experts, as steady UDP streams."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from typing import Any

from testbed.faultkinds.hot_receiver import (
    HOT_PAYLOAD,
    HOT_PORT,
    HOT_SPORT_BASE,
    MAX_HOT_SENDERS,
    hot_streams,
)
from testbed.faultmarks import ENV_MARK
from testbed.shell.faults import FaultContext, FaultError, Handle
from traffic.shell import programs
from traffic.shell.running import pull_written, signal_program, wait_ready


def apply(ctx: FaultContext, handle: Handle) -> None:
    f = handle.fault
    streams = hot_streams(ctx.plan, f, HOT_SPORT_BASE + MAX_HOT_SENDERS * (handle.id % 64))
    lab = ctx.lab
    tag = f"{getattr(lab, 'run_id', 'lab')}:{handle.id}"
    env = dict(os.environ, **{ENV_MARK: tag})
    seconds = (f.duration + 5.0) if f.duration is not None else 24 * 3600.0  # bounded
    out = os.path.join(lab.workdir, f"hot-{handle.id}-{uuid.uuid4().hex[:6]}.json")
    py = programs.python_module(programs.PROBE_MODULE)
    procs: list[subprocess.Popen[bytes]] = []
    handle.info.update(procs=procs, out=out, streams=streams)
    try:
        lab.files.makedirs([f.target], os.path.dirname(out))  # where it runs
        recv = lab.hosts[f.target].popen(
            py + ["recv", "--port", str(HOT_PORT), "--out", out,
                  "--duration", f"{seconds:.1f}"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(recv)
        handle.info["recv"] = recv
        try:
            wait_ready(lab.files, {f.target: (recv, out + ".ready")}, timeout=15)
        except RuntimeError as exc:
            raise FaultError(f"hot-receiver: {exc}") from None
        ip = ctx.plan.node(f.target).ip
        for s in streams:
            procs.append(lab.hosts[s["src"]].popen(
                py + ["send", "--dst", str(ip), "--port", str(HOT_PORT),
                      "--sports", str(s["sport"]), "--pps", str(s["pps"]),
                      "--duration", f"{seconds:.1f}", "--size", str(HOT_PAYLOAD)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    except BaseException:
        _stop(handle, lab)
        raise
    handle.info["detail"] = {"sources": [s["src"] for s in streams],
                             "offered_mbps": round(sum(s["mbps"] for s in streams), 3)}


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    _stop(handle, ctx.lab)
    left = [p.pid for p in handle.info["procs"] if p.poll() is None]
    if left:
        raise FaultError(f"hot-receiver: processes still running: {left}")
    received: dict[str, int] = {}
    src_of = {str(s["sport"]): s["src"] for s in handle.info["streams"]}
    with contextlib.suppress(Exception):
        pull_written(ctx.lab.files, {handle.fault.target: [handle.info["out"]]}, timeout=5)
    with contextlib.suppress(OSError, ValueError), open(handle.info["out"]) as fh:
        for sport, flow in json.load(fh).get("flows", {}).items():
            if sport in src_of:
                received[src_of[sport]] = int(flow["received"])
    handle.info["received"] = received
    return {"received_packets": received}


def _stop(handle: Handle, lab: Any) -> None:
    """Senders killed first, then the receiver told to stop once packets in flight landed
    (SIGTERM: it writes what it received), killed if it does not."""
    procs = handle.info.get("procs", [])
    recv = handle.info.get("recv")
    for p in procs:
        if p is not recv and p.poll() is None:
            p.kill()
    for p in procs:
        if p is not recv:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
    if recv is not None and recv.poll() is None:
        time.sleep(0.2)  # packets in flight land
        signal_program(lab, handle.fault.target, recv, handle.info["out"])
        try:
            recv.wait(timeout=5)
        except subprocess.TimeoutExpired:
            recv.kill()
            recv.wait()
