"""Tests for audit.stats.metrics: exact hand cases, naive references, analytic checks."""

import dataclasses
import math
import re

import numpy as np
import pytest
from scipy.stats import norm

from audit.stats import epsilon
from audit.stats.bounds import SUMMARY_KEYS
from audit.stats.metrics import (
    FPR_LEVELS,
    MembershipScores,
    advantage,
    auc,
    eps_hat,
    roc,
    tpr_at_fpr,
)

# members [3, 2, 1], non-members [2, 0, 0]; "member iff score >= t".
# Thresholds: +inf, then distinct values 3, 2, 1, 0:
#   t=+inf: TP 0, FP 0 -> (0, 0)
#   t=3:    TP 1, FP 0 -> (0, 1/3)
#   t=2:    TP 2, FP 1 -> (1/3, 2/3)   (the tie 2 vs 2 moves diagonally, one step)
#   t=1:    TP 3, FP 1 -> (1/3, 1)
#   t=0:    TP 3, FP 3 -> (1, 1)
# AUC: pairs (m, n): 3 beats 2, 0, 0 (3 wins); 2 ties 2, beats 0, 0 (2 wins, 1 tie);
#   1 loses to 2, beats 0, 0 (2 wins) -> (7 + 0.5 * 1) / 9 = 5/6.
#   Cross-check, trapezoids of the ROC: 0 + (1/3)(1/3 + 2/3)/2 + 0 + (2/3)(1) = 1/6 + 2/3 = 5/6.
HAND_MEMBERS = [3.0, 2.0, 1.0]
HAND_NONMEMBERS = [2.0, 0.0, 0.0]


# ---------------------------------------------------------------------------
# hand-made cases


def test_roc_hand_case_with_tie():
    fpr, tpr = roc(HAND_MEMBERS, HAND_NONMEMBERS)
    np.testing.assert_allclose(fpr, [0, 0, 1 / 3, 1 / 3, 1], atol=1e-15)
    np.testing.assert_allclose(tpr, [0, 1 / 3, 2 / 3, 1, 1], atol=1e-15)


def test_roc_all_scores_tied_is_single_diagonal_step():
    # One distinct value: the points are t=+inf -> (0, 0) and t=c -> (1, 1).
    fpr, tpr = roc([5.0, 5.0], [5.0, 5.0, 5.0])
    np.testing.assert_array_equal(fpr, [0.0, 1.0])
    np.testing.assert_array_equal(tpr, [0.0, 1.0])
    assert auc([5.0, 5.0], [5.0, 5.0, 5.0]) == 0.5  # every pair is a tie


def test_auc_hand_case():
    assert auc(HAND_MEMBERS, HAND_NONMEMBERS) == pytest.approx(5 / 6, abs=1e-15)


def test_auc_extremes():
    assert auc([2.0, 3.0], [0.0, 1.0]) == 1.0  # members always higher
    assert auc([0.0, 1.0], [2.0, 3.0]) == 0.0  # members always lower


def test_tpr_at_fpr_hand_case():
    # From the ROC points above:
    #   fpr <= 0.1: feasible (0, 0), (0, 1/3) -> TPR 1/3, FP 0
    #   fpr <= 1/3: also (1/3, 2/3), (1/3, 1) -> TPR 1, FP 1
    #   fpr <= 1.0: TPR 1 is reached at t=1 (FP 1) and t=0 (FP 3); the highest
    #               threshold (fewest false positives) is reported -> FP 1
    #   fpr == 0.0: TPR 1/3 at t=3 with FP 0
    assert tpr_at_fpr(HAND_MEMBERS, HAND_NONMEMBERS, 0.1) == (pytest.approx(1 / 3), 0)
    assert tpr_at_fpr(HAND_MEMBERS, HAND_NONMEMBERS, 1 / 3) == (1.0, 1)
    assert tpr_at_fpr(HAND_MEMBERS, HAND_NONMEMBERS, 1.0) == (1.0, 1)
    assert tpr_at_fpr(HAND_MEMBERS, HAND_NONMEMBERS, 0.0) == (pytest.approx(1 / 3), 0)
    tpr, fp = tpr_at_fpr(HAND_MEMBERS, HAND_NONMEMBERS, 0.5)
    assert type(tpr) is float and type(fp) is int


