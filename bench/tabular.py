"""The tabular results table (docs/results/tabular.md): each tabular victim audited on an embedded
table, one row per victim and claimed ε.

    python bench/tabular.py [--rows subset real marginals-1 ...] [--dataset fair] [--n-shadow 64]
                            [--seed 0] [--seeds 1] [--runs-dir DIR] [--jsonl F]

Each row is one `python -m audit.lira --dataset D --n-shadow N` of the row's flags (`ROWS`), in
its own store under `--runs-dir` (a temporary directory by default; a store given there is reused,
so a second call only scores). Printed as a markdown row: the victim and its claim, the formal ε,
utility (the downstream classifier's test accuracy, the mean 2-way marginal TV distance to the
test split), the attack with the largest AUC with its AUC and its TPR at 1% FPR (and the false
positives there), the ε verdict with the bound it rests on, the own curve (where the runs record
a mechanism), and the mean seconds a run took in its worker (`wall_s`). With `--seeds S`, every row
is audited with master seeds SEED .. SEED + S - 1 (coins, canaries and noise all differ) and a line
after its rows says in how many it was violated, with the bounds' median and range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from timing import AuditOutcome, audit_into

DP_BUGS = "victims.bugs"
#: the worst-case black-box design for a marginal-based release's noise (the `*-unheld` rows)
UNHELD_DESIGN = [
    *("--pool-unheld", "2", "--canaries", "10", "--canary-kind", "unheld", "--rows", "10000"),
    *("--verdict-attack", "pairs"),
]
#: row -> the audit's flags (after --dataset and --n-shadow)
ROWS = {
    "subset": ["--victim", "tabular-subset"],
    "real": ["--victim", "tabular-real"],
    "marginals-1": ["--victim", "marginals", "--epsilon", "1"],
    "marginals-4": ["--victim", "marginals", "--epsilon", "4"],
    "marginals-10": ["--victim", "marginals", "--epsilon", "10"],
    "mst-1": ["--victim", "mst", "--epsilon", "1"],
    "mst-10": ["--victim", "mst", "--epsilon", "10"],
    "ctgan": ["--victim", "ctgan"],
    "domain-bug-1": ["--victim", f"{DP_BUGS}:MarginalsDomainFromData", "--epsilon", "1"],
    "noise-bug-1": ["--victim", f"{DP_BUGS}:MarginalsNoiseForTen", "--epsilon", "1"],
    # black-box from one extreme canary (affairs at its public bound 60, which no fair record reaches), the design
    # that exposes a domain read from the members (the domain-extension attack, `support`); with --n-shadow 32
    "domain-bug-1-extreme": [
        "--victim",
        f"{DP_BUGS}:MarginalsDomainFromData",
        "--epsilon",
        "1",
        "--canaries",
        "1",
        "--canary-kind",
        "extreme",
    ],
    "marginals-1-extreme": ["--victim", "marginals", "--epsilon", "1", "--canaries", "1", "--canary-kind", "extreme"],
    # the same with the verdict on `support`, the attack the extreme canary is made for, declared before the audit
    # (--verdict-attack): with one canary a run the 16 reference coins often choose another attack
    "domain-bug-1-extreme-support": [
        *("--victim", f"{DP_BUGS}:MarginalsDomainFromData", "--epsilon", "1"),
        *("--canaries", "1", "--canary-kind", "extreme", "--verdict-attack", "support"),
    ],
    "marginals-1-extreme-support": [
        *("--victim", "marginals", "--epsilon", "1"),
        *("--canaries", "1", "--canary-kind", "extreme", "--verdict-attack", "support"),
    ],
    # the same with 4 extreme canaries, each at the bound of its own numeric column (for randhie's 4 unreached bounds)
    "domain-bug-1-extreme-4": [
        "--victim",
        f"{DP_BUGS}:MarginalsDomainFromData",
        "--epsilon",
        "1",
        "--canaries",
        "4",
        "--canary-kind",
        "extreme",
    ],
    "marginals-1-extreme-4": ["--victim", "marginals", "--epsilon", "1", "--canaries", "4", "--canary-kind", "extreme"],
    # white-box: 4,000 gradient canaries per run, each with cells of its own (victims/pipelines/marginals.py)
    "marginals-1-wb": ["--victim", "marginals", "--epsilon", "1", "--threat-model", "white-box"],
    "marginals-4-wb": ["--victim", "marginals", "--epsilon", "4", "--threat-model", "white-box"],
    "noise-bug-1-wb": ["--victim", f"{DP_BUGS}:MarginalsNoiseForTen", "--epsilon", "1", "--threat-model", "white-box"],
    # black-box from the worst case for the noise (victims/tabular/canaries.py, `unheld`): the pool without each
    # feature's 2 rarest cells, 10 canaries each the only record of its label in 8 (label, feature) cells, a release
    # of 10,000 records (the noisy marginals read closely), and the verdict on `pairs`, the attack the design is made
    # for, declared before the audit
    "noise-bug-1-unheld": ["--victim", f"{DP_BUGS}:MarginalsNoiseForTen", "--epsilon", "1", *UNHELD_DESIGN],
    "marginals-1-unheld": ["--victim", "marginals", "--epsilon", "1", *UNHELD_DESIGN],
    "marginals-10-unheld": ["--victim", "marginals", "--epsilon", "10", *UNHELD_DESIGN],
}


def audit(flags: list[str], *, dataset: str, n_shadow: int, seed: int, runs_dir: Path) -> AuditOutcome:
    """One audit of `flags` on `dataset` (its lines on stdout discarded); its store is the newest under `runs_dir`."""
    args = ["--dataset", dataset, "--n-shadow", str(n_shadow), *flags, "--seed", str(seed)]
    return audit_into(runs_dir, args, show=False)


def row_figures(row: str, done: AuditOutcome) -> dict:
    """The row's figures from its audit's result and its runs' seconds (`s_per_run`: their mean)."""
    result = done.result
    attacks = result.attacks
    best = max(attacks, key=lambda a: attacks[a]["auc"])
    verdict, found, own = result.verdict, result.bound or {}, result.own_curve
    return {
        "row": row,
        "victim": result.victim,
        "formal_epsilon": result.formal_epsilon,
        "test_accuracy": result.utility["test_accuracy"],
        "marginal_tv_2way": result.utility.get("marginal_tv_2way"),
        "best_attack": best,
        "auc": attacks[best]["auc"],
        "tpr_at_1pct": attacks[best]["tpr_at_fpr"]["0.01"],
        "fp_at_1pct": attacks[best]["fp_at_fpr"]["0.01"],
        "verdict": verdict.kind if verdict else None,
        "eps_lower": found.get("eps_lower"),
        "verdict_attack": found.get("attack"),
        "own_curve_rejected": None if own is None else own["rejected"],
        "own_curve_eps_lower": None if own is None else own["eps_lower"],
        "s_per_run": sum(done.run_seconds) / len(done.run_seconds),
        "wall_s": done.wall_s,
    }


