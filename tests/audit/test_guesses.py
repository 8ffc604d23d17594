"""Tests for audit.stats.guesses: which counts a rule guesses with, how many of them are right, and
the bounds, ceilings and verdicts those counts feed. Exact values derived by hand in the comments.

A perfect attack's bound at δ = 0 has a closed form for Steinke et al.'s test (and the f-DP test
of f_{ε,0} agrees with it, tests/audit/test_fdp.py): r guesses all right reject ε while p^r < α,
p = e^ε / (1 + e^ε), so the bound is ln(p / (1 - p)) at p = α^(1/r) (`perfect`)."""

import math

import numpy as np
import pytest

from audit.stats import guesses
from audit.stats.bounds import SUMMARY_KEYS
from audit.stats.epsilon import Guesses, RankedGuesses
from audit.stats.fdp import gaussian_one_run_mu
from audit.stats.guesses import (
    BoundCache,
    applicable,
    best_count,
    bound_at,
    bounds_of,
    canaries_needed,
    cautious_precision,
    ceiling,
    fdp_epsilon_lower_bound,
    fixed_count,
    grid_counts,
    mechanism_verdict,
    most_certifiable,
    tune,
    tuned_candidates,
    verdict_bound,
)
from audit.stats.mechanism import SubsampledGaussian


def perfect(r: int, alpha: float) -> float:
    """The δ = 0 bound of r right guesses of r at level alpha (module docstring)."""
    p = alpha ** (1.0 / r)
    return math.log(p / (1.0 - p)) if p > 0.5 else 0.0


def separated(n_in: int, n_out: int):
    """Members all at 1, non-members all at 0: (member scores, non-member scores)."""
    return np.ones(n_in), np.zeros(n_out)


# ---------------------------------------------------------------------------
# counting right guesses


def test_right_guesses_are_members_at_the_top_and_non_members_at_the_bottom():
    # scores ascending: 1 (IN), 2 (OUT), 3 (OUT), 4 (IN); no ties, so rng plays no part.
    # top k guessed IN, right: k = 1: {4} 1; k = 2: {4, 3} 1; k = 3: 1; k = 4: 2.
    # bottom k guessed OUT, right: k = 1: {1} 0; k = 2: {1, 2} 1; k = 3: 2; k = 4: 2.
    ranked = RankedGuesses.of([4.0, 1.0], [3.0, 2.0], rng=0)
    assert ranked.m == 4
    assert list(ranked.in_from_top) == [0, 1, 1, 1, 2]
    assert list(ranked.out_from_bottom) == [0, 0, 1, 2, 2]
    assert ranked.correct(Guesses(2, 2)) == 1 + 1
    assert ranked.correct(Guesses(1, 0)) == 1
    assert ranked.correct(Guesses(0, 3)) == 2
    assert ranked.correct(Guesses(0, 0)) == 0  # no guess, nothing right
    with pytest.raises(ValueError, match="5 guesses exceed the 4 canaries"):
        ranked.correct(Guesses(3, 2))


def test_ties_are_broken_by_the_rng_alone():
    # one member and one non-member, both scored 0: whether the top guess is right is the rng's
    # coin. Fixed seeds: the same seed gives the same answer, and over seeds 0..199 both answers
    # come up (each with probability 1/2: outside [60, 140] has probability < 1e-8).
    right = [RankedGuesses.of([0.0], [0.0], rng=seed).correct(Guesses(1, 0)) for seed in range(200)]
    assert right == [RankedGuesses.of([0.0], [0.0], rng=seed).correct(Guesses(1, 0)) for seed in range(200)]
    assert set(right) == {0, 1} and 60 <= sum(right) <= 140


# ---------------------------------------------------------------------------
# the counts each rule chooses among


def test_grid_counts_and_their_bonferroni_level_by_hand():
    # m = 4: r = round(4 / 2^k) = 4, 2, 1, then round(0.5) = 0 -> 1 ...; each r as (r, 0) and
    # (round(r/2), r - round(r/2)); r = 1 gives (1, 0) both ways (round(0.5) = 0 -> at least 1).
    # 5 points, each at level 0.05 / 5.
    counts, alpha = grid_counts(4, 0.95)
    assert [(g.k_in, g.k_out) for g in counts] == [(4, 0), (2, 2), (2, 0), (1, 1), (1, 0)]
    assert alpha == pytest.approx(0.01, rel=1e-12)


