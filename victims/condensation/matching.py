"""Gradient matching, shared by PSG, DC and DSA: the layer-wise distance of the DC and PSG papers
(PSG supplement §B), one cosine distance per output unit of every weight tensor, summed over units
and layers; one-dimensional parameters are left out, as in the reference code."""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: added to the product of norms so an all-zero gradient row gives distance 1, not NaN
NORM_FLOOR = 1e-6


def layer_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_i (1 - <A_i, B_i> / (|A_i| |B_i|)) over output units i; 0 for 1-D parameters."""
    if a.shape != b.shape:
        raise ValueError(f"gradient shapes differ: {tuple(a.shape)} and {tuple(b.shape)}")
    if a.ndim == 1:
        return a.new_zeros(())
    a, b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    cosine = (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1) + NORM_FLOOR)
    return (1 - cosine).sum()


def gradient_distance(grads_a: Sequence[torch.Tensor], grads_b: Sequence[torch.Tensor]) -> torch.Tensor:
    """The layer-wise cosine distance between two lists of parameter gradients."""
    if len(grads_a) != len(grads_b):
        raise ValueError(f"{len(grads_a)} gradients against {len(grads_b)}")
    return sum((layer_distance(a, b) for a, b in zip(grads_a, grads_b)), grads_a[0].new_zeros(()))
