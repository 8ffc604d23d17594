"""The audit of shadow runs behind `python -m audit.lira`, `audit.loss` and `audit.ganleak`.

Flags -> a frozen victim config -> the pool and canaries -> the membership plan -> missing runs
trained and stored as they arrive -> attacks, metrics and ε bounds -> summary.json, scores.npz,
roc.png. Bad input exits 2 with one line naming the value, before anything is written.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from attacks.lira import variance_for
from audit import outputs
from audit import pair_design
from audit.claim import Claim, verdict_delta
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
from audit.reporting.verdict import judged
from audit.rounds import FIRST_LOOK, audit_in_rounds
from audit.stats.sequential import Schedule, schedule
from audit.result import AuditResult
from audit.summary import DeclaredAttackError, summarise
from shadow_runs import RunStore, StoreError, membership_matrix
from shadow_runs.plan import default_targets, public_inclusion_rate, target_runs
from victims import DataError, load_pool
from victims.data import class_balanced_subset
from victims.tabular.pools import unheld_subset
from shadow_runs.records import CanaryColumns
from victims.canaries import add_canaries, resolve_record
from victims.dp.whitebox_canaries import with_white_box


class AuditRefused(ValueError):
    """Bad input, or an audit that cannot go on (one line): the command exits 2 with it."""


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
    try:
        audit_flags(args, attacks=attacks, prog=prog)
    except AuditRefused as e:
        parser.error(str(e))
    return 0


def run(
    victim: str, flags: dict, *, prog: str, attacks: tuple[str, ...], description: str, victims=None
) -> AuditResult:
    """`main` for Python (`audit.run`): `flags` the command line's by name (as `audit.api.run` maps them); the same
    lines, the result returned, bad input raised as AuditRefused."""
    argv = ["--victim", victim]
    parser = build_parser(prog, description, victims=victims, argv=argv)
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if value is False and f"--no-{flag[2:]}" in parser._option_string_actions:
            argv.append(f"--no-{flag[2:]}")
        elif value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, *map(str, value)] if isinstance(value, (list, tuple)) else [flag, str(value)]

    def refuse(message: str):
        raise AuditRefused(" ".join(str(message).split()))

    parser.error = refuse
    return audit_flags(parser.parse_args(argv), attacks=attacks, prog=prog)


def audit_flags(args, *, attacks: tuple[str, ...], prog: str) -> AuditResult:
    """The audit the parsed `args` ask for, its lines printed as the command prints them (progress on stderr unless
    `--quiet`). AuditRefused (one line) for bad input, before any run is trained."""
    also = [*args.attack, *([args.verdict_attack] if args.verdict_attack else [])]
    attacks = (*attacks, *dict.fromkeys(a for a in also if a not in attacks))  # --attack, --verdict-attack: also these
    try:
        audit = ShadowAudit.prepare(args, attacks, prog=prog)
    except (DataError, StoreError, ValueError) as e:
        raise AuditRefused(str(e)) from e
    try:
        if audit.looks is None:
            audit.train_to(args.n_shadow)
            result = audit.score_at(args.n_shadow, args.confidence)
        else:
            with ray_session(audit.executor):  # one Ray for every look: its workers are kept from look to look
                result = audit_in_rounds(audit.looks, audit.train_to, audit.score_at, quiet=args.quiet)
    except (DeclaredAttackError, RayUnavailable) as e:
        raise AuditRefused(str(e)) from e
    result, path = audit.write(result)
    print(quiet_lines(result, path) if args.quiet else outputs.describe(result, path))
    if result.pair_test is not None:
        print(pair_design.pair_line(result.pair_test))
    if result.sequential is not None:
        print(rounds_line(result.sequential))
    return result


@dataclass
class ShadowAudit:
    """An audit of shadow runs made ready by `prepare`: the victim, its pool, the plan and the store. `scored` keeps
    what each `score_at` scored, by (runs, confidence), so scores.npz is written from the result's own scores, not the
    fixed-design re-scoring an audit in rounds adds."""

    args: object
    attacks: tuple[str, ...]
    claim: Claim | None
    victim: object
    executor: object
    pool: object
    canaries: CanaryColumns | None
    plan: str
    victim_rate: float
    looks: Schedule | None
    experiment: dict
    keep: np.ndarray
    store: RunStore
    scored: dict = field(default_factory=dict)

    @classmethod
    def prepare(cls, args, attacks: tuple[str, ...], *, prog: str) -> ShadowAudit:
        """Everything before the first run is trained, each flag checked (ValueError, DataError or
        StoreError naming the bad value, with nothing on disk changed but the store's plan)."""
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
        target_runs(args.n_shadow, args.n_targets or default_targets(args.n_shadow))  # --n-targets checked
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
        claim = Claim.given(args.claimed_epsilon, args.claimed_delta)
        return cls(
            args, attacks, claim, victim, executor, pool, canaries, plan, victim_rate, looks, experiment, keep, store
        )

    def targets(self, n_runs: int) -> np.ndarray:
        return target_runs(n_runs, self.args.n_targets or default_targets(n_runs))

    def train_to(self, n_runs: int) -> None:
        """Train the first `n_runs` runs of the plan the store lacks."""
        train_missing_runs(
            self.store,
            victim=self.victim,
            pool=self.pool,
            keep=self.keep[:n_runs],
            seed=self.args.seed,
            inclusion_rate=self.victim_rate,
            executor=self.executor,
            quiet=self.args.quiet,
        )

    def score_at(self, n_runs: int, confidence: float) -> AuditResult:
        """Score the first `n_runs` runs (trained) at `confidence`, the first half of them targets
        (or `--n-targets`), and make their result."""
        args, canaries, targets = self.args, self.canaries, self.targets(n_runs)
        runs = StoredRuns.load(
            self.store, keep=self.keep[:n_runs], images=self.pool.x, labels=self.pool.y, schema=self.pool.schema
        )
        variance = variance_for(args.lira_variance, n_reference=n_runs - len(targets))
        scores, choices = score_attacks(
            runs,
            self.attacks,
            targets,
            variance=variance,
            columns=canaries.scored if canaries else slice(None),
            delta=verdict_delta(self.claim, run_delta(runs.meta) or 0.0),  # the counts are tuned at the verdict's δ
            confidence=confidence,
            bounded=top_level_bounded(args.inclusion_rate, canaries),
        )
        summary = summarise(
            runs,
            scores,
            targets,
            experiment=self.experiment,
            variance=variance,
            canaries=canaries,
            settings=replace(evaluation_settings(args), confidence=confidence),
            choices=choices,
            claimed_delta=None if self.claim is None else self.claim.delta,
        )
        result = judged(summary, self.claim)
        self.scored[n_runs, confidence] = (runs, scores, targets, choices, variance)
        return result

    def write(self, result: AuditResult) -> tuple[AuditResult, Path]:
        """`result` with the worst-case neighbour design's pair test where it applies, written with its
        scores.npz and roc.png; and summary.json's path."""
        runs, scores, targets, choices, variance = self.scored[result.n_shadow, result.confidence]
        if self.looks is None and pair_design.applies(self.plan, self.experiment.get("canaries")):
            result = replace(
                result, pair_test=pair_test(result, runs, scores, choices, targets, variance, self.canaries)
            )
        # scores.npz and the ROC plot take attacks that scored every example the bound is over (a white-box
        # attack scores the canaries only, NaN on the natural examples); one that scored a subset of those
        # (ganleak_pbb, NaN elsewhere) is reported in summary.json only
        bound_columns = self.canaries.scored if self.canaries else slice(None)
        complete = {attack: s for attack, s in scores.items() if not np.isnan(s[:, bound_columns]).any()}
        replacing = outputs.replaced_summary(self.store.audit_dir, result)
        if replacing:
            print(replacing, file=sys.stderr)
        path = outputs.write_audit(
            self.store.audit_dir,
            result=result,
            scores=complete,
            membership=runs.keep[targets],
            init_mask=runs.init_mask[targets],
            canaries=self.canaries,
        )
        return result, path


def pair_test(result: AuditResult, runs, scores, choices, targets, variance, canaries) -> dict:
    """summary.json's `pair_test` (`audit.pair_design`) of a fixed design's runs: the canary column's
    scores, at the audit's confidence and the checked claim's δ (else the audit's own), on the
    `--verdict-attack` alone where one was declared."""
    column = int(np.flatnonzero(canaries.scored)[0])
    samples = pair_design.pair_samples(runs, scores, choices, targets, variance=variance, column=column)
    checked = result.checked_claim()
    delta = checked.delta if checked is not None else (result.delta or 0.0)
    declared = result.evaluation.get("verdict_attack")
    return pair_design.pair_entry(samples, confidence=result.confidence, delta=delta, claim=checked, declared=declared)


def quiet_lines(result: AuditResult, path) -> str:
    """What `--quiet` keeps of the terminal's lines (`audit.outputs.describe`): the verdict and its reason, the own
    curve's test, the warnings of too few runs and summary.json's path."""
    noted = remarks(result)
    lines = []
    if result.verdict is not None:
        lines.append(outputs.verdict_line(result))
        if noted.own_curve is not None:
            lines.append(f"  own curve: {noted.own_curve}")
    elif result.evaluation.get("epsilon_note"):
        lines.append(f"  ({result.evaluation['epsilon_note']})")
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
