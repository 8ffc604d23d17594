"""A catalogue of DP implementation bugs the audit must flag, each a victim that differs from a
correct one in one place, audited under both threat models beside its correct twin.

    python bench/dp_bugs.py [--n-shadow 16] [--rows a b c ...] [--runs-dir runs/dp_bugs]

The bugs are the catalogue of `victims/bugs.py` (`victims.bugs.BUGS`, listed by --help), one
row each: a class loaded through the `--victim module:Class` path (`victims.bugs:NoiseForTen`)
that CLAIMS the ε of its `epsilon` field (1 here); each audit is checked against that claim
(`python -m audit.lira ... --claimed-epsilon EPS`). An accounting bug (d, g) records what its
accountant was told, so the test of the claimed mechanism's own curve checks the claim, while
training spends more.

Each row runs black-box (record canaries, mislabeled) and white-box (gradient canaries, which in
dpsgd enter as per-example gradients of 10 C before clipping) audits; row b also white-box with
mislabeled record canaries scored through their own gradients (`--threats record`). The dpsgd rows
also run black-box from the worst case (`--threats worst-case`: one blank canary per run, noisy
gradient descent over every member of a 100-digit pool from a start pretrained on the public split,
the PRV accountant, `victims/pipelines/dpsgd.py`; `worst-case-8`, `worst-case-16`, `worst-case-32`:
the same with 8, 16 or 32 marked canaries per run), e.g.
`python bench/dp_bugs.py --n-shadow 256 --rows dpsgd10 --threats worst-case`.
`--seeds S` audits each row under master seeds 0 .. S-1 (each its own store: the seed draws the
coins, the run seeds and the canaries, so only distinct seeds are replicates) and ends with a table
over the seeds: how often the claim was violated and the own curve rejected, and the own curve's ε
as a median with its 10th and 90th percentiles.
Printed per audit: the claimed ε, the verdict's bound with its ceiling (summary.json's `verdict`,
at the claim's δ), the verdict against the claim, the own-curve test where the runs record their
mechanism (whether the claimed mechanism is rejected, and the ε of the strongest member of its
family ruled out), runs and minutes. The correct twins (`dpsgd1` ... `datalens4`) are the built-in
victims at ε = 1 and 4 (dpsgd also 10), reported against their own ε.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from audit.reporting.verdict import EPSILON_VIOLATED
from audit.result import AuditResult
from timing import AuditOutcome, audit_into, verdict_word
from victims.bugs import BUGS, path_of, twin_of


#: the worst-case black-box design's training (victims/pipelines/dpsgd.py), its canaries apart
WORST_CASE = [
    *("--sampling", "full-batch", "--start", "pretrained", "--lr", "0.02", "--accountant", "prv"),
    *("--pool-per-class", "10"),
]
WORST_CASE_THREATS = ("worst-case", "worst-case-8", "worst-case-16", "worst-case-32")

# -- the catalogue --------------------------------------------------------------------------------
DPSGD_SMALL = ["--epochs", "10"]  # 100-140 steps: the catalogue's runs stay under ~5 s each
#: victim -> the catalogue's flags for it and its bugs (marginals releases a table: the fair pool)
SMALL = {"dpsgd": DPSGD_SMALL, "marginals": ["--dataset", "fair"]}
#: a table's canaries in place of the images' (victims/tabular/canaries.py): black-box, one extreme canary (affairs
#: at its public bound 60, which no fair record reaches); white-box, the marginals' gradient canaries as for images
TABLE_THREATS = {"black-box": ["--canaries", "1", "--canary-kind", "extreme"]}
BUG_EPSILON = 1.0  # the ε every bug claims here
TWINS = {  # label -> (correct victim, claimed epsilon): the built-in victims the bugs break, audited as they are
    "dpsgd1": ("dpsgd", 1.0),
    "dpsgd4": ("dpsgd", 4.0),
    "dpsgd10": ("dpsgd", 10.0),
    "dpkernel1": ("dpkernel", 1.0),
    "dpkernel4": ("dpkernel", 4.0),
    "psg1": ("psg", 1.0),
    "psg4": ("psg", 4.0),
    "dpcgan1": ("dpcgan", 1.0),
    "dpcgan4": ("dpcgan", 4.0),
    "datalens1": ("datalens", 1.0),
    "datalens4": ("datalens", 4.0),
}


def _row(what: str, victim: str, path: str, claim: float) -> tuple[str, list[str], float, str]:
    return (what, ["--victim", path, "--epsilon", f"{claim:g}", *SMALL.get(victim, [])], claim, victim)


ROWS = {  # label -> (what, victim flags, claimed epsilon, the built-in victim it is or breaks)
    **{label: _row(bug.bug_what, twin_of(bug), path_of(bug), BUG_EPSILON) for label, bug in BUGS.items()},
    **{label: _row(f"correct {victim}", victim, victim, claim) for label, (victim, claim) in TWINS.items()},
}
THREATS = {  # label -> canary flags
    "black-box": ["--canaries", "500", "--canary-kind", "mislabeled"],
    "white-box": ["--canaries", "1000", "--canary-kind", "gradient", "--threat-model", "white-box"],
    "record": ["--canaries", "500", "--canary-kind", "mislabeled", "--threat-model", "white-box"],  # dpsgd only
    # black-box from the worst case (victims/pipelines/dpsgd.py): one blank canary per run, noisy gradient descent over
    # every member of a 100-image pool (`--pool-per-class 10`) from one network pretrained on the public split;
    # dpsgd rows only
    "worst-case": [*("--canaries", "1", "--canary-kind", "blank"), *WORST_CASE],
    # the same with 8 marked canaries per run (victims/canaries.py): 8 coins a run at 96% of one canary's separation
    "worst-case-8": [*("--canaries", "8", "--canary-kind", "marked"), *WORST_CASE],
    # 16 and 32 marked canaries per run: more coins a run, each less separated (88% and 72% of one canary's,
    # bench/canary_separation.py); 32 suit a small leak read early (bench/until_decided.py, bug g)
    "worst-case-16": [*("--canaries", "16", "--canary-kind", "marked"), *WORST_CASE],
    "worst-case-32": [*("--canaries", "32", "--canary-kind", "marked"), *WORST_CASE],
}
#: the rows whose victim is dpsgd (or a bug of it): the ones the worst-case design applies to
DPSGD_ROWS = tuple(label for label, row in ROWS.items() if row[3] == "dpsgd")


def audit(where: Path, flags: list[str], claim: float) -> AuditOutcome:
    """One audit checked against `claim` (`--claimed-epsilon`); the stores of `where` share one
    pretrained start."""
    return audit_into(where, [*flags, "--claimed-epsilon", str(claim)])


def row(label: str, threat: str, done: AuditOutcome, claim: float) -> str:
    """One table row: the verdict's bound against the claim, and the claimed mechanism's own curve."""
    what, result = ROWS[label][0], done.result
    found = result.bound
    cell = f"{found['eps_lower']:.2f} ({found['attack']}) / {found['eps_ceiling']:.2f}" if found else "-"
    own = result.own_curve
    own_cell = "-"
    if own:
        outcome = "**rejected**" if own["rejected"] else "not rejected"
        own_cell = f"{outcome}; ε ≥ {own['eps_lower']:.2f} of {own['eps_claimed']:.2f}"
    return (
        f"| {label} | {what} | {threat} | {claim:g} | {cell} | {verdict_word(result)} | {own_cell} | "
        f"{result.n_shadow} | {done.wall_s / 60:.1f} |"
    )


def seeds_row(label: str, threat: str, results: list[AuditResult]) -> str:
    """One row over the seeds of an audit: how often the claim was violated and the own curve
    rejected, and the own curve's ε (the strongest member of the family ruled out) as a median with
    its 10th and 90th percentiles."""
    import numpy as np

    violated = sum(r.verdict is not None and r.verdict.kind == EPSILON_VIOLATED for r in results)
    own = [r.own_curve for r in results if r.own_curve]
    rejected = sum(o["rejected"] for o in own)
    eps = np.array([o["eps_lower"] for o in own])
    spread = f"{np.median(eps):.2f} ({np.percentile(eps, 10):.2f}-{np.percentile(eps, 90):.2f})" if own else "-"
    n = len(results)
    return f"| {label} | {threat} | {n} | {violated}/{n} | {rejected}/{len(own)} | {spread} |"


def main() -> None:
    width = max(len(path_of(bug)) for bug in BUGS.values())
    catalogue = "\n".join(f"  {label}  {path_of(bug):{width}} {bug.bug_what}" for label, bug in BUGS.items())
    p = argparse.ArgumentParser(
        description=__doc__,
        epilog=f"the bugs (victims.bugs.BUGS):\n{catalogue}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--n-shadow", type=int, default=16)
    p.add_argument("--runs-dir", type=Path, default=Path("runs/dp_bugs"))
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    p.add_argument("--threats", nargs="+", choices=THREATS, default=["black-box", "white-box"])
    p.add_argument("--seeds", type=int, default=1, help="replicates: master seeds 0 .. S-1, each in its own store")
    args = p.parse_args()
    over_seeds = []
    print(
        "| bug | what | threat model | claimed eps | verdict's bound (attack) / ceiling | verdict | own curve | runs "
        "| minutes |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label in args.rows:
        _, flags, claim, _ = ROWS[label]
        for threat in args.threats:
            if threat in WORST_CASE_THREATS and label not in DPSGD_ROWS:
                continue
            found = []
            for seed in range(args.seeds):
                # the seeds' stores side by side: a replicate takes the pretrained start of the first
                where = args.runs_dir / f"{label}_{threat}"
                canaries = (
                    TABLE_THREATS.get(threat, THREATS[threat]) if ROWS[label][3] == "marginals" else THREATS[threat]
                )
                design = [*canaries, "--n-shadow", str(args.n_shadow), "--seed", str(seed)]
                done = audit(where, [*flags, *design], claim)
                print(row(label, threat, done, claim), flush=True)
                found.append(done.result)
            if args.seeds > 1:
                over_seeds.append(seeds_row(label, threat, found))
    if over_seeds:
        print(
            "\n| bug | threat model | seeds | violated | own curve rejected | own curve's ε: median (10th-90th pct.) |"
        )
        print("|---|---|---|---|---|---|")
        print("\n".join(over_seeds))


if __name__ == "__main__":
    main()
