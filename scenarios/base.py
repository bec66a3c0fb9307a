"""The scenario framework: one function per experiment, one results folder per run.

A scenario is a module of ``scenarios/experiments/`` named after it, with one plain
function that takes a ``Run`` and does the experiment::

    @scenario("ECMP vs planned vs adaptive on astral3",
              Param("gpus_per_server", 4, "GPUs (NICs) per server", quick=2), ...,
              fabrics=lambda p: {"astral3": build_for_gpus("astral3", p["gpus"], ...)})
    def lb_compare(run: Run) -> None:
        p = run.params                      # every parameter, resolved (quick or full)
        plan = run.fabric("astral3")        # a fabric it declared (``fabrics``)
        with run.lab(plan) as lab: ...      # fabric torn down on exit, error or Ctrl-C
        run.save_json("flows.json", rows)   # raw data, written atomically
        run.row(mode="ecmp", ...)           # one row of summary.csv
        run.report.finding(...)             # measured vs ideal vs published, and why

The decorator turns it into a ``Scenario`` (its declaration: name, description, params,
run), named after its module (``lb_compare.py`` is ``lb-compare``), so a copy of the module
under a new name is a new scenario. ``lb_compare(quick=True, gpus_per_server=2)`` from a
notebook runs it and returns a ``RunResult``; ``astral-lab run lb-compare --quick`` does the
same from the shell (one ``--flag`` per ``Param``); ``astral-lab list`` lists
``scenarios.experiments.SCENARIOS``, which finds every such module. ``fabrics`` declares
the plans the run brings up, from its parameters, so ``--capture`` ports are checked
against them before anything is made; ``epilogue=`` (optional) what ``astral-lab run``
prints after the table instead of where the results are (the demo's tour of its files).

Every run writes ``results/<timestamp>-<scenario>.partial/`` and renames it to its final
name only when the report is complete, so a folder without the suffix is always whole. An
interrupted or failed run keeps its ``.partial`` folder, with ``INTERRUPTED.md`` saying what
happened and what had finished (the fabric itself is torn down by ``Lab``'s context manager).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

from scenarios.common import WIRE_PMTU
from scenarios.fidelity import CalibrationError, calibrate, check, offered
from testbed.capture import check_ports, parse_ports, resolve
from testbed.fabricspec import FABRIC_RULES
from testbed.results import output_dir
from testbed.shell.cluster import CLUSTER_MTU, make_lab
from testbed.shell.signals import held
from testbed.topologies import fabric_size
from testbed.version import __version__
from traffic.roce import LAB_PMTU, largest_roce_pmtu, mtu_for
from traffic.shell.running import RunningLab
from vocab import validate
from vocab.plan import WiringPlan, finite, write_json_atomic
from vocab.plugins import plugin_name
from vocab.validate import BadValue, Rule, count, real, replaceable

#: Rules (``vocab.validate``) of parameters many scenarios share. A scenario's fabric
#: is emulated on one machine, so servers and GPUs per server stay small; seconds are
#: emulated seconds of traffic; draws are repetitions, each a full traffic phase.
SERVERS = count(1, 64)
GPUS = count(1, 16)  # per server (``--gpus-per-server``)
#: a fabric's GPUs in all (``--gpus``): whole servers of ``GPUS``, at most ``SERVERS``
FABRIC_GPUS = count(1, int(SERVERS.high or 0) * int(GPUS.high or 0))
SCALE = FABRIC_RULES["scale"]
PHASE_SECONDS = real(0.01, 3600)  # below 10 ms no emulated phase carries a frame
DRAWS = count(1, 1000)
MODEL_DRAWS = count(1, 100_000)
QPS = count(1, 1024)
TOKENS = count(1, 4096)
#: a Zipf exponent: 0 is uniform; past 10 one expert takes all but a trace of the tokens
ZIPF_EXPONENT = real(0, 10)


@dataclass(frozen=True)
class Param:
    """One scenario parameter: default, help text, the value ``--quick`` uses, and the rule
    its value (or each item of a list of numbers) must meet: finite, in its range, whole
    where it counts things. ``astral-lab run NAME --flag V`` and a Python call check it
    alike, before any folder or fabric exists."""

    name: str
    default: Any
    help: str
    quick: Any = None  # None: same as default
    choices: tuple[Any, ...] | None = None
    rule: Rule | None = None  # every number has one (tests check the shipped scenarios)

    def value(self, quick: bool) -> Any:
        return self.quick if quick and self.quick is not None else self.default

    @property
    def numeric(self) -> bool:
        """True when the value (or each item) is a number, which then needs ``rule``."""
        sample = self.default[0] if isinstance(self.default, (list, tuple)) and \
            self.default else self.default
        return isinstance(sample, (int, float)) and not isinstance(sample, bool)

    def _rule(self) -> Rule:
        if self.rule is not None:
            return self.rule
        sample = self.default[0] if isinstance(self.default, (list, tuple)) else self.default
        return Rule(whole=isinstance(sample, int))  # finite, whole if it counts

    def check(self, value: Any, name: str = "") -> Any:
        """``value`` (text from the command line, or a Python value) in the parameter's
        type, checked; a BadValue starting with ``name`` otherwise (argparse adds its own)."""
        kind = type(self.default)
        label = f"{name} " if name else ""
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise BadValue(f"{label}must be true or false (got {value!r})")
        if kind in (list, tuple):
            if self.numeric:
                return validate.items(value, name, rule=self._rule(), choices=self.choices)
            return [str(x) for x in validate.items(value, name, choices=self.choices)]
        if self.numeric:
            return self._rule().check(value, name)
        if self.choices is not None and value not in self.choices:
            raise validate.not_one_of(value, self.choices, label)
        return kind(value)

    def parse(self, text: str) -> Any:
        """A ``--flag`` value in the default's type (lists are comma-separated): argparse's
        ``type`` for the flag."""
        return self.check(text)

    @property
    def flag(self) -> str:
        return self.name.replace("_", "-")


@dataclass
class RunResult:
    """What a finished run left: its folder and the rows of its summary table."""

    name: str
    path: str
    rows: list[dict[str, Any]]
    summary: dict[str, Any]

    def table(self) -> str:
        return format_table(self.rows)


class Report:
    """REPORT.md, built section by section while the scenario runs."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.parts: list[str] = []
        self.findings: list[dict[str, Any]] = []

    def text(self, markdown: str) -> None:
        self.parts.append(markdown.strip() + "\n")

    def section(self, title: str, markdown: str = "") -> None:
        self.parts.append(f"## {title}\n\n{markdown.strip()}\n" if markdown else f"## {title}\n")

    def table(self, rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
        self.parts.append(markdown_table(rows, columns))

    def image(self, filename: str, caption: str) -> None:
        self.parts.append(f"![{caption}]({filename})\n\n*{caption}*\n")

    def finding(self, title: str, *, measured: str, ideal: str, published: str,
                why: str) -> None:
        """One finding: the number measured here beside the model's ideal and the published
        figure it echoes, and a paragraph on why they differ (the report's reason to exist)."""
        self.findings.append({"title": title, "measured": measured, "ideal": ideal,
                              "published": published, "why": why})
        self.parts.append(
            f"### {title}\n\n| measured here | model's ideal | published |\n|---|---|---|\n"
            f"| {measured} | {ideal} | {published} |\n\n{why.strip()}\n")

    def render(self, header: str) -> str:
        return f"# {self.title}\n\n{header.strip()}\n\n" + "\n".join(self.parts)


class Run:
    """One execution of a scenario: parameters, output folder, report, progress."""

    def __init__(self, sc: Scenario, params: dict[str, Any], quick: bool,
                 output: str | None = None, log: Callable[[str], None] | None = None,
                 force: bool = False, cluster: list[str] | None = None,
                 tunnel: str = "gre", pmtu: int | None = None, dashboard: bool = False,
                 dashboard_port: int | None = None, capture: list[str] | None = None,
                 switch_daemons: int | str = 1,
                 fabrics: dict[str, WiringPlan] | None = None) -> None:
        mtu_for(pmtu or LAB_PMTU)  # a bad pmtu fails here, before any folder is made
        # the live view of every fabric the run brings up, and switch ports to capture
        self.dashboard, self.dashboard_port = dashboard, dashboard_port
        self.capture = parse_ports(capture)
        self.scenario = sc
        self._fabrics = fabrics  # the declared plans (``fabric``), built once
        self.cluster = cluster  # servers for Mininet Cluster Edition (testbed.shell.cluster)
        self.tunnel = tunnel
        self.switch_daemons = switch_daemons  # testbed.shell.switch_daemons: a number or "auto"
        self.params = params
        self.quick = quick
        self.force = force  # run even when the fidelity guard says "CPU-bound"
        self.pmtu = pmtu or LAB_PMTU  # RoCE path MTU of every replay (and of the calibration)
        if cluster:
            self.pmtu = min(self.pmtu, largest_roce_pmtu(CLUSTER_MTU))
        self.unguarded: str | None = None  # why the guard is off (--force, calibration failed)
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.dir, self.final = output_dir(sc.name, output)
        self.rows: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}
        self.report = Report(f"{sc.name}: {sc.description}")
        self.config: dict[str, Any] = {
            "scenario": sc.name, "quick": quick, "params": params,
            "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "versions": versions(), "fabrics": {}, "fidelity": [],
            "cluster": cluster, "tunnel": tunnel if cluster else None, "pmtu": self.pmtu,
            "switch_daemons": switch_daemons,
        }
        self.stages: list[str] = []  # what finished, for INTERRUPTED.md
        self.faults: list[dict[str, Any]] | None = None  # live injected faults, if it injects
        self.t0 = time.monotonic()
        self._save_config()

    # --- files ------------------------------------------------------------------------
    def _save_config(self) -> None:
        """config.json as strict JSON: a NaN (an unguarded phase's margin) is written null."""
        write_json_atomic(self.path("config.json"), finite(self.config))

    def path(self, filename: str) -> str:
        return os.path.join(self.dir, filename)

    def save_json(self, filename: str, data: Any) -> str:
        path = self.path(filename)
        write_json_atomic(path, data)
        return path

    def save_figure(self, fig: Any, filename: str) -> str:
        path = self.path(filename)
        replaceable(path)
        tmp = path + ".tmp.png"
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        os.replace(tmp, path)
        # lazy: pyplot takes ~0.2 s to load; only a run that saves a figure needs it
        import matplotlib.pyplot as plt

        plt.close(fig)
        return path

    def row(self, **values: Any) -> None:
        """One row of ``summary.csv`` (and of the table printed at the end)."""
        self.rows.append(values)

    def stage(self, what: str) -> None:
        """Mark a part of the run as finished (listed in INTERRUPTED.md if stopped later)."""
        self.stages.append(what)
        self.log(f"[{self.elapsed():6.1f} s] {what}")
        self._progress(what)

    def show_faults(self, faults: list[dict[str, Any]]) -> None:
        """Tell the live view which faults are injected now (``ops.evaluate.live_faults``):
        a scenario that injects them on purpose shows them beside the alerts they cause."""
        self.faults = list(faults)
        self._progress(self.stages[-1] if self.stages else "starting")

    def _progress(self, what: str) -> None:
        """``progress.json``: the last finished stage, for the live view (replaced whole);
        ``faults`` only in a run that injects them."""
        state = {"scenario": self.scenario.name, "stage": what, "done": len(self.stages),
                 "elapsed_s": round(self.elapsed(), 1), "updated": time.time()}
        if self.faults is not None:
            state["faults"] = self.faults
        write_json_atomic(self.path("progress.json"), state)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # --- fabric -----------------------------------------------------------------------
    def fabric(self, label: str) -> WiringPlan:
        """The plan the scenario declared as ``label`` (``@scenario(..., fabrics=)``), built
        from the run's parameters once: the one ``--capture`` was checked against."""
        if self._fabrics is None:
            self._fabrics = self.scenario.plans(self.params)
        try:
            return self._fabrics[label]
        except KeyError:
            raise KeyError(f"{self.scenario.name} declares no fabric {label!r} (it declares "
                           f"{', '.join(self._fabrics) or 'none'})") from None

    @contextmanager
    def lab(self, plan: WiringPlan, label: str | None = None, **kw: Any) -> Iterator[RunningLab]:
        """Bring ``plan`` up (torn down on exit) and record it in config.json.

        The machine's capacity is calibrated first (cached; it needs the node names
        free). If calibration fails, the run stops with its one-line error, unless
        ``--force``: then it goes ahead with the guard off, and config.json and the
        report say so.
        """
        if self.unguarded is None:
            try:
                calibrate(self.log, pmtu=self.pmtu,
                          switch_daemons=1 if self.cluster else self.switch_daemons)
            except CalibrationError as exc:
                if not self.force:
                    raise
                self._unguard(exc.measured)
        label = label or plan.topology
        self.log(f"bringing up {label}: {len(plan.hosts)} GPUs, {len(plan.switches)} "
                 f"switches, {len(plan.links)} links (scale {plan.scale:g})")
        kw.setdefault("pmtu", self.pmtu)
        kw.setdefault("switch_daemons", self.switch_daemons)
        kw.update(self._live_options(plan, label))
        with make_lab(plan, self.cluster, tunnel=self.tunnel, log=self.log, **kw) as lab:
            self.config["fabrics"][label] = {
                "topology": plan.topology, "gpus": len(plan.hosts),
                "switches": len(plan.switches), "links": len(plan.links),
                "scale": plan.scale, "params": plan.params, "datapath": lab.datapath,
                "lb": lab.lb, "bringup_s": round(lab.timings.get("total", 0.0), 3),
                "pmtu": lab.pmtu, "mtu": lab.mtu,
                "switch_daemons": len(getattr(lab, "daemons", [])) or 1,
                "servers": sorted({n.server for n in lab.plan.nodes if n.server}) or None}
            self._save_config()
            yield lab

    def _live_options(self, plan: WiringPlan, label: str) -> dict[str, Any]:
        """The Lab's dashboard and capture options for this fabric. A scenario brings up
        several fabrics; a requested port that one of them lacks is skipped (and said)."""
        out: dict[str, Any] = {}
        if self.dashboard:
            out.update(dashboard=True, dashboard_port=self.dashboard_port,
                       dashboard_progress=self.path("progress.json"))
        ports = []
        for p in self.capture:
            try:
                ports += resolve(plan, [p])
            except ValueError as exc:
                self.log(f"note: not capturing {p} on {label}: {exc}")
        if ports:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
            out.update(capture=ports, capture_dir=os.path.join(self.dir, "capture", safe))
        return out

    def _unguard(self, reason: str) -> None:
        """Turn the fidelity guard off for this run (``--force`` after a failed calibration)."""
        self.unguarded = reason
        self.config["fidelity_guard"] = {"on": False, "reason": reason}
        self._save_config()
        self.log(f"WARNING: fidelity guard off (--force): {reason}; running anyway, and "
                 "completion times may include CPU queueing")

    def guard(self, lab: RunningLab, flows: Any, label: str,
              rate_mbps: float | None = None) -> dict[str, Any]:
        """Fidelity guard before traffic: refuse (or warn) when the run would be CPU-bound.

        ``rate_mbps`` caps each flow's rate (senders paced below their NIC). With the
        guard off (``unguarded``) the offered load is still recorded, with margin NaN
        (null in config.json)."""
        if self.unguarded is not None:
            load = offered(lab.plan, flows, rate_mbps, pmtu=lab.pmtu)
            # NaN, not None: callers format and compare margins; every comparison is False
            verdict = {"margin": math.nan, "verdict": "unguarded",
                       "offered_hop_pps": load["hop_pps"],
                       "offered_mbps": load["mbps"], "capacity_hop_pps": None,
                       "capacity_measured": None}
            self.log(f"fidelity guard off: offered {load['hop_pps']:,} switch-hop pkt/s "
                     f"({load['mbps']:g} Mb/s), no measured capacity to compare with")
        else:
            verdict = check(lab, flows, force=self.force, log=self.log, rate_mbps=rate_mbps)
        verdict["label"] = label
        self.config["fidelity"].append(verdict)
        self._save_config()
        return verdict

    # --- finishing --------------------------------------------------------------------
    def _write_summary(self) -> None:
        if not self.rows:
            return
        columns: list[str] = []
        for r in self.rows:
            columns += [c for c in r if c not in columns]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: _cell(v) for k, v in r.items()})
        _write_text(self.path("summary.csv"), buf.getvalue())

    def _header(self) -> str:
        all_fid = self.config.get("fidelity") or []
        fid = [v for v in all_fid if v.get("verdict") != "unguarded"]
        worst = min(fid, key=lambda v: v["margin"]) if fid else None
        verdicts = sorted({v["verdict"] for v in fid})
        fabrics = "; ".join(f"{k} ({v['gpus']} GPUs, scale {v['scale']:g}, {v['datapath']} "
                            f"datapath)" for k, v in self.config["fabrics"].items())
        lines = [f"Run {os.path.basename(self.final)}: {'quick' if self.quick else 'full'} "
                 f"mode, {self.elapsed():.0f} s, {self.config['started']}.",
                 f"Parameters: {json.dumps(self.params, sort_keys=True)}.",
                 f"Fabrics: {fabrics or 'none (model only)'}."]
        if fid:
            lines.append(f"Fidelity guard (switching capacity of this machine / offered load; "
                         f"above 1 the run is network-bound, not CPU-bound): smallest margin "
                         f"{worst['margin']:.2f}x ({worst['label']}) over {len(fid)} traffic "
                         f"phase(s), verdicts: {', '.join(verdicts)}; capacity "
                         f"{worst['capacity_hop_pps']:,} switch-hop packets/s, calibrated "
                         f"{worst['capacity_measured']} (per phase in config.json).")
        if self.unguarded is not None:
            lines.append(f"**Fidelity guard OFF** (--force): {self.unguarded}. "
                         f"None of the {len(all_fid)} traffic phase(s) was checked against "
                         "this machine's switching capacity, so completion times may measure "
                         "the CPU rather than the network; offered loads are in config.json.")
        lines.append("Files: config.json (parameters, versions, scale), summary.csv, raw JSON, "
                     "PNG plots.")
        return "\n".join(lines)

    def finish(self) -> RunResult:
        if self.unguarded is not None:
            self.log("WARNING: this run had the fidelity guard off (--force); REPORT.md says so")
        self.config["finished"] = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        self.config["elapsed_s"] = round(self.elapsed(), 1)
        self._save_config()
        self._write_summary()
        if self.summary:
            self.save_json("summary.json", self.summary)
        _write_text(self.path("REPORT.md"), self.report.render(self._header()))
        if self.dir != self.final:
            os.replace(self.dir, self.final)
            self.dir = self.final
        return RunResult(self.scenario.name, self.final, self.rows, self.summary)

    def note_partial(self, exc: BaseException) -> None:
        """Tell whoever reports ``exc`` (the CLI, a traceback) where the partial folder is."""
        if hasattr(exc, "add_note"):  # Python >= 3.11
            exc.add_note(f"partial results kept in {self.dir}/ (INTERRUPTED.md: what had "
                         "finished)")

    def abandon(self, exc: BaseException) -> None:
        """Keep what was written, marked: the folder stays ``.partial`` with INTERRUPTED.md."""
        if isinstance(exc, KeyboardInterrupt):
            how = "interrupted by the user"
        elif isinstance(exc, SystemExit):
            how = f"stopped by a signal (exit status {exc.code})"
        else:
            how = f"stopped by an error: {type(exc).__name__}: {exc}"
        done = "\n".join(f"- {s}" for s in self.stages) or "- nothing had finished"
        text = (f"# {self.scenario.name}: partial result\n\nThis run was {how} after "
                f"{self.elapsed():.0f} s. The fabric was torn down; the files here are what "
                f"had been written.\n\nFinished before it stopped:\n\n{done}\n")
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            text += "\n```\n" + "".join(traceback.format_exception(exc))[-4000:] + "```\n"
        self._write_summary()
        _write_text(self.path("INTERRUPTED.md"), text)


