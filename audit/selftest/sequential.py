"""The self-test of sequential audits (`audit.stats.sequential`): exact mechanisms of known ε, looked at after every
target run with each look at its share of the error, over seeded repetitions.

A repetition's first t runs are what an audit stopped after t runs would have seen. A false alarm is a repetition in
which some look's bound exceeds the truth, which the theorem bounds by α whatever the stopping rule; on the σ-halved row
(a false claim) it is a detection. `combined_row` checks the two-test rule (`Schedule(..., tests=2)`): both tests at 1 -
α_k / 2, an alarm when either exceeds its own truth (Bonferroni). On `fixed_schedule` (one look) it is a fixed-design
audit's decision (`audit.stats.guesses.verdict_levels`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from audit.stats.epsilon import RankedGuesses
from audit.stats.guesses import BoundCache, best_count, tune
from audit.selftest.designs import (
    _NOISE_STREAM,
    _STREAMS_PER_ATTACK,
    Design,
    JudgedRow,
    clopper_pearson,
    truth,
)
from audit.stats.sequential import Schedule
from shadow_runs.plan import target_runs


@dataclass(frozen=True)
class SequentialRow:
    """One design and analysis under a schedule, the verdict's rule (counts tuned on the references):
    alarms (repetitions with a look above the truth), their Clopper-Pearson interval, and the target
    runs at which each alarmed repetition's first alarm came."""

    design: str
    analysis: str
    looks: int
    repetitions: int
    alarms: int
    interval: tuple[float, float]
    first_alarm_runs: tuple[int, ...]
    alarmed: tuple[int, ...] = ()  # the master seeds of the repetitions with an alarm


@dataclass(frozen=True)
class CombinedRow:
    """A design with a recorded mechanism under two tests a look (`combined_row`): alarms (repetitions where some look's
    bound of either test exceeds its truth), their Clopper-Pearson interval, the runs to each alarm, and which test(s)
    rejected ("+"-joined where both did)."""

    design: str
    analyses: tuple[str, ...]
    looks: int
    repetitions: int
    alarms: int
    interval: tuple[float, float]
    first_alarm_runs: tuple[int, ...]
    alarmed: tuple[int, ...]  # the master seeds of the repetitions with an alarm
    stopped_by: tuple[str, ...]

    @property
    def analysis(self) -> str:
        """The analyses joined by "+" ("fdp+mechanism"), as `judged_row` names the row."""
        return "+".join(self.analyses)


def look_values(
    design: Design, schedule: Schedule, master_seed: int, *, analysis: str, cache: BoundCache | None = None
) -> np.ndarray:
    """[look] bounds of `analysis` in one repetition: look k on the first `schedule.runs[k]` target
    runs at `schedule.confidence_at(k)`, its count tuned on as many reference runs (`tune`, the
    verdict's rule). The design has one attack."""
    looks = _look_bounds(design, schedule, master_seed, analyses=(analysis,), cache=cache)
    return np.array([values[0] for values in looks])


