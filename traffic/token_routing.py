"""Token routing: each token's ``top_k`` distinct experts, drawn from a popularity vector.

The sampling side of ``traffic.workload``: given one popularity per routed expert (a
``Gating``'s output) and a seeded generator, ``route_tokens`` returns every token's experts,
optionally with DeepSeek-V3's node-limited rule (experts of at most M nodes, nodes chosen by
the sum of their best ``top_k/M`` scores). Gate scores are the exponential race described
under *Assumptions* in ``traffic.workload``'s docstring.

It is a module of its own because it is numerics only (alias tables, the race's
memorylessness, a lazy per-group router that avoids a score per expert per token) and knows
nothing of presets, placement or bytes. ``traffic.workload`` imports and re-exports it.
"""

from __future__ import annotations

import numpy as np

#: Tokens routed per vectorised chunk: bounds memory (a chunk's arrays stay in the tens of MB).
_CHUNK = 1 << 14


class _Alias:
    """Vose alias tables, one row per group: O(1) categorical draws, vectorised.

    Why: drawing from a 256-way categorical a few million times with ``searchsorted`` or a
    full score matrix is the cost that dominates routing; alias tables make a draw two
    array lookups and a compare.
    """

    def __init__(self, weights: np.ndarray) -> None:
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        rows, cols = w.shape
        prob = np.ones((rows, cols))
        alias = np.tile(np.arange(cols, dtype=np.int32), (rows, 1))
        for r in range(rows):
            q = w[r] * cols / w[r].sum()
            small = [i for i in range(cols) if q[i] < 1.0]
            large = [i for i in range(cols) if q[i] >= 1.0]
            while small and large:
                s, big = small.pop(), large.pop()
                prob[r, s], alias[r, s] = q[s], big
                q[big] -= 1.0 - q[s]
                (small if q[big] < 1.0 else large).append(big)
        self.cols = cols
        self.prob = prob.ravel().astype(np.float32)
        self.alias = alias.ravel()

    def sample(self, rng: np.random.Generator, rows: np.ndarray | None = None,
               shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Draw one column index per element of ``rows`` (a row index array), or ``shape``."""
        size = shape if rows is None else rows.shape
        x = rng.random(size, dtype=np.float32)
        x *= np.float32(self.cols)
        col = x.astype(np.int32)
        np.minimum(col, self.cols - 1, out=col)
        x -= col  # the fraction: a second uniform for free
        flat = col if rows is None else rows * self.cols + col
        return np.where(x < self.prob[flat], col, self.alias[flat])


def _check_popularity(popularity: np.ndarray, top_k: int) -> np.ndarray:
    p = np.asarray(popularity, dtype=np.float64)
    if p.ndim != 1 or len(p) < 1:
        raise ValueError("popularity must be a 1-D array with one entry per expert")
    if not np.all(np.isfinite(p)) or np.any(p <= 0):
        raise ValueError("popularity must be finite and > 0 for every expert")
    if not 1 <= top_k <= len(p):
        raise ValueError(f"top_k must be in [1, {len(p)}] (got {top_k})")
    return p / p.sum()


def _route_unlimited(p: np.ndarray, alias: _Alias, n: int, k: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Top-k without a node limit: the first k distinct experts of i.i.d. draws from ``p``.

    Drawing with replacement and keeping first occurrences *is* sequential sampling without
    replacement, i.e. the top-k of the exponential race, exactly. Rows that see fewer than k
    distinct experts in ``2k`` draws are completed by the race over the experts they lack
    (exact: the race restricted to the remaining experts continues the same sequence).
    """
    experts = len(p)
    if k == experts:
        return np.tile(np.arange(experts, dtype=np.int32), (n, 1))
    draws = max(2 * k, k + 2)
    d = alias.sample(rng, shape=(n, draws))
    dup = np.zeros((n, draws), dtype=bool)
    for j in range(1, draws):
        dup[:, j] = (d[:, :j] == d[:, j, None]).any(axis=1)
    keep = ~dup
    rank = np.cumsum(keep, axis=1)
    ok = rank[:, -1] >= k
    take = keep & (rank <= k)
    out = np.empty((n, k), dtype=np.int32)
    if ok.all():
        out[:] = d[take].reshape(n, k)
        return out
    out[ok] = d[ok][take[ok]].reshape(-1, k)
    bad = np.nonzero(~ok)[0]
    keys = rng.standard_exponential((len(bad), experts)) / p
    found = keep[bad]
    keys[np.repeat(np.arange(len(bad)), found.sum(axis=1)), d[bad][found]] = -1.0
    out[bad] = np.argpartition(keys, k - 1, axis=1)[:, :k]
    return out


def argsmallest(values: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the ``k`` smallest entries of each row of a non-negative float array.

    Why not ``argpartition``: on short rows it is ~3x slower than ``partition`` on integers.
    A non-negative float64's bit pattern orders like the float, so the column index is
    packed into the lowest mantissa bits (ties closer than ~2**-44 relative break by column)
    and a plain integer ``partition`` does the work. ``values`` is overwritten.
    """
    n, cols = values.shape
    mask = np.uint64((1 << max(1, (cols - 1).bit_length())) - 1)
    packed = values.view(np.uint64)
    packed &= ~mask
    packed |= np.arange(cols, dtype=np.uint64)
    if k < cols:
        packed = np.partition(packed, k - 1, axis=1)[:, :k]
    return (packed & mask).astype(np.int32)


class _GroupRouter:
    """Top-k with DeepSeek-V3's node limit, exactly, without a score per expert per token.

    The rule on the exponential race (keys ``X_e / p_e``, smaller = higher score): a group's
    score is the sum of its ``m = top_k // M`` best keys; the token keeps the M best groups
    and takes its top-k among their experts. Generating every key costs tokens x experts
    random numbers (268M at 256 GPUs x 4096 tokens x 256 experts: seconds). Instead, by the
    memorylessness of the exponential, a group's best key is ``T_1 = Exp(1)/P_g`` with the
    winner drawn from ``p`` within the group, the next is ``T_1 + Exp(1)/(P_g - p_winner)``,
    and so on; once the first ``m`` are known every other expert's key is
    ``T_m + Exp(1)/p_e``. The winners only change the rates, which lie between bounds set
    by the group's lightest and heaviest experts, so a group whose score bounds already
    exclude it (or pin it, when its experts are equally popular) never needs its winners
    drawn. Only the M chosen groups get full keys.
    """

    def __init__(self, p: np.ndarray, groups: int, max_groups: int, top_k: int) -> None:
        experts = len(p)
        if experts % groups:
            raise ValueError(f"node-limited routing needs the {experts} routed experts to split "
                             f"evenly over {groups} nodes")
        self.groups, self.max_groups, self.top_k = groups, max_groups, top_k
        self.per = experts // groups
        self.m = max(1, top_k // max_groups)
        if self.m > self.per or max_groups * self.per < top_k:
            raise ValueError(f"top_k={top_k} cannot be met from {max_groups} nodes of "
                             f"{self.per} experts")
        self.pg = p.reshape(groups, self.per)
        self.mass = self.pg.sum(axis=1)
        self.invp = 1.0 / self.pg
        self.alias = _Alias(self.pg)
        # Row g * per + e: group g's distribution without expert e (one draw per exclusion).
        if self.m > 1:
            without = np.repeat(self.pg, self.per, axis=0)
            without[np.arange(experts), np.tile(np.arange(self.per), groups)] = 0.0
            self.alias_ex = _Alias(without)
        # Score = sum_j T_j = sum_j (m - j) * X_j / rate_j, rate_0 = P_g and rate_j = P_g minus
        # the first j winners' popularity: bounded by removing the j lightest / heaviest.
        srt = np.sort(self.pg, axis=1)
        m = self.m
        self.inv_lo = np.empty((groups, m))  # 1 / (largest possible rate): lower bound
        self.inv_hi = np.empty((groups, m))
        for j in range(m):
            light = srt[:, :j].sum(axis=1)
            heavy = srt[:, self.per - j:].sum(axis=1) if j else 0.0
            self.inv_lo[:, j] = 1.0 / (self.mass - light)
            self.inv_hi[:, j] = 1.0 / (self.mass - heavy)
        self.weight = np.arange(m, 0, -1, dtype=np.float64)  # (m - j)
        self.exact = np.all(self.inv_lo == self.inv_hi, axis=1)  # equal-popularity groups

    def _sample_excluding(self, g: np.ndarray, exclude: np.ndarray,
                          rng: np.random.Generator) -> np.ndarray:
        """One draw per element of ``g`` (1-D) from its group, never an index in ``exclude``.

        ``exclude`` has shape ``(len(g), j)``. Without exclusions an alias draw; with them an
        inverse-CDF draw over the group's weights with the excluded experts zeroed (exact,
        and unlike rejection it does not slow down when the excluded expert is the hot one).
        """
        if exclude.shape[-1] == 0:
            return self.alias.sample(rng, rows=g)
        if exclude.shape[-1] == 1:  # DeepSeek-V3's case (m = 2): a table per excluded expert
            return self.alias_ex.sample(rng, rows=g * self.per + exclude[:, 0])
        w = self.pg[g]
        rows = np.arange(len(g))[:, None]
        w[rows, exclude] = 0.0
        cum = np.cumsum(w, axis=1)
        u = rng.random(len(g)) * cum[:, -1]
        return np.minimum((cum <= u[:, None]).sum(axis=1), self.per - 1).astype(np.int32)

    def _exact_times(self, g: np.ndarray, x: np.ndarray, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Ring times ``(m, len(g))`` and winners (first ``m - 1`` drawn) of groups ``g``."""
        m = self.m
        t = np.empty((m, len(g)))
        win = np.full((m, len(g)), -1, dtype=np.int32)
        rate = self.mass[g]
        t[0] = x[0] / rate
        for j in range(1, m):
            win[j - 1] = self._sample_excluding(g, win[: j - 1].T, rng)
            rate = rate - self.pg[g, win[j - 1]]
            t[j] = t[j - 1] + x[j] / rate
        return t, win

    def __call__(self, n: int, rng: np.random.Generator) -> np.ndarray:
        N, per, M, m, k = self.groups, self.per, self.max_groups, self.m, self.top_k
        # Layout (j, token, group): numpy reduces badly along a short last axis.
        x = rng.standard_exponential((m, n, N), dtype=np.float32)
        # Ring times with the lower-bound rates; exact for equal-popularity groups.
        t = x * self.inv_lo.T[:, None, :]
        for j in range(1, m):
            t[j] += t[j - 1]
        score = t.sum(axis=0)
        win = np.full((max(m - 1, 1), n, N), -1, dtype=np.int32)
        if m > 1 and not self.exact.all():
            upper = x[0] * self.inv_hi[:, 0] * m
            for j in range(1, m):
                upper += x[j] * self.inv_hi[:, j] * (m - j)
            thr = np.partition(upper, M - 1, axis=1)[:, M - 1:M]
            amb = score <= thr
            if self.exact.any():
                amb &= ~self.exact
            flat = np.flatnonzero(amb)  # flat (token, group) indices: cheaper than 2-D ones
            if len(flat):
                te, we = self._exact_times((flat % N).astype(np.int32),
                                           x.reshape(m, -1)[:, flat], rng)
                t.reshape(m, -1)[:, flat] = te
                win.reshape(len(win), -1)[:, flat] = we[: m - 1]
                score.ravel()[flat] = te.sum(axis=0)
        sel = argsmallest(score, M)
        rows, cols = np.arange(n)[:, None], np.arange(M)[None, :]
        ts, ws = t[:, rows, sel], win[:, rows, sel]  # (m, n, M), (m-1, n, M)
        # Winners not drawn yet (all m for equal-popularity groups, the m-th for the others),
        # then every other expert's key is T_m + Exp(1)/p_e (memorylessness).
        known = [ws[j] for j in range(m - 1)]
        for j in range(m):
            cur = known[j] if j < m - 1 else np.full((n, M), -1, dtype=np.int32)
            idx = np.nonzero(cur < 0)
            if len(idx[0]):
                prev = np.stack([known[i][idx] for i in range(j)], axis=1) if j else \
                    np.empty((len(idx[0]), 0), dtype=np.int32)
                cur[idx] = self._sample_excluding(sel[idx], prev, rng)
            if j < m - 1:
                known[j] = cur
            else:
                known.append(cur)
        keys = rng.standard_exponential((n, M, per)) * self.invp[sel]
        keys += ts[m - 1][..., None]
        for j in range(m):
            keys[rows, cols, known[j]] = ts[j]
        top = argsmallest(keys.reshape(n, M * per), k)
        return (np.take_along_axis(sel, top // per, axis=1) * per + top % per).astype(np.int32)


def route_tokens(popularity: np.ndarray, tokens: int, top_k: int, rng: np.random.Generator,
                 *, groups: int | None = None, max_groups: int | None = None) -> np.ndarray:
    """Each token's ``top_k`` distinct experts, shape ``(tokens, top_k)`` (order not meaningful).

    ``groups``/``max_groups``: node-limited routing over ``groups`` contiguous blocks of
    experts (one per node), at most ``max_groups`` blocks per token, blocks chosen by the
    sum of their best ``top_k // max_groups`` scores (DeepSeek-V3, arXiv:2412.19437 2.1.2).
    Seeded by ``rng``: the same generator state gives the same routing.
    """
    p = _check_popularity(popularity, top_k)
    if tokens < 0:
        raise ValueError("tokens must be >= 0")
    out = np.empty((tokens, top_k), dtype=np.int32)
    if groups is not None and max_groups is not None and max_groups < groups:
        router = _GroupRouter(p, groups, max_groups, top_k)
        for start in range(0, tokens, _CHUNK):
            out[start:start + _CHUNK] = router(min(_CHUNK, tokens - start), rng)
    else:
        alias = _Alias(p)
        for start in range(0, tokens, _CHUNK):
            n = min(_CHUNK, tokens - start)
            out[start:start + n] = _route_unlimited(p, alias, n, top_k, rng)
    return out


def route_reference(popularity: np.ndarray, tokens: int, top_k: int, rng: np.random.Generator,
                    groups: int | None = None, max_groups: int | None = None) -> np.ndarray:
    """The same model by brute force (a key per expert per token); tests compare against it."""
    p = _check_popularity(popularity, top_k)
    keys = rng.standard_exponential((tokens, len(p))) / p
    if groups is not None and max_groups is not None and max_groups < groups:
        per, m = len(p) // groups, max(1, top_k // max_groups)
        g = keys.reshape(tokens, groups, per)
        score = np.sort(g, axis=2)[:, :, :m].sum(axis=2)
        sel = np.argsort(score, axis=1)[:, :max_groups]
        drop = np.ones((tokens, groups), dtype=bool)
        drop[np.arange(tokens)[:, None], sel] = False
        keys = np.where(drop[:, :, None], np.inf, g).reshape(tokens, len(p))
    return np.argpartition(keys, top_k - 1, axis=1)[:, :top_k].astype(np.int32)
