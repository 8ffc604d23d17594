"""Distance to closest record (DCR): a release-level attack on synthetic sets. Score = minus the
Euclidean distance, in pixel space, from an example to the nearest released image of its class
(of any class where the release lacks its own)."""

from __future__ import annotations

import numpy as np


def nearest_distances(x: np.ndarray, release: np.ndarray, *, chunk: int = 4096) -> np.ndarray:
    """Euclidean distance from each row of x [n, d] to its nearest row of release [k, d] (k >= 1),
    in float64, by chunks of x so memory stays ~ chunk * k."""
    release = np.asarray(release, dtype=np.float64)
    release_sq = (release**2).sum(1)
    out = np.empty(len(x))
    for start in range(0, len(x), chunk):
        block = np.asarray(x[start : start + chunk], dtype=np.float64)
        squared = (block**2).sum(1)[:, None] + release_sq[None, :] - 2 * block @ release.T
        out[start : start + chunk] = np.sqrt(np.maximum(squared.min(1), 0.0))
    return out


def dcr_scores(x: np.ndarray, y: np.ndarray, release_x: np.ndarray, release_y: np.ndarray) -> np.ndarray:
    """Scores float64 [n] (higher = member) of pool images x [n, ...] with labels y [n] against
    release_x [k, ...] with labels release_y [k]."""
    if len(release_x) == 0:
        raise ValueError("the release is empty")
    x = np.asarray(x).reshape(len(x), -1)
    release_x = np.asarray(release_x).reshape(len(release_x), -1)
    if x.shape[1] != release_x.shape[1]:
        raise ValueError(f"pool images have {x.shape[1]} values, released images {release_x.shape[1]}")
    distances = np.empty(len(x))
    classes = np.unique(y)
    for c in classes:
        rows, same = y == c, release_y == c
        distances[rows] = nearest_distances(x[rows], release_x[same] if same.any() else release_x)
    return -distances
