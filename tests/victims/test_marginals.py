"""`marginals`: the exact Gaussian-DP calibration, the recorded mechanism on the audit's exact curve,
the noisy marginals and the sampler, the white-box observations of record canaries, the two bugs of
the catalogue built on it (h: the domain read from the members, i: noise for 10 x the claim), and
the refusals of bad flags. A release takes milliseconds; no test here trains the downstream model."""

import dataclasses
import math

import numpy as np
import pytest
from scipy.stats import norm

from audit.stats.mechanism import SubsampledGaussian, epsilon_at, rejects
from shadow_runs.plan import membership_matrix
from victims import get_victim
from victims.bugs import MarginalsDomainFromData, MarginalsNoiseForTen
from victims.dp.privacy import composed_gaussian_noise, gdp_epsilon, gdp_mu_for
from victims.dp.whitebox_canaries import WhiteBoxSpec
from victims.pipelines.marginals import (
    MOST_CELL_CANARIES,
    MarginalsVictim,
    measured_marginals,
    noisy_marginals,
    probabilities,
    sample_codes,
)

#: mu of (1, 1e-5)-DP Gaussian DP (derivation in test_the_calibration_is_exact_gaussian_dp)
MU_1 = 0.2680511232112943


@pytest.fixture(scope="module")
def keep(table):
    return membership_matrix(table.y, n_runs=2, master_seed=0)[0]


def test_the_calibration_is_exact_gaussian_dp():
    # mu-GDP is (eps, delta(eps))-DP for delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    # (Dong, Roth and Su, Cor. 2.13). At mu = 0.26805112321: -1/mu + mu/2 = -3.7306 + 0.1340 = -3.59661,
    # Phi = 1.61198e-4; -1/mu - mu/2 = -3.86466, e * Phi = 2.71828 * 5.56227e-5 = 1.51198e-4; their
    # difference is 1.0000e-5: mu(1, 1e-5) = 0.26805112321.
    mu = gdp_mu_for(1.0, 1e-5)
    assert mu == pytest.approx(MU_1, rel=1e-12)
    assert norm.cdf(-1 / mu + mu / 2) - math.e * norm.cdf(-1 / mu - mu / 2) == pytest.approx(1e-5, rel=1e-9)
    assert gdp_epsilon(mu, 1e-5) == pytest.approx(1.0, rel=1e-12)
    # k marginals of sensitivity 1 at noise sigma: sqrt(k)/sigma-GDP, so sigma = sqrt(k)/mu:
    # k = 9 (fair's 1-way marginals): 3 / 0.26805112321 = 11.19189490; k = 17 (and the 8 (label, feature)): 15.38178828
    assert composed_gaussian_noise(epsilon=1.0, delta=1e-5, compositions=9) == pytest.approx(11.191894904, rel=1e-9)
    assert composed_gaussian_noise(epsilon=1.0, delta=1e-5, compositions=17) == pytest.approx(15.381788281, rel=1e-9)
    # the audit's own Gaussian-DP code (log-space, another root finder) reads the same epsilon back
    assert epsilon_at(SubsampledGaussian(3 / mu, 1.0, 9), 1e-5) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("two_way, k", [("label", 17), ("none", 9)])
def test_a_run_records_the_claim_and_its_exact_mechanism(table, keep, two_way, k):
    victim = get_victim("marginals")(epsilon=1.0, two_way=two_way, rows=50)
    released = victim.release(table, keep, 3, inclusion_rate=0.5)
    # fair: 8 features + the label = 9 one-way marginals, and with --two-way label 8 (label, feature) ones
    assert released.extra["mechanism"] == {"noise_multiplier": math.sqrt(k) / MU_1, "sample_rate": 1.0, "steps": k}
    assert released.extra["delta"] == 1e-5 and released.extra["formal_epsilon"] == pytest.approx(1.0, rel=1e-12)
    mechanism = SubsampledGaussian.of(released.extra["mechanism"])
    assert mechanism.full_batch and mechanism.mu == pytest.approx(MU_1, rel=1e-12)
    assert epsilon_at(mechanism, 1e-5) == pytest.approx(1.0, rel=1e-9)


def test_the_measured_marginals_and_the_release_dimension(table):
    # d = 2 features (0, 1), label 2: every 1-way marginal, then (label, feature) for each feature
    assert measured_marginals(2, "label") == ((0,), (1,), (2,), (2, 0), (2, 1))
    assert measured_marginals(2, "none") == ((0,), (1,), (2,))
    # every gradient canary gets cells of its own, so the release hosts as many as a run may append
    assert MarginalsVictim().release_dimension(table) == MOST_CELL_CANARIES == 100_000


