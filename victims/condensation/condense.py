"""What the dataset-condensation victims (`dm`, `dsa`, `dc`, `kip`) share.

A condensation victim learns `ipc` synthetic images per class from the members, starting from
real member images (`--init real`, recorded as `init_idx` and audited as their own sub-group) or
Gaussian noise (`--init random`), and its downstream ConvNet is trained and observed as `subset`'s
is. Each family supplies `condense`. A run's class counts are Binomial under the plan:
`check_ipc` refuses an `ipc` a run could plausibly not supply, and a run short of it all the same
raises where it needs `ipc` real images of a class."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from victims.base import (
    DEFAULT_INCLUSION_RATE,
    Observations,
    SeededRuns,
    expected_class_members,
    observe,
    require_at_least,
    seeded,
    seeded_runs,
)
from victims.pool import Pool
from victims.packed import PacksRuns, fit_runs, observe_packed
from victims.presets import require_filled
from victims.synthetic import ReleasesData
from victims.train import TrainConfig, fit, small_set_training, to_model_space, to_pixel_space

INITS = ("real", "random")
PRESETS = ("digits", "paper")


#: `check_ipc` allows at most this many standard deviations below a class's expected member count
#: (a Binomial(n, q) count falls below it with probability about 3e-5, per class and run)
IPC_MARGIN_SD = 4.0


def assured_members_per_class(pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> tuple[int, int]:
    """(count, class): the fewest members a run can count on in any class, floor(q n_c - 4 sd_c) with
    sd_c the Binomial standard deviation (0 when too small to count on any), and its class."""
    sizes = np.bincount(pool.y, minlength=pool.n_classes)
    expected = expected_class_members(pool, inclusion_rate)
    assured = np.floor(expected - IPC_MARGIN_SD * np.sqrt(sizes * inclusion_rate * (1 - inclusion_rate)))
    c = int(np.argmin(assured))
    return max(0, int(assured[c])), c


def check_ipc(ipc: int, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
    """Refuse more images per class than a run can count on having members of each class
    (`assured_members_per_class`); a run short of it all the same raises (`require_members_per_class`)."""
    assured, c = assured_members_per_class(pool, inclusion_rate)
    if ipc > assured:
        size = int(np.sum(pool.y == c))
        raise ValueError(
            f"--ipc {ipc} exceeds the {assured} members per class a run can count on (class {c}: {size} images, "
            f"{inclusion_rate * size:g} members expected at inclusion rate {inclusion_rate:g}, "
            f"less {IPC_MARGIN_SD:g} standard deviations)"
        )


def require_members_per_class(ipc: int, pool: Pool, keep: np.ndarray) -> None:
    """ValueError naming the first class of which the run's members `keep` hold fewer than `ipc`
    images (possible, if improbable, under a plan `check_ipc` accepted)."""
    counts = np.bincount(pool.y[np.asarray(keep, dtype=bool)], minlength=pool.n_classes)
    short = np.flatnonzero(counts < ipc)
    if short.size:
        c = int(short[0])
        raise ValueError(
            f"--ipc {ipc} exceeds the {counts[c]} members of class {c} in this run "
            f"(of {int(np.sum(pool.y == c))} images of the class in the pool): lower --ipc"
        )


@dataclass(frozen=True, eq=False)
class Members:
    """A run's member images in model space, with a sampler of random batches of one class."""

    x: torch.Tensor  # [m, c, h, w]
    y: torch.Tensor  # int64 [m]
    by_class: tuple[torch.Tensor, ...]  # indices into x of each class

    @classmethod
    def of(cls, pool: Pool, keep: np.ndarray, *, device: str) -> Members:
        idx = np.flatnonzero(keep)
        x = to_model_space(pool.x[idx], mean=pool.mean, std=pool.std, device=device)
        y = torch.as_tensor(pool.y[idx], device=device)
        return cls(x=x, y=y, by_class=tuple(torch.nonzero(y == c).flatten() for c in range(pool.n_classes)))

    def batch(self, c: int, size: int, *, generator: torch.Generator) -> torch.Tensor:
        """`size` random member images of class c (all of them, shuffled, when it has fewer)."""
        pick = self.by_class[c]
        order = torch.randperm(len(pick), generator=generator, device=generator.device)[:size]
        return self.x[pick[order.to(pick.device)]]

    def class_batches(self, size: int, *, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """One random batch of up to `size` images from every class, concatenated in class order,
        and the class of each image."""
        batches = [self.batch(c, size, generator=generator) for c in range(len(self.by_class))]
        labels = torch.cat([torch.full((len(b),), c, dtype=torch.int64) for c, b in enumerate(batches)])
        return torch.cat(batches), labels.to(self.x.device)


def initial_set(
    pool: Pool, keep: np.ndarray, members: Members, *, ipc: int, init: str, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """(images [k, c, h, w] in model space, labels [k], init_idx): `ipc` images per class in class
    order, distinct random members (their pool indices `init_idx`) or standard Gaussian noise
    (`init_idx` empty). `init="real"` raises ValueError when a class has fewer than `ipc` members."""
    device = members.x.device
    labels = torch.arange(pool.n_classes, device=device).repeat_interleave(ipc)
    if init == "random":
        images = torch.randn((len(labels), *pool.image_shape), generator=generator, device=generator.device)
        return images.to(device), labels, np.zeros(0, dtype=np.int64)
    require_members_per_class(ipc, pool, keep)
    member_idx = np.flatnonzero(keep)
    chosen = []
    for c in range(pool.n_classes):
        pick = members.by_class[c]
        order = torch.randperm(len(pick), generator=generator, device=generator.device)[:ipc]
        chosen.append(pick[order.to(pick.device)].cpu())
    chosen = torch.cat(chosen)
    return members.x[chosen.to(device)].clone(), labels, member_idx[chosen.numpy()]


def image_sgd(images: torch.Tensor, *, lr: float, momentum: float) -> tuple[torch.Tensor, torch.optim.SGD]:
    """The synthetic images as a fresh leaf, and SGD with momentum on them (DM's and DC/DSA's optimiser)."""
    images = images.clone().requires_grad_(True)
    return images, torch.optim.SGD([images], lr=lr, momentum=momentum)


@dataclass(frozen=True)
class CondensationVictim(PacksRuns, ReleasesData):
    """Fields and run frame of every condensation victim; subclasses add their own
    hyper-parameters and implement `condense`."""

    ipc: int = field(default=10, metadata={"help": "images per class in the released set"})
    init: str = field(
        default="real",
        metadata={
            "help": "initialise the synthetic images from real member images or Gaussian noise",
            "choices": INITS,
        },
    )
    train: TrainConfig = field(default_factory=small_set_training)  # the downstream ConvNet on the release
    preset: str = field(
        default="digits",
        metadata={
            "help": "defaults of the condensation: digits (sized for one CPU thread) or paper (the reference code's "
            "hyper-parameters: DatasetCondensation's for dm, dsa, dc; the KIP colab's for kip)",
            "choices": PRESETS,
            "omit_at_default": True,
        },
    )

    #: the presets this victim has (a subclass with a paper preset lists it and gives `preset_values`)
    OWN_PRESETS: ClassVar[tuple[str, ...]] = ("digits",)

    @classmethod
    def preset_values(cls, values: Mapping[str, Any]) -> dict:
        """The values `values["preset"]` gives the fields left at None (`victims.presets.filled_from_preset`);
        {} for a preset or ipc that `__post_init__` refuses."""
        return {}

    def __post_init__(self) -> None:
        if self.preset not in self.OWN_PRESETS:
            raise ValueError(
                f"--preset {self.preset} is not available for {self.name} (choose from {', '.join(self.OWN_PRESETS)})"
            )
        require_at_least(self, {"ipc": 1})
        require_filled(self)
        if self.init not in INITS:
            raise ValueError(f"--init must be one of {INITS}, got {self.init!r}")

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        check_ipc(self.ipc, pool, inclusion_rate)

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        """One run (`inclusion_rate` is unused: nothing here is calibrated to the member count).
        With `--init real`, a class with fewer than `ipc` members in this run raises ValueError."""
        with seeded(seed, device) as generator:
            images, labels, init_idx = self.release(pool, keep, device=device, generator=generator)
            model = fit(
                images, labels, n_classes=pool.n_classes, config=self.train, flip_ok=pool.flip_ok, generator=generator
            )
            return self.observe(model, pool, images, labels, init_idx, device=device)

    def pack_runs(
        self, pool: Pool, keeps: np.ndarray, seeds: list[int], *, device: str, inclusion_rate: float
    ) -> list[Observations]:
        """Each run's initial set from its own generator, the sets condensed by `condense_packed`, the
        downstream ConvNets trained and observed together. With `--init real`, a short class in any run
        raises ValueError."""
        members = [Members.of(pool, keep, device=device) for keep in keeps]
        with seeded_runs(seeds, device) as runs:
            initial = [
                initial_set(pool, keep, m, ipc=self.ipc, init=self.init, generator=g)
                for keep, m, g in zip(keeps, members, runs.generators)
            ]
            labels = initial[0][1]
            condensed = self.condense_packed(
                torch.stack([images for images, _, _ in initial]), labels, members, pool=pool, runs=runs
            ).detach()
            releases = [(images, labels) for images in condensed.unbind(0)]
            trained = fit_runs(
                releases, runs, n_classes=pool.n_classes, config=self.train, flip_ok=pool.flip_ok, device=device
            )
        extras = [
            self.release_fields(pool, images, labels, init_idx)
            for (images, labels), (_, _, init_idx) in zip(releases, initial)
        ]
        return observe_packed(trained, pool, device=device, extras=extras)

    def condense_packed(
        self, images: torch.Tensor, labels: torch.Tensor, members: list[Members], *, pool: Pool, runs: SeededRuns
    ) -> torch.Tensor:
        """`condense` of K runs: initial images [K, k, c, h, w] (shared `labels`), each run's `members`,
        generator and global-RNG stream in `runs` -> the K learned sets. By default each run in turn,
        exactly as alone; a family may override it to advance the K runs as one computation."""
        learned = []
        for k, (start, m) in enumerate(zip(images.unbind(0), members)):
            with runs.global_rng(k):
                learned.append(self.condense(start, labels, m, pool=pool, generator=runs.generators[k]).detach())
        return torch.stack(learned)

    def release(self, pool: Pool, keep: np.ndarray, *, device: str, generator: torch.Generator):
        """(images in model space, labels, init_idx) of one run's released set: the initial set condensed."""
        members = Members.of(pool, keep, device=device)
        images, labels, init_idx = initial_set(pool, keep, members, ipc=self.ipc, init=self.init, generator=generator)
        return self.condense(images, labels, members, pool=pool, generator=generator).detach(), labels, init_idx

    @staticmethod
    def observe(
        model, pool: Pool, images: torch.Tensor, labels: torch.Tensor, init_idx: np.ndarray, *, device: str
    ) -> Observations:
        """A run's observations: the downstream model's, with the release."""
        return observe(model, pool, device=device, **CondensationVictim.release_fields(pool, images, labels, init_idx))

    @staticmethod
    def release_fields(pool: Pool, images: torch.Tensor, labels: torch.Tensor, init_idx: np.ndarray) -> dict:
        """The Observations fields of a run's release (pixel scale) beside the downstream model's."""
        return {
            "init_idx": init_idx,
            "release_x": to_pixel_space(images, mean=pool.mean, std=pool.std),
            "release_y": labels.cpu().numpy(),
        }

    def condense(
        self, images: torch.Tensor, labels: torch.Tensor, members: Members, *, pool: Pool, generator: torch.Generator
    ) -> torch.Tensor:
        """The learned synthetic images (model space) from the initial `images` with `labels`; fresh
        networks from torch's global RNG, everything else from `generator`."""
        raise NotImplementedError
