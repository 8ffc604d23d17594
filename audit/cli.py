"""The command line shared by `python -m audit.lira` and `python -m audit.loss`.

Flags -> a frozen victim config (its `--flags` are generated from the victim dataclasses, so the
registry is the single source) -> the pool, with its canaries if --canaries (victims.canaries) ->
the membership plan -> missing runs trained (Ray by default) and stored as they arrive -> attacks,
metrics and epsilon bounds -> summary.json, scores.npz, roc.png.
Bad input exits with status 2 and one line naming the value, before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
import zlib
from pathlib import Path

import numpy as np

from audit import outputs
from audit.arguments import ArgumentParser, int_at_least, probability
from audit.epsilon import bound_applies, unfair_coins_reason
from audit.evaluate import MIN_RUNS, StoredRuns, attack_scores, attack_summary
from attacks import VARIANCES
from attacks.lira import PER_EXAMPLE_FROM, variance_for
from shadow_runs import RunStore, StoreError, membership_matrix, run_seed
from shadow_runs.plan import DEFAULT_INCLUSION_RATE, PLAN, default_targets, target_runs
from shadow_runs.executor import EXECUTORS, ExecutorConfig, RunTask, execute
from shadow_runs.records import CanaryColumns
from victims import DataError, get_victim, load_pool, victim_config, victim_names
from victims.canaries import CANARY_KINDS, DEFAULT_COPIES, CanaryConfig, add_canaries
from victims.data import Pool

EPSILON_NOTE = ("eps_lower: one-run bound (Steinke, Nasr & Jagielski 2023) over the target runs' coins, "
                "m = n_canaries; eps_ceiling: what a perfect attack would certify with this design")
CANARY_EPSILON_NOTE = ("eps_lower: one-run bound (Steinke, Nasr & Jagielski 2023) over the target runs' coins of the "
                       "inserted canaries, m = n_canaries, designated before any training; eps_ceiling: what a perfect "
                       "attack would certify with this design; `natural`: the same over the natural examples, "
                       "descriptive (the verdict uses the canaries only)")
DUPLICATE_NOTE = ("each duplicate canary is {copies} identical rows moved by one coin, which a per-record ε does not "
                  "bound (group privacy gives {copies}ε), so the canaries get leakage statistics but no eps_lower or "
                  "eps_ceiling; `natural` keeps the one-run bound over the natural examples, descriptive")


# -- victim flags, generated from the victim dataclasses ---------------------------------------
def _flag_fields(cls: type, prefix: tuple[str, ...] = ()):
    """(path, type, field) for every scalar field of a victim dataclass, nested ones flattened."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _flag_fields(kind, prefix + (f.name,))
            continue
        if isinstance(kind, types.UnionType):  # `int | None`
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        yield prefix + (f.name,), kind, f


def _flag(path: tuple[str, ...]) -> str:
    return "--" + "-".join(path).replace("_", "-")


def _dest(path: tuple[str, ...]) -> str:
    return "victim__" + "__".join(path)


def given_victim(argv: list[str] | None) -> str | None:
    """The value of --victim on the command line `argv` (None: sys.argv), before the full parse:
    a victim given as a module:Class path brings its own flags."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--victim")
    return pre.parse_known_args(sys.argv[1:] if argv is None else argv)[0].victim


def victim_classes(argv: list[str] | None = None) -> dict[str, type]:
    """name -> class of every victim whose flags the parser offers: the built-in ones, the
    installed plugins that load, and the module:Class victim on the command line if it loads (one
    that does not is reported by the --victim argument itself)."""
    classes = {}
    for name in (*victim_names(), given_victim(argv)):
        if name is not None and name not in classes:
            try:
                classes[name] = get_victim(name)
            except ValueError:
                pass
    return classes


def victim_argument(allowed: tuple[str, ...] | None = None):
    """An argument type for --victim: a built-in or installed victim (of `allowed`, if given) or a
    module:Class path to a class that follows the victim protocol; the message names the value."""
    def parse(text: str) -> str:
        try:
            get_victim(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if allowed is not None and text in victim_names() and text not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r} is not audited by this command (choose from {', '.join(allowed)}, "
                                             "or a module:Class path)")
        return text

    parse.__name__ = "victim"  # how the flag table (tests/snapshots/flags.txt) names this type
    return parse


def add_victim_flags(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> None:
    """One flag per victim field (`victim_classes(argv)`). A field several victims share (same name
    and type) is one flag; where their help texts differ, each victim's text is shown, prefixed
    with the victims' names."""
    group = parser.add_argument_group("victim flags (each applies to the victims that have it)")
    flags: dict[str, tuple[tuple[str, ...], type, dataclasses.Field]] = {}
    helps: dict[str, dict[str, list[str]]] = {}  # dest -> help text -> victims that use it
    for name, cls in victim_classes(argv).items():
        for path, kind, f in _flag_fields(cls):
            flags.setdefault(_dest(path), (path, kind, f))
            helps.setdefault(_dest(path), {}).setdefault(f.metadata.get("help", ""), []).append(name)
    for dest, (path, kind, f) in flags.items():
        texts = helps[dest]
        help_text = next(iter(texts)) if len(texts) == 1 else "; ".join(
            f"{', '.join(names)}: {text}" for text, names in texts.items() if text)
        kwargs = {"dest": dest, "default": argparse.SUPPRESS,
                  "help": help_text.replace("%", "%%") or None}  # argparse formats help with %
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = kind
            if "choices" in f.metadata:
                kwargs["choices"] = f.metadata["choices"]
            else:
                kwargs["metavar"] = kind.__name__.upper()
        group.add_argument(_flag(path), **kwargs)


