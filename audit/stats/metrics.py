"""Membership-inference metrics on attack scores: higher means more likely a member, and threshold t
predicts "member iff score >= t"."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from audit.stats import epsilon as _epsilon
from audit.stats.epsilon import as_score_array
from audit.stats.guesses import bounds_of
from audit.stats.mechanism import SubsampledGaussian

FPR_LEVELS = (0.1, 0.01, 0.001)


def _scores(member_scores, nonmember_scores) -> tuple[np.ndarray, np.ndarray]:
    member = as_score_array(member_scores, name="member_scores")
    nonmember = as_score_array(nonmember_scores, name="nonmember_scores")
    return member, nonmember


def _count_at_or_above(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    return scores.size - np.searchsorted(np.sort(scores), thresholds, side="left")


def _roc_counts(member: np.ndarray, nonmember: np.ndarray):
    """Thresholds (+inf, then distinct scores descending) with TP and FP counts."""
    distinct = np.unique(np.concatenate([member, nonmember]))[::-1]
    thresholds = np.concatenate([[np.inf], distinct])
    return thresholds, _count_at_or_above(member, thresholds), _count_at_or_above(nonmember, thresholds)


def roc(member_scores, nonmember_scores) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) from (0, 0) (threshold +inf) to (1, 1), one point per distinct score (ties: one diagonal step)."""
    member, nonmember = _scores(member_scores, nonmember_scores)
    _, true_pos, false_pos = _roc_counts(member, nonmember)
    return false_pos / nonmember.size, true_pos / member.size


def auc(member_scores, nonmember_scores) -> float:
    """P(S_member > S_nonmember) + 0.5 P(tie), via Mann–Whitney average ranks."""
    member, nonmember = _scores(member_scores, nonmember_scores)
    ranks = stats.rankdata(np.concatenate([member, nonmember]))
    u_statistic = ranks[: member.size].sum() - member.size * (member.size + 1) / 2
    return float(u_statistic / (member.size * nonmember.size))


def tpr_at_fpr(member_scores, nonmember_scores, fpr: float) -> tuple[float, int]:
    """Largest TPR over thresholds with empirical FPR <= ``fpr``, and the false positives of the highest
    threshold reaching it; (0.0, 0) when only +inf qualifies."""
    if not 0.0 <= fpr <= 1.0:
        raise ValueError(f"fpr must be in [0, 1], got {fpr}")
    member, nonmember = _scores(member_scores, nonmember_scores)
    _, true_pos, false_pos = _roc_counts(member, nonmember)
    last_feasible = np.flatnonzero(false_pos / nonmember.size <= fpr)[-1]
    best = np.searchsorted(true_pos, true_pos[last_feasible], side="left")
    return float(true_pos[best] / member.size), int(false_pos[best])


def _best_threshold(member: np.ndarray, nonmember: np.ndarray) -> float:
    """Threshold maximising TPR - FPR, placed midway in the gap of scores realising it."""
    thresholds, true_pos, false_pos = _roc_counts(member, nonmember)
    best = int(np.argmax(true_pos / member.size - false_pos / nonmember.size))
    if best == 0:
        return np.inf  # nobody predicted a member
    if best == thresholds.size - 1:
        return -np.inf  # everybody predicted a member
    return float((thresholds[best] + thresholds[best + 1]) / 2)


def _youden(member: np.ndarray, nonmember: np.ndarray, threshold: float) -> float:
    return float(np.mean(member >= threshold) - np.mean(nonmember >= threshold))


