"""``traffic.shell.moejob``: what one iteration measures and what the collector is handed,
with the replays faked (the real fabric: tests/integration/test_moejob_live.py)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import pytest

from testbed.topologies import build
from traffic import iterations as I
from traffic.kernels import high_bandwidth, low_latency
from traffic.shell import moejob as M
from traffic.workload import Phase, simulate_step

PLAN = build("astral3", servers=2, gpus=2)


@pytest.fixture(scope="module")
def kernels() -> tuple[Any, Any]:
    train = high_bandwidth(simulate_step("deepseek-v3", 2, 2, 8, seed=1), PLAN)
    decode = low_latency(simulate_step("deepseek-v3", 2, 2, 2, seed=2), PLAN,
                         phases=(Phase.DISPATCH,))
    return train, decode


class FakeReplays:
    """Stands in for ``replay``: each call's completion time and lost packets, in turn."""

    def __init__(self, outcomes: list[tuple[float, int] | Exception],
                 scratch: str = "") -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, int]] = []
        self.kw: list[dict[str, Any]] = []
        self.scratch = scratch

    def workdir(self, label: str) -> str:
        """A replay's folder with a file in it, as ``replay`` leaves one ("" without scratch)."""
        if not self.scratch:
            return ""
        path = os.path.join(self.scratch, label.replace(" ", "-"))
        os.makedirs(path)
        with open(os.path.join(path, "recv.json"), "w") as f:
            f.write("{}")
        return path

    def __call__(self, lab: Any, flows: list[Any], *, label: str, **kw: Any) -> Any:
        self.calls.append((label, len(flows)))
        self.kw.append(kw)
        out = self.outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        secs, lost, *late = out
        rows = [{"src": f.src, "dst": f.dst, "sport": f.sport,
                 "lost_packets": lost if i == 0 else 0} for i, f in enumerate(flows)]
        return SimpleNamespace(start_ns=int(1e18), job_completion_s=secs, lost_packets=lost,
                               start_skew_s=late[0] if late else 0.0, flows=rows,
                               receiver_drops=0, workdir=self.workdir(label))


def job(kernels: tuple[Any, Any], fake: FakeReplays, monkeypatch: pytest.MonkeyPatch,
        **kw: Any) -> M.MoeJob:
    monkeypatch.setattr(M, "replay", fake)
    train, decode = kernels
    return M.MoeJob(SimpleNamespace(plan=PLAN), train, decode, log=lambda _m: None, **kw)


