"""Packed runs: K downstream classifiers of K shadow runs trained at once as one network of grouped
layers (`GroupedNets`), every step one forward and backward pass, to keep an accelerator busy.

Each run keeps its own seed, training set and result: model k is initialised as the unpacked run
initialises it, draws its batches from its own generator in the same order, and SGD acts
elementwise. A packed run equals the same run unpacked within float tolerance, not bit for bit
(tests/contracts/test_victims.py). A victim packs by deriving from `PacksRuns`: the executor calls
its `run_packed(pool, keeps, seeds, *, device, inclusion_rate)`, one `Observations` per run
(docs/contracts.md, docs/performance.md)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from victims.base import DEFAULT_INCLUSION_RATE, Observations, SeededRuns, seeded_runs
from victims.compiled import maybe_compiled
from victims.pool import Pool
from victims.nets import NetConfig, build_net, reinitialise
from victims.precision import training_autocast
from victims.train import Batches, TrainConfig, query_views, to_model_space, train


class PacksRuns:
    """Mixin of a victim that runs K runs together: `run_packed` hands them, one seed per run, to its
    `pack_runs(pool, keeps, seeds, *, device, inclusion_rate)`."""

    def run_packed(
        self,
        pool: Pool,
        keeps: np.ndarray,
        seeds: list[int],
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> list[Observations]:
        """`run` of each (keep, seed): one `Observations` per run, the K runs advancing together."""
        if len(keeps) != len(seeds):
            raise ValueError(f"one seed per run: {len(keeps)} runs, {len(seeds)} seeds")
        return self.pack_runs(pool, keeps, list(seeds), device=device, inclusion_rate=inclusion_rate)


def fit_packed(
    sets: Sequence[tuple[torch.Tensor, torch.Tensor]],
    *,
    seeds: Sequence[int],
    n_classes: int,
    config: TrainConfig,
    flip_ok: bool,
    device: str,
) -> list[nn.Module]:
    """`fit` on each (x, y) of `sets` under `seeded(seeds[k])` (as `victims.pipelines.real` fits), trained
    together (`fit_runs`)."""
    if len(sets) != len(seeds):
        raise ValueError(f"one seed per run: {len(sets)} runs, {len(seeds)} seeds")
    with seeded_runs(list(seeds), device) as runs:
        return fit_runs(sets, runs, n_classes=n_classes, config=config, flip_ok=flip_ok, device=device)


def fit_runs(
    sets: Sequence[tuple[torch.Tensor, torch.Tensor]],
    runs: SeededRuns,
    *,
    n_classes: int,
    config: TrainConfig,
    flip_ok: bool,
    device: str,
) -> list[nn.Module]:
    """`fit` of run k on sets[k], run k's RNG state standing in `runs`: each net drawn from its own
    global-RNG stream, then the K trained together (`train_packed`) with their own generators."""
    image_shape = tuple(sets[0][0].shape[1:])
    models = [net.to(device) for net in draw_nets(runs, config.net, image_shape=image_shape, n_classes=n_classes)]
    return train_packed(models, sets, runs.generators, config=config, flip_ok=flip_ok)


def draw_nets(
    runs: SeededRuns,
    config: NetConfig,
    *,
    image_shape: tuple[int, ...],
    n_classes: int,
    nets: list[nn.Module] | None = None,
) -> list[nn.Module]:
    """Each run's fresh network from its own global-RNG stream, as `build_net` draws it alone: built
    when `nets` is None, else redrawn in place (the same weights bit for bit)."""
    fresh = nets is None
    nets = [] if fresh else nets
    for k in range(len(runs.generators)):
        with runs.global_rng(k):
            if fresh:
                nets.append(build_net(config, image_shape=image_shape, n_classes=n_classes))
            else:
                reinitialise(nets[k])
    return nets


def train_packed(
    models: Sequence[nn.Module],
    sets: Sequence[tuple[torch.Tensor, torch.Tensor]],
    generators: Sequence[torch.Generator],
    *,
    config: TrainConfig,
    flip_ok: bool,
) -> list[nn.Module]:
    """`victims.train.train` of each initialised model on its (x, y) with its generator, trained together."""
    sizes = {min(config.batch_size, x.shape[0]) for x, _ in sets}
    if len(sizes) > 1 or 0 in sizes:  # no common step shape, or no examples to step on
        return [
            train(m, x, y, config=config, flip_ok=flip_ok, generator=g)
            for m, (x, y), g in zip(models, sets, generators)
        ]
    batches = packed_batches(sets, generators, config=config, flip_ok=flip_ok)
    grouped = GroupedNets(models).train()
    # foreach: one update over every parameter per step, as torch's default on a GPU (elementwise,
    # so the same update as the per-tensor loop that is the default on a CPU)
    opt = torch.optim.SGD(
        grouped.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        foreach=True,
    )
    forward = maybe_compiled(grouped)  # compiled once per process under --compile, as `train`'s step
    for xb, yb in batches:  # [K, B, ...], [K, B]
        with training_autocast(xb.device):  # bf16 under --precision bf16 (victims.precision)
            out = forward(xb)  # [K, B, classes]
            # each model's mean loss over its own batch (all batches have B examples), summed: the
            # gradient of model k is its own
            loss = F.cross_entropy(out.flatten(0, 1), yb.flatten(), reduction="sum") / yb.shape[1]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    grouped.unpack_into(models)
    return [model.eval() for model in models]


def packed_batches(
    sets: Sequence[tuple[torch.Tensor, torch.Tensor]],
    generators: Sequence[torch.Generator],
    *,
    config: TrainConfig,
    flip_ok: bool,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The `config.steps` minibatches of K runs stacked, ([K, B, ...], [K, B]): run k's are exactly those
    `Batches(x_k, y_k, generator=g_k).next()` gives step after step (all sets give batches of one size
    B). Without augmentation the epoch permutations are drawn up front and each step gathers all K
    batches with one `index_select`; with it, each run's batches come from its own `Batches`."""
    if config.augment:
        runs = [Batches(x, y, config=config, flip_ok=flip_ok, generator=g) for (x, y), g in zip(sets, generators)]
        for _ in range(config.steps):
            yield tuple(map(torch.stack, zip(*(b.next() for b in runs))))
        return
    size = min(config.batch_size, sets[0][0].shape[0])
    rows, start = [], 0
    for (x, _), generator in zip(sets, generators):
        n = x.shape[0]
        per_epoch = n // size
        perms = torch.stack(
            [
                torch.randperm(n, generator=generator, device=generator.device)
                for _ in range(math.ceil(config.steps / per_epoch))
            ]
        )  # [epochs, n]
        rows.append(perms[:, : per_epoch * size].flatten()[: config.steps * size] + start)
        start += n
    x_all, k = torch.cat([x for x, _ in sets]), len(sets)
    index = torch.stack(rows).to(x_all.device).view(k, config.steps, size).transpose(0, 1).contiguous()
    y_steps = torch.cat([y for _, y in sets])[index].unbind(0)  # [K, B] each, contiguous
    # each step's images gathered example-major, [B, K, ...], so that `GroupedNets` lays them out
    # as [B, K*C, H, W] without a copy
    for step, flat in enumerate(index.transpose(1, 2).reshape(config.steps, -1).unbind(0)):
        yield x_all.index_select(0, flat).view(size, k, *x_all.shape[1:]).transpose(0, 1), y_steps[step]


