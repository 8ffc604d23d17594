"""`datalens`: DataLens (Wang et al., CCS 2021): teacher discriminators on disjoint partitions of
the members, a student generator, and noisy aggregation of compressed teacher gradients.

Partition: pool row i belongs to teacher perm[i] mod N, perm drawn from the run seed alone, so
adding or removing one record changes exactly one teacher's data (a duplicate canary's K rows:
group privacy). A teacher with no member votes the zero vector, within the same bound.

Privacy (formal, data-independent): each step releases only the noisy vote sum, the Gaussian
mechanism with std sigma * Delta at L2 sensitivity Delta (RDP alpha / (2 sigma^2), Mironov 2017);
`steps` steps compose without subsampling, converted by opacus (`victims.dp.privacy`, rate 1).
Delta per `--compression`, m = max(1, floor(k d)): topagg 2 sqrt(m) (m signs, all may flip);
d2pfed 2 sqrt(d') (every entry in [-1, 1], d' = d padded to a power of two); fetchsgd
2 sqrt(m) sqrt(rows ceil(d / w)) (the sketch's operator norm). Threshold, un-rotation, unsketch,
top-k and the student's update are post-processing. The paper's data-dependent analysis is not computed.

Departures from the paper's appendix and public code: k is a fraction of d; d2pfed returns the
level value itself on a grid over [-1, 1] (the paper's codes are not centred at 0) and rotates by
the randomised Hadamard transform, undone after the threshold; fetchsgd adds the noise to the
sketch buckets, not after top-k of the noiseless unsketch (which no Gaussian-mechanism bound
covers), then applies the Phase III threshold. Observations as `dpcgan` (`cgan`'s helpers)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from victims.base import DEFAULT_INCLUSION_RATE, expected_members, register_victim, require_at_least, seeded
from victims.pipelines.cgan import CGANVictim, observe_generator
from victims.pool import Pool
from victims.nets import ConditionalDiscriminator
from victims.dp.privacy import accounted_fields, gaussian_release, noise_multiplier_for, require_privacy_target
from victims.dp.whitebox_canaries import CanaryProbe, open_probe, training_keep, whitebox_fields
from victims.train import to_model_space

COMPRESSIONS = ("topagg", "d2pfed", "fetchsgd")
#: `check` refuses fewer expected members per teacher, q n_pool / N, than this
MIN_MEMBERS_PER_TEACHER = 10
_PARTITION_STREAM = 11  # SeedSequence stream of the partition under the run seed


def teacher_of(n_pool: int, teachers: int, seed: int) -> np.ndarray:
    """int64 [n_pool]: each pool row's teacher, perm[i] mod `teachers` for a permutation drawn from
    `seed` alone, never from the membership."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, _PARTITION_STREAM]))
    return (rng.permutation(n_pool) % teachers).astype(np.int64)


def top_count(top_k: float, d: int) -> int:
    """m = max(1, floor(k d)): the coordinates a TopkStoSignGrad vote keeps."""
    return max(1, int(math.floor(top_k * d + 1e-9)))


def _uniform(shape, generator: torch.Generator, device) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=generator.device).to(device)


def _normal(shape, generator: torch.Generator, device) -> torch.Tensor:
    return torch.randn(shape, generator=generator, device=generator.device).to(device)


def normalised(g: torch.Tensor, clip: float) -> torch.Tensor:
    """clip(g, -c, c) / ||clip(g, -c, c)||_inf per row, in [-1, 1] (a zero row stays zero)."""
    clipped = g.clamp(-clip, clip)
    scale = clipped.abs().amax(dim=-1, keepdim=True)
    return clipped / torch.where(scale > 0, scale, torch.ones_like(scale))


def topk_stochastic_sign(g: torch.Tensor, *, top_k: float, clip: float, generator: torch.Generator) -> torch.Tensor:
    """TopkStoSignGrad of every row of g [N, d]: the top m = `top_count` coordinates by |g_j| become +1
    with probability (1 + g^_j) / 2 and -1 otherwise, g^ = `normalised(g, clip)`; the rest 0."""
    m = top_count(top_k, g.shape[-1])
    u = _uniform(g.shape, generator, g.device)  # drawn for every coordinate: a data-independent shape
    signs = torch.where(u < (1 + normalised(g, clip)) / 2, 1.0, -1.0).to(g.dtype)
    keep = torch.zeros_like(g).scatter_(-1, g.abs().topk(m, dim=-1).indices, 1.0)
    return signs * keep


