"""The datapath benchmark's pure parts (no root, no Mininet): which variants a command line
asks for, when a port counts as shaped, the verdict, and the shape of a variant's row."""

from __future__ import annotations

import json

import pytest

from benchmarks import capacity, datapath


def test_variants_in_order_and_system_first_when_missing() -> None:
    assert [v.name for v in datapath.parse_variants("afxdp,afxdp-nonpmd")] == [
        "system", "afxdp", "afxdp-nonpmd"]
    assert [v.name for v in datapath.parse_variants(" system+pmd , system ")] == [
        "system+pmd", "system"]


def test_every_variant_is_known_and_configured_as_documented() -> None:
    v = {x.name: x for x in datapath.parse_variants(",".join(datapath.VARIANTS))}
    assert v["system"].port_type is None and v["system"].pmd_mask is None
    assert v["system+pmd"].port_type is None and v["system+pmd"].pmd_mask
    assert v["afxdp-nonpmd"].port_type == "afxdp-nonpmd" and v["afxdp-nonpmd"].pmd_mask is None
    assert v["afxdp"].port_type == "afxdp" and v["afxdp"].pmd_mask


@pytest.mark.parametrize("text", ["", ",", "afxdp,afxdp", "dpdk", "system,System"])
def test_bad_variant_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        datapath.parse_variants(text)


def test_unimplemented_variant_says_so() -> None:
    with pytest.raises(ValueError, match="not implemented"):
        datapath.parse_variants("two-vswitchd")


def test_pmtus() -> None:
    assert datapath.parse_pmtus("4096,2048") == [4096, 2048]
    for bad in ("", "4096,4096", "1500", "8192", "x"):
        with pytest.raises(ValueError):
            datapath.parse_pmtus(bad)


@pytest.mark.parametrize(("delivered", "configured", "shaped"), [
    (19.8, 20.0, True),      # at the class rate
    (22.0, 20.0, True),      # the tolerance's edge
    (22.5, 20.0, False),     # over it
    (54.0, 20.0, False),     # the qdisc bypassed
    (0.0, 20.0, False),      # nothing came out: not a shaped link either
    (9.0, 20.0, False),
    (None, 20.0, False),
    (10.0, 0.0, False),
])
def test_keeps_shaping(delivered: float | None, configured: float, shaped: bool) -> None:
    assert datapath.keeps_shaping(delivered, configured) is shaped


def test_ceiling_over() -> None:
    assert datapath.ceiling_over(120_000, 60_000) == 2.0
    assert datapath.ceiling_over(None, 60_000) is None
    assert datapath.ceiling_over(120_000, None) is None
    assert datapath.ceiling_over(0, 60_000) is None


def _ramp(hop_pps: int | None, capped: bool = False) -> dict[str, object]:
    trial = {"rate_mbps_per_sender": 80.0, "held": True, "hop_pps": hop_pps,
             "delivered_mbps": 600.0, "cpu_s": {"switch": 1.5}}
    return {"best": trial if hop_pps else None, "trials": [trial, trial], "capped": capped}


def _shaping(delivered: float | None) -> dict[str, object]:
    return {"port": "lf0r1-eth2", "configured_mbps": 20.0, "delivered_mbps": delivered}


def _rows(**variants: tuple[int | None, float | None, str | None]) -> dict[str, dict]:
    """Rows of three repeats each: hop_pps -1%, +-0, +1% around the figure given."""
    base = variants["system"][0]
    return {name.replace("_", "-"): datapath.summary(
        name.replace("_", "-"), [_ramp(int(pps * f) if pps else None) for f in (.99, 1, 1.01)],
        [_shaping(mbps)] * 3, base, err)
        for name, (pps, mbps, err) in variants.items()}


def test_summary_row_shape_and_json() -> None:
    row = datapath.summary("afxdp", [_ramp(150_000, capped=True), _ramp(90_000), _ramp(None)],
                           [_shaping(54.0)] * 3, 60_000,
                           extra={"config": {"port_type": "afxdp"}})
    # median of the repeats, one of which held nothing (counted as 0)
    assert row["hop_pps"] == 90_000 and row["ceiling_over_system"] == 1.5
    assert row["hop_pps_per_repeat"] == [150_000, 90_000, 0]
    assert row["max_hop_pps"] == 90_000
    assert row["capped"] is True and row["keeps_shaping"] is False
    assert row["switch_cpu_s"] == {"at_best": 1.5, "ramp": 3.0,
                                   "ramp_per_repeat": [3.0, 3.0, 3.0]}
    assert row["config"] == {"port_type": "afxdp"} and len(row["trials"]) == 3
    assert json.loads(json.dumps(row)) == row
    for key in ("variant", "error", "hop_pps", "delivered_mbps", "ceiling_over_system",
                "switch_cpu_s", "shaping", "keeps_shaping", "trials"):
        assert key in row


def test_summary_of_a_variant_that_did_not_take() -> None:
    row = datapath.summary("afxdp", [None], [None], 60_000, error="could not open")
    assert row["error"] == "could not open" and row["hop_pps"] is None
    assert row["keeps_shaping"] is False and row["ceiling_over_system"] is None
    assert row["switch_cpu_s"]["ramp"] == 0