def _look_bounds(
    design: Design, schedule: Schedule, master_seed: int, *, analyses: tuple[str, ...], cache: BoundCache | None
):
    """Per look, the bounds of each of `analyses` (a tuple), all on the same coins, scores and tie
    orders, each at `schedule.confidence_at(k)`, its count tuned on the look's references; one look
    at a time, so a caller may stop at an alarm as an audit would."""
    if design.attacks != 1:
        raise ValueError("a sequential repetition takes a design of one attack")
    if schedule.budget > design.n_targets:
        raise ValueError(f"the schedule looks at {schedule.budget} runs, the design has {design.n_targets} targets")
    keep = design.plan(design.labels, design.n_runs, master_seed)
    targets = target_runs(design.n_runs, design.n_targets)
    is_reference = np.ones(design.n_runs, dtype=bool)
    is_reference[targets] = False
    target_keep, reference_keep = keep[targets], keep[is_reference]
    # the mechanism's noise from the fixed design's streams (`repetition_bounds`), so the last look's runs are its runs
    noise, _, reference_noise, _, _ = np.random.default_rng(np.random.SeedSequence([master_seed, _NOISE_STREAM])).spawn(
        _STREAMS_PER_ATTACK
    )
    scores = design.mechanism(target_keep, design.epsilon, noise)
    reference_scores = design.mechanism(reference_keep, design.epsilon, reference_noise)
    for k, runs in enumerate(schedule.runs):
        confidence = schedule.confidence_at(k)
        # each look's tie orders are its own draws, independent of every coin
        reference_ties, target_ties = (np.random.default_rng([master_seed, _NOISE_STREAM, k, i]) for i in range(2))
        seen, seen_keep = reference_scores[:runs], reference_keep[:runs]
        pseudo = RankedGuesses.of(seen[seen_keep], seen[~seen_keep], rng=reference_ties)
        m = int(target_keep[:runs].size)
        member, nonmember = scores[:runs][target_keep[:runs]], scores[:runs][~target_keep[:runs]]
        ranked = RankedGuesses.of(member, nonmember, rng=target_ties)
        values = []
        for analysis in analyses:
            count = tune(pseudo, m=m, analysis=analysis, delta=design.delta, confidence=confidence, cache=cache)
            value, _, _ = best_count(
                ranked,
                (count.guesses,),
                analysis=analysis,
                delta=design.delta,
                alpha=1.0 - confidence,
                cache=cache,
                mechanism=design.claimed,
            )
            values.append(value)
        yield tuple(values)


def sequential_row(design: Design, schedule: Schedule, *, analysis: str, repetitions: int, seed: int) -> SequentialRow:
    """Alarms of `analysis` over `repetitions` (master seeds `seed` + r)."""
    limit = truth(design, analysis)
    if limit is None:
        raise ValueError(f"{analysis} has no truth on {design.name}")
    first, alarmed, _ = _first_alarms(design, schedule, (analysis,), (limit,), repetitions=repetitions, seed=seed)
    return SequentialRow(
        design.name,
        analysis,
        schedule.looks,
        repetitions,
        len(first),
        clopper_pearson(len(first), repetitions),
        tuple(first),
        tuple(alarmed),
    )


def _first_alarms(
    design: Design, schedule: Schedule, analyses: tuple[str, ...], limits, *, repetitions: int, seed: int
) -> tuple[list[int], list[int], list[str]]:
    """Per repetition (master seeds `seed` + r) that alarms: the runs of its first look with a bound of some analysis
    above its limit (where an audit stops), its master seed, and the analyses that rejected there (joined by "+")."""
    cache, first, alarmed, stopped_by = BoundCache(), [], [], []
    for r in range(repetitions):
        for k, values in enumerate(_look_bounds(design, schedule, seed + r, analyses=analyses, cache=cache)):
            rejected = [a for a, value, limit in zip(analyses, values, limits) if value > limit]
            if rejected:  # an audit stops there
                first.append(schedule.runs[k])
                alarmed.append(seed + r)
                stopped_by.append("+".join(rejected))
                break
    return first, alarmed, stopped_by


#: the two tests of a look where the runs record a mechanism: the ε verdict's (f_{ε,δ}) and the own curve's
BOTH_TESTS = ("fdp", "mechanism")


def combined_row(
    design: Design, schedule: Schedule, *, repetitions: int, seed: int, analyses: tuple[str, ...] = BOTH_TESTS
) -> CombinedRow:
    """Alarms of the rule with several tests a look over `repetitions` (master seeds `seed` + r): look
    k runs every one of `analyses` at `schedule.confidence_at(k)` (the schedule's `tests` must be
    their number, so each is at α_k / tests) and rejects if any bound exceeds its own truth (`truth`);
    a repetition stops at its first rejecting look, as an audit would."""
    if schedule.tests != len(analyses):
        raise ValueError(f"the schedule splits each look among {schedule.tests} tests, {len(analyses)} were given")
    limits = [truth(design, analysis) for analysis in analyses]
    if any(limit is None for limit in limits):
        raise ValueError(f"{', '.join(analyses)}: not every test has a truth on {design.name}")
    first, alarmed, stopped_by = _first_alarms(design, schedule, analyses, limits, repetitions=repetitions, seed=seed)
    return CombinedRow(
        design.name,
        tuple(analyses),
        schedule.looks,
        repetitions,
        len(first),
        clopper_pearson(len(first), repetitions),
        tuple(first),
        tuple(alarmed),
        tuple(stopped_by),
    )


