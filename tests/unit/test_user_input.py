"""Nothing a user types can harm the machine or end in a traceback: every output path is a
new or regular file (never a device node, FIFO, socket or a symlink out of its folder),
two files of one command are never one, names too long for Linux are refused before any
work, every file a verb reads is left as it was, wiring plans are checked for meaning,
one name has one meaning in every verb (``--gpus`` is the GPUs in all, ``--gpus-per-server``
each server's, in ``topo``, ``up``, ``model``, ``cost``, the scenarios and plain ``mn``),
a ``--capture`` port is checked against the fabric before any is built, a computation
that will take minutes says so before it starts, and a closed stdout and a stop at any
moment end a command cleanly.

The table (``CASES``) holds every case, one line each: the command, what its one error
line must say. Each runs in a folder holding a device node, a FIFO, a socket and a symlink
out of the folder; after each, every file there is as it was and no results folder exists.
No fabric and no root needed for the table (``run`` is told it is not root, and a Lab
cannot be made); making the device node needs root, and without it that case is skipped.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_validation import one_line, run_cli

from astral_lab import cli
from astral_lab.controller_cli import plan_file
from ops.telemetry import Store
from scenarios import base as scenario_base
from testbed.topologies import build
from vocab.plan import WiringPlan
from vocab.validate import BadValue, out_dir, out_file

REPO = Path(__file__).resolve().parents[2]
#: the program as a user starts it: the launcher that blocks stops until Python can take them
PROGRAM = str(REPO / "bin" / "astral-lab")


# --- the folder every case runs in ------------------------------------------------------------
@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a device node (``mknod X c 1 3``: /dev/null's numbers), a FIFO, a
    socket, a symlink out of the folder and the inputs the cases read; results go to
    ``box/results`` (which must never appear); not root; no Lab can be made."""
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(tmp_path / "dev", stat.S_IFCHR | 0o644, os.makedev(1, 3))
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    sock.close()
    (tmp_path / "elsewhere").write_text("not the lab's\n")
    os.symlink("/etc/hostname", tmp_path / "outlink")
    for folder, inside in (("dev-in-dir", "dev"), ("fifo-in-dir", "fifo")):
        (tmp_path / folder).mkdir()
        for name in ("cost.json", "cost.png", "model.json"):
            if inside == "dev":
                os.mknod(tmp_path / folder / name, stat.S_IFCHR | 0o644, os.makedev(1, 3))
            else:
                os.mkfifo(tmp_path / folder / name)
    plan = build("astral3", servers=2, gpus=2)
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_dict()))
    for name, mistake in PLAN_MISTAKES.items():
        doc = copy.deepcopy(plan.to_dict())
        mistake(doc)
        (tmp_path / f"plan-{name}.json").write_text(json.dumps(doc))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "empty.sqlite").write_bytes(b"")
    _foreign_sqlite(tmp_path / "foreign.sqlite")
    _recorded(tmp_path / "recorded.sqlite")

    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a refused command reached the bring-up")

    monkeypatch.setattr(cli, "make_lab", refuse)  # `up`
    monkeypatch.setattr(scenario_base, "make_lab", refuse)  # a scenario's Run.lab
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _foreign_sqlite(path: Path) -> None:
    """An SQLite file of someone else's (8 KB), which the lab must not write its schema into."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE theirs (x)")
    db.execute("INSERT INTO theirs VALUES (1)")
    db.commit()
    db.close()


def _recorded(path: Path) -> None:
    """A recorded run's telemetry file, as ``ops watch --db`` leaves it."""
    plan = build("astral3", servers=2, gpus=2)
    with Store(str(path)) as st:
        st.set_meta(plan=plan.to_dict(), interval_s=1.0)
        st.add_samples(100.0, {("s0g0", "tx_mbps"): 1.0})


