"""RMIA (Zarifzadeh, Liu, Shokri and Shokri, "Low-Cost High-Power Membership Inference Attacks", ICML 2024): per target
t and query view v, with p_t(x) the target's true-label probability and Pr(x) the reference probability,

    score_t(x) = mean over v of |{z in Z : r_t(x) > gamma * r_t(z)}| / |Z|,  r_t(x) = p_t(x) / Pr(x)

Pr(x) comes from the target's reference runs only: the mean of p(x) over all of them (online), or
((1 + a) P_out(x) + (1 - a)) / 2 (offline). The population Z is the whole pool (the paper's known
non-members would be chosen by the target's coins), so a score reads no coin it is judged on, as
the one-run epsilon bound of `audit.stats.epsilon` requires; members in Z cost power, not validity."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from attacks.lira import check_shadow_inputs

_MIN_PR = np.finfo(np.float64).tiny  # keeps Pr(x) = 0 (probabilities that underflow) from dividing by zero


def _check_inputs(stats: np.ndarray, keep: np.ndarray, shadows: np.ndarray, targets=None) -> np.ndarray | None:
    """The shapes of `attacks.lira.check_shadow_inputs`, plus, given targets, one row of `shadows` per
    target and no target among any target's shadows. Returns the targets as an int array."""
    check_shadow_inputs(stats, keep, shadows)
    if targets is None:
        return None
    targets = np.asarray(targets, dtype=np.int64).reshape(-1)
    if len(targets) != len(shadows):
        raise ValueError(f"shadows must have one row per target: {len(shadows)} rows for {len(targets)} targets")
    if targets.size and (targets.min() < 0 or targets.max() >= len(stats)):
        raise ValueError(f"targets must lie in [0, {len(stats)}), got {targets.tolist()}")
    if shadows[:, targets].any():
        raise ValueError("a target run must not be a shadow of any target (its coins would enter the scores)")
    return targets


def _check_gamma(gamma: float) -> float:
    gamma = float(gamma)
    if not (np.isfinite(gamma) and gamma >= 1.0):
        raise ValueError(f"gamma must be a finite number >= 1, got {gamma!r}")
    return gamma


def _over_shadows(shadows: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Sum over each target's shadow runs: a [R, ...] -> [T, ...]."""
    return (shadows.astype(np.float64) @ a.reshape(len(a), -1)).reshape((len(shadows),) + a.shape[1:])


def _relative_scores(p_target: np.ndarray, pr: np.ndarray, gamma: float) -> np.ndarray:
    """p_target, pr [T, n, Q] -> scores [T, n]: per target and view, the fraction of the pool z
    with r(x) > gamma * r(z), r = p_target / pr; then the mean over views."""
    ratio = p_target / np.maximum(pr, _MIN_PR)
    n_targets, n, q = ratio.shape
    counts = np.empty(ratio.shape)
    for t in range(n_targets):
        for v in range(q):
            r = ratio[t, :, v]
            # number of z with gamma * r(z) < r(x), strictly
            counts[t, :, v] = np.searchsorted(np.sort(gamma * r), r, side="left")
    return (counts / n).mean(-1)


def rmia_online(stats: np.ndarray, keep: np.ndarray, targets, *, shadows: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """Online RMIA scores [T, n] in [0, 1]: Pr(x) = mean of p(x) over all the target's shadow runs. stats [R, n, Q]
    (`logit_confidence`), keep bool [R, n] (shapes only: online RMIA needs no coin), `shadows` bool [T, R]."""
    targets = _check_inputs(stats, keep, shadows, targets)
    gamma = _check_gamma(gamma)
    p = expit(stats)
    pr = _over_shadows(shadows, p) / shadows.sum(1)[:, None, None]
    return _relative_scores(p[targets], pr, gamma)


def fit_offline_a(stats: np.ndarray, keep: np.ndarray, shadows: np.ndarray) -> np.ndarray:
    """a [T] of offline RMIA, per target from its shadow runs only: (1 - mean p over IN observations) /
    (1 - mean p over OUT observations), pooled over examples and views, clipped to [0, 1]. ValueError
    if a target's shadows hold no IN (or no OUT) observation."""
    _check_inputs(stats, keep, shadows)
    q = stats.shape[2]
    miss = expit(-stats)  # 1 - p, without the cancellation of 1 - expit(phi) for confident models
    in_count = _over_shadows(shadows, keep.astype(np.float64)).sum(1) * q
    out_count = _over_shadows(shadows, (~keep).astype(np.float64)).sum(1) * q
    if (in_count == 0).any():
        raise ValueError(
            f"offline RMIA cannot fit a: the shadows of target(s) {np.flatnonzero(in_count == 0).tolist()} "
            "hold no IN observation; pass a explicitly"
        )
    if (out_count == 0).any():
        raise ValueError(
            f"offline RMIA cannot fit a: the shadows of target(s) {np.flatnonzero(out_count == 0).tolist()} "
            "hold no OUT observation"
        )
    miss_in = _over_shadows(shadows, keep[..., None] * miss).sum((1, 2)) / in_count
    miss_out = _over_shadows(shadows, ~keep[..., None] * miss).sum((1, 2)) / out_count
    a = np.divide(miss_in, miss_out, out=np.ones_like(miss_in), where=miss_out > 0)  # OUT saturated: P_in = P_out
    return np.clip(a, 0.0, 1.0)


def rmia_offline(
    stats: np.ndarray, keep: np.ndarray, targets, *, shadows: np.ndarray, gamma: float = 1.0, a=None
) -> np.ndarray:
    """Offline RMIA scores [T, n] in [0, 1]: Pr(x) = ((1 + a) P_out(x) + (1 - a)) / 2, P_out(x) the mean
    of p(x) over the target's OUT shadows (over the examples that have one where x has none). `a` in
    [0, 1], one per target, or None: `fit_offline_a`."""
    targets = _check_inputs(stats, keep, shadows, targets)
    gamma = _check_gamma(gamma)
    if a is None:
        a = fit_offline_a(stats, keep, shadows)
    a = np.broadcast_to(np.asarray(a, dtype=np.float64), (len(targets),))
    if not ((a >= 0) & (a <= 1)).all():
        raise ValueError(f"a must lie in [0, 1], got {a.tolist()}")
    p = expit(stats)
    out = ~keep
    count = _over_shadows(shadows, out.astype(np.float64))  # [T, n]: OUT shadows of each example
    has = count > 0
    if not has.any(1).all():
        raise ValueError(f"offline RMIA needs OUT shadows: target(s) {np.flatnonzero(~has.any(1)).tolist()} have none")
    p_out = _over_shadows(shadows, out[..., None] * p) / np.maximum(count, 1)[..., None]
    fill = (p_out * has[..., None]).sum(1, keepdims=True) / has.sum(1)[:, None, None]  # [T, 1, Q]
    p_out = np.where(has[..., None], p_out, fill)
    pr = ((1 + a[:, None, None]) * p_out + (1 - a[:, None, None])) / 2
    return _relative_scores(p[targets], pr, gamma)
