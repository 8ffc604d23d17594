"""The differential-privacy machinery every DP victim shares (`dpsgd`, `psg`, `dpcgan`, `dpkernel`,
`datalens`, `marginals`), each piece with the result it relies on.

Accounting (opacus's accountants, never by hand): `noise_multiplier_for` (the sigma with which
`steps` Poisson-subsampled Gaussian steps at a sample rate spend a target (epsilon, delta):
opacus's `get_noise_multiplier`, a search to tolerance 0.01) and `epsilon_spent` (the epsilon
at delta after such steps), under one of `ACCOUNTANTS`: `rdp`, the Renyi-DP accountant (the RDP
of the sampled Gaussian mechanism, Mironov, Talwar and Zhang 2019; composition by adding RDP,
Mironov 2017; conversion to (epsilon, delta) over opacus's default orders), or `prv`, the
privacy-random-variable accountant (Gopi, Lee and Wutschitz 2021; numerical composition, the
tighter of the two). At sample rate 1 the RDP is that of the plain Gaussian mechanism,
alpha / (2 sigma^2) (`datalens`). opacus's "optimal order is the largest alpha" warning is
silenced here (the bound it comes with is still a valid upper bound). opacus is imported where
it is used: it takes ~1.7 s to import, which every Ray worker of a non-DP victim would otherwise
pay.

Gaussian DP without subsampling (`marginals`): `gdp_epsilon` (the exact epsilon at delta of mu-GDP,
opacus's `eps_from_mu`) and `gdp_mu_for` (the mu that is exactly (epsilon, delta)-DP, the same
duality solved for mu, Dong, Roth and Su 2022, Corollary 2.13); `composed_gaussian_noise` is the
sigma with which k Gaussian mechanisms of sensitivity 1 compose to it, sqrt(k) / mu (their Theorem
2.7 and Corollary 3.3). No RDP bound in between: the calibration is exact.

Sampling: the accountants' subsampled mechanism is Poisson sampling at a fixed, public rate,
whose neighbouring relation is add/remove of one record. `poisson_rate` is that rate, B / N, for
N = q * n_pool the plan's expected member count (`victims.base.expected_members`; never a run's
actual count, which is data); `poisson_sample` draws one such batch from a torch generator
(`psg`, `dpcgan`, `dpkernel`), `poisson_batches` draws `steps` of them with opacus's
`UniformWithReplacementSampler` (`dpsgd`).

Sensitivity: clipping every record's contribution to L2 norm C bounds the change of a SUM under
add/remove of one record by C. `clip_per_example` clips per-example gradients;
`per_example_gradients` forms them by torch.func (vmap over grad); `clipped_gradient_sum` gets
the clipped sum of the per-example cross-entropy gradients of linear and convolutional weights
without forming them (layer inputs and output gradients, ghost norms; Li et al. 2022, Bu et al.
2022), falling back to the torch.func path for other parameters.

The Gaussian mechanism: `gaussian_release` adds N(0, std^2) to clean sums, the one place every DP
victim's noise is drawn (`dpsgd`'s is opacus's, wrapped in the same white-box probe), and reports
to a white-box probe when there is one (`victims.dp.whitebox_canaries`). `gaussian_mean` adds N(0, sigma^2 C^2)
to the clipped sum (the Gaussian
mechanism at L2 sensitivity C, RDP alpha / (2 sigma^2) at every order alpha; Mironov 2017) and
divides by the public expected batch size B (post-processing), so that Poisson sampling at rate
B / N and the accountant above cover it (`dpsgd` gets the same mechanism from opacus's
`DPOptimizer`).

Checks: `require_privacy_target` (the one check of a DP victim's `epsilon` and `delta` fields),
`require_accountant` and `accountant_field` (its `accountant` field).
"""

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
    """opacus warns "optimal order is the largest alpha" when few steps put the optimum at the
    edge of its default orders; the bound it returns is still valid (an upper bound on epsilon),
    so every victim hears it as noise."""
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
    `sample_rate` spend (epsilon, delta) under `accountant` (opacus's search, tolerance 0.01).

    Memoised: opacus's search takes 1-3 s, and a Ray worker meets the same few member counts
    (hence sample rates) run after run."""
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
    """The accountant's epsilon at `delta` after `steps` subsampled Gaussian steps."""
    from opacus.accountants import create_accountant

    _check(delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant)
    acc = create_accountant(mechanism=accountant)
    acc.history = [(noise_multiplier, sample_rate, steps)]
    with _quiet_orders():
        return float(acc.get_epsilon(delta=delta))


def gaussian_steps(*, noise_multiplier: float, sample_rate: float, steps: int) -> dict:
    """`Observations.mechanism`: `steps` Poisson-subsampled Gaussian steps at (sigma, rate), the
    mechanism an accountant composes, whose own trade-off curve the audit tests
    (`audit.stats.mechanism`)."""
    return {"noise_multiplier": float(noise_multiplier), "sample_rate": float(sample_rate), "steps": int(steps)}


def accounted_fields(
    *, noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str = "rdp"
) -> dict:
    """The Observations' privacy fields of a victim whose accountant composes `steps` subsampled
    Gaussian steps at (sigma, rate): the accountant's `formal_epsilon` at `delta`, and the
    `mechanism` it composed (`gaussian_steps`)."""
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
    """The epsilon at `delta` of mu-GDP, exactly: the root of delta(epsilon) = Phi(-epsilon/mu + mu/2)
    - e^epsilon Phi(-epsilon/mu - mu/2) (Dong, Roth and Su 2022, Corollary 2.13), by opacus's
    `eps_from_mu` (brentq)."""
    from opacus.accountants.analysis.gdp import eps_from_mu

    if not (mu > 0 and math.isfinite(mu)):
        raise ValueError(f"mu must be a positive number, got {mu}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return float(eps_from_mu(mu=mu, delta=delta))


@functools.lru_cache(maxsize=64)
def gdp_mu_for(epsilon: float, delta: float) -> float:
    """The mu whose mu-GDP is exactly (epsilon, delta)-DP: the root in mu of opacus's
    `delta_eps_mu`(epsilon, mu) = delta, the same duality as `gdp_epsilon` read the other way
    (delta(epsilon) rises with mu; brentq to 1e-15). 0.26806 for (1, 1e-5)."""
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
    """The noise sigma with which `compositions` Gaussian mechanisms of L2 sensitivity 1, each adding
    N(0, sigma^2), compose to exactly (epsilon, delta)-DP: each is (1 / sigma)-GDP (the Gaussian
    mechanism, Dong, Roth and Su 2022, Theorem 2.7), k of them compose to (sqrt(k) / sigma)-GDP
    (their Corollary 3.3), so sigma = sqrt(k) / mu for mu = `gdp_mu_for`(epsilon, delta)."""
    if int(compositions) != compositions or compositions < 1:
        raise ValueError(f"compositions must be an integer >= 1, got {compositions}")
    return math.sqrt(compositions) / gdp_mu_for(epsilon, delta)


# -- a DP victim's fields -------------------------------------------------------------------------
def require_privacy_target(config: Any) -> None:
    """ValueError naming the bad value unless `config.epsilon` is a finite number > 0 and
    `config.delta` lies in (0, 1): the target every DP victim calibrates its noise to."""
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
    """B / (q * n_pool): the Poisson sampling rate of a DP victim with expected batch size B, from
    the public expected member count; ValueError when B exceeds that count."""
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
    """`steps` Poisson batches of indices into n examples, each example in each batch independently
    with probability `sample_rate` (opacus's UniformWithReplacementSampler; n = 0 gives empty batches)."""
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
    convolution of that geometry, in the weight's (c, kh, kw) order. Views and one copy (F.unfold
    loops over the batch on the CPU)."""
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
    """What one forward and backward pass leave for the clipped sum, one entry per matched layer,
    in the order of `params`."""

    inputs: list[torch.Tensor]
    backprops: list[torch.Tensor]
    geometries: list[Geometry]


def _layer_signals(
    net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> _LayerSignals | None:
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
    example's clipping factor min(1, max_norm / ||its gradient over all layers||), as
    `clip_per_example`). A layer whose norms form the gradients sums them too: [n] x [n, o p], not
    a second product."""
    formed = [f.per_example() if f.forms_gradients else None for f in factors]
    squares = sum(f.squared_norms() if g is None else g.pow(2).sum((1, 2)) for f, g in zip(factors, formed))
    return formed, (max_norm / (squares.sqrt() + 1e-12)).clamp(max=1.0)


def _clipped_sums(
    inputs: list[torch.Tensor], backprops: list[torch.Tensor], geometries: list[Geometry], max_norm: float
) -> list[torch.Tensor]:
    """sum_i clip(gradient of example i, max_norm) per layer, [o, p] each, from the layers' signals:
    tensors in, tensors out, so that `--compile` can fuse it (the patches' copy, the norms and the
    products are about half of a noisy batch's time on the digits ConvNet)."""
    factors = [_factors(a, g, geometry) for a, g, geometry in zip(inputs, backprops, geometries)]
    formed, scale = _clipping(factors, max_norm)
    return [
        f.weighted_sum(scale) if g is None else (scale @ g.flatten(1)).view(g.shape[1:])
        for f, g in zip(factors, formed)
    ]


def clipped_gradient_sum(
    net: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *, max_norm: float
) -> list[torch.Tensor]:
    """sum_i clip(gradient of example i's cross-entropy w.r.t. `params`, `max_norm`), one tensor
    per parameter: the same numbers as `clip_per_example(per_example_gradients(...))` summed over
    the batch, from each layer's inputs and output gradients (`_layer_factors`), with ghost norms
    wherever they are cheaper than forming the gradients. Falls back to that torch.func path for
    parameters `_layer_factors` does not cover.

    Why: median seconds per noisy batch of PSG (per-example gradients + clipping + sum + noise) on
    one thread, digits, a batch of 256, every variant alternating in one process beside other jobs
    (`python bench/profiling.py modes`, 9 and 40 repeats):

        ConvNet                      vmap(grad)  opacus hooks  functorch  ew     ghost  this
        width 128, depth 3 (PSG ref)   1.000       0.895       1.208    0.586  0.497  0.115
        width 16, depth 2 (digits)     0.015       0.012       0.017    0.011  0.015  0.014

    (opacus 1.6: GradSampleModule with hooks and with force_functorch, expanded weights, ghost
    clipping, which forms the convolutions' per-example gradients and takes a second backward
    pass.) Forming [256, 128, 128, 3, 3] gradients is memory traffic that the ghost norms of the
    deeper convolutions avoid; at the digits preset's width 16 every variant is within noise.
    """
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
    """The Gaussian mechanism on clean sums: each + N(0, std^2) in every coordinate (no draw at
    std 0). Every DP victim's noise goes through here (`dpsgd`'s through opacus, with the same
    probe): with a white-box `probe` (`victims.dp.whitebox_canaries`), its gradient canaries are added to the
    clean sums first and every canary's projection of the noisy sums is recorded after. Without
    one the result is the mechanism's alone, bit for bit."""
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
    """(sum of the per-example gradients, each clipped to norm C, + N(0, sigma^2 C^2)) / B, one
    tensor per parameter of `params`. The sum is that of `per_example` ([batch, *shape] per
    parameter, clipped here) or, given instead, `clipped_sum` (one tensor per parameter, already
    clipped and summed: `clipped_gradient_sum`); both None (an empty Poisson batch) gives pure noise.
    `probe`: white-box canaries (`gaussian_release`)."""
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
    """A grouped layer's input or output gradient as K*B examples of one run's layer, run-major:
    a grouped convolution's [B, K*C, H, W] -> [K*B, C, H, W]; a `GroupedLinear`'s [K, B, C] is
    run-major already -> [K*B, C]."""
    if t.dim() == 3:
        return t.reshape(-1, t.shape[-1])
    b = t.shape[0]
    return t.reshape(b, k, -1, *t.shape[2:]).transpose(0, 1).reshape(k * b, -1, *t.shape[2:])


def grouped_clipped_gradient_sums(
    grouped: nn.Module, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, *, max_norm: float
) -> list[torch.Tensor]:
    """For K runs packed as one `victims.packed.GroupedNets`: run k's sum over its examples i of
    weights[k, i] * clip(gradient of its cross-entropy w.r.t. run k's matched weights, max_norm),
    one [K, *run shape] tensor per matched weight (`GroupedNets.matched_weights`), from one forward
    and one backward pass of all K runs.

    x [K, B, C, H, W] and y [K, B] hold each run's candidates (padded to one B); weights [K, B] in
    {0, 1} say which are in its batch. A weight-0 example is exactly absent: the loss is
    sum_{k,i} weights[k, i] * CE, so its output gradient, hence its per-example gradient, is exactly
    0 and adds nothing to the sum, whatever its clipping factor. Example (k, i)'s per-example gradient
    is run k's own (a grouped layer applies run k's weights to run k's block only), its norm and
    clipping factor are `clipped_gradient_sum`'s (the same `_LayerFactors`, ghost norms where
    cheaper), so each run's sum is the one `clipped_gradient_sum` gives on its weight-1 examples
    alone, up to the order of float additions."""
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
    """`gaussian_release` of K runs at once: sums[i][k] is run k's clean sum of parameter i. Run k's
    noise is drawn from its own generator in `gaussian_release`'s order (parameter by parameter,
    the same kernel as its `torch.randn`), so each run gets the numbers it gets alone; its probe
    (white-box) contributes and observes as there."""
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
