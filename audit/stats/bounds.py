"""Every one-run bound an audit computes from one set of guesses, registered once (`BOUNDS`: the rows of `BUILT_IN`,
then those installed under `BOUND_GROUP`; docs/contracts.md "Adding a bound"). A row's `test(m=, guesses=, correct=,
delta=, alpha=, at_least=0.0)` is the largest ε or μ that `correct` right guesses of `guesses` among `m` canaries reject
at level `alpha`; 0 if none is (or if `at_least` > 0 is not rejected). The guesses must come from a rule that never sees
their coins. A `needs_mechanism` row also takes `mechanism=`; its keys are null where the runs record none.
"""

from __future__ import annotations

import importlib.metadata
import math
from dataclasses import dataclass
from typing import Callable

from audit.stats import epsilon as steinke
from audit.stats import fdp
from audit.stats import mechanism as claimed
from audit.stats.epsilon import gaussian_dp_epsilon
from extensions import load_entry_point

#: what a bound's value is a bound on: an ε, or the μ of μ-GDP
UNITS = ("eps", "mu")


@dataclass(frozen=True, kw_only=True)
class Bound:
    """One registered bound."""

    name: str  # the analysis: `bound_at`'s first argument, a key of summary.json's `guesses`
    lower_key: str  # summary.json key of the bound the guesses give
    ceiling_key: str  # summary.json key of what a perfect attack would certify (`audit.stats.guesses.ceiling`)
    label: str  # how the self-test's table names it
    unit: str  # one of UNITS
    test: Callable[..., float]  # (m=, guesses=, correct=, delta=, alpha=, at_least=0.0) -> the largest rejected value
    about: str  # what the bound is, in one line (summary.json's `verdict.analysis` for the verdict's bound)
    verdict: bool = False  # whether the verdict may rest on it (exactly one row)
    epsilon_key: str | None = None  # for a μ bound: summary.json key of the ε at the audit's δ it implies
    to_epsilon: Callable[[float, float], float | None] | None = None  # (value, δ) -> that ε (None: undefined)
    needs_mechanism: bool = False  # its test takes mechanism= (the claimed SubsampledGaussian); null without one

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"a bound's unit is one of {', '.join(UNITS)}, got {self.unit!r}")
        if (self.epsilon_key is None) != (self.to_epsilon is None):
            raise ValueError(f"bound {self.name!r}: epsilon_key and to_epsilon come together")

    @property
    def keys(self) -> tuple[str, ...]:
        """Its summary.json keys, in the order an entry lists them."""
        return (self.lower_key, self.ceiling_key) + ((self.epsilon_key,) if self.epsilon_key else ())


def steinke_test(*, m: int, guesses: int, correct: int, delta: float, alpha: float, at_least: float = 0.0) -> float:
    """Steinke, Nasr & Jagielski's bound (`audit.stats.epsilon.one_run_epsilon`); 0 if `at_least` is not rejected."""
    if (
        at_least > 0.0
        and not steinke.one_run_p_value(m=m, guesses=guesses, correct=correct, epsilon=at_least, delta=delta) < alpha
    ):
        return 0.0
    return steinke.one_run_epsilon(m=m, guesses=guesses, correct=correct, delta=delta, alpha=alpha)


def gaussian_test(*, m: int, guesses: int, correct: int, delta: float, alpha: float, at_least: float = 0.0) -> float:
    """The largest μ whose μ-GDP the f-DP test rejects (`audit.stats.fdp.gaussian_one_run_mu`); `delta` unused."""
    return fdp.gaussian_one_run_mu(m=m, guesses=guesses, correct=correct, alpha=alpha, at_least=at_least)


def gaussian_epsilon(mu: float, delta: float) -> float | None:
    """ε at δ of μ-GDP; None at δ = 0 (μ-GDP with μ > 0 is never pure DP), 0 for μ = 0."""
    if mu == 0.0:
        return 0.0
    if delta == 0.0:
        return None
    return float(gaussian_dp_epsilon(mu, delta))