def next_power_of_two(d: int) -> int:
    return 1 << max(0, (d - 1).bit_length())


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """The orthonormal Walsh-Hadamard transform of the last dimension (a power of two); its own inverse."""
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"hadamard needs a power-of-two length, got {n}")
    y, h = x, 1
    while h < n:
        y = y.reshape(*x.shape[:-1], n // (2 * h), 2, h)
        y = torch.stack((y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]), dim=-2)
        h *= 2
    return y.reshape(x.shape) / math.sqrt(n)


def rotate(g: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """R g = H D g / sqrt(d') per row, g zero-padded to d' = len(signs)."""
    return hadamard(F.pad(g, (0, signs.shape[-1] - g.shape[-1])) * signs)


def unrotate(v: torch.Tensor, signs: torch.Tensor, d: int) -> torch.Tensor:
    """R^T v = D H v / sqrt(d'), cut to the first d coordinates."""
    return (signs * hadamard(v))[..., :d]


def k_level_quantise(x: torch.Tensor, *, levels: int, generator: torch.Generator) -> torch.Tensor:
    """Unbiased stochastic rounding of x in [-1, 1] to the `levels` levels -1 + 2r / (L - 1) (E = x)."""
    pos = (x.clamp(-1, 1) + 1) / 2 * (levels - 1)
    lower = pos.floor().clamp(max=levels - 2)
    up = (_uniform(x.shape, generator, x.device) < pos - lower).to(x.dtype)
    return -1 + 2 * (lower + up) / (levels - 1)


def sto_k_level(
    g: torch.Tensor, *, clip: float, levels: int, signs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """StoKlevelGrad of every row of g [N, d] (Algorithm 5): clip, rotate, normalise by the infinity
    norm, quantise; [N, d'] in the rotated coordinates."""
    return k_level_quantise(
        normalised(rotate(g.clamp(-clip, clip), signs), math.inf), levels=levels, generator=generator
    )


def vote_threshold(noisy: torch.Tensor, beta: float, teachers: int) -> torch.Tensor:
    """Phase III of Algorithm 6: +1 where the noisy vote is >= beta N, -1 where <= -beta N, else 0
    (a vote meeting both, 0 at beta = 0, is 0)."""
    bound = beta * teachers
    return (noisy >= bound).to(noisy.dtype) - (noisy <= -bound).to(noisy.dtype)


class CountSketch:
    """A Count Sketch of `rows` x `columns` buckets: row r sends coordinate j to bucket perm_r[j] mod
    columns with a random sign, so no bucket holds more than ceil(d / columns) coordinates."""

    def __init__(self, d: int, *, rows: int, columns: int, generator: torch.Generator, device) -> None:
        self.d, self.rows, self.columns = d, rows, columns
        perms = torch.stack([torch.randperm(d, generator=generator, device=generator.device) for _ in range(rows)])
        self.bucket = (perms % columns).to(device)  # [rows, d]
        self.sign = torch.where(_uniform((rows, d), generator, device) < 0.5, 1.0, -1.0)
        self.flat = (self.bucket + columns * torch.arange(rows, device=device)[:, None]).flatten()

    @property
    def max_load(self) -> int:
        return math.ceil(self.d / self.columns)

    def sketch(self, v: torch.Tensor) -> torch.Tensor:
        """[rows, columns]: the sketch of v [d]."""
        table = torch.zeros(self.rows * self.columns, dtype=v.dtype, device=v.device)
        return table.index_add_(0, self.flat, (self.sign * v).flatten()).view(self.rows, self.columns)

    def unsketch(self, table: torch.Tensor) -> torch.Tensor:
        """[d]: the median over rows of each coordinate's signed bucket."""
        return (self.sign * table.gather(1, self.bucket)).median(dim=0).values


@dataclass(frozen=True)
class Aggregation:
    """One variant of the noisy aggregation for vectors of length d; `sensitivity` is Delta."""

    compression: str
    top_k: float
    clip: float
    levels: int
    beta: float
    teachers: int
    d: int
    sketch: CountSketch | None = None

    @property
    def sensitivity(self) -> float:
        if self.compression == "d2pfed":
            return 2 * math.sqrt(next_power_of_two(self.d))
        delta = 2 * math.sqrt(top_count(self.top_k, self.d))
        if self.compression == "fetchsgd":
            delta *= math.sqrt(self.sketch.rows * self.sketch.max_load)
        return delta

    def compress(
        self, g: torch.Tensor, *, generator: torch.Generator, signs: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Each teacher's compressed vector (rows of g [N, d])."""
        if self.compression == "d2pfed":
            return sto_k_level(g, clip=self.clip, levels=self.levels, signs=signs, generator=generator)
        return topk_stochastic_sign(g, top_k=self.top_k, clip=self.clip, generator=generator)

    def noisy(
        self, votes: torch.Tensor, *, noise_std: float, generator: torch.Generator, probe: CanaryProbe | None = None
    ) -> torch.Tensor:
        """The Gaussian mechanism: the vote sum [N, D] (its sketch for fetchsgd) + N(0, noise_std^2) per
        coordinate (`victims.dp.privacy.gaussian_release`, with the white-box `probe`)."""
        total = votes.sum(0)
        if self.compression == "fetchsgd":
            total = self.sketch.sketch(total)
        return gaussian_release([total], std=noise_std, generator=generator, probe=probe)[0]

    @property
    def released_coordinates(self) -> int:
        """D: the coordinates of each noisy release (the sketch's, the padded rotation's, or d)."""
        if self.compression == "fetchsgd":
            return self.sketch.rows * self.sketch.columns
        return next_power_of_two(self.d) if self.compression == "d2pfed" else self.d

    def direction(self, noisy: torch.Tensor, *, signs: torch.Tensor | None = None) -> torch.Tensor:
        """Post-processing of the noisy statistic into the student's direction [d]."""
        if self.compression == "fetchsgd":
            estimate = self.sketch.unsketch(noisy)
            keep = torch.zeros_like(estimate).scatter_(
                0, estimate.abs().topk(top_count(self.top_k, self.d)).indices, 1.0
            )
            return vote_threshold(estimate * keep, self.beta, self.teachers)
        voted = vote_threshold(noisy, self.beta, self.teachers)
        return unrotate(voted, signs, self.d) if self.compression == "d2pfed" else voted

    def step(
        self,
        g: torch.Tensor,
        *,
        noise_std: float,
        generator: torch.Generator,
        active: torch.Tensor,
        probe: CanaryProbe | None = None,
    ) -> torch.Tensor:
        """g [N, d] -> the aggregated direction [d]; teachers not `active` (no member) vote 0."""
        signs = None
        if self.compression == "d2pfed":
            signs = torch.where(_uniform(next_power_of_two(self.d), generator, g.device) < 0.5, 1.0, -1.0)
        votes = self.compress(g, generator=generator, signs=signs) * active[:, None]
        return self.direction(self.noisy(votes, noise_std=noise_std, generator=generator, probe=probe), signs=signs)


class Teachers:
    """N conditional discriminators trained side by side (stacked parameters, vmap), each on its own partition."""

    def __init__(
        self, nets: list[nn.Module], parts: list[torch.Tensor], labels: list[torch.Tensor], *, lr: float
    ) -> None:
        params, self.buffers = stack_module_state(nets)
        self.params = {name: p.detach().requires_grad_() for name, p in params.items()}
        self.base = nets[0]
        self.opt = torch.optim.Adam(self.params.values(), lr=lr, betas=(0.5, 0.999))
        device = parts[0].device
        self.sizes = torch.tensor([len(p) for p in parts], device=device)
        self.active = (self.sizes > 0).to(torch.float32)
        longest = max(1, int(self.sizes.max()))
        self.x = torch.stack([F.pad(p, (0, 0, 0, 0, 0, 0, 0, longest - len(p))) for p in parts])  # [N, M, c, h, w]
        self.y = torch.stack([F.pad(y, (0, longest - len(y))) for y in labels])

    def _call(self, params, buffers, x, y):
        return functional_call(self.base, {**params, **buffers}, (x, y))

    def train_step(
        self, fake: torch.Tensor, fake_labels: torch.Tensor, *, batch: int, generator: torch.Generator
    ) -> None:
        """One Adam step of every teacher on `batch` of its members (with replacement) against the fakes;
        a teacher without members does not move."""
        n = len(self.sizes)
        u = _uniform((n, batch), generator, fake.device)
        idx = torch.minimum((u * self.sizes[:, None]).long(), (self.sizes[:, None] - 1).clamp(min=0))
        rows = torch.arange(n, device=fake.device)[:, None]
        real_out = vmap(self._call)(self.params, self.buffers, self.x[rows, idx], self.y[rows, idx])
        fake_out = vmap(self._call, in_dims=(0, 0, None, None))(self.params, self.buffers, fake, fake_labels)
        loss = (F.softplus(-real_out).mean(1) + F.softplus(fake_out).mean(1)) * self.active
        self.opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        self.opt.step()

    def image_gradients(self, pixels: torch.Tensor, labels: torch.Tensor, *, pool: Pool) -> torch.Tensor:
        """[N, d]: each teacher's gradient of sum_b softplus(-D_i(x_b, y_b)) w.r.t. the fakes (pixel scale)."""
        n = len(self.sizes)
        x = pixels.detach().expand(n, *pixels.shape).clone().requires_grad_()
        model = to_model_space(x.flatten(0, 1), mean=pool.mean, std=pool.std, device=x.device).view_as(x)
        params = {name: p.detach() for name, p in self.params.items()}
        out = vmap(self._call, in_dims=(0, 0, 0, None))(params, self.buffers, model, labels)
        (grads,) = torch.autograd.grad(F.softplus(-out).sum(), x)
        return grads.flatten(1)


@register_victim("datalens")
@dataclass(frozen=True)
class DataLensVictim(CGANVictim):
    """DataLens: teacher discriminators on disjoint partitions of the members, a student generator
    trained on their noisy aggregated gradient votes."""

    steps: int = field(default=300, metadata={"help": "student generator steps, one noisy aggregation each"})
    batch_size: int = field(default=16, metadata={"help": "fakes per student step (d = batch x pixels)"})
    lr: float = field(default=2e-3, metadata={"help": "Adam learning rate of the student and the teachers"})
    teachers: int = field(
        default=10, metadata={"help": "teacher discriminators N, each on its own partition of the members"}
    )
    teacher_steps: int = field(default=1, metadata={"help": "Adam steps of every teacher per student step"})
    teacher_batch: int = field(
        default=16, metadata={"help": "real examples per teacher step, from the teacher's partition"}
    )
    compression: str = field(
        default="topagg", metadata={"help": "gradient compression and aggregation", "choices": COMPRESSIONS}
    )
    vote_fraction: float = field(
        default=0.2,
        metadata={"help": "top-k fraction k in (0, 1] of the d coordinates a teacher votes on (topagg, fetchsgd)"},
    )
    clip: float = field(
        default=1e-2, metadata={"help": "per-coordinate clipping constant c of the teachers' gradients"}
    )
    levels: int = field(default=2, metadata={"help": "d2pfed: quantisation levels"})
    sketch_rows: int = field(default=5, metadata={"help": "fetchsgd: Count Sketch rows"})
    sketch_width: float = field(default=0.5, metadata={"help": "fetchsgd: Count Sketch columns as a fraction of d"})
    beta: float = field(
        default=0.1, metadata={"help": "voting threshold: keep coordinates whose |noisy vote| >= beta x teachers"}
    )
    epsilon: float = field(default=1.0, metadata={"help": "target epsilon (DP victims)"})
    delta: float = field(default=1e-5, metadata={"help": "target delta (DP victims)"})
    noise: bool = field(
        default=True,
        metadata={
            "help": "add the calibrated noise; --no-noise is the non-private version (sigma = 0, no epsilon recorded)"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require_at_least(self, {"teachers": 1, "teacher_steps": 1, "teacher_batch": 1, "levels": 2, "sketch_rows": 1})
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"--compression must be one of {COMPRESSIONS}, got {self.compression!r}")
        if not 0 < self.vote_fraction <= 1:
            raise ValueError(f"--vote-fraction must be in (0, 1], got {self.vote_fraction}")
        if not 0 < self.sketch_width <= 1:
            raise ValueError(f"--sketch-width must be in (0, 1], got {self.sketch_width}")
        if not 0 <= self.beta <= 1:
            raise ValueError(f"--beta must be in [0, 1], got {self.beta}")
        if not (self.clip > 0 and math.isfinite(self.clip)):
            raise ValueError(f"--clip must be > 0, got {self.clip}")
        require_privacy_target(self)

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        super().check(pool, inclusion_rate=inclusion_rate)
        members = expected_members(pool, inclusion_rate)
        if members / self.teachers < MIN_MEMBERS_PER_TEACHER:
            raise ValueError(
                f"--teachers {self.teachers} leaves {members / self.teachers:g} expected members per teacher "
                f"({members:g} members expected at inclusion rate {inclusion_rate:g} of {pool.n_pool}); "
                f"each teacher needs >= {MIN_MEMBERS_PER_TEACHER}"
            )

    def aggregation(self, pool: Pool, *, generator: torch.Generator, device: str = "cpu") -> Aggregation:
        d = self.batch_size * math.prod(pool.image_shape)
        sketch = None
        if self.compression == "fetchsgd":
            sketch = CountSketch(
                d,
                rows=self.sketch_rows,
                columns=max(1, math.ceil(self.sketch_width * d)),
                generator=generator,
                device=device,
            )
        return Aggregation(
            compression=self.compression,
            top_k=self.vote_fraction,
            clip=self.clip,
            levels=self.levels,
            beta=self.beta,
            teachers=self.teachers,
            d=d,
            sketch=sketch,
        )

    def noise_multiplier(self) -> float:
        """sigma (noise std sigma * Delta) with which `steps` Gaussian steps, no subsampling, spend the
        target (epsilon, delta); 0 with --no-noise."""
        if not self.noise:
            return 0.0
        return noise_multiplier_for(epsilon=self.epsilon, delta=self.delta, sample_rate=1.0, steps=self.steps)

    def privacy_spent(self, pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> dict:
        if not self.noise:
            return {}
        return accounted_fields(
            noise_multiplier=self.noise_multiplier(), sample_rate=1.0, steps=self.steps, delta=self.delta
        )

    def teachers_for(self, pool: Pool, keep: np.ndarray, seed: int, *, device: str) -> Teachers:
        """Fresh teachers (parameters from torch's global RNG), each holding its members in model space."""
        owner = teacher_of(pool.n_pool, self.teachers, seed)
        keep = np.asarray(keep, dtype=bool)
        parts, labels = [], []
        for i in range(self.teachers):
            rows = np.flatnonzero(keep & (owner == i))
            parts.append(to_model_space(pool.x[rows], mean=pool.mean, std=pool.std, device=device))
            labels.append(torch.as_tensor(pool.y[rows], device=device))
        nets = [
            ConditionalDiscriminator(n_classes=pool.n_classes, image_shape=pool.image_shape, width=self.disc_width).to(
                device
            )
            for _ in range(self.teachers)
        ]
        return Teachers(nets, parts, labels, lr=self.lr)

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ):
        probe = open_probe(pool, keep, run_seed=seed, sample_rate=1.0, sensitivity=self.sensitivity(pool))
        with seeded(seed, device) as generator:
            gen, _ = self.networks(pool)
            gen = gen.to(device)
            teachers = self.teachers_for(pool, training_keep(pool, keep), seed, device=device)
            self.train_student(gen, teachers, pool=pool, generator=generator, device=device, probe=probe)
            return observe_generator(
                self,
                gen,
                pool,
                generator=generator,
                device=device,
                **self.privacy_spent(pool, inclusion_rate),
                **whitebox_fields(probe, noise_multiplier=self.noise_multiplier()),
            )

    def sensitivity(self, pool: Pool) -> float:
        """Delta of the vote sum (no random draw: the sketch's shape alone)."""
        return self.aggregation(pool, generator=torch.Generator().manual_seed(0)).sensitivity

    def release_dimension(self, pool: Pool) -> int:
        """Coordinates of each noisy vote sum: D."""
        return self.aggregation(pool, generator=torch.Generator().manual_seed(0)).released_coordinates

    def train_student(
        self,
        gen: nn.Module,
        teachers: Teachers,
        *,
        pool: Pool,
        generator: torch.Generator,
        device: str = "cpu",
        probe: CanaryProbe | None = None,
    ) -> None:
        aggregation = self.aggregation(pool, generator=generator, device=device)
        noise_std = self.noise_multiplier() * aggregation.sensitivity
        opt = torch.optim.Adam(gen.parameters(), lr=self.lr, betas=(0.5, 0.999))
        for _ in range(self.steps):
            labels = torch.randint(pool.n_classes, (self.batch_size,), generator=generator, device=generator.device).to(
                device
            )
            pixels = gen(self.latents(self.batch_size, generator=generator, device=device), labels)
            fake = to_model_space(pixels.detach(), mean=pool.mean, std=pool.std, device=device)
            for _ in range(self.teacher_steps):
                teachers.train_step(fake, labels, batch=self.teacher_batch, generator=generator)
            g = teachers.image_gradients(pixels, labels, pool=pool)
            direction = aggregation.step(
                g, noise_std=noise_std, generator=generator, active=teachers.active, probe=probe
            )
            loss = (pixels.flatten() * direction).sum() / self.batch_size
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