@dataclass
class Scenario:
    """A scenario's declaration, made by ``@scenario``: callable as
    ``sc(quick=..., output=..., **params)``.

    ``name`` is its module's (``vocab.plugins.plugin_name``), ``description`` one line for
    ``astral-lab list``, ``params`` its ``--flags`` and ``fn`` the run itself; ``fabrics``
    the plans it brings up, by label, from its resolved parameters (``Run.fabric``);
    ``epilogue`` what ``astral-lab run`` prints after the table (``closing``).
    """

    name: str
    description: str
    params: list[Param]
    fn: Callable[[Run], None]
    doc: str = field(default="")
    fabrics: Callable[[dict[str, Any]], dict[str, WiringPlan]] | None = None
    epilogue: Callable[[RunResult], str] | None = None

    def closing(self, result: RunResult) -> str:
        """What ``astral-lab run`` prints after the run's table: the scenario's own
        ``epilogue`` (the tour walks a newcomer through its files), else where the results
        are. Declared with the scenario, so the CLI never asks which scenario ran."""
        if self.epilogue is not None:
            return self.epilogue(result)
        return f"\nresults: {result.path}/ (REPORT.md, summary.csv, config.json, *.json, *.png)"

    def plans(self, params: dict[str, Any]) -> dict[str, WiringPlan]:
        """The fabrics a run with ``params`` brings up, by label (none declared: none)."""
        return dict(self.fabrics(params)) if self.fabrics is not None else {}

    def check_fabrics(self, params: dict[str, Any], capture: list[str] | None
                      ) -> dict[str, WiringPlan]:
        """The fabrics the run brings up, built (so their parameters are checked) before
        anything is made, and ``--capture`` checked against them by the check ``up``
        makes (``testbed.capture.check_ports``): each port must be a switch port of one
        of them (one that lacks it skips it, and says so)."""
        plans = self.plans(params)
        ports = parse_ports(capture)
        if ports and self.fabrics is None:
            raise ValueError(f"--capture: {self.name} does not declare the fabrics it brings "
                             "up (@scenario(..., fabrics=)), so no port can be checked "
                             "before the run")
        if ports:
            check_ports(list(plans.values()), ports)
        return plans

    @classmethod
    def declared_in(cls, name: str, module: ModuleType) -> Scenario:
        """The one ``@scenario`` function ``module`` defines (``scenarios.experiments``
        finds scenarios with this); a ValueError when it defines none or several."""
        own = [v for v in vars(module).values()
               if isinstance(v, Scenario) and v.fn.__module__ == module.__name__]
        if len(own) != 1:
            raise ValueError(f"scenario module {module.__name__} must define one @scenario "
                             f"function (it defines {len(own)})")
        if own[0].name != name:
            raise ValueError(f"scenario module {module.__name__} declares {own[0].name!r}; "
                             f"a scenario is named after its module ({name!r})")
        return own[0]

    def resolve(self, quick: bool, overrides: dict[str, Any]) -> dict[str, Any]:
        known = {p.name: p for p in self.params}
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}; "
                             f"known: {', '.join(known)}")
        out = {p.name: p.value(quick) for p in self.params}
        for name, v in overrides.items():  # the command line's are checked already: again
            out[name] = known[name].check(v, f"--{known[name].flag}")
        if "gpus" in out and "gpus_per_server" in out:
            servers_of(out)  # a total that does not split evenly: refused here, not later
        return out

    def __call__(self, quick: bool = False, output: str | None = None,
                 log: Callable[[str], None] | None = None, force: bool = False,
                 cluster: list[str] | None = None, tunnel: str = "gre",
                 pmtu: int | None = None, dashboard: bool = False,
                 dashboard_port: int | None = None, capture: list[str] | None = None,
                 switch_daemons: int | str = 1, **overrides: Any) -> RunResult:
        params = self.resolve(quick, overrides)  # bad input fails before anything is made
        plans = self.check_fabrics(params, capture)
        run = Run(self, params, quick, output=output, log=log, force=force, cluster=cluster,
                  tunnel=tunnel, pmtu=pmtu, dashboard=dashboard,
                  dashboard_port=dashboard_port, capture=capture, switch_daemons=switch_daemons,
                  fabrics=plans)

        token = WIRE_PMTU.set(run.pmtu)  # the flow model's frames are the replay's
        try:
            self.fn(run)
            return run.finish()
        except BaseException as exc:
            with held():  # a second Ctrl-C must not cut the partial folder's record short
                if _refused_before_start(run, exc):
                    shutil.rmtree(run.dir, ignore_errors=True)
                    raise
                run.abandon(exc)
                run.note_partial(exc)
            raise
        finally:
            WIRE_PMTU.reset(token)


