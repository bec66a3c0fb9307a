"""The collector: polls a running fabric every ``interval`` seconds into the telemetry store.

The shell half of ``ops.telemetry`` (what one poll reads is described there): it runs
``tc``, reads ``/proc`` and ``/sys`` and the hosts' namespaces, and asks the controller's
REST API. Everything it produces is plain data for the pure ``Store`` and ``History``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from controllers.shell.client import ControllerClient, ControllerError
from ops.telemetry import (
    CONTROLLER,
    DEFAULT_INTERVAL_S,
    History,
    Rates,
    Store,
    parse_proc_net_dev,
    parse_snmp,
    parse_tc_qdisc,
)
from testbed.daemons import running_namespaces
from traffic import rxsink
from traffic.shell.running import RunningLab
from vocab.plan import WiringPlan, link_components


def read_kernel_file(path: str) -> str | None:
    """A /proc or /sys file's text, or None if it cannot be read (the process or link went).

    Public as a seam: every kernel counter the collector reads comes through here, so a test
    can feed it a host's /proc files without a running fabric."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_tc(netns: str | None = None) -> dict[str, dict[str, int]]:
    """Every qdisc's counters in the root namespace or ``netns``."""
    where = ["-n", netns] if netns else []
    proc = subprocess.run(["tc", *where, "-s", "-j", "qdisc", "show"], capture_output=True,
                          text=True, timeout=10, check=False)
    try:
        return parse_tc_qdisc(json.loads(proc.stdout or "[]"))
    except ValueError:
        return {}


def read_link_state(netns: str) -> dict[str, tuple[str, int | None]]:
    """``interface -> (operstate, carrier changes)`` in ``netns``, where this process's
    ``/sys/class/net`` cannot look (a switch daemon's namespace:
    ``testbed.shell.switch_daemons``)."""
    proc = subprocess.run(["ip", "-n", netns, "-j", "-s", "-s", "link", "show"],
                          capture_output=True, text=True, timeout=10, check=False)
    return parse_link_state(proc.stdout)


#: What a port source reads: ``tc`` qdiscs, ``/proc/net/dev`` rows and link states.
Ports = tuple[dict[str, dict[str, int]], dict[str, dict[str, int]],
              dict[str, tuple[str, int | None]]]
#: One shell command printing all three on a server (``cluster_source``), parts split by it
_SPLIT = "--astral-ports--"
PORTS_SCRIPT = (f"tc -s -j qdisc show; echo {_SPLIT}; cat /proc/net/dev; echo {_SPLIT}; "
                "ip -j -s -s link show")


def netns_source(netns: str, pid: int) -> Callable[[], Ports]:
    """The ports of a switch daemon's namespace, read from here (``pid`` is in it)."""
    def read() -> Ports:
        return (read_tc(netns),
                parse_proc_net_dev(read_kernel_file(f"/proc/{pid}/net/dev") or ""),
                read_link_state(netns))

    return read


def running_sources() -> list[Callable[[], Ports]]:
    """A source for each switch daemon running on this machine: how a process that did not
    build the lab (the live view, ``ops watch``) reads their ports."""
    return [netns_source(ns, pid) for ns, pid in running_namespaces().items()]


def cluster_source(run: Callable[[list[str]], Any]) -> Callable[[], Ports]:
    """The ports of another server of a cluster, in one command over ``run`` (its SSH
    runner: ``ClusterLab.run_on``) per poll; nothing when the server does not answer."""
    def read() -> Ports:
        out = run(["sh", "-c", PORTS_SCRIPT])
        parts = (getattr(out, "stdout", "") or "").split(_SPLIT)
        if getattr(out, "returncode", 1) != 0 or len(parts) != 3:
            return {}, {}, {}
        try:
            tc = parse_tc_qdisc(json.loads(parts[0] or "[]"))
        except ValueError:
            tc = {}
        return tc, parse_proc_net_dev(parts[1].lstrip("\n")), parse_link_state(parts[2])

    return read


def parse_link_state(text: str) -> dict[str, tuple[str, int | None]]:
    """``ip -j -s -s link show`` as ``interface -> (operstate, carrier changes)``."""
    out: dict[str, tuple[str, int | None]] = {}
    try:
        for row in json.loads(text or "[]"):
            changes = row.get("stats64", {}).get("tx", {}).get("carrier_changes")
            out[row["ifname"]] = (str(row.get("operstate", "")).lower(),
                                  int(changes) if changes is not None else None)
    except (ValueError, KeyError, TypeError):
        return {}
    return out


