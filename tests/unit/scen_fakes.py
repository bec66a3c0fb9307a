"""A scenario run without a fabric: a fake Lab, guard and replay driven by the flow model.

The fake replay answers with the flow model's ECMP completion for the flows' own 5-tuples
(the hash seed is taken from their source ports, so every hash draw of a scenario gets its
own outcome, as on the real fabric) times ``SLOWDOWN``, and every message ends with its
flow. That is enough to run a scenario's whole pipeline (draws, model, report, plots,
summary) in a unit test and assert its structure; the numbers are the model's, not a
measurement.
"""

from __future__ import annotations

import zlib
from contextlib import contextmanager
from typing import Any

import pytest

from scenarios.base import Run
from testbed.models.perflow import model_flows
from traffic.roce import DEFAULT_PMTU
from traffic.shell.replay import ReplayResult
from traffic.shell.running import LocalFiles
from vocab.plan import WiringPlan

SLOWDOWN = 1.05


class FakeClient:
    def __init__(self, lab: FakeLab) -> None:
        self.lab = lab

    def set_lb(self, mode: str) -> None:
        self.lab.lb = mode

    def lb(self) -> dict[str, Any]:
        from controllers import policies

        return {"mode": self.lab.lb, "pins": policies.POLICIES.get(self.lab.lb).pins}

    def wait_converged(self, timeout: float = 0) -> None:
        pass

    def clear_traffic(self) -> None:
        pass

    def health(self) -> dict[str, Any]:
        return {"reroutes": [], "down_ports": []}


class FakeLab:
    """A running lab as far as a scenario can tell (``RunningLab``), with no fabric: the
    controller is ``FakeClient``, links change nothing and every ping arrives."""

    def __init__(self, plan: WiringPlan, lb: str = "ecmp") -> None:
        from controllers import policies

        self.plan, self.lb, self.datapath = plan, lb, "fake"
        self.lb_policy = policies.parse(lb, controller=True)
        self.timings = {"total": 0.0}
        self.replays: list[list[Any]] = []
        self.hosts: dict[str, Any] = {}
        self.workdir, self.run_id = "/nonexistent", "fake"
        self.files = LocalFiles()
        self.pmtu, self.mtu = DEFAULT_PMTU, None
        self.shape = self.lossless = self.use_controller = True
        self.controller_proc = None
        self.rest_port: int | None = None

    def client(self) -> FakeClient:
        return FakeClient(self)

    def health(self) -> dict[str, Any] | None:
        return self.client().health()

    def wait_converged(self, timeout: float | None = None) -> dict[str, Any]:
        return {}

    def reachability(self, timeout_ms: int = 1000, retries: int = 2,
                     max_inflight: int = 2048) -> Any:
        from testbed.reachability import Reachability

        n = len(self.plan.hosts)
        return Reachability(pairs=n * (n - 1), received=n * (n - 1), first_try_lost=0)

    def set_link(self, a: str, b: str, up: bool, lane: int = 0) -> Any:
        return [ln for ln in self.plan.links if {ln.a, ln.b} == {a, b}][lane]

    def set_links(self, links: list[Any], up: bool) -> None:
        pass

    def kill_controller(self) -> None:
        pass

    def restart_controller(self, wait: bool = True) -> None:
        pass

    def host(self, name: str) -> Any:
        return self.hosts[name]

    def stop(self) -> None:
        pass


def fake_replay(lab: FakeLab, flows: Any, **_kw: Any) -> ReplayResult:
    """The model's answer for these very flows (see the module docstring)."""
    flows = [f for f in flows if f.bytes > 0]
    lab.replays.append(flows)
    seed = zlib.crc32(",".join(str(f.sport) for f in flows).encode())
    from controllers import policies

    mode = lab.lb if lab.lb in policies.CONTROLLER_MODES.names() else "ecmp"
    res = model_flows(lab.plan, flows, mode, seed=seed, unit="mbps")
    rows, messages = [], []
    for f, t in zip(flows, res.flow_finish_s, strict=True):
        fct = (float(t) - f.start) * SLOWDOWN  # from the flow's own start, as the replay
        rows.append({"src": f.src, "dst": f.dst, "qp": f.qp, "sport": f.sport,
                     "traffic_class": f.traffic_class, "bytes": f.bytes, "received": f.bytes,
                     "lost_packets": 0, "reordered": 0, "fct_s": fct})
        for k in range(max(1, f.messages)):
            lat = fct * 1e9
            messages.append({"flow": f"x:{f.sport}", "seq": k, "src": f.src, "dst": f.dst,
                             "traffic_class": f.traffic_class, "complete": True,
                             "latency_ns": lat})
    job = max(r["fct_s"] for r in rows)
    return ReplayResult(flows=rows, messages=messages, start_ns=0, job_completion_s=job,
                        bytes_sent=sum(f.bytes for f in flows),
                        bytes_received=sum(f.bytes for f in flows), mode=mode,
                        start_skew_s=0.001)


