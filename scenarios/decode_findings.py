"""decode-latency's findings in words: each reason chosen from the rows' own evidence.

Apart from ``scenarios.experiments.decode_latency`` (the runs and the report), so each reads
on its own; every function here takes numbers and picks and fills snippets of
``scenarios/templates/decode_latency.md``, and is tested branch by branch.
"""

from __future__ import annotations

import math
from typing import Any

from scenarios.common import in_band
from scenarios.findings import margin_text, pace_caveats
from scenarios.prose import Prose

#: the words, with the rest of decode-latency's report: scenarios/templates/decode_latency.md
WORDS = Prose("decode_latency")

#: tokens per GPU in DeepEP's low-latency benchmark
DEEPEP_TOKENS = 128


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}"


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b and a == a and b == b else None


def gap_line(r: dict[str, Any], fill: float, told: set[str] | None = None) -> str:
    """Why one row's ratio is outside 0.7-1.3, from the row's own evidence ('' inside).
    ``told`` collects the mechanisms already explained in full by earlier rows, so a
    finding explains each once."""
    told = set() if told is None else told
    bad = [q for q in ("p50", "p99") if not in_band(r[f"ratio_{q}"])]
    if not bad:
        return ""
    q = bad[-1]
    ratio = r[f"ratio_{q}"]
    m = r["measured"][f"{q}_us"]["median"] / 1e3
    i = r[f"ideal_{q}_ms"]
    draws = r["per_draw"]
    skew = max(x["start_skew_s"] for x in draws)
    facts = WORDS("gap_facts", skew_ms=1e3 * skew, lost=r["lost"],
                  incomplete=r["incomplete"])
    caveats = pace_caveats(margin=r.get("margin"), plane=draws[-1].get("plane"),
                           lost=r["lost"], start_skew_s=skew,
                           span_s=r["completion_ms"] / 1e3)
    done = _div(r["completion_ms"], r["ideal_completion_ms"])
    if caveats:
        why = WORDS("gap_caveats", caveats="; ".join(caveats))
    elif r["case"] == "background" and ratio and ratio > 1.3:
        why = WORDS("gap_fifo", above=m - i, one_ms=1e3 * fill, two_ms=3e3 * fill)
    elif r["case"] == "isolated" and ratio and ratio < 0.7:
        why = WORDS("gap_priority")
    elif ratio and ratio > 1.3 and in_band(done):
        why = WORDS("gap_wait", above=m - i, done=_fmt(done))
        if "no-cc" in told:
            why += WORDS("gap_wait_told")
        else:
            told.add("no-cc")
            why += WORDS("gap_no_cc")
        why += WORDS("gap_wait_tail", margin=margin_text(r.get("margin")), facts=facts)
    elif ratio and ratio > 1.3:
        why = WORDS("gap_late", above=m - i, done=_fmt(done),
                    margin=margin_text(r.get("margin")), facts=facts)
    else:
        why = WORDS("gap_below", facts=facts)
    return WORDS("gap_line", ep=r["ep"], case=r["case"], phase=r["phase"], q=q,
                 ratio=_fmt(ratio), why=why)


def growth_why(remote: dict[int, float], grow: dict[str, tuple[float, float]], gps: int,
               tokens: int, deepep: dict[str, float]) -> str:
    """Where decode latency's growth with EP size comes from, as far as this run shows:
    ``remote`` is the share of token copies on the fabric per EP size, ``grow`` per phase
    the lab's completion growth and the model's p99 growth from the smallest EP to the
    largest, ``deepep`` per phase DeepEP's growth from EP8 to EP256."""
    eps = sorted(remote)
    lo, hi = eps[0], eps[-1]
    share = remote[hi] / remote[lo]
    (g_d, m_d), (g_c, m_c) = grow["dispatch"], grow["combine"]
    why = WORDS("growth_share", gps=gps, share=share, lo=lo, hi=hi, shares=", ".join(
        f"EP{e}: {100 * s:.0f}%" for e, s in remote.items()))
    why += (WORDS("growth_more", g_d=g_d) if g_d > share * 1.05
            else WORDS("growth_all", g_d=g_d)) + " "
    why += WORDS("growth_deepep", gps=gps, lo=lo, remote_pct=100 * remote[lo])
    why += WORDS("growth_stops", hi=hi) + " " if hi < 64 else "; "
    why += WORDS("growth_compare", tokens=tokens, deepep_tokens=DEEPEP_TOKENS) + " "
    why += WORDS("growth_alike" if abs(g_d / g_c - 1) <= 0.1 else "growth_differ",
                 g_d=g_d, g_c=g_c)
    why += WORDS("growth_tail", m_d=m_d, m_c=m_c, deepep_c=deepep["combine"],
                 deepep_d=deepep["dispatch"])
    return why


def isolation_why(fill: float, moved: list[dict[str, float]], counters: list[str]) -> str:
    """The mechanism of FIFO and strict priority, and what this run's numbers show of it:
    ``moved`` holds, per EP and phase, background/alone p50 and p99 and isolated/alone p99."""
    tail = max((m["p99"] for m in moved if m["p99"] == m["p99"]), default=math.nan)
    mid = max((m["p50"] for m in moved if m["p50"] == m["p50"]), default=math.nan)
    worst = max((m["isolated"] for m in moved if m["isolated"] == m["isolated"]),
                default=math.nan)
    why = WORDS("isolation_fifo", fill=fill) + " "
    if tail > 1.3 and mid < 1 + (tail - 1) / 2:
        why += WORDS("isolation_split", tail=tail, mid=mid) + " "
    elif tail > 1.3:
        why += WORDS("isolation_both", tail=tail, mid=mid) + " "
    else:
        why += WORDS("isolation_calm", tail=tail) + " "
    why += WORDS("isolation_priority")
    why += (WORDS("isolation_back", worst=worst) if worst <= 1.2
            else WORDS("isolation_not_back", worst=_fmt(worst))) + " "
    return why + WORDS("isolation_size") + " " + (
        WORDS("isolation_counters", counters="; ".join(counters)) if counters else "")
