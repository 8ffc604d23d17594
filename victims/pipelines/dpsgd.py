"""`dpsgd`: the ConvNet trained on the members with opacus DP-SGD at a target (epsilon, delta).

Built from opacus's parts rather than `PrivacyEngine.make_private`, whose sample rate and divisor
would come from the run's actual member count. Here all the accountant sees is public, from
N = q * n_pool: Poisson batches at rate B / N, round(N / B) steps per epoch, per-example gradients
clipped to C, summed, + N(0, sigma^2 C^2), divided by B (opacus's `DPOptimizer`); sigma from the
accountant, and the recorded epsilon that of opacus's accountant for the steps taken.

Worst-case black-box design (Annamalai & De Cristofaro, NeurIPS 2024): `--sampling full-batch`
(every member in every step, the sum divided by N: T compositions of the Gaussian mechanism,
G_{sqrt(T)/sigma}, tested exactly by `audit.stats.mechanism`) and `--start pretrained` (every run
from ONE network fitted without privacy on the pool's disjoint test split; DP-SGD's analysis holds
for any start independent of the members). `test_accuracy` is then on the data the start saw."""

from __future__ import annotations

import copy
import warnings
import dataclasses
import hashlib
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from shadow_runs.atomic_files import atomic_write, write_json
from victims.condensation.augment import draw_seed
from victims.base import DEFAULT_INCLUSION_RATE, Observations, expected_members, observe, register_victim, seeded
from victims.pool import Pool
from victims.nets import NetConfig, build_net, without_inplace
from victims.dp.privacy import (
    accountant_field,
    epsilon_spent,
    gaussian_steps,
    history_epsilon,
    noise_multiplier_for,
    per_example_gradients,
    poisson_batches,
    poisson_rate,
    require_accountant,
    require_privacy_target,
)
from victims.train import to_model_space
from victims.dp.whitebox_canaries import CanaryProbe, open_probe, training_keep, whitebox_fields


SAMPLINGS = ("poisson", "full-batch")
STARTS = ("random", "pretrained")
#: seed of the pretrained start: one public network for every run of every store
PRETRAIN_SEED = 0
PRETRAIN_LR = 0.01  # Adam, full batch over the public split


@dataclass(frozen=True)
class DPSGDPrivacy:
    """The public privacy parameters of a `dpsgd` run: functions of (config, n_pool, q) only."""

    sample_rate: float  # B / (q * n_pool); 1 for full-batch
    steps: int  # epochs * round(q * n_pool / B); epochs for full-batch
    noise_multiplier: float  # sigma
    batch_divisor: float  # what the noisy sum is divided by: B, or q * n_pool for full-batch
    #: what the accountant is told, where it differs from what is trained (a bug, `victims.bugs`):
    #: None, the sample rate and steps above
    accounted_rate: float | None = None
    accounted_steps: int | None = None

    def accounted(self) -> tuple[float, int]:
        """(sample rate, steps) the accountant composes: the trained ones unless told otherwise."""
        rate = self.sample_rate if self.accounted_rate is None else self.accounted_rate
        return rate, self.steps if self.accounted_steps is None else self.accounted_steps

    def mechanism(self) -> dict:
        """What the accountant composes (`Observations.mechanism`): its steps at (sigma, rate), the claim
        a run's epsilon rests on."""
        rate, steps = self.accounted()
        return gaussian_steps(noise_multiplier=self.noise_multiplier, sample_rate=rate, steps=steps)