def test_tuned_candidates_by_hand():
    # m = 4: r = round(4 · 2^(-j/2)) = 4, 2.83 -> 3, 2, 1.41 -> 1; each as (r, 0) and
    # (round(r/2), r - round(r/2)): r = 3 halves as (2, 1) (round(1.5) = 2), r = 1 only as (1, 0).
    assert [(g.k_in, g.k_out) for g in tuned_candidates(4)] == [(4, 0), (2, 2), (3, 0), (2, 1), (2, 0), (1, 1), (1, 0)]
    assert tuned_candidates(1) == (Guesses(1, 0),)
    with pytest.raises(ValueError, match="m must be >= 1, got 0"):
        tuned_candidates(0)


def test_the_fixed_count_is_the_half_in_candidate_nearest_four_root_m():
    # m = 64: 4·8 = 32 -> (16, 16); m = 128: 4·11.3 = 45.3 -> r = round(128/2^(3/2)) = 45 -> (22, 23);
    # m = 256: 64 -> (32, 32); m = 4: 8 > 4, the largest half-IN total is 4 -> (2, 2); m = 1: (1, 0)
    assert fixed_count(64) == Guesses(16, 16) and fixed_count(128) == Guesses(22, 23)
    assert fixed_count(256) == Guesses(32, 32) and fixed_count(4) == Guesses(2, 2)
    assert fixed_count(1) == Guesses(1, 0)
    with pytest.raises(ValueError, match="m must be >= 1, got 0"):
        fixed_count(0)


def test_cautious_precision_is_the_clopper_pearson_lower_limit():
    # all n right: the one-sided lower limit at level 0.84 solves P[Binomial(n, p) = n] = p^n = 0.16,
    # so p = 0.16^(1/n): 0.16 for n = 1, 0.4 for n = 2
    assert cautious_precision(1, 1) == pytest.approx(0.16, rel=1e-9)
    assert cautious_precision(2, 2) == pytest.approx(0.4, rel=1e-9)
    # 1 of 2 right: the lower limit solves P[Binomial(2, p) >= 1] = 1 - (1 - p)^2 = 0.16, p = 1 - 0.84^(1/2)
    assert cautious_precision(1, 2) == pytest.approx(1 - math.sqrt(0.84), rel=1e-9)
    assert cautious_precision(0, 5) == 0.0  # no hit, no precision


# ---------------------------------------------------------------------------
# bounds of one count, and the cache


def test_bound_at_dispatches_to_the_registered_test():
    # Steinke et al. and the f-DP test of f_{ε,0} both give the closed form for 10 of 10 at 0.05:
    # p = 0.05^(1/10) = 0.741134, ε = ln(p / (1 - p)) = 1.051873
    expected = perfect(10, 0.05)
    assert expected == pytest.approx(1.051873, abs=1e-6)
    for analysis in ("steinke", "fdp"):
        value = bound_at(analysis, m=10, guesses=10, correct=10, delta=0.0, alpha=0.05)
        assert value == pytest.approx(expected, abs=1e-9)
    with pytest.raises(ValueError, match="analysis must be one of"):
        bound_at("bayes", m=10, guesses=10, correct=10, delta=0.0, alpha=0.05)
    with pytest.raises(ValueError, match="tests a claimed mechanism: pass mechanism="):
        bound_at("mechanism", m=10, guesses=10, correct=10, delta=1e-5, alpha=0.05)


def test_applicable_drops_the_mechanism_test_without_a_mechanism_at_delta_zero_or_on_the_grid():
    claimed = SubsampledGaussian(1.0, 1.0, 1)
    assert applicable(None, 1e-5) == ("steinke", "fdp", "gaussian")
    assert applicable(claimed, 1e-5) == ("steinke", "fdp", "gaussian", "mechanism")
    assert applicable(claimed, 0.0) == ("steinke", "fdp", "gaussian")
    assert applicable(claimed, 1e-5, rule="grid") == ("steinke", "fdp", "gaussian")


