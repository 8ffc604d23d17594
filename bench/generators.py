"""Where the private generators sit on digits: downstream accuracy, the strongest attack, the
one-run bound against the formal ε, and the cost per run.

    python bench/generators.py [--n-shadow 32] [--runs-dir runs/generators] [--rows ...] [extra audit flags]

Rows: `dpcgan`, `psg` (spc 10), `dpkernel`, `datalens` at ε = 1 and 10, with `dpsgd` at the same
ε and `subset` (10 real images per class, the naive baseline) beside them. Each row is a full
audit in its own directory under --runs-dir (a second call re-scores from there):
`python -m audit.lira` (loss, LiRA, RMIA on the downstream ConvNet; DCR on a released set), and
for the generators also `python -m audit.ganleak` on the same runs (GAN-Leaks; the audit keeps
both commands' attacks). Printed per row: test accuracy of the downstream ConvNet (mean and sd
over runs), the attack with the highest TPR at 0.1% FPR (of those that scored every example) with
its AUC, the ε lower bound the verdict rests on (summary.json's `verdict`: paid for, never a
maximum of bounds each at 95%) with its ceiling and verdict against the formal ε, and the mean
wall time of a run in its worker.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from timing import AuditOutcome, audit_into, verdict_cells

GENERATORS = ("dpcgan", "psg", "dpkernel", "datalens")
ROWS = {  # label -> (audit flags, whether GAN-Leaks applies)
    **{
        f"{name} eps={e}": (
            [*(["--victim", name, "--epsilon", str(e)]), *(["--spc", "10"] if name == "psg" else [])],
            name != "psg",
        )
        for name in GENERATORS
        for e in (1, 10)
    },
    **{f"dpsgd eps={e}": (["--victim", "dpsgd", "--epsilon", str(e)], False) for e in (1, 10)},
    "subset ipc=10": (["--victim", "subset", "--ipc", "10"], False),
}


def audit(where: Path, flags: list[str], ganleak: bool, extra: list[str]) -> AuditOutcome:
    """`audit.lira`, then for a generator `audit.ganleak`, on one store: the last audit keeps both's attacks."""
    for command in ("lira", *(["ganleak"] if ganleak else [])):
        done = audit_into(where, [*flags, *extra], command=command)
    return done


def row(label: str, done: AuditOutcome) -> str:
    s = done.result
    attacks = s.attacks
    scored = max(a["n_members"] + a["n_nonmembers"] for a in attacks.values())
    # the strongest among the attacks that scored every example (ganleak_pbb scores a few only)
    strongest = max(
        (a for a in attacks if attacks[a]["n_members"] + attacks[a]["n_nonmembers"] == scored),
        key=lambda a: (attacks[a]["tpr_at_fpr"]["0.001"], attacks[a]["auc"]),
    )
    top = attacks[strongest]
    bound, ceiling, verdict = verdict_cells(s)  # the verdict's paid-for bound, not a max over attacks
    formal = "-" if s.formal_epsilon is None else f"{s.formal_epsilon:.2f}"
    return (
        f"| {label} | {formal} | {s.utility['test_accuracy']:.3f} ({s.utility['test_accuracy_std']:.3f}) "
        f"| {strongest} | {top['auc']:.3f} | {top['tpr_at_fpr']['0.001']:.4f} ({top['fp_at_fpr']['0.001']}) "
        f"| {bound} | {ceiling} | {verdict} | {statistics.mean(done.run_seconds):.1f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-shadow", type=int, default=32)
    p.add_argument("--runs-dir", type=Path, default=Path("runs/generators"))
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS), metavar="ROW")
    args, extra = p.parse_known_args()
    print(
        "| victim | formal eps | test acc (sd over runs) | strongest attack at 0.1% FPR | its AUC "
        "| its TPR@0.1% FPR (FP) | verdict's eps_lower (attack, rule) | its eps_ceiling | verdict | s per run |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label in args.rows:
        flags, ganleak = ROWS[label]
        where = args.runs_dir / label.replace(" ", "_").replace("=", "")
        done = audit(where, [*flags, "--n-shadow", str(args.n_shadow)], ganleak, extra)
        print(row(label, done), flush=True)


if __name__ == "__main__":
    main()