#: looks per sequential row: one after each target run
SEQUENTIAL_LOOKS = 10


def sequential_designs() -> list[tuple[Design, str]]:
    """The sequential rows, (design, analysis), looked at after each of `SEQUENTIAL_LOOKS` target runs: randomised
    response and the Gaussian mechanism at ε0 = 1 by the ε verdict; the white-box subsampled Gaussian at the claim 1 by
    its own curve, and its σ-halved claim of 4 (alarms are detections)."""
    from dataclasses import replace

    from audit.selftest.designs import gaussian_design, rr_labels, whitebox_designs
    from audit.selftest.mechanisms import randomised_response

    rr = Design("randomised response", "independent", 1.0, randomised_response, rr_labels(), SEQUENTIAL_LOOKS)
    white_box, halved = whitebox_designs()[0], whitebox_designs()[-1]
    return [
        (rr, "fdp"),
        (gaussian_design(1.0, SEQUENTIAL_LOOKS), "fdp"),
        (replace(white_box, n_targets=SEQUENTIAL_LOOKS), "mechanism"),
        (replace(halved, n_targets=SEQUENTIAL_LOOKS), "mechanism"),
    ]


def combined_designs() -> list[Design]:
    """The combined rows' designs: the sequential designs whose runs record a mechanism (`Design.claimed`), so both
    tests run a look: the Gaussian mechanism at ε0 = 1, the white-box subsampled Gaussian at the claim 1 and its
    σ-halved claim of 4 (power). Randomised response records none."""
    return [design for design, _ in sequential_designs() if design.claimed is not None]


def fixed_combined_designs() -> list[Design]:
    """The fixed designs whose one decision of both tests the self-test judges (`fixed_schedule`): the
    Gaussian mechanism at ε0 = 1 and the marginal counts at the claims 1 and 4, exact, and the marginal
    counts' σ-halved claim (power). The white-box subsampled Gaussian's own-curve search costs seconds a
    repetition: its combined rule is judged by the sequential rows."""
    from audit.selftest.designs import APPROX_TARGETS, gaussian_design, marginal_designs

    return [gaussian_design(1.0, APPROX_TARGETS), *marginal_designs()]


def fixed_schedule(design: Design, confidence: float) -> Schedule:
    """`design`'s fixed design as one look at all its target runs, two tests: each at
    1 - (1 - confidence) / 2, the levels `audit.stats.guesses.verdict_levels` gives an audit."""
    return Schedule((design.n_targets,), confidence, tests=len(BOTH_TESTS))


def looks_schedule(confidence: float, *, tests: int = 1) -> Schedule:
    """A look after each of the `SEQUENTIAL_LOOKS` target runs, at total `confidence`, `tests` tests a look."""
    return Schedule(tuple(range(1, SEQUENTIAL_LOOKS + 1)), confidence, tests=tests)


def judged_row(
    design: Design, found: SequentialRow | CombinedRow, *, confidence: float, rule: str = "sequential"
) -> JudgedRow | None:
    """The row `audit.selftest.designs.verdict` judges (`rule`: "sequential", or "fixed"): its alarms against
    the allowed 1 - confidence; None for a false claim (`Design.noise_halved`), whose alarms are detections."""
    if design.noise_halved:
        return None
    p_value = float(stats.binom.sf(found.alarms - 1, found.repetitions, 1.0 - confidence))  # P[X >= alarms]
    return JudgedRow(design, rule, found.analysis, found.alarms, found.repetitions, p_value)
