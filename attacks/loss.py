"""The loss-threshold attack: a low loss on the target model means "member"."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-example cross-entropy: logits [..., n, C] and labels [n] -> float64 [..., n]."""
    logits = np.asarray(logits, dtype=np.float64)
    true = np.take_along_axis(logits, labels.reshape(-1, 1), axis=-1)[..., 0]
    return logsumexp(logits, axis=-1) - true


def loss_scores(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Membership scores of the loss attack (Yeom et al.): minus the loss on the image itself.
    logits [n, n_queries, C] of the target model (query 0 = the image itself) -> float64 [n]."""
    return -cross_entropy(logits[:, 0, :], labels)
