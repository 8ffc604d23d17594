"""The condensation victims on a GPU: downstream accuracy, seconds per run and same-seed
determinism, before a GPU audit relies on them.

    python bench/gpu_condense.py [--victims dm dsa kip] [--runs 3] [--dataset digits] [--device cuda]

For each victim and initialisation (real, random): --runs runs with the members of rows 0..runs-1
of `membership_matrix(pool.y, master_seed=0)`, timed with the device synchronised, then the last
run again with the same seed and members, compared bit for bit (release and logits). Prints one
line per victim and initialisation. On the lent GPU machine (no install): PYTHONPATH=. first.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from shadow_runs.plan import membership_matrix
from victims import get_victim, load_pool


def synchronise(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def check(name: str, init: str, pool, keep: np.ndarray, *, runs: int, device: str) -> str:
    victim = get_victim(name)(init=init)
    times, accuracies = [], []
    for seed in range(runs):
        synchronise(device)
        start = time.perf_counter()
        last = victim.run(pool, keep[seed], seed, device=device)
        synchronise(device)
        times.append(time.perf_counter() - start)
        accuracies.append(last.test_accuracy)
    again = victim.run(pool, keep[runs - 1], runs - 1, device=device)
    same = np.array_equal(again.release_x, last.release_x) and np.array_equal(again.logits, last.logits)
    difference = float(np.abs(again.release_x - last.release_x).max())
    return (
        f"{name} {init}: accuracy {np.mean(accuracies):.3f} {[round(a, 3) for a in accuracies]}  "
        f"s/run {[round(t, 2) for t in times]}  same-seed identical {same} (max release difference {difference:.2e})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victims", nargs="+", default=["dm", "dsa", "kip"])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dataset", default="digits")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = p.parse_args()
    if args.runs < 1:
        p.error(f"--runs must be >= 1, got {args.runs}")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench/gpu_condense.py: --device cuda, but torch sees no CUDA device")
    pool = load_pool(args.dataset)
    keep = membership_matrix(pool.y, n_runs=args.runs, master_seed=0)
    for name in args.victims:
        for init in ("real", "random"):
            print(check(name, init, pool, keep, runs=args.runs, device=args.device), flush=True)


if __name__ == "__main__":
    main()
