"""`mst`: MST (McKenna, Miklau and Sheldon 2021, "Winning the NIST contest: a scalable and general
approach to differentially private synthetic data"), with its selection and its Gaussian
measurements written here and its estimation by private-pgm's engine (mbi 2.0, on JAX).

On the schema's discrete domain (`Schema.codes`: k columns, the features then the label):

1. **Budget.** The claimed (ε, δ) becomes a zCDP budget ρ by the standard conversion of Bun and
   Steinke 2016 (Prop. 1.3: ρ-zCDP implies (ρ + 2√(ρ ln 1/δ), δ)-DP), inverted:
   ρ = (√(ln 1/δ + ε) - √(ln 1/δ))² (`zcdp_rho`). The recorded `formal_epsilon` is that
   conversion of the ρ the three steps below spend (`zcdp_epsilon`): ε again, up to rounding.
2. **One-way marginals** (ρ/3): every column's count vector plus N(0, σ₁²) per cell. Under adding or
   removing one record a count vector changes in one cell by 1 (L2 sensitivity 1), so one
   measurement is 1/(2σ₁²)-zCDP and the k of them spend ρ/3 at σ₁ = √(3k / (2ρ)).
3. **Selection** (ρ/3): a maximum spanning tree over the columns, grown one edge at a time among
   the pairs that join two components (Kruskal's order), each edge drawn by the exponential
   mechanism with quality the L1 distance between the pair's true member counts and the counts the
   one-way measurements alone imply (the product of the noisy marginals, each projected onto the
   simplex at the noisy total: the model mbi would fit to them). The quality moves by at most 1
   when a record comes or goes (one cell of the true counts; the estimate is post-processing), so
   each draw at ε_EM is ε_EM-bounded-range, hence ε_EM²/8-zCDP (Cesar and Rogers 2021), and the
   k - 1 draws spend ρ/3 at ε_EM = √(8ρ / (3(k - 1))). private-pgm draws them by permute-and-flip;
   here by the exponential mechanism (Gumbel-max), for which the bounded-range bound is proven.
4. **Two-way marginals** (ρ/3): the chosen pairs' count tables plus N(0, σ₂²), σ₂ = √(3(k - 1) / (2ρ)).
5. **Estimation and sampling** (post-processing): mbi's MirrorDescent fits a graphical model to all
   the measurements; `known_total` is None, so mbi estimates the total from the noisy measurements
   themselves. The run's true member count is never passed: under add/remove the exact row count
   is itself a leak (it tells whether one record is in). `rows` records are drawn from the model
   (randomised rounding, numpy's global generator seeded by the run and put back) and each cell is
   mapped to a value (`Schema.from_codes`: a number uniform in its bin).

Nothing here needs a member count, so nothing calibrates to `expected_members`. Left out of
private-pgm's MST: the domain compression (merging values whose noisy count is below 3σ₁), which
the small public domains of the embedded tables do not need.

`selection`: "private" (the default) is MST as above. Its release is not a composition of
Gaussians (the exponential-mechanism draws are part of it), so it records no `mechanism` and the
audit does not test its own curve. "public" fixes the tree in advance from the schema alone (the
label joined to every feature) and spends ρ equally on the 2k - 1 measurements (k one-way, k - 1
two-way), σ = √((2k - 1) / (2ρ)) each: the whole release is then 2k - 1 Gaussian measurements of
sensitivity 1, exactly the Gaussian mechanism G_μ with μ = √(2k - 1)/σ, recorded as
`mechanism` {noise_multiplier σ, sample_rate 1.0, steps 2k - 1} (`audit.stats.mechanism`).

mbi and JAX are imported inside the run (importing the victims must not import JAX), with JAX's
persistent compilation cache off (mbi's advice). JAX compiles the estimation and mbi's sampler once
per distinct set of cliques in each process: a Ray worker pays it on its first run, and the private
selection again on every run whose tree that worker has not met. Measured on fair (2 cores shared
with other work, `audit.lira --dataset fair --n-shadow 16 --epsilon 1`, runs' wall_s including the
downstream classifier): `--selection public` 21-23 s for each worker's first run, then 1.2-1.8 s
(audit 57 s); `--selection private` 8-29 s per run, mean 17 s (audit 170 s), almost all of it
compilation (one release timed alone: estimation 7.8 s and sampling 2.4 s on a new tree, 0.02 s
each once compiled).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import warnings
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from victims.base import register_victim, require_at_least
from victims.dp.privacy import require_privacy_target
from victims.pool import Pool
from victims.tabular.release import Released, TableRelease
from victims.tabular.schema import cell_counts

#: how to get the estimation engine (pyproject.toml's extra "mst")
MST_INSTALL = 'pip install -e ".[mst]"'
SELECTIONS = ("private", "public")


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The ρ whose ρ-zCDP converts to exactly (ε, δ)-DP by Bun and Steinke's Prop. 1.3:
    ρ = (√(ln 1/δ + ε) - √(ln 1/δ))²."""
    log = math.log(1.0 / delta)
    return (math.sqrt(log + epsilon) - math.sqrt(log)) ** 2


