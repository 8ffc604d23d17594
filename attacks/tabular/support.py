"""The domain-extension attacks: released records that only the target record could have put there.

`domain_extension` (`support`): a pool record alone in holding a category, or a number beyond every other pool record's,
is the only one that can open that part of the domain for a pipeline that reads its domain from its rows
(`victims.bugs.MarginalsDomainFromData`); it scores how many released records lie there, column by column (`support`
sums the columns; `support_cal` calibrates each on the record's OUT reference runs, `attacks.tabular.calibrated`). Under
a public domain it tells nothing. `pair_extension` (`pairs`): the same on pairs of discrete columns, summed over the
pairs a record alone holds; on a marginal-based pipeline it reads the record's own count through the noise, testing the
noise itself (`MarginalsNoiseForTen`; worst case: `--canary-kind unheld`).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np


def domain_extension(pool_values: np.ndarray, release_values: np.ndarray, categorical: np.ndarray) -> np.ndarray:
    """float64 [n, D]: per pool record (values [n, D], the label last) and column, the released records
    (values [k, D]) in the part of that column's domain only the record holds among the pool's records
    (0 in a column where it holds nothing alone)."""
    pool_values = np.asarray(pool_values, dtype=np.float64)
    release_values = np.asarray(release_values, dtype=np.float64)
    score = np.zeros(pool_values.shape)
    for j in range(pool_values.shape[1]):
        column, released = pool_values[:, j], release_values[:, j]
        if categorical[j]:
            values, counts = np.unique(column, return_counts=True)
            alone = np.isin(column, values[counts == 1])
            score[alone, j] = [np.count_nonzero(released == v) for v in column[alone]]
            continue
        for side in (1.0, -1.0):  # above every other record, then below
            top = side * column
            order = np.argsort(-top, kind="stable")
            if len(order) < 2 or top[order[0]] == top[order[1]]:
                continue  # the extreme is shared: no record opens it alone
            record, others = order[0], top[order[1]]
            score[record, j] += np.count_nonzero((side * released > others) & (side * released <= top[record]))
    return score


def pair_extension(pool_codes: np.ndarray, release_codes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """float64 [n]: per pool record (cells [n, D], the label last), the released records (cells [k, D])
    matching it on a pair of columns, summed over the pairs no other pool record matches it on."""
    pool_codes = np.asarray(pool_codes, dtype=np.int64)
    release_codes = np.asarray(release_codes, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    score = np.zeros(len(pool_codes))
    for a, b in combinations(range(len(sizes)), 2):
        size = int(sizes[a] * sizes[b])
        cell = pool_codes[:, a] * sizes[b] + pool_codes[:, b]
        alone = np.bincount(cell, minlength=size)[cell] == 1
        released = np.bincount(release_codes[:, a] * sizes[b] + release_codes[:, b], minlength=size)
        score[alone] += released[cell[alone]]
    return score
