"""``astral-lab``: the command line. Each verb is a thin wrapper over a plain Python call.

    astral-lab topo astral3 --gpus 64            counts table, wiring plan JSON, PNG drawing
    sudo astral-lab up astral3                   bring the fabric up, open the Mininet CLI
    sudo astral-lab demo                         the tour: scenarios' demo (`run demo`)
    astral-lab list                              the scenarios, one line each
    astral-lab policies                          the load-balancing policies, one line each
    sudo astral-lab run lb-compare --quick       run one scenario; results/<time>-<name>/
    sudo astral-lab ops diagnose --ask "..."     ask the diagnosis agent about a live fabric
    sudo astral-lab dashboard --demo             live view in the browser (also: up/run
                                                 --dashboard; --capture PORT writes pcaps)
    astral-lab controller --plan plan.json       the controller alone (for plain `mn`)
    sudo astral-lab clean                        remove leftovers of a crashed run

Expected failures end in one ``astral-lab VERB: error: ...`` message on stderr (plus where a
run's partial results are), never a traceback; the exit status says which kind:

    0  done                     2  bad input (arguments, parameters, paths, plans)
    1  the lab cannot run here  3  refused by the fidelity guard (or its calibration failed)
       (preflight: root, OVS,   130 interrupted (Ctrl-C); 143 SIGTERM, 129 SIGHUP:
       another fabric, ...)         everything was torn down first
                                141 stdout's reader went away (files still written)

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import shutil
import sys
from typing import Any, NoReturn

from mininet.cli import CLI
from mininet.log import setLogLevel

from astral_lab.cluster_cli import add_cluster_option
from astral_lab.controller_cli import add_options, check_files, controller_policy
from astral_lab.cost_cli import add_cost_parser
from astral_lab.dashboard_cli import add_dashboard_parser, add_live_options
from astral_lab.model_cli import add_model_parser
from astral_lab.ops_cli import add_ops_parser
from astral_lab.size_cli import add_size_options, size
from controllers import policies
from controllers.fabric import DEFAULT_MODE
from controllers.shell import run
from scenarios.base import format_table
from scenarios.experiments import SCENARIOS
from testbed import datapath, topologies
from testbed.capture import check_ports
from testbed.daemons import parse_request
from testbed.fabricspec import EMULATED_RULES, FabricSpec
from testbed.results import check_output, results_dir, results_root
from testbed.shell import cleanup
from testbed.shell.cluster import make_lab
from testbed.shell.faults import INJECTORS
from testbed.shell.lab import Lab
from testbed.shell.preflight import LabError
from testbed.shell.signals import stop_inside, stop_on_signals
from testbed.topologies import build, describe
from testbed.version import __version__
from traffic.roce import LAB_PMTU
from vocab.validate import BadValue, Parser, distinct, out_dir, out_file, same_file

RESULTS = results_root()

#: Exit statuses of expected failures (module docstring; docs/cli.md, "Exit status").
EXIT_LAB, EXIT_USAGE, EXIT_GUARD, EXIT_INTERRUPTED = 1, 2, 3, 130


def _add_spec_options(p: argparse.ArgumentParser) -> None:
    """The size (``size_cli``: ``--gpus`` in all, ``--gpus-per-server``, ``--servers``) and
    one ``--flag`` per other FabricSpec field, with its default from the dataclass and its
    rule from ``EMULATED_RULES`` (what the builders take; checked as the flag is parsed)."""
    g = p.add_argument_group("fabric parameters (real units; 0 means automatic: "
                             "servers-per-block 0 fills each leaf)")
    add_size_options(g, servers=True, defaults=False)
    defaults = FabricSpec()
    for f in dataclasses.fields(FabricSpec):
        if f.name in SIZE_FIELDS:
            continue
        value = getattr(defaults, f.name)
        rule = EMULATED_RULES[f.name]
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=rule,
                       default=None, metavar="N", help=f"default {value:g}; {rule}")


#: the FabricSpec fields the size options set (``FabricSpec.gpus`` is GPUs per server)
SIZE_FIELDS = ("servers", "gpus")


def _spec_params(args: argparse.Namespace) -> dict[str, Any]:
    """The ``FabricSpec`` fields of the options given, the size resolved from ``--gpus``
    (in all), ``--gpus-per-server`` and ``--servers`` (``size_cli.size``)."""
    params = {f.name: getattr(args, f.name) for f in dataclasses.fields(FabricSpec)
              if f.name not in SIZE_FIELDS and getattr(args, f.name, None) is not None}
    if any(getattr(args, n, None) is not None for n in ("gpus", "gpus_per_server", "servers")):
        params["servers"], params["gpus"] = size(args)
    return params


def _topo_outputs(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``(plan, drawing)`` paths of ``topo`` (None: in its results folder; drawing None
    with ``--no-png``), refused in one line when they cannot both be written: two that are
    one file (``-o x.png`` puts the drawing next to the plan as the same ``x.png``), or a
    drawing next to ``-o`` that is not a file to replace."""
    if args.no_png and args.png:
        raise BadValue("--no-png and --png: choose one")
    plan = args.output
    if args.no_png:
        return plan, None
    if args.png or not plan:
        png = args.png
    else:
        png = os.path.splitext(plan)[0] + ".png"
        if same_file(plan, png):
            raise BadValue(f"-o {plan}: the drawing goes next to the plan as {png}, the same "
                           "file; name the plan .json, or give --png PATH or --no-png")
        out_file(png, "the drawing next to -o:")
    if plan and png:
        distinct({"-o": plan, "--png": png})
    return plan, png


