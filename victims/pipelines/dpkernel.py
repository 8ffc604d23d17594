"""`dpkernel`: a conditional generator trained on noisy kernel mean embeddings of the members
(DP-kernel; Jiang, Sun and Yu, "Functional Renyi Differential Privacy for Generative Modeling",
NeurIPS 2023, Section 4.3).

Each step releases a Poisson batch's (public rate B / N) class-conditional embedding sum of D random
Fourier features of a Gaussian kernel (Rahimi and Recht; one-hot label blocks, as DP-MERF),
+ sigma Delta xi, divided by B; the generator takes one Adam step towards it (Eq. (7) up to a constant).

Privacy: |phi*(x, y)|_2 = 1, so the sum's add/remove sensitivity in the RKHS is exactly Delta = 1.
The release is the Gaussian mechanism in an RKHS with the vector mechanism's RDP (the paper's
Corollary 2, Propositions 1 and 4); Section 3.6 reduces the subsampled release to Mironov et al.'s,
so opacus's RDP accountant applies; Theorem 5 composes, Proposition 3 converts to (epsilon, delta),
and the generator is post-processing (Theorem 3).

Departures from the paper: the RKHS truncated to D features (so the update is exact post-processing
of the release); a sum divided by the public B, not a mean; one bandwidth; Adam; balanced labels."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from victims.base import (
    DEFAULT_INCLUSION_RATE,
    Observations,
    register_victim,
    require_at_least,
    require_positive,
    seeded,
)
from victims.pipelines.cgan import GanLeaksSearch, observe_generator
from victims.pool import Pool
from victims.nets import ConditionalGenerator
from victims.dp.privacy import (
    gaussian_release,
    accountant_field,
    accounted_fields,
    noise_multiplier_for,
    poisson_rate,
    poisson_sample,
    require_accountant,
    require_privacy_target,
)
from victims.train import TrainConfig, small_set_training
from victims.dp.whitebox_canaries import CanaryProbe, open_probe, training_keep, whitebox_fields

#: L2 sensitivity of the embedding SUM to adding or removing one record: |phi*(x, y)|_2 = 1 exactly
SENSITIVITY = 1.0


class RandomFourierFeatures(nn.Module):
    """phi(x) = [cos(x W), sin(x W)] / sqrt(D) for flattened x [n, d], W ~ N(0, 1 / h^2): an unbiased
    estimate of exp(-|x - x'|^2 / (2 h^2)), with |phi(x)|_2 = 1 for every x."""

    def __init__(self, in_features: int, frequencies: int, bandwidth: float, *, generator: torch.Generator) -> None:
        super().__init__()
        w = torch.randn(in_features, frequencies, generator=generator, device=generator.device) / bandwidth
        self.register_buffer("weight", w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        proj = x.flatten(1) @ self.weight.to(x.device)
        return torch.cat([proj.cos(), proj.sin()], dim=1) / math.sqrt(self.weight.shape[1])


def class_embedding_sum(features: torch.Tensor, labels: torch.Tensor, *, n_classes: int) -> torch.Tensor:
    """sum_i phi(x_i) e_{y_i}^T: the features [n, f] summed per class, [n_classes, f]."""
    out = torch.zeros(n_classes, features.shape[1], dtype=features.dtype, device=features.device)
    return out.index_add(0, labels, features)


def noisy_embedding_sum(
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    n_classes: int,
    noise_multiplier: float,
    sensitivity: float = SENSITIVITY,
    generator: torch.Generator,
    probe: CanaryProbe | None = None,
) -> torch.Tensor:
    """The Gaussian mechanism on the class-conditional embedding: the per-class sum of `features` [n, f]
    (rows of norm <= `sensitivity`) + N(0, sigma^2 Delta^2) on all n_classes * f coordinates. An
    empty batch gives pure noise."""
    total = class_embedding_sum(features, labels, n_classes=n_classes)
    return gaussian_release([total], std=noise_multiplier * sensitivity, generator=generator, probe=probe)[0]


def noisy_mean_embedding(
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    n_classes: int,
    noise_multiplier: float,
    expected_batch_size: int,
    generator: torch.Generator,
    probe: CanaryProbe | None = None,
) -> torch.Tensor:
    """The release of one iteration: `noisy_embedding_sum` (sensitivity 1) divided by the public
    expected batch size B, [n_classes, f]."""
    return (
        noisy_embedding_sum(
            features, labels, n_classes=n_classes, noise_multiplier=noise_multiplier, generator=generator, probe=probe
        )
        / expected_batch_size
    )


@register_victim("dpkernel")
@dataclass(frozen=True)
class DPKernelVictim(GanLeaksSearch):
    """A conditional generator trained on Poisson-subsampled noisy kernel mean embeddings (DP-kernel)."""

    epsilon: float = field(default=1.0, metadata={"help": "target epsilon (DP victims)"})
    delta: float = field(default=1e-5, metadata={"help": "target delta (DP victims)"})
    noise: bool = field(
        default=True,
        metadata={
            "help": "add the calibrated noise; --no-noise is the non-private version (sigma = 0, no epsilon recorded)"
        },
    )
    batch_size: int = field(default=150, metadata={"help": "expected Poisson batch size B (rate B / (q n_pool))"})
    steps: int = field(default=400, metadata={"help": "noisy embedding releases, one generator step each"})
    features: int = field(default=400, metadata={"help": "random Fourier frequencies D (2D features per class)"})
    bandwidth: float | None = field(
        default=None,
        metadata={
            "help": "Gaussian kernel bandwidth h on the flattened [0, 1] image (default: 2 sqrt(d / 64) for d "
            "values per image: 2 on 8x8 digits, 7 on 28x28)"
        },
    )
    lr: float = field(default=5e-3, metadata={"help": "Adam learning rate of the generator"})
    fake_per_class: int = field(default=20, metadata={"help": "generated samples per class in each step's embedding"})
    ipc: int = field(
        default=10, metadata={"help": "generated images per class in the release the downstream ConvNet trains on"}
    )
    latent_dim: int = field(default=8, metadata={"help": "latent code size of the generator"})
    gen_width: int = field(default=8, metadata={"help": "channels of the generator's convolutions"})
    accountant: str = accountant_field()
    train: TrainConfig = field(default_factory=small_set_training)  # the downstream ConvNet on the release

    def __post_init__(self) -> None:
        super().__post_init__()
        require_privacy_target(self)
        require_at_least(
            self,
            {
                name: 1
                for name in ("batch_size", "steps", "features", "fake_per_class", "ipc", "latent_dim", "gen_width")
            },
        )
        require_positive(self, ("lr",) if self.bandwidth is None else ("bandwidth", "lr"))
        require_accountant(self)

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        self.network(pool)
        poisson_rate(self.batch_size, pool, inclusion_rate)

    def network(self, pool: Pool) -> ConditionalGenerator:
        """A fresh generator (parameters from torch's global RNG)."""
        return ConditionalGenerator(
            latent_dim=self.latent_dim, n_classes=pool.n_classes, image_shape=pool.image_shape, width=self.gen_width
        )

    def kernel_bandwidth(self, pool: Pool) -> float:
        """`bandwidth`, or by default h = 2 sqrt(d / 64) for d values per image (docs/results/mnist5k.md).
        Data-independent, so it spends no privacy."""
        if self.bandwidth is not None:
            return self.bandwidth
        return 2.0 * math.sqrt(int(np.prod(pool.image_shape)) / 64)

    def calibration(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> tuple[float, float]:
        """(noise multiplier sigma, Poisson rate B/N) for the public N = q * n_pool; sigma = 0 with `--no-noise`."""
        rate = poisson_rate(self.batch_size, pool, inclusion_rate)
        if not self.noise:
            return 0.0, rate
        sigma = noise_multiplier_for(
            epsilon=self.epsilon, delta=self.delta, sample_rate=rate, steps=self.steps, accountant=self.accountant
        )
        return sigma, rate

    def privacy_spent(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> dict:
        """The Observations' privacy fields: the accountant's epsilon for the `steps` releases, and
        the mechanism it composed."""
        if not self.noise:
            return {}
        sigma, rate = self.calibration(pool, inclusion_rate)
        return accounted_fields(
            noise_multiplier=sigma, sample_rate=rate, steps=self.steps, delta=self.delta, accountant=self.accountant
        )

    def latents(self, n: int, *, generator: torch.Generator, device: str) -> torch.Tensor:
        return torch.randn(n, self.latent_dim, generator=generator, device=generator.device).to(device)

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        sigma, rate = self.calibration(pool, inclusion_rate)
        idx = np.flatnonzero(training_keep(pool, keep))
        probe = open_probe(pool, keep, run_seed=seed, sample_rate=rate, sensitivity=SENSITIVITY)
        with seeded(seed, device) as generator:
            x = torch.tensor(pool.x[idx], device=device)  # pixel scale, as the generator's output
            y = torch.as_tensor(pool.y[idx], device=device)
            gen = self.network(pool).to(device)
            rff = RandomFourierFeatures(
                int(np.prod(pool.image_shape)), self.features, self.kernel_bandwidth(pool), generator=generator
            ).to(device)
            self.train_generator(
                gen, rff, x, y, n_classes=pool.n_classes, sigma=sigma, rate=rate, generator=generator, probe=probe
            )
            return observe_generator(
                self,
                gen,
                pool,
                generator=generator,
                device=device,
                **self.privacy_spent(pool, inclusion_rate),
                **whitebox_fields(probe, noise_multiplier=sigma),
            )

    def matched_embedding(
        self,
        features: torch.Tensor,
        labels: torch.Tensor,
        *,
        n_classes: int,
        sigma: float,
        generator: torch.Generator,
        probe: CanaryProbe | None = None,
    ) -> torch.Tensor:
        """The release the generator's embedding is pulled towards in one step: the noisy mean embedding
        of the Poisson batch's `features` [b, f] and `labels` [b]."""
        return noisy_mean_embedding(
            features,
            labels,
            n_classes=n_classes,
            noise_multiplier=sigma,
            expected_batch_size=self.batch_size,
            generator=generator,
            probe=probe,
        )

    def release_dimension(self, pool: Pool) -> int:
        """Coordinates of each noisy embedding sum: n_classes x 2 D."""
        return pool.n_classes * 2 * self.features

    def train_generator(
        self,
        gen: nn.Module,
        rff: RandomFourierFeatures,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        n_classes: int,
        sigma: float,
        rate: float,
        generator: torch.Generator,
        probe: CanaryProbe | None = None,
    ) -> None:
        """`steps` releases of the members' (x [m, c, h, w] pixel scale, y [m]) noisy mean embedding,
        each followed by one Adam step of `gen` on its squared distance to the generated embedding."""
        with torch.no_grad():
            member_features = rff(x)  # phi(x_i) of every member: the same W for every release
        opt = torch.optim.Adam(gen.parameters(), lr=self.lr)
        fake_labels = torch.arange(n_classes, device=x.device).repeat_interleave(self.fake_per_class)
        for _ in range(self.steps):
            batch = poisson_sample(len(x), rate, generator=generator).to(x.device)
            target = self.matched_embedding(
                member_features[batch], y[batch], n_classes=n_classes, sigma=sigma, generator=generator, probe=probe
            )
            fake = gen(self.latents(len(fake_labels), generator=generator, device=x.device), fake_labels)
            generated = class_embedding_sum(rff(fake), fake_labels, n_classes=n_classes) / len(fake_labels)
            loss = (target - generated).pow(2).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