def test_the_cache_answers_from_what_it_learnt_and_computes_otherwise(monkeypatch):
    # a stand-in test that rejects every ε up to 2.0: with at_least a it returns 2.0 if a <= 2.0, else 0
    calls = []

    def fake(analysis, *, at_least=0.0, **kwargs):
        calls.append(at_least)
        return 2.0 if at_least <= 2.0 else 0.0

    monkeypatch.setattr(guesses, "bound_at", fake)
    cache = BoundCache()
    design = dict(m=10, guesses=4, correct=4, delta=0.0, alpha=0.05)
    assert cache.bound("steinke", **design, at_least=3.0) == 0.0  # computed: below 3
    assert cache.bound("steinke", **design, at_least=4.0) == 0.0  # known below 3, so below 4: no call
    assert calls == [3.0]
    assert cache.bound("steinke", **design, at_least=1.0) == 2.0  # 1 < 3: computed, and 2.0 is exact
    assert cache.bound("steinke", **design) == 2.0  # exact: no call
    assert cache.bound("steinke", **design, at_least=2.5) == 0.0  # exact 2.0 < 2.5: no call
    assert calls == [3.0, 1.0]
    # another count, another analysis, or a mechanism passed to a test that does not take one
    assert cache.bound("steinke", **{**design, "correct": 3}) == 2.0
    assert cache.bound("fdp", **design) == 2.0
    assert cache.bound("steinke", **design, mechanism=SubsampledGaussian(1.0, 1.0, 1)) == 2.0  # same key: no call
    assert calls == [3.0, 1.0, 0.0, 0.0]


def test_the_cache_gives_bound_at_s_answers():
    cache = BoundCache()
    for at_least in (0.0, 0.5, 5.0, 0.0):
        for correct in (8, 10):
            design = dict(m=10, guesses=10, correct=correct, delta=0.0, alpha=0.05, at_least=at_least)
            assert cache.bound("steinke", **design) == bound_at("steinke", **design)


def test_best_count_takes_the_largest_bound_and_the_first_count_when_none_rejects():
    # scores as in the counting test: (2, 2) has 2 right of 4, (1, 0) 1 of 1; at m = 4 and α = 0.05
    # nothing rejects ε = 0 (even 4 of 4: P = 1/16 > 0.05), so the first count is returned, bound 0
    ranked = RankedGuesses.of([4.0, 1.0], [3.0, 2.0], rng=0)
    counts = (Guesses(2, 2), Guesses(1, 0))
    assert best_count(ranked, counts, analysis="steinke", delta=0.0, alpha=0.05) == (0.0, Guesses(2, 2), 2)
    # 50 members above 50 non-members: (50, 50) is all right (100 of 100), (100, 0) half right
    # (50 of 100: no evidence at all), (10, 0) 10 of 10; the largest bound is 100 of 100's
    ranked = RankedGuesses.of(*separated(50, 50), rng=0)
    counts = (Guesses(100, 0), Guesses(10, 0), Guesses(50, 50))
    value, chosen, correct = best_count(ranked, counts, analysis="steinke", delta=0.0, alpha=0.05)
    assert (chosen, correct) == (Guesses(50, 50), 100)
    assert value == pytest.approx(perfect(100, 0.05), abs=1e-9)


# ---------------------------------------------------------------------------
# the tuned rule


def test_tune_without_a_rejecting_count_takes_the_count_furthest_above_chance():
    # pseudo-targets as in the counting test (m = 4) and the real m = 4: no count rejects anything
    # (4 of 4 has P = 1/16 > 0.05), so every prediction is 0 and the tie goes to the largest
    # z = (2 hits - n) / √n. Hits per candidate: (4, 0): 2 of 4, z = 0; (2, 2): 2 of 4, 0;
    # (3, 0): 1 of 3, -1/√3; (2, 1): 1 + 0 of 3, -1/√3; (2, 0): 1 of 2, 0; (1, 1): 1 + 0 of 2, 0;
    # (1, 0): 1 of 1, z = 1: the choice.
    pseudo = RankedGuesses.of([4.0, 1.0], [3.0, 2.0], rng=0)
    choice = tune(pseudo, m=4, analysis="steinke", delta=0.0, confidence=0.95)
    assert (choice.guesses, choice.predicted, choice.z) == (Guesses(1, 0), 0.0, pytest.approx(1.0))


