"""The verdicts in plain words, on hand-made numbers: each given only when the numbers support it."""

import math

import numpy as np
import pytest

from audit.result import AuditResult
from audit.claim import Claim
from audit.releases.leakage import prediction_test_name
from audit.reporting.build import Settings, _experiment_entry
from audit.reporting.evidence import highest_risk, verdict_evidence
from audit.results import Audited, Experiment
from audit.stats.bootstrap import Interval
from audit.stats.significance import MetricComparison
from audit.stats.epsilon import epsilon_ceiling
from audit.reporting.verdict import (
    EPSILON_CONSISTENT,
    EPSILON_NOT_TESTABLE,
    EPSILON_VIOLATED,
    GAIN_OVER_SUBSET,
    NO_EPSILON_CLAIM,
    NO_FAIR_COINS,
    NO_GAIN_OVER_SUBSET,
    Verdict,
    count,
    epsilon_verdict,
    most_certifiable,
    no_fair_coins_verdict,
    release_subset_verdict,
    subset_verdict,
)


def test_a_bound_above_the_claim_is_a_violation_naming_the_attack():
    v = epsilon_verdict(
        {"loss": 0.4, "lira_online": 1.3, "dcr": 2.0},
        ceiling=4.0,
        claim=Claim(1.0, source="formal"),
        delta=1e-5,
        confidence=0.95,
    )
    assert v.kind == EPSILON_VIOLATED and v.text == "claimed ε violated at 95% confidence" and v.alarming
    assert v.evidence == ("dcr", "lira_online")  # largest first; loss (0.4 <= 1) is not evidence
    assert "dcr: ε ≥ 2.00; lira_online: ε ≥ 1.30" in v.reason and "formal ε = 1 (δ = 1e-05)" in v.reason


def test_a_verdict_whose_attack_was_fixed_in_advance_says_so_not_that_the_references_chose_it():
    # summary.json's verdict.chosen_by "fixed": every attack's predicted bound on the reference runs was 0
    found = {"loss": 1.2}
    fixed = epsilon_verdict(
        found, ceiling=4.0, claim=Claim(1.0), delta=1e-5, confidence=0.95, rule="tuned", chosen_by="fixed"
    )
    assert fixed.kind == EPSILON_VIOLATED and "chosen on the reference runs" not in fixed.reason
    assert "the attack and its guess count were fixed before the audit" in fixed.reason
    chosen = epsilon_verdict(found, ceiling=4.0, claim=Claim(1.0), delta=1e-5, confidence=0.95, rule="tuned")
    assert "chosen on the reference runs before any target was judged" in chosen.reason
    declared = epsilon_verdict(
        found, ceiling=4.0, claim=Claim(1.0), delta=1e-5, confidence=0.95, rule="tuned", chosen_by="declared"
    )
    assert "the attack was declared before the audit (--verdict-attack) and its guess count chosen" in declared.reason


def test_a_formal_epsilon_is_stated_to_4_significant_digits():
    # an accountant's ε (PSG's at ε = 10, δ = 1e-5), stated as the audit's terminal line states it
    v = epsilon_verdict(
        {"loss": 0.02}, ceiling=8.99, claim=Claim(9.991745145076045, source="formal"), delta=1e-5, confidence=0.95
    )
    assert v.kind == EPSILON_NOT_TESTABLE
    assert v.reason.startswith("the formal ε = 9.992 (δ = 1e-05) is at or above ε ≈ 8.99") and "9.9917" not in v.reason


def test_bounds_at_or_below_a_testable_claim_are_consistent_but_not_a_proof():
    # A bound equal to the claim does not violate it (the test is strict: ε_lower > ε); the
    # claim 1 lies below the ceiling 3.5, so a perfect attack could have shown a violation.
    v = epsilon_verdict(
        {"loss": 1.0, "lira_online": 0.25},
        ceiling=3.5,
        claim=Claim(1.0),
        delta=0.0,
        confidence=0.95,
        n_canaries=3000,
    )
    assert v.kind == EPSILON_CONSISTENT and v.text == "leakage consistent with the claimed ε"
    assert "ε ≥ 1.00 (loss)" in v.reason and "does not prove the claim" in v.reason and not v.alarming
    # each attack's bound at 1 - 0.05 / 2 = 97.5%: the ceiling is stated at that level
    assert "perfect attack would have reached ε ≈ 3.50" in v.reason and "(3,000 canaries; δ = 0)" in v.reason
    assert "every ε lower bound (97.50% per attack, 95% jointly over 2 attacks (Bonferroni))" in v.reason


