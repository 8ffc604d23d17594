"""`dm`: dataset condensation by distribution matching (Zhao & Bilen, WACV 2023).

Every iteration draws a fresh untrained ConvNet and, for every class, moves the mean embedding of
the synthetic images towards that of a random batch of the class's members, both after the same
siamese augmentation; one SGD step of the images per iteration. One augmentation seed per
iteration serves every class (the reference draws one per class)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from victims.condensation.augment import augment, augment_runs, draw_seed, strategy
from victims.base import SeededRuns, register_victim, require_at_least, require_momentum, require_positive
from victims.condensation.condense import CondensationVictim, Members, image_sgd
from victims.pool import Pool
from victims.nets import NetConfig, build_net
from victims.packed import GroupedNets, draw_nets
from victims.presets import filled_from_preset

#: real images embedded at a time: the same embeddings as one pass, with activations that stay in cache
REAL_CHUNK = 64


#: the packed path's bound on one grouped pass over real images (`DMVictim.condense_packed`), in
#: first-layer activations: one unpacked chunk's at 28x28, width 128
REAL_ACTIVATIONS = REAL_CHUNK * 128 * 28 * 28


def class_means(embeddings: torch.Tensor, labels: torch.Tensor, n_classes: int) -> torch.Tensor:
    """[n, d] embeddings with labels [n] -> [n_classes, d] class means (zero for an absent class); or K
    runs' at once, [K, n, d] -> [K, n_classes, d], a label of `n_classes` marking padding. On a CPU
    run k's means are those of its rows alone, bit for bit."""
    d = embeddings.shape[-1]
    if labels.dim() == 1:
        runs, per_run, flat, bins = 1, n_classes, embeddings, labels
    else:  # each run's classes and its padding bin
        runs, per_run, flat = labels.shape[0], n_classes + 1, embeddings.flatten(0, 1)
        bins = (labels + torch.arange(0, runs * per_run, per_run, device=labels.device)[:, None]).flatten()
    sums = flat.new_zeros(runs * per_run, d).index_add(0, bins, flat)
    counts = torch.bincount(bins, minlength=runs * per_run).clamp(min=1).to(flat.dtype)
    means = sums / counts[:, None]
    return means if labels.dim() == 1 else means.view(runs, per_run, d)[:, :n_classes]


@torch.no_grad()
def share_parameters(grouped: GroupedNets, nets: list[nn.Module]) -> Callable[[], None]:
    """Lay the K `nets`' parameters out as `grouped`'s: run k's become views of block k of one flat
    buffer, so redrawing them in place refreshes the grouped net (on another device, through the
    returned load). The values are unchanged."""
    grouped_params = list(grouped.parameters())
    per_run = list(zip(*(net.parameters() for net in nets)))  # the K runs' tensors of each grouped one
    if len(per_run) != len(grouped_params):
        raise ValueError("the grouped net and the nets have different parameters")
    host = torch.empty(sum(p.numel() for p in grouped_params), device=next(nets[0].parameters()).device)
    same = host.device == grouped_params[0].device
    target = host if same else torch.empty(host.shape, device=grouped_params[0].device)
    start = 0
    for grouped_param, params in zip(grouped_params, per_run):
        for param in params:
            view = host[start : start + param.numel()].view_as(param)
            view.copy_(param)
            param.data = view
            start += param.numel()
        block = target[start - grouped_param.numel() : start].view_as(grouped_param)
        if not same:
            block.copy_(grouped_param)
        grouped_param.data = block
    return (lambda: None) if same else (lambda: target.copy_(host))


