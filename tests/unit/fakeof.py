"""A fake OpenFlow fabric: apply the controller's real messages, then ask where a packet goes.

This follows Faucet's way of testing a controller without switches: the same
os-ken ``OFPFlowMod``/``OFPGroupMod`` objects the app sends are applied to small
in-memory tables (one per switch, wired as the plan says), and ``trace`` follows a
packet hop by hop. A select group forks the trace into every live bucket, so one
trace returns *all* paths ECMP could pick, and a test can assert that every one
of them is loop-free, minimal and ends at the right host.

Only what the lab's controller uses is modelled: one table, priorities,
exact/masked matches on ``eth_type, ipv4_dst, arp_tpa, ipv4_src, ip_proto,
udp_src, udp_dst, tcp_src, tcp_dst, in_port``, output, group and set-TTL actions.
A packet's IPv4 TTL is its ``nw_ttl`` field (64 unless a test says otherwise), which
``set_nw_ttl`` rewrites as OVS does: in an entry's actions in order, in a group's bucket
before its output (a bucket is an action set), and only on IP packets. An entry that
sets the TTL without matching IPv4 is refused, as OVS refuses it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from controllers.flowtable import OFPGC_ADD_OR_MOD, action_of
from vocab.plan import WiringPlan

_IP_FIELDS = {"ipv4_dst", "ipv4_src", "arp_tpa", "arp_spa"}
_IP_TYPES = (0x0800, 0x86DD)
#: the TTL a packet leaves its host with unless a test gives one (Linux's default)
HOST_TTL = 64


def _as_int(fieldname: str, value: Any) -> int:
    if fieldname in _IP_FIELDS:
        return int(ipaddress.IPv4Address(value))
    return int(value)


def _match_fields(match: Any) -> dict[str, tuple[int, int]]:
    """``{field: (value, mask)}`` from an os-ken ``OFPMatch`` (mask all-ones when exact)."""
    out: dict[str, tuple[int, int]] = {}
    for name, value in match._fields2:  # os-ken keeps (name, value-or-(value, mask)) pairs
        if isinstance(value, tuple):
            v, m = _as_int(name, value[0]), _as_int(name, value[1])
        else:
            v, m = _as_int(name, value), -1
        out[name] = (v & m, m)
    return out


@dataclass
class FlowEntry:
    priority: int
    match: dict[str, tuple[int, int]]
    actions: list[tuple[str, int]]  # ("output", port) | ("group", id) | ("set_nw_ttl", ttl)
    cookie: int = 0
    source: Any = None  # the OFPFlowMod it came from: reads back like a flow-stats entry

    def matches(self, pkt: dict[str, int]) -> bool:
        for name, (value, mask) in self.match.items():
            if name not in pkt or pkt[name] & mask != value:
                return False
        return True


@dataclass
class FakeSwitch:
    """One switch's flow table and group table."""

    name: str
    flows: list[FlowEntry] = field(default_factory=list)
    groups: dict[int, list[int]] = field(default_factory=dict)  # group -> bucket ports
    group_types: dict[int, str] = field(default_factory=dict)  # group -> "select" | "ff"
    # group -> per bucket, the TTL it sets before its output (None: none)
    bucket_ttls: dict[int, list[int | None]] = field(default_factory=dict)
    down_ports: set[int] = field(default_factory=set)

    def apply(self, msg: Any) -> None:
        """Apply one os-ken message as OVS would (the subset the controller sends)."""
        ofp = msg.datapath.ofproto
        kind = type(msg).__name__
        if kind == "OFPFlowMod":
            if msg.command == ofp.OFPFC_ADD:
                entry = FlowEntry(msg.priority, _match_fields(msg.match),
                                  _actions(msg.instructions), msg.cookie, msg)
                eth = entry.match.get("eth_type", (None, 0))[0]
                if any(k == "set_nw_ttl" for k, _ in entry.actions) and eth not in _IP_TYPES:
                    # OVS checks an entry's actions against its match (OFPBAC_MATCH_INCONSISTENT)
                    raise ValueError(f"{self.name}: set_nw_ttl in an entry that does not "
                                     f"match IP: {entry.match}")
                self.flows = [f for f in self.flows
                              if not (f.priority == entry.priority and f.match == entry.match)]
                self.flows.append(entry)
            elif msg.command == ofp.OFPFC_DELETE:
                want = _match_fields(msg.match)
                self.flows = [f for f in self.flows
                              if not all(f.match.get(k) == v for k, v in want.items())]
            elif msg.command == ofp.OFPFC_DELETE_STRICT:
                want = _match_fields(msg.match)
                before = len(self.flows)
                self.flows = [f for f in self.flows
                              if not (f.priority == msg.priority and f.match == want)]
                if len(self.flows) == before:
                    raise ValueError(f"{self.name}: strict delete of an entry that is not there")
            else:
                raise NotImplementedError(f"flow-mod command {msg.command}")
        elif kind == "OFPGroupMod":
            if msg.command == ofp.OFPGC_DELETE:
                if msg.group_id == ofp.OFPG_ALL:
                    self.groups.clear()
                    return
                if any(("group", msg.group_id) in f.actions for f in self.flows):
                    # OVS would delete the entries too; the controller must never rely on it
                    raise ValueError(f"{self.name}: group {msg.group_id} deleted while in use")
                self.groups.pop(msg.group_id, None)
                self.bucket_ttls.pop(msg.group_id, None)
                return
            if msg.type not in (ofp.OFPGT_SELECT, ofp.OFPGT_FF):
                raise NotImplementedError("only select and fast-failover groups are modelled")
            if msg.command == ofp.OFPGC_ADD and msg.group_id in self.groups:
                raise ValueError(f"{self.name}: group {msg.group_id} already exists")
            if msg.command == ofp.OFPGC_MODIFY and msg.group_id not in self.groups:
                raise ValueError(f"{self.name}: modify of missing group {msg.group_id}")
            if msg.command not in (ofp.OFPGC_ADD, ofp.OFPGC_MODIFY, OFPGC_ADD_OR_MOD):
                raise NotImplementedError(f"group-mod command {msg.command}")
            ports: list[int] = []
            ttls: list[int | None] = []
            for bucket in msg.buckets:
                weight = getattr(bucket, "weight", None)
                for prop in getattr(bucket, "properties", []) or []:
                    if hasattr(prop, "weight"):
                        weight = prop.weight
                if msg.type == ofp.OFPGT_SELECT and not weight:
                    raise ValueError(f"{self.name}: group {msg.group_id} has a weight-0 bucket, "
                                     "which OVS ignores")
                acts = _action_list(bucket.actions)
                outs = [port for kind_, port in acts if kind_ == "output"]
                if len(outs) != 1:
                    raise NotImplementedError(f"{self.name}: a bucket with {len(outs)} outputs")
                # a bucket is an action set: its TTL is set before the output, whatever the order
                set_ttl = [arg for kind_, arg in acts if kind_ == "set_nw_ttl"]
                ports.extend(outs)
                ttls.append(set_ttl[-1] if set_ttl else None)
            self.groups[msg.group_id] = ports
            self.bucket_ttls[msg.group_id] = ttls
            self.group_types[msg.group_id] = "ff" if msg.type == ofp.OFPGT_FF else "select"
        else:
            pass  # barriers, feature requests and the like change no state

    def lookup(self, pkt: dict[str, int]) -> FlowEntry | None:
        best: FlowEntry | None = None
        for f in self.flows:
            if f.matches(pkt) and (best is None or f.priority > best.priority):
                best = f
        return best

    def out_ports(self, pkt: dict[str, int]) -> list[int]:
        """Every port the packet may leave by (several for a select group: any one of them)."""
        return [port for port, _pkt in self.forward(pkt)]

    def forward(self, pkt: dict[str, int]) -> list[tuple[int, dict[str, int]]]:
        """Every (port, packet as it leaves by that port) the packet may take.

        A select group gives one per live bucket (any one of them), a fast-failover
        group its first live bucket; each bucket's own TTL action applies to its copy.
        """
        entry = self.lookup(pkt)
        if entry is None:
            return []
        out: list[tuple[int, dict[str, int]]] = []
        cur = pkt
        for kind, arg in entry.actions:
            if kind == "set_nw_ttl":
                cur = _set_ttl(cur, arg)
            elif kind == "output":
                if arg not in self.down_ports:  # a dead port swallows what is sent to it
                    out.append((arg, cur))
            elif kind == "group":
                if arg not in self.groups:
                    raise ValueError(f"{self.name}: flow points at missing group {arg}")
                live = [(p, t) for p, t in zip(self.groups[arg], self.bucket_ttls[arg],
                                               strict=True) if p not in self.down_ports]
                if self.group_types.get(arg) == "ff":
                    live = live[:1]  # fast failover: the first live bucket only
                out.extend((p, cur if t is None else _set_ttl(cur, t)) for p, t in live)
        return out


