"""What the terminal (`audit.outputs.describe`) and the report (`audit.reporting`) both say beside an
audit's numbers, from its summary.json: the test of the claimed mechanism's own curve, the
figures no better than guessing ("(chance)") and the warnings where the runs are too few for a
figure shown. `remarks` lists them once, so the two cannot drift apart."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.reporting.verdict import count, percent

if TYPE_CHECKING:
    from audit.result import AuditResult

#: the false-positive rates whose TPR the terminal shows (the report marks the same "(chance)")
SHOWN_RATES = ("0.01", "0.001")

#: TPR at a false-positive rate is shown as measured only where the target runs' non-members give at least this many
#: false positives at it: their binomial count then has relative spread <= 1/sqrt(10) = 0.32
MIN_FALSE_POSITIVES = 10


@dataclass(frozen=True)
class Remarks:
    """`own_curve`: the own-curve test in words (None where the runs record no mechanism);
    `at_chance`: attack -> the rates of `SHOWN_RATES` its TPR is no better than guessing at;
    `warnings`: one sentence each where the runs are too few for a figure shown."""

    own_curve: str | None
    at_chance: dict[str, tuple[str, ...]]
    warnings: tuple[str, ...]

    def to_json(self) -> dict:
        return {
            "own_curve": self.own_curve,
            "at_chance": {a: list(rates) for a, rates in self.at_chance.items()},
            "warnings": list(self.warnings),
        }


def remarks(result: AuditResult) -> Remarks:
    """The remarks on an audit (its result, `audit.result.AuditResult`)."""
    return Remarks(
        own_curve=own_curve(result.own_curve) if result.own_curve else None,
        at_chance={
            attack: tuple(rate for rate in SHOWN_RATES if at_chance(entry, rate=rate))
            for attack, entry in result.attacks.items()
        },
        warnings=tuple(too_few_runs(result)),
    )


def own_curve(found: dict) -> str:
    """The test of the claimed mechanism's own curve (summary.json's `verdict.mechanism`) in words:
    whether the mechanism itself is rejected, and the strongest member of its family ruled out."""
    claimed = found["claimed"]
    mechanism = (
        f"noise multiplier {claimed['noise_multiplier']:.4g}, sample rate {claimed['sample_rate']:.4g}, "
        f"{claimed['steps']} steps; ε {found['eps_claimed']:.2f} at δ = {found['delta']:g} by tight accounting, "
        "where the formal ε is the accountant's upper bound"
    )
    outcome = (
        "REJECTED: the implementation leaks more than its own accounting allows"
        if found["rejected"]
        else "not rejected"
    )
    family = (
        "no member of its family is ruled out"
        if found["noise_rejected"] is None
        else f"every noise multiplier >= {found['noise_rejected']:.3g} at this sample rate and step count is ruled "
        f"out: ε ≥ {found['eps_lower']:.2f} relative to the family"
    )
    return (
        f"the claimed mechanism ({mechanism}) {outcome} at {percent(found['confidence'])}"
        f" ({found['attack'] or 'every attack'}, {'fixed' if found.get('chosen_by') == 'fixed' else found['rule']});"
        f" {family}; ceiling {found['eps_ceiling']:.2f}"
    )


def too_few_runs(result: AuditResult) -> list[str]:
    """Warnings where the runs are too few for a figure the terminal shows, each with how many would
    do: a TPR at FPR f whose threshold rests on fewer than `MIN_FALSE_POSITIVES` false positives
    (the targets hold n0 non-members, so f n0 < 10), needing ceil(10 / (f n0 / T)) targets; and a
    verdict that could not be tuned on the reference runs (the bound then pays for every attack)."""
    if not result.attacks:
        return []
    first = next(iter(result.attacks.values()))
    targets = len(result.target_runs)
    warnings = []
    for rate in SHOWN_RATES:
        f, n0 = float(rate), int(first["n_nonmembers"])
        if f * n0 < MIN_FALSE_POSITIVES:
            needed = math.ceil(MIN_FALSE_POSITIVES / (f * n0 / targets))
            warnings.append(
                f"TPR@{f:.1%}FPR: {f:.1%} of the targets' {n0:,} non-members is {f * n0:.1f} false positives, too "
                f"few to pin the rate ({MIN_FALSE_POSITIVES} at least): {count(needed, 'target run')} would "
                f"(--n-targets {needed}, --n-shadow {2 * needed} or more)".replace(".0%", "%")
            )
    if (result.bound or {}).get("rule") == "grid" and not result.release_audit:
        warnings.append(
            f"{count(result.n_shadow - targets, 'reference run')}: too few to choose the verdict's attack "
            "on (2 at least, and LiRA's 4), so the verdict splits its confidence over every attack: "
            f"--n-shadow {targets + 4} or more lets the reference runs choose"
        )
    return warnings


def at_chance(attack: dict, *, rate: str, level: float = 0.05) -> bool:
    """Whether the attack finds no more members at FPR `rate` (f) than guessing would: the k of n1
    members it finds there are not significantly more than f n1 (one-sided binomial test of k against
    Binomial(n1, f) at `level`). The threshold's own noise is left aside; it would only make a found
    excess less certain, so an attack called better than chance here may still be near it."""
    from scipy import stats

    f, n1 = float(rate), int(attack["n_members"])
    found = round(attack["tpr_at_fpr"][rate] * n1)
    return float(stats.binom.sf(found - 1, n1, f)) >= level