@register_victim("dpsgd")
@dataclass(frozen=True)
class DPSGDVictim:
    """The ConvNet trained by DP-SGD (Poisson sampling, per-example clipping, Gaussian noise)."""

    #: under white-box, record canaries are scored through their own gradients (victims.dp.whitebox_canaries)
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
    sampling: str = field(
        default="poisson",
        metadata={
            "help": "poisson: each member in each step with probability B/N; full-batch: every member in "
            "every step (q = 1, --epochs steps, --batch-size unused)",
            "choices": SAMPLINGS,
            "omit_at_default": True,
        },
    )
    start: str = field(
        default="random",
        metadata={
            "help": "initial parameters: random (per run), or pretrained: one network fitted without privacy "
            "on the pool's public test split (the worst-case start of black-box audits)",
            "choices": STARTS,
            "omit_at_default": True,
        },
    )
    pretrain_steps: int = field(
        default=300,
        metadata={"help": "full-batch Adam steps of --start pretrained on the public split", "omit_at_default": True},
    )

    def __post_init__(self) -> None:
        require_privacy_target(self)
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"--sampling must be one of {SAMPLINGS}, got {self.sampling!r}")
        if self.start not in STARTS:
            raise ValueError(f"--start must be one of {STARTS}, got {self.start!r}")
        if self.pretrain_steps < 1:
            raise ValueError(f"--pretrain-steps must be >= 1, got {self.pretrain_steps}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"--max-grad-norm must be > 0, got {self.max_grad_norm}")
        if self.batch_size < 1 or self.epochs < 1:
            raise ValueError(f"--batch-size and --epochs must be >= 1, got {self.batch_size} and {self.epochs}")
        require_accountant(self)

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        if self.sampling == "poisson":
            poisson_rate(self.batch_size, pool, inclusion_rate)

    def prepare(self, pool: Pool, directory: Path, *, quiet: bool = False) -> DPSGDVictim:
        """The victim the executor trains, prepared once per store: with `--start pretrained`, a copy
        carrying the start (`cached_start`), so no worker fits it again; itself otherwise."""
        if self.start != "pretrained":
            return self
        state = cached_start(self.net, pool, self.pretrain_steps, Path(directory) / START_CACHE, progress=not quiet)
        prepared = copy.copy(self)
        object.__setattr__(prepared, "_start_state", state)  # not a field: the configuration is unchanged
        return prepared

    def _start(self, pool: Pool) -> dict[str, torch.Tensor]:
        """A copy of the pretrained start: the one `prepare` carried, else fitted in this process."""
        carried = self.__dict__.get("_start_state")
        if carried is None:
            return pretrained_start(self.net, pool, self.pretrain_steps)
        return {name: value.clone() for name, value in carried.items()}

    def privacy(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> DPSGDPrivacy:
        """Sample rate B/N, steps and sigma for the public N = q * n_pool (full-batch: rate 1, `epochs`
        steps, the sum divided by N)."""
        members = expected_members(pool, inclusion_rate)
        if self.sampling == "full-batch":
            sample_rate, steps, divisor = 1.0, self.epochs, members
        else:
            sample_rate = poisson_rate(self.batch_size, pool, inclusion_rate)
            steps = self.epochs * max(1, round(members / self.batch_size))
            divisor = self.batch_size
        sigma = noise_multiplier_for(
            epsilon=self.epsilon, delta=self.delta, sample_rate=sample_rate, steps=steps, accountant=self.accountant
        )
        return DPSGDPrivacy(sample_rate=sample_rate, steps=steps, noise_multiplier=sigma, batch_divisor=divisor)

    def release_dimension(self, pool: Pool) -> int:
        """Coordinates of each noisy gradient sum (the ConvNet's parameters), for white-box gradient canaries."""
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
        from opacus import GradSampleModule  # imported here: see victims.dp.privacy
        from opacus.accountants import create_accountant

        plan = self.privacy(pool, inclusion_rate)
        idx = np.flatnonzero(training_keep(pool, keep))
        with seeded(seed, device) as generator:
            x = to_model_space(pool.x[idx], mean=pool.mean, std=pool.std, device=device)
            y = torch.as_tensor(pool.y[idx], device=device)
            net = build_net(self.net, image_shape=pool.image_shape, n_classes=pool.n_classes).to(device)
            if self.start == "pretrained":
                net.load_state_dict(self._start(pool))
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
                for batch in self.batches(len(idx), plan, generator=sampler):
                    batch = batch.to(device)
                    optimizer.zero_grad(set_to_none=True)
                    F.cross_entropy(model(x[batch]), y[batch], reduction="sum").backward()
                    optimizer.step()
                epsilon = (
                    history_epsilon(tuple(accountant.history), delta=self.delta, accountant=self.accountant)
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

    def batches(self, n: int, plan: DPSGDPrivacy, *, generator: torch.Generator):
        """The steps' batches of indices into the n members: Poisson at the plan's rate, or all n (full-batch)."""
        if self.sampling == "full-batch":
            every = torch.arange(n)
            return (every for _ in range(plan.steps))
        return poisson_batches(n, plan.sample_rate, plan.steps, generator=generator)

    def optimizer(self, model, plan: DPSGDPrivacy, *, generator: torch.Generator, probe: CanaryProbe | None):
        """opacus's DPOptimizer over `model`'s parameters: clip to C, sum, add N(0, sigma^2 C^2), divide by
        B (N for full-batch). A white-box `probe` wraps its noise step as `gaussian_release` does, and
        gradient canaries join the per-example gradients before clipping."""
        from opacus.optimizers import DPOptimizer

        optimizer = DPOptimizer(
            torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.0),
            noise_multiplier=plan.noise_multiplier,
            max_grad_norm=self.max_grad_norm,
            expected_batch_size=plan.batch_divisor,
            loss_reduction="mean",
            generator=generator,
        )
        if probe is not None and probe.spec.gradient:
            clip_and_accumulate = optimizer.clip_and_accumulate

            def clip_with_canaries() -> None:  # gradient canaries enter before clipping (victims.dp.whitebox_canaries)
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


_FITTED_STARTS: dict[tuple, dict[str, torch.Tensor]] = {}  # (net, public split, steps) -> state
#: where a store keeps its fitted start (`DPSGDVictim.prepare`), inside the store's directory
START_CACHE = "cache"


def _fitted_start(net_config: NetConfig, pool: Pool, steps: int) -> dict[str, torch.Tensor]:
    key = (net_config, pool.fingerprint, pool.mean, pool.std, steps)
    if key not in _FITTED_STARTS:
        _FITTED_STARTS.clear()  # one start per worker at a time: a store's runs share it
        _FITTED_STARTS[key] = _fit_start(net_config, pool, steps)
    return _FITTED_STARTS[key]


def _fit_start(net_config: NetConfig, pool: Pool, steps: int, *, progress: bool = False) -> dict[str, torch.Tensor]:
    from tqdm import tqdm

    x = to_model_space(pool.x_test, mean=pool.mean, std=pool.std)
    y = torch.tensor(pool.y_test)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(PRETRAIN_SEED)
        net = build_net(net_config, image_shape=pool.image_shape, n_classes=pool.n_classes)
        optimizer = torch.optim.Adam(net.parameters(), lr=PRETRAIN_LR)
        for _ in tqdm(range(steps), desc="pretrained start", unit="step", disable=not progress, file=sys.stderr):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            optimizer.step()
    return {name: value.detach().clone() for name, value in net.state_dict().items()}


def public_split_fingerprint(pool: Pool) -> str:
    """sha256 of the pool's test split (images and labels): all of the data a pretrained start sees."""
    digest = hashlib.sha256(np.ascontiguousarray(pool.x_test, dtype=np.float32).tobytes())
    digest.update(np.ascontiguousarray(pool.y_test, dtype=np.int64).tobytes())
    return digest.hexdigest()


def cached_start(
    net_config: NetConfig, pool: Pool, steps: int, directory: Path, *, progress: bool = False
) -> dict[str, torch.Tensor]:
    """`pretrained_start`, fitted once per runs directory: `directory` keeps `pretrained_start-<key>.pt`,
    the key a hash of all the start depends on (never the members, canaries or master seed), beside
    its sha256; a matching sibling store's file is copied in. A file of the store's own whose sha256
    is not the recorded one is refused (ValueError naming it). `progress`: a bar while it fits."""
    identity = json.dumps(
        [
            dataclasses.asdict(net_config),
            public_split_fingerprint(pool),
            pool.mean,
            pool.std,
            steps,
            PRETRAIN_SEED,
            PRETRAIN_LR,
        ],
        sort_keys=True,
    )
    name = f"pretrained_start-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
    path, record = directory / f"{name}.pt", directory / f"{name}.json"
    if path.exists() and record.exists():
        data = _checked_start(path, record)
        if data is None:
            recorded = json.loads(record.read_text())["sha256"]
            raise ValueError(
                f"{path}: sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:12]} is not the "
                f"{recorded[:12]} recorded when the start was fitted; move it away to fit the start again"
            )
        return torch.load(io.BytesIO(data), weights_only=True)
    data = next(
        (
            found
            for sibling in sorted(directory.parent.parent.glob(f"*/{directory.name}/{name}.pt"))
            if (found := _checked_start(sibling, sibling.with_suffix(".json"))) is not None
        ),
        None,
    )
    if data is None:
        buffer = io.BytesIO()
        torch.save(_fit_start(net_config, pool, steps, progress=progress), buffer)
        data = buffer.getvalue()
    atomic_write(path, lambda f: f.write(data))  # the store's rule: a file that exists is complete
    write_json(record, {"sha256": hashlib.sha256(data).hexdigest(), "identity": identity})  # after the start
    return torch.load(io.BytesIO(data), weights_only=True)


def _checked_start(path: Path, record: Path) -> bytes | None:
    """The bytes of a cached start whose sha256 is the one its record holds; None otherwise."""
    if not (path.exists() and record.exists()):
        return None
    data = path.read_bytes()
    return data if hashlib.sha256(data).hexdigest() == json.loads(record.read_text())["sha256"] else None


def pretrained_start(net_config: NetConfig, pool: Pool, steps: int) -> dict[str, torch.Tensor]:
    """The pretrained start's state: `net_config`'s network seeded with PRETRAIN_SEED, fitted by `steps`
    full-batch Adam steps to the pool's test split only, on the CPU. Once per process and pool."""
    return {name: value.clone() for name, value in _fitted_start(net_config, pool, steps).items()}


def _canary_gradients(net: torch.nn.Module, pool: Pool, device: str):
    """For record canaries under white-box: a callable giving each canary's cross-entropy gradient
    [n, dim] at the net's current parameters (through a copy made before opacus hooks it); else None."""
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