def test_noisy_marginals_count_the_cells_and_a_missing_cell_is_nan():
    codes = np.array([[0, 1], [0, 1], [1, 0]])  # one feature of 2 cells, a label of 2 cells
    rng = np.random.default_rng(0)
    tables, _ = noisy_marginals(codes, (2, 2), ((0,), (1,), (1, 0)), sigma=0.0, rng=rng)
    assert [t.tolist() for t in tables] == [[2, 1], [1, 2], [[0, 1], [2, 0]]]  # (label, feature): rows by label
    support = (np.array([True, False]), np.array([True, True]))
    found, _ = noisy_marginals(codes, (2, 2), ((0,), (1, 0)), sigma=0.0, rng=rng, support=support)
    assert np.isnan(found[0][1]) and np.isnan(found[1][:, 1]).all() and found[1][1, 0] == 2


def test_probabilities_clip_renormalise_and_fall_back_to_uniform():
    noisy = np.array([[3.0, -1.0, 1.0], [-2.0, -1.0, 0.0], [np.nan, -1.0, np.nan]])
    # row 0: clipped (3, 0, 1) / 4; row 1: no positive count, uniform; row 2: uniform over its one existing cell
    expected = [[0.75, 0.0, 0.25], [1 / 3, 1 / 3, 1 / 3], [0.0, 1.0, 0.0]]
    np.testing.assert_allclose(probabilities(noisy), expected, rtol=0, atol=1e-15)


def test_noiseless_sampling_reproduces_the_marginals_in_expectation(table, keep):
    """sigma = 0: the label is drawn from the members' label frequencies and each feature from its
    frequency given the label. 200,000 rows, seed 0: a frequency p's standard error is at most
    sqrt(0.25 / 200,000) = 0.0011, so a tolerance of 0.006 is over 5 standard errors."""
    schema, marginals = table.schema, measured_marginals(8, "label")
    codes = schema.codes(table.x[keep], table.y[keep])
    tables, _ = noisy_marginals(codes, schema.domain_sizes, marginals, sigma=0.0, rng=np.random.default_rng(0))
    drawn = sample_codes(tables, marginals, 200_000, np.random.default_rng(0))
    label = np.bincount(codes[:, 8], minlength=5) / len(codes)
    np.testing.assert_allclose(np.bincount(drawn[:, 8], minlength=5) / len(drawn), label, atol=0.006)
    for j in (3, 7):  # children given label, affairs' bins given label (several bins empty: never drawn)
        for c in range(5):
            given = codes[codes[:, 8] == c, j]
            want = np.bincount(given, minlength=schema.domain_sizes[j]) / len(given)
            got = drawn[drawn[:, 8] == c, j]
            np.testing.assert_allclose(np.bincount(got, minlength=schema.domain_sizes[j]) / len(got), want, atol=0.02)
            assert (np.bincount(got, minlength=schema.domain_sizes[j])[want == 0] == 0).all()


def canary_table(table, codes: np.ndarray, kind: str = "record"):
    """The fair pool with rows of the given cells appended as white-box record canaries."""
    x, y = table.schema.from_codes(codes, np.random.default_rng(0))
    spec = WhiteBoxSpec(first_row=table.n_pool, n=len(codes), kind=kind, seed=0)
    return dataclasses.replace(table, x=np.concatenate([table.x, x]), y=np.concatenate([table.y, y]), white_box=spec)


#: four canaries, canary j in cell j of every column: distinct in every marginal (children has 4 cells)
DISTINCT = np.repeat(np.arange(4)[:, None], 9, axis=1)


def test_white_box_observations_are_the_canaries_coins_plus_gaussian_noise(table):
    """Canaries 0 and 1 in, 2 and 3 out, 300 seeds of 17 observations each at epsilon 10
    (sigma = sqrt(17) / 2.00045 = 2.0611): each canary's mean has standard error 2.06 / sqrt(5100)
    = 0.029 (tolerance 0.15, 5 standard errors) and its standard deviation one of about 1%
    (tolerance 5%)."""
    pool = canary_table(table, DISTINCT)
    victim = MarginalsVictim(epsilon=10.0, rows=10)
    keep = np.zeros(pool.n_pool, dtype=bool)
    keep[::2] = True
    keep[pool.n_pool - 4 :] = [True, True, False, False]
    victim.check(pool)
    seen = np.concatenate([victim.release(pool, keep, s, inclusion_rate=0.5).extra["whitebox"] for s in range(300)])
    sigma = victim.claimed_noise(pool)
    assert seen.shape == (300 * 17, 4) and sigma == pytest.approx(math.sqrt(17) / 2.0004456204, rel=1e-9)
    np.testing.assert_allclose(seen.mean(0), [1.0, 1.0, 0.0, 0.0], atol=0.15)
    np.testing.assert_allclose(seen.std(0), sigma, rtol=0.05)
    mechanism = victim.release(pool, keep, 0, inclusion_rate=0.5).extra["whitebox_mechanism"]
    assert mechanism == {"noise_multiplier": sigma, "sample_rate": 1.0}