def _snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root``: its type, and the bytes (a file), the numbers (a device
    node) or the target (a symlink) it holds."""
    out: dict[str, tuple[Any, ...]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISREG(st.st_mode):
                out[rel] = ("file", hashlib.sha256(Path(path).read_bytes()).hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            else:
                out[rel] = (stat.S_IFMT(st.st_mode), st.st_rdev)
    return out


# --- wiring plans with one mistake of meaning each ---------------------------------------------
def _node(doc: dict[str, Any], tier: str, nth: int = 0) -> dict[str, Any]:
    return [n for n in doc["nodes"] if n["tier"] == tier][nth]


def _spine_ring(doc: dict[str, Any]) -> None:
    a, b = _node(doc, "spine", 0)["name"], _node(doc, "spine", 1)["name"]
    doc["links"].append(dict(doc["links"][-1], a=a, a_port=90, b=b, b_port=90))


PLAN_MISTAKES: dict[str, Callable[[dict[str, Any]], None]] = {
    "kind": lambda d: _node(d, "leaf").update(kind="banana"),
    "topology": lambda d: d.update(topology="banana"),
    "dpid": lambda d: _node(d, "leaf").update(dpid="zz-not-hex"),
    "ip": lambda d: _node(d, "gpu").update(ip="999.1.1.1"),
    "port0": lambda d: d["links"][0].update(b_port=0),
    "selfloop": lambda d: d["links"][-1].update(b=d["links"][-1]["a"]),
    "spinering": _spine_ring,
    "empty": lambda d: d.update(nodes=[], links=[]),
    "fast": lambda d: d["links"][0].update(mbps=5e6),
    "scaleinf": lambda d: d["params"].update(scale=float("inf")),
    "version": lambda d: d.update(version="1"),
    "tier": lambda d: _node(d, "spine").update(tier="banana"),
}
#: what each plan mistake's line says (the field and the rule)
PLAN_RULES = {
    "kind": "nodes[0].kind must be host or switch (got 'banana')",
    "topology": "topology 'banana' is not one of the lab's designs; choose from astral3, "
                "rail3, railonly, fattree",
    "dpid": "nodes[0].dpid must be 16 hex digits (got 'zz-not-hex')",
    "ip": "nodes[2].ip must be an IPv4 address like 10.0.0.1 (got '999.1.1.1')",
    "port0": "links[0].b_port must be an OpenFlow port number in 1..4294967040 on switch "
             "lf0r0 (got 0)",
    "selfloop": "links[11] joins lf0r1 to itself (a self-loop)",
    "spinering": "links[12] must go up a tier, a below b: spine0 (spine, level 2) to spine1 "
                 "(spine, level 2); no link within a tier (e.g. spine to spine)",
    "empty": "an empty fabric: 0 host(s), 0 switch(es), 0 link(s); a plan needs each",
    "fast": "links[0].mbps must be <= 1000, the fastest link Mininet shapes (got 5000000.0)",
    "scaleinf": "params.scale must be a finite number (got inf)",
    "version": "version must be the number 1 (got '1')",
    "tier": "nodes[6].tier must be one of leaf, tor, edge, spine, agg, core, nvswitch for a "
            "switch (got 'banana')",
}

LONG = "a" * 300
DEEP_PATH = "/".join(["c" * 200] * 21)  # 4,220 bytes: every name fits, the whole does not
#: what a GPU count that is no whole number of default (8-GPU) servers is told
UNEVEN_8 = "does not split evenly over servers of 8 GPUs (--gpus-per-server): give a multiple of 8"

#: (id, argv, extra environment, what the one line says). Paths are relative to the box.
CASES: list[tuple[str, list[str], dict[str, str], str]] = [
    # outputs: only new or regular files
    ("topo-o-dev", ["topo", "astral3", "-o", "dev"], {},
     "argument -o/--output: dev is a device node, not a regular file"),
    ("topo-o-fifo", ["topo", "astral3", "-o", "fifo"], {},
     "argument -o/--output: fifo is a FIFO (named pipe), not a regular file"),
    ("topo-o-sock", ["topo", "astral3", "-o", "sock"], {},
     "argument -o/--output: sock is a socket, not a regular file"),
    ("topo-o-symlink-out", ["topo", "astral3", "-o", "outlink"], {},
     "outlink is a symlink out of its folder (to /etc/hostname)"),
    ("topo-png-dev", ["topo", "astral3", "--png", "dev"], {},
     "argument --png: dev is a device node"),
    ("topo-png-fifo", ["topo", "astral3", "-o", "new.json", "--png", "fifo"], {},
     "argument --png: fifo is a FIFO"),
    ("topo-drawing-next-to-o-is-fifo", ["topo", "astral3", "-o", "fifo.json"], {},
     "the drawing next to -o: fifo.png"),  # (made below: fifo.png is a FIFO)
    ("topo-same-file", ["topo", "astral3", "-o", "x.json", "--png", "x.json"], {},
     "-o and --png name the same file (x.json)"),
    ("topo-same-file-by-another-name", ["topo", "astral3", "-o", "x.json", "--png",
                                    "./sub/../x.json"], {},
     "-o and --png name the same file"),
    ("topo-o-png-is-its-own-drawing", ["topo", "astral3", "-o", "x.png"], {},
     "-o x.png: the drawing goes next to the plan as x.png, the same file"),
    ("topo-no-png-and-png", ["topo", "astral3", "--no-png", "--png", "a.png"], {},
     "--no-png and --png: choose one"),
    ("cost-o-dev", ["cost", "--gpus", "32", "-o", "dev"], {},
     "argument -o/--output: dev is a device node, not a folder"),
    ("cost-o-fifo", ["cost", "--gpus", "32", "-o", "fifo"], {},
     "argument -o/--output: fifo is a FIFO (named pipe), not a folder"),
    ("cost-o-dir-holding-dev", ["cost", "--gpus", "32", "-o", "dev-in-dir"], {},
     "dev-in-dir/cost.json is a device node, not a regular file; the results would "
     "replace it"),
    ("model-o-dir-holding-fifo", ["model", "astral3", "--lb", "ecmp", "-o", "fifo-in-dir"],
     {}, "fifo-in-dir/model.json is a FIFO"),
    ("model-o-dev", ["model", "astral3", "-o", "dev"], {}, "dev is a device node"),
    ("run-o-dev", ["run", "lb-compare", "-o", "dev"], {}, "argument -o/--output: dev is a "
     "device node, not a folder"),
    ("run-o-dir-holding-fifo", ["run", "lb-compare", "-o", "fifo-in-dir"], {},
     "fifo-in-dir/cost.json is a FIFO"),
    ("controller-state-dev", ["controller", "--plan", "plan.json", "--state", "dev"], {},
     "argument --state: dev is a device node"),
    ("controller-state-fifo", ["controller", "--plan", "plan.json", "--state", "fifo"], {},
     "argument --state: fifo is a FIFO"),
    ("controller-state-is-the-plan", ["controller", "--plan", "plan.json", "--state",
                                      "plan.json"], {},
     "--plan and --state name the same file (plan.json)"),
    ("watch-db-dev", ["ops", "watch", "--db", "dev"], {}, "--db dev is a device node"),
    ("watch-db-fifo", ["ops", "watch", "--db", "fifo"], {}, "--db fifo is a FIFO"),
    ("watch-db-foreign", ["ops", "watch", "--db", "foreign.sqlite"], {},
     "--db foreign.sqlite: not an ops telemetry file"),
    ("watch-db-a-plan", ["ops", "watch", "--db", "plan.json"], {},
     "--db plan.json: not an ops telemetry file"),
    ("diagnose-live-db-fifo", ["ops", "diagnose", "--live", "--db", "fifo"], {},
     "--db fifo is a FIFO"),
    ("diagnose-live-db-is-baseline", ["ops", "diagnose", "--live", "--db", "recorded.sqlite",
                                      "--baseline", "recorded.sqlite"], {},
     "--baseline and --db name the same file (recorded.sqlite)"),
    # over-long names, before any work
    ("topo-o-long-name", ["topo", "astral3", "-o", f"{LONG}/p.json"], {},
     "is 300 bytes long; a name takes at most 255"),
    ("topo-results-long-name", ["topo", "astral3"], {"ASTRAL_LAB_RESULTS": LONG},
     "is 300 bytes long; a name takes at most 255"),
    ("cost-results-long-path", ["cost", "--gpus", "32"], {"ASTRAL_LAB_RESULTS": DEEP_PATH},
     "a path takes at most 4095"),
    ("model-o-long-name", ["model", "astral3", "-o", LONG], {}, "a name takes at most 255"),
    ("run-o-long-name", ["run", "lb-compare", "-o", f"x/{LONG}"], {},
     "a name takes at most 255"),
    ("controller-state-long", ["controller", "--plan", "plan.json", "--state", LONG], {},
     "a name takes at most 255"),
    # read-only inputs that are not files to read
    ("controller-plan-fifo", ["controller", "--plan", "fifo"], {},
     "argument --plan: fifo: is a FIFO (named pipe), not a regular file"),
    ("controller-plan-dev", ["controller", "--plan", "dev"], {},
     "argument --plan: dev: is a device node, not a regular file"),
    ("dashboard-plan-fifo", ["dashboard", "--plan", "fifo"], {}, "argument --plan: fifo: is a "
     "FIFO"),
    ("diagnose-db-fifo", ["ops", "diagnose", "--ask", "?", "--db", "fifo"], {},
     "--db fifo: is a FIFO (named pipe), not a regular file"),
    ("diagnose-db-dev", ["ops", "diagnose", "--ask", "?", "--db", "dev"], {},
     "--db dev: is a device node, not a regular file"),
    ("diagnose-db-empty", ["ops", "diagnose", "--ask", "?", "--db", "empty.sqlite"], {},
     "--db empty.sqlite: not an ops telemetry file"),
    ("diagnose-db-foreign", ["ops", "diagnose", "--ask", "?", "--db", "foreign.sqlite"], {},
     "--db foreign.sqlite: not an ops telemetry file"),
    ("diagnose-baseline-foreign", ["ops", "diagnose", "--ask", "?", "--db", "recorded.sqlite",
                                   "--baseline", "foreign.sqlite"], {},
     "--baseline foreign.sqlite: not an ops telemetry file"),
    # plans checked for meaning, at both doors; JSON too deep is one line
    *[(f"controller-plan-{name}", ["controller", "--plan", f"plan-{name}.json"], {},
       f"argument --plan: plan-{name}.json: wiring plan: {rule}")
      for name, rule in PLAN_RULES.items()],
    *[(f"dashboard-plan-{name}", ["dashboard", "--plan", f"plan-{name}.json"], {},
       f"argument --plan: plan-{name}.json: wiring plan: {rule}")
      for name, rule in PLAN_RULES.items()],
    ("controller-plan-deep", ["controller", "--plan", "deep.json"], {},
     "deep.json: not a wiring plan: its JSON is nested too deeply"),
    ("dashboard-plan-deep", ["dashboard", "--plan", "deep.json"], {},
     "deep.json: not a wiring plan: its JSON is nested too deeply"),
    # one meaning per option: no abbreviations, no repeats
    ("topo-abbreviated", ["topo", "astral3", "--scal", "1e-4"], {},
     "astral-lab topo: error: unrecognized arguments: --scal 1e-4; did you mean --scale?"),
    ("model-abbreviated", ["model", "astral3", "--gpu", "8"], {},
     "unrecognized arguments: --gpu 8; did you mean --gpus?"),
    ("up-abbreviated", ["up", "astral3", "--no-cl"], {},
     "astral-lab up: error: unrecognized arguments: --no-cl; did you mean --no-cli?"),
    ("cost-abbreviated", ["cost", "--gpus", "32", "--no-pn"], {},
     "unrecognized arguments: --no-pn; did you mean --no-png?"),
    ("run-abbreviated", ["run", "lb-compare", "--secon", "3"], {},
     "astral-lab run lb-compare: error: unrecognized arguments: --secon 3"),
    ("controller-abbreviated", ["controller", "--plan", "plan.json", "--stat", "s.json"], {},
     "unrecognized arguments: --stat s.json; did you mean --state?"),
    ("diagnose-abbreviated", ["ops", "diagnose", "--as", "?"], {},
     "unrecognized arguments: --as ?; did you mean --ask?"),
    ("dashboard-abbreviated", ["dashboard", "--dem"], {},
     "unrecognized arguments: --dem; did you mean --demo?"),
    ("topo-repeated", ["topo", "astral3", "--scale", "1e-4", "--scale", "2e-4"], {},
     "argument --scale: given twice; give it once"),
    ("model-repeated", ["model", "astral3", "--lb", "ecmp", "--lb", "planned"], {},
     "argument --lb: given twice"),
    ("cost-repeated", ["cost", "--gpus", "32", "--gpus", "64"], {},
     "argument --gpus: given twice"),
    ("run-repeated", ["run", "lb-compare", "--seconds", "3", "--seconds", "4"], {},
     "astral-lab run lb-compare: error: argument --seconds: given twice"),
    ("controller-repeated", ["controller", "--plan", "plan.json", "--plan", "plan.json"], {},
     "argument --plan: given twice"),
    ("up-repeated", ["up", "astral3", "--gpus", "16", "--gpus", "32"], {},
     "astral-lab up: error: argument --gpus: given twice"),
    ("dashboard-repeated", ["dashboard", "--port", "1", "--port", "2"], {},
     "argument --port: given twice"),
    ("watch-repeated", ["ops", "watch", "--interval", "1", "--interval", "2"], {},
     "argument --interval: given twice"),
    ("diagnose-repeated", ["ops", "diagnose", "--ask", "a", "--ask", "b"], {},
     "argument --ask: given twice"),
    # options that would do nothing with the others given, and values that mean nothing
    ("diagnose-ask-empty", ["ops", "diagnose", "--ask", ""], {},
     "astral-lab ops diagnose: error: --ask needs a question"),
    ("diagnose-ask-no-such-host", ["ops", "diagnose", "--ask", "why is s9g9 slow?", "--db",
                                   "recorded.sqlite"], {},
     "--ask names s9g9, which this fabric (astral3, 4 GPUs) does not have"),
    ("diagnose-ask-mistyped-host", ["ops", "diagnose", "--ask", "is spine9 ok?", "--db",
                                    "recorded.sqlite"], {}, "does not have; did you mean spine"),
    ("diagnose-live-without-db", ["ops", "diagnose", "--live"], {},
     "--live collects into the file --db names"),
    ("diagnose-offline-collect", ["ops", "diagnose", "--db", "recorded.sqlite", "--collect",
                                  "3"], {}, "--collect does nothing with --db"),
    ("diagnose-fallback-without-llm", ["ops", "diagnose", "--llm-fallback"], {},
     "--llm-fallback without --llm"),
    ("model-tokens-with-alltoall", ["model", "astral3", "--tokens", "64"], {},
     "--tokens shapes the prefill and decode workloads only, not --workload alltoall"),
    ("model-phase-with-alltoall", ["model", "astral3", "--phase", "combine"], {},
     "--phase shapes the prefill and decode workloads only"),
    ("model-model-with-alltoall", ["model", "astral3", "--model", "deepseek-v3"], {},
     "--model shapes the prefill and decode workloads only"),
    ("model-bytes-with-decode", ["model", "astral3", "--workload", "decode", "--bytes", "9"],
     {}, "--bytes shapes the alltoall workload only, not --workload decode"),
    ("model-exact-flows-per-flow", ["model", "astral3", "--mode", "per-flow", "--exact-flows",
                                    "10"], {}, "--exact-flows chooses the mode in --mode auto"),
    ("model-aggregate-rail3", ["model", "rail3", "--mode", "aggregate"], {},
     "--mode aggregate: the aggregate what-if covers two-tier designs (astral3) only, not "
     "rail3"),
    ("up-switch-daemons-99999", ["up", "astral3", "--switch-daemons", "99999"], {},
     "switch daemons must be a whole number in 1..256 or 'auto', not 99999"),
    ("up-switch-daemons-past-switches", ["up", "astral3", "--switch-daemons", "99"], {},
     "--switch-daemons 99: the fabric has 20 switches"),
    ("run-switch-daemons-99999", ["run", "lb-compare", "--switch-daemons", "99999"], {},
     "switch daemons must be a whole number in 1..256 or 'auto', not 99999"),
    ("up-capture-no-such-port", ["up", "astral3", "--capture", "lf0r0:99"], {},
     "astral-lab up: error: --capture: astral3 has no switch port lf0r0:99; its ports look "
     "like lf0r0-eth1"),
    ("run-capture-no-such-port", ["run", "lb-compare", "--capture", "lf0r0:99"], {},
     "astral-lab run: error: --capture: astral3 has no switch port lf0r0:99; its ports look "
     "like lf0r0-eth1"),
    ("demo-capture-no-such-port", ["demo", "--capture", "lf0r0:99"], {},
     "--capture: astral3 has no switch port lf0r0:99"),
    ("run-capture-on-the-quick-fabric", ["run", "demo", "--quick", "--capture", "lf1r0:1"], {},
     "--capture: astral3 has no switch port lf1r0:1"),  # the full fabric has it
    ("run-capture-on-no-fabric-of-several", ["run", "topology-compare", "--capture",
                                             "spine9:1"], {},
     "--capture: astral3 has no switch port spine9:1"),
    ("run-kinds-all", ["run", "ops-eval", "--kinds", "all"], {},
     "argument --kinds: 'all' is not one of link-down"),
    ("model-lb-all", ["model", "astral3", "--lb", "all"], {},
     "argument --lb: unknown policy 'all'; choose from ecmp"),
    ("run-seconds-1e-300", ["run", "lb-compare", "--seconds", "1e-300"], {},
     "argument --seconds: must be a finite number in [0.01, 3600] (got '1e-300')"),
    ("dashboard-seconds-1e-300", ["dashboard", "--demo", "--seconds", "1e-300"], {},
     "argument --seconds: must be a finite number in [0.001, 86400]"),
    ("topo-scale-negative", ["topo", "astral3", "--scale", "-1e-4"], {},
     "argument --scale: must be a finite number in (0, 0.01] (got '-1e-4')"),
    ("controller-of-host", ["controller", "--plan", "plan.json", "--of-host",
                            "no.such.host.invalid"], {},
     "--of-host no.such.host.invalid: not an address this machine can listen on"),
    # -h's ranges are the builders'
    ("topo-gpus-per-server-past-the-builders", ["topo", "astral3", "--gpus-per-server", "256"],
     {}, "argument --gpus-per-server: must be a whole number in 1..255 (got '256')"),
    ("up-gpus-per-server-past-the-builders", ["up", "astral3", "--gpus-per-server", "256"], {},
     "argument --gpus-per-server: must be a whole number in 1..255 (got '256')"),
    ("run-gpus-per-server-past-the-builders", ["run", "lb-compare", "--gpus-per-server", "17"],
     {}, "argument --gpus-per-server: must be a whole number in 1..16 (got '17')"),
    ("topo-gpus-past-the-builders", ["topo", "astral3", "--gpus", "1048576"], {},
     "--gpus 1048576 is 131,072 servers of 8 GPUs; the builders take at most 65,536"),
    ("up-gpus-past-the-builders", ["up", "astral3", "--gpus", "1048576"], {},
     "--gpus 1048576 is 131,072 servers of 8 GPUs; the builders take at most 65,536"),
    ("run-gpus-past-the-builders", ["run", "lb-compare", "--gpus", "2048"], {},
     "argument --gpus: must be a whole number in 1..1024 (got '2048')"),
    ("run-gpus-past-a-scenarios-servers", ["run", "lb-compare", "--gpus", "1024",
                                          "--gpus-per-server", "1"], {},
     "--gpus 1024 is 1,024 servers of 1 GPUs; a scenario's fabric takes at most 64"),
    ("topo-k-past-the-builders", ["topo", "fattree", "--k", "256"], {},
     "argument --k: must be a whole number in 0..254 (got '256')"),
    ("model-gpus-per-server-past-the-builders", ["model", "astral3", "--gpus-per-server",
                                                 "256"], {}, "must be a whole number in 1..255"),
    # one name, one meaning: --gpus is the GPUs in all in every verb (the per-server count
    # is --gpus-per-server), and a total that does not split evenly is refused
    ("model-gpus-uneven", ["model", "astral3", "--gpus", "30"], {}, f"--gpus 30 {UNEVEN_8}"),
    ("topo-gpus-uneven", ["topo", "astral3", "--gpus", "30"], {}, f"--gpus 30 {UNEVEN_8}"),
    ("up-gpus-uneven", ["up", "astral3", "--gpus", "30"], {}, f"--gpus 30 {UNEVEN_8}"),
    ("cost-gpus-uneven", ["cost", "--gpus", "8192,30"], {}, f"--gpus 30 {UNEVEN_8}"),
    ("run-gpus-uneven", ["run", "lb-compare", "--gpus", "30"], {},
     "astral-lab run: error: --gpus 30 does not split evenly over servers of 4 GPUs "
     "(--gpus-per-server): give a multiple of 4"),
    ("demo-gpus-uneven", ["demo", "--gpus", "30"], {}, f"--gpus 30 {UNEVEN_8}"),
    ("run-quick-gpus-uneven", ["run", "ops-eval", "--quick", "--gpus-per-server", "3"], {},
     "--gpus 4 does not split evenly over servers of 3 GPUs (--gpus-per-server)"),
    ("topo-default-gpus-uneven", ["topo", "astral3", "--gpus-per-server", "3"], {},
     "--gpus 32 (the default) does not split evenly over servers of 3 GPUs "
     "(--gpus-per-server): give --gpus as a multiple of 3"),
    ("model-default-gpus-uneven", ["model", "astral3", "--gpus-per-server", "3"], {},
     "--gpus 32 does not split evenly over servers of 3 GPUs (--gpus-per-server)"),
    ("cost-gpus-uneven-per-server", ["cost", "--gpus", "32", "--gpus-per-server", "3"], {},
     "--gpus 32 does not split evenly over servers of 3 GPUs (--gpus-per-server)"),
    ("topo-servers-disagree", ["topo", "astral3", "--servers", "2", "--gpus", "32"], {},
     "--servers 2 and --gpus 32 disagree: 2 servers of 8 GPUs (--gpus-per-server) are 16 "
     "GPUs; give one of --servers and --gpus"),
    ("up-servers-disagree", ["up", "astral3", "--servers", "2", "--gpus", "32",
                             "--gpus-per-server", "4"], {},
     "--servers 2 and --gpus 32 disagree: 2 servers of 4 GPUs (--gpus-per-server) are 8 GPUs"),
    ("run-gpus-odd-servers", ["run", "link-failure", "--gpus", "12"], {},
     "--gpus 12 is 3 servers of 4 GPUs; astral3 pairs servers in blocks of two: give a "
     "multiple of 8"),
    ("run-servers-is-no-scenario-option", ["run", "lb-compare", "--servers", "4"], {},
     "astral-lab run lb-compare: error: unrecognized arguments: --servers 4"),
    ("model-gpus-past-the-builders", ["model", "astral3", "--gpus", "1048576"], {},
     "--gpus 1048576 is 131,072 servers of 8 GPUs; the builders take at most 65,536"),
    # did you mean
    ("verb", ["tpo", "astral3"], {}, "invalid choice: 'tpo'; did you mean topo?"),
    ("design", ["topo", "astral"], {}, "invalid choice: 'astral'; did you mean astral3?"),
    ("scenario", ["run", "lb-compar"], {},
     "unknown scenario 'lb-compar'; did you mean lb-compare?"),
    ("policy", ["model", "astral3", "--lb", "ecmpp"], {},
     "unknown policy 'ecmpp'; did you mean ecmp?"),
    ("controller-mode", ["up", "astral3", "--lb", "planed"], {}, "did you mean planned?"),
    ("ops-subverb", ["ops", "diagnos"], {}, "did you mean diagnose?"),
    ("fault-kind", ["run", "ops-eval", "--kinds", "link-down,link-dwn"], {},
     "argument --kinds: 'link-dwn' is not one of link-down, link-flap"),
    ("fault-kind-closest", ["run", "ops-eval", "--kinds", "link-dwn"], {},
     "; did you mean link-down?"),
    ("scenario-choice", ["run", "ops-eval", "--severity", "hrd"], {},
     "argument --severity: 'hrd' is not one of gray, hard, mixed; did you mean hard?"),
]


@pytest.mark.parametrize("argv, env, needle", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_every_case_is_one_line_exit_2_and_nothing_written_or_changed(
        box: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], env: dict[str, str], needle: str) -> None:
    os.mkfifo(box / "fifo.png")
    (box / "sub").mkdir()
    for key, value in env.items():
        monkeypatch.setenv(key, str(box / value))
    before = _snapshot(box)
    status = run_cli(argv)
    line = one_line(capsys)
    assert status == 2, (argv, line)
    assert line.startswith("astral-lab") and needle in line, (argv, line)
    assert _snapshot(box) == before, argv
    assert not (box / "results").exists()


def test_the_table_holds_one_case_per_verb_for_each_rule() -> None:
    """Every verb with an output is tried with a device node or FIFO and with a name too
    long; every verb that reads a plan or telemetry with a file it must not open; every
    plan mistake at both plan doors."""
    ids = {c[0] for c in CASES}
    for verb in ("topo", "cost", "model", "run", "controller", "watch", "diagnose"):
        assert any(i.startswith(verb) and ("dev" in i or "fifo" in i) for i in ids), verb
    for verb in ("topo", "cost", "model", "run", "controller"):
        assert any(i.startswith(verb) and "long" in i for i in ids), verb
    for verb in ("topo", "up", "model", "cost", "run", "controller", "diagnose", "dashboard",
                 "watch"):
        assert f"{verb}-repeated" in ids
    for verb in ("topo", "up", "model", "cost", "run", "controller", "diagnose", "dashboard"):
        assert f"{verb}-abbreviated" in ids
    for name in PLAN_MISTAKES:
        assert {f"controller-plan-{name}", f"dashboard-plan-{name}"} <= ids
    # one meaning of --gpus (in all) everywhere, -h's ranges the builders', --capture
    # checked against the fabric before anything is built
    for verb in ("topo", "up", "model", "cost", "run", "demo"):
        assert f"{verb}-gpus-uneven" in ids, verb
    for verb in ("topo", "up", "model", "run"):
        assert f"{verb}-gpus-per-server-past-the-builders" in ids, verb
    for verb in ("topo", "up"):
        assert {f"{verb}-gpus-past-the-builders", f"{verb}-servers-disagree"} <= ids, verb
    for verb in ("up", "run", "demo"):
        assert f"{verb}-capture-no-such-port" in ids, verb


# --- a device node and a FIFO, untouched by every verb's outputs -----------------------------
#: every verb's output option, pointed at a path (a file) or a folder holding the path
OUTPUTS: list[tuple[str, Callable[[str], list[str]]]] = [
    ("topo -o", lambda p: ["topo", "astral3", "-o", p]),
    ("topo --png", lambda p: ["topo", "astral3", "--png", p]),
    ("cost -o", lambda p: ["cost", "--gpus", "32", "-o", p]),
    ("model -o", lambda p: ["model", "astral3", "--lb", "ecmp", "-o", p]),
    ("run -o", lambda p: ["run", "lb-compare", "-o", p]),
    ("controller --state", lambda p: ["controller", "--plan", "plan.json", "--state", p]),
    ("ops watch --db", lambda p: ["ops", "watch", "--db", p]),
    ("ops diagnose --live --db", lambda p: ["ops", "diagnose", "--live", "--db", p]),
]


@pytest.mark.parametrize("verb, argv", OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_a_device_node_and_a_fifo_are_untouched_by_every_verbs_output(
        box: Path, capsys: pytest.CaptureFixture[str], verb: str,
        argv: Callable[[str], list[str]]) -> None:
    for target in ("dev", "fifo", "dev-in-dir", "fifo-in-dir"):
        if target.endswith("-in-dir") and verb.split()[0] not in ("cost", "model", "run"):
            continue
        before = _snapshot(box)
        assert run_cli(argv(target)) == 2, (verb, target)
        line = one_line(capsys)
        assert "device node" in line or "FIFO" in line, line
        assert _snapshot(box) == before, (verb, target)
    assert stat.S_ISCHR(os.lstat(box / "dev").st_mode)
    assert os.lstat(box / "dev").st_rdev == os.makedev(1, 3)
    assert stat.S_ISFIFO(os.lstat(box / "fifo").st_mode)


def test_the_writers_themselves_refuse_a_special_file(box: Path) -> None:
    """The last check, under every door: the atomic writers never replace a device node."""
    from testbed.draw import draw_plan
    from vocab.plan import write_json_atomic

    plan = build("astral3", servers=2, gpus=2)
    for write in (lambda p: write_json_atomic(p, {}), plan.save,
                  lambda p: draw_plan(plan, p)):
        for target in ("dev", "fifo", "sock", "outlink"):
            with pytest.raises(BadValue):
                write(str(box / target))
    assert stat.S_ISCHR(os.lstat(box / "dev").st_mode)
    assert os.readlink(box / "outlink") == "/etc/hostname"


def test_paths_that_may_be_written(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text("{}")
    (tmp_path / "real.json").write_text("{}")
    os.symlink("real.json", tmp_path / "inside")
    for ok in ("old.json", "new.json", "inside", "new/deeper/p.json"):
        assert out_file(str(tmp_path / ok))
    assert out_dir(str(tmp_path / "new"), files=("cost.json",))
    assert out_dir(str(tmp_path), files=None)  # regular files and a link inside: fine
    assert not (tmp_path / "new").exists()


# --- read-only means read-only ------------------------------------------------------------------
def _hashes(*paths: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_diagnose_never_writes_a_file_it_reads(box: Path, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    """`ops diagnose --db` wrote the telemetry schema into an empty (0 B -> 28 KB) or a
    foreign SQLite file (8 KB -> 32 KB) before refusing it. Refused or answered, every file
    it reads keeps its bytes, and nothing (no journal) appears beside them."""
    files = [box / "empty.sqlite", box / "foreign.sqlite", box / "recorded.sqlite"]
    before, listing = _hashes(*files), sorted(os.listdir(box))
    assert (box / "empty.sqlite").stat().st_size == 0
    assert run_cli(["ops", "diagnose", "--ask", "?", "--db", "empty.sqlite"]) == 2
    assert run_cli(["ops", "diagnose", "--ask", "?", "--db", "foreign.sqlite"]) == 2
    assert run_cli(["ops", "diagnose", "--ask", "what is wrong?", "--db", "recorded.sqlite",
                  "--baseline", "recorded.sqlite"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() and out.err.count("not an ops telemetry file") == 2
    assert _hashes(*files) == before
    assert sorted(os.listdir(box)) == listing


def test_a_recorded_store_opened_read_only_cannot_be_written(box: Path) -> None:
    st = Store(str(box / "recorded.sqlite"), readonly=True)
    try:
        assert "plan" in st.meta()
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            st.set_meta(x=1)
    finally:
        st.close()
    with pytest.raises(sqlite3.DatabaseError):
        Store(str(box / "foreign.sqlite"), readonly=True)


def test_plan_doors_read_and_never_write(box: Path) -> None:
    files = [box / "plan.json", box / "plan-kind.json", box / "deep.json"]
    before = _hashes(*files)
    assert plan_file(str(box / "plan.json")) == str(box / "plan.json")
    for bad in files[1:]:
        with pytest.raises(BadValue):
            plan_file(str(bad))
    assert _hashes(*files) == before


# --- plans: what passes the schema, the controller and the drawing hold -------------------------
def test_every_plan_mistake_is_refused_by_the_schema_naming_field_and_rule() -> None:
    doc = build("astral3", servers=2, gpus=2).to_dict()
    for name, mistake in PLAN_MISTAKES.items():
        if name == "topology":  # a design's name is the CLI's to know (plan_file)
            continue
        bad = copy.deepcopy(doc)
        mistake(bad)
        with pytest.raises(ValueError) as info:
            WiringPlan.from_dict(json.loads(json.dumps(bad)))
        assert PLAN_RULES[name] in str(info.value), name
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("design", ["astral3", "rail3", "railonly", "fattree"])
def test_what_passes_the_schema_the_controller_and_the_live_view_hold(design: str) -> None:
    """Seeded rewirings of a real plan (ends moved, links and nodes dropped or doubled,
    tiers, levels, addresses changed): each either refused by the schema in one line, or
    held by ``FabricLogic`` and the live view's layout without an error."""
    import random

    from controllers.fabric import FabricLogic
    from ops.dashboard import layout

    base = build(design, servers=2, gpus=2).to_dict()
    names = [n["name"] for n in base["nodes"]]
    rng = random.Random(5)
    held = 0
    for _ in range(150):
        doc = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            op = rng.choice(["end", "droplink", "dropnode", "double", "ip", "dpid", "level",
                             "tier"])
            if op == "end" and doc["links"]:
                rng.choice(doc["links"])[rng.choice("ab")] = rng.choice(names)
            elif op == "droplink" and doc["links"]:
                doc["links"].pop(rng.randrange(len(doc["links"])))
            elif op == "dropnode" and doc["nodes"]:
                doc["nodes"].pop(rng.randrange(len(doc["nodes"])))
            elif op == "double" and doc["links"]:
                doc["links"].append(dict(rng.choice(doc["links"]), a_port=rng.randint(1, 40),
                                         b_port=rng.randint(1, 40)))
            elif op == "ip" and doc["nodes"]:
                rng.choice(doc["nodes"])["ip"] = rng.choice(["10.9.9.9", "1.2.3.4", "0.0.0.0"])
            elif op == "dpid" and doc["nodes"]:
                rng.choice(doc["nodes"])["dpid"] = rng.choice(["0" * 16, "f" * 16, "1" * 15])
            elif op == "level" and doc["nodes"]:
                rng.choice(doc["nodes"])["level"] = rng.randint(0, 4)
            elif op == "tier" and doc["nodes"]:
                rng.choice(doc["nodes"])["tier"] = rng.choice(["leaf", "spine", "core", "gpu"])
        try:
            plan = WiringPlan.from_dict(doc)
        except ValueError as exc:
            assert "\n" not in str(exc)
            continue
        FabricLogic(plan)
        layout(plan)
        held += 1
    assert held > 10  # the draws do reach the controller, not only the schema