def test_tune_predicts_the_real_m_s_bound_from_the_cautious_precision():
    # perfect pseudo-targets on m = 100 (50 above 50), real m = 100: candidate (50, 50) is 100 of
    # 100 right on the pseudo-targets, cautious precision 0.16^(1/100) = 0.981841, so it predicts
    # floor(98.18) = 98 right of 100 at the real m; all-IN candidates are at most half right.
    # Among the balanced candidates the largest r predicts most (r = 100: 98 of 100), and the
    # prediction is the bound of 98 of 100 at the full level 0.05.
    pseudo = RankedGuesses.of(*separated(50, 50), rng=0)
    choice = tune(pseudo, m=100, analysis="steinke", delta=0.0, confidence=0.95)
    assert math.floor(0.16 ** (1 / 100) * 100) == 98
    assert choice.guesses == Guesses(50, 50)
    assert choice.predicted == bound_at("steinke", m=100, guesses=100, correct=98, delta=0.0, alpha=0.05) > 0


def test_tune_scales_the_candidates_to_the_pseudo_targets_m():
    # real m = 400, pseudo m = 100: the candidate (200, 200) is judged by (50, 50) on the
    # pseudo-targets (all right there), and predicts floor(0.16^(1/100) · 400) = 392 of 400
    pseudo = RankedGuesses.of(*separated(50, 50), rng=0)
    choice = tune(pseudo, m=400, analysis="steinke", delta=0.0, confidence=0.95)
    assert math.floor(0.16 ** (1 / 100) * 400) == 392
    assert choice.guesses == Guesses(200, 200)
    assert choice.predicted == bound_at("steinke", m=400, guesses=400, correct=392, delta=0.0, alpha=0.05)


def test_tune_chooses_the_gaussian_count_for_the_mechanism_test():
    pseudo = RankedGuesses.of(*separated(50, 50), rng=0)
    kwargs = dict(m=100, delta=1e-5, confidence=0.95)
    assert tune(pseudo, analysis="mechanism", **kwargs) == tune(pseudo, analysis="gaussian", **kwargs)


# ---------------------------------------------------------------------------
# ceilings


def test_ceiling_on_the_grid_and_tuned_by_hand():
    # δ = 0: more perfect guesses reject more, so the largest total r = m = 100 gives the ceiling.
    # grid(100): r = 100, 50, 25, 12, 6, 3, 2, 1 (then 0 -> 1), each (r, 0) and (round(r/2), ...),
    # (1, 0) once: 15 points, each at 0.05 / 15: ε = ln(p / (1 - p)), p = (0.05/15)^(1/100), 2.8354.
    # tuned: one count at the full 0.05: p = 0.05^(1/100) = 0.970487, ε = 3.4930.
    assert len(grid_counts(100, 0.95)[0]) == 15
    assert perfect(100, 0.05 / 15) == pytest.approx(2.8354, abs=1e-4)
    assert perfect(100, 0.05) == pytest.approx(3.4930, abs=1e-4)
    common = dict(analysis="steinke", delta=0.0, confidence=0.95)
    assert ceiling(100, rule="grid", **common) == pytest.approx(perfect(100, 0.05 / 15), abs=1e-9)
    assert ceiling(100, rule="tuned", **common) == pytest.approx(perfect(100, 0.05), abs=1e-9)
    # m = 4: even 4 of 4 is P = 1/16 > 0.05: nothing to certify
    assert ceiling(4, rule="tuned", **common) == 0.0
    with pytest.raises(ValueError, match="rule must be one of tuned, grid, got 'best'"):
        ceiling(100, rule="best", **common)


def test_a_ceiling_is_searched_once_per_arguments_and_equals_the_search_through_a_cache(monkeypatch):
    calls = []

    def counted(analysis, **kwargs):  # the real test, counted
        calls.append(analysis)
        return bound_at(analysis, **kwargs)

    monkeypatch.setattr(guesses, "bound_at", counted)
    # m = 97 and confidence 0.93: arguments no other test asks, so the first call searches
    common = dict(analysis="fdp", rule="grid", delta=1e-5, confidence=0.93)
    first = ceiling(97, **common)
    searched = len(calls)
    assert searched > 0
    assert ceiling(97, **common) == first and len(calls) == searched  # remembered: no test run again
    assert ceiling(97, **common, cache=BoundCache()) == first  # a cache's search: the same value
    assert len(calls) == 2 * searched
    ceiling(98, **common)  # another m: searched
    assert len(calls) > 2 * searched


