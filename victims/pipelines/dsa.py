"""`dsa` and `dc`: dataset condensation by gradient matching (Zhao, Mopuri & Bilen, ICLR 2021),
with (`dsa`, Zhao & Bilen, ICML 2021) or without (`dc`) differentiable siamese augmentation.

Every iteration draws a fresh ConvNet; for each of `outer` loops, the images of every class take
one SGD step on the layer-wise cosine distance (`victims.condensation.matching`, shared with PSG) between the
network's gradient on the synthetic images of the class and its gradient on a random batch of
that class's members, both after the same augmentation; then (except after the last loop) the
network takes `inner` SGD steps on the synthetic set. The reference's loop counts by images per
class are (outer, inner) = (1, 1) at 1, (10, 50) at 10 and (50, 10) at 50; the defaults here are
sized for digits on one CPU thread (bench/condense.py).

Packed runs (`--runs-per-task K`): `DSAVictim.condense_packed` condenses the K runs' sets as one
computation (grouped matching networks, one image step and one inner step for all K), each run
drawing from its own generator what it draws alone. Operators per run on digits at the digits preset
(`python bench/ops.py --victim dsa --packs 1 8`): 138,656 alone, 9,818 in a pack of 8 (0.071; 0.937
when the pack condensed its runs in turn).
"""

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
        """digits: 6 networks x 4 image updates, 3 network steps between, image learning rate 1,
        32 real images per class (sized for one CPU thread; bench/condense.py). paper: the
        DatasetCondensation reference's main.py, 1,000 networks, (outer, inner) loops by images
        per class (`REFERENCE_LOOPS`), image learning rate 0.1, 256 real images per class (its
        ConvNet is width 128: add --net-width 128; scale the networks with --iterations)."""
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
        """`condense` of K runs as one computation: each iteration's K matching ConvNets as one
        `GroupedNets`, the K synthetic sets as the one leaf [K, S, C, H, W] of one SGD (elementwise,
        so each run's step is its own), every image update and inner step one computation for all K.

        Each run draws from its own generator exactly what `condense` draws, in its order: per class
        its siamese seed (with `dsa`) and then its real batch (`Members.batch`'s randperm), per inner
        step its seed; each iteration's ConvNet from its own global-RNG stream (`reinitialise` draws
        what `build_net` draws). The augmentations of all K runs are one `augment_runs` call: each
        run's real batch and synthetic images of a class get what `augment` gives them alone.

        Real gradients: one grouped forward and backward pass per class for the K runs, [K, B, ...].
        A run with fewer than `batch_real` members of a class takes all of them, so the K batches of
        a class can differ in size; they are padded to the largest (zero images) and the per-example
        losses weighted 1/n_k (0 on padding), so run k's loss is still the mean over its own n_k
        real images and its gradient its own (the padding contributes exactly zero). Padding rather
        than a fallback to the runs in turn: at the paper preset's 256 real images per class every
        class of a small dataset is short in every run, and the pack would never advance together.
        Synthetic gradients: all classes of all K runs in one pass, on a second `GroupedNets` of
        K * n_classes copies of the K nets (group k * n_classes + c is run k's net, fed run k's images
        of class c), so one `autograd.grad(..., create_graph=True)` gives every class's gradient of
        every run apart; its weights are copied from the K nets before every image update. The real
        side stays per class: its batches are far larger than the synthetic set, and all classes at
        once would hold n_classes times the activations. The layer-wise distance is summed over
        classes and runs by reshaping each layer into rows of output units, as `generate_packed` of
        `victims.pipelines.psg` does.

        A set whose classes hold different numbers of synthetic images, or a run with no member of a
        class (whose gradient alone is NaN), is condensed run by run instead, exactly as alone.

        So a packed run draws what it draws alone, and its release equals the unpacked one up to the
        order of float sums (grouped convolutions, the weighted mean), which gradient matching
        carries through every image step (tests/victims/test_dsa_packed.py measures it).

        Long because it is one numerical loop (iterations, outer steps, inner steps) whose parts share
        the pack's state: the two grouped nets and their matched weights, the row counts, the real
        batches, the seeds drawn per class and run, the image and net optimisers; split into
        functions, each part would take a dozen of them, and the order of the draws, which the
        equality with the runs alone rests on, would be spread over several functions."""
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
    """The real batches of every class of K runs (`DSAVictim.condense_packed`), gathered from the
    runs' members together: `counts[c][k]` images of class c for run k (`Members.batch`'s size),
    class-major then run in `gather`'s flat result, and by class as [K, B_c, ...] (padded to the
    largest of the class's K batches, with per-example `weights` 1/n_k and 0 on padding; None where
    the K batches of the class are of one size)."""

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
    """Every group k * n_classes + c of `by_class` set to net k of `grouped` (their parameters are
    listed in the same order, each a run-major stack of blocks)."""
    for source, target in zip(grouped.parameters(), by_class.parameters()):
        target.view(grouped.k, n_classes, -1).copy_(source.view(grouped.k, 1, -1))
