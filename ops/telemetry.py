"""Telemetry: the time series of a running fabric, kept in SQLite. Pure: the collector that
polls the fabric is ``ops.shell.collector``.

What one poll reads (all of it cheap enough for 1 s at the default 32-GPU fabric):

* **root namespace, kernel counters** (no controller needed, so telemetry keeps working
  while the controller is dead): one ``tc -s -j qdisc show`` for every switch-side port's
  bytes sent, queue backlog and queue drops; one read of ``/proc/net/dev`` for bytes
  received and the frames each end discarded (``rxdrops_ab``/``rxdrops_ba`` per poll, by
  the direction the discarded frames travelled: the receiving end's ``rx_dropped``, or,
  where that end is in a host's namespace, the sending end's ``tx_dropped``, since a veth
  pair counts a frame its receiver refuses at both ends; a port below the fabric's MTU
  shows here); ``/sys/class/net/<port>/{operstate,carrier_changes}`` for link state and
  flaps (``carrier_changes`` counts every carrier transition, so a flap that comes and
  goes between two polls is still seen);
* **host namespaces**: ``/proc/<shell pid>/net/dev`` and ``/proc/<shell pid>/net/snmp``
  of each host's Mininet shell: NIC bytes each way, and the gap between the NIC's packet
  counters and the IP layer's, which is where a NIC losing packets shows (frames received
  but not delivered, packets sent by IP that never left the NIC; two file reads per
  host, no process started);
* **the controller's REST API** (``controllers.shell.client.ControllerClient``): ``/health``
  (is it answering, converged, ports it thinks are down), ``/links`` (its view of each
  link's state), ``/ports/stats`` (OpenFlow drop and error counters) and
  ``/groups/stats`` (select-group bucket counters: how ECMP spreads a leaf's traffic).
  The controller polls the switches itself every ``--poll-interval`` (``Lab``'s default
  1 s), so its counters are never fresher than that: a telemetry interval below the
  controller's adds no information from this source (the kernel counters above are
  read live).

Every value is stored as a row ``(t, component, metric, value)`` in one SQLite file per
run (``Store``), so any SQLite client can read it::

    sqlite3 telemetry.sqlite "SELECT t, value FROM samples
        WHERE component='lf0r1~spine2#0' AND metric='mbps_ab' ORDER BY t"

Components use the wiring plan's names, as fault injection does: a link is
``a~b#lane`` (``a`` the lower-tier end, ``lane`` its index among parallel cables between
the two nodes), a switch by name, a NIC by its host name, the controller is
``controller``. Link metrics come in two directions: ``_ab`` is a->b (up the tree).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
import urllib.parse
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from vocab.plan import WiringPlan, link_components

#: Default polling interval (seconds); the controller's own default poll is the same.
DEFAULT_INTERVAL_S = 1.0
#: Default bound of the samples table: the oldest rows go first (about 60 bytes a row on
#: disk with its index, so ~60 MB; the default 32-GPU fabric writes ~1,200 rows a poll, so
#: this keeps its last ~14 minutes at 1 s).
DEFAULT_MAX_ROWS = 1_000_000
#: How many polls the in-memory history keeps for the detectors (5 minutes at 1 s).
HISTORY_POLLS = 300
CONTROLLER = "controller"


# --- names ---------------------------------------------------------------------------------
def canonical(component: str, plan: WiringPlan | None = None) -> str:
    """One spelling per component, so answers and ground truth compare.

    ``b~a`` becomes ``a~b`` when the plan says ``a`` is the lower end, a missing lane is
    ``#0``, and a host's NIC link (``s1g3~lf0r3#0``) is the NIC itself (``s1g3``): a
    diagnosis that names the NIC names the same thing as one that names its cable.
    """
    c = component.strip()
    if "~" not in c:
        return c
    ends, _, lane = c.partition("#")
    a, _, b = ends.partition("~")
    lane = lane or "0"
    if plan is not None:
        hosts = {h.name for h in plan.hosts}
        if a in hosts:
            return a
        if b in hosts:
            return b
        comps = link_components(plan)
        if f"{a}~{b}#{lane}" not in comps and f"{b}~{a}#{lane}" in comps:
            a, b = b, a
    return f"{a}~{b}#{lane}"


# --- the store -----------------------------------------------------------------------------
#: One index, on time: a poll's rows are appended to it together. An index by series would
#: put each poll's row of every series in a page of its own, rewriting a page per series
#: at every poll once the file holds a few minutes, work that grows with the run and
#: competes with the job the collector watches. Reads by series scan a time range.
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS samples (
    t REAL NOT NULL, component TEXT NOT NULL, metric TEXT NOT NULL, value REAL);
CREATE INDEX IF NOT EXISTS samples_by_t ON samples (t);
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY, detector TEXT NOT NULL, severity TEXT NOT NULL,
    component TEXT NOT NULL, summary TEXT NOT NULL, evidence TEXT NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, cleared REAL, opened REAL);
CREATE TABLE IF NOT EXISTS events (
    t REAL NOT NULL, source TEXT NOT NULL, kind TEXT NOT NULL, component TEXT, detail TEXT);
"""
#: the tables a telemetry file has (SCHEMA)
TABLES = ("meta", "samples", "alerts", "events")


