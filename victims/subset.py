"""`subset`: a random real subset of `ipc` member images per class, the naive baseline.

Any synthetic release of k images per class has to beat this at the same k to claim a privacy
gain. The chosen images are the release (stored with the run, so release-level attacks such as DCR
apply to the baseline as to every synthetic set) and are recorded as `init_idx`, so they are
audited as their own sub-group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from victims.base import Observations, observe, register_victim, require_at_least, seeded
from victims.condense import check_ipc
from victims.data import Pool
from victims.real import fit_on_pool
from victims.train import TrainConfig, small_set_training


@register_victim("subset")
@dataclass(frozen=True)
class SubsetVictim:
    """The downstream ConvNet trained on `ipc` member images per class, drawn at random."""

    ipc: int = field(default=10, metadata={"help": "images per class in the released subset"})
    train: TrainConfig = field(default_factory=small_set_training)

    def __post_init__(self) -> None:
        require_at_least(self, {"ipc": 1})

    def check(self, pool: Pool) -> None:
        check_ipc(self.ipc, pool)

    def run(self, pool: Pool, keep: np.ndarray, seed: int, *, device: str = "cpu") -> Observations:
        rng = np.random.default_rng(seed)
        chosen = np.sort(np.concatenate([
            rng.choice(np.flatnonzero(keep & (pool.y == c)), size=self.ipc, replace=False)
            for c in range(pool.n_classes)
        ]))
        with seeded(seed, device) as generator:
            model = fit_on_pool(pool, chosen, config=self.train, generator=generator, device=device)
            return observe(model, pool, device=device, init_idx=chosen,
                           release_x=pool.x[chosen], release_y=pool.y[chosen])