def build_victim(name: str, args: argparse.Namespace):
    """The victim `name` with the flags given on the command line; raises ValueError on bad values."""
    cls = get_victim(name)
    given = {k[len("victim__"):]: v for k, v in vars(args).items() if k.startswith("victim__")}
    own = {"__".join(path) for path, _, _ in _flag_fields(cls)}
    stray = sorted(set(given) - own)
    if stray:
        raise ValueError(f"{_flag(tuple(stray[0].split('__')))} does not apply to victim {name!r}")

    def construct(kind: type, prefix: tuple[str, ...], base=None):
        """`kind` with the given flags under `prefix`; a nested configuration starts from the
        enclosing one's default for it (a victim's own default, e.g. a narrower net), not from
        the nested class's defaults, and is left at that default when none of its flags is given."""
        hints = typing.get_type_hints(kind)
        kwargs = {}
        for f in dataclasses.fields(kind):
            key = "__".join(prefix + (f.name,))
            if dataclasses.is_dataclass(hints[f.name]):
                if any(k.startswith(key + "__") for k in given):
                    if base is not None:
                        default = getattr(base, f.name)
                    else:
                        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                    kwargs[f.name] = construct(hints[f.name], prefix + (f.name,), default)
            elif key in given:
                kwargs[f.name] = given[key]
        return kind(**kwargs) if base is None else dataclasses.replace(base, **kwargs)

    return construct(cls, ())


def build_parser(prog: str, description: str, *, victims: tuple[str, ...] | None = None,
                 argv: list[str] | None = None) -> ArgumentParser:
    """The audit's parser; `argv` (None: sys.argv) is read ahead for a module:Class victim's flags."""
    p = ArgumentParser(prog=prog, description=description)
    p.add_argument("--victim", required=True, type=victim_argument(victims), metavar="VICTIM",
                   help=f"the pipeline under audit: {', '.join(victims or victim_names())}, or module:Class "
                        "(your own pipeline; README, 'Audit your own pipeline')")
    p.add_argument("--n-shadow", type=int_at_least(2), required=True, help="runs to train (targets and shadows)")
    p.add_argument("--n-targets", type=int_at_least(1), default=None, help="target runs (the first runs; their coins are the canaries of the epsilon bound), each attacked with the other, reference runs as shadows (default: min(R/2, 16))")
    p.add_argument("--dataset", default="digits", help="digits (embedded), mnist, fashion-mnist, cifar10, or a .npz file")
    p.add_argument("--data-root", default=None, help="where torchvision datasets live")
    p.add_argument("--download", action="store_true", help="let torchvision download the dataset")
    add_run_flags(p)
    add_canary_flags(p)
    add_victim_flags(p, argv)
    return p


def add_canary_flags(p: argparse.ArgumentParser) -> None:
    """--canaries, --canary-kind, --canary-copies (victims.canaries). Not among the run flags that
    `audit.release` shares: a release audit has no canaries, and there these flags are unknown (exit 2)."""
    p.add_argument("--canaries", type=int_at_least(0), default=0,
                   help="add this many canary records to the pool before the plan is drawn, each with its own coin "
                        "per run; they are the guesses of the epsilon bound, the natural examples are reported beside them")
    p.add_argument("--canary-kind", choices=CANARY_KINDS, default="mislabeled",
                   help="mislabeled: pool images with a wrong label; outlier: uniform noise images; duplicate: pool "
                        "images repeated --canary-copies times as one record (no epsilon bound for them)")
    p.add_argument("--canary-copies", type=int_at_least(2), default=None,
                   help=f"rows per duplicate canary, one coin for all (default {DEFAULT_COPIES}; --canary-kind duplicate only)")