@pytest.mark.parametrize("kind", ["record", "gradient"])
def test_zero_white_box_canaries_leave_the_release_unchanged_bit_for_bit(table, keep, kind):
    victim = MarginalsVictim(rows=50)
    plain = victim.release(table, keep, 7, inclusion_rate=0.5)
    probed_pool = dataclasses.replace(table, white_box=WhiteBoxSpec(first_row=table.n_pool, n=0, kind=kind, seed=0))
    probed = victim.release(probed_pool, keep, 7, inclusion_rate=0.5)
    assert np.array_equal(plain.x, probed.x) and np.array_equal(plain.y, probed.y)
    assert "whitebox" not in plain.extra and probed.extra["whitebox"].shape == (17, 0)


def test_gradient_canaries_get_cells_of_their_own_observed_as_their_coins_plus_gaussian_noise(table):
    """1,000 gradient canaries (more than the 4 record canaries fair allows), half of them in, 60 seeds
    of 17 observations at epsilon 10 (sigma 2.0611): the in canaries' mean has standard error
    2.06 / sqrt(60 * 17 * 500) = 0.0029 (tolerance 0.02), the spread is sigma to 1% (tolerance 3%);
    the noise bug's draws are sigma for 100, its recorded sigma the claim's."""
    n = 1000
    spec = WhiteBoxSpec(first_row=table.n_pool, n=n, kind="gradient", seed=0)
    pool = dataclasses.replace(
        table,
        x=np.concatenate([table.x, np.zeros((n, table.x.shape[1]), dtype=np.float32)]),
        y=np.concatenate([table.y, np.zeros(n, dtype=np.int64)]),
        white_box=spec,
    )
    victim = MarginalsVictim(epsilon=10.0, rows=10)
    victim.check(pool)
    keep = np.zeros(pool.n_pool, dtype=bool)
    keep[::2] = True  # every other natural record, and canaries 0, 2, 4, ...
    seen = np.stack([victim.release(pool, keep, s, inclusion_rate=0.5).extra["whitebox"] for s in range(60)])
    coins = keep[table.n_pool :]
    sigma = victim.claimed_noise(pool)
    assert seen.shape == (60, 17, n)
    assert abs(seen[..., coins].mean() - 1.0) < 0.02 and abs(seen[..., ~coins].mean()) < 0.02
    assert seen[..., coins].std() == pytest.approx(sigma, rel=0.03)
    # the canaries' rows are no records and their cells are not sampled: every canary in or every one out,
    # the same release bit for bit (the noise is drawn alike whatever the coins)
    every, none = keep.copy(), keep.copy()
    every[table.n_pool :], none[table.n_pool :] = True, False
    released = [victim.release(pool, k, 3, inclusion_rate=0.5) for k in (every, none)]
    assert np.array_equal(released[0].x, released[1].x) and np.array_equal(released[0].y, released[1].y)
    ten = MarginalsNoiseForTen(epsilon=1.0, rows=10)
    drawn = np.stack([ten.release(pool, keep, s, inclusion_rate=0.5).extra["whitebox"] for s in range(20)])
    assert drawn[..., ~coins].std() == pytest.approx(ten.drawn_noise(pool), rel=0.05)
    assert ten.release(pool, keep, 0, inclusion_rate=0.5).extra["whitebox_mechanism"]["noise_multiplier"] == (
        pytest.approx(ten.claimed_noise(pool))
    )


def test_canaries_sharing_a_cell_are_refused(table):
    shared = DISTINCT.copy()
    shared[1, 8] = 0  # canary 1 takes canary 0's label: they share a cell of the label's marginal
    n = table.n_pool
    with pytest.raises(ValueError, match=rf"rows {n} and {n + 1} share cell \(0,\) of the marginal of rate_marriage$"):
        MarginalsVictim().check(canary_table(table, shared))


def test_the_domain_bug_releases_exactly_the_members_categories(table):
    """No member is religious category 0 (37 pool rows) nor holds affairs above 20: the bug never
    releases that category nor a value above the members' largest; its correct twin, whose domain
    is public, releases the empty category's noisy cells (seed 5, 20,000 rows) and the public bins."""
    codes = table.schema.codes(table.x, table.y)
    keep = (codes[:, 3] != 0) & (table.x[:, 7] <= 20.0)
    members = codes[keep]
    for victim, claims in (
        (MarginalsDomainFromData(rows=20_000, epsilon=10.0), True),
        (MarginalsVictim(rows=20_000), False),
    ):
        released = victim.release(table, keep, 5, inclusion_rate=0.5)
        got = table.schema.codes(released.x, released.y)
        if claims:
            for j in range(7):  # every categorical feature and the label
                assert set(got[:, j].tolist()) == set(members[:, j].tolist())
            assert set(got[:, 8].tolist()) == set(members[:, 8].tolist())
            assert released.x[:, 7].max() <= table.x[keep, 7].max()
        else:
            assert 0 in set(got[:, 3].tolist()) and released.x[:, 7].max() > 20.0
    # the bug records its correct twin's claim
    assert MarginalsDomainFromData().claim(table) == MarginalsVictim().claim(table)


