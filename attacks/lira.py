"""LiRA (Carlini et al., 2022): a per-example likelihood-ratio test on logit-scaled confidences.
IN and OUT confidences are modelled as Gaussians fitted on the shadow runs; the target's
observation is scored by the likelihood ratio (online) or against the OUT fit alone (offline).
Query augmentations are averaged; every target's fits come at once from a [T, R] mask."""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr, logsumexp
from scipy.stats import norm

VARIANCES = ("per-example", "global", "fixed")
#: `--lira-variance auto` (the default) uses the per-example variance from this many reference
#: runs on, and the fixed variance below it (see `variance_for`).
PER_EXAMPLE_FROM = 256
_MIN_VAR = 1e-8  # keeps a saturated example (identical confidences) from dividing by zero


def logit_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """phi = log(p_y / (1 - p_y)) = z_y - logsumexp_{j != y} z_j, computed stably: logits [..., n, Q, C],
    labels [n] -> float64 [..., n, Q]."""
    logits = np.asarray(logits, dtype=np.float64)
    index = np.broadcast_to(labels.reshape(-1, 1, 1), logits.shape[:-1] + (1,))
    true = np.take_along_axis(logits, index, axis=-1)[..., 0]
    others = logits.copy()
    np.put_along_axis(others, index, -np.inf, axis=-1)
    return true - logsumexp(others, axis=-1)


def _gaussian_fits(stats: np.ndarray, mask: np.ndarray, shadows: np.ndarray, variance: str):
    """Mean and variance per (target, example, query) of the stats of the shadow runs in which
    `mask` holds. stats [R, n, Q], mask bool [R, n], shadows bool [T, R] -> two arrays [T, n, Q]."""
    n_runs, n, q = stats.shape
    w = mask[..., None].astype(np.float64)
    s = shadows.astype(np.float64)

    def over_shadows(a):  # sum over each target's shadow runs: [R, n, Q] -> [T, n, Q]
        return (s @ np.broadcast_to(a, (n_runs, n, q)).reshape(n_runs, -1)).reshape(-1, n, q)

    count, total, squares = over_shadows(w), over_shadows(w * stats), over_shadows(w * stats**2)
    mean = total / np.maximum(count, 1)
    within = np.maximum(squares - total * mean, 0.0)  # sum of squared deviations per example
    dof = np.maximum(count - 1, 0).sum(1, keepdims=True)
    # Examples with no shadow on this side borrow the mean over all examples.
    global_mean = total.sum(1, keepdims=True) / np.maximum(count.sum(1, keepdims=True), 1)
    mean = np.where(count > 0, mean, global_mean)
    # "fixed" is the variance of all observations on this side, of all examples, around their
    # common mean: LiRA's public code (fix_variance, the standard deviation of every IN, resp.
    # OUT, observation). It includes the spread of the examples' means.
    across = (squares.sum(1, keepdims=True) / np.maximum(count.sum(1, keepdims=True), 1)) - global_mean**2
    # "global" pools the within-example variances of all examples (the spread around each
    # example's own mean); with a single shadow per example there is none, and `across` stands in.
    pooled = np.where(dof > 0, within.sum(1, keepdims=True) / np.maximum(dof, 1), across)
    if variance == "fixed":
        var = np.broadcast_to(across, mean.shape)
    elif variance == "global":
        var = np.broadcast_to(pooled, mean.shape)
    else:
        var = np.where(count > 1, within / np.maximum(count - 1, 1), pooled)
    return mean, np.maximum(var, _MIN_VAR)


def variance_for(choice: str, n_reference: int) -> str:
    """The variance for `--lira-variance choice` with `n_reference` reference runs: `choice`, or for "auto" the fixed
    variance below PER_EXAMPLE_FROM runs, per-example from there (docs/results/reference-runs.md)."""
    if choice == "auto":
        return "fixed" if n_reference < PER_EXAMPLE_FROM else "per-example"
    if choice not in VARIANCES:
        raise ValueError(f"--lira-variance must be auto or one of {VARIANCES}, got {choice!r}")
    return choice


def check_shadow_inputs(stats: np.ndarray, keep: np.ndarray, shadows: np.ndarray) -> None:
    """ValueError unless stats is [R, n, Q], keep [R, n] and shadows bool [T, R] with a shadow for
    every target: the inputs of every attack that calibrates on shadow runs (LiRA, RMIA)."""
    if stats.ndim != 3 or keep.shape != stats.shape[:2]:
        raise ValueError(f"stats must be [R, n, Q] and keep [R, n], got {stats.shape} and {keep.shape}")
    if shadows.ndim != 2 or shadows.shape[1] != stats.shape[0] or not shadows.any(1).all():
        raise ValueError(f"shadows must be bool [T, R] with a shadow for every target, got shape {shadows.shape}")


def _check(stats: np.ndarray, keep: np.ndarray, shadows: np.ndarray, variance: str) -> None:
    if variance not in VARIANCES:
        raise ValueError(f"variance must be one of {VARIANCES}, got {variance!r}")
    check_shadow_inputs(stats, keep, shadows)


def lira_online(
    stats: np.ndarray, keep: np.ndarray, targets, *, shadows: np.ndarray, variance: str = "per-example"
) -> np.ndarray:
    """Online LiRA scores [T, n]: mean over queries of log N(phi; IN fit) - log N(phi; OUT fit).
    stats [R, n, Q] (`logit_confidence`), keep bool [R, n], `shadows` bool [T, R] each target's shadows."""
    _check(stats, keep, shadows, variance)
    mu_in, var_in = _gaussian_fits(stats, keep, shadows, variance)
    mu_out, var_out = _gaussian_fits(stats, ~keep, shadows, variance)
    obs = stats[targets]
    ratio = norm.logpdf(obs, mu_in, np.sqrt(var_in)) - norm.logpdf(obs, mu_out, np.sqrt(var_out))
    return ratio.mean(-1)


def lira_offline(
    stats: np.ndarray, keep: np.ndarray, targets, *, shadows: np.ndarray, variance: str = "per-example"
) -> np.ndarray:
    """Offline LiRA scores [T, n]: mean over queries of log Pr[Z <= phi], Z ~ OUT fit (OUT shadows only)."""
    _check(stats, keep, shadows, variance)
    mu_out, var_out = _gaussian_fits(stats, ~keep, shadows, variance)
    return log_ndtr((stats[targets] - mu_out) / np.sqrt(var_out)).mean(-1)
