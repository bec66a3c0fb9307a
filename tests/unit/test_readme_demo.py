"""The README's demo table and the prose beside it tell one story.

The figures the README (and the walkthrough's caption of the same run) quote about the
demo are computed from its table: ratios to the bound, the ECMP spread, hop counts, the
decode ratio range, real-rate times. This test parses the table, recomputes each quoted
figure and checks it within the rounding the text uses, so a new demo run pasted into
the table without its prose (or prose edited without the table) fails here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
NUM = r"([\d.]+)"


def _prose(text: str) -> str:
    """Markdown prose with its line breaks folded, so a phrase may span lines."""
    return re.sub(r"\s+", " ", text)


def demo_table(readme: str) -> dict[tuple[str, str], dict[str, str]]:
    """The README's demo table, one dict per row keyed by (fabric, what)."""
    start = readme.index("What `sudo make demo` does once set up")
    body = readme.index("```\n", start) + 4
    lines = readme[body:readme.index("\n\n", body)].splitlines()
    names = lines[0].split()
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    assert len(names) == len(spans), "header and rule of the demo table disagree"
    rows = {}
    for line in lines[2:]:
        cells = dict(zip(names, (line[a:b].strip() for a, b in spans), strict=True))
        rows[(cells["fabric"], cells["what"])] = cells
    return rows


def dist(cell: str) -> dict[str, Any]:
    """'7.60 s [7.60-10.13], N=7' or '2.56 s' as median, p25, p75, N."""
    m = re.fullmatch(r"([\d.]+) s(?: \[([\d.]+)-([\d.]+)\], N=(\d+))?", cell)
    assert m, f"not a completion cell: {cell!r}"
    med = float(m[1])
    return {"median": med, "p25": float(m[2] or med), "p75": float(m[3] or med),
            "n": int(m[4] or 1)}


def seconds(cell: str) -> float:
    return float(cell.removesuffix(" s"))


def pair(cell: str, unit: str) -> tuple[float, float]:
    a, b = cell.removesuffix(unit).split("/")
    return float(a), float(b)


def find(pattern: str, text: str) -> tuple[float, ...]:
    m = re.search(pattern, text)
    assert m, f"the prose no longer says {pattern!r}"
    return tuple(float(g) for g in m.groups())


def at(value: float, shown: float, digits: int) -> None:
    """``shown`` is ``value`` rounded to ``digits`` places (half a unit of slack)."""
    assert abs(value - shown) <= 0.5 * 10 ** -digits + 1e-9, (value, shown)


@pytest.fixture(scope="module")
def readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def table(readme: str) -> dict[tuple[str, str], dict[str, str]]:
    return demo_table(readme)


def test_the_table_is_consistent_in_itself(readme: str,
                                           table: dict[tuple[str, str], dict[str, str]]
                                           ) -> None:
    for fabric in ("astral3", "rail3"):
        for mode in ("ecmp", "planned"):
            r = table[(fabric, f"permutation, {mode}")]
            m, i = dist(r["measured"]), dist(r["ideal"])
            at(m["median"] / i["median"], float(r["ratio"]), 2)
            assert m["p25"] <= m["median"] <= m["p75"]
    # the rail3 rows' hop counts are astral3's and rail3's, the same in both rows
    notes = {re.match(r"([\d.]+) switch hops vs ([\d.]+) on astral3", r["note"]).groups()
             for k, r in table.items() if k[0] == "rail3"}
    assert len(notes) == 1
    # decode: the real-rate times are the emulated ones x the scale the prose states
    (scale,) = find(r"Decode latencies are emulated milliseconds at scale ([\de.-]+)",
                    _prose(readme))
    for phase in ("dispatch", "combine"):
        r = table[("astral3", f"{phase} latency p50/p99")]
        ms = pair(r["measured"], " ms")
        us = re.search(r"= ([\d.]+)/([\d.]+) us at real rates", r["note"]).groups()
        for emulated, real in zip(ms, us, strict=True):
            at(emulated * 1e3 * scale, float(real), 2)


