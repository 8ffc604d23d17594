"""Networks of the seeds: the DC ConvNet and an MLP, sized from the input shape, and a small
conditional DCGAN-style generator."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class NetConfig:
    """Architecture of a classifier; `depth=None` picks the ConvNet depth from the image size."""

    arch: str = field(default="convnet", metadata={"help": "classifier", "choices": ("convnet", "mlp")})
    width: int = field(default=64, metadata={"help": "channels per conv block, or hidden units per MLP layer"})
    depth: int | None = field(
        default=None,
        metadata={
            "help": "conv blocks (default: 3 for images of 32 px and more, fewer for smaller ones) or MLP layers (2)"
        },
    )
    norm: str = field(default="instance", metadata={"help": "normalisation", "choices": ("instance", "none")})
    pooling: str = field(default="avg", metadata={"help": "pooling after each block", "choices": ("avg", "max")})

    def __post_init__(self) -> None:
        if self.arch not in ("convnet", "mlp"):
            raise ValueError(f"arch must be 'convnet' or 'mlp', got {self.arch!r}")
        if self.width < 1:
            raise ValueError(f"width must be >= 1, got {self.width}")
        if self.depth is not None and self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")
        if self.norm not in ("instance", "none"):
            raise ValueError(f"norm must be 'instance' or 'none', got {self.norm!r}")
        if self.pooling not in ("avg", "max"):
            raise ValueError(f"pooling must be 'avg' or 'max', got {self.pooling!r}")


def first_padding(image_shape: tuple[int, int, int]) -> int:
    """Zero padding of the first convolution: 3 for one-channel 28x28 images (MNIST, padded to 32x32 as
    the DatasetCondensation ConvNet does), 1 otherwise."""
    return 3 if tuple(image_shape) == (1, 28, 28) else 1


def default_conv_depth(height: int, width: int) -> int:
    """3 blocks as in the seeds for 32x32 (-> 4x4 features); fewer so small images keep >= 2x2."""
    return max(1, min(3, int(math.log2(min(height, width))) - 1))


def without_inplace(net: nn.Module) -> nn.Module:
    """`net` with every in-place ReLU made out of place (the same values): opacus's backward hooks
    forbid changing a hooked layer's output in place."""
    for module in net.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    return net


class ConvNet(nn.Module):
    """[conv3x3 -> instance norm -> ReLU -> 2x2 pool] x depth -> linear, as in the DC/DM/PSG code;
    instance norm is GroupNorm with one group per channel, which opacus supports."""

    def __init__(self, *, image_shape: tuple[int, int, int], n_classes: int, config: NetConfig) -> None:
        super().__init__()
        channels, height, width = image_shape
        padding = first_padding(image_shape)
        height, width = height + 2 * padding - 2, width + 2 * padding - 2
        depth = config.depth or default_conv_depth(height, width)
        layers: list[nn.Module] = []
        for block in range(depth):
            layers.append(nn.Conv2d(channels, config.width, kernel_size=3, padding=padding if block == 0 else 1))
            if config.norm == "instance":
                layers.append(nn.GroupNorm(config.width, config.width, affine=True))
            # in place after the norm, as the reference ConvNet: the norm's output is nobody else's
            # (without a norm it is the convolution's, which per-example gradients read)
            layers.append(nn.ReLU(inplace=config.norm == "instance"))
            layers.append(nn.AvgPool2d(2) if config.pooling == "avg" else nn.MaxPool2d(2))
            channels, height, width = config.width, height // 2, width // 2
            if min(height, width) < 1:
                raise ValueError(f"depth {depth} is too deep for images of shape {image_shape}")
        self.features = nn.Sequential(*layers)
        self.embed_dim = channels * height * width
        self.classifier = nn.Linear(self.embed_dim, n_classes)

    def embed(self, x):
        return self.features(x).flatten(1)

    def forward(self, x):
        return self.classifier(self.embed(x))


