"""`marginals`: the suite's own exact DP baseline for tables: the Gaussian mechanism on public 1-way
and (label, feature) marginals over the schema's domain, and `rows` records sampled from them.

Privacy (exact): under add/remove each marginal changes in one cell by 1, so each noisy marginal is
(1 / sigma)-GDP (Dong, Roth and Su 2022, Theorem 2.7) and the k compose to exactly
(sqrt(k) / sigma)-GDP (their Corollary 3.3), recorded as k non-subsampled Gaussian steps; sigma is
calibrated by that curve's exact duality (their Corollary 2.13). Sampling is post-processing.
White-box: record canaries must lie in distinct cells (`check_canary_cells`); gradient canaries
get one cell of their own per marginal, counted 1 when IN and noised alike, never sampled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from victims.base import DEFAULT_INCLUSION_RATE, register_victim
from victims.dp.privacy import (
    MOST_GDP_EPSILON,
    composed_gaussian_noise,
    gaussian_steps,
    gdp_epsilon,
    require_privacy_target,
)
from victims.dp.whitebox_canaries import GRADIENT, training_keep
from victims.pool import Pool
from victims.tabular.release import Released, TableRelease
from victims.tabular.schema import cell_counts, whitebox_observations

#: the public choices of 2-way marginals: every (label, feature) pair, or none
TWO_WAY = ("label", "none")
#: SeedSequence streams of a run's seed: the noise, then the sampling of the release
NOISE_STREAM = 6
SAMPLE_STREAM = 7
#: gradient canaries a white-box run may append cells for (k x N noisy counts more a run)
MOST_CELL_CANARIES = 100_000


def measured_marginals(n_features: int, two_way: str) -> tuple[tuple[int, ...], ...]:
    """The measured marginals as column indices into `Schema.codes` (the features 0 .. d - 1, the
    label d): every 1-way marginal, then (label, j) for every feature j with `two_way` 'label'."""
    if two_way not in TWO_WAY:
        raise ValueError(f"--two-way must be one of {TWO_WAY}, got {two_way!r}")
    one_way = tuple((c,) for c in range(n_features + 1))
    return one_way + (tuple((n_features, j) for j in range(n_features)) if two_way == "label" else ())


def cell_support(support: tuple[np.ndarray, ...], columns: tuple[int, ...]) -> np.ndarray:
    """bool table of a marginal: the cells that exist, the outer product of its columns' supports."""
    found = support[columns[0]]
    for c in columns[1:]:
        found = np.multiply.outer(found, support[c])
    return found


