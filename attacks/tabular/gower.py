"""Gower's distance between table records (Gower 1971), and what one pass over a release gives: each record's distance
to its closest released record (DCR) and the release's kernel density. Records are values [n, D], the label among the
columns; each number's span is the schema's public one, never the data's range (which would leak through the score).
Distance: the mean over columns of 0/1 for a categorical mismatch and |a - b| / span for a number. Density: p(x) = (1/k)
sum_r exp(-D G(x, r) / b), a product kernel whose integral depends on x alone, so it cancels in DOMIAS's ratio
(`attacks.tabular.domias`) and is left unnormalised."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the kernel's bandwidth per column (`release_statistics`): a column's full mismatch costs a factor e
BANDWIDTH = 1.0
#: distances held at once: a block of pool records times the release (float32, ~64 MB)
BLOCK_CELLS = 1 << 24


@dataclass(frozen=True)
class TableColumns:
    """Plain public facts of a table's D columns (the features in order, the label last)."""

    categorical: np.ndarray  # bool [D]: which columns are categorical (the label is)
    span: np.ndarray  # float64 [D]: a number's public upper - lower bound (1 for a categorical column)
    sizes: np.ndarray  # int64 [D]: cells of each column's discrete domain (categories, or bins)

    def __post_init__(self) -> None:
        categorical = np.asarray(self.categorical, dtype=bool)
        span = np.where(categorical, 1.0, np.asarray(self.span, dtype=np.float64))
        sizes = np.asarray(self.sizes, dtype=np.int64)
        if not categorical.ndim == span.ndim == sizes.ndim == 1 or not len(categorical) == len(span) == len(sizes):
            raise ValueError(f"categorical, span and sizes must be [D] each, got {categorical.shape}, {span.shape}")
        if not (span > 0).all() or not (sizes >= 1).all():
            raise ValueError("every number's span and every column's size must be positive")
        object.__setattr__(self, "categorical", categorical)
        object.__setattr__(self, "span", span)
        object.__setattr__(self, "sizes", sizes)


def _one_hot(values: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """float32 [n, sum(depth)]: each categorical column's index as a one-hot block."""
    offsets = np.concatenate([[0], np.cumsum(depth)[:-1]])
    out = np.zeros((len(values), int(depth.sum())), dtype=np.float32)
    rows = np.repeat(np.arange(len(values)), values.shape[1])
    out[rows, (values.astype(np.int64) + offsets).ravel()] = 1.0
    return out


def gower_blocks(x: np.ndarray, release: np.ndarray, columns: TableColumns, *, block_cells: int = BLOCK_CELLS):
    """Yield (start, G) for blocks of x [n, D]: Gower's distances float32 [b, k] of rows start..start+b
    to every row of release [k, D], b * k <= block_cells (at least one row). Categorical mismatches are
    exact; numbers are added in float32 (relative error ~1e-7)."""
    x, release = np.asarray(x, dtype=np.float64), np.asarray(release, dtype=np.float64)
    if x.ndim != 2 or release.ndim != 2 or not x.shape[1] == release.shape[1] == len(columns.categorical):
        raise ValueError(f"records must be [n, {len(columns.categorical)}], got {x.shape} and {release.shape}")
    cat, num = columns.categorical, ~columns.categorical
    depth = np.maximum(x[:, cat].max(0, initial=0), release[:, cat].max(0, initial=0)).astype(np.int64) + 1
    release_hot = _one_hot(release[:, cat], depth).T
    scaled_release = (release[:, num] / columns.span[num]).astype(np.float32)
    n_cat, width = int(cat.sum()), len(cat)
    rows = max(1, block_cells // max(1, len(release)))
    for start in range(0, len(x), rows):
        block = x[start : start + rows]
        distance = _one_hot(block[:, cat], depth) @ release_hot  # matching categorical columns
        np.subtract(n_cat, distance, out=distance)  # mismatched ones
        step = np.empty_like(distance)
        for value, released in zip((block[:, num] / columns.span[num]).astype(np.float32).T, scaled_release.T):
            np.subtract.outer(value, released, out=step)
            distance += np.abs(step, out=step)
        distance /= np.float32(width)
        yield start, distance


def gower_distances(x: np.ndarray, release: np.ndarray, columns: TableColumns) -> np.ndarray:
    """Gower's distances float32 [n, k] of every row of x [n, D] to every row of release [k, D]."""
    return np.concatenate([g for _, g in gower_blocks(x, release, columns)]) if len(x) else np.zeros((0, len(release)))


def nearest_and_density(
    x: np.ndarray, release: np.ndarray, columns: TableColumns, *, bandwidth: float = BANDWIDTH
) -> tuple[np.ndarray, np.ndarray]:
    """(Gower's distance of each row of x [n, D] to its closest row of release [k, D], k >= 1;
    the release's log kernel density at it, log (1/k) sum_r exp(-D G(x, r) / bandwidth)), float64 [n] each."""
    if len(release) == 0:
        raise ValueError("the release is empty")
    nearest, log_density = np.empty(len(x)), np.empty(len(x))
    scale = len(columns.categorical) / bandwidth
    for start, distance in gower_blocks(x, release, columns):
        stop = start + len(distance)
        closest = distance.min(1)
        nearest[start:stop] = closest
        # log sum_r exp(-scale G) shifted by the closest record's term, which is 1: stable at any bandwidth
        distance -= closest[:, None]
        distance *= np.float32(-scale)
        kernel_sum = np.exp(distance, out=distance).sum(1, dtype=np.float64)
        log_density[start:stop] = np.log(kernel_sum) - scale * nearest[start:stop] - np.log(len(release))
    return nearest, log_density
