"""`python -m audit.release`: audit a data release the user already made, with one of our pipelines
or a generator of their own (the command line of `audit.releases.audit`).

R shadow runs of `--victim` on the same pool are the reference runs; the user's release is the one
target, its membership the ground truth; R random real subsets of its size are its baseline
(docs/contracts.md, "audit.release"). Bad inputs exit 2 with one line before anything is written;
an --out holding another release's audit is refused untouched.
"""

from __future__ import annotations

import sys
from pathlib import Path

from audit import outputs
from audit.cli.arguments import ArgumentParser
from audit.cli.flags import add_n_shadow, add_run_flags, evaluation_settings, executor_config
from audit.cli.arguments import add_claim_flags
from audit.cli.report_command import add_report_flags, settings_from
from audit.cli.victim_flags import add_victim_flags, victim_argument, victim_overrides
from audit.releases.audit import ReleaseRequest, prepare, run_release_audit
from audit.reporting.verdict import NO_SUBSET_BASELINE
from shadow_runs import StoreError
from victims import DataError, victim_names


def build_parser(argv: list[str] | None = None) -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m audit.release",
        description="Audit a data release made with one of the victim pipelines or your own generator: shadow "
        "runs of the same pipeline and random real subsets on the same pool, attacks on the actual release, "
        "a report that says how much it leaks and whether it leaks less than a random subset.",
    )
    p.add_argument("--pool", type=Path, help="POOL.npz: x, y, and member (bool) or member_idx (int); images")
    p.add_argument(
        "--dataset",
        default=None,
        help="a table in place of --pool: fair, randhie, or a .json schema file (with --members)",
    )
    p.add_argument(
        "--members",
        type=Path,
        default=None,
        help="with --dataset: the release's members among the table's pool rows: a .npz (member or member_idx, "
        "optional membership_seed and membership_rate) or a .csv/.parquet with one column, member or member_idx",
    )
    p.add_argument(
        "--release",
        required=True,
        type=Path,
        help="RELEASE.npz: x, y (and optional init_idx); a table's: a .csv or .parquet with the schema's columns",
    )
    p.add_argument(
        "--victim",
        required=True,
        type=victim_argument(),
        metavar="VICTIM",
        help=f"the pipeline that made the release: {', '.join(victim_names())}, or module:Class",
    )
    add_n_shadow(p)
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the audit directory (default: <runs-dir>/release-<sha256 of the release, 10 hex>)",
    )
    add_run_flags(p)
    add_claim_flags(p)
    add_report_flags(p, seed=False)  # --seed is the run flags' master seed
    add_victim_flags(p, argv)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if (args.pool is None) == (args.dataset is None):
        parser.error("give the custodian's data as --pool POOL.npz (images) or --dataset TABLE --members FILE")
    if (args.dataset is None) != (args.members is None):
        parser.error("--members goes with --dataset (a table's membership); POOL.npz holds its own")
    try:
        request = ReleaseRequest(
            pool_file=args.pool,
            dataset=args.dataset,
            members_file=args.members,
            release_file=args.release,
            victim=args.victim,
            n_shadow=args.n_shadow,
            evaluation=evaluation_settings(args),
            executor=executor_config(args),
            report=settings_from(args),
            runs_dir=Path(args.runs_dir),
            out=args.out,
            overrides=victim_overrides(args),
            lira_variance=args.lira_variance,
            device=args.device,
            quiet=args.quiet,
            keep_other_code=args.keep_runs_of_other_code,
            command=["python", "-m", "audit.release", *(sys.argv[1:] if argv is None else argv)],
        )
        prepared = prepare(request)
    except (DataError, StoreError, ValueError) as e:  # ReleaseError included
        parser.error(str(e))
    result, built, html_path, json_path = run_release_audit(prepared)
    if not args.quiet:
        print(outputs.describe(result, prepared.out / "audit" / "summary.json"))
    for warning in result.release_leakage["warnings"]:  # too few runs: printed even with --quiet
        print(f"warning: {warning}", file=sys.stderr)
    print(verdict_line(built.data["experiments"][0]["verdicts"]))
    print(f"  -> {html_path}\n  -> {json_path}")
    return 0


def verdict_line(verdicts: list[dict]) -> str:
    """The report's verdicts on one line for the terminal, a skipped comparison with its reason."""
    return "; ".join(f"{v['text']}: {v['reason']}" if v["kind"] == NO_SUBSET_BASELINE else v["text"] for v in verdicts)