def host_pids_from_processes() -> dict[str, int]:
    """Host name -> PID of its Mininet shell (``bash ... mininet:<name>``), from ``/proc``.

    Lets a process that did not build the lab (``astral-lab ops watch``) read the hosts'
    namespaces; the shell is the process Mininet itself runs commands in.
    """
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        raw = read_kernel_file(f"/proc/{pid}/cmdline")
        if not raw or "mininet:" not in raw:
            continue
        for arg in raw.split("\0"):
            if arg.startswith("mininet:"):
                out[arg.split(":", 1)[1]] = int(pid)
    return out


class Collector:
    """Polls one running fabric every ``interval`` s into a ``Store`` and a ``History``.

    ``client`` is the controller's REST client (None: kernel counters only);
    ``host_pids`` maps host name -> a PID inside that host's namespace (``Lab.hosts[h].pid``);
    ``sources`` read switch ports this process's root namespace does not have: a switch
    daemon's namespace (``netns_source``; ``running_sources`` finds them) or another server
    of a cluster (``cluster_source``).
    ``on_poll(t, values)`` is called after each poll (the detectors hook in there).
    ``extra(t)`` adds values a running workload reports about itself to each poll (a MoE
    job's iterations: ``traffic.shell.moejob.MoeJob.take_values``).
    """

    def __init__(self, plan: WiringPlan, store: Store | None, *,
                 client: ControllerClient | None = None, host_pids: dict[str, int] | None = None,
                 interval: float = DEFAULT_INTERVAL_S,
                 on_poll: Callable[[float, dict[tuple[str, str], float]], None] | None = None,
                 group_stats: bool = True,
                 extra: Callable[[float], dict[tuple[str, str], float]] | None = None,
                 sources: list[Callable[[], Ports]] | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 s (got {interval})")
        self.plan = plan
        self.store = store
        self.client = client
        self.host_pids = dict(host_pids or {})
        self.sources = list(sources or [])
        self.interval = interval
        self.on_poll = on_poll
        self.group_stats = group_stats
        self.extra = extra
        self.history = History()
        self.links = link_components(plan)
        self.root_ends = self._root_ends()
        self._rates = Rates()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.polls = 0
        self.poll_seconds: list[float] = []  # how long each poll took (cost of telemetry)
        self.poll_times: list[float] = []  # when each poll began (wall clock)
        if store is not None:
            store.set_meta(plan=plan.to_dict(), interval_s=interval, started=time.time(),
                           max_rows=store.max_rows)

    @classmethod
    def for_lab(cls, lab: RunningLab, store: Store | None, **kw: Any) -> Collector:
        """A collector for a running ``testbed.shell.lab.Lab``."""
        client = lab.client() if lab.rest_port else None
        if client is not None:
            client.timeout = min(client.timeout, max(0.5, kw.get("interval", 1.0)))
        servers = getattr(lab, "servers", [])[1:]  # a cluster: the others, over SSH
        # a host's own counters are read in its namespace, through a pid on this machine;
        # a host on another server is seen by its switch port only
        pids = {name: h.pid for name, h in lab.hosts.items()
                if not servers or lab.server_of(name) == lab.servers[0]}  # type: ignore[attr-defined]
        sources = [netns_source(d.netns, d.pids()[-1]) for d in getattr(lab, "daemons", [])[1:]
                   if d.netns and d.pids()]
        sources += [cluster_source(lambda argv, s=s: lab.run_on(s, argv))  # type: ignore[attr-defined]
                    for s in servers]
        return cls(lab.plan, store, client=client, host_pids=pids, sources=sources, **kw)

    def _root_ends(self) -> dict[str, tuple[str, str]]:
        """Root-namespace interface -> (link component, direction it transmits)."""
        hosts = {h.name for h in self.plan.hosts}
        out = {}
        for comp, link in self.links.items():
            if link.a not in hosts:
                out[link.a_intf] = (comp, "ab")
            out[link.b_intf] = (comp, "ba")
        return out

    # --- one poll ----------------------------------------------------------------------
    def poll_once(self, now: float | None = None) -> dict[tuple[str, str], float]:
        """Read every source once, store the values, feed the history; return the values."""
        t0 = time.monotonic()
        t = time.time() if now is None else now
        values: dict[tuple[str, str], float] = {}
        self._poll_kernel(t, values)
        self._poll_hosts(t, values)
        self._poll_controller(t, values)
        if self.extra is not None:
            values.update(self.extra(t))
        if self.store is not None:
            self.store.add_samples(t, values)
        self.history.add(t, values)
        self.polls += 1
        self.poll_seconds.append(time.monotonic() - t0)
        self.poll_times.append(t)
        if self.on_poll is not None:
            self.on_poll(t, values)
        return values

    def _poll_kernel(self, t: float, values: dict[tuple[str, str], float]) -> None:
        tc = read_tc()
        dev = parse_proc_net_dev(read_kernel_file("/proc/net/dev") or "")
        elsewhere: dict[str, tuple[str, int | None]] = {}  # ports not in our root namespace
        for source in self.sources:
            more_tc, more_dev, state = source()
            tc.update(more_tc)
            dev.update({k: v for k, v in more_dev.items() if k in self.root_ends})
            elsewhere.update({k: v for k, v in state.items() if k in self.root_ends})
        state: dict[str, list[float]] = defaultdict(list)
        flaps: dict[str, list[float]] = defaultdict(list)
        # frames an end discarded, by the way they travelled: a veth pair counts a frame its
        # receiving end refuses (larger than its MTU, say) in that end's rx_dropped and in
        # the sender's tx_dropped, so a link whose receiving end is in a host's namespace
        # is still seen from its root end; where both ends are here, the larger count
        discards: dict[tuple[str, str], list[float]] = defaultdict(list)
        for intf, (comp, d) in self.root_ends.items():
            if intf in elsewhere:
                oper, count = elsewhere[intf]
                changes = None if count is None else str(count)
            else:
                oper = (read_kernel_file(f"/sys/class/net/{intf}/operstate") or "").strip()
                changes = read_kernel_file(f"/sys/class/net/{intf}/carrier_changes")
            if not oper:  # interface gone (lab torn down): no sample
                continue
            # a tunnel device (a cluster's lane between servers: VXLAN, gretap) reports
            # "unknown" while it is up: it has no carrier of its own; set down, it is "down"
            state[comp].append(1.0 if oper.lower() in ("up", "unknown") else 0.0)
            if changes and changes.strip().isdigit():
                dlt = self._rates.delta(("carrier", intf), t, float(changes))
                if dlt is not None:
                    flaps[comp].append(dlt)
            q = tc.get(intf)
            if q is not None:
                r = self._rates.rate(("txb", intf), t, q["bytes"])
                if r is not None:
                    values[(comp, f"mbps_{d}")] = r * 8e-6
                values[(comp, f"backlog_{d}")] = float(q["backlog"])
                dd = self._rates.delta(("qdrop", intf), t, q["drops"])
                if dd is not None:
                    values[(comp, f"qdrops_{d}")] = dd
            # what this port receives is what its peer sent: fills in the host -> switch
            # direction, whose sending end is inside the host's namespace
            other = "ab" if d == "ba" else "ba"
            counters = dev.get(intf)
            if counters is not None and (comp, f"mbps_{other}") not in values:
                link = self.links[comp]
                peer_in_root = (link.a_intf if d == "ba" else link.b_intf) in self.root_ends
                if not peer_in_root:
                    r = self._rates.rate(("rxb", intf), t, counters["rx_bytes"])
                    if r is not None:
                        values[(comp, f"mbps_{other}")] = r * 8e-6
            if counters is not None:
                for key, way in (("rx_drop", other), ("tx_drop", d)):
                    dd = self._rates.delta((key, intf), t, float(counters[key]))
                    if dd is not None:
                        discards[(comp, way)].append(dd)
        for comp, s in state.items():
            values[(comp, "up")] = min(s)
        for comp, f in flaps.items():
            values[(comp, "carrier_changes")] = max(f)
        for (comp, way), dd in discards.items():
            values[(comp, f"rxdrops_{way}")] = max(dd)

    def _poll_hosts(self, t: float, values: dict[tuple[str, str], float]) -> None:
        """NIC rates and drops inside each host, from two files of its namespace.

        A drop inside a host can happen at the NIC (a netdev ingress/egress hook, a full
        qdisc) or in the IP layer (netfilter). Both show as a gap between the NIC's packet
        counters and IP's: in, frames the NIC received that IP never delivered
        (``rx_packets - Ip.InDelivers``); out, packets IP sent that never left the NIC
        (``Ip.OutRequests - tx_packets``). ARP frames count on the NIC but not in IP, a
        packet or two a second at most: the loss detector's floor is above that.
        """
        for host, pid in self.host_pids.items():
            dev = parse_proc_net_dev(read_kernel_file(f"/proc/{pid}/net/dev") or "")
            nic = dev.get(f"{host}-eth0")
            if nic is None:
                continue
            for key in ("rx_bytes", "tx_bytes"):
                r = self._rates.rate((host, key), t, nic[key])
                if r is not None:
                    values[(host, key.replace("_bytes", "_mbps"))] = r * 8e-6
            snmp = parse_snmp(read_kernel_file(f"/proc/{pid}/net/snmp") or "")
            counters = {"rx": nic["rx_packets"], "tx": nic["tx_packets"],
                        "deliver": snmp.get("Ip.InDelivers"), "req": snmp.get("Ip.OutRequests")}
            rates = {k: self._rates.rate((host, k), t, v) for k, v in counters.items()}
            if None in rates.values():
                continue
            r = {k: float(v) for k, v in rates.items()}  # type: ignore[arg-type]
            values[(host, "in_pps")] = r["rx"]
            values[(host, "out_pps")] = r["req"]
            if not rxsink.sinking(pid):  # a compiled receiver's own drop is not NIC loss
                values[(host, "in_drop_pps")] = max(0.0, r["rx"] - r["deliver"])
            values[(host, "out_drop_pps")] = max(0.0, r["req"] - r["tx"])

    def _poll_controller(self, t: float, values: dict[tuple[str, str], float]) -> None:
        if self.client is None:
            return
        try:
            health = self.client.health()
        except ControllerError as exc:
            # 503 = answering but starting up; anything else is "not there"
            values[(CONTROLLER, "up")] = 1.0 if exc.status == 503 else 0.0
            values[(CONTROLLER, "converged")] = 0.0
            return
        values[(CONTROLLER, "up")] = 1.0
        values[(CONTROLLER, "converged")] = 1.0 if health.get("converged") else 0.0
        values[(CONTROLLER, "down_ports")] = float(len(health.get("down_ports") or []))
        with contextlib.suppress(ControllerError):
            by_name = {(ln.a, ln.a_port, ln.b, ln.b_port): c for c, ln in self.links.items()}
            for row in self.client.links().get("links", []):
                comp = by_name.get((row["a"], row["a_port"], row["b"], row["b_port"]))
                if comp is not None:
                    values[(comp, "ctl_up")] = 1.0 if row.get("state") == "up" else 0.0
        with contextlib.suppress(ControllerError):
            for sw, ports in self.client.port_stats().items():
                total = sum(p.get(k, 0) for p in ports.values()
                            for k in ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors"))
                d = self._rates.delta((sw, "port_drops"), t, float(total))
                if d is not None:
                    values[(sw, "port_drops")] = d
        if self.group_stats:
            with contextlib.suppress(ControllerError):
                self._groups(t, values)

    def _groups(self, t: float, values: dict[tuple[str, str], float]) -> None:
        """Per switch, bytes each select-group bucket's port carried (summed over groups)."""
        for sw, groups in self.client.group_stats().items():  # type: ignore[union-attr]
            per_port: dict[int, float] = defaultdict(float)
            for g in groups.values():
                if g.get("type") != "select":
                    continue
                for b in g.get("buckets", []):
                    if "port" in b:
                        per_port[int(b["port"])] += b.get("byte_count", 0)
            for port, total in per_port.items():
                r = self._rates.rate((sw, "bucket", port), t, total)
                if r is not None:
                    values[(sw, f"bucket{port}_mbps")] = r * 8e-6

    # --- background loop -----------------------------------------------------------------
    def start(self) -> Collector:
        """Poll in a background thread until ``stop()``; the first poll happens at once."""
        if self._thread is not None:
            raise RuntimeError("collector already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="ops-collector", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # a bad poll must not end telemetry; record it
                if self.store is not None:
                    self.store.add_event(time.time(), "collector", "poll-error",
                                         detail=repr(exc)[:300])
            nxt += self.interval
            delay = nxt - time.monotonic()
            if delay < 0:  # fell behind (busy machine): skip, do not burst
                nxt = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


