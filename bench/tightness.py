"""How close the audit's lower bound comes to a DP pipeline's formal ε: natural examples against
each kind of canary.

    python bench/tightness.py [--n-shadow 32] [--canaries 128] [--runs-dir runs/tightness]
                              [--rows dpsgd1 dpsgd4 dpsgd10 psg10 real] [extra audit flags]

Each row is one victim; for it, one audit without canaries (the natural examples are the
guesses) and one per canary kind (`--canaries N --canary-kind K`: the N canaries are the
guesses, m = targets x N), each a full `python -m audit.lira` audit in its own directory under
--runs-dir, so a second call re-scores from there. Printed per audit: the downstream test
accuracy (what the canaries cost), the strongest attack at 0.1% FPR with its AUC, the ε lower
bound the verdict rests on (summary.json's `verdict`: the attack and guess count chosen on the
reference runs, at 95% on its own, or every attack at a split confidence; never a maximum of
bounds each at 95%) with its ceiling and the verdict against the formal ε, m and bound / ε.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from audit.result import AuditResult
from timing import audit_into, verdict_cells

ROWS = {  # label -> audit flags
    "dpsgd1": ["--victim", "dpsgd", "--epsilon", "1"],
    "dpsgd4": ["--victim", "dpsgd", "--epsilon", "4"],
    "dpsgd10": ["--victim", "dpsgd", "--epsilon", "10"],
    "psg10": ["--victim", "psg", "--epsilon", "10", "--spc", "10"],
    "real": ["--victim", "real"],
}
KINDS = ("natural", "mislabeled", "outlier", "duplicate")


def row(label: str, kind: str, s: AuditResult) -> str:
    attacks = s.attacks
    strongest = max(attacks, key=lambda a: (attacks[a]["tpr_at_fpr"]["0.001"], attacks[a]["auc"]))
    top = attacks[strongest]
    formal = s.formal_epsilon
    # the verdict's paid-for bound (duplicate canaries: one coin moves several records, none)
    bound_text, ceiling_text, verdict = verdict_cells(s)
    found = s.bound
    ratio = "-" if formal is None or not found else f"{found['eps_lower'] / formal:.3f}"
    m = s.n_canaries
    return (
        f"| {label} | {kind} | {'-' if formal is None else f'{formal:.2f}'} "
        f"| {s.utility['test_accuracy']:.3f} ({s.utility['test_accuracy_std']:.3f}) "
        f"| {strongest} | {top['auc']:.3f} | {top['tpr_at_fpr']['0.001']:.4f} ({top['fp_at_fpr']['0.001']}) "
        f"| {bound_text} | {ceiling_text} | {verdict} | {m if m is not None else '-'} | {ratio} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-shadow", type=int, default=32)
    p.add_argument("--canaries", type=int, default=128)
    p.add_argument("--runs-dir", type=Path, default=Path("runs/tightness"))
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args, extra = p.parse_known_args()
    print(
        "| victim | guesses | formal eps | test acc (sd) | strongest attack at 0.1% FPR | its AUC "
        "| its TPR@0.1% FPR (FP) | verdict's eps_lower (attack, rule) | its eps_ceiling | verdict | m "
        "| eps_lower / eps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label in args.rows:
        for kind in args.kinds:
            flags = [*ROWS[label], "--n-shadow", str(args.n_shadow)]
            if kind != "natural":
                flags += ["--canaries", str(args.canaries), "--canary-kind", kind]
            done = audit_into(args.runs_dir / f"{label}_{kind}", [*flags, *extra])
            print(row(label, kind, done.result), flush=True)


if __name__ == "__main__":
    main()
