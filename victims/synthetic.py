"""Victims that release a synthetic data set, and the one way the downstream model is trained on a
release (`train_on_release`), which the shadow runs and `audit.release` share, so a release and its
shadow runs are observed alike. A generator of your own derives from `SyntheticDataVictim`
(README, "Audit your own generator")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from victims.base import DEFAULT_INCLUSION_RATE, Observations, observe, seeded
from victims.pool import Pool
from victims.train import TrainConfig, fit, small_set_training, to_model_space

#: SeedSequence stream of a SyntheticDataVictim run's downstream training (its `generate` has the run's seed)
DOWNSTREAM_STREAM = 1


def train_on_release(
    pool: Pool,
    release_x: np.ndarray,
    release_y: np.ndarray,
    *,
    config: TrainConfig,
    seed: int,
    device: str = "cpu",
    init_idx: np.ndarray | None = None,
) -> Observations:
    """The downstream ConvNet (`config`) trained on a release (float32 [k, c, h, w], pixel scale, labels
    [k]) from `seed`, observed on every pool example and the test split, the release kept."""
    release_x = np.asarray(release_x, dtype=np.float32)
    release_y = np.asarray(release_y, dtype=np.int64)
    with seeded(seed, device) as generator:
        x = to_model_space(release_x, mean=pool.mean, std=pool.std, device=device)
        y = torch.as_tensor(release_y, device=device)
        model = fit(x, y, n_classes=pool.n_classes, config=config, flip_ok=pool.flip_ok, generator=generator)
        return observe(
            model,
            pool,
            device=device,
            init_idx=np.zeros(0, dtype=np.int64) if init_idx is None else init_idx,
            release_x=release_x,
            release_y=release_y,
        )


class ReleasesData:
    """Mixin of a victim whose run releases a data set and trains its downstream ConvNet (the
    victim's `train` field) on it: `audit.release` trains that model on the custodian's release."""

    def observe_release(
        self,
        pool: Pool,
        release_x: np.ndarray,
        release_y: np.ndarray,
        *,
        seed: int,
        device: str = "cpu",
        init_idx: np.ndarray | None = None,
    ) -> Observations:
        """`train_on_release` with this victim's downstream training."""
        return train_on_release(
            pool, release_x, release_y, config=self.train, seed=seed, device=device, init_idx=init_idx
        )


@dataclass(frozen=True)
class SyntheticDataVictim(ReleasesData):
    """Base of a generator of your own: a frozen dataclass (every field with a default) with a `name`,
    optionally `check(pool, *, inclusion_rate)`, and

        generate(pool, keep, seed, *, device, inclusion_rate) -> (images, labels)

    trained on the members `pool.x[keep]`, returning float32 [k, c, h, w] on the pool's pixel scale and
    int labels [k]. `run` then trains the downstream ConvNet on it (`train_on_release`)."""

    train: TrainConfig = field(default_factory=small_set_training)  # the downstream ConvNet on the release

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        """Nothing to refuse by default; override to raise ValueError naming a bad value (exit status 2)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if not callable(getattr(cls, "generate", None)):
            raise TypeError(f"{cls.__qualname__} derives from SyntheticDataVictim but has no generate method")

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        """`generate` on the members, then the downstream ConvNet on its release (a seed of its own)."""
        images, labels = self.generate(pool, keep, seed, device=device, inclusion_rate=inclusion_rate)
        images, labels = np.asarray(images, dtype=np.float32), np.asarray(labels)
        if images.ndim != 4 or images.shape[1:] != pool.image_shape or labels.shape != images.shape[:1]:
            raise ValueError(
                f"{type(self).__name__}.generate returned images {images.shape} and labels {labels.shape}; "
                f"expected [k, {', '.join(map(str, pool.image_shape))}] and [k]"
            )
        downstream = int(np.random.SeedSequence([seed, DOWNSTREAM_STREAM]).generate_state(1)[0] >> 1)
        return self.observe_release(pool, images, labels.astype(np.int64), seed=downstream, device=device)