def cmd_topo(args: argparse.Namespace) -> int:
    """Print the counts, write the plan and its drawing. Paths are checked (at parse, and
    the results root and the pair here) before the plan is built, so a bad one leaves
    nothing behind."""
    plan_path, png = _topo_outputs(args)
    if not plan_path:
        check_output()
    plan = build(args.topology, **_spec_params(args))
    print(describe(plan))
    partial = final = ""
    if not plan_path:
        partial, final = results_dir(f"topo-{args.topology}")
        plan_path = os.path.join(partial, "plan.json")
        if not args.no_png and not png:
            png = os.path.join(partial, "fabric.png")
    plan.save(plan_path)
    if png:
        # lazy: testbed.draw loads matplotlib (~0.2 s); only the drawing of topo needs it
        from testbed.draw import draw_plan

        draw_plan(plan, png)
    if partial:
        os.replace(partial, final)
        plan_path = os.path.join(final, "plan.json")
        if png and not args.png:
            png = os.path.join(final, "fabric.png")
    print(f"\nwiring plan: {plan_path}")
    if png:
        print(f"drawing:     {png}")
    return 0


def _lab_from_args(args: argparse.Namespace, capture_dir: str | None = None) -> Lab:
    plan = build(args.topology, **_spec_params(args))
    if isinstance(args.switch_daemons, int) and args.switch_daemons > len(plan.switches):
        raise ValueError(f"--switch-daemons {args.switch_daemons}: the fabric has "
                         f"{len(plan.switches)} switches, and a daemon forwards at least one; "
                         "give at most that, or auto")
    return make_lab(plan, args.cluster, tunnel=args.tunnel, datapath=args.datapath, lb=args.lb,
                    pmtu=args.pmtu, dashboard=args.dashboard,
                    dashboard_port=args.dashboard_port, capture=args.capture,
                    capture_dir=capture_dir, switch_daemons=args.switch_daemons)


def _print_bringup(lab: Lab) -> None:
    plan = lab.plan
    t = lab.timings
    print(f"{plan.topology}: {len(plan.hosts)} GPUs, {len(plan.switches)} switches, "
          f"{len(plan.links)} links, datapath={lab.datapath}, scale={plan.scale:g}")
    print(f"up in {t.get('total', 0):.1f} s (controller converged; "
          + ", ".join(f"{k} {v:.2f}s" for k, v in t.items() if k != "total") + ")")


def cmd_up(args: argparse.Namespace) -> int:
    """Bring up, open the Mininet CLI; with ``--capture``, pcaps go to results/<time>-up-*/."""
    if not args.capture:
        return _up(args, None)

    check_ports([build(args.topology, **_spec_params(args))], args.capture)  # before any folder
    partial, final = results_dir(f"up-{args.topology}")
    pcaps = os.path.join(partial, "capture")
    try:
        return _up(args, pcaps)
    finally:
        if os.path.isdir(pcaps) and os.listdir(pcaps):
            os.replace(partial, final)
            print(f"pcaps: {os.path.join(final, 'capture')}/")
        else:  # the fabric never came up: nothing to keep
            shutil.rmtree(partial, ignore_errors=True)


