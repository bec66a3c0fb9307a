"""Fault injection on a running ``Lab``: break a named part of the fabric on a schedule, mend it.

    from testbed.shell.faults import Fault, FaultInjector, random_schedule

    with Lab(plan) as lab, FaultInjector(lab) as inj:
        h = inj.inject(Fault("link-degrade", "lf0r1~spine2#0", fraction=0.25))
        ...                                     # measure: the lane now carries 1/4 of its rate
        inj.undo(h)                             # the exact previous rate is back
        run = inj.run_schedule(random_schedule(plan, n=8, duration_s=120, seed=1))
        run.wait()                              # run.events is the ground truth, with times
    # leaving the block undoes whatever is still active, also on an error or Ctrl-C

Why a module of its own: the operations layer (telemetry, detectors, the diagnosis
agent and its scored evaluation) needs faults whose *where* and *when* are known
exactly, so it can score an answer. Every fault therefore has a ground-truth
``component`` named the way the wiring plan names things (a lane ``lf0r1~spine2#0``,
a switch ``spine2``, a NIC by its host ``s1g3``, or ``controller``), and every
change the injector makes is written to an event log with wall-clock times.

The kinds, and how each is realised on Linux (docs/faults.md has the long version):

``link-down``      ``Lab.set_link(..., up=False)``: both ends, so both switches see port status.
``link-flap``      down/up every ``period/2`` seconds, ``count`` times, then left up.
``link-degrade``   the HTB class of *both* ends changed to ``fraction`` x its rate
                   (``tc class change``), read back, and the exact previous rate restored.
``nic-loss``       random loss of IPv4 frames (not ARP) on a host NIC, inside the host's
                   namespace, with an nftables table ``astral_lab_faults`` (netdev
                   ingress/egress hooks on the NIC; iptables ``statistic`` as a fallback).
``switch-down``    every link of a switch down (those that were up), restored after.
``controller-kill`` / ``controller-restart``  ``Lab.kill_controller`` / ``restart_controller``.
``hot-receiver``   incast onto one host: the per-source shares of an MoE dispatch whose hot
                   experts sit on the target's GPU (``traffic.workload`` + ``traffic.kernels``),
                   played as steady UDP streams (``testbed.shell.probe``) at ``overload`` x its NIC.

Where things live (every name is importable from here): the pure parts, unit-tested
without root (``Fault`` and its validation, targets, the ``nft``/``iptables`` commands,
the incast's shape, ``random_schedule``), are in ``testbed.faultspec``; this module
runs them on a lab (``FaultInjector``, and link-degrade's ``tc`` lines, which come from
the lab's own shaping). Removing what a crashed run left (``cleanup_faults``) belongs to
``testbed.shell.cleanup``, so ``astral-lab clean`` needs no injector; the nic-loss probe
(``loss_backend_problems``) sits with the other capability probes in ``testbed.shell.preflight``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from testbed.faultmarks import (
    ENV_MARK,
    IPT_IN,
    IPT_OUT,
    NFT_FAMILY,
    NFT_TABLE,
    SINK,
    SINK_PEER,
)
from testbed.faultspec import (
    CONTROLLER,
    DIRECTIONS,
    HOT_PAYLOAD,
    HOT_PORT,
    HOT_SPORT_BASE,
    KINDS,
    MAX_HOT_SENDERS,
    NUMGEN_MOD,
    TARGET_KIND,
    WIRE_OVERHEAD,
    Fault,
    Target,
    canonical_component,
    hot_streams,
    incast_bytes,
    incast_weights,
    iptables_loss_commands,
    leaf_switches,
    link_ends,
    link_name,
    nft_loss_commands,
    nft_loss_script,
    parallel_links,
    parse_htb_rate,
    parse_target,
    random_schedule,
    resolve,
    traffic_links,
)
from testbed.plan import Link, WiringPlan
from testbed.shaping import htb_commands
from testbed.shell import cleanup
from testbed.shell.cleanup import cleanup_faults, fault_processes, nic_loss_leftovers
from testbed.shell.preflight import LabError, loss_backend_problems

#: Every public name, including those defined in ``faultspec``, ``faultmarks``, ``cleanup``
#: and ``preflight``: callers import them all from here.
__all__ = [
    "CONTROLLER", "DIRECTIONS", "ENV_MARK", "Fault", "FaultError", "FaultInjector", "HOT_PAYLOAD",
    "HOT_PORT", "HOT_SPORT_BASE", "Handle", "IPT_IN", "IPT_OUT", "KINDS", "MAX_HOT_SENDERS",
    "NFT_FAMILY", "NFT_TABLE", "NUMGEN_MOD", "SINK", "SINK_PEER", "ScheduleRun", "TARGET_KIND",
    "Target", "WIRE_OVERHEAD", "canonical_component", "cleanup_faults", "degrade_commands",
    "fault_processes", "hot_streams", "htb_rate_command", "incast_bytes", "incast_weights",
    "iptables_loss_commands", "leaf_switches", "link_ends", "link_name", "loss_backend_problems",
    "nft_loss_commands", "nft_loss_script", "nic_loss_leftovers", "parallel_links",
    "parse_htb_rate", "parse_target", "random_schedule", "resolve", "traffic_links",
]


class FaultError(LabError):
    """A fault cannot be applied or undone here; the message says what is missing or wrong."""


# ----------------------------------------------------------------------------------------
# link-degrade's tc commands (derived from the lab's own shaping, hence here)
# ----------------------------------------------------------------------------------------
def htb_rate_command(dev: str, mbps: float) -> list[str]:
    """``tc class change`` of the lab's HTB class 5:1 on ``dev`` to ``mbps``.

    Built from ``testbed.shell.lab.htb_commands`` (its ``class add`` line, verb changed) so
    burst and quantum stay exactly what bring-up used; only the rate differs.
    """
    add = next(c for c in htb_commands(dev, mbps) if c.startswith("class add "))
    return ["tc", *("class change " + add[len("class add "):]).split()]


def degrade_commands(plan: WiringPlan, link: Link, mbps: float
                     ) -> list[tuple[str | None, list[str]]]:
    """The commands that set both ends of ``link`` to ``mbps``: ``(host or None, argv)``.

    ``host`` names the namespace a host-side end lives in; None is the root namespace
    (switch ports).
    """
    return [(node if in_host else None, htb_rate_command(intf, mbps))
            for node, intf, in_host in link_ends(plan, link)]


# ----------------------------------------------------------------------------------------
# The injector (shell)
# ----------------------------------------------------------------------------------------
@dataclass(eq=False)
class Handle:
    """One injected fault: its resolved description, state and what undo needs."""

    id: int
    fault: Fault
    component: str
    injected_at: float = 0.0  # time.time()
    state: str = "active"  # active -> undoing -> undone (or failed)
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _worker: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    @property
    def active(self) -> bool:
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the fault has been undone (by a timer, a flap's end, or ``undo``)."""
        return self._done.wait(timeout)


