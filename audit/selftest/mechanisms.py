"""Simulated mechanisms of known ε for the self-test (`audit.selftest.designs`): each maps the coins of some runs [R, n]
(and a generator) to the scores [R, n] an attack would rank. Every ε is with respect to adding or removing one canary,
and each function's docstring proves it. A new mechanism is one function `(keep, epsilon, rng) -> scores` with its
proof, then a `Design` row in `audit.selftest.designs.designs`."""

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

    Exactly ε-DP (tight, δ = 0): adding or removing canary i changes only output i, whose probabilities move between p
    and 1 - p, a ratio of e^ε. The score is the output (1.0 IN, 0.0 OUT); ties are broken by the bound's own random
    order.
    """
    truthful = rng.random(keep.shape) < 1.0 / (1.0 + math.exp(-epsilon))
    return np.where(truthful, keep, ~keep).astype(np.float64)


#: scores of `published_coin_response`: a published IN above every told IN, a published OUT below every told OUT
PUBLISHED_IN, TOLD_IN, TOLD_OUT, PUBLISHED_OUT = 2.0, 1.0, 0.0, -1.0


def published_coin_response(
    keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, delta: float = APPROX_DELTA
) -> np.ndarray:
    """Per canary: with probability δ its coin published as it is, otherwise `randomised_response` at ε0 = `epsilon`.

    Exactly (ε0, δ)-DP, with trade-off curve f_{ε0,δ}: adding or removing canary i changes only output i. With p = e^ε0
    / (1 + e^ε0), IN versus OUT: published IN δ vs 0, published OUT 0 vs δ, told IN (1-δ)p vs (1-δ)(1-p), told OUT
    (1-δ)(1-p) vs (1-δ)p. So P_IN(S) <= e^ε0 P_OUT(S) + δ for every S, and symmetrically. Nothing smaller holds: S =
    {published IN, told IN} gives P_IN(S) - e^ε' P_OUT(S) = δ + (1-δ)(p - e^ε' (1-p)) > δ for ε' < ε0, and δ' < δ fails
    on S = {published IN}. It is the canonical mechanism of f_{ε0,δ} (Kairouz, Oh and Viswanath): its likelihood-ratio
    tests trace f_{ε0,δ}(x) = max(0, 1 - δ - e^ε0 x, e^-ε0 (1 - δ - x)). Scores follow the likelihood-ratio order
    `PUBLISHED_IN` > `TOLD_IN` > `TOLD_OUT` > `PUBLISHED_OUT`.
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

    Exactly μ-GDP and (ε0, δ)-DP: adding or removing canary i moves output i from N(0, 1) to N(μ, 1), whose trade-off
    curve is G_μ(x) = Φ(Φ⁻¹(1 - x) - μ) by definition (Dong, Roth and Su), attained by threshold tests. μ-GDP is exactly
    (ε, δ(ε))-DP for δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2) (their Corollary 2.13, `gaussian_dp_epsilon`), and μ
    solves δ(ε0) = δ. The output is monotone in the likelihood ratio: the optimal score.
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
    """The PRV accountant's ε at δ = 1e-5 of the white-box design at noise multiplier `sigma` (memoised by
    `victims.dp.privacy.history_epsilon`)."""
    from victims.dp.privacy import epsilon_spent

    return epsilon_spent(
        noise_multiplier=sigma, sample_rate=WHITEBOX_RATE, steps=WHITEBOX_STEPS, delta=APPROX_DELTA, accountant="prv"
    )


def whitebox_gaussian(keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, sigma: float) -> np.ndarray:
    """The white-box likelihood-ratio scores of canaries under a Poisson-subsampled Gaussian: per canary and step t, o_t
    = b_t + σ z_t, b_t ~ Bernoulli(`WHITEBOX_RATE`) when IN (0 when OUT), z_t ~ N(0, 1), over `WHITEBOX_STEPS` steps,
    scored by `attacks.whitebox.likelihood_ratio` at (σ, q): a white-box audit of a DP victim without the other records'
    share of the sums. Its ε is the subsampled Gaussian's composed over the steps (`epsilon` is ignored: σ fixes it)."""
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
    """The white-box likelihood-ratio scores of canaries in a table released through `marginals` noisy marginals: each
    canary alone in its cell of every marginal, released as c_t + b + σ z_t (c_t the other records' count, known to and
    subtracted by a white-box auditor, b the coin, z_t ~ N(0, 1) independent), scored by
    `attacks.whitebox.likelihood_ratio` at (σ, q = 1), the audit's own `whitebox` attack.

    Exactly μ-GDP with μ = √k / σ under adding or removing the canary: it moves one count by 1 in each of the k
    marginals; the k observations N(b, σ²) have a likelihood ratio in their sum, N(k b, k σ²), so the curve is G_μ of
    N(0, 1) against N(√k / σ, 1) (Dong, Roth and Su). With σ = `marginals_sigma`(ε0) its ε at δ = 1e-5 is ε0 (`epsilon`
    is ignored).
    """
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
    """Outputs [R, C]: per run and class, the sum of the values of the run's members of that class plus Laplace(1 / ε)
    noise.

    Exactly ε-DP in each coin: adding or removing one record changes one class sum of one run by ±1, so Laplace noise of
    scale 1 / ε makes each run ε-DP (the Laplace mechanism), and each coin enters one run only; in the tails the
    likelihood ratio is e^ε. Under replace-one (an atypical record for a typical one) a sum can move by 2: up to 2 ε.
    """
    n_classes = int(labels.max()) + 1
    sums = np.zeros((keep.shape[0], n_classes))
    for r in range(keep.shape[0]):
        sums[r] = np.bincount(labels, weights=keep[r] * values, minlength=n_classes)
    return sums + rng.laplace(scale=1.0 / epsilon, size=sums.shape)


def laplace_scores(
    outputs: np.ndarray, *, labels: np.ndarray, values: np.ndarray, atypical_first: bool = False
) -> np.ndarray:
    """Scores [R, n] from the class outputs [R, C]: a typical record scores its class's output, an atypical one minus it
    (its membership lowers the sum).

    Pooled, typical records (sums near +4) rank above atypical ones (near -4), so IN guesses fall on typical records.
    `atypical_first` lifts every atypical score above every typical one, order within each kind kept, so IN guesses fall
    on atypical records. Neither reads the coins: both are valid guessing rules.
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