def zcdp_epsilon(rho: float, delta: float) -> float:
    """ε = ρ + 2√(ρ ln 1/δ): the (ε, δ)-DP of ρ-zCDP (Bun and Steinke 2016, Prop. 1.3)."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


@dataclass(frozen=True)
class Budget:
    """The noise of each step of one MST release, and the ρ they spend together."""

    one_way_sigma: float
    two_way_sigma: float
    selection_epsilon: float | None  # per exponential-mechanism draw; None for the public tree
    rho: float


def mst_budget(rho: float, columns: int, selection: str) -> Budget:
    """The split of ρ over `columns` one-way and `columns` - 1 two-way measurements (module docstring)."""
    k = columns
    if selection == "public":
        sigma = math.sqrt((2 * k - 1) / (2.0 * rho))
        return Budget(sigma, sigma, None, (2 * k - 1) / (2.0 * sigma**2))
    one, two = math.sqrt(3.0 * k / (2.0 * rho)), math.sqrt(3.0 * (k - 1) / (2.0 * rho))
    draw = math.sqrt(8.0 * rho / (3.0 * (k - 1)))
    spent = k / (2.0 * one**2) + (k - 1) * draw**2 / 8.0 + (k - 1) / (2.0 * two**2)
    return Budget(one, two, draw, spent)


def project_to_simplex(v: np.ndarray, total: float) -> np.ndarray:
    """The nearest (Euclidean) vector to `v` with non-negative entries summing to `total`."""
    u = np.sort(v)[::-1]
    excess = np.cumsum(u) - total
    index = np.arange(1, len(v) + 1)
    last = np.flatnonzero(u - excess / index > 0)[-1]
    return np.maximum(v - excess[last] / (last + 1), 0.0)


def independent_estimate(one_way: list[np.ndarray], sigma: float) -> list[np.ndarray]:
    """Each column's marginal under the model fit to the one-way measurements alone: the noisy
    total (inverse-variance weighted over the columns, as mbi estimates it) and every noisy
    marginal projected onto the simplex at that total."""
    weights = np.array([1.0 / (sigma**2 * len(y)) for y in one_way])
    total = max(1.0, float(np.average([y.sum() for y in one_way], weights=weights)))
    return [project_to_simplex(y, total) for y in one_way]


def spanning_tree(codes: np.ndarray, sizes: tuple[int, ...], estimate: list[np.ndarray], draw: float, rng) -> list:
    """MST's selection: k - 1 edges, each drawn by the exponential mechanism at `draw` (ε per draw,
    quality sensitivity 1) among the pairs joining two components, quality the L1 error of the
    independent `estimate` on the pair's true counts."""
    total = estimate[0].sum()
    error = {
        (a, b): float(
            np.abs(cell_counts(codes, sizes, (a, b)).ravel() - np.outer(estimate[a], estimate[b]).ravel() / total).sum()
        )
        for a, b in combinations(range(len(sizes)), 2)
    }
    component = list(range(len(sizes)))
    edges = []
    for _ in range(len(sizes) - 1):
        candidates = [pair for pair in error if component[pair[0]] != component[pair[1]]]
        quality = np.array([error[pair] for pair in candidates])
        a, b = candidates[int(np.argmax(draw * quality / 2.0 + rng.gumbel(size=len(quality))))]
        edges.append((a, b))
        joined, into = component[b], component[a]
        component = [into if c == joined else c for c in component]
    return edges


