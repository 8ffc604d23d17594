"""Simulated mechanisms of known ε for the self-test (`audit.selftest.designs`): each takes the coins
of some runs [R, n] (and a generator) and returns the scores [R, n] an attack would rank.

Every ε is with respect to adding or removing one canary, the relation the plan's independent
coins realise, and each function's docstring proves its mechanism's ε (or μ). A new mechanism is
one function `(keep, epsilon, rng) -> scores` with its proof, then a `Design` row in
`audit.selftest.designs.designs`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize

from attacks.whitebox import likelihood_ratio
from audit.stats.epsilon import gaussian_dp_epsilon

APPROX_DELTA = 1e-5  # the δ of the Gaussian mechanism and of randomised response with a published coin
# the Laplace pool: 150 classes of 10 (one atypical record, nine typical)
N_CLASSES, CLASS_SIZE = 150, 10
# the white-box subsampled Gaussian: dpsgd's digits audit with gradient canaries (q = 128 / 1,250,
# 30 epochs of 10 steps)
WHITEBOX_RATE, WHITEBOX_STEPS = 0.1024, 300
# the marginal counts: fair's 9 one-way marginals and its 8 pairs of the label with a feature
MARGINALS = 17


def randomised_response(keep: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Each canary's coin, told truthfully with probability p = e^ε / (1 + e^ε), flipped otherwise.

    Why its ε is exactly `epsilon`: adding or removing canary i changes only output i, whose
    probability of any value moves between p and 1 - p, a ratio of p / (1 - p) = e^ε, and no
    smaller ε bounds it (pure ε-DP, tight, δ = 0). The score is the output itself (1.0 for IN,
    0.0 for OUT); the many ties are broken by the bound's own independent random order.
    """
    truthful = rng.random(keep.shape) < 1.0 / (1.0 + math.exp(-epsilon))
    return np.where(truthful, keep, ~keep).astype(np.float64)


#: scores of `published_coin_response`: a published IN above every told IN, a published OUT below every told OUT
PUBLISHED_IN, TOLD_IN, TOLD_OUT, PUBLISHED_OUT = 2.0, 1.0, 0.0, -1.0


def published_coin_response(
    keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, delta: float = APPROX_DELTA
) -> np.ndarray:
    """Per canary: with probability δ its coin published as it is, otherwise `randomised_response`
    at ε0 = `epsilon`.

    Why it is exactly (ε0, δ)-DP, with trade-off curve f_{ε0,δ}: adding or removing canary i
    changes only output i. With p = e^ε0 / (1 + e^ε0), its distribution is, IN versus OUT:
    published IN δ vs 0, published OUT 0 vs δ, told IN (1-δ)p vs (1-δ)(1-p), told OUT (1-δ)(1-p)
    vs (1-δ)p. For any set S of outputs, P_IN(S) <= e^ε0 P_OUT(S) + δ (the told outputs have ratio
    at most e^ε0, the published IN carries the δ) and symmetrically, so it is (ε0, δ)-DP. Nothing
    smaller holds: S = {published IN, told IN} gives P_IN(S) - e^ε' P_OUT(S) = δ + (1-δ)(p - e^ε'
    (1-p)) > δ for every ε' < ε0, and δ' < δ fails on S = {published IN} (P_OUT = 0). It is the
    canonical mechanism whose trade-off curve is f_{ε0,δ} itself (Kairouz, Oh and Viswanath): the
    likelihood-ratio tests between the two output laws trace exactly f_{ε0,δ}(x) = max(0, 1 - δ -
    e^ε0 x, e^-ε0 (1 - δ - x)).

    Scores (`PUBLISHED_IN` > `TOLD_IN` > `TOLD_OUT` > `PUBLISHED_OUT`): the published coins are
    ranked as certain, above (IN) and below (OUT) every told one, the likelihood-ratio order.
    """
    told = randomised_response(keep, epsilon, rng)
    published = rng.random(keep.shape) < delta
    scores = np.where(told > 0, TOLD_IN, TOLD_OUT)
    return np.where(published, np.where(keep, PUBLISHED_IN, PUBLISHED_OUT), scores)


