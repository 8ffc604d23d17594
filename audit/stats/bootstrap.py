"""Estimates of one audited experiment with a cluster bootstrap over its target runs, the independent
units (docs/contracts.md, "Comparing with the naive baseline"). AUC and TPRs come from per-target
count tables, exactly; `eps_lower` reruns the one-run bound per replicate, so its bootstrap is off
by default (`N_BOOT_EPS` = 0; costs in docs/performance.md).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

from audit.experiment import Experiment, experiment_labels
from audit.stats.epsilon import epsilon_ceiling, epsilon_lower_bound
from audit.stats.metrics import auc, tpr_at_fpr


GROUPS = ("all", "init", "other_members")
METRICS = ("auc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001", "eps_lower")
TPR_LEVELS = {"tpr_at_fpr_0.01": 0.01, "tpr_at_fpr_0.001": 0.001}
N_BOOT = 1000
N_BOOT_EPS = 0  # the one-run bound costs 0.1-2 s per replicate with signal: opt in with --n-boot-eps


@dataclass(frozen=True)
class Interval:
    """A point estimate with an interval (NaN bounds where none can be computed)."""

    point: float
    low: float
    high: float

    def to_json(self) -> dict:
        return {"point": _json_float(self.point), "low": _json_float(self.low), "high": _json_float(self.high)}


@dataclass(frozen=True, eq=False)
class GroupEstimate:
    """The metrics of one attack on one group of one experiment, with their bootstrap replicates."""

    attack: str
    group: str
    n_members: int
    n_nonmembers: int
    metrics: Mapping[str, Interval]  # the METRICS it has: no eps_lower for a sub-group or unfair coins
    replicates: Mapping[str, np.ndarray] = field(repr=False)  # only metrics that were resampled
    eps_ceiling: float | None = None  # what a perfect attack would certify with this design (with eps_lower)


@dataclass(frozen=True, eq=False)
class ExperimentSummary:
    """Intervals for one experiment: test accuracy, and every (attack, group) estimated."""

    experiment: Experiment
    label: str
    test_accuracy: Interval
    estimates: Mapping[tuple[str, str], GroupEstimate]
    confidence: float
    n_boot: int
    n_boot_eps: int


def summarise_experiment(
    exp: Experiment,
    *,
    attacks: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    confidence: float = 0.95,
    n_boot: int = N_BOOT,
    n_boot_eps: int = N_BOOT_EPS,
    rng: np.random.Generator | int | Sequence[int] | None = None,
    label: str | None = None,
) -> ExperimentSummary:
    """Point estimates and `confidence` percentile intervals of one experiment (default: every attack
    and group it has). AUC and TPRs use the first `n_boot` draws of the T targets, eps_lower (group
    `all`, fair coins only) the first `n_boot_eps`."""
    _check_positive("n_boot", n_boot)
    _check_positive("n_boot_eps", n_boot_eps, least=0)
    _check_level("confidence", confidence)
    exp = exp.natural_examples()
    attacks = list(exp.scores) if attacks is None else list(attacks)
    for attack in attacks:
        if attack not in exp.scores:
            raise ValueError(f"attack {attack!r} is not in {exp.path} (has: {', '.join(exp.scores)})")
    groups = _check_groups(GROUPS if groups is None else groups)
    generator = np.random.default_rng(rng)
    picks = generator.integers(exp.n_targets, size=(max(n_boot, n_boot_eps), exp.n_targets))
    weights = target_weights(picks[:n_boot], exp.n_targets)
    eps_seed = int(generator.integers(2**63))
    masks = exp.group_masks()
    estimates = {
        (attack, group): _estimate(
            exp,
            attack,
            group,
            masks[group],
            weights=weights,
            picks=picks[:n_boot_eps],
            confidence=confidence,
            eps_rng=_child(eps_seed, attack, group),
        )
        for attack in attacks
        for group in GROUPS
        if group in groups and group in masks
    }
    return ExperimentSummary(
        experiment=exp,
        label=label or experiment_labels([exp])[0],
        test_accuracy=t_interval(exp.test_accuracy, confidence=confidence),
        estimates=estimates,
        confidence=confidence,
        n_boot=n_boot,
        n_boot_eps=n_boot_eps,
    )


def _child(seed: int, attack: str, group: str) -> np.random.Generator:
    """The eps_lower tie-breaking of one (attack, group), independent of which others are estimated."""
    return np.random.default_rng([seed, zlib.crc32(f"{attack}/{group}".encode())])


def _estimate(
    exp: Experiment,
    attack: str,
    group: str,
    member_mask: np.ndarray,
    *,
    weights: np.ndarray,
    picks: np.ndarray,
    confidence: float,
    eps_rng: np.random.Generator,
) -> GroupEstimate:
    scores, nonmember_mask = exp.scores[attack], ~exp.membership
    member, nonmember = scores[member_mask], scores[nonmember_mask]  # pooled over targets, row-major
    points = {
        "auc": auc(member, nonmember),
        **{key: tpr_at_fpr(member, nonmember, fpr)[0] for key, fpr in TPR_LEVELS.items()},
    }
    replicates = resampled_metrics(scores, member_mask, nonmember_mask, weights)
    ceiling = None
    if group == "all" and exp.epsilon_applies(attack):
        points["eps_lower"] = _eps_point(exp, attack, member, nonmember, rng=eps_rng)
        ceiling = _eps_ceiling(exp, attack, member.size + nonmember.size)
        if len(picks):
            replicates["eps_lower"] = _eps_replicates(exp, scores, member_mask, nonmember_mask, picks, rng=eps_rng)
    metrics = {
        key: percentile_interval(points[key], replicates.get(key, ()), confidence=confidence)
        for key in METRICS
        if key in points
    }
    return GroupEstimate(
        attack=attack,
        group=group,
        n_members=member.size,
        n_nonmembers=nonmember.size,
        metrics=metrics,
        replicates=replicates,
        eps_ceiling=ceiling,
    )


def _eps_point(exp: Experiment, attack: str, member, nonmember, *, rng) -> float:
    """summary.json's eps_lower when it has one (the audit's own tie-breaking), else a fresh bound."""
    entry = exp.result.attacks.get(attack) or {}
    if isinstance(entry.get("eps_lower"), (int, float)):
        return float(entry["eps_lower"])
    return epsilon_lower_bound(member, nonmember, delta=exp.delta, confidence=exp.confidence, rng=rng)


def _eps_ceiling(exp: Experiment, attack: str, m: int) -> float:
    """summary.json's eps_ceiling when it has one, else m canaries' ceiling at the experiment's δ."""
    entry = exp.result.attacks.get(attack) or {}
    if isinstance(entry.get("eps_ceiling"), (int, float)):
        return float(entry["eps_ceiling"])
    return epsilon_ceiling(m, delta=exp.delta, confidence=exp.confidence)