class Store:
    """One SQLite file per run: ``meta``, ``samples``, ``alerts``, ``events`` (see SCHEMA).

    Bounded: ``samples`` keeps at most ``max_rows`` rows (oldest deleted first, checked at
    every write); alerts and events are small (one row per alert / fault action).
    Thread-safe: one connection guarded by a lock (the collector thread writes while the
    agent reads).
    """

    def __init__(self, path: str, max_rows: int = DEFAULT_MAX_ROWS,
                 readonly: bool = False) -> None:
        """Open (and, unless ``readonly``, create) the file. ``readonly`` opens it as
        SQLite's read-only mode and checks that it holds this schema's tables, so a file
        that is read is never written, not even the schema (``sqlite3.DatabaseError``
        otherwise)."""
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1 (got {max_rows})")
        self.path = path
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._writer = False  # a read-only store leaves the file's journal as it found it
        if readonly:
            uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            try:
                tables = {r[0] for r in self._db.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                missing = sorted(set(TABLES) - tables)
                if missing:
                    raise sqlite3.DatabaseError(f"no {', '.join(missing)} table")
            except BaseException:
                self._db.close()
                raise
            return
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False)
        # a commit every poll: with SQLite's default rollback journal each one syncs the
        # journal and the file to disk; a write-ahead log appends and syncs only when it
        # folds the log back in
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._db.commit()
        self._writer = True

    def close(self) -> None:
        with self._lock:
            if self._writer:
                # back to one self-contained file, as readers opening it read-only expect
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._db.execute("PRAGMA journal_mode=DELETE")
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ---------------------------------------------------------------------
    def set_meta(self, **values: Any) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 [(k, json.dumps(v)) for k, v in values.items()])
            self._db.commit()

    def meta(self) -> dict[str, Any]:
        with self._lock:
            return {k: json.loads(v) for k, v in self._db.execute("SELECT key, value FROM meta")}

    def add_samples(self, t: float, values: dict[tuple[str, str], float]) -> None:
        """Write one poll's values and trim the table to ``max_rows``."""
        rows = [(t, c, m, v) for (c, m), v in values.items()
                if v is not None and not math.isnan(v)]
        with self._lock:
            self._db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)", rows)
            last = self._db.execute("SELECT max(rowid) FROM samples").fetchone()[0] or 0
            if last > self.max_rows:
                self._db.execute("DELETE FROM samples WHERE rowid <= ?", (last - self.max_rows,))
            self._db.commit()

    def add_event(self, t: float, source: str, kind: str, component: str | None = None,
                  detail: Any = None) -> None:
        with self._lock:
            self._db.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                             (t, source, kind, component, json.dumps(detail)))
            self._db.commit()

    def save_alert(self, alert: Any) -> None:
        """Insert or update an ``ops.detectors.Alert`` (its ``id`` is set on first save)."""
        row = (alert.detector, alert.severity, alert.component, alert.summary,
               json.dumps(alert.evidence), alert.first_seen, alert.last_seen, alert.cleared,
               alert.opened)
        with self._lock:
            if alert.id is None:
                cur = self._db.execute(
                    "INSERT INTO alerts (detector, severity, component, summary, evidence, "
                    "first_seen, last_seen, cleared, opened) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row)
                alert.id = cur.lastrowid
            else:
                self._db.execute(
                    "UPDATE alerts SET detector=?, severity=?, component=?, summary=?, "
                    "evidence=?, first_seen=?, last_seen=?, cleared=?, opened=? WHERE id=?",
                    (*row, alert.id))
            self._db.commit()

    # --- reading ---------------------------------------------------------------------
    def series(self, component: str, metric: str, since: float | None = None,
               until: float | None = None) -> list[tuple[float, float]]:
        q = "SELECT t, value FROM samples WHERE component=? AND metric=?"
        args: list[Any] = [component, metric]
        if since is not None:
            q += " AND t >= ?"
            args.append(since)
        if until is not None:
            q += " AND t <= ?"
            args.append(until)
        with self._lock:
            return [(t, v) for t, v in self._db.execute(q + " ORDER BY t", args)]

    def latest(self, component: str | None = None) -> dict[tuple[str, str], tuple[float, float]]:
        """The newest ``(t, value)`` of every series (of one component, or all)."""
        # SQLite takes the bare column (value) from the row that holds the max(t)
        q = "SELECT component, metric, max(t), value FROM samples"
        args: list[Any] = []
        if component is not None:
            q += " WHERE component=?"
            args.append(component)
        with self._lock:
            return {(c, m): (t, v) for c, m, t, v in
                    self._db.execute(q + " GROUP BY component, metric", args)}

    def history(self, since: float | None = None) -> History:
        """Everything since ``since`` as a ``History`` (what the detectors read)."""
        q = "SELECT t, component, metric, value FROM samples"
        args: list[Any] = []
        if since is not None:
            q += " WHERE t >= ?"
            args.append(since)
        hist = History(maxlen=None)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY t", args).fetchall()
        by_t: dict[float, dict[tuple[str, str], float]] = defaultdict(dict)
        for t, c, m, v in rows:
            by_t[t][(c, m)] = v
        for t in sorted(by_t):
            hist.add(t, by_t[t])
        return hist

    def alerts(self, active_only: bool = False) -> list[dict[str, Any]]:
        q = ("SELECT id, detector, severity, component, summary, evidence, first_seen, "
             "last_seen, cleared, opened FROM alerts")
        if active_only:
            q += " WHERE cleared IS NULL"
        with self._lock:
            rows = self._db.execute(q + " ORDER BY first_seen").fetchall()
        keys = ("id", "detector", "severity", "component", "summary", "evidence",
                "first_seen", "last_seen", "cleared", "opened")
        out = []
        for r in rows:
            d = dict(zip(keys, r, strict=True))
            d["evidence"] = json.loads(d["evidence"])
            out.append(d)
        return out

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT t, source, kind, component, detail FROM events "
                                    "ORDER BY t").fetchall()
        return [{"t": t, "source": s, "kind": k, "component": c, "detail": json.loads(d)}
                for t, s, k, c, d in rows]

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM samples").fetchone()[0])