def test_tpr_at_fpr_nothing_feasible_gives_zero():
    # The top score is a non-member: any finite threshold has FP >= 1 (FPR 1/2),
    # so at fpr 0.1 only t=+inf qualifies -> (0.0, 0).
    assert tpr_at_fpr([1.0], [5.0, 0.0], 0.1) == (0.0, 0)


# Ten non-members [9, 1 x 9], four members [10, 10, 9, 0]:
#   t=+inf (0, 0); t=10: TP 2, FP 0 -> (0, 0.5); t=9: TP 3, FP 1 -> (0.1, 0.75);
#   t=1: TP 3, FP 10 -> (1, 0.75); t=0: (1, 1).
# Level 0.1 -> TPR 0.75 with FP 1, realised FPR 0.1 -> ln(0.75 / 0.1) = ln 7.5.
# Levels 0.01 and 0.001 -> TPR 0.5 with FP 0 -> skipped.  eps_hat = ln 7.5.
EPS_MEMBERS = [10.0, 10.0, 9.0, 0.0]
EPS_NONMEMBERS = [9.0] + [1.0] * 9


def test_eps_hat_hand_cases():
    assert tpr_at_fpr(EPS_MEMBERS, EPS_NONMEMBERS, 0.1) == (0.75, 1)
    assert tpr_at_fpr(EPS_MEMBERS, EPS_NONMEMBERS, 0.01) == (0.5, 0)
    assert eps_hat(EPS_MEMBERS, EPS_NONMEMBERS) == pytest.approx(math.log(7.5), abs=1e-12)
    # HAND case: level 0.1 has FP 0 (skipped); level 0.5 gives TPR 1, FP 1 of 3
    # -> ln(1 / (1/3)) = ln 3.  Default levels all have FP 0 -> 0.0.
    assert eps_hat(HAND_MEMBERS, HAND_NONMEMBERS, fpr_levels=(0.1, 0.5)) == pytest.approx(math.log(3))
    assert eps_hat(HAND_MEMBERS, HAND_NONMEMBERS) == 0.0


def test_eps_hat_floored_at_zero():
    # Members below non-members: at level 0.5 the best TPR 0 (FP 0) is skipped;
    # at level 1.0, TPR 1 needs FP 2 -> ln(1 / 1) = 0.
    assert eps_hat([0.0, 0.0], [1.0, 1.0], fpr_levels=(0.5, 1.0)) == 0.0


def test_advantage_hand_cases_independent_of_split():
    # Members [10..13], non-members [0..3]: on any half A the best threshold lies
    # midway between max(A non-members) <= 3 and min(A members) >= 10, i.e. in
    # [5.5, 7.5], which separates half B perfectly too -> 1.0 for every split.
    for seed in range(20):
        assert advantage([10, 11, 12, 13], [0, 1, 2, 3], rng=seed) == 1.0
    # Ties: members all 1, non-members all 0 -> threshold 0.5 on either half -> 1.0.
    assert advantage([1, 1, 1, 1], [0, 0, 0, 0], rng=0) == 1.0
    # Reversed scores: TPR - FPR <= 0 everywhere on A, the first maximiser is
    # t=+inf (nobody a member) -> 0 - 0 on B -> 0.0.
    assert advantage([0, 1, 2, 3], [10, 11, 12, 13], rng=0) == 0.0
    # All scores equal: only (0, 0) and (1, 1) exist, both Youden 0 -> 0.0.
    assert advantage([5, 5, 5], [5, 5, 5, 5], rng=0) == 0.0


