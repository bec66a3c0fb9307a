"""Fault injection on a running ``Lab``: break a named part of the fabric on a schedule, mend it.

    from testbed.faultspec import Fault, random_schedule
    from testbed.shell.faults import FaultInjector

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
``link-flap``      down/up every ``period/2`` seconds (each phase stretched by up to
                   ``jitter``, seeded), ``count`` times, then left up.
``link-degrade``   the HTB class of *both* ends changed to ``fraction`` x its rate
                   (``tc class change``), read back, and the exact previous rate restored.
``nic-loss``       random loss of IPv4 frames (not ARP) on a host NIC, inside the host's
                   namespace, with an nftables table ``astral_lab_faults`` (netdev
                   ingress/egress hooks on the NIC; iptables ``statistic`` as a fallback).
``gray-loss``      random loss of IPv4 frames on one cable (a lane or a NIC link), one way or
                   both, at the sending end's netdev egress hook (switch ports in the root
                   namespace, a NIC in its host's): one nftables table and sink veth per end.
``corruption``     IPv4 frames on one cable leave with a bad header checksum (an nft payload
                   statement at each end's egress hook); the receiving host's IP layer drops
                   and counts them (``InHdrErrors``).
``switch-down``    every link of a switch down (those that were up), restored after.
``partial-blackhole`` OpenFlow drop rules (``ovs-ofctl``, cookie ``OF_COOKIE``, above every
                   controller rule) on one switch for ``share`` of the UDP source ports
                   (masked ``udp_src`` matches): some QPs stall, pings pass.
``mtu-mismatch``   ``ip link set mtu`` on the upper-tier end of a link: frames into it above
                   ``mtu`` are dropped (counted); the port's and its bridge's MTUs restored.
``shuffle-miswiring`` two lanes of one leaf's shuffled uplink crossed: their spine-side ports
                   trade bridges and OpenFlow numbers (one ``ovs-vsctl`` transaction, QoS and
                   HTB kept): traffic flows through the wrong spine; the wiring check finds it.
``controller-kill`` / ``controller-restart``  ``Lab.kill_controller`` / ``restart_controller``.
``hot-receiver``   incast onto one host: the per-source shares of an MoE dispatch whose hot
                   experts sit on the target's GPU (``traffic.workload`` + ``traffic.kernels``),
                   played as steady UDP streams (``testbed.shell.probe``) at ``overload`` x its NIC.

**One module per kind.** Each kind's injector half is ``testbed/shell/faults/<name>.py``
(name = module name with ``_`` written ``-``), found in ``INJECTORS`` as every plug-in is
found (``vocab.plugins``). What it implements is ``InjectorModule``; what it may use of the
running lab is the ``FaultContext`` the injector hands it (commands in a namespace, a
link's state, the event log, the nic-loss backend, nft counters and rule probes), never
the injector itself. The kind's
pure half, which makes it a ``Fault`` kind at all (its target, its rules, its random
knobs), is ``testbed/faultkinds/<name>.py`` (see there why the two halves are two files);
a new kind is that pair of new files.

Where things live (import each name from its own module): the pure
parts, unit-tested without root (``Fault`` and its validation, targets, the
``nft``/``iptables`` commands, the incast's shape, ``random_schedule``), are in
``testbed.faultspec`` and ``testbed.faultkinds``; this package runs them on a lab
(``FaultInjector``; link-degrade's ``tc`` lines, which come from the lab's own shaping, are
in ``link_degrade``). Removing what a crashed run left (``cleanup_faults``) belongs to
``testbed.shell.cleanup``, which sits below this package: it sweeps what every kind leaves
by ``testbed.faultmarks``' names and calls each kind's ``clean_crashed`` hook from
``INJECTORS``, handed to it (``astral-lab clean`` does); the probes of what
the nftables kinds need (``loss_backend_problems``, ``nft_rules_problem``) sit with the
other capability probes in ``testbed.shell.preflight``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from testbed import daemons
from testbed.faultkinds import FAULT_KINDS
from testbed.faultmarks import NFT_FAMILY
from testbed.faultspec import Fault, link_ends, parse_target, resolve
from testbed.shell import procs
from testbed.shell.preflight import LabError, loss_backend_problems, nft_rules_problem
from traffic.shell.running import RunningLab
from vocab.plan import Link, WiringPlan
from vocab.plugins import Plugin, Plugins

__all__ = [
    "FaultContext", "FaultError", "FaultInjector", "Handle", "INJECTORS", "InjectorModule",
    "ScheduleRun",
]


class FaultError(LabError):
    """A fault cannot be applied or undone here; the message says what is missing or wrong."""


@dataclass(eq=False)
class Handle:
    """One injected fault: its resolved description, state and what undo needs.

    A kind module keeps what its undo needs in ``info`` (and the inject event's detail in
    ``info["detail"]``); a background ``worker`` waits with ``pause`` and stops when it
    says the fault is being undone.
    """

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

    @property
    def stopping(self) -> bool:
        """True once the fault is being undone: a worker returns."""
        return self._stop.is_set()

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` of the injector's clock; True if the fault is being undone
        meanwhile (then return at once)."""
        return _pause(self._stop, seconds, self._clock)

    def now(self) -> float:
        """The injector's clock: a worker that keeps a schedule reads it once and then
        ``pause_until`` each planned instant, so the time its own commands take is not
        added to every later phase."""
        return self._clock()

    def pause_until(self, instant: float) -> bool:
        """``pause`` until the injector's clock reads ``instant`` (at once if it has)."""
        return _pause(self._stop, instant - self._clock(), self._clock)

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