def gaussian_mu(epsilon: float, delta: float = APPROX_DELTA) -> float:
    """The μ whose μ-GDP is exactly (`epsilon`, `delta`)-DP: the root of
    `gaussian_dp_epsilon`(μ, δ) = ε (brentq; ε at δ grows with μ). 0.268 for ε = 1, 0.925 for ε = 4."""
    if epsilon <= 0:
        return 0.0
    return float(optimize.brentq(lambda mu: gaussian_dp_epsilon(mu, delta) - epsilon, 1e-6, 100.0, xtol=1e-14))


def gaussian_mechanism(
    keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, delta: float = APPROX_DELTA
) -> np.ndarray:
    """Per canary the output coin·μ + N(0, 1), μ = `gaussian_mu`(ε0, δ); the score is the output.

    Why it is exactly μ-GDP, and exactly (ε0, δ)-DP: adding or removing canary i changes only
    output i, from N(0, 1) to N(μ, 1); the trade-off curve between those two laws is
    G_μ(x) = Φ(Φ⁻¹(1 - x) - μ) by definition of μ-GDP (Dong, Roth and Su), attained by the
    likelihood-ratio (threshold) tests, so the mechanism is μ-GDP and no smaller μ holds. μ-GDP is
    (ε, δ(ε))-DP exactly for δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2) (their Corollary 2.13,
    `gaussian_dp_epsilon`), and μ solves δ(ε0) = δ: (ε0, δ)-DP and not (ε', δ) for ε' < ε0. The
    output is monotone in the likelihood ratio, so it is the optimal score.
    """
    return keep * gaussian_mu(epsilon, delta) + rng.standard_normal(keep.shape)


def whitebox_sigma(claimed_epsilon: float) -> float:
    """The noise multiplier opacus's RDP accountant calibrates to `claimed_epsilon` at δ = 1e-5 for
    `WHITEBOX_STEPS` steps at rate `WHITEBOX_RATE` (as a DP victim does)."""
    from victims.dp.privacy import noise_multiplier_for

    return noise_multiplier_for(
        epsilon=claimed_epsilon, delta=APPROX_DELTA, sample_rate=WHITEBOX_RATE, steps=WHITEBOX_STEPS
    )


def whitebox_true_epsilon(sigma: float) -> float:
    """The PRV accountant's ε at δ = 1e-5 of the white-box design at noise multiplier `sigma`."""
    from victims.dp.privacy import epsilon_spent

    return epsilon_spent(
        noise_multiplier=sigma, sample_rate=WHITEBOX_RATE, steps=WHITEBOX_STEPS, delta=APPROX_DELTA, accountant="prv"
    )


def whitebox_gaussian(keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, sigma: float) -> np.ndarray:
    """The white-box likelihood-ratio scores of canaries under a Poisson-subsampled Gaussian
    mechanism: per canary and step t, o_t = b_t + σ z_t with b_t ~ Bernoulli(`WHITEBOX_RATE`) when
    its coin is IN (0 when OUT) and z_t ~ N(0, 1), over `WHITEBOX_STEPS` steps, scored by
    `attacks.whitebox.likelihood_ratio` at (σ, q): what a white-box audit of a DP victim computes,
    without the other records' share of the sums. Adding or removing the canary is this
    mechanism's neighbouring relation; its ε is that of the subsampled Gaussian composed over the
    steps (`epsilon` is ignored: σ fixes it)."""
    sampled = rng.random((WHITEBOX_STEPS, *keep.shape)) < WHITEBOX_RATE
    observations = (sampled & keep).astype(np.float64) + sigma * rng.standard_normal((WHITEBOX_STEPS, *keep.shape))
    return likelihood_ratio(
        observations.reshape(WHITEBOX_STEPS, -1), noise_multiplier=sigma, sample_rate=WHITEBOX_RATE
    ).reshape(keep.shape)


def marginals_sigma(epsilon: float, marginals: int = MARGINALS, delta: float = APPROX_DELTA) -> float:
    """σ per count that makes `marginals` Gaussian-noised counts of sensitivity 1 exactly (ε, δ)-DP:
    √k / μ with μ = `gaussian_mu`(ε, δ) (k composed Gaussians of noise σ are √k/σ-GDP)."""
    return math.sqrt(marginals) / gaussian_mu(epsilon, delta)


