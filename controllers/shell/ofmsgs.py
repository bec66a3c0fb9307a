"""OpenFlow messages for a switch's routes. Pure: builds os-ken message objects, sends nothing.

The controller app hands these to ``datapath.send_msg``; the unit tests hand the
very same objects to the tests' fake fabric (``tests/unit/fakeof.py``) and trace packets
through them, so what is tested is what the switches receive. ``messages`` encodes the changes
``controllers.flowtable.diff`` computes (that module is plain data, without os-ken);
``switch_program`` is a clean switch's whole program.

ECMP uses one OpenFlow *select* group per distinct set of next-hop ports, each
bucket ``weight=1`` (OVS ignores weight-0 buckets) and watching its own port so
a bucket whose port is down is skipped by the switch itself.

Why OpenFlow 1.5 where the switch allows it: RoCEv2 carries its ECMP entropy in
the UDP source port, and OVS's default select method does not hash UDP ports
(measured: 263 of 264 packets of 64 flows in one of two buckets). OVS accepts a
Netronome experimenter group property, ``selection_method``, only in an
OpenFlow 1.5 group-mod. So bridges are created with
``protocols=OpenFlow13,OpenFlow15`` and on a 1.5 connection every select group
names its method; on a 1.3-only switch the groups still work but with OVS's
default selection (and ``groups_hash_ports`` reports ``False`` in ``/health``).
Flow entries are the same OpenFlow 1.3 constructs on either version.

Two methods, both hashing the IP 5-tuple including the UDP source port:

``dp_hash`` (default)
    The datapath computes the hash and OVS caches one datapath flow per bucket,
    whatever the number of flows. This is what scales: with ``hash`` an
    all-pairs ping over 256 GPUs makes one cached flow per host pair at every
    leaf, the userspace datapath's flow table overflows, and replies come late.
``hash``
    OVS hashes the listed fields itself (``HASH_FIELDS``). Deterministic and
    field-exact, but one cached datapath flow per transport flow.

Lane marks (``vocab.lanemark``, ``flowtable.build_table``) go out as OpenFlow's
``OFPAT_SET_NW_TTL`` (1.1 and later, 1.5 included; OXM has no TTL field, so not a
set-field) before the output: in a flow entry's apply-actions, and in each marked bucket
of a group, whose actions OVS runs as an action set (set actions before the output). OVS
fixes the IPv4 header checksum as it rewrites the TTL. Only IPv4 entries carry it: OVS
refuses the action in an entry that does not match IP (``OFPBAC_MATCH_INCONSISTENT``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from os_ken.ofproto import ofproto_protocol, ofproto_v1_5

from controllers.flowtable import (
    DEFAULT_SELECT_METHOD,
    OFPGC_ADD_OR_MOD,
    SELECT_METHODS,
    Changes,
    Entry,
    build_table,
    diff,
)
from controllers.routing import Route

#: Netronome's experimenter id and the selection-method property type (OVS ofp-group.c).
NTR_VENDOR_ID = 0x0000154D
NTRT_SELECTION_METHOD = 1

#: The fields the select groups hash, as (OXM header, byte length). OVS reads the property's
#: field list as full OXM entries whose value acts as a mask, so each is sent with an all-ones
#: value. Their sizes add up to 40 bytes, a multiple of 4, which os-ken's 32-bit-word
#: experimenter data needs (ip_proto, one byte, would break that; the ports imply it anyway).
#: OVS hashes a field only when the packet has it, so UDP packets hash the UDP ports.
HASH_FIELDS = {
    "ipv4_src": (0x80001604, 4),
    "ipv4_dst": (0x80001804, 4),
    "tcp_src": (0x80001A02, 2),
    "tcp_dst": (0x80001C02, 2),
    "udp_src": (0x80001E02, 2),
    "udp_dst": (0x80002002, 2),
}


def protocol(version: int) -> ofproto_protocol.ProtocolDesc:
    """A stand-in datapath for building messages without a switch (tests, fake table)."""
    return ofproto_protocol.ProtocolDesc(version)




def selection_method_property(parser: Any, method: str = DEFAULT_SELECT_METHOD,
                              fields: Iterable[str] = tuple(HASH_FIELDS)) -> Any:
    """The NTR ``selection_method`` group property as os-ken can serialise it.

    Layout after the 12-byte experimenter header: 4 pad bytes, the method name in
    16 NUL-padded bytes, a 64-bit parameter, then (``hash`` only) the OXM field
    entries; os-ken adds the zero padding to a multiple of 8 (not counted in the
    length, as OVS wants). For ``dp_hash`` the parameter's upper 32 bits pick the
    algorithm: 0 is the IP 5-tuple. os-ken's experimenter property carries 32-bit
    words, so we pack the body and split it into words.
    """
    if method not in SELECT_METHODS:
        raise ValueError(f"select method must be one of {SELECT_METHODS} (got {method!r})")
    body = bytes(4) + method.encode().ljust(16, b"\0") + struct.pack("!Q", 0)
    for name in fields if method == "hash" else ():
        header, size = HASH_FIELDS[name]
        body += struct.pack("!I", header) + b"\xff" * size
    if len(body) % 4:
        raise ValueError("hash fields must add up to whole 32-bit words")
    words = list(struct.unpack(f"!{len(body) // 4}I", body))
    return parser.OFPGroupPropExperimenter(type_=0xFFFF, experimenter=NTR_VENDOR_ID,
                                           exp_type=NTRT_SELECTION_METHOD, data=words)


def group_mod(dp: Any, group_id: int, ports: tuple[int, ...], command: str = "add",
              kind: str = "select", method: str = DEFAULT_SELECT_METHOD,
              marks: tuple[int | None, ...] = ()) -> Any:
    """A group over ``ports``, one bucket per port, each watching its own port.

    ``kind="select"``: ECMP, weight 1 per bucket, ``method`` on OpenFlow 1.5.
    ``kind="ff"``: fast failover, the first bucket whose port is up (ARP, pinned flows).
    ``marks`` (``GroupSpec.marks``): per bucket, the TTL it sets before its output (None
    or an empty tuple: none), so the mark follows the bucket the switch really used.
    """
    ofp, parser = dp.ofproto, dp.ofproto_parser
    cmd = {"add": ofp.OFPGC_ADD, "modify": ofp.OFPGC_MODIFY,
           "add_or_mod": OFPGC_ADD_OR_MOD}[command]
    if marks and len(marks) != len(ports):
        raise ValueError(f"{len(marks)} marks for {len(ports)} buckets")
    acts = [_bucket_actions(parser, port, marks[i] if marks else None)
            for i, port in enumerate(ports)]
    if kind == "ff":
        return _ff_group_mod(dp, cmd, group_id, ports, acts)
    if kind != "select":
        raise ValueError(f"unknown group kind {kind!r}")
    if ofp.OFP_VERSION >= ofproto_v1_5.OFP_VERSION:
        buckets = [
            parser.OFPBucket(bucket_id=i, actions=acts[i], properties=[
                parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=1),
                parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT, watch=port),
            ])
            for i, port in enumerate(ports)
        ]
        return parser.OFPGroupMod(dp, cmd, ofp.OFPGT_SELECT, group_id, buckets=buckets,
                                  properties=[selection_method_property(parser, method)])
    buckets = [parser.OFPBucket(weight=1, watch_port=port, watch_group=ofp.OFPG_ANY,
                                actions=acts[i]) for i, port in enumerate(ports)]
    return parser.OFPGroupMod(dp, cmd, ofp.OFPGT_SELECT, group_id, buckets)


def _bucket_actions(parser: Any, port: int, ttl: int | None) -> list[Any]:
    """One bucket's actions: the lane mark's TTL if it has one, then the output."""
    out = [parser.OFPActionOutput(port)]
    return out if ttl is None else [parser.OFPActionSetNwTtl(nw_ttl=ttl)] + out


def _ff_group_mod(dp: Any, cmd: int, group_id: int, ports: tuple[int, ...],
                  acts: list[list[Any]]) -> Any:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if ofp.OFP_VERSION >= ofproto_v1_5.OFP_VERSION:
        buckets = [
            parser.OFPBucket(bucket_id=i, actions=acts[i], properties=[
                parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT, watch=port)])
            for i, port in enumerate(ports)
        ]
        return parser.OFPGroupMod(dp, cmd, ofp.OFPGT_FF, group_id, buckets=buckets)
    buckets = [parser.OFPBucket(weight=0, watch_port=port, watch_group=ofp.OFPG_ANY,
                                actions=acts[i]) for i, port in enumerate(ports)]
    return parser.OFPGroupMod(dp, cmd, ofp.OFPGT_FF, group_id, buckets)


def messages(dp: Any, changes: Changes, method: str) -> list[Any]:
    """os-ken messages for ``flowtable.diff``'s ``changes``, in the order they must be sent.

    ``dp`` is a datapath or a ``protocol`` stand-in; ``method`` is the select groups'
    selection method (see the module docstring).
    """
    ofp, parser = dp.ofproto, dp.ofproto_parser
    msgs: list[Any] = []
    for gid, spec in changes.groups_set:
        msgs.append(group_mod(dp, gid, spec.ports, command="add_or_mod", kind=spec.kind,
                              method=method, marks=spec.marks))
    for entry in changes.entries_set:
        msgs.append(entry_mod(dp, entry))
    for entry in changes.entries_del:
        msgs.append(parser.OFPFlowMod(dp, cookie=entry.cookie, table_id=0,
                                      command=ofp.OFPFC_DELETE_STRICT, priority=entry.priority,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                                      match=parser.OFPMatch(**dict(entry.match))))
    for gid in changes.groups_del:
        msgs.append(parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, ofp.OFPGT_SELECT, gid))
    return msgs


def entry_mod(dp: Any, entry: Entry) -> Any:
    """``OFPFC_ADD`` for one entry (adds it, or atomically replaces one with the same key).

    Actions are applied in order, so a lane mark's ``set_nw_ttl`` precedes its output."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    make = {"output": parser.OFPActionOutput, "group": parser.OFPActionGroup,
            "set_nw_ttl": parser.OFPActionSetNwTtl}
    try:
        acts = [make[kind](arg) for kind, arg in entry.actions]
    except KeyError as exc:
        raise ValueError(f"unknown action {exc.args[0]!r} in {entry}") from None
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, acts)] if acts else []
    return parser.OFPFlowMod(dp, cookie=entry.cookie, table_id=0, command=ofp.OFPFC_ADD,
                             priority=entry.priority, match=parser.OFPMatch(**dict(entry.match)),
                             instructions=inst)