def _pause(stop: threading.Event, seconds: float, clock: Callable[[], float]) -> bool:
    """Sleep ``seconds`` of ``clock`` time; True if ``stop`` was set meanwhile."""
    end = clock() + seconds
    while True:
        left = end - clock()
        if left <= 0:
            return stop.is_set()
        if stop.wait(min(left, 0.05)):
            return True


class FaultInjector:
    """Applies ``Fault``s to a running ``Lab`` and undoes them; a context manager.

    Every change is logged in ``events`` (dicts: ``time`` = ``time.time()``, ``kind``,
    ``component``, ``action`` in inject / undo / flap-down / flap-up / error, ``fault_id``,
    and ``detail`` where there is something to say). Leaving the ``with`` block (also on
    an exception or Ctrl-C) stops running schedules and undoes every active fault.

    ``nic_loss_backend``: "auto" (nftables, else iptables), "nft" or "iptables".
    ``clock`` is the monotonic time source for durations, flaps and schedules.
    """

    def __init__(self, lab: Any, *, nic_loss_backend: str = "auto",
                 clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] | None = None) -> None:
        if nic_loss_backend not in ("auto", "nft", "iptables"):
            raise ValueError("nic_loss_backend must be auto, nft or iptables "
                             f"(got {nic_loss_backend!r})")
        self.lab = lab
        self.plan: WiringPlan = lab.plan
        self.nic_loss_backend = nic_loss_backend
        self.clock = clock
        self.log = log or (lambda _msg: None)
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._handles: dict[int, Handle] = {}
        self._next_id = 1
        self._schedules: list[ScheduleRun] = []

    # --- context manager ---------------------------------------------------------------
    def __enter__(self) -> FaultInjector:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        errors = self.undo_all()
        if errors and exc_type is None:
            raise FaultError("could not undo every fault: " + "; ".join(errors))
        for e in errors:
            self.log(f"fault undo failed: {e}")

    # --- state -------------------------------------------------------------------------
    @property
    def events(self) -> list[dict[str, Any]]:
        """A copy of the event log, in the order things happened."""
        with self._lock:
            return [dict(e) for e in self._events]

    @property
    def active(self) -> list[Handle]:
        with self._lock:
            return [h for h in self._handles.values() if h.active]

    def _event(self, handle: Handle, action: str, **detail: Any) -> dict[str, Any]:
        ev = {"time": time.time(), "kind": handle.fault.kind, "component": handle.component,
              "action": action, "fault_id": handle.id}
        if detail:
            ev["detail"] = detail
        with self._lock:
            self._events.append(ev)
        self.log(f"fault {handle.id} {handle.fault.kind} {handle.component}: {action}")
        return ev

    # --- shell helpers -----------------------------------------------------------------
    def _sh(self, argv: list[str], host: str | None = None, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the root namespace, or in ``host``'s (``mnexec -a``: thread-safe,
        unlike the host's interactive shell)."""
        prefix = ["mnexec", "-a", str(self.lab.hosts[host].pid)] if host is not None else []
        proc = cleanup.run(prefix + argv, stdin=stdin, timeout=60)
        if check and proc.returncode != 0:
            where = f" in {host}'s namespace" if host else ""
            raise FaultError(f"`{' '.join(argv[:8])}`{where} failed: "
                             f"{(proc.stderr or proc.stdout).strip()[:300]}")
        return proc

    def _admin_up(self, node: str, intf: str, in_host: bool) -> bool:
        """Is the interface administratively up (``ip link set ... up``)?"""
        out = self._sh(["ip", "-j", "link", "show", "dev", intf], node if in_host else None)
        return "UP" in json.loads(out.stdout)[0].get("flags", [])

    def _link_up(self, link: Link) -> bool:
        return all(self._admin_up(n, i, h) for n, i, h in link_ends(self.plan, link))

    # --- inject ------------------------------------------------------------------------
    def inject(self, fault: Fault) -> Handle:
        """Apply ``fault`` now (``at`` is ignored) and return its handle.

        Checks everything first (``ValueError`` for bad input, ``FaultError`` for what
        this machine or lab cannot do, or a target that already has that fault), so a
        refused fault changes nothing. With a ``duration`` it is undone automatically.
        """
        return self._inject(fault, self.clock)

    def _inject(self, fault: Fault, clock: Callable[[], float]) -> Handle:
        fault = resolve(self.plan, fault)
        self._check_capability(fault)
        with self._lock:
            for h in self._handles.values():
                if h.active and h.fault.kind == fault.kind and h.component == fault.component:
                    raise FaultError(f"{fault.component} already has an active {fault.kind} "
                                     f"(fault {h.id}); undo it first")
            handle = Handle(self._next_id, fault, fault.component, _clock=clock)
            self._next_id += 1
            self._handles[handle.id] = handle
        try:
            getattr(self, "_apply_" + fault.kind.replace("-", "_"))(handle)
        except BaseException:
            with self._lock:
                del self._handles[handle.id]
            handle._done.set()
            raise
        handle.injected_at = time.time()
        self._event(handle, "inject", **handle.info.get("detail", {}))
        work = self._worker_for(handle)
        if work is not None:
            handle._worker = threading.Thread(target=self._run_worker, args=(handle, work),
                                              name=f"fault-{handle.id}", daemon=True)
            handle._worker.start()
        return handle

    def _check_capability(self, fault: Fault) -> None:
        lab = self.lab
        if fault.kind.startswith("controller") and not getattr(lab, "use_controller", True):
            raise FaultError(f"{fault.kind}: this lab runs no controller (Lab(controller=False))")
        if fault.kind == "link-degrade" and not getattr(lab, "shape", True):
            raise FaultError("link-degrade changes the links' HTB rate, but this lab was "
                             "brought up without shaping (Lab(shape=False))")
        if fault.kind == "nic-loss":
            self._loss_backend()

    def _loss_backend(self) -> str:
        if self.nic_loss_backend != "auto":
            why = loss_backend_problems().get(self.nic_loss_backend)
            if why:
                raise FaultError(f"nic-loss backend {self.nic_loss_backend} cannot be used "
                                 f"here: {why}")
            return self.nic_loss_backend
        problems = loss_backend_problems()
        for backend in ("nft", "iptables"):
            if not problems.get(backend):
                return backend
        raise FaultError("nic-loss needs nftables (nft with netdev ingress/egress hooks, "
                         f"Linux >= 5.16: {problems['nft']}) or iptables with the statistic "
                         f"match ({problems['iptables']}); install nftables or iptables")

    # --- undo --------------------------------------------------------------------------
    def undo(self, handle: Handle) -> None:
        """Undo one fault and restore the exact previous state. Idempotent; waits for an
        undo already under way in another thread."""
        with handle._lock:
            if handle.state != "active":
                mine = False
            else:
                handle.state = "undoing"
                mine = True
        if not mine:
            handle._done.wait()
            return
        handle._stop.set()
        worker = handle._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        try:
            detail = getattr(self, "_revert_" + handle.fault.kind.replace("-", "_"))(handle)
        except BaseException as exc:
            handle.state, handle.error = "failed", str(exc)
            self._event(handle, "error", error=str(exc))
            handle._done.set()
            raise
        handle.state = "undone"
        self._event(handle, "undo", **(detail or {}))
        handle._done.set()

    def undo_all(self) -> list[str]:
        """Stop every schedule, undo every active fault (newest first); return the errors."""
        for run in list(self._schedules):
            run.stop(undo=False)
        errors = []
        for handle in sorted(self.active, key=lambda h: -h.id):
            try:
                self.undo(handle)
            except Exception as exc:  # keep undoing the others
                errors.append(f"{handle.fault.kind} {handle.component}: {exc}")
        return errors

    # --- background work (timers, flaps, restarts) -------------------------------------
    def _worker_for(self, handle: Handle) -> Callable[[Handle], None] | None:
        kind = handle.fault.kind
        if kind == "link-flap":
            return self._flap
        if kind == "controller-restart":
            return self._timed
        return self._timed if handle.fault.duration is not None else None

    def _run_worker(self, handle: Handle, work: Callable[[Handle], None]) -> None:
        try:
            work(handle)
        except Exception as exc:
            handle.error = str(exc)
            self._event(handle, "error", error=str(exc))
        if not handle._stop.is_set():
            with contextlib.suppress(Exception):
                self.undo(handle)

    def _timed(self, handle: Handle) -> None:
        _pause(handle._stop, handle.fault.span or 0.0, handle._clock)

    def _flap(self, handle: Handle) -> None:
        f = handle.fault
        link, lane = handle.info["link"], handle.info["lane"]
        half = f.period / 2
        for i in range(f.count):
            if i and _pause(handle._stop, half, handle._clock):  # up phase of the last cycle
                return
            if handle._stop.is_set():
                return
            self.lab.set_link(link.a, link.b, up=False, lane=lane)
            handle.info["down"] = True
            self._event(handle, "flap-down", cycle=i + 1)
            if _pause(handle._stop, half, handle._clock):
                return
            self.lab.set_link(link.a, link.b, up=True, lane=lane)
            handle.info["down"] = False
            self._event(handle, "flap-up", cycle=i + 1)
        _pause(handle._stop, half, handle._clock)

    # --- schedules ---------------------------------------------------------------------
    def run_schedule(self, faults: Iterable[Fault], clock: Callable[[], float] | None = None
                     ) -> ScheduleRun:
        """Apply ``faults`` at their ``at`` (seconds after now) in a background thread.

        Every fault is resolved first, so a bad one raises ``ValueError`` before anything
        runs. Returns a ``ScheduleRun``: ``wait()``, ``stop()`` (undoes what it injected),
        ``events`` (this run's part of the log, with ``t`` = seconds since the start).
        """
        resolved = [resolve(self.plan, f) for f in faults]
        run = ScheduleRun(self, sorted(resolved, key=lambda f: f.at), clock or self.clock)
        with self._lock:
            self._schedules.append(run)
        run.start()
        return run

    # --- link-down ---------------------------------------------------------------------
    def _link_target(self, handle: Handle) -> tuple[Link, int]:
        t = parse_target(self.plan, handle.fault.target)
        assert t.link is not None
        handle.info.update(link=t.link, lane=t.lane)
        return t.link, t.lane

    def _apply_link_down(self, handle: Handle) -> None:
        link, lane = self._link_target(handle)
        handle.info["was_up"] = [self._admin_up(n, i, h) for n, i, h in
                                 link_ends(self.plan, link)]
        self.lab.set_link(link.a, link.b, up=False, lane=lane)

    def _revert_link_down(self, handle: Handle) -> dict[str, Any]:
        link, lane = handle.info["link"], handle.info["lane"]
        was = handle.info["was_up"]
        if all(was):
            self.lab.set_link(link.a, link.b, up=True, lane=lane)
        else:  # only ends that were up before come back up
            for (node, intf, in_host), up in zip(link_ends(self.plan, link), was, strict=True):
                if up:
                    self._sh(["ip", "link", "set", "dev", intf, "up"], node if in_host else None)
        return {}

    # --- link-flap ---------------------------------------------------------------------
    def _apply_link_flap(self, handle: Handle) -> None:
        link, _lane = self._link_target(handle)
        if not self._link_up(link):
            raise FaultError(f"link-flap: {handle.component} is down already; a flap needs "
                             "a link that is up")
        handle.info["down"] = False
        handle.info["detail"] = {"period": handle.fault.period, "count": handle.fault.count}

    def _revert_link_flap(self, handle: Handle) -> dict[str, Any]:
        if handle.info.get("down"):
            link, lane = handle.info["link"], handle.info["lane"]
            self.lab.set_link(link.a, link.b, up=True, lane=lane)
            handle.info["down"] = False
        return {}

    # --- link-degrade ------------------------------------------------------------------
    def _class_show(self, node: str, intf: str, in_host: bool) -> str:
        out = self._sh(["tc", "class", "show", "dev", intf, "classid", "5:1"],
                       node if in_host else None).stdout.strip()
        if parse_htb_rate(out) is None:
            raise FaultError(f"link-degrade: {intf} has no HTB class 5:1 (is the lab shaped?): "
                             f"{out[:120]!r}")
        return out

    def _apply_link_degrade(self, handle: Handle) -> None:
        link, _lane = self._link_target(handle)
        ends = link_ends(self.plan, link)
        before = [self._class_show(*end) for end in ends]
        old = [parse_htb_rate(text) or 0.0 for text in before]
        # restore the plan's exact rate when that is what runs (tc prints rates rounded)
        restore = [link.mbps if abs(r - link.mbps) <= 1e-3 * link.mbps else r for r in old]
        new = [r * handle.fault.fraction for r in restore]
        handle.info.update(before=before, restore=restore, changed=[])
        try:
            for end, mbps in zip(ends, new, strict=True):
                node, intf, in_host = end
                self._sh(htb_rate_command(intf, mbps), node if in_host else None)
                handle.info["changed"].append(end)
                got = parse_htb_rate(self._class_show(*end)) or 0.0
                if abs(got - mbps) > 0.01 * mbps:
                    raise FaultError(f"link-degrade: {intf} reads back {got:g} Mb/s after "
                                     f"setting {mbps:g}")
        except BaseException:
            self._restore_rates(handle)
            raise
        handle.info["detail"] = {"mbps_before": restore, "mbps": [round(m, 6) for m in new]}

    def _restore_rates(self, handle: Handle) -> list[str]:
        link = handle.info["link"]
        after = []
        for end in link_ends(self.plan, link):
            if end not in handle.info["changed"]:
                continue
            i = link_ends(self.plan, link).index(end)
            node, intf, in_host = end
            self._sh(htb_rate_command(intf, handle.info["restore"][i]), node if in_host else None)
            after.append(self._class_show(*end))
        return after

    def _revert_link_degrade(self, handle: Handle) -> dict[str, Any]:
        after = self._restore_rates(handle)
        for was, now, mbps in zip(handle.info["before"], after, handle.info["restore"],
                                  strict=True):
            got = parse_htb_rate(now) or 0.0
            # exact when the plan's rate was running; a rate tc printed rounded (6666Kbit)
            # can only come back to within its rounding
            if now != was and abs(got - mbps) > 1e-3 * mbps:
                raise FaultError(f"link-degrade: {handle.component} did not return to its "
                                 f"previous class: {was!r} -> {now!r}")
        return {"mbps": handle.info["restore"]}

    # --- nic-loss ----------------------------------------------------------------------
    def _apply_nic_loss(self, handle: Handle) -> None:
        f = handle.fault
        host = f.target
        dev = next(ln.a_intf for ln in self.plan.links if ln.a == host)
        backend = self._loss_backend()
        handle.info.update(host=host, backend=backend)
        if backend == "nft":
            setup, script, undo = nft_loss_commands(dev, f.probability, f.direction)
        else:
            setup, undo = iptables_loss_commands(dev, f.probability, f.direction)
            script = None
        handle.info["undo"] = undo
        try:
            for argv in setup:
                self._sh(argv, host)
            if script is not None:
                self._sh(["nft", "-f", "-"], host, stdin=script)
        except BaseException:
            for argv in undo:
                self._sh(argv, host, check=False)
            raise
        handle.info["detail"] = {"probability": f.probability, "direction": f.direction,
                                 "backend": backend}

    def _loss_counters(self, host: str, backend: str) -> dict[str, int]:
        """Frames the fault's rules dropped, per direction."""
        out: dict[str, int] = {}
        if backend == "nft":
            proc = self._sh(["nft", "-j", "list", "table", NFT_FAMILY, NFT_TABLE], host,
                            check=False)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                for item in json.loads(proc.stdout)["nftables"]:
                    rule = item.get("rule")
                    for expr in (rule or {}).get("expr", []):
                        if "counter" in expr:
                            out[rule["chain"]] = int(expr["counter"]["packets"])
        else:
            for chain, name in ((IPT_IN, "ingress"), (IPT_OUT, "egress")):
                proc = self._sh(["iptables", "-w", "-L", chain, "-v", "-n", "-x"], host,
                                check=False)
                rows = [ln.split() for ln in proc.stdout.splitlines()[2:] if ln.strip()]
                if rows and rows[0][0].isdigit():
                    out[name] = int(rows[0][0])
        return out

    def _revert_nic_loss(self, handle: Handle) -> dict[str, Any]:
        host, backend = handle.info["host"], handle.info["backend"]
        dropped = self._loss_counters(host, backend)
        for argv in handle.info["undo"]:
            self._sh(argv, host, check=False)
        left = nic_loss_leftovers(self._sh, host)
        if left:
            raise FaultError(f"nic-loss on {host}: still present after undo: {left}")
        return {"dropped": dropped}

    # --- switch-down -------------------------------------------------------------------
    def _apply_switch_down(self, handle: Handle) -> None:
        sw = handle.fault.target
        taken: list[tuple[Link, int]] = []
        handle.info["taken"] = taken
        links = [ln for ln in self.plan.links if sw in (ln.a, ln.b)]
        try:
            for link in links:
                lane = parallel_links(self.plan, link.a, link.b).index(link)
                if self._link_up(link):
                    self.lab.set_link(link.a, link.b, up=False, lane=lane)
                    taken.append((link, lane))
        except BaseException:
            self._revert_switch_down(handle)
            raise
        handle.info["detail"] = {"links_down": len(taken), "links": len(links)}

    def _revert_switch_down(self, handle: Handle) -> dict[str, Any]:
        for link, lane in reversed(handle.info["taken"]):
            self.lab.set_link(link.a, link.b, up=True, lane=lane)
        return {"links_up": len(handle.info["taken"])}

    # --- controller --------------------------------------------------------------------
    def _apply_controller_kill(self, handle: Handle) -> None:
        proc = getattr(self.lab, "controller_proc", None)
        if proc is None:
            raise FaultError(f"{handle.fault.kind}: the controller is not running")
        handle.info["detail"] = {"pid": proc.pid}
        self.lab.kill_controller()

    def _revert_controller_kill(self, handle: Handle) -> dict[str, Any]:
        self.lab.restart_controller(wait=True)
        proc = getattr(self.lab, "controller_proc", None)
        return {"pid": proc.pid if proc is not None else None}

    _apply_controller_restart = _apply_controller_kill
    _revert_controller_restart = _revert_controller_kill

    # --- hot-receiver ------------------------------------------------------------------
    def _apply_hot_receiver(self, handle: Handle) -> None:
        f = handle.fault
        streams = hot_streams(self.plan, f, HOT_SPORT_BASE + MAX_HOT_SENDERS * (handle.id % 64))
        lab = self.lab
        tag = f"{getattr(lab, 'run_id', 'lab')}:{handle.id}"
        env = dict(os.environ, **{ENV_MARK: tag})
        seconds = (f.duration + 5.0) if f.duration is not None else 24 * 3600.0  # bounded
        out = os.path.join(lab.workdir, f"hot-{handle.id}-{uuid.uuid4().hex[:6]}.json")
        py = [sys.executable, "-m", "testbed.shell.probe"]
        procs: list[subprocess.Popen[bytes]] = []
        handle.info.update(procs=procs, out=out, streams=streams)
        try:
            recv = lab.hosts[f.target].popen(
                py + ["recv", "--port", str(HOT_PORT), "--out", out,
                      "--duration", f"{seconds:.1f}"], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            procs.append(recv)
            handle.info["recv"] = recv
            deadline = time.monotonic() + 15
            while not os.path.exists(out + ".ready"):
                if recv.poll() is not None or time.monotonic() > deadline:
                    raise FaultError(f"hot-receiver: receiver on {f.target} did not start")
                time.sleep(0.02)
            ip = self.plan.node(f.target).ip
            for s in streams:
                procs.append(lab.hosts[s["src"]].popen(
                    py + ["send", "--dst", str(ip), "--port", str(HOT_PORT),
                          "--sports", str(s["sport"]), "--pps", str(s["pps"]),
                          "--duration", f"{seconds:.1f}", "--size", str(HOT_PAYLOAD)],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except BaseException:
            self._stop_hot(handle)
            raise
        handle.info["detail"] = {"sources": [s["src"] for s in streams],
                                 "offered_mbps": round(sum(s["mbps"] for s in streams), 3)}

    def _stop_hot(self, handle: Handle) -> None:
        procs = handle.info.get("procs", [])
        recv = handle.info.get("recv")
        for p in procs:
            if p is not recv and p.poll() is None:
                p.kill()
        for p in procs:
            if p is not recv:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
        if recv is not None and recv.poll() is None:
            time.sleep(0.2)  # packets in flight land
            recv.send_signal(signal.SIGTERM)
            try:
                recv.wait(timeout=5)
            except subprocess.TimeoutExpired:
                recv.kill()
                recv.wait()

    def _revert_hot_receiver(self, handle: Handle) -> dict[str, Any]:
        self._stop_hot(handle)
        left = [p.pid for p in handle.info["procs"] if p.poll() is None]
        if left:
            raise FaultError(f"hot-receiver: processes still running: {left}")
        received: dict[str, int] = {}
        src_of = {str(s["sport"]): s["src"] for s in handle.info["streams"]}
        with contextlib.suppress(OSError, ValueError), open(handle.info["out"]) as fh:
            for sport, flow in json.load(fh).get("flows", {}).items():
                if sport in src_of:
                    received[src_of[sport]] = int(flow["received"])
        handle.info["received"] = received
        return {"received_packets": received}


class ScheduleRun:
    """A schedule running in a background thread (see ``FaultInjector.run_schedule``)."""

    def __init__(self, injector: FaultInjector, faults: list[Fault],
                 clock: Callable[[], float]) -> None:
        self.injector = injector
        self.faults = faults
        self.clock = clock
        self.handles: list[Handle] = []
        self.errors: list[str] = []
        self.started = 0.0  # time.time() at the start
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-schedule", daemon=True)
        self._injected = threading.Event()
        self._error_events: list[dict[str, Any]] = []

    def start(self) -> None:
        self.started = time.time()
        self._t0 = self.clock()
        self._thread.start()

    def _run(self) -> None:
        for fault in self.faults:
            if _pause(self._stop, fault.at - (self.clock() - self._t0), self.clock):
                break
            try:
                self.handles.append(self.injector._inject(fault, self.clock))
            except Exception as exc:  # logged; the schedule carries on
                self.errors.append(f"{fault.kind} {fault.target} at {fault.at:g} s: {exc}")
                ev = {"time": time.time(), "kind": fault.kind, "component": fault.component,
                      "action": "error", "fault_id": None, "detail": {"error": str(exc)}}
                self._error_events.append(ev)
                with self.injector._lock:
                    self.injector._events.append(ev)
        self._injected.set()

    @property
    def running(self) -> bool:
        """True until every fault was injected and every one with a finite span undone."""
        if not self._injected.is_set():
            return True
        return any(h.active for h in self.handles if h.fault.span is not None)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the schedule has played out (open-ended faults stay); False on timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.running:
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.05)
        return True

    def stop(self, undo: bool = True) -> list[str]:
        """Stop injecting; with ``undo``, undo every fault this run injected. Returns errors."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        with self.injector._lock:
            if self in self.injector._schedules:
                self.injector._schedules.remove(self)
        errors = []
        if undo:
            for h in reversed(self.handles):
                try:
                    self.injector.undo(h)
                except Exception as exc:
                    errors.append(f"{h.fault.kind} {h.component}: {exc}")
        return errors

    @property
    def events(self) -> list[dict[str, Any]]:
        """This run's events (those of its faults, and its errors), with ``t`` added."""
        ids = {h.id for h in self.handles}
        mine = [e for e in self.injector.events if e["fault_id"] in ids]
        out = sorted(mine + [dict(e) for e in self._error_events], key=lambda e: e["time"])
        for ev in out:
            ev["t"] = round(ev["time"] - self.started, 4)
        return out