def _refused_before_start(run: Run, exc: BaseException) -> bool:
    """True when nothing ran and the error says why, so there is nothing to keep.

    A parameter the builders reject (ValueError, e.g. --servers 3) or a machine too slow
    for the capacity calibration, before any stage finished or any fabric of the run came
    up. A folder the user named (``-o``) is never removed.
    """
    return (isinstance(exc, (ValueError, CalibrationError)) and not run.stages
            and not run.config["fabrics"] and run.dir != run.final)


def scenario(description: str, *params: Param, name: str | None = None,
             fabrics: Callable[[dict[str, Any]], dict[str, WiringPlan]] | None = None,
             epilogue: Callable[[RunResult], str] | None = None
             ) -> Callable[[Callable[[Run], None]], Scenario]:
    """Declare ``fn`` a scenario (see the module docstring). Its name is its module's
    (``name`` only for one made outside ``scenarios/experiments/``: a notebook's, a test's);
    ``fabrics(params)`` the plans it brings up, by label (``Scenario.fabrics``);
    ``epilogue(result)`` the text ``astral-lab run`` prints after the table in place of
    the results line (``Scenario.closing``)."""
    odd = [p for p in params if not isinstance(p, Param)]
    if odd:
        raise TypeError(f"scenario(description, *params): a parameter must be a Param, not "
                        f"{odd[0]!r} (the name comes from the module)")

    def wrap(fn: Callable[[Run], None]) -> Scenario:
        return Scenario(name or plugin_name(fn.__module__), description, list(params), fn,
                        doc=fn.__doc__ or "", fabrics=fabrics, epilogue=epilogue)
    return wrap


