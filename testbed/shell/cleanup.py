"""Leave nothing behind: run records and ``astral-lab clean``.

Every ``Lab`` writes a small record (JSON) under ``/run/astral-lab/`` as soon as it
creates anything: its controller's PID, its host shells' PIDs, its OVS bridges
and the interfaces it made in the root namespace. A normal exit removes all of
that and the record. If the process was killed (``kill -9``, a crash, a closed
terminal), ``astral-lab clean`` reads the leftover records and removes what they
name, then sweeps for anything tagged as ours that has no record (bridges carry
``external_ids:astral-lab-run``; controllers run with ``--run-id``; scratch
folders are named ``astral-lab-<run id>-p<owner pid>-*``, see ``make_scratch``). The
programs a run starts in its hosts (probes, replay agents, iperf3: ``traffic.shell.programs``)
name no run; a dead run's are found as orphans of those programs that no live run owns
(``testbed.shell.orphans``).
Plain Mininet built from the lab's plans (the bring-up benchmark's baseline,
``mn --custom testbed/shell/mntopo.py``) keeps no record and tags nothing: what it
leaves is recognised by the lab's node names (``NODE_RE``), and only while no
fabric that could own those names is alive (``plain_mininet_leftovers``).

Fault injection (``testbed.shell.faults``) leaves rules in host namespaces (and, for link
faults on switch ports, in the root namespace) and traffic processes when its run dies;
``cleanup_faults`` removes them by the names in ``testbed.faultmarks``, whatever the kind.
What only one kind leaves (drop rules on a bridge, a lowered port MTU, crossed lanes) its
injector module removes (its ``clean_crashed`` hook), and ``cleanup_faults`` calls every
kind's hook it is handed: this module is the lowest layer of the lab's shell side and
imports neither the injector nor ``testbed.shell.lab``, which both build on it, so
``astral-lab clean`` hands it the injector's registry (``clean(kinds=...)``).

Unlike ``mn -c``, this never touches bridges, namespaces or processes that are
not the lab's.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

from testbed.capture import is_capture
from testbed.faultmarks import (
    CLEAN_NAMESPACE,
    ENV_MARK,
    NFT_FAMILY,
    fault_tables,
    is_sink,
    link_sink,
    sinks,
)
from testbed.shell import orphans, procs, switch_daemons
from testbed.shell.procs import kill_pids, pid_alive
from traffic import rxsink
from vocab.plan import WiringPlan, write_json_atomic

STATE_DIR = os.environ.get("ASTRAL_LAB_STATE_DIR", "/run/astral-lab")
BRIDGE_TAG = "astral-lab-run"
#: A run's scratch folder: ``astral-lab-<run id>-p<owner pid>-<mkdtemp suffix>``. Folders
#: made before the pid was part of the name lack the ``p<pid>-`` part.
SCRATCH_RE = re.compile(r"astral-lab-([0-9a-f]{10})-(?:p([0-9]+)-)?[a-z0-9_]{8}")
#: Marker file in a scratch folder whose run was started with ASTRAL_LAB_KEEP_LOGS set.
KEEP_MARK = "KEEP_LOGS"
#: Node names the lab's topologies give (``testbed.topologies``): GPU NICs ``s<server>g<gpu>``,
#: leaves ``lf<block>r<rail>``, ToRs, spines, rail spines, aggs, cores, edges, NVLink switches.
#: Mininet's own defaults (h1, s1) do not match, so a stranger's ``mn`` is never swept.
NODE_RE = re.compile(r"s\d+g\d+|lf\d+r\d+|tor\d+r\d+|spine\d+|rsp\d+x\d+|agg\d+x\d+|core\d+"
                     r"|edge\d+x\d+|nvs\d+")
#: Mininet's interface names for those nodes (``vocab.plan.intf_name``).
INTF_RE = re.compile(rf"(?:{NODE_RE.pattern})-eth\d+")


#: the modules a Lab starts its controller and its live view as (``python -m MODULE``): what
#: a process's command line contains, so ``astral-lab clean`` finds them by it
CONTROLLER_MODULE = "astral_lab.controller_cli"
DASHBOARD_MODULE = "astral_lab.dashboard_cli"
#: how a controller process is started, now and by earlier versions
CONTROLLER_MODULES = (CONTROLLER_MODULE, "controllers.shell.run")
DASHBOARD_MODULES = (DASHBOARD_MODULE,)


def _is_controller(argv: list[str]) -> bool:
    """Whether a process's command line is a lab controller's."""
    return any(m in argv for m in CONTROLLER_MODULES)


def _is_sidecar(argv: list[str]) -> bool:
    """Whether a command line is a Lab's live view or one of its port captures
    (``testbed.shell.sidecars``): a tcpdump on an interface named like the lab's."""
    return any(m in argv for m in DASHBOARD_MODULES) or is_capture(argv, INTF_RE)