class FaultContext:
    """What a kind's injector module may use of the running lab (the injector hands it one).

    ``lab`` and ``plan`` are the running ``Lab`` and its wiring plan; the methods are the
    shell work every kind shares. A kind module needs nothing else from the injector, so
    the injector's own bookkeeping (handles, locks, schedules) stays its own.
    """

    def __init__(self, lab: RunningLab, *, nic_loss_backend: str,
                 record: Callable[..., dict[str, Any]]) -> None:
        self.lab = lab
        self.plan: WiringPlan = lab.plan
        self.nic_loss_backend = nic_loss_backend
        self._record = record

    def sh(self, argv: list[str], host: str | None = None, stdin: str | None = None,
           check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` where node ``host``'s interfaces are: a GPU's namespace (``mnexec
        -a``: thread-safe, unlike the host's interactive shell), a switch's daemon
        (``testbed.shell.switch_daemons``: its namespace, its ``ovs-*`` sockets), or the root
        namespace (None); ``FaultError`` when it fails and ``check``."""
        if host is None:
            cmd = argv
        elif host in self.lab.hosts:
            cmd = ["mnexec", "-a", str(self.lab.hosts[host].pid), *argv]
        else:
            d = daemons.of(self.lab, host)
            cmd = d.ns(d.ovs(argv))
        proc = procs.run(cmd, stdin=stdin, timeout=60)
        if check and proc.returncode != 0:
            where = f" in {host}'s namespace" if host in self.lab.hosts else ""
            raise FaultError(f"`{' '.join(argv[:8])}`{where} failed: "
                             f"{(proc.stderr or proc.stdout).strip()[:300]}")
        return proc

    def on(self, node: str | None) -> Callable[..., subprocess.CompletedProcess[str]]:
        """``sh`` bound to where ``node``'s interfaces are, for helpers that take a runner
        (``cleanup.intf_state``, ``partial_blackhole.blackhole_rules``, ...)."""
        def run(argv: list[str], _host: str | None = None, stdin: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
            return self.sh(argv, node, stdin=stdin, check=check)

        return run

    def link_target(self, handle: Handle) -> tuple[Link, int]:
        """The plan link and lane index a link fault targets, also kept in ``handle.info``
        (``link``, ``lane``) for its undo."""
        t = parse_target(self.plan, handle.fault.target)
        assert t.link is not None
        handle.info.update(link=t.link, lane=t.lane)
        return t.link, t.lane

    def admin_up(self, node: str, intf: str, in_host: bool) -> bool:
        """Is the interface administratively up (``ip link set ... up``)? (An end as
        ``faultspec.link_ends`` gives it.)"""
        out = self.sh(["ip", "-j", "link", "show", "dev", intf], node)
        return "UP" in json.loads(out.stdout)[0].get("flags", [])

    def link_up(self, link: Link) -> bool:
        """Are both ends of ``link`` administratively up?"""
        return all(self.admin_up(n, i, h) for n, i, h in link_ends(self.plan, link))

    def event(self, handle: Handle, action: str, **detail: Any) -> dict[str, Any]:
        """Log what the fault did now (``flap-down``, ...) in the injector's event log."""
        return self._record(handle, action, **detail)

    def nft_counters(self, table: str, host: str | None = None) -> dict[str, int]:
        """``chain -> packets`` of the counters in nft table ``table`` (netdev family), in
        ``host``'s namespace or the root one: what a fault's rules matched. Empty when the
        table is gone or unreadable."""
        proc = self.sh(["nft", "-j", "list", "table", NFT_FAMILY, table], host, check=False)
        out: dict[str, int] = {}
        with contextlib.suppress(ValueError, KeyError, TypeError):
            for item in json.loads(proc.stdout)["nftables"]:
                rule = item.get("rule")
                for expr in (rule or {}).get("expr", []):
                    if "counter" in expr:
                        out[rule["chain"]] = int(expr["counter"]["packets"])
        return out

    def require_nft(self, kind: str, rules: Callable[[str], tuple[list[list[str]], str]]
                    ) -> None:
        """``FaultError`` unless nftables here loads the rules ``rules(dev)`` gives (setup
        argv list, ``nft -f`` script), probed once per ``kind`` (``nft_rules_problem``)."""
        why = nft_rules_problem(kind, rules)
        if why:
            raise FaultError(f"{kind} needs nftables with the netdev egress hook (Linux >= "
                             f"5.16, nft >= 1.0.1), which cannot load its rules here: {why}")

    def loss_backend(self) -> str:
        """The nic-loss backend: the injector's ``nic_loss_backend``, or for "auto" the first
        of nftables and iptables this machine can use; ``FaultError`` naming what is
        missing when none can be."""
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


class InjectorModule(Protocol):
    """What a kind's injector module (``testbed/shell/faults/<name>.py``) implements.

    ``apply`` and ``revert`` are required; ``worker``, ``check`` and ``clean_crashed`` are
    optional (left out, the default each names).
    """

    worker: Callable[[FaultContext, Handle], None] | None = None
    """``worker(ctx, handle)``: background work in its own thread after ``apply`` (a flap's
    flapping, a restart's downtime), waiting with ``handle.pause``; the fault is undone
    when it returns. Left out, a fault with a ``duration`` gets a timer."""
    check: Callable[[FaultContext, Fault], None] | None = None
    """``check(ctx, fault)``: raise ``FaultError`` before anything changes when this machine
    or lab cannot carry the kind (no controller, no shaping, no nftables or iptables)."""
    clean_crashed: Callable[[Callable[[str], bool]], Mapping[str, int]] | None = None
    """``clean_crashed(theirs)``: remove what faults of this kind left on the machine when
    the run that injected them died before its undo, for the runs ``theirs(run_id)``
    accepts (its own marks say whose: a bridge's tag, a port's alias), in the root
    namespace (``testbed.shell.cleanup.root_sh``); return how many of what it put right
    (``{"switches": 1}``, ``{"ports": 2}``), which ``cleanup.cleanup_faults`` adds up. Left
    out, nothing: what every kind leaves by ``testbed.faultmarks``' names (nft tables,
    sink veths, iptables chains, marked processes) is swept for all of them, and what
    lives on the lab's interfaces goes with them."""

    def apply(self, ctx: FaultContext, handle: Handle) -> None:
        """Make the change (``handle.fault`` is resolved; put what undo needs in
        ``handle.info``, and the inject event's detail in ``handle.info["detail"]``).
        Raise ``FaultError`` and leave nothing changed if it cannot be done."""

    def revert(self, ctx: FaultContext, handle: Handle) -> dict[str, Any]:
        """Restore the exact previous state, checked; the dict is the undo event's detail."""


@dataclass(frozen=True)
class Injector(Plugin):
    """A kind's injector module read against ``InjectorModule``."""

    CONTRACT = InjectorModule

    def clean_crashed(self, theirs: Callable[[str], bool]) -> dict[str, int]:
        """The module's ``clean_crashed``: what it put right, by what (none when it has
        no such hook)."""
        fn = self.hook("clean_crashed")
        return {} if fn is None else dict(fn(theirs))


#: Every kind's injector, by kind name, in the order of ``FAULT_KINDS`` (its kinds' ``ORDER``),
#: then any others by name. A kind with no injector here cannot be injected (``FaultError``).
INJECTORS: Plugins[Injector] = Plugins("fault injector", __name__, Injector,
                                       follow=FAULT_KINDS)


def _injector(name: str) -> Injector:
    """The injector of kind ``name``; ``FaultError`` if there is none."""
    found = INJECTORS.find(name)
    if found is None:
        raise FaultError(f"{name}: no injector for this kind (testbed/shell/faults/"
                         f"{name.replace('-', '_')}.py is missing)")
    return found


# ----------------------------------------------------------------------------------------
# The injector (shell)
# ----------------------------------------------------------------------------------------
class FaultInjector:
    """Applies ``Fault``s to a running ``Lab`` and undoes them; a context manager.

    Every change is logged in ``events`` (dicts: ``time`` = ``time.time()``, ``kind``,
    ``component``, ``action`` in inject / undo / flap-down / flap-up / error, ``fault_id``,
    and ``detail`` where there is something to say; an inject also has ``apply_start``,
    when its apply began, ``time`` being when it ended). Leaving the ``with`` block (also on
    an exception or Ctrl-C) stops running schedules and undoes every active fault.

    ``nic_loss_backend``: "auto" (nftables, else iptables), "nft" or "iptables".
    ``clock`` is the monotonic time source for durations, flaps and schedules.
    """

    def __init__(self, lab: RunningLab, *, nic_loss_backend: str = "auto",
                 clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] | None = None) -> None:
        if nic_loss_backend not in ("auto", "nft", "iptables"):
            raise ValueError("nic_loss_backend must be auto, nft or iptables "
                             f"(got {nic_loss_backend!r})")
        self.lab = lab
        self.plan: WiringPlan = lab.plan
        self.nic_loss_backend = nic_loss_backend
        #: what the kind modules get: the lab's shell, links, event log and loss backend
        self.context = FaultContext(lab, nic_loss_backend=nic_loss_backend, record=self._event)
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

    def _event(self, handle: Handle, action: str, *, apply_start: float | None = None,
               **detail: Any) -> dict[str, Any]:
        ev = {"time": time.time(), "kind": handle.fault.kind, "component": handle.component,
              "action": action, "fault_id": handle.id}
        if apply_start is not None:  # an inject: its apply ran from then to ``time``
            ev["apply_start"] = apply_start
        if detail:
            ev["detail"] = detail
        with self._lock:
            self._events.append(ev)
        self.log(f"fault {handle.id} {handle.fault.kind} {handle.component}: {action}")
        return ev

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
        apply_start = time.time()  # the fault may act from here: scoring's window opens
        try:
            _injector(fault.kind).module.apply(self.context, handle)
        except BaseException:
            with self._lock:
                del self._handles[handle.id]
            handle._done.set()
            raise
        handle.injected_at = time.time()
        self._event(handle, "inject", apply_start=apply_start,
                    **handle.info.get("detail", {}))
        work = self._worker_for(handle)
        if work is not None:
            handle._worker = threading.Thread(target=self._run_worker, args=(handle, work),
                                              name=f"fault-{handle.id}", daemon=True)
            handle._worker.start()
        return handle

    def _check_capability(self, fault: Fault) -> None:
        check = _injector(fault.kind).hook("check")
        if check is not None:
            check(self.context, fault)

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
            detail = _injector(handle.fault.kind).module.revert(self.context, handle)
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
        work = _injector(handle.fault.kind).hook("worker")
        if work is not None:
            return lambda h: work(self.context, h)
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
        handle.pause(handle.fault.span or 0.0)

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
