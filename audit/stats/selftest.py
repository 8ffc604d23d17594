"""Self-test of the ε verdicts on mechanisms whose true ε is known: ``python -m audit.selftest``.

Every repetition goes through what a victim's audit goes through: the plan of
`shadow_runs.plan` (`membership_matrix` with fair coins, target runs `target_runs`, at least one
reference run), the mechanism's scores [T, n] on the target runs, pooled as `audit.evaluate`'s
`attack_summary` pools them (members = scores[keep[targets]], non-members =
scores[~keep[targets]]) and bounded by the very method `MembershipScores.summary` calls for its
``eps_lower`` (`MembershipScores.epsilon_lower_bound`, δ = 0). Only the mechanism differs, and for
these mechanisms the true ε is known, so a bound above it is a false alarm. The one-run theorem
makes the false-alarm rate at most 1 - confidence (5%) whatever the mechanism; the table shows
the measured rate with its 95% Clopper–Pearson interval, and how close the bound comes to the
truth (the median bound over the true ε).

Mechanisms (all ε are with respect to adding or removing one canary, the relation the plan's
independent coins realise):

* randomised response on each membership bit, tight at ε0 (`randomised_response`);
* a Laplace class sum, exactly ε0-DP (`laplace_class_sum`, scored by `laplace_scores`);
* null scores, independent of the coins, ε = 0 (`null_scores`).

For comparison the self-test also audits the Laplace class sum under the plan the suite used
before (`complement_pair_plan`: complementary pairs of runs, each taking half of every class),
where IN versus OUT of a canary replaced one record by another. That is not the relation the
theorem (nor the mechanism's ε0) is about: this mechanism leaks up to 2 ε0 about a replacement
(an atypical record for a typical one), and with a guessing rule that ranks the atypical
records first the old plan declares the sound ε0 = 1 violated in nearly every repetition. (The
plain pooled score puts the atypical records at the bottom, where the grid uses them only as OUT
guesses beside as many IN guesses on typical records, and does not show it: both rows are
printed, and the same two rules under the independent plan.)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
from scipy import stats

from audit.cli.arguments import ArgumentParser, int_at_least, probability
from audit.stats.epsilon import epsilon_ceiling
from audit.stats.metrics import MembershipScores
from shadow_runs.plan import membership_matrix, target_runs

CONFIDENCE = 0.95
DELTA = 0.0  # every mechanism here is pure ε-DP
REPETITIONS = 200
QUICK_REPETITIONS = 20

# randomised response and null: 8 target runs x 1250 examples = 10,000 canaries, one reference run
RR_TARGETS, RR_POOL = 8, 1250
RR_EPSILONS = (1.0, 2.0, 4.0)
# Laplace class sum: 150 classes of 10 (one atypical record, nine typical), 16 target runs, one reference run
N_CLASSES, CLASS_SIZE = 150, 10
LAPLACE_TARGETS = 16
LAPLACE_EPSILONS = (0.5, 1.0, 2.0)
OLD_PLAN_EPSILON = 1.0

_NOISE_STREAM = 2  # the mechanism's noise: SeedSequence([master seed, _NOISE_STREAM]); the plan uses streams 0 and 1


# ---------------------------------------------------------------------------
# the mechanisms: coins of the target runs [T, n] (and a generator) in, scores [T, n] out


def randomised_response(keep: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Each canary's coin, told truthfully with probability p = e^ε / (1 + e^ε), flipped otherwise.

    Why its ε is exactly `epsilon`: adding or removing canary i changes only output i, whose
    probability of any value moves between p and 1 - p, a ratio of p / (1 - p) = e^ε, and no
    smaller ε bounds it (pure ε-DP, tight, δ = 0). The score is the output itself (1.0 for IN,
    0.0 for OUT); the many ties are broken by the bound's own independent random order.
    """
    truthful = rng.random(keep.shape) < 1.0 / (1.0 + math.exp(-epsilon))
    return np.where(truthful, keep, ~keep).astype(np.float64)


