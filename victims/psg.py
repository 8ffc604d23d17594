"""`psg`: private set generation (Chen, Kerkouche and Fritz, NeurIPS 2022; PSG paper Algorithm 1).

A synthetic set of `spc` images per class, initialised from Gaussian noise with balanced labels,
learns by matching the gradients of a classifier on it to DP-sanitised gradients of the members.
For each of R restarts of the classifier: T outer iterations, each of K batches (a Poisson sample
of the members at rate B/N -> per-example gradients, each clipped to norm C -> summed with
N(0, sigma^2 C^2) noise -> divided by B -> one step of the synthetic set on the layer-wise cosine
distance of `victims.matching`), then J steps of the classifier on the synthetic set. Only the
R*T*K noisy gradients touch the members, so the release is (epsilon, delta)-DP by the subsampled
Gaussian mechanism composed over R*T*K steps; sigma comes from opacus's accountant.

N is the plan's expected member count q * n_pool (`victims.base.expected_members`), not the
run's actual count (Binomial(n_pool, q) under the plan of independent coins): the rate B/N, sigma
and the recorded epsilon are public, the same for every run, as the add/remove accounting
requires; each member enters each batch with probability B/N whatever the run's count.

`--prior` is the generator-prior variant (supplement Algorithm 2): the images are the outputs of
a small conditional generator on fixed latent codes, and its parameters are optimised instead.

Per-example gradients: the mechanism needs only the sum of the clipped per-example gradients,
which `clipped_gradient_sum` computes from each layer's inputs and output gradients (one forward,
one backward pass) with ghost norms, forming per-example gradients only where that is cheaper
(the first convolution). It equals the torch.func vmap(grad) path (`per_example_gradients`, kept
as its reference and fallback) to float rounding and is 8-9 times faster at the reference's
width-128 ConvNet (bench/profiling.py modes).

Departure from the reference code: only the matched parameters (weights of two or more
dimensions) get per-example gradients, and the clipping norm is taken over them. The distance
ignores biases and normalisation scales, so the reference clipped and noised gradients it never
used; leaving them out releases less and spends the clipping budget on what is matched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from audit.accounting import ACCOUNTANTS, epsilon_spent, noise_multiplier_for
from victims.base import (DEFAULT_INCLUSION_RATE, Observations, observe, poisson_rate, register_victim,
                          require_at_least, require_momentum, require_positive, require_privacy_target, seeded)
from victims.data import Pool
from victims.matching import gradient_distance
from victims.nets import ConditionalGenerator, NetConfig, build_net
from victims.train import TrainConfig, fit, small_set_training, to_model_space, to_pixel_space

PRESETS = ("digits", "paper")

#: supplement C.3: (T outer, J inner) iterations by samples per class
PAPER_LOOPS = {1: (1, 1), 10: (10, 50), 20: (20, 25), 50: (50, 10)}


def paper_values(*, epsilon: float, spc: int) -> dict:
    """The supplement's hyper-parameters (C.3). It gives R for epsilon 1 and 10 and (T, J) for
    spc 1, 10, 20 and 50; other values take the setting of the next smaller one listed."""
    loops = PAPER_LOOPS[max([s for s in PAPER_LOOPS if s <= spc])]
    return dict(restarts=1000 if epsilon >= 10 else 200, outer=loops[0], inner=loops[1], batches=10,
                batch_size=256, max_grad_norm=0.1, lr_images=0.1, lr_net=0.01, lr_generator=0.01,
                momentum=0.5)


def digits_values(*, epsilon: float, spc: int) -> dict:
    """Defaults sized for the embedded digits dataset on two CPU cores: 32 noisy steps, so that
    `python -m audit.lira --victim psg --n-shadow 256` stays within 10 minutes (bench/psg.py).
    Measured at spc 10 and epsilon 10 with the width-16 matching ConvNet: lr_images 10 gave 72%
    test accuracy against 62% at 30 and 49% at 1 (2 seeds each); batch 256 beat 128 (62%) and
    64 (41-49%); width 16 beat 32 and 64. Five restarts instead of four gave 69.5% against 65.8%
    (8 runs each) for 29% more time per run."""
    return dict(restarts=4, outer=4, inner=5, batches=2, batch_size=256, max_grad_norm=0.1,
                lr_images=10.0, lr_net=0.01, lr_generator=0.01, momentum=0.5)


def _from_preset(help_text: str) -> dict:
    return {"help": help_text + " (default: from --preset)"}


@register_victim("psg")
@dataclass(frozen=True)
class PSGVictim:
    """A synthetic set learned by matching DP-sanitised gradients; the downstream ConvNet is
    trained on it. Fields left at None take the value of `preset`."""

    epsilon: float = field(default=10.0, metadata={"help": "target epsilon (DP victims)"})
    delta: float = field(default=1e-5, metadata={"help": "target delta (DP victims)"})
    spc: int = field(default=10, metadata={"help": "synthetic samples per class"})
    preset: str = field(default="digits", metadata={
        "help": "defaults of the generation loop: digits (sized for 2 CPU cores) or paper (PSG supplement C.3)",
        "choices": PRESETS})
    prior: bool = field(default=False, metadata={"help": "generator-prior variant (optimise a generator on fixed latent codes)"})
    restarts: int | None = field(default=None, metadata=_from_preset("R: fresh classifiers"))
    outer: int | None = field(default=None, metadata=_from_preset("T: outer iterations per restart"))
    inner: int | None = field(default=None, metadata=_from_preset("J: classifier epochs on the synthetic set per outer iteration"))
    batches: int | None = field(default=None, metadata=_from_preset("K: noisy real batches per outer iteration"))
    batch_size: int | None = field(default=None, metadata=_from_preset("expected Poisson batch size"))
    max_grad_norm: float | None = field(default=None, metadata=_from_preset("per-example clipping norm C"))
    lr_images: float | None = field(default=None, metadata=_from_preset("learning rate of the synthetic images"))
    lr_net: float | None = field(default=None, metadata=_from_preset("learning rate of the classifier's inner steps"))
    lr_generator: float | None = field(default=None, metadata=_from_preset("Adam learning rate of the generator (--prior)"))
    momentum: float | None = field(default=None, metadata=_from_preset("SGD momentum of the synthetic images"))
    latent_dim: int = field(default=32, metadata={"help": "latent code size of the generator (--prior)"})
    accountant: str = field(default="rdp", metadata={"help": "opacus accountant", "choices": ACCOUNTANTS})
    net: NetConfig = field(default_factory=lambda: NetConfig(width=16))  # the network whose gradients are matched
    train: TrainConfig = field(default_factory=small_set_training)  # the downstream ConvNet on the release

    def __post_init__(self) -> None:
        require_privacy_target(self)
        require_at_least(self, {"spc": 1})
        if self.preset not in PRESETS:
            raise ValueError(f"--preset must be one of {PRESETS}, got {self.preset!r}")
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"--accountant must be one of {ACCOUNTANTS}, got {self.accountant!r}")
        preset = (paper_values if self.preset == "paper" else digits_values)(epsilon=self.epsilon, spc=self.spc)
        for name, value in preset.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
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
        """(noise multiplier sigma, Poisson rate B/N, the accountant's epsilon after R*T*K steps)
        for N = q * n_pool, the plan's expected member count (public: never the run's actual
        count); sigma is opacus's, calibrated to spend the target epsilon."""
        sample_rate = poisson_rate(self.batch_size, pool, inclusion_rate)
        sigma = noise_multiplier_for(epsilon=self.epsilon, delta=self.delta, sample_rate=sample_rate,
                                     steps=self.noisy_steps, accountant=self.accountant)
        spent = epsilon_spent(noise_multiplier=sigma, sample_rate=sample_rate, steps=self.noisy_steps,
                              delta=self.delta, accountant=self.accountant)
        return sigma, sample_rate, spent

    def run(self, pool: Pool, keep: np.ndarray, seed: int, *, device: str = "cpu",
            inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> Observations:
        idx = np.flatnonzero(keep)
        x = to_model_space(pool.x[idx], mean=pool.mean, std=pool.std, device=device)
        y = torch.as_tensor(pool.y[idx], device=device)
        sigma, sample_rate, spent = self.privacy(pool, inclusion_rate)
        with seeded(seed, device) as generator:
            images, labels = self.generate(x, y, pool=pool, sigma=sigma, sample_rate=sample_rate, generator=generator)
            model = fit(images, labels, n_classes=pool.n_classes, config=self.train, flip_ok=pool.flip_ok,
                        generator=generator)
            return observe(model, pool, device=device, formal_epsilon=spent, delta=self.delta,
                           release_x=to_pixel_space(images, mean=pool.mean, std=pool.std), release_y=labels.cpu().numpy())

    def generate(self, x: torch.Tensor, y: torch.Tensor, *, pool: Pool, sigma: float, sample_rate: float,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Algorithm 1 (or 2 with `prior`) on the members (x, y) in model space -> the synthetic set.
        Every noisy step samples each member with probability `sample_rate` (the public B / (q n_pool))
        and divides its noisy sum by `batch_size` B."""
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
                        net, matched, x[batch], y[batch], max_grad_norm=self.max_grad_norm,
                        noise_multiplier=sigma, expected_batch_size=self.batch_size, generator=generator,
                    )
                    synthetic.step(net, list(matched.values()), real)
                if outer < self.outer - 1:  # as in the reference: no inner steps after the last one
                    images = synthetic.images().detach()
                    for _ in range(self.inner):
                        for chunk in torch.randperm(len(labels), generator=generator, device=generator.device).split(self.batch_size):
                            net_optimizer.zero_grad(set_to_none=True)
                            F.cross_entropy(net(images[chunk]), labels[chunk]).backward()
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
        net = ConditionalGenerator(latent_dim=config.latent_dim, n_classes=pool.n_classes,
                                   image_shape=pool.image_shape).to(device)
        latents = torch.randn((len(labels), config.latent_dim), generator=generator, device=device)
        return cls(labels=labels, optimizer=torch.optim.Adam(net.parameters(), lr=config.lr_generator),
                   generator_net=net, latents=latents, pool=pool)

    def images(self) -> torch.Tensor:
        """The synthetic images in model space."""
        if self.pixels is not None:
            return self.pixels
        pixels = self.generator_net(self.latents, self.labels)
        return to_model_space(pixels, mean=self.pool.mean, std=self.pool.std, device=pixels.device)

    def step(self, net: nn.Module, matched: list[torch.Tensor], real_gradient: list[torch.Tensor]) -> None:
        """One optimiser step on the distance between the synthetic and the (noisy) real gradient."""
        loss = F.cross_entropy(net(self.images()), self.labels)
        synthetic_gradient = torch.autograd.grad(loss, matched, create_graph=True)
        distance = gradient_distance(synthetic_gradient, real_gradient)
        learnable = [self.pixels] if self.pixels is not None else list(self.generator_net.parameters())
        self.optimizer.zero_grad(set_to_none=True)
        for p, g in zip(learnable, torch.autograd.grad(distance, learnable)):
            p.grad = g
        self.optimizer.step()


def poisson_sample(n: int, rate: float, *, generator: torch.Generator) -> torch.Tensor:
    """Indices of a Poisson sample: each of the n examples independently with probability `rate`."""
    return torch.nonzero(torch.rand(n, generator=generator, device=generator.device) < rate).flatten()


def per_example_gradients(net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor,
                          y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients of each example's cross-entropy w.r.t. `params`: [batch, *shape] per parameter,
    by torch.func (vmap over grad), never a loop over examples. The reference that
    `clipped_gradient_sum` is tested against, and its fallback for layers it does not cover."""
    frozen = {name: p.detach() for name, p in net.named_parameters() if name not in params}
    frozen.update(dict(net.named_buffers()))

    def loss(weights, xi, yi):
        out = functional_call(net, {**frozen, **weights}, (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    weights = {name: p.detach() for name, p in params.items()}
    return vmap(grad(loss), in_dims=(None, 0, 0), randomness="error")(weights, x, y)


@dataclass
class _LayerFactors:
    """What the per-example weight gradients of one linear or convolutional layer are made of:
    example i's gradient is backprops[i]^T @ activations[i], a sum over the T positions the
    weight is applied at (T = 1 for a linear layer on vectors, H'W' for a convolution)."""

    activations: torch.Tensor  # [n, T, p]: the layer's input (its patches for a convolution)
    backprops: torch.Tensor  # [n, T, o]: d(summed loss)/d(layer output)

    def per_example(self) -> torch.Tensor:
        """[n, o, p]: every example's gradient, formed (for tests; the mechanism never does)."""
        return torch.bmm(self.backprops.transpose(1, 2), self.activations)

    def squared_norms(self) -> torch.Tensor:
        """||gradient of example i||^2, [n]. The ghost norm where it is cheaper (Li et al. 2022;
        the per-layer choice of Bu et al.'s mixed ghost clipping, NeurIPS 2022; opacus 1.6's ghost
        clipping has it for linear layers only): sum_{t,s} (A_i A_i^T)_{ts} (G_i G_i^T)_{ts},
        T^2 (p + o) operations per example against the T p o of forming the [o, p] gradient,
        which it then never materialises."""
        a, g = self.activations, self.backprops
        n, positions, p = a.shape
        o = g.shape[2]
        if positions == 1:
            return a.pow(2).sum((1, 2)) * g.pow(2).sum((1, 2))
        if positions * (p + o) < p * o:
            return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
        return self.per_example().pow(2).sum((1, 2))

    def weighted_sum(self, weights: torch.Tensor) -> torch.Tensor:
        """sum_i weights[i] * gradient of example i, [o, p]: one [o, n T] x [n T, p] product."""
        n, positions, p = self.activations.shape
        g = (self.backprops * weights.view(-1, 1, 1)).reshape(n * positions, -1)
        return g.t() @ self.activations.reshape(n * positions, p)


def _patches(x: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """[n, c, H, W] -> [n, H'W', c kh kw]: the input patch under each output position, in the
    weight's (c, kh, kw) order. Views and one copy (F.unfold loops over the batch on the CPU)."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = conv.kernel_size, conv.dilation, conv.padding, conv.stride
    x = F.pad(x, (pw, pw, ph, ph))
    windows = x.unfold(2, dh * (kh - 1) + 1, sh).unfold(3, dw * (kw - 1) + 1, sw)[..., ::dh, ::dw]
    n, c, rows, cols = windows.shape[:4]  # windows: [n, c, H', W', kh, kw]
    return windows.permute(0, 2, 3, 1, 4, 5).reshape(n, rows * cols, c * kh * kw)


def _layer_factors(net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor,
                   y: torch.Tensor) -> dict[str, _LayerFactors] | None:
    """One forward pass (forward hooks on the layers owning `params`, removed before it returns)
    and one backward pass to the layers' outputs: their inputs and output gradients. Only data
    gradients are computed; no parameter's `.grad` is touched. None where some parameter is not
    the weight of an `nn.Linear` or an ungrouped, zero-padded `nn.Conv2d` called once."""
    owners: dict[int, list] = {}
    for module in net.modules():
        for kind, p in module.named_parameters(recurse=False, remove_duplicate=False):
            owners.setdefault(id(p), []).append((module, kind))
    layers: dict[nn.Module, str] = {}
    for name, p in params.items():
        owner = owners.get(id(p), [])
        if len(owner) != 1:  # not the net's, or shared between modules
            return None
        module, kind = owner[0]
        supported = kind == "weight" and (
            type(module) is nn.Linear
            or (type(module) is nn.Conv2d and module.groups == 1 and module.padding_mode == "zeros"
                and not isinstance(module.padding, str)))
        if not supported or module in layers:
            return None
        layers[module] = name
    seen: dict[nn.Module, list] = {}

    def capture(module, inputs, output):
        seen.setdefault(module, []).append((inputs[0].detach(), output, output._version))

    handles = [module.register_forward_hook(capture) for module in layers]
    try:
        with torch.enable_grad():
            loss = F.cross_entropy(net(x), y, reduction="sum")
    finally:
        for handle in handles:
            handle.remove()
    if any(len(seen.get(module, ())) != 1 or seen[module][0][1]._version != seen[module][0][2] for module in layers):
        return None  # a layer unused, called twice (tied weights), or its output changed in place
    modules = list(layers)
    outputs = [seen[module][0][1] for module in modules]
    backprops = torch.autograd.grad(loss, outputs)
    factors = {}
    n = len(x)
    for module, g in zip(modules, backprops):
        a = seen[module][0][0]
        if type(module) is nn.Conv2d:
            a = _patches(a, module)
            g = g.flatten(2).transpose(1, 2)
        else:  # [n, ..., features]: every position in between shares the weight
            a = a.reshape(n, -1, a.shape[-1])
            g = g.reshape(n, -1, g.shape[-1])
        factors[layers[module]] = _LayerFactors(activations=a, backprops=g)
    return factors


def clipped_gradient_sum(net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *,
                         max_norm: float) -> list[torch.Tensor]:
    """sum_i clip(gradient of example i's cross-entropy w.r.t. `params`, `max_norm`), one tensor
    per parameter: the same numbers as `clip_per_example(per_example_gradients(...))` summed over
    the batch, from each layer's inputs and output gradients (`_layer_factors`), with ghost norms
    wherever they are cheaper than forming the gradients. Falls back to that torch.func path for
    parameters `_layer_factors` does not cover.

    Why: median seconds per noisy batch (per-example gradients + clipping + sum + noise) on one
    thread, digits, a batch of 256, every variant alternating in one process beside other jobs
    (`python bench/profiling.py modes`, 9 and 40 repeats):

        ConvNet                      vmap(grad)  opacus hooks  functorch  ew     ghost  this
        width 128, depth 3 (PSG ref)   1.000       0.895       1.208    0.586  0.497  0.115
        width 16, depth 2 (digits)     0.015       0.012       0.017    0.011  0.015  0.014

    (opacus 1.6: GradSampleModule with hooks and with force_functorch, expanded weights, ghost
    clipping, which forms the convolutions' per-example gradients and takes a second backward
    pass.) Forming [256, 128, 128, 3, 3] gradients is memory traffic that the ghost norms of the
    deeper convolutions avoid; at the digits preset's width 16 every variant is within noise.
    """
    factors = _layer_factors(net, params, x, y)
    if factors is None:
        clipped = clip_per_example(per_example_gradients(net, params, x, y), max_norm)
        return [clipped[name].sum(0) for name in params]
    squares = sum(f.squared_norms() for f in factors.values())
    scale = (max_norm / (squares.sqrt() + 1e-12)).clamp(max=1.0)  # as clip_per_example
    return [factors[name].weighted_sum(scale).reshape(p.shape) for name, p in params.items()]


def clip_per_example(grads: dict[str, torch.Tensor], max_norm: float) -> dict[str, torch.Tensor]:
    """Scale each example's gradient (all parameters together) to L2 norm at most `max_norm`."""
    squares = sum(g.flatten(1).pow(2).sum(1) for g in grads.values())
    scale = (max_norm / (squares.sqrt() + 1e-12)).clamp(max=1.0)
    return {name: g * scale.view(-1, *([1] * (g.ndim - 1))) for name, g in grads.items()}


def noisy_mean_gradient(net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *,
                        max_grad_norm: float, noise_multiplier: float, expected_batch_size: int,
                        generator: torch.Generator) -> list[torch.Tensor]:
    """The Gaussian mechanism on a Poisson batch: (sum of clipped per-example gradients +
    N(0, sigma^2 C^2)) / B, one tensor per parameter of `params`. An empty batch gives pure noise."""
    sums = clipped_gradient_sum(net, params, x, y, max_norm=max_grad_norm) if len(x) else None
    return gaussian_mean(None, params, clipped_sum=sums, max_grad_norm=max_grad_norm, noise_multiplier=noise_multiplier,
                         expected_batch_size=expected_batch_size, generator=generator)


def gaussian_mean(per_example: dict[str, torch.Tensor] | None, params: dict[str, torch.Tensor], *,
                  max_grad_norm: float, noise_multiplier: float, expected_batch_size: int,
                  generator: torch.Generator, clipped_sum: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """(sum of the per-example gradients, each clipped to norm C, + N(0, sigma^2 C^2)) / B, one
    tensor per parameter of `params`. The sum is that of `per_example` ([batch, *shape] per
    parameter, clipped here) or, given instead, `clipped_sum` (one tensor per parameter, already
    clipped and summed: `clipped_gradient_sum`); both None (an empty Poisson batch) gives pure noise."""
    if per_example is not None and clipped_sum is not None:
        raise ValueError("give per-example gradients or their clipped sum, not both")
    if per_example is not None:
        clipped = clip_per_example(per_example, max_grad_norm)
        clipped_sum = [clipped[name].sum(0) for name in params]
    elif clipped_sum is None:
        clipped_sum = [torch.zeros_like(p) for p in params.values()]
    std = noise_multiplier * max_grad_norm
    return [(s + std * torch.randn(s.shape, generator=generator, device=generator.device).to(s.device)) / expected_batch_size
            for s in clipped_sum]