def record_path(run_id: str) -> str:
    return os.path.join(STATE_DIR, f"{run_id}.json")


def write_record(run_id: str, record: dict[str, Any]) -> None:
    write_json_atomic(record_path(run_id), record)


def drop_record(run_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record_path(run_id))


def keep_logs() -> bool:
    """True when ASTRAL_LAB_KEEP_LOGS asks for run folders (logs, plan) to be kept."""
    return bool(os.environ.get("ASTRAL_LAB_KEEP_LOGS"))


def scratch_root() -> str:
    """Where runs make their scratch folders (the system temporary directory)."""
    return tempfile.gettempdir()


def scratch_prefix(run_id: str) -> str:
    """How a run's scratch folders are named (``SCRATCH_RE`` with a ``mkdtemp`` suffix):
    ``clean`` removes such a folder once its run and owner are gone."""
    return f"astral-lab-{run_id}-p{os.getpid()}-"


def make_scratch(run_id: str) -> str:
    """Create a run's scratch folder, named for the run id and this (owner) process.

    The name alone tells ``clean`` whose folder it is and whether its owner still
    lives, with no window in which a live run's folder looks orphaned (the run
    record is written just after). With ASTRAL_LAB_KEEP_LOGS set the folder is
    marked, so neither the run's own exit nor a later ``clean`` removes it.
    """
    path = tempfile.mkdtemp(prefix=scratch_prefix(run_id), dir=scratch_root())
    if keep_logs():
        with open(os.path.join(path, KEEP_MARK), "w", encoding="utf-8") as f:
            f.write("kept because ASTRAL_LAB_KEEP_LOGS was set when the run started\n")
    return path


def scratch_owner(path: str) -> tuple[str, int | None] | None:
    """``(run id, owner pid or None)`` of a scratch folder's name; None if not one of ours."""
    m = SCRATCH_RE.fullmatch(os.path.basename(os.path.normpath(path)))
    if m is None:
        return None
    return m.group(1), (int(m.group(2)) if m.group(2) else None)


def scratch_kept(path: str) -> bool:
    """True when the folder's run, or this process, asked for logs to be kept."""
    return keep_logs() or os.path.exists(os.path.join(path, KEEP_MARK))


def drop_scratch(path: str, log: Callable[[str], None] | None = None) -> bool:
    """Remove one run's scratch folder unless its logs are to be kept; True if removed.

    Only a folder whose name is a scratch folder's is removed, so a damaged run
    record can never point ``rmtree`` elsewhere.
    """
    if not path or scratch_owner(path) is None or not os.path.isdir(path):
        return False
    if scratch_kept(path):
        if log:
            log(f"logs kept in {path}")
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.exists(path)