#: examples x models x pixels of one grouped forward pass in `observe_packed`: as many as an
#: unpacked `observe` passes at once on 32x32 images (2048 of them), so its activations are no larger
OBSERVE_PIXELS = 2048 * 32 * 32


@torch.no_grad()
def observe_packed(
    models: Sequence[nn.Module], pool: Pool, *, device: str, extras: Sequence[dict] | None = None
) -> list[Observations]:
    """`victims.base.observe` of K models of one architecture (`GroupedNets`), `extras[k]` being model k's
    further Observations fields: each chunk's query views go through all K models in one grouped pass,
    so model k's logits are its `observe` logits up to the order of float sums."""
    extras = list(extras) if extras is not None else [{} for _ in models]
    if len(extras) != len(models):
        raise ValueError(f"one extras per model: {len(models)} models, {len(extras)} extras")
    k = len(models)
    forward = maybe_compiled(GroupedNets(models).eval())  # compiled under --compile, as `observe`'s pass
    x = to_model_space(pool.x, mean=pool.mean, std=pool.std, device=device)
    x_test = to_model_space(pool.x_test, mean=pool.mean, std=pool.std, device=device)
    y_test = torch.tensor(pool.y_test, device=device)
    chunk = max(1, OBSERVE_PIXELS // (k * x.shape[-2] * x.shape[-1]))

    def each_model(images: torch.Tensor) -> torch.Tensor:  # [B, ...] -> [K, B, classes]
        return forward(images.unsqueeze(0).expand(k, *images.shape))

    logits = torch.cat(
        [
            torch.stack([each_model(view) for view in query_views(x[s : s + chunk], flip_ok=pool.flip_ok)], dim=2)
            for s in range(0, x.shape[0], chunk)
        ],
        dim=1,
    )  # [K, n_pool, n_queries, classes]
    logits = logits.float().cpu().numpy()
    correct = sum(
        (each_model(x_test[s : s + chunk]).argmax(-1) == y_test[s : s + chunk]).sum(1)
        for s in range(0, x_test.shape[0], chunk)
    ).tolist()
    return [Observations(logits=logits[m], test_accuracy=correct[m] / x_test.shape[0], **extras[m]) for m in range(k)]


class GroupedLinear(nn.Module):
    """K linear layers as one: weight [K, out, in], bias [K, out]; [K, B, in] -> [K, B, out]."""

    def __init__(self, layers: Sequence[nn.Linear]) -> None:
        super().__init__()
        with torch.no_grad():  # stacked copies of the weights, no graph to them
            self.weight = nn.Parameter(torch.stack([layer.weight for layer in layers]))
            self.bias = nn.Parameter(torch.stack([layer.bias for layer in layers]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight.transpose(1, 2))

    def blocks(self, layers: Sequence[nn.Linear]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(the K layers' tensors, the matching blocks of this one's), for `GroupedNets.unpack_into`."""
        return (
            [t for layer in layers for t in (layer.weight, layer.bias)],
            [t for pair in zip(self.weight.unbind(0), self.bias.unbind(0)) for t in pair],
        )

    @torch.no_grad()
    def unpack_into(self, layers: Sequence[nn.Linear]) -> None:
        torch._foreach_copy_(*self.blocks(layers))


@torch.no_grad()
def _grouped_conv(convs: Sequence[nn.Conv2d]) -> nn.Conv2d:
    """K convolutions as one with K groups: model k's input and output channels are the k-th block."""
    c = convs[0]
    if c.groups != 1 or c.bias is None:
        raise ValueError("packing needs ungrouped convolutions with a bias")
    grouped = nn.Conv2d(
        len(convs) * c.in_channels,
        len(convs) * c.out_channels,
        c.kernel_size,
        stride=c.stride,
        padding=c.padding,
        dilation=c.dilation,
        groups=len(convs),
    ).to(c.weight.device)
    grouped.weight.copy_(torch.cat([conv.weight for conv in convs]))
    grouped.bias.copy_(torch.cat([conv.bias for conv in convs]))
    return grouped


@torch.no_grad()
def _grouped_norm(norms: Sequence[nn.GroupNorm]) -> nn.GroupNorm:
    """K GroupNorms as one over the K channel blocks (each group stays within one model's block)."""
    n = norms[0]
    grouped = nn.GroupNorm(len(norms) * n.num_groups, len(norms) * n.num_channels, eps=n.eps, affine=n.affine)
    if n.affine:
        grouped.to(n.weight.device)
        grouped.weight.copy_(torch.cat([norm.weight for norm in norms]))
        grouped.bias.copy_(torch.cat([norm.bias for norm in norms]))
    return grouped


class GroupedNets(nn.Module):
    """K `victims.nets` classifiers of one architecture (ConvNet or MLP) as one network: grouped
    convolutions with K groups, one GroupNorm over the K channel blocks, batched linear layers. Model
    k's arithmetic is its own. Input [K, B, C, H, W], output [K, B, classes]; `unpack_into` copies the
    weights back into the K models."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        self.k = len(models)
        layers = []
        for position, first in enumerate(models[0].features):
            same = [model.features[position] for model in models]
            if isinstance(first, nn.Conv2d):
                layers.append(_grouped_conv(same))
            elif isinstance(first, nn.GroupNorm):
                layers.append(_grouped_norm(same))
            elif isinstance(first, nn.Linear):
                layers.append(GroupedLinear(same))
            elif isinstance(first, (nn.ReLU, nn.AvgPool2d, nn.MaxPool2d, nn.Flatten)):
                layers.append(first)
            else:
                raise ValueError(f"packing does not know the layer {type(first).__name__}")
        self.features = nn.ModuleList(layers)
        self.classifier = GroupedLinear([model.classifier for model in models])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embed(x))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """[K, B, C, H, W] -> [K, B, embed_dim]: each model's `embed` of its batch; an image's embedding is its own."""
        b = x.shape[1]
        h = x.transpose(0, 1).flatten(1, 2)  # [B, K*C, H, W]: model k's channels in block k
        for layer in self.features:
            if isinstance(layer, nn.Flatten):  # MLP: each model's flattened image, [K, B, C*H*W]
                h = h.reshape(b, self.k, -1).transpose(0, 1)
            else:
                h = layer(h)
        if h.dim() == 4:  # ConvNet: each model's features flattened as its own embed does (C, h, w)
            h = h.reshape(b, self.k, -1).transpose(0, 1)
        return h

    @torch.no_grad()
    def load_from(self, models: Sequence[nn.Module]) -> None:
        """Copy the K models' weights in (the inverse of `unpack_into`): model k's into block k."""
        for position, layer in enumerate(self.features):
            if isinstance(layer, (nn.Conv2d, nn.GroupNorm, GroupedLinear)) and layer.weight is not None:
                same = [model.features[position] for model in models]
                stack = torch.stack if isinstance(layer, GroupedLinear) else torch.cat
                for weight_name in ("weight", "bias"):
                    getattr(layer, weight_name).copy_(stack([getattr(module, weight_name) for module in same]))
        for weight_name in ("weight", "bias"):
            getattr(self.classifier, weight_name).copy_(
                torch.stack([getattr(model.classifier, weight_name) for model in models])
            )

    @torch.no_grad()
    def unpack_into(self, models: Sequence[nn.Module]) -> None:
        """Each model's weights set to its block of the grouped weights (one foreach copy for all)."""
        targets, sources = self.classifier.blocks([model.classifier for model in models])
        for position, layer in enumerate(self.features):
            same = [model.features[position] for model in models]
            if isinstance(layer, GroupedLinear):
                into, blocks = layer.blocks(same)
                targets += into
                sources += blocks
            elif isinstance(layer, (nn.Conv2d, nn.GroupNorm)) and layer.weight is not None:
                for weight_name in ("weight", "bias"):
                    targets += [getattr(module, weight_name) for module in same]
                    sources += getattr(layer, weight_name).chunk(self.k)
        torch._foreach_copy_(targets, sources)

    def matched_layers(self) -> list[nn.Module]:
        """The grouped convolutions and linear layers in model order: those whose weights gradient matching
        uses (`victims.condensation.matching`)."""
        return [layer for layer in self.features if isinstance(layer, (nn.Conv2d, GroupedLinear))] + [self.classifier]

    def matched_weights(self) -> list[nn.Parameter]:
        return [layer.weight for layer in self.matched_layers()]

    def run_shape(self, weight: torch.Tensor) -> tuple[int, ...]:
        """One run's shape of a grouped weight: [out, in, kh, kw] of a convolution's [K*out, in, kh, kw],
        [out, in] of a `GroupedLinear`'s [K, out, in]."""
        if weight.dim() == 4:
            return (weight.shape[0] // self.k, *weight.shape[1:])
        return tuple(weight.shape[1:])

    def per_run(self, weight: torch.Tensor) -> torch.Tensor:
        """A grouped weight (or its gradient) as [K, *run shape]: run k's in slot k."""
        return weight.reshape(self.k, *self.run_shape(weight))
