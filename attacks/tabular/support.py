"""The domain-extension attack: released records that only the target record could have put there.

A pipeline that reads its domain from the private rows (categories, numeric bounds: the failure
the USENIX Security 2024 audit of synthetic-data libraries found most often,
`victims.dp.bugs.MarginalsDomainFromData`) releases nothing outside its members' values. A pool
record that holds a category no other pool record holds, or a number beyond every other pool
record's (above their largest, or below their smallest), is then the only record that can open
that part of the domain: released records there mean it was a member. Its score is how many
released records lie there: in its category, or between the other records' extreme and its own
value (inclusive of its own). A record with no such part of the domain scores 0, and so does every
record of a release whose domain is public (a correct pipeline puts records there with the same
probability whether the record is in or out, up to its own count's effect). The canaries of a table
(`--canary-kind extreme`: a number at a public bound no pool record reaches) are such records.

The same on pairs of columns (`pair_extension`, the attack `pairs`): a record that is the only pool
record holding its value combination on a pair of columns (on the public discrete domain,
`Schema.codes`) is the only record whose membership moves that pair's count; its score is how many
released records hold that combination, summed over every pair it alone holds. A marginal-based
pipeline (`marginals`: every (label, feature) marginal, noised) releases records there in
proportion to the noisy count, 1 + noise when the record is in and noise alone when it is out:
what the score reads is the record's own count through the pipeline's noise, so it tests the noise
itself (`victims.dp.bugs.MarginalsNoiseForTen`, noise for 10x the claimed epsilon), where `support`
tests the domain. The canaries that make this the worst case are `--canary-kind unheld`: each the
only record of its label in a feature cell the pool leaves empty, in every feature column.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np


def domain_extension(pool_values: np.ndarray, release_values: np.ndarray, categorical: np.ndarray) -> np.ndarray:
    """float64 [n]: per pool record (values [n, D], the label last), the released records (values [k, D])
    in the part of the domain only it holds among the pool's records (module docstring)."""
    pool_values = np.asarray(pool_values, dtype=np.float64)
    release_values = np.asarray(release_values, dtype=np.float64)
    score = np.zeros(len(pool_values))
    for j in range(pool_values.shape[1]):
        column, released = pool_values[:, j], release_values[:, j]
        if categorical[j]:
            values, counts = np.unique(column, return_counts=True)
            alone = np.isin(column, values[counts == 1])
            score[alone] += [np.count_nonzero(released == v) for v in column[alone]]
            continue
        for side in (1.0, -1.0):  # above every other record, then below
            top = side * column
            order = np.argsort(-top, kind="stable")
            if len(order) < 2 or top[order[0]] == top[order[1]]:
                continue  # the extreme is shared: no record opens it alone
            record, others = order[0], top[order[1]]
            score[record] += np.count_nonzero((side * released > others) & (side * released <= top[record]))
    return score


def pair_extension(pool_codes: np.ndarray, release_codes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """float64 [n]: per pool record (cells [n, D] of the discrete domain, the label last), the released
    records (cells [k, D]) matching it on a pair of columns, summed over the pairs on which no other
    pool record matches it (module docstring)."""
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