def test_advantage_reproducible_with_seed():
    gen = np.random.default_rng(0)
    members, nonmembers = gen.normal(0.5, 1, 300), gen.normal(0, 1, 300)
    assert advantage(members, nonmembers, rng=7) == advantage(members, nonmembers, rng=7)


def test_advantage_null_is_unbiased():
    # Under no signal, for a threshold t fitted on A, E[TPR_B - FPR_B] = P(S>=t) - P(S>=t) = 0.
    # Per trial sd <= sqrt(2 * 0.25 / 250) / sqrt(2) ~ 0.032, so the mean of 200
    # trials has sd <= 0.0023; tolerance 0.012 is > 5 sd.
    values = []
    for seed in range(200):
        gen = np.random.default_rng(seed)
        values.append(advantage(gen.normal(size=500), gen.normal(size=500), rng=gen))
    assert abs(np.mean(values)) < 0.012
    assert min(values) < 0.0  # out-of-sample, so it can go negative


@pytest.mark.parametrize("mu", [1.0, 2.0])
def test_advantage_gaussian_matches_optimal_youden(mu):
    # Equal-variance Gaussians: max_t TPR - FPR is at t = mu/2, giving 2 Phi(mu/2) - 1.
    # Each fold is a difference of two proportions over 10,000 scores, sd <= 0.0071;
    # the mean of two folds has sd <= 0.0071, and the fitted threshold loses
    # O(1/sqrt(n)) only to second order (flat optimum), so 0.025 is > 3.5 sd.
    gen = np.random.default_rng(11)
    members, nonmembers = gen.normal(mu, 1, 20_000), gen.normal(0, 1, 20_000)
    expected = 2 * norm.cdf(mu / 2) - 1
    assert advantage(members, nonmembers, rng=gen) == pytest.approx(expected, abs=0.025)


# ---------------------------------------------------------------------------
# naive O(n^2) references on random data with ties


def naive_auc(members, nonmembers):
    wins = ties = 0
    for m in members:
        for n in nonmembers:
            wins += m > n
            ties += m == n
    return (wins + 0.5 * ties) / (len(members) * len(nonmembers))


def naive_roc(members, nonmembers):
    members, nonmembers = np.asarray(members), np.asarray(nonmembers)
    thresholds = [np.inf] + sorted(set(members) | set(nonmembers), reverse=True)
    fpr = [np.mean(nonmembers >= t) for t in thresholds]
    tpr = [np.mean(members >= t) for t in thresholds]
    return np.array(fpr), np.array(tpr)


def naive_tpr_at_fpr(members, nonmembers, level):
    members, nonmembers = np.asarray(members), np.asarray(nonmembers)
    best = (0.0, 0)
    for t in [np.inf] + sorted(set(members) | set(nonmembers)):
        fp = int(np.sum(nonmembers >= t))
        tpr = float(np.mean(members >= t))
        if fp / len(nonmembers) <= level and (tpr > best[0] or (tpr == best[0] and fp < best[1])):
            best = (tpr, fp)
    return best


def _tied_random_scores(seed):
    gen = np.random.default_rng(seed)
    members = np.round(gen.normal(0.7, 1, 150), 1)  # rounding creates many ties
    nonmembers = np.round(gen.normal(0, 1, 130), 1)
    return members, nonmembers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_matches_naive_references(seed):
    members, nonmembers = _tied_random_scores(seed)
    assert len(set(members)) < len(members)  # there are ties
    assert auc(members, nonmembers) == pytest.approx(naive_auc(members, nonmembers), abs=1e-12)
    fpr, tpr = roc(members, nonmembers)
    naive_fpr, naive_tpr = naive_roc(members, nonmembers)
    np.testing.assert_allclose(fpr, naive_fpr, atol=1e-15)
    np.testing.assert_allclose(tpr, naive_tpr, atol=1e-15)
    for level in (0.0, 0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9, 1.0):
        tpr_l, fp_l = tpr_at_fpr(members, nonmembers, level)
        naive_tpr_l, naive_fp_l = naive_tpr_at_fpr(members, nonmembers, level)
        assert tpr_l == pytest.approx(naive_tpr_l, abs=1e-15)
        assert fp_l == naive_fp_l


