"""DOMIAS (van Breugel, Sun, Qian & van der Schaar, AISTATS 2023): a record is more likely a member
when the release is denser at it than releases made without knowing it are. Score = log p_release(x)
- log p_reference(x): the target run's release density at the record (`attacks.tabular.gower`'s
kernel density) over the reference releases' density there, the mean of the densities of the
target's shadow runs' releases (the density of their union, of equal sizes). Those runs are IN or
OUT by coins that do not enter: the reference density is the population's, as DOMIAS's reference
data set is, so the score reads no coin at all, only the runs' releases.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


def domias_scores(log_density: np.ndarray, targets, *, shadows: np.ndarray) -> np.ndarray:
    """Scores [T, n]: log_density [R, n] (each run's log release density at every pool record) of
    each target run minus the log of the mean density over its shadow runs (bool [T, R], at least one
    per target)."""
    log_density, shadows = np.asarray(log_density, dtype=np.float64), np.asarray(shadows, dtype=bool)
    targets = np.asarray(targets).reshape(-1)
    if log_density.ndim != 2 or shadows.shape != (len(targets), len(log_density)) or not shadows.any(1).all():
        raise ValueError(
            f"log_density must be [R, n] and shadows bool [T, R] with a shadow per target, "
            f"got {log_density.shape} and {shadows.shape}"
        )
    reference = np.stack([logsumexp(log_density[row], axis=0) - np.log(row.sum()) for row in shadows])
    return log_density[targets] - reference
