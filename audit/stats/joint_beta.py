"""The dpmm audit's own μ figure from one threshold's counts, for comparison only (labelled so
wherever it is printed): not a frequentist confidence bound, and not the suite's certifier.

As dpmm's audit (Ganev, Annamalai & Kulynych, TPDP 2026, `JointBetaMu`, after Zanella-Béguelin et
al. 2023): Jeffreys posteriors on FPR and FNR, and the μ at which the posterior mass of the μ-GDP
region {FNR >= Φ(Φ⁻¹(1 - FPR) - μ)} equals α (at "90%", α = 0.1), computed with scipy.
"""

from __future__ import annotations

import numpy as np
from scipy import integrate, optimize
from scipy.stats import beta as beta_distribution

from audit.stats.pair_test import gaussian_curve


def gdp_beta(fpr, mu: float):
    """β_μ(f): the least FNR a μ-GDP mechanism allows at FPR f, 1 - G_μ(f) (`pair_test.gaussian_curve`)."""
    return 1.0 - gaussian_curve(mu)(np.asarray(fpr, dtype=float))


def private_mass(mu: float, *, tp: int, fn: int, fp: int, tn: int) -> float:
    """The posterior probability that (FPR, FNR) lies in the μ-GDP region."""
    fpr, fnr = beta_distribution(0.5 + fp, 0.5 + tn), beta_distribution(0.5 + fn, 0.5 + tp)
    low, high = fpr.ppf(1e-12), fpr.ppf(1 - 1e-12)  # the posterior's support, for quad to resolve its peak
    mass, _ = integrate.quad(lambda f: fpr.pdf(f) * fnr.sf(gdp_beta(f, mu)), low, high, epsabs=1e-7, limit=200)
    return float(np.clip(mass, 0.0, 1.0))


def joint_beta_mu(*, tp: int, fn: int, fp: int, tn: int, alpha: float = 0.1, most: float = 50.0) -> float:
    """The dpmm audit's μ: the root of private_mass(μ) = alpha (0 where μ = 0 already holds that much)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")

    def excess(mu: float) -> float:
        return private_mass(mu, tp=tp, fn=fn, fp=fp, tn=tn) - alpha

    if excess(0.0) >= 0.0:
        return 0.0
    high = 1.0
    while excess(high) < 0.0:
        if high >= most:
            return most
        high = min(2.0 * high, most)
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-4))
