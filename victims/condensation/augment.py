"""Differentiable siamese augmentation (DSA; Zhao & Bilen, ICML 2021): the same random,
differentiable transformation applied to real and synthetic batches before matching.
`augment(real, seed=s)` and `augment(synthetic, seed=s)` draw one operation and identical
per-example parameters, as the reference's "S" mode; parameter ranges are the reference's
(`ParamDiffAug`). Flips are left out where they change labels (digits, MNIST)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

SCALE = 1.2  # scale factors within [1/SCALE, SCALE], per axis
ROTATE_DEGREES = 15.0
CROP_PAD = 0.125  # translation of up to this fraction of the side, in whole pixels
CUTOUT = 0.5  # side of the zeroed square, as a fraction of the image side
BRIGHTNESS, SATURATION, CONTRAST = 1.0, 2.0, 0.5

#: an operation: (images [n, c, h, w], u [n, k] its per-example uniforms in [0, 1)) -> images
Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _per_example(values: torch.Tensor) -> torch.Tensor:
    """[n] -> [n, 1, 1, 1], to broadcast over images."""
    return values.view(-1, 1, 1, 1)


def _affine(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta, list(x.shape), align_corners=True)
    return F.grid_sample(x, grid, align_corners=True)


def color(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Brightness, then saturation, then contrast, each with its own factor per example."""
    x = x + _per_example(u[:, 0] - 0.5) * BRIGHTNESS
    mean = x.mean(dim=1, keepdim=True)
    x = (x - mean) * _per_example(u[:, 1] * SATURATION) + mean
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * _per_example(u[:, 2] + CONTRAST) + mean


