"""What a MoE job's iterations measured, and the telemetry they become. Pure.

``traffic.shell.moejob.MoeJob`` fills ``Iteration`` records as its iterations end; the
collector takes ``iteration_values`` of the new ones at each poll, and the detectors
(``ops/detectors/job_slow.py``, ``job_loss.py``, ``lane_loss.py``) read them back by the
names here: the job's iteration time is what operators watch first, and the flows that lost
packets, with the links their lane marks say they crossed, say where a fault the counters
miss is.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from vocab.lanemark import LaneMarks

#: the telemetry component the job's samples belong to
JOB = "job"
#: the prefix of the per-pair loss metrics
LOST = "lost:"


#: per path (``path_key``), the job's packets lost along it, and corrupt
#: (exported when nonzero: the packets a path carried stay in the job's record)
PATH_LOST, PATH_CORRUPT = "path_lost", "path_corrupt"
PATH_METRICS = (PATH_LOST, PATH_CORRUPT)


def pair_metric(src: str, dst: str) -> str:
    """The metric of the packets lost on the job's flows from ``src`` to ``dst``."""
    return f"{LOST}{src}>{dst}"


def parse_pair(metric: str) -> tuple[str, str] | None:
    """``(src, dst)`` of a ``pair_metric``; None for any other metric."""
    if not metric.startswith(LOST) or ">" not in metric:
        return None
    src, _, dst = metric[len(LOST):].partition(">")
    return (src, dst) if src and dst else None


@dataclass
class Iteration:
    """One iteration of the job, as measured."""

    index: int
    started: float  # wall clock: the dispatch's last sender's real start
    ended: float  # wall clock: when its last phase's result was in
    iter_s: float  # dispatch + combine completion (the wire's time, see the module docstring)
    phases: dict[str, float]  # phase -> completion time (s) from its last sender's start
    lost_packets: int  # training flows' packets that never arrived
    decode_s: float | None = None  # the decode burst's completion time, when one ran
    decode_lost: int = 0
    #: packets the lab's own receivers dropped (their ring or socket overflowed: the
    #: machine's CPU, not the fabric), over all of its replays
    receiver_drops: int = 0
    #: flows that lost packets or received corrupt ones:
    #: ``{"src", "dst", "sport", "lost", "errors", "kernel"}``
    lossy: list[dict[str, Any]] = field(default_factory=list)
    #: per path the job's packets took, as the lane marks tell
    #: (``path_key``): ``[packets sent along it, lost, corrupt]`` (``add_paths``)
    paths: dict[str, list[int]] = field(default_factory=dict)
    error: str | None = None  # a replay that failed (the iteration is not timed)
    #: phase -> how late its last sender started after the common instant (s): taken out
    #: of the phase's time, since the machine's start-up is not the fabric's
    skew_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def add_paths(paths: dict[str, list[int]], rows: list[dict[str, Any]], marks: LaneMarks,
              seen: dict[tuple[str, str, int], int]) -> None:
    """Add a replay's flows (``ReplayResult.flows`` rows) to ``paths``: per path (its
    links joined by ``>``, ``path_key``: the two NIC links and the links between switches
    its lane mark names), the packets sent along it, and those lost or corrupt.

    A flow's path is what its lane marks say (``LaneMarks.path``): a packet that arrived
    took its own mark's path; a flow's lost and corrupt packets go on the links every one
    of its marks' paths shares (its path, for a flow that kept one lane, as a hashed QP
    does). A flow that lost everything has no mark of its own: the last one ``seen`` for
    its (src, dst, UDP source port) stands in, as the same QP hashed the same way before;
    with none, its NIC links alone (a flow between two hosts of one switch has no other).
    The NIC links are kept so that a NIC's loss is told from its leaf's."""
    for r in rows:
        src, dst = r["src"], r["dst"]
        got: dict[int, int] = r.get("marks") or {}
        key = (src, dst, int(r["sport"]))
        path_of = {ttl: marks.path(src, dst, ttl) for ttl in got}
        for ttl, n in got.items():
            if path_of[ttl]:
                paths.setdefault(path_key(path_of[ttl]), [0, 0, 0])[0] += n
        if got:
            seen[key] = max(got.items(), key=lambda kv: kv[1])[0]
        lost, bad = int(r.get("lost_packets") or 0), int(r.get("errors") or 0)
        if lost or bad:
            each = list(path_of.values()) or [marks.path(src, dst, seen.get(key, 0))]
            shared = [ln for ln in each[0] if all(ln in p for p in each[1:])]
            if shared:
                c = paths.setdefault(path_key(shared), [0, 0, 0])
                c[0] += lost
                c[1] += lost
                c[2] += bad


