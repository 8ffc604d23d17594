"""The audit of shadow runs behind `python -m audit.lira`, `audit.loss` and `audit.ganleak`.

Flags -> a frozen victim config (its `--flags` are generated from the victim dataclasses,
`audit.cli.victim_flags`) -> the pool, with its canaries if --canaries (victims.canaries) ->
the membership plan (`--plan`; the victims are handed its public rate, `shadow_runs.plan.public_inclusion_rate`)
-> missing runs trained (Ray by default; `--runs-per-task` per task) and stored
as they arrive -> the command's attacks (`attacks.registry`), metrics and epsilon bounds ->
summary.json (`audit.summary`), scores.npz, roc.png (`audit.outputs`).
Bad input exits with status 2 and one line naming the value, before anything is written.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np

from attacks.lira import variance_for
from audit import outputs
from audit import pair_design
from audit.claim import Claim, resolve_claim, verdict_delta
from audit.cli.flags import (
    build_parser,
    canary_config,
    check_verdict_attack,
    evaluation_settings,
    executor_config,
    membership_plan,
)
from audit.cli.victim_flags import victim_overrides
from victims.base import check_pool_kind
from victims.overrides import build_victim
from attacks.registry import TABLE, get_attack
from audit.evaluate import StoredRuns, run_delta, score_attacks, top_level_bounded
from audit.executor import RayUnavailable, ray_session
from audit.pipeline import check_canary_coins, experiment_record, train_missing_runs
from audit.reporting.remarks import remarks
from audit.rounds import FIRST_LOOK, audit_in_rounds
from audit.stats.sequential import Schedule, schedule
from audit.summary import AuditSummary, DeclaredAttackError, summarise
from shadow_runs import RunStore, StoreError, membership_matrix
from shadow_runs.plan import default_targets, public_inclusion_rate, target_runs
from victims import DataError, load_pool
from victims.data import class_balanced_subset
from victims.tabular.pools import unheld_subset
from shadow_runs.records import CanaryColumns
from victims.canaries import add_canaries, resolve_record
from victims.dp.whitebox_canaries import with_white_box


def main(
    argv: list[str] | None,
    *,
    prog: str,
    attacks: tuple[str, ...],
    description: str,
    victims: tuple[str, ...] | None = None,
) -> int:
    """Run the audit; `victims` restricts `--victim` (default: every registered victim)."""
    parser = build_parser(prog, description, victims=victims, argv=argv)
    args = parser.parse_args(argv)
    claim = Claim.given(args.claimed_epsilon, args.claimed_delta)
    also = [*args.attack, *([args.verdict_attack] if args.verdict_attack else [])]
    attacks = (*attacks, *dict.fromkeys(a for a in also if a not in attacks))  # --attack, --verdict-attack: also these
    try:
        victim = build_victim(args.victim, victim_overrides(args))
        executor = executor_config(args)
        pool = load_pool(args.dataset, data_root=args.data_root, download=args.download)
        if args.pool_per_class:
            pool = class_balanced_subset(pool, args.pool_per_class)
        if args.pool_unheld:
            pool = unheld_subset(pool, args.pool_unheld)
        dimension = getattr(victim, "release_dimension", None)
        white_box = args.threat_model == "white-box" and dimension is not None
        config = canary_config(args, release_dimension=dimension(pool) if white_box else None, tabular=pool.tabular)
        config = resolve_record(pool, config)  # a record canary's target, spelled in schema order
        n_natural = pool.n_pool
        pool = add_canaries(pool, config)  # before the check and the plan: the canaries are pool rows
        pool = with_white_box(pool, victim, config, threat_model=args.threat_model, n_natural=n_natural)
        if args.threat_model == "white-box" and not any(get_attack(a).family == "mechanism" for a in attacks):
            raise ValueError(f"--threat-model white-box: {prog} runs no white-box attack (python -m audit.lira does)")
        canaries = CanaryColumns.of(n_natural, config) if config else None
        plan = membership_plan(args, config)
        # what the victims calibrate to: the plan's public expected member count over n_pool
        victim_rate = public_inclusion_rate(args.inclusion_rate, plan=plan, n_natural=n_natural, n_pool=pool.n_pool)
        check_pool_kind(victim, pool)
        check_verdict_attack(
            args.verdict_attack, dataset=args.dataset, tabular=pool.tabular, white_box=args.threat_model == "white-box"
        )
        victim.check(pool, inclusion_rate=victim_rate)
        check_enough_runs(args.n_shadow, attacks, threat_model=args.threat_model, tabular=pool.tabular)
        looks = rounds_schedule(args, attacks)
        targets = target_runs(args.n_shadow, args.n_targets or default_targets(args.n_shadow))
        experiment = experiment_record(
            victim,
            pool,
            dataset=args.dataset,
            pool_per_class=args.pool_per_class,
            pool_unheld=args.pool_unheld,
            seed=args.seed,
            inclusion_rate=args.inclusion_rate,
            plan=plan,
            canaries=config.entry(n_natural) if config else None,
            threat_model=args.threat_model,
        )
        keep = membership_matrix(
            pool.y,
            n_runs=args.n_shadow,
            master_seed=args.seed,
            inclusion_rate=args.inclusion_rate,
            record_of_row=canaries.record if canaries else None,
            plan=plan,
            n_natural=n_natural,
        )
        for runs in looks.runs if looks else (args.n_shadow,):
            if canaries:  # every look's targets (the first half of its runs) hold both coins
                check_canary_coins(keep[: args.n_targets or default_targets(runs)], canaries)
        store = RunStore.open(
            args.runs_dir, experiment=experiment, pool_labels=pool.y, keep_other_code=args.keep_runs_of_other_code
        )
        store.extend_plan(keep)
    except (DataError, StoreError, ValueError) as e:
        parser.error(str(e))

    def train_to(n_runs: int) -> None:
        """Train the first `n_runs` runs of the plan the store lacks."""
        train_missing_runs(
            store,
            victim=victim,
            pool=pool,
            keep=keep[:n_runs],
            seed=args.seed,
            inclusion_rate=victim_rate,
            executor=executor,
            quiet=args.quiet,
        )

    def score_at(n_runs: int, confidence: float) -> AuditSummary:
        """Score and summarise the first `n_runs` runs (trained) at `confidence`, the first half of
        them targets (or `--n-targets`)."""
        plan = keep[:n_runs]
        targets = target_runs(n_runs, args.n_targets or default_targets(n_runs))
        runs = StoredRuns.load(store, keep=plan, images=pool.x, labels=pool.y, schema=pool.schema)
        variance = variance_for(args.lira_variance, n_reference=n_runs - len(targets))
        scores, choices = score_attacks(
            runs,
            attacks,
            targets,
            variance=variance,
            columns=canaries.scored if canaries else slice(None),
            delta=verdict_delta(claim, run_delta(runs.meta) or 0.0),  # the counts are tuned at the verdict's δ
            confidence=confidence,
            bounded=top_level_bounded(args.inclusion_rate, canaries),
        )
        summary = summarise(
            runs,
            scores,
            targets,
            experiment=experiment,
            variance=variance,
            canaries=canaries,
            settings=replace(evaluation_settings(args), confidence=confidence),
            choices=choices,
            claim=claim,
        )
        audited[n_runs, confidence] = (runs, scores, targets, choices, variance)
        return summary

    # what each score_at scored, by (runs, confidence): scores.npz is written from the summary's own, not
    # from the fixed design's re-scoring of the same runs that an audit in rounds adds beside its last look
    audited: dict[tuple[int, float], tuple] = {}
    try:
        if looks is None:
            train_to(args.n_shadow)
            summary = score_at(args.n_shadow, args.confidence)
        else:
            with ray_session(executor):  # one Ray for every look: its workers are kept from look to look
                summary = audit_in_rounds(looks, train_to, score_at, quiet=args.quiet)
    except (DeclaredAttackError, RayUnavailable) as e:
        parser.error(str(e))
    runs, scores, targets, choices, variance = audited[
        summary.data["n_shadow"], summary.data["evaluation"]["confidence"]
    ]
    if looks is None and pair_design.applies(plan, experiment.get("canaries")):  # the worst-case neighbour design
        summary.data["pair_test"] = pair_test(summary.data, runs, scores, choices, targets, variance, canaries, claim)
    # scores.npz and the ROC plot take attacks that scored every example the bound is over (a white-box
    # attack scores the canaries only, NaN on the natural examples); one that scored a subset of those
    # (ganleak_pbb, NaN elsewhere) is reported in summary.json only
    bound_columns = canaries.scored if canaries else slice(None)
    complete = {attack: s for attack, s in scores.items() if not np.isnan(s[:, bound_columns]).any()}
    replacing = outputs.replaced_summary(store.audit_dir, summary.data)
    if replacing:
        print(replacing, file=sys.stderr)
    path = outputs.write_audit(
        store.audit_dir,
        summary=summary.data,
        scores=complete,
        membership=runs.keep[targets],
        init_mask=runs.init_mask[targets],
        canaries=canaries,
    )
    print(quiet_lines(summary, path) if args.quiet else outputs.describe(summary, path))
    if "pair_test" in summary.data:
        print(pair_design.pair_line(summary.data["pair_test"]))
    if looks is not None:
        print(rounds_line(summary.data["sequential"]))
    return 0


def pair_test(summary: dict, runs, scores, choices, targets, variance, canaries, claim) -> dict:
    """summary.json's `pair_test` (`audit.pair_design`) of a fixed design's runs: the canary column's
    scores, at the audit's confidence and the checked claim's δ (else the audit's own)."""
    column = int(np.flatnonzero(canaries.scored)[0])
    samples = pair_design.pair_samples(runs, scores, choices, targets, variance=variance, column=column)
    checked = resolve_claim(summary, claim)
    delta = checked.delta if checked is not None else (summary["delta"] or 0.0)
    confidence = summary["evaluation"]["confidence"]
    return pair_design.pair_entry(samples, confidence=confidence, delta=delta, claim=checked)


def quiet_lines(audit_summary: AuditSummary, path) -> str:
    """What `--quiet` keeps of the terminal's lines (`audit.outputs.describe`): the verdict and its
    reason (or why there is no ε bound), the own curve's test, the warnings of too few runs and the
    path of summary.json; not the per-attack lines or the legend."""
    summary, verdict, noted = audit_summary.data, audit_summary.verdict, remarks(audit_summary.data)
    lines = []
    if verdict is not None:
        lines.append(outputs.verdict_line(summary, verdict))
        if noted.own_curve is not None:
            lines.append(f"  own curve: {noted.own_curve}")
    elif (summary.get("evaluation") or {}).get("epsilon_note"):
        lines.append(f"  ({summary['evaluation']['epsilon_note']})")
    lines += [f"  warning: {w}" for w in noted.warnings]
    lines.append(f"  -> {path}")
    return "\n".join(lines)


def check_enough_runs(n_shadow: int, attacks: tuple[str, ...], *, threat_model: str, tabular: bool = False) -> None:
    """Refuse fewer runs than an attack of this audit needs, naming only the attacks that apply to its
    threat model (white-box attacks in a white-box audit only) and to its pool (the attacks on a
    released table on a table only) and need more runs than `n_shadow`."""
    applies = [
        a
        for a in attacks
        if (threat_model == "white-box" or get_attack(a).family != "mechanism")
        and (tabular or get_attack(a).needs != TABLE)
    ]
    short = [a for a in applies if get_attack(a).min_runs > n_shadow]
    if short:
        needed = max(get_attack(a).min_runs for a in short)
        raise ValueError(f"--n-shadow {n_shadow} is too few for {', '.join(short)} (needs >= {needed})")


def rounds_schedule(args, attacks: tuple[str, ...]) -> Schedule | None:
    """`--until-decided`'s looks: doubling from `--first-look` (at least the runs every attack needs)
    to `--n-shadow`; None for the fixed design. ValueError where the flags do not fit."""
    if not args.until_decided:
        return None
    if args.n_targets is not None:
        raise ValueError("--until-decided makes the first half of each look's runs its targets: leave out --n-targets")
    needed = max(get_attack(a).min_runs for a in attacks)
    first = max(args.first_look or FIRST_LOOK, needed)
    if first > args.n_shadow:
        raise ValueError(f"--until-decided: the first look ({first} runs) is beyond --n-shadow {args.n_shadow}")
    return schedule(args.n_shadow, first=first, confidence=args.confidence)


#: the rounds line's words for summary.json's `sequential.stopped_by`
STOPPED_BY = {"eps_verdict": " (by the ε verdict)", "own_curve": " (by the own curve)"}


def rounds_line(sequential: dict) -> str:
    """The terminal's line on an audit in rounds: where it stopped and why, beside the budget."""
    looked = ", ".join(str(look["runs"]) for look in sequential["looks"])
    last = sequential["looks"][-1]
    by = STOPPED_BY.get(sequential.get("stopped_by"), "")
    split = " halved between the ε verdict and the own curve" if len(sequential.get("tests", [])) == 2 else ""
    return (
        f"  rounds: {sequential['stopped']}{by} after {sequential['runs_used']} of {sequential['schedule'][-1]} runs "
        f"(looks at {looked} runs; the last at {last['confidence']:.4%}, each look's share of "
        f"{1 - sequential['confidence']:.0%}{split}); fixed design on the same runs: eps_lower "
        f"{_figure(sequential['fixed_design']['eps_lower'])} at {sequential['confidence']:.0%}, descriptive"
    )


def _figure(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"
