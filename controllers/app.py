"""The os-ken controller app: a thin shell over ``routing`` and ``ofmsgs``.

When a switch connects, the app looks its DPID up in the wiring plan, sends it
its whole program (wipe, select groups, routes, table-miss drop) and a barrier;
the barrier reply marks the switch programmed. The fabric is *converged* when
every switch of the plan is programmed without an OpenFlow error. Nothing is
learned from packets: the plan is the truth, so the app needs no packet-ins.

Run it with ``astral-lab controller --plan plan.json`` (or ``python -m
controllers.run``); it serves ``GET /health`` and ``GET /topology`` on
127.0.0.1 so the bring-up code, and a curious user, can see its state.
"""

from __future__ import annotations

import logging
import threading
import time
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

from controllers.ofmsgs import DEFAULT_SELECT_METHOD, switch_program
from controllers.routing import compute_routes
from testbed.plan import WiringPlan

LOG = logging.getLogger("astral.controller")

#: Set by ``controllers.run`` before os-ken instantiates the app (os-ken builds apps itself).
SETTINGS: dict[str, Any] = {"plan": None, "select_method": DEFAULT_SELECT_METHOD}


class FabricState:
    """What the controller knows, readable from the REST threads under a lock."""

    def __init__(self, plan: WiringPlan, select_method: str = DEFAULT_SELECT_METHOD) -> None:
        self.plan = plan
        self.select_method = select_method
        self.lock = threading.Lock()
        self.started = time.time()
        self.expected = {int(s.dpid, 16): s.name for s in plan.switches if s.dpid}
        self.connected: dict[int, int] = {}  # dpid -> OpenFlow version
        self.programmed: dict[int, float] = {}  # dpid -> time programmed
        self.pending: dict[int, int] = {}  # dpid -> barrier xid
        self.errors: list[dict[str, Any]] = []
        self.unknown: set[int] = set()
        self.converged_at: float | None = None

    def health(self) -> dict[str, Any]:
        with self.lock:
            missing = [n for d, n in sorted(self.expected.items()) if d not in self.programmed]
            versions = sorted({v for d, v in self.connected.items() if d in self.expected})
            return {
                "status": "ok",
                "converged": not missing and not self.errors,
                "switches": {
                    "expected": len(self.expected),
                    "connected": len([d for d in self.connected if d in self.expected]),
                    "programmed": len(self.programmed),
                },
                "not_programmed": missing[:20],
                "unknown_dpids": [f"{d:016x}" for d in sorted(self.unknown)],
                "openflow_versions": [{4: "1.3", 6: "1.5"}.get(v, str(v)) for v in versions],
                # select groups carry the hash-fields property only on OpenFlow 1.5
                "groups_hash_ports": bool(versions) and min(versions) >= ofproto_v1_5.OFP_VERSION,
                "select_method": self.select_method,
                "errors": self.errors[-10:],
                "uptime_s": round(time.time() - self.started, 3),
                "converged_after_s": (round(self.converged_at - self.started, 3)
                                      if self.converged_at else None),
                "topology": self.plan.topology,
            }


class AstralController(app_manager.OSKenApp):
    """Proactive shortest-path ECMP over the wiring plan (see module docstring)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION, ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plan = SETTINGS["plan"]
        if plan is None:
            raise RuntimeError("controllers.app.SETTINGS['plan'] must be set before start")
        self.plan: WiringPlan = plan
        self.state = FabricState(plan, SETTINGS.get("select_method") or DEFAULT_SELECT_METHOD)
        self.routes = compute_routes(plan)
        LOG.info("plan %s: %d switches, %d hosts", plan.topology, len(self.state.expected),
                 len(plan.hosts))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        name = self.state.expected.get(dp.id)
        if name is None:
            LOG.warning("switch %016x is not in the plan; leaving it alone", dp.id)
            with self.state.lock:
                self.state.unknown.add(dp.id)
            return
        with self.state.lock:
            self.state.connected[dp.id] = dp.ofproto.OFP_VERSION
            self.state.programmed.pop(dp.id, None)
            self.state.converged_at = None
        msgs = switch_program(dp, self.routes[name], method=self.state.select_method)
        for m in msgs:
            dp.send_msg(m)
        barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.set_xid(barrier)
        with self.state.lock:
            self.state.pending[dp.id] = barrier.xid
        dp.send_msg(barrier)
        LOG.info("%s (%016x, OpenFlow 0x%02x): sent %d messages", name, dp.id,
                 dp.ofproto.OFP_VERSION, len(msgs))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev: Any) -> None:
        dp = ev.msg.datapath
        with self.state.lock:
            if self.state.pending.get(dp.id) != ev.msg.xid:
                return
            del self.state.pending[dp.id]
            self.state.programmed[dp.id] = time.time()
            if len(self.state.programmed) == len(self.state.expected) and not self.state.errors:
                self.state.converged_at = time.time()
                LOG.info("fabric converged: %d switches programmed", len(self.state.expected))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev: Any) -> None:
        msg = ev.msg
        name = self.state.expected.get(msg.datapath.id, f"{msg.datapath.id:016x}")
        err = {"switch": name, "type": msg.type, "code": msg.code,
               "data": bytes(msg.data[:64]).hex()}
        LOG.error("OpenFlow error from %s: type=%s code=%s", name, msg.type, msg.code)
        with self.state.lock:
            self.state.errors.append(err)

    @set_ev_cls(ofp_event.EventOFPStateChange, [DEAD_DISPATCHER])
    def on_disconnect(self, ev: Any) -> None:
        dp = ev.datapath
        if dp.id is None:
            return
        with self.state.lock:
            self.state.connected.pop(dp.id, None)
            self.state.programmed.pop(dp.id, None)
            self.state.pending.pop(dp.id, None)
            self.state.converged_at = None
        LOG.warning("switch %016x disconnected", dp.id)
