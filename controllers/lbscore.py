"""The NumPy scoring behind two of ``controllers.lb``'s choices: many candidate paths
scored at once instead of one Python loop per candidate.

``ManyCandidates`` is ``plan_assign``'s greedy step (``_least_loaded``) for flows with many
candidates, and ``Scorer`` with its ``_Block`` is ``AdaptivePolicy.step``'s verdict for a
block of hot flows; both read a flow's candidate hops as an array (``_pair_hop_ids``).
Each does the same arithmetic as its scalar counterpart in ``controllers.lb``, so the
choices are the same bit for bit (the unit tests compare them). They are apart from
``controllers.lb`` so that module reads as the algorithms, and this one as how they are
made fast. Pure; ``controllers.lb`` uses ``ManyCandidates`` and ``Scorer``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from controllers.paths import Hop, Path, PathFinder
from vocab.flows import Flow


def _pair_hop_ids(finder: PathFinder, hop_id: dict[Hop, int],
                  cache: dict[tuple[str, str], np.ndarray], f: Flow) -> np.ndarray:
    """Hop ids of ``f``'s candidate paths where they differ (candidates x varying hops).

    Every destination under one attach switch has the same trunks and the same fixed last
    hop, so the array is computed once per (attach, attach) pair and cached in ``cache``.
    """
    key = (finder.attach(f.src), finder.attach(f.dst))
    v = cache.get(key)
    if v is None:
        varying = finder.choices(f.src, f.dst)[1]
        v = np.array([[hop_id[h] for h in hops] for hops in varying],
                     dtype=np.int64).reshape(len(varying), len(varying[0]))
        cache[key] = v
    return v


class ManyCandidates:
    """``_least_loaded`` for flows with many candidates (an astral3 leaf pair has one per
    lane), with the loads mirrored in an array: the same products and left-to-right sums
    in NumPy, so the same choice, at a fraction of the cost of a Python loop per lane.

    ``MIN`` is public as a seam: the fewest varying candidates scored in NumPy; a test sets
    it to 1 and to "never" to compare the two ways on one plan."""

    MIN = 8

    def __init__(self, inv: Mapping[Hop, float], finder: PathFinder) -> None:
        self.finder = finder
        self.hop_id = {h: i for i, h in enumerate(inv)}
        self.inv = np.array(list(inv.values()), dtype=np.float64)
        self.load = np.zeros(len(self.hop_id))
        self.pairs: dict[tuple[str, str], np.ndarray] = {}

    def set(self, hop: Hop, load: float) -> None:
        i = self.hop_id.get(hop)
        if i is not None:
            self.load[i] = load

    def least_loaded(self, f: Flow, size: float) -> int:
        v = _pair_hop_ids(self.finder, self.hop_id, self.pairs, f)
        if v.shape[1] == 0:
            return 0
        u = (self.load[v] + size) * self.inv[v]
        worst, total = np.maximum(u[:, 0], 0.0), u[:, 0]
        for k in range(1, v.shape[1]):
            worst = np.maximum(worst, u[:, k])
            total = total + u[:, k]
        tie = worst == worst.min()
        return int(np.argmax(tie & (total == total[tie].min())))


class Scorer:
    """Link rates as an array, and ``AdaptivePolicy.step``'s verdicts for blocks of flows.

    Per flow: its worst utilisation now (over the hops a candidate could avoid), and the
    candidate minimising (max utilisation with the flow moved onto it, their sum, its
    index), the current path excluded. Same arithmetic as one flow at a time in Python
    (``u = (rate on the hop + the flow's rate unless it is already there) / capacity``, the
    sum taken left to right), so the verdicts are the same bit for bit (tested against
    the one-at-a-time code).

    ``BLOCK`` (flows scored at once) is public as a seam: a test makes it small so block
    boundaries fall inside its flows.
    """

    BLOCK = 128

    def __init__(self, work: dict[Hop, float], capacity: Mapping[Hop, float],
                 finder: PathFinder) -> None:
        self.finder, self.work = finder, work
        self.hops = list(capacity)
        self.hop_id = {h: i for i, h in enumerate(self.hops)}
        self.rate = np.array([work.get(h, 0.0) for h in self.hops], dtype=np.float64)
        self.cap = np.array([capacity[h] for h in self.hops], dtype=np.float64)
        self.pairs: dict[tuple[str, str], np.ndarray] = {}  # (attach a, attach b) -> ids

    def _candidates(self, f: Flow) -> np.ndarray:
        """``(candidates, varying hops)`` hop ids (``_pair_hop_ids``)."""
        return _pair_hop_ids(self.finder, self.hop_id, self.pairs, f)

    def block(self, flows: list[Flow], rates: list[float], paths: list[Path]) -> _Block:
        return _Block(self, flows, rates, paths)

    def move(self, old: Path, new: Path, rate: float) -> list[int]:
        """A flow of ``rate`` moves from ``old`` to ``new``: update the rates; returns the
        ids of the hops whose rate changed."""
        changed = []
        here, there = set(old), set(new)
        for h in here.difference(there):
            self.work[h] -= rate
            i = self.hop_id.get(h)
            if i is not None:
                self.rate[i] = self.work[h]
                changed.append(i)
        for h in there.difference(here):
            self.work[h] += rate
            i = self.hop_id[h]
            self.rate[i] = self.work[h]
            changed.append(i)
        return changed


class _Block:
    """One block of flows, grouped by shape (candidates x varying hops, path length), with
    what does not depend on the rates worked out once: hop ids, which candidate hops the
    flow already loads, which candidate is its current path."""

    def __init__(self, sc: Scorer, flows: list[Flow], rates: list[float],
                 paths: list[Path]) -> None:
        self.sc = sc
        n = len(flows)
        self.now, self.score = np.zeros(n), np.zeros(n)
        self.best = np.full(n, -1, dtype=np.int64)
        cands = [sc._candidates(f) for f in flows]
        by_shape: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for j, (v, p) in enumerate(zip(cands, paths, strict=True)):
            by_shape[(*v.shape, len(p))].append(j)
        self.groups: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                np.ndarray, dict[int, list[int]]]] = []
        self.where = np.zeros((n, 2), dtype=np.int64)  # group, position in it
        # which flows read which hop, kept per attach pair (flows of a pair read the same
        # candidate hops), plus the hops of paths that are no longer candidates
        pair_of: dict[int, int] = {}
        flow_pair = np.array([pair_of.setdefault(id(v), len(pair_of)) for v in cands],
                             dtype=np.int64)
        pair_v = {k: cands[j] for j, k in enumerate(flow_pair.tolist())}
        hops = [np.unique(pair_v[k]) for k in range(len(pair_of))]
        hop_pair = np.repeat(np.arange(len(hops)), [h.size for h in hops])
        hop_ids = np.concatenate(hops)
        o = np.argsort(hop_ids, kind="stable")
        self.hop_ids, self.hop_pair = hop_ids[o], hop_pair[o]
        o = np.argsort(flow_pair, kind="stable")
        self.pair_flows = o
        self.pair_ptr = np.searchsorted(flow_pair[o], np.arange(len(hops) + 1))
        self.stale_on: dict[int, list[int]] = defaultdict(list)  # hop id -> flows
        for (_, n_h, _), js in by_shape.items():
            g = len(self.groups)
            self.where[js, 0], self.where[js, 1] = g, np.arange(len(js))
            v = np.stack([cands[j] for j in js])  # (flows, candidates, varying hops)
            pid = np.array([[sc.hop_id[h] for h in paths[j]] for j in js], dtype=np.int64)
            here = v == pid[:, 0, None, None]
            for k in range(1, pid.shape[1]):
                here |= v == pid[:, k, None, None]
            current = here.all(axis=2) if n_h else np.zeros(v.shape[:2], bool)
            stale: dict[int, list[int]] = {}  # position -> path hops a candidate avoids
            for r, c in enumerate(np.argmax(current, axis=1).tolist()):
                f = flows[js[r]]
                if not current[r, c] or sc.finder.candidates(f.src, f.dst)[c] != paths[js[r]]:
                    current[r] = False
                    fixed = sc.finder.choices(f.src, f.dst)[0]
                    stale[r] = [sc.hop_id[h] for h in paths[js[r]] if h not in fixed]
                    for i in stale[r]:
                        self.stale_on[i].append(js[r])
            rate = np.array([rates[j] for j in js])
            self.groups.append((np.array(js), v, here, current, rate, stale))
        for g in range(len(self.groups)):
            self._score(g, np.arange(len(self.groups[g][0])))

    def _score(self, g: int, pos: np.ndarray) -> None:
        js, v, here, current, rate, stale = self.groups[g]
        n_h = v.shape[2]
        if n_h == 0:
            return  # one candidate: nothing to choose
        rate_arr, cap = self.sc.rate, self.sc.cap
        v, here, current, rate = v[pos], here[pos], current[pos], rate[pos]
        u = (rate_arr[v] + np.where(here, 0.0, rate[:, None, None])) / cap[v]
        worst, total = u[:, :, 0], u[:, :, 0]
        for k in range(1, n_h):
            worst = np.maximum(worst, u[:, :, k])
            total = total + u[:, :, k]
        rows = np.arange(pos.size)
        now = worst[rows, np.argmax(current, axis=1)]  # u of the current path = use now
        for r, p in enumerate(pos.tolist()):
            if p in stale:
                now[r] = max(rate_arr[i] / cap[i] for i in stale[p])
        worst = np.where(current, np.inf, worst)
        best_w = worst.min(axis=1)
        tie = worst == best_w[:, None]
        total = np.where(tie, total, np.inf)
        best_t = total.min(axis=1)
        pick = np.argmax(tie & (total == best_t[:, None]), axis=1)
        idx = js[pos]
        self.now[idx], self.score[idx] = now, best_w
        self.best[idx] = np.where(np.isfinite(best_w), pick, -1)

    def rescore(self, changed: list[int], after: int) -> None:
        """Score again the flows after position ``after`` that read a changed hop."""
        ch = np.array(changed, dtype=np.int64)
        lo = np.searchsorted(self.hop_ids, ch, "left")
        hi = np.searchsorted(self.hop_ids, ch, "right")
        pairs = np.unique(np.concatenate([self.hop_pair[a:b] for a, b in zip(
            lo.tolist(), hi.tolist(), strict=True)]))
        redo = [self.pair_flows[self.pair_ptr[k]:self.pair_ptr[k + 1]] for k in pairs.tolist()]
        redo += [np.array(self.stale_on[i], dtype=np.int64) for i in changed
                 if i in self.stale_on]
        if not redo:
            return
        todo = np.unique(np.concatenate(redo))
        todo = todo[todo > after]
        if not todo.size:
            return
        g_of = self.where[todo]
        for g in np.unique(g_of[:, 0]).tolist():
            self._score(g, g_of[g_of[:, 0] == g, 1])
