"""A tiny table synthesizer run as a command, batched or not (docs/contracts.md, "A pipeline as a
command"): tests/victims/test_batched_command.py audits with it, bench/batched_command.py times it.

Each column's counts among the members plus Laplace noise (scale: the columns over MIA_EPSILON, 1 if not
given), sampled column by column, MIA_EXPECTED_MEMBERS rows, every draw from numpy's generator seeded by
the seed alone: a seed's release is the same whether it is fitted alone or in a batch. Not DP (the
categories are read from the rows): a fit to time and to test the protocol with, not a pipeline to audit.

    python marginals_command.py [--fail-seed S] [--bad-seed S] [--hang-seed S] [--calls DIR] [--cells SIGMA]

With MIA_JOBS set (a pipeline with `batch = K`) it fits every job of that list in order; else the one
seed of MIA_MEMBERS, MIA_SEED and MIA_OUT. `--fail-seed`: exit 1 on that seed (before writing it);
`--bad-seed`: write that seed's release without its first column, then go on; `--hang-seed`: sleep on
that seed until killed; `--calls DIR`: write DIR/<pid>.json, the seeds this call fitted; `--cells SIGMA`:
also write a claim with every column's counts over the schema's categories (MIA_SCHEMA) plus N(0, SIGMA²),
as `measurements_cells` (what a white-box audit of a command reads, victims/command_whitebox.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd


def fit(members: str, seed: int, out: str, *, rows: int, epsilon: float) -> None:
    """The release of one seed (module docstring), written to `out`."""
    frame = pd.read_csv(members, keep_default_na=False, dtype=str)
    rng = np.random.default_rng(seed)
    released = {}
    for name in frame.columns:
        values, counts = np.unique(frame[name].to_numpy(), return_counts=True)
        noisy = np.clip(counts + rng.laplace(scale=len(frame.columns) / epsilon, size=len(counts)), 0, None) + 1e-9
        released[name] = rng.choice(values, size=rows, p=noisy / noisy.sum())
    pd.DataFrame(released).to_csv(out, index=False)


def text(value) -> str:
    """A schema category as the members' CSV holds it (22.0 -> "22")."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def write_cells(members: str, seed: int, claim: str, *, sigma: float) -> None:
    """The claim of `--cells` (module docstring), from its own stream of the seed."""
    frame = pd.read_csv(members, keep_default_na=False, dtype=str)
    schema = json.loads(Path(os.environ["MIA_SCHEMA"]).read_text())
    rng = np.random.default_rng([seed, 1])
    cells = []
    for column in schema["columns"]:
        categories = [text(v) for v in column["categories"]]
        counts = frame[column["name"]].value_counts().reindex(categories, fill_value=0).to_numpy()
        noisy = counts + rng.normal(0.0, sigma, size=len(counts))
        cells.append({"columns": [column["name"]], "sigma": sigma, "noisy": noisy.tolist()})
    Path(claim).write_text(json.dumps({"measurements_cells": cells}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("--fail-seed", "--bad-seed", "--hang-seed"):
        parser.add_argument(flag, type=int, default=None)
    parser.add_argument("--calls", type=Path, default=None)
    parser.add_argument("--cells", type=float, default=None)
    args = parser.parse_args()
    if "MIA_JOBS" in os.environ:
        jobs = json.loads(Path(os.environ["MIA_JOBS"]).read_text())
    else:
        jobs = [
            {
                "seed": int(os.environ["MIA_SEED"]),
                "members": os.environ["MIA_MEMBERS"],
                "out": os.environ["MIA_OUT"],
                "claim": os.environ.get("MIA_CLAIM"),
            }
        ]
    if args.calls is not None:
        (args.calls / f"{os.getpid()}.json").write_text(json.dumps([job["seed"] for job in jobs]))
    rows = int(round(float(os.environ["MIA_EXPECTED_MEMBERS"])))
    epsilon = float(os.environ.get("MIA_EPSILON", "1"))
    for job in jobs:
        seed = job["seed"]
        print(f"fitting seed {seed}", flush=True)
        if seed == args.hang_seed:
            time.sleep(3600)
        if seed == args.fail_seed:
            sys.exit(f"diverged on seed {seed}")
        fit(job["members"], seed, job["out"], rows=rows, epsilon=epsilon)
        if args.cells is not None:
            write_cells(job["members"], seed, job["claim"], sigma=args.cells)
        if seed == args.bad_seed:
            frame = pd.read_csv(job["out"], keep_default_na=False, dtype=str)
            frame.iloc[:, 1:].to_csv(job["out"], index=False)


if __name__ == "__main__":
    main()
