"""A batched command (`batch = K` in its pipeline file): up to K seeds fitted in one call, so a library
that takes seconds to import pays it once for K releases (docs/contracts.md, "A pipeline as a command").

A call's temporary directory holds `jobs.json` ({jobs}, MIA_JOBS): a JSON list with one object per seed,
`{"seed": s, "members": path, "out": path, "claim": path}`, each job's files in a folder of its own
(job-0/, job-1/, ...); the values every seed shares ({epsilon}, {delta}, {expected_members}, {schema},
{kind}) are handed as to an unbatched command. The command writes each job's release to its `out` (its
claim, optionally, to its `claim`), fitting the jobs in the list's order, and exits 0 within K x timeout_s.

A failure names the seed it is about (`SeedFailed.runs`: its place in the pack): the first job without a
release where the command exited non-zero or ran out of time (the seed it was on), the job whose release
is missing or malformed where it exited 0, and every seed of the call only where it failed after writing
all K releases.
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
