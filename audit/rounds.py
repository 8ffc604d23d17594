"""An audit in rounds (`--until-decided`): train the runs up to each look of a schedule fixed in
advance, read the verdict at that look's share of the error, and stop once it is decided.

The claim is called violated with probability at most α whatever the stopping rule (Bonferroni
over the looks, `audit.stats.sequential`). Each look is the fixed-design audit of its first n_k
runs, choices made on its own reference runs; where runs record a mechanism, both tests at half
the look's share (`audit.stats.guesses.verdict_levels`). summary.json is the last look's with
`sequential` added; its fixed-design bound at full confidence is descriptive, not valid.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable

from audit.reporting.verdict import EPSILON_VIOLATED
from audit.stats.bounds import VERDICT_BOUND
from audit.stats.guesses import EPS_TEST, OWN_CURVE, ceiling
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
    quiet: bool,
) -> AuditResult:
    """The looks of `schedule`, each `train_to(runs)` then `score_at(runs, confidence)` at its share, until `decide`
    stops; returns the last look's summary with `sequential` added. The first look's verdict sets how many tests share
    each look's error (`Schedule.tests`)."""
    looks: list[Look] = []
    entries: list[dict] = []
    for k, runs in enumerate(schedule.runs):
        train_to(runs)
        found = score_at(runs, 1.0 - schedule.alphas[k])
        if k == 0:
            schedule = replace(schedule, tests=len((found.bound or {}).get("levels") or [EPS_TEST]))
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
        "tests": [EPS_TEST, OWN_CURVE][: schedule.tests],
        "looks": entries,
        "stopped": decision,
        "stopped_by": found.verdict.rejected_by[0] if decision == VIOLATED else None,  # the ε test first
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
    rejected = verdict is not None and verdict.kind == EPSILON_VIOLATED  # the one decision of its tests
    look = Look(schedule.runs[k], confidence, rejected=rejected, final_ceiling=final)
    entry = {
        "runs": schedule.runs[k],
        "confidence": confidence,
        "verdict": None if verdict is None else verdict.kind,
        "eps_lower": bound.get("eps_lower"),
        "eps_ceiling": bound.get("eps_ceiling"),
        "own_curve_rejected": mechanism.get("rejected"),
    }
    return look, entry


def _claimed_epsilon(found: AuditResult) -> float | None:
    claim = found.checked_claim()
    return None if claim is None else claim.epsilon


def _final_ceiling(found: AuditResult, schedule: Schedule) -> float | None:
    """The ε a perfect attack would certify at the final look: its canaries (this look's per target run, times the final
    look's targets) at the final share, by the verdict's rule. None without fair coins or a verdict."""
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