@register_victim("dm")
@filled_from_preset
@dataclass(frozen=True)
class DMVictim(CondensationVictim):
    """Distribution matching with random embedding networks; the downstream ConvNet trains on
    the learned set. Defaults sized for digits on one CPU thread (bench/condense.py)."""

    iterations: int | None = field(
        default=None,
        metadata={"help": "image updates, each with a fresh random embedding net (default: from --preset)"},
    )
    lr_images: float | None = field(
        default=None, metadata={"help": "SGD learning rate of the synthetic images (default: from --preset)"}
    )
    momentum: float = field(default=0.5, metadata={"help": "SGD momentum of the synthetic images"})
    batch_real: int | None = field(
        default=None, metadata={"help": "real member images per class per iteration (default: from --preset)"}
    )
    dsa: bool = field(default=True, metadata={"help": "differentiable siamese augmentation of both sides"})
    net: NetConfig = field(default_factory=lambda: NetConfig(width=32))  # the random embedding network

    OWN_PRESETS = ("digits", "paper")

    @classmethod
    def preset_values(cls, values: Mapping[str, Any]) -> dict:
        """digits: 100 iterations at image learning rate 10, 32 real images per class (one CPU thread).
        paper: the DatasetCondensation reference's main_DM.py: 20,000 iterations at image learning rate 1,
        256 real images per class (its ConvNet is width 128: add --net-width 128)."""
        if values["preset"] == "paper":
            return {"iterations": 20000, "lr_images": 1.0, "batch_real": 256}
        return {"iterations": 100, "lr_images": 10.0, "batch_real": 32}

    def __post_init__(self) -> None:
        super().__post_init__()
        require_at_least(self, {"iterations": 0, "batch_real": 1})
        require_positive(self, ("lr_images",))
        require_momentum(self)

    def condense(
        self, images: torch.Tensor, labels: torch.Tensor, members: Members, *, pool: Pool, generator: torch.Generator
    ) -> torch.Tensor:
        images, optimizer = image_sgd(images, lr=self.lr_images, momentum=self.momentum)
        ops = strategy(flip_ok=pool.flip_ok)
        for _ in range(self.iterations):
            net = build_net(self.net, image_shape=pool.image_shape, n_classes=pool.n_classes).to(images.device)
            net.requires_grad_(False)
            real, real_labels = members.class_batches(self.batch_real, generator=generator)
            synthetic = images
            if self.dsa:
                seed = draw_seed(generator)
                real, synthetic = augment(real, seed=seed, ops=ops), augment(synthetic, seed=seed, ops=ops)
            with torch.no_grad():  # in chunks: each image's embedding is its own (instance norm)
                embedded = torch.cat([net.embed(chunk) for chunk in real.split(REAL_CHUNK)])
                target = class_means(embedded, real_labels, pool.n_classes)
            loss = (target - class_means(net.embed(synthetic), labels, pool.n_classes)).pow(2).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return images.detach()

    def condense_packed(
        self, images: torch.Tensor, labels: torch.Tensor, members: list[Members], *, pool: Pool, runs: SeededRuns
    ) -> torch.Tensor:
        """`condense` of K runs as one computation: the K embedding nets as one `GroupedNets` (the nets'
        parameters views of its weights, `share_parameters`), the K synthetic sets one leaf [K, S, C, H, W]
        under one SGD, the loss the sum of the K runs' losses, so each run's gradient is its own.

        Each iteration every run draws what `condense` draws alone, in its order (its net, its real batch,
        its dsa seed); `augment_runs` gives each run what `augment` gives it. Short real batches are padded
        with zero images after augmentation, counted in no class. The result equals each run alone within
        float tolerance (tests/victims/test_condense.py), which DM's image updates can amplify.

        Long because the code is one layout of the K real batches and one loop whose steps share it and
        the grouped net; splitting the layout out would pass back a record of nine tensors."""
        k, n_classes, device = len(members), pool.n_classes, images.device
        synthetic_shape = images.shape[1:]  # [S, C, H, W]
        images, optimizer = image_sgd(images, lr=self.lr_images, momentum=self.momentum)
        ops = strategy(flip_ok=pool.flip_ok)
        # each run's members sorted by class, all runs concatenated: a run's batch of class c is
        # its class-c block at the positions of its randperm's first `sizes[k][c]` entries
        x_all = torch.cat([m.x for m in members])
        starts = np.cumsum([0] + [len(m.x) for m in members])
        by_class = torch.cat([torch.cat(m.by_class) + int(start) for m, start in zip(members, starts)])
        sizes = [[min(self.batch_real, len(pick)) for pick in m.by_class] for m in members]
        block = np.cumsum([0] + [len(pick) for m in members for pick in m.by_class])[:-1].reshape(k, n_classes)
        take = np.concatenate([block[r, c] + np.arange(sizes[r][c]) for r in range(k) for c in range(n_classes)])
        take_block = np.concatenate([np.full(sizes[r][c], block[r, c]) for r in range(k) for c in range(n_classes)])
        take, take_block = torch.as_tensor(take, device=device), torch.as_tensor(take_block, device=device)
        counts = [sum(row) for row in sizes]
        widest = max(counts)
        # the padded layout [K, widest]: run k's rows of the flat batch, then a zero image (the row
        # past the flat batch) labelled 2 n_classes, the padding label of `class_means` below
        layout = np.full((k, widest), sum(counts))
        real_labels = np.full((k, widest), 2 * n_classes)
        for r, row in enumerate(sizes):
            layout[r, : counts[r]] = np.arange(counts[r]) + sum(counts[:r])
            real_labels[r, : counts[r]] = np.repeat(np.arange(n_classes), row)
        padded = widest * k != sum(counts)
        layout = torch.as_tensor(layout.flatten(), device=device)
        # labels of the real rows then the synthetic ones; a padding row's is 2 n_classes (`class_means`)
        both_labels = torch.cat([torch.as_tensor(real_labels, device=device), labels.expand(k, -1) + n_classes], dim=1)
        per_image = self.net.width * (images.shape[-2] * images.shape[-1] if self.net.arch == "convnet" else 1)
        chunk = max(1, REAL_ACTIVATIONS // (k * per_image))
        nets, grouped = None, None
        for _ in range(self.iterations):
            nets = draw_nets(runs, self.net, image_shape=pool.image_shape, n_classes=n_classes, nets=nets)
            if grouped is None:  # one grouped net on the device for every iteration, sharing the nets' weights
                grouped = GroupedNets(nets).to(device).requires_grad_(False)
                load = share_parameters(grouped, nets)
            else:
                load()
            perms = [
                torch.randperm(len(pick), generator=g, device=g.device)
                for m, g in zip(members, runs.generators)
                for pick in m.by_class
            ]
            seeds = [draw_seed(g) for g in runs.generators] if self.dsa else None
            with torch.no_grad():
                positions = torch.cat(perms).to(device).index_select(0, take) + take_block
                real = x_all.index_select(0, by_class.index_select(0, positions))
            synthetic = images.flatten(0, 1)
            if self.dsa:  # both sides in one call: run k's real and synthetic segments share its seed
                both = augment_runs(
                    torch.cat([real, synthetic]), counts=counts + [len(labels)] * k, seeds=seeds + seeds, ops=ops
                )
                real, synthetic = both[: len(real)].detach(), both[len(real) :]
            with torch.no_grad():
                if padded:
                    real = torch.cat([real, real.new_zeros(1, *real.shape[1:])]).index_select(0, layout)
                real = real.view(k, widest, *real.shape[1:])
                # in chunks: each image's embedding is its own (instance norm)
                embedded = torch.cat([grouped.embed(part) for part in real.split(chunk, dim=1)], dim=1)
            # the real and the synthetic class means of every run in one call: classes n_classes + c
            # are the synthetic images' (each bin its own rows, so the same means as two calls)
            embedded = torch.cat([embedded, grouped.embed(synthetic.view(k, *synthetic_shape))], dim=1)
            means = class_means(embedded, both_labels, 2 * n_classes)
            loss = (means[:, :n_classes] - means[:, n_classes:]).pow(2).sum()  # the sum of the K runs' losses
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return images.detach()