def test_an_iteration_is_dispatch_then_combine_and_a_decode_burst_every_other(
        kernels: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeReplays([(0.2, 0), (0.3, 0), (0.05, 0), (0.25, 0), (0.35, 0)])
    j = job(kernels, fake, monkeypatch, decode_every=2)
    first, second = j.iterate(0), j.iterate(1)
    assert [c[0] for c in fake.calls] == ["iteration 0 dispatch", "iteration 0 combine",
                                          "iteration 0 decode", "iteration 1 dispatch",
                                          "iteration 1 combine"]
    assert first.phases == {"dispatch": 0.2, "combine": 0.3} and first.iter_s == 0.5
    assert first.decode_s == 0.05 and first.started == 1e9
    assert second.iter_s == pytest.approx(0.6) and second.decode_s is None
    assert first.lost_packets == 0 and first.lossy == [] and first.error is None


def test_a_phase_is_timed_from_its_last_senders_real_start(
        kernels: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A sender that started 0.15 s late (the machine, not the fabric): its lateness is
    kept apart and taken out of the phase's time, and the iteration starts with it."""
    fake = FakeReplays([(0.2, 0, 0.15), (0.3, 0, 0.0), (0.05, 0, 0.01)])
    first = job(kernels, fake, monkeypatch, decode_every=1).iterate(0)
    assert first.phases == {"dispatch": 0.05, "combine": 0.3}
    assert first.iter_s == pytest.approx(0.35) and first.started == 1e9 + 0.15
    assert first.skew_s == {"dispatch": 0.15, "combine": 0.0, "decode": 0.01}
    assert first.decode_s == pytest.approx(0.04)


def test_lost_packets_are_counted_with_the_flows_that_lost_them(
        kernels: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeReplays([(0.2, 3), (0.3, 0), (0.05, 2)])
    j = job(kernels, fake, monkeypatch)
    it = j.iterate(0)
    assert it.lost_packets == 3 and it.decode_lost == 2
    assert [(f["kernel"], f["lost"]) for f in it.lossy] == [("train", 3), ("decode", 2)]
    values = I.iteration_values([it])
    src, dst = it.lossy[0]["src"], it.lossy[0]["dst"]
    assert values[("job", "iter_lost")] == 3 and values[("job", "iter_s")] == 0.5
    assert values[("job", I.pair_metric(src, dst))] == sum(
        f["lost"] for f in it.lossy if (f["src"], f["dst"]) == (src, dst))
    assert I.parse_pair(I.pair_metric(src, dst)) == (src, dst)
    assert I.parse_pair("iter_s") is None and I.parse_pair("lost:s0g0>") is None


def test_a_failed_replay_is_an_untimed_failed_iteration_and_the_job_goes_on(
        kernels: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeReplays([RuntimeError("receiver on s0g0 did not start"), (0.2, 0), (0.3, 0)])
    j = job(kernels, fake, monkeypatch, decode_every=5)
    bad, good = j.iterate(0), j.iterate(1)
    assert bad.error == "RuntimeError: receiver on s0g0 did not start"
    assert good.error is None and good.iter_s == 0.5
    values = I.iteration_values([bad])
    assert values[("job", "iter_failed")] == 1 and ("job", "iter_s") not in values


def test_the_collector_is_handed_each_iteration_once(
        kernels: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    j = job(kernels, FakeReplays([]), monkeypatch)
    assert j.take_values(0.0) == {}
    j.iterations += [I.Iteration(0, 1.0, 2.0, 0.5, {}, 0), I.Iteration(1, 3.0, 4.0, 0.9, {}, 0)]
    assert j.take_values(5.0)[("job", "iter_s")] == 0.9  # the slowest since the last poll
    assert j.take_values(6.0) == {}


def test_bad_arguments_are_refused(kernels: tuple[Any, Any]) -> None:
    train, decode = kernels
    with pytest.raises(ValueError, match="decode_every"):
        M.MoeJob(SimpleNamespace(plan=PLAN), train, decode, decode_every=0)
    empty = type(train)("high_bandwidth", [], [])
    with pytest.raises(ValueError, match="no flows"):
        M.MoeJob(SimpleNamespace(plan=PLAN), empty)


def test_an_iteration_whose_receivers_dropped_packets_reports_only_that() -> None:
    it = I.Iteration(0, 1.0, 2.0, 0.9, {}, 40, receiver_drops=40,
                     lossy=[{"src": "s0g0", "dst": "s1g0", "lost": 40}])
    ok = I.Iteration(1, 3.0, 4.0, 0.5, {}, 0)
    values = I.iteration_values([it, ok])
    assert values == {("job", "iter_rxdrops"): 40.0, ("job", "iter_s"): 0.5,
                      ("job", "iter_lost"): 0.0, ("job", "iter_failed"): 0.0}


def test_a_job_has_settled_after_steady_lossless_iterations() -> None:
    def it(secs: float, lost: int = 0) -> I.Iteration:
        return I.Iteration(0, 0.0, 1.0, secs, {}, lost)

    steady = [it(1.0), it(1.2), it(1.1), it(1.4), it(1.0)]
    assert I.settled(steady)
    assert not I.settled(steady[1:])  # too few
    assert not I.settled([*steady, it(1.0, lost=3)])  # still losing
    assert not I.settled([*steady[1:], it(1.6)])  # still slowing down
    assert I.settled([it(5.0, lost=900), *steady])  # the warm-up behind it


def test_each_replays_files_go_once_the_iteration_has_read_them(
        kernels: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    fake = FakeReplays([(0.2, 1), (0.3, 0), (0.05, 0)], scratch=str(tmp_path))
    it = job(kernels, fake, monkeypatch).iterate(0)
    assert it.lost_packets == 1 and len(fake.calls) == 3
    assert os.listdir(tmp_path) == []


class FakeAgents:
    """Stands in for ``HostAgents``: which hosts it was started for, and whether it ended."""

    def __init__(self, lab: Any) -> None:
        self.lab, self.closed = lab, False
        self.senders: list[str] = []
        self.receivers: list[str] = []

    def start(self, senders: Any = (), receivers: Any = ()) -> FakeAgents:
        self.senders, self.receivers = list(senders), list(receivers)
        return self

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("plane", [None, "native", "python"])
def test_the_job_starts_its_hosts_agents_once_and_every_replay_uses_them(
        kernels: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, plane: str | None) -> None:
    """One sender per source host and one receiver per destination host, started with the
    job, handed to each replay and ended with the job; the Python plane has none."""
    made: list[FakeAgents] = []
    monkeypatch.setattr(M, "HostAgents", lambda lab: made.append(FakeAgents(lab)) or made[-1])
    fake = FakeReplays([(0.2, 0)] * 200)
    kw = {"plane": plane} if plane else {}
    j = job(kernels, fake, monkeypatch, **kw)
    j.lab.client = lambda: SimpleNamespace(lb=lambda: {"mode": "ecmp", "pins": False})
    j.start()
    try:
        deadline = time.monotonic() + 10
        while len(fake.calls) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        j.stop()
    assert len(fake.calls) >= 5
    if plane == "python":
        assert made == [] and all("agents" not in kw for kw in fake.kw)
        return
    train, decode = kernels
    flows = [f for f in train.flows + decode.flows if f.bytes > 0]
    (agents,) = made
    assert agents.senders == sorted({f.src for f in flows})
    assert agents.receivers == sorted({f.dst for f in flows})
    assert all(kw["agents"] is agents for kw in fake.kw) and agents.closed
    assert j.agents is None and "agents" not in j.replay_kw