def test_the_canaries_a_claim_needs_by_hand():
    # Steinke et al., tuned, δ = 0: the ceiling at m is perfect(m, 0.05), positive once
    # 0.05^(1/m) > 1/2, i.e. m > ln 0.05 / ln 0.5 = 4.32: m = 4 gives 0; m = 8: p = 0.687656,
    # ε = 0.7892; m = 16: p = 0.829249, ε = 1.5803.
    assert perfect(8, 0.05) == pytest.approx(0.7892, abs=1e-4)
    assert perfect(16, 0.05) == pytest.approx(1.5803, abs=1e-4)
    rule = dict(analysis="steinke", rule="tuned", delta=0.0, confidence=0.95)
    assert canaries_needed(0.5, **rule) == 8
    assert canaries_needed(1.0, **rule) == 16
    assert canaries_needed(0.5, **rule, most=4) is None  # not reached up to 4 canaries
    assert most_certifiable(**rule, most=16) == pytest.approx(perfect(16, 0.05), abs=1e-9)


# ---------------------------------------------------------------------------
# every bound of one group


def test_a_perfect_attack_reaches_every_ceiling_on_the_grid():
    # 50 members above 50 non-members, grid rule: (50, 50) is 100 of 100 right, the bound of a
    # perfect attack with the largest total: each bound equals its ceiling. δ = 0: no mechanism
    # test, and μ-GDP implies no pure ε (eps_gaussian null).
    entry = bounds_of(*separated(50, 50), delta=0.0, confidence=0.95, rng=0)
    assert list(entry) == list(SUMMARY_KEYS)
    assert entry["guess_rule"] == "grid"
    assert entry["eps_lower"] == pytest.approx(perfect(100, 0.05 / 15), abs=1e-9)
    for lower, upper in (
        ("eps_lower", "eps_ceiling"),
        ("eps_lower_fdp", "eps_ceiling_fdp"),
        ("mu_lower", "mu_ceiling"),
    ):
        assert entry[lower] == pytest.approx(entry[upper], rel=1e-9) and entry[lower] > 0
    assert entry["eps_gaussian"] is None
    assert entry["eps_lower_mechanism"] is None and entry["eps_ceiling_mechanism"] is None
    right = {"k_in": 50, "k_out": 50, "correct": 100}
    assert entry["guesses"] == {"steinke": right, "fdp": right, "gaussian": right}


def test_reversed_scores_bound_nothing_and_report_the_first_count():
    # members below non-members: every IN guess and every OUT guess wrong; (100, 0) is half right
    entry = bounds_of(*reversed(separated(50, 50)), delta=1e-5, confidence=0.95, rng=0)
    assert entry["eps_lower"] == entry["eps_lower_fdp"] == entry["mu_lower"] == entry["eps_gaussian"] == 0.0
    assert entry["guesses"]["fdp"] == {"k_in": 100, "k_out": 0, "correct": 50}


def test_a_tuned_count_is_tested_once_at_the_full_level():
    # the count (10, 0) fixed in advance: the top 10 are members, 10 of 10 right at level 0.05
    tuned = {"steinke": Guesses(10, 0), "fdp": Guesses(10, 0)}
    entry = bounds_of(*separated(50, 50), delta=0.0, confidence=0.95, rng=0, tuned=tuned)
    assert entry["guess_rule"] == "tuned"
    assert entry["eps_lower"] == pytest.approx(perfect(10, 0.05), abs=1e-9)
    assert entry["eps_ceiling"] == pytest.approx(perfect(100, 0.05), abs=1e-9)
    assert entry["mu_lower"] is None  # no tuned count for it: not computed
    assert entry["guesses"] == {"steinke": {"k_in": 10, "k_out": 0, "correct": 10}, "fdp": entry["guesses"]["fdp"]}