def stale_scratch(live_runs: Collection[str]) -> list[str]:
    """Scratch folders in ``scratch_root()`` whose run is not alive.

    Alive means: the run id belongs to a live run record, or the owner pid in the
    folder's name is a running process (a concurrent run, possibly still before
    its record is written). Folders from before the pid was in the name are
    judged by their run record alone.
    """
    root = scratch_root()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    stale = []
    for entry in entries:
        owner = scratch_owner(entry.name)
        if owner is None or not entry.is_dir(follow_symlinks=False):
            continue
        run_id, pid = owner
        if run_id in live_runs or (pid is not None and pid_alive(pid)):
            continue
        stale.append(os.path.join(root, entry.name))
    return sorted(stale)


def delete_bridges(bridges: list[str]) -> None:
    """All bridges in one ovs-vsctl transaction (one round trip, however many).

    ovs-vsctl waits until ovs-vswitchd has released them, including each bridge's
    internal interface (named like the bridge), so the names are free on return.
    With the userspace datapath that costs ~0.2 s per bridge.
    """
    if not bridges:
        return
    cmd = ["ovs-vsctl", "--timeout=60"]
    for br in bridges:
        cmd += ["--", "--if-exists", "del-br", br]
    procs.run(cmd)


def existing_interfaces() -> set[str]:
    """Names of the interfaces in this (the root) network namespace."""
    return set(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else set()


def delete_links(names: list[str]) -> int:
    """Delete root-namespace interfaces (a veth's peer goes with it) in one ``ip -batch``.

    Returns how many of ``names`` existed before and are gone after (both ends of a
    veth may be named: deleting the first takes the second, whose own line then
    fails harmlessly under ``-force``).
    """
    existing = existing_interfaces()
    todo = [n for n in names if n in existing]
    if not todo:
        return 0
    procs.run(["ip", "-force", "-batch", "-"], stdin="".join(f"link del {n}\n" for n in todo))
    after = existing_interfaces()
    return sum(1 for n in todo if n not in after)


def wait_gone(names: list[str], timeout: float = 30.0) -> None:
    """Wait until interfaces that die with their namespace are gone; delete stragglers."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        existing = existing_interfaces()
        if not any(n in existing for n in names):
            return
        time.sleep(0.05)
    delete_links(names)


def _tagged(table: str, key_column: str) -> dict[str, str]:
    """``key -> run id`` for rows of an OVS table that a Lab tagged in ``external_ids``."""
    proc = procs.run(["ovs-vsctl", "--timeout=10", "--format=json",
                f"--columns={key_column},external_ids", "list", table])
    if proc.returncode != 0:
        return {}
    out: dict[str, str] = {}
    for key, ext in json.loads(proc.stdout).get("data", []):
        pairs = dict(ext[1]) if isinstance(ext, list) and ext and ext[0] == "map" else {}
        if BRIDGE_TAG in pairs:
            out[key[1] if isinstance(key, list) else key] = pairs[BRIDGE_TAG]
    return out


def tagged_bridges() -> dict[str, str]:
    """``bridge -> run id`` for every OVS bridge a Lab created."""
    return _tagged("Bridge", "name")


def all_bridges() -> list[str]:
    """Every OVS bridge on this machine (none when OVS is not running)."""
    return procs.run(["ovs-vsctl", "--timeout=10", "list-br"]).stdout.split()


def mininet_shells() -> dict[int, str]:
    """``pid -> node name`` of every Mininet node shell (``bash ... mininet:<node>``).

    Mininet starts one for every host *and* switch before it creates any link, and
    they end after the links are gone; a Lab starts one per host.
    """
    out = {}
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        pid = int(path.split("/")[2])
        for arg in _cmdline(pid).split("\0"):
            if arg.startswith("mininet:"):
                out[pid] = arg[len("mininet:"):]
                break
    return out


def plain_mininet_leftovers(interfaces: Collection[str], untagged_bridges: Collection[str],
                            shells: dict[int, str], live_runs: Collection[str],
                            ) -> tuple[list[str], list[str], str]:
    """``(interfaces, bridges, why not)``: what a dead plain-Mininet fabric of ours left.

    Plain Mininet keeps no run record, so its leftovers are known only by name:
    root-namespace interfaces and untagged bridges named after the lab's nodes.
    A live fabric holds the same names (a Lab's records do not list every veth
    end), so nothing is returned while any run record is alive or any Mininet
    shell of a lab-named node runs; the third value then says which, for the
    user. Pure, so the rule is tested on faked names.
    """
    links = sorted(i for i in interfaces if INTF_RE.fullmatch(i))
    bridges = sorted(b for b in untagged_bridges if NODE_RE.fullmatch(b))
    if not links and not bridges:
        return [], [], ""
    if live_runs:
        return [], [], f"run {', '.join(sorted(live_runs))} is alive"
    lab_shells = sorted(p for p, node in shells.items() if NODE_RE.fullmatch(node))
    if lab_shells:
        more = f" (+{len(lab_shells) - 5})" if len(lab_shells) > 5 else ""
        return [], [], ("Mininet shells of lab-named nodes are running (pid "
                        + ", ".join(map(str, lab_shells[:5])) + more + "): a plain Mininet "
                        "fabric is up")
    return links, bridges, ""


def tagged_qos() -> dict[str, str]:
    """``QoS row uuid -> run id``: the ``linux-noop`` rows that keep OVS off our qdiscs.

    QoS is a root table in OVSDB, so its rows outlive the bridges that used them.
    """
    return _tagged("QoS", "_uuid")


def delete_qos(uuids: list[str]) -> None:
    if not uuids:
        return
    cmd = ["ovs-vsctl", "--timeout=30"]
    for uuid in uuids:
        cmd += ["--", "--if-exists", "destroy", "QoS", uuid]
    procs.run(cmd)


def our_processes() -> list[int]:
    """PIDs of lab controllers and live views (``... --run-id``) and of lab port captures
    (which name no run: ``clean`` spares those a live run's record lists), via /proc."""
    pids = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        pid = int(path.split("/")[2])
        argv = _cmdline(pid).split("\0")
        if pid == os.getpid():
            continue
        if ((_is_controller(argv) or _is_sidecar(argv)) and "--run-id" in argv) \
                or is_capture(argv, INTF_RE):
            pids.append(pid)
    return pids


def stale_traffic(live_runs: Collection[str] = (), live_pids: Collection[int] = (),
                  pids: Iterable[int] | None = None) -> dict[int, str]:
    """``pid -> program`` of the lab's traffic programs that a dead run left in its hosts
    (``testbed.shell.orphans.stale_traffic``, with this module's run folder and interface
    names); ``live_pids``: the owners and listed processes of ``live_runs``."""
    return orphans.stale_traffic(live_runs, live_pids, scratch_re=SCRATCH_RE, intf_re=INTF_RE,
                                 shells=lambda: mininet_shells(), pids=pids)


def _live_pids(live_runs: Collection[str]) -> set[int]:
    """The owners and listed processes (host shells, controller, captures) of live runs."""
    return {int(p) for rec in _records() if rec.get("run_id") in live_runs
            for p in [rec.get("owner_pid") or 0, *rec.get("pids", [])] if p}


def _end_stale_traffic(live_runs: Collection[str], live_pids: Collection[int]) -> int:
    """Kill what ``stale_traffic`` finds; how many there were."""
    stale = stale_traffic(live_runs, live_pids)
    if stale:
        kill_pids(sorted(stale), grace=1.0)
    return len(stale)


class CrashHook(Protocol):
    """A fault kind's crash hook as the injector's registry gives it
    (``testbed.shell.faults.Injector.clean_crashed``): handed in, since the injector builds
    on this module."""

    def clean_crashed(self, theirs: Callable[[str], bool]) -> Mapping[str, int]:
        """Remove what this kind left for the runs ``theirs`` accepts; counts by what."""


def clean(verbose: bool = True, kinds: Iterable[CrashHook] = ()) -> dict[str, int]:
    """Remove every leftover of crashed lab runs. Safe to run any time; returns what it did.

    ``kinds``: every fault kind's crash hook (``testbed.shell.faults.INJECTORS``' values),
    for what a kind leaves besides the names every kind shares (``cleanup_faults``)."""
    done = {"records": 0, "processes": 0, "bridges": 0, "links": 0, "scratch": 0,
            "kept": 0, "unrecorded": 0, "namespaces": 0}
    live_runs: set[str] = set()
    kept: list[str] = []

    def scratch(path: str) -> None:
        if drop_scratch(path):
            done["scratch"] += 1
        elif os.path.isdir(path) and scratch_owner(path) and path not in kept:
            kept.append(path)

    # Every live run first: the traffic sweep below must know them all before a dead run's
    # processes are judged.
    live_pids: set[int] = set()
    dead: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(glob.glob(os.path.join(STATE_DIR, "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, ValueError):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            continue
        owner = rec.get("owner_pid")
        if owner and owner != os.getpid() and pid_alive(owner):
            live_runs.add(rec.get("run_id", ""))
            live_pids.update(int(p) for p in [owner, *rec.get("pids", [])])
            if verbose:
                print(f"run {rec.get('run_id')} is still alive (pid {owner}); leaving it")
            continue
        dead.append((path, rec))
    for path, rec in dead:
        # Only processes that still look like ours: a PID may have been reused since.
        pids = [int(p) for p in rec.get("pids", []) if _looks_like_ours(int(p))]
        delete_bridges(rec.get("bridges", []))
        kill_pids(pids, grace=0.5)
        for d in rec.get("daemons", []):  # extra switch daemons, their namespaces and ports
            switch_daemons.stop_daemon(d)
            done["namespaces"] += 1
        delete_links(rec.get("links", []))
        # What the run started in its hosts holds their namespaces, and so its host links,
        # open: it goes first (now that the host shells are gone, it is orphaned).
        done["processes"] += _end_stale_traffic(live_runs, live_pids)
        wait_gone(rec.get("host_links", []), timeout=10)
        done["processes"] += len(pids)
        done["bridges"] += len(rec.get("bridges", []))
        done["links"] += len(rec.get("links", []))
        done["records"] += 1
        scratch(rec.get("workdir") or "")
        with contextlib.suppress(FileNotFoundError):  # another clean() got there first
            os.unlink(path)
    # Sweep: anything tagged as ours whose run is not alive.
    stray = [br for br, run_id in tagged_bridges().items() if run_id not in live_runs]
    if stray:
        delete_bridges(stray)
        done["bridges"] += len(stray)
    delete_qos([q for q, run_id in tagged_qos().items() if run_id not in live_runs])
    live_pids |= _live_pids(live_runs)  # as read now
    procs = [p for p in our_processes() if p not in live_pids
             and not any(f"--run-id\0{r}" in _cmdline(p) for r in live_runs)]
    if procs:
        kill_pids(procs)
        done["processes"] += len(procs)
    done["processes"] += _end_stale_traffic(live_runs, live_pids)  # runs with no record left
    done["processes"] += cleanup_faults(keep_runs=live_runs, kinds=kinds)["processes"]
    for path in stale_scratch(live_runs):  # folders of dead runs whose record is gone
        scratch(path)
    for pid in rxsink.stale():  # a killed replay's note that its receivers drop RoCE
        rxsink.unmark(pid)
    for d in switch_daemons.stale(live_runs):  # a daemon whose run record was lost
        switch_daemons.stop_daemon(d)
        done["namespaces"] += 1
    for ns in stale_probe_namespaces():
        done["namespaces"] += procs.run(["ip", "netns", "del", ns]).returncode == 0
    # Plain Mininet on the lab's plans: no record, no tags, only names (after the runs above
    # are gone, so their names no longer count as someone's).
    tagged = tagged_bridges()
    links, bridges, why_not = plain_mininet_leftovers(
        existing_interfaces(), [b for b in all_bridges() if b not in tagged],
        mininet_shells(), live_runs)
    if bridges:
        delete_bridges(bridges)
        done["bridges"] += len(bridges)
    gone = delete_links(links)
    done["links"] += gone
    done["unrecorded"] = len(bridges) + gone
    done["kept"] = len(kept)
    if verbose:
        print("astral-lab clean: removed {records} run record(s), {processes} process(es), "
              "{bridges} bridge(s), {links} interface(s), {namespaces} namespace(s), "
              "{scratch} scratch folder(s)"
              .format(**done))
        if done["unrecorded"]:
            print(f"  of which {len(bridges)} bridge(s) and {gone} interface(s) named like the "
                  "lab's nodes had no run record (plain Mininet on a lab plan)")
        if why_not:
            print(f"left interfaces/bridges named like the lab's nodes alone: {why_not}")
        if kept:
            print(f"kept {len(kept)} scratch folder(s) of finished runs (ASTRAL_LAB_KEEP_LOGS): "
                  + " ".join(kept))
    return done


#: Preflight's throwaway namespaces (``preflight.netem_available`` and its rule probes).
PROBE_NS = "astral-probe-"


def stale_probe_namespaces(age_s: float = 60.0, root: str = "/run/netns") -> list[str]:
    """Probe namespaces older than ``age_s`` (a probe takes a second): a run killed mid-probe."""
    found = []
    for name in os.listdir(root) if os.path.isdir(root) else []:
        with contextlib.suppress(OSError):  # gone meanwhile
            if name.startswith(PROBE_NS) and time.time() - os.stat(
                    os.path.join(root, name)).st_mtime > age_s:
                found.append(name)
    return sorted(found)


def _records() -> list[dict[str, Any]]:
    """Every readable run record."""
    out = []
    for path in glob.glob(os.path.join(STATE_DIR, "*.json")):
        with contextlib.suppress(OSError, ValueError), open(path, encoding="utf-8") as f:
            out.append(json.load(f))
    return out


def _looks_like_ours(pid: int) -> bool:
    argv = _cmdline(pid).split("\0")
    return (_is_controller(argv) or _is_sidecar(argv)
            or any(a.startswith("mininet:") for a in argv))


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def leftovers(plan: WiringPlan) -> list[str]:
    """What of ``plan`` (a WiringPlan) is still on this machine: bridges, interfaces,
    host shells, controller processes, traffic processes no live run owns, run records.
    Empty means clean."""
    found: list[str] = []
    names = {s.name for s in plan.switches}
    listed = procs.run(["ovs-vsctl", "--timeout=10", "list-br"]).stdout.split()
    found += [f"bridge {b}" for b in listed if b in names]
    found += [f"tagged bridge {b}" for b in tagged_bridges() if b not in names]
    found += [f"QoS row {q}" for q in tagged_qos()]
    intfs = {link.a_intf for link in plan.links} | {link.b_intf for link in plan.links}
    found += [f"interface {i}" for i in sorted(existing_interfaces() & intfs)]
    shells = {f"mininet:{h.name}" for h in plan.hosts}
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        pid = path.split("/")[2]
        argv = _cmdline(int(pid)).split("\0")
        if any(a in shells for a in argv):
            found.append(f"host shell pid {pid} ({argv[-2] if len(argv) > 1 else ''})")
        if _is_controller(argv) and int(pid) != os.getpid():
            found.append(f"controller process pid {pid}")
        if _is_sidecar(argv) and int(pid) != os.getpid():
            found.append(f"dashboard or capture process pid {pid}")
    found += [f"run record {r}" for r in glob.glob(os.path.join(STATE_DIR, "*.json"))]
    live = {rec.get("run_id", "") for rec in _records()
            if rec.get("owner_pid") and pid_alive(int(rec["owner_pid"]))}
    found += [f"scratch folder {d}" for d in stale_scratch(live) if not scratch_kept(d)]
    found += [f"traffic process pid {p} ({program})"
              for p, program in sorted(stale_traffic(live, _live_pids(live)).items())]
    found += [f"fault process pid {p}" for p in fault_processes()]
    found += [f"probe namespace {n}" for n in stale_probe_namespaces()]
    found += [f"{x} (root namespace)" for x in fault_leftovers(root_sh)]
    return found + switch_daemons.leftovers()


# ----------------------------------------------------------------------------------------
# What fault injection (``testbed.shell.faults``) leaves in host namespaces, and its processes
# ----------------------------------------------------------------------------------------
def fault_leftovers(sh: Callable[..., subprocess.CompletedProcess[str]],
                    host: str | None = None) -> list[str]:
    """Every nft table and sink veth of fault injection present in ``host``'s namespace
    (None: the root namespace, where link faults on switch ports put theirs); ``sh`` runs a
    command there. A link fault's undo checks its own names against this."""
    tables = fault_tables(sh(["nft", "list", "tables", NFT_FAMILY], host, check=False).stdout)
    veths = sinks(sh(["ip", "-o", "link", "show"], host, check=False).stdout)
    return [f"nft table {NFT_FAMILY} {t}" for t in tables] + [f"interface {i}" for i in veths]


def root_sh(argv: list[str], _host: str | None = None, stdin: str | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
    """``run`` with a fault context's ``sh`` signature, for the root namespace (where a
    kind's ``clean_crashed`` hook works)."""
    return procs.run(argv, stdin=stdin, check=check, timeout=60)


def _table_devices(table: str) -> set[str]:
    """The interfaces a root-namespace table's chains hook (none once they were deleted)."""
    proc = procs.run(["nft", "-j", "list", "table", NFT_FAMILY, table])
    devs: set[str] = set()
    with contextlib.suppress(ValueError, KeyError, TypeError):
        for item in json.loads(proc.stdout)["nftables"]:
            chain = item.get("chain") or {}
            dev = chain.get("dev", [])
            devs.update([dev] if isinstance(dev, str) else dev)
    return devs


def _clean_root(keep_runs: Collection[str]) -> bool:
    """Remove fault injection's tables and sinks in the root namespace; True if any were.

    While runs in ``keep_runs`` are alive, a table that hooks an interface still present
    is a live fabric's active fault (its switch ports) and stays, with its sink; the
    interfaces of dead runs are gone by now (``clean`` deletes them first).
    """
    existing = existing_interfaces()
    keep_devs: set[str] = set()
    removed = False
    for table in fault_tables(procs.run(["nft", "list", "tables", NFT_FAMILY]).stdout):
        devs = _table_devices(table)
        if keep_runs and devs & existing:
            keep_devs |= devs
            continue
        removed |= procs.run(["nft", "delete", "table", NFT_FAMILY, table]).returncode == 0
    keep = {link_sink(d)[0] for d in keep_devs}
    removed |= delete_links([i for i in sorted(existing) if is_sink(i) and i not in keep]) > 0
    return removed


def _host_shells() -> dict[int, str]:
    """``pid -> name`` of Mininet shells (``mininet:NAME``) in a network namespace of their
    own: hosts, not switches or controllers (whose shells share the root namespace)."""
    try:
        root = os.readlink("/proc/self/ns/net")
    except OSError:
        return {}
    shells: dict[int, str] = {}
    seen: set[str] = set()
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        pid = int(path.split("/")[2])
        for arg in _cmdline(pid).split("\0"):
            if not arg.startswith("mininet:"):
                continue
            try:
                ns = os.readlink(f"/proc/{pid}/ns/net")
            except OSError:
                break
            if ns != root and ns not in seen:
                seen.add(ns)
                shells[pid] = arg[len("mininet:"):]
    return shells


def fault_processes() -> dict[int, str]:
    """``pid -> run id`` of processes a hot-receiver started (``ASTRAL_LAB_FAULT`` marker)."""
    found = {}
    mark = ENV_MARK.encode() + b"="
    for path in glob.glob("/proc/[0-9]*/environ"):
        with contextlib.suppress(OSError, ValueError), open(path, "rb") as fh:
            for var in fh.read().split(b"\0"):
                if var.startswith(mark):
                    found[int(path.split("/")[2])] = var[len(mark):].decode().split(":")[0]
    return found


def _run_pids(keep_runs: Collection[str]) -> set[int]:
    """PIDs listed in the run records of ``keep_runs`` (their host shells)."""
    pids: set[int] = set()
    for path in glob.glob(os.path.join(STATE_DIR, "*.json")):
        with contextlib.suppress(OSError, ValueError):
            with open(path, encoding="utf-8") as fh:
                rec = json.load(fh)
            if rec.get("run_id") in keep_runs:
                pids.update(int(p) for p in rec.get("pids", []))
    return pids


def intf_state(sh: Callable[..., subprocess.CompletedProcess[str]], intf: str
               ) -> dict[str, Any] | None:
    """``ip -j -s link show`` of one root-namespace interface (mtu, ifalias, stats64);
    None if there is no such interface."""
    proc = sh(["ip", "-j", "-s", "link", "show", "dev", intf], check=False)
    if proc.returncode != 0:
        return None
    return dict(json.loads(proc.stdout)[0])


def marked_ports(parse: Callable[[str], Any]) -> dict[str, str]:
    """``interface -> alias`` of root-namespace interfaces whose alias ``parse`` reads (a
    fault kind's mark on a port it changed: its run and what to put back)."""
    out = {}
    for path in glob.glob("/sys/class/net/*/ifalias"):
        with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as fh:
            alias = fh.read().strip()
        if parse(alias) is not None:
            out[path.split("/")[-2]] = alias
    return out


def cleanup_faults(host_pids: Iterable[int] | None = None, keep_runs: Collection[str] = (),
                   runs: Collection[str] | None = None, kinds: Iterable[CrashHook] = ()
                   ) -> dict[str, int]:
    """Remove fault leftovers; restore nothing else. Safe to run any time.

    In the namespace of each host shell (``host_pids``, default every Mininet host shell
    except those of ``keep_runs``): delete fault injection's nft tables (``astral_lab_*``),
    its sink veths and the iptables fallback chains. In the root namespace: the tables
    and sinks of link faults on switch ports (those of a live run in ``keep_runs``
    stay). Then, for runs not in ``keep_runs`` (and, if ``runs`` is given, in ``runs``):
    kill the processes fault injection started (``ENV_MARK``) and call each of ``kinds``'
    ``clean_crashed`` (a kind's own leftovers: rules on a bridge, a port's MTU or place).
    Link states and HTB rates need no cleanup: they live on interfaces that are deleted
    with the lab. Returns how many namespaces (the root one included) had something
    removed, how many processes were killed, and what the kinds' hooks put right, by what
    (``switches``, ``ports``, ...).
    """
    done = {"namespaces": 0, "processes": 0}

    def theirs(run_id: str) -> bool:
        return run_id not in keep_runs and (runs is None or run_id in runs)

    if host_pids is None:
        skip = _run_pids(keep_runs)
        host_pids = [p for p in _host_shells() if p not in skip]
    for pid in host_pids:
        out = procs.run(["mnexec", "-a", str(pid), "sh", "-c", CLEAN_NAMESPACE]).stdout
        done["namespaces"] += int(out.strip().endswith("1"))
    done["namespaces"] += int(_clean_root(keep_runs))
    orphans = [p for p, run_id in fault_processes().items()
               if theirs(run_id) and p != os.getpid()]
    if orphans:
        kill_pids(orphans, grace=1.0)
        done["processes"] = len(orphans)
    for kind in kinds:
        for what, n in kind.clean_crashed(theirs).items():
            done[what] = done.get(what, 0) + n
    return done
