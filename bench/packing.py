"""Packed shadow runs against one run per task: seconds per run of a victim's `run` (one run at a
time) and of its `run_packed` (K runs in one stacked training), one torch thread, warm.

    python bench/packing.py [--victims real subset] [--packs 2 4 8] [--repeats 2] [--device cpu]
    python bench/packing.py --memory [--victims real subset] [--packs 1 4 8] [--device cpu]

Prints, per victim and K, seconds per run unpacked and packed, their ratio (packed throughput over
unpacked), the largest logit difference between a packed run and the same run unpacked and, for
scale, between an unpacked run on one torch thread and the same run on two (another summation
order that nobody calls a different result). With --memory, instead: the peak memory one task
adds while it trains K runs packed (K = 1: one run alone), in a fresh process per cell, divided
by K (CPU: the peak resident set above the one after loading; GPU: torch's peak allocation).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from shadow_runs.plan import membership_matrix, run_seed
from victims import get_victim, load_pool


def seconds_per_run(fn, n_runs: int, repeats: int) -> tuple[float, list]:
    """Median over `repeats` of fn()'s wall time divided by `n_runs`, and fn()'s last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / n_runs)
    return statistics.median(times), result


MEMORY_PROBE = """
import resource, sys, numpy as np, torch
from shadow_runs.plan import membership_matrix, run_seed
from victims import get_victim, load_pool
torch.set_num_threads(1)
name, k, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pool = load_pool("digits")
keeps = membership_matrix(pool.y, n_runs=k, master_seed=0)
seeds = [run_seed(master_seed=0, run=r) for r in range(k)]
victim = get_victim(name)()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if k == 1:
    victim.run(pool, keeps[0], seeds[0], device=device)
else:
    victim.run_packed(pool, keeps, seeds, device=device)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
gpu = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
print((after - before) / 1024, gpu)
"""


def memory(victims: list[str], packs: list[int], device: str) -> None:
    import subprocess
    import sys

    print("| victim | K | peak MiB added per run (CPU resident) | peak MiB per run (GPU allocated) |")
    print("|---|---|---|---|")
    for name in victims:
        for k in packs:
            out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, name, str(k), device], capture_output=True,
                                 text=True, check=True).stdout.split()
            cpu, gpu = float(out[0]), float(out[1])
            print(f"| {name} | {k} | {cpu / k:.1f} | {gpu / k:.1f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victims", nargs="+", default=["real", "subset"])
    p.add_argument("--packs", nargs="+", type=int, default=[2, 4, 8])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--memory", action="store_true", help="peak memory per run instead of time")
    args = p.parse_args()
    if args.memory:
        memory(args.victims, args.packs, args.device)
        return
    torch.set_num_threads(1)
    pool = load_pool("digits")
    print("| victim | K | s/run unpacked | s/run packed | packed/unpacked throughput | max logit diff packed "
          "| max logit diff 2 threads |")
    print("|---|---|---|---|---|---|---|")
    for name in args.victims:
        victim = get_victim(name)()
        for k in args.packs:
            keeps = membership_matrix(pool.y, n_runs=k, master_seed=0)
            seeds = [run_seed(master_seed=0, run=r) for r in range(k)]
            victim.run(pool, keeps[0], seeds[0], device=args.device)  # warm-up
            single, alone = seconds_per_run(
                lambda: [victim.run(pool, keep, seed, device=args.device) for keep, seed in zip(keeps, seeds)],
                k, args.repeats)
            packed, together = seconds_per_run(lambda: victim.run_packed(pool, keeps, seeds, device=args.device),
                                               k, args.repeats)
            diff = max(float(np.abs(a.logits - b.logits).max()) for a, b in zip(alone, together))
            torch.set_num_threads(2)
            two = victim.run(pool, keeps[0], seeds[0], device=args.device)
            torch.set_num_threads(1)
            threads = float(np.abs(two.logits - alone[0].logits).max())
            print(f"| {name} | {k} | {single:.2f} | {packed:.2f} | {single / packed:.2f}x | {diff:.1e} | {threads:.1e} |",
                  flush=True)


if __name__ == "__main__":
    main()