class MLP(nn.Module):
    """Flatten -> [linear -> ReLU] x depth -> linear."""

    def __init__(self, *, image_shape: tuple[int, int, int], n_classes: int, config: NetConfig) -> None:
        super().__init__()
        in_dim = math.prod(image_shape)
        layers: list[nn.Module] = [nn.Flatten()]
        for _ in range(config.depth or 2):
            layers += [nn.Linear(in_dim, config.width), nn.ReLU()]
            in_dim = config.width
        self.features = nn.Sequential(*layers)
        self.embed_dim = in_dim
        self.classifier = nn.Linear(in_dim, n_classes)

    def embed(self, x):
        return self.features(x)

    def forward(self, x):
        return self.classifier(self.embed(x))


def build_net(config: NetConfig, *, image_shape: tuple[int, int, int], n_classes: int) -> nn.Module:
    """The classifier described by `config` (parameters drawn from torch's current RNG)."""
    cls = ConvNet if config.arch == "convnet" else MLP
    return cls(image_shape=image_shape, n_classes=n_classes, config=config)


@torch.no_grad()
def reinitialise(net: nn.Module) -> nn.Module:
    """Draw every parameter of `net` again, in place, as its construction drew it (each layer's
    `reset_parameters` in construction order): from one RNG state, the weights `build_net` gives."""
    for module in net.modules():
        if module is not net and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return net


class ConditionalGenerator(nn.Module):
    """(latent code, class) -> image in [0, 1]: a small conditional DCGAN-style generator (linear, two
    stride-2 transposed convolutions with per-sample GroupNorm and ReLU, 3x3 convolution, sigmoid).
    Image sides must be multiples of 4."""

    def __init__(self, *, latent_dim: int, n_classes: int, image_shape: tuple[int, int, int], width: int = 64) -> None:
        super().__init__()
        channels, height, side = image_shape
        if height % 4 or side % 4:
            raise ValueError(f"the generator needs image sides divisible by 4, got {height}x{side}")
        self.n_classes = n_classes
        self.start = (2 * width, height // 4, side // 4)
        self.project = nn.Linear(latent_dim + n_classes, 2 * width * (height // 4) * (side // 4))
        self.body = nn.Sequential(
            nn.GroupNorm(2 * width, 2 * width),
            nn.ReLU(),
            nn.ConvTranspose2d(2 * width, width, kernel_size=4, stride=2, padding=1),
            nn.GroupNorm(width, width),
            nn.ReLU(),
            nn.ConvTranspose2d(width, width, kernel_size=4, stride=2, padding=1),
            nn.GroupNorm(width, width),
            nn.ReLU(),
            nn.Conv2d(width, channels, kernel_size=3, padding=1),
        )

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        onehot = nn.functional.one_hot(y, self.n_classes).to(z.dtype)
        h = self.project(torch.cat([z, onehot], dim=1)).view(-1, *self.start)
        return torch.sigmoid(self.body(h))


class ConditionalDiscriminator(nn.Module):
    """(image, class) -> one real/fake logit: the critic beside `ConditionalGenerator`, the class as
    one-hot planes on the image's channels, two stride-2 convolutions, linear. Every layer is per
    sample, so it can be trained with DP-SGD. Image sides must be multiples of 4."""

    def __init__(self, *, n_classes: int, image_shape: tuple[int, int, int], width: int = 32) -> None:
        super().__init__()
        channels, height, side = image_shape
        if height % 4 or side % 4:
            raise ValueError(f"the discriminator needs image sides divisible by 4, got {height}x{side}")
        self.n_classes = n_classes
        self.body = nn.Sequential(
            nn.Conv2d(channels + n_classes, width, kernel_size=4, stride=2, padding=1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(width, 2 * width, kernel_size=4, stride=2, padding=1),
            nn.GroupNorm(2 * width, 2 * width),
            nn.LeakyReLU(0.2),
            nn.Flatten(),
            nn.Linear(2 * width * (height // 4) * (side // 4), 1),
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # one-hot by comparison rather than F.one_hot, which torch.func's vmap cannot batch
        onehot = (y[:, None] == torch.arange(self.n_classes, device=y.device)).to(x.dtype)
        planes = onehot[:, :, None, None].expand(-1, -1, *x.shape[-2:])
        return self.body(torch.cat([x, planes], dim=1)).squeeze(1)
