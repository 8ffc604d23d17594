"""Cheap runs of a command victim: one call per seed against calls of K seeds (a pipeline's `batch = K`,
docs/contracts.md "Batched commands"; figures in docs/results/third-party.md, "Batched calls").

    python bench/batched_command.py [--pipeline FILE.toml] [--set NAME VALUE ...] [--rows 1000] [--seeds 16]
                                    [--batch 8] [--workers 2] [--epsilon 1] [--delta 1e-5]

Without `--pipeline` it times tests/victims/marginals_command.py (a tiny synthesizer: pandas and numpy
its import, a noisy marginal per column its fit) under this interpreter. The table is bench/third_party.py's
cut of fair (`--rows` records); `--set NAME VALUE` sets the value after --NAME in the pipeline's command
(`--set n-iters 100`: a cheaper fit than the file's). The members of seed r are run r's of an
independent plan, handed as the audit hands them (`victims.command_jobs.run_jobs`, the members' CSVs
written per call).

Prints the seconds of a call of 1 seed and of a call of K seeds, alone (the median of `--repeats`), the
start-and-import and per-fit seconds they imply (a call of k seeds takes import + k x fit), then
`--seeds` seeds fitted on `--workers` processes at once, one call per seed against calls of K: wall
seconds and fits per hour. Each seed's release is compared between the two (`same releases`): a
batched call must give each seed the release its own call gives.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from third_party import write_cut  # bench/third_party.py, beside this script
from shadow_runs.plan import membership_matrix, run_seed
from victims.base import expected_members
from victims.command_jobs import run_jobs
from victims.command_pipeline import load_pipeline
from victims.data import load_pool

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "victims" / "marginals_command.py"


def tiny_pipeline(directory: Path) -> Path:
    """A pipeline file running marginals_command.py with this interpreter."""
    toml = directory / "marginals.toml"
    toml.write_text(f'kind = "table"\ncommand = ["{sys.executable}", "{TINY}"]\nbatch = 1\n')
    return toml


def with_args(command: tuple[str, ...], pairs: list[list[str]]) -> tuple[str, ...]:
    """`command` with the value after each --NAME of `pairs` set to its VALUE."""
    command = list(command)
    for name, value in pairs:
        if f"--{name}" not in command[:-1]:
            raise SystemExit(f"batched_command.py: error: --set {name}: the command has no --{name} ({command})")
        command[command.index(f"--{name}") + 1] = value
    return tuple(command)


def call(spec, pool, keeps, seeds, shared) -> tuple[float, list[np.ndarray]]:
    """One call on `seeds`: its seconds (the command's, from start to exit) and each seed's release."""
    with tempfile.TemporaryDirectory(prefix="bench-batched-") as tmp:
        fitted, ended = run_jobs(spec, pool, keeps, seeds, shared, directory=Path(tmp))
    return ended.seconds, [x for x, _, _ in fitted]


def fitted_all(spec, pool, keeps, seeds, shared, *, per_call: int, workers: int) -> tuple[float, list[np.ndarray]]:
    """Every seed, in calls of `per_call` seeds, `workers` calls at once: the wall seconds and the releases."""
    groups = [range(i, min(i + per_call, len(seeds))) for i in range(0, len(seeds), per_call)]
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool_of_calls:
        done = list(
            pool_of_calls.map(lambda g: call(spec, pool, keeps[list(g)], [seeds[i] for i in g], shared), groups)
        )
    return time.perf_counter() - start, [x for _, releases in done for x in releases]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pipeline", type=Path, default=None, help="a pipeline file (default: marginals_command.py)")
    p.add_argument("--set", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    p.add_argument("--rows", type=int, default=1000, help="records of the cut of fair")
    p.add_argument("--seeds", type=int, default=16, help="seeds fitted each way")
    p.add_argument("--batch", type=int, default=8, help="K: seeds per batched call")
    p.add_argument("--workers", type=int, default=2, help="calls at once")
    p.add_argument("--repeats", type=int, default=3, help="calls timed alone, each size")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        toml = args.pipeline or tiny_pipeline(Path(scratch))
        spec = load_pipeline(str(toml))
        spec = dataclasses.replace(spec, batch=args.batch, command=with_args(spec.command, args.set))
        pool = load_pool(str(write_cut(Path(scratch) / "cut", args.rows)))
        keeps = membership_matrix(pool.y, n_runs=args.seeds, master_seed=0)
        seeds = [run_seed(master_seed=0, run=r) for r in range(args.seeds)]
        shared = {"kind": "table", "expected_members": repr(expected_members(pool))}
        shared |= {"epsilon": repr(args.epsilon), "delta": repr(args.delta)}
        print(" ".join(spec.command))
        print(
            f"pipeline {toml.name}, {pool.n_pool} rows, {args.seeds} seeds, batch {args.batch}, {args.workers} workers"
        )
        one = statistics.median(call(spec, pool, keeps[:1], seeds[:1], shared)[0] for _ in range(args.repeats))
        many = statistics.median(
            call(spec, pool, keeps[: args.batch], seeds[: args.batch], shared)[0] for _ in range(args.repeats)
        )
        fit = (many - one) / (args.batch - 1)
        print(f"a call of 1 seed {one:.2f} s, of {args.batch} seeds {many:.2f} s alone (median of {args.repeats})")
        print(f"-> start and import {one - fit:.2f} s, fit {fit:.2f} s per seed")
        results = {}
        for name, per_call in (("one call per seed", 1), (f"calls of {args.batch} seeds", args.batch)):
            wall, releases = fitted_all(spec, pool, keeps, seeds, shared, per_call=per_call, workers=args.workers)
            results[name] = releases
            print(f"{name:>20}: {wall:7.1f} s wall, {args.seeds / wall * 3600:8.0f} fits per hour")
        first, second = results.values()
        print(f"same releases: {all(np.array_equal(a, b) for a, b in zip(first, second))}")


if __name__ == "__main__":
    main()
