"""The differential-privacy machinery every DP victim shares, each piece with the result it rests on.

Accounting is opacus's: the Renyi-DP accountant (`rdp`: the sampled Gaussian mechanism, Mironov,
Talwar and Zhang 2019; composition, Mironov 2017) or the PRV accountant (`prv`: Gopi, Lee and
Wutschitz 2021). Without subsampling, calibration is exact mu-GDP (Dong, Roth and Su 2022, Theorem 2.7,
Corollaries 2.13 and 3.3). Sampling is Poisson at a fixed public rate (add/remove of one record);
clipping to L2 norm C bounds a sum's sensitivity by C; the Gaussian mechanism adds N(0, sigma^2 C^2)."""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from victims.base import DEFAULT_INCLUSION_RATE, expected_members
from victims.compiled import maybe_compiled
from victims.precision import exact_float32
from victims.pool import Pool
from victims.dp.whitebox_canaries import CanaryProbe

ACCOUNTANTS = ("rdp", "prv")


# -- accounting (opacus) ------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet_orders():
    """Silence opacus's "optimal order is the largest alpha" warning; the bound it returns is still valid."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Oo]ptimal order.*", category=UserWarning)
        yield


def _check(*, epsilon: float | None = None, delta: float, sample_rate: float, steps: int, accountant: str) -> None:
    if epsilon is not None and not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")


@functools.lru_cache(maxsize=64)
def noise_multiplier_for(
    *, epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "rdp"
) -> float:
    """The noise multiplier sigma with which `steps` Poisson-subsampled Gaussian steps at
    `sample_rate` spend (epsilon, delta) under `accountant` (opacus's search, tolerance 0.01). Memoised."""
    from opacus.accountants.utils import get_noise_multiplier

    _check(epsilon=epsilon, delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant)
    with _quiet_orders():
        return float(
            get_noise_multiplier(
                target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant
            )
        )


def epsilon_spent(
    *, noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str = "rdp"
) -> float:
    """The accountant's epsilon at `delta` after `steps` subsampled Gaussian steps (`history_epsilon`'s, memoised)."""
    _check(delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant)
    return history_epsilon(((noise_multiplier, sample_rate, steps),), delta=delta, accountant=accountant)


@functools.lru_cache(maxsize=64)
def history_epsilon(history: tuple[tuple[float, float, int], ...], *, delta: float, accountant: str) -> float:
    """The epsilon at `delta` of an opacus `accountant` whose history is `history`: its (sigma, sample
    rate, steps) entries, as its optimizer hook records them. Memoised: every run of a store composes
    the same history, and the PRV accountant takes ~0.08 CPU-s to compose it."""
    from opacus.accountants import create_accountant

    acc = create_accountant(mechanism=accountant)
    acc.history = list(history)
    with _quiet_orders():
        return float(acc.get_epsilon(delta=delta))


def gaussian_steps(*, noise_multiplier: float, sample_rate: float, steps: int) -> dict:
    """`Observations.mechanism`: `steps` Poisson-subsampled Gaussian steps at (sigma, rate), the
    mechanism the accountant composes (`audit.stats.mechanism` tests its trade-off curve)."""
    return {"noise_multiplier": float(noise_multiplier), "sample_rate": float(sample_rate), "steps": int(steps)}


def accounted_fields(
    *, noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str = "rdp"
) -> dict:
    """The Observations' privacy fields for `steps` subsampled Gaussian steps at (sigma, rate):
    `formal_epsilon` at `delta` and the composed `mechanism`."""
    spent = epsilon_spent(
        noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps, delta=delta, accountant=accountant
    )
    return {
        "formal_epsilon": spent,
        "delta": delta,
        "mechanism": gaussian_steps(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps),
    }


# -- Gaussian differential privacy (no subsampling) --------------------------------------------
#: the largest target epsilon `composed_gaussian_noise` calibrates to (e^epsilon stays finite far beyond it)
MOST_GDP_EPSILON = 100.0


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon at `delta` of mu-GDP, exactly (Dong, Roth and Su 2022, Corollary 2.13; opacus's `eps_from_mu`)."""
    from opacus.accountants.analysis.gdp import eps_from_mu

    if not (mu > 0 and math.isfinite(mu)):
        raise ValueError(f"mu must be a positive number, got {mu}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return float(eps_from_mu(mu=mu, delta=delta))


@functools.lru_cache(maxsize=64)
def gdp_mu_for(epsilon: float, delta: float) -> float:
    """The mu whose mu-GDP is exactly (epsilon, delta)-DP: `gdp_epsilon`'s duality solved for mu
    (brentq to 1e-15). 0.26806 for (1, 1e-5)."""
    from opacus.accountants.analysis.gdp import delta_eps_mu
    from scipy import optimize

    if not (0 < epsilon <= MOST_GDP_EPSILON):
        raise ValueError(f"--epsilon must be in (0, {MOST_GDP_EPSILON:g}], got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"--delta must be in (0, 1), got {delta}")

    def gap(mu: float) -> float:
        return float(delta_eps_mu(eps=epsilon, mu=mu)) - delta

    high = 1.0
    while gap(high) < 0:
        high *= 2.0
    return float(optimize.brentq(gap, 1e-9, high, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def composed_gaussian_noise(*, epsilon: float, delta: float, compositions: int) -> float:
    """The sigma with which `compositions` Gaussian mechanisms of L2 sensitivity 1 compose to exactly
    (epsilon, delta)-DP: sqrt(k) / mu for mu = `gdp_mu_for`(epsilon, delta) (each is (1 / sigma)-GDP,
    Dong, Roth and Su 2022, Theorem 2.7; k compose to (sqrt(k) / sigma)-GDP, their Corollary 3.3)."""
    if int(compositions) != compositions or compositions < 1:
        raise ValueError(f"compositions must be an integer >= 1, got {compositions}")
    return math.sqrt(compositions) / gdp_mu_for(epsilon, delta)


# -- a DP victim's fields -------------------------------------------------------------------------
def require_privacy_target(config: Any) -> None:
    """ValueError naming the bad value unless `config.epsilon` is finite and > 0 and `config.delta` is in (0, 1)."""
    if not (config.epsilon > 0 and math.isfinite(config.epsilon)):
        raise ValueError(f"--epsilon must be a positive number, got {config.epsilon}")
    if not 0 < config.delta < 1:
        raise ValueError(f"--delta must be in (0, 1), got {config.delta}")


def accountant_field():
    """The `accountant` field of a DP victim: one of ACCOUNTANTS, RDP by default."""
    return field(default="rdp", metadata={"help": "opacus accountant", "choices": ACCOUNTANTS})


def require_accountant(config: Any) -> None:
    """ValueError naming the value unless `config.accountant` is one of ACCOUNTANTS."""
    if config.accountant not in ACCOUNTANTS:
        raise ValueError(f"--accountant must be one of {ACCOUNTANTS}, got {config.accountant!r}")


# -- Poisson sampling -----------------------------------------------------------------------------
def poisson_rate(batch_size: int, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> float:
    """B / (q * n_pool): the Poisson rate for expected batch size B over the public expected member
    count (`victims.base.expected_members`); ValueError when B exceeds that count."""
    members = expected_members(pool, inclusion_rate)
    if batch_size > members:
        raise ValueError(
            f"--batch-size {batch_size} exceeds the {members:g} members a run has on average "
            f"(inclusion rate {inclusion_rate:g} of {pool.n_pool})"
        )
    return batch_size / members


def poisson_sample(n: int, rate: float, *, generator: torch.Generator) -> torch.Tensor:
    """Indices of a Poisson sample: each of the n examples independently with probability `rate`."""
    return torch.nonzero(torch.rand(n, generator=generator, device=generator.device) < rate).flatten()


def poisson_batches(n: int, sample_rate: float, steps: int, *, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """`steps` Poisson batches of indices into n examples at `sample_rate` (opacus's
    UniformWithReplacementSampler; n = 0 gives empty batches)."""
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    if n == 0:
        for _ in range(steps):
            yield torch.zeros(0, dtype=torch.int64)
        return
    for indices in UniformWithReplacementSampler(
        num_samples=n, sample_rate=sample_rate, generator=generator, steps=steps
    ):
        yield torch.as_tensor(indices, dtype=torch.int64)


# -- clipped per-example gradients (sensitivity C) ----------------------------------------------
def per_example_gradients(
    net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Each example's cross-entropy gradient w.r.t. `params`, [batch, *shape] per parameter, by
    torch.func (vmap over grad). `clipped_gradient_sum`'s reference and fallback."""
    frozen = {name: p.detach() for name, p in net.named_parameters() if name not in params}
    frozen.update(dict(net.named_buffers()))

    def loss(weights, xi, yi):
        out = functional_call(net, {**frozen, **weights}, (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    weights = {name: p.detach() for name, p in params.items()}
    return vmap(grad(loss), in_dims=(None, 0, 0), randomness="error")(weights, x, y)


@dataclass
class _LayerFactors:
    """One linear or convolutional layer's per-example weight gradients in factored form: example i's
    is backprops[i]^T @ activations[i], summed over its T positions."""

    activations: torch.Tensor  # [n, T, p]: the layer's input (its patches for a convolution)
    backprops: torch.Tensor  # [n, T, o]: d(summed loss)/d(layer output)

    def per_example(self) -> torch.Tensor:
        """[n, o, p]: every example's gradient, formed (for tests; the mechanism never does)."""
        return torch.bmm(self.backprops.transpose(1, 2), self.activations)

    def squared_norms(self) -> torch.Tensor:
        """||gradient of example i||^2, [n]: the ghost norm sum_{t,s} (A_i A_i^T)_{ts} (G_i G_i^T)_{ts} where
        it is cheaper (Li et al. 2022; Bu et al.'s mixed ghost clipping, NeurIPS 2022), never forming the gradient."""
        a, g = self.activations, self.backprops
        if a.shape[1] == 1:
            return a.pow(2).sum((1, 2)) * g.pow(2).sum((1, 2))
        if not self.forms_gradients:
            return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
        return self.per_example().pow(2).sum((1, 2))

    @property
    def forms_gradients(self) -> bool:
        """Whether the norms form the per-example gradients: over T > 1 positions, where
        T (p + o) >= p o (the first convolution: few input channels, many positions)."""
        _, positions, p = self.activations.shape
        o = self.backprops.shape[2]
        return positions > 1 and positions * (p + o) >= p * o

    def weighted_sum(self, weights: torch.Tensor) -> torch.Tensor:
        """sum_i weights[i] * gradient of example i, [o, p]: one [o, n T] x [n T, p] product."""
        n, positions, p = self.activations.shape
        g = (self.backprops * weights.view(-1, 1, 1)).reshape(n * positions, -1)
        return g.t() @ self.activations.reshape(n * positions, p)


#: a convolution's (kernel, dilation, padding, stride), each (rows, cols); None for a linear layer
Geometry = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]] | None


def conv_geometry(conv: nn.Conv2d) -> Geometry:
    return (tuple(conv.kernel_size), tuple(conv.dilation), tuple(conv.padding), tuple(conv.stride))


def _patches(x: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """[n, c, H, W] -> [n, H'W', c kh kw]: the input patch under each output position of a
    convolution of that geometry, in the weight's (c, kh, kw) order."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = geometry
    x = F.pad(x, (pw, pw, ph, ph))
    windows = x.unfold(2, dh * (kh - 1) + 1, sh).unfold(3, dw * (kw - 1) + 1, sw)[..., ::dh, ::dw]
    n, c, rows, cols = windows.shape[:4]  # windows: [n, c, H', W', kh, kw]
    return windows.permute(0, 2, 3, 1, 4, 5).reshape(n, rows * cols, c * kh * kw)


def _factors(inputs: torch.Tensor, backprops: torch.Tensor, geometry: Geometry) -> _LayerFactors:
    """A layer's factors from its input and the gradient at its output."""
    n = len(inputs)
    if geometry is not None:
        return _LayerFactors(activations=_patches(inputs, geometry), backprops=backprops.flatten(2).transpose(1, 2))
    # [n, ..., features]: every position in between shares the weight
    return _LayerFactors(
        activations=inputs.reshape(n, -1, inputs.shape[-1]), backprops=backprops.reshape(n, -1, backprops.shape[-1])
    )


@dataclass
class _LayerSignals:
    """Each matched layer's input, output gradient and geometry, in the order of `params`."""

    inputs: list[torch.Tensor]
    backprops: list[torch.Tensor]
    geometries: list[Geometry]


def _layer_signals(
    net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> _LayerSignals | None:
    """One forward and one backward pass: the inputs and output gradients of the layers owning `params`
    (no parameter's `.grad` touched). None unless every parameter is the weight of an `nn.Linear` or
    an ungrouped, zero-padded `nn.Conv2d` called once."""
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
            or (
                type(module) is nn.Conv2d
                and module.groups == 1
                and module.padding_mode == "zeros"
                and not isinstance(module.padding, str)
            )
        )
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
    backprops = torch.autograd.grad(loss, [seen[module][0][1] for module in modules])
    return _LayerSignals(
        inputs=[seen[module][0][0] for module in modules],
        backprops=list(backprops),
        geometries=[conv_geometry(m) if type(m) is nn.Conv2d else None for m in modules],
    )


def _layer_factors(
    net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> dict[str, _LayerFactors] | None:
    """Each matched layer's factors (`_layer_signals`), by parameter name; None where not covered."""
    signals = _layer_signals(net, params, x, y)
    if signals is None:
        return None
    return {
        name: _factors(a, g, geometry)
        for name, a, g, geometry in zip(params, signals.inputs, signals.backprops, signals.geometries)
    }


def _clipping(factors: list[_LayerFactors], max_norm: float) -> tuple[list[torch.Tensor | None], torch.Tensor]:
    """(each layer's formed per-example gradients, or None where its ghost norm is cheaper; every
    example's clipping factor min(1, max_norm / ||its gradient over all layers||))."""
    formed = [f.per_example() if f.forms_gradients else None for f in factors]
    squares = sum(f.squared_norms() if g is None else g.pow(2).sum((1, 2)) for f, g in zip(factors, formed))
    return formed, (max_norm / (squares.sqrt() + 1e-12)).clamp(max=1.0)


def _clipped_sums(
    inputs: list[torch.Tensor], backprops: list[torch.Tensor], geometries: list[Geometry], max_norm: float
) -> list[torch.Tensor]:
    """sum_i clip(gradient of example i, max_norm) per layer, [o, p] each: tensors in and out, so
    `--compile` can fuse it."""
    factors = [_factors(a, g, geometry) for a, g, geometry in zip(inputs, backprops, geometries)]
    formed, scale = _clipping(factors, max_norm)
    return [
        f.weighted_sum(scale) if g is None else (scale @ g.flatten(1)).view(g.shape[1:])
        for f, g in zip(factors, formed)
    ]


def clipped_gradient_sum(
    net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *, max_norm: float
) -> list[torch.Tensor]:
    """sum_i clip(gradient of example i's cross-entropy w.r.t. `params`, `max_norm`), one tensor per
    parameter: the numbers of `clip_per_example(per_example_gradients(...))` summed, from each layer's
    inputs and output gradients with ghost norms where cheaper (Li et al. 2022, Bu et al. 2022).
    Falls back to the torch.func path for parameters `_layer_signals` does not cover. Timings:
    docs/performance.md."""
    with exact_float32():  # at every --precision (victims.precision)
        signals = _layer_signals(net, params, x, y)
        if signals is None:
            clipped = clip_per_example(per_example_gradients(net, params, x, y), max_norm)
            return [clipped[name].sum(0) for name in params]
        # the batch size is Poisson: one compiled graph for every size (dynamic), not one per size
        sums = maybe_compiled(_clipped_sums, dynamic=True)(
            signals.inputs, signals.backprops, signals.geometries, max_norm
        )
        return [s.reshape(p.shape) for s, p in zip(sums, params.values())]


def clip_per_example(grads: dict[str, torch.Tensor], max_norm: float) -> dict[str, torch.Tensor]:
    """Scale each example's gradient (all parameters together) to L2 norm at most `max_norm`."""
    squares = sum(g.flatten(1).pow(2).sum(1) for g in grads.values())
    scale = (max_norm / (squares.sqrt() + 1e-12)).clamp(max=1.0)
    return {name: g * scale.view(-1, *([1] * (g.ndim - 1))) for name, g in grads.items()}


# -- the Gaussian mechanism ---------------------------------------------------------------------
def gaussian_release(
    sums: list[torch.Tensor], *, std: float, generator: torch.Generator, probe: CanaryProbe | None = None
) -> list[torch.Tensor]:
    """The Gaussian mechanism on clean sums: each + N(0, std^2) per coordinate (no draw at std 0); every
    DP victim's noise goes through here. A white-box `probe` (`victims.dp.whitebox_canaries`) adds its
    canaries first and records their projections after; without one the result is bit for bit the same."""
    with exact_float32():
        if probe is not None:
            sums = probe.contribute(sums)
        if std > 0:
            sums = [
                s + std * torch.randn(s.shape, generator=generator, device=generator.device).to(s.device) for s in sums
            ]
        if probe is not None:
            probe.observe(sums)
        return sums


def gaussian_mean(
    per_example: dict[str, torch.Tensor] | None,
    params: dict[str, torch.Tensor],
    *,
    max_grad_norm: float,
    noise_multiplier: float,
    expected_batch_size: int,
    generator: torch.Generator,
    clipped_sum: list[torch.Tensor] | None = None,
    probe: CanaryProbe | None = None,
) -> list[torch.Tensor]:
    """(sum of per-example gradients clipped to norm C, + N(0, sigma^2 C^2)) / B, one tensor per
    parameter: the Gaussian mechanism at L2 sensitivity C (Mironov 2017), divided by the public expected
    batch size B. The sum is that of `per_example` (clipped here) or the given `clipped_sum`; both None
    (an empty Poisson batch) gives pure noise."""
    if per_example is not None and clipped_sum is not None:
        raise ValueError("give per-example gradients or their clipped sum, not both")
    if per_example is not None:
        clipped = clip_per_example(per_example, max_grad_norm)
        clipped_sum = [clipped[name].sum(0) for name in params]
    elif clipped_sum is None:
        clipped_sum = [torch.zeros_like(p) for p in params.values()]
    noisy = gaussian_release(clipped_sum, std=noise_multiplier * max_grad_norm, generator=generator, probe=probe)
    return [s / expected_batch_size for s in noisy]


# -- the same mechanism for K packed runs (`victims.packed.GroupedNets`) ---------------------------
def _run_major(t: torch.Tensor, k: int) -> torch.Tensor:
    """A grouped layer's input or output gradient as K*B run-major examples of one run's layer."""
    if t.dim() == 3:
        return t.reshape(-1, t.shape[-1])
    b = t.shape[0]
    return t.reshape(b, k, -1, *t.shape[2:]).transpose(0, 1).reshape(k * b, -1, *t.shape[2:])


def grouped_clipped_gradient_sums(
    grouped: nn.Module, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, *, max_norm: float
) -> list[torch.Tensor]:
    """`clipped_gradient_sum` for K runs packed as one `victims.packed.GroupedNets`: run k's sum of
    weights[k, i] * clip(gradient of example i), one [K, *run shape] tensor per matched weight, from
    one forward and one backward pass. x [K, B, ...], y and weights [K, B] (weights in {0, 1}). A
    weight-0 example is exactly absent (zero output gradient), so each run's sum is the one
    `clipped_gradient_sum` gives on its weight-1 examples alone, up to float addition order."""
    with exact_float32():  # at every --precision (victims.precision)
        return _grouped_clipped_sums(grouped, x, y, weights, max_norm=max_norm)


def _grouped_clipped_sums(
    grouped: nn.Module, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, *, max_norm: float
) -> list[torch.Tensor]:
    from victims.packed import GroupedLinear

    k = grouped.k
    layers = grouped.matched_layers()
    seen: dict[nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}

    def capture(module, inputs, output):
        seen[module] = (inputs[0].detach(), output)

    handles = [layer.register_forward_hook(capture) for layer in layers]
    try:
        with torch.enable_grad():
            out = grouped(x)  # [K, B, classes]
            losses = F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none")
            loss = (losses * weights.flatten()).sum()
    finally:
        for handle in handles:
            handle.remove()
    backprops = torch.autograd.grad(loss, [seen[layer][1] for layer in layers])
    factors = [
        _factors(
            _run_major(seen[layer][0], k),
            _run_major(g, k),
            None if isinstance(layer, GroupedLinear) else conv_geometry(layer),
        )
        for layer, g in zip(layers, backprops)
    ]
    formed, scale = _clipping(factors, max_norm)
    scale = scale * weights.flatten()
    sums = []
    for f, g in zip(factors, formed):
        if g is None:  # [K, o, p] = sum over each run's B*T rows of backprop^T activation
            n, positions, o = f.backprops.shape
            back = (f.backprops * scale.view(-1, 1, 1)).reshape(k, n // k * positions, o)
            sums.append(torch.bmm(back.transpose(1, 2), f.activations.reshape(k, n // k * positions, -1)))
        else:
            sums.append(torch.einsum("kb,kbq->kq", scale.view(k, -1), g.reshape(k, -1, g[0].numel())))
    return [s.reshape(k, *grouped.run_shape(w)) for s, w in zip(sums, grouped.matched_weights())]


def gaussian_release_packed(
    sums: list[torch.Tensor],
    *,
    std: float,
    generators: list[torch.Generator],
    probes: list[CanaryProbe | None] | None = None,
) -> list[torch.Tensor]:
    """`gaussian_release` of K runs at once (sums[i][k] is run k's sum of parameter i): run k's noise is
    drawn from its own generator in the same order, so each run gets the numbers it gets alone."""
    with exact_float32():
        return _release_packed(sums, std=std, generators=generators, probes=probes)


def _release_packed(sums, *, std, generators, probes) -> list[torch.Tensor]:
    if probes is not None and any(p is not None for p in probes):
        contributed = [
            probe.contribute([s[k] for s in sums]) if probe is not None else [s[k] for s in sums]
            for k, probe in enumerate(probes)
        ]
        sums = [torch.stack(parts) for parts in zip(*contributed)]
    if std > 0:
        noise = [torch.empty(s.shape, device=generators[0].device) for s in sums]
        for generator, rows in zip(generators, zip(*(n.unbind(0) for n in noise))):
            for row in rows:
                row.normal_(generator=generator)
        sums = [s + std * n.to(s.device) for s, n in zip(sums, noise)]
    if probes is not None:
        for k, probe in enumerate(probes):
            if probe is not None:
                probe.observe([s[k] for s in sums])
    return sums
