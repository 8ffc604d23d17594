"""`real`: the downstream ConvNet trained on all members (the upper end of leakage and utility)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from victims.base import DEFAULT_INCLUSION_RATE, Observations, observe, register_victim, seeded
from victims.pool import Pool
from victims.packed import PacksRuns, fit_packed, observe_packed
from victims.train import TrainConfig, fit, to_model_space


def training_set(pool: Pool, idx: np.ndarray, *, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The pool images `idx` in model space, with their labels."""
    return (
        to_model_space(pool.x[idx], mean=pool.mean, std=pool.std, device=device),
        torch.as_tensor(pool.y[idx], device=device),
    )


def fit_on_pool(pool: Pool, idx: np.ndarray, *, config: TrainConfig, generator: torch.Generator, device: str):
    """Train the downstream classifier on the pool images `idx`."""
    x, y = training_set(pool, idx, device=device)
    return fit(x, y, n_classes=pool.n_classes, config=config, flip_ok=pool.flip_ok, generator=generator)


def fit_packed_on_pool(pool: Pool, indices: list[np.ndarray], seeds: list[int], *, config: TrainConfig, device: str):
    """`fit_on_pool` of each (idx, seed), the K classifiers trained together (`victims.packed`)."""
    return fit_packed(
        [training_set(pool, idx, device=device) for idx in indices],
        seeds=seeds,
        n_classes=pool.n_classes,
        config=config,
        flip_ok=pool.flip_ok,
        device=device,
    )


@register_victim("real")
@dataclass(frozen=True)
class RealVictim(PacksRuns):
    """The downstream ConvNet trained on every member."""

    train: TrainConfig = field(default_factory=TrainConfig)

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        pass

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        """One run on every member (`inclusion_rate` is unused)."""
        with seeded(seed, device) as generator:
            model = fit_on_pool(pool, np.flatnonzero(keep), config=self.train, generator=generator, device=device)
            return observe(model, pool, device=device)

    def pack_runs(
        self, pool: Pool, keeps: np.ndarray, seeds: list[int], *, device: str, inclusion_rate: float
    ) -> list[Observations]:
        """The K downstream ConvNets trained together and observed together."""
        models = fit_packed_on_pool(
            pool, [np.flatnonzero(keep) for keep in keeps], list(seeds), config=self.train, device=device
        )
        return observe_packed(models, pool, device=device)
