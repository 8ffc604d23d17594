"""`python -m audit.compare`: audited experiments against the naive baseline.

Prints two markdown tables and a legend (`audit.reporting.comparison_tables`); `--out` also writes
the numbers as JSON. The protocol: docs/contracts.md, "Comparing with the naive baseline". Bad
input exits 2 with one line on stderr; nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path

from audit.cli.arguments import ArgumentParser, int_at_least, probability
from audit.reporting.comparison_tables import markdown_table, to_json
from audit.results import load_experiment
from audit.stats.bootstrap import GROUPS, N_BOOT, N_BOOT_EPS
from audit.stats.significance import compare_experiments
from shadow_runs.atomic_files import atomic_write


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m audit.compare",
        description="Compare audited experiments with the naive baseline (a random real subset "
        "of the same size): intervals by a cluster bootstrap over target runs, "
        "differences with Holm-adjusted p-values.",
    )
    p.add_argument("experiments", nargs="+", metavar="EXP_DIR", help="audited experiment directories")
    p.add_argument(
        "--baseline",
        required=True,
        metavar="EXP_DIR",
        help="the baseline, e.g. a `subset` experiment (`tabular-subset` for a table)",
    )
    p.add_argument(
        "--attack",
        action="extend",
        nargs="+",
        default=None,
        help="attacks to compare (default: those every experiment scored)",
    )
    p.add_argument(
        "--group", action="extend", nargs="+", choices=GROUPS, default=None, help="groups of members (default: all)"
    )
    p.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON here")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the bootstrap")
    p.add_argument("--n-boot", type=int_at_least(1), default=N_BOOT, help="replicates for AUC and TPR")
    p.add_argument(
        "--n-boot-eps",
        type=int_at_least(0),
        default=N_BOOT_EPS,
        help="replicates for eps_lower (default 0: its point only, untested; each costs 0.1-2 s per attack)",
    )
    p.add_argument("--confidence", type=probability, default=0.95, help="level of the intervals")
    p.add_argument("--alpha", type=probability, default=0.05, help="significance level after Holm's adjustment")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        baseline = load_experiment(args.baseline)
        experiments = [load_experiment(path) for path in args.experiments]
        if args.out is not None and not args.out.parent.is_dir():
            raise ValueError(f"--out {args.out}: no such directory {args.out.parent}")
        if args.out is not None and args.out.is_dir():
            raise ValueError(f"--out {args.out} is a directory")
        report = compare_experiments(
            experiments,
            baseline,
            attacks=args.attack,
            groups=args.group or ("all",),
            confidence=args.confidence,
            alpha=args.alpha,
            n_boot=args.n_boot,
            n_boot_eps=args.n_boot_eps,
            seed=args.seed,
        )
    except ValueError as e:  # ExperimentError included
        parser.error(str(e))
    print(markdown_table(report))
    if args.out is not None:
        text = json.dumps(to_json(report), indent=1) + "\n"
        atomic_write(args.out, lambda f: f.write(text.encode()))
    return 0
