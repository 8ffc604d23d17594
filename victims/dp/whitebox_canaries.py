"""White-box canaries: what an auditor who sees every noisy release of a DP victim's Gaussian
mechanism observes of each canary (`--threat-model white-box`).

Every DP victim releases at each step a noisy SUM over a Poisson sample at a public rate: the
members' contributions (L2 norm at most Delta) plus N(0, sigma^2 Delta^2) per coordinate. The
accountant's (epsilon, delta) covers this adaptive composition of releases, so it holds for the
auditor who sees every sum (Nasr et al., USENIX Security 2023; Steinke, Nasr and Jagielski 2023):
a canary of norm at most Delta with an independent fair coin is protected at (epsilon, delta),
and the one-run bound applies to m such canaries. `CanaryProbe` is the one hook; with no probe
the mechanism is unchanged bit for bit.

* **gradient** canaries: canary j adds exactly Delta s_j e_{k_j} (a Dirac canary, Steinke et al.
  section 6) when IN and sampled; the auditor observes o_{t,j} = s_j R_t[k_j] / Delta. They test
  the noise, the rate and the accounting, not clipping, except in `dpsgd`, which gets them as
  per-example gradients of norm `PRECLIP_OVERSHOOT` x Delta before opacus clips them.
* **record** canaries (`mislabeled`, `outlier`; `dpsgd` only): real records; the auditor observes
  <R_t, g_{t,j} / |g_{t,j}|> / Delta, at most 1 plus noise when sampled: they test clipping too.

A run stores `whitebox` float32 [steps, canaries] and the public `noise_multiplier` and
`sample_rate` (`Observations.whitebox_mechanism`), never a parameter vector.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from victims.pool import Pool

THREAT_MODELS = ("black-box", "white-box")
GRADIENT = "gradient"  # the canary kind that exists only under the white-box threat model
#: SeedSequence streams: the canaries' coordinates and signs (under the canary seed), and each run's
#: Poisson draws of its gradient canaries (under the run's seed); victims.canaries uses stream 3
DIRECTION_STREAM = 4
SAMPLING_STREAM = 5
#: a mechanism that clips per-example gradients itself (`dpsgd`, through opacus) gets its gradient
#: canaries as per-example gradients of this many times Delta, before it clips: a correct one clips
#: them to Delta, one that skips clipping lets them through whole
PRECLIP_OVERSHOOT = 10.0


@dataclass(frozen=True)
class WhiteBoxSpec:
    """The canaries a white-box run observes: pool rows first_row .. first_row + n - 1, one each."""

    first_row: int
    n: int
    kind: str  # GRADIENT, or a record canary kind
    seed: int  # the canary seed: the coordinates and signs of gradient canaries

    @property
    def gradient(self) -> bool:
        return self.kind == GRADIENT

    @property
    def rows(self) -> slice:
        return slice(self.first_row, self.first_row + self.n)


def training_keep(pool: Pool, keep: np.ndarray) -> np.ndarray:
    """The members a victim trains on: `keep` less the rows of gradient canaries, which are not
    records of data (the probe adds their contributions). `keep` itself otherwise."""
    spec = pool.white_box
    if spec is None or not spec.gradient:
        return keep
    keep = np.array(keep, dtype=bool, copy=True)
    keep[spec.rows] = False
    return keep


def check_dimension(spec: WhiteBoxSpec | None, dimension: int, *, victim: str) -> None:
    """ValueError (one line) when gradient canaries outnumber the release's coordinates: each needs
    a coordinate of its own."""
    if spec is not None and spec.gradient and spec.n > dimension:
        raise ValueError(
            f"--canaries {spec.n}: {victim}'s release has {dimension} coordinates, and each gradient "
            f"canary needs its own (at most {dimension})"
        )


def directions(spec: WhiteBoxSpec, dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """(coordinates int64 [n], distinct; signs float32 [n] in {-1, +1}) of the gradient canaries,
    from the canary seed alone: the same for every run."""
    check_dimension(spec, dimension, victim="the victim")
    rng = np.random.default_rng(np.random.SeedSequence([spec.seed, DIRECTION_STREAM]))
    coordinates = rng.choice(dimension, size=spec.n, replace=False).astype(np.int64)
    signs = np.where(rng.random(spec.n) < 0.5, -1.0, 1.0).astype(np.float32)
    return coordinates, signs


class CanaryProbe:
    """One run's white-box canaries: adds the gradient canaries' contributions to each clean sum
    (`contribute`) and records every canary's projection of each noisy sum (`observe`).

    `record_gradients` (record canaries only) returns the canaries' gradients [n, dim] at the
    parameters of the step being released, flattened in the order of the sums."""

    def __init__(
        self,
        spec: WhiteBoxSpec,
        keep: np.ndarray,
        *,
        run_seed: int,
        sample_rate: float,
        sensitivity: float,
        record_gradients: Callable[[], torch.Tensor] | None = None,
    ) -> None:
        if not spec.gradient and record_gradients is None:
            raise ValueError(f"record canaries ({spec.kind}) need the victim's per-example gradients")
        self.spec = spec
        self.member = np.asarray(keep, dtype=bool)[spec.rows].copy()  # each canary's coin in this run
        self.sample_rate = float(sample_rate)
        self.sensitivity = float(sensitivity)
        self.record_gradients = record_gradients
        self.sampling = np.random.default_rng(np.random.SeedSequence([int(run_seed), SAMPLING_STREAM]))
        self._coordinates: torch.Tensor | None = None
        self._signs: torch.Tensor | None = None
        self._steps: list[np.ndarray] = []
        self._sampled: np.ndarray | None = None  # this step's IN and Poisson-sampled gradient canaries
        self._before_clipping = False  # whether this step's canaries entered as per-example gradients

    def _directions(self, dimension: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._coordinates is None:
            coordinates, signs = directions(self.spec, dimension)
            self._coordinates = torch.as_tensor(coordinates, device=device)
            self._signs = torch.as_tensor(signs, device=device)
        return self._coordinates, self._signs

    def _draw(self) -> np.ndarray:
        """This step's gradient canaries that are IN and Poisson-sampled (one draw per step)."""
        if self._sampled is None:
            self._sampled = self.member & (self.sampling.random(self.spec.n) < self.sample_rate)
        return self._sampled

    def per_example_rows(self, shapes: list[torch.Size], *, device, dtype) -> list[torch.Tensor] | None:
        """For a mechanism that clips per-example gradients itself: this step's sampled gradient
        canaries as per-example gradients, [k, *shape] per parameter, canary j's of norm
        `PRECLIP_OVERSHOOT` x Delta along s_j e_{k_j}; None when none is sampled. `contribute`
        then adds nothing this step (the mechanism's clipping and sum carry them)."""
        sampled = self._draw()
        self._before_clipping = True
        chosen = np.flatnonzero(sampled)
        if not len(chosen):
            return None
        sizes = [int(np.prod(shape)) for shape in shapes]
        coordinates, signs = self._directions(sum(sizes), device)
        index = torch.as_tensor(chosen, device=device)
        rows = torch.zeros(len(chosen), sum(sizes), device=device, dtype=dtype)
        rows[torch.arange(len(chosen), device=device), coordinates[index]] = (
            PRECLIP_OVERSHOOT * self.sensitivity * signs[index].to(dtype)
        )
        return [part.reshape(len(chosen), *shape) for part, shape in zip(rows.split(sizes, dim=1), shapes)]

    def contribute(self, sums: list[torch.Tensor]) -> list[torch.Tensor]:
        """The clean sums with Delta s_j e_{k_j} added for every gradient canary that is IN and
        Poisson-sampled this step (record canaries are already in the victim's batch, and so are
        gradient canaries given as `per_example_rows`)."""
        if not self.spec.gradient:
            return sums
        sampled = self._draw()
        if self._before_clipping:
            return sums
        flat = torch.cat([s.reshape(-1) for s in sums])
        coordinates, signs = self._directions(flat.numel(), flat.device)
        if sampled.any():
            chosen = torch.as_tensor(np.flatnonzero(sampled), device=flat.device)
            flat = flat.index_add(0, coordinates[chosen], self.sensitivity * signs[chosen].to(flat.dtype))
        return [part.view_as(s) for part, s in zip(flat.split([s.numel() for s in sums]), sums)]

    def observe(self, noisy: list[torch.Tensor]) -> None:
        """Record o_{t,j}, every canary's projection of this step's noisy sum over Delta."""
        with torch.no_grad():
            flat = torch.cat([s.detach().reshape(-1) for s in noisy])
            if self.spec.gradient:
                coordinates, signs = self._directions(flat.numel(), flat.device)
                values = flat[coordinates] * signs.to(flat.dtype)
            else:
                g = self.record_gradients().reshape(self.spec.n, -1).to(flat.dtype)
                unit = g / g.norm(dim=1, keepdim=True).clamp_min(1e-12)
                values = unit @ flat
        self._steps.append((values / self.sensitivity).float().cpu().numpy())
        self._sampled, self._before_clipping = None, False

    def observations(self) -> np.ndarray:
        """float32 [steps, n]: o_{t,j} of every step observed so far."""
        if not self._steps:
            return np.zeros((0, self.spec.n), dtype=np.float32)
        return np.stack(self._steps).astype(np.float32)


