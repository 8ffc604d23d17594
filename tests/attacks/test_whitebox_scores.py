"""The white-box statistics (attacks.whitebox): exact values, and the likelihood ratio's power."""

import math

import numpy as np
import pytest

from attacks.whitebox import likelihood_ratio, run_scores, step_changes, summed_projection


def test_likelihood_ratio_exact_two_steps():
    # one canary, o = (1, 0), sigma = 1, q = 1/2: per step log(1/2 + 1/2 exp((2 o - 1) / 2)), so
    # log(1/2 (1 + e^0.5)) + log(1/2 (1 + e^-0.5)) = log(1/4 (2 + e^0.5 + e^-0.5)) = log((1 + cosh 0.5) / 2)
    o = np.array([[1.0], [0.0]])
    expected = math.log((1 + math.cosh(0.5)) / 2)  # 0.0618...
    assert likelihood_ratio(o, noise_multiplier=1.0, sample_rate=0.5) == pytest.approx([expected], abs=1e-12)


def test_likelihood_ratio_at_rate_one_is_the_shifted_sum():
    # q = 1: sum_t (2 o_t - 1) / (2 sigma^2); o = (1, 2, -1), sigma = 2: (1 + 3 - 3) / 8 = 0.125
    o = np.array([[1.0], [2.0], [-1.0]])
    assert likelihood_ratio(o, noise_multiplier=2.0, sample_rate=1.0) == pytest.approx([0.125], abs=1e-15)


def test_summed_and_step_changes_exact():
    o = np.array([[1.0, 0.0], [3.0, 0.5], [2.0, 0.5]])  # [steps, canaries]
    assert summed_projection(o).tolist() == [6.0, 1.0]
    assert step_changes(o).tolist() == [3.0, 0.5]  # |3 - 1| + |2 - 3|; |0.5 - 0| + 0


def test_run_scores_fill_the_canary_rows_and_leave_the_rest_nan():
    whitebox = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)  # 2 runs, 3 steps, 2 canaries
    mechanism = [{"noise_multiplier": 1.0, "sample_rate": 0.5}] * 2
    scores = run_scores(
        lambda o, mechanism: summed_projection(o), whitebox, mechanism, np.array([3, 4]), 5, np.array([1])
    )
    assert scores.shape == (1, 5) and np.isnan(scores[0, :3]).all()
    assert scores[0, 3:].tolist() == [6 + 8 + 10, 7 + 9 + 11]


def test_likelihood_ratio_separates_in_from_out_under_the_claimed_mechanism():
    # 2,000 canaries, half IN; 100 steps at q = 0.2, sigma = 2: the IN canaries' mean LR is higher,
    # and the AUC of the LR is at least that of the plain sum (it is the Neyman-Pearson statistic)
    rng = np.random.default_rng(0)
    member = np.arange(2000) < 1000
    sampled = (rng.random((100, 2000)) < 0.2) & member
    o = sampled + 2.0 * rng.standard_normal((100, 2000))
    lr, total = likelihood_ratio(o, noise_multiplier=2.0, sample_rate=0.2), summed_projection(o)

    def auc(s):
        return float((s[member][:, None] > s[~member][None, :]).mean())

    assert auc(lr) > 0.75 and auc(lr) >= auc(total) - 0.005
