"""`python -m audit.release`: audit a data release the user already made with one of our pipelines.

    python -m audit.release --pool POOL.npz --release RELEASE.npz --victim NAME --n-shadow R
        [--claimed-epsilon E] [--claimed-delta D] [--out DIR] [--runs-dir runs] [--seed 0]
        [--inclusion-rate 0.5] [--executor ray|inline] [--workers W] [--device auto]
        [victim flags] [report flags]

R shadow runs of `--victim` on the same pool are the reference runs; the user's release is the
one target, with the user's membership as ground truth (`audit.releases`). The inputs, what is
run, the outputs and when there is an ε verdict: docs/contracts.md, "audit.release". Bad or
inconsistent inputs exit with status 2 and one line on stderr before anything is written; an
--out holding the audit of another release is refused untouched.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np

from attacks.lira import variance_for
from audit import outputs
from audit.cli.arguments import ArgumentParser, int_at_least
from audit.cli.flags import add_run_flags, executor_config
from audit.cli.report import add_claim_flags, add_report_flags, settings_from
from audit.cli.victim_flags import add_victim_flags, victim_argument, victim_overrides
from attacks.registry import attack_names
from audit.evaluate import StoredRuns, run_delta, score_attacks
from audit.pipeline import experiment_record, train_missing_runs
from audit.releases.inputs import ReleaseError, read_inputs
from audit.releases.target import check_out_dir, release_id, target_run, victim_for, with_target
from audit.reporting.build import build_report, write_report
from audit.results import load_audited
from audit.summary import release_summary
from shadow_runs import RunStore, StoreError, membership_matrix
from shadow_runs.files import write_json, write_npy
from victims import DataError, victim_names


def build_parser(argv: list[str] | None = None) -> ArgumentParser:
    p = ArgumentParser(prog="python -m audit.release",
                       description="Audit a data release made with one of the victim pipelines: shadow runs of the "
                                   "same pipeline on the same pool, attacks on the actual release, a report.")
    p.add_argument("--pool", required=True, type=Path, help="POOL.npz: x, y, and member (bool) or member_idx (int)")
    p.add_argument("--release", required=True, type=Path, help="RELEASE.npz: x, y (and optional init_idx)")
    p.add_argument("--victim", required=True, type=victim_argument(), metavar="VICTIM",
                   help=f"the pipeline that made the release: {', '.join(victim_names())}, or module:Class")
    p.add_argument("--n-shadow", type=int_at_least(2), required=True,
                   help="shadow runs: reference runs, each example in each by an independent coin (--inclusion-rate)")
    p.add_argument("--out", type=Path, default=None,
                   help="the audit directory (default: <runs-dir>/release-<sha256 of the release, 10 hex>)")
    add_run_flags(p)
    add_claim_flags(p)
    add_report_flags(p, seed=False)  # --seed is the run flags' master seed
    add_victim_flags(p, argv)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        inputs = read_inputs(args.pool, args.release)
        if inputs.coins is not None and inputs.coins.seed == args.seed:
            raise ReleaseError(f"--seed {args.seed} is the pool's membership_seed: the shadow runs' coins would repeat "
                               "the release's own; choose another --seed")
        victim = victim_for(args.victim, victim_overrides(args), inputs)
        victim.check(inputs.pool, inclusion_rate=args.inclusion_rate)  # the shadow runs, at the plan's rate
        executor = executor_config(args)
        settings = settings_from(args)
        experiment = experiment_record(victim, inputs.pool, dataset=str(args.pool), seed=args.seed,
                                           inclusion_rate=args.inclusion_rate)
        digest = release_id(args.release)
        out = args.out or Path(args.runs_dir) / f"release-{digest[:10]}"
        record = {**experiment, "n_shadow": args.n_shadow, "pool_file": str(args.pool.resolve()),
                  "release_file": str(args.release.resolve()), "release_sha256": digest,
                  "membership_sha256": hashlib.sha256(np.packbits(inputs.member).tobytes()).hexdigest(),
                  "membership_rate": None if inputs.coins is None else inputs.coins.rate,
                  "membership_seed": None if inputs.coins is None else inputs.coins.seed}
        check_out_dir(out, record)
        store = RunStore.open(args.runs_dir, experiment=experiment, pool_labels=inputs.pool.y)
        keep = membership_matrix(inputs.pool.y, n_runs=args.n_shadow, master_seed=args.seed,
                                 inclusion_rate=args.inclusion_rate)
        store.extend_plan(keep)
    except (DataError, StoreError, ValueError) as e:  # ReleaseError included
        parser.error(str(e))
    record["shadow_store"] = str(store.root.resolve())

    train_missing_runs(store, victim=victim, pool=inputs.pool, keep=keep, seed=args.seed,
                           inclusion_rate=args.inclusion_rate, executor=executor, quiet=args.quiet)
    shadows = StoredRuns.load(store, keep=keep, images=inputs.pool.x, labels=inputs.pool.y)
    obs, meta = target_run(victim, inputs, seed=args.seed, device=args.device)
    runs = with_target(shadows, obs, inputs, meta)
    # the user's release is the one target (the last run); every shadow run is a reference run, its shadow
    targets = np.array([args.n_shadow])
    variance = variance_for(args.lira_variance, n_reference=args.n_shadow)
    bounded = inputs.coins is not None and inputs.coins.fair
    delta = args.claimed_delta if args.claimed_delta is not None else (run_delta(shadows) or 0.0)
    scores, choices = score_attacks(runs, attack_names(), targets, variance=variance, columns=slice(None), delta=delta,
                                    confidence=args.confidence, bounded=bounded)
    summary = release_summary(scores, inputs, shadows, obs, experiment=experiment, variance=variance, args=args,
                              choices=choices)

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "experiment.json", record)
    write_npy(out / "pool_labels.npy", inputs.pool.y)
    RunStore(out).write_run(0, *obs.to_store(meta))
    write_npy(out / "audit" / "pool_index.npy", inputs.pool_index)
    outputs.write_audit(out / "audit", summary=summary, scores=scores, membership=inputs.member[None],
                        init_mask=runs.init_mask[targets])
    audited = load_audited(out)
    built = build_report([audited], settings=settings, images={str(audited.path): inputs.pool.x},
                                command=["python", "-m", "audit.release", *(sys.argv[1:] if argv is None else argv)])
    html_path, json_path = write_report(built, out / "audit")
    if not args.quiet:
        print(outputs.describe(summary, out / "audit" / "summary.json"))
    print("; ".join(v["text"] for v in built.data["experiments"][0]["verdicts"]))
    print(f"  -> {html_path}\n  -> {json_path}")
    return 0
