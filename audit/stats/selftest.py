"""Self-test of the ε verdicts on mechanisms whose true ε is known: ``python -m audit.selftest``.

Every repetition goes through what a victim's audit goes through: the plan of
`shadow_runs.plan` (`membership_matrix` with fair coins over target runs and as many reference
runs, `target_runs` first), the mechanism applied to every run's coins (independent noise per
run), the targets' scores pooled as `audit.evaluate.attack_summary` pools them (members =
scores[keep[targets]], non-members = scores[~keep[targets]]) and bounded by the very function
`MembershipScores.summary` calls, `audit.stats.guesses.bounds_of`, under both guess rules:

* ``tuned``: the reference runs' scores ranked against their own (public) coins
  (`RankedGuesses.of`), and per analysis the count `audit.stats.guesses.tune` chooses for the
  targets' m, applied once to the targets at the full confidence;
* ``grid``: the fixed grid of `audit.stats.epsilon.guess_grid` with Bonferroni (today's rule).

and each of the analyses ``steinke`` (`eps_lower`, Steinke, Nasr & Jagielski), ``fdp``
(`eps_lower_fdp`, the f-DP test of f_{ε,δ}, Mahloujifar, Melis & Chaudhuri) and ``gaussian``
(`mu_lower`, the largest μ whose μ-GDP is rejected, with `eps_gaussian`, its ε at δ). The δ of a
repetition is the design's: 0 for the pure mechanisms, `APPROX_DELTA` = 1e-5 for the Gaussian
mechanism and randomised response with a published coin. Only the mechanism differs from an
audit, and its true ε (and μ, where it has one) is known, so a bound above it is a false alarm.
The one-run theorems make the false-alarm rate of every (rule, analysis) at most 1 - confidence
(5%) whatever the mechanism; the table shows the measured rate with its 95% Clopper–Pearson
interval, and how close the bound comes to the truth (the median bound over the true ε or μ).

Mechanisms (all ε are with respect to adding or removing one canary, the relation the plan's
independent coins realise):

* randomised response on each membership bit, tight at ε0 (`randomised_response`);
* randomised response that publishes the coin with probability δ (`published_coin_response`):
  exactly (ε0, δ)-DP, trade-off f_{ε0,δ};
* a Gaussian mechanism of known μ (`gaussian_mechanism`): exactly μ-GDP, μ chosen so that its ε
  at δ = 1e-5 is ε0 (`gaussian_mu`);
* a Laplace class sum, exactly ε0-DP (`laplace_class_sum`, scored by `laplace_scores`);
* the white-box view of a Poisson-subsampled Gaussian mechanism composed over steps
  (`whitebox_gaussian`): per canary and step, its projection of the noisy sum, N(b, σ²) with
  b = 1 when the canary is IN and sampled (probability q), scored by the audit's own white-box
  likelihood ratio (`attacks.whitebox.likelihood_ratio`). σ is opacus's RDP calibration to a
  claimed ε at `WHITEBOX_RATE` and `WHITEBOX_STEPS` (what `dpsgd` records), and the truth it is
  judged against is the PRV accountant's ε for the same (σ, q, steps) (Gopi et al.; tighter than
  the RDP claim, so the harder test of validity); μ-GDP is descriptive there;
* null scores, independent of the coins, ε = 0 (`null_scores`); and the same with
  `NULL_ATTACKS` independent null attacks per repetition whose reported maximum is paid for:
  each attack bounded at confidence 1 - (1 - confidence) / `NULL_ATTACKS` (Bonferroni), as the
  suite must whenever it reports a maximum over attacks.

The Gaussian family (`mu_lower`) is judged only where the mechanism's trade-off is Gaussian: on
the Gaussian mechanism (alarm: mu_lower > μ) and on the null (μ = 0: alarm: mu_lower > 0). On
Laplace and randomised response its μ, and the ε at δ it implies, are descriptive only: those
mechanisms are not μ-GDP at the μ whose (ε, δ) matches (randomised response with a published
coin is not μ-GDP for any μ: it reveals some coins with certainty), so an ε at δ above ε0 there
is no false alarm about anything the mechanism claims.

For comparison the self-test also audits the Laplace class sum under the plan the suite used
before (`complement_pair_plan`: complementary pairs of runs, each taking half of every class),
where IN versus OUT of a canary replaced one record by another. That is not the relation the
theorem (nor the mechanism's ε0) is about: this mechanism leaks up to 2 ε0 about a replacement
(an atypical record for a typical one), and with a guessing rule that ranks the atypical
records first the old plan declares the sound ε0 = 1 violated in nearly every repetition. (The
plain pooled score puts the atypical records at the bottom, where the grid uses them only as OUT
guesses beside as many IN guesses on typical records, and does not show it: both rows are
printed, and the same two rules under the independent plan.) Those rows are shown marked
"not judged" (`RETIRED`, `NOT_JUDGED`) and do not enter the verdict.

The command ends with one line (`verdict`): passed, or which judged rows failed and why. A row
fails when its alarm rate is significantly above the allowed 1 - confidence (one-sided exact
binomial test at 0.05 / the number of judged rows, Bonferroni), so a sound suite fails with
probability at most 5% all rows together; the command then exits 1.

The bounds are deterministic functions of (analysis, m, guesses, correct, δ, level), and the same
ones recur from repetition to repetition; the command shares one `audit.stats.guesses.BoundCache`
among all of them so that 200 repetitions of every row take minutes rather than an hour. The
figures are those computed without it (tests/audit/test_selftest.py checks it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import numpy as np
from scipy import optimize, stats

from audit.stats.epsilon import gaussian_dp_epsilon
from audit.stats.bounds import ANALYSES, BOUNDS, STEINKE, get_bound
from audit.stats.guesses import RULES, BoundCache, RankedGuesses, bounds_of, tune
from shadow_runs.plan import membership_matrix, target_runs

CONFIDENCE = 0.95
APPROX_DELTA = 1e-5  # the δ of the Gaussian mechanism and of randomised response with a published coin
REPETITIONS = 200
QUICK_REPETITIONS = 20

# randomised response and null: 8 target runs x 1250 examples = 10,000 canaries (and 8 reference runs)
RR_TARGETS, RR_POOL = 8, 1250
RR_EPSILONS = (1.0, 2.0, 4.0)
# Laplace class sum: 150 classes of 10 (one atypical record, nine typical), 4 target runs (and 4 references):
# 6,000 canaries (16 x 1,500 triples the run time of its rows for no new finding)
N_CLASSES, CLASS_SIZE = 150, 10
LAPLACE_TARGETS = 4
LAPLACE_EPSILONS = (1.0, 4.0)
OLD_PLAN_EPSILON = 1.0
# the (ε, δ) mechanisms: the power row (Gaussian at ε0 = 4) at 16 x 1,500 = 24,000 canaries, the others at 4 x 1,500
POWER_TARGETS, APPROX_TARGETS, APPROX_POOL = 16, 4, 1500
APPROX_EPSILONS = (1.0, 4.0)
POWER_EPSILON = 4.0
# the white-box subsampled Gaussian: dpsgd's digits audit with 1,000 gradient canaries (q = 128 / 1,250, 30 epochs of
# 10 steps), 1,000 canaries per run; 8 target runs at the claim 1, 16 (the audit's) at the claim 4
WHITEBOX_RATE, WHITEBOX_STEPS, WHITEBOX_CANARIES = 0.1024, 300, 1000
WHITEBOX_CLAIMS = {1.0: 8, 4.0: 16}
# null attacks per repetition whose maximum is reported, each at confidence 1 - (1 - confidence) / NULL_ATTACKS
NULL_ATTACKS = 5

#: what each repetition records per rule: every registered bound (`audit.stats.bounds`), then the ε at δ of
#: each μ bound (the Gaussian family's `eps_gaussian`)
EPSILON_AT_DELTA = tuple(b.epsilon_key for b in BOUNDS if b.epsilon_key)
KEYS = (*(b.lower_key for b in BOUNDS), *EPSILON_AT_DELTA)

# the mechanism's noise and the tie orders: SeedSequence([master seed, _NOISE_STREAM]); the plan uses streams 0 and 1
_NOISE_STREAM = 2
# per attack, children of that stream: target noise, grid ties, reference noise, reference ties, tuned ties
_STREAMS_PER_ATTACK = 5


# ---------------------------------------------------------------------------
# the mechanisms: coins of some runs [R, n] (and a generator) in, scores [R, n] out


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
    from victims.privacy import noise_multiplier_for

    return noise_multiplier_for(
        epsilon=claimed_epsilon, delta=APPROX_DELTA, sample_rate=WHITEBOX_RATE, steps=WHITEBOX_STEPS
    )


def whitebox_true_epsilon(sigma: float) -> float:
    """The PRV accountant's ε at δ = 1e-5 of the white-box design at noise multiplier `sigma`."""
    from victims.privacy import epsilon_spent

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
    from attacks.whitebox import likelihood_ratio

    sampled = rng.random((WHITEBOX_STEPS, *keep.shape)) < WHITEBOX_RATE
    observations = (sampled & keep).astype(np.float64) + sigma * rng.standard_normal((WHITEBOX_STEPS, *keep.shape))
    return likelihood_ratio(
        observations.reshape(WHITEBOX_STEPS, -1), noise_multiplier=sigma, sample_rate=WHITEBOX_RATE
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


# ---------------------------------------------------------------------------
# the plans: coins [n_runs, n] of every run, the target runs first (`target_runs`), the rest references


def independent_plan(labels: np.ndarray, n_runs: int, master_seed: int) -> np.ndarray:
    """The suite's plan: `membership_matrix` with fair independent coins for `n_runs` runs."""
    return membership_matrix(labels, n_runs=n_runs, master_seed=master_seed)


def complement_pair_plan(labels: np.ndarray, n_runs: int, seed: int) -> np.ndarray:
    """The OLD, unsound plan, kept to show why it was removed: bool [n_runs, n], runs in
    complementary pairs, run 2j taking a random half (rounded down) of every class and run
    2j + 1 the rest.

    Every example is IN one run of a pair and OUT of the other, and a run's class counts are
    fixed, so IN versus OUT of an example replaces it by another example of its class: the coins
    are not independent and the one-run theorem does not apply.
    """
    labels = np.asarray(labels)
    if n_runs < 2 or n_runs % 2:
        raise ValueError(f"n_runs must be even and >= 2, got {n_runs}")
    rng = np.random.default_rng(seed)
    n = labels.size
    counts = np.bincount(labels)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    keep = np.zeros((n_runs, n), dtype=bool)
    for pair in range(n_runs // 2):
        order = np.lexsort((rng.random(n), labels))  # by class, randomly within each class
        rank_in_class = np.empty(n, dtype=np.int64)
        rank_in_class[order] = np.arange(n) - starts[labels[order]]
        first = rank_in_class < counts[labels] // 2
        keep[2 * pair], keep[2 * pair + 1] = first, ~first
    return keep


def old_plan(labels: np.ndarray, n_runs: int, master_seed: int) -> np.ndarray:
    """`complement_pair_plan` with `n_runs` runs (one more if odd: pairs). The pairs are drawn in
    order, so the first runs do not depend on how many follow."""
    return complement_pair_plan(labels, n_runs + n_runs % 2, master_seed)[:n_runs]


# ---------------------------------------------------------------------------
# auditing


Mechanism = Callable[[np.ndarray, float, np.random.Generator], np.ndarray]
Plan = Callable[[np.ndarray, int, int], np.ndarray]


@dataclass(frozen=True, eq=False)
class Design:
    """One block of the self-test: a mechanism at a true ε (and δ, and μ where it has one) under a plan."""

    name: str
    plan_name: str
    epsilon: float  # the true ε (0 for the null)
    mechanism: Mechanism
    labels: np.ndarray  # fixes the pool size (and the classes, for the old plan)
    n_targets: int
    plan: Plan = independent_plan
    delta: float = 0.0  # the δ of the audit (and of the claim ε is true at)
    mu: float | None = None  # the true μ where the mechanism is exactly μ-GDP; None: μ-GDP is descriptive
    attacks: int = 1  # independent attacks per repetition, the maximum reported (each at a Bonferroni share)
    n_references: int | None = None  # reference runs (None: as many as targets)
    power_row: bool = False  # the row whose medians the CLI sums up (`power_line`)

    @property
    def m(self) -> int:
        return self.n_targets * self.labels.size

    @property
    def judged(self) -> bool:
        """Whether its alarms are judged: under the suite's independent plan, which the one-run
        theorems are about; the retired pairs plan (`old_plan`) is shown for comparison only."""
        return self.plan is independent_plan

    @property
    def n_runs(self) -> int:
        return self.n_targets + (self.n_targets if self.n_references is None else self.n_references)


def attack_bounds(
    scores: np.ndarray,
    keep: np.ndarray,
    reference_scores: np.ndarray,
    reference_keep: np.ndarray,
    *,
    delta: float,
    confidence: float,
    rngs,
    cache: BoundCache | None = None,
) -> np.ndarray:
    """[rule, key] (`RULES` x `KEYS`; an ε at δ NaN where undefined, at δ = 0) of one attack's
    scores: the targets' scores [T, n] pooled against their coins, the reference runs' scores
    ranked against theirs (pseudo-targets) to tune each analysis' count for the targets' m.

    `rngs`: the tie orders (grid, reference ranking, tuned), independent of every coin; `cache`
    shares the bounds' work between calls (same results)."""
    grid_rng, reference_rng, tuned_rng = rngs
    member, nonmember = scores[keep], scores[~keep]
    pseudo = RankedGuesses.of(reference_scores[reference_keep], reference_scores[~reference_keep], rng=reference_rng)
    chosen = {
        a: tune(pseudo, m=keep.size, analysis=a, delta=delta, confidence=confidence, cache=cache).guesses
        for a in ANALYSES
    }
    found = {
        "tuned": bounds_of(
            member, nonmember, delta=delta, confidence=confidence, rng=tuned_rng, tuned=chosen, cache=cache
        ),
        "grid": bounds_of(member, nonmember, delta=delta, confidence=confidence, rng=grid_rng, cache=cache),
    }

    def value(rule: str, key: str) -> float:
        if key in EPSILON_AT_DELTA and (delta == 0.0 or found[rule][key] is None):
            return math.nan  # μ-GDP implies no pure ε
        return float(found[rule][key])

    return np.array([[value(rule, key) for key in KEYS] for rule in RULES])


def repetition_bounds(
    design: Design, master_seed: int, *, confidence: float = CONFIDENCE, cache: BoundCache | None = None
) -> np.ndarray:
    """[rule, key] of one repetition, from `master_seed` alone: the plan's coins for the design's
    target and reference runs, the mechanism's noise per attack (targets and references apart), and
    with several attacks the maximum over them, each bounded at 1 - (1 - confidence) / attacks."""
    keep = design.plan(design.labels, design.n_runs, master_seed)
    targets = target_runs(design.n_runs, design.n_targets)
    is_reference = np.ones(design.n_runs, dtype=bool)
    is_reference[targets] = False
    target_keep, reference_keep = keep[targets], keep[is_reference]
    streams = np.random.default_rng(np.random.SeedSequence([master_seed, _NOISE_STREAM])).spawn(
        _STREAMS_PER_ATTACK * design.attacks
    )
    each = 1.0 - (1.0 - confidence) / design.attacks
    found = []
    for a in range(design.attacks):
        noise, grid_rng, reference_noise, reference_rng, tuned_rng = streams[
            _STREAMS_PER_ATTACK * a : _STREAMS_PER_ATTACK * (a + 1)
        ]
        scores = design.mechanism(target_keep, design.epsilon, noise)
        reference_scores = design.mechanism(reference_keep, design.epsilon, reference_noise)
        found.append(
            attack_bounds(
                scores,
                target_keep,
                reference_scores,
                reference_keep,
                delta=design.delta,
                confidence=each,
                rngs=(grid_rng, reference_rng, tuned_rng),
                cache=cache,
            )
        )
    return np.max(np.stack(found), axis=0)


def bounds(
    design: Design, *, repetitions: int, seed: int, confidence: float = CONFIDENCE, cache: BoundCache | None = None
) -> np.ndarray:
    """[repetition, rule, key] of repetitions 0 .. repetitions-1, repetition k with master seed `seed` + k;
    the repetitions share `cache` (a new one if None)."""
    cache = BoundCache() if cache is None else cache
    return np.stack(
        [repetition_bounds(design, seed + k, confidence=confidence, cache=cache) for k in range(repetitions)]
    )


def values_of(found: np.ndarray, rule: str, analysis: str) -> np.ndarray:
    """The bounds [repetition] of one rule and analysis (ε, or μ for a μ bound) from `bounds`."""
    return found[:, RULES.index(rule), KEYS.index(get_bound(analysis).lower_key)]


def truth(design: Design, analysis: str) -> float | None:
    """What a bound of `analysis` is judged against: ε0 for an ε bound, μ for a μ bound (μ-GDP)
    (None where the mechanism's trade-off is not Gaussian: descriptive only)."""
    return design.mu if get_bound(analysis).unit == "mu" else design.epsilon


def false_alarms(design: Design, found: np.ndarray, rule: str = "grid", analysis: str = STEINKE.name) -> int | None:
    """Repetitions whose bound exceeds the truth (`truth`; for the null: whose bound is > 0); None
    for the Gaussian family on a mechanism that is not exactly μ-GDP."""
    limit = truth(design, analysis)
    return None if limit is None else int(np.sum(values_of(found, rule, analysis) > limit))


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided `level` interval for a binomial proportion."""
    tail = (1.0 - level) / 2
    low = 0.0 if successes == 0 else float(stats.beta.ppf(tail, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(stats.beta.ppf(1 - tail, successes + 1, trials - successes))
    return low, high


def rr_labels() -> np.ndarray:
    return np.zeros(RR_POOL, dtype=np.int64)


def approx_labels() -> np.ndarray:
    return np.zeros(APPROX_POOL, dtype=np.int64)


def gaussian_design(epsilon: float, n_targets: int) -> Design:
    mu = gaussian_mu(epsilon, APPROX_DELTA)
    return Design(
        "gaussian mechanism",
        "independent",
        epsilon,
        gaussian_mechanism,
        approx_labels(),
        n_targets,
        delta=APPROX_DELTA,
        mu=mu,
    )


def published_coin_design(epsilon: float, n_targets: int) -> Design:
    return Design(
        "RR, coin published w.p. delta",
        "independent",
        epsilon,
        published_coin_response,
        approx_labels(),
        n_targets,
        delta=APPROX_DELTA,
    )


def power_design() -> Design:
    """The power row: the Gaussian mechanism at ε0 = 4, 16 target runs x 1,500, optimal scores."""
    return replace(gaussian_design(POWER_EPSILON, POWER_TARGETS), power_row=True)


def whitebox_designs() -> list[Design]:
    """The white-box rows: the subsampled Gaussian at each claimed ε of `WHITEBOX_CLAIMS`, judged
    against its PRV ε."""
    rows = []
    for claim, n_targets in WHITEBOX_CLAIMS.items():
        sigma = whitebox_sigma(claim)
        rows.append(
            Design(
                f"white-box subsampled gaussian (claim {claim:g}, sigma {sigma:.4g})",
                "independent",
                whitebox_true_epsilon(sigma),
                partial(whitebox_gaussian, sigma=sigma),
                np.zeros(WHITEBOX_CANARIES, dtype=np.int64),
                n_targets,
                delta=APPROX_DELTA,
            )
        )
    return rows


def designs() -> list[Design]:
    """The self-test's blocks, in the order printed."""
    laplace_labels, _ = class_pool()
    rows = [
        Design("randomised response", "independent", eps, randomised_response, rr_labels(), RR_TARGETS)
        for eps in RR_EPSILONS
    ]
    rows += [published_coin_design(eps, APPROX_TARGETS) for eps in APPROX_EPSILONS]
    rows += [
        power_design() if eps == POWER_EPSILON else gaussian_design(eps, APPROX_TARGETS) for eps in APPROX_EPSILONS
    ]
    rows += [
        Design("laplace class sum", "independent", eps, laplace_mechanism, laplace_labels, LAPLACE_TARGETS)
        for eps in LAPLACE_EPSILONS
    ]
    first = partial(laplace_mechanism, atypical_first=True)
    rows += [
        Design("laplace, atypical first", "independent", OLD_PLAN_EPSILON, first, laplace_labels, LAPLACE_TARGETS),
        Design("null (gaussian scores)", "independent", 0.0, null_scores, rr_labels(), RR_TARGETS, mu=0.0),
        Design(
            f"null, max of {NULL_ATTACKS} attacks",
            "independent",
            0.0,
            null_scores,
            rr_labels(),
            RR_TARGETS,
            mu=0.0,
            attacks=NULL_ATTACKS,
        ),
        *whitebox_designs(),
        Design(
            "laplace class sum",
            "OLD pairs",
            OLD_PLAN_EPSILON,
            laplace_mechanism,
            laplace_labels,
            LAPLACE_TARGETS,
            old_plan,
        ),
        Design(
            "laplace, atypical first", "OLD pairs", OLD_PLAN_EPSILON, first, laplace_labels, LAPLACE_TARGETS, old_plan
        ),
    ]
    return rows


# ---------------------------------------------------------------------------
# the command line

HEADER = (
    f"  {'rule':<5} {'analysis':<8} {'alarms':>6} {'rate':>6} {'95% CP interval':>16} {'median':>7} "
    f"{'truth':>6} {'med/truth':>9} {'ceiling':>7} {'eps@delta':>9}"
)


#: what the line of a design under the retired pairs plan ends with, and its rows' alarms column says
RETIRED = "[retired pairs plan: shown for comparison, not judged]"
NOT_JUDGED = "(not judged)"


def design_line(design: Design, repetitions: int) -> str:
    """The line above a design's block: what it is, its truth and its m (and, under the retired
    pairs plan, `RETIRED`)."""
    truths = f"eps0 {design.epsilon:g}, delta {design.delta:g}"
    if design.mu is not None:
        truths += f", mu {design.mu:.4g}"
    attacks = f", max of {design.attacks} attacks at {design.attacks}-way Bonferroni" if design.attacks > 1 else ""
    retired = "" if design.judged else f" {RETIRED}"
    return (
        f"{design.name} [{design.plan_name} plan] {truths}; m = {design.n_targets} x {design.labels.size} = "
        f"{design.m} (+ {design.n_runs - design.n_targets} reference runs){attacks}; {repetitions} reps{retired}"
    )


def table_lines(design: Design, found: np.ndarray, ceilings: dict) -> list[str]:
    """One line per (rule, analysis): alarms (or '-' where descriptive), their rate and 95%
    Clopper-Pearson interval, the median bound, the truth, their ratio, the ceiling of the rule,
    and for the Gaussian family the median ε at δ that its μ implies. Under the retired pairs
    plan (not `Design.judged`) the counts are the same and the line ends with `NOT_JUDGED`."""
    reps = found.shape[0]
    lines = []
    for rule in RULES:
        for bound in BOUNDS:
            analysis = bound.name
            values = values_of(found, rule, analysis)
            median = float(np.median(values))
            limit = truth(design, analysis)
            alarms = false_alarms(design, found, rule, analysis)
            if alarms is None:
                counts = f"{'-':>6} {'-':>6} {'(descriptive)':>16}"
            else:
                low, high = clopper_pearson(alarms, reps)
                counts = f"{alarms:>6d} {alarms / reps:>6.3f} {f'[{low:.3f}, {high:.3f}]':>16}"
            shown_truth = f"{'-':>6}" if limit is None else f"{limit:>6.3g}"
            ratio = f"{median / limit:>9.2f}" if limit else f"{'-':>9}"
            eps_at_delta = f"{'-':>9}"
            if bound.epsilon_key:
                eps_g = found[:, RULES.index(rule), KEYS.index(bound.epsilon_key)]
                if not np.isnan(eps_g).any():
                    eps_at_delta = f"{float(np.median(eps_g)):>9.3f}"
            note = "" if design.judged or alarms is None else f" {NOT_JUDGED}"
            lines.append(
                f"  {rule:<5} {bound.label:<8} {counts} {median:>7.3f} {shown_truth} {ratio} "
                f"{ceilings[rule, analysis]:>7.3f} {eps_at_delta}{note}"
            )
    return lines


def power_line(found: np.ndarray, design: Design) -> str:
    """The power row's medians: certified ε under each rule and ε bound (the verdict's first), and
    each μ bound against the true μ."""
    eps_bounds = sorted((b for b in BOUNDS if b.unit == "eps"), key=lambda b: not b.verdict)
    eps = ", ".join(
        f"{rule}+{b.name} {np.median(values_of(found, rule, b.name)):.3f}" for rule in RULES for b in eps_bounds
    )
    mu = "; ".join(
        f"median {b.lower_key} "
        + ", ".join(f"{rule} {np.median(values_of(found, rule, b.name)):.3f}" for rule in RULES)
        for b in BOUNDS
        if b.unit == "mu"
    )
    return (
        f"power ({design.name}, eps0 {design.epsilon:g}, delta {design.delta:g}, m = {design.m}): median "
        f"certified eps {eps}; {mu} (true mu {design.mu:.3f})"
    )


# ---------------------------------------------------------------------------
# the verdict: the closing line

#: the probability that the self-test of a sound suite fails, all judged rows together (family-wise)
FAMILY_LEVEL = 0.05


@dataclass(frozen=True, eq=False)
class JudgedRow:
    """One judged (design, rule, analysis): its alarms in `reps` repetitions, and the one-sided
    binomial p-value P[Binomial(reps, allowed) >= alarms] of its count under the allowed rate."""

    design: Design
    rule: str
    analysis: str
    alarms: int
    reps: int
    p_value: float

    @property
    def rate(self) -> float:
        return self.alarms / self.reps

    @property
    def label(self) -> str:
        """e.g. "tuned steinke, randomised response eps0 2"."""
        return f"{self.rule} {get_bound(self.analysis).label}, {self.design.name} eps0 {self.design.epsilon:g}"


def judged_rows(results: Iterable[tuple[Design, np.ndarray]], *, confidence: float = CONFIDENCE) -> list[JudgedRow]:
    """The judged rows of `results` ((design, `bounds` of it) pairs), in the order printed: every
    (rule, analysis) of a design under the independent plan (`Design.judged`) whose alarms are not
    descriptive (`false_alarms` not None). Designs under the retired pairs plan are left out."""
    allowed = 1.0 - confidence
    rows = []
    for design, found in results:
        if not design.judged:
            continue
        reps = int(found.shape[0])
        for rule in RULES:
            for analysis in ANALYSES:
                alarms = false_alarms(design, found, rule, analysis)
                if alarms is not None:
                    p_value = float(stats.binom.sf(alarms - 1, reps, allowed))  # P[X >= alarms]
                    rows.append(JudgedRow(design, rule, analysis, alarms, reps, p_value))
    return rows


def _percent(rate: float) -> str:
    return f"{100 * rate:g}%"


def verdict(
    results: Iterable[tuple[Design, np.ndarray]], *, confidence: float = CONFIDENCE, family_level: float = FAMILY_LEVEL
) -> tuple[bool, str]:
    """(passed, closing line) of the self-test from its `results` ((design, `bounds` of it) pairs).

    Pass rule: a judged row (`judged_rows`) fails when its alarm rate is significantly above the
    allowed rate 1 - `confidence`: the one-sided exact binomial test of H0: rate <= 1 - confidence,
    p-value P[Binomial(reps, 1 - confidence) >= alarms], rejects at level `family_level` / N, N the
    number of judged rows (Bonferroni; equivalently, the one-sided Clopper–Pearson lower limit at
    confidence 1 - `family_level` / N lies above the allowed rate). Whatever the dependence between
    rows (they share repetitions), a suite whose every row alarms at most at the allowed rate thus
    fails with probability at most `family_level`: a true rate of exactly 5% does not fail by chance
    half the time, as a point estimate above 5% would. The test passes when no row fails.

    The passing line names the largest measured rate (the first such row in the order printed); the
    failing line names every failing row with its alarms / reps, the 95% Clopper–Pearson interval of
    its rate (as in the table), its p-value and the threshold. Raises ValueError if no row is judged.
    """
    rows = judged_rows(results, confidence=confidence)
    if not rows:
        raise ValueError("no judged rows: nothing under the independent plan with a known truth")
    allowed = _percent(1.0 - confidence)
    threshold = family_level / len(rows)
    rule = f"one-sided binomial test, Bonferroni {family_level:g}/{len(rows)}"
    failing = [row for row in rows if row.p_value < threshold]
    if not failing:
        top = max(rows, key=lambda row: row.rate)
        return True, (
            f"self-test passed: all {len(rows)} judged rows within the allowed {allowed} ({rule}; largest: "
            f"{top.alarms}/{top.reps} = {100 * top.rate:.1f}%, {top.label})"
        )
    reasons = []
    for row in failing:
        low, high = clopper_pearson(row.alarms, row.reps)
        reasons.append(
            f"{row.label}: {row.alarms}/{row.reps} alarms = {100 * row.rate:.1f}%, 95% CP [{low:.3f}, {high:.3f}], "
            f"significantly above the allowed {allowed} (p = {row.p_value:.2g} < {threshold:.2g})"
        )
    return False, (
        f"self-test FAILED: {len(failing)} of {len(rows)} judged rows above the allowed {allowed} ({rule}): "
        + "; ".join(reasons)
    )
