"""The wiring plan: the JSON document every part of the lab reads.

These tests cover its identifiers (DPID, MAC, interface names), its JSON round trip,
the checks in ``validate()`` and the atomic writer.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest

from testbed.topologies import TOPOLOGIES, build
from vocab.plan import (
    MAX_INTF_NAME,
    SCHEMA,
    VERSION,
    Link,
    Node,
    WiringPlan,
    dpid_for,
    intf_name,
    mac_for,
    write_json_atomic,
)


def tiny_plan(switch: str = "sw1") -> WiringPlan:
    """Two GPU NICs on one switch: the smallest plan that validates."""
    nodes = [
        Node("h0", "host", "gpu", 0, {"server": 0, "gpu": 0}, ip="10.0.0.1",
             mac=mac_for("10.0.0.1")),
        Node("h1", "host", "gpu", 0, {"server": 1, "gpu": 0}, ip="10.0.0.2",
             mac=mac_for("10.0.0.2")),
        Node(switch, "switch", "leaf", 1, {"block": 0, "rail": 0}, dpid=dpid_for("leaf", 0, 0)),
    ]
    links = [
        Link("h0", 0, switch, 1, "nic", 400.0, 40.0),
        Link("h1", 0, switch, 2, "nic", 400.0, 40.0),
    ]
    return WiringPlan("tiny", {}, 1e-4, nodes, links)


# --- identifiers --------------------------------------------------------------------------
def test_dpid_spells_tier_and_location() -> None:
    assert dpid_for("leaf", 1, 3) == "0001000001000003"
    assert dpid_for("spine", 0, 7) == "0002000000000007"
    assert dpid_for("core", 0, 0x00FFFFFF) == "0003000000ffffff"
    assert dpid_for("nvswitch", 2, 5) == "0004000002000005"


@pytest.mark.parametrize("a, b", [(-1, 0), (0, -1), (1 << 24, 0), (0, 1 << 24)])
def test_dpid_rejects_locations_that_do_not_fit(a: int, b: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        dpid_for("leaf", a, b)


def test_mac_spells_the_ip() -> None:
    assert mac_for("10.1.3.5") == "02:00:0a:01:03:05"
    assert mac_for("10.255.0.254") == "02:00:0a:ff:00:fe"


def test_interface_names_follow_mininet() -> None:
    link = Link("s5g3", 0, "lf1r3", 7, "nic", 400.0, 40.0)
    assert (link.a_intf, link.b_intf) == ("s5g3-eth0", "lf1r3-eth7")
    assert link.name == "s5g3:0-lf1r3:7"
    assert intf_name("spine12", 100) == "spine12-eth100"


# --- JSON ---------------------------------------------------------------------------------
@pytest.mark.parametrize("topology", TOPOLOGIES.names())
def test_json_round_trip(tmp_path: Any, topology: str) -> None:
    plan = build(topology)
    path = tmp_path / "plan.json"
    plan.save(path)
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert on_disk["schema"] == SCHEMA and on_disk["version"] == VERSION
    loaded = WiringPlan.load(path)
    assert loaded.to_dict() == plan.to_dict()
    assert loaded.ports() == plan.ports()  # Link objects compare equal field by field


def _saved(tmp_path: Any, data: dict[str, Any]) -> Any:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("key, value, word", [
    ("schema", "something-else", "schema"),
    ("schema", None, "schema"),
    ("version", VERSION + 1, "version"),
    ("version", None, "version"),
])
def test_load_rejects_wrong_schema_or_version(tmp_path: Any, key: str, value: Any,
                                              word: str) -> None:
    data = tiny_plan().to_dict()
    if value is None:
        del data[key]
    else:
        data[key] = value
    with pytest.raises(ValueError) as exc:
        WiringPlan.load(_saved(tmp_path, data))
    assert word in str(exc.value)


def test_load_validates_the_plan(tmp_path: Any) -> None:
    data = tiny_plan().to_dict()
    data["links"][1].update(a="h0", a_port=1)  # h0 now has two NIC links and h1 none
    with pytest.raises(ValueError, match="exactly one NIC link"):
        WiringPlan.load(_saved(tmp_path, data))


# --- validate() ---------------------------------------------------------------------------
def test_tiny_plan_is_valid() -> None:
    tiny_plan().validate()


def test_validate_catches_a_port_used_twice() -> None:
    plan = tiny_plan()
    plan.links[1].b_port = plan.links[0].b_port
    with pytest.raises(ValueError, match="port 1 of sw1 is used by two links"):
        plan.validate()


def test_validate_catches_a_port_used_twice_in_a_built_fabric() -> None:
    plan = build("astral3")
    lanes = [x for x in plan.links if x.kind == "lane" and x.a == "lf0r0"]
    lanes[1].a_port = lanes[0].a_port
    with pytest.raises(ValueError, match="used by two links"):
        plan.validate()


def test_interface_names_may_use_exactly_15_characters() -> None:
    name = "x" * (MAX_INTF_NAME - len("-eth1"))  # "xxxxxxxxxx-eth1" is 15 characters
    tiny_plan(switch=name).validate()


def test_validate_catches_too_long_interface_names() -> None:
    name = "x" * (MAX_INTF_NAME - len("-eth1") + 1)  # 16 characters with "-eth1"
    with pytest.raises(ValueError, match="longer than 15"):
        tiny_plan(switch=name).validate()


def test_validate_catches_a_link_to_an_unknown_node() -> None:
    plan = tiny_plan()
    plan.links.append(Link("sw1", 3, "ghost", 1, "uplink", 800.0, 80.0))
    with pytest.raises(ValueError, match="unknown node 'ghost'"):
        plan.validate()


def test_validate_catches_a_host_with_two_links() -> None:
    plan = tiny_plan()
    plan.links.append(Link("h0", 1, "sw1", 3, "nic", 400.0, 40.0))
    with pytest.raises(ValueError, match="exactly one NIC link") as exc:
        plan.validate()
    assert "h0" in str(exc.value)


def test_validate_catches_a_host_with_no_link() -> None:
    plan = tiny_plan()
    del plan.links[1]
    with pytest.raises(ValueError, match="exactly one NIC link") as exc:
        plan.validate()
    assert "h1" in str(exc.value)


@pytest.mark.parametrize("field, what", [("ip", "duplicate ip"), ("mac", "duplicate mac"),
                                         ("name", "duplicate node name")])
def test_validate_catches_duplicate_host_identifiers(field: str, what: str) -> None:
    plan = tiny_plan()
    setattr(plan.nodes[1], field, getattr(plan.nodes[0], field))
    with pytest.raises(ValueError, match=what):
        plan.validate()


def test_validate_catches_duplicate_dpids() -> None:
    plan = tiny_plan()
    plan.nodes.append(Node("sw2", "switch", "leaf", 1, dpid=plan.nodes[2].dpid))
    with pytest.raises(ValueError, match="duplicate dpid"):
        plan.validate()


@pytest.mark.parametrize("field", ["gbps", "mbps"])
def test_validate_catches_non_positive_rates(field: str) -> None:
    plan = tiny_plan()
    setattr(plan.links[0], field, 0.0)
    with pytest.raises(ValueError, match="non-positive rate"):
        plan.validate()


# --- lookups ------------------------------------------------------------------------------
def test_lookups() -> None:
    plan = tiny_plan()
    assert [h.name for h in plan.hosts] == ["h0", "h1"]
    assert [s.name for s in plan.switches] == ["sw1"]
    assert plan.host_by_ip()["10.0.0.2"].name == "h1"
    assert plan.switch_by_dpid()[(1 << 48)].name == "sw1"
    ports = plan.ports()
    assert ports["sw1"][2][:2] == ("h1", 0)
    assert ports["h0"][0][:2] == ("sw1", 1)
    with pytest.raises(KeyError):
        plan.node("nope")


# --- atomic writes ------------------------------------------------------------------------
def test_write_json_atomic_writes_and_leaves_no_temp_files(tmp_path: Any) -> None:
    path = tmp_path / "sub" / "out.json"  # the directory is created
    write_json_atomic(path, {"a": [1, 2]})
    write_json_atomic(path, {"a": [3]})  # replacing an existing file
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": [3]}
    assert os.listdir(path.parent) == ["out.json"]


def test_write_json_atomic_keeps_the_old_file_when_serialisation_fails(tmp_path: Any) -> None:
    path = tmp_path / "out.json"
    write_json_atomic(path, {"good": True})
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_json_atomic(path, {"good": False, "bad": object()})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["out.json"]


def test_save_is_atomic_too(tmp_path: Any) -> None:
    plan = tiny_plan()
    path = tmp_path / "plan.json"
    plan.save(path)
    before = path.read_bytes()
    broken = copy.deepcopy(plan)
    broken.params = {"oops": object()}
    with pytest.raises(TypeError):
        broken.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["plan.json"]
