"""Event-driven max-min fair sharing on one component of classes x links: the flow model's
inner loop, compiled. Pure, no root.

``testbed.models.solver.simulate`` reduces a job to components and calls ``events`` on
each. A decode step has a finish time per flow and every departure re-levels thousands of
flows, so the loop runs tens of thousands of events of hundreds of filling rounds each: a
few NumPy calls per round made that minutes. Here the same algorithm is plain loops over
arrays, compiled by Numba (``NUMBA_DISABLE_JIT=1`` runs it as ordinary Python, to step
through).

The algorithm
    *Progressive filling* (``_fill``): every unfrozen row runs at the current level x; a
    link fills at ``x = rem / demand`` (capacity left after frozen rows, over the unfrozen
    rows' coefficients). The lowest such x is the next level; every link within ``tie`` of
    it is a bottleneck and every unfrozen row on one freezes at x, in one round. Fill levels
    only rise as rows freeze, so rows freeze in nondecreasing rate: the order they froze in
    (``seq``) is sorted by rate.

    *Warm start after departures*: when rows finish and none start, every row frozen below
    the lowest rate x_F of the leavers keeps its rate (those rounds froze links no leaver
    crosses, and removing leavers only raises other links' levels, so the same rounds come
    first again), and every refilled row gets a rate >= x_F. Since ``seq`` is sorted, the
    rows to refill are a suffix of it, found by binary search, and the refill writes the
    new suffix in place: the cost is the rows at or above x_F, not the job.

    *Next event*: a segment tree over ``seq`` positions holds each row's projected finish;
    the root is the next finish, and the rows finishing with it (within ``tie``, or
    ``tolerance`` when coalescing) are found by descending it. A refill rewrites only the
    suffix's leaves. A start (arrival) can lower levels anywhere: the allocation is then
    computed from scratch. Coalesced rows leave together at the rate-weighted mean of
    their projected finishes (``solver.simulate`` says why that time).

    *Progress*: the loop holds no GIL and counts rows finished and events in a small
    array (``probe``) that a reporting thread reads while it runs.

The tests compare it with a from-scratch filling at every event (tests/unit/test_flowmodel).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_INF = np.inf
#: Links kept as candidates for the next filling level (the rest are only rescanned when
#: these run out): a round then costs the candidates, not every live link.
CANDIDATES = 32


@njit(cache=True, error_model="numpy")
def _tree_update(tree: np.ndarray, size: int, proj: np.ndarray, seq: np.ndarray, lo: int,
                 hi: int, used: int) -> None:
    """Leaves ``lo..hi-1`` := projected finish of ``seq`` there (inf at or past ``used``),
    then their ancestors."""
    for p in range(lo, hi):
        tree[size + p] = proj[seq[p]] if p < used else _INF
    a, b = (size + lo) >> 1, (size + hi - 1) >> 1
    while a >= 1:
        for i in range(a, b + 1):
            left, right = tree[2 * i], tree[2 * i + 1]
            tree[i] = left if left < right else right
        a, b = a >> 1, b >> 1


@njit(cache=True, error_model="numpy")
def _compact(live: np.ndarray, nl: int, fill: np.ndarray) -> int:
    """Drop links whose level is infinite (no unfrozen row left, or frozen) from ``live``."""
    j = 0
    for i in range(nl):
        c = live[i]
        if fill[c] < _INF:
            live[j] = c
            j += 1
    return j


@njit(cache=True, error_model="numpy")
def _kth_level(fill: np.ndarray, live: np.ndarray, nl: int, buf: np.ndarray) -> float:
    """The level CANDIDATES places above the lowest among the ``nl`` (> CANDIDATES) live
    links: the CANDIDATES + 1 lowest are kept sorted in ``buf`` during one scan, which
    costs a comparison per link once the buffer holds low levels (no copy, no sort)."""
    k = CANDIDATES + 1
    for i in range(nl):
        f = fill[live[i]]
        if i < k:
            j = i
        elif f < buf[k - 1]:
            j = k - 1
        else:
            continue
        while j > 0 and buf[j - 1] > f:
            buf[j] = buf[j - 1]
            j -= 1
        buf[j] = f
    return buf[k - 1]


@njit(cache=True, error_model="numpy")
def _note(r: int, rptr: np.ndarray, col: np.ndarray, coef: np.ndarray, scratch: tuple,
          stamp: int, nl: int) -> int:
    """Row r is unfrozen for this filling: add it to its links' demand and unfrozen counts
    (a link's first row this filling resets them); returns the live links now listed."""
    demand, live, lstamp, ucount = scratch[0], scratch[2], scratch[3], scratch[8]
    for e in range(rptr[r], rptr[r + 1]):
        c = col[e]
        if lstamp[c] != stamp:
            lstamp[c] = stamp
            demand[c] = 0.0
            ucount[c] = 0
            live[nl] = c
            nl += 1
        demand[c] += coef[e]
        ucount[c] += 1
    return nl


@njit(cache=True, error_model="numpy")
def _freeze(rows: np.ndarray, lo: int, hi: int, x: float, rptr: np.ndarray, col: np.ndarray,
            coef: np.ndarray, rate: np.ndarray, seq: np.ndarray, pos: int, rem: np.ndarray,
            demand: np.ndarray, ucount: np.ndarray, fill: np.ndarray) -> int:
    """Rows ``rows[lo:hi]`` run at x from now: off their links' demand and unfrozen counts,
    their load onto the links, the links' levels recomputed (the last row of a link in the
    round leaves the right one), appended to ``seq``; returns the end of ``seq``."""
    for i in range(lo, hi):
        r = rows[i]
        rate[r] = x
        seq[pos] = r
        pos += 1
        for e in range(rptr[r], rptr[r + 1]):
            c = col[e]
            d = demand[c] - coef[e]
            demand[c] = d
            ucount[c] -= 1
            rm = rem[c] - coef[e] * x
            rem[c] = rm
            fill[c] = rm / d if ucount[c] > 0 else _INF
    return pos


@njit(cache=True, error_model="numpy")
def _join(groups: tuple, r: int, b: int) -> None:
    """Move row r into link b's group (b = -1: out of every group). ``groups`` = (head per
    link, next and previous row per row, group per row): doubly linked lists."""
    head, nxt, prv, grp = groups
    if grp[r] == b:
        return
    if grp[r] >= 0:
        p, q = prv[r], nxt[r]
        if p >= 0:
            nxt[p] = q
        else:
            head[grp[r]] = q
        if q >= 0:
            prv[q] = p
    grp[r] = b
    prv[r] = -1
    nxt[r] = -1
    if b >= 0:
        q = head[b]
        nxt[r] = q
        if q >= 0:
            prv[q] = r
        head[b] = r


@njit(cache=True, error_model="numpy")
def _fill(ubuf: np.ndarray, nu: int, rptr: np.ndarray, col: np.ndarray, coef: np.ndarray,
          cptr: np.ndarray, crow: np.ndarray, rate: np.ndarray, unfrozen: np.ndarray,
          rem: np.ndarray, seq: np.ndarray, pos: int, floor: float, stamp: int, tie: float,
          scratch: tuple, groups: tuple, nl: int) -> int:
    """Progressive filling of the ``nu`` rows in ``ubuf`` (unfrozen; ``rem`` already holds
    capacity minus every frozen row's load). Writes each row's rate and appends the rows to
    ``seq`` from ``pos`` in the order they froze; returns the rounds taken.

    ``floor`` (the rate of the row before ``pos``) keeps ``seq`` sorted where float residue
    would put a level a rounding error below the previous one. ``scratch``: per-link demand,
    level, live list, stamps (``stamp`` marks this call's links), bottlenecks, candidates,
    their levels, a row buffer and per-link counts of unfrozen rows. ``groups``: the rows
    each link froze last (``_join``), where a bottleneck's rows are looked for first.
    ``nl`` >= 0: the caller has already noted the rows (``_note``) on that many links."""
    demand, fill, live, lstamp, bott, cand, vals, rows, ucount = scratch
    head = groups[0]
    if nl < 0:  # links the unfrozen rows cross: demand rebuilt from them alone
        nl = 0
        for i in range(nu):
            nl = _note(ubuf[i], rptr, col, coef, scratch, stamp, nl)
    for i in range(nl):
        c = live[i]
        fill[c] = rem[c] / demand[c] if ucount[c] > 0 else _INF
    left, rounds = nu, 0
    nc, theta = 0, -1.0
    while left > 0:
        # the lowest level, from the candidates: links at or below theta (every other live
        # link is above it, and levels only rise)
        x, j = _INF, 0
        for i in range(nc):
            c = cand[i]
            f = fill[c]
            if f < _INF and f <= theta:
                cand[j] = c
                j += 1
                if f < x:
                    x = f
        nc = j
        if nc == 0:  # pick the next candidates: the CANDIDATES lowest live links
            nl = _compact(live, nl, fill)
            if nl == 0:
                raise RuntimeError("progressive filling ran out of links with unfrozen flows")
            theta = _INF
            if nl > CANDIDATES:
                theta = _kth_level(fill, live, nl, vals)
            for i in range(nl):
                c = live[i]
                f = fill[c]
                if f <= theta:
                    cand[nc] = c
                    nc += 1
                    if f < x:
                        x = f
        cut = x + abs(x) * tie
        nb = 0
        if cut < theta:
            for i in range(nc):
                c = cand[i]
                if fill[c] <= cut:
                    bott[nb] = c
                    nb += 1
        else:  # ties reach past the candidates
            nl = _compact(live, nl, fill)
            for i in range(nl):
                c = live[i]
                if fill[c] <= cut:
                    bott[nb] = c
                    nb += 1
        x = max(x, floor, 0.0)
        nr = 0
        for i in range(nb):  # the rows each bottleneck froze last time: usually all
            r = head[bott[i]]
            while r >= 0:
                if unfrozen[r]:
                    unfrozen[r] = False
                    rows[nr] = r
                    nr += 1
                r = groups[1][r]
        pos = _freeze(rows, 0, nr, x, rptr, col, coef, rate, seq, pos, rem, demand, ucount,
                      fill)
        for i in range(nb):
            b = bott[i]
            if ucount[b] > 0:  # some froze elsewhere last time: look at all of b's rows
                lo = nr
                for q in range(cptr[b], cptr[b + 1]):
                    r = crow[q]
                    if unfrozen[r]:
                        unfrozen[r] = False
                        rows[nr] = r
                        nr += 1
                        _join(groups, r, b)
                pos = _freeze(rows, lo, nr, x, rptr, col, coef, rate, seq, pos, rem, demand,
                              ucount, fill)
        if nr == 0:  # float residue on a link whose rows were all frozen already
            for i in range(nb):
                fill[bott[i]] = _INF
            continue
        for i in range(nb):
            fill[bott[i]] = _INF
        floor = x
        left -= nr
        rounds += 1
    return rounds


@njit(cache=True, error_model="numpy")
def _by_link(n_links: int, rptr: np.ndarray, col: np.ndarray, done: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """CSC of the rows not done: ``crow[cptr[l]:cptr[l + 1]]`` are the rows on link l."""
    n = rptr.size - 1
    cptr = np.zeros(n_links + 1, dtype=np.int64)
    for r in range(n):
        if not done[r]:
            for e in range(rptr[r], rptr[r + 1]):
                cptr[col[e] + 1] += 1
    for c in range(n_links):
        cptr[c + 1] += cptr[c]
    crow = np.empty(cptr[n_links], dtype=np.int64)
    at = cptr[:-1].copy()
    for r in range(n):
        if not done[r]:
            for e in range(rptr[r], rptr[r + 1]):
                crow[at[col[e]]] = r
                at[col[e]] += 1
    return cptr, crow


@njit(cache=True, error_model="numpy", nogil=True)
def events(cap: np.ndarray, rptr: np.ndarray, col: np.ndarray, coef: np.ndarray,
           bits: np.ndarray, start: np.ndarray, tolerance: float, tie: float, trace: bool,
           probe: np.ndarray, max_events: int = -1
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray,
                      np.ndarray]:
    """The event loop on one component: rows in CSR (``rptr``, ``col``, ``coef`` =
    multiplicity x weight). Returns finish time and first rate per row, the times at which
    an allocation was computed, the filling rounds, and (``trace``) every rate a row was
    given, as (row, time, rate) columns in time order, a row's finish recorded as rate 0:
    enough to say when a row had sent any number of its bits. Semantics: ``solver.simulate``.

    It runs without the GIL and adds, as it goes, the rows finished to ``probe[0]`` and
    the events to ``probe[1]``, so another thread can report progress meanwhile.
    ``max_events`` >= 0 stops after that many allocations (rows not finished by then keep
    a NaN finish): ``max_events=1`` gives the first rates alone.
    """
    n, n_links = bits.size, cap.size
    finish = np.full(n, np.nan)
    start_rate = np.full(n, np.nan)
    remaining = bits.copy()
    done = bits <= 0
    for r in range(n):
        if done[r]:
            finish[r] = start[r]
            probe[0] += 1
    order = np.argsort(start, kind="mergesort")
    order = order[~done[order]]  # rows still to start, by start time
    t_start = start[order]
    cptr, crow = _by_link(n_links, rptr, col, done)
    dropped = 0  # rows done since the CSC was last built
    rate = np.zeros(n)
    since = np.zeros(n)
    proj = np.full(n, _INF)
    unfrozen = np.zeros(n, dtype=np.bool_)
    seq = np.empty(n, dtype=np.int64)  # sending rows, in nondecreasing rate
    ubuf = np.empty(n, dtype=np.int64)
    fin = np.empty(n, dtype=np.int64)
    stack = np.empty(64 + 2 * n, dtype=np.int64)
    rem = cap.copy()
    scratch = (np.zeros(n_links), np.full(n_links, _INF), np.empty(n_links, dtype=np.int64),
               np.zeros(n_links, dtype=np.int64), np.empty(n_links, dtype=np.int64),
               np.empty(n_links, dtype=np.int64), np.empty(n_links), np.empty(n, dtype=np.int64),
               np.zeros(n_links, dtype=np.int64))
    groups = (np.full(n_links, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64),
              np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
    stamp = 0
    size = 1
    while size < max(n, 1):
        size *= 2
    tree = np.full(2 * size, _INF)
    times = np.empty(2 * n + 2)
    tr_row = np.empty(4 * n + 16 if trace else 0, dtype=np.int64)
    tr_t = np.empty(tr_row.size)
    tr_rate = np.empty(tr_row.size)
    ntr = 0
    nt = rounds = nxt = nseq = nfin = 0
    t = 0.0
    while (nxt < order.size or nseq - nfin > 0) and nt != max_events:
        arrival = start[order[nxt]] if nxt < order.size else _INF
        if nfin == 0 or nseq - nfin == 0 or arrival <= t * (1 + tie) + 1e-300:
            # cold: settle everyone, admit arrivals, allocate from scratch
            for i in range(nseq):
                r = seq[i]
                if not done[r]:
                    remaining[r] -= rate[r] * (t - since[r])
            nxt = np.searchsorted(t_start, t + tie * max(t, 1e-12), side="right")
            nu = 0
            for i in range(nxt):
                r = order[i]
                if not done[r]:
                    ubuf[nu] = r
                    nu += 1
            if nu == 0:
                _tree_update(tree, size, proj, seq, 0, nseq, 0)
                t = start[order[nxt]]
                nseq = nfin = 0
                continue
            if dropped * 2 > n:  # drop finished rows from the per-link lists
                cptr, crow = _by_link(n_links, rptr, col, done)
                dropped = 0
            rem[:] = cap
            for i in range(nu):
                unfrozen[ubuf[i]] = True
            stamp += 1
            rounds += _fill(ubuf, nu, rptr, col, coef, cptr, crow, rate, unfrozen, rem, seq,
                            0, 0.0, stamp, tie, scratch, groups, -1)
            old, nseq = nseq, nu
            for i in range(nu):
                r = seq[i]
                since[r] = t
                proj[r] = t + remaining[r] / rate[r]
                if np.isnan(start_rate[r]):
                    start_rate[r] = rate[r]
            if trace:
                tr_row, tr_t, tr_rate, ntr = _record(tr_row, tr_t, tr_rate, ntr, seq, 0, nu,
                                                     t, rate)
            _tree_update(tree, size, proj, seq, 0, max(old, nseq), nseq)
        else:
            # warm (module docstring): refill the suffix of seq at or above x_F
            x_f = _INF
            for i in range(nfin):
                x_f = min(x_f, rate[fin[i]])
            cut = x_f * (1 - tie)
            lo, hi = 0, nseq
            while lo < hi:
                mid = (lo + hi) // 2
                if rate[seq[mid]] >= cut:
                    hi = mid
                else:
                    lo = mid + 1
            s, nu, nl = lo, 0, 0
            stamp += 1
            for p in range(s, nseq):  # their load off the links; demand of those to refill
                r = seq[p]
                x = rate[r]
                for e in range(rptr[r], rptr[r + 1]):
                    rem[col[e]] += coef[e] * x
                rate[r] = 0.0
                if not done[r]:
                    remaining[r] -= x * (t - since[r])
                    since[r] = t
                    unfrozen[r] = True
                    ubuf[nu] = r
                    nu += 1
                    nl = _note(r, rptr, col, coef, scratch, stamp, nl)
            floor = rate[seq[s - 1]] if s > 0 else 0.0
            if nu:
                rounds += _fill(ubuf, nu, rptr, col, coef, cptr, crow, rate, unfrozen, rem,
                                seq, s, floor, stamp, tie, scratch, groups, nl)
            old, nseq = nseq, s + nu
            for p in range(s, nseq):
                r = seq[p]
                proj[r] = t + remaining[r] / rate[r]
            if trace:
                tr_row, tr_t, tr_rate, ntr = _record(tr_row, tr_t, tr_rate, ntr, seq, s, nseq,
                                                     t, rate)
            _tree_update(tree, size, proj, seq, s, old, nseq)
        times[nt] = t
        nt += 1
        arrival = start[order[nxt]] if nxt < order.size else _INF
        t_next = min(tree[1], arrival)
        # rows finishing at t_next: those within tie of it, or by t_next * (1 + tolerance)
        reach = t + (t_next - t) * (1 + tie)
        if tolerance > 0:
            reach = max(reach, t_next * (1 + tolerance))
        reach = reach * (1 + 1e-12) + 1e-300
        nfin = 0
        top = 0
        stack[0] = 1
        top = 1
        while top:
            top -= 1
            node = stack[top]
            if tree[node] > reach:
                continue
            if node >= size:
                r = seq[node - size]
                p = proj[r]
                if p - t <= (t_next - t) * (1 + tie) or (
                        tolerance > 0 and p <= t_next * (1 + tolerance)):
                    fin[nfin] = r
                    nfin += 1
                continue
            stack[top] = 2 * node
            stack[top + 1] = 2 * node + 1
            top += 2
        if tolerance > 0 and nfin > 1:
            # coalesced: they leave together at the mean of their projected finishes,
            # weighted by rate, so on a link the capacity-time the early leavers keep and
            # the late ones give up cancel; each is reported at its own projected finish
            sw, sp = 0.0, 0.0
            for i in range(nfin):
                r = fin[i]
                sw += rate[r]
                sp += rate[r] * proj[r]
            t_next = min(max(sp / sw, t_next), arrival)
        for i in range(nfin):
            r = fin[i]
            finish[r] = proj[r] if tolerance > 0 else t_next
            remaining[r] = 0.0
            done[r] = True
            proj[r] = _INF
            _join(groups, r, -1)
        if trace:
            tr_row, tr_t, tr_rate, ntr = _record(tr_row, tr_t, tr_rate, ntr, fin, 0, nfin,
                                                 -1.0, finish)
        dropped += nfin
        probe[0] += nfin
        probe[1] += 1
        t = t_next
    for r in range(n):
        if np.isnan(start_rate[r]):
            start_rate[r] = 0.0
    return finish, start_rate, times[:nt], rounds, tr_row[:ntr], tr_t[:ntr], tr_rate[:ntr]


@njit(cache=True)
def _record(tr_row: np.ndarray, tr_t: np.ndarray, tr_rate: np.ndarray, ntr: int,
            rows: np.ndarray, lo: int, hi: int, t: float, value: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Append ``rows[lo:hi]`` to the trace, growing it by doubling. ``t`` >= 0: each row
    got ``value[row]`` as its rate at ``t``; ``t`` < 0: each row finished at ``value[row]``
    (its rate is 0 from then on)."""
    need = ntr + hi - lo
    if need > tr_row.size:
        grow = max(need, 2 * tr_row.size)
        r2, t2, x2 = np.empty(grow, dtype=np.int64), np.empty(grow), np.empty(grow)
        r2[:ntr], t2[:ntr], x2[:ntr] = tr_row[:ntr], tr_t[:ntr], tr_rate[:ntr]
        tr_row, tr_t, tr_rate = r2, t2, x2
    for i in range(lo, hi):
        r = rows[i]
        tr_row[ntr] = r
        if t >= 0:
            tr_t[ntr] = t
            tr_rate[ntr] = value[r]
        else:
            tr_t[ntr] = value[r]
            tr_rate[ntr] = 0.0
        ntr += 1
    return tr_row, tr_t, tr_rate, ntr


def run(cap: np.ndarray, rptr: np.ndarray, col: np.ndarray, coef: np.ndarray,
        bits: np.ndarray, start: np.ndarray, tolerance: float, tie: float, trace: bool = False,
        probe: np.ndarray | None = None, max_events: int = -1
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray,
                   np.ndarray]:
    """``events`` with its arguments in the one layout it is compiled (and cached) for:
    another dtype or a strided view would cost a second compilation. ``probe``: a float64
    array of at least two counters (``events``), or None; ``max_events``: ``events``."""
    f8, i8 = np.float64, np.int64
    if probe is None:
        probe = np.zeros(2)
    if probe.dtype != f8 or probe.ndim != 1 or probe.size < 2:
        raise ValueError("probe must be a 1-D float64 array of at least two counters")
    return events(*(np.ascontiguousarray(a, dtype=d) for a, d in
                    ((cap, f8), (rptr, i8), (col, i8), (coef, f8), (bits, f8), (start, f8))),
                  float(tolerance), float(tie), bool(trace), probe, int(max_events))


def warm() -> None:
    """Compile ``events`` into Numba's on-disk cache now (``make setup`` calls this), so the
    first model run does not wait for the compiler."""
    run(np.array([2.0, 1.0]), np.array([0, 2, 3]), np.array([0, 1, 0]), np.ones(3),
        np.array([1.0, 2.0]), np.array([0.0, 0.5]), 0.0, 1e-9)


if __name__ == "__main__":
    warm()
