"""The one downstream trainer: fit a classifier on a (real or synthetic) set, then query it.

Everything here works in *model space*: images normalised with the pool's mean and std
(`to_model_space`). Query views are the image itself (query 0), its four one-pixel shifts and,
where flips keep the label, the mirrored versions of those five.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from victims.compiled import maybe_compiled
from victims.nets import NetConfig, build_net
from victims.precision import training_autocast

SHIFTS = ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))  # (rows, cols) in pixels; (0, 0) first


@dataclass(frozen=True)
class TrainConfig:
    net: NetConfig = field(default_factory=NetConfig)
    steps: int = field(default=300, metadata={"help": "optimiser steps, whatever the size of the training set"})
    batch_size: int = field(default=64, metadata={"help": "examples per step (the whole set when smaller)"})
    lr: float = field(default=0.01, metadata={"help": "SGD learning rate"})
    momentum: float = field(default=0.9, metadata={"help": "SGD momentum"})
    # On digits, one-pixel shifts with weight decay 5e-4 gave 97.4% test accuracy and LiRA AUC
    # 0.55 (24 runs); without the shifts 98.1% and 0.58; without either 98.3% and 0.61 (64 runs).
    weight_decay: float = field(default=0.0, metadata={"help": "L2 penalty"})
    augment: bool = field(
        default=False, metadata={"help": "train on random one-pixel shifts (and flips where they keep the label)"}
    )

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def small_set_training() -> TrainConfig:
    """Downstream training for a released set of a few images per class (subset, synthetic sets): 100
    steps (on digits, as good as 300)."""
    return TrainConfig(steps=100)


def _per_channel(values, device) -> torch.Tensor:
    """Per-channel statistics (mean or std) shaped to broadcast over [n, c, h, w]."""
    return torch.tensor(values, dtype=torch.float32, device=device).view(1, -1, 1, 1)


def to_model_space(x: np.ndarray | torch.Tensor, *, mean, std, device: torch.device | str = "cpu") -> torch.Tensor:
    """[n, c, h, w] pixels -> normalised float32 tensor on `device` (a tensor keeps its graph)."""
    t = x.to(device) if isinstance(x, torch.Tensor) else torch.tensor(np.asarray(x, dtype=np.float32), device=device)
    return (t - _per_channel(mean, device)) / _per_channel(std, device)


def to_pixel_space(images: torch.Tensor, *, mean, std) -> np.ndarray:
    """Model-space images back to the pool's pixel scale (not clipped: the release as learned)."""
    pixels = images * _per_channel(std, images.device) + _per_channel(mean, images.device)
    return pixels.detach().cpu().numpy().astype(np.float32)


def shift(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Translate a batch by (rows, cols) pixels with reflect padding (|rows|, |cols| <= 1)."""
    if rows == 0 and cols == 0:
        return x
    h, w = x.shape[-2:]
    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    return padded[..., 1 - rows : 1 - rows + h, 1 - cols : 1 - cols + w]


def query_views(x: torch.Tensor, *, flip_ok: bool) -> list[torch.Tensor]:
    """The query augmentations of a batch, the identity first."""
    views = [shift(x, r, c) for r, c in SHIFTS]
    if flip_ok:
        views += [v.flip(-1) for v in views]
    return views


def n_queries(*, flip_ok: bool) -> int:
    return len(SHIFTS) * (2 if flip_ok else 1)


def augment_batch(x: torch.Tensor, *, flip_ok: bool, generator: torch.Generator) -> torch.Tensor:
    """Each example shifted by a random offset in {-1, 0, 1}^2, mirrored at random where allowed."""
    offsets = torch.randint(-1, 2, (x.shape[0], 2), generator=generator, device=generator.device)
    out = x.clone()
    for r in (-1, 0, 1):
        for c in (-1, 0, 1):
            chosen = ((offsets[:, 0] == r) & (offsets[:, 1] == c)).to(x.device)
            if chosen.any():
                out[chosen] = shift(x[chosen], r, c)
    if flip_ok:
        flip = (torch.rand(x.shape[0], generator=generator, device=generator.device) < 0.5).to(x.device)
        out[flip] = out[flip].flip(-1)
    return out


def fit(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    n_classes: int,
    config: TrainConfig,
    flip_ok: bool,
    generator: torch.Generator,
) -> nn.Module:
    """Train a fresh classifier on (x, y) in model space: parameters from torch's global RNG (callers fix
    it, `victims.base.seeded`), batches and augmentations from `generator`."""
    model = build_net(config.net, image_shape=tuple(x.shape[1:]), n_classes=n_classes).to(x.device)
    return train(model, x, y, config=config, flip_ok=flip_ok, generator=generator)


def train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    config: TrainConfig,
    flip_ok: bool,
    generator: torch.Generator,
) -> nn.Module:
    """`fit`'s training of an initialised `model` (SGD on minibatches from `generator`), in eval mode after."""
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    batches = Batches(x, y, config=config, flip_ok=flip_ok, generator=generator)
    model.train()
    forward = maybe_compiled(model)  # compiled once per process under --compile (victims.compiled)
    for _ in range(config.steps):
        xb, yb = batches.next()
        with training_autocast(xb.device):  # bf16 under --precision bf16 (victims.precision)
            loss = F.cross_entropy(forward(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


class Batches:
    """The minibatches `fit` trains on: `min(batch_size, n)` examples per step without replacement
    within an epoch, reshuffled from `generator` each epoch, augmented from it when asked."""

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor, *, config: TrainConfig, flip_ok: bool, generator: torch.Generator
    ) -> None:
        self.x, self.y, self.config, self.flip_ok, self.generator = x, y, config, flip_ok, generator
        self.size = min(config.batch_size, x.shape[0])
        self.order, self.cursor = torch.randperm(x.shape[0], generator=generator, device=generator.device), 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.x.shape[0]
        if self.cursor + self.size > n:
            self.order, self.cursor = torch.randperm(n, generator=self.generator, device=self.generator.device), 0
        idx = self.order[self.cursor : self.cursor + self.size].to(self.x.device)
        self.cursor += self.size
        xb = self.x[idx]
        if self.config.augment:
            xb = augment_batch(xb, flip_ok=self.flip_ok, generator=self.generator)
        return xb, self.y[idx]


@torch.no_grad()
def predict_queries(model: nn.Module, x: torch.Tensor, *, flip_ok: bool, batch_size: int = 2048) -> np.ndarray:
    """Logits for every query view: float32 [n, n_queries, n_classes], query 0 = the image itself."""
    model.eval()
    chunks = []
    for start in range(0, x.shape[0], batch_size):
        views = query_views(x[start : start + batch_size], flip_ok=flip_ok)
        chunks.append(torch.stack([model(v) for v in views], dim=1).float().cpu())
    return torch.cat(chunks).numpy()


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 2048) -> float:
    model.eval()
    correct = sum(
        (model(x[s : s + batch_size]).argmax(1) == y[s : s + batch_size]).sum().item()
        for s in range(0, x.shape[0], batch_size)
    )
    return correct / x.shape[0]
