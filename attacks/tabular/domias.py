"""DOMIAS (van Breugel, Sun, Qian & van der Schaar, AISTATS 2023): score = log p_release(x) -
log p_reference(x), the target run's release density at the record (`attacks.tabular.gower`) over
the mean density of its shadow runs' releases. Their coins do not enter, so the score reads no coin."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


def domias_scores(log_density: np.ndarray, targets, *, shadows: np.ndarray) -> np.ndarray:
    """Scores [T, n]: log_density [R, n] (each run's log release density at every pool record) of each target run minus
    the log of the mean density over its shadow runs (bool [T, R], at least one per target)."""
    log_density, shadows = np.asarray(log_density, dtype=np.float64), np.asarray(shadows, dtype=bool)
    targets = np.asarray(targets).reshape(-1)
    if log_density.ndim != 2 or shadows.shape != (len(targets), len(log_density)) or not shadows.any(1).all():
        raise ValueError(
            f"log_density must be [R, n] and shadows bool [T, R] with a shadow per target, "
            f"got {log_density.shape} and {shadows.shape}"
        )
    reference = np.stack([logsumexp(log_density[row], axis=0) - np.log(row.sum()) for row in shadows])
    return log_density[targets] - reference
