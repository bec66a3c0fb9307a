"""The scenario framework without a fabric: parameters, results folders, reports, the guard."""

from __future__ import annotations

import csv
import json
import os
from typing import Any

import pytest

from scenarios import base, common, fidelity
from scenarios.base import Param, Run, scenario
from scenarios.experiments import SCENARIOS
from testbed.topologies import build
from traffic.roce import DEFAULT_PMTU, OP_WRITE_MIDDLE, frame_len
from vocab.plan import WiringPlan


def _read(*parts: Any) -> str:
    with open(os.path.join(*map(str, parts))) as f:
        return f.read()


@pytest.fixture
def results(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


@pytest.fixture
def toy() -> Any:
    """A scenario that writes rows, a JSON file and a finding, or fails where told."""
    @scenario("a toy", Param("n", 3, "rows", quick=1),
              Param("fail", "", "'error' or 'interrupt' after the first row"),
              Param("modes", ["a", "b"], "modes", choices=("a", "b", "c")), name="toy-test")
    def toy_fn(run: Run) -> None:
        for i in range(run.params["n"]):
            run.row(i=i, square=i * i, mode=run.params["modes"][0])
            run.stage(f"row {i}")
            if run.params["fail"] == "error":
                raise RuntimeError("boom")
            if run.params["fail"] == "value":
                raise ValueError("servers=3 must be a multiple of 2")
            if run.params["fail"] == "interrupt":
                raise KeyboardInterrupt
        run.save_json("raw.json", {"n": run.params["n"]})
        run.report.section("Results")
        run.report.table(run.rows)
        run.report.finding("squares", measured="4", ideal="4", published="4 (Euclid)",
                           why="arithmetic")
        run.summary = {"rows": len(run.rows)}

    return toy_fn


def test_param_parse_follows_the_default_type() -> None:
    assert Param("a", 1, "").parse("7") == 7
    assert Param("a", 1.0, "").parse("1e-5") == 1e-5
    assert Param("a", True, "").parse("no") is False
    assert Param("a", ["x"], "").parse("ecmp, planned") == ["ecmp", "planned"]
    assert Param("a", [1], "").parse("4,8") == [4, 8]
    with pytest.raises(ValueError, match="must be a whole number"):
        Param("a", 1, "").parse("x")
    with pytest.raises(ValueError, match="must be a finite number"):
        Param("a", 1.0, "").parse("nan")  # no rule declared: still finite
    with pytest.raises(ValueError, match=r"'ecmp' is listed twice"):
        Param("a", ["x"], "").parse("ecmp,ecmp")
    with pytest.raises(ValueError, match="empty item"):
        Param("a", [1], "").parse("4,,8")


def test_resolve_quick_overrides_and_bad_input(toy: Any) -> None:
    assert toy.resolve(False, {})["n"] == 3
    assert toy.resolve(True, {})["n"] == 1
    assert toy.resolve(True, {"n": 5})["n"] == 5
    with pytest.raises(ValueError, match="unknown parameter"):
        toy.resolve(False, {"nope": 1})
    with pytest.raises(ValueError, match="--modes: 'z' is not one of"):
        toy.resolve(False, {"modes": ["a", "z"]})


def test_a_finished_run_has_every_file(results: Any, toy: Any) -> None:
    res = toy(quick=False, log=lambda _m: None)
    assert os.path.basename(res.path).endswith("-toy-test")
    assert not res.path.endswith(".partial") and os.path.isdir(res.path)
    files = set(os.listdir(res.path))
    assert {"config.json", "summary.csv", "summary.json", "raw.json", "REPORT.md"} <= files
    config = json.loads(_read(res.path, "config.json"))
    assert config["params"]["n"] == 3 and config["quick"] is False
    assert config["versions"]["python"] and "elapsed_s" in config
    rows = list(csv.DictReader(_read(res.path, "summary.csv").splitlines()))
    assert [r["square"] for r in rows] == ["0", "1", "4"]
    report = _read(res.path, "REPORT.md")
    assert report.startswith("# toy-test: a toy")
    assert "| measured here | model's ideal | published |" in report
    assert "| 4 | 4 | 4 (Euclid) |" in report
    assert not [p for p in os.listdir(results) if p.endswith(".partial")]


@pytest.mark.parametrize("fail,exc,words", [("error", RuntimeError, "stopped by an error"),
                                            ("interrupt", KeyboardInterrupt,
                                             "interrupted by the user")])
def test_a_stopped_run_keeps_a_marked_partial_folder(results: Any, toy: Any, fail: str,
                                                     exc: type, words: str) -> None:
    with pytest.raises(exc):
        toy(fail=fail, log=lambda _m: None)
    (partial,) = [p for p in os.listdir(results)]
    assert partial.endswith("-toy-test.partial")
    marker = _read(results, partial, "INTERRUPTED.md")
    assert words in marker and "- row 0" in marker
    assert "REPORT.md" not in os.listdir(os.path.join(results, partial))
    # what was measured before the stop is kept
    assert "0" in _read(results, partial, "summary.csv")


def test_bad_parameters_create_nothing(results: Any, toy: Any) -> None:
    with pytest.raises(ValueError):
        toy(bogus=1)
    assert not os.path.exists(results)


def test_a_value_error_before_anything_ran_leaves_no_folder(results: Any, toy: Any) -> None:
    @scenario("rejects its parameters in the body", Param("n", 1, "n"), name="toy-early")
    def early(run: Run) -> None:
        raise ValueError("servers=3 must be a multiple of 2")

    with pytest.raises(ValueError, match="servers=3"):
        early(log=lambda _m: None)
    assert os.listdir(results) == []
    # after a stage has finished, the same error keeps a marked partial folder
    with pytest.raises(ValueError):
        toy(fail="value", log=lambda _m: None)
    (partial,) = os.listdir(results)
    assert partial.endswith(".partial")
    assert "stopped by an error" in _read(results, partial, "INTERRUPTED.md")


def test_tables() -> None:
    rows = [{"a": 1, "b": 0.123456}, {"a": 22, "c": None}]
    md = base.markdown_table(rows)
    assert md.splitlines()[0] == "| a | b | c |"
    assert "| 22 | - | - |" in md
    txt = base.format_table(rows)
    assert txt.splitlines()[2].split() == ["1", "0.123", "-"]


def test_registry_lists_the_issue_scenarios() -> None:
    names = set(SCENARIOS.names())
    assert {"demo", "lb-compare", "topology-compare"} <= names
    for sc in SCENARIOS.all().values():
        assert sc.description and sc.params
        for prm in sc.params:  # every --flag parses its own default's text
            text = ",".join(map(str, prm.default)) if isinstance(prm.default, list) \
                else str(prm.default)
            assert prm.parse(text) == prm.default, (sc.name, prm.name)


# --- fidelity guard -------------------------------------------------------------------------
def test_verdict_thresholds() -> None:
    cap = {"hop_pps": 1000}
    assert fidelity.verdict(cap, {"hop_pps": 400, "mbps": 1})["verdict"] == "ok"
    assert fidelity.verdict(cap, {"hop_pps": 700, "mbps": 1})["verdict"] == "warn"
    assert fidelity.verdict(cap, {"hop_pps": 1500, "mbps": 1})["verdict"] == "refused"
    assert fidelity.verdict(cap, {"hop_pps": 1500, "mbps": 1}, force=True)["verdict"] == "forced"
    assert fidelity.verdict(cap, {"hop_pps": 0, "mbps": 0})["verdict"] == "ok"


def test_offered_load_counts_packets_as_the_replay_cuts_them_at_the_run_pmtu() -> None:
    from traffic.kernels import FlowSpec
    from traffic.roce import message_wire_bytes, packets_for

    plan = build("astral3", servers=2, gpus=4, scale=1e-5)
    perm = common.permutation_flows(plan, 1_048_576, qps=1, seed=0)
    small, big = (fidelity.offered(plan, perm, pmtu=m) for m in (1024, 4096))
    assert small["mbps"] == big["mbps"]
    # the same bytes in 4 KiB frames are about a quarter of the packets
    assert big["hop_pps"] == pytest.approx(small["hop_pps"] * 1098 / 4170, rel=0.02)
    # a decode message of 7,408 bytes is 2 frames at 4096 (not 7408 / 4096 full ones)
    dec = [FlowSpec.make("s0g0", "s1g1", 7408 * 10, message_bytes=7408)]
    load = fidelity.offered(plan, dec, pmtu=4096)
    per_frame = message_wire_bytes(7408, 4096) / packets_for(7408, 4096)
    assert load["hop_pps"] == pytest.approx(4e6 / 8 / per_frame * 3, rel=0.01)


def test_a_run_pmtu_sets_the_model_framing_and_a_bad_one_fails_first(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from scenarios import base
    from traffic.kernels import FlowSpec

    monkeypatch.chdir(tmp_path)
    flows = [FlowSpec.make("a", "b", 64_000, message_bytes=64_000)]
    seen = {}

    @base.scenario("records the wire bytes it would model", name="toy-pmtu")
    def toy(run: base.Run) -> None:
        seen[run.pmtu] = common.wire_flows(flows)[0].bytes

    for pmtu in (1024, 4096):
        toy(pmtu=pmtu, output=str(tmp_path / f"out{pmtu}"), log=lambda _m: None)
    assert seen == {1024: 64_000 + 62 * 58 + 74, 4096: 64_000 + 15 * 58 + 74}  # FIRST + rest
    assert common.WIRE_PMTU.get() == 4096  # the run's value does not outlive it
    with pytest.raises(ValueError, match="pmtu must be one of"):
        toy(pmtu=3000, output=str(tmp_path / "bad"), log=lambda _m: None)
    assert not (tmp_path / "bad").exists()


def test_offered_load_counts_rates_and_hops() -> None:
    plan = build("astral3", servers=2, gpus=4, scale=1e-5)
    perm = common.permutation_flows(plan, 1_000_000, qps=1, seed=0)
    load = fidelity.offered(plan, perm)
    # 8 cross-leaf flows at their fluid max-min rates: fluid ECMP spreads a flow over the
    # lanes, so each runs at its 4 Mb/s NIC (an upper bound: a real QP keeps to one
    # 2 Mb/s lane), 3 switch hops each
    assert load["flows"] == 8
    assert load["mbps"] == pytest.approx(32.0, rel=0.01)
    frame = frame_len(OP_WRITE_MIDDLE, DEFAULT_PMTU)  # one full packet on the wire
    assert load["hop_pps"] == pytest.approx(32e6 / 8 / frame * 3, rel=0.01)
    # an incast is limited by the one receiver's NIC, whatever the senders offer
    hosts = [h.name for h in plan.hosts]
    from traffic.kernels import FlowSpec

    incast = [FlowSpec.make(h, hosts[0], 1_000_000) for h in hosts[1:]]
    assert fidelity.offered(plan, incast)["mbps"] == pytest.approx(4.0, rel=0.01)
    # flows that start later are not offered at the start
    late = [FlowSpec.make(a, b, 1_000_000, start=5.0) for a, b in
            common.cross_leaf_permutation(plan)[:4]]
    assert fidelity.offered(plan, perm[:4] + late)["flows"] == 4


def test_guard_refuses_without_force(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = build("astral3", servers=2, gpus=4, scale=1e-4)
    flows = common.permutation_flows(plan, 1_000_000, qps=2)
    monkeypatch.setattr(fidelity, "load_cached",
                        lambda _p=0, _d=1: {"hop_pps": 1000, "measured": "x"})

    class FakeLab:
        pass

    lab = FakeLab()
    lab.plan, lab.pmtu = plan, DEFAULT_PMTU  # type: ignore[attr-defined]
    with pytest.raises(fidelity.CapacityError, match="would measure the CPU"):
        fidelity.check(lab, flows, log=lambda _m: None)
    said: list[str] = []
    v = fidelity.check(lab, flows, force=True, log=said.append)
    assert v["verdict"] == "forced" and "WARNING" in said[0]


def test_calibration_ramp_retries_a_noisy_rate_once() -> None:
    tries: dict[float, int] = {}

    def fake(rate: float, noisy: float = 10.0, limit: float = 20.0) -> dict[str, Any]:
        tries[rate] = tries.get(rate, 0) + 1
        held = rate < limit and not (rate == noisy and tries[rate] == 1)
        return {"rate_mbps_per_sender": rate, "held": held, "hop_pps": int(rate * 100)}

    best, trials = fidelity.ramp(fake, refine=10.0)  # steps only
    assert best is not None and best["rate_mbps_per_sender"] == 14.0  # 20 fails twice
    assert tries[10.0] == 2 and tries[20.0] == fidelity.ATTEMPTS
    assert 28.0 not in tries  # the ramp stopped
    assert [t["attempt"] for t in trials if t["rate_mbps_per_sender"] == 10.0] == [1, 2]
    none, _ = fidelity.ramp(lambda r: {"held": False})
    assert none is None


def test_calibration_ramp_bisects_to_the_knee() -> None:
    """Past the steps, the ramp closes in on the highest rate held, to within REFINE."""
    for limit in (11.0, 17.3, 24.0, 37.0, 100.0):
        tried: list[float] = []

        def fake(rate: float, limit: float = limit, tried: list[float] = tried
                 ) -> dict[str, Any]:
            tried.append(rate)
            return {"rate_mbps_per_sender": rate, "held": rate <= limit}

        best, _ = fidelity.ramp(fake, attempts=1)
        assert best is not None
        got = best["rate_mbps_per_sender"]
        assert got <= limit and limit / got <= fidelity.REFINE + 0.01, (limit, tried)
        assert len(tried) <= len(fidelity.RAMP_MBPS) + 4  # a few more trials, not a sweep
    # the top step held: nothing above it to bisect towards
    capped, trials = fidelity.ramp(lambda r: {"rate_mbps_per_sender": r, "held": True})
    assert capped is not None and capped["rate_mbps_per_sender"] == fidelity.RAMP_MBPS[-1]
    assert len(trials) == len(fidelity.RAMP_MBPS)


def test_capacity_cache_is_keyed_to_the_machine(tmp_path: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASTRAL_LAB_CACHE", str(tmp_path))
    assert fidelity.load_cached() is None
    key = fidelity.machine_key()
    with open(fidelity.cache_path(), "w") as f:
        json.dump({"key": key, "hop_pps": 5}, f)
    assert fidelity.load_cached()["hop_pps"] == 5
    with open(fidelity.cache_path(), "w") as f:
        json.dump({"key": dict(key, cpus=999), "hop_pps": 5}, f)
    assert fidelity.load_cached() is None


# --- shared pieces --------------------------------------------------------------------------
@pytest.mark.parametrize("topology", ["astral3", "rail3", "fattree"])
def test_cross_leaf_permutation(topology: str) -> None:
    from controllers.paths import PathFinder

    plan = build(topology, servers=4, gpus=4)
    finder = PathFinder(plan)
    pairs = common.cross_leaf_permutation(plan, seed=3)
    assert sorted(a for a, _ in pairs) == sorted(b for _, b in pairs)
    assert all(finder.attach(a) != finder.attach(b) for a, b in pairs)
    assert pairs == common.cross_leaf_permutation(plan, seed=3)


def test_link_loads_from_counters() -> None:
    plan = build("astral3", servers=2, gpus=4, scale=1e-5)
    links = common.fabric_links(plan)
    before = {(ln.name, d): 0 for ln in links for d in ("up", "down")}
    after = dict(before)
    after[(links[0].name, "up")] = 500_000  # 4 Mb in 2 s on a 2 Mb/s lane: full
    rows = common.link_loads(plan, before, after, 2.0)
    busiest = max(rows, key=lambda r: r["utilisation"])
    assert busiest["link"] == links[0].name and busiest["utilisation"] == pytest.approx(1.0)
    assert busiest["from"] == links[0].a and busiest["tier"] == "leaf-spine"
    stats = common.load_stats(rows)
    assert stats["max"] == pytest.approx(1.0)
    assert stats["max_over_mean"] == pytest.approx(len(rows))
    spines = common.bytes_per_node(rows, "spine")
    assert sum(spines.values()) == 0  # the bytes went up, not down from a spine


# --- a machine too slow to calibrate, --force without a guard --------------------------------
class _FakeLab:
    """Just what ``Run.lab`` and ``Run.guard`` read of a running Lab."""

    def __init__(self, plan: WiringPlan, *_a: Any, **kw: Any) -> None:
        self.plan, self.lb, self.datapath = plan, kw.get("lb", "ecmp"), "fake"
        self.timings = {"total": 0.0}
        self.pmtu, self.mtu = DEFAULT_PMTU, None

    def __enter__(self) -> _FakeLab:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


SLOW = [{"rate_mbps_per_sender": 5.0, "held": False, "delivered_fraction": 0.62,
         "completion_s": 2.9, "ideal_s": 1.5, "attempt": 1},
        {"rate_mbps_per_sender": 5.0, "held": False, "delivered_fraction": 0.71,
         "completion_s": 3.4, "ideal_s": 1.5, "attempt": 2}]


@pytest.fixture
def slow_machine(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Calibration fails as on a machine that cannot hold the lowest rate; no fabric."""
    calls: list[str] = []

    def calibrate(log: Any = print, **_kw: Any) -> dict[str, Any]:
        calls.append("calibrate")
        raise fidelity.calibration_failed(SLOW, senders=8)

    monkeypatch.setattr(base, "calibrate", calibrate)
    monkeypatch.setattr(fidelity, "load_cached", lambda *_a: None)
    monkeypatch.setattr(base, "make_lab", _FakeLab)
    return calls


@pytest.fixture
def guarded() -> Any:
    """A scenario with two fabrics and one guarded traffic phase on each (as the demo)."""
    @scenario("two fabrics, one guarded phase each", Param("n", 1, "n"), name="toy-guarded")
    def toy_fn(run: Run) -> None:
        for topo in ("astral3", "rail3"):
            plan = build(topo, servers=2, gpus=4, scale=1e-5)
            with run.lab(plan) as lab:
                v = run.guard(lab, common.permutation_flows(plan, 1_000_000, qps=2), topo)
                # scenarios put the margin in rows and report text
                run.row(fabric=topo, measured=1.0, margin=f"{v['margin']:.2f}x",
                        thin=v["margin"] < 2)
                run.stage(f"{topo} done")

    return toy_fn


def test_calibration_failure_is_one_line_with_what_was_measured() -> None:
    exc = fidelity.calibration_failed(SLOW, senders=8)
    text = str(exc)
    assert "\n" not in text
    assert text.startswith("this machine could not hold even 5 Mb/s per sender")
    assert "8 cross-rail senders; best of 2 tries: 71.0% of the bytes, in 3.40 s for " \
           "1.5 s of traffic" in text
    assert "pass --force to run without the guard" in text
    assert isinstance(exc, fidelity.CapacityError) and exc.trials == SLOW
    assert exc.measured in text and "--force" not in exc.measured


def test_calibrate_raises_the_one_line_error_and_caches_nothing(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASTRAL_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(fidelity, "Lab", _FakeLab)
    slow = iter(SLOW * fidelity.ATTEMPTS)
    monkeypatch.setattr(fidelity, "paced_trial", lambda *_a, **_k: dict(next(slow)))
    with pytest.raises(fidelity.CalibrationError, match="could not hold even 5 Mb/s") as info:
        fidelity.calibrate(log=lambda _m: None)
    assert len(info.value.trials) == fidelity.ATTEMPTS
    assert not os.path.exists(fidelity.cache_path())  # a busy moment must not stick


def test_failed_calibration_stops_the_run_and_keeps_nothing(results: Any, guarded: Any,
                                                            slow_machine: list[str]) -> None:
    with pytest.raises(fidelity.CalibrationError, match="--force"):
        guarded(log=lambda _m: None)
    assert not os.path.exists(results) or os.listdir(results) == []


def test_forced_run_without_calibration_goes_ahead_unguarded(results: Any, guarded: Any,
                                                             slow_machine: list[str]) -> None:
    said: list[str] = []
    res = guarded(force=True, log=said.append)
    assert not res.path.endswith(".partial") and [r["fabric"] for r in res.rows] == \
        ["astral3", "rail3"]
    assert slow_machine == ["calibrate"]  # not tried again for the second fabric
    config = json.loads(_read(res.path, "config.json"))
    assert config["fidelity_guard"]["on"] is False
    assert "could not hold even 5 Mb/s" in config["fidelity_guard"]["reason"]
    assert [v["verdict"] for v in config["fidelity"]] == ["unguarded", "unguarded"]
    assert all(v["margin"] is None and v["offered_hop_pps"] > 0 for v in config["fidelity"])
    assert [(r["margin"], r["thin"]) for r in res.rows] == [("nanx", False)] * 2
    report = _read(res.path, "REPORT.md")
    assert "**Fidelity guard OFF** (--force): this machine could not hold even 5 Mb/s" in report
    assert "None of the 2 traffic phase(s) was checked" in report
    assert sum("fidelity guard off" in m for m in said) >= 1
    assert any(m.startswith("WARNING: this run had the fidelity guard off") for m in said)


def test_refused_guard_keeps_the_partial_folder(results: Any, guarded: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "calibrate", lambda *_a, **_k: {"hop_pps": 10})
    monkeypatch.setattr(fidelity, "load_cached", lambda *_a: {"hop_pps": 10, "measured": "x"})
    monkeypatch.setattr(base, "make_lab", _FakeLab)
    with pytest.raises(fidelity.CapacityError, match="would measure the CPU") as info:
        guarded(log=lambda _m: None)
    (partial,) = os.listdir(results)
    assert partial.endswith("-toy-guarded.partial")
    assert "stopped by an error: CapacityError" in _read(results, partial, "INTERRUPTED.md")
    assert info.value.__notes__ == [f"partial results kept in {results / partial}/ "
                                    "(INTERRUPTED.md: what had finished)"]


def test_a_calibration_trial_that_times_out_is_not_held(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A machine so slow that the senders overrun the replay's timeout gets the one-line
    calibration error, not the replay's TimeoutError."""
    from testbed.topologies import build

    plan = build("astral3", servers=2, gpus=4, scale=1e-5)
    pairs = [("s0g0", "s1g1"), ("s0g1", "s1g0")]

    def overrun(*_a: Any, **_k: Any) -> Any:
        raise TimeoutError("senders still running after 36 s")

    monkeypatch.setattr(fidelity, "replay", overrun)
    trial = fidelity.paced_trial(None, plan, pairs, 5.0, lambda _m: None)
    assert trial["held"] is False and trial["delivered_fraction"] == 0.0
    assert "36 s" in trial["timed_out"]
    text = str(fidelity.calibration_failed([trial, dict(trial)], senders=2))
    assert "\n" not in text and "timed out: senders still running after 36 s" in text
