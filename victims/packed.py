"""Packed runs: K downstream classifiers of K shadow runs trained at once, their parameters stacked
and every step taken by one vectorised forward and backward pass (`torch.func.stack_module_state`
and `vmap`), so that one task can keep an accelerator busy with many small models.

Each run keeps its own seed, training set and result: model k is initialised exactly as the
unpacked run initialises it, draws its minibatches and augmentations from its own generator in
the same order (`victims.train.Batches`), and SGD with momentum and weight decay acts
elementwise, so the stacked update is each model's own update. What differs is the order of
floating-point sums inside the batched convolutions, so a packed run equals the same run unpacked
within float tolerance, not bit for bit (tests/victims/test_packed.py); over hundreds of steps
SGD amplifies that difference as it amplifies any other reordering (another thread count,
another GPU kernel). Runs whose minibatches differ in size (a training set smaller than the batch
size) cannot share one stacked step and are trained one by one.

A victim packs by offering `run_packed(pool, keeps, seeds, *, device, inclusion_rate)`, one
`Observations` per run; the executor calls it with `--runs-per-task` runs at a time. `real` and
`subset` pack whole runs; the condensation victims (`dm`, `dsa`, `dc`, `kip`) and `psg` make each
run's release in turn and pack the downstream training on the releases (`fit_releases_packed`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from victims.base import seeded
from victims.nets import build_net
from victims.train import Batches, TrainConfig, train


def fit_packed(sets: Sequence[tuple[torch.Tensor, torch.Tensor]], *, seeds: Sequence[int], n_classes: int,
               config: TrainConfig, flip_ok: bool, device: str) -> list[nn.Module]:
    """`fit` on each (x, y) of `sets` under `seeded(seeds[k])` (as `victims.real` fits), trained together."""
    packed = fit_releases_packed(lambda training_set, generator: training_set, sets, seeds, n_classes=n_classes,
                                 config=config, flip_ok=flip_ok, device=device)
    return [model for model, _ in packed]


def fit_releases_packed(make_release, keeps, seeds: Sequence[int], *, n_classes: int, config: TrainConfig,
                        flip_ok: bool, device: str) -> list[tuple[nn.Module, tuple]]:
    """For victims that release a set and train the downstream net on it: each run's release made
    in turn under `seeded(seed)` by `make_release(keep, generator)` -> (images, labels, ...), its
    downstream net drawn right after it (where `fit` draws it in the unpacked run), then the K nets
    trained together on their releases. Returns (trained net, release) per run."""
    if len(keeps) != len(seeds):
        raise ValueError(f"one seed per run: {len(keeps)} runs, {len(seeds)} seeds")
    releases, models, generators = [], [], []
    for keep, seed in zip(keeps, seeds):
        with seeded(seed, device) as generator:
            releases.append(make_release(keep, generator))
            images = releases[-1][0]
            models.append(build_net(config.net, image_shape=tuple(images.shape[1:]), n_classes=n_classes).to(images.device))
        generators.append(generator)
    trained = train_packed(models, [release[:2] for release in releases], generators, config=config, flip_ok=flip_ok)
    return list(zip(trained, releases))


def train_packed(models: Sequence[nn.Module], sets: Sequence[tuple[torch.Tensor, torch.Tensor]],
                 generators: Sequence[torch.Generator], *, config: TrainConfig, flip_ok: bool) -> list[nn.Module]:
    """`victims.train.train` of each initialised model on its (x, y) with its generator, trained together."""
    if len({min(config.batch_size, x.shape[0]) for x, _ in sets}) > 1:  # no common step shape
        return [train(m, x, y, config=config, flip_ok=flip_ok, generator=g)
                for m, (x, y), g in zip(models, sets, generators)]
    batches = [Batches(x, y, config=config, flip_ok=flip_ok, generator=g) for (x, y), g in zip(sets, generators)]
    params, buffers = torch.func.stack_module_state(list(models))
    skeleton = copy.deepcopy(models[0]).to("meta")

    def logits(p, b, xb):
        return torch.func.functional_call(skeleton, (p, b), (xb,))

    opt = torch.optim.SGD(params.values(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    skeleton.train()
    for _ in range(config.steps):
        xb, yb = map(torch.stack, zip(*(b.next() for b in batches)))  # [K, B, ...], [K, B]
        out = torch.func.vmap(logits)(params, buffers, xb)
        # each model's mean loss over its own batch, summed: the gradient of model k is its own
        loss = F.cross_entropy(out.flatten(0, 1), yb.flatten(), reduction="none").view(yb.shape).mean(1).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        for k, model in enumerate(models):
            for name, tensor in (*model.named_parameters(), *model.named_buffers()):
                tensor.copy_((params if name in params else buffers)[name][k])
    return [model.eval() for model in models]
