"""Flow-level model: max-min fair rates and completion times of a job's flows. Pure, no root.

Emulation tops out at a few hundred GPUs at scaled-down rates. This package answers the same
question ("how long does this flow list take on this fabric with this routing policy?") in a
fluid model, with the ideal number beside it, up to the 64K-GPU scale of the paper. This
module is its front door: ``run`` (what ``astral-lab model`` and ``benchmarks/model.py``
call), ``format_report``; the modules behind it, each name imported from its own:

``solver``   the model: event-driven max-min by progressive filling (``simulate``), and
             why its reductions are exact; its event loop is compiled in ``maxmin``
``results``  what a result says (``ModelResult``, tiers, bottlenecks)
``inputs``   flows as the model reads them, and the default policies
``perflow``  the per-flow model on a wiring plan (``model_flows``, ``auto_jobs``)
``bounds``   lower bounds on the completion time (``bounds``)
``jobs``     EP groups and one group's flows (``Job``, ``make_job``)
``whatif``   the aggregate what-if on a two-tier fabric (``TwoTier``, ``whatif``,
             ``ecmp_lanes``), including the 64K-GPU fabric it describes

Routing: the SAME policy modules the controller runs (``controllers.policies``: each
module's ``model`` gives the paths, or ``SPLIT`` asks for the fluid split below, or decides
per job), on the
same paths (``controllers.paths.PathFinder``), so model and emulation route identically.
The shipped ones:

``ecmp``        ``lb.ecmp_assign``: the per-switch 5-tuple hash model, seedable. Every flow keeps
                its own path, because hash collisions are the point.
``ecmp-fluid``  every flow split evenly at every switch over the ECMP ports that routing
                offers (``PathFinder.next_hops``): the *expectation* of the hash, i.e. ECMP with
                infinitely many flowlets. On a healthy Clos this is the same as an even split
                over all candidate paths; with failed links per-hop splitting is what hashing
                does, so that is the definition used.
``planned``     ``lb.plan_assign`` (lane colouring by Konig's theorem, else greedy+improve).
``adaptive``    ``lb.simulate_adaptive``: where the Hedera-style policy ends up, started from
                ECMP. The model keeps those final paths for the whole job; the controller's
                moves *during* a job (one per poll interval) are not modelled.
``spray``       the fluid split, as ``ecmp-fluid``: spraying's limit.
``qp-scaling``  every flow striped over ``qps`` QPs (the module's ``expand``), each hashed as
                ``ecmp``; simulated on the QPs, reported per input flow (its latest QP).
``flowlet``     a rule per job (``SPLIT`` is a function): the fluid split when the median
                sender's packet spacing reaches the flowlet gap, else ``ecmp``.
``plb``         ``ecmp``, then QPs on links hotter than 1.05 x the NIC bound re-draw their
                source port, in turns, until no link is (at most 8 passes).

A policy is named with its options where it has any: ``qp-scaling:qps=8``
(``controllers.policies.parse``); results carry that label.

Aggregation, and why each kind is exact (the answer is identical to per-flow, not close):

1. *Identical flows.* Progressive filling sees a flow only through its incidence row (links
   and the fraction of its rate on each), its size and its start. Flows with identical rows,
   sizes and starts are frozen in the same round, at the same level, and finish at the same
   event, always. So they are one *class* with a multiplicity (``mult``); a link's demand is
   ``sum(mult * weight)``. Used for every policy (e.g. the QPs of one GPU pair).
2. *Parallel links (ecmp-fluid only).* Under per-hop splitting, every flow that loads one
   uplink lane of an astral3 leaf loads all of them with the same weight. Links whose columns
   (which (source, destination) attach pairs load them, with what weight) are identical and
   whose capacities are equal always carry equal load, so they fill at the same instant: one
   link of summed capacity, the flow's weight summed over them. Detected generically from the
   columns, not from names. Never used for hash ECMP, planned or adaptive: pinning flows to
   single lanes is what makes them collide.
3. *Group symmetry (the what-if).* N expert-parallel groups that each send the same traffic in
   their own local ranks, placed alike (``packed``: a group fills consecutive servers;
   ``spread``: strided over the fabric). One group's flows are the classes (``mult`` = N) and
   links are merged into classes: NIC links by local rank (N links each), leaf uplink and
   downlink bundles by the *multiset of local ranks* under the leaf. Why exact: suppose every
   copy of a flow runs at the same rate. A NIC link then carries what its local rank sends;
   a leaf bundle carries what its hosts send (receive) to (from) other leaves, a sum over the
   local ranks under it, so leaves with the same multiset carry the same load. Equal load
   and capacity: every link of a class fills at the same level, so a round freezes whole
   classes and the copies stay equal, round after round and event after event. The premises
   are checked, not assumed: every local rank sits under a leaf of the same class in every
   group, and the same-leaf partition of the local ranks is the same in every group;
   otherwise the what-if refuses. 16.7M flows become 65,280 classes on ~1K link classes.

Scale, per policy (the CLI says which one each number came from):

Running times are measured by ``benchmarks/model.py`` and quoted in docs/model.md.

Exactness: the reductions above are exact; the event loop is not, by default. Finishes
within ``DEFAULT_TOLERANCE`` (relative) of an event are coalesced into it (``simulate``),
which a decode step needs (every GPU pair one flow of its own size: a finish time per
flow, all coupled through the NICs, so event by event it takes tens of thousands of
events, each refilling thousands of flows). What that costs in accuracy is measured, not
proven: every flow's finish within ``MAX_REL_ERROR`` of the exact solve on the steps the
tests check; the document's ``exactness`` says which solve ran, the report prints it, and
``tolerance=0`` (``--exact``) is the event-by-event solve. Results of a coalesced solve
are labelled ``approx``.

* ``mode="per-flow"`` (any topology; default while the job has <= ``exact_flows`` flows,
  300,000): every policy routes every flow with the controller's own code, then
  event-driven max-min over the classes of (1) and (2). The cost is per event times the
  rate levels above the leavers, so an all-to-all (equal sizes: few events) and a prefill
  step (intra-rail: many small components) are quick, and a decode step the slowest.
* ``mode="aggregate"`` (astral3 only; default above that):
  ``ecmp-fluid``: max-min over the group quotient (3). An all-to-all is one event. A
  prefill or decode step has as many distinct finish times in one group as per-flow mode
  has, so it costs what one group costs there.
  ``planned``: exact *job* completion from a theorem, not by running the planner. Theorem: if
  every flow has the same size s and start, then under ANY routing the max-min completion
  equals the largest link time (bytes / capacity) of that routing: it is a lower bound, and at
  every instant every flow's rate is at least the first filling level min(capacity / demand),
  which only rises as flows leave, so every flow finishes by s / first level = that link time.
  lb's lane colouring colours the source-leaf x destination-leaf multigraph of cross-leaf
  flows with D colours (D = its largest degree) and puts colour c on lane class c mod C (C =
  spines x lanes per leaf-spine pair). A leaf of degree D uses every colour once, so its
  busiest lane carries exactly ceil(D/C) flows, and no lane anywhere carries more, whatever
  colouring the algorithm finds. So the planned job time is max(NIC times, ceil(D/C) s / lane
  rate): exactly what lb.plan_assign would give, without running it (the tests compare the
  two). Per-flow times and unequal sizes (prefill, decode) are not computed.
  ``ecmp``: every flow hashed with lb's own hash recipe (BLAKE2 of the 5-tuple salted by
  switch and seed; checked bit-for-bit against ``lb.ecmp_path``) into exact per-lane loads;
  with equal sizes the theorem makes the max link time the exact completion, otherwise it is
  reported as a lower bound (``kind="lower-bound"``).
  ``adaptive``: not computed (its policy is per-flow Python). A policy module picks one of
  these closed forms with ``WHATIF`` (``fluid``, ``lanes``, ``hash``) or none.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import fields
from enum import StrEnum
from typing import Any

from controllers.paths import UNITS, PathFinder
from controllers.policies import POLICIES
from testbed import topologies
from testbed.fabricspec import FabricSpec
from testbed.models.bounds import bounds
from testbed.models.inputs import DEFAULT_POLICIES, check_policy
from testbed.models.jobs import (
    DEFAULT_PAIR_BYTES,
    Placement,
    Workload,
    make_job,
    step_forecast,
)
from testbed.models.perflow import Prepared, auto_jobs, model_policies
from testbed.models.progress import Progress
from testbed.models.results import ModelResult
from testbed.models.whatif import TwoTier, whatif
from testbed.topologies import build
from traffic.workload import Phase


class ModelMode(StrEnum):
    """Which solve ``run`` uses: see the module docstring."""

    AUTO = "auto"  # per-flow while the job has at most ``exact_flows`` flows
    PER_FLOW = "per-flow"  # every flow routed by the controller's code (any topology)
    AGGREGATE = "aggregate"  # the group-symmetric what-if (two-tier designs only)


#: The event tolerance ``run`` (and ``astral-lab model``) uses unless told otherwise
#: (``simulate``: coalesced finishes). Chosen from measurements against the exact solve:
#: the largest round value at which every flow of the decode and prefill steps checked
#: stayed well inside ``MAX_REL_ERROR`` (twice as far as this went past it).
DEFAULT_TOLERANCE = 3e-4
#: What the default promises: every flow's finish within this (relative) of the exact
#: solve. Measured, not proven (no theorem bounds coalescing under max-min); the tests
#: hold it on real decode and prefill steps.
MAX_REL_ERROR = 1e-3
#: Above this many flows the CLI's auto mode switches from per-flow to the aggregate what-if.
DEFAULT_EXACT_FLOWS = 300_000
#: Per-flow mode keeps Python objects per flow (~3 KB each, measured): beyond this, 8 GiB
#: would not hold them.
MAX_PER_FLOW = 1_000_000
SCHEMA = "astral-lab/model"


#: FabricSpec fields the model verb exposes (servers and gpus come from --gpus and
#: --gpus-per-server).
FABRIC_FIELDS = tuple(f.name for f in fields(FabricSpec) if f.name not in ("servers", "gpus"))


def _spec(topology: str, gpus: int, gps: int, fabric: dict[str, Any]) -> FabricSpec:
    """The fabric ``topo`` builds from the same parameters (``topologies.spec_for_gpus``):
    unset fields are ``FabricSpec``'s defaults, ``servers_per_block=0`` fills the leaf."""
    unknown = sorted(set(fabric) - set(FABRIC_FIELDS))
    if unknown:
        raise ValueError(f"unknown fabric parameter(s) {', '.join(unknown)}")
    params = {k: v for k, v in fabric.items() if v is not None}
    return topologies.spec_for_gpus(topology, gpus, gps, **params)


