"""Self-test of the ε verdicts on mechanisms whose true ε is known: ``python -m audit.selftest``.

Each repetition runs an audit's path (`shadow_runs.plan` coins, scores pooled as `audit.evaluate.attack_summary` does,
bounded by `audit.stats.guesses.bounds_of`) on a mechanism of known ε (or μ), under the ``tuned`` and ``grid``
(Bonferroni) rules and the analyses ``steinke`` (Steinke, Nasr & Jagielski), ``fdp`` (f_{ε,δ}, Mahloujifar, Melis &
Chaudhuri) and ``gaussian`` (μ-GDP, judged only where the trade-off is Gaussian). The one-run theorems make every row's
false-alarm rate at most 1 - confidence; a row fails when its rate is significantly above (one-sided exact binomial test
at 0.05 / judged rows, Bonferroni), so a sound suite fails with probability at most 5%. The rows:
docs/results/selftest.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import numpy as np
from scipy import stats

from audit.stats.bounds import ANALYSES, BOUNDS, STEINKE, get_bound
from audit.stats.guesses import RULES, BoundCache, RankedGuesses, applicable, bounds_of, tune
from audit.stats.mechanism import SubsampledGaussian, epsilon_at
from audit.selftest.mechanisms import (
    APPROX_DELTA,
    MARGINALS,
    WHITEBOX_RATE,
    WHITEBOX_STEPS,
    class_pool,
    gaussian_mechanism,
    gaussian_mu,
    laplace_mechanism,
    null_scores,
    published_coin_response,
    randomised_response,
    marginal_counts,
    marginals_sigma,
    whitebox_gaussian,
    whitebox_sigma,
    whitebox_true_epsilon,
)
from shadow_runs.plan import membership_matrix, target_runs

CONFIDENCE = 0.95
REPETITIONS = 200
QUICK_REPETITIONS = 20

# randomised response and null: 8 target runs x 1250 examples = 10,000 canaries (and 8 reference runs)
RR_TARGETS, RR_POOL = 8, 1250
RR_EPSILONS = (1.0, 2.0, 4.0)
# Laplace class sum: `class_pool`'s 150 classes of 10, 4 target runs (and 4 references): 6,000 canaries
# (16 x 1,500 triples the run time of its rows for no new finding)
LAPLACE_TARGETS = 4
LAPLACE_EPSILONS = (1.0, 4.0)
OLD_PLAN_EPSILON = 1.0
# the (ε, δ) mechanisms: the power row (Gaussian at ε0 = 4) at 16 x 1,500 = 24,000 canaries, the others at 4 x 1,500
POWER_TARGETS, APPROX_TARGETS, APPROX_POOL = 16, 4, 1500
APPROX_EPSILONS = (1.0, 4.0)
POWER_EPSILON = 4.0
# the white-box subsampled Gaussian (`whitebox_gaussian`): 1,000 gradient canaries per run; 8 target runs at the
# claim 1, 16 (the audit's) at the claim 4
WHITEBOX_CANARIES = 1000
WHITEBOX_CLAIMS = {1.0: 8, 4.0: 16}
# the marginal counts (`marginal_counts`): 1,000 canaries per run, the same claims and target runs
MARGINAL_CLAIMS = {1.0: 8, 4.0: 16}
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
# the plans: coins [n_runs, n] of every run, the target runs first (`target_runs`), the rest references


def independent_plan(labels: np.ndarray, n_runs: int, master_seed: int) -> np.ndarray:
    """The suite's plan: `membership_matrix` with fair independent coins for `n_runs` runs."""
    return membership_matrix(labels, n_runs=n_runs, master_seed=master_seed)


def complement_pair_plan(labels: np.ndarray, n_runs: int, seed: int) -> np.ndarray:
    """The OLD, unsound plan, kept to show why it was removed: bool [n_runs, n], runs in complementary pairs, run 2j a
    random half (rounded down) of every class and run 2j + 1 the rest. IN versus OUT replaces an example by another of
    its class: the coins are not independent and the one-run theorem does not apply."""
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
    # the mechanism whose own curve is tested (`audit.stats.mechanism`): the true one, or with `noise_halved` the
    # claim of a mechanism that really adds half that noise; None: no "own curve" rows
    claimed: SubsampledGaussian | None = None
    noise_halved: bool = False  # the claim is false: its "own curve" alarms are detections (power), not judged

    @property
    def m(self) -> int:
        return self.n_targets * self.labels.size

    @property
    def judged(self) -> bool:
        """Whether its alarms are judged: under the suite's independent plan, which the one-run
        theorems are about, and with a true claim; the retired pairs plan (`old_plan`) is shown for
        comparison only, and a claimed noise twice the real one measures power."""
        return self.plan is independent_plan and not self.noise_halved

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
    mechanism: SubsampledGaussian | None = None,
) -> np.ndarray:
    """[rule, key] (`RULES` x `KEYS`; an ε at δ NaN where undefined) of one attack: the targets' scores [T, n] pooled
    against their coins, each analysis' count tuned on the reference runs' scores as pseudo-targets. `rngs`: the tie
    orders (grid, reference ranking, tuned), independent of every coin; `cache` shares work between calls."""
    grid_rng, reference_rng, tuned_rng = rngs
    member, nonmember = scores[keep], scores[~keep]
    pseudo = RankedGuesses.of(reference_scores[reference_keep], reference_scores[~reference_keep], rng=reference_rng)
    chosen = {
        a: tune(pseudo, m=keep.size, analysis=a, delta=delta, confidence=confidence, cache=cache).guesses
        for a in applicable(mechanism, delta)
    }
    found = {
        "tuned": bounds_of(
            member,
            nonmember,
            delta=delta,
            confidence=confidence,
            rng=tuned_rng,
            tuned=chosen,
            cache=cache,
            mechanism=mechanism,
        ),
        "grid": bounds_of(
            member, nonmember, delta=delta, confidence=confidence, rng=grid_rng, cache=cache, mechanism=mechanism
        ),
    }

    def value(rule: str, key: str) -> float:
        if found[rule][key] is None:
            return math.nan  # μ-GDP implies no pure ε; no claimed mechanism, no own curve
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
                mechanism=design.claimed,
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
    """What a bound of `analysis` is judged against: ε0 for an ε bound, μ for a μ bound (None where the trade-off is not
    Gaussian); for the claimed mechanism's own curve, its ε at δ bracketed from below as the bound is
    (`audit.stats.mechanism.epsilon_at(..., side="lower")`), None without one."""
    bound = get_bound(analysis)
    if bound.needs_mechanism:
        return None if design.claimed is None else epsilon_at(design.claimed, design.delta, side="lower")
    return design.mu if bound.unit == "mu" else design.epsilon


