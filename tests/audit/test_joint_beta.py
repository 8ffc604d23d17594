"""The dpmm audit's own μ figure (`audit.stats.joint_beta`), shown beside the suite's certified bound:
pinned to a worked example, and checked against its definition by simulation."""

import numpy as np
import pytest
from scipy import special

from audit.stats.joint_beta import gdp_beta, joint_beta_mu, private_mass
from audit.stats.threshold import baseline_bounds

#: a symmetric threshold at 4,500 fits a side: TPR = 1 - FPR = 0.6087, the point estimate μ = 0.5517
COUNTS = {"tp": 2739, "fn": 1761, "fp": 1761, "tn": 2739}


def test_the_worked_example():
    assert 2 * special.ndtri(2739 / 4500) == pytest.approx(0.5517, abs=1e-4)
    assert joint_beta_mu(**COUNTS, alpha=0.1) == pytest.approx(0.5174, abs=1e-3)
    assert joint_beta_mu(**COUNTS, alpha=0.05) == pytest.approx(0.5076, abs=1e-3)
    # above Nasr et al.'s Clopper–Pearson bound on the same counts at the same level: it is a posterior
    # quantile of a joint region, not two Bonferroni-split bounds
    baseline, _ = baseline_bounds(tp=2739, n_in=4500, fp=1761, n_out=4500, delta=0.0, confidence=0.9)
    assert baseline < joint_beta_mu(**COUNTS, alpha=0.1)


def test_the_region_s_mass_is_the_posterior_s_probability_of_the_gdp_region():
    rng = np.random.default_rng(0)
    fpr = rng.beta(0.5 + 1761, 0.5 + 2739, size=400_000)
    fnr = rng.beta(0.5 + 1761, 0.5 + 2739, size=400_000)
    simulated = np.mean(fnr >= gdp_beta(fpr, 0.53))
    assert private_mass(0.53, **COUNTS) == pytest.approx(simulated, abs=3e-3)


def test_no_separation_gives_zero_and_alpha_is_checked():
    assert joint_beta_mu(tp=50, fn=50, fp=50, tn=50, alpha=0.1) == 0.0
    with pytest.raises(ValueError, match="alpha must be in"):
        joint_beta_mu(**COUNTS, alpha=1.0)
