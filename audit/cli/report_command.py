"""`python -m audit.report RUN_DIR [RUN_DIR ...]`: an audit report, `report.html` and `report.json`.

A RUN_DIR is an audited experiment directory or a folder of them; the report goes to `--out` (default `RUN_DIR/audit/`
for one, the current directory for several). The claim checked, the verdicts and report.json's keys: docs/contracts.md,
"report.json and report.html". Bad input exits 2 with one line on stderr; nothing is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from audit.claim import Claim
from audit.cli.arguments import ArgumentParser, add_claim_flags, int_at_least, probability
from audit.reporting.build import Settings, build_report, write_report
from audit.results import load_audited, load_many
from audit.stats.bootstrap import N_BOOT, N_BOOT_EPS


def add_report_flags(parser, *, seed: bool = True) -> None:
    if seed:
        parser.add_argument(
            "--seed", type=int_at_least(0), default=0, help="seed of the bounds' splits and the bootstrap"
        )
    parser.add_argument("--n-boot", type=int_at_least(1), default=N_BOOT, help="bootstrap replicates (AUC, TPR)")
    parser.add_argument(
        "--n-boot-eps",
        type=int_at_least(0),
        default=N_BOOT_EPS,
        help="bootstrap replicates of eps_lower in the comparison with the subset (default 0: "
        "not resampled nor tested; each replicate costs 0.1-2 s per attack)",
    )
    parser.add_argument("--alpha", type=probability, default=0.05, help="significance level after Holm's adjustment")
    parser.add_argument("--top-k", type=int_at_least(1), default=16, help="examples at highest risk to show")
    parser.add_argument("--data-root", default=None, help="where torchvision datasets live (for the thumbnails)")


def settings_from(args) -> Settings:
    """The report's settings from its flags; the claim flags make one `Claim` (None if neither is given)."""
    return Settings(
        claim=Claim.given(args.claimed_epsilon, args.claimed_delta),
        alpha=args.alpha,
        seed=args.seed,
        n_boot=args.n_boot,
        n_boot_eps=args.n_boot_eps,
        top_k=args.top_k,
    )


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m audit.report",
        description="Write report.html (self-contained) and report.json for audited experiments.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="audited experiment directories (or folders of them)")
    p.add_argument(
        "--baseline",
        default=None,
        metavar="RUN_DIR",
        help="a `subset` experiment (`tabular-subset` for a table) to compare with",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for report.html and report.json (default: RUN_DIR/audit for one experiment, "
        "else the current directory)",
    )
    add_claim_flags(p)
    add_report_flags(p)
    return p


def release_images(experiments) -> dict:
    """experiment path -> pool images, for each audited release among `experiments`: its pool
    file is the release's to read (`audit.releases.inputs`, which imports the victims' data, so
    only when there is one); `build_report` finds every other experiment's pool itself."""
    if not any(e.meta.get("pool_file") for e in experiments):
        return {}
    from audit.releases.inputs import audited_pool_images

    found = {str(e.path): audited_pool_images(e.path, e.meta) for e in experiments}
    return {path: x for path, x in found.items() if x is not None}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        experiments = load_many(args.run_dirs)
        baseline = load_audited(args.baseline) if args.baseline else None
        out = args.out or (experiments[0].path / "audit" if len(experiments) == 1 else Path("."))
        if not out.is_dir():
            raise ValueError(f"--out {out}: no such directory")
        report = build_report(
            experiments,
            baseline=baseline,
            settings=settings_from(args),
            images=release_images(experiments),
            data_root=args.data_root,
            command=["python", "-m", "audit.report", *(sys.argv[1:] if argv is None else argv)],
        )
    except ValueError as e:  # ExperimentError included
        parser.error(str(e))
    html_path, json_path = write_report(report, out)
    for entry in report.data["experiments"]:
        print(f"{entry['label']}: " + "; ".join(v["text"] for v in entry["verdicts"]))
    print(f"  -> {html_path}\n  -> {json_path}")
    return 0
