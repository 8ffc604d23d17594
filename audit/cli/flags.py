"""The flags of an audit of shadow runs (`python -m audit.lira|loss|ganleak`): the parser, the
run and evaluation flags (shared with `audit.release`) and the canary flags."""

from __future__ import annotations

import argparse

from attacks import VARIANCES
from attacks.lira import PER_EXAMPLE_FROM
from attacks.registry import TABLE, WHITEBOX, get_attack
from audit.cli.arguments import ArgumentParser, add_claim_flags, int_at_least, probability
from audit.cli.victim_flags import add_victim_flags, victim_argument, victim_classes
from audit.executor import EXECUTORS, ExecutorConfig
from audit.summary import EvaluationSettings
from shadow_runs.plan import DEFAULT_INCLUSION_RATE, FIXED_REMAINDER, PLANS
from victims import victim_names
from victims.compiled import COMPILE_MODES
from victims.precision import PRECISIONS
from victims.canaries import ALL_KINDS, DEFAULT_COPIES, CanaryConfig
from victims.tabular.canaries import UNSEEN
from victims.dp.whitebox_canaries import THREAT_MODELS

#: the canaries of a white-box audit given no --canaries/--canary-kind: 4,000 gradient canaries per run, or one per
#: release coordinate where the victim has fewer; record canaries (--canary-kind mislabeled or outlier) 1,000, pool rows
#: the victim trains on (why: docs/results/white-box.md, "How many canaries and runs")
WHITE_BOX_CANARIES, WHITE_BOX_CANARY_KIND = 4000, "gradient"
WHITE_BOX_RECORD_CANARIES = 1000


def build_parser(
    prog: str, description: str, *, victims: tuple[str, ...] | None = None, argv: list[str] | None = None
) -> ArgumentParser:
    """The audit's parser; `argv` (None: sys.argv) is read ahead for a module:Class victim's flags."""
    p = ArgumentParser(prog=prog, description=description)
    p.add_argument(
        "--victim",
        required=True,
        type=victim_argument(victims),
        metavar="VICTIM",
        help=f"the pipeline under audit: {', '.join(victims or victim_names())}, or module:Class "
        "(your own pipeline; README, 'Audit your own pipeline')",
    )
    add_n_shadow(p)
    p.add_argument(
        "--n-targets",
        type=int_at_least(1),
        default=None,
        help="target runs (the first runs; their coins are the canaries of the epsilon bound), each attacked with "
        "the other, reference runs as shadows (default: R/2)",
    )
    p.add_argument("--dataset", default="digits", help=dataset_help(victim_classes(argv), victims))
    p.add_argument(
        "--pool-per-class",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="audit on the first N pool images of each class only (the small class-balanced pool of the worst-case "
        "DP-SGD design and of GAN-Leaks; its store is named <dataset>-N-per-class; default: the whole pool)",
    )
    p.add_argument(
        "--pool-unheld",
        type=int_at_least(1),
        default=None,
        metavar="K",
        help="a table only: audit on the pool records that hold none of each feature's K rarest cells, so those "
        "cells are empty (the worst-case pool for --canary-kind unheld; its store is named <dataset>-unheld-K; "
        "default: the whole pool)",
    )
    p.add_argument(
        "--data-root", default=None, help="where torchvision datasets live (no default: mnist, fashion-mnist, cifar10)"
    )
    p.add_argument("--download", action="store_true", help="let torchvision download the dataset")
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="train the runs in rounds (looks after --first-look runs, doubling up to --n-shadow, the budget), "
        "each look's verdict at its share of the error, and stop once the claim is violated or cannot be",
    )
    p.add_argument(
        "--first-look",
        type=int_at_least(2),
        default=None,
        metavar="N",
        help="--until-decided: runs at the first look (default 16, or what the attacks need)",
    )
    add_attack_flags(p)
    add_run_flags(p)
    add_canary_flags(p)
    add_claim_flags(p)
    add_victim_flags(p, argv)
    return p


