"""Tests for audit.stats.bounds by hand: a row's checks and keys, the registry's order and lookup,
the Steinke test's early exit, the Gaussian family's ε, the mechanism test's refusals. (Every row
held to the summary.json contract: tests/contracts/test_registry.py.)"""

import math

import pytest

from audit.stats.bounds import (
    ANALYSES,
    BOUNDS,
    FDP,
    GAUSSIAN,
    STEINKE,
    SUMMARY_KEYS,
    VERDICT_BOUND,
    Bound,
    gaussian_epsilon,
    get_bound,
    mechanism_test,
    steinke_test,
)
from audit.stats.epsilon import gaussian_dp_epsilon
from audit.stats.mechanism import SubsampledGaussian


def test_the_registry_s_order_keys_and_verdict_bound():
    assert ANALYSES == ("steinke", "fdp", "gaussian", "mechanism")
    assert [b.name for b in BOUNDS] == list(ANALYSES)
    assert VERDICT_BOUND is FDP
    assert STEINKE.keys == ("eps_lower", "eps_ceiling")
    assert GAUSSIAN.keys == ("mu_lower", "mu_ceiling", "eps_gaussian")
    assert SUMMARY_KEYS == (
        "guess_rule",
        "eps_lower",
        "eps_ceiling",
        "eps_lower_fdp",
        "eps_ceiling_fdp",
        "mu_lower",
        "mu_ceiling",
        "eps_gaussian",
        "eps_lower_mechanism",
        "eps_ceiling_mechanism",
        "guesses",
    )
    assert get_bound("gaussian") is GAUSSIAN
    with pytest.raises(ValueError, match="analysis must be one of steinke, fdp, gaussian, mechanism, got 'x'"):
        get_bound("x")


def test_a_row_refuses_an_unknown_unit_and_half_an_epsilon_conversion():
    fields = dict(name="n", lower_key="l", ceiling_key="c", label="n", test=steinke_test, about="a")
    with pytest.raises(ValueError, match="a bound's unit is one of eps, mu, got 'bits'"):
        Bound(**fields, unit="bits")
    with pytest.raises(ValueError, match="epsilon_key and to_epsilon come together"):
        Bound(**fields, unit="mu", epsilon_key="e")


def test_the_steinke_test_stops_early_below_at_least():
    # 10 right of 10 at α = 0.05, δ = 0: ε is rejected while p^10 < 0.05, p = e^ε / (1 + e^ε):
    # the bound is ln(p / (1 - p)) at p = 0.05^(1/10) = 0.741134, 1.051873.
    # at_least = 1: p = 0.731059, p^10 = 0.0436 < 0.05, rejected: the full bound.
    # at_least = 1.1: p = 0.750260, p^10 = 0.0566 >= 0.05, not rejected: 0 at once.
    design = dict(m=10, guesses=10, correct=10, delta=0.0, alpha=0.05)
    p = 0.05 ** (1 / 10)
    assert steinke_test(**design) == pytest.approx(math.log(p / (1 - p)), abs=1e-9)
    assert steinke_test(**design, at_least=1.0) == steinke_test(**design)
    assert steinke_test(**design, at_least=1.1) == 0.0


def test_the_gaussian_family_s_epsilon():
    assert gaussian_epsilon(0.0, 0.0) == 0.0  # μ = 0 is 0-DP
    assert gaussian_epsilon(1.0, 0.0) is None  # μ-GDP with μ > 0 is no pure ε
    assert gaussian_epsilon(1.0, 1e-5) == gaussian_dp_epsilon(1.0, 1e-5)


def test_the_mechanism_test_needs_delta_and_is_zero_when_nothing_is_rejected():
    claimed = SubsampledGaussian(1.0, 1.0, 4)
    with pytest.raises(ValueError, match=r"needs delta in \(0, 1\), got 0.0"):
        mechanism_test(m=10, guesses=10, correct=10, delta=0.0, alpha=0.05, mechanism=claimed)
    # 4 right of 4 at α = 0.05: even ε = 0 gives P = 1/16 > 0.05, so no noise level is rejected
    assert mechanism_test(m=4, guesses=4, correct=4, delta=1e-5, alpha=0.05, mechanism=claimed) == 0.0