def mechanism_test(
    *,
    m: int,
    guesses: int,
    correct: int,
    delta: float,
    alpha: float,
    at_least: float = 0.0,
    mechanism: claimed.SubsampledGaussian,
) -> float:
    """The ε at `delta` of the strongest member of the claimed mechanism's family (its rate and step
    count, any noise multiplier) that the guesses reject: the smallest rejected σ*, spent at δ from
    below (never above σ*'s true ε); 0 if none is. Relative to the family (`audit.stats.mechanism`); needs δ > 0."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"the claimed mechanism's test needs delta in (0, 1), got {delta}")
    q, steps = mechanism.sample_rate, mechanism.steps
    sigma = claimed.smallest_rejected_noise(q, steps, m=m, guesses=guesses, correct=correct, alpha=alpha)
    if sigma is None:
        return 0.0
    value = math.inf if sigma == 0.0 else claimed.epsilon_at(mechanism.with_noise(sigma), delta, side="lower")
    return value if value >= at_least else 0.0


STEINKE = Bound(
    name="steinke",
    lower_key="eps_lower",
    ceiling_key="eps_ceiling",
    label="steinke",
    unit="eps",
    test=steinke_test,
    about="one-run bound (Steinke, Nasr & Jagielski 2023)",
)
FDP = Bound(
    name="fdp",
    lower_key="eps_lower_fdp",
    ceiling_key="eps_ceiling_fdp",
    label="f-DP",
    unit="eps",
    test=fdp.fdp_one_run_epsilon,
    about="f-DP test of f_{eps,delta} (Mahloujifar, Melis & Chaudhuri 2025)",
    verdict=True,
)
GAUSSIAN = Bound(
    name="gaussian",
    lower_key="mu_lower",
    ceiling_key="mu_ceiling",
    label="mu-GDP",
    unit="mu",
    test=gaussian_test,
    about="f-DP test of mu-GDP (descriptive: holds for a Gaussian trade-off)",
    epsilon_key="eps_gaussian",
    to_epsilon=gaussian_epsilon,
)

MECHANISM = Bound(
    name="mechanism",
    lower_key="eps_lower_mechanism",
    ceiling_key="eps_ceiling_mechanism",
    label="own curve",
    unit="eps",
    test=mechanism_test,
    about="f-DP test of the claimed mechanism's own curve (a Poisson-subsampled Gaussian; eps relative to its family)",
    needs_mechanism=True,
)

#: the built-in bounds; a new one is a row here
BUILT_IN: tuple[Bound, ...] = (STEINKE, FDP, GAUSSIAN, MECHANISM)
#: entry-point group of installed bounds: `name = "package.module:BOUND"` (a `Bound`, `name` its name)
#: in a package's metadata adds that bound to every audit, after the built-in ones
BOUND_GROUP = "membership_audit.bounds"


def installed_bounds(taken: tuple[Bound, ...] = BUILT_IN) -> tuple[Bound, ...]:
    """The bounds of `BOUND_GROUP`'s entry points, by name; ValueError (one line) for one that does
    not load, is no `Bound`, is named otherwise than its entry point, would be the verdict's, or
    shares a name, label or summary.json key with a bound in `taken`."""
    found: list[Bound] = []
    for entry in sorted(importlib.metadata.entry_points(group=BOUND_GROUP), key=lambda e: e.name):
        bound = load_entry_point(entry, label="bound")
        if not isinstance(bound, Bound):
            why = "not a Bound"
        elif bound.name != entry.name:
            why = f"its entry point names a bound called {bound.name!r}"
        elif bound.verdict:
            why = "the verdict rests on one built-in bound alone (verdict=True)"
        else:
            clash = {bound.name, bound.label, *bound.keys} & {
                x for b in (*taken, *found) for x in (b.name, b.label, *b.keys)
            }
            why = f"{', '.join(sorted(clash))} taken by another bound" if clash else None
        if why:
            raise ValueError(f"bound {entry.name} does not follow the bound protocol: {why}")
        found.append(bound)
    return tuple(found)


#: every bound, in the order summary.json lists their keys: the built-in ones, then the installed ones
BOUNDS: tuple[Bound, ...] = (*BUILT_IN, *installed_bounds())
#: the bounds' names, registry order
ANALYSES = tuple(b.name for b in BOUNDS)
#: the one bound an ε verdict rests on: the f-DP test of the claim's own curve f_{ε,δ}
(VERDICT_BOUND,) = (b for b in BOUNDS if b.verdict)
#: a group's ε keys in summary.json (`audit.stats.guesses.bounds_of`), all null where no bound applies
SUMMARY_KEYS = ("guess_rule", *(key for b in BOUNDS for key in b.keys), "guesses")


def get_bound(name: str) -> Bound:
    """The registered bound `name`; ValueError naming the known ones otherwise."""
    for bound in BOUNDS:
        if bound.name == name:
            return bound
    raise ValueError(f"analysis must be one of {', '.join(ANALYSES)}, got {name!r}")