def dataset_help(classes: dict[str, type], allowed: tuple[str, ...] | None) -> str:
    """--dataset's help: the images, then the tables and the victims (of `allowed`, if given) that
    release tables, as their classes say (`tabular`: True, or None for either kind)."""
    takes = {n: getattr(cls, "tabular", False) for n, cls in classes.items() if not allowed or n in allowed}
    text = "images: digits (embedded), mnist5k (the mnist extra), mnist, fashion-mnist, cifar10, or FILE.npz"
    tables = [n for n, kind in takes.items() if kind is True]
    either = [n for n, kind in takes.items() if kind is None]
    if tables or either:
        text += f"; tables, for the victims {', '.join(tables)}" if tables else "; tables"
        text += f" ({', '.join(either)}: either kind, as its configuration says)" if either else ""
        text += ": fair, randhie (embedded) or SCHEMA.json, a schema file (docs/contracts.md, 'Tables')"
    return text


def add_attack_flags(p: ArgumentParser) -> None:
    """--attack (more attacks) and --verdict-attack (the one the verdict rests on, declared in advance)."""
    p.add_argument(
        "--attack",
        action="extend",
        nargs="+",
        type=attack_argument,
        default=[],
        metavar="ATTACK",
        help="also run these attacks: a built-in or installed attack's name, or module:function (an attack of "
        "your own; docs/contracts.md, 'Your own attack'; default: none beyond the built-in ones for the victim)",
    )
    p.add_argument(
        "--verdict-attack",
        type=attack_argument,
        default=None,
        metavar="ATTACK",
        help="the attack the verdict and the own curve rest on, declared before the audit (run beside the others; "
        "its guess count still chosen on the reference runs): the attack a canary design is made for, e.g. pairs "
        "for --canary-kind unheld; default: the one the reference runs predict strongest",
    )


def check_verdict_attack(name: str | None, *, dataset: str, tabular: bool, white_box: bool) -> None:
    """ValueError (one line) before any run for a declared `--verdict-attack` these runs cannot score:
    a table's attack on images, a white-box attack black-box (`audit.summary.verdict_entry` refuses
    any other that scored no canary, after the runs)."""
    if name is None:
        return
    needs = get_attack(name).needs
    if needs == TABLE and not tabular:
        raise ValueError(f"--verdict-attack {name} scores a released table; --dataset {dataset} holds images")
    if needs == WHITEBOX and not white_box:
        raise ValueError(f"--verdict-attack {name} is a white-box attack: it needs --threat-model white-box")


def attack_argument(value: str) -> str:
    """--attack's type: the attack's name, once `attacks.registry.get_attack` finds it (by name, or
    by importing a module:function path); its one-line refusal otherwise."""
    try:
        return get_attack(value).name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_n_shadow(p: argparse.ArgumentParser) -> None:
    """--n-shadow R, the one definition: the shadow runs to train, each example in each by an
    independent coin (--inclusion-rate). An audit of shadow runs takes its targets among them
    (--n-targets); a release audit's target is the release itself, so all R are reference runs."""
    p.add_argument(
        "--n-shadow",
        type=int_at_least(2),
        required=True,
        help="shadow runs to train, each example in each by an independent coin (audit.lira/loss/ganleak: "
        "the targets and the reference runs; audit.release: the reference runs beside the release)",
    )


