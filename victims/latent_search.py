"""GAN-Leaks latent searches (Chen, Yu, Zhang and Fritz, CCS 2020): the reconstructions a generator
victim's run computes with its trained generator (`victims.pipelines.cgan.reconstruct`), since the models are
not kept; `attacks.ganleak` scores the losses they leave in the run store.

An example the generator was trained on is easier to reconstruct: some latent code z makes
G(z, y) close to it. Each search finds the closest image the attacker can find and returns its
reconstruction loss, the mean squared pixel error to the example (`squared_error`):

- full black-box (`fbb`, `nearest_samples`): the attacker only sees generated samples,
  `samples_per_class` random ones of each class; the loss is the distance to the nearest sample
  of the example's class;
- partial black-box (`pbb`, `powell_reconstruct`): the attacker chooses z but sees no gradients:
  scipy's Powell search over z, one example at a time, from the latent codes of its nearest
  generated samples;
- white-box (`wb`, `gradient_reconstruct`): gradient descent (Adam, or L-BFGS: `WB_OPTIMIZERS`)
  on z through the generator, every example of a batch at once, from the latent code of its
  nearest generated sample.

Searches minimise the GAN-Leaks objective: the squared error plus `prior_weight` times the
latent-norm prior (`latent_prior`, (|z|^2 / d - 1)^2), which keeps z where the generator was
trained (|z|^2 ~ d for z ~ N(0, I_d)); the loss returned is the squared error alone at the code
found.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import minimize
from torch import nn

WB_OPTIMIZERS = ("adam", "lbfgs")


def squared_error(images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-example mean squared error over pixels: two [n, c, h, w] tensors -> [n]."""
    return (images - targets).flatten(1).pow(2).mean(1)


def latent_prior(z: torch.Tensor) -> torch.Tensor:
    """GAN-Leaks' latent-norm prior per code, scaled by the dimension: (|z|^2 / d - 1)^2, [n, d] -> [n]."""
    return (z.pow(2).mean(1) - 1).pow(2)


@torch.no_grad()
def nearest_samples(
    generator_net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    n_classes: int,
    samples_per_class: int,
    latent_dim: int,
    keep: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Full black-box reconstruction. For each class, `samples_per_class` codes z ~ N(0, I) are
    drawn from `generator` (class by class, the same draws whatever the images) and generated;
    each image x [n, c, h, w] (pixel scale) with label y [n] gets the squared error to its nearest
    sample of its class, and the codes of its `keep` nearest samples, nearest first.
    Returns (loss float32 [n], codes [n, keep, latent_dim])."""
    loss = torch.empty(len(x), device=x.device)
    codes = torch.empty(len(x), keep, latent_dim, device=x.device)
    for c in range(n_classes):
        z = torch.randn(samples_per_class, latent_dim, generator=generator, device=generator.device).to(x.device)
        rows = torch.nonzero(y == c).flatten()
        if not len(rows):
            continue
        samples = generator_net(z, torch.full((samples_per_class,), c, dtype=torch.int64, device=x.device)).flatten(1)
        distances = torch.cdist(x[rows].flatten(1).double(), samples.double()).pow(2) / samples.shape[1]
        nearest = distances.topk(keep, dim=1, largest=False)
        loss[rows] = nearest.values[:, 0].float()
        codes[rows] = z[nearest.indices]
    return loss, codes


def powell_reconstruct(
    generator_net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    starts: torch.Tensor,
    *,
    max_evaluations: int,
    prior_weight: float,
) -> torch.Tensor:
    """Partial black-box reconstruction: for each image x[i] (label y[i]) and each start code
    starts[i, s], scipy's Powell minimises the GAN-Leaks objective over z with at most
    `max_evaluations` generator calls; the smallest squared error found (the starts' own
    included) is returned, float32 [n]. One example at a time: cost ~ n * starts * max_evaluations
    single-image generator calls (about 0.3-0.6 ms each on one CPU thread for the digits GAN)."""
    device = x.device
    best = torch.empty(len(x))
    with torch.inference_mode():
        for i in range(len(x)):
            target, label = x[i : i + 1], y[i : i + 1]

            def objective(z: np.ndarray) -> float:
                code = torch.as_tensor(z, dtype=torch.float32, device=device).view(1, -1)
                error = squared_error(generator_net(code, label), target)
                return float(error + prior_weight * latent_prior(code))

            found = []
            for start in starts[i]:
                result = minimize(
                    objective,
                    start.cpu().double().numpy(),
                    method="Powell",
                    options={"maxfev": max_evaluations, "xtol": 1e-3, "ftol": 1e-6},
                )
                codes = torch.stack([start, torch.as_tensor(result.x, dtype=torch.float32, device=device)])
                found.append(squared_error(generator_net(codes, label.expand(2)), target.expand(2, -1, -1, -1)).min())
            best[i] = torch.stack(found).min().cpu()
    return best


def gradient_reconstruct(
    generator_net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    start: torch.Tensor,
    *,
    steps: int,
    lr: float,
    prior_weight: float,
    optimizer: str = "adam",
    batch_size: int = 2048,
) -> torch.Tensor:
    """White-box reconstruction: the codes of a batch of images, from start [n, d], optimised
    together on the sum over the batch of the GAN-Leaks objective (squared error + prior) for
    `steps` steps of Adam (learning rate `lr`) or of L-BFGS (one `steps`-iteration call, strong
    Wolfe line search). With Adam each code's update depends on its own example only (the sum's
    gradient splits by example and Adam is per coordinate), so a loss does not depend on the
    other images of its batch; L-BFGS's shared line search and curvature couple them.
    Returns the squared error at the final codes, float32 [n]."""
    if optimizer not in WB_OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {WB_OPTIMIZERS}, got {optimizer!r}")
    frozen = [p.requires_grad for p in generator_net.parameters()]
    for p in generator_net.parameters():
        p.requires_grad_(False)
    out = torch.empty(len(x), device=x.device)
    try:
        for s in range(0, len(x), batch_size):
            target, label = x[s : s + batch_size], y[s : s + batch_size]
            z = start[s : s + batch_size].detach().clone().requires_grad_(True)

            def objective() -> torch.Tensor:
                return (squared_error(generator_net(z, label), target) + prior_weight * latent_prior(z)).sum()

            if optimizer == "adam":
                opt = torch.optim.Adam([z], lr=lr)
                for _ in range(steps):
                    opt.zero_grad(set_to_none=True)
                    objective().backward()
                    opt.step()
            else:
                opt = torch.optim.LBFGS([z], lr=lr, max_iter=steps, line_search_fn="strong_wolfe")

                def closure() -> torch.Tensor:
                    opt.zero_grad(set_to_none=True)
                    value = objective()
                    value.backward()
                    return value

                opt.step(closure)
            with torch.no_grad():
                out[s : s + batch_size] = squared_error(generator_net(z, label), target)
    finally:
        for p, flag in zip(generator_net.parameters(), frozen):
            p.requires_grad_(flag)
    return out
