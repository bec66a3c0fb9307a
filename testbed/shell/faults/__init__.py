"""Fault injection on a running ``Lab``: break a named part of the fabric on a schedule, mend it.

    from testbed.shell.faults import Fault, FaultInjector, random_schedule

    with Lab(plan) as lab, FaultInjector(lab) as inj:
        h = inj.inject(Fault("link-degrade", "lf0r1~spine2#0", fraction=0.25))
        ...                                     # measure: the lane now carries 1/4 of its rate
        inj.undo(h)                             # the exact previous rate is back
        run = inj.run_schedule(random_schedule(plan, n=8, duration_s=120, seed=1))
        run.wait()                              # run.events is the ground truth, with times
    # leaving the block undoes whatever is still active, also on an error or Ctrl-C

Why a package of its own: the operations layer (telemetry, detectors, the diagnosis
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

**One module per kind.** Each kind's injector half is ``testbed/shell/faults/<name>.py``
(name = module name with ``_`` written ``-``), found by ``kinds()`` as the load-balancing
policies and the detectors are found. ``FaultInjector`` calls it by the fault's kind:

``apply(inj, handle)``
    make the change (``handle.fault`` is resolved; put what undo needs in ``handle.info``,
    and the inject event's detail in ``handle.info["detail"]``). Raise ``FaultError`` and
    leave nothing changed if it cannot be done.
``revert(inj, handle) -> dict``
    restore the exact previous state, checked; the dict is the undo event's detail.
``worker(inj, handle)``
    (optional) background work in its own thread after ``apply`` (link-flap's flapping,
    controller-restart's downtime); the fault is undone when it returns. Without one, a
    fault with a ``duration`` gets a timer.
``check(inj, fault)``
    (optional) raise ``FaultError`` before anything changes when this machine or lab
    cannot carry the kind (no controller, no shaping, no nftables or iptables).

The module gets the injector: it runs commands through ``inj._sh`` (and the other
helpers, ``inj._link_target``, ``inj._admin_up``, ``inj._class_show``, ...), the lab
as ``inj.lab`` and the plan as ``inj.plan``; ``FaultError``, ``Handle`` and ``_pause``
are in ``_base``. The kind's pure half, which makes it a ``Fault`` kind at all (its
target, its rules, its random knobs), is ``testbed/faultkinds/<name>.py`` (see there
why the two halves are two files); a new kind is that pair of new files.

Where things live (every name is importable from here): the pure parts, unit-tested
without root (``Fault`` and its validation, targets, the ``nft``/``iptables`` commands,
the incast's shape, ``random_schedule``), are in ``testbed.faultspec`` and
``testbed.faultkinds``; this package runs them on a lab (``FaultInjector``, and
link-degrade's ``tc`` lines, which come from the lab's own shaping). Removing what a
crashed run left (``cleanup_faults``) belongs to ``testbed.shell.cleanup``, so
``astral-lab clean`` needs no injector; the nic-loss probe (``loss_backend_problems``)
sits with the other capability probes in ``testbed.shell.preflight``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from functools import cache
from types import ModuleType
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
from testbed.shell import cleanup
from testbed.shell.cleanup import cleanup_faults, fault_processes, nic_loss_leftovers
from testbed.shell.faults._base import FaultError, Handle, _pause
from testbed.shell.faults.link_degrade import degrade_commands, htb_rate_command
from testbed.shell.preflight import loss_backend_problems
from vocab.plan import Link, WiringPlan
from vocab.plugins import discover

#: Every public name, including those defined in ``faultspec``, ``faultmarks``, ``cleanup``
#: and ``preflight``: callers import them all from here.
__all__ = [
    "CONTROLLER", "DIRECTIONS", "ENV_MARK", "Fault", "FaultError", "FaultInjector", "HOT_PAYLOAD",
    "HOT_PORT", "HOT_SPORT_BASE", "Handle", "IPT_IN", "IPT_OUT", "KINDS", "MAX_HOT_SENDERS",
    "NFT_FAMILY", "NFT_TABLE", "NUMGEN_MOD", "SINK", "SINK_PEER", "ScheduleRun", "TARGET_KIND",
    "Target", "WIRE_OVERHEAD", "canonical_component", "cleanup_faults", "degrade_commands",
    "fault_processes", "hot_streams", "htb_rate_command", "incast_bytes", "incast_weights",
    "iptables_loss_commands", "kinds", "leaf_switches", "link_ends", "link_name",
    "loss_backend_problems", "nft_loss_commands", "nft_loss_script", "nic_loss_leftovers",
    "parallel_links", "parse_htb_rate", "parse_target", "random_schedule", "resolve",
    "traffic_links",
]


# ----------------------------------------------------------------------------------------
# The kinds' injector modules
# ----------------------------------------------------------------------------------------
@cache
def kinds() -> dict[str, ModuleType]:
    """Every kind's injector module, by name (module name with ``_`` written ``-``), in the
    order of ``KINDS`` (``testbed.faultkinds``), then any others by name."""
    return discover(__name__, __path__, KINDS)


def _kind(name: str) -> ModuleType:
    """The injector module of kind ``name``; ``FaultError`` if there is none."""
    mod = kinds().get(name)
    if mod is None:
        raise FaultError(f"{name}: no injector for this kind (testbed/shell/faults/"
                         f"{name.replace('-', '_')}.py is missing)")
    return mod


# ----------------------------------------------------------------------------------------
# The injector (shell)
# ----------------------------------------------------------------------------------------
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
            _kind(fault.kind).apply(self, handle)
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
        check = getattr(_kind(fault.kind), "check", None)
        if check is not None:
            check(self, fault)

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
            detail = _kind(handle.fault.kind).revert(self, handle)
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
        work = getattr(_kind(handle.fault.kind), "worker", None)
        if work is not None:
            return lambda h: work(self, h)
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

    # --- helpers of the kind modules (each calls them on the injector it is given) ----
    def _link_target(self, handle: Handle) -> tuple[Link, int]:
        t = parse_target(self.plan, handle.fault.target)
        assert t.link is not None
        handle.info.update(link=t.link, lane=t.lane)
        return t.link, t.lane

    def _class_show(self, node: str, intf: str, in_host: bool) -> str:
        out = self._sh(["tc", "class", "show", "dev", intf, "classid", "5:1"],
                       node if in_host else None).stdout.strip()
        if parse_htb_rate(out) is None:
            raise FaultError(f"link-degrade: {intf} has no HTB class 5:1 (is the lab shaped?): "
                             f"{out[:120]!r}")
        return out

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
