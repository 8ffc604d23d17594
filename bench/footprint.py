"""Memory a packing victim needs per run in a pack: what `audit.placement` sizes a GPU's packs by.

    python bench/footprint.py [--victims psg real subset dm] [--datasets digits mnist5k] [--packs 2 8]
                              [--device cpu|cuda]

For each victim and dataset, one pack of each size K in a fresh process (the victim's `run_packed`
through `audit.executor.run_victims`, as a Ray task runs it), and the peak memory of that process:
on cuda `torch.cuda.max_memory_allocated`, on cpu the peak resident set (`ru_maxrss`). The footprint
per run is the growth between the two pack sizes over the runs added, so what every process pays
once (torch, the pool, CUDA's context) cancels. A pack's memory does not depend on how many steps it
takes (the same tensors every step), so the victims run short (SHORT: a few steps of every loop).
Prints one JSON line per victim and dataset.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

#: every loop of the victim a few steps long: the same tensor shapes as at its defaults
SHORT = {
    "psg": {"restarts": 1, "outer": 2, "inner": 1, "batches": 1, "train__steps": 3},
    "real": {"train__steps": 3},
    "subset": {"train__steps": 3},
    "dm": {"iterations": 2, "train__steps": 3},
}


def peak_mib(victim: str, dataset: str, k: int, device: str) -> float:
    """Peak memory (MiB) of one pack of K runs of `victim`, in this process."""
    import torch

    from audit.executor import RunTask, run_victims
    from shadow_runs.plan import membership_matrix, run_seed
    from victims import load_pool
    from victims.overrides import build_victim

    pool = load_pool(dataset)
    keeps = membership_matrix(pool.y, n_runs=k, master_seed=0)
    tasks = [RunTask(run=r, seed=run_seed(master_seed=0, run=r), keep=keeps[r]) for r in range(k)]
    run_victims(build_victim(victim, SHORT.get(victim, {})), pool, tasks, device=device)
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victims", nargs="+", default=list(SHORT))
    p.add_argument("--datasets", nargs="+", default=["digits", "mnist5k"])
    p.add_argument("--packs", type=int, nargs=2, default=[2, 8], metavar=("K1", "K2"))
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--one", nargs=3, metavar=("VICTIM", "DATASET", "K"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        victim, dataset, k = args.one
        print(peak_mib(victim, dataset, int(k), args.device))
        return
    k1, k2 = args.packs
    for dataset in args.datasets:
        for victim in args.victims:
            peaks = [
                float(
                    subprocess.run(
                        [sys.executable, __file__, "--device", args.device, "--one", victim, dataset, str(k)],
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout.split()[-1]
                )
                for k in (k1, k2)
            ]
            row = {
                "victim": victim,
                "dataset": dataset,
                "device": args.device,
                "peak_mib": [round(m) for m in peaks],
                "packs": [k1, k2],
                "mib_per_run": round((peaks[1] - peaks[0]) / (k2 - k1), 1),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
