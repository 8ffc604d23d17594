"""Attacks on a released table, computed once per run from arrays and the table's public column
facts (`TableColumns`), never from a schema object or the victims: Gower's DCR (`gower`), DOMIAS's
density (`domias`), TAPAS-style counting queries (`queries`), domain extension (`support`), and those
counts calibrated per record on the reference runs (`calibrated`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks.tabular.calibrated import calibrated_counts
from attacks.tabular.domias import domias_scores
from attacks.tabular.gower import BANDWIDTH, TableColumns, gower_distances, nearest_and_density
from attacks.tabular.queries import match_counts, queries, query_scores
from attacks.tabular.support import domain_extension, pair_extension


@dataclass(frozen=True)
class ReleaseStatistics:
    """What one run's released table gives at every pool record."""

    dcr: np.ndarray  # float64 [n]: minus Gower's distance to the closest released record (higher = member)
    log_density: np.ndarray  # float64 [n]: the release's log kernel density (`nearest_and_density`)
    counts: np.ndarray  # int32 [n, Q]: released records matching the record on each query (`match_counts`)
    support: (
        np.ndarray
    )  # float64 [n, D]: per column, released records where only the record could have opened the domain
    pair_support: np.ndarray  # float64 [n]: released records on the pairs of columns only the record holds


def release_statistics(
    pool_values: np.ndarray,
    pool_codes: np.ndarray,
    release_values: np.ndarray,
    release_codes: np.ndarray,
    columns: TableColumns,
) -> ReleaseStatistics:
    """`ReleaseStatistics` of a release (values [k, D] and codes [k, D], the label last) at every
    pool record (values [n, D] and codes [n, D]), on the table's public `columns`."""
    nearest, log_density = nearest_and_density(pool_values, release_values, columns, bandwidth=BANDWIDTH)
    return ReleaseStatistics(
        -nearest,
        log_density,
        match_counts(pool_codes, release_codes, columns.sizes),
        domain_extension(pool_values, release_values, columns.categorical),
        pair_extension(pool_codes, release_codes, columns.sizes),
    )


__all__ = [
    "BANDWIDTH",
    "ReleaseStatistics",
    "TableColumns",
    "calibrated_counts",
    "domias_scores",
    "gower_distances",
    "match_counts",
    "nearest_and_density",
    "queries",
    "query_scores",
    "release_statistics",
]