def path_key(links: list[str]) -> str:
    """How a path is named in telemetry: its links joined by ``>``."""
    return ">".join(links)


def parse_path(metric: str) -> tuple[str, tuple[str, ...]] | None:
    """``(what, links)`` of a per-path metric (``PATH_LOST`` ...); None for another."""
    what, sep, rest = metric.partition(":")
    if not sep or what not in PATH_METRICS or not rest:
        return None
    return what, tuple(rest.split(">"))


def settled(iterations: list[Iteration], n: int = 5, spread: float = 1.5) -> bool:
    """Has the job settled: its last ``n`` iterations without a loss or failure, the slowest
    within ``spread`` x the fastest? A fabric's first iterations are not its steady state
    (the switch learns every new flow on its slow path first), and a baseline taken from
    them would hide a slow one."""
    last = iterations[-n:]
    if len(last) < n or any(it.error or it.lost_packets or it.decode_lost
                            or it.receiver_drops for it in last):
        return False
    times = [it.iter_s for it in last]
    return min(times) > 0 and max(times) <= spread * min(times)


def iteration_values(done: list[Iteration]) -> dict[tuple[str, str], float]:
    """Telemetry of component ``JOB`` for the iterations that ended since the last poll:
    ``iter_s`` (the slowest of them), ``iter_lost``, ``iter_failed``, ``decode_s``, per
    pair of NICs whose flows lost packets, how many (``pair_metric``), and per path
    (its NIC links and lanes), the packets lost and corrupt along it (``PATH_METRICS``). A failed
    iteration has no time. An iteration whose receivers dropped packets measured the
    machine, not the fabric: only ``iter_rxdrops`` says so (a receiver's drop cannot be
    told from the fabric's loss flow by flow)."""
    if not done:
        return {}
    out: dict[tuple[str, str], float] = {(JOB, "iter_rxdrops"): float(
        sum(it.receiver_drops for it in done))}
    done = [it for it in done if not it.receiver_drops]
    timed = [it.iter_s for it in done if it.error is None]
    if timed:
        out[(JOB, "iter_s")] = max(timed)
    out[(JOB, "iter_lost")] = float(sum(it.lost_packets for it in done))
    out[(JOB, "iter_failed")] = float(sum(it.error is not None for it in done))
    decode = [it.decode_s for it in done if it.decode_s is not None]
    if decode:
        out[(JOB, "decode_s")] = max(decode)
    per: dict[tuple[str, str], float] = defaultdict(float)
    for it in done:
        for f in it.lossy:
            if f["lost"]:
                per[(JOB, pair_metric(f["src"], f["dst"]))] += f["lost"]
        add_path_values(per, JOB, it.paths)
    out.update(per)
    return out


def add_path_values(per: dict[tuple[str, str], float], component: str,
                    paths: dict[str, list[int]]) -> None:
    """Add ``paths`` (``add_paths``'s: per path, packets, lost, corrupt) to the telemetry
    ``per`` of ``component``: per path, the packets lost and corrupt (``PATH_METRICS``),
    where there are any."""
    for key, (_packets, lost, bad) in paths.items():
        if lost:
            per[(component, f"{PATH_LOST}:{key}")] += lost
        if bad:
            per[(component, f"{PATH_CORRUPT}:{key}")] += bad


