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
"""

from __future__ import annotations

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