# --- pipes and stops ----------------------------------------------------------------------------
def _closed_stdout(argv: list[str], cwd: Path, env: dict[str, str]
                   ) -> subprocess.CompletedProcess[str]:
    """Run the program with a stdout whose reader is already gone (`| head -0`)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([PROGRAM, *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, env=env, timeout=300)
    finally:
        os.close(write)


@pytest.mark.parametrize("argv, files", [
    (["policies", "--json"], []),
    (["list"], []),
    (["topo", "astral3", "--gpus", "4", "--gpus-per-server", "2", "-o", "t/plan.json"],
     ["t/plan.json", "t/plan.png"]),
    (["cost", "--gpus", "32", "--no-png", "-o", "c"], ["c/cost.json"]),
    (["model", "astral3", "--lb", "ecmp", "-o", "m"], ["m/model.json"]),
], ids=["policies", "list", "topo", "cost", "model"])
def test_a_closed_stdout_ends_quietly_with_141_and_the_files_written(
        tmp_path: Path, argv: list[str], files: list[str]) -> None:
    """`astral-lab policies --json | head -1` ended in a BrokenPipeError traceback, exit 1,
    and `cost`/`model` then wrote no JSON."""
    env = dict(os.environ, ASTRAL_LAB_RESULTS=str(tmp_path / "results"))
    got = _closed_stdout(argv, tmp_path, env)
    assert got.returncode == 141, got.stderr
    assert got.stderr == ""
    for f in files:
        assert (tmp_path / f).stat().st_size > 0, f


def test_a_pipe_read_to_its_end_is_exit_0() -> None:
    got = subprocess.run([PROGRAM, "policies", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert got.returncode == 0 and json.loads(got.stdout)[0]["name"] == "ecmp"


def _stopped(argv: list[str], sig: int, after: float, cwd: Path, env: dict[str, str]
             ) -> tuple[int | None, str]:
    """Start the program in its own session (as a terminal does), send ``sig`` to its
    group ``after`` seconds in; (status, stderr), status None if it had already ended."""
    proc = subprocess.Popen([PROGRAM, *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
                            start_new_session=True)
    time.sleep(after)
    ended = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if ended is None:
        os.killpg(proc.pid, sig)
    _out, err = proc.communicate(timeout=300)
    return (None if ended is not None else proc.returncode), err


#: the short commands, and a stop at fractions of each one's own run time (the first
#: moments, when Python itself is starting, included)
SHORT = {
    "list": ["list"],
    "policies": ["policies"],
    "topo": ["topo", "astral3", "--gpus", "4", "--gpus-per-server", "2", "-o", "t/plan.json",
             "--no-png"],
    "cost": ["cost", "--gpus", "32", "--no-png", "-o", "c"],
}
MOMENTS = (0.0, 0.002, 0.01, 0.03, 0.1, 0.25, 0.45, 0.65, 0.8)


@pytest.mark.parametrize("name", list(SHORT))
def test_a_stop_at_any_moment_of_a_short_command_stops_it_cleanly(tmp_path: Path,
                                                                  name: str) -> None:
    """A Ctrl-C in the interpreter's first ~100 ms printed "Fatal Python error:
    init_import_site"; at 0.15-0.65 s it was lost in 18 of 48 tries (exit 0). Now every stop
    either stops the command with the shell's status (or kills it by the signal before the
    handlers exist) or, landing as it finishes, is reported with that status."""
    env = dict(os.environ, ASTRAL_LAB_RESULTS=str(tmp_path / "results"))
    took = float("inf")
    for _ in range(2):  # its run time on this machine now: the quicker of two
        start = time.monotonic()
        done = subprocess.run([PROGRAM, *SHORT[name]], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)
        took = min(took, time.monotonic() - start)
        assert done.returncode == 0, done.stderr
    sent = 0
    for i, at in enumerate(MOMENTS):
        sig = (signal.SIGINT, signal.SIGTERM)[i % 2]
        status, err = _stopped(SHORT[name], sig, at * took, tmp_path, env)
        assert "Fatal Python error" not in err and "Traceback" not in err, (at, err)
        assert "Exception ignored" not in err, (at, err)
        if status is None:
            continue  # it had finished before the stop was sent (a stop that lands while
            # the kernel ends the process is not seen by it: not sent this late)
        sent += 1
        assert status in (128 + sig, -sig), (at, sig, status, err)
    assert sent >= len(MOMENTS) - 3  # (a busy machine may finish a run early)


def test_the_launcher_is_the_installed_program() -> None:
    """`pip install` puts bin/astral-lab in the venv's bin (not a generated entry point,
    which starts Python with the signals open)."""
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    assert project["tool"]["setuptools"]["script-files"] == ["bin/astral-lab"]
    assert "scripts" not in project["project"]
    assert os.access(PROGRAM, os.X_OK)
    blocked = subprocess.run(
        ["sh", "-c", f"sed -n 's/^exec env --block-signal=\\([A-Z,]*\\) .*/\\1/p' {PROGRAM}"],
        capture_output=True, text=True).stdout.strip()
    assert blocked == "INT,TERM,HUP"


def test_stops_are_unblocked_once_the_handlers_are_in() -> None:
    """Started with the stops blocked, the program takes them as soon as its handlers are in:
    one sent before that is delivered then, as a clean stop."""
    got = subprocess.run(
        ["env", "--block-signal=INT,TERM,HUP", sys.executable, "-c",
         "import os, signal, sys\n"
         "os.kill(os.getpid(), signal.SIGTERM)  # blocked: waits\n"
         "import astral_lab.__main__ as program\n"
         "sys.exit(program.main(['list']))"],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert got.returncode == 143, got.stderr
    assert "Traceback" not in got.stderr


# --- long work: its duration said before it starts ---------------------------------------------
@pytest.mark.parametrize("calibration_s, said", [
    (1.0, "model: drawing the prefill step (64 GPUs x 1,048,576 tokens each) should take about "
          "8 min 32 s here (an estimate: the same step at 2,048 tokens per GPU took 1.00 s; "
          "the solve comes after it)"),
    (0.05, None)])  # 26 s: not worth a line (progress lines follow a run past a few seconds)
def test_a_step_that_takes_minutes_is_announced_before_it_is_drawn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        calibration_s: float, said: str | None) -> None:
    """`model astral3 --gpus 64 --workload prefill --tokens 1048576` computed for ~8 min and
    printed nothing where stderr is not a terminal (a test's captured stderr is not). The
    estimate is measured (the same step at a few tokens per GPU, timed: here its clock is
    told the calibration took ``calibration_s``), and the step itself is not drawn."""
    from testbed.models import flowmodel, jobs

    ticks = iter([0.0, calibration_s])
    forecast = jobs.step_forecast
    monkeypatch.setattr(flowmodel, "step_forecast",
                        lambda *a, **k: forecast(*a, clock=lambda: next(ticks), **k))

    def drawn(*_a: Any, **_k: Any) -> None:
        raise ValueError("stopped where the step would be drawn")

    monkeypatch.setattr(flowmodel, "make_job", drawn)
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path / "results"))
    status = run_cli(["model", "astral3", "--gpus", "64", "--workload", "prefill", "--tokens",
                      "1048576"])
    err = capsys.readouterr().err.splitlines()
    assert status == 2
    assert err == [*([said] if said else []),
                   "astral-lab model: error: stopped where the step would be drawn"]
    assert not (tmp_path / "results").exists()


# --- the exit statuses docs/cli.md states are exactly the program's ----------------------------
def _documented_statuses() -> dict[str, str]:
    """docs/cli.md's exit-status table: status (as written, ``143 (129)``) -> meaning."""
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("\n## Exit status\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.fullmatch(r"\| (\d+(?: \(\d+\))?) \| (.+) \|", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_the_documented_exit_statuses_are_exactly_the_programs() -> None:
    from astral_lab.__main__ import EXIT_PIPE
    from testbed.shell.signals import exit_status

    rows = _documented_statuses()
    program = {"0": 0, "1": cli.EXIT_LAB, "2": cli.EXIT_USAGE, "3": cli.EXIT_GUARD,
               "130": cli.EXIT_INTERRUPTED, "141": EXIT_PIPE,
               "143 (129)": (exit_status(signal.SIGTERM), exit_status(signal.SIGHUP))}
    assert set(rows) == set(program)
    assert program["130"] == exit_status(signal.SIGINT) == 130 and EXIT_PIPE == 141
    assert program["143 (129)"] == (143, 129)
    for word, status in (("standard output", 141), ("SIGTERM", 143), ("Ctrl-C", 130)):
        assert word in " ".join(v for k, v in rows.items() if str(status) in k)
    for status in ("0", "1", "2", "3", "130", "141", "143", "129"):
        assert f" {status} " in (cli.__doc__ or ""), status  # the module says the same


@pytest.mark.parametrize("raised, status", [
    ("ValueError", 2), ("LabError", 1), ("CapacityError", 3), ("ControllerError", 1)])
def test_each_documented_failure_is_its_status(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str],
                                               raised: str, status: int) -> None:
    """The kinds of expected failure the table names, each one line and its status (the
    other statuses are shown by the cases, pipes and stops above)."""
    from controllers.shell.client import ControllerError
    from scenarios.fidelity import CapacityError
    from testbed.shell.preflight import LabError

    made = {"ValueError": ValueError("bad"), "LabError": LabError("no OVS"),
            "CapacityError": CapacityError("CPU-bound"),
            "ControllerError": ControllerError("no answer", request="GET /health")}

    def fails(_args: Any) -> int:
        raise made[raised]

    monkeypatch.setattr(cli, "cmd_list", fails)
    assert cli.main(["list"]) == status
    assert one_line(capsys).startswith("astral-lab list: error: ")
    assert str(status) in _documented_statuses()


def test_an_unreachable_llm_is_an_error_unless_a_fallback_is_asked_for(
        box: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--llm` with an unreachable endpoint answered with the rule-based planner and exited
    0, its failure shown only with --json."""
    monkeypatch.setenv("ASTRAL_LAB_LLM_URL", "http://127.0.0.1:9/v1")  # nothing listens
    argv = ["ops", "diagnose", "--db", "recorded.sqlite", "--ask", "what is wrong?", "--llm"]
    assert run_cli(argv) == 1
    line = one_line(capsys)
    assert line.startswith("astral-lab ops diagnose: error: --llm: chat endpoint "
                           "http://127.0.0.1:9/v1")
    assert "--llm-fallback answers with the rule-based planner" in line
    assert run_cli([*argv, "--llm-fallback", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["planner"] == "deterministic"
    assert any("LLM backend failed" in n for n in answer["notes"])


def _helps(*verb: str) -> dict[str, str]:
    """dest -> help of a verb's options (``ops diagnose``: two words)."""
    p: Any = cli.parser()
    for word in verb:
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)
                 ).choices[word]
    return {a.dest: a.help or "" for a in p._actions}


def test_the_help_ranges_are_what_the_builders_take() -> None:
    """`-h` said --gpus 1..1024 and --k 0..1024 where the builders take 255 and 254."""
    from dataclasses import replace

    from testbed.fabricspec import EMULATED_RULES, FabricSpec, check_common
    from testbed.topologies import fattree

    high = int(EMULATED_RULES["gpus"].high or 0)
    check_common(replace(FabricSpec(), gpus=high))
    with pytest.raises(ValueError):
        check_common(replace(FabricSpec(), gpus=high + 1))
    k = int(EMULATED_RULES["k"].high or 0)
    big = replace(FabricSpec(), servers=1, gpus=1, k=k, radix=1 << 16)
    assert fattree.rules(big) == k
    with pytest.raises(ValueError, match="k must be <= 254"):
        fattree.rules(replace(big, k=k + 2))
    for verb in ("topo", "up", "model"):
        helps = _helps(verb)
        assert "1..255" in helps["gpus_per_server"], verb
        assert "in all" in helps["gpus"] and "at most 65,536 of them" in helps["gpus"], verb
    assert "0..254" in _helps("topo")["k"] and "0..254" in _helps("up")["k"]
    assert "servers of --gpus-per-server" in _helps("cost")["gpus"]


def test_one_name_one_meaning_in_every_verbs_help() -> None:
    """`--gpus` was GPUs per server in `topo` and the scenarios, and in all in `model`;
    `ops-eval --kinds` and `model --lb` read as if `all` were a value."""
    from scenarios.experiments import SCENARIOS

    for verb in ("topo", "up", "model", "cost"):
        assert "in all" in _helps(verb)["gpus"], verb
        assert "per server" not in _helps(verb)["gpus"].split(";")[0], verb
    for name, sc in SCENARIOS.all().items():
        params = {p.name: p for p in sc.params}
        assert "servers" not in params, name  # derived: --gpus / --gpus-per-server
        if "gpus" in params:
            assert "gpus_per_server" in params and "in all" in params["gpus"].help, name
        help_ = cli._run_parser(name).format_help()
        assert "(all:" not in help_ and "all:" not in help_.replace("in all", ""), name
    assert "all" not in _helps("model")["lb"].replace("policies", "")


@pytest.mark.parametrize("design", ["astral3", "rail3", "railonly", "fattree"])
def test_every_verb_and_scenario_keeps_its_default_fabric(design: str) -> None:
    """Counting GPUs in all changed no default: `topo`/`up` and plain `mn` build the
    32-GPU fabric (4 servers of 8) left to themselves, and each scenario the size it had."""
    from scenarios.experiments import SCENARIOS
    from testbed.shell import mntopo
    from testbed.topologies import fabric_spec

    p = cli.parser()
    for verb in ("topo", "up"):
        spec = fabric_spec(design, **cli._spec_params(p.parse_args([verb, design])))
        assert (spec.servers, spec.gpus) == (4, 8)
    assert len(mntopo.topos[design](datapath="user").hosts()) == 32
    sizes = {}  # (GPUs, per server) of each scenario's first fabric: full [quick]
    for name, sc in SCENARIOS.all().items():
        for quick in (False, True):
            plan = next(iter(sc.plans(sc.resolve(quick, {})).values()))
            sizes[name, quick] = (len(plan.hosts), plan.params["gpus"])
    assert sizes == {
        ("ops-eval", False): (32, 8), ("ops-eval", True): (4, 2),
        ("loss-sweep", False): (32, 8), ("loss-sweep", True): (4, 2),
        ("lb-compare", False): (16, 4), ("lb-compare", True): (8, 4),
        ("demo", False): (32, 8), ("demo", True): (8, 4),
        ("topology-compare", False): (16, 4), ("topology-compare", True): (8, 4),
        ("paper-shapes", False): (16, 4), ("paper-shapes", True): (8, 4),
        ("link-failure", False): (16, 4), ("link-failure", True): (8, 4),
        ("expert-skew", False): (16, 4), ("expert-skew", True): (8, 4),
        ("decode-latency", False): (8, 2), ("decode-latency", True): (4, 2)}


def test_plain_mn_counts_gpus_in_all() -> None:
    """`mn --custom testbed/shell/mntopo.py --topo astral3,gpus=...`: the same words and
    refusals as `topo`, said as `mn` takes them (``key=value``)."""
    from testbed.shell import mntopo

    make = mntopo.topos["astral3"]
    assert len(make(gpus=8, gpus_per_server=2, datapath="user").hosts()) == 8
    assert len(make(servers=2, gpus_per_server=2, datapath="user").hosts()) == 4
    for kw, said in (({"gpus": 30}, "gpus=30 does not split evenly over servers of 8 GPUs "
                                    "(gpus_per_server): give a multiple of 8"),
                     ({"servers": 2, "gpus": 32}, "servers=2 and gpus=32 disagree"),
                     ({"gpus_per_server": 3}, "gpus=32 (the default) does not split evenly")):
        with pytest.raises(ValueError) as info:
            make(datapath="user", **kw)
        assert said in str(info.value) and "\n" not in str(info.value)


def test_every_scenario_declares_the_fabrics_it_brings_up() -> None:
    """`run ... --capture` is checked against them before anything is built; a scenario
    without the declaration cannot take --capture (no port could be checked)."""
    from scenarios.base import Param, scenario
    from scenarios.experiments import SCENARIOS

    for name, sc in SCENARIOS.all().items():
        assert sc.fabrics is not None, name
        assert sc.plans(sc.resolve(True, {})), name
    toy = scenario("declares nothing", Param("n", 1, "n"), name="toy-undeclared")(
        lambda run: None)
    with pytest.raises(ValueError, match="does not declare the fabrics"):
        toy.check_fabrics(toy.resolve(True, {}), ["lf0r0:1"])
    assert toy.check_fabrics(toy.resolve(True, {}), None) == {}
