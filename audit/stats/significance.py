"""Is a victim measurably more private than the naive baseline, and at what utility cost?

Bootstrap differences with Wald p-values, Welch's t-test for accuracy, Holm-adjusted per comparison
(docs/contracts.md, "Comparing with the naive baseline").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

from audit.experiment import Experiment, experiment_labels
from audit.stats.bootstrap import (
    METRICS,
    N_BOOT,
    N_BOOT_EPS,
    ExperimentSummary,
    Interval,
    _check_level,
    _json_float,
    percentile_interval,
    summarise_experiment,
)


@dataclass(frozen=True)
class MetricComparison:
    """victim - baseline for one metric; attack and group are None for test accuracy."""

    attack: str | None
    group: str | None
    metric: str
    difference: Interval
    p_value: float
    p_adjusted: float
    significant: bool

    def to_json(self) -> dict:
        return {
            "attack": self.attack,
            "group": self.group,
            "metric": self.metric,
            "difference": self.difference.to_json(),
            "p_value": _json_float(self.p_value),
            "p_adjusted": _json_float(self.p_adjusted),
            "significant": self.significant,
        }


@dataclass(frozen=True, eq=False)
class Comparison:
    """One victim against one baseline: every test, Holm-adjusted together."""

    victim: ExperimentSummary
    baseline: ExperimentSummary
    alpha: float
    tests: tuple[MetricComparison, ...]

    def get(self, metric: str, attack: str | None = None, group: str | None = None) -> MetricComparison:
        for test in self.tests:
            if (test.metric, test.attack, test.group) == (metric, attack, group):
                return test
        raise KeyError((metric, attack, group))


@dataclass(frozen=True, eq=False)
class Report:
    """What `python -m audit.compare` prints and writes."""

    baseline: ExperimentSummary
    experiments: tuple[ExperimentSummary, ...]
    comparisons: tuple[Comparison, ...]  # one per experiment, same order
    seed: int
    alpha: float


def compare(victim: ExperimentSummary, baseline: ExperimentSummary, *, alpha: float = 0.05) -> Comparison:
    """Every metric of `victim` minus `baseline` (attack and group in both), tested, all p-values Holm-
    adjusted as one family. Needs at least two targets per side."""
    _check_level("alpha", alpha)
    for side in (victim, baseline):
        if side.experiment.n_targets < 2:
            raise ValueError(
                f"{side.experiment.path}: {side.experiment.n_targets} target run; "
                "a comparison needs at least 2 per side"
            )
    confidence = victim.confidence
    accuracy, accuracy_p = welch_test(
        victim.experiment.test_accuracy, baseline.experiment.test_accuracy, confidence=confidence
    )
    raw = [(None, None, "test_accuracy", accuracy, accuracy_p)]
    for key, estimate in victim.estimates.items():
        other = baseline.estimates.get(key)
        if other is None:
            continue
        for metric in METRICS:
            if metric not in estimate.replicates or metric not in other.replicates:
                continue  # eps_lower: not resampled (--n-boot-eps 0), a sub-group, or coins not fair
            difference, p = bootstrap_difference(
                estimate.metrics[metric].point,
                estimate.replicates[metric],
                other.metrics[metric].point,
                other.replicates[metric],
                confidence=confidence,
            )
            raw.append((*key, metric, difference, p))
    adjusted = holm([p for *_, p in raw])
    tests = tuple(
        MetricComparison(
            attack=a, group=g, metric=m, difference=d, p_value=p, p_adjusted=float(q), significant=bool(q < alpha)
        )
        for (a, g, m, d, p), q in zip(raw, adjusted)
    )
    return Comparison(victim=victim, baseline=baseline, alpha=alpha, tests=tests)


def bootstrap_difference(
    victim_point: float, victim_replicates, baseline_point: float, baseline_replicates, *, confidence: float = 0.95
) -> tuple[Interval, float]:
    """victim - baseline with a percentile interval of d* (replicate i of each side, independent draws;
    NaN pairs dropped) and p = 2 Phi(-|d| / sd(d*)); p = 1 with NaN bounds under two usable pairs."""
    n = min(len(victim_replicates), len(baseline_replicates))
    diffs = np.asarray(victim_replicates[:n], dtype=float) - np.asarray(baseline_replicates[:n], dtype=float)
    diffs = diffs[~np.isnan(diffs)]
    difference = victim_point - baseline_point
    interval = percentile_interval(difference, diffs, confidence=confidence)
    if diffs.size < 2:
        return interval, 1.0
    se = float(np.std(diffs, ddof=1))
    if se == 0:
        return interval, 1.0 if difference == 0 else 0.0
    return interval, float(2 * stats.norm.sf(abs(difference) / se))


def welch_test(victim, baseline, *, confidence: float = 0.95) -> tuple[Interval, float]:
    """mean(victim) - mean(baseline), Welch's t-interval and two-sided p (NaN bounds, p = 1: under two a side)."""
    victim, baseline = np.asarray(victim, dtype=float), np.asarray(baseline, dtype=float)
    point = float(victim.mean() - baseline.mean())
    if victim.size < 2 or baseline.size < 2:
        return Interval(point, math.nan, math.nan), 1.0
    if np.ptp(victim) == 0 and np.ptp(baseline) == 0:
        return Interval(point, point, point), 1.0 if point == 0 else 0.0
    result = stats.ttest_ind(victim, baseline, equal_var=False)
    ci = result.confidence_interval(confidence_level=confidence)
    return Interval(point, float(ci.low), float(ci.high)), float(result.pvalue)