def add_canary_flags(p: argparse.ArgumentParser) -> None:
    """--canaries, --canary-kind, --canary-copies (victims.canaries), --threat-model and --plan (the
    membership plan, `shadow_runs.plan`). Not among the run flags that `audit.release` shares: a
    release audit has no canaries, and there these flags are unknown (exit 2)."""
    p.add_argument(
        "--canaries",
        type=int_at_least(0),
        default=None,
        help="add this many canary records to the pool before the plan is drawn, each with its own coin "
        "per run; they are the guesses of the epsilon bound, the natural examples are reported beside them "
        f"(default 0; with --threat-model white-box {WHITE_BOX_CANARIES} gradient canaries, at most one per "
        f"coordinate of the release, or {WHITE_BOX_RECORD_CANARIES} record canaries)",
    )
    p.add_argument(
        "--canary-kind",
        choices=ALL_KINDS,
        default=None,
        help="mislabeled: pool images with a wrong label; outlier: uniform noise images; duplicate: pool "
        "images repeated --canary-copies times as one record (no epsilon bound for them); gradient: "
        "a vector of norm exactly the sensitivity added to the noisy sums (--threat-model white-box); blank: "
        "blank pages (every pixel at the pool's minimum), canary j labelled class j mod C, the crafted canary of the "
        "worst-case black-box design (dpsgd --sampling full-batch --start pretrained, one per run); marked: blank "
        "pages each with its own disjoint mark, several per run of that design that barely interfere (e.g. 8). "
        "A table's: unseen: records in cells of the schema's domain no pool record holds; extreme: records with "
        "every number at a public bound and rare categories elsewhere; unheld: records alone in empty (label, feature) "
        "cells; record: the one record --target-record names (with --plan fixed-remainder --canaries 1: the "
        "worst-case neighbour design, D or D plus it) "
        f"(default mislabeled, unseen for a table; with --threat-model white-box {WHITE_BOX_CANARY_KIND})",
    )
    p.add_argument(
        "--canary-copies",
        type=int_at_least(2),
        default=None,
        help=f"rows per duplicate canary, one coin for all (default {DEFAULT_COPIES}; --canary-kind duplicate only)",
    )
    p.add_argument(
        "--target-record",
        default=None,
        metavar="COLUMN=VALUE,...",
        help="--canary-kind record: the target, every column of the table's schema once, each value inside its "
        "public domain (default: a built-in pair's own, pair-3bin's a=1,b=1,c=1)",
    )
    p.add_argument(
        "--threat-model",
        choices=THREAT_MODELS,
        default="black-box",
        help="black-box: the attacks see what the victim releases; white-box: they also see every noisy sum "
        "of a DP victim's Gaussian mechanism, through the canaries' projections (gradient canaries test the "
        "noise and accounting, record canaries clipping too)",
    )
    p.add_argument(
        "--plan",
        choices=tuple(PLANS),
        default="independent",
        help="the membership plan: independent: every record (natural or canary) in each run by its own coin; "
        "fixed-remainder (needs --canaries): every natural record in every run, only the canaries by their coins "
        "(the same coins), so a canary IN or OUT is exactly D or D plus it, D fixed: it exposes leaks through exact "
        "counts",
    )


def canary_config(
    args: argparse.Namespace, *, release_dimension: int | None = None, tabular: bool = False
) -> CanaryConfig | None:
    """The canaries the flags ask for (None for none), with the white-box defaults where --canaries or
    --canary-kind is not given: `WHITE_BOX_CANARIES` gradient canaries, at most `release_dimension`
    (the victim's release coordinates, where known), or `WHITE_BOX_RECORD_CANARIES` record canaries;
    a table's (`tabular`) default kind is unseen. ValueError on flags that do not fit together."""
    white_box = args.threat_model == "white-box"
    kind = args.canary_kind or (WHITE_BOX_CANARY_KIND if white_box else UNSEEN if tabular else "mislabeled")
    if args.canaries is not None:
        n = args.canaries
    elif not white_box:
        n = 0
    elif kind == WHITE_BOX_CANARY_KIND:
        n = WHITE_BOX_CANARIES if release_dimension is None else min(WHITE_BOX_CANARIES, release_dimension)
    else:
        n = WHITE_BOX_RECORD_CANARIES
    record = getattr(args, "target_record", None)
    config = CanaryConfig(n=n, kind=kind, copies=args.canary_copies, seed=args.seed, record=record)
    return config if config.n else None


def membership_plan(args: argparse.Namespace, canaries: CanaryConfig | None) -> str:
    """The plan --plan asks for, by its recorded name (`shadow_runs.plan.PLANS`); ValueError for the
    fixed remainder without canaries (its only coins are theirs)."""
    plan = PLANS[args.plan]
    if plan == FIXED_REMAINDER and canaries is None:
        raise ValueError(
            "--plan fixed-remainder needs --canaries N: every natural record is a member of every run, so the "
            "canaries' coins are the only ones"
        )
    return plan


