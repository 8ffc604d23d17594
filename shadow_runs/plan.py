"""Who is IN each run, which runs are targets, and each run's seed: all from (master seed, run).

Two plans (`--plan`; `PLANS` maps the flag's values to the names experiment.json records):

- `independent-coins-v1` (the default, `PLAN`): every cell keep[r, i] is an independent
  Bernoulli(q) coin (q = 1/2 by default), drawn from (master seed, run r) only.
- `fixed-remainder-v1` (with canaries only): every natural record is a member of every run, and
  only the canary records keep their coins, the very draws of the independent plan (a run's
  stream is drawn whole, then the natural columns set True), so the canaries' coins are the same
  under both plans for one seed. IN versus OUT for a canary x is then exactly the pair of
  neighbouring data sets D and D + {x}, D the fixed natural pool: the design of Annamalai, Ganev
  and De Cristofaro (USENIX Security 2024), which shows leaks through the exact row count (a
  library that uses len(data) without noise) that independent coins hide in the count's own
  randomness. The one-run theorem behind the verdict is unchanged (Steinke, Nasr and Jagielski
  2023: any m records with independent coins, the rest of the data may be anything, here fixed).
  The natural records have no OUT coins, so they cannot be evaluated (`NATURAL_FIXED`), and a
  run's expected member count is n_natural + q * n_canary_rows (`public_inclusion_rate`).

Which to use: independent coins audit the release's privacy against a random population (the
member count as random as the records are); the fixed remainder isolates one record's effect on one
fixed data set and exposes what the exact count gives away.

Either way the plan for R runs is the first R rows of the plan for any R' > R: asking for more
runs adds rows, it never redraws old ones.

Coins are drawn per record, then expanded to the pool's rows: a record is one example, except a
duplicate canary (`victims.canaries`), whose K identical rows are one record and share one coin in
every run (`shadow_runs.records.record_of_row` gives the record of every row). Records are
numbered natural examples first (record i is row i), canaries after, and a
run's coins are the first n_records draws of its stream, so the natural examples' coins are the
same with and without canaries; without canaries (`record_of_row` None) every row is its own
record and the plan is exactly the plan of earlier versions (stores made by them stay valid).

Why independent coins: with them, "example i IN run r" versus "OUT" differs by adding or removing
the one record i, everything else about the run's member set being independent of that coin. That
is the neighbouring relation the DP accountants certify (add/remove, Poisson sampling). An earlier
plan put exactly half of every class in each run, in complementary pairs: there IN versus OUT
replaced one record by another, a comparison a mechanism may leak up to 2 epsilon about, and a
tight add/remove mechanism was declared in violation of its true epsilon almost every time
(`python -m audit.selftest` and tests/audit/test_selftest.py keep that reproduction).

Targets and references: the first `n_targets` runs are the target runs, whose coins are the
audit's canaries; the remaining runs are reference runs, whose coins are public and which alone
serve as shadows. A target is never another target's shadow, so the rule that turns a target's
observations into guesses never looks at any coin it is judged on (the condition of the one-run
theorem behind `audit.stats.epsilon`).
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
    n_pool, so that `victims.base.expected_members` (rate * n_pool) is that count and no victim
    needs to know the plan. Independent coins: q itself. Fixed remainder: (n_natural + q * (n_pool -
    n_natural)) / n_pool, every natural row a member and each canary row one with probability q
    (times n_pool, the count itself, or for a few pool sizes one unit in its last place off: no
    float rate gives 115 of 150 rows exactly). `victims.base.expected_class_members` (rate times a
    class's size) is then exact only for a class whose share of the canary rows is its share of the
    pool: class c truly expects its natural rows plus q times its canary rows."""
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
    """bool [n_runs, n_pool]: keep[r, i] is True when example (row) i is a member of run r.

    `labels` only fixes the pool size: the coins ignore the classes (a run's class counts vary).
    `record_of_row` (int [n_pool], records numbered 0 .. n_records - 1, each with a row) ties the
    rows of one record to one coin per run; None: every row is its own record. Under the fixed
    remainder (`plan`), the first `n_natural` records (the natural ones) are members of every run
    and the others, at least one, keep the coins they have under independent coins.
    """
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
    """R/2 (at least 1): half the runs are targets, the rest references. More targets put more coins
    under test, and the attacks barely weaken with fewer references (docs/results/reference-runs.md,
    "How many targets"): on 256 runs of `real` the verdict's bound rose from 4.35 (16 targets) to
    5.87 (64) and 6.22 (128) while LiRA online's AUC moved from 0.656 to 0.653; the ceiling at
    δ = 1e-5 from 8.99 to 11.07, above PSG's ε = 10."""
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
    """bool [T, R]: each target's shadows are the reference runs, i.e. every run that is not a target.

    With independent coins, the number of IN and OUT shadows of an example does not depend on
    its membership in the target, so no run needs to be left out for that reason; leaving out
    every target keeps the guesses a function of public coins and the targets' outputs only.
    """
    targets = np.asarray(targets, dtype=np.int64)
    if targets.size and (targets.min() < 0 or targets.max() >= n_runs):
        raise ValueError(f"targets must lie in [0, {n_runs}), got {targets.tolist()}")
    references = np.ones(n_runs, dtype=bool)
    references[targets] = False
    if not references.any():
        raise ValueError(f"no reference run is left among {n_runs} runs with targets {targets.tolist()}")
    return np.broadcast_to(references, (len(targets), n_runs)).copy()
