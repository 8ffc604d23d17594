"""Tests for audit.selftest.mechanisms by hand: the Laplace pool and its scores, and the limits
of the randomised and null mechanisms. (Rates on many draws and the Gaussian mechanism's μ:
tests/audit/test_selftest.py.)"""

import numpy as np

from audit.selftest.mechanisms import class_pool, gaussian_mu, laplace_scores, null_scores, randomised_response


def test_the_laplace_pool_has_one_atypical_record_first_in_each_class():
    labels, values = class_pool(2, 3)
    assert labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert values.tolist() == [-1.0, 1.0, 1.0, -1.0, 1.0, 1.0]


def test_laplace_scores_by_hand():
    # class outputs (2, -1); records: atypical and typical of class 0, atypical and typical of class 1.
    # A typical record scores its class's output, an atypical one minus it: (-2, 2, 1, -1).
    # atypical_first adds 2 max|output| + 1 = 5 to the atypical ones: (3, 2, 6, -1).
    outputs = np.array([[2.0, -1.0]])
    labels, values = np.array([0, 0, 1, 1]), np.array([-1.0, 1.0, -1.0, 1.0])
    assert laplace_scores(outputs, labels=labels, values=values).tolist() == [[-2.0, 2.0, 1.0, -1.0]]
    first = laplace_scores(outputs, labels=labels, values=values, atypical_first=True)
    assert first.tolist() == [[3.0, 2.0, 6.0, -1.0]]


def test_randomised_response_at_a_huge_epsilon_always_tells_the_truth():
    # p = 1 / (1 + e^-50) rounds to 1.0: every uniform draw is below it
    keep = np.random.default_rng(0).random((3, 100)) < 0.5
    assert (randomised_response(keep, 50.0, np.random.default_rng(1)) == keep).all()


def test_null_scores_do_not_look_at_the_coins():
    keep = np.random.default_rng(0).random((3, 100)) < 0.5
    same = null_scores(~keep, 1.0, np.random.default_rng(1))
    np.testing.assert_array_equal(null_scores(keep, 1.0, np.random.default_rng(1)), same)


def test_no_epsilon_is_no_signal():
    assert gaussian_mu(0.0) == 0.0 and gaussian_mu(-1.0) == 0.0