def test_noise_for_ten_draws_the_noise_of_ten_times_the_claim_and_records_the_claim(table, keep):
    bug = MarginalsNoiseForTen(rows=10)
    # mu(10, 1e-5) = 2.00044562 (the same duality as MU_1): sigma = sqrt(17) / 2.00044562 = 2.0611
    assert bug.drawn_noise(table) == pytest.approx(math.sqrt(17) / 2.0004456204, rel=1e-9)
    assert bug.claim(table) == MarginalsVictim().claim(table)
    assert bug.release(table, keep, 1, inclusion_rate=0.5).extra == MarginalsVictim().claim(table)
    # 4 canaries x 32 target runs, all right at the own curve's level: the claimed G_0.268 is rejected
    assert rejects(SubsampledGaussian(bug.claimed_noise(table), 1.0, 17), m=128, guesses=40, correct=40, alpha=0.05)


def test_the_noise_bug_shows_black_box_in_the_pairs_its_unheld_canaries_alone_hold(table):
    """Black-box, the worst case for the noise: on the pool without each feature's 2 rarest cells, 10
    `unheld` canaries, each the only record of its label in 8 (label, feature) cells, and 10,000
    released records. The `pairs` score of a canary sums its 8 cells' released counts, which follow
    1 + noise (in) or noise (out), clipped and renormalised: at most sqrt(8) / sigma of separation,
    1.37 for the bug's sigma 2.061 (AUC <= Phi(1.37 / sqrt 2) = 0.83), 0.18 for the claim's 15.38
    (AUC 0.55). Measured on master seeds 0-3 with 32 runs each: bug 0.77-0.83, correct 0.51-0.58;
    here, 64 runs (640 coins) at seed 0: 0.810 and 0.549, asserted with a margin of about 0.1."""
    from sklearn.metrics import roc_auc_score

    from attacks.tabular.support import pair_extension
    from victims.canaries import CanaryConfig, add_canaries
    from victims.tabular.pools import unheld_subset

    pool = add_canaries(unheld_subset(table, 2), CanaryConfig(n=10, kind="unheld", seed=0))
    codes, sizes = pool.schema.codes(pool.x, pool.y), np.array(pool.schema.domain_sizes)
    canaries = np.arange(pool.n_pool - 10, pool.n_pool)
    keep = membership_matrix(pool.y, n_runs=64, master_seed=0)
    auc = {}
    for victim in (MarginalsNoiseForTen(epsilon=1.0, rows=10_000), MarginalsVictim(epsilon=1.0, rows=10_000)):
        scores = []
        for r in range(64):
            released = victim.release(pool, keep[r], r, inclusion_rate=0.5)
            scores.append(pair_extension(codes, pool.schema.codes(released.x, released.y), sizes)[canaries])
        auc[victim.name] = roc_auc_score(keep[:, canaries].ravel(), np.ravel(scores))
    assert auc["marginals_noise_for_ten"] > 0.7
    assert auc["marginals"] < 0.65


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"epsilon": 0.0}, "--epsilon must be a positive number, got 0.0"),
        ({"epsilon": float("nan")}, "--epsilon must be a positive number, got nan"),
        ({"epsilon": 101.0}, "--epsilon must be at most 100, got 101.0"),
        ({"delta": 1.0}, r"--delta must be in \(0, 1\), got 1.0"),
        ({"two_way": "all"}, r"--two-way must be one of \('label', 'none'\), got 'all'"),
        ({"rows": 0}, "--rows must be >= 1, got 0"),
    ],
)
def test_bad_flags_are_refused_naming_the_value(flags, message):
    with pytest.raises(ValueError, match=message):
        MarginalsVictim(**flags)


def test_the_noise_bug_refuses_a_claim_it_cannot_multiply_by_ten():
    with pytest.raises(ValueError, match=r"--epsilon must be at most 10 \(the bug calibrates to 10 x\), got 11.0"):
        MarginalsNoiseForTen(epsilon=11.0)


def test_images_are_refused(pool):
    with pytest.raises(ValueError, match="--victim marginals releases a table; --dataset digits holds images"):
        MarginalsVictim().check(pool)