def marginal_counts(
    keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, sigma: float, marginals: int = MARGINALS
) -> np.ndarray:
    """The white-box likelihood-ratio scores of canaries in a table released through `marginals`
    noisy marginals: each canary lies alone in its cell of every marginal (the canaries' cells are
    distinct), whose released count is c_t + b + σ z_t, with c_t the count of the other records in
    the cell (known to a white-box auditor, who subtracts it), b the canary's coin and z_t ~ N(0, 1)
    independent across marginals and canaries. Scored by `attacks.whitebox.likelihood_ratio` at
    (σ, q = 1), the audit's own `whitebox` attack.

    Why it is exactly μ-GDP with μ = √k / σ under adding or removing the canary: the canary moves
    one count by 1 in each of the k marginals and nothing else; the observations less the known c_t
    are N(b, σ²) k times independently, whose likelihood ratio depends on their sum alone,
    N(k b, k σ²): the trade-off curve of N(0, 1) against N(√k / σ, 1), G_μ (Dong, Roth and Su).
    With σ = `marginals_sigma`(ε0) its ε at δ = 1e-5 is ε0 (`epsilon` is ignored: σ fixes it)."""
    others = rng.poisson(20.0, size=(marginals, *keep.shape)).astype(np.float64)
    released = others + keep + sigma * rng.standard_normal((marginals, *keep.shape))
    return likelihood_ratio(
        (released - others).reshape(marginals, -1), noise_multiplier=sigma, sample_rate=1.0
    ).reshape(keep.shape)


def null_scores(keep: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Standard normal scores drawn without looking at the coins: the output says nothing about
    membership, so ε = 0 and μ = 0 (`epsilon` is ignored), and a bound > 0 is a false alarm."""
    return rng.standard_normal(keep.shape)


def class_pool(n_classes: int = N_CLASSES, class_size: int = CLASS_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """labels [n] and record values [n] of the Laplace pool: in every class the first record is
    atypical (value -1), the others typical (+1)."""
    labels = np.repeat(np.arange(n_classes), class_size)
    values = np.where(np.arange(labels.size) % class_size == 0, -1.0, 1.0)
    return labels, values


def laplace_class_sum(
    keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, labels: np.ndarray, values: np.ndarray
) -> np.ndarray:
    """Outputs [R, C]: per run and class, the sum of the values of the run's members of that
    class plus Laplace(1 / ε) noise.

    Why its ε is exactly `epsilon`: adding or removing one record changes one class sum of one
    run by its value, ±1, so the sensitivity under add/remove is 1 and Laplace noise of scale
    1 / ε makes each run ε-DP (the Laplace mechanism); the runs are independent given their
    coins and each coin enters one run only, so the whole output is ε-DP in each coin. It is
    exact: in the tails the likelihood ratio of two sums one apart is e^ε.
    Under a replace-one relation (one record swapped for another of the class) the sum can move
    by 2 (an atypical record for a typical one): up to 2 ε.
    """
    n_classes = int(labels.max()) + 1
    sums = np.zeros((keep.shape[0], n_classes))
    for r in range(keep.shape[0]):
        sums[r] = np.bincount(labels, weights=keep[r] * values, minlength=n_classes)
    return sums + rng.laplace(scale=1.0 / epsilon, size=sums.shape)


def laplace_scores(
    outputs: np.ndarray, *, labels: np.ndarray, values: np.ndarray, atypical_first: bool = False
) -> np.ndarray:
    """Scores [R, n] from the class outputs [R, C]: a typical record scores its class's output (its
    membership raises the sum), an atypical one minus it (its membership lowers the sum).

    Pooled, typical records (sums near +4) rank above atypical ones (near -4), so the grid's
    IN guesses fall on typical records and only its OUT guesses on atypical ones. With
    `atypical_first` every atypical score is raised by a constant that puts it above every
    typical score, order within each kind unchanged: the IN guesses then fall on atypical
    records. Both rules see the outputs only, never the coins, so both are valid guessing rules.
    """
    per_record = outputs[:, labels]
    scores = np.where(values > 0, per_record, -per_record)
    if atypical_first:
        offset = 2.0 * float(np.abs(outputs).max()) + 1.0
        scores = np.where(values > 0, scores, scores + offset)
    return scores


def laplace_mechanism(
    keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, atypical_first: bool = False
) -> np.ndarray:
    """`laplace_class_sum` on the `class_pool`, scored by `laplace_scores`."""
    labels, values = class_pool()
    outputs = laplace_class_sum(keep, epsilon, rng, labels=labels, values=values)
    return laplace_scores(outputs, labels=labels, values=values, atypical_first=atypical_first)
