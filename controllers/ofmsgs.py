"""OpenFlow messages for a switch's routes. Pure: builds os-ken message objects, sends nothing.

The controller app hands these to ``datapath.send_msg``; the unit tests hand the
very same objects to ``controllers.fakeof`` and trace packets through them, so
what is tested is what the switches receive.

ECMP uses one OpenFlow *select* group per distinct set of next-hop ports, each
bucket ``weight=1`` (OVS ignores weight-0 buckets) and watching its own port so
a bucket whose port is down is skipped by the switch itself.

Why OpenFlow 1.5 where the switch allows it: RoCEv2 carries its ECMP entropy in
the UDP source port, and OVS's default select method does not hash UDP ports
(measured: 263 of 264 packets of 64 flows in one of two buckets). OVS accepts a
Netronome experimenter group property, ``selection_method=hash`` with explicit
fields, only in an OpenFlow 1.5 group-mod. So bridges are created with
``protocols=OpenFlow13,OpenFlow15``; on a 1.5 connection every select group
hashes ``ip_src, ip_dst`` and the TCP/UDP ports; on a 1.3-only switch the
groups still work but with OVS's default selection (and ``groups_hash_ports``
reports ``False`` in ``/health``). Flow entries are the same OpenFlow 1.3
constructs on either version.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from os_ken.ofproto import ofproto_protocol, ofproto_v1_3, ofproto_v1_5

from controllers.routing import PRIO_MISS, Route

ETH_IPV4 = 0x0800
ETH_ARP = 0x0806

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

COOKIE_ROUTE = 0xA5700001  # every flow this module installs carries it ("astral" routes)


def protocol(version: int) -> ofproto_protocol.ProtocolDesc:
    """A stand-in datapath for building messages without a switch (tests, fake table)."""
    return ofproto_protocol.ProtocolDesc(version)


def selection_method_property(parser: Any, method: str = "hash",
                              fields: Iterable[str] = tuple(HASH_FIELDS)) -> Any:
    """The NTR ``selection_method`` group property as os-ken can serialise it.

    Layout after the 12-byte experimenter header: 4 pad bytes, the method name in
    16 NUL-padded bytes, a 64-bit parameter, the OXM field entries; os-ken adds the
    zero padding to a multiple of 8 (not counted in the length, as OVS wants).
    os-ken's experimenter property carries 32-bit words, so we pack the body and
    split it into words.
    """
    body = bytes(4) + method.encode().ljust(16, b"\0") + struct.pack("!Q", 0)
    for name in fields:
        header, size = HASH_FIELDS[name]
        body += struct.pack("!I", header) + b"\xff" * size
    if len(body) % 4:
        raise ValueError("hash fields must add up to whole 32-bit words")
    words = list(struct.unpack(f"!{len(body) // 4}I", body))
    return parser.OFPGroupPropExperimenter(type_=0xFFFF, experimenter=NTR_VENDOR_ID,
                                           exp_type=NTRT_SELECTION_METHOD, data=words)


def group_mod(dp: Any, group_id: int, ports: tuple[int, ...], command: str = "add") -> Any:
    """A select group over ``ports`` (one bucket each, weight 1, watching its port)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    cmd = {"add": ofp.OFPGC_ADD, "modify": ofp.OFPGC_MODIFY}[command]
    if ofp.OFP_VERSION >= ofproto_v1_5.OFP_VERSION:
        buckets = [
            parser.OFPBucket(bucket_id=i, actions=[parser.OFPActionOutput(port)], properties=[
                parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=1),
                parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT, watch=port),
            ])
            for i, port in enumerate(ports)
        ]
        return parser.OFPGroupMod(dp, cmd, ofp.OFPGT_SELECT, group_id, buckets=buckets,
                                  properties=[selection_method_property(parser)])
    buckets = [parser.OFPBucket(weight=1, watch_port=port, watch_group=ofp.OFPG_ANY,
                                actions=[parser.OFPActionOutput(port)]) for port in ports]
    return parser.OFPGroupMod(dp, cmd, ofp.OFPGT_SELECT, group_id, buckets)


def flow_mod(dp: Any, priority: int, match: Any, actions: list[Any],
             cookie: int = COOKIE_ROUTE) -> Any:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
    return parser.OFPFlowMod(dp, cookie=cookie, table_id=0, command=ofp.OFPFC_ADD,
                             priority=priority, match=match, instructions=inst)


def route_matches(dp: Any, route: Route) -> list[Any]:
    """The two matches of a route: IPv4 by destination, ARP by target address."""
    parser = dp.ofproto_parser
    dst: Any = route.value if route.mask == "255.255.255.255" else (route.value, route.mask)
    return [parser.OFPMatch(eth_type=ETH_IPV4, ipv4_dst=dst),
            parser.OFPMatch(eth_type=ETH_ARP, arp_tpa=dst)]


def switch_program(dp: Any, routes: list[Route]) -> list[Any]:
    """Everything one switch needs, in order: wipe, groups, flows, table-miss drop.

    Returns os-ken messages. Group ids are assigned per distinct port set, in
    first-use order, so the same routes always yield the same ids.
    """
    ofp, parser = dp.ofproto, dp.ofproto_parser
    msgs: list[Any] = [
        parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=parser.OFPMatch()),
        parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, ofp.OFPGT_SELECT, ofp.OFPG_ALL),
    ]
    groups: dict[tuple[int, ...], int] = {}
    flows: list[Any] = []
    for route in routes:
        if len(route.ports) == 1:
            actions = [parser.OFPActionOutput(route.ports[0])]
        else:
            if route.ports not in groups:
                groups[route.ports] = len(groups) + 1
                msgs.append(group_mod(dp, groups[route.ports], route.ports))
            actions = [parser.OFPActionGroup(groups[route.ports])]
        for match in route_matches(dp, route):
            flows.append(flow_mod(dp, route.priority, match, actions))
    msgs.extend(flows)
    msgs.append(flow_mod(dp, PRIO_MISS, parser.OFPMatch(), []))
    return msgs


__all__ = [
    "ETH_ARP", "ETH_IPV4", "group_mod", "flow_mod", "protocol", "route_matches",
    "selection_method_property", "switch_program", "ofproto_v1_3", "ofproto_v1_5",
]
