"""`dsa` and `dc`: dataset condensation by gradient matching (Zhao, Mopuri & Bilen, ICLR 2021),
with (`dsa`, Zhao & Bilen, ICML 2021) or without (`dc`) differentiable siamese augmentation.

Every iteration draws a fresh ConvNet; in each of `outer` loops every class's images take one SGD
step on the layer-wise cosine distance (`victims.condensation.matching`) between the network's
gradients on them and on a batch of the class's members, both augmented alike; then the network
takes `inner` SGD steps on the synthetic set. Defaults sized for digits on one CPU thread."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from victims.condensation.augment import augment, augment_runs, draw_seed, strategy
from victims.base import SeededRuns, register_victim, require_at_least, require_momentum, require_positive
from victims.condensation.condense import CondensationVictim, Members, image_sgd
from victims.pool import Pool
from victims.condensation.matching import gradient_distance
from victims.nets import NetConfig, build_net
from victims.packed import GroupedNets, draw_nets
from victims.presets import filled_from_preset

#: the reference's (outer, inner) loops by images per class (DatasetCondensation, utils.get_loops);
#: another ipc takes those of the largest one listed below it
REFERENCE_LOOPS = {1: (1, 1), 10: (10, 50), 20: (20, 25), 30: (30, 20), 40: (40, 15), 50: (50, 10)}


@register_victim("dsa")
@filled_from_preset
@dataclass(frozen=True)
class DSAVictim(CondensationVictim):
    """Gradient matching with siamese augmentation; the downstream ConvNet trains on the set."""

    iterations: int | None = field(default=None, metadata={"help": "fresh matching networks (default: from --preset)"})
    outer: int | None = field(
        default=None, metadata={"help": "image updates per matching network (default: from --preset)"}
    )
    inner: int | None = field(
        default=None,
        metadata={"help": "network steps on the synthetic set between image updates (default: from --preset)"},
    )
    lr_images: float | None = field(
        default=None, metadata={"help": "SGD learning rate of the synthetic images (default: from --preset)"}
    )
    lr_net: float = field(default=0.01, metadata={"help": "SGD learning rate of the matching network"})
    momentum: float = field(default=0.5, metadata={"help": "SGD momentum of the synthetic images"})
    batch_real: int | None = field(
        default=None, metadata={"help": "real member images per class per gradient (default: from --preset)"}
    )
    dsa: bool = field(default=True, metadata={"help": "differentiable siamese augmentation of both sides"})
    net: NetConfig = field(default_factory=lambda: NetConfig(width=32))  # the matching network

    OWN_PRESETS = ("digits", "paper")

    @classmethod
    def preset_values(cls, values: Mapping[str, Any]) -> dict:
        """digits: 6 networks x 4 image updates, 3 network steps between, image learning rate 1, 32 real
        images per class. paper: the DatasetCondensation reference's main.py: 1,000 networks, loops by
        images per class (`REFERENCE_LOOPS`), image learning rate 0.1, 256 real images per class (width
        128: add --net-width 128)."""
        if values["preset"] == "paper" and values["ipc"] >= 1:  # ipc < 1: __post_init__ names it
            outer, inner = REFERENCE_LOOPS[max(k for k in REFERENCE_LOOPS if k <= values["ipc"])]
            return {"iterations": 1000, "outer": outer, "inner": inner, "lr_images": 0.1, "batch_real": 256}
        return {"iterations": 6, "outer": 4, "inner": 3, "lr_images": 1.0, "batch_real": 32}

    def __post_init__(self) -> None:
        super().__post_init__()
        require_at_least(self, {"iterations": 0, "outer": 1, "inner": 0, "batch_real": 1})
        require_positive(self, ("lr_images", "lr_net"))
        require_momentum(self)

    def condense(
        self, images: torch.Tensor, labels: torch.Tensor, members: Members, *, pool: Pool, generator: torch.Generator
    ) -> torch.Tensor:
        images, optimizer = image_sgd(images, lr=self.lr_images, momentum=self.momentum)
        ops = strategy(flip_ok=pool.flip_ok)

        def augmented(x: torch.Tensor, seed: int | None) -> torch.Tensor:
            return x if seed is None else augment(x, seed=seed, ops=ops)

        for _ in range(self.iterations):
            net = build_net(self.net, image_shape=pool.image_shape, n_classes=pool.n_classes).to(images.device)
            matched = [p for p in net.parameters() if p.ndim > 1]  # the distance ignores 1-D parameters
            net_optimizer = torch.optim.SGD(net.parameters(), lr=self.lr_net)
            for loop in range(self.outer):
                loss = images.new_zeros(())
                for c in range(pool.n_classes):
                    seed = draw_seed(generator) if self.dsa else None
                    real = augmented(members.batch(c, self.batch_real, generator=generator), seed)
                    synthetic = augmented(images[labels == c], seed)
                    target = torch.full((len(real),), c, device=real.device)
                    real_gradient = [
                        g.detach() for g in torch.autograd.grad(F.cross_entropy(net(real), target), matched)
                    ]
                    synthetic_gradient = torch.autograd.grad(
                        F.cross_entropy(net(synthetic), labels[labels == c]), matched, create_graph=True
                    )
                    loss = loss + gradient_distance(synthetic_gradient, real_gradient)
                optimizer.zero_grad(set_to_none=True)
                (image_gradient,) = torch.autograd.grad(loss, [images])
                images.grad = image_gradient
                optimizer.step()
                if loop == self.outer - 1:
                    break
                fixed = images.detach()
                for _ in range(self.inner):
                    seed = draw_seed(generator) if self.dsa else None
                    net_optimizer.zero_grad(set_to_none=True)
                    F.cross_entropy(net(augmented(fixed, seed)), labels).backward()
                    net_optimizer.step()
        return images.detach()

    def condense_packed(
        self, images: torch.Tensor, labels: torch.Tensor, members: list[Members], *, pool: Pool, runs: SeededRuns
    ) -> torch.Tensor:
        """`condense` of K runs as one computation: each iteration's K ConvNets as one `GroupedNets`, the K
        synthetic sets one leaf [K, S, C, H, W] of one SGD, every image update and inner step one
        computation for all K. Each run draws from its own generator and global-RNG stream what `condense`
        draws, in its order. Short real batches are padded and weighted 1/n_k (0 on padding), so each
        run's loss is its own mean; synthetic gradients of all classes come from a second `GroupedNets`
        of K * n_classes copies. A set with unequal classes, or a run missing a class, is condensed run by
        run. The release equals the unpacked one up to float order (tests/victims/test_dsa_packed.py).

        Long because it is one numerical loop whose parts share the pack's state (two grouped nets, row
        counts, real batches, seeds, both optimisers); the order of the draws, which the equality with
        the runs alone rests on, is easiest to check in one place."""
        k, n_classes = len(members), pool.n_classes
        per_class = torch.bincount(labels, minlength=n_classes).tolist()
        counts = [[min(self.batch_real, len(m.by_class[c])) for m in members] for c in range(n_classes)]
        if len(set(per_class)) > 1 or min(min(row) for row in counts) == 0:
            return super().condense_packed(images, labels, members, pool=pool, runs=runs)
        ipc, device, generators = per_class[0], images.device, runs.generators
        # the synthetic images in class order: run k's images of class c are group k * n_classes + c
        order = torch.sort(labels, stable=True).indices
        in_order = bool(torch.equal(order, torch.arange(len(labels), device=labels.device)))
        synthetic_targets = labels[order].repeat(k)
        images, optimizer = image_sgd(images, lr=self.lr_images, momentum=self.momentum)
        ops = strategy(flip_ok=pool.flip_ok)
        real = _RealBatches(members, counts, device=device)
        n_images = images.shape[1]
        inner_targets = labels.repeat(k)

        nets = None
        for iteration in range(self.iterations):
            nets = draw_nets(runs, self.net, image_shape=pool.image_shape, n_classes=n_classes, nets=nets)
            if iteration == 0:  # built once, loaded in place for every later iteration
                grouped = GroupedNets(nets).to(device)
                by_class = GroupedNets([net for net in nets for _ in range(n_classes)]).to(device)
                matched, matched_by_class = grouped.matched_weights(), by_class.matched_weights()
                rows = [by_class.k * by_class.run_shape(w)[0] for w in matched_by_class]
                net_optimizer = torch.optim.SGD(grouped.parameters(), lr=self.lr_net, foreach=True)
            else:
                grouped.load_from(nets)
            for loop in range(self.outer):
                _copy_per_class(grouped, by_class, n_classes)
                seeds = [[0] * n_classes for _ in range(k)]  # [run][class]
                perms = []
                for c in range(n_classes):
                    for run, (m, g) in enumerate(zip(members, generators)):
                        if self.dsa:
                            seeds[run][c] = draw_seed(g)
                        perm = torch.randperm(len(m.by_class[c]), generator=g, device=g.device)
                        perms.append(perm[: self.batch_real])
                real_flat = real.gather(perms)  # [sum of counts, ...], class-major, then run
                synthetic = images if in_order else images[:, order]
                synthetic_flat = synthetic.flatten(0, 1)  # [K * S, ...], run-major, then class
                if self.dsa:
                    both = augment_runs(
                        torch.cat([real_flat, synthetic_flat]),
                        counts=[n for row in counts for n in row] + [ipc] * (k * n_classes),
                        seeds=[seeds[run][c] for c in range(n_classes) for run in range(k)]
                        + [s for row in seeds for s in row],
                        ops=ops,
                    )
                    real_flat, synthetic_flat = both[: len(real_flat)].detach(), both[len(real_flat) :]
                real_gradients = []  # per class: each matched weight's gradient as [K, numel of one run's]
                for c, batch in enumerate(real.by_class(real_flat)):
                    out = grouped(batch)  # [K, B, classes]
                    losses = F.cross_entropy(out.flatten(0, 1), real.targets[c], reduction="none").view(k, -1)
                    loss = losses.mean(1).sum() if real.weights[c] is None else (losses * real.weights[c]).sum()
                    real_gradients.append([g.reshape(k, -1) for g in torch.autograd.grad(loss, matched)])
                real_gradient = [
                    torch.stack(layer, dim=1).reshape(n, -1) for layer, n in zip(zip(*real_gradients), rows)
                ]
                out = by_class(synthetic_flat.reshape(k * n_classes, ipc, *synthetic_flat.shape[1:]))
                losses = F.cross_entropy(out.flatten(0, 1), synthetic_targets, reduction="none")
                synthetic_gradient = torch.autograd.grad(
                    losses.view(k * n_classes, ipc).mean(1).sum(), matched_by_class, create_graph=True
                )
                # each (run, class)'s output units as rows of one matrix per layer: the layer-wise
                # distance is a sum over rows, so this is the sum over runs and classes
                distance = gradient_distance(
                    [g.reshape(n, -1) for g, n in zip(synthetic_gradient, rows)], real_gradient
                )
                optimizer.zero_grad(set_to_none=True)
                (images.grad,) = torch.autograd.grad(distance, [images])
                optimizer.step()
                if loop == self.outer - 1:
                    break
                fixed = images.detach().flatten(0, 1)
                for _ in range(self.inner):
                    if self.dsa:
                        step_seeds = [draw_seed(g) for g in generators]
                        x = augment_runs(fixed, counts=[n_images] * k, seeds=step_seeds, ops=ops)
                    else:
                        x = fixed
                    out = grouped(x.reshape(k, n_images, *x.shape[1:]))
                    losses = F.cross_entropy(out.flatten(0, 1), inner_targets, reduction="none")
                    net_optimizer.zero_grad(set_to_none=True)
                    losses.view(k, n_images).mean(1).sum().backward()
                    net_optimizer.step()
        return images.detach()


@register_victim("dc")
@filled_from_preset
@dataclass(frozen=True)
class DCVictim(DSAVictim):
    """Gradient matching without augmentation (the original DC)."""

    dsa: bool = field(default=False, metadata={"help": "differentiable siamese augmentation of both sides"})


class _RealBatches:
    """The real batches of every class of K runs, gathered together: `counts[c][k]` images of class c
    for run k, class-major in `gather`'s result, and per class as [K, B_c, ...] padded, with
    `weights` 1/n_k and 0 on padding (None where the class's batches are of one size)."""

    def __init__(self, members: list[Members], counts: list[list[int]], *, device: torch.device) -> None:
        self.k, self.counts = len(members), counts
        self.x = torch.cat([m.x for m in members])
        offsets = np.cumsum([0] + [len(m.x) for m in members])
        picks, starts, start = [], [], 0
        for c in range(len(counts)):
            for run, m in enumerate(members):
                picks.append(m.by_class[c] + int(offsets[run]))  # run k's class-c members, as rows of `x`
                starts.append(start)
                start += len(m.by_class[c])
        self.pick = torch.cat(picks).to(device)
        sizes = torch.tensor([n for row in counts for n in row])
        self.base = torch.repeat_interleave(torch.tensor(starts), sizes).to(device)
        self.targets, self.weights, self.slots = [], [], []
        for c, row in enumerate(counts):
            b = max(row)
            self.targets.append(torch.full((self.k * b,), c, device=device))
            if min(row) == b:
                self.weights.append(None)
                self.slots.append(None)
                continue
            weights = torch.zeros(self.k, b, dtype=self.x.dtype)
            for run, n in enumerate(row):
                weights[run, :n] = 1 / n
            self.weights.append(weights.to(device))
            self.slots.append(torch.cat([torch.arange(n) + run * b for run, n in enumerate(row)]).to(device))

    def gather(self, perms: list[torch.Tensor]) -> torch.Tensor:
        """The images `Members.batch` gives each (class, run) with its permutation `perms` (class-major)."""
        return self.x.index_select(0, self.pick[torch.cat(perms).to(self.pick.device) + self.base])

    def by_class(self, flat: torch.Tensor) -> Iterator[torch.Tensor]:
        """`gather`'s result (or its augmentation) as one [K, B_c, ...] batch per class."""
        shape = flat.shape[1:]
        for c, piece in enumerate(flat.split([sum(row) for row in self.counts])):
            b = max(self.counts[c])
            if self.slots[c] is not None:  # short batches: each run's images first in its row
                piece = piece.new_zeros((self.k * b, *shape)).index_copy(0, self.slots[c], piece)
            yield piece.view(self.k, b, *shape)


@torch.no_grad()
def _copy_per_class(grouped: GroupedNets, by_class: GroupedNets, n_classes: int) -> None:
    """Every group k * n_classes + c of `by_class` set to net k of `grouped`."""
    for source, target in zip(grouped.parameters(), by_class.parameters()):
        target.view(grouped.k, n_classes, -1).copy_(source.view(grouped.k, 1, -1))
