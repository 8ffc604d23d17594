"""`marginals`: the suite's own exact DP baseline for tables. The Gaussian mechanism on a public set
of marginals over the schema's public domain, and `rows` records sampled from the noisy marginals.

Measured (`measured_marginals`): the 1-way marginal of every column (the features, then the label)
and, with `--two-way label` (the default), the 2-way (label, feature) marginal of every feature.
Every marginal is counted over the cells of the public schema (`Schema.codes`, `domain_sizes`):
nothing of the domain is read from the rows (`victims.dp.bugs.MarginalsDomainFromData` is the twin
that does, and leaks through it).

Privacy (exact). Under adding or removing one record each measured marginal changes in exactly one
cell, by 1: an L2 sensitivity of 1 per marginal. Adding N(0, sigma^2) to every count of every
marginal (fresh noise each) makes each marginal the Gaussian mechanism of sensitivity 1, which is
(1 / sigma)-GDP (Dong, Roth and Su, "Gaussian Differential Privacy", 2022, Theorem 2.7); the k
measured marginals compose to exactly (sqrt(k) / sigma)-GDP (their Corollary 3.3), the same curve
as k non-subsampled Gaussian steps at noise multiplier sigma, which is what a run records as its
mechanism ({"noise_multiplier": sigma, "sample_rate": 1.0, "steps": k}, whose own curve
`audit.stats.mechanism` tests exactly, G_{sqrt(k)/sigma}). sigma is calibrated to the claimed
(`--epsilon`, `--delta`) by that curve's exact (epsilon, delta) duality (their Corollary 2.13;
`victims.dp.privacy.composed_gaussian_noise`), not by an RDP bound; the recorded formal epsilon is
the curve's epsilon at delta (`gdp_epsilon`), the claim up to the root finder's 1e-12. Everything
after the noisy counts is post-processing. sigma depends on (epsilon, delta, k) alone.

Sampling (post-processing, `sample_codes`): every noisy table is turned into probabilities by
clipping negative counts at 0 and renormalising (a row whose counts are all <= 0 becomes uniform
over its cells); each record's label is drawn from the label's noisy 1-way marginal, then each
feature from its noisy (label, feature) row given that label (from its 1-way marginal where no
2-way marginal is measured, `--two-way none`); `Schema.from_codes` turns the cells into values (a
number uniform in its bin).

White-box (`--threat-model white-box`, record canaries: rows of the table with their own coins).
The white-box auditor sees every noisy count and knows every record but the canaries' coins. For
canary j and measured marginal m it observes o_{m,j} = (noisy count of the canary's cell) - (the
members other than the canary in that cell): exactly N(b_j, sigma^2), b_j the canary's coin, over
the sensitivity 1, i.e. the convention of `attacks.whitebox` at sample rate 1 with k steps
(`whitebox` [k, canaries], `whitebox_mechanism` {sigma, 1.0}). Requirement: the canaries lie in
distinct cells of every measured marginal (`check_canary_cells`, a ValueError naming the two that
share one): a cell shared by two canaries holds both coins, which no white-box auditor can subtract,
and their observations are no longer independent given the coins. With the label's 1-way marginal
measured, that allows at most as many canaries as the smallest column has cells (4 on fair).

White-box with gradient canaries (`--canary-kind gradient`, the white-box default): the histogram's
Dirac canaries. A gradient canary holds no record (its row is not counted); instead every measured
marginal gets one cell of its own per canary, counted 1 when the canary's coin is IN and 0 when
OUT, and noised in the same call and with the same sigma as the schema's cells (`noisy_marginals`,
`canary_in`). Adding or removing the canary changes exactly that one count in each of the k
marginals: the same sensitivity-1 Gaussian mechanism per marginal, so the guarantee and the
recorded mechanism are unchanged, and o_{m,j} is the noisy count of canary j's own cell, N(b_j,
sigma^2) independently for every canary, with no limit on how many (each has cells of its own).
The canaries' cells are the auditor's probe, not released records: the release is sampled from the
schema's cells alone. This tests the noise a run adds (a `MarginalsNoiseForTen` shows in them)
where record canaries also test how records reach the counts (`MarginalsDomainFromData`).
"""

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
from victims.tabular.schema import cell_counts

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
    """(each marginal's counts + N(0, sigma^2) in every cell: the Gaussian mechanism; with gradient
    canaries (`canary_in`, bool [N]: their coins) float64 [k, N], every marginal's N cells of the
    canaries' own, counted 1 for an IN canary and noised alike, after the schema's cells). Cells
    outside `support` (bool [size] per column; all of them when None) are NaN: they do not exist,
    and are never released nor sampled. The noise is drawn for every cell whatever the support."""
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
    """int64 [rows, d + 1] cells of `rows` records: the label (the last column) from its noisy 1-way
    marginal, then each feature from its noisy (label, feature) row given the label, or from its own
    1-way marginal where no such 2-way marginal is measured (module docstring)."""
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
    marginal (`names`: the columns of `Schema.codes`, the label last): their observations would each
    hold the other's coin (module docstring)."""
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


def whitebox_observations(
    noisy: list[np.ndarray],
    codes: np.ndarray,
    sizes: tuple[int, ...],
    marginals: tuple[tuple[int, ...], ...],
    canary_codes: np.ndarray,
    canary_in: np.ndarray,
) -> np.ndarray:
    """float32 [k, canaries]: o_{m,j}, marginal m's noisy count in canary j's cell less the members
    other than canary j in it (`codes` holds every member, the canaries that are in among them; a
    cell that does not exist reads 0). N(b_j, sigma^2) for the correct mechanism."""
    out = np.zeros((len(marginals), len(canary_codes)), dtype=np.float64)
    for m, columns in enumerate(marginals):
        cells = tuple(canary_codes[:, c] for c in columns)
        others = cell_counts(codes, sizes, columns)[cells] - canary_in
        out[m] = np.nan_to_num(noisy[m][cells], nan=0.0) - others
    return out.astype(np.float32)


@register_victim("marginals")
@dataclass(frozen=True)
class MarginalsVictim(TableRelease):
    """The Gaussian mechanism on public 1-way and (label, feature) marginals, calibrated exactly to
    (epsilon, delta) by Gaussian DP, and `rows` records sampled from them (module docstring)."""

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
        """The sigma the noise is drawn with: the claim's (`victims.dp.bugs.MarginalsNoiseForTen` differs)."""
        return self.claimed_noise(pool)

    def domain(self, pool: Pool, members: np.ndarray):
        """(schema, support): the public schema, every cell of it (`MarginalsDomainFromData` reads them from
        the `members`' rows)."""
        return pool.schema, tuple(np.ones(size, dtype=bool) for size in pool.schema.domain_sizes)

    def release_dimension(self, pool: Pool) -> int:
        """How many gradient canaries a run can observe: each gets cells of its own, so up to
        `MOST_CELL_CANARIES` (module docstring)."""
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
