"""summary.json of an audit (docs/contracts.md, "summary.json"): metrics of every attack pooled over
the target runs, with the one-run ε bound where the design supports one and a note saying what the
ε numbers are (or why there are none). `summarise` audits shadow runs, `release_summary` one
user's release; both make the ε verdict once, with the result (`audit.result.AuditResult`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from audit.evaluate import (
    StoredRuns,
    attack_summary,
    claimed_mechanism,
    fixed_attack,
    mechanism_attack,
    run_delta,
    tie_order,
    top_level_bounded,
    untold,
    verdict_attack,
)
from audit.result import AuditResult
from audit.stats.bounds import MECHANISM, VERDICT_BOUND
from audit.stats.epsilon import bound_applies, unfair_coins_reason
from audit.stats.guesses import EPS_TEST, OWN_CURVE, fixed_count, mechanism_verdict, verdict_bound, verdict_levels
from audit.stats.mechanism import SubsampledGaussian
from shadow_runs.plan import FIXED_REMAINDER, NATURAL_FIXED, PLAN, natural_coins
from shadow_runs.records import CanaryColumns


@dataclass(frozen=True)
class EvaluationSettings:
    """How an audit's numbers are made, as summary.json records them: the master seed (tie orders, evaluation splits),
    the confidence of every bound, the plan's inclusion rate and `--lira-variance` as given."""

    seed: int
    confidence: float
    inclusion_rate: float
    lira_variance_flag: str = "auto"
    #: `--verdict-attack`: the attack the verdict and the own curve rest on, declared before the audit (None:
    #: chosen on the reference runs)
    verdict_attack: str | None = None


EPSILON_NOTE = (
    "eps_lower: one-run bound (Steinke, Nasr & Jagielski 2023) over the target runs' coins, "
    "m = n_canaries; eps_ceiling: what a perfect attack would certify with this design"
)
CANARY_BOUND = (
    "eps_lower: one-run bound (Steinke, Nasr & Jagielski 2023) over the target runs' coins of the "
    "inserted canaries, m = n_canaries, designated before any training; eps_ceiling: what a perfect "
    "attack would certify with this design"
)
CANARY_EPSILON_NOTE = (
    f"{CANARY_BOUND}; `natural`: the same over the natural examples, descriptive (the verdict uses the canaries only)"
)
DUPLICATE_BOUND = (
    "each duplicate canary is {copies} identical rows moved by one coin, which a per-record ε does not "
    "bound (group privacy gives {copies}ε), so the canaries get leakage statistics but no eps_lower or "
    "eps_ceiling"
)
DUPLICATE_NOTE = f"{DUPLICATE_BOUND}; `natural` keeps the one-run bound over the natural examples, descriptive"
#: the end of either note under the fixed remainder, where the natural records have no coins
FIXED_REMAINDER_NATURAL = (
    f"no `natural` group: every natural record is a member of every run ({FIXED_REMAINDER}), the rest of the "
    "data fixed, which the one-run theorem allows"
)
#: what the one target of a release audit is: summary.json's evaluation.target, runs/00000.json's target
RELEASE_TARGET = "the user's release"
RELEASE_EPSILON_NOTE = (
    "eps_lower: one-run bound (Steinke, Nasr & Jagielski 2023) over the release's membership "
    "coins, m = n_canaries; eps_ceiling: what a perfect attack would certify with this design"
)
CHOSEN_NOTE = (
    "the custodian chose the members rather than drawing them by recorded independent fair coins, so any "
    "difference between members and non-members (their typicality, a source) is found by the attacks and "
    "would read as leakage even for a pipeline with ε = 0; these numbers describe the release, they bound "
    "no ε"
)


def run_utility(meta) -> dict:
    """Means over the runs of the utility figures every run recorded beside its test accuracy (a table's `test_auroc`,
    `marginal_tv_1way`, `marginal_tv_2way`: `victims.tabular.release`); none where some run recorded none."""
    recorded = [m.get("utility") or {} for m in meta]
    names = set.intersection(*(set(u) for u in recorded)) if recorded else set()
    return {name: float(np.mean([u[name] for u in recorded])) for name in sorted(names)}


