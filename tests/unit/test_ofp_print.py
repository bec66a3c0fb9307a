"""Open vSwitch's own parser reads every kind of message the controller sends.

``ovs-ofctl ofp-print HEX`` decodes an OpenFlow message exactly as ovs-vswitchd
would (no switch, no root needed). This catches what a fake table cannot: a
property OVS rejects (it did: the selection-method fields first went out as bare
OXM headers, which OVS refuses with OFPBMC_BAD_MASK).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from controllers.flowtable import FF_GROUP_BASE
from controllers.routing import compute_routes
from controllers.shell.ofmsgs import protocol, switch_program
from testbed.topologies import build


def ofp_print(msg: object) -> str:
    msg.serialize()  # type: ignore[attr-defined]
    out = subprocess.run(["ovs-ofctl", "ofp-print", bytes(msg.buf).hex()],  # type: ignore[attr-defined]
                         capture_output=True, text=True, check=True)
    return out.stdout + out.stderr


@pytest.fixture(scope="module", autouse=True)
def _needs_ovs_ofctl() -> None:
    if shutil.which("ovs-ofctl") is None:
        pytest.fail("ovs-ofctl not found: install openvswitch-common (`sudo make setup`)",
                    pytrace=False)


@pytest.mark.parametrize("version,name", [(4, "OF1.3"), (6, "OF1.5")])
@pytest.mark.parametrize("method", ["dp_hash", "hash"])
def test_ovs_decodes_every_message_kind(version: int, name: str, method: str) -> None:
    routes = compute_routes(build("astral3", servers=4, gpus=2))["lf0r0"]
    msgs = switch_program(protocol(version), routes, method=method)
    groups = [m for m in msgs if type(m).__name__ == "OFPGroupMod"]
    flows = [m for m in msgs if type(m).__name__ == "OFPFlowMod"]
    select = [g for g in groups[1:] if g.group_id < FF_GROUP_BASE]
    failover = [g for g in groups[1:] if g.group_id >= FF_GROUP_BASE]
    # one of each kind is enough for the parser; all select groups for the property
    for msg in [flows[0], groups[0], *select, failover[0], flows[1], flows[-1]]:
        text = ofp_print(msg)
        assert "decode error" not in text and "***" not in text, text
        assert name in text, text
    for g in select:
        text = ofp_print(g)
        assert "type=select" in text
        if version == 6:
            assert f"selection_method={method}" in text, text
        else:
            assert "selection_method" not in text  # OpenFlow 1.3 cannot carry it
    assert "type=ff" in ofp_print(failover[0])
    assert "arp_tpa=" in " ".join(ofp_print(f) for f in flows[:4])