def test_fdp_epsilon_lower_bound_of_a_fixed_count_and_its_refusals():
    scores = separated(50, 50)
    fixed = fdp_epsilon_lower_bound(*scores, guesses=Guesses(50, 50), rng=0)
    assert fixed == pytest.approx(perfect(100, 0.05), abs=1e-9)
    assert fdp_epsilon_lower_bound(*scores, rng=0) == pytest.approx(perfect(100, 0.05 / 15), abs=1e-9)
    with pytest.raises(ValueError, match="the gaussian trade-off needs delta > 0"):
        fdp_epsilon_lower_bound(*scores, tradeoff="gaussian")


# ---------------------------------------------------------------------------
# the verdict's bound


def test_verdict_bound_on_the_grid_takes_the_best_attack_at_the_bonferroni_level():
    # two attacks at 95% jointly: each at 97.5%, each grid point (15 for m = 100) at 0.025 / 15.
    # "good" separates perfectly (its bound is the closed form), "bad" reverses (0).
    groups = {"bad": tuple(reversed(separated(50, 50))), "good": separated(50, 50)}
    found = verdict_bound(groups, chosen=None, guesses=None, delta=0.0, confidence=0.95, rng_of=lambda a: 0)
    assert (found["rule"], found["attack"], found["guesses"]) == ("grid", "good", None)
    assert found["per_attack_confidence"] == pytest.approx(0.975, rel=1e-12)
    assert found["bounds"]["bad"] == 0.0
    assert found["eps_lower"] == found["bounds"]["good"] == pytest.approx(perfect(100, 0.025 / 15), abs=1e-9)
    assert found["eps_ceiling"] == pytest.approx(perfect(100, 0.025 / 15), abs=1e-9)


def test_verdict_bound_with_a_chosen_attack_tests_its_count_once():
    groups = {"bad": tuple(reversed(separated(50, 50))), "good": separated(50, 50)}
    found = verdict_bound(
        groups, chosen="good", guesses=Guesses(25, 25), delta=0.0, confidence=0.95, rng_of=lambda a: 0
    )
    assert (found["rule"], found["attack"], found["per_attack_confidence"]) == ("tuned", "good", 0.95)
    assert found["guesses"] == {"k_in": 25, "k_out": 25, "correct": 50}
    assert found["bounds"] == {"good": pytest.approx(perfect(50, 0.05), abs=1e-9)}  # "bad" is not tested
    assert found["eps_ceiling"] == pytest.approx(perfect(100, 0.05), abs=1e-9)
    with pytest.raises(ValueError, match="needs its scores and its guess count"):
        verdict_bound(groups, chosen="good", guesses=None, delta=0.0, confidence=0.95, rng_of=lambda a: 0)
    with pytest.raises(ValueError, match="needs at least one attack"):
        verdict_bound({}, chosen=None, guesses=None, delta=0.0, confidence=0.95, rng_of=lambda a: 0)


def test_mechanism_verdict_at_full_batch_is_the_gaussian_search():
    # q = 1: the claimed mechanism is exactly μ-GDP with μ = √T / σ, and the family's weakest
    # rejected noise is σ* = √T / μ* for the largest rejected μ*. A perfect attack with 50 of 50 at
    # 0.05 rejects μ* > 0; a claim of σ = 100, T = 4 (μ = 0.02) is far below it: rejected.
    mu_star = gaussian_one_run_mu(m=100, guesses=50, correct=50, alpha=0.05)
    assert mu_star > 0.02
    claimed = SubsampledGaussian(100.0, 1.0, 4)
    groups = {"good": separated(50, 50)}
    found = mechanism_verdict(
        groups,
        chosen="good",
        guesses=Guesses(25, 25),
        mechanism=claimed,
        delta=1e-5,
        confidence=0.95,
        rng_of=lambda a: 0,
    )
    assert found["rejected"] is True
    assert found["noise_rejected"] == pytest.approx(2.0 / mu_star, rel=1e-12)
    assert found["guesses"] == {"k_in": 25, "k_out": 25, "correct": 50}
    assert (found["rule"], found["attack"]) == ("tuned", "good")
    # a claim with less noise than σ* (μ above μ*) is not rejected
    loud = SubsampledGaussian(0.5 / mu_star, 1.0, 4)  # μ = 4 μ*
    found = mechanism_verdict(
        groups, chosen="good", guesses=Guesses(25, 25), mechanism=loud, delta=1e-5, confidence=0.95, rng_of=lambda a: 0
    )
    assert found["rejected"] is False