def null_scores(keep: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Standard normal scores drawn without looking at the coins: the output says nothing about
    membership, so ε = 0 (`epsilon` is ignored), and a bound > 0 is a false alarm."""
    return rng.standard_normal(keep.shape)


def class_pool(n_classes: int = N_CLASSES, class_size: int = CLASS_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """labels [n] and record values [n] of the Laplace pool: in every class the first record is
    atypical (value -1), the others typical (+1)."""
    labels = np.repeat(np.arange(n_classes), class_size)
    values = np.where(np.arange(labels.size) % class_size == 0, -1.0, 1.0)
    return labels, values


def laplace_class_sum(keep: np.ndarray, epsilon: float, rng: np.random.Generator, *, labels: np.ndarray,
                      values: np.ndarray) -> np.ndarray:
    """Outputs [T, C]: per target run and class, the sum of the values of the run's members of that
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


def laplace_scores(outputs: np.ndarray, *, labels: np.ndarray, values: np.ndarray,
                   atypical_first: bool = False) -> np.ndarray:
    """Scores [T, n] from the class outputs [T, C]: a typical record scores its class's output (its
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


def laplace_mechanism(keep: np.ndarray, epsilon: float, rng: np.random.Generator, *,
                      atypical_first: bool = False) -> np.ndarray:
    """`laplace_class_sum` on the `class_pool`, scored by `laplace_scores`."""
    labels, values = class_pool()
    outputs = laplace_class_sum(keep, epsilon, rng, labels=labels, values=values)
    return laplace_scores(outputs, labels=labels, values=values, atypical_first=atypical_first)


# ---------------------------------------------------------------------------
# the plans


def independent_plan(labels: np.ndarray, n_targets: int, master_seed: int) -> np.ndarray:
    """Coins [T, n] of the target runs of the suite's plan: `n_targets` target runs and one
    reference run (unused by these scores), from `membership_matrix` and `target_runs`."""
    n_runs = n_targets + 1
    keep = membership_matrix(labels, n_runs=n_runs, master_seed=master_seed)
    return keep[target_runs(n_runs, n_targets)]


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


def old_plan(labels: np.ndarray, n_targets: int, master_seed: int) -> np.ndarray:
    """Coins [T, n] of the target runs 0 .. T-1 of `complement_pair_plan` (plus a reference pair)."""
    n_runs = n_targets + (2 if n_targets % 2 == 0 else 1)
    return complement_pair_plan(labels, n_runs, master_seed)[:n_targets]


# ---------------------------------------------------------------------------
# auditing


def pooled(scores: np.ndarray, keep: np.ndarray) -> MembershipScores:
    """Scores [T, n] of the target runs pooled as `audit.evaluate.attack_summary` pools them."""
    return MembershipScores(scores[keep], scores[~keep])


def audit_bound(scores: np.ndarray, keep: np.ndarray, *, rng: np.random.Generator,
                confidence: float = CONFIDENCE) -> float:
    """eps_lower of the pooled scores: the method `MembershipScores.summary` calls for it."""
    return pooled(scores, keep).epsilon_lower_bound(delta=DELTA, confidence=confidence, rng=rng)


Mechanism = Callable[[np.ndarray, float, np.random.Generator], np.ndarray]
Plan = Callable[[np.ndarray, int, int], np.ndarray]


@dataclass(frozen=True, eq=False)
class Design:
    """One row of the self-test: a mechanism at a true ε under a plan."""

    name: str
    plan_name: str
    epsilon: float  # the true ε (0 for the null)
    mechanism: Mechanism
    labels: np.ndarray  # fixes the pool size (and the classes, for the old plan)
    n_targets: int
    plan: Plan = independent_plan

    @property
    def m(self) -> int:
        return self.n_targets * self.labels.size


def repetition_bound(design: Design, master_seed: int, *, confidence: float = CONFIDENCE) -> float:
    """eps_lower of one repetition: plan and mechanism noise from `master_seed` alone."""
    keep = design.plan(design.labels, design.n_targets, master_seed)
    noise_rng, tie_rng = np.random.default_rng(np.random.SeedSequence([master_seed, _NOISE_STREAM])).spawn(2)
    scores = design.mechanism(keep, design.epsilon, noise_rng)
    return audit_bound(scores, keep, rng=tie_rng, confidence=confidence)


def bounds(design: Design, *, repetitions: int, seed: int, confidence: float = CONFIDENCE) -> np.ndarray:
    """eps_lower of repetitions 0 .. repetitions-1, repetition k with master seed `seed` + k."""
    return np.array([repetition_bound(design, seed + k, confidence=confidence) for k in range(repetitions)])


def false_alarms(design: Design, eps_lower: np.ndarray) -> int:
    """Repetitions whose bound exceeds the true ε (for the null: whose bound is > 0)."""
    return int(np.sum(eps_lower > design.epsilon))


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided `level` interval for a binomial proportion."""
    tail = (1.0 - level) / 2
    low = 0.0 if successes == 0 else float(stats.beta.ppf(tail, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(stats.beta.ppf(1 - tail, successes + 1, trials - successes))
    return low, high


def designs() -> list[Design]:
    """The self-test's rows, in the order printed."""
    rr_labels = np.zeros(RR_POOL, dtype=np.int64)
    laplace_labels, _ = class_pool()
    rows = [Design("randomised response", "independent", eps, randomised_response, rr_labels, RR_TARGETS)
            for eps in RR_EPSILONS]
    rows += [Design("laplace class sum", "independent", eps, laplace_mechanism, laplace_labels, LAPLACE_TARGETS)
             for eps in LAPLACE_EPSILONS]
    first = partial(laplace_mechanism, atypical_first=True)
    rows += [
        Design("laplace, atypical first", "independent", OLD_PLAN_EPSILON, first, laplace_labels, LAPLACE_TARGETS),
        Design("null (gaussian)", "independent", 0.0, null_scores, rr_labels, RR_TARGETS),
        Design("laplace class sum", "OLD pairs", OLD_PLAN_EPSILON, laplace_mechanism, laplace_labels,
               LAPLACE_TARGETS, old_plan),
        Design("laplace, atypical first", "OLD pairs", OLD_PLAN_EPSILON, first, laplace_labels, LAPLACE_TARGETS,
               old_plan),
    ]
    return rows


# ---------------------------------------------------------------------------
# the command line


HEADER = (f"{'mechanism':<24} {'plan':<11} {'eps0':>4} {'reps':>4} {'alarms':>6} {'rate':>6} "
          f"{'95% CP interval':>16} {'median':>7} {'med/eps0':>8} {'ceiling':>7} {'m':>6}")


def table_row(design: Design, eps_lower: np.ndarray, ceiling: float) -> str:
    reps = eps_lower.size
    alarms = false_alarms(design, eps_lower)
    low, high = clopper_pearson(alarms, reps)
    median = float(np.median(eps_lower))
    ratio = f"{median / design.epsilon:8.2f}" if design.epsilon > 0 else f"{'-':>8}"
    return (f"{design.name:<24} {design.plan_name:<11} {design.epsilon:>4g} {reps:>4d} {alarms:>6d} "
            f"{alarms / reps:>6.3f} {f'[{low:.3f}, {high:.3f}]':>16} {median:>7.3f} {ratio} {ceiling:>7.2f} "
            f"{design.m:>6d}")


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m audit.selftest",
        description="Audit mechanisms of known epsilon through the suite's plan and one-run bound; "
                    "print each one's false-alarm rate (bound > true epsilon) and median bound.")
    parser.add_argument("--repetitions", type=int_at_least(1), default=None,
                        help=f"repetitions per row (default {REPETITIONS}, or {QUICK_REPETITIONS} with --quick)")
    parser.add_argument("--seed", type=int_at_least(0), default=0,
                        help="repetition k uses master seed SEED + k for its plan and noise (default 0)")
    parser.add_argument("--confidence", type=probability, default=CONFIDENCE,
                        help=f"confidence of the bound (default {CONFIDENCE}); false-alarm rate <= 1 - confidence")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPETITIONS} repetitions per row")
    args = parser.parse_args(argv)
    if args.repetitions is None:
        args.repetitions = QUICK_REPETITIONS if args.quick else REPETITIONS
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    print(f"self-test: {args.repetitions} repetitions per row (master seeds {args.seed}..{args.seed + args.repetitions - 1}), "
          f"confidence {args.confidence}, delta {DELTA}; alarm = eps_lower > eps0 (null: eps_lower > 0)")
    print(HEADER)
    started = time.perf_counter()
    ceilings: dict[int, float] = {}
    for design in designs():
        eps_lower = bounds(design, repetitions=args.repetitions, seed=args.seed, confidence=args.confidence)
        if design.m not in ceilings:
            ceilings[design.m] = epsilon_ceiling(design.m, delta=DELTA, confidence=args.confidence)
        print(table_row(design, eps_lower, ceilings[design.m]), flush=True)
    print(f"Under the independent plan the theorem allows an alarm rate of at most {1 - args.confidence:.2f}.\n"
          f"OLD pairs: the plan the suite used before (complementary runs, each with half of every class), for\n"
          f"comparison only. There IN versus OUT replaces a record by another of its class, worth up to 2 eps0 to\n"
          f"the Laplace class sum; the rule that ranks atypical records first exposes it. It was removed for this.\n"
          f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