def run(topology: str, gpus: int, *, gpus_per_server: int = 8,
        workload: Workload = Workload.ALLTOALL,
        policies: Sequence[str] = DEFAULT_POLICIES, groups: int = 0, group_size: int = 0,
        placement: Placement = Placement.PACKED, seed: int = 0,
        pair_bytes: int = DEFAULT_PAIR_BYTES, qps: int = 1, phase: Phase = Phase.DISPATCH,
        tokens: int = 0, model: str = "deepseek-v3", mode: ModelMode = ModelMode.AUTO,
        exact_flows: int = DEFAULT_EXACT_FLOWS, unit: str = "gbps",
        fabric: dict[str, Any] | None = None, tolerance: float | None = None, jobs: int = 1,
        progress: Progress | None = None) -> tuple[dict[str, Any], list[ModelResult]]:
    """Build the fabric and the job, model every policy, return (model.json document, results).

    ``mode``: ``per-flow`` routes every flow with the controller's code on a real wiring plan
    (any topology); ``aggregate`` is the group-symmetric what-if (astral3 only); ``auto``
    picks per-flow while the job has at most ``exact_flows`` flows. ``tolerance``: event
    coalescing (``simulate``); None = ``DEFAULT_TOLERANCE``, 0 = exact (what the document's
    ``exactness`` says). ``jobs``: per-flow policies modelled in that many processes at
    once (0 = as many as the CPUs and memory allow; ``auto_jobs``). ``progress``: told
    where each policy is (``testbed.models.progress``).
    """
    t0 = time.perf_counter()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"--jobs must be 0 (auto) or a positive integer (got {jobs!r})")
    two_tier = topologies.TOPOLOGIES.get(topology).two_tier is not None  # ValueError if unknown
    if mode not in tuple(ModelMode):
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(ModelMode)}")
    if not policies:
        raise ValueError("no policy to model; choose from " + ", ".join(POLICIES.names()))
    for p in policies:
        check_policy(p)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"--gpus must be a positive integer (got {gpus!r})")
    if isinstance(gpus_per_server, bool) or not isinstance(gpus_per_server, int) \
            or gpus_per_server < 1:
        raise ValueError(f"--gpus-per-server must be a positive integer (got "
                         f"{gpus_per_server!r})")
    if gpus % gpus_per_server:
        raise ValueError(f"{gpus} GPUs is not a whole number of {gpus_per_server}-GPU servers")
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {sorted(UNITS)} (got {unit!r})")
    if tolerance is None:
        tolerance = DEFAULT_TOLERANCE
    if not 0 <= tolerance < 0.5:
        raise ValueError(f"--event-tolerance must be in [0, 0.5) (got {tolerance!r})")
    servers = gpus // gpus_per_server
    spec = _spec(topology, gpus, gpus_per_server, dict(fabric or {}))
    step = dict(workload=workload, groups=groups, group_size=group_size, placement=placement,
                seed=seed, pair_bytes=pair_bytes, qps=qps, phase=phase, tokens=tokens,
                model=model)
    if progress is not None and progress.enabled:
        _forecast(progress, servers, gpus_per_server, step)
    job = make_job(servers, gpus_per_server, **step)
    chosen = ModelMode(mode)
    if chosen == ModelMode.AUTO:
        chosen = ModelMode.PER_FLOW if job.flows <= exact_flows else ModelMode.AGGREGATE
    why = (f"{job.flows:,} flows {'<=' if chosen == ModelMode.PER_FLOW else '>'} "
           f"--exact-flows {exact_flows:,}" if mode == ModelMode.AUTO else "requested")
    results: list[ModelResult]
    if chosen == ModelMode.PER_FLOW and job.flows > MAX_PER_FLOW:
        raise ValueError(f"{job.flows:,} flows is too many for the per-flow model (at most "
                         f"{MAX_PER_FLOW:,}: it keeps Python objects per flow); use --mode "
                         "aggregate (astral3) or fewer GPUs")
    if chosen == ModelMode.AGGREGATE:
        if not two_tier and mode != ModelMode.AUTO:
            raise ValueError(f"--mode aggregate: the aggregate what-if covers two-tier "
                             f"designs (astral3) only, not {topology}; use --mode per-flow "
                             "or auto")
        if not two_tier:
            raise ValueError(f"{job.flows:,} flows is more than the per-flow model takes "
                             f"(--exact-flows {exact_flows:,}) and the aggregate what-if covers "
                             "two-tier designs (astral3) only; use fewer GPUs or raise "
                             "--exact-flows")
        if unit != "gbps":
            raise ValueError("the aggregate what-if has no emulated fabric: use --unit gbps")
        tt = TwoTier.from_spec(spec, topology)
        note = None
        if progress is not None:
            progress.start([check_policy(p).label for p in policies], 1)
            note = progress.note
        results, bnd = whatif(tt, job, policies, seed, tolerance, note)
        fab = tt.describe()
    else:
        plan = build(topology, **{f.name: getattr(spec, f.name) for f in fields(FabricSpec)})
        finder = PathFinder(plan)
        names = {int(h.loc["server"]) * gpus_per_server + int(h.loc["gpu"]): h.name
                 for h in plan.hosts}
        prep = Prepared(finder, job.flow_list(names), unit)
        bnd = bounds(finder, prep.fl, unit)
        jobs = min(jobs or auto_jobs(len(prep.fl), len(policies)), len(policies))
        note = None
        if progress is not None:
            progress.start([check_policy(p).label for p in policies], jobs)
            note = progress.note
        results = model_policies(prep, policies, jobs, seed=seed, bound=bnd,
                                 tolerance=tolerance, progress=note)
        summary = f"{plan.topology}: " + ", ".join(
            f"{k.replace('_', ' ')} {v}" for k, v in plan.counts.items()
            if not isinstance(v, dict))
        if two_tier:
            summary = TwoTier.from_spec(spec, topology).describe()["summary"]
        fab = {"topology": plan.topology, **plan.counts, "params": plan.params,
               "summary": summary + " (per-flow, on its wiring plan)"}
    doc = {"schema": SCHEMA, "version": 1, "mode": chosen, "mode_reason": why, "unit": unit,
           "event_tolerance": tolerance, "exactness": exactness(tolerance),
           "fabric": fab, "workload": job.info, "seed": seed, "bounds_s": bnd,
           "results": [r.to_dict() for r in results],
           "runtime_s": round(time.perf_counter() - t0, 3)}
    return doc, results


