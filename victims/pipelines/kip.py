"""`kip`: Kernel Inducing Points (Nguyen, Chen and Lee, ICLR 2021), as audited in "Privacy for
Free? Dataset Condensation" (Dong et al., eq. (3) and App. E.1).

The support images (fixed class labels) learn by kernel ridge regression onto random batches of
members with the infinite-width FC-ReLU NTK, one Adam step per batch; kernel and solve in float64.
`--zca` whitens the kernel's inputs with a ZCA fitted on the members. `--runs-per-task K` condenses
K runs as one computation (`KIPVictim.condense_packed`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from victims.condensation.augment import augment, augment_runs, draw_seed, strategy
from victims.base import SeededRuns, register_victim, require_at_least
from victims.compiled import compiling, maybe_compiled
from victims.condensation.condense import CondensationVictim, Members
from victims.pool import Pool
from victims.presets import filled_from_preset

#: the KIP default FC kernel: W_std = sqrt(2), b_std = 0.1 (neural_tangents' NTK parameterisation)
W_VAR = 2.0
B_VAR = 0.01
#: d Sigma_dot / d cos(theta) = 1 / (2 pi sin theta) is infinite at theta = 0 (K_ss's diagonal): the
#: backward pass floors sin theta at its value at cos theta = 1 - COS_EPS
COS_EPS = 1e-6
SIN_FLOOR = math.sqrt(1.0 - (1.0 - COS_EPS) ** 2)


class _ArcCosine(torch.autograd.Function):
    """c -> (J1, J0) = ((sin theta + (pi - theta) c) / (2 pi), (pi - theta) / (2 pi)), theta = arccos c:
    the normalised ReLU expectations of unit-variance Gaussians with correlation c. Exact forward
    values; backward finite everywhere (sin theta floored at SIN_FLOOR)."""

    @staticmethod
    def forward(ctx, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = c.clamp(-1.0, 1.0)
        theta = torch.arccos(c)
        sin = torch.sqrt(1.0 - c * c)
        j0 = (math.pi - theta) / (2 * math.pi)
        j1 = sin / (2 * math.pi) + j0 * c
        ctx.save_for_backward(j0, sin)
        return j1, j0

    @staticmethod
    def backward(ctx, grad_j1: torch.Tensor, grad_j0: torch.Tensor) -> torch.Tensor:
        j0, sin = ctx.saved_tensors
        return grad_j1 * j0 + grad_j0 / (2 * math.pi * sin.clamp(min=SIN_FLOOR))


def ntk(x1: torch.Tensor, x2: torch.Tensor, *, depth: int, w_var: float = W_VAR, b_var: float = B_VAR) -> torch.Tensor:
    """The closed-form NTK [..., n1, n2] of an infinitely wide ReLU network with `depth` hidden layers
    on x1 [..., n1, d] and x2 [..., n2, d] (leading dims broadcast): neural_tangents'
    `stax.serial(*[Dense(W_std, b_std), Relu()] * depth, Dense(W_std, b_std))` in the NTK
    parameterisation, w_var = W_std^2, b_var = b_std^2, by the arc-cosine recursion:

        Sigma^0 = w_var x.x'/d + b_var,  Theta^0 = Sigma^0;  per hidden layer, with
        cos theta = Sigma(x, x') / sqrt(Sigma(x, x) Sigma(x', x')),
        Sigma_relu = sqrt(Sigma(x, x) Sigma(x', x')) (sin theta + (pi - theta) cos theta) / (2 pi),
        Sigma_dot  = (pi - theta) / (2 pi),
        Sigma^{l+1} = w_var Sigma_relu + b_var,  Theta^{l+1} = w_var Theta^l Sigma_dot + Sigma^{l+1}.

    Differentiable in both arguments, with finite gradients at theta = 0 (`_ArcCosine`)."""
    a, b = x1, x2
    d = a.shape[-1]
    cross = w_var * (a @ b.mT) / d + b_var  # a batched matmul (bmm) with leading dims
    var1 = w_var * (a * a).sum(-1) / d + b_var  # Sigma(x, x) of each x1, [..., n1]
    var2 = w_var * (b * b).sum(-1) / d + b_var
    theta = cross
    for _ in range(depth):
        norm = torch.sqrt(var1)[..., :, None] * torch.sqrt(var2)[..., None, :]  # var >= b_var > 0
        j1, j0 = _ArcCosine.apply(cross / norm)
        cross = w_var * norm * j1 + b_var
        theta = w_var * theta * j0 + cross
        # on the diagonal theta = 0: Sigma_relu = Sigma(x, x) / 2
        var1, var2 = w_var * var1 / 2 + b_var, w_var * var2 / 2 + b_var
    return theta


def centered_one_hot(labels: torch.Tensor, n_classes: int) -> torch.Tensor:
    """One-hot rows minus 1/C (float64), as KIP's `one_hot(..., center=True)`; argmax unchanged."""
    return torch.nn.functional.one_hot(labels, n_classes).double() - 1.0 / n_classes


@dataclass(frozen=True, eq=False)
class Whitening:
    """ZCA: x -> (x - mean) W, W = U diag((s + reg)^-1/2) U^T from the fitting images' covariance,
    reg = zca_reg * mean eigenvalue (KIP's `reg_amount`)."""

    mean: torch.Tensor  # [d] float64
    matrix: torch.Tensor  # [d, d] float64, symmetric

    @classmethod
    def fit(cls, x: torch.Tensor, *, zca_reg: float) -> Whitening:
        flat = x.flatten(1).double()
        mean = flat.mean(0)
        centred = flat - mean
        cov = centred.T @ centred / len(flat)
        s, u = torch.linalg.eigh(cov)
        s = s.clamp(min=0.0)  # round-off on rank-deficient data (digits' blank corners)
        reg = zca_reg * s.mean()
        scale = (s + reg).rsqrt()
        if not torch.isfinite(scale).all():
            raise ValueError(f"--zca-reg {zca_reg} leaves a zero-variance direction of the members unwhitenable")
        return cls(mean=mean, matrix=(u * scale) @ u.T)

    @classmethod
    def stack(cls, whitenings: list[Whitening]) -> Whitening:
        """K runs' whitenings as one (mean [K, d], matrix [K, d, d]), each run whitened with its own."""
        return cls(mean=torch.stack([w.mean for w in whitenings]), matrix=torch.stack([w.matrix for w in whitenings]))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Images [n, ...] -> whitened rows [n, d] (float64); for a stacked whitening, [K, n, ...] -> [K, n, d]."""
        batch = self.mean.dim() - 1
        return (x.flatten(batch + 1).double() - self.mean[..., None, :]) @ self.matrix


def kip_loss(
    support: torch.Tensor,
    support_y: torch.Tensor,
    target: torch.Tensor,
    target_y: torch.Tensor,
    *,
    depth: int,
    reg: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """KIP's eq. (3): 0.5 * mean of (K_ts (K_ss + reg tr(K_ss)/k I)^-1 y_s - y_t)^2 in float64, for
    flattened support [..., k, d] and target [..., n, d]; leading dims (K runs) give one loss each.
    `mask` [..., n] drops padded target rows: each run's loss is exactly that of its unpadded batch
    (row i of the prediction depends only on target row i and the support)."""
    s = support.double()
    n = target.shape[-2]
    kernel = ntk(torch.cat([target.double(), s], dim=-2), s, depth=depth)  # one pass: [K_ts; K_ss]
    k_ts, k_ss = kernel[..., :n, :], kernel[..., n:, :]
    k = k_ss.shape[-1]
    trace = k_ss.diagonal(dim1=-2, dim2=-1).sum(-1)  # each run's own, [...]
    ridge = (reg * trace / k).view(*trace.shape, 1, 1) * torch.eye(k, dtype=k_ss.dtype, device=k_ss.device)
    y_s = support_y.double()
    if y_s.dim() < k_ss.dim():  # broadcast explicitly: solve would read a [k, C] right side as a batch
        y_s = y_s.expand(*k_ss.shape[:-1], y_s.shape[-1])  # of vectors if it happened to be [..., k]
    prediction = k_ts @ torch.linalg.solve(k_ss + ridge, y_s)
    error = (prediction - target_y.double()).pow(2)
    if mask is None:
        return 0.5 * (error.mean() if error.dim() == 2 else error.mean(dim=(-2, -1)))
    weight = mask.to(error.dtype)
    return 0.5 * (error * weight[..., None]).sum(dim=(-2, -1)) / (weight.sum(-1) * error.shape[-1])


@register_victim("kip")
@filled_from_preset
@dataclass(frozen=True)
class KIPVictim(CondensationVictim):
    """Kernel inducing points with the FC-ReLU NTK; the downstream ConvNet trains on the learned images.

    Departures from the seeds: labels stay fixed; siamese augmentation is off unless `--dsa`; `--zca`
    centres on the members' mean pixel. Tuning figures: docs/results/condensation.md."""

    #: `--compile auto`'s break-even runs per worker by image size (docs/performance.md)
    compile_break_even: ClassVar[dict[int, int]] = {64: 105, 784: 3}

    iterations: int | None = field(
        default=None,
        metadata={"help": "Adam steps of the synthetic images, one target batch each (default: from --preset)"},
    )
    lr: float | None = field(
        default=None, metadata={"help": "Adam learning rate of the synthetic images (default: from --preset)"}
    )
    batch_size: int | None = field(
        default=None,
        metadata={
            "help": "target batch: random members regressed on per step, all of them when fewer "
            "(default: from --preset)"
        },
    )
    depth: int | None = field(
        default=None, metadata={"help": "hidden ReLU layers of the fully-connected NTK (default: from --preset)"}
    )
    reg: float = field(default=1e-6, metadata={"help": "ridge lambda, relative to the mean diagonal of K_ss"})
    zca: bool = field(
        default=False, metadata={"help": "compute the kernel on ZCA-whitened inputs (fitted on the members)"}
    )
    zca_reg: float = field(
        default=0.1, metadata={"help": "ZCA regulariser, relative to the mean eigenvalue of the members' covariance"}
    )
    dsa: bool = field(default=False, metadata={"help": "differentiable siamese augmentation of both sides"})

    OWN_PRESETS = ("digits", "paper")

    @classmethod
    def preset_values(cls, values: Mapping[str, Any]) -> dict:
        """digits: 200 Adam steps, lr 0.1, target batches of 128, depth-3 NTK (one CPU thread). paper: the
        KIP reference colab (google-research kip/KIP.ipynb): depth 1, lr 0.04, target batches of 5,000,
        1,000 steps. Both keep reg 1e-6, W_std sqrt(2), b_std 0.1."""
        if values["preset"] == "paper":
            return {"iterations": 1000, "lr": 0.04, "batch_size": 5000, "depth": 1}
        return {"iterations": 200, "lr": 0.1, "batch_size": 128, "depth": 3}

    def __post_init__(self) -> None:
        super().__post_init__()
        require_at_least(self, {"iterations": 1, "batch_size": 1, "depth": 0})
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"--lr must be a positive number, got {self.lr}")
        if not (self.reg >= 0 and math.isfinite(self.reg)):
            raise ValueError(f"--reg must be a number >= 0, got {self.reg}")
        if not (self.zca_reg > 0 and math.isfinite(self.zca_reg)):  # images have blank pixels: 0 cannot whiten them
            raise ValueError(f"--zca-reg must be a positive number, got {self.zca_reg}")

    def condense(
        self, images: torch.Tensor, labels: torch.Tensor, members: Members, *, pool: Pool, generator: torch.Generator
    ) -> torch.Tensor:
        whiten = Whitening.fit(members.x, zca_reg=self.zca_reg) if self.zca else None
        inputs = whiten if whiten is not None else (lambda x: x.flatten(1).double())
        target_y = centered_one_hot(members.y, pool.n_classes)
        support_y = centered_one_hot(labels, pool.n_classes)
        ops = strategy(flip_ok=pool.flip_ok)
        images = images.clone().requires_grad_(True)
        optimizer = torch.optim.Adam([images], lr=self.lr)
        for _ in range(self.iterations):
            batch = torch.randperm(len(members.y), generator=generator, device=generator.device)[: self.batch_size]
            batch = batch.to(members.x.device)
            support, target = images, members.x[batch]
            if self.dsa:
                seed = draw_seed(generator)
                support, target = augment(support, seed=seed, ops=ops), augment(target, seed=seed, ops=ops)
            # --compile: forward and backward fused; a second target size recompiles once for every size
            # (torch's automatic dynamic shapes; dynamic=True from the start fails to trace depth > 1)
            loss = maybe_compiled(kip_loss)(
                inputs(support), support_y, inputs(target), target_y[batch], depth=self.depth, reg=self.reg
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return images.detach()

    def condense_packed(
        self, images: torch.Tensor, labels: torch.Tensor, members: list[Members], *, pool: Pool, runs: SeededRuns
    ) -> torch.Tensor:
        """`condense` of K runs as one computation: the K support sets one leaf [K, S, C, H, W] under one
        Adam, one batched kernel, ridge and solve per iteration (`kip_loss` with a run dim), the K losses
        summed. Each run draws from its own generator what `condense` draws alone (target batch, `--dsa`
        seed); shorter batches are padded and masked. Under `--compile` the runs condense in turn. The
        release equals the unpacked run's within float tolerance (tests/victims/test_kip.py)."""
        if compiling():
            return super().condense_packed(images, labels, members, pool=pool, runs=runs)
        n_runs, device = len(members), images.device
        counts = [len(m.y) for m in members]
        x_members = images.new_zeros((n_runs, max(counts), *images.shape[2:]))
        y_members = torch.zeros((n_runs, max(counts), pool.n_classes), dtype=torch.float64, device=device)
        for k, m in enumerate(members):  # once: the members padded to one size
            x_members[k, : counts[k]] = m.x
            y_members[k, : counts[k]] = centered_one_hot(m.y, pool.n_classes)
        whiten = Whitening.stack([Whitening.fit(m.x, zca_reg=self.zca_reg) for m in members]) if self.zca else None
        inputs = whiten if whiten is not None else (lambda x: x.flatten(2).double())
        support_y = centered_one_hot(labels, pool.n_classes)
        sizes = [min(self.batch_size, n) for n in counts]  # each run's target batch, the same every iteration
        width = max(sizes)
        runs_index = torch.arange(n_runs, device=device)[:, None]
        if min(sizes) < width:  # some batch is short: pad the draws, mask the padded rows
            mask = torch.arange(width, device=device) < torch.tensor(sizes, device=device)[:, None]
            slots = torch.nonzero(mask.flatten()).flatten()  # where the draws go in [K * width]
        else:
            mask = None
        ops = strategy(flip_ok=pool.flip_ok)
        n_support = images.shape[1]
        images = images.clone().requires_grad_(True)
        optimizer = torch.optim.Adam([images], lr=self.lr)
        for _ in range(self.iterations):
            draws = [
                torch.randperm(n, generator=g, device=g.device)[: self.batch_size]
                for n, g in zip(counts, runs.generators)
            ]
            seeds = [draw_seed(g) for g in runs.generators] if self.dsa else None
            if mask is None:
                batch = torch.stack(draws).to(device)
            else:
                batch = torch.zeros(n_runs * width, dtype=torch.int64, device=device)
                batch = batch.index_put((slots,), torch.cat(draws).to(device)).view(n_runs, width)
            support, target = images, x_members[runs_index, batch]  # [K, S, ...], [K, width, ...]
            if self.dsa:
                both = torch.cat([support.flatten(0, 1), target.flatten(0, 1)])
                both = augment_runs(both, counts=[n_support] * n_runs + [width] * n_runs, seeds=seeds * 2, ops=ops)
                split = n_runs * n_support
                support, target = both[:split].view(support.shape), both[split:].view(target.shape)
            losses = kip_loss(
                inputs(support),
                support_y,
                inputs(target),
                y_members[runs_index, batch],
                depth=self.depth,
                reg=self.reg,
                mask=mask,
            )
            optimizer.zero_grad(set_to_none=True)
            losses.sum().backward()
            optimizer.step()
        return images.detach()