def crop(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Translate by a whole number of pixels in [-pad, pad] per axis, zero-filled."""
    h, w = x.shape[-2:]
    pad_h, pad_w = int(h * CROP_PAD + 0.5), int(w * CROP_PAD + 0.5)
    rows = (u[:, 0] * (2 * pad_h + 1)).floor() - pad_h
    cols = (u[:, 1] * (2 * pad_w + 1)).floor() - pad_w
    theta = torch.zeros(x.shape[0], 2, 3, device=x.device, dtype=x.dtype)
    theta[:, 0, 0] = theta[:, 1, 1] = 1
    theta[:, 0, 2] = -2 * cols / max(w - 1, 1)  # align_corners=True: one pixel is 2/(side-1)
    theta[:, 1, 2] = -2 * rows / max(h - 1, 1)
    return _affine(x, theta)


def cutout(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Zero a square of CUTOUT times the side, centred at a random pixel (clipped at the border)."""
    h, w = x.shape[-2:]
    size_h, size_w = int(h * CUTOUT + 0.5), int(w * CUTOUT + 0.5)
    top = (u[:, 0] * (h + 1 - size_h % 2)).long().view(-1, 1, 1) - size_h // 2
    left = (u[:, 1] * (w + 1 - size_w % 2)).long().view(-1, 1, 1) - size_w // 2
    rows = torch.arange(h, device=x.device).view(1, h, 1)
    cols = torch.arange(w, device=x.device).view(1, 1, w)
    inside = (rows >= top) & (rows < top + size_h) & (cols >= left) & (cols < left + size_w)
    return x * (~inside).unsqueeze(1).to(x.dtype)


def flip(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Mirror each example left-right with probability 1/2."""
    mirrored = _per_example((u[:, 0] < 0.5).to(x.dtype))
    return mirrored * x.flip(-1) + (1 - mirrored) * x


def scale(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Zoom each axis by its own factor in [1/SCALE, SCALE] about the centre."""
    factors = u * (SCALE - 1 / SCALE) + 1 / SCALE
    theta = torch.zeros(x.shape[0], 2, 3, device=x.device, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 1, 1] = factors[:, 0], factors[:, 1]
    return _affine(x, theta)


def rotate(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Rotate about the centre by an angle within ±ROTATE_DEGREES."""
    angle = (u[:, 0] - 0.5) * 2 * math.radians(ROTATE_DEGREES)
    cos, sin = torch.cos(angle), torch.sin(angle)
    theta = torch.stack(
        [torch.stack([cos, sin, torch.zeros_like(cos)], 1), torch.stack([-sin, cos, torch.zeros_like(cos)], 1)], 1
    )
    return _affine(x, theta)


OPS: dict[str, Op] = {"color": color, "crop": crop, "cutout": cutout, "flip": flip, "scale": scale, "rotate": rotate}
#: how many uniforms each operation takes per example
UNIFORMS: dict[str, int] = {"color": 3, "crop": 2, "cutout": 2, "flip": 1, "scale": 2, "rotate": 1}


def strategy(*, flip_ok: bool) -> tuple[str, ...]:
    """The reference's strategy, color_crop_cutout_flip_scale_rotate, without flips where they
    change the label."""
    return tuple(name for name in OPS if flip_ok or name != "flip")


def draw(seed: int, n: int, *, ops: tuple[str, ...]) -> tuple[str, torch.Tensor]:
    """(operation, uniforms [n, k] on the CPU) that `seed` draws for a batch of n examples; row i is the
    same whatever n is."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    op = ops[int(torch.randint(len(ops), (1,), generator=g))]
    return op, torch.rand((n, UNIFORMS[op]), generator=g)


def augment(x: torch.Tensor, *, seed: int, ops: tuple[str, ...]) -> torch.Tensor:
    """One operation of `ops` chosen by `seed`, per-example parameters drawn from `seed`: two batches
    augmented with one seed get the same operation, and their i-th examples the same parameters."""
    op, u = draw(seed, x.shape[0], ops=ops)
    return OPS[op](x, u.to(x.device, x.dtype))


def augment_runs(x: torch.Tensor, *, counts: Sequence[int], seeds: Sequence[int], ops: tuple[str, ...]) -> torch.Tensor:
    """`augment` of each run's segment of x, for K runs of a pack: run k augments the next counts[k]
    examples of x [sum(counts), c, h, w] with seeds[k], drawing exactly as `augment` does; runs that
    drew the same operation share one call. Each segment is what `augment` gives it alone
    (tests/victims/test_condense.py); differentiable in x."""
    if len(counts) != len(seeds) or sum(counts) != x.shape[0]:
        raise ValueError(f"{len(seeds)} seeds and counts {list(counts)} for {x.shape[0]} examples")
    starts = np.cumsum([0, *counts])
    largest: dict[int, int] = {}  # each seed drawn once, for the largest segment that uses it
    for n, seed in zip(counts, seeds):
        largest[seed] = max(largest.get(seed, 0), n)
    drawn = {seed: draw(seed, n, ops=ops) for seed, n in largest.items() if n}
    by_op: dict[str, tuple[list[np.ndarray], list[torch.Tensor]]] = {}
    for k, (n, seed) in enumerate(zip(counts, seeds)):
        if n == 0:  # nothing to augment (and no call on an empty batch, which the affine ops refuse)
            continue
        op, u = drawn[seed]
        rows, params = by_op.setdefault(op, ([], []))
        rows.append(np.arange(starts[k], starts[k + 1]))
        params.append(u if n == len(u) else u[:n])
    if len(by_op) == 1:  # one operation for every run: the segments are already in order
        ((op, (_, params)),) = by_op.items()
        return OPS[op](x, torch.cat(params).to(x.device, x.dtype))
    order = np.concatenate([np.concatenate(rows) for rows, _ in by_op.values()])
    pieces = [
        OPS[op](x[torch.as_tensor(np.concatenate(rows), device=x.device)], torch.cat(params).to(x.device, x.dtype))
        for op, (rows, params) in by_op.items()
    ]
    return torch.cat(pieces)[torch.as_tensor(np.argsort(order), device=x.device)]


def draw_seed(generator: torch.Generator) -> int:
    """A fresh siamese seed from the run's generator."""
    return int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