def summarise(
    runs: StoredRuns,
    scores: dict[str, np.ndarray],
    targets: np.ndarray,
    *,
    experiment: dict,
    variance: str,
    canaries: CanaryColumns | None,
    settings: EvaluationSettings,
    choices: dict | None = None,
    claimed_delta: float | None = None,
) -> AuditResult:
    """summary.json of an audit of shadow runs, before its claim is judged (`audit.reporting.verdict.judged`):
    metrics of every attack, pooled over the targets; `choices` (attack -> `audit.evaluate.ReferenceChoice`
    or None) what the reference runs chose; the verdict's bound at `claimed_delta`, else the audit's own δ."""
    membership, init_mask = runs.keep[targets], runs.init_mask[targets]
    fair = bound_applies(settings.inclusion_rate)
    accuracies = [m["test_accuracy"] for m in runs.meta]
    # the audited canaries: the planted ones, else every example. An attack that scored too few of
    # them (ganleak_pbb reconstructs only the first rows, none with --pbb-examples 0) has no group.
    columns = canaries.scored if canaries else slice(None)
    audited = membership[:, columns]

    def too_few(s: np.ndarray) -> bool:
        seen = ~np.isnan(s[:, columns])
        return min(int((seen & audited).sum()), int((seen & ~audited).sum())) < 2

    unscored = [a for a, s in scores.items() if too_few(s)]
    identity = _identity(experiment, runs, target_runs=targets.tolist())
    own_delta = identity["delta"] or 0.0
    mechanism = claimed_mechanism(runs.meta, targets) if fair else None
    evaluation = {
        **_settings(variance, settings),
        "plan": experiment["plan"],
        "inclusion_rate": settings.inclusion_rate,
        "n_canaries": int(membership.size) if fair else None,
        "epsilon_note": EPSILON_NOTE if fair else unfair_coins_reason(settings.inclusion_rate),
    }
    attacks = attacks_summary(
        {a: s for a, s in scores.items() if a not in unscored},
        membership,
        init_mask,
        delta=own_delta,
        fair=fair,
        canaries=canaries,
        natural_group=natural_coins(experiment["plan"]),
        settings=settings,
        choices=choices,
        mechanism=mechanism,
    )
    bound = (
        verdict_entry(
            {a: s for a, s in scores.items() if a not in unscored},
            membership,
            columns,
            choices or {},
            delta=own_delta if claimed_delta is None else claimed_delta,
            settings=settings,
            mechanism=mechanism,
        )
        if top_level_bounded(settings.inclusion_rate, canaries)
        else None
    )
    if canaries:
        evaluation.update(canary_evaluation(experiment, n_targets=len(targets), fair=fair, settings=settings))
    if unscored:
        evaluation["attacks_without_canary_scores"] = unscored
    return AuditResult(
        **identity,
        claim=None,  # judged: `audit.reporting.verdict.judged`
        utility={
            "test_accuracy": float(np.mean(accuracies)),
            "test_accuracy_std": float(np.std(accuracies)),
            **run_utility(runs.meta),
        },
        evaluation=evaluation,
        attacks=attacks,
        bound=bound,
    )


def canary_evaluation(experiment: dict, *, n_targets: int, fair: bool, settings: EvaluationSettings) -> dict:
    """summary.json's `evaluation` keys of an audit with canaries (experiment.json's `canaries`)."""
    entry, plan = experiment["canaries"], experiment["plan"]
    found = {
        "n_canaries": n_targets * entry["n"] if fair else None,
        "epsilon_note": canary_note(entry, plan=plan, inclusion_rate=settings.inclusion_rate),
        "canaries": entry,
    }
    return found if natural_coins(plan) else {**found, "natural_note": NATURAL_FIXED}


def canary_note(entry: dict, *, plan: str, inclusion_rate: float) -> str:
    """summary.json's `epsilon_note` of an audit with canaries (`entry`, experiment.json's): why there
    is no bound (coins not fair, duplicate canaries) or over which coins it is, and what the natural
    group is under `plan` (the same numbers, descriptive; none under the fixed remainder)."""
    if not bound_applies(inclusion_rate):
        return unfair_coins_reason(inclusion_rate)
    duplicate = entry["kind"] == "duplicate"
    if natural_coins(plan):
        return DUPLICATE_NOTE.format(copies=entry["copies"]) if duplicate else CANARY_EPSILON_NOTE
    bound = DUPLICATE_BOUND.format(copies=entry["copies"]) if duplicate else CANARY_BOUND
    return f"{bound}; {FIXED_REMAINDER_NATURAL}"


