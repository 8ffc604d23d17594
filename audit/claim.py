"""The ε claim an audit is checked against: `Claim`, validated where it is made (its flags' argument types
too), and `checked_claim`, the one rule that says which claim an audit checks, through
`audit.result.AuditResult.checked_claim` (`audit.reporting.verdict.judged`, and a re-read audit).

A claim is ε, finite and > 0, at δ in [0, 1) (δ = 0: pure ε-DP). A part left off the command line
is the audit's own: None until `checked_claim` fills it. The verdict is taken at the claim's δ.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

#: where a claim's ε comes from: the user's (`--claimed-epsilon`, or recorded by `audit.release`),
#: or the victim's own accountant (summary.json's `formal_epsilon`)
CLAIMED, FORMAL = "claimed", "formal"
EPSILON_RULE = "a finite number > 0"
DELTA_RULE = "a number in [0, 1)"


def epsilon_ok(value: float) -> bool:
    """Whether `value` may be a claim's ε (`EPSILON_RULE`)."""
    return math.isfinite(value) and value > 0


def delta_ok(value: float) -> bool:
    """Whether `value` may be a claim's δ (`DELTA_RULE`; NaN is not)."""
    return 0 <= value < 1


def number_argument(text: str, *, accepts, requirement: str) -> float:
    """An argument type's number: `text` read as a float that `accepts` takes, else
    argparse.ArgumentTypeError "must be <requirement>, got '<text>'"."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not accepts(value):  # NaN fails every comparison, so an unparsable text lands here too
        raise argparse.ArgumentTypeError(f"must be {requirement}, got {text!r}")
    return value


def epsilon_argument(text: str) -> float:
    """`--claimed-epsilon`'s type: a claim's ε (`EPSILON_RULE`)."""
    return number_argument(text, accepts=epsilon_ok, requirement=EPSILON_RULE)


def delta_argument(text: str) -> float:
    """`--claimed-delta`'s type: a claim's δ (`DELTA_RULE`; 0 for pure DP)."""
    return number_argument(text, accepts=delta_ok, requirement=DELTA_RULE)


@dataclass(frozen=True)
class Claim:
    """An (ε, δ) claim and where its ε comes from. ValueError naming the bad value otherwise.
    `epsilon` or `delta` None: not given, the audit's own (`checked_claim`)."""

    epsilon: float | None = None
    delta: float | None = None
    source: str = CLAIMED

    def __post_init__(self) -> None:
        if self.source not in (CLAIMED, FORMAL):
            raise ValueError(f"a claim's source is {CLAIMED!r} or {FORMAL!r}, got {self.source!r}")
        if self.epsilon is not None and not epsilon_ok(self.epsilon):
            raise ValueError(f"{self.source} epsilon must be {EPSILON_RULE}, got {self.epsilon}")
        if self.delta is not None and not delta_ok(self.delta):
            raise ValueError(f"{self.source} delta must be {DELTA_RULE}, got {self.delta}")

    @classmethod
    def given(cls, epsilon: float | None, delta: float | None) -> Claim | None:
        """The claim of `--claimed-epsilon` and `--claimed-delta` (None where neither is given)."""
        return None if epsilon is None and delta is None else cls(epsilon=epsilon, delta=delta)


def verdict_delta(claim: Claim | None, own_delta: float) -> float:
    """The δ an audit's verdict is computed at: the claim's where given, else the audit's own (the victim's δ, 0 for a
    non-DP victim): a bound at one δ says nothing about a claim at a larger one."""
    return own_delta if claim is None or claim.delta is None else claim.delta


def checked_claim(epsilon: float | None, delta: float, *, formal_epsilon: float | None) -> Claim | None:
    """The claim an audit checks, both parts set: the claimed `epsilon`, else the victim's `formal_epsilon` (None when
    neither), at `delta` as `verdict_delta` resolved it."""
    if epsilon is not None:
        return Claim(epsilon=epsilon, delta=delta, source=CLAIMED)
    if formal_epsilon is not None:
        return Claim(epsilon=formal_epsilon, delta=delta, source=FORMAL)
    return None