def test_auc_equals_trapezoid_area_of_roc():
    members, nonmembers = _tied_random_scores(5)
    fpr, tpr = roc(members, nonmembers)
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert auc(members, nonmembers) == pytest.approx(area, abs=1e-12)


# ---------------------------------------------------------------------------
# analytic check: members N(mu, 1), non-members N(0, 1)

N_ANALYTIC = 20_000


def analytic_tpr(fpr, mu):
    """TPR(f) = 1 - Phi(Phi^{-1}(1 - f) - mu), with TPR(0) = 0 and TPR(1) = 1."""
    return norm.sf(norm.isf(np.clip(fpr, 0.0, 1.0)) - mu)


@pytest.fixture(scope="module", params=[1.0, 2.0], ids=["mu1", "mu2"])
def gaussian_scores(request):
    mu = request.param
    gen = np.random.default_rng(2024)
    return mu, gen.normal(mu, 1, N_ANALYTIC), gen.normal(0, 1, N_ANALYTIC)


def test_roc_within_dkw_band_of_analytic_curve(gaussian_scores):
    # DKW: P(sup_t |F_hat(t) - F(t)| > e) <= 2 exp(-2 n e^2).  With n = 20,000 and
    # failure prob 1e-3 per sample, e = sqrt(ln(2000) / 40000) = 0.0138.  Every
    # empirical ROC point (FPR_hat(t), TPR_hat(t)) is then within e of the analytic
    # point (FPR(t), TPR(t)) in both coordinates, i.e. (TPR increasing)
    #   TPR(fpr_hat - e) - e <= tpr_hat <= TPR(fpr_hat + e) + e   at every point.
    mu, members, nonmembers = gaussian_scores
    band = math.sqrt(math.log(2 / 1e-3) / (2 * N_ANALYTIC))
    fpr, tpr = roc(members, nonmembers)
    assert fpr.size == 2 * N_ANALYTIC + 1  # continuous scores: every score distinct
    assert np.all(tpr >= analytic_tpr(fpr - band, mu) - band)
    assert np.all(tpr <= analytic_tpr(fpr + band, mu) + band)


def test_roc_vertical_deviation_on_grid(gaussian_scores):
    # Vertical deviation at a fixed FPR f is not DKW-bounded where the curve is
    # steep (slope s(f) = phi(z - mu) / phi(z), z = Phi^{-1}(1 - f), is 6.2 for
    # mu=1 and 14 for mu=2 at f=0.01), so it is judged against its delta-method sd
    #   sd(f) = sqrt(TPR(1 - TPR) / n1 + s(f)^2 f (1 - f) / n0)
    # (max 0.0048 for mu=1, 0.0105 for mu=2): 4.5 sd pointwise, union bound over
    # 99 points < 1e-3; plus 1/n for the step function.  For mu=1 this tolerance is
    # <= 0.022, so the stated 0.02 target holds up to ~4.1 sd there.
    mu, members, nonmembers = gaussian_scores
    grid = np.linspace(0.01, 0.99, 99)
    empirical = np.array([tpr_at_fpr(members, nonmembers, f)[0] for f in grid])
    expected = analytic_tpr(grid, mu)
    z = norm.isf(grid)
    slope = norm.pdf(z - mu) / norm.pdf(z)
    sd = np.sqrt((expected * (1 - expected) + slope**2 * grid * (1 - grid)) / N_ANALYTIC)
    deviation = np.abs(empirical - expected)
    print(f"mu={mu}: max |TPR_hat(f) - TPR(f)| = {deviation.max():.4f} at f={grid[deviation.argmax()]:.2f}")
    assert np.all(deviation <= 4.5 * sd + 1 / N_ANALYTIC)
    if mu == 1.0:
        assert deviation.max() <= 0.02


