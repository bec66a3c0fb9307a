"""The os-ken controller app: moves messages between the switches and ``FabricLogic``.

Life of a switch, as the app sees it:

1. It connects; os-ken fetches its port list. Ports that are down are handed to
   the logic (routing avoids them) before anything is sent.
2. The app *reads back* what the switch holds (flow entries and group ids)
   and sends only the difference to what it should hold (``FabricLogic.sync``).
   A freshly created bridge gets its whole program; a switch that reconnects, or
   a fabric whose controller was restarted, keeps forwarding on its existing
   entries and sees nothing or a few atomic replacements. A barrier reply marks it
   programmed; the fabric is *converged* when every switch of the plan is.
3. Port-status messages update the set of failed links. Select and failover
   groups already skip a dead local port in the data plane; the app recomputes
   routes for what needs remote action (other leaves must stop sending a dead
   spine-leaf lane's traffic through that spine) and sends each switch only what
   changed.
4. A poller asks every switch for port, group and pinned-flow counters each
   interval; ``/links`` utilisation and the adaptive mode run on them.

Every IPv4 packet leaves its first switch with a *lane mark* in its TTL, naming the uplink
it took (``vocab.lanemark``): ``FabricLogic.table`` hands each host-facing switch's marks
to ``flowtable.build_table``, which puts a set-TTL before each output by an uplink (in the
select and failover groups' buckets, or in the entry), and ``ofmsgs`` sends it as
``OFPAT_SET_NW_TTL``. The app sends those tables like any other; nothing here marks.

Nothing is learned from packets: the plan is the truth. The one packet-in is the wiring
check's (``check_wiring``, ``controllers.discovery``): a numbered frame out of each end of
every switch-to-switch link, handed back by the switch it reaches, to compare the cabling
with the plan.
Run it with ``astral-lab controller --plan plan.json`` (a ``Lab`` starts it as ``python -m
astral_lab.controller_cli``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_5

from controllers import discovery
from controllers.fabric import DEFAULT_MODE, POLL_INTERVAL_S, FabricLogic
from controllers.flowtable import (
    COOKIE_PIN,
    DEFAULT_SELECT_METHOD,
    Entry,
    entry_from_stats,
    stat_counter,
)
from controllers.shell.ofmsgs import entry_mod, messages, packet_out
from vocab.flows import Flow, parse_flows
from vocab.plan import WiringPlan, write_json_atomic

LOG = logging.getLogger("astral.controller")

#: Set by ``controllers.shell.run.serve`` before os-ken instantiates the app (os-ken builds
#: apps itself).
SETTINGS: dict[str, Any] = {"plan": None, "select_method": DEFAULT_SELECT_METHOD,
                            "lb": DEFAULT_MODE,
                            "poll_interval": POLL_INTERVAL_S, "state_path": None, "adaptive": {}}

READBACK_TIMEOUT = 10.0  # seconds to wait for a switch's flow/group read-back
STALE_REQUEST_S = 30.0  # a request unanswered this long is dropped (and a poll asks again)


class Pending:
    """One multipart request in flight: bodies gathered until the last reply.

    ``kind`` names what a poll asked for ("ports", "groups", "pins"; "" for a read-back),
    so the poller can tell a question still open at a switch from one it may ask again.
    """

    def __init__(self, callback: Callable[[list[Any]], None], kind: str = "") -> None:
        self.callback = callback
        self.kind = kind
        self.bodies: list[Any] = []
        self.sent = time.monotonic()


class AstralController(app_manager.OSKenApp):
    """Proactive routing with ECMP / planned / adaptive load balancing (module docstring)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION, ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plan = SETTINGS["plan"]
        if plan is None:
            raise RuntimeError("controllers.shell.app.SETTINGS['plan'] must be set before start")
        self.plan: WiringPlan = plan
        self.method = SETTINGS.get("select_method") or DEFAULT_SELECT_METHOD
        self.poll_interval = float(SETTINGS.get("poll_interval") or POLL_INTERVAL_S)
        self.state_path: str | None = SETTINGS.get("state_path")
        self.lock = threading.RLock()
        self.logic = FabricLogic(plan, SETTINGS.get("lb") or DEFAULT_MODE, SETTINGS.get("adaptive"))
        self.started = time.time()
        self.expected = {int(s.dpid, 16): s.name for s in plan.switches if s.dpid}
        self.dps: dict[str, Any] = {}  # name -> datapath (connected)
        self.versions: dict[str, int] = {}
        self.synced: set[str] = set()  # read back and brought in line at least once
        self.programmed: dict[str, float] = {}
        self.barriers: dict[str, int] = {}  # name -> xid of the last barrier sent
        self.errors: dict[str, list[dict[str, Any]]] = {}
        self.unknown: set[int] = set()
        self.converged_at: float | None = None
        self.first_connect: float | None = None
        self.pending: dict[tuple[str, int], Pending] = {}
        self._pins_at: dict[str, dict[Any, Flow]] = {}  # first switch -> match -> flow
        self.reroutes: list[dict[str, Any]] = []
        self._reroute: dict[str, Any] | None = None
        # counters from the poller: name -> port -> sample; rates in Mb/s
        self.port_samples: dict[str, dict[int, dict[str, Any]]] = {}
        self.group_samples: dict[str, dict[int, dict[str, Any]]] = {}
        self.flow_samples: dict[tuple[str, str, str, int, int], dict[str, Any]] = {}
        self.tick = 0
        self._settled_at = 0  # adaptive rounds wait until this tick (fresh counters)
        self.sync_stats: dict[str, dict[str, int]] = {}  # what the last read-back sync sent
        # the wiring check: one at a time; the frames of check ``probe_check`` seen so far
        self.probe_ends = discovery.probe_ends(plan)
        self.probe_check = 0
        self.arrivals: dict[int, set[tuple[str, int]]] = {}
        self._checking = threading.Lock()
        self._load_state()
        threading.Thread(target=self._poll_loop, name="poller", daemon=True).start()
        LOG.info("plan %s: %d switches, %d hosts, mode %s", plan.topology,
                 len(self.expected), len(plan.hosts), self.logic.mode)

    # --- helpers ---------------------------------------------------------------------
    def _send(self, name: str, msgs: list[Any]) -> None:
        """Send in order, then a barrier whose reply says the switch has applied them all."""
        dp = self.dps[name]
        for m in msgs:
            dp.send_msg(m)
        barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.set_xid(barrier)
        self.barriers[name] = barrier.xid
        dp.send_msg(barrier)

    def _request(self, name: str, msg: Any, callback: Callable[[list[Any]], None],
                 kind: str = "") -> None:
        dp = self.dps[name]
        dp.set_xid(msg)
        self.pending[(name, msg.xid)] = Pending(callback, kind)
        dp.send_msg(msg)

    def push(self) -> dict[str, int]:
        """Send every synced switch what changed in the logic; returns messages per switch."""
        sent: dict[str, int] = {}
        with self.lock:
            for name, (ch, want) in self.logic.changes(sorted(self.synced)).items():
                if name not in self.dps:
                    continue
                msgs = messages(self.dps[name], ch, self.method)
                self._send(name, msgs)
                self.logic.commit(name, want)
                sent[name] = len(msgs)
        return sent

    def _save_state(self) -> None:
        """Mode, flows and paths survive a controller restart (``--state FILE``)."""
        if not self.state_path:
            return
        lg = self.logic
        data = {"schema": "astral-lab/controller-state", "version": 1, "mode": lg.mode,
                "adaptive": lg.adaptive_params,
                "flows": [f.to_dict() for f in sorted(lg.flows.values())],
                "paths": [[list(f.key), [list(h) for h in p]] for f, p in
                          sorted(lg.assign.items())] if lg.balancer.polls else []}
        try:
            write_json_atomic(self.state_path, data)
        except OSError as exc:
            LOG.error("cannot save state to %s: %s", self.state_path, exc)

    def _load_state(self) -> None:
        if not self.state_path or not os.path.exists(self.state_path):
            return
        try:
            with open(self.state_path) as f:
                data = json.load(f)
            flows = parse_flows(data.get("flows", []), self.plan)
            self.logic.set_mode(data["mode"], **data.get("adaptive", {}))
            self.logic.set_flows(flows)
            if self.logic.balancer.polls:
                known = {f.key: f for f in self.logic.assign}
                for key, hops in data.get("paths", []):
                    flow = known.get(tuple(key))
                    path = tuple((sw, int(p)) for sw, p in hops)
                    if flow and self.logic._valid(flow, path):
                        self.logic.assign[flow] = path
        except (OSError, ValueError, KeyError, TypeError) as exc:
            LOG.error("ignoring unreadable state %s: %s", self.state_path, exc)
            return
        LOG.info("restored state from %s: mode %s, %d flows", self.state_path, self.logic.mode,
                 len(self.logic.flows))

    # --- connection ------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        name = self.expected.get(dp.id)
        with self.lock:
            if name is None:
                LOG.warning("switch %016x is not in the plan; leaving it alone", dp.id)
                self.unknown.add(dp.id)
                return
            self.dps[name] = dp
            self.first_connect = self.first_connect or time.time()
            self.versions[name] = dp.ofproto.OFP_VERSION
            self.synced.discard(name)
            self.programmed.pop(name, None)
            self.converged_at = None
            self.logic.forget(name)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def on_state(self, ev: Any) -> None:
        dp = ev.datapath
        name = self.expected.get(dp.id) if dp.id is not None else None
        if name is None:
            return
        if ev.state == DEAD_DISPATCHER:
            with self.lock:
                if self.dps.get(name) is dp:
                    del self.dps[name]
                    self.synced.discard(name)
                    self.programmed.pop(name, None)
                    self.barriers.pop(name, None)
                    self.converged_at = None
                    self.logic.forget(name)
                    self.pending = {k: v for k, v in self.pending.items() if k[0] != name}
            LOG.warning("%s disconnected", name)
            return
        # MAIN: os-ken has the port list now. Learn port states, then read the switch back.
        ofp = dp.ofproto
        with self.lock:
            changed = False
            for port in dp.ports.values():
                if port.port_no <= ofp.OFPP_MAX:
                    changed |= self.logic.set_port(name, port.port_no, _port_up(ofp, port))
            if changed:
                self.push()
            self._read_back(name)

    def _read_back(self, name: str) -> None:
        dp = self.dps[name]
        ofp, parser = dp.ofproto, dp.ofproto_parser
        got: dict[str, Any] = {}

        def done(kind: str) -> Callable[[list[Any]], None]:
            def cb(bodies: list[Any]) -> None:
                got[kind] = bodies
                if len(got) == 2:
                    self._finish_sync(name, dp, got["flows"], got["groups"])
            return cb

        self._request(name, _flow_request(dp, cookie=0, mask=0), done("flows"))
        self._request(name, parser.OFPGroupStatsRequest(dp, 0, ofp.OFPG_ALL), done("groups"))

    def _finish_sync(self, name: str, dp: Any, flows: list[Any], groups: list[Any]) -> None:
        with self.lock:
            if self.dps.get(name) is not dp:
                return  # reconnected meanwhile; that connection syncs itself
            entries: dict[Any, Entry] = {}
            for stat in flows:
                if stat.table_id == 0:
                    e = entry_from_stats(stat)
                    entries[e.key] = e
            ch, want = self.logic.sync(name, entries, [g.group_id for g in groups])
            msgs = messages(dp, ch, self.method)
            # the wiring check's trap (a rule of its own cookie: sync never touches it)
            msgs.append(entry_mod(dp, discovery.trap_entry(dp.ofproto.OFPP_CONTROLLER)))
            self._send(name, msgs)
            self.logic.commit(name, want)
            self.synced.add(name)
            self.errors.pop(name, None)
            self.sync_stats[name] = {"read_back": len(entries), "entries_set":
                                     len(ch.entries_set), "entries_del": len(ch.entries_del),
                                     "groups_set": len(ch.groups_set),
                                     "groups_del": len(ch.groups_del)}
        LOG.info("%s (OpenFlow 0x%02x): read back %d entries, %d groups; sent %d changes",
                 name, dp.ofproto.OFP_VERSION, len(entries), len(groups), len(msgs))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev: Any) -> None:
        name = self.expected.get(ev.msg.datapath.id)
        with self.lock:
            if name is None or self.barriers.get(name) != ev.msg.xid:
                return
            del self.barriers[name]
            self.programmed.setdefault(name, time.time())
            if (len(self.programmed) == len(self.expected) and not self.barriers
                    and self.converged_at is None and not self.errors):
                self.converged_at = time.time()
                LOG.info("fabric converged: %d switches programmed", len(self.expected))
            rr = self._reroute
            if rr is not None and not (rr["waiting"] & set(self.barriers)):
                rr["installed_s"] = round(time.monotonic() - rr["t0"], 4)
                del rr["waiting"], rr["t0"]
                self.reroutes.append(rr)
                self.reroutes = self.reroutes[-50:]
                self._reroute = None
                LOG.info("reroute installed in %.1f ms", 1000 * rr["installed_s"])

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev: Any) -> None:
        """A wiring-check frame handed back by the switch it reached; nothing else comes."""
        msg = ev.msg
        got = discovery.read_frame(bytes(msg.data or b""))
        name = self.expected.get(msg.datapath.id)
        if got is None or name is None:
            return
        check, n = got
        with self.lock:
            if check == self.probe_check % 256:
                self.arrivals.setdefault(n, set()).add((name, int(msg.match["in_port"])))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        name = self.expected.get(dp.id)
        ofp = dp.ofproto
        if name is None or msg.desc.port_no > ofp.OFPP_MAX:
            return
        up = msg.reason != ofp.OFPPR_DELETE and _port_up(ofp, msg.desc)
        t0 = time.monotonic()
        with self.lock:
            if not self.logic.set_port(name, msg.desc.port_no, up):
                return
            computed = time.monotonic() - t0
            sent = self.push()
            self._reroute = {"at": time.time(), "switch": name, "port": msg.desc.port_no,
                             "up": up, "compute_s": round(computed, 4),
                             "switches_changed": len(sent), "messages": sum(sent.values()),
                             "waiting": set(sent), "t0": t0}
            if not sent:
                self._reroute["installed_s"] = round(time.monotonic() - t0, 4)
                self.reroutes.append(self._reroute)
                self._reroute = None
            self._save_state()
        LOG.info("%s port %d %s: %d switches changed", name, msg.desc.port_no,
                 "up" if up else "down", len(sent))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev: Any) -> None:
        msg = ev.msg
        name = self.expected.get(msg.datapath.id, f"{msg.datapath.id:016x}")
        err = {"switch": name, "type": msg.type, "code": msg.code, "at": time.time(),
               "data": bytes(msg.data[:64]).hex()}
        LOG.error("OpenFlow error from %s: type=%s code=%s", name, msg.type, msg.code)
        with self.lock:
            self.errors.setdefault(name, []).append(err)
            self.converged_at = None

    # --- multipart replies -----------------------------------------------------------
    @set_ev_cls([ofp_event.EventOFPFlowStatsReply, ofp_event.EventOFPFlowDescStatsReply,
                 ofp_event.EventOFPGroupStatsReply, ofp_event.EventOFPPortStatsReply],
                MAIN_DISPATCHER)
    def on_multipart(self, ev: Any) -> None:
        msg = ev.msg
        name = self.expected.get(msg.datapath.id)
        with self.lock:
            p = self.pending.get((name, msg.xid))  # type: ignore[arg-type]
            if p is None:
                return
            p.bodies.extend(msg.body)
            if msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                return
            del self.pending[(name, msg.xid)]  # type: ignore[index]
        try:
            p.callback(p.bodies)
        except Exception:  # a bad reply must not stop the event loop
            LOG.exception("handling a reply from %s failed", name)

    # --- polling ---------------------------------------------------------------------
    def _poll_loop(self) -> None:
        while True:
            time.sleep(self.poll_interval)
            try:
                self.poll_once()
            except Exception:
                LOG.exception("poll failed")

    def poll_once(self) -> None:
        """Ask every synced switch for counters; run one adaptive round on the last ones.

        A question still unanswered at a switch is not asked again. A controller slower
        than the interval (a busy or emulated CPU) would otherwise queue replies without
        bound, and the reply to a push's barrier would wait behind all of them.
        """
        with self.lock:
            self.tick += 1
            if self.logic.balancer.polls and self.logic.assign:
                self._adaptive_round()
            # drop requests a dead switch will never answer
            now = time.monotonic()
            for key in [k for k, p in self.pending.items() if now - p.sent > STALE_REQUEST_S]:
                del self.pending[key]
            unanswered = {(name, p.kind) for (name, _), p in self.pending.items()}
            self._index_pins()
            for name in sorted(self.synced):
                dp = self.dps.get(name)
                if dp is None:
                    continue
                ofp, parser = dp.ofproto, dp.ofproto_parser
                asks = {"ports": (parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY),
                                  self._port_cb),
                        "groups": (parser.OFPGroupStatsRequest(dp, 0, ofp.OFPG_ALL),
                                   self._group_cb)}
                if self.logic.assign:
                    asks["pins"] = (_flow_request(dp, COOKIE_PIN, 0xFFFFFFFFFFFFFFFF),
                                    self._pin_cb)
                for kind, (msg, callback) in asks.items():
                    if (name, kind) not in unanswered:
                        self._request(name, msg, callback(name), kind)

    def _index_pins(self) -> None:
        """Which assigned flow each pinned entry counts, per first switch, built once a poll.

        A flow is pinned at every switch of its path but the last, so its bytes are read
        where it enters the fabric.
        """
        self._pins_at = {}
        for flow, path in self.logic.assign.items():
            if len(path) > 1:
                self._pins_at.setdefault(path[0][0], {})[self.logic.match_of(flow)] = flow

    def _port_cb(self, name: str) -> Callable[[list[Any]], None]:
        def cb(bodies: list[Any]) -> None:
            now = time.monotonic()
            with self.lock:
                old = self.port_samples.get(name, {})
                new: dict[int, dict[str, Any]] = {}
                for s in bodies:
                    d = {k: getattr(s, k) for k in ("rx_packets", "tx_packets", "rx_bytes",
                                                    "tx_bytes", "rx_dropped", "tx_dropped",
                                                    "rx_errors", "tx_errors")}
                    d["t"] = now
                    prev = old.get(s.port_no)
                    if prev and now > prev["t"]:
                        dt = now - prev["t"]
                        d["rx_mbps"] = max(0.0, (d["rx_bytes"] - prev["rx_bytes"]) * 8e-6 / dt)
                        d["tx_mbps"] = max(0.0, (d["tx_bytes"] - prev["tx_bytes"]) * 8e-6 / dt)
                    new[s.port_no] = d
                self.port_samples[name] = new
        return cb

    def _group_cb(self, name: str) -> Callable[[list[Any]], None]:
        def cb(bodies: list[Any]) -> None:
            with self.lock:
                self.group_samples[name] = {
                    g.group_id: {"packet_count": g.packet_count, "byte_count": g.byte_count,
                                 "buckets": [{"packet_count": b.packet_count,
                                              "byte_count": b.byte_count}
                                             for b in g.bucket_stats]}
                    for g in bodies}
        return cb

    def _pin_cb(self, name: str) -> Callable[[list[Any]], None]:
        """Byte counters of pinned flows, read at each flow's first switch."""
        def cb(bodies: list[Any]) -> None:
            now = time.monotonic()
            with self.lock:
                by_match = self._pins_at.get(name, {})
                for stat in bodies:
                    flow = by_match.get(entry_from_stats(stat).match)
                    if flow is None:
                        continue
                    count = stat_counter(stat, "byte_count") or 0
                    prev = self.flow_samples.get(flow.key)
                    rate = None
                    if prev and now > prev["t"] and count >= prev["bytes"]:
                        rate = (count - prev["bytes"]) * 8e-6 / (now - prev["t"])
                    self.flow_samples[flow.key] = {"t": now, "bytes": count, "mbps": rate}
        return cb

    def link_rates(self) -> dict[tuple[str, int], float]:
        """Egress rate (Mb/s) of every switch port from the last two polls."""
        return {(sw, port): s["tx_mbps"] for sw, ports in self.port_samples.items()
                for port, s in ports.items() if "tx_mbps" in s}

    def _adaptive_round(self) -> None:
        # Counters polled at tick t cover (t-1, t]: after a move at tick t, the rates read at
        # t+1 still mostly show the old placement. Acting on them would move a second flow
        # off a link that is no longer hot, so wait until a whole interval after the move.
        if self.tick < self._settled_at:
            return
        rates = {f: (self.flow_samples.get(f.key) or {}).get("mbps") for f in self.logic.assign}
        flow_rates = {f: r for f, r in rates.items() if r is not None}
        if not flow_rates:
            return
        moves = self.logic.adaptive_step(flow_rates, self.link_rates(), self.tick)
        if moves:
            self._settled_at = self.tick + 2
            sent = self.push()
            LOG.info("adaptive: moved %d flows (%d switches changed)", len(moves), len(sent))
            self._save_state()

    # --- what the REST API shows -----------------------------------------------------
    def health(self) -> dict[str, Any]:
        with self.lock:
            missing = [n for n in self.expected.values() if n not in self.programmed]
            versions = sorted({self.versions[n] for n in self.dps})
            errors = [e for errs in self.errors.values() for e in errs]
            return {
                "status": "ok",
                "converged": not missing and not self.barriers and not errors,
                "switches": {"expected": len(self.expected), "connected": len(self.dps),
                             "programmed": len(self.programmed)},
                "not_programmed": sorted(missing)[:20],
                "unknown_dpids": [f"{d:016x}" for d in sorted(self.unknown)],
                "openflow_versions": [{4: "1.3", 6: "1.5"}.get(v, str(v)) for v in versions],
                # select groups carry the hash-fields property only on OpenFlow 1.5
                "groups_hash_ports": bool(versions) and min(versions) >= ofproto_v1_5.OFP_VERSION,
                "select_method": self.method,
                "lb": self.logic.mode,
                "flows": len(self.logic.flows),
                "pinned": len(self.logic.assign),
                "adaptive_moves": self.logic.moves,
                "down_ports": [f"{sw}:{p}" for sw, p in sorted(self.logic.down)],
                "reroutes": self.reroutes[-5:],
                # totals of the last read-back sync of every switch: a restart that finds
                # the switches as it left them replaces no entries (groups are re-sent)
                "resync": {k: sum(s[k] for s in self.sync_stats.values())
                           for k in ("read_back", "entries_set", "entries_del", "groups_set",
                                     "groups_del")},
                "errors": errors[-10:],
                "uptime_s": round(time.time() - self.started, 3),
                "converged_after_s": (round(self.converged_at - self.started, 3)
                                      if self.converged_at else None),
                # from the first switch connecting to every switch programmed
                "programming_s": (round(self.converged_at - self.first_connect, 3)
                                  if self.converged_at and self.first_connect else None),
                "topology": self.plan.topology,
            }

    def set_lb(self, mode: str, **params: float) -> None:
        with self.lock:
            self.logic.set_mode(mode, **params)
            self.push()
            self._save_state()

    def set_traffic(self, flows: list[Flow], replace: bool = True) -> None:
        with self.lock:
            self.logic.set_flows(flows, replace=replace)
            self.push()
            self._save_state()

    def check_wiring(self, settle: float = 0.5, repeat: int = 2) -> dict[str, Any]:
        """Send each end's probe ``repeat`` times (a lost copy is not a missing cable),
        wait ``settle`` seconds for them to come back, and say where each was seen. A
        probe is sent only from a switch that is connected and synced (its trap is in);
        ``sent`` says which were. Waits outside the app's lock."""
        with self._checking:
            with self.lock:
                self.probe_check += 1
                self.arrivals = {}
                check = self.probe_check
                sent = set()
                for n, (sw, port) in enumerate(self.probe_ends):
                    dp = self.dps.get(sw)
                    if dp is None or sw not in self.synced:
                        continue
                    data = discovery.frame(check, n)
                    for _ in range(repeat):
                        dp.send_msg(packet_out(dp, port, data))
                    sent.add(n)
            time.sleep(settle)
            with self.lock:
                seen, self.arrivals = self.arrivals, {}
        return {"check": check, "settle_s": settle, "probes": [
            {"from": [sw, port], "sent": n in sent,
             "seen": [[s, p] for s, p in sorted(seen.get(n, ()))]}
            for n, (sw, port) in enumerate(self.probe_ends)]}

    def read_flows(self, names: list[str], timeout: float = 5.0) -> dict[str, list[Any]]:
        """Flow entries read from the switches now (not from memory); waits outside the lock."""
        results: dict[str, list[Any]] = {}
        done = threading.Event()
        with self.lock:
            names = [n for n in names if n in self.dps]
            left = set(names)
            if not left:
                return {}

            def cb_for(name: str) -> Callable[[list[Any]], None]:
                def cb(bodies: list[Any]) -> None:
                    results[name] = bodies
                    left.discard(name)
                    if not left:
                        done.set()
                return cb

            for name in names:
                self._request(name, _flow_request(self.dps[name], 0, 0), cb_for(name))
        if not done.wait(timeout):
            raise TimeoutError(f"switches did not answer within {timeout:g} s: "
                               f"{sorted(left)[:5]}")
        return results


def _port_up(ofp: Any, port: Any) -> bool:
    """A port carries traffic if it is neither administratively down nor without link."""
    return not (port.state & ofp.OFPPS_LINK_DOWN) and not (port.config & ofp.OFPPC_PORT_DOWN)


def _flow_request(dp: Any, cookie: int, mask: int) -> Any:
    """Flow entries with instructions and counters: FLOW_DESC on 1.5, FLOW on 1.3."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    cls = (parser.OFPFlowDescStatsRequest if ofp.OFP_VERSION >= ofproto_v1_5.OFP_VERSION
           else parser.OFPFlowStatsRequest)
    return cls(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, cookie, mask,
               parser.OFPMatch())
