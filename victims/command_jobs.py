"""A batched command (`batch = K` in its pipeline file): up to K seeds fitted in one call, so a slow
import is paid once for K releases (docs/contracts.md, "Batched commands").

`jobs.json` ({jobs}, MIA_JOBS) lists `{"seed", "members", "out", "claim"}` per seed, each job in a
folder of its own; shared values are handed as to an unbatched command. A failure names the seed
it is about (`SeedFailed.runs`), and every seed of the call only where it failed after writing all
K releases.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from victims.base import RunError
from victims.command_pipeline import (
    Ended,
    PipelineFile,
    failure,
    job_files,
    read_claim,
    read_release,
    run_process,
    schema_file,
)
from victims.pool import Pool

#: (release x, release y, claim or None) of one job
Fitted = tuple[np.ndarray, np.ndarray, dict | None]


class SeedFailed(RunError):
    """A RunError about some of a pack's runs only: `runs`, their places in the pack (the executor names
    those runs alone, `audit.executor.RunFailed`)."""

    def __init__(self, message: str, *, runs: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.runs = runs


def run_jobs(
    spec: PipelineFile,
    pool: Pool,
    keeps: np.ndarray,
    seeds: list[int],
    shared: dict[str, str],
    *,
    directory: Path,
    first: int = 0,
) -> tuple[list[Fitted], Ended]:
    """One call of the command on the jobs of `seeds` (members `keeps[j]`), in `directory`: each job's
    release and claim, and how the call ended. SeedFailed (one line; `runs`: the failed seed's place, `first`
    + its job) where a seed failed (module docstring)."""
    jobs = []
    for j, (keep, seed) in enumerate(zip(keeps, seeds)):
        folder = directory / f"job-{j}"
        folder.mkdir()
        jobs.append({"seed": int(seed), **job_files(pool, np.asarray(keep, dtype=bool), folder)})
    manifest = directory / "jobs.json"
    manifest.write_text(json.dumps(jobs, indent=2) + "\n")
    values = {**shared, **schema_file(pool, directory), "jobs": str(manifest)}
    timeout_s = spec.timeout_s * len(jobs)
    ended = run_process(spec, spec.argv(values), values, log_dir=directory, timeout_s=timeout_s)
    written = [Path(job["out"]).is_file() for job in jobs]
    if ended.returncode != 0:
        limit = f"timeout_s x {len(jobs)} seeds"
        if all(written):
            raise SeedFailed(
                failure(spec, ended, timeout_s=timeout_s, limit=limit, left=f" after writing all {len(jobs)} releases"),
                runs=tuple(range(first, first + len(jobs))),
            )
        missing = written.index(False)
        left = f" with {sum(written)} of {len(jobs)} releases written, none for this seed"
        raise SeedFailed(failure(spec, ended, timeout_s=timeout_s, limit=limit, left=left), runs=(first + missing,))
    fitted = []
    for j, job in enumerate(jobs):
        try:
            release = read_release(pool, Path(job["out"]), where=spec.name, asked=f"job {j}'s out in {{jobs}}")
            fitted.append((*release, read_claim(Path(job["claim"]), where=spec.name)))
        except RunError as e:
            raise SeedFailed(str(e), runs=(first + j,)) from None
    return fitted, ended