def open_probe(
    pool: Pool,
    keep: np.ndarray,
    *,
    run_seed: int,
    sample_rate: float,
    sensitivity: float,
    record_gradients: Callable[[], torch.Tensor] | None = None,
) -> CanaryProbe | None:
    """The run's probe when `pool` carries white-box canaries, else None (a black-box run)."""
    if pool.white_box is None:
        return None
    return CanaryProbe(
        pool.white_box,
        keep,
        run_seed=run_seed,
        sample_rate=sample_rate,
        sensitivity=sensitivity,
        record_gradients=record_gradients,
    )


def whitebox_fields(probe: CanaryProbe | None, *, noise_multiplier: float) -> dict:
    """The Observations fields of a white-box run ({} for a black-box one): the observations and
    the mechanism's public sigma and rate, which the likelihood-ratio attack is derived under."""
    if probe is None:
        return {}
    return {
        "whitebox": probe.observations(),
        "whitebox_mechanism": {"noise_multiplier": float(noise_multiplier), "sample_rate": probe.sample_rate},
    }


def supports_white_box(victim) -> bool:
    """Whether `victim` has a Gaussian mechanism the white-box auditor can observe (it says how
    many coordinates each release has: `release_dimension(pool)`)."""
    return callable(getattr(victim, "release_dimension", None))