def _halves(scores: np.ndarray, rng: np.random.Generator):
    shuffled = rng.permutation(scores)
    return shuffled[: scores.size // 2], shuffled[scores.size // 2 :]


def advantage(member_scores, nonmember_scores, *, rng: np.random.Generator | int | None = None) -> float:
    """Membership advantage TPR - FPR, the threshold fitted on one random half and judged on the other,
    averaged over both folds (out of sample: slightly negative without signal)."""
    member, nonmember = _scores(member_scores, nonmember_scores)
    if member.size < 2 or nonmember.size < 2:
        raise ValueError(
            f"advantage needs at least 2 scores per group, got {member.size} members and {nonmember.size} non-members"
        )
    generator = np.random.default_rng(rng)
    member_a, member_b = _halves(member, generator)
    nonmember_a, nonmember_b = _halves(nonmember, generator)
    fold_ab = _youden(member_b, nonmember_b, _best_threshold(member_a, nonmember_a))
    fold_ba = _youden(member_a, nonmember_a, _best_threshold(member_b, nonmember_b))
    return (fold_ab + fold_ba) / 2


def eps_hat(member_scores, nonmember_scores, *, fpr_levels=FPR_LEVELS) -> float:
    """Point estimate max over levels of ln(TPR / FPR_realised), floored at 0 (levels with fp or TPR 0
    skipped). NOT a lower bound on ε: chosen and judged on the same scores, it overestimates;
    use ``audit.stats.epsilon.epsilon_lower_bound``."""
    member, nonmember = _scores(member_scores, nonmember_scores)
    if len(fpr_levels) == 0:
        raise ValueError(f"fpr_levels must be non-empty, got {fpr_levels!r}")
    estimates = [0.0]
    for level in fpr_levels:
        tpr, false_pos = tpr_at_fpr(member, nonmember, level)
        if false_pos > 0 and tpr > 0:
            estimates.append(float(np.log(tpr / (false_pos / nonmember.size))))
    return max(estimates)


@dataclass(frozen=True, eq=False)
class MembershipScores:
    """Member and non-member attack scores (1-d, finite, non-empty), read-only."""

    member: np.ndarray
    nonmember: np.ndarray

    def __post_init__(self) -> None:
        for name in ("member", "nonmember"):
            array = as_score_array(getattr(self, name), name=name).copy()
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    def roc(self) -> tuple[np.ndarray, np.ndarray]:
        return roc(self.member, self.nonmember)

    def auc(self) -> float:
        return auc(self.member, self.nonmember)

    def tpr_at_fpr(self, fpr: float) -> tuple[float, int]:
        return tpr_at_fpr(self.member, self.nonmember, fpr)

    def advantage(self, *, rng: np.random.Generator | int | None = None) -> float:
        return advantage(self.member, self.nonmember, rng=rng)

    def eps_hat(self, *, fpr_levels=FPR_LEVELS) -> float:
        return eps_hat(self.member, self.nonmember, fpr_levels=fpr_levels)

    def epsilon_lower_bound(
        self,
        *,
        delta: float = 0.0,
        confidence: float = 0.95,
        rng: np.random.Generator | int | None = None,
    ) -> float:
        return _epsilon.epsilon_lower_bound(self.member, self.nonmember, delta=delta, confidence=confidence, rng=rng)

    def summary(
        self,
        *,
        delta: float = 0.0,
        confidence: float = 0.95,
        rng: np.random.Generator | int | None = None,
        epsilon: bool = True,
        tuned: dict | None = None,
        tie_rng: np.random.Generator | int | list[int] | None = None,
        mechanism: SubsampledGaussian | None = None,
    ) -> dict:
        """All headline numbers (keys: docs/contracts.md "Per-attack entry"). With `epsilon` (canaries of independent
        fair coins) also `eps_hat` and every bound of `audit.stats.guesses.bounds_of` under `guess_rule` "tuned" (counts
        `tuned`, chosen without these coins) or "grid"; without, leakage statistics only. `tie_rng` orders ties
        (default: a child of `rng`)."""
        advantage_rng, epsilon_rng = np.random.default_rng(rng).spawn(2)
        rates = {str(level): self.tpr_at_fpr(level) for level in FPR_LEVELS}
        summary = {
            "auc": self.auc(),
            "advantage": float(self.advantage(rng=advantage_rng)),
            "tpr_at_fpr": {key: float(tpr) for key, (tpr, _) in rates.items()},
            "fp_at_fpr": {key: int(fp) for key, (_, fp) in rates.items()},
            "n_members": int(self.member.size),
            "n_nonmembers": int(self.nonmember.size),
        }
        if epsilon:
            summary.update(
                {
                    "eps_hat": float(self.eps_hat()),
                    **bounds_of(
                        self.member,
                        self.nonmember,
                        delta=delta,
                        confidence=confidence,
                        rng=epsilon_rng if tie_rng is None else tie_rng,
                        tuned=tuned,
                        mechanism=mechanism,
                    ),
                    "confidence": float(confidence),
                    "delta": float(delta),
                }
            )
        return summary