def _set_ttl(pkt: dict[str, int], ttl: int) -> dict[str, int]:
    """``pkt`` with its IPv4 TTL set to ``ttl``; OVS leaves a packet that is not IP as it is."""
    if pkt.get("eth_type") not in _IP_TYPES:
        return pkt
    return {**pkt, "nw_ttl": ttl}


def _action_list(actions: list[Any]) -> list[tuple[str, int]]:
    out = [action_of(a) for a in actions]
    for kind, _arg in out:
        if kind not in ("output", "group", "set_nw_ttl"):
            raise NotImplementedError(f"action {kind}")
    return out


def _actions(instructions: list[Any]) -> list[tuple[str, int]]:
    return _action_list([a for inst in instructions for a in inst.actions])


class LoopError(AssertionError):
    """A traced packet came back to a switch it had already crossed."""


@dataclass
class Delivery:
    """One way a traced packet can go: nodes crossed, (switch, out port) hops, and the
    packet as it arrived at the last node (a host, or the switch that dropped it)."""

    path: list[str]
    hops: list[tuple[str, int]]
    pkt: dict[str, int]


class FakeFabric:
    """All switches of a plan, wired by its links, programmed by real messages."""

    def __init__(self, plan: WiringPlan) -> None:
        self.plan = plan
        self.switches = {s.name: FakeSwitch(s.name) for s in plan.switches}
        self.ports = plan.ports()
        self.hosts = {h.name for h in plan.hosts}

    def apply(self, switch: str, msgs: list[Any]) -> None:
        for m in msgs:
            self.switches[switch].apply(m)

    def packet(self, src: str, dst_ip: str, eth_type: int = 0x0800,
               **fields: int) -> dict[str, int]:
        """Header fields of a packet from host ``src`` to ``dst_ip`` (IPv4 or an ARP request)."""
        src_ip = self.plan.node(src).ip
        pkt = {"eth_type": eth_type}
        if eth_type == 0x0806:
            pkt.update(arp_tpa=_as_int("arp_tpa", dst_ip), arp_spa=_as_int("arp_spa", src_ip))
        else:
            pkt.update(ipv4_dst=_as_int("ipv4_dst", dst_ip), ipv4_src=_as_int("ipv4_src", src_ip),
                       nw_ttl=HOST_TTL)
        pkt.update(fields)
        return pkt

    def trace(self, src: str, pkt: dict[str, int], max_hops: int = 16) -> list[list[str]]:
        """All node paths the packet can take from host ``src``; each ends at a host or ``DROP``.

        Raises ``LoopError`` if some path revisits a switch.
        """
        return [d.path for d in self.deliveries(src, pkt, max_hops)]

    def deliveries(self, src: str, pkt: dict[str, int], max_hops: int = 16) -> list[Delivery]:
        """``trace``, with the ports each path left by and the packet as it arrived.

        Raises ``LoopError`` if some path revisits a switch.
        """
        port_map = self.ports[src]
        (first, first_port, _link), = port_map.values()
        found: list[Delivery] = []

        def walk(node: str, in_port: int, path: list[str], hops: list[tuple[str, int]],
                 cur: dict[str, int]) -> None:
            if node in self.hosts:
                found.append(Delivery(path + [node], hops, cur))
                return
            if node in path:
                raise LoopError(f"loop: {' -> '.join(path + [node])}")
            if len(path) > max_hops:
                raise LoopError(f"path longer than {max_hops} hops: {' -> '.join(path)}")
            outs = self.switches[node].forward({**cur, "in_port": in_port})
            if not outs:
                found.append(Delivery(path + [node, "DROP"], hops, cur))
                return
            for port, sent in outs:
                if port == in_port:
                    raise LoopError(f"{node} sends the packet back out of its in_port {port}")
                peer, peer_port, _ = self.ports[node][port]
                sent = {k: v for k, v in sent.items() if k != "in_port"}
                walk(peer, peer_port, path + [node], hops + [(node, port)], sent)

        walk(first, first_port, [src], [], dict(pkt))
        return found
