"""Sequential audits: the verdict looked at after every round of runs, valid wherever the audit stops.

The theorem (Bonferroni over a schedule of looks fixed in advance; the fixed-share member of Lan & DeMets' spending
family, Biometrika 1983): if look k after n_1 < ... < n_K runs (fixed before any run) runs a fixed-design test of level
α_k and Σ α_k <= α, then P_H0[some look rejects] <= α, whatever rule decides to stop. Each look is one of the suite's
fixed-design tests, choices made on its own public reference runs; no dependence between looks is assumed.

Shares (`Schedule.alphas`): α_k = α (n_k - n_{k-1}) / n_K; where the runs record a mechanism (`Schedule.tests`), the ε
test and the own curve's each at α_k / 2, a split fixed by the victim. Stopping (`decide`): "violated" at the first
rejecting look; "not testable" once the final look's ceiling cannot reject (never stopping an audit that could still
reject); "budget spent" after the last look.
"""

from __future__ import annotations

from dataclasses import dataclass

#: how `decide` ends an audit (or goes on)
VIOLATED, NOT_TESTABLE, BUDGET_SPENT, GO_ON = "violated", "not testable", "budget spent", "go on"


@dataclass(frozen=True)
class Schedule:
    """The looks of a sequential audit: after `runs[k]` runs (ascending, fixed in advance), at total `confidence`."""

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
    """What one look found: its runs, the level each of its tests ran at, whether it rejected the claim (any of its
    tests), and the most the final look could still certify (the ceiling at the final share; None if unknown)."""

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
