"""`dm`: dataset condensation by distribution matching (Zhao & Bilen, WACV 2023).

Every iteration draws a fresh randomly initialised ConvNet (its weights are never trained) and,
for every class, moves the mean embedding of the synthetic images towards the mean embedding of
a random batch of that class's members, both after the same differentiable siamese augmentation
(`victims.augment`): loss = sum_c || mean psi(A_w(real_c)) - mean psi(A_w(syn_c)) ||^2, one SGD
step of the images per iteration. All classes go through the network in one batch; one
augmentation seed per iteration serves every class (the reference draws one per class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from victims.augment import augment, draw_seed, strategy
from victims.base import register_victim, require_at_least, require_momentum, require_positive
from victims.condense import CondensationVictim, Members, image_sgd
from victims.data import Pool
from victims.nets import NetConfig, build_net
from victims.presets import filled_from_preset

#: real images embedded at a time: the same embeddings as one pass over all of them, but
#: activations that stay in cache (at 28x28, width 128, one pass over 640 images moves 335 MB
#: per layer, and ReLU, pooling and norm became a third of DM's time)
REAL_CHUNK = 64


def class_means(embeddings: torch.Tensor, labels: torch.Tensor, n_classes: int) -> torch.Tensor:
    """[n, d] embeddings -> [n_classes, d] mean embedding of each class (zero for an absent class)."""
    sums = embeddings.new_zeros(n_classes, embeddings.shape[1]).index_add(0, labels, embeddings)
    counts = torch.bincount(labels, minlength=n_classes).clamp(min=1).to(embeddings.dtype)
    return sums / counts[:, None]


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
        """digits: 100 iterations at image learning rate 10, 32 real images per class (sized for one
        CPU thread; bench/condense.py). paper: the DatasetCondensation reference's main_DM.py,
        20,000 iterations at image learning rate 1, 256 real images per class (its ConvNet is
        width 128: add --net-width 128; scale the iterations with --iterations)."""
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
