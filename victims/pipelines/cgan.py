"""`cgan` and `dpcgan`: a conditional DCGAN-style GAN trained on the members, and its DP variant.

The release is the generator: the downstream ConvNet trains on `ipc` generated images per class,
and every pool example is reconstructed for the GAN-Leaks attacks (`victims.latent_search`), the
attacker's work, never fed back. `dpcgan` trains the critic by DP-SGD (DP-CGAN, Torkzadehmahani
et al., 2019): Poisson batches at the public rate B/N, each real example paired with one fake, the
pair's gradient clipped to C, summed, + N(0, sigma^2 C^2), divided by B; sigma from opacus's
accountant. The generator only sees the critic, so it is (epsilon, delta)-DP by post-processing."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from victims.base import (
    DEFAULT_INCLUSION_RATE,
    Observations,
    observe,
    register_victim,
    require_at_least,
    require_positive,
    seeded,
)
from victims.condensation.condense import Members
from victims.dp.whitebox_canaries import CanaryProbe, open_probe, training_keep, whitebox_fields
from victims.pool import Pool
from victims.latent_search import WB_OPTIMIZERS, gradient_reconstruct, nearest_samples, powell_reconstruct
from victims.nets import ConditionalDiscriminator, ConditionalGenerator
from victims.dp.privacy import (
    accountant_field,
    accounted_fields,
    gaussian_mean,
    noise_multiplier_for,
    poisson_rate,
    poisson_sample,
    require_accountant,
    require_privacy_target,
)
from victims.train import TrainConfig, fit, small_set_training, to_model_space
from victims.synthetic import ReleasesData


@dataclass(frozen=True)
class GanLeaksSearch(ReleasesData):
    """The settings of the GAN-Leaks reconstructions every generator victim's run stores (`reconstruct`),
    the same flags for every generator; its runs store the losses (`stores_recon_loss`)."""

    stores_recon_loss: ClassVar[bool] = True

    fbb_samples: int = field(
        default=1000, metadata={"help": "fbb: generated samples per class the nearest is searched in"}
    )
    pbb_examples: int = field(
        default=30, metadata={"help": "pbb: reconstruct only the first this many pool examples (Powell is slow)"}
    )
    pbb_starts: int = field(
        default=2, metadata={"help": "pbb: Powell searches per example, from its nearest generated samples"}
    )
    pbb_evaluations: int = field(default=60, metadata={"help": "pbb: generator calls per Powell search"})
    wb_steps: int = field(default=50, metadata={"help": "wb: optimiser steps on the latent codes"})
    wb_lr: float = field(default=0.1, metadata={"help": "wb: learning rate on the latent codes"})
    wb_optimizer: str = field(
        default="adam", metadata={"help": "wb: optimiser of the latent codes", "choices": WB_OPTIMIZERS}
    )
    prior_weight: float = field(
        default=1e-3, metadata={"help": "pbb and wb: weight of the latent-norm prior (|z|^2/d - 1)^2"}
    )

    def __post_init__(self) -> None:
        require_at_least(self, {name: 1 for name in ("fbb_samples", "pbb_starts", "pbb_evaluations", "wb_steps")})
        require_at_least(self, {"pbb_examples": 0})
        require_positive(self, ("wb_lr",))
        if not (self.prior_weight >= 0 and math.isfinite(self.prior_weight)):
            raise ValueError(f"--prior-weight must be >= 0, got {self.prior_weight}")
        if self.wb_optimizer not in WB_OPTIMIZERS:
            raise ValueError(f"--wb-optimizer must be one of {WB_OPTIMIZERS}, got {self.wb_optimizer!r}")


@register_victim("cgan")
@dataclass(frozen=True)
class CGANVictim(GanLeaksSearch):
    """A conditional GAN trained on the members; the downstream ConvNet is trained on its samples."""

    ipc: int = field(
        default=10, metadata={"help": "generated images per class in the release the downstream ConvNet trains on"}
    )
    latent_dim: int = field(default=8, metadata={"help": "latent code size of the generator"})
    gen_width: int = field(default=8, metadata={"help": "channels of the generator's convolutions"})
    disc_width: int = field(default=8, metadata={"help": "channels of the critic's first convolution"})
    steps: int = field(default=400, metadata={"help": "GAN training steps (one critic and one generator update each)"})
    batch_size: int = field(
        default=64, metadata={"help": "real examples per critic step (dpcgan: expected Poisson batch size)"}
    )
    lr: float = field(default=2e-3, metadata={"help": "Adam learning rate of both nets"})
    train: TrainConfig = field(default_factory=small_set_training)  # the downstream ConvNet on the release

    def __post_init__(self) -> None:
        super().__post_init__()
        require_at_least(
            self, {name: 1 for name in ("ipc", "latent_dim", "gen_width", "disc_width", "steps", "batch_size")}
        )
        require_positive(self, ("lr",))

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        self.networks(pool)

    def networks(self, pool: Pool) -> tuple[ConditionalGenerator, ConditionalDiscriminator]:
        """A fresh generator and critic (parameters from torch's global RNG)."""
        shape, classes = pool.image_shape, pool.n_classes
        return (
            ConditionalGenerator(
                latent_dim=self.latent_dim, n_classes=classes, image_shape=shape, width=self.gen_width
            ),
            ConditionalDiscriminator(n_classes=classes, image_shape=shape, width=self.disc_width),
        )

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        members = Members.of(pool, training_keep(pool, keep), device=device)
        probe = self.probe(pool, keep, seed, inclusion_rate)
        with seeded(seed, device) as generator:
            x, y = members.x, members.y
            gen, critic = (net.to(device) for net in self.networks(pool))
            privacy = self.train_gan(
                gen, critic, x, y, pool=pool, generator=generator, inclusion_rate=inclusion_rate, probe=probe
            )
            return observe_generator(self, gen, pool, generator=generator, device=device, **privacy)

    def probe(self, pool: Pool, keep: np.ndarray, seed: int, inclusion_rate: float) -> CanaryProbe | None:
        """None: no Gaussian mechanism to observe (`dpcgan` overrides this)."""
        return None

    def latents(self, n: int, *, generator: torch.Generator, device: str) -> torch.Tensor:
        return torch.randn(n, self.latent_dim, generator=generator, device=generator.device).to(device)

    def train_gan(
        self,
        gen: nn.Module,
        critic: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        pool: Pool,
        generator: torch.Generator,
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
        probe: CanaryProbe | None = None,
    ) -> dict:
        """Train both nets on (x, y) in model space; returns the Observations' privacy fields (with a
        white-box `probe`, its observations too)."""
        opt_gen = torch.optim.Adam(gen.parameters(), lr=self.lr, betas=(0.5, 0.999))
        opt_critic = torch.optim.Adam(critic.parameters(), lr=self.lr, betas=(0.5, 0.999))
        private = self.private_critic_step(x, y, pool=pool, inclusion_rate=inclusion_rate, probe=probe)
        n_classes = pool.n_classes
        for _ in range(self.steps):
            if private is None:
                batch = torch.randint(len(x), (self.batch_size,), generator=generator, device=generator.device).to(
                    x.device
                )
                fake = self.fake(gen, y[batch], pool=pool, generator=generator).detach()
                loss = F.softplus(-critic(x[batch], y[batch])).mean() + F.softplus(critic(fake, y[batch])).mean()
                opt_critic.zero_grad(set_to_none=True)
                loss.backward()
            else:
                private(critic, gen, generator=generator)
            opt_critic.step()
            labels = torch.randint(n_classes, (self.batch_size,), generator=generator, device=generator.device).to(
                x.device
            )
            loss = F.softplus(-critic(self.fake(gen, labels, pool=pool, generator=generator), labels)).mean()
            opt_gen.zero_grad(set_to_none=True)
            loss.backward()
            opt_gen.step()
        if probe is None:
            return self.privacy_spent(pool, inclusion_rate)
        sigma, _ = self.noise(pool, inclusion_rate)
        return {**self.privacy_spent(pool, inclusion_rate), **whitebox_fields(probe, noise_multiplier=sigma)}

    def fake(self, gen: nn.Module, labels: torch.Tensor, *, pool: Pool, generator: torch.Generator) -> torch.Tensor:
        """Generated images of `labels` in model space (what the critic sees)."""
        pixels = gen(self.latents(len(labels), generator=generator, device=labels.device), labels)
        return to_model_space(pixels, mean=pool.mean, std=pool.std, device=labels.device)

    def private_critic_step(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        pool: Pool,
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
        probe: CanaryProbe | None = None,
    ):
        """None: the critic trains without privacy (`dpcgan` overrides this)."""
        return None

    def privacy_spent(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> dict:
        return {}


@register_victim("dpcgan")
@dataclass(frozen=True)
class DPCGANVictim(CGANVictim):
    """`cgan` with the critic trained by DP-SGD at a target (epsilon, delta) (DP-CGAN)."""

    epsilon: float = field(default=1.0, metadata={"help": "target epsilon (DP victims)"})
    delta: float = field(default=1e-5, metadata={"help": "target delta (DP victims)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "per-example clipping norm C"})
    accountant: str = accountant_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        require_privacy_target(self)
        require_positive(self, ("max_grad_norm",))
        require_accountant(self)

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        super().check(pool, inclusion_rate=inclusion_rate)
        poisson_rate(self.batch_size, pool, inclusion_rate)

    def noise(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> tuple[float, float]:
        """(noise multiplier sigma, Poisson rate B/N) for the public N = q * n_pool: sigma is opacus's, so
        that `steps` noisy critic updates spend the target epsilon."""
        rate = poisson_rate(self.batch_size, pool, inclusion_rate)
        sigma = noise_multiplier_for(
            epsilon=self.epsilon, delta=self.delta, sample_rate=rate, steps=self.steps, accountant=self.accountant
        )
        return sigma, rate

    def privacy_spent(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> dict:
        """The Observations' privacy fields: the accountant's ε for the `steps` critic updates, and
        the mechanism it composed."""
        sigma, rate = self.noise(pool, inclusion_rate)
        return accounted_fields(
            noise_multiplier=sigma, sample_rate=rate, steps=self.steps, delta=self.delta, accountant=self.accountant
        )

    def probe(self, pool: Pool, keep: np.ndarray, seed: int, inclusion_rate: float) -> CanaryProbe | None:
        """The white-box probe of the critic's noisy gradient sums (sensitivity C), or None."""
        _, rate = self.noise(pool, inclusion_rate)
        return open_probe(pool, keep, run_seed=seed, sample_rate=rate, sensitivity=self.max_grad_norm)

    def release_dimension(self, pool: Pool) -> int:
        """Coordinates of each noisy gradient sum: the critic's parameters."""
        return sum(p.numel() for p in self.networks(pool)[1].parameters())

    def private_critic_step(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        pool: Pool,
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
        probe: CanaryProbe | None = None,
    ):
        sigma, rate = self.noise(pool, inclusion_rate)  # each member in each batch w.p. B / (q n_pool)

        def step(critic: nn.Module, gen: nn.Module, *, generator: torch.Generator) -> None:
            batch = poisson_sample(len(x), rate, generator=generator).to(x.device)
            fake = self.fake(gen, y[batch], pool=pool, generator=generator).detach()
            noisy = noisy_pair_gradient(
                critic,
                x[batch],
                fake,
                y[batch],
                max_grad_norm=self.max_grad_norm,
                noise_multiplier=sigma,
                expected_batch_size=self.batch_size,
                generator=generator,
                probe=probe,
            )
            for p, g in zip(critic.parameters(), noisy):
                p.grad = g

        return step


def observe_generator(
    victim, gen: nn.Module, pool: Pool, *, generator: torch.Generator, device: str, **privacy
) -> Observations:
    """What a generator victim's run leaves from its trained `gen`: `victim.ipc` generated images per
    class as the release, the downstream ConvNet trained on them and observed, and every pool
    example's GAN-Leaks losses (`reconstruct`); `privacy` is passed on."""
    gen.eval()
    labels = torch.arange(pool.n_classes, device=device).repeat_interleave(victim.ipc)
    with torch.no_grad():
        pixels = gen(victim.latents(len(labels), generator=generator, device=device), labels)
    images = to_model_space(pixels, mean=pool.mean, std=pool.std, device=device)
    model = fit(
        images, labels, n_classes=pool.n_classes, config=victim.train, flip_ok=pool.flip_ok, generator=generator
    )
    recon = reconstruct(victim, gen, pool, generator=generator, device=device)
    return observe(
        model,
        pool,
        device=device,
        release_x=pixels.cpu().numpy(),
        release_y=labels.cpu().numpy(),
        recon_loss=recon,
        **privacy,
    )


def reconstruct(
    victim, gen: nn.Module, pool: Pool, *, generator: torch.Generator, device: str
) -> dict[str, np.ndarray]:
    """The three GAN-Leaks reconstruction losses of every pool example under `gen` (pixel scale), float32
    [n_pool] each, with `victim`'s search settings; `pbb` is NaN beyond its first `pbb_examples`."""
    x = torch.tensor(pool.x, device=device)
    y = torch.tensor(pool.y, device=device)
    fbb, codes = fbb_losses(victim, gen, x, y, n_classes=pool.n_classes, generator=generator)
    k = min(victim.pbb_examples, pool.n_pool)
    pbb = np.full(pool.n_pool, np.nan, dtype=np.float32)
    pbb[:k] = pbb_losses(victim, gen, x[:k], y[:k], codes[:k]).numpy()
    wb = wb_losses(victim, gen, x, y, codes)
    return {"fbb": fbb.cpu().numpy(), "pbb": pbb, "wb": wb.detach().cpu().numpy()}


def fbb_losses(victim, gen: nn.Module, x, y, *, n_classes: int, generator: torch.Generator):
    """(fbb loss [n], codes [n, k, latent_dim]): each image's nearest of `victim.fbb_samples` samples
    of its class, and the codes of its k = min(pbb_starts, fbb_samples) nearest, where pbb and wb start."""
    return nearest_samples(
        gen,
        x,
        y,
        n_classes=n_classes,
        samples_per_class=victim.fbb_samples,
        latent_dim=victim.latent_dim,
        keep=min(victim.pbb_starts, victim.fbb_samples),
        generator=generator,
    )


def pbb_losses(victim, gen: nn.Module, x, y, codes) -> torch.Tensor:
    """pbb loss [n]: Powell searches from each image's `codes`, with `victim`'s settings."""
    return powell_reconstruct(
        gen, x, y, codes, max_evaluations=victim.pbb_evaluations, prior_weight=victim.prior_weight
    )


def wb_losses(victim, gen: nn.Module, x, y, codes) -> torch.Tensor:
    """wb loss [n]: gradient descent on the latent code from each image's nearest code, with `victim`'s settings."""
    return gradient_reconstruct(
        gen,
        x,
        y,
        codes[:, 0],
        steps=victim.wb_steps,
        lr=victim.wb_lr,
        prior_weight=victim.prior_weight,
        optimizer=victim.wb_optimizer,
    )


def noisy_pair_gradient(
    critic: nn.Module,
    real: torch.Tensor,
    fake: torch.Tensor,
    labels: torch.Tensor,
    *,
    max_grad_norm: float,
    noise_multiplier: float,
    expected_batch_size: int,
    generator: torch.Generator,
    probe: CanaryProbe | None = None,
) -> list[torch.Tensor]:
    """The Gaussian mechanism on a Poisson batch of real examples, each paired with one fake of its class:
    (sum of each pair's critic-loss gradient clipped to C, + N(0, sigma^2 C^2)) / B per critic
    parameter. A real example enters one pair, so the sum moves by at most C under add/remove. An
    empty batch gives pure noise."""
    params = dict(critic.named_parameters())
    if len(real):
        weights = {name: p.detach() for name, p in params.items()}
        buffers = dict(critic.named_buffers())

        def pair_loss(w, xr, xf, yi):
            out = functional_call(critic, {**w, **buffers}, (torch.stack([xr, xf]), yi.expand(2)))
            return F.softplus(-out[0]) + F.softplus(out[1])

        per_pair = vmap(grad(pair_loss), in_dims=(None, 0, 0, 0), randomness="error")(weights, real, fake, labels)
    else:
        per_pair = None
    return gaussian_mean(
        per_pair,
        params,
        max_grad_norm=max_grad_norm,
        noise_multiplier=noise_multiplier,
        expected_batch_size=expected_batch_size,
        generator=generator,
        probe=probe,
    )