def false_alarms(design: Design, found: np.ndarray, rule: str = "grid", analysis: str = STEINKE.name) -> int | None:
    """Repetitions whose bound exceeds the truth (`truth`; for the null: whose bound is > 0); None
    for the Gaussian family on a mechanism that is not exactly μ-GDP."""
    limit = truth(design, analysis)
    if limit is None or analysis not in applicable(design.claimed, design.delta, rule):
        return None
    return int(np.sum(values_of(found, rule, analysis) > limit))


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
    """The Gaussian mechanism at ε0: one full-batch step of noise multiplier 1 / μ, so its own curve is G_μ."""
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
        claimed=SubsampledGaussian(1.0 / mu, 1.0, 1),
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
    against its PRV ε (its own curve against the same mechanism's ε by `epsilon_at`); then the
    claim 4 of a mechanism that really adds half its noise (σ halved): a power row, not judged."""
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
                claimed=SubsampledGaussian(sigma, WHITEBOX_RATE, WHITEBOX_STEPS),
            )
        )
    claim = max(WHITEBOX_CLAIMS)
    sigma = whitebox_sigma(claim)
    name = f"white-box, sigma halved (claim {claim:g}, sigma {sigma:.4g}, real {sigma / 2:.4g})"
    return [*rows, half_the_noise(rows[-1], name, whitebox_gaussian, sigma)]


def half_the_noise(design: Design, name: str, mechanism: Callable, sigma: float) -> Design:
    """`design`'s claim of σ on a `mechanism(keep, epsilon, rng, *, sigma)` that really adds σ/2: a
    power row, whose alarms are detections, not judged."""
    return replace(design, name=name, mechanism=partial(mechanism, sigma=sigma / 2), noise_halved=True)


def marginal_designs() -> list[Design]:
    """The tabular rows: the white-box view of `MARGINALS` Gaussian-noised marginal counts at each
    claim of `MARGINAL_CLAIMS`, exact (its true ε is the claim, its own curve k Gaussian steps at
    rate 1); then the claim 4 of a table that really adds half the noise: a power row, not judged."""
    rows = []
    for claim, n_targets in MARGINAL_CLAIMS.items():
        sigma = marginals_sigma(claim)
        rows.append(
            Design(
                f"marginal counts (claim {claim:g}, sigma {sigma:.4g}, {MARGINALS} marginals)",
                "independent",
                claim,
                partial(marginal_counts, sigma=sigma),
                np.zeros(WHITEBOX_CANARIES, dtype=np.int64),
                n_targets,
                delta=APPROX_DELTA,
                mu=math.sqrt(MARGINALS) / sigma,
                claimed=SubsampledGaussian(sigma, 1.0, MARGINALS),
            )
        )
    sigma = marginals_sigma(max(MARGINAL_CLAIMS))
    name = f"marginal counts, sigma halved (claim {max(MARGINAL_CLAIMS):g}, real sigma {sigma / 2:.4g})"
    return [*rows, half_the_noise(rows[-1], name, marginal_counts, sigma)]


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
        *marginal_designs(),
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
        """e.g. "tuned steinke, randomised response eps0 2"; a row of two tests a look (analyses joined by
        "+", `audit.selftest.sequential.combined_row`) e.g. "sequential f-DP or own curve, ..."."""
        tests = " or ".join(get_bound(analysis).label for analysis in self.analysis.split("+"))
        return f"{self.rule} {tests}, {self.design.name} eps0 {self.design.epsilon:g}"


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
    results: Iterable[tuple[Design, np.ndarray]],
    *,
    confidence: float = CONFIDENCE,
    family_level: float = FAMILY_LEVEL,
    more: Iterable[JudgedRow] = (),
) -> tuple[bool, str]:
    """(passed, closing line) of the self-test from its `results` ((design, `bounds`) pairs).

    A judged row fails when the one-sided exact binomial test of alarm rate <= 1 - `confidence` rejects at
    `family_level` / N, N the judged rows (Bonferroni): a sound suite fails with probability at most `family_level`,
    whatever the rows' dependence. The lines name the largest rate, or each failing row's alarms / reps, 95%
    Clopper–Pearson interval, p-value and threshold. ValueError if no row is judged.
    """
    rows = [*judged_rows(results, confidence=confidence), *more]  # `more`: rows judged elsewhere (sequential looks)
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
