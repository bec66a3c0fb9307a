"""decode-latency's findings in words: each reason chosen from the rows' own evidence.

Apart from ``scenarios.decode_latency`` (the runs and the report), so each reads on its own;
every function here takes numbers and returns text, and is tested branch by branch.
"""

from __future__ import annotations

import math
from typing import Any

from scenarios.common import in_band
from scenarios.findings import margin_text, pace_caveats

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
    facts = (f"start skew up to {1e3 * skew:.1f} ms, {r['lost']} packets lost, "
             f"{r['incomplete']} messages incomplete")
    caveats = pace_caveats(margin=r.get("margin"), plane=draws[-1].get("plane"),
                           lost=r["lost"], start_skew_s=skew,
                           span_s=r["completion_ms"] / 1e3)
    done = _div(r["completion_ms"], r["ideal_completion_ms"])
    if caveats:
        why = "the run itself may be the cause: " + "; ".join(caveats)
    elif r["case"] == "background" and ratio and ratio > 1.3:
        why = (f"FIFO queueing the fair-sharing model does not have: {m - i:.0f} ms more "
               "than the model, against the standing bulk queue on the messages' paths: "
               f"~{1e3 * fill:.0f} ms behind one bulk flow on a lane, ~{3e3 * fill:.0f} ms "
               "behind two (fill_s)")
    elif r["case"] == "isolated" and ratio and ratio < 0.7:
        why = ("strict priority beats fair sharing: decode is served before bulk on "
               "every port, while the model splits each link max-min between them")
    elif ratio and ratio > 1.3 and in_band(done):
        why = (f"{m - i:.0f} ms above the model, while the phase as a whole completes at "
               f"{_fmt(done)}x the model's: the bytes arrive on time, the messages wait "
               "longer")
        if "no-cc" in told:
            why += ", the queueing explained above"
        else:
            told.add("no-cc")
            why += (". The lab's senders have no congestion control: each QP leaves at its "
                    "share of the NIC, and where ECMP put more than a lane's rate on a 200G "
                    "lane the excess waits in that lane's FIFO, so a message's frames meet a "
                    "queue built by the burst; the model's ideal transport sends each QP at "
                    "its bottleneck share and builds none (DCQCN would keep such queues near "
                    "its ECN threshold)")
        why += f". Fidelity margin {margin_text(r.get('margin'))}, {facts}"
    elif ratio and ratio > 1.3:
        why = (f"{m - i:.0f} ms above the model, and the phase as a whole also completed "
               f"at {_fmt(done)}x the model's: the bytes themselves arrived late, which "
               "queueing inside the burst does not explain, and the run's margin "
               f"({margin_text(r.get('margin'))}), plane, losses and start skew show "
               f"nothing that would; {facts}")
    else:
        why = ("below the model; a candidate is the hash: OVS's draws and the model's put "
               "the decode QPs on different lanes, draw by draw, so fewer of them may have "
               f"shared a lane here ({facts})")
    return f"EP{r['ep']} {r['case']} {r['phase']} {q}: ratio {_fmt(ratio)}, {why}."


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
    why = ("At a fixed batch per GPU, a decode step sends the same number of token copies "
           "per GPU whatever the EP size, so the growth comes from how many of them cross the "
           "network and how unevenly they land. With same-server copies on NVLink, the share "
           f"on the fabric is 1 - {gps}/EP ("
           + ", ".join(f"EP{e}: {100 * s:.0f}%" for e, s in remote.items())
           + f"), x{share:.2f} from EP{lo} to EP{hi}")
    if g_d > share * 1.05:
        why += (f", against the dispatch phase's x{g_d:.2f}: the rest is what the share does "
                "not explain, and receiver imbalance (the busiest GPU gets more copies as the "
                "EP grows, and the phase waits for it) and ECMP collisions on the 200G lanes "
                "are its candidates. ")
    else:
        why += (f", about the dispatch phase's whole growth (x{g_d:.2f}). ")
    why += ("DeepEP's curve has the same cause at its start (EP8 is one 8-GPU node, all "
            "NVLink, so EP8 -> EP16 jumps x1.5 for dispatch) and flattens from EP64 on, where "
            "nearly every copy crosses the network and the 400G NIC bound per GPU no longer "
            f"grows. The lab's servers have {gps} GPUs instead of 8 (to fit this machine), so "
            f"at EP{lo} {100 * remote[lo]:.0f}% of the copies already cross the fabric")
    why += (f", and it stops at EP{hi}, before DeepEP's plateau; " if hi < 64 else "; ")
    why += ("compare the growth per doubling, not the absolute times (the lab's step moves "
            f"{tokens}/{DEEPEP_TOKENS} of DeepEP's bytes at scaled rates, and the lab has no "
            "GPU-side work: DeepEP's time includes FP8 casting, kernel launch and the "
            "receiver's copy-out). Last, the two phases ")
    if abs(g_d / g_c - 1) <= 0.1:
        why += (f"grow alike here (completion x{g_d:.2f} dispatch, x{g_c:.2f} combine): both "
                "move the same token copies over the same paths, combine only in larger "
                "BF16 messages")
    else:
        why += (f"grow differently here (completion x{g_d:.2f} dispatch, x{g_c:.2f} "
                "combine), though both move the same token copies over the same paths")
    why += (f"; the flow model's p99 grows x{m_d:.2f} and x{m_c:.2f}. DeepEP's combine "
            f"grows more than its dispatch (x{deepep['combine']:.2f} vs "
            f"x{deepep['dispatch']:.2f} to EP256); the lab cannot say why, as it models "
            "no GPU-side work (such as combine's weighted sum of the top-8 outputs), and "
            "DeepEP does not break its times down.")
    return why