def packet_out(dp: Any, port: int, data: bytes) -> Any:
    """Send ``data`` out of ``port`` as if it came from the controller (1.3 or 1.5)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    acts = [parser.OFPActionOutput(port)]
    if ofp.OFP_VERSION >= ofproto_v1_5.OFP_VERSION:
        return parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER,
                                   match=parser.OFPMatch(in_port=ofp.OFPP_CONTROLLER),
                                   actions=acts, data=data)
    return parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                               actions=acts, data=data)


def switch_program(dp: Any, routes: list[Route],
                   method: str = DEFAULT_SELECT_METHOD,
                   marks: Mapping[int, int] | None = None) -> list[Any]:
    """A clean switch's whole program, in order: wipe, groups, flows, table-miss drop.

    Used for a switch that must be rebuilt from nothing (tests, ``ofp-print``
    checks). A running controller sends ``flowtable.diff`` changes instead, which
    never wipe. Group ids are assigned per distinct group in first-use order, so the
    same routes always yield the same ids. ``marks`` are the switch's lane marks
    (port -> TTL, as ``FabricLogic.marks`` holds them); without them nothing is marked.
    """
    ofp, parser = dp.ofproto, dp.ofproto_parser
    wipe = [
        parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=parser.OFPMatch()),
        parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, ofp.OFPGT_SELECT, ofp.OFPG_ALL),
    ]
    return wipe + messages(dp, diff(None, build_table(routes, marks=marks)), method)


__all__ = [
    "entry_mod", "group_mod", "messages", "packet_out", "protocol", "selection_method_property",
    "switch_program",
]
