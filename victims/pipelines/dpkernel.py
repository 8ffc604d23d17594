"""`dpkernel`: a conditional generator trained on noisy kernel mean embeddings of the members
(DP-kernel; Jiang, Sun and Yu, "Functional Renyi Differential Privacy for Generative Modeling",
NeurIPS 2023, Section 4.3).

The generator G(z, y) (`victims.nets.ConditionalGenerator`) minimises the squared MMD between its
samples and the members under the product kernel k*((x, y), (x', y')) = k(x, x') * [y = y']: a
Gaussian kernel k(x, x') = exp(-|x - x'|^2 / (2 h^2)) on the flattened pixel-scale image (h =
`kernel_bandwidth`: `--bandwidth`, by default 2 sqrt(d / 64) for d values per image) times the
delta kernel on labels, i.e. the paper's order-1 polynomial kernel y^T y' on one-hot labels. Each
of `steps` iterations

1. draws a Poisson batch S of the members, each independently with probability B / N (B =
   `batch_size`, N = q * n_pool the plan's public expected member count,
   `victims.base.expected_members`; never the run's actual count);
2. releases the batch's kernel mean embedding, as a sum, with Gaussian noise:
   mu~ = (sum_{i in S} phi*(x_i, y_i) + sigma * Delta * xi) / B, xi ~ N(0, I), sigma from opacus's
   accountant (`victims.dp.privacy.noise_multiplier_for`) so that the `steps` releases at rate B/N
   spend the target (epsilon, delta);
3. takes one Adam step of the generator on |mu~ - mu_G|^2, mu_G the embedding of
   `fake_per_class` fresh samples of every class (balanced labels) divided by their number, i.e.
   the paper's private objective Eq. (7) up to a constant: -2 <mu~, mu_G> + |mu_G|^2, where
   <mu~, mu_G> = (1/M) sum_j f~(w_j) is the noisy function evaluated at the generated points.

The generator only ever sees the released mu~ (post-processing, the paper's Theorem 3), so the
generator, its samples and all that is derived from them are (epsilon, delta)-DP; the recorded
`formal_epsilon` is the accountant's for the `steps` releases, public (the same for every run of
the plan). `--no-noise` is the non-private version (sigma = 0, the same Poisson batches): no
epsilon is recorded.

The RKHS release, computably: random Fourier features. phi(x) = [cos(W^T x), sin(W^T x)] /
sqrt(D), with D = `features` frequencies (columns of W) drawn from N(0, I / h^2) once per run
(public randomness, independent of the data), approximates k (phi(x)^T phi(x') ->
k(x, x') as D grows; Rahimi and Recht). phi*(x, y) = phi(x) (x) e_y: one block of 2D
coordinates per class, so the released object is the noisy mean feature vector of every class,
a [n_classes, 2D] matrix (as in DP-MERF; Harder et al. 2021). k^(u, v) = phi*(u)^T phi*(v) is the
reproducing kernel of the finite-dimensional RKHS H_D = {<a, phi*(.)>}, in which
|<a, phi*(.)>|_{H_D} <= |a|_2, and the released function f~ = <sum + sigma Delta xi, phi*(.)>
is exactly f_S + sigma * Delta * G with G = <xi, phi*(.)> the zero-mean Gaussian process of
covariance k^. That is the paper's Corollary 2 (Gaussian mechanism for f-RDP in an RKHS; the
RKHS case of its Proposition 4): releasing f_S + sigma Delta G is (alpha, alpha / (2 sigma^2))-RDP
whenever |f_S - f_S'|_H <= Delta, the same RDP as the vector Gaussian mechanism (its
Proposition 1) with the sensitivity measured in the RKHS norm. Its Section 3.6 reduces the
Poisson-subsampled functional mechanism to the vector subsampled Gaussian mechanism of Mironov
et al. (so opacus's RDP accountant applies), Theorem 5 composes the `steps` releases
sequentially, and Proposition 3 converts to (epsilon, delta)-DP.

Sensitivity (add/remove one record, on the SUM): |phi*(x, y)|_2^2 = |phi(x)|^2 * |e_y|^2 =
(1/D) sum_k (cos^2 + sin^2) * 1 = 1 for every record, so the sum moves by exactly 1 in H_D:
Delta = 1 (no clipping needed). The paper's Delta^2 = 2 / N^2 is the same bound for the mean
under replacement (k(x, x) = 1 for one Gaussian; a sum of L bandwidths, as in its code, has
k(x, x) = L).

Departures from the paper:
- The RKHS is truncated to D random Fourier features rather than noised in full (the paper's
  "batch method", Eq. (8), evaluates f_S + sigma Delta G at the batch's real and generated points
  with G drawn from N(0, sigma^2 Delta^2 K) on their Gram matrix). The paper argues against
  truncation (any finite-dimensional RKHS is not characteristic); it is kept here because it
  makes the generator's update an exact post-processing of the release: in the batch method the
  generator's gradient involves grad f_S at the generated points, which is not among the
  released values (a public implementation draws the GP noise with `.sample()`, outside the
  autograd graph, so its generator's gradient is that of the noiseless loss up to a scalar
  factor), and it evaluates the released function at the private points themselves.
- The embedding is a SUM with add/remove sensitivity 1, divided by the public expected batch
  size B, instead of a mean over the batch with the replacement sensitivity.
- One Gaussian bandwidth, not a sum over a list of bandwidths; Adam, not RMSprop; the squared
  embedding distance, not the square of the MMD estimate (the public implementation squares it).
- The generator's labels are balanced (the paper's conditional variant assumes uniform labels
  too, its stated limitation); the members' class proportions enter only through mu~.

Observations as `dpcgan` (`victims.pipelines.cgan`): the downstream ConvNet is trained on `ipc` generated
images per class (`release_x`/`release_y`, pixel scale), and every pool example is reconstructed
with the generator for the GAN-Leaks attacks (`recon_loss` fbb, pbb, wb; the attacker's work,
never fed back into the release).

Cost with the defaults, full digits pool (~750 members), one torch thread on a 2-core machine
shared with other jobs: 9.4-15.3 s of CPU time per run (3 runs; generator training 4.2-5.3 s,
GAN-Leaks reconstruction 4.1-6.5 s); test accuracy 0.301 at epsilon 1, 0.840 at epsilon 10,
0.893 without noise (docs/results/generators.md).
"""

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
    """phi(x) = [cos(x W), sin(x W)] / sqrt(D) for flattened x [n, d]: W [d, D] ~ N(0, 1 / h^2), so
    phi(x)^T phi(x') is an unbiased D-frequency estimate of exp(-|x - x'|^2 / (2 h^2)) and
    |phi(x)|_2 = 1 for every x."""

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
    """The Gaussian mechanism on the class-conditional kernel mean embedding: the per-class sum of
    `features` [n, f] (each row of norm <= `sensitivity`) + N(0, sigma^2 Delta^2) on every one of
    the n_classes * f coordinates, classes without a record included. An empty batch gives pure
    noise."""
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
        """`bandwidth`, or by default h = 2 sqrt(d / 64) for d values per image. The squared distance
        between two images grows with d, so h grows with sqrt(d) to keep the kernel's typical value:
        h = 2 was chosen on 8x8 digits, and at 28x28 (mnist5k, epsilon 10, one run each) h = 2 left
        the generator at chance (test accuracy 0.127), h = 4 at 0.050, while h = 7 (this rule)
        reached 0.791, 10 0.795 and 14 0.765. Data-independent, so it spends no privacy."""
        if self.bandwidth is not None:
            return self.bandwidth
        return 2.0 * math.sqrt(int(np.prod(pool.image_shape)) / 64)

    def calibration(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> tuple[float, float]:
        """(noise multiplier sigma, Poisson rate B/N) for N = q * n_pool, the plan's expected member
        count (public, never the run's actual count); sigma = 0 with `--no-noise`."""
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
        """What the generator's embedding is pulled towards in one step: the release, the noisy
        mean embedding of the Poisson batch's `features` [b, f] and `labels` [b]."""
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
