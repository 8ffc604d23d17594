"""GAN-Leaks (Chen, Yu, Zhang and Fritz, CCS 2020) against conditional generators: the scores, a
pure numpy function of the reconstruction losses a generator victim's run stores (`RECON_KINDS`;
the searches are `victims.latent_search`). An example scores minus its loss, or, calibrated, minus
its loss less its mean loss under the OUT shadow runs; LiRA on the loss lives in `audit.evaluate`."""

from __future__ import annotations

import numpy as np

RECON_KINDS = ("fbb", "pbb", "wb")


def reconstruction_scores(loss: np.ndarray) -> np.ndarray:
    """GAN-Leaks' uncalibrated scores: minus the reconstruction loss (higher = member)."""
    return -np.asarray(loss, dtype=np.float64)


def reference_losses(loss: np.ndarray, keep: np.ndarray, shadows: np.ndarray) -> np.ndarray:
    """Each example's mean loss over each target's shadow runs that did not train on it: loss [R, n], keep bool [R, n],
    shadows bool [T, R] -> float64 [T, n]. An example without an OUT shadow takes the mean OUT loss of all examples."""
    loss = np.asarray(loss, dtype=np.float64)
    out = (~keep).astype(np.float64)
    s = shadows.astype(np.float64)
    count, total = s @ out, s @ (out * loss)
    overall = total.sum(1, keepdims=True) / np.maximum(count.sum(1, keepdims=True), 1)
    return np.where(count > 0, total / np.maximum(count, 1), overall)


def calibrated_scores(loss: np.ndarray, keep: np.ndarray, targets, *, shadows: np.ndarray) -> np.ndarray:
    """Calibrated GAN-Leaks scores [T, n]: minus (the target's loss - the example's reference
    loss), the reference being its mean loss under the target's OUT shadows (`reference_losses`)."""
    loss = np.asarray(loss, dtype=np.float64)
    if loss.shape != keep.shape or shadows.shape != (len(targets), len(loss)):
        raise ValueError(
            f"loss and keep must be [R, n] and shadows [T, R], got {loss.shape}, {keep.shape}, {shadows.shape}"
        )
    return -(loss[np.asarray(targets)] - reference_losses(loss, keep, shadows))


def log_loss_statistic(loss: np.ndarray) -> np.ndarray:
    """LiRA's statistic from reconstruction losses: minus their log, [R, n] -> [R, n, 1]; losses floored at 1e-12."""
    return -np.log(np.maximum(np.asarray(loss, dtype=np.float64), 1e-12))[..., None]