def _forecast(progress: Progress, servers: int, gpus_per_server: int,
              step: dict[str, Any]) -> None:
    """Say before it starts how long drawing a long MoE step should take (``jobs.
    step_forecast``: measured on the same step at a few tokens per GPU)."""
    fc = step_forecast(servers, gpus_per_server, **step)
    if fc is not None:
        progress.forecast(fc.seconds, f"drawing the {Workload(step['workload'])} step "
                          f"({fc.group_size} GPUs x {fc.tokens:,} tokens each)",
                          f"the same step at {fc.calibration_tokens:,} tokens per GPU took "
                          f"{fc.calibration_s:.2f} s; the solve comes after it")


def exactness(tolerance: float) -> dict[str, Any]:
    """How exact a run with this event tolerance is, as model.json records it."""
    if tolerance == 0:
        return {"solve": "exact", "event_tolerance": 0.0, "max_rel_error": 0.0,
                "basis": "every finish event computed on its own"}
    checked = tolerance <= DEFAULT_TOLERANCE
    return {"solve": "coalesced", "event_tolerance": tolerance,
            "max_rel_error": MAX_REL_ERROR if checked else None,
            "basis": "every flow's finish within max_rel_error (relative) of the exact "
                     "solve on the decode and prefill steps the tests check; measured, "
                     "not proven" if checked else
                     "tolerance above the default: the error is not checked"}


