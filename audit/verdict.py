"""Verdicts in plain words, each given only when the numbers behind it support it.

Two questions are answered for every audited experiment:

* Is the leakage consistent with an ε claim? `epsilon_verdict` takes, per attack, an ε lower
  bound that holds *jointly* with the other attacks' bounds at `confidence` (the report
  recomputes each attack's bound at confidence 1 - (1 - confidence) / m for m attacks,
  Bonferroni, so that "some attack shows ε > claimed" is itself a 95% statement).
  - "claimed ε violated at 95% confidence" when some bound exceeds the claimed ε (the
    attacks that do are named);
  - "leakage consistent with the claimed ε" when every bound is at most the claimed ε. The
    bounds are lower bounds: this says that these attacks found no violation, not that the
    claim is proven;
  - "no ε claim was checked" when the victim has no formal ε and none was claimed.
* Is the release any better than publishing a random real subset of the same size?
  `subset_verdict` reads the tests of an `audit.compare.Comparison` (victim minus `subset`,
  Holm-adjusted): "no measurable advantage over publishing a random real subset of the same
  size" when no attack metric of the victim is significantly *lower* than the subset's (a
  privacy gain); "measurably less leakage than a random real subset of the same size" when
  some is (named). `no_subset_verdict` says that the question was not checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from audit.compare import MetricComparison

EPSILON_VIOLATED = "epsilon_violated"
EPSILON_CONSISTENT = "epsilon_consistent"
NO_EPSILON_CLAIM = "no_epsilon_claim"
NO_GAIN_OVER_SUBSET = "no_gain_over_subset"
GAIN_OVER_SUBSET = "gain_over_subset"
NO_SUBSET_BASELINE = "no_subset_baseline"
KINDS = (EPSILON_VIOLATED, EPSILON_CONSISTENT, NO_EPSILON_CLAIM, NO_GAIN_OVER_SUBSET, GAIN_OVER_SUBSET,
         NO_SUBSET_BASELINE)
#: the metrics where "lower" means "less leakage" (every attack metric audit.compare tests)
PRIVACY_METRICS = ("auc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001", "eps_lower")


@dataclass(frozen=True)
class Verdict:
    """One verdict: its kind (one of KINDS), the plain-words sentence, and the numbers behind it."""

    kind: str
    text: str
    reason: str
    evidence: tuple[str, ...] = field(default=())  # the attacks (or attack/metric pairs) it rests on

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"verdict kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def alarming(self) -> bool:
        """A verdict a reader must not miss: a violated claim."""
        return self.kind == EPSILON_VIOLATED

    def to_json(self) -> dict:
        return {"kind": self.kind, "text": self.text, "reason": self.reason, "evidence": list(self.evidence)}


def epsilon_verdict(bounds: Mapping[str, float], *, claimed_epsilon: float | None, delta: float,
                    confidence: float, source: str = "claimed") -> Verdict:
    """The ε verdict from per-attack lower bounds that hold jointly at `confidence`.

    `source` says where the ε comes from ("formal" for an accountant's ε, "claimed" for the
    user's); `delta` is the δ the bounds were computed with.
    """
    if claimed_epsilon is None:
        best = _best(bounds)
        tail = f"; the largest ε lower bound found is {best[1]:.2f} ({best[0]})" if best else ""
        return Verdict(NO_EPSILON_CLAIM, "no ε claim was checked",
                       f"the victim has no formal ε and none was claimed with --claimed-epsilon{tail}")
    if not (isinstance(claimed_epsilon, (int, float)) and claimed_epsilon >= 0 and not math.isnan(claimed_epsilon)):
        raise ValueError(f"claimed_epsilon must be a number >= 0, got {claimed_epsilon!r}")
    if not bounds:
        raise ValueError("epsilon_verdict needs at least one attack's bound")
    level = f"{confidence:.0%}"
    claim = f"{source} ε = {claimed_epsilon:g} (δ = {delta:g})"
    violated = {a: b for a, b in bounds.items() if b > claimed_epsilon}
    if violated:
        worst = sorted(violated.items(), key=lambda item: -item[1])
        details = "; ".join(f"{a}: ε ≥ {b:.2f}" for a, b in worst)
        return Verdict(EPSILON_VIOLATED, f"claimed ε violated at {level} confidence",
                       f"{details} exceeds the {claim}; the {len(bounds)} attacks' bounds hold jointly at "
                       f"{level} (Bonferroni)", evidence=tuple(a for a, _ in worst))
    attack, best = _best(bounds)
    return Verdict(EPSILON_CONSISTENT, "leakage consistent with the claimed ε",
                   f"every attack's ε lower bound ({level}, jointly over {len(bounds)} attacks) is at most the "
                   f"{claim}; the largest is ε ≥ {best:.2f} ({attack}). A lower bound below the claim means these "
                   f"attacks found no violation; it does not prove the claim")


def _best(bounds: Mapping[str, float]) -> tuple[str, float] | None:
    if not bounds:
        return None
    return max(bounds.items(), key=lambda item: item[1])


def subset_verdict(tests: Sequence[MetricComparison], *, baseline_label: str, alpha: float) -> Verdict:
    """The baseline verdict from `audit.compare` tests of victim - subset (Holm-adjusted already).

    Only the pooled group ("all") of each attack counts. A gain is a privacy metric
    significantly lower than the subset's.
    """
    privacy = [t for t in tests if t.attack is not None and t.group == "all" and t.metric in PRIVACY_METRICS]
    if not privacy:
        raise ValueError("subset_verdict needs at least one attack metric compared with the subset")
    gains = [t for t in privacy if t.significant and t.difference.point < 0]
    losses = [t for t in privacy if t.significant and t.difference.point > 0]
    accuracy = next((t for t in tests if t.metric == "test_accuracy"), None)
    family = f"{len(tests)} Holm-adjusted tests at α = {alpha:g}"
    if gains:
        return Verdict(GAIN_OVER_SUBSET, "measurably less leakage than a random real subset of the same size",
                       f"significantly lower than {baseline_label} on {_list(gains)} ({family})"
                       + _accuracy_note(accuracy), evidence=tuple(_key(t) for t in gains))
    reason = (f"none of the {len(privacy)} attack metrics is significantly lower than {baseline_label}'s "
              f"({family})")
    if losses:
        reason += f"; it leaks significantly more on {_list(losses)}"
    return Verdict(NO_GAIN_OVER_SUBSET, "no measurable advantage over publishing a random real subset of the same size",
                   reason + _accuracy_note(accuracy), evidence=tuple(_key(t) for t in losses))


def no_subset_verdict(why: str) -> Verdict:
    """The baseline question, not checked (`why` says what was missing)."""
    return Verdict(NO_SUBSET_BASELINE, "not compared with a random real subset of the same size", why)


def _key(test: MetricComparison) -> str:
    return f"{test.attack}/{test.metric}"


def _list(tests: Sequence[MetricComparison]) -> str:
    return ", ".join(f"{t.attack} {t.metric} ({t.difference.point:+.3g}, adjusted p = {t.p_adjusted:.3g})"
                     for t in tests)


def _accuracy_note(test: MetricComparison | None) -> str:
    if test is None:
        return ""
    change = "no significant difference" if not test.significant else (
        "significantly higher" if test.difference.point > 0 else "significantly lower")
    return f". Test accuracy {test.difference.point:+.3f} against the subset ({change})"
