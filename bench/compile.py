"""What `--compile on` buys per run, and what it costs once per worker: N runs of a victim in one
process on one torch thread (as in a Ray worker), eager and then compiled, each mode in a fresh
process with an empty inductor cache (a cold compile, as a fresh machine pays it).

    python bench/compile.py --victims real subset dm psg --dataset digits --runs 4
    python bench/compile.py --victims real subset dm --dataset mnist5k --runs 3

Prints, per victim and mode, every run's wall time, the first run, the steady time (median of the
runs after the first) and the compile overhead (first compiled run minus the steady compiled
time, less the eager first run's own warm-up over its steady time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(victim: str, dataset: str, runs: int, compiled: bool, flags: dict) -> list[float]:
    import torch

    from shadow_runs import membership_matrix
    from victims import get_victim, load_pool
    from victims.compiled import compiled_steps

    torch.set_num_threads(1)
    pool = load_pool(dataset)
    plan = membership_matrix(pool.y, n_runs=runs, master_seed=0)
    model = get_victim(victim)(**flags)
    times = []
    with compiled_steps(compiled):
        for r in range(runs):
            start = time.perf_counter()
            model.run(pool, plan[r], r)
            times.append(time.perf_counter() - start)
    return times


def measure(victim: str, dataset: str, runs: int, compiled: bool, flags: dict) -> list[float]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
        args = json.dumps([victim, dataset, runs, compiled, flags])
        out = subprocess.run(
            [sys.executable, __file__, "--worker", args], env=env, capture_output=True, text=True, check=True
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--victims", nargs="+", default=["real", "subset", "dm", "psg"])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--flags", default="{}", help='JSON of victim fields, e.g. \'{"preset": "faithful"}\'')
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(*json.loads(args.worker))))
        return
    flags = json.loads(args.flags)
    print(f"{args.dataset}, {args.runs} runs per process, one thread; seconds")
    print("| victim | mode | runs | first | steady (median after the first) |")
    print("|---|---|---|---|---|")
    for victim in args.victims:
        results = {}
        for compiled in (False, True):
            times = measure(victim, args.dataset, args.runs, compiled, flags)
            steady = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else float("nan")
            results[compiled] = (times[0], steady)
            mode = "compiled" if compiled else "eager"
            print(f"| {victim} | {mode} | {' '.join(f'{t:.2f}' for t in times)} | {times[0]:.2f} | {steady:.2f} |")
        (e_first, e_steady), (c_first, c_steady) = results[False], results[True]
        overhead = (c_first - c_steady) - (e_first - e_steady)
        print(
            f"| {victim} | compiled / eager | | compile overhead {overhead:.1f} s | "
            f"steady speed-up {e_steady / c_steady:.2f}x |"
        )


if __name__ == "__main__":
    main()