# --- in-memory history ---------------------------------------------------------------------
class History:
    """The last ``maxlen`` polls: ``times`` and, per ``(component, metric)``, aligned values.

    Pure data for the detectors: ``values(c, m)`` is a list as long as ``times`` (None where
    a poll had no value for the series, e.g. while the controller was down).
    """

    def __init__(self, maxlen: int | None = HISTORY_POLLS) -> None:
        self.maxlen = maxlen
        self.times: deque[float] = deque(maxlen=maxlen)
        self._data: dict[tuple[str, str], deque[float | None]] = {}

    def add(self, t: float, values: dict[tuple[str, str], float]) -> None:
        n = len(self.times)
        self.times.append(t)
        for key in set(self._data) | set(values):
            col = self._data.get(key)
            if col is None:
                col = self._data[key] = deque([None] * n, maxlen=self.maxlen)
            col.append(values.get(key))

    def __len__(self) -> int:
        return len(self.times)

    @property
    def now(self) -> float:
        return self.times[-1] if self.times else 0.0

    def values(self, component: str, metric: str) -> list[float | None]:
        col = self._data.get((component, metric))
        return list(col) if col is not None else [None] * len(self.times)

    def last(self, component: str, metric: str, n: int = 1) -> list[float | None]:
        return self.values(component, metric)[-n:] if n else []

    def latest(self, component: str, metric: str) -> float | None:
        col = self._data.get((component, metric))
        return col[-1] if col else None

    def keys(self) -> Iterator[tuple[str, str]]:
        return iter(self._data)

    def components(self) -> set[str]:
        return {c for c, _ in self._data}