def isolation_why(fill: float, moved: list[dict[str, float]], counters: list[str]) -> str:
    """The mechanism of FIFO and strict priority, and what this run's numbers show of it:
    ``moved`` holds, per EP and phase, background/alone p50 and p99 and isolated/alone p99."""
    tail = max((m["p99"] for m in moved if m["p99"] == m["p99"]), default=math.nan)
    mid = max((m["p50"] for m in moved if m["p50"] == m["p50"]), default=math.nan)
    worst = max((m["isolated"] for m in moved if m["isolated"] == m["isolated"]),
                default=math.nan)
    why = ("With one FIFO per port, a decode packet that hashes onto a lane carrying a bulk "
           "flow queues behind everything the bulk flow put there: a 400G bulk flow fills a "
           f"200G lane's queue for {fill:g} s before the burst, about {fill:g} s of backlog "
           "(three times that where ECMP put two bulk flows on one lane), and every decode "
           "message crossing that lane inherits it. ")
    if tail > 1.3 and mid < 1 + (tail - 1) / 2:
        why += (f"Here the tail moved most (p99 up to x{tail:.2f} of alone, p50 up to "
                f"x{mid:.2f}): messages on other lanes were barely slowed, so the CDF splits "
                "in two, and the phase, which ends with its slowest message, follows the "
                "tail. ")
    elif tail > 1.3:
        why += (f"Here the median moved with the tail (p50 up to x{mid:.2f} of alone, p99 up "
                f"to x{tail:.2f}): the bulk queues lay on most decode messages' paths. ")
    else:
        why += (f"Here the background barely moved decode latency (p99 up to x{tail:.2f} of "
                "alone): few decode messages met a bulk queue. ")
    why += ("Strict priority puts decode in its own queue that is served first: a decode "
            "packet waits at most for the bulk frame already on the wire")
    if worst <= 1.2:
        why += (f", and decode latency returned close to the idle-fabric value (p99 at most "
                f"x{worst:.2f} of alone); what remains is the NIC itself, which the lab's "
                "sender shares round-robin between the bulk QP and the decode QPs (a real "
                "NIC would apply its own per-class scheduling). ")
    else:
        why += (f"; here it brought p99 to x{_fmt(worst)} of alone, not back to it: the NIC "
                "itself, which the lab's sender shares round-robin between the bulk QP and "
                "the decode QPs, still delays decode. ")
    why += ("The size of the penalty is the lab's, not a real fabric's: the lab has no PFC "
            "and no ECN/DCQCN, so an overloaded lane's queue grows until its deep "
            "'lossless' FIFO is full (here, for the whole fill). On a RoCE fabric DCQCN "
            "would slow the bulk sender to the lane rate and hold the queue near the ECN "
            "threshold (tens of microseconds at 200G), and PFC would pause the upstream port "
            "instead, which without a separate priority also stops decode (head-of-line "
            "blocking one hop back): the mechanism is the same, the magnitude smaller. "
            + ("Class counters after the isolated runs: " + "; ".join(counters) + "."
               if counters else ""))
    return why
