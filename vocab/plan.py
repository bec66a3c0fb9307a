"""The wiring plan: the one source of truth every part of the lab reads.

A topology builder (``testbed.topologies``) turns a spec in real units into a
``WiringPlan``: every node (GPU NIC hosts and switches), every link with its
real and emulated rate and the port numbers at both ends, the addressing
(IP/MAC per NIC, DPID per switch) and, for ``astral3``, the optical shuffle.
Mininet bring-up, the controller, the traffic agents, the flow model and the
ops agent all read this one JSON document, so they cannot disagree about the
fabric.

Location lives in the identifiers, as in ripl: a host named ``s5g3`` is GPU 3
of server 5; its IP ``10.B.R.S+1`` names block B, rail R and the S-th server
of the block; a DPID's top 16 bits name the tier (see ``dpid_for``).
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

from vocab.validate import replaceable

SCHEMA = "astral-lab/wiring-plan"
VERSION = 1

#: Linux caps interface names at 15 characters (IFNAMSIZ - 1).
MAX_INTF_NAME = 15

#: Tier codes used in the top 16 bits of a DPID, so ``ovs-ofctl`` output says
#: where a switch sits: 0x0001... is a leaf/ToR/edge, 0x0002... a spine or an
#: aggregation switch, 0x0003... a core, 0x0004... a per-server NVLink switch.
TIER_CODES = {"leaf": 1, "tor": 1, "edge": 1, "spine": 2, "agg": 2, "core": 3, "nvswitch": 4}


def dpid_for(tier: str, a: int, b: int) -> str:
    """DPID as 16 hex digits: tier code, then two location numbers.

    ``dpid_for("leaf", 1, 3)`` is ``0001000001000003``: a leaf, block 1, rail 3.
    """
    if not (0 <= a < 1 << 24 and 0 <= b < 1 << 24):
        raise ValueError(f"dpid location ({a}, {b}) out of range")
    return f"{(TIER_CODES[tier] << 48) | (a << 24) | b:016x}"


def mac_for(ip: str) -> str:
    """A locally administered MAC that spells the IP in hex (02:00:0a:01:03:05 = 10.1.3.5)."""
    octets = [int(x) for x in ip.split(".")]
    return "02:00:" + ":".join(f"{o:02x}" for o in octets)


def intf_name(node: str, port: int) -> str:
    """Mininet's interface naming (``node-ethN``); the plan records it so tools agree."""
    return f"{node}-eth{port}"


def intf_node(intf: str) -> str:
    """The node an interface named by ``intf_name`` belongs to (``lf0r1-eth3`` -> ``lf0r1``)."""
    return intf.rsplit("-eth", 1)[0]


@dataclass
class Node:
    """A host (one GPU NIC) or a switch.

    ``loc`` holds the location numbers (block, rail, server, gpu, pod, ...) that
    the name, IP and DPID encode, so code never has to parse names.
    ``server`` is set only for a fabric spread over several machines (Mininet
    Cluster Edition, ``testbed.shell.cluster``): the machine that runs this node.
    It is optional, so plans written before it existed still load unchanged.
    """

    name: str
    kind: str  # "host" or "switch"
    tier: str  # "gpu" for hosts; leaf/spine/tor/agg/core/edge/nvswitch for switches
    level: int  # row in drawings: 0 = hosts, then upward tier by tier
    loc: dict[str, int] = field(default_factory=dict)
    dpid: str | None = None
    ip: str | None = None
    mac: str | None = None
    server: str | None = None


@dataclass
class Link:
    """One emulated cable (for ``astral3`` uplinks: one optical lane).

    ``a`` is the lower-tier end. Ports are OpenFlow port numbers on switches and
    interface indexes on hosts; Mininet is told to use exactly these numbers.
    """

    a: str
    a_port: int
    b: str
    b_port: int
    kind: str  # "nic" (GPU NIC to its first switch), "nvlink", "lane", "uplink"
    gbps: float  # real rate
    mbps: float  # emulated rate (real rate times the plan's scale)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def a_intf(self) -> str:
        return intf_name(self.a, self.a_port)

    @property
    def b_intf(self) -> str:
        return intf_name(self.b, self.b_port)

    @property
    def name(self) -> str:
        """Human name used by fault injection and reports: ``leaf0r3:5-spine2:1``."""
        return f"{self.a}:{self.a_port}-{self.b}:{self.b_port}"


