"""GAN-Leaks latent searches (Chen, Yu, Zhang and Fritz, CCS 2020): the reconstructions a generator
victim's run computes with its trained generator (`victims.pipelines.cgan.reconstruct`), scored by
`attacks.ganleak`. Each returns the squared pixel error (`squared_error`) of the closest image
found: full black-box `fbb` (nearest generated sample of the class), partial black-box `pbb`
(scipy's Powell over z) and white-box `wb` (gradient descent on z). Searches minimise that error
plus `prior_weight` times `latent_prior`; the loss returned is the error alone."""

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
    """Full black-box reconstruction: `samples_per_class` codes z ~ N(0, I) per class drawn from
    `generator` (the same draws whatever the images); each image x [n, c, h, w] (pixel scale) with
    label y [n] gets the squared error to its nearest sample of its class and the codes of its `keep`
    nearest. Returns (loss float32 [n], codes [n, keep, latent_dim])."""
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
    """Partial black-box reconstruction: per image and start code starts[i, s], scipy's Powell on the
    GAN-Leaks objective with at most `max_evaluations` generator calls; the smallest squared error
    found (the starts' own included), float32 [n]. One example at a time."""
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
    """White-box reconstruction: the codes from start [n, d] optimised together on the summed GAN-Leaks
    objective for `steps` steps of Adam (`lr`) or one `steps`-iteration L-BFGS call. With Adam a loss
    does not depend on the other images of its batch; L-BFGS couples them. Returns the squared error
    at the final codes, float32 [n]."""
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
