"""Which Open vSwitch datapath a fabric's switches run on, and which one ``auto`` picks.

The kernel datapath forwards in the kernel; the userspace one (OVS ``netdev`` bridges)
forwards in ovs-vswitchd's own threads, and its veths are shaped differently (Mininet's
``TCULink``), so bring-up, shaping and the reports all ask which one runs. Pure: whether the
kernel module is loaded is a path under /sys.
"""

from __future__ import annotations

import os
from enum import StrEnum


class Datapath(StrEnum):
    KERNEL = "kernel"
    USER = "user"


#: what a caller may ask for: a datapath, or ``auto`` (the kernel one where it is loaded)
REQUESTS = ("auto", *(d.value for d in Datapath))


def kernel_ovs_available() -> bool:
    """True when the openvswitch kernel module is loaded (detect, don't assume)."""
    return os.path.isdir("/sys/module/openvswitch")


def choose_datapath(datapath: str = "auto") -> Datapath:
    """``kernel`` or ``user``; ``auto`` picks kernel only where its module is loaded."""
    if datapath == "auto":
        return Datapath.KERNEL if kernel_ovs_available() else Datapath.USER
    if datapath not in REQUESTS:
        raise ValueError(f"datapath must be auto, kernel or user (got {datapath!r})")
    return Datapath(datapath)