def with_white_box(pool: Pool, victim, canaries, *, threat_model: str, n_natural: int) -> Pool:
    """`pool` (canary rows included) carrying the white-box canaries' spec when `threat_model` is
    white-box; `pool` itself for black-box. ValueError (one line) for what cannot be audited: gradient
    canaries under black-box; white-box without canaries, with duplicates, on a victim with no
    Gaussian mechanism, with record canaries on a victim that cannot score them, or with more
    gradient canaries than the release has coordinates."""
    if threat_model not in THREAT_MODELS:
        raise ValueError(f"--threat-model {threat_model!r} is not one of {', '.join(THREAT_MODELS)}")
    kind = canaries.kind if canaries else None
    if threat_model == "black-box":
        if kind == GRADIENT:
            raise ValueError(
                "--canary-kind gradient needs --threat-model white-box (a black-box auditor cannot see "
                "the noisy sums they are added to)"
            )
        return pool
    name = getattr(victim, "name", type(victim).__name__)
    if not supports_white_box(victim):
        raise ValueError(
            f"--threat-model white-box: victim {name} has no Gaussian mechanism to observe "
            "(white-box audits: dpsgd, psg, dpcgan, dpkernel, datalens, marginals, command)"
        )
    if canaries is None:
        raise ValueError("--threat-model white-box needs --canaries N (the white-box attacks score canaries only)")
    if kind == "duplicate":
        raise ValueError("--threat-model white-box takes --canary-kind gradient, mislabeled or outlier, not duplicate")
    if kind != GRADIENT and not getattr(victim, "white_box_record_canaries", False):
        raise ValueError(
            f"--canary-kind {kind}: victim {name} observes gradient canaries only under white-box "
            "(record canaries: dpsgd, marginals, command)"
        )
    spec = WhiteBoxSpec(first_row=n_natural, n=canaries.n, kind=kind, seed=canaries.seed)
    check_dimension(spec, victim.release_dimension(pool), victim=name)
    return dataclasses.replace(pool, white_box=spec)