def markdown(f: dict) -> str:
    formal = "none" if f["formal_epsilon"] is None else f"{f['formal_epsilon']:.3g}"
    tv = "" if f["marginal_tv_2way"] is None else f"{f['marginal_tv_2way']:.3f}"
    own = (
        ""
        if f["own_curve_rejected"] is None
        else (f"{'rejected' if f['own_curve_rejected'] else 'not rejected'}, ε ≥ {f['own_curve_eps_lower']:.2f}")
    )
    verdict = f"{f['verdict']}, ε ≥ {f['eps_lower']:.2f} ({f['verdict_attack']})" if f["eps_lower"] is not None else ""
    return (
        f"| {f['row']} | {formal} | {f['test_accuracy']:.3f} | {tv} | {f['best_attack']} {f['auc']:.3f} | "
        f"{f['tpr_at_1pct']:.3f} ({f['fp_at_1pct']} FP) | {verdict} | {own} | {f['s_per_run']:.2f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    p.add_argument("--dataset", default="fair")
    p.add_argument("--n-shadow", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="audit each row with master seeds SEED .. SEED + SEEDS - 1")
    p.add_argument("--runs-dir", type=Path, default=None)
    p.add_argument("--jsonl", type=Path, default=None)
    args = p.parse_args()
    print("| row | formal ε | test acc | 2-way TV | best attack, AUC | TPR@1%FPR | verdict | own curve | s/run |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        for row in args.rows:
            found = [one_row(row, args, runs_dir, seed) for seed in range(args.seed, args.seed + args.seeds)]
            if args.seeds > 1:
                print(over_seeds(row, found), flush=True)


def one_row(row: str, args: argparse.Namespace, runs_dir: Path, seed: int) -> dict:
    """Audit `row` with master seed `seed` in its own store; print and keep its figures."""
    where = runs_dir / row / f"seed-{seed}"
    where.mkdir(parents=True, exist_ok=True)
    done = audit(ROWS[row], dataset=args.dataset, n_shadow=args.n_shadow, seed=seed, runs_dir=where)
    figures = {**row_figures(row, done), "n_shadow": args.n_shadow, "seed": seed}
    print(markdown(figures), flush=True)
    if args.jsonl:
        with args.jsonl.open("a") as f:
            f.write(json.dumps(figures) + "\n")
    return figures


def over_seeds(row: str, found: list[dict]) -> str:
    """One line: how many seeds were violated (ε verdict, own curve), and the bounds' median and range."""
    bounds = sorted(f["eps_lower"] for f in found)
    violated = sum(f["verdict"] == "epsilon_violated" for f in found)
    own = [f["own_curve_rejected"] for f in found if f["own_curve_rejected"] is not None]
    return (
        f"{row}: violated in {violated}/{len(found)} seeds, own curve rejected in {sum(own)}/{len(own)}; "
        f"verdict's bound median {statistics.median(bounds):.2f} (min {bounds[0]:.2f}, max {bounds[-1]:.2f})"
    )


if __name__ == "__main__":
    main()
