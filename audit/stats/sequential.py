"""Sequential audits: the verdict looked at after every round of runs, valid wherever the audit stops.

An audit that trains its runs in rounds and stops once its question is decided must not read each
round's verdict at the full confidence: with K looks at level α each, a correct pipeline would be
called "violated" at some look with probability up to Kα. The suite spends the error instead.

The theorem (Bonferroni's inequality over a schedule of looks fixed in advance; a group-sequential
design with the error spent in fixed shares, the conservative member of Lan & DeMets' spending
family, Biometrika 1983):

    Let the looks k = 1 .. K come after n_1 < n_2 < ... < n_K runs, numbers fixed before any run
    is trained, and let look k run a test of level α_k on the first n_k runs: a test whose
    fixed-design theorem gives P_H0[look k rejects] <= α_k. If α_1 + ... + α_K <= α, then
    P_H0[some look rejects] <= α, whatever rule decides, from everything seen so far, to stop
    after a look: a stopped audit has rejected only if one of its looks did.

Each look's test is one of the suite's fixed-design tests as they stand (the ε verdict's f_{ε,δ}
test, the claimed mechanism's own curve, the one-run ε bound), each valid at its level on the n_k
runs it sees, with its choices (attack, guess count) made on the reference runs of that look,
whose coins are public. Nothing about the dependence between looks is assumed, which is what lets
every test of the suite be used sequentially unchanged; the price is the level: a look's bound at
α_k instead of α, small where the guesses are many: on randomised response at ε0 = 2 with 5,000
canaries the fixed design's bound was 1.65–1.95 over master seeds 0–4, the last of four looks' (at
α/4) 1.83–1.90 (tests/audit/test_sequential.py).

The shares (`Schedule.alphas`): α_k = α (n_k - n_{k-1}) / n_K, each round's share of the error in
proportion to the runs it adds, so a doubling schedule spends about half of α at its last look
and little at its first, where only a blatant leak can show.

Two tests a look (`Schedule.tests`): where the runs record the mechanism their accountant composed,
a look runs both the ε verdict's test and the own curve's, each at level α_k / 2, and rejects if
either does: by Bonferroni again, P_H0[look k rejects] <= α_k (a correct pipeline satisfies both
nulls). Whether a look runs one test or two is fixed by the victim (whether its runs record a
mechanism), never by what a look found, so the split is fixed in advance too. Measured on exact
mechanisms by `audit.selftest.sequential.combined_row` (a look after each of 10 target runs, 200
repetitions, an alarm some look of either test above its own truth): 0 of 200 on the Gaussian
mechanism at ε0 = 1 and 0 of 200 on the white-box subsampled Gaussian at the claim 1 (95% CI 0-1.8%
each); its σ-halved claim of 4 detected in 200 of 200 after a median of 2 target runs
(docs/results/sequential.md).

Stopping (`decide`): "violated" at the first look that rejects; "not testable" (futility) at the
first look where the most favourable outcome of the final look could no longer reject, which for
the count tests is the final look's ceiling (every guess right) at the final share: at or below
the claim, no run can change the answer; "budget spent" after the last look. Futility only ever
stops an audit that has not rejected, so it cannot add a false alarm; the ceiling makes it
conservative in the other direction too (it never stops an audit that could still reject).
"""

from __future__ import annotations

from dataclasses import dataclass

#: how `decide` ends an audit (or goes on)
VIOLATED, NOT_TESTABLE, BUDGET_SPENT, GO_ON = "violated", "not testable", "budget spent", "go on"


@dataclass(frozen=True)
class Schedule:
    """The looks of a sequential audit: after `runs[k]` runs (ascending, fixed before any run), at
    total confidence `confidence`."""

    runs: tuple[int, ...]
    confidence: float
    tests: int = 1  # tests each look runs, α_k split evenly among them (module docstring)

    def __post_init__(self) -> None:
        if not self.runs or any(int(n) != n or n < 1 for n in self.runs):
            raise ValueError(f"the looks must be positive run counts, got {self.runs}")
        if any(b <= a for a, b in zip(self.runs, self.runs[1:])):
            raise ValueError(f"the looks must grow strictly, got {self.runs}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.tests not in (1, 2):
            raise ValueError(f"a look runs 1 or 2 tests, got {self.tests}")

    @property
    def looks(self) -> int:
        return len(self.runs)

    @property
    def budget(self) -> int:
        return self.runs[-1]

    @property
    def alphas(self) -> tuple[float, ...]:
        """α_k = α (n_k - n_{k-1}) / n_K (n_0 = 0): they sum to α = 1 - confidence."""
        alpha = 1.0 - self.confidence
        previous = (0, *self.runs[:-1])
        return tuple(alpha * (n - p) / self.budget for n, p in zip(self.runs, previous))

    def confidence_at(self, look: int) -> float:
        """The confidence each test of look `look` (0-based) runs at: 1 - α_k / tests."""
        return 1.0 - self.alphas[look] / self.tests


def schedule(budget: int, *, first: int, confidence: float, looks: int | None = None) -> Schedule:
    """Looks from `first` runs to `budget`: doubling (first, 2 first, 4 first, ..., budget) or, with
    `looks`, that many looks spaced geometrically (each count rounded, duplicates dropped)."""
    if int(budget) != budget or budget < 1:
        raise ValueError(f"the budget must be a positive number of runs, got {budget}")
    if int(first) != first or not 1 <= first <= budget:
        raise ValueError(f"the first look must be between 1 and the budget ({budget}) runs, got {first}")
    if looks is None:
        runs = []
        n = first
        while n < budget:
            runs.append(n)
            n *= 2
        return Schedule((*runs, budget), confidence)
    if int(looks) != looks or looks < 1:
        raise ValueError(f"looks must be a positive integer, got {looks}")
    if looks == 1:
        return Schedule((budget,), confidence)
    ratio = (budget / first) ** (1.0 / (looks - 1))
    runs = sorted({min(budget, int(round(first * ratio**k))) for k in range(looks)} | {budget})
    return Schedule(tuple(runs), confidence)


@dataclass(frozen=True)
class Look:
    """What one look found: its runs, the level each of its tests ran at, whether it rejected the
    claim (any of its tests), and the most the final look could still certify (the ceiling at the
    final share; None if unknown)."""

    runs: int
    confidence: float
    rejected: bool
    final_ceiling: float | None = None


def decide(schedule: Schedule, looks: list[Look], *, claimed_epsilon: float | None) -> str:
    """`VIOLATED`, `NOT_TESTABLE`, `BUDGET_SPENT` or `GO_ON` after the looks so far (module docstring)."""
    if len(looks) > schedule.looks:
        raise ValueError(f"{len(looks)} looks, but the schedule has {schedule.looks}")
    for look, planned in zip(looks, schedule.runs):
        if look.runs != planned:
            raise ValueError(f"a look after {look.runs} runs, but the schedule planned {planned}")
    if any(look.rejected for look in looks):
        return VIOLATED
    if looks and claimed_epsilon is not None and looks[-1].final_ceiling is not None:
        if looks[-1].final_ceiling <= claimed_epsilon:
            return NOT_TESTABLE
    return BUDGET_SPENT if len(looks) == schedule.looks else GO_ON
