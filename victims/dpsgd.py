"""`dpsgd`: the ConvNet trained on the members with opacus DP-SGD at a target (epsilon, delta).

The noise multiplier comes from the accountant so that the planned steps spend the target
epsilon; the epsilon recorded per run is the accountant's for the steps actually taken.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from audit.accounting import ACCOUNTANTS, noise_multiplier_for
from victims.base import Observations, observe, register_victim, seeded
from victims.data import Pool
from victims.nets import NetConfig, build_net
from victims.train import to_model_space


@register_victim("dpsgd")
@dataclass(frozen=True)
class DPSGDVictim:
    """The ConvNet trained by DP-SGD (Poisson sampling, per-example clipping, Gaussian noise)."""

    epsilon: float = field(default=1.0, metadata={"help": "target epsilon of the DP-SGD training"})
    delta: float = field(default=1e-5, metadata={"help": "target delta"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "per-example clipping norm C"})
    batch_size: int = field(default=128, metadata={"help": "expected Poisson batch size"})
    epochs: int = field(default=30, metadata={"help": "passes over the members"})
    lr: float = field(default=0.25, metadata={"help": "SGD learning rate"})  # digits, epsilon 1: 0.25 -> 68-69% test accuracy, 0.5 -> 64%, 1.0 -> 38-50%
    accountant: str = field(default="rdp", metadata={"help": "opacus accountant", "choices": ACCOUNTANTS})
    net: NetConfig = field(default_factory=NetConfig)

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"--epsilon must be a positive number, got {self.epsilon}")
        if not 0 < self.delta < 1:
            raise ValueError(f"--delta must be in (0, 1), got {self.delta}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"--max-grad-norm must be > 0, got {self.max_grad_norm}")
        if self.batch_size < 1 or self.epochs < 1:
            raise ValueError(f"--batch-size and --epochs must be >= 1, got {self.batch_size} and {self.epochs}")
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"--accountant must be one of {ACCOUNTANTS}, got {self.accountant!r}")

    def check(self, pool: Pool) -> None:
        pass

    def run(self, pool: Pool, keep: np.ndarray, seed: int, *, device: str = "cpu") -> Observations:
        from opacus import PrivacyEngine  # imported here: see audit.accounting

        idx = np.flatnonzero(keep)
        with seeded(seed, device) as generator:
            x = to_model_space(pool.x[idx], mean=pool.mean, std=pool.std, device=device)
            y = torch.as_tensor(pool.y[idx], device=device)
            loader = DataLoader(TensorDataset(x, y), batch_size=min(self.batch_size, len(idx)))
            steps = self.epochs * len(loader)
            model = build_net(self.net, image_shape=pool.image_shape, n_classes=pool.n_classes).to(device)
            with warnings.catch_warnings():
                # opacus warns that secure_mode is off (seeded noise is what makes runs reproducible)
                # and when the best RDP order is the largest one it tries (for very few steps)
                warnings.simplefilter("ignore", UserWarning)
                sigma = noise_multiplier_for(
                    epsilon=self.epsilon, delta=self.delta, sample_rate=1 / len(loader), steps=steps,
                    accountant=self.accountant,
                )
                engine = PrivacyEngine(accountant=self.accountant)
                model, optimizer, dp_loader = engine.make_private(
                    module=model,
                    optimizer=torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.0),
                    data_loader=loader,
                    noise_multiplier=sigma,
                    max_grad_norm=self.max_grad_norm,
                    noise_generator=generator,
                )
                model.train()
                for _ in range(self.epochs):
                    for xb, yb in dp_loader:
                        optimizer.zero_grad(set_to_none=True)
                        if len(xb):
                            F.cross_entropy(model(xb), yb).backward()
                        optimizer.step()
                epsilon = engine.accountant.get_epsilon(delta=self.delta)
            return observe(model._module, pool, device=device, formal_epsilon=float(epsilon), delta=self.delta)