def test_the_canaries_are_said_to_be_the_coin_drawn_records_of_the_target_runs():
    # an audit without --canaries: m = 8 target runs x 1,500 examples, each IN by its own coin
    for claim in (Claim(1.0), Claim(9.992)):  # consistent (testable), then not testable
        v = epsilon_verdict(
            {"loss": 0.5}, ceiling=8.3, claim=claim, delta=1e-5, confidence=0.95, n_canaries=12_000, per_target=1_500
        )
        assert "(12,000 canaries, i.e. 1,500 coin-drawn records × 8 target runs; " in v.reason, v.reason


def test_an_attack_whose_ceiling_is_below_the_claim_is_named_as_blind():
    # pbb scored fewer canaries: its ceiling 1.5 is below the claim 2; the others could test it.
    v = epsilon_verdict(
        {"loss": 0.5, "ganleak_pbb": 0.2},
        ceiling={"loss": 4.0, "ganleak_pbb": 1.5},
        claim=Claim(2.0),
        delta=0.0,
        confidence=0.95,
    )
    assert v.kind == EPSILON_CONSISTENT and v.evidence == ("loss",)
    assert "ganleak_pbb scored too few canaries" in v.reason


def test_a_claim_at_or_above_the_ceiling_is_not_testable_and_says_how_many_canaries_would_test_it():
    # One attack, 95%, δ = 0: with m = 2^j canaries (j >= 12) the grid's guess counts are m / 2^k,
    # k = 0..11, each all IN or half IN: 24 points, alpha 0.05 / 24 each. A perfect attack's best
    # point guesses all m right, p-value p^m, so the ceiling is logit((0.05/24)^(1/m)):
    #   m = 4096: ln(0.05/24) / 4096 = -0.0015073 -> 1 - p = 0.0015062 -> ln(662.9) = 6.497 > 6;
    #   m = 2048 (23 points, r = 1 once): ln(0.05/23) / 2048 = -0.0029938 -> ln(333.5) = 5.810 < 6.
    # So 4096 canaries are needed: 3 target runs of 1,500 (ceil(4096 / 1500) = 3).
    assert epsilon_ceiling(4096, delta=0.0, confidence=0.95) == pytest.approx(math.log(662.9), abs=1e-3)
    assert epsilon_ceiling(2048, delta=0.0, confidence=0.95) == pytest.approx(math.log(333.5), abs=1e-3)
    # The design: one target of 1,500. Its grid has 21 points (r = 1500, 750, 375, 188, 94, 47, 23,
    # 12, 6, 3, 1 each all IN and half IN, r = 1 once): ceiling logit((0.05/21)^(1/1500)) = ln(247.8) = 5.513.
    ceiling = epsilon_ceiling(1500, delta=0.0, confidence=0.95)
    assert ceiling == pytest.approx(math.log(247.83), abs=1e-3)
    v = epsilon_verdict(
        {"loss": 0.3},
        ceiling=ceiling,
        claim=Claim(6.0),
        delta=0.0,
        confidence=0.95,
        n_canaries=1500,
        per_target=1500,
    )
    assert v.kind == EPSILON_NOT_TESTABLE and v.text == "not testable with this design" and not v.alarming
    assert "at or above ε ≈ 5.51, the most that even a perfect attack could certify" in v.reason
    assert "About 4,096 canaries (the first power of 2 that suffices), i.e. 3 target runs of 1,500 examples" in v.reason
    # A claim exactly at the ceiling cannot be exceeded either (violation is strict).
    assert (
        epsilon_verdict({"loss": 0.3}, ceiling=ceiling, claim=Claim(ceiling), delta=0.0, confidence=0.95).kind
        == EPSILON_NOT_TESTABLE
    )