def _eps_replicates(exp: Experiment, scores, member_mask, nonmember_mask, picks, *, rng) -> np.ndarray:
    """The one-run bound on each replicate (every canary of each drawn target; m is T x n each time)."""
    members = [s[m] for s, m in zip(scores, member_mask)]
    nonmembers = [s[m] for s, m in zip(scores, nonmember_mask)]
    out = np.full(len(picks), np.nan)
    for b, pick in enumerate(picks):
        member = np.concatenate([members[t] for t in pick])
        nonmember = np.concatenate([nonmembers[t] for t in pick])
        if member.size and nonmember.size:
            out[b] = epsilon_lower_bound(member, nonmember, delta=exp.delta, confidence=exp.confidence, rng=rng)
    return out


def target_weights(picks: np.ndarray, n_targets: int) -> np.ndarray:
    """[B, T] draw counts: how often each target appears in each row of `picks` [B, T]."""
    picks = np.asarray(picks)
    rows = np.repeat(np.arange(picks.shape[0]), picks.shape[1])
    flat = np.bincount(rows * n_targets + picks.ravel(), minlength=picks.shape[0] * n_targets)
    return flat.reshape(picks.shape[0], n_targets).astype(float)


def resampled_metrics(
    scores: np.ndarray, member_mask: np.ndarray, nonmember_mask: np.ndarray, weights: np.ndarray
) -> dict[str, np.ndarray]:
    """AUC and TPR at 1% and 0.1% FPR of bootstrap replicates without building them: replicate b, the
    pool of `weights[b, t]` copies of target t's scores [T, n], gets exactly what `audit.stats.metrics`
    gives on that pool (NaN where it has no members)."""
    weights = np.asarray(weights, dtype=float)
    members = [np.sort(s[m]) for s, m in zip(scores, member_mask)]
    nonmembers = [np.sort(s[m]) for s, m in zip(scores, nonmember_mask)]
    n_member = weights @ np.array([x.size for x in members], dtype=float)
    n_nonmember = weights @ np.array([x.size for x in nonmembers], dtype=float)
    wins = _pairwise_wins(members, nonmembers)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"auc": np.einsum("bt,ts,bs->b", weights, wins, weights) / (n_member * n_nonmember)}
        for key, fpr in TPR_LEVELS.items():
            out[key] = _resampled_true_positives(members, nonmembers, weights, n_nonmember, fpr) / n_member
    return out