def test_auc_matches_analytic(gaussian_scores):
    # AUC = P(N(mu,1) > N(0,1)) = Phi(mu / sqrt 2).  Var(AUC_hat) <= AUC(1-AUC)/min(n1, n0)
    # (Birnbaum & Klose), sd <= 0.0031, so 0.01 is > 3 sd.
    mu, members, nonmembers = gaussian_scores
    assert auc(members, nonmembers) == pytest.approx(norm.cdf(mu / math.sqrt(2)), abs=0.01)


def test_epsilon_bound_below_gdp_epsilon_and_has_power(gaussian_scores):
    # N(mu,1) vs N(0,1) is exactly mu-GDP, so a valid lower bound stays below its eps.
    mu, members, nonmembers = gaussian_scores
    scores = MembershipScores(members, nonmembers)
    bound = scores.epsilon_lower_bound(delta=1e-5, rng=3)
    gdp = epsilon.gaussian_dp_epsilon(mu, 1e-5)
    print(f"mu={mu}: eps_lower={bound:.3f} <= gdp eps={gdp:.3f}")
    assert 0.0 < bound <= gdp


# ---------------------------------------------------------------------------
# MembershipScores


def test_summary_contract():
    gen = np.random.default_rng(0)
    scores = MembershipScores(gen.normal(1, 1, 400), gen.normal(0, 1, 300))
    summary = scores.summary(delta=1e-5, confidence=0.9, rng=1)
    assert set(summary) == {
        "auc",
        "advantage",
        "tpr_at_fpr",
        "fp_at_fpr",
        "eps_hat",
        "confidence",
        "delta",
        "n_members",
        "n_nonmembers",
        *SUMMARY_KEYS,  # the bounds' keys, listed one by one in tests/audit/test_bounds.py
    }
    assert summary["guess_rule"] == "grid"  # no count was tuned on reference runs
    assert set(summary["guesses"]) == {"steinke", "fdp", "gaussian"}
    levels = {"0.1", "0.01", "0.001"}
    assert levels == {str(level) for level in FPR_LEVELS}
    assert set(summary["tpr_at_fpr"]) == levels and set(summary["fp_at_fpr"]) == levels
    for key in ("auc", "advantage", "eps_hat", "eps_lower", "eps_ceiling", "confidence", "delta"):
        assert type(summary[key]) is float, key
    assert all(type(v) is float for v in summary["tpr_at_fpr"].values())
    assert all(type(v) is int for v in summary["fp_at_fpr"].values())
    assert summary["n_members"] == 400 and type(summary["n_members"]) is int
    assert summary["n_nonmembers"] == 300 and type(summary["n_nonmembers"]) is int
    assert summary["confidence"] == 0.9 and summary["delta"] == 1e-5
    assert summary["auc"] == scores.auc()
    assert (summary["tpr_at_fpr"]["0.1"], summary["fp_at_fpr"]["0.1"]) == scores.tpr_at_fpr(0.1)
    assert summary["fp_at_fpr"]["0.01"] <= 3  # FPR <= 0.01 of 300 non-members
    # The ceiling is the design's: m = 400 + 300 canaries, at the summary's delta and confidence,
    # and no bound exceeds it (a perfect attack gets the most from every grid point).
    assert summary["eps_ceiling"] == epsilon.epsilon_ceiling(700, delta=1e-5, confidence=0.9)
    assert 0.0 < summary["eps_lower"] <= summary["eps_ceiling"]
    assert 0.0 < summary["eps_lower_fdp"] <= summary["eps_ceiling_fdp"]
    assert 0.0 < summary["mu_lower"] <= summary["mu_ceiling"]
    assert summary == scores.summary(delta=1e-5, confidence=0.9, rng=1)  # reproducible


