"""The lab's fabrics as Mininet ``Topo`` classes, usable from plain ``mn``.

    sudo mn --custom testbed/shell/mntopo.py --topo astral3,gpus=16,gpus_per_server=4 \\
            --controller remote,port=6653
    astral-lab topo astral3 --gpus 16 --gpus-per-server 4 -o plan.json   # same parameters
    astral-lab controller --plan plan.json

Everything Mininet needs is carried by the topo itself: switch class and
datapath (kernel OVS where the module is loaded, userspace otherwise), the
OpenFlow versions the controller needs (1.3 and 1.5), explicit DPIDs and port
numbers from the wiring plan, and links that shape to the plan's emulated rate
with checksum offload off when the datapath is userspace (otherwise ping works
and every TCP flow stalls), with an explicit HTB quantum (see ``HTB_QUANTUM``).
So ``mn`` needs no ``--switch``/``--link`` flags.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from typing import Any

if __name__ != "testbed.shell.mntopo":
    # Loaded by `mn --custom` (system Python, exec'd without __file__): make the repo's
    # packages importable from the file's own location.
    _here = inspect.currentframe().f_code.co_filename  # type: ignore[union-attr]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(_here)))))

from mininet.link import TCIntf, TCLink, TCULink  # noqa: E402
from mininet.node import OVSSwitch  # noqa: E402
from mininet.topo import Topo  # noqa: E402

from testbed.datapath import Datapath, choose_datapath  # noqa: E402
from testbed.shaping import HTB_QUANTUM  # noqa: E402
from testbed.topologies import BUILDERS, MN_WORDS, build_for_gpus  # noqa: E402
from vocab.plan import WiringPlan  # noqa: E402

OF_PROTOCOLS = "OpenFlow13,OpenFlow15"


class QuantumTCIntf(TCIntf):
    """Mininet's ``TCIntf`` whose HTB class carries ``quantum HTB_QUANTUM`` (as the Lab's)."""

    def bwCmds(self, *args: Any, **kwargs: Any) -> tuple[list[str], str]:  # noqa: N802
        cmds, parent = super().bwCmds(*args, **kwargs)
        return [f"{c} quantum {HTB_QUANTUM}" if " htb rate " in c else c for c in cmds], parent


class SwitchPortIntf:
    """Just enough of a Mininet ``Intf`` for a switch port the Lab made itself (the
    Mininet CLI's ``links`` and ``net`` print it), in the root namespace or ``netns``."""

    def __init__(self, name: str, node: str, port: int, netns: str | None = None) -> None:
        self.name, self.port, self.netns = name, port, netns
        self.node = _NamedNode(node)

    def __str__(self) -> str:
        return self.name

    def status(self) -> str:
        if self.netns:
            where = ["ip", "-n", self.netns, "link", "show", "dev", self.name]
            found = subprocess.run(where, capture_output=True).returncode == 0
        else:
            found = os.path.exists(f"/sys/class/net/{self.name}")
        return "(OK OK)" if found else "(MISSING)"


class _NamedNode:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


class PlanTopo(Topo):
    """A Mininet topology that is exactly a wiring plan."""

    def build(self, plan: WiringPlan, datapath: str = "auto", shape: bool = True,
              **_: Any) -> None:  # type: ignore[override]
        self.plan = plan
        dp = choose_datapath(datapath)
        link_cls = TCULink if dp == Datapath.USER else TCLink
        for node in plan.nodes:
            if node.kind == "host":
                self.addHost(node.name, ip=f"{node.ip}/8", mac=node.mac)
            else:
                self.addSwitch(node.name, cls=OVSSwitch, dpid=node.dpid, datapath=dp,
                               protocols=OF_PROTOCOLS, failMode="secure")
        for link in plan.links:
            opts: dict[str, Any] = {"port1": link.a_port, "port2": link.b_port}
            if shape:
                opts.update(cls=link_cls, bw=link.mbps, cls1=QuantumTCIntf, cls2=QuantumTCIntf)
            elif dp == Datapath.USER:
                opts.update(cls=TCULink)
            self.addLink(link.a, link.b, **opts)


def _topo_factory(name: str) -> Any:
    def make(gpus: int | None = None, gpus_per_server: int | None = None,
             servers: int | None = None, datapath: str = "auto", **params: Any) -> PlanTopo:
        plan = build_for_gpus(name, gpus, gpus_per_server, servers, words=MN_WORDS, **params)
        return PlanTopo(plan, datapath=datapath)

    make.__doc__ = (f"{name} fabric; parameters as for `astral-lab topo {name}`: gpus= in "
                    "all, gpus_per_server=, servers=, and the other fabric fields")
    return make


#: ``mn --custom testbed/shell/mntopo.py --topo <name>,key=value,...``
topos = {name: _topo_factory(name) for name in BUILDERS}
