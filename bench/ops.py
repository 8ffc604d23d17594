"""Operators dispatched per run: one pack of K runs (`run_packed`) against one run (`run`), counted
on the CPU. On a GPU a run is host-bound (each dispatched operator costs tens of µs of host time
whatever its size), so operators per run is what a pack must cut for a GPU to train more runs an
hour; the count needs no GPU.

    python bench/ops.py [--victim real] [--packs 1 16 64] [--dataset digits] [victim flags]
    python bench/ops.py --victim psg --packs 1 16 --preset faithful --restarts 8

Every operator that reaches torch's dispatcher is counted (a `TorchDispatchMode` that counts and
calls through, so composite operators count once per aten operator they dispatch), while the
victim trains runs 0 .. K-1 of digits' plan (master seed 0) on one torch thread. The victim flags
are those of `python -m audit.lira` (`--preset faithful`, `--train-steps 100`). Printed per K: operators
in all, per run, their ratio to K = 1 (the first K given) and seconds (the counting slows a run by
about 2x). A victim without `run_packed` is counted run by run (ratio 1).

Measured (digits): `real` 28,363 operators a run alone, 1,541 per run in a pack of 16 (0.054) and
435 in a pack of 64 (0.015); `psg` (digits preset) 31,171 alone, 4,598 per run in a pack of 8
(0.148) and 1,003 in a pack of 64 (0.032); `psg --preset faithful --restarts 8` 52,691 alone and
4,417 in a pack of 16 (0.084); `dm` 32,830 alone, 6,944 in a pack of 8 (0.212); `dsa` 138,656
and 9,338 (0.067); `kip` 72,135 and 10,011 (0.139). Before the packs were batched across the
runs (commit 215f2e8) `real` gave 3,525 (K = 16) and 1,695 (K = 64), `psg` 23,724 (K = 8) and the
faithful preset 0.84 of a run alone at K = 16, and the condensation victims, which made each
release in turn, 0.754 (dm), 0.937 (dsa) and 0.882 (kip) at K = 8. docs/performance.md,
"Operators per run".
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from audit.cli.victim_flags import add_victim_flags, victim_overrides
from shadow_runs import membership_matrix
from victims import load_pool
from victims.overrides import build_victim


class OperatorCount(TorchDispatchMode):
    """Counts the operators dispatched while it is active, and runs each as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def count(victim, pool, k: int) -> tuple[int, float]:
    """(operators, seconds) for runs 0 .. k-1 of the plan: one pack, or one run at a time."""
    keep = membership_matrix(pool.y, n_runs=k, master_seed=0)
    seeds = list(range(1, k + 1))
    counter = OperatorCount()
    start = time.perf_counter()
    with counter:
        if k > 1 and hasattr(victim, "run_packed"):
            victim.run_packed(pool, keep, seeds)
        else:
            for row, seed in zip(keep, seeds):
                victim.run(pool, row, seed)
    return counter.count, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victim", default="real")
    p.add_argument("--packs", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--dataset", default="digits")
    add_victim_flags(p)
    args = p.parse_args()
    torch.set_num_threads(1)
    given = victim_overrides(args)
    victim = build_victim(args.victim, given)
    pool = load_pool(args.dataset)
    print(f"{args.victim} on {args.dataset} ({', '.join(f'{k}={v}' for k, v in given.items()) or 'defaults'})")
    print("| K | operators | per run | ratio to the first K | seconds |")
    print("|---|---|---|---|---|")
    first = None
    for k in args.packs:
        total, seconds = count(victim, pool, k)
        first = first or total / k
        print(f"| {k} | {total:,} | {total / k:,.0f} | {total / k / first:.3f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
