"""Released counts calibrated per record: a record's count in each view (a column of the domain extension, `support`; a
counting query, `queries`) set against its own counts in the reference runs where it is OUT, so that one leaking view is
not buried by the noise of its other views, nor one record's leak by other records' noise. Where a pipeline reads one
column's categories from its rows and the rest from a public schema, the leaking count is the largest deviation from the
record's own OUT runs (docs/results/third-party.md, "A one-column domain leak")."""

from __future__ import annotations

import numpy as np

from attacks.tabular.queries import count_statistic

#: the prior on a view's OUT variance: one pseudo-observation at the variance of Anscombe's transform
#: of a Poisson count
PRIOR_VARIANCE = 1.0


def calibrated_counts(counts: np.ndarray, keep: np.ndarray, targets, *, shadows: np.ndarray) -> np.ndarray:
    """Scores [T, n]: per record, the largest over its views of (A(c) - m) / sqrt(v), c the target's
    count, A Anscombe's 2 sqrt(c + 3/8) (`count_statistic`), m the mean of A over the record's k OUT
    shadow runs and v = (S + PRIOR_VARIANCE) / k, S their sum of squared deviations from m: their
    variance with one pseudo-observation of the prior's (counts [R, n, K], keep bool [R, n],
    shadows bool [T, R], each target's reference runs). A record with no OUT shadow scores 0.

    The prior keeps a view whose OUT runs all agree finite and makes it count more the more runs
    agree: a cell the release never reaches without the record (0 in each of k OUT runs) scores a
    target's count c there as (A(c) - A(0)) sqrt(k), and a target's 0 there scores 0, a tie with
    its OUT runs; a view whose OUT counts spread scores in units of that spread."""
    stats = count_statistic(counts) - count_statistic(0)  # [R, n, K]; shifted so a count of 0 is exactly 0
    out = (~np.asarray(keep, dtype=bool)).astype(np.float64)[..., None]  # [R, n, 1]
    weights = np.asarray(shadows, dtype=np.float64)  # [T, R]
    k = np.einsum("tr,rnj->tnj", weights, out)  # [T, n, 1]: each target's OUT shadows per record
    mean = np.einsum("tr,rnk->tnk", weights, out * stats) / np.maximum(k, 1)
    squares = np.einsum("tr,rnk->tnk", weights, out * stats**2)
    spread = np.maximum(squares - k * mean**2, 0.0)
    z = (stats[targets] - mean) / np.sqrt((spread + PRIOR_VARIANCE) / np.maximum(k, 1))
    return np.where(k[..., 0] > 0, z.max(axis=-1), 0.0)