def test_a_sub_group_summary_has_leakage_statistics_only():
    # A sub-group is picked by the mechanism among the members: no eps_hat, bound, or ceiling.
    gen = np.random.default_rng(0)
    scores = MembershipScores(gen.normal(1, 1, 40), gen.normal(0, 1, 300))
    summary = scores.summary(rng=1, epsilon=False)
    assert set(summary) == {"auc", "advantage", "tpr_at_fpr", "fp_at_fpr", "n_members", "n_nonmembers"}
    full = scores.summary(rng=1)
    assert {k: full[k] for k in summary} == summary  # the same statistics as with epsilon


def test_perfect_separation_reaches_the_ceiling():
    # Every member above every non-member: the grid point that guesses all m = 8 + 8 canaries
    # (8 IN from the top, 8 OUT from the bottom) is right on all 16, which is what a perfect
    # attack gets; so the bound is the ceiling. Grid of m = 16 (r = 16, 8, 4, 2, 1, 1, ... each
    # all IN and half IN, (1, 0) once): 9 points; at δ = 0 and 95% the best rejects while
    # p^16 < 0.05 / 9, p = (0.05/9)^(1/16) = 0.72284, ε = ln(0.72284 / 0.27716) = 0.9586.
    scores = MembershipScores(np.arange(8) + 10.0, np.arange(8.0))
    p = (0.05 / 9) ** (1 / 16)
    assert math.log(p / (1 - p)) == pytest.approx(0.95862, abs=1e-5)
    assert scores.epsilon_lower_bound(rng=0) == pytest.approx(math.log(p / (1 - p)), rel=1e-9)
    assert epsilon.epsilon_ceiling(16) == pytest.approx(math.log(p / (1 - p)), rel=1e-9)


def test_membership_scores_is_frozen_and_read_only():
    scores = MembershipScores([1, 2, 3], [0.5, 1.5])
    assert scores.member.dtype == float and scores.member.shape == (3,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        scores.member = np.zeros(3)
    with pytest.raises(ValueError):
        scores.member[0] = 9.0


def test_membership_scores_methods_delegate():
    scores = MembershipScores(HAND_MEMBERS, HAND_NONMEMBERS)
    assert scores.auc() == pytest.approx(5 / 6)
    np.testing.assert_allclose(scores.roc()[1], [0, 1 / 3, 2 / 3, 1, 1])
    assert scores.eps_hat(fpr_levels=(0.5,)) == pytest.approx(math.log(3))
    assert scores.advantage(rng=0) == advantage(HAND_MEMBERS, HAND_NONMEMBERS, rng=0)


@pytest.mark.parametrize(
    "member, nonmember, message",
    [
        ([], [1.0], "member must be non-empty"),
        ([1.0], [], "nonmember must be non-empty"),
        ([1.0, np.nan], [1.0], "nan"),
        ([1.0], [np.inf], "inf"),
        ([[1.0, 2.0]], [1.0], "(1, 2)"),
    ],
)
def test_membership_scores_rejects_bad_input(member, nonmember, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        MembershipScores(member, nonmember)


def test_function_input_validation():
    with pytest.raises(ValueError, match=re.escape("nan")):
        auc([1.0, np.nan], [0.0])
    with pytest.raises(ValueError, match="non-empty"):
        roc([], [0.0])
    with pytest.raises(ValueError, match=re.escape("1.5")):
        tpr_at_fpr([1.0], [0.0], 1.5)
    with pytest.raises(ValueError, match="at least 2"):
        advantage([1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match=re.escape("1.5")):
        MembershipScores([1.0, 2.0], [0.0, 1.0]).summary(confidence=1.5)
    with pytest.raises(ValueError, match=re.escape("-0.1")):
        MembershipScores([1.0, 2.0], [0.0, 1.0]).summary(delta=-0.1)
