"""Who is IN each run, which runs are targets, and each run's seed: all from (master seed, run).

Plans (docs/contracts.md, "Membership plan"): `independent-coins-v1`, every record an independent Bernoulli(q) coin per
run (IN versus OUT is add/remove of one record, the relation DP accountants certify); and `fixed-remainder-v1`, every
natural record in every run, the canaries keeping their coins (Annamalai, Ganev and De Cristofaro, USENIX Security
2024). Either way the one-run theorem holds (Steinke, Nasr and Jagielski 2023). The plan for R runs is a prefix of the
plan for more; a duplicate canary's rows share one coin. The first `n_targets` runs are targets, whose coins are the
audit's canaries; the rest are references, the only shadows.
"""

from __future__ import annotations

import numpy as np

_PLAN_STREAM, _SEED_STREAM = 0, 1  # independent SeedSequence streams under the master seed
INDEPENDENT, FIXED_REMAINDER = "independent-coins-v1", "fixed-remainder-v1"
PLAN = INDEPENDENT  # the default plan; experiment.json and summary.json record how keep.npy was drawn
#: --plan's values -> the plan each draws (its recorded name)
PLANS = {"independent": INDEPENDENT, "fixed-remainder": FIXED_REMAINDER}
#: why a fixed-remainder audit has no `natural` group (summary.json's evaluation.natural_note)
NATURAL_FIXED = "not testable: every natural record is a member of every run"
DEFAULT_INCLUSION_RATE = 0.5


def check_plan(plan: str) -> str:
    """`plan` if it is a plan's recorded name (`PLANS`), else ValueError naming it."""
    if plan not in PLANS.values():
        raise ValueError(f"membership plan {plan!r} is not one of {', '.join(PLANS.values())}")
    return plan


def natural_coins(plan: str) -> bool:
    """Whether the natural records have coins under `plan` (independent coins), rather than being
    members of every run (the fixed remainder)."""
    return check_plan(plan) == INDEPENDENT


def public_inclusion_rate(inclusion_rate: float, *, plan: str, n_natural: int, n_pool: int) -> float:
    """The rate a victim is handed as its `inclusion_rate`: the public expected member count over
    n_pool. Independent coins: q. Fixed remainder: (n_natural + q * (n_pool - n_natural)) / n_pool
    (times n_pool, the count to within one unit in the last place). `expected_class_members` is then
    exact only for a class whose share of the canary rows is its share of the pool."""
    q = check_inclusion_rate(inclusion_rate)
    if natural_coins(plan):
        return q
    return (n_natural + q * (n_pool - n_natural)) / n_pool


def check_inclusion_rate(rate: float) -> float:
    if not (isinstance(rate, (int, float)) and 0.0 < rate < 1.0):
        raise ValueError(f"--inclusion-rate {rate} must lie strictly between 0 and 1")
    return float(rate)


def membership_row(
    n_pool: int, *, master_seed: int, run: int, inclusion_rate: float = DEFAULT_INCLUSION_RATE
) -> np.ndarray:
    """bool [n_pool]: run `run`'s coins, one independent Bernoulli(inclusion_rate) per example."""
    rng = np.random.default_rng(np.random.SeedSequence([master_seed, _PLAN_STREAM, run]))
    return rng.random(n_pool) < check_inclusion_rate(inclusion_rate)


def membership_matrix(
    labels: np.ndarray,
    *,
    n_runs: int,
    master_seed: int,
    inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    record_of_row: np.ndarray | None = None,
    plan: str = PLAN,
    n_natural: int | None = None,
) -> np.ndarray:
    """bool [n_runs, n_pool]: keep[r, i] is True when row i is a member of run r (`labels` only fixes n_pool).
    `record_of_row` (int [n_pool]) ties a record's rows to one coin per run (None: a record per row). Under the fixed
    remainder the first `n_natural` records are in every run."""
    if n_runs < 1:
        raise ValueError(f"n_runs must be >= 1, got {n_runs}")
    n_pool = len(labels)
    record = None if record_of_row is None else _check_records(record_of_row, n_pool)
    n_records = n_pool if record is None else (int(record.max()) + 1 if record.size else 0)
    coins = np.stack(
        [
            membership_row(n_records, master_seed=master_seed, run=r, inclusion_rate=inclusion_rate)
            for r in range(n_runs)
        ]
    )
    if not natural_coins(plan):
        if n_natural is None or not 0 <= n_natural < n_records:
            raise ValueError(
                f"plan {plan} needs canary records beside the natural ones: n_natural {n_natural} of "
                f"{n_records} records"
            )
        coins[:, :n_natural] = True
    return coins if record is None else coins[:, record]


def _check_records(record_of_row, n_pool: int) -> np.ndarray:
    record = np.asarray(record_of_row)
    if record.shape != (n_pool,) or (record.size and record.dtype.kind not in "iu"):
        raise ValueError(f"record_of_row must be integers of shape ({n_pool},), got {record.dtype} {record.shape}")
    record = record.astype(np.int64)
    if record.size and (record.min() < 0 or np.unique(record).size != record.max() + 1):
        raise ValueError("record_of_row must number the records 0 .. n_records - 1, each with at least one row")
    return record


def run_seed(*, master_seed: int, run: int) -> int:
    """The seed of run `run`: a 31-bit integer drawn from (master seed, run)."""
    return int(np.random.SeedSequence([master_seed, _SEED_STREAM, run]).generate_state(1)[0] >> 1)


def default_targets(n_runs: int) -> int:
    """R/2 (at least 1) targets, the rest references (docs/results/reference-runs.md, "How many targets")."""
    return max(1, n_runs // 2)


def target_runs(n_runs: int, n_targets: int) -> np.ndarray:
    """The target runs 0 .. n_targets - 1; at least one run must stay a reference (a shadow)."""
    if not 1 <= n_targets <= n_runs - 1:
        raise ValueError(
            f"--n-targets {n_targets} must be between 1 and {n_runs - 1} (--n-shadow {n_runs} "
            f"less at least one reference run)"
        )
    return np.arange(n_targets)


def shadow_mask(n_runs: int, targets) -> np.ndarray:
    """bool [T, R]: each target's shadows are the reference runs (every run that is not a target), so
    the guesses are a function of public coins and the targets' outputs only."""
    targets = np.asarray(targets, dtype=np.int64)
    if targets.size and (targets.min() < 0 or targets.max() >= n_runs):
        raise ValueError(f"targets must lie in [0, {n_runs}), got {targets.tolist()}")
    references = np.ones(n_runs, dtype=bool)
    references[targets] = False
    if not references.any():
        raise ValueError(f"no reference run is left among {n_runs} runs with targets {targets.tolist()}")
    return np.broadcast_to(references, (len(targets), n_runs)).copy()