def canary_config(args: argparse.Namespace) -> CanaryConfig | None:
    """The canaries the flags ask for (None for none); ValueError on flags that do not fit together."""
    config = CanaryConfig(n=args.canaries, kind=args.canary_kind, copies=args.canary_copies, seed=args.seed)
    return config if config.n else None


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the shadow runs and their evaluation, shared with `audit.release`."""
    p.add_argument("--seed", type=int_at_least(0), default=0, help="master seed: plan, run seeds, evaluation splits")
    p.add_argument("--inclusion-rate", type=probability, default=DEFAULT_INCLUSION_RATE,
                   help="probability of each example's independent membership coin in each run (the epsilon bound needs 0.5)")
    p.add_argument("--runs-dir", default="runs", help="parent of the experiment directories")
    p.add_argument("--executor", choices=EXECUTORS, default="ray")
    p.add_argument("--address", default=None, help="an existing Ray cluster to join (default: start one here)")
    p.add_argument("--workers", type=int_at_least(1), default=None, help="concurrent runs on a local Ray (default: all cores)")
    p.add_argument("--gpus-per-run", type=float, default=0.0, help="GPU share per run, e.g. 0.25")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--confidence", type=probability, default=0.95, help="confidence level of eps_lower")
    p.add_argument("--lira-variance", choices=("auto", *VARIANCES), default="auto",
                   help="variance of LiRA's Gaussians: per-example, global (pooled within-example), fixed (LiRA's "
                        f"public code: of all observations); auto: fixed below {PER_EXAMPLE_FROM} reference runs, else per-example")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def experiment_record(victim, pool: Pool, *, dataset: str, seed: int, inclusion_rate: float,
                      canaries: dict | None = None) -> dict:
    """experiment.json of `victim` on `pool` (identity and provenance); `canaries`, the canary entry
    (`CanaryConfig.entry`), is recorded only for an experiment with canaries."""
    label = Path(dataset).stem if dataset.endswith(".npz") else dataset
    return {
        "victim": victim.name,
        "dataset": label,
        "dataset_fingerprint": pool.fingerprint,
        "config": victim_config(victim),
        "n_pool": pool.n_pool,
        "master_seed": seed,
        "plan": PLAN,
        "inclusion_rate": inclusion_rate,
        **({"canaries": canaries} if canaries else {}),
        **outputs.provenance(),
    }


def train_missing_runs(store: RunStore, *, victim, pool: Pool, keep: np.ndarray, seed: int, inclusion_rate: float,
                       executor: ExecutorConfig, quiet: bool) -> None:
    """Train every run of the plan `keep` that the store lacks, storing each as it arrives."""
    from tqdm import tqdm

    finished = store.finished_runs()
    tasks = [RunTask(run=r, seed=run_seed(master_seed=seed, run=r), keep=row, inclusion_rate=inclusion_rate)
             for r, row in enumerate(keep) if r not in finished]
    with tqdm(total=len(keep), initial=len(keep) - len(tasks), unit="run", desc=victim.name, disable=quiet, file=sys.stderr) as bar:
        for task, obs, meta in execute(tasks, victim=victim, pool=pool, config=executor):
            store.write_run(task.run, *obs.to_store(meta))
            bar.update(1)


def summarise(runs: StoredRuns, scores: dict[str, np.ndarray], targets: np.ndarray, *, experiment: dict, variance: str,
              canaries: CanaryColumns | None, args: argparse.Namespace) -> dict:
    """summary.json (the contract in the README, "What a run leaves"): metrics of every attack, pooled over the targets."""
    membership, init_mask = runs.keep[targets], runs.init_mask[targets]
    fair = bound_applies(args.inclusion_rate)
    formal = [m["formal_epsilon"] for m in runs.meta if m["formal_epsilon"] is not None]
    delta = next((m["delta"] for m in runs.meta if m["delta"] is not None), None)
    accuracies = [m["test_accuracy"] for m in runs.meta]
    # an attack that scored too few canaries (ganleak_pbb reconstructs only the first rows) has no canary group
    unscored = [a for a, s in scores.items() if canaries and min(canaries.coins_scored(membership, s)) < 2]
    summary = {
        "victim": experiment["victim"],
        "dataset": experiment["dataset"],
        "config": experiment["config"],
        "n_shadow": len(runs.keep),
        "target_runs": targets.tolist(),
        "formal_epsilon": max(formal) if formal else None,
        "delta": delta,
        "utility": {"test_accuracy": float(np.mean(accuracies)), "test_accuracy_std": float(np.std(accuracies))},
        "evaluation": {"lira_variance": variance, "lira_variance_flag": args.lira_variance, "confidence": args.confidence, "master_seed": args.seed,
                       "plan": PLAN, "inclusion_rate": args.inclusion_rate,
                       "n_canaries": int(membership.size) if fair else None,
                       "epsilon_note": EPSILON_NOTE if fair else unfair_coins_reason(args.inclusion_rate)},
        "attacks": {
            # The bound uses the victim's delta (0 for non-DP victims); its tie-breaking (and the
            # advantage's halves) are seeded by (master seed, attack name), so each attack's numbers
            # do not depend on the others.
            attack: attack_summary(s, membership, init_mask, delta=delta or 0.0, confidence=args.confidence,
                                   seed=[args.seed, zlib.crc32(attack.encode())], fair_coins=fair,
                                   canaries=canaries)
            for attack, s in scores.items() if attack not in unscored
        },
    }
    if canaries:
        entry = experiment["canaries"]
        note = (unfair_coins_reason(args.inclusion_rate) if not fair else
                DUPLICATE_NOTE.format(copies=entry["copies"]) if entry["kind"] == "duplicate" else CANARY_EPSILON_NOTE)
        summary["evaluation"].update({"n_canaries": len(targets) * entry["n"] if fair else None, "epsilon_note": note,
                                      "canaries": entry})
        if unscored:
            summary["evaluation"]["attacks_without_canary_scores"] = unscored
    return summary


def check_canary_coins(membership: np.ndarray, canaries: CanaryColumns) -> None:
    """ValueError unless the target runs hold at least two IN and two OUT canary coins (the
    canary group's statistics need both sides); the plan is known before any training."""
    n_in, n_out = canaries.coins_scored(membership)
    if min(n_in, n_out) < 2:
        n = int(canaries.scored.sum())
        raise ValueError(f"--canaries {n} over {len(membership)} target runs draws {n_in} IN and {n_out} OUT "
                         "canary coins; the canary group needs at least 2 of each (more --canaries or --n-targets)")


def main(argv: list[str] | None, *, prog: str, attacks: tuple[str, ...], description: str,
         victims: tuple[str, ...] | None = None) -> int:
    """Run the audit; `victims` restricts `--victim` (default: every registered victim)."""
    parser = build_parser(prog, description, victims=victims, argv=argv)
    args = parser.parse_args(argv)
    try:
        victim = build_victim(args.victim, args)
        executor = ExecutorConfig(kind=args.executor, workers=args.workers, address=args.address,
                                  gpus_per_run=args.gpus_per_run, device=args.device)
        config = canary_config(args)
        pool = load_pool(args.dataset, data_root=args.data_root, download=args.download)
        n_natural = pool.n_pool
        pool = add_canaries(pool, config)  # before the check and the plan: the canaries are pool rows
        canaries = CanaryColumns.of(n_natural, config) if config else None
        victim.check(pool, inclusion_rate=args.inclusion_rate)
        needed = max(MIN_RUNS[a] for a in attacks)
        if args.n_shadow < needed:
            raise ValueError(f"--n-shadow {args.n_shadow} is too few for {', '.join(attacks)} (needs >= {needed})")
        targets = target_runs(args.n_shadow, args.n_targets or default_targets(args.n_shadow))
        experiment = experiment_record(victim, pool, dataset=args.dataset, seed=args.seed, inclusion_rate=args.inclusion_rate,
                                       canaries=config.entry(n_natural) if config else None)
        keep = membership_matrix(pool.y, n_runs=args.n_shadow, master_seed=args.seed, inclusion_rate=args.inclusion_rate,
                                 record_of_row=canaries.record if canaries else None)
        if canaries:
            check_canary_coins(keep[targets], canaries)
        store = RunStore.open(args.runs_dir, experiment=experiment, pool_labels=pool.y)
        store.extend_plan(keep)
    except (DataError, StoreError, ValueError) as e:
        parser.error(str(e))

    train_missing_runs(store, victim=victim, pool=pool, keep=keep, seed=args.seed, inclusion_rate=args.inclusion_rate,
                       executor=executor, quiet=args.quiet)

    runs = StoredRuns.load(store, keep=keep, images=pool.x, labels=pool.y)
    variance = variance_for(args.lira_variance, n_reference=args.n_shadow - len(targets))
    scores = {attack: attack_scores(runs, attack, targets, variance=variance)
              for attack in runs.available(attacks)}
    summary = summarise(runs, scores, targets, experiment=experiment, variance=variance, canaries=canaries, args=args)
    # scores.npz and the ROC plot take attacks that scored every example; one that scored a subset
    # (ganleak_pbb, NaN elsewhere) is reported in summary.json only
    complete = {attack: s for attack, s in scores.items() if not np.isnan(s).any()}
    path = outputs.write_audit(store.audit_dir, summary=summary, scores=complete, membership=runs.keep[targets],
                               init_mask=runs.init_mask[targets], canaries=canaries)
    if not args.quiet:
        print(outputs.describe(summary, path))
    return 0