def release_summary(
    scores: dict,
    member: np.ndarray,
    init_idx: np.ndarray,
    shadows: StoredRuns,
    obs,
    *,
    coins: tuple[float, int] | None,
    experiment: dict,
    variance: str,
    settings: EvaluationSettings,
    claimed_delta: float | None = None,
    choices: dict | None = None,
) -> AuditResult:
    """summary.json of the release audit, before its claim is judged (`audit.reporting.verdict.judged`): one target, the
    release, whose members are `member` (bool [n_pool]) and real images the pool rows `init_idx`. `coins`: the (rate,
    seed) the members were drawn by, None where the custodian chose them. Attack bounds are at the audit's own δ (0 for
    a non-DP pipeline); the verdict's at `claimed_delta`, else that δ."""
    identity = _identity(experiment, shadows, target_runs=[0])
    own_delta = identity["delta"] or 0.0
    rate, seed = coins if coins is not None else (None, None)
    fair = coins is not None and bound_applies(rate)
    if coins is None:
        drawn, note = "chosen by the custodian (no coins recorded)", CHOSEN_NOTE
    else:
        drawn = f"independent {'fair ' if fair else ''}coins of rate {rate:g}, membership_seed {seed} (reproduced)"
        note = RELEASE_EPSILON_NOTE if fair else unfair_coins_reason(rate)
    membership, init = member[None], np.zeros((1, member.size), dtype=bool)
    init[0, init_idx] = True
    shadow_accuracy = [m["test_accuracy"] for m in shadows.meta]
    return AuditResult(
        **identity,
        claim=None,  # judged: `audit.reporting.verdict.judged`
        utility={
            "test_accuracy": obs.test_accuracy,
            "test_accuracy_std": 0.0,
            "shadow_test_accuracy": float(np.mean(shadow_accuracy)),
            "shadow_test_accuracy_std": float(np.std(shadow_accuracy)),
        },
        evaluation={
            **_settings(variance, settings),
            "target": RELEASE_TARGET,
            "plan": PLAN,
            "inclusion_rate": settings.inclusion_rate,
            "membership": drawn,
            "membership_rate": rate,
            "membership_seed": seed,
            "n_canaries": int(membership.size) if fair else None,
            "epsilon_note": note,
        },
        attacks=attacks_summary(
            scores, membership, init, delta=own_delta, fair=fair, settings=settings, choices=choices
        ),
        bound=(
            verdict_entry(
                scores,
                membership,
                slice(None),
                choices or {},
                delta=own_delta if claimed_delta is None else claimed_delta,
                settings=settings,
            )
            if fair
            else None
        ),
    )


def attacks_summary(
    scores: dict[str, np.ndarray],
    membership: np.ndarray,
    init_mask: np.ndarray,
    *,
    delta: float,
    fair: bool,
    settings: EvaluationSettings,
    canaries: CanaryColumns | None = None,
    natural_group: bool = True,
    choices: dict | None = None,
    mechanism: SubsampledGaussian | None = None,
) -> dict:
    """attack -> `attack_summary` of its scores, with `reference_choice` (what the reference runs chose, or null).
    Bounds use `delta`, are seeded by (master seed, attack) and hold at `confidence` each: a maximum over attacks is
    paid for in `verdict_entry`."""
    choices = choices or {}
    entries = {}
    for attack, s in scores.items():
        choice = choices.get(attack)
        entries[attack] = {
            **attack_summary(
                s,
                membership,
                init_mask,
                delta=delta,
                confidence=settings.confidence,
                seed=[settings.seed, zlib.crc32(attack.encode())],
                fair_coins=fair,
                canaries=canaries,
                natural_group=natural_group,
                choice=choice,
                mechanism=mechanism,
            ),
            "reference_choice": None if choice is None else choice.to_json(),
        }
    return entries


#: summary.json's `verdict.chosen_by`: tuned on the reference runs, fixed in advance because they predicted 0 for every
#: attack (`audit.evaluate.untold`), or "declared" by `--verdict-attack` (the references tuning its count)
CHOSEN_BY = {False: "references", True: "fixed"}
DECLARED = "declared"


class DeclaredAttackError(ValueError):
    """The `--verdict-attack` attack scored no canary of these runs (the CLI exits 2; the runs stay in their store)."""


