"""The verdicts in plain words, on hand-made numbers: each given only when the numbers support it."""

import math

import numpy as np
import pytest

from audit.compare import Experiment, Interval, MetricComparison
from audit.report import Audited, claim_of, highest_risk, joint_bounds
from audit.verdict import (EPSILON_CONSISTENT, EPSILON_VIOLATED, GAIN_OVER_SUBSET, NO_EPSILON_CLAIM,
                           NO_GAIN_OVER_SUBSET, Verdict, epsilon_verdict, subset_verdict)


def test_a_bound_above_the_claim_is_a_violation_naming_the_attack():
    v = epsilon_verdict({"loss": 0.4, "lira_online": 1.3, "dcr": 2.0}, claimed_epsilon=1.0, delta=1e-5,
                        confidence=0.95, source="formal")
    assert v.kind == EPSILON_VIOLATED and v.text == "claimed ε violated at 95% confidence"
    assert v.evidence == ("dcr", "lira_online")  # largest first; loss (0.4 <= 1) is not evidence
    assert "dcr: ε ≥ 2.00; lira_online: ε ≥ 1.30" in v.reason and "formal ε = 1 (δ = 1e-05)" in v.reason


def test_bounds_at_or_below_the_claim_are_consistent_but_not_a_proof():
    # A bound equal to the claim does not violate it (the test is strict: ε_lower > ε).
    v = epsilon_verdict({"loss": 1.0, "lira_online": 0.25}, claimed_epsilon=1.0, delta=0.0, confidence=0.95)
    assert v.kind == EPSILON_CONSISTENT and v.text == "leakage consistent with the claimed ε"
    assert "ε ≥ 1.00 (loss)" in v.reason and "does not prove the claim" in v.reason and not v.alarming


def test_no_claim_says_so():
    v = epsilon_verdict({"loss": 0.3, "dcr": 2.5}, claimed_epsilon=None, delta=0.0, confidence=0.95)
    assert v.kind == NO_EPSILON_CLAIM and v.text == "no ε claim was checked"
    assert "the largest ε lower bound found is 2.50 (dcr)" in v.reason


def test_verdict_kinds_are_checked():
    with pytest.raises(ValueError, match="'maybe'"):
        Verdict("maybe", "", "")



def comparison(metric, point, p_adjusted, *, attack="lira_online", group="all", alpha=0.05):
    return MetricComparison(attack=attack, group=group, metric=metric, difference=Interval(point, point - 0.01, point + 0.01),
                            p_value=p_adjusted / 2, p_adjusted=p_adjusted, significant=p_adjusted < alpha)


def test_a_significantly_lower_attack_metric_is_a_gain_over_the_subset():
    tests = [comparison("test_accuracy", 0.1, 0.001, attack=None, group=None), comparison("auc", -0.04, 0.01),
             comparison("eps_lower", -0.5, 0.2)]
    v = subset_verdict(tests, baseline_label="subset ipc=1", alpha=0.05)
    assert v.kind == GAIN_OVER_SUBSET and v.evidence == ("lira_online/auc",)
    assert "3 Holm-adjusted tests" in v.reason and "Test accuracy +0.100 against the subset (significantly higher)" in v.reason


def test_no_significant_gain_is_no_measurable_advantage_and_a_loss_is_named():
    tests = [comparison("auc", -0.04, 0.08), comparison("tpr_at_fpr_0.01", 0.02, 0.03),
             # a significant gain on a sub-group alone does not count (the verdict is on all members)
             comparison("auc", -0.2, 0.001, group="init"),
             # test accuracy is no privacy metric, however significant
             comparison("test_accuracy", -0.3, 0.001, attack=None, group=None)]
    v = subset_verdict(tests, baseline_label="subset ipc=1", alpha=0.05)
    assert v.kind == NO_GAIN_OVER_SUBSET
    assert v.text == "no measurable advantage over publishing a random real subset of the same size"
    assert "none of the 2 attack metrics" in v.reason and "leaks significantly more on lira_online tpr_at_fpr_0.01" in v.reason
    assert v.evidence == ("lira_online/tpr_at_fpr_0.01",)


def fake(scores, membership, summary=None):
    scores, membership = np.asarray(scores, float), np.asarray(membership, bool)
    exp = Experiment(path="fake", summary={"victim": "dm", "attacks": {}, **(summary or {})}, membership=membership,
                     init=np.zeros_like(membership), scores={"loss": scores, "dcr": scores}, test_accuracy=[0.5])
    return Audited(experiment=exp, meta={}, runs=(), label="fake")


def test_the_claim_checked_is_the_given_one_then_the_recorded_one_then_the_formal_one():
    base = {"formal_epsilon": 8.0, "delta": 1e-5}
    a = fake([[1, 0]], [[True, False]], base)
    assert (claim_of(a).epsilon, claim_of(a).delta, claim_of(a).source) == (8.0, 1e-5, "formal")
    assert (claim_of(a, epsilon=2.0).epsilon, claim_of(a, epsilon=2.0).delta) == (2.0, 1e-5)
    recorded = fake([[1, 0]], [[True, False]], {**base, "claimed_epsilon": 3.0, "claimed_delta": 0.0})
    assert (claim_of(recorded).epsilon, claim_of(recorded).delta, claim_of(recorded).source) == (3.0, 0.0, "claimed")
    assert claim_of(fake([[1, 0]], [[True, False]])) is None


def test_joint_bounds_are_each_at_the_bonferroni_level():
    # Perfectly separated scores, 200 per side: the split leaves 100 + 100, zero errors, so each
    # bound is ln((1 - FNR_ub) / FPR_ub) with both Clopper-Pearson bounds at alpha/2 per attack.
    # Two attacks at 95% jointly: each at 97.5%, alpha/2 = 0.0125; FPR_ub = 1 - 0.0125^(1/100).
    member = np.r_[np.ones(200), np.zeros(200)][None]
    a = fake(np.where(member, 1.0, 0.0), member.astype(bool))  # candidate thresholds {0, 1}: t = 1 separates
    up = 1 - 0.0125 ** (1 / 100)
    expected = math.log((1 - up) / up)
    bounds = joint_bounds(a, delta=0.0, confidence=0.95, seed=0)
    assert bounds == pytest.approx({"loss": expected, "dcr": expected}, rel=1e-9)


def test_highest_risk_averages_over_the_targets_holding_an_example():
    # 2 targets, 4 examples; target 0 holds #0 and #3, target 1 holds #0 and #1.
    scores = [[3.0, 0.0, 0.5, 2.5], [1.0, 2.0, 0.0, 0.5]]
    membership = [[True, False, False, True], [True, True, False, False]]
    risk = highest_risk(fake(scores, membership), attack="loss", top_k=3)
    # means as member: #0 (3 + 1) / 2 = 2, #3 2.5 (target 0 only), #1 2.0 (target 1 only); #2 never a member.
    # ties keep pool order: #3 (2.5), #0 (2.0), #1 (2.0).
    assert [r["index"] for r in risk] == [3, 0, 1]
    assert [r["mean_score"] for r in risk] == [2.5, 2.0, 2.0]
    # share of the target's non-members below: #3 in target 0 beats {0, 0.5} -> 1; #0: 1 in t0, in t1
    # beats {0 (#2), 0.5 (#3)} -> 1; #1 in t1 beats both -> 1.
    assert [r["nonmember_percentile"] for r in risk] == [1.0, 1.0, 1.0]
    assert [r["member_targets"] for r in risk] == [1, 2, 1]