def test_a_claim_of_10_at_delta_1e5_says_how_many_canaries_the_fdp_test_needs():
    # The verdict's analysis is the f-DP test of f_{eps,delta}, which pays no 2m·delta union term:
    # its perfect-attack ceiling keeps rising with m (14.81 on the grid at m = 2^24, δ = 1e-5). On
    # the grid (Bonferroni over its points) the first power of 2 whose ceiling exceeds 10 is
    # 2^18 = 262,144; with a count tuned on the reference runs (full level) it is 2^17 = 131,072.
    assert most_certifiable(analysis="fdp", rule="grid", delta=1e-5, confidence=0.95) == pytest.approx(
        14.8144, abs=1e-3
    )
    v = epsilon_verdict(
        {"loss": 0.3},
        ceiling=epsilon_ceiling(3000, delta=1e-5, confidence=0.95),
        claim=Claim(10.0),
        delta=1e-5,
        confidence=0.95,
        n_canaries=3000,
        per_target=1500,
    )
    assert v.kind == EPSILON_NOT_TESTABLE
    assert "About 262,144 canaries (the first power of 2 that suffices), i.e. 175 target runs" in v.reason
    tuned = epsilon_verdict(
        {"loss": 0.3},
        ceiling=8.0,
        claim=Claim(10.0),
        delta=1e-5,
        confidence=0.95,
        n_canaries=24000,
        per_target=1500,
        rule="tuned",
    )
    assert "About 131,072 canaries" in tuned.reason and "chosen on the reference runs" in tuned.reason


def test_a_claim_beyond_every_ceiling_up_to_the_largest_design_says_so():
    # ε = 20 at δ = 1e-5 is beyond the grid's ceiling at every m up to 2^24 (14.81 at most).
    v = epsilon_verdict(
        {"loss": 0.3}, ceiling=5.0, claim=Claim(20.0), delta=1e-5, confidence=0.95, n_canaries=3000, per_target=1500
    )
    assert v.kind == EPSILON_NOT_TESTABLE
    assert "One-run auditing cannot certify more than ε ≈ 14.81 at δ = 1e-05 with up to 16,777,216 canaries" in v.reason


def test_no_claim_says_so_with_the_ceiling():
    v = epsilon_verdict(
        {"loss": 0.3, "dcr": 2.5}, ceiling={"loss": 5.0, "dcr": 5.25}, claim=None, delta=0.0, confidence=0.95
    )
    assert v.kind == NO_EPSILON_CLAIM and v.text == "no ε claim was checked"
    assert (
        "the ε lower bound found is 2.50 (dcr; 97.50% per attack, 95% jointly over 2 attacks (Bonferroni)), where "
        "a perfect attack would reach ε ≈ 5.25" in v.reason
    )


def test_no_fair_coins_is_no_epsilon_verdict():
    v = no_fair_coins_verdict("the custodian chose the members")
    assert v.kind == NO_FAIR_COINS and v.text == "no ε verdict: membership was not drawn by independent fair coins"
    assert v.reason == "the custodian chose the members" and not v.alarming


def test_verdict_kinds_are_checked():
    with pytest.raises(ValueError, match="'maybe'"):
        Verdict("maybe", "", "")
    with pytest.raises(ValueError, match="no ceiling for attack 'dcr'"):
        epsilon_verdict({"loss": 0.1, "dcr": 0.2}, ceiling={"loss": 3.0}, claim=Claim(1.0), delta=0.0, confidence=0.95)


def comparison(metric, point, p_adjusted, *, attack="lira_online", group="all", alpha=0.05):
    return MetricComparison(
        attack=attack,
        group=group,
        metric=metric,
        difference=Interval(point, point - 0.01, point + 0.01),
        p_value=p_adjusted / 2,
        p_adjusted=p_adjusted,
        significant=p_adjusted < alpha,
    )


def test_a_significantly_lower_attack_metric_is_a_gain_over_the_subset():
    tests = [
        comparison("test_accuracy", 0.1, 0.001, attack=None, group=None),
        comparison("auc", -0.04, 0.01),
        comparison("eps_lower", -0.5, 0.2),
    ]
    v = subset_verdict(tests, baseline_label="subset ipc=1", alpha=0.05)
    assert v.kind == GAIN_OVER_SUBSET and v.evidence == ("lira_online/auc",)
    # the accuracy gap first, a sentence of its own; then the metrics
    assert v.reason == (
        "Test accuracy +0.100 against subset ipc=1 (significantly higher, adjusted p = 0.001). Significantly lower "
        "than subset ipc=1 on lira_online auc (-0.04, adjusted p = 0.01) (3 Holm-adjusted tests at α = 0.05)"
    )