def test_verdict_names_the_raise_that_keeps_shaping() -> None:
    rows = _rows(system=(60_000, 19.8, None), system_pmd=(61_000, 19.9, None),
                 afxdp_nonpmd=(100_000, 20.1, None))
    v = datapath.verdict(rows)
    assert v.startswith("afxdp-nonpmd raises the ceiling 1.67x")
    assert "system-pmd" not in v


def test_verdict_when_the_raise_costs_the_shaping() -> None:
    rows = _rows(system=(60_000, 19.8, None), system_pmd=(62_000, 19.8, None),
                 afxdp_nonpmd=(150_000, 54.0, None), afxdp=(190_000, 60.0, None))
    v = datapath.verdict(rows)
    assert v.startswith("no variant that keeps shaping raises the ceiling")
    assert "afxdp 3.17x, afxdp-nonpmd 2.5x" in v


def test_shaping_must_hold_in_every_repeat() -> None:
    row = datapath.summary("system", [_ramp(60_000)] * 3,
                           [_shaping(19.9), _shaping(40.0), _shaping(20.1)], 60_000)
    assert row["keeps_shaping"] is False
    assert row["shaping_delivered_mbps"] == [19.9, 40.0, 20.1]


def test_a_raise_within_the_spread_of_repeats_does_not_count() -> None:
    rows = {"system": datapath.summary("system", [_ramp(40_000), _ramp(60_000), _ramp(60_000)],
                                       [_shaping(19.9)] * 3, None),
            "system+pmd": datapath.summary("system+pmd", [_ramp(60_000), _ramp(85_000),
                                                          _ramp(85_000)],
                                           [_shaping(19.9)] * 3, 60_000)}
    v = datapath.verdict(rows)
    assert rows["system+pmd"]["ceiling_over_system"] == 1.42
    assert v.startswith("no variant that keeps shaping raises")
    assert "within the repeats' spread (not counted): system+pmd 1.42x" in v


def test_verdict_reports_failures_and_a_missing_baseline() -> None:
    rows = _rows(system=(60_000, 19.8, None), afxdp=(None, None, "type=afxdp error"))
    assert "failed to configure: afxdp" in datapath.verdict(rows)
    assert datapath.verdict(_rows(system=(None, 19.8, None))).startswith("no verdict")
    assert "even system" in datapath.verdict(_rows(system=(60_000, 80.0, None)))


def test_forwarding_cpu_counts_a_single_threaded_process() -> None:
    """The settle check reads per-thread CPU; for a process without PMD threads it is the
    process's own total. (A child of one thread: this test process's total also holds the
    CPU of threads that have ended, which no task directory lists any more.)"""
    import subprocess
    import sys

    # The child says when its busy part is over, so both readings see the same settled total
    # however slow this machine is (a deadline here raced on a busy or emulated one).
    child = subprocess.Popen([sys.executable, "-c", "sum(i * i for i in range(5_000_000))\n"
                              "print('settled', flush=True)\nimport time; time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "settled\n"
        total, threads = capacity.cpu_of(child.pid), capacity._forwarding_cpu([child.pid])
    finally:
        child.kill()
        child.wait()
    assert total >= 0.1 and abs(total - threads) < 0.02
    assert capacity._forwarding_cpu([2**22 + 12345]) == 0.0  # gone: nothing, no error


def test_ovs_statistics_map_and_delta() -> None:
    text = ('{rx_bytes=424661276, rx_packets=138598, xsk_queue_0_rx_dropped=228, '
            'driver_name=veth, firmware_version=""}')
    m = datapath.parse_ovs_map(text)
    assert m == {"rx_bytes": 424661276, "rx_packets": 138598, "xsk_queue_0_rx_dropped": 228}
    assert datapath.parse_ovs_map("{}") == {} and datapath.parse_ovs_map("") == {}
    after = {"rx_packets": 138600, "xsk_queue_0_rx_dropped": 300, "tx_packets": 4}
    assert datapath.counter_delta(m, after) == {"rx_packets": 2, "xsk_queue_0_rx_dropped": 72}


def test_capacity_ceiling_is_never_below_a_plane_held_beside_it() -> None:
    def run(hop_pps: int | None) -> dict[str, object]:
        return {"best": {"hop_pps": hop_pps} if hop_pps else None, "trials": [],
                "capped": False}

    runs = {"ceiling-trafgen/4096": run(60_999), "ceiling-pktio/4096": run(55_000),
            "new/4096": run(81_608)}
    c = capacity.ceiling_of(runs, 4096)
    assert c["best"]["hop_pps"] == 81_608 and c["source"] == "new"
    runs["ceiling-pktio/4096"] = run(90_000)
    assert capacity.ceiling_of(runs, 4096)["source"] == "pktio"
    runs = {"ceiling-trafgen/4096": run(None), "ceiling-pktio/4096": run(None),
            "new/4096": run(None)}
    assert capacity.ceiling_of(runs, 4096)["best"] is None
