"""The self-test of sequential audits (`audit.stats.sequential`): exact mechanisms of known ε, looked
at after every target run with each look at its share of the error, over seeded repetitions.

A repetition draws the design's coins and the mechanism's scores for all its runs once (as
`audit.stats.selftest_designs.repetition_bounds` does), then looks after t = 1, 2, ... target runs:
look k sees the first t_k target runs and as many reference runs, chooses its guess count on
those references (the verdict's rule) and bounds the targets at its confidence 1 - α_k. The runs of
a mechanism here are independent of each other, so the first t runs of a repetition are exactly
what an audit stopped after t runs would have seen.

A false alarm is a repetition in which some look's bound exceeds the truth (`truth`: ε0, or the
claimed mechanism's ε bracketed from below for its own curve): the event the theorem of
`audit.stats.sequential` bounds by α, whatever the stopping rule. A detection (the σ-halved row,
whose claim is false) is the same event; the look it happens at is the runs the audit needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audit.stats.epsilon import RankedGuesses
from audit.stats.guesses import BoundCache, best_count, tune
from audit.stats.selftest_designs import _NOISE_STREAM, _STREAMS_PER_ATTACK, Design, clopper_pearson, truth
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


def look_values(
    design: Design, schedule: Schedule, master_seed: int, *, analysis: str, cache: BoundCache | None = None
) -> np.ndarray:
    """[look] bounds of `analysis` in one repetition: look k on the first `schedule.runs[k]` target
    runs at `schedule.confidence_at(k)`, its count tuned on as many reference runs (`tune`, the
    verdict's rule). The design has one attack."""
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
    values = []
    for k, runs in enumerate(schedule.runs):
        confidence = schedule.confidence_at(k)
        # each look's tie orders are its own draws, independent of every coin
        reference_ties, target_ties = (np.random.default_rng([master_seed, _NOISE_STREAM, k, i]) for i in range(2))
        seen, seen_keep = reference_scores[:runs], reference_keep[:runs]
        pseudo = RankedGuesses.of(seen[seen_keep], seen[~seen_keep], rng=reference_ties)
        m = int(target_keep[:runs].size)
        count = tune(pseudo, m=m, analysis=analysis, delta=design.delta, confidence=confidence, cache=cache).guesses
        member, nonmember = scores[:runs][target_keep[:runs]], scores[:runs][~target_keep[:runs]]
        ranked = RankedGuesses.of(member, nonmember, rng=target_ties)
        value, _, _ = best_count(
            ranked,
            (count,),
            analysis=analysis,
            delta=design.delta,
            alpha=1.0 - confidence,
            cache=cache,
            mechanism=design.claimed,
        )
        values.append(value)
    return np.array(values)


def sequential_row(design: Design, schedule: Schedule, *, analysis: str, repetitions: int, seed: int) -> SequentialRow:
    """Alarms of `analysis` over `repetitions` (master seeds `seed` + r)."""
    limit = truth(design, analysis)
    if limit is None:
        raise ValueError(f"{analysis} has no truth on {design.name}")
    cache, first = BoundCache(), []
    for r in range(repetitions):
        above = np.flatnonzero(look_values(design, schedule, seed + r, analysis=analysis, cache=cache) > limit)
        if above.size:
            first.append(schedule.runs[int(above[0])])
    return SequentialRow(
        design.name,
        analysis,
        schedule.looks,
        repetitions,
        len(first),
        clopper_pearson(len(first), repetitions),
        tuple(first),
    )
