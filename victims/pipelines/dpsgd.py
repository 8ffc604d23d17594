"""`dpsgd`: the ConvNet trained on the members with opacus DP-SGD at a target (epsilon, delta).

Built from opacus's parts rather than `PrivacyEngine.make_private`, whose sample rate (1 / number
of batches) and divisor (dataset size x rate) would come from the run's actual member count,
which is data under the membership plan. Here everything the accountant sees is public: with
N = q * n_pool the plan's expected member count (`victims.base.expected_members`),

- Poisson batches: each member independently with probability B / N at every step
  (`victims.privacy.poisson_batches`: opacus's `UniformWithReplacementSampler`, the batch sampler
  of its `DPDataLoader`, with an explicit step count: `DPDataLoader`'s length is int(N / B),
  rounded down);
- round(N / B) steps per epoch (at least one), `epochs` epochs;
- per-example gradients from opacus's `GradSampleModule`, clipped to C, summed, plus
  N(0, sigma^2 C^2) noise, divided by B by opacus's `DPOptimizer(expected_batch_size=B)`;
- sigma from the accountant (`victims.privacy.noise_multiplier_for`) so that these steps spend
  the target epsilon; the recorded epsilon is that of opacus's accountant attached to the
  optimizer's step hook, i.e. for the steps actually taken.

So two runs of the same plan share their sample rate, steps, sigma and epsilon whatever their
member counts (tests/contracts/test_victims.py). Empty Poisson batches happen and are stepped on (pure noise).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from victims.augment import draw_seed
from victims.base import DEFAULT_INCLUSION_RATE, Observations, expected_members, observe, register_victim, seeded
from victims.data import Pool
from victims.nets import NetConfig, build_net, without_inplace
from victims.privacy import (
    accountant_field,
    epsilon_spent,
    noise_multiplier_for,
    per_example_gradients,
    poisson_batches,
    poisson_rate,
    require_accountant,
    require_privacy_target,
)
from victims.train import to_model_space
from victims.whitebox_canaries import CanaryProbe, open_probe, training_keep, whitebox_fields


@dataclass(frozen=True)
class DPSGDPrivacy:
    """The public privacy parameters of a `dpsgd` run: functions of (config, n_pool, q) only."""

    sample_rate: float  # B / (q * n_pool)
    steps: int  # epochs * round(q * n_pool / B)
    noise_multiplier: float  # sigma
    #: what the accountant is told, where it differs from what is trained (a bug, `victims.bugs`):
    #: None, the sample rate and steps above
    accounted_rate: float | None = None
    accounted_steps: int | None = None

    def accounted(self) -> tuple[float, int]:
        """(sample rate, steps) the accountant composes: the trained ones unless told otherwise."""
        rate = self.sample_rate if self.accounted_rate is None else self.accounted_rate
        return rate, self.steps if self.accounted_steps is None else self.accounted_steps

    def mechanism(self) -> dict:
        """What the accountant composes (`victims.base.Observations.mechanism`): its steps at
        (sigma, rate), the same figures its step hook is given: the claim a run's ε rests on."""
        rate, steps = self.accounted()
        return {"noise_multiplier": self.noise_multiplier, "sample_rate": rate, "steps": steps}


