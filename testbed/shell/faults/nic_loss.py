"""A lossy NIC or optic: IPv4 frames (not ARP) dropped at random on one host's NIC."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

from testbed.faultkinds._loss import iptables_loss_commands, nft_loss_commands
from testbed.faultmarks import IPT_IN, IPT_OUT, NFT_FAMILY, NFT_TABLE, SINK
from testbed.faultspec import Fault
from testbed.shell.faults import FaultContext, FaultError, Handle


def check(ctx: FaultContext, fault: Fault) -> None:
    ctx.loss_backend()


def apply(ctx: FaultContext, handle: Handle) -> None:
    f = handle.fault
    host = f.target
    dev = next(ln.a_intf for ln in ctx.plan.links if ln.a == host)
    backend = ctx.loss_backend()
    handle.info.update(host=host, backend=backend)
    knobs = f.settings
    if backend == "nft":
        setup, script, undo = nft_loss_commands(dev, knobs.probability, knobs.direction)
    else:
        setup, undo = iptables_loss_commands(dev, knobs.probability, knobs.direction)
        script = None
    handle.info["undo"] = undo
    try:
        for argv in setup:
            ctx.sh(argv, host)
        if script is not None:
            ctx.sh(["nft", "-f", "-"], host, stdin=script)
    except BaseException:
        for argv in undo:
            ctx.sh(argv, host, check=False)
        raise
    handle.info["detail"] = {"probability": knobs.probability, "direction": knobs.direction,
                             "backend": backend}


def revert(ctx: FaultContext, handle: Handle) -> dict[str, Any]:
    host, backend = handle.info["host"], handle.info["backend"]
    dropped = _loss_counters(ctx, host, backend)
    for argv in handle.info["undo"]:
        ctx.sh(argv, host, check=False)
    left = leftovers(ctx.sh, host)
    if left:
        raise FaultError(f"nic-loss on {host}: still present after undo: {left}")
    return {"dropped": dropped}


def _loss_counters(ctx: FaultContext, host: str, backend: str) -> dict[str, int]:
    """Frames the fault's rules dropped, per direction."""
    if backend == "nft":
        return ctx.nft_counters(NFT_TABLE, host)
    out: dict[str, int] = {}
    for chain, name in ((IPT_IN, "ingress"), (IPT_OUT, "egress")):
        proc = ctx.sh(["iptables", "-w", "-L", chain, "-v", "-n", "-x"], host, check=False)
        rows = [ln.split() for ln in proc.stdout.splitlines()[2:] if ln.strip()]
        if rows and rows[0][0].isdigit():
            out[name] = int(rows[0][0])
    return out


def leftovers(sh: Callable[..., subprocess.CompletedProcess[str]], host: str
                       ) -> list[str]:
    """What of a nic-loss is present in ``host``'s namespace (``sh`` runs a command there)."""
    left = []
    if NFT_TABLE in sh(["nft", "list", "tables"], host, check=False).stdout:
        left.append(f"nft table {NFT_FAMILY} {NFT_TABLE}")
    if sh(["ip", "link", "show", "dev", SINK], host, check=False).returncode == 0:
        left.append(f"interface {SINK}")
    chains = sh(["iptables", "-w", "-S"], host, check=False).stdout
    left += [f"iptables chain {c}" for c in (IPT_IN, IPT_OUT) if f"-N {c}" in chains]
    return left
