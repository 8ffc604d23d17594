"""Deliberately broken DP victims: each differs from its correct built-in twin in one overridden
method, so an audit's power can be measured on a claim known to be false.

Not registered as `--victim` names: loaded by path (`--victim victims.bugs:NoiseForTen`), each
CLAIMS the epsilon of its `epsilon` field. `@dp_bug(label, what)` puts a class in the catalogue
`BUGS`, which `bench/dp_bugs.py` audits and docs/results/white-box.md, "The catalogue of bugs", lists."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from victims.base import get_victim, victim_names
from victims.pipelines.dpkernel import DPKernelVictim, class_embedding_sum
from victims.pipelines.dpsgd import DPSGDPrivacy, DPSGDVictim
from victims.pipelines.marginals import MarginalsVictim
from victims.dp.privacy import MOST_GDP_EPSILON, noise_multiplier_for
from victims.tabular.schema import Schema

#: the catalogue of bugs: label -> bug victim class, in label order once the module is imported
BUGS: dict[str, type] = {}


def dp_bug(label: str, what: str):
    """Class decorator: put a bug victim in the catalogue (`BUGS`) under `label`, with `what`, one
    line on what differs from its correct twin (a duplicate label raises)."""

    def decorate(cls: type) -> type:
        if label in BUGS:
            raise ValueError(f"bug {label!r} is already in the catalogue ({BUGS[label].__name__})")
        cls.bug_label, cls.bug_what = label, what
        BUGS[label] = cls
        return cls

    return decorate


def twin_of(cls: type) -> str:
    """The built-in victim a bug class breaks: the name of its nearest registered base class."""
    return next(
        b.name for b in cls.__mro__[1:] if getattr(b, "name", None) in victim_names() and get_victim(b.name) is b
    )


def path_of(cls: type) -> str:
    """The `--victim` path that loads a bug class: `victims.bugs:Class`."""
    return f"{__name__}:{cls.__name__}"


@dp_bug("a", "noise for 10 x the claim")
@dataclass(frozen=True)
class NoiseForTen(DPSGDVictim):
    """Bug a: sigma calibrated for 10 x epsilon while epsilon is claimed."""

    name = "dpsgd_noise_for_ten"

    def privacy(self, pool, inclusion_rate=0.5) -> DPSGDPrivacy:
        return DPSGDVictim.privacy(dataclasses.replace(self, epsilon=10 * self.epsilon), pool, inclusion_rate)


@dp_bug("b", "no per-example clipping")
@dataclass(frozen=True)
class NoClipping(DPSGDVictim):
    """Bug b: per-example gradients summed unclipped; the noise is still N(0, sigma^2 C^2)."""

    name = "dpsgd_no_clipping"

    def optimizer(self, model, plan, *, generator, probe):
        optimizer = DPSGDVictim.optimizer(self, model, plan, generator=generator, probe=probe)
        clip_and_accumulate = optimizer.clip_and_accumulate

        def sum_unclipped() -> None:  # opacus clips to max_grad_norm here, and draws noise from it after
            optimizer.max_grad_norm = float("inf")
            try:
                clip_and_accumulate()
            finally:
                optimizer.max_grad_norm = self.max_grad_norm

        optimizer.clip_and_accumulate = sum_unclipped
        return optimizer


@dp_bug("c", "one noise draw reused")
@dataclass(frozen=True)
class ReusedNoise(DPSGDVictim):
    """Bug c: the noise generator is reset before every step, so every step adds the same noise."""

    name = "dpsgd_reused_noise"

    def optimizer(self, model, plan, *, generator, probe):
        optimizer = DPSGDVictim.optimizer(self, model, plan, generator=generator, probe=probe)
        start, add_noise = generator.get_state(), optimizer.add_noise

        def same_noise() -> None:
            generator.set_state(start)
            add_noise()

        optimizer.add_noise = same_noise
        return optimizer


@dp_bug("d", "accountant told half the rate")
@dataclass(frozen=True)
class HalfRateAccountant(DPSGDVictim):
    """Bug d: the accountant is told half the true Poisson rate: sigma is calibrated, and the run's
    ε and mechanism recorded, for rate q/2 while batches are drawn at q."""

    name = "dpsgd_half_rate"

    def privacy(self, pool, inclusion_rate=0.5) -> DPSGDPrivacy:
        plan = DPSGDVictim.privacy(self, pool, inclusion_rate)
        told = plan.sample_rate / 2
        sigma = noise_multiplier_for(
            epsilon=self.epsilon, delta=self.delta, sample_rate=told, steps=plan.steps, accountant=self.accountant
        )
        return dataclasses.replace(plan, noise_multiplier=sigma, accounted_rate=told)


@dp_bug("g", "accountant told one epoch of ten")
@dataclass(frozen=True)
class OneEpochAccountant(DPSGDVictim):
    """Bug g: the accountant is told one epoch's steps of the `epochs` trained: sigma is calibrated,
    and the run's ε and mechanism recorded, for steps / epochs steps."""

    name = "dpsgd_one_epoch"

    def privacy(self, pool, inclusion_rate=0.5) -> DPSGDPrivacy:
        plan = DPSGDVictim.privacy(self, pool, inclusion_rate)
        told = max(1, plan.steps // self.epochs)
        sigma = noise_multiplier_for(
            epsilon=self.epsilon, delta=self.delta, sample_rate=plan.sample_rate, steps=told, accountant=self.accountant
        )
        return dataclasses.replace(plan, noise_multiplier=sigma, accounted_steps=told)


@dp_bug("e", "dpkernel: noise off the graph")
@dataclass(frozen=True)
class KernelNoiseOffGraph(DPKernelVictim):
    """Bug e: the released noisy embedding is computed, but the generator's loss is the noiseless
    distance (the noise, if at all, a constant outside the autograd graph)."""

    name = "dpkernel_noise_off_graph"

    def matched_embedding(self, features, labels, *, n_classes, sigma, generator, probe=None):
        DPKernelVictim.matched_embedding(
            self, features, labels, n_classes=n_classes, sigma=sigma, generator=generator, probe=probe
        )  # the noisy release is made (and observed), then left out of the generator's loss: the bug
        return class_embedding_sum(features, labels, n_classes=n_classes) / self.batch_size


@dp_bug("f", "divided by the realised batch")
@dataclass(frozen=True)
class RealisedDivisor(DPSGDVictim):
    """Bug f: the noisy sum divided by the realised batch size instead of the expected B."""

    name = "dpsgd_realised_divisor"

    def optimizer(self, model, plan, *, generator, probe):
        optimizer = DPSGDVictim.optimizer(self, model, plan, generator=generator, probe=probe)

        def scale_grad() -> None:
            per_example = optimizer.params[0].grad_sample
            realised = max(1, 0 if per_example is None else len(per_example))
            for p in optimizer.params:
                p.grad /= realised

        optimizer.scale_grad = scale_grad
        return optimizer


def member_domain(schema: Schema, x: np.ndarray, y: np.ndarray) -> tuple[Schema, tuple[np.ndarray, ...]]:
    """(schema, support) read from the rows `x`, `y` (`MarginalsDomainFromData`'s bug): numeric bounds
    the rows' min and max, and only the cells some row occupies. No rows: the public schema."""
    if len(x) == 0:
        return schema, tuple(np.ones(size, dtype=bool) for size in schema.domain_sizes)
    bounded = {}
    for j, column in enumerate(schema.features):
        if column.kind != "categorical" and len(x) and x[:, j].min() < x[:, j].max():
            bounded[column.name] = dataclasses.replace(column, lower=float(x[:, j].min()), upper=float(x[:, j].max()))
    read = Schema(columns=tuple(bounded.get(c.name, c) for c in schema.columns), label=schema.label)
    codes = read.codes(x, y)
    return read, tuple(np.bincount(codes[:, j], minlength=n) > 0 for j, n in enumerate(read.domain_sizes))


@dp_bug("h", "marginals: domain read from the members")
@dataclass(frozen=True)
class MarginalsDomainFromData(MarginalsVictim):
    """Bug h: the marginals' categories and numeric bounds are read from the private member rows
    (`member_domain`), so a category no member has is never released (the failure the USENIX Security
    2024 audit of synthetic-data libraries found most often). It claims what its correct twin does."""

    name = "marginals_domain_from_data"

    def domain(self, pool, members):
        return member_domain(pool.schema, pool.x[members], pool.y[members])


@dp_bug("i", "marginals: noise for 10 x the claim")
@dataclass(frozen=True)
class MarginalsNoiseForTen(MarginalsVictim):
    """Bug i: the noise sigma calibrated for 10 x epsilon, while the claimed epsilon and the claimed
    mechanism (sigma for epsilon) are recorded."""

    name = "marginals_noise_for_ten"

    def __post_init__(self) -> None:
        MarginalsVictim.__post_init__(self)
        if 10 * self.epsilon > MOST_GDP_EPSILON:
            raise ValueError(
                f"--epsilon must be at most {MOST_GDP_EPSILON / 10:g} (the bug calibrates to 10 x), got {self.epsilon}"
            )

    def drawn_noise(self, pool) -> float:
        return MarginalsVictim.claimed_noise(dataclasses.replace(self, epsilon=10 * self.epsilon), pool)


BUGS = dict(sorted(BUGS.items()))