def _pairwise_wins(members: list[np.ndarray], nonmembers: list[np.ndarray]) -> np.ndarray:
    """[T, T]: entry (t, s) counts pairs (member of t, non-member of s) the member wins, ties 1/2."""
    owner = np.repeat(np.arange(len(members)), [x.size for x in members])
    pooled = np.concatenate(members)
    wins = np.empty((len(members), len(nonmembers)))
    for s, sorted_nonmember in enumerate(nonmembers):
        below = np.searchsorted(sorted_nonmember, pooled, side="left")
        at_or_below = np.searchsorted(sorted_nonmember, pooled, side="right")
        wins[:, s] = np.bincount(owner, weights=below + at_or_below, minlength=len(members)) / 2
    return wins


def _resampled_true_positives(members, nonmembers, weights, n_nonmember, fpr: float) -> np.ndarray:
    """True positives at the largest TPR whose pooled FPR is <= fpr, per replicate (as tpr_at_fpr);
    thresholds below `low`, where every target alone exceeds fpr, are skipped."""
    spare = [min(int(math.floor(fpr * x.size)) + 2, x.size) for x in nonmembers]
    low = min(x[x.size - k] for x, k in zip(nonmembers, spare))
    pooled = np.concatenate(members + nonmembers)
    thresholds = np.unique(pooled[pooled >= low])  # ascending: true and false positives decrease
    true_pos = np.stack([x.size - np.searchsorted(x, thresholds, side="left") for x in members]).astype(float)
    false_pos = np.stack([x.size - np.searchsorted(x, thresholds, side="left") for x in nonmembers]).astype(float)
    out = np.zeros(len(weights))
    chunk = max(1, 2**22 // max(thresholds.size, 1))
    for start in range(0, len(weights), chunk):
        w = weights[start : start + chunk]
        with np.errstate(invalid="ignore", divide="ignore"):
            feasible = _weighted(w, false_pos) / n_nonmember[start : start + chunk, None] <= fpr
        first = feasible.argmax(axis=1)  # the lowest feasible threshold has the most true positives
        best = _weighted(w, true_pos)[np.arange(len(w)), first]
        out[start : start + chunk] = np.where(feasible.any(axis=1), best, 0.0)  # else only t = +inf
    return out


def _weighted(weights: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """weights [B, T] @ counts [T, V] by einsum (no BLAS threads for tiny products); exact on integer counts."""
    return np.einsum("bt,tv->bv", weights, counts)


def percentile_interval(point: float, replicates: np.ndarray, *, confidence: float = 0.95) -> Interval:
    """Percentile bootstrap interval around `point` (NaN replicates ignored; NaN bounds if none)."""
    finite = np.asarray(replicates, dtype=float)
    finite = finite[~np.isnan(finite)]
    if finite.size == 0:
        return Interval(float(point), math.nan, math.nan)
    low, high = np.quantile(finite, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Interval(float(point), float(low), float(high))


def t_interval(values, *, confidence: float = 0.95) -> Interval:
    """Mean with a Student t-interval (NaN bounds for a single value, the mean when all are equal)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if values.size < 2:
        return Interval(mean, math.nan, math.nan)
    if np.ptp(values) == 0:
        return Interval(mean, mean, mean)
    low, high = stats.t.interval(confidence, df=values.size - 1, loc=mean, scale=stats.sem(values))
    return Interval(mean, float(low), float(high))


def _json_float(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _check_positive(name: str, value: int, *, least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


def _check_level(name: str, value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value}")


def _check_groups(groups: Sequence[str]) -> list[str]:
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown group {unknown[0]!r} (known: {', '.join(GROUPS)})")
    return list(groups)