def _import_mbi() -> Any:
    """mbi, imported with JAX's persistent compilation cache off (its advice) and its float32 notice
    quiet; ImportError in one line with the install command if it is missing."""
    try:
        import jax

        jax.config.update("jax_enable_compilation_cache", False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            import mbi
            import mbi.estimation
    except ImportError:
        raise ImportError(f"--victim mst needs mbi 2.0 (private-pgm): {MST_INSTALL}") from None
    return mbi


@contextlib.contextmanager
def seeded_numpy(seed: int):
    """numpy's global generator seeded inside the block (mbi's sampler draws from it), put back after."""
    state = np.random.get_state()
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        np.random.set_state(state)


@register_victim("mst")
@dataclass(frozen=True)
class MST(TableRelease):
    """MST at (ε, δ): Gaussian one-way and spanning-tree two-way marginals, mbi's model sampled (module docstring)."""

    epsilon: float = field(default=1.0, metadata={"help": "target epsilon (DP victims)"})
    delta: float = field(default=1e-5, metadata={"help": "target delta (DP victims)"})
    selection: str = field(
        default="private",
        metadata={
            "help": "private: MST's exponential-mechanism spanning tree; public: the label joined to every "
            "feature, fixed in advance (the release is then Gaussians only, its mechanism recorded)",
            "choices": SELECTIONS,
        },
    )
    iterations: int = field(default=1000, metadata={"help": "mbi mirror-descent iterations of the estimation"})

    def __post_init__(self) -> None:
        super().__post_init__()
        require_privacy_target(self)
        require_at_least(self, {"iterations": 1})
        if self.selection not in SELECTIONS:
            raise ValueError(f"--selection must be one of {SELECTIONS}, got {self.selection!r}")

    def check(self, pool: Pool, **kwargs: Any) -> None:
        super().check(pool, **kwargs)
        if importlib.util.find_spec("mbi") is None:
            raise ValueError(f"--victim mst needs mbi 2.0 (private-pgm): {MST_INSTALL}")

    def release(self, pool: Pool, keep: np.ndarray, seed: int, *, inclusion_rate: float) -> Released:
        schema, rng = pool.schema, np.random.default_rng(seed)
        codes = schema.codes(pool.x[keep], pool.y[keep])
        sizes = schema.domain_sizes
        budget = mst_budget(zcdp_rho(self.epsilon, self.delta), len(sizes), self.selection)
        one_way = [
            cell_counts(codes, sizes, (c,)) + rng.normal(0.0, budget.one_way_sigma, sizes[c]) for c in range(len(sizes))
        ]
        if self.selection == "public":
            edges = [(c, len(sizes) - 1) for c in range(len(sizes) - 1)]
        else:
            estimate = independent_estimate(one_way, budget.one_way_sigma)
            edges = spanning_tree(codes, sizes, estimate, budget.selection_epsilon, rng)
        two_way = [
            cell_counts(codes, sizes, edge).ravel()
            + rng.normal(0.0, budget.two_way_sigma, sizes[edge[0]] * sizes[edge[1]])
            for edge in edges
        ]
        sampled = self._estimate_and_sample(schema, one_way, edges, two_way, budget, seed)
        x, y = schema.from_codes(sampled, rng)
        return Released(x, y, self._privacy(budget, len(sizes)))

    def _estimate_and_sample(self, schema, one_way, edges, two_way, budget: Budget, seed: int) -> np.ndarray:
        """int64 [rows, k]: `rows` cells drawn from mbi's model of the measurements."""
        mbi = _import_mbi()
        names = [*(c.name for c in schema.features), schema.label]
        domain = mbi.Domain(names, schema.domain_sizes)
        measurements = [
            mbi.LinearMeasurement(y, (names[c],), stddev=budget.one_way_sigma) for c, y in enumerate(one_way)
        ] + [
            mbi.LinearMeasurement(y, (names[a], names[b]), stddev=budget.two_way_sigma)
            for (a, b), y in zip(edges, two_way, strict=True)
        ]
        model = mbi.estimation.MirrorDescent().estimate(domain, measurements, known_total=None, iters=self.iterations)
        with seeded_numpy(seed):
            found = model.synthetic_data(self.rows).to_dict()
        return np.stack([np.asarray(found[name], dtype=np.int64) for name in names], axis=1)

    def _privacy(self, budget: Budget, columns: int) -> dict:
        """The Observations' privacy fields: zCDP's ε of the ρ spent; the mechanism where it is Gaussians only."""
        found = {"formal_epsilon": zcdp_epsilon(budget.rho, self.delta), "delta": self.delta}
        if self.selection == "public":
            found["mechanism"] = {
                "noise_multiplier": budget.one_way_sigma,
                "sample_rate": 1.0,
                "steps": 2 * columns - 1,
            }
        return found
