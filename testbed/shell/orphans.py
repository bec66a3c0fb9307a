"""The traffic programs a dead run left running in its hosts, told from a live run's.

A Lab starts its probes, replay agents and iperf3 (``traffic.shell.programs``) in its hosts
through ``popen`` (children of the Lab's process) or a host shell. A Lab killed without
stopping them (SIGTERM with no handler, a crash) leaves them to init, where they run out
their ``--duration`` and hold their host's network namespace open long after its shell is
gone. They name no run, so ``astral-lab clean`` (``testbed.shell.cleanup``) knows them by
what runs, who their parent is and whose namespace they are in, all read from /proc.

Below ``cleanup``, which passes in its names for run folders and interfaces.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence

from testbed.shell.procs import pid_alive
from traffic.shell import programs

#: ``python``, ``python3``, ``python3.11``: an interpreter that may run one of the lab's modules
_PYTHON_RE = re.compile(r"python[0-9.]*")


def _python_module(argv: Sequence[str]) -> str | None:
    """The module a Python command line runs with ``-m``; None for a script, ``-c`` code,
    stdin or a program that is not Python. Only the interpreter's own options are read, so
    ``-m X`` among a script's or ``-c`` code's arguments is not the module it runs."""
    if not argv or not _PYTHON_RE.fullmatch(os.path.basename(argv[0])):
        return None
    args = iter(argv[1:])
    for arg in args:
        if arg == "-" or not arg.startswith("-"):
            return None  # a script (or stdin): what follows are its arguments
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs":
                next(args, None)
            continue
        for i, flag in enumerate(arg[1:], start=1):  # bundled flags: -u, -Bu, -mmod, -X dev
            if flag in "mcXW":
                value = arg[i + 1:] or next(args, "")
                if flag == "m":
                    return value or None
                if flag == "c":
                    return None
                break
    return None


def traffic_program(argv: Sequence[str]) -> str | None:
    """Which of the programs the lab runs in hosts (``traffic.shell.programs``) a command
    line is, or None.

    Judged by what runs (``argv[0]``'s file name, or the module of ``python -m``), never by
    the other arguments: an editor, a ``grep`` or a shell's ``-c`` string that merely names
    one is not it.
    """
    module = _python_module(argv)
    if module is not None:
        return module if module in programs.MODULES else None
    name = os.path.basename(argv[0]) if argv else ""
    return name if name in programs.BINARIES + programs.TOOLS else None


def run_marks(argv: Sequence[str], scratch_re: re.Pattern[str]) -> list[tuple[str, int | None]]:
    """``(run id, owner pid or None)`` of every run folder (``scratch_re``, groups run id and
    owner pid) an argument names: the report or spec path of a program a run started."""
    return [(m.group(1), int(m.group(2)) if m.group(2) else None)
            for arg in argv[1:] for m in scratch_re.finditer(arg)]


def argv_of(pid: int) -> list[str]:
    """``pid``'s command line (empty once it is gone, or for a kernel thread)."""
    try:
        with open(f"/proc/{pid}/cmdline", encoding="utf-8", errors="replace") as f:
            raw = f.read()
    except OSError:
        return []
    return raw.split("\0")[:-1] if raw.endswith("\0") else raw.split("\0") if raw else []


def ppid(pid: int) -> int | None:
    """The parent of ``pid`` (None if it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[1])


def ancestors(pid: int, limit: int = 64) -> list[int]:
    """``pid``'s parent, its parent's parent and so on up to init."""
    out: list[int] = []
    parent = ppid(pid)
    while parent and parent not in out and len(out) < limit:
        out.append(parent)
        parent = ppid(parent) if parent > 1 else None
    return out


def netns(pid: int) -> str | None:
    """``pid``'s network namespace (None if it cannot be read: gone, or not ours to see)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def netns_intfs(pid: int) -> list[str]:
    """The interfaces in ``pid``'s network namespace."""
    try:
        with open(f"/proc/{pid}/net/dev", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()[2:]
    except OSError:
        return []
    return [line.split(":", 1)[0].strip() for line in lines if ":" in line]


def all_pids() -> list[int]:
    return [int(path.split("/")[2]) for path in glob.glob("/proc/[0-9]*/cmdline")]


def stale_traffic(live_runs: Collection[str], live_pids: Collection[int], *,
                  scratch_re: re.Pattern[str], intf_re: re.Pattern[str],
                  shells: Callable[[], Iterable[int]],
                  pids: Iterable[int] | None = None) -> dict[int, str]:
    """``pid -> program`` of the lab's host programs that a dead run left running.

    Stale means all of:

    * it runs one of those programs (``traffic_program``); a general tool such as iperf3
      only in a namespace of its own holding interfaces named like the lab's (``intf_re``);
    * it is orphaned: its parent is init, or a run folder (``scratch_re``) in its arguments
      names an owner that is dead (an orphan a subreaper adopted);
    * no live run owns it: no ancestor is in ``live_pids`` (live runs' owners and listed
      processes), no run folder in its arguments is a live run's or has a live owner, and no
      Mininet shell (``shells``: the PIDs of those running; a host that is still up) shares
      its network namespace.

    A process whose parent lives and belongs to no run (a benchmark's agent, a test's) is
    someone's, and is left alone. ``pids`` limits the candidates (default: all).
    """
    root = netns(os.getpid())
    found: dict[int, tuple[str, str]] = {}
    for pid in all_pids() if pids is None else pids:
        argv = argv_of(pid)
        program = traffic_program(argv)
        if program is None or pid == os.getpid():
            continue
        marks = run_marks(argv, scratch_re)
        if any(run_id in live_runs or (owner is not None and pid_alive(owner))
               for run_id, owner in marks):
            continue
        parent = ppid(pid)
        dead_owner = any(owner is not None for _run, owner in marks)  # all dead, seen above
        if parent is None or (parent != 1 and not dead_owner):
            continue
        if any(p in live_pids for p in ancestors(pid)):
            continue
        ns = netns(pid)
        if ns is None:
            continue  # cannot tell whose host it is in
        if program in programs.TOOLS and (ns == root or not any(
                intf_re.fullmatch(i) for i in netns_intfs(pid))):
            continue
        found[pid] = (program, ns)
    if not found:
        return {}
    hosts_up = {netns(p) for p in shells()} - {root, None}
    return {pid: program for pid, (program, ns) in found.items() if ns not in hosts_up}