def test_no_significant_gain_is_no_measurable_advantage_and_a_loss_is_named():
    tests = [
        comparison("auc", -0.04, 0.08),
        comparison("tpr_at_fpr_0.01", 0.02, 0.03),
        # a significant gain on a sub-group alone does not count (the verdict is on all members)
        comparison("auc", -0.2, 0.001, group="init"),
        # test accuracy is no privacy metric, however significant
        comparison("test_accuracy", -0.3, 0.001, attack=None, group=None),
    ]
    v = subset_verdict(tests, baseline_label="subset ipc=1", alpha=0.05)
    assert v.kind == NO_GAIN_OVER_SUBSET
    assert v.text == "no measurable advantage over publishing a random real subset of the same size"
    assert v.reason.startswith(
        "Test accuracy -0.300 against subset ipc=1 (significantly lower, adjusted p = 0.001). None of the 2 attack "
        "metrics is significantly lower than subset ipc=1's (4 Holm-adjusted tests at α = 0.05); it leaks "
        "significantly more on lira_online tpr_at_fpr_0.01"
    )
    assert v.evidence == ("lira_online/tpr_at_fpr_0.01",)


def test_counts_of_one_are_singular():
    assert (count(1, "target"), count(2, "target"), count(3000, "canary", "canaries")) == (
        "1 target",
        "2 targets",
        "3,000 canaries",
    )
    v = subset_verdict([comparison("auc", -0.01, 0.5)], baseline_label="subset ipc=1", alpha=0.05)
    assert (
        v.reason
        == "the one attack metric is not significantly lower than subset ipc=1's (1 Holm-adjusted test at α = 0.05)"
    )
    # 4,096 canaries needed, 5,000 examples per target run: one target run
    v = epsilon_verdict(
        {"loss": 0.3},
        ceiling=epsilon_ceiling(1500, delta=0.0, confidence=0.95),
        claim=Claim(6.0),
        delta=0.0,
        confidence=0.95,
        n_canaries=1500,
        per_target=5000,
    )
    assert "i.e. 1 target run of 5,000 examples, would make it testable" in v.reason
    assert (
        "jointly over 1 attack (Bonferroni)"
        in epsilon_verdict({"loss": 0.3}, ceiling=5.0, claim=None, delta=0.0, confidence=0.95).reason
    )


def test_a_release_against_the_subsets_states_its_degrees_of_freedom():
    # summary.json's subset_baseline as audit.releases.leakage writes it, for S = 4 subset runs
    comparison = {
        "outcome": "no measurable difference",
        "statistic": "TPR at the 1% threshold of each release's strongest attack",
        "release_tpr": 0.02,
        "subset_tpr": [0.01, 0.02, 0.03, 0.02],
        "subset_median": 0.02,
        "subset_p5": 0.0115,
        "subset_p95": 0.0285,
        "subsets_below_release": 1,
        "test": prediction_test_name(4),
        "t": 0.0,
        "p": 1.0,
        "alpha": 0.05,
    }
    v = release_subset_verdict(comparison)
    assert v.kind == NO_GAIN_OVER_SUBSET and "S - 1" not in v.reason
    assert (
        "4 random real subsets of the same size on the same pool: median 2.0%, 5th-95th percentiles 1.1%-2.9% "
        "(1 of 4 below yours); two-sided Student-t prediction test against the random subsets "
        "(3 degrees of freedom): t = 0.00, p = 1 (α = 0.05)" in v.reason
    )


def fake(scores, membership, summary=None):
    scores, membership = np.asarray(scores, float), np.asarray(membership, bool)
    exp = Experiment(
        path="fake",
        result=AuditResult.from_json({"victim": "dm", "attacks": {}, **(summary or {})}),
        membership=membership,
        init=np.zeros_like(membership),
        scores={"loss": scores, "dcr": scores},
        test_accuracy=[0.5],
    )
    return Audited(experiment=exp, meta={}, runs=(), label="fake")


