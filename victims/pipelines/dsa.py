"""`dsa` and `dc`: dataset condensation by gradient matching (Zhao, Mopuri & Bilen, ICLR 2021),
with (`dsa`, Zhao & Bilen, ICML 2021) or without (`dc`) differentiable siamese augmentation.

Every iteration draws a fresh ConvNet; for each of `outer` loops, the images of every class take
one SGD step on the layer-wise cosine distance (`victims.matching`, shared with PSG) between the
network's gradient on the synthetic images of the class and its gradient on a random batch of
that class's members, both after the same augmentation; then (except after the last loop) the
network takes `inner` SGD steps on the synthetic set. The reference's loop counts by images per
class are (outer, inner) = (1, 1) at 1, (10, 50) at 10 and (50, 10) at 50; the defaults here are
sized for digits on one CPU thread (bench/condense.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from victims.augment import augment, draw_seed, strategy
from victims.base import register_victim, require_at_least, require_momentum, require_positive
from victims.condense import CondensationVictim, Members, image_sgd
from victims.data import Pool
from victims.matching import gradient_distance
from victims.nets import NetConfig, build_net
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


@register_victim("dc")
@filled_from_preset
@dataclass(frozen=True)
class DCVictim(DSAVictim):
    """Gradient matching without augmentation (the original DC)."""

    dsa: bool = field(default=False, metadata={"help": "differentiable siamese augmentation of both sides"})