def prediction_test(value: float, sample) -> tuple[float, float, float]:
    """(t, p_less, p_more): is `value` one more draw from the normal distribution `sample` (S values)
    comes from? t = (value - mean) / (s sqrt(1 + 1/S)) follows Student's t with S - 1 degrees of
    freedom (the prediction interval's pivot). S < 2: t NaN, p = 1 both ways."""
    sample = np.asarray(sample, dtype=float)
    if sample.size < 2:
        return math.nan, 1.0, 1.0
    mean, sd = float(sample.mean()), float(sample.std(ddof=1))
    if sd == 0:
        if value == mean:
            return 0.0, 1.0, 1.0
        return (-math.inf, 0.0, 1.0) if value < mean else (math.inf, 1.0, 0.0)
    t = (value - mean) / (sd * math.sqrt(1 + 1 / sample.size))
    df = sample.size - 1
    return float(t), float(stats.t.cdf(t, df)), float(stats.t.sf(t, df))


def holm(p_values) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values, in the input order (adjusted < alpha is Holm's step-down test)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    steps = np.maximum.accumulate((p.size - np.arange(p.size)) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, steps)
    return adjusted


def compare_experiments(
    experiments: Sequence[Experiment],
    baseline: Experiment,
    *,
    attacks: Sequence[str] | None = None,
    groups: Sequence[str] = ("all",),
    confidence: float = 0.95,
    alpha: float = 0.05,
    n_boot: int = N_BOOT,
    n_boot_eps: int = N_BOOT_EPS,
    seed: int = 0,
) -> Report:
    """Summarise the baseline and each experiment (independent child streams of `default_rng(seed)`)
    and compare each with the baseline, on the attacks all scored; ValueError on a missing attack,
    another dataset, or fewer than two targets."""
    experiments = [e for e in experiments if e.path.resolve() != baseline.path.resolve()]
    everything = [baseline, *experiments]
    if attacks is None:
        attacks = [a for a in baseline.scores if all(a in e.scores for e in everything)]
        if not attacks:
            raise ValueError("no attack was scored in every experiment")
    for exp in everything:
        missing = [a for a in attacks if a not in exp.scores]
        if missing:
            raise ValueError(f"attack {missing[0]!r} is not in {exp.path} (has: {', '.join(exp.scores)})")
        if exp.dataset != baseline.dataset:
            raise ValueError(f"{exp.path}: dataset {exp.dataset!r} differs from the baseline's {baseline.dataset!r}")
        if exp.n_targets < 2:
            raise ValueError(f"{exp.path}: {exp.n_targets} target run; a comparison needs at least 2")
    labels = experiment_labels(everything)
    streams = np.random.default_rng(seed).spawn(len(everything))
    summaries = [
        summarise_experiment(
            exp,
            attacks=attacks,
            groups=groups,
            confidence=confidence,
            n_boot=n_boot,
            n_boot_eps=n_boot_eps,
            rng=stream,
            label=label,
        )
        for exp, stream, label in zip(everything, streams, labels)
    ]
    comparisons = tuple(compare(s, summaries[0], alpha=alpha) for s in summaries[1:])
    return Report(
        baseline=summaries[0], experiments=tuple(summaries[1:]), comparisons=comparisons, seed=seed, alpha=alpha
    )