# --- raw readers (thin shell) ----------------------------------------------------------------
def parse_proc_net_dev(text: str) -> dict[str, dict[str, int]]:
    """``/proc/net/dev`` -> ``{iface: {rx_bytes, rx_packets, rx_drop, tx_bytes, ...}}``."""
    out = {}
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        f = [int(x) for x in rest.split()]
        out[name.strip()] = {"rx_bytes": f[0], "rx_packets": f[1], "rx_drop": f[3],
                             "tx_bytes": f[8], "tx_packets": f[9], "tx_drop": f[11]}
    return out


def parse_snmp(text: str) -> dict[str, int]:
    """``/proc/net/snmp`` -> ``{"Ip.InReceives": n, "Udp.OutDatagrams": n, ...}``."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for head, vals in zip(lines[::2], lines[1::2], strict=False):
        proto, _, names = head.partition(":")
        _, _, numbers = vals.partition(":")
        for k, v in zip(names.split(), numbers.split(), strict=False):
            with contextlib.suppress(ValueError):
                out[f"{proto}.{k}"] = int(v)
    return out


def parse_tc_qdisc(data: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``tc -s -j qdisc show`` -> per device: bytes sent, backlog (bytes), drops.

    The shaped ports have an HTB root with a pfifo child that holds the queue; the root's
    ``bytes`` is what left the port, the backlog is the larger of the root's and the sum
    of the children's (kernels differ in whether HTB's root reports it).
    """
    out: dict[str, dict[str, int]] = {}
    for q in data:
        dev = q.get("dev")
        if not dev:
            continue
        d = out.setdefault(dev, {"bytes": 0, "backlog": 0, "child_backlog": 0, "drops": 0})
        if q.get("root"):
            d["bytes"] = int(q.get("bytes", 0))
            d["backlog"] = max(d["backlog"], int(q.get("backlog", 0)))
        else:
            d["child_backlog"] += int(q.get("backlog", 0))
        d["drops"] += int(q.get("drops", 0))
    for d in out.values():
        d["backlog"] = max(d.pop("backlog"), d.pop("child_backlog"))
    return out


# --- rates from counters --------------------------------------------------------------------
@dataclass
class Rates:
    """Turns cumulative counters into per-second rates between two polls."""

    prev: dict[Any, tuple[float, float]] = field(default_factory=dict)

    def rate(self, key: Any, t: float, value: float | None) -> float | None:
        if value is None:
            return None
        old = self.prev.get(key)
        self.prev[key] = (t, value)
        if old is None or t <= old[0] or value < old[1]:  # first sample or counter reset
            return None
        return (value - old[1]) / (t - old[0])

    def delta(self, key: Any, t: float, value: float | None) -> float | None:
        old = self.prev.get(key)
        r = self.rate(key, t, value)
        return None if r is None or old is None else value - old[1]  # type: ignore[operator]


def samples_of(values: Iterable[tuple[str, str, float]]) -> dict[tuple[str, str], float]:
    """``[(component, metric, value), ...]`` -> the dict a poll produces (tests, replays)."""
    return {(c, m): v for c, m, v in values}
