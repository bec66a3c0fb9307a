"""``astral-lab ops``: live alerts (``watch``), the diagnosis agent (``diagnose``), and an
ops-eval run scored again from its file (``rescore``).

    sudo astral-lab ops watch                       alerts as they open and clear (Ctrl-C ends)
    sudo astral-lab ops watch --db run.sqlite       ... and keep the telemetry in that file
    sudo astral-lab ops diagnose --ask "why is s0g0 -> s3g1 slow?"
    sudo astral-lab ops diagnose                    interactive: ask, read, ask again
    astral-lab ops diagnose --db run.sqlite --ask "what is wrong?"   offline, from a file
    astral-lab ops rescore results/20261205-101500-ops_eval     scores from ops_eval.json
    astral-lab ops rescore --redetect RUN_DIR       ... with this checkout's detectors replayed

Both find the running lab by its run record (``/run/astral-lab/``): its wiring plan,
its controller's REST port and its host shells (whose namespaces the collector and the
probe read). ``--run`` picks one when several labs run. Without ``--db``, ``diagnose``
first collects ``--collect`` seconds of telemetry itself, so it needs no watcher.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from typing import Any

from controllers.shell.client import ControllerClient
from ops import llm
from ops.agent import Diagnosis, Tools, diagnose
from ops.detectors import Alert, Engine
from ops.shell.collector import Collector, running_sources
from ops.shell.probe import ping
from ops.telemetry import DEFAULT_INTERVAL_S, DEFAULT_MAX_ROWS, Store
from scenarios.base import format_table
from testbed.shell import cleanup
from testbed.shell.preflight import LabError
from testbed.wiring import findings
from vocab.plan import WiringPlan
from vocab.validate import SECONDS, Parser, count, distinct, in_file, out_file, real

#: seconds ``diagnose`` collects on a live lab before it answers
DEFAULT_COLLECT_S = 5.0


def discover(run_id: str | None = None) -> dict[str, Any]:
    """The running lab: ``{"run_id", "plan", "rest_port", "host_pids"}`` from its run record."""
    records = []
    for path in sorted(glob.glob(os.path.join(cleanup.STATE_DIR, "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                records.append(json.load(f))
        except (OSError, ValueError):
            continue
    if run_id:
        records = [r for r in records if r.get("run_id") == run_id]
    records = [r for r in records if os.path.exists(os.path.join(r.get("workdir", ""),
                                                                 "plan.json"))]
    if not records:
        raise ValueError("no running lab found" + (f" with --run {run_id}" if run_id else "")
                         + " (start one with `sudo astral-lab up ...`)")
    if len(records) > 1:
        raise ValueError("several labs are running; pick one with --run "
                         + ", ".join(r["run_id"] for r in records))
    rec = records[0]
    plan = WiringPlan.load(os.path.join(rec["workdir"], "plan.json"))
    rest_port = None
    hosts = {}
    for pid in rec.get("pids", []):
        try:
            with open(f"/proc/{pid}/cmdline", encoding="utf-8", errors="replace") as f:
                argv = f.read().split("\0")
        except OSError:
            continue
        if "--rest-port" in argv:
            rest_port = int(argv[argv.index("--rest-port") + 1])
        for a in argv:
            if a.startswith("mininet:"):
                hosts[a.split(":", 1)[1]] = int(pid)
    return {"run_id": rec["run_id"], "plan": plan, "rest_port": rest_port, "host_pids": hosts}


def _format_alert(alert: Alert, event: str) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(alert.cleared if event == "clear"
                                                     else alert.first_seen))
    if event == "clear":
        return f"{stamp} CLEAR  {alert.detector:<15} {alert.component}"
    return (f"{stamp} {alert.severity.upper():<8} {alert.detector:<15} {alert.component}: "
            f"{alert.summary}")


class Live:
    """A collector + detector engine + store for a discovered lab (shared by both verbs)."""

    def __init__(self, lab: dict[str, Any], db: str, interval: float, max_rows: int,
                 on_alert: Any = None) -> None:
        self.lab = lab
        self.store = Store(db, max_rows=max_rows)
        self.client = ControllerClient(port=lab["rest_port"], timeout=max(0.5, interval)) \
            if lab["rest_port"] else None

        def alert_cb(alert: Alert, event: str) -> None:
            self.store.save_alert(alert)
            if on_alert:
                on_alert(alert, event)

        self.engine = Engine(lab["plan"], on_alert=alert_cb)
        self.collector = Collector(lab["plan"], self.store, client=self.client,
                                   host_pids=lab["host_pids"], interval=interval,
                                   on_poll=lambda t, v: self._step(),
                                   sources=running_sources())

    def _step(self) -> None:
        for a in self.engine.step(self.collector.history):
            self.store.save_alert(a)
        for a in self.engine.active.values():
            self.store.save_alert(a)

    def tools(self, baseline: Store | None = None) -> Tools:
        return Tools(self.lab["plan"], store=self.store, history=self.collector.history,
                     engine=self.engine, client=self.client, host_pids=self.lab["host_pids"],
                     baseline=baseline, prober=ping,
                     wiring=None if self.client is None else
                     lambda: findings(self.lab["plan"], self.client.check_wiring()))


def _open_recorded(path: str, name: str) -> Store:
    """A recorded telemetry file, opened read-only (never created, never written, not even
    the schema) and refused in one line if it is not one."""
    in_file(path, name)
    try:
        store = Store(path, readonly=True)
        store.meta()
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{name} {path}: not an ops telemetry file ({exc})") from None
    return store


def _telemetry_out(path: str, name: str) -> None:
    """A file telemetry is written into: new, empty, or a telemetry file (appended to).
    Any other file is refused before it is touched: SQLite would write its schema into it
    or fail halfway."""
    out_file(path, name)
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        _open_recorded(path, name).close()


def run_watch(args: argparse.Namespace) -> int:
    if args.db:
        _telemetry_out(args.db, "--db")
    if args.interval is None:
        args.interval = DEFAULT_INTERVAL_S
    lab = discover(args.run)
    db = args.db or os.path.join(tempfile.gettempdir(), f"astral-lab-ops-{lab['run_id']}.sqlite")
    if not args.db:  # the default file is checked as a named one is
        _telemetry_out(db, "telemetry file")
    live = Live(lab, db, args.interval, args.max_rows,
                on_alert=lambda a, e: print(_format_alert(a, e), flush=True))
    plan = lab["plan"]
    print(f"watching {plan.topology} ({len(plan.hosts)} GPUs, {len(plan.links)} links) every "
          f"{args.interval:g} s; telemetry in {db}; Ctrl-C to stop", flush=True)
    end = time.monotonic() + args.duration if args.duration else None
    live.collector.start()
    try:
        while end is None or time.monotonic() < end:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        live.collector.stop()
        live.store.close()
    return 0


def answer(tools: Tools, question: str, args: argparse.Namespace) -> Diagnosis:
    """One question answered: by the rule-based diagnosis, or by the LLM with ``--llm``.

    Public as a seam: the session around it (collecting, the telemetry folder, cleanup) is
    what ``diagnose`` tests check, with the answer itself replaced."""
    if args.llm:
        cfg = llm.config_from_env()
        if cfg is None:
            raise ValueError(f"--llm needs {llm.ENV_URL} set to an OpenAI-compatible endpoint")
        client = llm.ChatClient(cfg["url"], cfg["model"], cfg["key"])
        fallback = bool(getattr(args, "llm_fallback", False))
        try:
            return llm.llm_diagnose(tools, question, client, fallback=fallback)
        except llm.LLMError as exc:
            raise LabError(f"--llm: {exc} (--llm-fallback answers with the rule-based "
                           "planner when the model cannot)") from None
    return diagnose(tools, question, probe=not args.no_probe)


#: words of a question that name a node: a GPU's NIC or a switch of any design
NODE_WORD = re.compile(r"\b(?:s\d+g\d+|lf\d+r\d+|spine\d+|tor\d+r\d+|agg\d+x\d+|core\d+|"
                       r"nvs\d+|edge\d+x\d+)\b")
#: what an empty question is told
EMPTY_QUESTION = ("--ask needs a question (e.g. --ask 'what is wrong?'); without --ask, "
                  "diagnose asks at a prompt")


def check_question(question: str, plan: WiringPlan) -> None:
    """Refuse (ValueError) a question that is empty or names a node the fabric does not
    have: the agent would answer about the rest of the fabric as if it had been asked."""
    if not question.strip():
        raise ValueError(EMPTY_QUESTION)
    names = [n.name for n in plan.nodes]
    for word in NODE_WORD.findall(question):
        if word not in names:
            close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else \
                f"its nodes are {names[0]} ... {names[-1]}"
            raise ValueError(f"--ask names {word}, which this fabric ({plan.topology}, "
                             f"{len(plan.hosts)} GPUs) does not have; {hint}")


def _check_diagnose_options(args: argparse.Namespace) -> None:
    """Options that would do nothing with the others given are refused, saying why."""
    if args.ask is not None and not args.ask.strip():
        raise ValueError(EMPTY_QUESTION)
    if args.live and not args.db:
        raise ValueError("--live collects into the file --db names: give --db FILE (without "
                         "--live, --db reads a recorded file)")
    if getattr(args, "llm_fallback", False) and not args.llm:
        raise ValueError("--llm-fallback without --llm: the rule-based planner answers anyway")
    if args.db and not args.live:
        given = [opt for opt, value in (("--run", args.run), ("--collect", args.collect),
                                        ("--interval", args.interval),
                                        ("--no-probe", args.no_probe or None))
                 if value is not None]
        if given:
            raise ValueError(f"{given[0]} does nothing with --db (a recorded run is read, "
                             "nothing is collected or probed); drop it, or add --live")


def run_diagnose(args: argparse.Namespace) -> int:
    _check_diagnose_options(args)
    if args.interval is None:
        args.interval = DEFAULT_INTERVAL_S
    if args.collect is None:
        args.collect = DEFAULT_COLLECT_S
    if args.db and args.live:
        _telemetry_out(args.db, "--db")
        if args.baseline:
            distinct({"--baseline": args.baseline, "--db": args.db})
    baseline = _open_recorded(args.baseline, "--baseline") if args.baseline else None
    live: Live | None = None
    scratch = None  # a live session's own telemetry folder, removed however it ends
    try:
        if args.db and not args.live:  # offline: a recorded run
            store = _open_recorded(args.db, "--db")
            meta = store.meta()
            if "plan" not in meta:
                raise ValueError(f"--db {args.db}: not an ops telemetry file (no plan in meta)")
            plan = WiringPlan.from_dict(meta["plan"])
            if args.ask is not None:
                check_question(args.ask, plan)
            series_end = max((t for (_c, _m), (t, _v) in store.latest().items()), default=None)
            tools_fn = lambda: Tools(plan, store=store, baseline=baseline,  # noqa: E731
                                     now=series_end)
        else:
            lab = discover(args.run)
            if args.ask is not None:
                check_question(args.ask, lab["plan"])
            db = args.db
            if not db:
                scratch = cleanup.make_scratch(lab["run_id"])
                db = os.path.join(scratch, "diagnose.sqlite")
            live = Live(lab, db, args.interval, DEFAULT_MAX_ROWS)
            tools_fn = lambda: live.tools(baseline)  # noqa: E731
        return _diagnose_session(args, live, tools_fn)
    finally:
        if live is not None:
            live.store.close()
        if scratch:
            cleanup.drop_scratch(scratch)


def _diagnose_session(args: argparse.Namespace, live: Live | None, tools_fn: Any) -> int:
    """Collect (live), then answer one question or a prompt's worth of them."""
    if live is not None:
        print(f"collecting {args.collect:g} s of telemetry ...", file=sys.stderr, flush=True)
        polls = max(2, int(args.collect / args.interval) + 1)
        for _ in range(polls):
            live.collector.poll_once()
            time.sleep(args.interval)
    if args.ask:
        d = answer(tools_fn(), args.ask, args)
        print(json.dumps(d.to_dict(), indent=1, default=str) if args.json else d.text())
        return 0
    print("ask about the fabric (e.g. 'why is s0g0 -> s1g1 slow?'); empty line or Ctrl-D ends")
    while True:
        try:
            q = input("ops> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if not q or q in ("quit", "exit"):
            return 0
        tools = tools_fn()
        try:
            check_question(q, tools.plan)
        except ValueError as exc:  # the prompt goes on: one line, ask again
            print(f"error: {exc}")
            continue
        if live is not None:
            live.collector.poll_once()  # fresh counters for every question
        d = answer(tools, q, args)
        print(d.text())


#: what ``rescore`` prints per alert source: (column, summary key)
RESCORE_COLUMNS = (("recall", "recall"), ("alert precision", "precision"), ("F1", "f1"),
                   ("top-1", "top1"), ("kind", "kind_accuracy"), ("pair F1", "pair_f1"),
                   ("FA/h fault-free", "false_alarms_per_hour_clean"),
                   ("FA/h between faults", "false_alarms_per_hour_fault_phase"),
                   ("any-alert recall", "any_alert_recall"),
                   ("any-alert precision", "any_alert_precision"),
                   ("any-alert F1", "any_alert_f1"), ("any-alert top-1", "any_alert_top1"))


def rescore(run_dir: str, redetect: bool = False) -> dict[str, Any]:
    """Every alert source's scores (``ops.evaluate.summaries``) from a run folder's
    ``ops_eval.json`` alone, read and never written: the raw alerts, the agent's answers,
    the injector's events and the phases' instants it keeps. ``redetect``: the agent's
    alerts and answers are instead those this checkout's detectors give over the run's
    ``telemetry.sqlite`` (``ops.replay``); the phases it does not cover are not scored
    (``replayed`` says which was), and the baselines keep what they raised live."""
    # lazy: ops.evaluate adds ~12 ms to every astral-lab command; only `ops rescore` uses it
    from ops.evaluate import score_run, summaries
    from ops.replay import redetect as replay

    path = in_file(os.path.join(run_dir, "ops_eval.json"), "RUN_DIR")
    try:
        with open(path, encoding="utf-8") as f:
            res = json.load(f)
        plan = WiringPlan.from_dict(res["plan"])
        if not isinstance(res["phases"], dict) or "interval_s" not in res:
            raise KeyError("phases")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not an ops-eval run that can be scored again (missing or "
                         f"bad {exc}; runs before the strict score kept no plan and no "
                         "baselines' alerts)") from None
    if not redetect:
        return summaries(score_run(res, plan))
    db = in_file(os.path.join(run_dir, "telemetry.sqlite"), "RUN_DIR")
    try:
        store = Store(db, readonly=True)
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{db}: not a telemetry store ({exc})") from None
    with store:
        got = replay(plan, store.history())
    if got["covered"] is None:
        raise ValueError(f"{db}: no polls recorded, nothing to replay")
    first, last = got["covered"]
    phases, step = res["phases"], res["interval_s"]
    whole = {"clean": first <= phases["clean"] + step, "faults": first <= phases["faults"] + step
             and last >= phases["end"] - step}
    if not whole["faults"]:
        raise ValueError(f"{db}: the polls recorded ({first:.0f}-{last:.0f}) do not cover the "
                         "fault phase; its faults cannot be replayed")
    res["alerts"], res["diagnoses"] = got["alerts"], got["diagnoses"]
    out = summaries(score_run(res, plan))
    if not whole["clean"]:  # the store had dropped its oldest polls: no fault-free phase
        for k in [k for k in out if k.endswith("_clean")] + [
                "false_alarms_per_hour", "any_alert_false_alarms_per_hour"]:
            out[k] = None
    out["replayed"] = {"polls": got["polls"], "from": first, "to": last, **whole}
    return out


def run_rescore(args: argparse.Namespace) -> int:
    scores = rescore(args.run_dir, redetect=args.redetect)
    if args.json:
        print(json.dumps(scores, indent=1, sort_keys=True))
        return 0
    every = {"agent" if "replayed" not in scores else "agent (replayed)": scores,
             **scores["baselines"]}
    print(format_table([{"source": name, **{c: None if s.get(k) is None else f"{s[k]:g}"
                                             for c, k in RESCORE_COLUMNS}}
                        for name, s in every.items()]))
    print(f"{scores['faults']} faults, {scores['detected']} detected (strict); "
          "definitions: ops/evaluate.py, docs/operations.md")
    r = scores.get("replayed")
    if r is not None:
        print(f"agent replayed: this checkout's detectors over the {r['polls']} polls "
              "recorded in telemetry.sqlite" + ("" if r["clean"] else
              "; they start after the fault-free phase (the store keeps its newest "
              "samples), so its false alarms are not scored and alert precision is the "
              "fault phase's"))
    return 0


def add_ops_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``ops`` verb with ``watch``, ``diagnose`` and ``rescore`` (the module
    docstring)."""
    p = subparsers.add_parser("ops", help="operations: live alerts and the diagnosis agent",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="ops_verb", required=True, metavar="SUBVERB")
    w = sub.add_parser("watch", help="collect telemetry, print alerts as they open/clear")
    d = sub.add_parser("diagnose", help="ask the agent (one-shot --ask or interactive)")
    for q in (w, d):
        q.add_argument("--run", help="run id of the lab (when several run)")
        q.add_argument("--interval", type=SECONDS, default=None, metavar="S",
                       help=f"polling interval (default {DEFAULT_INTERVAL_S:g} s; the "
                            "controller's own counters refresh at its --poll-interval)")
    w.add_argument("--db", help="SQLite file for the telemetry (default in /tmp)")
    w.add_argument("--duration", type=real(0, 30 * 86400), default=0, metavar="S",
                   help="stop after S s (default 0: at Ctrl-C)")
    w.add_argument("--max-rows", type=count(1, 10 ** 9), default=DEFAULT_MAX_ROWS,
                   help=f"bound of the samples table (default {DEFAULT_MAX_ROWS:,})")
    w.set_defaults(fn=run_watch)
    d.add_argument("--ask", metavar="QUESTION", help="one question, one answer, exit")
    d.add_argument("--db", help="read a recorded run's telemetry file (offline; no lab needed)")
    d.add_argument("--live", action="store_true",
                   help="with --db: collect live into that file instead of reading it")
    d.add_argument("--collect", type=SECONDS, default=None, metavar="S",
                   help=f"seconds of telemetry to collect before answering (default "
                        f"{DEFAULT_COLLECT_S:g}; live only)")
    d.add_argument("--baseline", metavar="FILE", help="a fault-free run's telemetry file")
    d.add_argument("--llm", action="store_true",
                   help="let an OpenAI-compatible model drive the tools (ASTRAL_LAB_LLM_URL); "
                        "a model that cannot answer is an error (exit 1)")
    d.add_argument("--llm-fallback", action="store_true",
                   help="with --llm: a model that cannot answer (unreachable, no JSON) is "
                        "answered by the rule-based planner instead, with a note")
    d.add_argument("--no-probe", action="store_true", help="no active probes (pings)")
    d.add_argument("--json", action="store_true", help="print the answer as JSON")
    d.set_defaults(fn=run_diagnose)
    r = sub.add_parser("rescore", help="score an ops-eval run again from its ops_eval.json")
    r.add_argument("run_dir", metavar="RUN_DIR", help="the run's results folder")
    r.add_argument("--json", action="store_true", help="print every score as JSON")
    r.add_argument("--redetect", action="store_true",
                   help="the agent's alerts and answers from this checkout's detectors, "
                        "replayed over the run's telemetry.sqlite")
    r.set_defaults(fn=run_rescore)
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m astral_lab.ops_cli ...`` (same as ``astral-lab ops ...``)."""
    parser = Parser(prog="astral-lab")
    add_ops_parser(parser.add_subparsers(dest="verb", required=True))
    args = parser.parse_args(["ops", *(sys.argv[1:] if argv is None else argv)])

    try:
        return int(args.fn(args) or 0)
    except ValueError as exc:
        print(f"astral-lab ops: {exc}", file=sys.stderr)
        return 2
    except LabError as exc:  # this machine, not the input (an --llm that cannot answer)
        print(f"astral-lab ops: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
