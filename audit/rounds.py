"""An audit in rounds (`--until-decided`): train the runs up to each look of a schedule fixed in
advance, read the verdict at that look's share of the error, and stop once it is decided.

The statistics are `audit.stats.sequential`'s (Bonferroni over the looks: look k tests at
1 - α_k with the α_k summing to 1 - confidence, so the claim is called violated with probability at
most α whatever the stopping rule). Each look is the fixed-design audit of its first n_k runs, its
targets the first half of them (`default_targets`), its choices made on its own reference runs.

A look whose ε verdict is "violated" stops the audit, and so does one whose test of the claimed
mechanism's own curve rejects it, where the runs record a mechanism: each look then runs both tests
at half its share of the error (`Schedule.tests`, Bonferroni: `audit.stats.sequential`), decided
after the first look's runs are trained, from whether they record a mechanism (a property of the
victim, not of any coin). A claim at or above the ceiling the final look could reach (a perfect
attack on its canaries at the final share) stops it as "not testable" within the budget;
otherwise the looks go on to `--n-shadow`.

summary.json is the last look's, with `sequential` added: the schedule, each look's runs,
confidence, verdict and bound, why the audit stopped, and the fixed-design bound of the same runs
at the full confidence beside it (descriptive: read after stopping, it is not valid).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable

from audit.claim import checked_claim
from audit.reporting.verdict import EPSILON_VIOLATED
from audit.stats.bounds import VERDICT_BOUND
from audit.stats.guesses import ceiling
from audit.stats.sequential import GO_ON, VIOLATED, Look, Schedule, decide
from audit.result import AuditResult
from shadow_runs.plan import default_targets

#: the first look's runs by default (fewer where the budget or an attack asks otherwise)
FIRST_LOOK = 16


def audit_in_rounds(
    schedule: Schedule,
    train_to: Callable[[int], None],
    score_at: Callable[[int, float], AuditResult],
    *,
    own_curve_applies: Callable[[int], bool],
    quiet: bool,
) -> AuditResult:
    """The looks of `schedule`, each `train_to(runs)` (training the runs it lacks) then
    `score_at(runs, confidence)`, until `decide` stops; the last look's summary with `sequential`
    added. After the first look's runs are trained, `own_curve_applies(runs)` says whether they
    record a mechanism whose own curve is tested: then every look runs two tests (`Schedule.tests`)."""
    looks: list[Look] = []
    entries: list[dict] = []
    for k, runs in enumerate(schedule.runs):
        train_to(runs)
        if k == 0 and own_curve_applies(runs):
            schedule = replace(schedule, tests=2)
        found = score_at(runs, schedule.confidence_at(k))
        look, entry = _look(found, schedule, k)
        looks.append(look)
        entries.append(entry)
        decision = decide(schedule, looks, claimed_epsilon=_claimed_epsilon(found))
        if not quiet:
            rejected = "rejected" if entry["own_curve_rejected"] else "not rejected"
            own = f", own curve {rejected}" if schedule.tests == 2 else ""
            print(
                f"look {k + 1} of {schedule.looks}: {runs} runs at {entry['confidence']:.4%}: "
                f"{entry['verdict'] or 'no verdict'}, eps_lower {entry['eps_lower']}{own}",
                file=sys.stderr,
            )
        if decision != GO_ON:
            break
    fixed = score_at(looks[-1].runs, schedule.confidence)
    sequential = {
        "schedule": list(schedule.runs),
        "confidence": schedule.confidence,
        "alphas": list(schedule.alphas),
        "tests": ["eps_verdict", "own_curve"][: schedule.tests],
        "looks": entries,
        "stopped": decision,
        "stopped_by": _stopped_by(entries[-1]) if decision == VIOLATED else None,
        "runs_used": looks[-1].runs,
        "final_ceiling": looks[-1].final_ceiling,
        "fixed_design": {
            "confidence": schedule.confidence,
            "eps_lower": (fixed.bound or {}).get("eps_lower"),
            "note": "the same runs at the full confidence: descriptive, not valid once the audit chose to stop there",
        },
    }
    return replace(found, sequential=sequential)


def _look(found: AuditResult, schedule: Schedule, k: int) -> tuple[Look, dict]:
    """One look's record (`Look` for `decide`, and its summary.json entry)."""
    verdict, bound, mechanism = found.verdict, found.bound or {}, found.own_curve or {}
    confidence = schedule.confidence_at(k)
    final = _final_ceiling(found, schedule)
    eps_rejected = verdict is not None and verdict.kind == EPSILON_VIOLATED
    own_rejected = schedule.tests == 2 and bool(mechanism.get("rejected"))
    look = Look(schedule.runs[k], confidence, rejected=eps_rejected or own_rejected, final_ceiling=final)
    entry = {
        "runs": schedule.runs[k],
        "confidence": confidence,
        "verdict": None if verdict is None else verdict.kind,
        "eps_lower": bound.get("eps_lower"),
        "eps_ceiling": bound.get("eps_ceiling"),
        "own_curve_rejected": mechanism.get("rejected"),
    }
    return look, entry


def _stopped_by(entry: dict) -> str:
    """Which test stopped a violated audit: the ε verdict's, else the own curve's."""
    return "eps_verdict" if entry["verdict"] == EPSILON_VIOLATED else "own_curve"


def _claimed_epsilon(found: AuditResult) -> float | None:
    epsilon = None if found.claim is None else found.claim.epsilon
    claim = checked_claim(epsilon, found.delta or 0.0, formal_epsilon=found.formal_epsilon)
    return None if claim is None else claim.epsilon


def _final_ceiling(found: AuditResult, schedule: Schedule) -> float | None:
    """The ε a perfect attack would certify at the final look: its canaries (this look's per target
    run, times the final look's targets) at the final share, by the verdict's rule. None without
    fair coins or a verdict."""
    m, bound = found.n_canaries, found.bound
    if not m or not bound:
        return None
    per_target = m // len(found.target_runs)
    delta = float(bound["delta"])  # the δ the verdict was made at
    return ceiling(
        per_target * default_targets(schedule.budget),
        analysis=VERDICT_BOUND.name,
        rule="tuned",
        delta=delta,
        confidence=schedule.confidence_at(schedule.looks - 1),
    )