def noisy_marginals(
    codes: np.ndarray,
    sizes: tuple[int, ...],
    marginals: tuple[tuple[int, ...], ...],
    *,
    sigma: float,
    rng: np.random.Generator,
    support: tuple[np.ndarray, ...] | None = None,
    canary_in: np.ndarray | None = None,
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """(each marginal's counts + N(0, sigma^2) in every cell; with gradient canaries (`canary_in`, bool
    [N]) float64 [k, N], their own cells, counted 1 when IN and noised alike). Cells outside `support`
    are NaN, never released nor sampled; the noise is drawn for every cell whatever the support."""
    out, own = [], []
    for columns in marginals:
        counts = cell_counts(codes, sizes, columns)
        noisy = counts + sigma * rng.standard_normal(counts.shape)
        out.append(noisy if support is None else np.where(cell_support(support, columns), noisy, np.nan))
        if canary_in is not None:
            own.append(canary_in + sigma * rng.standard_normal(len(canary_in)))
    return out, (np.array(own).reshape(len(marginals), -1) if canary_in is not None else None)


def probabilities(noisy: np.ndarray) -> np.ndarray:
    """Each row (the last axis) of a noisy table as a distribution: negative counts clipped at 0,
    renormalised; a row with no positive count uniform over its existing (non-NaN) cells."""
    exists = ~np.isnan(noisy)
    clipped = np.where(exists, np.maximum(np.nan_to_num(noisy, nan=0.0), 0.0), 0.0)
    total = clipped.sum(-1, keepdims=True)
    uniform = exists / np.maximum(exists.sum(-1, keepdims=True), 1)
    return np.where(total > 0, clipped / np.where(total > 0, total, 1.0), uniform)


def draw_rows(p: np.ndarray, given: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """int64 [n]: one cell per row drawn from p[given[i]] (p [rows, cells], each row a
    distribution), by the inverse cdf of one uniform each."""
    cdf = np.cumsum(p, axis=1)
    cdf = cdf / cdf[:, -1:]
    u = rng.random(len(given))
    return np.minimum((u[:, None] >= cdf[given]).sum(1), p.shape[1] - 1).astype(np.int64)


def sample_codes(
    noisy: list[np.ndarray], marginals: tuple[tuple[int, ...], ...], rows: int, rng: np.random.Generator
) -> np.ndarray:
    """int64 [rows, d + 1] cells of `rows` records: the label from its noisy 1-way marginal, then each
    feature from its noisy (label, feature) row, or its 1-way marginal where none is measured."""
    tables = dict(zip(marginals, noisy))
    label = max(c for columns in marginals for c in columns)
    codes = np.zeros((rows, label + 1), dtype=np.int64)
    codes[:, label] = draw_rows(probabilities(tables[(label,)])[None, :], np.zeros(rows, dtype=np.int64), rng)
    for j in range(label):
        if (label, j) in tables:
            codes[:, j] = draw_rows(probabilities(tables[(label, j)]), codes[:, label], rng)
        else:
            codes[:, j] = draw_rows(probabilities(tables[(j,)])[None, :], np.zeros(rows, dtype=np.int64), rng)
    return codes


def check_canary_cells(
    canary_codes: np.ndarray, rows: np.ndarray, marginals: tuple[tuple[int, ...], ...], names: tuple[str, ...]
) -> None:
    """ValueError (one line) naming two white-box canaries (pool rows) that share a cell of a measured
    marginal: each observation would hold the other's coin."""
    for columns in marginals:
        seen: dict[tuple, int] = {}
        for row, codes in zip(rows, canary_codes):
            cell = tuple(int(codes[c]) for c in columns)
            if cell in seen:
                raise ValueError(
                    f"white-box canaries must lie in distinct cells of every measured marginal: rows {seen[cell]} "
                    f"and {row} share cell {cell} of the marginal of {', '.join(names[c] for c in columns)}"
                )
            seen[cell] = int(row)


@register_victim("marginals")
@dataclass(frozen=True)
class MarginalsVictim(TableRelease):
    """The Gaussian mechanism on public 1-way and (label, feature) marginals, calibrated exactly to
    (epsilon, delta) by Gaussian DP, and `rows` records sampled from them."""

    #: under white-box, record canaries (rows of the table) are observed through their cells' noisy counts
    white_box_record_canaries: ClassVar[bool] = True

    epsilon: float = field(
        default=1.0, metadata={"help": f"target epsilon of the marginals (at most {MOST_GDP_EPSILON:g})"}
    )
    delta: float = field(default=1e-5, metadata={"help": "target delta"})
    two_way: str = field(
        default="label",
        metadata={
            "help": "the public 2-way marginals measured beside every 1-way one: label (the label with each "
            "feature) or none",
            "choices": TWO_WAY,
        },
    )

    def __post_init__(self) -> None:
        TableRelease.__post_init__(self)
        require_privacy_target(self)
        if self.epsilon > MOST_GDP_EPSILON:
            raise ValueError(f"--epsilon must be at most {MOST_GDP_EPSILON:g}, got {self.epsilon}")
        measured_marginals(1, self.two_way)  # validates --two-way

    def marginals(self, pool: Pool) -> tuple[tuple[int, ...], ...]:
        return measured_marginals(len(pool.schema.features), self.two_way)

    def claimed_noise(self, pool: Pool) -> float:
        """sigma for the claim: k = len(marginals) Gaussian mechanisms of sensitivity 1 at exactly (epsilon, delta)."""
        return composed_gaussian_noise(epsilon=self.epsilon, delta=self.delta, compositions=len(self.marginals(pool)))

    def drawn_noise(self, pool: Pool) -> float:
        """The sigma the noise is drawn with: the claim's (`victims.bugs.MarginalsNoiseForTen` differs)."""
        return self.claimed_noise(pool)

    def domain(self, pool: Pool, members: np.ndarray):
        """(schema, support): the public schema and every cell of it."""
        return pool.schema, tuple(np.ones(size, dtype=bool) for size in pool.schema.domain_sizes)

    def release_dimension(self, pool: Pool) -> int:
        """How many gradient canaries a run can observe: up to `MOST_CELL_CANARIES`."""
        return MOST_CELL_CANARIES

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        TableRelease.check(self, pool, inclusion_rate=inclusion_rate)
        spec = pool.white_box
        if spec is None:
            return
        if spec.kind == GRADIENT:
            return  # cells of their own: no two share one
        rows = np.arange(spec.first_row, spec.first_row + spec.n)
        names = (*(c.name for c in pool.schema.features), pool.schema.label)
        check_canary_cells(pool.schema.codes(pool.x[rows], pool.y[rows]), rows, self.marginals(pool), names)

    def claim(self, pool: Pool) -> dict:
        """The Observations' privacy fields: the curve's epsilon at delta, delta, and the mechanism."""
        sigma, k = self.claimed_noise(pool), len(self.marginals(pool))
        return {
            "formal_epsilon": gdp_epsilon(np.sqrt(k) / sigma, self.delta),
            "delta": self.delta,
            "mechanism": gaussian_steps(noise_multiplier=sigma, sample_rate=1.0, steps=k),
        }

    def release(self, pool: Pool, keep: np.ndarray, seed: int, *, inclusion_rate: float) -> Released:
        members = np.flatnonzero(training_keep(pool, keep))  # gradient canaries are no records
        schema, support = self.domain(pool, members)
        codes, sizes, marginals = (
            schema.codes(pool.x[members], pool.y[members]),
            schema.domain_sizes,
            self.marginals(pool),
        )
        spec = pool.white_box
        cell_canaries = keep[spec.rows] if spec is not None and spec.gradient else None
        noise = np.random.default_rng(np.random.SeedSequence([seed, NOISE_STREAM]))
        noisy, own = noisy_marginals(
            codes, sizes, marginals, sigma=self.drawn_noise(pool), rng=noise, support=support, canary_in=cell_canaries
        )
        sampling = np.random.default_rng(np.random.SeedSequence([seed, SAMPLE_STREAM]))
        x, y = schema.from_codes(sample_codes(noisy, marginals, self.rows, sampling), sampling)
        extra = self.claim(pool)
        if own is not None:
            extra.update(self.white_box_fields(own.astype(np.float32), pool))
        elif spec is not None:
            extra.update(self.observe_canaries(pool, keep, schema, codes, noisy))
        return Released(x, y, extra)

    def white_box_fields(self, observed: np.ndarray, pool: Pool) -> dict:
        """`whitebox` [k, canaries] and the claimed mechanism's public sigma at sample rate 1."""
        return {
            "whitebox": observed,
            "whitebox_mechanism": {"noise_multiplier": float(self.claimed_noise(pool)), "sample_rate": 1.0},
        }

    def observe_canaries(self, pool: Pool, keep: np.ndarray, schema, codes: np.ndarray, noisy: list) -> dict:
        """The white-box fields: every canary's observations (`whitebox_observations`) and the claimed sigma."""
        self.check(pool)
        spec, marginals = pool.white_box, self.marginals(pool)
        rows = np.arange(spec.first_row, spec.first_row + spec.n)
        canary_codes = schema.codes(pool.x[rows], pool.y[rows])
        observed = whitebox_observations(noisy, codes, schema.domain_sizes, marginals, canary_codes, keep[rows])
        return self.white_box_fields(observed, pool)
