"""`mst`: MST (McKenna, Miklau and Sheldon 2021, "Winning the NIST contest"), its selection and
Gaussian measurements written here, its estimation by private-pgm's engine (mbi 2.0, on JAX).

The claimed (epsilon, delta) becomes a zCDP budget rho (Bun and Steinke 2016, Prop. 1.3, inverted),
split in thirds: one-way marginals + N(0, sigma_1^2) (sensitivity 1, 1/(2 sigma^2)-zCDP each); a
spanning tree whose k - 1 edges are exponential-mechanism draws with a sensitivity-1 quality, each
epsilon_EM^2/8-zCDP (bounded range, Cesar and Rogers 2021); the tree's two-way marginals. Estimation
(no known total: the exact row count would leak) and sampling are post-processing. `selection`
"public" fixes the tree from the schema: 2k - 1 Gaussian measurements, exactly G_mu with
mu = sqrt(2k - 1)/sigma, recorded as its `mechanism`; "private" records none."""

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
    """The split of rho over `columns` one-way and `columns` - 1 two-way measurements."""
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
    """Each column's marginal under the model fit to the one-way measurements alone: every noisy marginal
    projected onto the simplex at the noisy total (inverse-variance weighted, as mbi estimates it)."""
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
    """MST at (epsilon, delta): Gaussian one-way and spanning-tree two-way marginals, mbi's model sampled."""

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