def test_the_readme_prose_quotes_the_table(readme: str,
                                          table: dict[tuple[str, str], dict[str, str]]
                                          ) -> None:
    text = _prose(readme)
    e = dist(table[("astral3", "permutation, ecmp")]["measured"])
    r3 = dist(table[("rail3", "permutation, ecmp")]["measured"])
    bound = seconds(table[("astral3", "permutation, ecmp")]["bound"])
    assert {seconds(r["bound"]) for k, r in table.items() if "permutation" in k[1]} == {bound}
    busiest = {k: float(re.search(r"busiest link (?:carried )?([\d.]+)x its share",
                                  r["note"])[1])
               for k, r in table.items() if "permutation" in k[1]}

    (share,) = find(rf"the busiest link carried {NUM}x its share in the median draw", text)
    assert share == busiest[("astral3", "permutation, ecmp")]
    x, med, b = find(rf"the median draw took {NUM}x the bound \({NUM} s against {NUM} s\)",
                     text)
    assert (med, b) == (e["median"], bound)
    at(med / b, x, 1)
    x, p75 = find(rf"a quarter of them {NUM}x \({NUM} s\)", text)
    assert p75 == e["p75"]
    at(p75 / bound, x, 1)
    x, med, share = find(rf"there: {NUM}x the bound \({NUM} s\), its busiest link at {NUM}x "
                         "its share", text)
    assert med == r3["median"] and share == busiest[("rail3", "permutation, ecmp")]
    at(med / bound, x, 1)

    pct, a, r = find(rf"both come within (\d+)% of the bound \({NUM} s and {NUM} s\)", text)
    assert a == seconds(table[("astral3", "permutation, planned")]["measured"])
    assert r == seconds(table[("rail3", "permutation, planned")]["measured"])
    assert pct == math.ceil(100 * max(abs(a / bound - 1), abs(r / bound - 1)))

    hops = find(rf"astral3 with {NUM} switch hops instead of {NUM}", text)
    note = table[("rail3", "permutation, ecmp")]["note"]
    rail3_hops, astral3_hops = find(rf"{NUM} switch hops vs {NUM} on astral3", note)
    assert hops == (astral3_hops, rail3_hops)

    lo, hi = find(rf"The emulated messages take {NUM}-{NUM}x the model's", text)
    ratios = [x for k, r in table.items() if "latency" in k[1]
              for x in pair(r["ratio"], "")]
    at(min(ratios), lo, 1)
    at(max(ratios), hi, 1)
    (draws,) = find(r"for ECMP over (\d+) hash draws", text)
    assert draws == dist(table[("astral3", "permutation, ecmp")]["ideal"])["n"]


def test_the_walkthrough_caption_quotes_the_same_run(table: dict[tuple[str, str],
                                                                 dict[str, str]]) -> None:
    text = _prose((REPO / "docs" / "walkthrough.md").read_text(encoding="utf-8"))
    e = table[("astral3", "permutation, ecmp")]
    bound = seconds(e["bound"])
    model, each = find(r"the flow model over (\d+) hash draws, dots the emulated draws "
                       r"\((\d+) each\)", text)
    assert model == dist(e["ideal"])["n"] and each == dist(e["measured"])["n"]
    share, x = find(rf"busiest link {NUM}x its share\), so ECMP took {NUM}x the bound", text)
    assert f"busiest link carried {share}x its share" in e["note"]
    at(dist(e["measured"])["median"] / bound, x, 1)
    (x,) = find(rf"absorbed more of the collisions \({NUM}x the bound\)", text)
    at(dist(table[("rail3", "permutation, ecmp")]["measured"])["median"] / bound, x, 1)
    (pct,) = find(r"planned placement came within (\d+)% of the bound on both", text)
    off = max(abs(seconds(table[(f, "permutation, planned")]["measured"]) / bound - 1)
              for f in ("astral3", "rail3"))
    assert pct == math.ceil(100 * off)