@dataclass
class WiringPlan:
    """Everything about one fabric instance; see the module docstring."""

    topology: str
    params: dict[str, Any]
    scale: float
    nodes: list[Node]
    links: list[Link]
    counts: dict[str, Any] = field(default_factory=dict)
    shuffle: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    # --- lookups -----------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def hosts(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "host"]

    @property
    def switches(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "switch"]

    def host_link_mbps(self) -> dict[str, float]:
        """``host -> emulated Mb/s`` of its own link (its NIC; hosts are a link's ``a`` end)."""
        hosts = {n.name for n in self.hosts}
        return {link.a: link.mbps for link in self.links if link.a in hosts}


    def rdma_nic(self, unit: str = "mbps") -> dict[str, float]:
        """``host -> rate`` of the NIC its RDMA traffic leaves by (``mbps`` or ``gbps``).

        Usually the host's own link. On ``railonly`` a GPU's own link is NVLink to its
        server's NVLink switch, and its RDMA leaves by that switch's NIC link toward the
        GPU's rail leaf: replay senders pace at that rate, as the NIC would. (Open-loop
        senders at NVLink rate would overrun the relay NICs' queues, where a real relay
        is flow-controlled; the flow model keeps the NVLink rate and lets the NIC links
        bind, so it can relay more than one NIC's worth per GPU.)
        """
        own = {ln.a: ln for ln in self.links if ln.a in {n.name for n in self.hosts}}
        nodes = {n.name: n for n in self.nodes}
        out = {}
        for host, link in own.items():
            if link.kind == "nvlink":
                rail = nodes[host].loc.get("gpu")
                nics = [ln for ln in self.links if ln.a == link.b and ln.kind == "nic"
                        and nodes[ln.b].loc.get("rail") == rail]
                link = nics[0] if nics else link
            out[host] = link.mbps if unit == "mbps" else link.gbps
        return out
    def host_by_ip(self) -> dict[str, Node]:
        return {n.ip: n for n in self.hosts if n.ip}

    def switch_by_dpid(self) -> dict[int, Node]:
        return {int(n.dpid, 16): n for n in self.switches if n.dpid}

    def ports(self) -> dict[str, dict[int, tuple[str, int, Link]]]:
        """``ports()[node][port] = (peer node, peer port, link)`` for every link end."""
        table: dict[str, dict[int, tuple[str, int, Link]]] = {n.name: {} for n in self.nodes}
        for link in self.links:
            table[link.a][link.a_port] = (link.b, link.b_port, link)
            table[link.b][link.b_port] = (link.a, link.a_port, link)
        return table

    # --- checks ------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ``ValueError`` naming the first inconsistency.

        Checked: unique names, DPIDs, IPs and MACs; every link end names a known node;
        no port used twice; interface names within Linux's 15 characters; every host
        has exactly one link (its NIC).
        """
        names = [n.name for n in self.nodes]
        _unique("node name", names)
        _unique("dpid", [n.dpid for n in self.switches])
        _unique("ip", [n.ip for n in self.hosts])
        _unique("mac", [n.mac for n in self.hosts])
        known = set(names)
        used: set[tuple[str, int]] = set()
        for link in self.links:
            for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
                if node not in known:
                    raise ValueError(f"link {link.name} names unknown node {node!r}")
                if (node, port) in used:
                    raise ValueError(f"port {port} of {node} is used by two links")
                used.add((node, port))
                if len(intf_name(node, port)) > MAX_INTF_NAME:
                    raise ValueError(
                        f"interface name {intf_name(node, port)!r} is longer than "
                        f"{MAX_INTF_NAME} characters (Linux's limit): a fabric this large "
                        "cannot be emulated (lower servers, k or radix)"
                    )
            if link.gbps <= 0 or link.mbps <= 0:
                raise ValueError(f"link {link.name} has a non-positive rate")
        degree = {n.name: 0 for n in self.hosts}
        for link in self.links:
            for end in (link.a, link.b):
                if end in degree:
                    degree[end] += 1
        bad = [h for h, d in degree.items() if d != 1]
        if bad:
            raise ValueError(f"hosts must have exactly one NIC link; check {bad[:3]}")

    # --- JSON --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "topology": self.topology,
            "params": self.params,
            "scale": self.scale,
            "counts": self.counts,
            "nodes": [_drop_none(asdict(n)) for n in self.nodes],
            "links": [asdict(link) for link in self.links],
            "shuffle": self.shuffle,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WiringPlan:
        """The plan in ``data`` (parsed JSON), after ``check_schema`` and ``validate``."""
        check_schema(data)
        plan = cls(
            topology=data["topology"],
            params=data["params"],
            scale=data["scale"],
            nodes=[Node(**n) for n in data["nodes"]],
            links=[Link(**link) for link in data["links"]],
            counts=data.get("counts", {}),
            shuffle=data.get("shuffle"),
            notes=data.get("notes", []),
        )
        plan.validate()
        return plan

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan as JSON atomically (a reader never sees half a file)."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> WiringPlan:
        """The plan in a JSON file (opened read-only); ValueError for what is not one,
        a file nested too deeply for the parser included."""
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except RecursionError:
                raise ValueError("not a wiring plan: its JSON is nested too deeply") from None
        return cls.from_dict(data)


#: a plan's fields: name -> (JSON types allowed, required). Nodes and links are checked the
#: same way against theirs, so a hand-edited or truncated plan is refused with the field's
#: name before any of it is used.
_PLAN_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "schema": ((str,), True), "version": ((int,), True), "topology": ((str,), True),
    "params": ((dict,), True), "scale": ((int, float), True), "nodes": ((list,), True),
    "links": ((list,), True), "counts": ((dict,), False), "shuffle": ((dict, type(None)), False),
    "notes": ((list,), False),
}
_NODE_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True), "kind": ((str,), True), "tier": ((str,), True),
    "level": ((int,), True), "loc": ((dict,), False), "dpid": ((str, type(None)), False),
    "ip": ((str, type(None)), False), "mac": ((str, type(None)), False),
    "server": ((str, type(None)), False),
}
_LINK_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "a": ((str,), True), "a_port": ((int,), True), "b": ((str,), True),
    "b_port": ((int,), True), "kind": ((str,), True), "gbps": ((int, float), True),
    "mbps": ((int, float), True), "info": ((dict,), False),
}
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "an object",
               list: "a list", type(None): "null"}


def link_components(plan: WiringPlan) -> dict[str, Link]:
    """``{"lf0r1~spine2#0": Link, ...}``: every link of the plan by the name telemetry,
    detectors and alerts give it. ``#k`` counts parallel cables between the same two nodes
    in plan order, which is the order ``Lab.links_between`` (and so fault injection) uses.
    """
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for link in plan.links:
        k = seen.get((link.a, link.b), 0)
        seen[(link.a, link.b)] = k + 1
        out[f"{link.a}~{link.b}#{k}"] = link
    return out


def _check_fields(where: str, obj: Any, spec: dict[str, tuple[tuple[type, ...], bool]]
                  ) -> None:
    if not isinstance(obj, dict):
        raise ValueError(f"{where or 'the plan'} must be a JSON object (got "
                         f"{type(obj).__name__})")
    prefix = f"{where}." if where else ""
    for key, (types, required) in spec.items():
        if key not in obj:
            if required:
                raise ValueError(f"{prefix}{key} is missing")
            continue
        value = obj[key]
        ok = isinstance(value, types) and not isinstance(value, bool)
        if ok and isinstance(value, float) and not math.isfinite(value):
            ok = False
        if not ok:
            want = "a finite number" if float in types else \
                " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise ValueError(f"{prefix}{key} must be {want} (got {value!r:.40})")
    unknown = sorted(set(obj) - set(spec))
    if unknown:
        raise ValueError(f"{prefix}{unknown[0]} is not a field of "
                         f"{'a node' if spec is _NODE_FIELDS else 'a link'}")


def check_schema(data: Any) -> None:
    """Refuse what is not a wiring plan of this version, naming the first bad field
    (``links[3].b_port is missing``): every field's presence and JSON type, finite
    positive rates and scale, no unknown node or link field, then what the values mean
    (``_check_meaning``). ``validate`` then checks that the parts fit together."""
    if not isinstance(data, dict):
        raise ValueError(f"not a wiring plan: a JSON object is expected (got "
                         f"{type(data).__name__})")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a wiring plan (schema is {data.get('schema')!r}, want "
                         f"{SCHEMA!r})")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"wiring plan: version must be the number {VERSION} (got "
                         f"{version!r})")
    if version != VERSION:
        raise ValueError(
            f"wiring plan version {version} is not supported (want {VERSION}); "
            "regenerate it with `astral-lab topo`"
        )
    try:
        for key, (types, required) in _PLAN_FIELDS.items():
            if key not in data:
                if required:
                    raise ValueError(f"{key} is missing")
                continue
            if not isinstance(data[key], types) or isinstance(data[key], bool):
                raise ValueError(f"{key} must be {_TYPE_NAMES[types[0]]} (got "
                                 f"{type(data[key]).__name__})")
        if not (math.isfinite(data["scale"]) and data["scale"] > 0):
            raise ValueError(f"scale must be a finite number > 0 (got {data['scale']!r})")
        for i, node in enumerate(data["nodes"]):
            _check_fields(f"nodes[{i}]", node, _NODE_FIELDS)
        for i, link in enumerate(data["links"]):
            _check_fields(f"links[{i}]", link, _LINK_FIELDS)
            for rate in ("gbps", "mbps"):
                if not link[rate] > 0:
                    raise ValueError(f"links[{i}].{rate} must be > 0 (got {link[rate]!r})")
            for port in ("a_port", "b_port"):
                if link[port] < 0:
                    raise ValueError(f"links[{i}].{port} must be >= 0 (got {link[port]!r})")
        _check_meaning(data)
    except ValueError as exc:
        raise ValueError(f"wiring plan: {exc}") from None


#: what a plan's values may be, beyond their JSON types (``_check_meaning``)
NODE_KINDS = ("host", "switch")
HOST_TIER = "gpu"
LINK_KINDS = ("lane", "nic", "nvlink", "uplink")
#: the highest OpenFlow port number a switch port can have (OFPP_MAX)
OFPP_MAX = 0xFFFFFF00
#: the fastest real link a builder makes (``testbed.fabricspec.FABRIC_RULES``' rate cap)
MAX_REAL_GBPS = 100_000.0
#: the fastest emulated link Mininet shapes (it ignores ``bw`` above it)
MAX_EMULATED_MBPS = 1000.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DPID = re.compile(r"[0-9a-fA-F]{16}")
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


def _finite_all(where: str, value: Any) -> None:
    """Every number in ``value`` (nested) is finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number (got {value!r})")
    if isinstance(value, dict):
        for k, v in value.items():
            _finite_all(f"{where}.{k}", v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite_all(f"{where}[{i}]", v)


def _check_ip(where: str, text: str) -> None:
    try:
        ip = ipaddress.IPv4Address(text)
    except ValueError:
        raise ValueError(f"{where} must be an IPv4 address like 10.0.0.1 (got {text!r})"
                         ) from None
    if ip.is_multicast or ip.is_unspecified or ip == ipaddress.IPv4Address("255.255.255.255"):
        raise ValueError(f"{where} must be a unicast IPv4 address (got {text!r})")


def _check_meaning(data: dict[str, Any]) -> None:
    """What the values mean, each rule named with its field, so a hand-edited plan is
    refused at the door and never reaches the controller or the drawing: a topology name,
    finite params, a fabric with hosts, switches and links; node kinds and tiers; dpids,
    IPs and MACs; port numbers; every link between two known nodes, lower tier first (no
    self-loop, no link within a tier, as no design has a spine-to-spine link); link kinds;
    rates within what the builders make."""
    if not _NAME.fullmatch(data["topology"]):
        raise ValueError(f"topology must be a design's name (got {data['topology']!r})")
    _finite_all("params", data["params"])
    nodes, links = data["nodes"], data["links"]
    levels: dict[str, tuple[int, str, str]] = {}
    for i, n in enumerate(nodes):
        where = f"nodes[{i}]"
        if not _NAME.fullmatch(n["name"]):
            raise ValueError(f"{where}.name must be letters, digits, '_', '.' or '-' (got "
                             f"{n['name']!r})")
        if n["kind"] not in NODE_KINDS:
            raise ValueError(f"{where}.kind must be host or switch (got {n['kind']!r})")
        if n["level"] < 0:
            raise ValueError(f"{where}.level must be >= 0 (got {n['level']!r})")
        if n["kind"] == "host":
            if n["tier"] != HOST_TIER or n["level"] != 0:
                raise ValueError(f"{where} is a host: its tier must be {HOST_TIER!r} and its "
                                 f"level 0 (got {n['tier']!r}, {n['level']})")
            if n.get("dpid") is not None:
                raise ValueError(f"{where}.dpid: a host has none")
            if not n.get("ip"):
                raise ValueError(f"{where}.ip is missing (a host has an address)")
            _check_ip(f"{where}.ip", n["ip"])
            if n.get("mac") is not None and not _MAC.fullmatch(n["mac"]):
                raise ValueError(f"{where}.mac must look like 02:00:0a:00:00:01 (got "
                                 f"{n['mac']!r})")
            if n.get("mac") is not None and int(n["mac"][:2], 16) & 1:
                raise ValueError(f"{where}.mac must be a unicast address (got {n['mac']!r})")
        else:
            if n["tier"] not in TIER_CODES:
                raise ValueError(f"{where}.tier must be one of {', '.join(TIER_CODES)} for a "
                                 f"switch (got {n['tier']!r})")
            if n["level"] < 1:
                raise ValueError(f"{where}.level must be >= 1 for a switch (got "
                                 f"{n['level']})")
            if not isinstance(n.get("dpid"), str) or not _DPID.fullmatch(n["dpid"]):
                raise ValueError(f"{where}.dpid must be 16 hex digits (got "
                                 f"{n.get('dpid')!r})")
            if n.get("ip") is not None:
                _check_ip(f"{where}.ip", n["ip"])
        loc = n.get("loc", {})
        for key, value in loc.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{where}.loc.{key} must be a whole number >= 0 (got "
                                 f"{value!r})")
        levels[n["name"]] = (n["level"], n["kind"], n["tier"])
    hosts = sum(1 for n in nodes if n["kind"] == "host")
    if not hosts or hosts == len(nodes) or not links:
        raise ValueError(f"an empty fabric: {hosts} host(s), {len(nodes) - hosts} "
                         f"switch(es), {len(links)} link(s); a plan needs each")
    for i, ln in enumerate(links):
        where = f"links[{i}]"
        if ln["kind"] not in LINK_KINDS:
            raise ValueError(f"{where}.kind must be one of {', '.join(LINK_KINDS)} (got "
                             f"{ln['kind']!r})")
        for end in ("a", "b"):
            if ln[end] not in levels:
                raise ValueError(f"{where}.{end} names no node of the plan ({ln[end]!r})")
            port = ln[f"{end}_port"]
            if levels[ln[end]][1] == "switch" and not 1 <= port <= OFPP_MAX:
                raise ValueError(f"{where}.{end}_port must be an OpenFlow port number in "
                                 f"1..{OFPP_MAX} on switch {ln[end]} (got {port})")
        if ln["a"] == ln["b"]:
            raise ValueError(f"{where} joins {ln['a']} to itself (a self-loop)")
        (la, _ka, ta), (lb, _kb, tb) = levels[ln["a"]], levels[ln["b"]]
        if la >= lb:
            raise ValueError(f"{where} must go up a tier, a below b: {ln['a']} ({ta}, level "
                             f"{la}) to {ln['b']} ({tb}, level {lb}); no link within a tier "
                             "(e.g. spine to spine)")
        if ln["gbps"] > MAX_REAL_GBPS:
            raise ValueError(f"{where}.gbps must be <= {MAX_REAL_GBPS:g}, the fastest link a "
                             f"builder makes (got {ln['gbps']!r})")
        if ln["mbps"] > MAX_EMULATED_MBPS:
            raise ValueError(f"{where}.mbps must be <= {MAX_EMULATED_MBPS:g}, the fastest "
                             f"link Mininet shapes (got {ln['mbps']!r})")


def finite(v: Any) -> Any:
    """``v`` with NaN and infinities replaced by None (JSON has neither; browsers and
    strict parsers refuse them)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON to a temporary file in the same directory, then rename it into place
    (never over a device node, FIFO or socket: ``vocab.validate.replaceable``)."""
    replaceable(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=False)
            f.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a result file is for everyone
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _unique(what: str, values: list[Any]) -> None:
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"duplicate {what}: {v}")
        seen.add(v)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}
