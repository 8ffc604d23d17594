"""The audit of shadow runs behind `python -m audit.lira`, `audit.loss` and `audit.ganleak`.

Flags -> a frozen victim config (its `--flags` are generated from the victim dataclasses,
`audit.cli.victim_flags`) -> the pool, with its canaries if --canaries (victims.canaries) ->
the membership plan -> missing runs trained (Ray by default; `--runs-per-task` per task) and stored
as they arrive -> the command's attacks (`attacks.registry`), metrics and epsilon bounds ->
summary.json (`audit.summary`), scores.npz, roc.png (`audit.outputs`).
Bad input exits with status 2 and one line naming the value, before anything is written.
"""

from __future__ import annotations

import numpy as np

from attacks.lira import variance_for
from audit import outputs
from audit.claim import Claim, verdict_delta
from audit.cli.flags import build_parser, canary_config, evaluation_settings, executor_config
from audit.cli.victim_flags import victim_overrides
from victims.overrides import build_victim
from attacks.registry import get_attack
from audit.evaluate import StoredRuns, run_delta, score_attacks, top_level_bounded
from audit.pipeline import check_canary_coins, experiment_record, train_missing_runs
from audit.summary import summarise
from shadow_runs import RunStore, StoreError, membership_matrix
from shadow_runs.plan import default_targets, target_runs
from victims import DataError, load_pool
from shadow_runs.records import CanaryColumns
from victims.canaries import add_canaries
from victims.whitebox_canaries import with_white_box


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
    try:
        victim = build_victim(args.victim, victim_overrides(args))
        executor = executor_config(args)
        pool = load_pool(args.dataset, data_root=args.data_root, download=args.download)
        dimension = getattr(victim, "release_dimension", None)
        white_box = args.threat_model == "white-box" and dimension is not None
        config = canary_config(args, release_dimension=dimension(pool) if white_box else None)
        n_natural = pool.n_pool
        pool = add_canaries(pool, config)  # before the check and the plan: the canaries are pool rows
        pool = with_white_box(pool, victim, config, threat_model=args.threat_model, n_natural=n_natural)
        if args.threat_model == "white-box" and not any(get_attack(a).family == "mechanism" for a in attacks):
            raise ValueError(f"--threat-model white-box: {prog} runs no white-box attack (python -m audit.lira does)")
        canaries = CanaryColumns.of(n_natural, config) if config else None
        victim.check(pool, inclusion_rate=args.inclusion_rate)
        needed = max(get_attack(a).min_runs for a in attacks)
        if args.n_shadow < needed:
            raise ValueError(f"--n-shadow {args.n_shadow} is too few for {', '.join(attacks)} (needs >= {needed})")
        targets = target_runs(args.n_shadow, args.n_targets or default_targets(args.n_shadow))
        experiment = experiment_record(
            victim,
            pool,
            dataset=args.dataset,
            seed=args.seed,
            inclusion_rate=args.inclusion_rate,
            canaries=config.entry(n_natural) if config else None,
            threat_model=args.threat_model,
        )
        keep = membership_matrix(
            pool.y,
            n_runs=args.n_shadow,
            master_seed=args.seed,
            inclusion_rate=args.inclusion_rate,
            record_of_row=canaries.record if canaries else None,
        )
        if canaries:
            check_canary_coins(keep[targets], canaries)
        store = RunStore.open(
            args.runs_dir, experiment=experiment, pool_labels=pool.y, keep_other_code=args.keep_runs_of_other_code
        )
        store.extend_plan(keep)
    except (DataError, StoreError, ValueError) as e:
        parser.error(str(e))

    train_missing_runs(
        store,
        victim=victim,
        pool=pool,
        keep=keep,
        seed=args.seed,
        inclusion_rate=args.inclusion_rate,
        executor=executor,
        quiet=args.quiet,
    )

    runs = StoredRuns.load(store, keep=keep, images=pool.x, labels=pool.y)
    variance = variance_for(args.lira_variance, n_reference=args.n_shadow - len(targets))
    scores, choices = score_attacks(
        runs,
        attacks,
        targets,
        variance=variance,
        columns=canaries.scored if canaries else slice(None),
        delta=verdict_delta(claim, run_delta(runs) or 0.0),  # the counts are tuned at the verdict's δ
        confidence=args.confidence,
        bounded=top_level_bounded(args.inclusion_rate, canaries),
    )
    summary = summarise(
        runs,
        scores,
        targets,
        experiment=experiment,
        variance=variance,
        canaries=canaries,
        settings=evaluation_settings(args),
        choices=choices,
        claim=claim,
    )
    # scores.npz and the ROC plot take attacks that scored every example the bound is over (a white-box
    # attack scores the canaries only, NaN on the natural examples); one that scored a subset of those
    # (ganleak_pbb, NaN elsewhere) is reported in summary.json only
    bound_columns = canaries.scored if canaries else slice(None)
    complete = {attack: s for attack, s in scores.items() if not np.isnan(s[:, bound_columns]).any()}
    path = outputs.write_audit(
        store.audit_dir,
        summary=summary.data,
        scores=complete,
        membership=runs.keep[targets],
        init_mask=runs.init_mask[targets],
        canaries=canaries,
    )
    if not args.quiet:
        print(outputs.describe(summary, path))
    return 0