def _exactness_line(doc: dict[str, Any]) -> str:
    ex = doc.get("exactness") or exactness(doc.get("event_tolerance", 0.0))
    if ex["solve"] == "exact":
        return "solve: exact (every finish event on its own; --exact)"
    if ex["max_rel_error"] is None:
        return (f"solve: finishes coalesced within {ex['event_tolerance']:g} (relative) of an "
                "event; error not checked at this tolerance (--exact for the exact solve)")
    return (f"solve: finishes coalesced within {ex['event_tolerance']:g} (relative) of an "
            f"event: every flow's finish within {100 * ex['max_rel_error']:g}% of the exact "
            "solve (measured, not proven; --exact for the exact solve)")


def _ms(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x * 1e3:.3f} ms" if x < 10 else f"{x:.3f} s"


def format_report(doc: dict[str, Any]) -> str:
    """What ``astral-lab model`` prints."""
    w = doc["workload"]
    lines = [doc["fabric"]["summary"],
             f"workload: {w['workload']}, {w['groups']} group(s) x {w['group_size']} GPUs "
             f"({w['placement']}), {w['flows']:,} flows, {w['bytes_total']:,} bytes"
             + (f", {w['bytes_per_pair']:,} bytes per GPU pair" if "bytes_per_pair" in w else
                f", {w.get('kernel')} {w.get('phase')}"),
             f"mode: {doc['mode']} ({doc['mode_reason']}); times at "
             f"{'real' if doc['unit'] == 'gbps' else 'emulated'} link rates",
             _exactness_line(doc), ""]
    width = max([11] + [len(r["policy"]) for r in doc["results"]])
    qps = any(r.get("qps") not in (None, r["flows"]) for r in doc["results"])
    head = f"{'policy':<{width}} {'completion':>13} {'x bound':>8}  " + \
        (f"{'QPs':>9}  " if qps else "") + f"{'kind':<12} method"
    lines.append(head)
    for r in doc["results"]:
        ratio = "" if r["ratio_to_bound"] is None else f"{r['ratio_to_bound']:.3f}"
        opened = "" if r.get("qps") is None else f"{r['qps']:,}"
        lines.append(f"{r['policy']:<{width}} {_ms(r['completion_s']):>13} {ratio:>8}  "
                     + (f"{opened:>9}  " if qps else "") + f"{r['kind']:<12} {r['method']}")
    if qps:
        lines.append(f"(QPs: what the hosts open for the {w['flows']:,} flows; a policy that "
                     "stripes flows is modelled on its QPs, its times given per flow)")
    b = doc["bounds_s"]
    names = [("host_tx", "NIC tx"), ("host_rx", "NIC rx"), ("host_start", "NIC w/ starts"),
             ("fabric_out", "leaf out (unsplit)"), ("fabric_in", "leaf in (unsplit)"),
             ("fabric_out_split", "leaf out (split)"), ("fabric_in_split", "leaf in (split)"),
             ("bisection", "bisection")]
    lines += ["", "lower bounds: " + ", ".join(f"{label} {_ms(b[k])}" for k, label in names
                                                if k in b),
              f"  unsplit (ecmp/planned/adaptive) {_ms(b['unsplit'])}; splittable "
              f"(ecmp-fluid) {_ms(b['splittable'])}"]
    shown = [r for r in doc["results"] if r["tiers"]]
    if shown:
        tiers = sorted({t for r in shown for t in r["tiers"]})
        lines += ["", "busiest link per tier: link time, and links at that load (mean use "
                      "over the job)",
                  f"{'tier':<13}{'links':>9}  " + "".join(f"{r['policy']:<28}" for r in shown)]
        for t in tiers:
            cells = []
            for r in shown:
                x = r["tiers"].get(t)
                if x is None:
                    cells.append(f"{'-':<28}")
                    continue
                n = "?" if x["links_at_max"] is None else f"{x['links_at_max']:,}"
                use = f" ({100 * x['mean_utilisation']:.0f}%)" if "mean_utilisation" in x else ""
                cells.append(f"{_ms(x['max_link_time_s']) + ' x' + n + use:<28}")
            links = max(r["tiers"][t]["links"] for r in shown if t in r["tiers"])
            lines.append(f"{t:<13}{links:>9,}  " + "".join(cells))
    lines += ["", "bottleneck links (link time):"]
    for r in doc["results"]:
        lines.append(f"  {r['policy']}" + (f": {r['note']}" if r["note"] else ""))
        for x in r["bottlenecks"][:3]:
            extra = f", {x['flows']} flows" if "flows" in x else ""
            lines.append(f"    {x['link']} [{x['tier']}] {_ms(x['link_time_s'])}{extra}")
    return "\n".join(lines)

__all__ = [
    "ModelMode", "DEFAULT_EXACT_FLOWS", "DEFAULT_TOLERANCE", "MAX_REL_ERROR", "exactness", "run",
    "format_report",
]