def _up(args: argparse.Namespace, capture_dir: str | None) -> int:
    with _lab_from_args(args, capture_dir) as lab:
        _print_bringup(lab)
        if lab.dashboard_url:
            print(f"live view: {lab.dashboard_url}  (/metrics for Prometheus)")
        if not args.no_check:
            print(lab.reachability())
        if args.cluster:
            print(lab.summary)
        print(f"controller JSON: http://127.0.0.1:{lab.rest_port}/  (lb {lab.lb}; "
              f"OpenFlow on {lab.of_host}:{lab.of_port})")
        first = lab.plan.switches[0].name
        print(f"try: s0g0 ping {lab.plan.hosts[-1].ip}   |   "
              f"sh ovs-ofctl -O OpenFlow15 dump-flows {first}   |   exit to tear down")
        if args.no_cli:
            return 0
        setLogLevel("info")
        CLI(lab.net)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The tour (`make demo`): the `demo` scenario, then where its results are."""
    args.scenario = "demo"
    return cmd_run(args)


def cmd_list(args: argparse.Namespace) -> int:
    scenarios = SCENARIOS.all()
    width = max(len(n) for n in scenarios)
    for name, sc in scenarios.items():
        print(f"{name:<{width}}  {sc.description}")
    print("\nrun one: sudo astral-lab run NAME [--quick] [--PARAM VALUE ...]; "
          "its parameters: astral-lab run NAME --help")
    return 0


def cmd_policies(args: argparse.Namespace) -> int:
    """Every policy module (controllers/policies/), where it runs and what it does."""
    rows = policies.table()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    where = max(len(" + ".join(r["runs_in"])) for r in rows)
    for r in rows:
        traits = f" ({', '.join(r['traits'])})" if r["traits"] else ""
        print(f"{r['name']:<{width}}  {' + '.join(r['runs_in']):<{where}}  {r['summary']}{traits}")
        if r["options"]:
            opts = ", ".join(f"{k}={v:g}" for k, v in r["options"].items())
            print(f"{'':<{width}}  {'':<{where}}  options: {opts}")
    print("\nuse one: astral-lab model ... --lb NAME[,NAME]; sudo astral-lab up ... --lb NAME; "
          "PUT /lb {\"mode\": NAME}; options as NAME:KEY=VALUE (qp-scaling:qps=8). Add one: "
          "a new file in controllers/policies/ (docs/extending.md)")
    return 0


def add_pmtu_option(p: argparse.ArgumentParser) -> None:
    """``--pmtu``: the RoCE path MTU of every replay (each interface's MTU follows)."""

    p.add_argument("--pmtu", type=int, default=LAB_PMTU, choices=(1024, 2048, 4096),
                   help=f"RoCE path MTU in bytes (default {LAB_PMTU}: every emulated "
                   "interface gets an MTU that carries it; 1024 keeps Ethernet's 1,500)")


def add_daemons_option(p: argparse.ArgumentParser) -> None:
    """``--switch-daemons``: how many ovs-vswitchd forward the fabric
    (testbed.shell.switch_daemons)."""
    def parse(text: str) -> int | str:
        try:
            return parse_request(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    p.add_argument("--switch-daemons", type=parse, default=1, metavar="N|auto",
                   help="switch daemons forwarding the fabric on the userspace datapath, each "
                        "on a core of its own (default 1; auto: one per core, 1 on the kernel "
                        "datapath). See docs/troubleshooting.md")


def _run_output(path: str) -> str:
    """``run -o DIR``: a scenario's file names are its own, so nothing the folder already
    holds may be a file its results could not replace (``out_dir`` with ``files=None``)."""
    return out_dir(path, files=None)


def _run_parser(name: str) -> argparse.ArgumentParser:
    sc = SCENARIOS.get(name)
    p = Parser(prog=f"astral-lab run {name}", description=sc.description,
               epilog=sc.doc.strip().split("\n\n")[0] if sc.doc else None)
    p.add_argument("--quick", action="store_true",
                   help="small and short (what the tests run); quick values in [brackets]")
    p.add_argument("--force", action="store_true",
                   help="run even when the fidelity guard says the run would be CPU-bound")
    p.add_argument("-o", "--output", type=_run_output,
                   help="results folder (default results/<time>-<name>/)")
    add_pmtu_option(p)
    add_daemons_option(p)
    add_cluster_option(p)
    add_live_options(p)
    for prm in sc.params:
        quick = f" [{prm.quick}]" if prm.quick is not None else ""
        many = "one or more" if isinstance(prm.default, (list, tuple)) else "one"
        choices = f" ({many} of {', '.join(map(str, prm.choices))})" if prm.choices else ""
        rule = f"; {prm.rule}" if prm.rule is not None else ""
        p.add_argument(f"--{prm.flag}", dest=prm.name, type=prm.parse, default=None,
                       metavar=type(prm.default).__name__.upper(),
                       help=f"{prm.help}; default {prm.default}{quick}{choices}{rule}"
                       .replace("%", "%%"))  # argparse formats help with %
    return p


def cmd_run(args: argparse.Namespace) -> int:
    sc = SCENARIOS.get(args.scenario)
    opts = _run_parser(args.scenario).parse_args(args.rest)
    overrides = {p.name: getattr(opts, p.name) for p in sc.params
                 if getattr(opts, p.name) is not None}
    # the parameters, the fabrics they make and --capture, as the run itself checks them:
    # refused before root is asked for, and before anything is made
    sc.check_fabrics(sc.resolve(opts.quick, overrides), opts.capture)
    if os.geteuid() != 0:
        print("astral-lab run: error: must run as root (it brings up a Mininet fabric): "
              f"sudo astral-lab run {args.scenario} ...", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = sc(quick=opts.quick, output=opts.output, force=opts.force,
                    cluster=opts.cluster, tunnel=opts.tunnel, pmtu=opts.pmtu,
                    dashboard=opts.dashboard, dashboard_port=opts.dashboard_port,
                    capture=opts.capture, switch_daemons=opts.switch_daemons, **overrides)
    except KeyboardInterrupt as exc:
        where = "; ".join(getattr(exc, "__notes__", [])) or \
            f"partial results kept in {RESULTS}/*-{args.scenario}.partial/"
        print(f"astral-lab run: interrupted; the fabric was torn down; {where}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    print()
    print(format_table(result.rows))
    print(sc.closing(result))
    return 0


def cmd_controller(args: argparse.Namespace) -> int:
    check_files(args)
    return run.serve(args)


def cmd_clean(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        print("astral-lab clean: error: must run as root (sudo astral-lab clean)",
              file=sys.stderr)
        return EXIT_USAGE
    cleanup.clean(kinds=INJECTORS.all().values())  # each fault kind's crash hook
    # Results of interrupted runs are marked *.partial and kept: they are the user's.
    if os.path.isdir(RESULTS):
        partial = [d for d in os.listdir(RESULTS) if d.endswith(".partial")]
        if partial:
            print(f"kept {len(partial)} partial result folder(s) in {RESULTS}/ (*.partial)")
    return 0


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="astral-lab", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=f"astral-lab {__version__}")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    t = sub.add_parser("topo", help="counts table, wiring plan JSON and PNG drawing of a fabric")
    t.add_argument("topology", choices=topologies.TOPOLOGIES.names())
    t.add_argument("-o", "--output", type=out_file,
                   help="plan JSON path (default: results/<time>-topo-<name>/)")
    t.add_argument("--png", type=out_file, help="drawing path (default: next to the plan)")
    t.add_argument("--no-png", action="store_true", help="skip the drawing")
    _add_spec_options(t)
    t.set_defaults(fn=cmd_topo)

    u = sub.add_parser("up", help="bring a fabric up under the controller; open the Mininet CLI")
    u.add_argument("topology", choices=topologies.TOPOLOGIES.names())
    u.add_argument("--datapath", default="auto", choices=datapath.REQUESTS)
    add_pmtu_option(u)
    add_daemons_option(u)
    u.add_argument("--no-cli", action="store_true", help="bring up, check, tear down")
    u.add_argument("--no-check", action="store_true", help="skip the all-pairs ping")
    u.add_argument("--lb", default=DEFAULT_MODE, type=controller_policy, metavar="MODE",
                   help="load-balancing mode, options as MODE:KEY=VALUE (switch later: PUT "
                        "/lb on the controller's API; `astral-lab policies` lists them)")
    add_cluster_option(u)
    add_live_options(u)
    _add_spec_options(u)
    u.set_defaults(fn=cmd_up)

    d = sub.add_parser("demo", help="the tour behind `make demo` (= run demo; --quick)",
                       description="The tour behind `make demo`. Takes the options of "
                       "`astral-lab run demo --help` (e.g. --quick).")
    d.set_defaults(rest=[])
    d.set_defaults(fn=cmd_demo)

    ls = sub.add_parser("list", help="the scenarios `run` can run, one line each")
    ls.set_defaults(fn=cmd_list)

    pol = sub.add_parser("policies", help="the load-balancing policies, one line each")
    pol.add_argument("--json", action="store_true", help="as JSON (name, runs_in, traits, "
                     "summary, module)")
    pol.set_defaults(fn=cmd_policies)

    r = sub.add_parser("run", help="run a scenario (see `list`); --help after the name "
                       "lists its parameters", add_help=True)
    r.add_argument("scenario", help="scenario name (astral-lab list)")
    r.add_argument("rest", nargs=argparse.REMAINDER, help="--quick, --force, --PARAM VALUE")
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser("controller", help="run the controller alone for a plan (use with `mn`)")

    add_options(c)
    c.set_defaults(fn=cmd_controller)

    add_cost_parser(sub)

    add_model_parser(sub)

    add_ops_parser(sub)
    add_dashboard_parser(sub)

    k = sub.add_parser("clean", help="remove leftovers of crashed runs (never touches results)")
    k.set_defaults(fn=cmd_clean)
    return p


def main(argv: list[str] | None = None) -> int:
    # Signals first: a Ctrl-C or SIGTERM while the parsers import their modules is still a
    # clean stop with the shell's status, not a traceback.
    stop_on_signals()
    args = None
    try:
        p = parser()
        args, extra = p.parse_known_args(argv)
        if extra and args.verb != "demo":  # demo passes its options on to the scenario
            _unrecognized(p, args, extra)
        if args.verb == "demo":
            args.rest = extra
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:
        verb = getattr(args, "verb", None) or "command"
        print(f"astral-lab {verb}: interrupted; everything was torn down", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        stop = stop_inside(exc)
        if isinstance(stop, SystemExit):
            raise stop from None
        if stop is not None:  # a Ctrl-C Python handed on wrapped in another error
            verb = getattr(args, "verb", None) or "command"
            print(f"astral-lab {verb}: interrupted; everything was torn down", file=sys.stderr)
            return EXIT_INTERRUPTED
        status = expected_status(exc)
        if status is None or args is None:  # a bug: keep the traceback
            raise
        report_error(" ".join(w for w in (args.verb, getattr(args, "ops_verb", None)) if w),
                     exc)
        return status


def _unrecognized(p: argparse.ArgumentParser, args: argparse.Namespace,
                  extra: list[str]) -> NoReturn:
    """Refuse words the verb does not take, in the verb's name, with the closest option it
    has (``--gpu``: did you mean --gpus?)."""
    verb_parser = p
    for dest in ("verb", "ops_verb"):
        sub = next((a for a in verb_parser._actions
                    if isinstance(a, argparse._SubParsersAction) and a.dest == dest), None)
        if sub is None or getattr(args, dest, None) not in sub.choices:
            break
        verb_parser = sub.choices[getattr(args, dest)]
    options = [o for a in verb_parser._actions for o in a.option_strings]
    word = extra[0].split("=", 1)[0]
    hint = ""
    if word.startswith("-"):
        close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
    verb_parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


def expected_status(exc: BaseException) -> int | None:
    """The exit status of an error the user can act on, or None for a bug.

    ValueError is how every layer refuses bad input, LabError how bring-up says this
    machine cannot run the lab now, CapacityError how the fidelity guard refuses. A
    controller that did not answer at all (died, or too slow for its client's timeout) is
    this machine's state too; one that answered with an error status was sent a request it
    refused, which is a bug of the code that sent it.
    """
    fidelity = sys.modules.get("scenarios.fidelity")  # only a scenario can have raised it
    if fidelity is not None and isinstance(exc, fidelity.CapacityError):
        return EXIT_GUARD
    if isinstance(exc, LabError):
        return EXIT_LAB
    client = sys.modules.get("controllers.shell.client")  # only a lab's run can have raised it
    if client is not None and isinstance(exc, client.ControllerError) and exc.status is None:
        return EXIT_LAB
    if isinstance(exc, ValueError):
        return EXIT_USAGE
    return None


def report_error(verb: str, exc: BaseException) -> None:
    """``astral-lab VERB: error: message`` (argparse's form), then the exception's notes
    (where a scenario kept its partial results)."""
    lines = [f"astral-lab {verb}: error: {exc}", *getattr(exc, "__notes__", [])]
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