def evaluation_settings(args: argparse.Namespace) -> EvaluationSettings:
    """The settings summary.json records, from the run and evaluation flags."""
    return EvaluationSettings(
        seed=args.seed,
        confidence=args.confidence,
        inclusion_rate=args.inclusion_rate,
        lira_variance_flag=args.lira_variance,
        verdict_attack=getattr(args, "verdict_attack", None),
    )


def executor_config(args: argparse.Namespace) -> ExecutorConfig:
    """Where and how the runs train, from the run flags; ValueError on a bad value."""
    return ExecutorConfig(
        kind=args.executor,
        workers=args.workers,
        address=args.address,
        gpus_per_run=args.gpus_per_run,
        device=args.device,
        runs_per_task=args.runs_per_task,
        compile=args.compile,
        precision=args.precision,
    )


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the shadow runs and their evaluation, shared with `audit.release`."""
    p.add_argument("--seed", type=int_at_least(0), default=0, help="master seed: plan, run seeds, evaluation splits")
    p.add_argument(
        "--inclusion-rate",
        type=probability,
        default=DEFAULT_INCLUSION_RATE,
        help="probability of each example's independent membership coin in each run (the epsilon bound needs 0.5)",
    )
    p.add_argument("--runs-dir", default="runs", help="parent of the experiment directories")
    p.add_argument(
        "--keep-runs-of-other-code",
        action="store_true",
        help="use a store whose runs were made by other victim code (experiment.json's victim_source) on purpose; "
        "without it such a store is refused",
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="ray",
        help="ray: the runs in parallel on Ray (a local one, or --address); inline: one after another in this process",
    )
    p.add_argument("--address", default=None, help="an existing Ray cluster to join (default: start one here)")
    p.add_argument(
        "--workers", type=int_at_least(1), default=None, help="concurrent runs on a local Ray (default: all cores)"
    )
    p.add_argument(
        "--gpus-per-run",
        type=float,
        default=None,
        help="GPU share per task, e.g. 0.25 (default: 0 on a CPU; with GPUs, 1 for a victim that packs, else the "
        "GPUs shared by the workers: audit.placement, one line says what it chose)",
    )
    p.add_argument(
        "--runs-per-task",
        type=int_at_least(1),
        default=None,
        help="runs per task, trained together where the victim packs them (real, subset, dm, dsa, dc, kip, psg; a "
        "command whose pipeline declares batch = K, K seeds per call); default: that K, else 1 on a CPU; with GPUs, "
        "a quarter of each GPU's runs, as many as half its memory holds",
    )
    p.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="where each run trains; auto: cuda if available",
    )
    p.add_argument(
        "--precision",
        default="fp32",
        choices=PRECISIONS,
        help="the training's arithmetic: tf32 (matrix products on a GPU), bf16 (also the training forward passes "
        "under bfloat16 autocast); clipping, norms and noise of a DP victim stay float32 (victims.precision)",
    )
    p.add_argument(
        "--compile",
        default="auto",
        choices=COMPILE_MODES,
        help="the downstream ConvNet's training step and query pass through torch.compile, once per worker; auto: "
        "when each Ray worker trains enough runs to pay for it on a CPU (160 at 8x8, 3 at 28x28); never on a GPU",
    )
    p.add_argument("--confidence", type=probability, default=0.95, help="confidence level of eps_lower")
    p.add_argument(
        "--lira-variance",
        choices=("auto", *VARIANCES),
        default="auto",
        help="variance of LiRA's Gaussians: per-example, global (pooled within-example), fixed (LiRA's "
        f"public code: of all observations); auto: fixed below {PER_EXAMPLE_FROM} reference runs, else per-example",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar, per-attack lines or legend; the verdict, warnings and output paths are still printed",
    )
