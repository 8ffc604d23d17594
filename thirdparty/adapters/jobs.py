"""The seeds of one call, for an adapter whose pipeline declares `batch = K` (docs/contracts.md,
"Batched commands"): the library is imported once, then each seed is fitted as in a call of its own.

`each_job()` yields once per job of MIA_JOBS, in order, with MIA_SEED, MIA_MEMBERS, MIA_OUT and
MIA_CLAIM set to that job's (once, as it is, without MIA_JOBS). Nothing here imports the suite.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

#: a job's key -> the variable an unbatched call is handed it in
PER_JOB = {"seed": "MIA_SEED", "members": "MIA_MEMBERS", "out": "MIA_OUT", "claim": "MIA_CLAIM"}


def each_job() -> Iterator[str | None]:
    """Each job's seed (as text) in turn, the MIA_* variables set to that job's (module docstring)."""
    path = os.environ.get("MIA_JOBS")
    if path is None:
        yield os.environ.get("MIA_SEED")
        return
    with open(path) as f:
        jobs = json.load(f)
    for job in jobs:
        os.environ.update({variable: str(job[key]) for key, variable in PER_JOB.items()})
        yield str(job["seed"])
