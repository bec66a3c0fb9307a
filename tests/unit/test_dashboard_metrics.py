"""``/metrics`` (ops.metrics): promtool accepts it, and it says what the state says."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ops.dashboard import DashboardState, layout
from ops.metrics import escape, exposition
from tests.unit.dash_fakes import demo_plan

LINE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def synthetic_state() -> tuple[dict, dict]:
    plan = demo_plan()
    s = DashboardState(plan)
    for t in (100.0, 101.0):
        s.update(t, {("s0g0~lf0r0#0", "mbps_ab"): 20.0, ("s0g0~lf0r0#0", "up"): 1.0,
                     ("lf0r0~spine1#0", "mbps_ab"): 10.0, ("lf0r0~spine1#0", "up"): 0.0,
                     ("lf0r0~spine1#0", "ctl_up"): 1.0, ("lf0r0~spine1#0", "backlog_ab"): 1500.0,
                     ("lf0r0~spine1#0", "qdrops_ab"): 2.0, ("lf0r0", "port_drops"): 1.0,
                     ("lf0r0", "bucket4_mbps"): 8.0, ("lf0r1~spine0#0", "mbps_ba"): 4.0,
                     ("controller", "up"): 1.0, ("controller", "converged"): 1.0,
                     ("controller", "down_ports"): 1.0})
    s.lb = {"mode": "planned", "modes": ["ecmp", "planned", "adaptive"]}
    s.set_alerts([
        {"detector": "link-down", "component": "lf0r0~spine1#0", "severity": "critical",
         "summary": 'link "lf0r0~spine1#0" is down\\now', "first_seen": 100.0, "cleared": None},
        {"detector": "degraded", "component": "s0g0~lf0r0#0", "severity": "warning",
         "summary": "was slow", "first_seen": 90.0, "cleared": 99.0},
    ])
    return s.snapshot(), layout(plan)


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """A strict reading of the text format: every sample's family has HELP and TYPE first."""
    helped, typed = set(), {}
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            typed[name] = kind
        else:
            m = LINE.match(line)
            assert m, f"not a sample line: {line!r}"
            name = m["name"]
            assert name in helped and name in typed, f"{name}: no HELP/TYPE before it"
            labels = {k: v for k, v in LABEL.findall(m["labels"] or "")}
            out.setdefault(name, []).append((labels, float(m["value"])))
            if typed[name] == "counter":
                assert name.endswith("_total")
    return out


def test_promtool_accepts_the_exposition(tmp_path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus; scripts/setup.sh "
                    "installs it)")
    state, lay = synthetic_state()
    proc = subprocess.run([promtool, "check", "metrics"], input=exposition(state, lay),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_samples_carry_the_states_values_and_the_links_labels() -> None:
    state, lay = synthetic_state()
    m = parse(exposition(state, lay))

    def one(name: str, **labels: str) -> float:
        hits = [v for lbl, v in m[name] if all(lbl.get(k) == x for k, x in labels.items())]
        assert len(hits) == 1, (name, labels, hits)
        return hits[0]

    assert one("astral_link_utilisation_ratio", link="s0g0~lf0r0#0", direction="up",
               a="s0g0", b="lf0r0", kind="nic") == pytest.approx(0.5)
    assert one("astral_link_utilisation_ratio", link="lf0r1~spine0#0",
               direction="down") == pytest.approx(0.2)
    assert one("astral_link_up", link="lf0r0~spine1#0") == 0
    assert one("astral_link_controller_up", link="lf0r0~spine1#0") == 1
    assert one("astral_link_capacity_bytes_per_second", link="s0g0~lf0r0#0") == 5_000_000
    assert one("astral_link_transmit_bytes_total", link="s0g0~lf0r0#0",
               direction="up") == 2_500_000
    assert one("astral_link_queue_backlog_bytes", link="lf0r0~spine1#0",
               direction="up") == 1500
    assert one("astral_link_queue_drops_total", link="lf0r0~spine1#0", direction="up") == 4
    assert one("astral_switch_port_drops_total", switch="lf0r0") == 2
    assert one("astral_group_bucket_bytes_total", switch="lf0r0", port="4") == 1_000_000
    assert one("astral_spine_forwarded_bytes_total", spine="spine0") == 500_000
    assert one("astral_alerts", severity="critical") == 1
    assert one("astral_alerts", severity="warning") == 0  # the cleared one is not active
    assert one("astral_alert_active", detector="link-down") == 1
    assert one("astral_controller_up") == 1 and one("astral_controller_down_ports") == 1
    assert one("astral_lb_mode", mode="planned") == 1
    assert one("astral_lb_mode", mode="ecmp") == 0
    assert one("astral_telemetry_polls_total") == 2
    # every link of the plan has its capacity series: one per link, none invented
    assert len(m["astral_link_capacity_bytes_per_second"]) == len(lay["links"])
    # links never sampled have no utilisation series rather than a made-up zero
    assert not [lbl for lbl, _ in m["astral_link_utilisation_ratio"]
                if lbl["link"] == "s1g3~lf0r3#0"]


def test_an_evaluations_injected_faults_are_one_series_each() -> None:
    state, lay = synthetic_state()
    assert "astral_fault_injected" not in parse(exposition(state, lay))  # nothing injected
    state["progress"] = {"scenario": "ops-eval", "stage": "warm-up", "faults": [
        {"kind": "gray-loss", "component": "lf0r0~spine1#0", "since": 99.0},
        {"kind": "hot-receiver", "component": "s1g1", "since": 100.0}]}
    m = parse(exposition(state, lay))
    assert sorted((lbl["kind"], lbl["component"], v) for lbl, v in m["astral_fault_injected"]) \
        == [("gray-loss", "lf0r0~spine1#0", 1), ("hot-receiver", "s1g1", 1)]


def test_label_values_are_escaped() -> None:
    assert escape('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_the_grafana_dashboard_uses_only_metrics_the_exposition_has() -> None:
    """docs/grafana-astral-lab.json must not drift from ops.metrics' names."""
    import json
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "grafana-astral-lab.json"
    dash = json.loads(path.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {n for e in exprs for n in re.findall(r"\bastral_[a-z_]+", e)}
    state, lay = synthetic_state()
    have = set(parse(exposition(state, lay)))
    assert used and used <= have, used - have
