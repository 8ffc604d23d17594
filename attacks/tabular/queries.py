"""A query attack on a released table, after TAPAS's target-centred counting queries (Houssiau et
al., 2022): how many released records match the target on the full record and on every pair of
columns (the 2-way marginals synthesizers preserve), on the public discrete domain. Each count
goes through Anscombe's 2 sqrt(c + 3/8), which makes its variance about constant, and the score
is the mean over the queries of online LiRA, each query a view (`attacks.lira.lira_online`)."""

from __future__ import annotations

from itertools import combinations

import numpy as np

from attacks.lira import lira_online


def queries(n_columns: int) -> tuple[tuple[int, ...], ...]:
    """The columns of each query: the full record, then every pair (in `itertools.combinations` order);
    with two columns the full record is the one pair."""
    everything = tuple(range(n_columns))
    return (everything, *(combinations(everything, 2) if n_columns > 2 else ()))


def match_counts(pool_codes: np.ndarray, release_codes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """int32 [n, Q]: per query (`queries`), how many rows of release_codes [k, D] match each row of
    pool_codes [n, D] on its columns; codes are cells 0..sizes[c]-1 of each column's domain."""
    pool_codes, release_codes = np.asarray(pool_codes, dtype=np.int64), np.asarray(release_codes, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if (
        pool_codes.ndim != 2
        or release_codes.ndim != 2
        or not pool_codes.shape[1] == release_codes.shape[1] == len(sizes)
    ):
        raise ValueError(
            f"codes must be [n, {len(sizes)}] and [k, {len(sizes)}], got {pool_codes.shape}, {release_codes.shape}"
        )
    for codes in (pool_codes, release_codes):
        if len(codes) and ((codes < 0) | (codes >= sizes)).any():
            raise ValueError("a code lies outside its column's domain")
    n = len(pool_codes)
    _, cells = np.unique(np.vstack([pool_codes, release_codes]), axis=0, return_inverse=True)
    cells = cells.reshape(-1)
    found = [np.bincount(cells[n:], minlength=cells.max(initial=0) + 1)[cells[:n]]]
    for a, b in queries(len(sizes))[1:]:
        size = int(sizes[a] * sizes[b])
        released = np.bincount(release_codes[:, a] * sizes[b] + release_codes[:, b], minlength=size)
        found.append(released[pool_codes[:, a] * sizes[b] + pool_codes[:, b]])
    return np.stack(found, axis=1).astype(np.int32)


def count_statistic(counts: np.ndarray) -> np.ndarray:
    """Anscombe's variance-stabilising transform of counts: 2 sqrt(c + 3/8), float64."""
    return 2.0 * np.sqrt(np.asarray(counts, dtype=np.float64) + 0.375)


def query_scores(
    counts: np.ndarray, keep: np.ndarray, targets, *, shadows: np.ndarray, variance: str, block_cells: int = 1 << 19
) -> np.ndarray:
    """Scores [T, n]: the mean over queries of online LiRA on `count_statistic` of counts [R, n, Q],
    fitted on each target's shadow runs (bool [T, R]); taken a block of queries at a time, the same."""
    n_runs, n, n_queries = counts.shape
    width = max(1, block_cells // max(1, n_runs * n))
    total = 0.0
    for q in range(0, n_queries, width):
        block = count_statistic(counts[..., q : q + width])
        total = total + block.shape[2] * lira_online(block, keep, targets, shadows=shadows, variance=variance)
    return total / n_queries