@register_victim("dpsgd")
@dataclass(frozen=True)
class DPSGDVictim:
    """The ConvNet trained by DP-SGD (Poisson sampling, per-example clipping, Gaussian noise)."""

    #: under white-box, record canaries are scored through their own gradients (victims.whitebox_canaries)
    white_box_record_canaries: ClassVar[bool] = True

    epsilon: float = field(default=1.0, metadata={"help": "target epsilon of the DP-SGD training"})
    delta: float = field(default=1e-5, metadata={"help": "target delta"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "per-example clipping norm C"})
    batch_size: int = field(default=128, metadata={"help": "expected Poisson batch size B"})
    epochs: int = field(
        default=30, metadata={"help": "passes over the expected members (round(q n_pool / B) steps each)"}
    )
    lr: float = field(
        default=0.25, metadata={"help": "SGD learning rate"}
    )  # digits, epsilon 1: 0.25 -> 68-69% test accuracy, 0.5 -> 64%, 1.0 -> 38-50%
    accountant: str = accountant_field()
    net: NetConfig = field(default_factory=NetConfig)

    def __post_init__(self) -> None:
        require_privacy_target(self)
        if not self.max_grad_norm > 0:
            raise ValueError(f"--max-grad-norm must be > 0, got {self.max_grad_norm}")
        if self.batch_size < 1 or self.epochs < 1:
            raise ValueError(f"--batch-size and --epochs must be >= 1, got {self.batch_size} and {self.epochs}")
        require_accountant(self)

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        poisson_rate(self.batch_size, pool, inclusion_rate)

    def privacy(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> DPSGDPrivacy:
        """Sample rate B/N, steps and sigma for N = q * n_pool, the plan's expected member count."""
        sample_rate = poisson_rate(self.batch_size, pool, inclusion_rate)
        steps = self.epochs * max(1, round(expected_members(pool, inclusion_rate) / self.batch_size))
        sigma = noise_multiplier_for(
            epsilon=self.epsilon, delta=self.delta, sample_rate=sample_rate, steps=steps, accountant=self.accountant
        )
        return DPSGDPrivacy(sample_rate=sample_rate, steps=steps, noise_multiplier=sigma)

    def release_dimension(self, pool: Pool) -> int:
        """Coordinates of each noisy gradient sum (the ConvNet's parameters): what white-box gradient
        canaries are placed in (`victims.whitebox_canaries`)."""
        net = build_net(self.net, image_shape=pool.image_shape, n_classes=pool.n_classes)
        return sum(p.numel() for p in net.parameters())

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        from opacus import GradSampleModule  # imported here: see victims.privacy
        from opacus.accountants import create_accountant

        plan = self.privacy(pool, inclusion_rate)
        idx = np.flatnonzero(training_keep(pool, keep))
        with seeded(seed, device) as generator:
            x = to_model_space(pool.x[idx], mean=pool.mean, std=pool.std, device=device)
            y = torch.as_tensor(pool.y[idx], device=device)
            net = build_net(self.net, image_shape=pool.image_shape, n_classes=pool.n_classes).to(device)
            record_gradients = _canary_gradients(net, pool, device)  # before opacus hooks the net
            # per-example gradients of the summed loss; DPOptimizer's "mean" divides the noisy sum by B
            model = GradSampleModule(without_inplace(net), loss_reduction="sum")
            probe = open_probe(
                pool,
                keep,
                run_seed=seed,
                sample_rate=plan.sample_rate,
                sensitivity=self.max_grad_norm,
                record_gradients=record_gradients,
            )
            optimizer = self.optimizer(model, plan, generator=generator, probe=probe)
            accountant = create_accountant(mechanism=self.accountant)
            accounted_rate, accounted_steps = plan.accounted()
            optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=accounted_rate))
            # the sampler's own generator lives on the CPU (opacus draws its coins there)
            sampler = torch.Generator().manual_seed(draw_seed(generator))
            model.train()
            with warnings.catch_warnings():
                # opacus warns that secure_mode is off (seeded noise is what makes runs reproducible), and
                # torch that the full backward hooks fire without input gradients (the images need none)
                warnings.simplefilter("ignore", UserWarning)
                for batch in poisson_batches(len(idx), plan.sample_rate, plan.steps, generator=sampler):
                    batch = batch.to(device)
                    optimizer.zero_grad(set_to_none=True)
                    F.cross_entropy(model(x[batch]), y[batch], reduction="sum").backward()
                    optimizer.step()
                epsilon = (
                    accountant.get_epsilon(delta=self.delta)
                    if accounted_steps == plan.steps
                    else epsilon_spent(  # told another step count than the hook has seen (a bug)
                        noise_multiplier=plan.noise_multiplier,
                        sample_rate=accounted_rate,
                        steps=accounted_steps,
                        delta=self.delta,
                        accountant=self.accountant,
                    )
                )
            model.remove_hooks()
            return observe(
                net,
                pool,
                device=device,
                formal_epsilon=float(epsilon),
                delta=self.delta,
                mechanism=plan.mechanism(),
                **whitebox_fields(probe, noise_multiplier=plan.noise_multiplier),
            )

    def optimizer(self, model, plan: DPSGDPrivacy, *, generator: torch.Generator, probe: CanaryProbe | None):
        """opacus's DPOptimizer over `model`'s parameters: clip to C, sum, add N(0, sigma^2 C^2),
        divide by B. With a white-box `probe`, its noise step is wrapped in the probe's two calls
        (`victims.privacy.gaussian_release` does the same for the other DP victims), and gradient
        canaries join the per-example gradients before clipping (`CanaryProbe.per_example_rows`)."""
        from opacus.optimizers import DPOptimizer

        optimizer = DPOptimizer(
            torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.0),
            noise_multiplier=plan.noise_multiplier,
            max_grad_norm=self.max_grad_norm,
            expected_batch_size=self.batch_size,
            loss_reduction="mean",
            generator=generator,
        )
        if probe is not None and probe.spec.gradient:
            clip_and_accumulate = optimizer.clip_and_accumulate

            def clip_with_canaries() -> None:  # gradient canaries enter before clipping (victims.whitebox_canaries)
                params = list(optimizer.params)
                rows = probe.per_example_rows([p.shape for p in params], device=params[0].device, dtype=params[0].dtype)
                if rows is not None:
                    for p, extra in zip(params, rows):
                        p.grad_sample = torch.cat([p.grad_sample, extra.to(p.grad_sample.dtype)])
                clip_and_accumulate()

            optimizer.clip_and_accumulate = clip_with_canaries
        if probe is not None:
            add_noise = optimizer.add_noise

            def probed_add_noise() -> None:
                params = [p for p in optimizer.params]
                for p, s in zip(params, probe.contribute([p.summed_grad for p in params])):
                    p.summed_grad = s
                add_noise()
                probe.observe([p.grad for p in params])

            optimizer.add_noise = probed_add_noise
        return optimizer


def _canary_gradients(net: torch.nn.Module, pool: Pool, device: str):
    """For record canaries under white-box: a callable giving each canary's cross-entropy gradient
    [n, dim] at the net's current parameters, through a copy of the net made before opacus hooks
    it (torch.func cannot run through opacus's hooks). None otherwise."""
    spec = pool.white_box
    if spec is None or spec.gradient:
        return None
    twin = copy.deepcopy(net)
    x = to_model_space(pool.x[spec.rows], mean=pool.mean, std=pool.std, device=device)
    y = torch.as_tensor(pool.y[spec.rows], device=device)

    def gradients() -> torch.Tensor:
        grads = per_example_gradients(twin, dict(net.named_parameters()), x, y)
        return torch.cat([g.reshape(len(x), -1) for g in grads.values()], dim=1)

    return gradients
