"""GAN-Leaks (Chen, Yu, Zhang and Fritz, CCS 2020) against conditional generators: the scores.

An example the generator was trained on is easier to reconstruct: some latent code z makes
G(z, y) close to it. A generator victim's run reconstructs every pool example with its trained
generator and stores one reconstruction loss per attack kind (`RECON_KINDS`): `fbb` (full
black-box: nearest generated sample of the class), `pbb` (partial black-box: Powell over z) and
`wb` (white-box: gradient descent on z); the searches, which need torch and the generator, are
`victims.latent_search`. Each attack scores an example by minus its reconstruction loss
(`reconstruction_scores`).

Scoring is a pure numpy function of the stored losses: `calibrated_scores` subtracts each
example's mean loss under the generators that did not see it (GAN-Leaks' calibration, with the
OUT shadow runs as reference generators); LiRA on the reconstruction loss (`log_loss_statistic`)
lives in `audit.evaluate`.
"""

from __future__ import annotations

import numpy as np

RECON_KINDS = ("fbb", "pbb", "wb")


def reconstruction_scores(loss: np.ndarray) -> np.ndarray:
    """GAN-Leaks' uncalibrated scores: minus the reconstruction loss (higher = member)."""
    return -np.asarray(loss, dtype=np.float64)


def reference_losses(loss: np.ndarray, keep: np.ndarray, shadows: np.ndarray) -> np.ndarray:
    """Each example's mean loss over each target's shadow runs that did not train on it.

    loss [R, n], keep bool [R, n], shadows bool [T, R] -> float64 [T, n]. An example without an
    OUT shadow falls back to the mean OUT loss of all examples (with R reference runs an example
    has none with probability 2^-R under fair coins)."""
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
    """LiRA's statistic from reconstruction losses: minus their log, [R, n] -> [R, n, 1] (one
    query). Squared errors are positive and skewed; their log is closer to the Gaussian that
    LiRA fits per example. Losses are floored at 1e-12 (an exact reconstruction)."""
    return -np.log(np.maximum(np.asarray(loss, dtype=np.float64), 1e-12))[..., None]