def verdict_entry(
    scores: dict[str, np.ndarray],
    membership: np.ndarray,
    columns,
    choices: dict,
    *,
    delta: float,
    settings: EvaluationSettings,
    mechanism: SubsampledGaussian | None = None,
) -> dict | None:
    """summary.json's `verdict`: the one ε lower bound an ε verdict rests on (`audit.stats.guesses.verdict_bound`): the
    attack, views and f_{ε,δ} count chosen on the reference runs, in one test; or else the largest grid bound at the
    level split across attacks, among attacks that scored every canary. With a claimed `mechanism` (δ > 0), `mechanism`
    holds its own curve's test on `audit.evaluate.mechanism_attack` and `levels` each test's level (`verdict_levels`).
    `settings.verdict_attack` fixes the attack (`chosen_by` "declared" or "fixed"): no choice reads a target's coin, so
    Steinke, Nasr & Jagielski's Theorem 3.1 and the f-DP test hold."""
    groups = {}
    for attack, s in scores.items():
        s, keep = s[:, columns], membership[:, columns]
        if np.isnan(s).any():
            continue
        groups[attack] = (s[keep], s[~keep])
    if not groups:
        return None
    declared = settings.verdict_attack
    if declared is not None:
        if declared not in groups:
            raise DeclaredAttackError(
                f"--verdict-attack {declared} scored no canary of these runs (they lack what it reads); the runs "
                "stay in the store"
            )
        groups = {declared: groups[declared]}
    tunable = {a: c for a, c in choices.items() if a in groups and c is not None}
    m = int(membership[:, columns].size)
    chosen = verdict_attack(tunable)
    guesses = tunable[chosen].tuned[VERDICT_BOUND.name] if chosen else None
    fixed = untold(tunable, chosen)
    if fixed:
        chosen, guesses = fixed_attack(tunable), fixed_count(m)
    levels = verdict_levels(mechanism, delta, settings.confidence)
    entry = verdict_bound(
        groups,
        chosen=chosen,
        guesses=guesses,
        delta=delta,
        confidence=levels[EPS_TEST],
        rng_of=lambda a: tie_order([settings.seed, zlib.crc32(a.encode())]),
    )
    entry.update(views=tunable[chosen].views if chosen else None, levels=levels)
    entry["candidates"] = sorted(tunable) if chosen else sorted(groups)
    entry["chosen_by"] = (DECLARED if declared and not fixed else CHOSEN_BY[fixed]) if chosen else None
    own = mechanism_attack(tunable)
    own_guesses = tunable[own].tuned.get(MECHANISM.name) if own else None
    own_fixed = untold(tunable, own, own_curve=True)
    if own_fixed:
        own, own_guesses = fixed_attack(tunable), fixed_count(m)
    entry["mechanism"] = (
        mechanism_verdict(
            groups,
            chosen=own,
            guesses=own_guesses,
            mechanism=mechanism,
            delta=delta,
            confidence=levels[OWN_CURVE],
            rng_of=lambda a: tie_order([settings.seed, zlib.crc32(a.encode())]),
        )
        if OWN_CURVE in levels
        else None
    )
    if entry["mechanism"] is not None:
        entry["mechanism"]["chosen_by"] = (
            (DECLARED if declared and not own_fixed else CHOSEN_BY[own_fixed]) if own else None
        )
    return entry


def _identity(experiment: dict, runs: StoredRuns, *, target_runs: list[int]) -> dict:
    """summary.json's first keys: what was audited, with which runs, and its formal privacy (the
    largest ε any run reports, the first δ; None for a non-DP victim)."""
    formal = [m["formal_epsilon"] for m in runs.meta if m["formal_epsilon"] is not None]
    delta = run_delta(runs.meta)
    return {
        "victim": experiment["victim"],
        "dataset": experiment["dataset"],
        "config": experiment["config"],
        "n_shadow": len(runs.keep),
        "target_runs": target_runs,
        "formal_epsilon": max(formal) if formal else None,
        "delta": delta,
    }


def _settings(variance: str, settings: EvaluationSettings) -> dict:
    """The evaluation's settings, summary.json's first `evaluation` keys."""
    return {
        "lira_variance": variance,
        "lira_variance_flag": settings.lira_variance_flag,
        "confidence": settings.confidence,
        "master_seed": settings.seed,
        **({"verdict_attack": settings.verdict_attack} if settings.verdict_attack else {}),
    }
