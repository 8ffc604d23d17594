"""`tabular-subset` and `tabular-real`: the two references every tabular release is set against.
`tabular-subset` releases `rows` random member records (the naive baseline, its rows the run's
`init_idx`); `tabular-real` releases every member (the upper reference). Neither has a formal
claim. A run with fewer than `rows` members releases them all."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from victims.base import register_victim
from victims.pool import Pool
from victims.tabular.release import Released, TableRelease


@register_victim("tabular-subset")
@dataclass(frozen=True)
class TabularSubset(TableRelease):
    """`rows` member records drawn at random: the naive baseline."""

    def release(self, pool: Pool, keep: np.ndarray, seed: int, *, inclusion_rate: float) -> Released:
        members = np.flatnonzero(keep)
        rng = np.random.default_rng(seed)
        chosen = np.sort(rng.choice(members, size=min(self.rows, len(members)), replace=False))
        return Released(pool.x[chosen], pool.y[chosen], {"init_idx": chosen})


@register_victim("tabular-real")
@dataclass(frozen=True)
class TabularReal(TableRelease):
    """Every member record (`rows` is unused): the upper reference."""

    def release(self, pool: Pool, keep: np.ndarray, seed: int, *, inclusion_rate: float) -> Released:
        members = np.flatnonzero(keep)
        return Released(pool.x[members], pool.y[members], {"init_idx": members})