def test_without_a_reference_choice_every_attack_is_bounded_at_the_bonferroni_level():
    # Perfectly separated scores, 200 members at 1 and 200 non-members at 0: m = 400 canaries.
    # The guess grid of m = 400 (r = round(400 / 2^k), k = 0..11: 400, 200, 100, 50, 25, 12, 6, 3,
    # 2, 1, 1, 1), each all IN (r, 0) and half IN (round(r/2), r - round(r/2)), duplicates removed
    # ((1, 0) three times): 19 points. Two attacks at 95% jointly: each at 97.5%, so every grid
    # point is tested at alpha = 0.025 / 19. The best point guesses the top 200 IN and the bottom
    # 200 OUT, all 400 right. For a perfect attack at δ = 0 the f-DP test of f_{ε,0} rejects
    # exactly where the binomial bound does (p^400 < alpha, p = e^ε / (1 + e^ε)): while
    # p < (0.025 / 19)^(1/400) = 0.98355, i.e. ε < ln(0.98355 / 0.01645) = 4.0911. A perfect
    # attack does no better, so the ceiling at 97.5% is the same number.
    member = np.r_[np.ones(200), np.zeros(200)][None]
    a = fake(np.where(member, 1.0, 0.0), member.astype(bool))
    p = (0.025 / 19) ** (1 / 400)
    expected = math.log(p / (1 - p))
    assert expected == pytest.approx(4.0911, abs=1e-4)
    found = verdict_evidence(a, delta=0.0, confidence=0.95, seed=0)
    assert found["rule"] == "grid" and found["per_attack_confidence"] == pytest.approx(0.975)
    assert found["bounds"] == pytest.approx({"loss": expected, "dcr": expected}, rel=1e-6)
    assert found["ceilings"] == pytest.approx({"loss": expected, "dcr": expected}, rel=1e-6)
    # One attack alone would be tested at 95%: a higher ceiling, alpha 0.05 / 19.
    assert epsilon_ceiling(400, delta=0.0, confidence=0.95) > expected


def test_a_reference_choice_is_one_attack_and_one_count_at_the_full_confidence():
    # The audit recorded dcr and the count (200 IN, 200 OUT) as chosen on its reference runs: one
    # test at alpha = 0.05, all 400 right: p^400 < 0.05 while p < 0.05^(1/400) = 0.992539, i.e.
    # ε < ln(0.992539 / 0.007461) = 4.8905; loss is not tested at all.
    member = np.r_[np.ones(200), np.zeros(200)][None]
    chosen = {"verdict": {"rule": "tuned", "attack": "dcr", "guesses": {"k_in": 200, "k_out": 200}}}
    a = fake(np.where(member, 1.0, 0.0), member.astype(bool), chosen)
    p = 0.05 ** (1 / 400)
    expected = math.log(p / (1 - p))
    assert expected == pytest.approx(4.8905, abs=1e-4)
    found = verdict_evidence(a, delta=0.0, confidence=0.95, seed=0)
    assert found["rule"] == "tuned" and found["attack"] == "dcr" and found["per_attack_confidence"] == 0.95
    assert found["bounds"] == pytest.approx({"dcr": expected}, rel=1e-6)
    assert found["guesses"] == {"k_in": 200, "k_out": 200, "correct": 400}


def test_an_experiment_whose_coins_are_not_fair_gets_no_epsilon_verdict_even_with_a_claim():
    rng = np.random.default_rng(0)
    membership = rng.random((2, 50)) < 0.3
    entry = {
        "auc": 0.5,
        "tpr_at_fpr": {"0.1": 0.1, "0.01": 0.01, "0.001": 0.001},
        "n_members": int(membership.sum()),
        "n_nonmembers": int((~membership).sum()),
        "eps_hat": 0.0,
        "eps_lower": None,
        "eps_ceiling": None,
    }
    a = fake(
        rng.normal(size=(2, 50)),
        membership,
        {
            "formal_epsilon": 1.0,
            "delta": 1e-5,
            "n_shadow": 4,
            "target_runs": [0, 1],
            "evaluation": {"inclusion_rate": 0.3, "plan": "independent-coins-v1"},
            "attacks": {"loss": entry, "dcr": entry},
        },
    )
    entry_json, _ = _experiment_entry(a, [], settings=Settings(top_k=2), seed=0)
    eps = entry_json["verdicts"][0]
    assert eps["kind"] == NO_FAIR_COINS and "coins of rate 0.3" in eps["reason"]
    assert entry_json["claim"]["epsilon"] == 1.0 and entry_json["claim"]["bounds"] is None
    assert "No ε bound" in entry_json["protocol"]


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
