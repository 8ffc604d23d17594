"""Several canaries per run against each one's separation, in the worst-case black-box design:
coins per run bought at the price of interference.

    python bench/canary_separation.py [--designs blank:1 blank:10 marked:1 marked:8 ...]
                                      [--n-shadow 128] [--epsilon 10] [--seed 0] [--runs-dir DIR]

Each design KIND:N is one store of `python -m audit.lira --victim dpsgd --epsilon E` under the
worst-case design (bench/dp_bugs.py's `WORST_CASE`: full-batch noisy gradient descent over the
100-digit pool from the pretrained start, the PRV accountant, `--epochs 10`) with N canaries of
KIND per run. For every canary, over all the store's runs (targets and references: this measures
the canaries, not an audit), the AUC of its loss on the run's final model, non-members against
members, and the separation in noise units it implies for a Gaussian pair, μ = √2 Φ⁻¹(AUC); prints
the median over the canaries with the 10th and 90th percentiles. The mechanism's own μ at ε = 10
is √10 / σ = 2.0 (σ = 1.583): one blank canary reaches it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

from dp_bugs import WORST_CASE
from timing import audit_into


def canary_separations(store: Path, n_canaries: int) -> np.ndarray:
    """μ = √2 Φ⁻¹(AUC) of the loss (view 0 of its logits) of each of the last `n_canaries` pool rows,
    the canaries, over every run of `store`."""
    keep = np.load(store / "keep.npy")
    labels = np.load(store / "pool_labels.npy")
    files = sorted((store / "runs").glob("*.npz"))
    logits = np.stack([np.load(f)["logits"][:, 0, :] for f in files]).astype(np.float64)
    keep = keep[: len(files)]
    log_p = logits - np.logaddexp.reduce(logits, axis=2, keepdims=True)
    loss = -log_p[:, np.arange(len(labels)), labels]
    found = []
    for column in range(len(labels) - n_canaries, len(labels)):
        member, nonmember = loss[keep[:, column], column], loss[~keep[:, column], column]
        auc = stats.mannwhitneyu(nonmember, member).statistic / (member.size * nonmember.size)
        found.append(np.sqrt(2) * stats.norm.ppf(np.clip(auc, 1e-6, 1 - 1e-6)))
    return np.array(found)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--designs", nargs="+", default=["blank:1", "blank:10", "marked:1", "marked:8", "marked:16"])
    p.add_argument("--n-shadow", type=int, default=128)
    p.add_argument("--epsilon", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs-dir", type=Path, default=None, help="keep the stores here (default: a temporary folder)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        print("| canaries | coins per run | μ per canary: median (10th-90th percentile) |")
        print("|---|---|---|")
        for design in args.designs:
            kind, n = design.split(":")
            where = runs_dir / f"{kind}-{n}"
            flags = ["--victim", "dpsgd", "--epsilon", f"{args.epsilon:g}", "--epochs", "10", *WORST_CASE]
            flags += ["--canaries", n, "--canary-kind", kind, "--n-shadow", str(args.n_shadow)]
            done = audit_into(where, [*flags, "--seed", str(args.seed)], show=False)
            mu = canary_separations(done.store, done.result.canaries["n"])
            print(
                f"| {n} {kind} | {n} | {np.median(mu):.2f} ({np.percentile(mu, 10):.2f}-{np.percentile(mu, 90):.2f}) |",
                flush=True,
            )


if __name__ == "__main__":
    main()
