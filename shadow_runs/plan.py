"""Who is IN each run, and each run's seed: both derive from (master seed, run index) only.

Runs come in complementary pairs: run 2j takes a random half of every class and run 2j+1 the
rest. So for any even number of runs every example is IN for exactly half of them, every run has
the same members per class (up to one for odd class sizes), and the plan for R runs is the first
R rows of the plan for any R' > R -- asking for more shadows adds rows, it never redraws old ones.
(The argsort-of-uniforms trick balances the columns too, but redraws every row when R grows.)
"""

from __future__ import annotations

import numpy as np

_PLAN_STREAM, _SEED_STREAM = 0, 1  # independent SeedSequence streams under the master seed


def membership_pair(labels: np.ndarray, *, master_seed: int, pair: int) -> np.ndarray:
    """bool [2, n]: a stratified random half of the pool and its complement."""
    rng = np.random.default_rng(np.random.SeedSequence([master_seed, _PLAN_STREAM, pair]))
    first = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        first[rng.permutation(members)[: len(members) // 2 + rng.integers(0, 2) * (len(members) % 2)]] = True
    return np.stack([first, ~first])


def membership_matrix(labels: np.ndarray, *, n_runs: int, master_seed: int) -> np.ndarray:
    """bool [n_runs, n_pool]: keep[r, i] is True when example i is a member of run r."""
    if n_runs < 1:
        raise ValueError(f"n_runs must be >= 1, got {n_runs}")
    pairs = [membership_pair(labels, master_seed=master_seed, pair=j) for j in range((n_runs + 1) // 2)]
    return np.concatenate(pairs)[:n_runs]


def run_seed(*, master_seed: int, run: int) -> int:
    """The seed of run `run`: a 31-bit integer drawn from (master seed, run)."""
    return int(np.random.SeedSequence([master_seed, _SEED_STREAM, run]).generate_state(1)[0] >> 1)


def shadow_mask(n_runs: int, targets) -> np.ndarray:
    """bool [T, R]: the shadows of each target run are all runs but the target and its partner.

    Leaving the partner (the complement of the target's membership) out as well keeps the number
    of IN and OUT shadows of every example independent of whether it is a member of the target:
    with all other runs as shadows, a target's members would have one IN shadow fewer than its
    non-members, and an attack could read membership off that count instead of off the model.
    """
    targets = np.asarray(targets, dtype=np.int64)
    if targets.size and (targets.min() < 0 or targets.max() >= n_runs):
        raise ValueError(f"targets must lie in [0, {n_runs}), got {targets.tolist()}")
    mask = np.ones((len(targets), n_runs), dtype=bool)
    rows = np.arange(len(targets))
    mask[rows, targets] = False
    partner = targets ^ 1
    has_partner = partner < n_runs
    mask[rows[has_partner], partner[has_partner]] = False
    return mask


def n_pairs(n_runs: int) -> int:
    """Complementary pairs among `n_runs` runs (an odd last run is a pair of its own)."""
    return (n_runs + 1) // 2


def target_runs(n_runs: int, n_targets: int) -> np.ndarray:
    """The first run of each of the first `n_targets` pairs: 0, 2, 4, ...

    One target per pair: the two runs of a pair have opposite membership for every example, so
    attacking both would count each guess twice, once as a member and once as a non-member,
    and the (target, example) trials behind a confidence bound would no longer be independent.
    """
    if not 1 <= n_targets <= n_pairs(n_runs):
        raise ValueError(f"--n-targets {n_targets} must be between 1 and the {n_pairs(n_runs)} run pairs of --n-shadow {n_runs}")
    return 2 * np.arange(n_targets)