def install(monkeypatch: pytest.MonkeyPatch, *modules: Any) -> list[FakeLab]:
    """Fake ``Run.lab``/``Run.guard`` and the replay (also where ``modules`` imported it)."""
    import traffic.shell.replay

    labs: list[FakeLab] = []

    @contextmanager
    def lab(self: Run, plan: WiringPlan, label: str | None = None, **kw: Any) -> Any:
        fake = FakeLab(plan, kw.get("lb", "ecmp"))
        labs.append(fake)
        self.config["fabrics"][label or plan.topology] = {
            "topology": plan.topology, "gpus": len(plan.hosts), "scale": plan.scale,
            "datapath": "fake", "switches": len(plan.switches), "links": len(plan.links)}
        yield fake

    def guard(self: Run, lab: Any, flows: Any, label: str, rate_mbps: float | None = None
              ) -> dict[str, Any]:
        v = {"label": label, "margin": 5.0, "verdict": "ok", "capacity_hop_pps": 50_000,
             "capacity_measured": "fake"}
        self.config["fidelity"].append(v)
        return v

    def replay_step(lab: FakeLab, traffic: Any, **kw: Any) -> dict[str, ReplayResult]:
        out = {}
        for phase in ("dispatch", "combine"):
            flows = [f for f in traffic.flows if f.phase == phase]
            if flows:
                out[phase] = fake_replay(lab, flows)
        return out

    from testbed.shell import qos

    monkeypatch.setattr(qos, "enable", lambda lab: {"mode": "isolated", "changed": 1,
                                                    "interfaces": 1})
    monkeypatch.setattr(qos, "status", lambda lab: {
        "mode": "isolated", "interfaces": 1,
        "classes": {"decode": {"packets": 1}, "bulk": {"packets": 1}}})
    monkeypatch.setattr(Run, "lab", lab)
    monkeypatch.setattr(Run, "guard", guard)
    monkeypatch.setattr(traffic.shell.replay, "replay", fake_replay)
    monkeypatch.setattr(traffic.shell.replay, "replay_step", replay_step)
    for mod in modules:
        for name, fn in (("replay", fake_replay), ("replay_step", replay_step)):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, fn)
        if hasattr(mod, "link_counters"):
            monkeypatch.setattr(mod, "link_counters", fake_counters())
    return labs


def fake_counters() -> Any:
    """``link_counters`` that grow by a different, seeded amount on every link each call."""
    import random

    from scenarios.common import fabric_links

    rng = random.Random(1)
    state: dict[tuple[str, str], int] = {}

    def read(plan: WiringPlan) -> dict[tuple[str, str], int]:
        for ln in fabric_links(plan):
            for d in ("up", "down"):
                state[(ln.name, d)] = state.get((ln.name, d), 0) + rng.randrange(0, 400_000)
        return dict(state)

    return read


def check_entry(entry: dict[str, Any], draws: int | None = None) -> None:
    """A summary.json entry: measured / ideal / ratio, and a distribution if randomized."""
    assert {"measured", "ideal", "ratio"} <= set(entry), entry
    assert entry["measured"] is not None and entry["ideal"] is not None, entry
    assert entry["ratio"] == pytest.approx(entry["measured"] / entry["ideal"])
    assert 0.3 <= entry["ratio"] <= 3, entry
    if draws is not None:
        assert entry["draws"] == draws, entry
        assert entry["p25"] <= entry["median"] <= entry["p75"], entry
        assert len(entry["values"]) == draws


def read_json(*parts: str) -> Any:
    import json
    import os

    with open(os.path.join(*parts), encoding="utf-8") as f:
        return json.load(f)


def read_text(*parts: str) -> str:
    import os

    with open(os.path.join(*parts), encoding="utf-8") as f:
        return f.read()
