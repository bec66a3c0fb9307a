"""A lossy NIC or optic: IPv4 frames (not ARP) dropped at random on one host's NIC."""

from __future__ import annotations

from typing import Any

from testbed.faultspec import Fault, iptables_loss_commands, nft_loss_commands
from testbed.shell.cleanup import nic_loss_leftovers
from testbed.shell.faults._base import FaultError, Handle


def check(inj: Any, fault: Fault) -> None:
    inj._loss_backend()


def apply(inj: Any, handle: Handle) -> None:
    f = handle.fault
    host = f.target
    dev = next(ln.a_intf for ln in inj.plan.links if ln.a == host)
    backend = inj._loss_backend()
    handle.info.update(host=host, backend=backend)
    if backend == "nft":
        setup, script, undo = nft_loss_commands(dev, f.probability, f.direction)
    else:
        setup, undo = iptables_loss_commands(dev, f.probability, f.direction)
        script = None
    handle.info["undo"] = undo
    try:
        for argv in setup:
            inj._sh(argv, host)
        if script is not None:
            inj._sh(["nft", "-f", "-"], host, stdin=script)
    except BaseException:
        for argv in undo:
            inj._sh(argv, host, check=False)
        raise
    handle.info["detail"] = {"probability": f.probability, "direction": f.direction,
                             "backend": backend}


def revert(inj: Any, handle: Handle) -> dict[str, Any]:
    host, backend = handle.info["host"], handle.info["backend"]
    dropped = inj._loss_counters(host, backend)
    for argv in handle.info["undo"]:
        inj._sh(argv, host, check=False)
    left = nic_loss_leftovers(inj._sh, host)
    if left:
        raise FaultError(f"nic-loss on {host}: still present after undo: {left}")
    return {"dropped": dropped}
