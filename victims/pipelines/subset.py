"""`subset`: a random real subset of `ipc` member images per class, the naive baseline any synthetic
release of k images per class has to beat. The chosen images are the release and its `init_idx`.
`check` refuses an `ipc` a run could plausibly not supply, and a run short of members of a class
raises ValueError (`victims.condensation.condense`) rather than release an unbalanced subset."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from victims.base import DEFAULT_INCLUSION_RATE, Observations, observe, register_victim, require_at_least, seeded
from victims.condensation.condense import check_ipc, require_members_per_class
from victims.pool import Pool
from victims.packed import PacksRuns, observe_packed
from victims.pipelines.real import fit_on_pool, fit_packed_on_pool
from victims.synthetic import ReleasesData
from victims.train import TrainConfig, small_set_training


@register_victim("subset")
@dataclass(frozen=True)
class SubsetVictim(PacksRuns, ReleasesData):
    """The downstream ConvNet trained on `ipc` member images per class, drawn at random."""

    ipc: int = field(default=10, metadata={"help": "images per class in the released subset"})
    train: TrainConfig = field(default_factory=small_set_training)

    def __post_init__(self) -> None:
        require_at_least(self, {"ipc": 1})

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        check_ipc(self.ipc, pool, inclusion_rate)

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        """One run (`inclusion_rate` is unused); a class with fewer than `ipc` members raises ValueError."""
        chosen = self.choose(pool, keep, seed)
        with seeded(seed, device) as generator:
            model = fit_on_pool(pool, chosen, config=self.train, generator=generator, device=device)
            return observe(
                model, pool, device=device, init_idx=chosen, release_x=pool.x[chosen], release_y=pool.y[chosen]
            )

    def pack_runs(
        self, pool: Pool, keeps: np.ndarray, seeds: list[int], *, device: str, inclusion_rate: float
    ) -> list[Observations]:
        """The K downstream ConvNets trained together and observed together."""
        chosen = [self.choose(pool, keep, seed) for keep, seed in zip(keeps, seeds)]
        models = fit_packed_on_pool(pool, chosen, list(seeds), config=self.train, device=device)
        extras = [dict(init_idx=c, release_x=pool.x[c], release_y=pool.y[c]) for c in chosen]
        return observe_packed(models, pool, device=device, extras=extras)

    def choose(self, pool: Pool, keep: np.ndarray, seed: int) -> np.ndarray:
        """The released subset of one run: `ipc` members of each class, drawn from `seed`."""
        require_members_per_class(self.ipc, pool, keep)
        rng = np.random.default_rng(seed)
        return np.sort(
            np.concatenate(
                [
                    rng.choice(np.flatnonzero(keep & (pool.y == c)), size=self.ipc, replace=False)
                    for c in range(pool.n_classes)
                ]
            )
        )
