"""`psg`: private set generation (Chen, Kerkouche and Fritz, NeurIPS 2022; PSG paper Algorithm 1).

A synthetic set of `spc` images per class learns by matching a classifier's gradients on it to
DP-sanitised gradients of the members: Poisson batches at rate B/N, per-example gradients clipped
to C, summed with N(0, sigma^2 C^2) noise, divided by B (`victims.dp.privacy`). Only these R*T*K
noisy gradients touch the members, so the release is (epsilon, delta)-DP by the subsampled Gaussian
mechanism composed over R*T*K steps (opacus's accountant). N = q * n_pool is public, never the
run's count. `--prior` optimises a generator on fixed latent codes instead (supplement Algorithm 2).

Departure from the reference code: only the matched parameters (weights of two or more
dimensions) are clipped and noised; the distance ignores the rest, so this releases less."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from victims.base import (
    DEFAULT_INCLUSION_RATE,
    Observations,
    observe,
    register_victim,
    require_at_least,
    require_momentum,
    require_positive,
    SeededRuns,
    seeded,
    seeded_runs,
)
from victims.compiled import compiling, maybe_compiled
from victims.pool import Pool
from victims.condensation.matching import gradient_distance
from victims.nets import ConditionalGenerator, NetConfig, build_net
from victims.packed import GroupedNets, PacksRuns, draw_nets, fit_runs, observe_packed
from victims.pipelines.real import training_set
from victims.presets import filled_from_preset, require_filled
from victims.dp.privacy import (
    accountant_field,
    clipped_gradient_sum,
    epsilon_spent,
    grouped_clipped_gradient_sums,
    gaussian_mean,
    gaussian_release_packed,
    gaussian_steps,
    noise_multiplier_for,
    poisson_rate,
    poisson_sample,
    require_accountant,
    require_privacy_target,
)
from victims.precision import training_autocast
from victims.synthetic import ReleasesData
from victims.train import TrainConfig, fit, small_set_training, to_model_space, to_pixel_space
from victims.dp.whitebox_canaries import CanaryProbe, open_probe, training_keep, whitebox_fields

PRESETS = ("digits", "faithful", "paper")

#: supplement C.3: (T outer, J inner) iterations by samples per class
PAPER_LOOPS = {1: (1, 1), 10: (10, 50), 20: (20, 25), 50: (50, 10)}
#: the supplement's values (C.3) that the digits preset keeps
PAPER_KEPT = dict(batch_size=256, max_grad_norm=0.1, lr_net=0.01, lr_generator=0.01, momentum=0.5)


def paper_values(*, epsilon: float, spc: int) -> dict:
    """The supplement's hyper-parameters (C.3); a value it does not list takes the next smaller one's."""
    outer, inner = PAPER_LOOPS[max([s for s in PAPER_LOOPS if s <= spc])]
    return dict(
        restarts=1000 if epsilon >= 10 else 200, outer=outer, inner=inner, batches=10, lr_images=0.1, **PAPER_KEPT
    )


def digits_values(*, epsilon: float, spc: int) -> dict:
    """Defaults sized for digits on two CPU cores: 32 noisy steps, so `--n-shadow 256` fits in 10
    minutes (bench/psg.py). Tuning figures: docs/results/psg.md."""
    return dict(restarts=4, outer=4, inner=5, batches=2, lr_images=10.0, **PAPER_KEPT)


def faithful_values(*, epsilon: float, spc: int) -> dict:
    """The digits preset run until more noisy steps stop helping: R = 64 restarts, 512 noisy steps
    (docs/results/psg.md)."""
    return {**digits_values(epsilon=epsilon, spc=spc), "restarts": 64}


def _from_preset(help_text: str) -> dict:
    return {"help": help_text + " (default: from --preset)"}


@register_victim("psg")
@filled_from_preset
@dataclass(frozen=True)
class PSGVictim(PacksRuns, ReleasesData):
    """A synthetic set learned by matching DP-sanitised gradients; the downstream ConvNet trains on it.
    Fields left at None take `preset`'s values (`victims.presets`)."""

    #: `--compile auto`'s break-even runs per worker by image size (docs/performance.md)
    compile_break_even: ClassVar[dict[int, int]] = {64: 176, 784: 9}

    epsilon: float = field(default=10.0, metadata={"help": "target epsilon (DP victims)"})
    delta: float = field(default=1e-5, metadata={"help": "target delta (DP victims)"})
    spc: int = field(default=10, metadata={"help": "synthetic samples per class"})
    preset: str = field(
        default="digits",
        metadata={
            "help": "defaults of the generation loop: digits (sized for 2 CPU cores), faithful (digits run until more "
            "noisy steps stop helping: 64 restarts) or paper (PSG supplement C.3)",
            "choices": PRESETS,
        },
    )
    prior: bool = field(
        default=False, metadata={"help": "generator-prior variant (optimise a generator on fixed latent codes)"}
    )
    restarts: int | None = field(default=None, metadata=_from_preset("R: fresh classifiers"))
    outer: int | None = field(default=None, metadata=_from_preset("T: outer iterations per restart"))
    inner: int | None = field(
        default=None, metadata=_from_preset("J: classifier epochs on the synthetic set per outer iteration")
    )
    batches: int | None = field(default=None, metadata=_from_preset("K: noisy real batches per outer iteration"))
    batch_size: int | None = field(default=None, metadata=_from_preset("expected Poisson batch size"))
    max_grad_norm: float | None = field(default=None, metadata=_from_preset("per-example clipping norm C"))
    lr_images: float | None = field(default=None, metadata=_from_preset("learning rate of the synthetic images"))
    lr_net: float | None = field(default=None, metadata=_from_preset("learning rate of the classifier's inner steps"))
    lr_generator: float | None = field(
        default=None, metadata=_from_preset("Adam learning rate of the generator (--prior)")
    )
    momentum: float | None = field(default=None, metadata=_from_preset("SGD momentum of the synthetic images"))
    latent_dim: int = field(default=32, metadata={"help": "latent code size of the generator (--prior)"})
    accountant: str = accountant_field()
    net: NetConfig = field(default_factory=lambda: NetConfig(width=16))  # the network whose gradients are matched
    train: TrainConfig = field(default_factory=small_set_training)  # the downstream ConvNet on the release

    @classmethod
    def preset_values(cls, values: Mapping[str, Any]) -> dict:
        """The fields `--preset` fills where they are left at None, at the configuration's epsilon
        and spc; {} for a preset or spc that `__post_init__` refuses (naming it)."""
        if values["preset"] not in PRESETS or not values["spc"] >= 1:
            return {}
        values_of = {"digits": digits_values, "faithful": faithful_values, "paper": paper_values}[values["preset"]]
        return values_of(epsilon=values["epsilon"], spc=values["spc"])

    def __post_init__(self) -> None:
        require_privacy_target(self)
        require_at_least(self, {"spc": 1})
        if self.preset not in PRESETS:
            raise ValueError(f"--preset must be one of {PRESETS}, got {self.preset!r}")
        require_accountant(self)
        require_filled(self)
        require_at_least(self, {"restarts": 1, "outer": 1, "inner": 0, "batches": 1, "batch_size": 1, "latent_dim": 1})
        require_positive(self, ("max_grad_norm", "lr_images", "lr_net", "lr_generator"))
        require_momentum(self)

    @property
    def noisy_steps(self) -> int:
        """R * T * K: the subsampled Gaussian mechanisms the accountant composes."""
        return self.restarts * self.outer * self.batches

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        poisson_rate(self.batch_size, pool, inclusion_rate)
        if self.prior:
            ConditionalGenerator(latent_dim=1, n_classes=pool.n_classes, image_shape=pool.image_shape, width=1)

    def privacy(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> tuple[float, float, float]:
        """(noise multiplier sigma, Poisson rate B/N, the accountant's epsilon after R*T*K steps) for the
        public N = q * n_pool; sigma is opacus's, calibrated to the target epsilon."""
        sample_rate = poisson_rate(self.batch_size, pool, inclusion_rate)
        sigma = noise_multiplier_for(
            epsilon=self.epsilon,
            delta=self.delta,
            sample_rate=sample_rate,
            steps=self.noisy_steps,
            accountant=self.accountant,
        )
        spent = epsilon_spent(
            noise_multiplier=sigma,
            sample_rate=sample_rate,
            steps=self.noisy_steps,
            delta=self.delta,
            accountant=self.accountant,
        )
        return sigma, sample_rate, spent

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        x, y = training_set(pool, np.flatnonzero(training_keep(pool, keep)), device=device)
        sigma, sample_rate, spent = self.privacy(pool, inclusion_rate)
        probe = open_probe(pool, keep, run_seed=seed, sample_rate=sample_rate, sensitivity=self.max_grad_norm)
        with seeded(seed, device) as generator:
            images, labels = self.generate(
                x, y, pool=pool, sigma=sigma, sample_rate=sample_rate, generator=generator, probe=probe
            )
            model = fit(
                images, labels, n_classes=pool.n_classes, config=self.train, flip_ok=pool.flip_ok, generator=generator
            )
            return self.observe(
                model,
                pool,
                images,
                labels,
                formal_epsilon=spent,
                mechanism=gaussian_steps(noise_multiplier=sigma, sample_rate=sample_rate, steps=self.noisy_steps),
                device=device,
                **whitebox_fields(probe, noise_multiplier=sigma),
            )

    def release_dimension(self, pool: Pool) -> int:
        """Coordinates of each noisy gradient: the matched (non-bias) parameters of the ConvNet."""
        net = build_net(self.net, image_shape=pool.image_shape, n_classes=pool.n_classes)
        return sum(p.numel() for p in net.parameters() if p.ndim > 1)

    def pack_runs(
        self, pool: Pool, keeps: np.ndarray, seeds: list[int], *, device: str, inclusion_rate: float
    ) -> list[Observations]:
        """The K runs together (`generate_packed`; in turn for the generator prior and under `--compile`).
        Each run draws what it draws alone, so it equals the unpacked run up to the order of float sums
        (tests/contracts/test_victims.py)."""
        sigma, sample_rate, spent = self.privacy(pool, inclusion_rate)
        mechanism = gaussian_steps(noise_multiplier=sigma, sample_rate=sample_rate, steps=self.noisy_steps)
        probes = [
            open_probe(pool, keep, run_seed=seed, sample_rate=sample_rate, sensitivity=self.max_grad_norm)
            for keep, seed in zip(keeps, seeds)
        ]
        members = [training_set(pool, np.flatnonzero(training_keep(pool, keep)), device=device) for keep in keeps]
        with seeded_runs(seeds, device) as runs:
            if self.prior or compiling():  # the generator prior, or the compiled synthetic step: in turn
                releases = []
                for k, ((x, y), probe) in enumerate(zip(members, probes)):
                    with runs.global_rng(k):
                        releases.append(
                            self.generate(
                                x,
                                y,
                                pool=pool,
                                sigma=sigma,
                                sample_rate=sample_rate,
                                generator=runs.generators[k],
                                probe=probe,
                            )
                        )
            else:
                releases = self.generate_packed(
                    members, pool=pool, sigma=sigma, sample_rate=sample_rate, runs=runs, probes=probes
                )
            trained = fit_runs(
                releases, runs, n_classes=pool.n_classes, config=self.train, flip_ok=pool.flip_ok, device=device
            )
        extras = [
            {
                **self.release_fields(pool, images, labels, formal_epsilon=spent, mechanism=mechanism),
                **whitebox_fields(probe, noise_multiplier=sigma),
            }
            for (images, labels), probe in zip(releases, probes)
        ]
        return observe_packed(trained, pool, device=device, extras=extras)

    def generate_packed(
        self,
        members: list[tuple[torch.Tensor, torch.Tensor]],
        *,
        pool: Pool,
        sigma: float,
        sample_rate: float,
        runs: SeededRuns,
        probes: list[CanaryProbe | None],
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`generate` (Algorithm 1) for K runs as one computation: one `GroupedNets` per restart, the
        synthetic sets as one [K, S, C, H, W] tensor, one forward and backward pass per noisy batch.
        Each run draws from its own generator what `generate` draws, in its order. Poisson batches become
        weights: a weight-0 candidate adds exactly nothing to the clipped sum, so run k's noisy sum is
        the Gaussian mechanism on its own Poisson batch (clip C, N(0, sigma^2 C^2), divide by B).

        Long because it is Algorithm 1's one numerical loop whose steps share the pack's state; the order
        of each run's draws, which the equality with the runs alone rests on, is easiest to check in one place."""
        k = len(members)
        device = members[0][0].device
        labels = torch.arange(pool.n_classes, device=device).repeat_interleave(self.spc)
        n_images = len(labels)
        pixels = torch.stack(
            [
                torch.randn((n_images, *pool.image_shape), generator=generator, device=generator.device)
                for generator in runs.generators
            ]
        ).to(device)
        pixels.requires_grad_(True)
        image_optimizer = torch.optim.SGD([pixels], lr=self.lr_images, momentum=self.momentum)
        counts = [len(x) for x, _ in members]
        x_all = torch.zeros((k, max(counts), *pool.image_shape), device=device)
        y_all = torch.zeros((k, max(counts)), dtype=torch.int64, device=device)
        draws = torch.ones((k, max(counts)), device=device)  # a padding slot is never sampled (u = 1)
        for run, (x, y) in enumerate(members):
            x_all[run, : len(x)], y_all[run, : len(x)] = x, y
        draw_rows = [row[:count] for row, count in zip(draws.unbind(0), counts)]
        run_index = torch.arange(k, device=device)[:, None]
        stacked_labels = labels.repeat(k)
        generators = runs.generators
        nets = None  # each run's fresh ConvNet of the restart, on the CPU where `build_net` draws it
        for restart in range(self.restarts):
            nets = draw_nets(runs, self.net, image_shape=pool.image_shape, n_classes=pool.n_classes, nets=nets)
            if restart == 0:  # one grouped net on the device for every restart, loaded in place after
                grouped = GroupedNets(nets).to(device)
                matched = grouped.matched_weights()
                net_optimizer = torch.optim.SGD(grouped.parameters(), lr=self.lr_net, foreach=True)
            else:
                grouped.load_from(nets)
            for outer in range(self.outer):
                for _ in range(self.batches):
                    for row, generator in zip(draw_rows, generators):
                        row.uniform_(generator=generator)  # `poisson_sample`'s torch.rand
                    sampled = (draws < sample_rate).to(x_all.dtype)
                    batch = int(sampled.sum(1).max())
                    if batch:
                        order = torch.sort(sampled, dim=1, descending=True, stable=True).indices[:, :batch]
                        sums = grouped_clipped_gradient_sums(
                            grouped,
                            x_all[run_index, order],
                            y_all[run_index, order],
                            sampled.gather(1, order),
                            max_norm=self.max_grad_norm,
                        )
                    else:
                        sums = [torch.zeros(k, *grouped.run_shape(w), device=device) for w in matched]
                    noisy = gaussian_release_packed(
                        sums, std=sigma * self.max_grad_norm, generators=generators, probes=probes
                    )
                    real = [s / self.batch_size for s in noisy]
                    with training_autocast(device):  # bf16 under --precision bf16 (victims.precision)
                        out = grouped(pixels)
                        loss = F.cross_entropy(out.flatten(0, 1), stacked_labels, reduction="none")
                    loss = loss.view(k, -1).mean(1)
                    synthetic = torch.autograd.grad(loss.sum(), matched, create_graph=True)
                    # each run's output units as rows of one matrix per layer: the layer-wise
                    # distance is a sum over rows, so the K distances are summed
                    rows = [k * grouped.run_shape(w)[0] for w in matched]
                    distance = gradient_distance(
                        [g.reshape(n, -1) for g, n in zip(synthetic, rows)],
                        [r.reshape(n, -1) for r, n in zip(real, rows)],
                    )
                    image_optimizer.zero_grad(set_to_none=True)
                    (pixels.grad,) = torch.autograd.grad(distance, [pixels])
                    image_optimizer.step()
                if outer < self.outer - 1:  # as in the reference: no inner steps after the last one
                    images = pixels.detach()
                    for _ in range(self.inner):
                        order = torch.stack(
                            [torch.randperm(n_images, generator=g, device=g.device) for g in generators]
                        ).to(device)
                        for chunk in order.split(self.batch_size, dim=1):
                            with training_autocast(device):
                                out = grouped(images[run_index, chunk])
                                losses = F.cross_entropy(out.flatten(0, 1), labels[chunk].flatten(), reduction="none")
                            net_optimizer.zero_grad(set_to_none=True)
                            losses.view(k, -1).mean(1).sum().backward()
                            net_optimizer.step()
        return [(images, labels) for images in pixels.detach()]

    def observe(
        self,
        model,
        pool: Pool,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        formal_epsilon: float,
        mechanism: dict,
        device: str,
        **whitebox,
    ) -> Observations:
        """A run's observations: the downstream model's, with `release_fields`."""
        fields = self.release_fields(pool, images, labels, formal_epsilon=formal_epsilon, mechanism=mechanism)
        return observe(model, pool, device=device, **fields, **whitebox)

    def release_fields(
        self, pool: Pool, images: torch.Tensor, labels: torch.Tensor, *, formal_epsilon: float, mechanism: dict
    ) -> dict:
        """The Observations fields beside the downstream model's: the release (pixel scale), the
        accountant's epsilon and delta and the mechanism it composed."""
        return {
            "formal_epsilon": formal_epsilon,
            "mechanism": mechanism,
            "delta": self.delta,
            "release_x": to_pixel_space(images, mean=pool.mean, std=pool.std),
            "release_y": labels.cpu().numpy(),
        }

    def generate(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        pool: Pool,
        sigma: float,
        sample_rate: float,
        generator: torch.Generator,
        probe: CanaryProbe | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Algorithm 1 (or 2 with `prior`) on the members (x, y) in model space -> the synthetic set; each
        noisy step samples at the public `sample_rate` and divides by `batch_size` B."""
        device = x.device
        labels = torch.arange(pool.n_classes, device=device).repeat_interleave(self.spc)
        synthetic = SyntheticSet.create(self, pool=pool, labels=labels, generator=generator)
        for _ in range(self.restarts):
            net = build_net(self.net, image_shape=pool.image_shape, n_classes=pool.n_classes).to(device)
            matched = {name: p for name, p in net.named_parameters() if p.ndim > 1}
            net_optimizer = torch.optim.SGD(net.parameters(), lr=self.lr_net)
            for outer in range(self.outer):
                for _ in range(self.batches):
                    batch = poisson_sample(len(x), sample_rate, generator=generator)
                    real = noisy_mean_gradient(
                        net,
                        matched,
                        x[batch],
                        y[batch],
                        max_grad_norm=self.max_grad_norm,
                        noise_multiplier=sigma,
                        expected_batch_size=self.batch_size,
                        generator=generator,
                        probe=probe,
                    )
                    synthetic.step(net, matched, real)
                if outer < self.outer - 1:  # as in the reference: no inner steps after the last one
                    images = synthetic.images().detach()
                    for _ in range(self.inner):
                        for chunk in torch.randperm(len(labels), generator=generator, device=generator.device).split(
                            self.batch_size
                        ):
                            net_optimizer.zero_grad(set_to_none=True)
                            with training_autocast(device):
                                loss = F.cross_entropy(net(images[chunk]), labels[chunk])
                            loss.backward()
                            net_optimizer.step()
        return synthetic.images().detach(), labels


@dataclasses.dataclass
class SyntheticSet:
    """The learnable release: free pixels (model space), or a generator on fixed latent codes."""

    labels: torch.Tensor
    optimizer: torch.optim.Optimizer
    pixels: torch.Tensor | None = None
    generator_net: nn.Module | None = None
    latents: torch.Tensor | None = None
    pool: Pool | None = None  # its mean and std take generated pixels to model space

    @classmethod
    def create(cls, config: PSGVictim, *, pool: Pool, labels: torch.Tensor, generator: torch.Generator) -> SyntheticSet:
        device = labels.device
        if not config.prior:
            pixels = torch.randn((len(labels), *pool.image_shape), generator=generator, device=device)
            pixels.requires_grad_(True)
            optimizer = torch.optim.SGD([pixels], lr=config.lr_images, momentum=config.momentum)
            return cls(labels=labels, optimizer=optimizer, pixels=pixels)
        net = ConditionalGenerator(
            latent_dim=config.latent_dim, n_classes=pool.n_classes, image_shape=pool.image_shape
        ).to(device)
        latents = torch.randn((len(labels), config.latent_dim), generator=generator, device=device)
        return cls(
            labels=labels,
            optimizer=torch.optim.Adam(net.parameters(), lr=config.lr_generator),
            generator_net=net,
            latents=latents,
            pool=pool,
        )

    def images(self) -> torch.Tensor:
        """The synthetic images in model space."""
        if self.pixels is not None:
            return self.pixels
        pixels = self.generator_net(self.latents, self.labels)
        return to_model_space(pixels, mean=self.pool.mean, std=self.pool.std, device=pixels.device)

    def step(self, net: nn.Module, matched: dict[str, torch.Tensor], real_gradient: list[torch.Tensor]) -> None:
        """One optimiser step on the distance between the synthetic and the (noisy) real gradient."""
        if self.pixels is not None and compiling():
            self.optimizer.zero_grad(set_to_none=True)
            self.pixels.grad = maybe_compiled(pixel_gradient)(
                net, matched, self.pixels.detach(), self.labels, real_gradient
            )
            self.optimizer.step()
            return
        with training_autocast(self.labels.device):  # bf16 under --precision bf16 (victims.precision)
            loss = F.cross_entropy(net(self.images()), self.labels)
        synthetic_gradient = torch.autograd.grad(loss, list(matched.values()), create_graph=True)
        distance = gradient_distance(synthetic_gradient, real_gradient)
        learnable = [self.pixels] if self.pixels is not None else list(self.generator_net.parameters())
        self.optimizer.zero_grad(set_to_none=True)
        for p, g in zip(learnable, torch.autograd.grad(distance, learnable)):
            p.grad = g
        self.optimizer.step()


def pixel_gradient(
    net: nn.Module,
    matched: dict[str, torch.Tensor],
    pixels: torch.Tensor,
    labels: torch.Tensor,
    real_gradient: list[torch.Tensor],
) -> torch.Tensor:
    """d/d pixels of the gradient distance `SyntheticSet.step` descends, by torch.func (grad of a grad)
    so that torch.compile can trace it (`--compile on`); the eager step stays autograd's."""
    frozen = {name: p.detach() for name, p in net.named_parameters() if name not in matched}
    frozen.update(dict(net.named_buffers()))
    weights = {name: p.detach() for name, p in matched.items()}

    def distance(images: torch.Tensor) -> torch.Tensor:
        def loss(w: dict[str, torch.Tensor]) -> torch.Tensor:
            return F.cross_entropy(torch.func.functional_call(net, {**frozen, **w}, (images,)), labels)

        synthetic_gradient = torch.func.grad(loss)(weights)
        return gradient_distance([synthetic_gradient[name] for name in matched], real_gradient)

    return torch.func.grad(distance)(pixels)


def noisy_mean_gradient(
    net: nn.Module,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    max_grad_norm: float,
    noise_multiplier: float,
    expected_batch_size: int,
    generator: torch.Generator,
    probe: CanaryProbe | None = None,
) -> list[torch.Tensor]:
    """PSG's noisy real gradient, the Gaussian mechanism on a Poisson batch: (sum of clipped per-example
    gradients + N(0, sigma^2 C^2)) / B per parameter; an empty batch gives pure noise."""
    sums = clipped_gradient_sum(net, params, x, y, max_norm=max_grad_norm) if len(x) else None
    return gaussian_mean(
        None,
        params,
        clipped_sum=sums,
        max_grad_norm=max_grad_norm,
        noise_multiplier=noise_multiplier,
        expected_batch_size=expected_batch_size,
        generator=generator,
        probe=probe,
    )