# --- helpers ---------------------------------------------------------------------------
def servers_of(params: dict[str, Any]) -> int:
    """The servers of a scenario's fabric, sized as every verb sizes one: ``--gpus`` in
    all over ``--gpus-per-server``. A ValueError in one line for a total that does not
    split evenly or would take more than ``SERVERS`` servers (``Scenario.resolve`` asks
    before anything is made)."""
    servers, _ = fabric_size(params["gpus"], params["gpus_per_server"],
                             max_servers=int(SERVERS.high or 0),
                             taker="a scenario's fabric takes")
    return servers


def paired_servers(params: dict[str, Any]) -> int:
    """``servers_of`` for a scenario on astral3 in blocks of two servers: an odd count is
    a ValueError in one line saying which ``--gpus`` would do."""
    servers, gps = servers_of(params), params["gpus_per_server"]
    if servers % 2:
        raise ValueError(f"--gpus {params['gpus']} is {servers} server{'s' * (servers > 1)} "
                         f"of {gps} GPUs; astral3 pairs servers in blocks of two: give a "
                         f"multiple of {2 * gps}")
    return servers


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return v


def _write_text(path: str, text: str) -> None:
    replaceable(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:  # NaN
            return "-"
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def markdown_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    if not rows:
        return "(no rows)\n"
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(out) + "\n"


def format_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """A plain-text table for the terminal."""
    if not rows:
        return "(no rows)"
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    width = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, width, strict=True))
    body = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in
                      enumerate(zip(row, width, strict=True))) for row in cells]
    return "\n".join([line, "  ".join("-" * w for w in width), *body])


def _cmd_version(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def versions() -> dict[str, Any]:
    """Everything a reader needs to reproduce a number: code, tools, kernel, CPUs."""
    out: dict[str, Any] = {"astral_lab": __version__, "python": platform.python_version(),
                           "kernel": platform.release(), "cpus": os.cpu_count(),
                           "machine": platform.machine()}
    for dist in ("os-ken", "scapy", "matplotlib", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    out["ovs"] = _cmd_version(["ovs-vswitchd", "--version"])
    out["mininet"] = _cmd_version(["mn", "--version"])
    try:
        out["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, timeout=5,
                                    cwd=os.path.dirname(os.path.abspath(__file__))
                                    ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["git"] = None
    return out


def as_dict(obj: Any) -> Any:
    """Dataclasses (e.g. FlowSpec) to plain JSON-able dicts."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return obj
