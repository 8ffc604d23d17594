"""The claimed mechanism's own trade-off curve: the f-DP one-run test (`audit.stats.fdp`) against the curve of a
Poisson-subsampled Gaussian with noise multiplier σ, rate q and T steps (G_{√T/σ} when q = 1), the mechanism a DP
victim's accountant composes. It says whether (σ, q, T) is rejected, and the smallest rejected σ* with its ε at the
audit's δ (relative to the family only).

Validity, under adding or removing one canary with independent fair coins:

1. The auditor's view post-processes T adaptively composed subsampled Gaussian releases (Dong, Roth
   and Su 2022, Thm 3.2 and Prop 2.8): the accountant's own assumption, under test.
2. The curve is never above the true one (`tradeoff_points`): losses are rounded UP onto
   `LOSS_RESOLUTION`, mass beyond sent to ±∞, which lowers the curve; composition keeps the order
   (Dong et al. Lemma C.1). The remaining error is floating point (~1e-14).
3. Add and remove are symmetric: f = min(f_rem, f_rem⁻¹) and its lower convex envelope (tight for
   Poisson subsampling, Zhu, Dong and Wang 2022).
4. True curves increase with σ, so rejection is monotone in σ; σ* is a point of `NOISE_GRID`.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import signal, special

from audit.stats import fdp
from audit.stats.epsilon import gaussian_dp_epsilon

#: spacing of the privacy-loss grid, as a share of the composed loss's standard deviation over T: the
#: rounding up moves the composed loss by at most T·Δ = LOSS_RESOLUTION standard deviations
LOSS_RESOLUTION = 0.05
#: the most points a loss grid may have: a mechanism too leaky for LOSS_RESOLUTION within it gets a coarser
#: grid (still pessimistic)
MOST_GRID_POINTS = 200_000
#: the composed loss grid spans its mean ± this many standard deviations (from 0 where the mean is above that); mass
#: beyond its top counts as infinite loss, below its bottom is rounded up onto it (both pessimistic)
LOSS_SPAN_SDS = 8.0
#: the noise multipliers the family search bisects over: 1% apart from 0.05 to 100
NOISE_GRID = tuple(float(s) for s in np.geomspace(0.05, 100.0, int(round(math.log(2000.0) / math.log(1.01))) + 1))


@dataclass(frozen=True)
class SubsampledGaussian:
    """T Poisson-subsampled Gaussian steps at noise multiplier σ and rate q: what a DP victim's
    accountant composes (sensitivity 1 after dividing by the clipping norm)."""

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.noise_multiplier) and self.noise_multiplier > 0):
            raise ValueError(f"noise_multiplier must be a positive number, got {self.noise_multiplier}")
        if not 0.0 < self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {self.sample_rate}")
        if int(self.steps) != self.steps or self.steps < 1:
            raise ValueError(f"steps must be an integer >= 1, got {self.steps}")

    @property
    def full_batch(self) -> bool:
        return self.sample_rate == 1.0

    @property
    def mu(self) -> float:
        """√T / σ: the mechanism is exactly μ-GDP with this μ when q = 1 (composition of Gaussians)."""
        return math.sqrt(self.steps) / self.noise_multiplier

    def with_noise(self, noise_multiplier: float) -> SubsampledGaussian:
        return replace(self, noise_multiplier=float(noise_multiplier))

    def to_json(self) -> dict:
        return {"noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate, "steps": int(self.steps)}

    @classmethod
    def of(cls, record: dict) -> SubsampledGaussian:
        return cls(float(record["noise_multiplier"]), float(record["sample_rate"]), int(record["steps"]))


@dataclass(frozen=True)
class LossDistribution:
    """A composed privacy loss ℓ = log(dA/dB) under A on a grid: A-masses `a` at losses `index · step`. Pessimistic
    (default; losses rounded up, the rest of A at +∞, of B at -∞): hockey-stick divergences are upper bounds.
    `optimistic` (rounded DOWN, the rest of A at -∞): lower bounds, for a lower bracket of ε at δ (`epsilon_at(...,
    side="lower")`); never read as a trade-off curve."""

    step: float
    index: np.ndarray  # int64 [n]
    a: np.ndarray  # float64 [n]
    optimistic: bool = False

    @property
    def losses(self) -> np.ndarray:
        return self.index * self.step

    @property
    def b(self) -> np.ndarray:
        return self.a * np.exp(-self.losses)

    @property
    def a_infinite(self) -> float:
        """A's mass at ℓ = +∞: what the grid does not hold (pessimistic), none (optimistic)."""
        return 0.0 if self.optimistic else max(0.0, 1.0 - float(self.a.sum()))

    def hockey_stick(self, epsilon: float) -> float:
        """H_{e^ε}(A‖B) = E_A[(1 - e^{ε - ℓ})+] (+∞ losses count 1) for ε >= 0: an upper bound on the
        true one (pessimistic), a lower bound (optimistic)."""
        return float((self.a * -np.expm1(np.minimum(epsilon - self.losses, 0.0))).sum()) + self.a_infinite

    def tradeoff(self) -> tuple[np.ndarray, np.ndarray]:
        """Vertices (α ascending, β descending) of T(B, A), pessimistic: tests rejecting B on the highest losses, α =
        B-mass rejected, β = A-mass accepted; exact at α = 0 (f(0) = 1 - A's mass at +∞). The cell at loss ℓ has slope
        -e^ℓ. Beyond `CURVE_LINES` cells the curve becomes the upper envelope of the lines through `CURVE_LINES` chosen
        segments (`_chosen_cells`): each supports the convex curve, so the envelope is nowhere above it."""
        b_top = np.cumsum(self.b[::-1])[::-1]  # B-mass at or above each loss: α once its cell is rejected
        below = np.concatenate([[0.0], np.cumsum(self.a)[:-1]])  # A-mass below each loss: β then
        if self.a.size <= CURVE_LINES:
            alpha = np.concatenate([[0.0, 0.0], b_top[::-1], [1.0]])
            beta = np.concatenate([[1.0, 1.0 - self.a_infinite], below[::-1], [0.0]])
            return alpha, beta
        cells = _chosen_cells(self.a, self.b)[::-1]  # descending loss: rising slope
        cells = cells[self.losses[cells] < 700.0]  # steeper lines overflow; leaving lines out only lowers the curve
        slope = np.append(-np.exp(self.losses[cells]), 0.0)  # the last line: β = 0 once B is all rejected
        through = np.append(below[cells] - slope[:-1] * b_top[cells], 0.0)  # intercepts at α = 0
        # consecutive lines (each supports the convex curve, slopes rising) meet at the envelope's vertices
        meet = (through[1:] - through[:-1]) / (slope[:-1] - slope[1:])
        inside = (meet > 0.0) & (meet < 1.0)
        on_line = np.flatnonzero(inside)
        alpha = np.concatenate([[0.0], meet[inside], [1.0]])
        ends = np.max(slope[:, None] * np.array([[0.0, 1.0]]) + through[:, None], axis=0)
        beta = np.concatenate([[ends[0]], slope[on_line] * meet[on_line] + through[on_line], [ends[1]]])
        return alpha, np.clip(beta, 0.0, 1.0)


#: how many of a loss distribution's segments carry the trade-off curve (`LossDistribution.tradeoff`)
CURVE_LINES = 4000


def _chosen_cells(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cell indices (ascending) evenly spread over the grid and over both masses' cumulative sums, on
    a linear and a log scale from either end, so that both ends of the curve keep their resolution;
    the first and last cells always. Cells of zero mass carry no segment and are left out."""
    n, per = a.size, CURVE_LINES // 8
    chosen = [np.array([0, n - 1]), np.linspace(0, n - 1, per).astype(np.int64)]
    for mass in (a, b):
        up, down = np.cumsum(mass), np.cumsum(mass[::-1])
        for levels in (np.linspace(0.0, up[-1], per), np.geomspace(1e-18, max(up[-1], 1e-18), per)):
            chosen.append(np.searchsorted(up, levels))
            chosen.append(n - 1 - np.searchsorted(down, levels))
    cells = np.unique(np.clip(np.concatenate(chosen), 0, n - 1))
    return cells[(a[cells] > 0.0) & (b[cells] > 0.0)]


class _Side:
    """One step of the pair P = (1 - q) N(0, σ²) + q N(1, σ²) (the canary in), Q = N(0, σ²) (out),
    seen from A = P (`remove`: ℓ = L(x)) or A = Q (ℓ = -L(x)), where the privacy loss
    L(x) = log(1 - q + q e^{(2x - 1)/(2σ²)}) increases in x."""

    def __init__(self, mechanism: SubsampledGaussian, *, remove: bool) -> None:
        self.sigma, self.q, self.remove = mechanism.noise_multiplier, mechanism.sample_rate, remove
        self.x_low, self.x_high = -LOSS_SPAN_SDS * self.sigma, (1.0 if remove else 0.0) + LOSS_SPAN_SDS * self.sigma

    def L(self, x: np.ndarray) -> np.ndarray:
        shift = (2.0 * x - 1.0) / (2.0 * self.sigma**2)
        return shift if self.q == 1.0 else np.log1p(self.q * np.expm1(shift))

    def x_of(self, loss: np.ndarray) -> np.ndarray:
        """The x with L(x) = `loss` (-∞ for a loss below every L)."""
        if self.q == 1.0:
            return self.sigma**2 * loss + 0.5
        arg = np.expm1(loss) + self.q
        with np.errstate(divide="ignore", invalid="ignore"):
            x = self.sigma**2 * (np.log(arg) - math.log(self.q)) + 0.5
        return np.where(arg > 0, x, -np.inf)

    def x_cdf(self, x: np.ndarray) -> np.ndarray:
        """A's cdf in x."""
        if self.remove:
            return (1.0 - self.q) * special.ndtr(x / self.sigma) + self.q * special.ndtr((x - 1.0) / self.sigma)
        return special.ndtr(x / self.sigma)

    def loss_cdf(self, v: np.ndarray) -> np.ndarray:
        """A[ℓ <= v]."""
        if self.remove:
            return self.x_cdf(self.x_of(v))
        return special.ndtr(-self.x_of(-v) / self.sigma)  # Q[L(x) >= -v] = Q[x >= x_of(-v)]

    def loss_range(self) -> tuple[float, float]:
        ends = self.L(np.array([self.x_low, self.x_high]))
        return (float(ends[0]), float(ends[1])) if self.remove else (float(-ends[1]), float(-ends[0]))

    def moments(self) -> tuple[float, float]:
        """The mean and standard deviation of ℓ under A (a fine midpoint sum; they size the grid)."""
        edges = np.linspace(self.x_low, self.x_high, 200_001)
        mass = np.diff(self.x_cdf(edges))
        loss = self.L((edges[1:] + edges[:-1]) / 2) * (1.0 if self.remove else -1.0)
        mean = float((mass * loss).sum() / mass.sum())
        return mean, math.sqrt(max(float((mass * (loss - mean) ** 2).sum() / mass.sum()), 0.0))

    def pmf(self, step: float, *, optimistic: bool = False) -> tuple[int, np.ndarray]:
        """ℓ rounded UP onto multiples of `step`: (first index, masses); A's mass above the range is
        left out (+∞), the mass below it rounded up onto its first point. `optimistic`: rounded
        DOWN, the mass above the range onto its last point, the mass below it left out (-∞)."""
        bottom, top = self.loss_range()
        low = int(math.floor(bottom / step))
        # at least one cell: at tiny σ one side's loss is a point mass (log(1 - q) wherever a noise
        # draw can land), whose range would otherwise hold no cell
        high = max(int(math.ceil(top / step)), low + 1)
        cumulative = self.loss_cdf(np.arange(low, high + 1) * step)
        masses = np.diff(cumulative)  # the mass of losses in ((k-1)Δ, kΔ], k = low + 1 .. high
        if optimistic:  # each onto (k-1)Δ, below it: a loss never raised
            masses[-1] += 1.0 - cumulative[-1]
            return low, np.clip(masses, 0.0, None)
        masses[0] += cumulative[0]  # each onto kΔ
        return low + 1, np.clip(masses, 0.0, None)


def _convolve(
    a: tuple[int, np.ndarray], b: tuple[int, np.ndarray], window: tuple[int, int], *, optimistic: bool = False
):
    """The pmf of the sum of two grid losses, kept on [window): below it rounded up onto its first point, above it
    dropped (to +∞); `optimistic`: below it dropped (to -∞), above it rounded down onto its last point."""
    start = a[0] + b[0]
    masses = np.clip(signal.fftconvolve(a[1], b[1]), 0.0, None)
    low, high = window
    first, last = max(start, low), min(start + masses.size, high)
    below, above = masses[: max(0, low - start)].sum(), masses[max(0, high - start) :].sum()
    if last <= first:  # nothing inside: all of it below or above the window
        if optimistic:
            return high - 1, np.array([above])
        return low, np.array([below])
    kept = masses[first - start : last - start].copy()
    if optimistic:
        kept[-1] += above
    else:
        kept[0] += below
    return first, kept


@functools.lru_cache(maxsize=1024)
def loss_distribution(mechanism: SubsampledGaussian, *, remove: bool, optimistic: bool = False) -> LossDistribution:
    """The T-fold composed privacy loss seen from P (`remove`) or from Q, pessimistic (module
    docstring, 2) or `optimistic` (every rounding the other way: `LossDistribution`), on a grid of
    spacing Δ = LOSS_RESOLUTION · sd / √T (sd: one step's), composed by repeated squaring."""
    one = _Side(mechanism, remove=remove)
    mean, sd = one.moments()
    T = mechanism.steps
    half = LOSS_SPAN_SDS * sd * math.sqrt(T)
    # partial sums of j <= T steps lie within j·mean ± half, inside this window
    low, high = min(0.0, T * mean) - half, max(0.0, T * mean) + half
    bottom, top = one.loss_range()
    step = max(LOSS_RESOLUTION * max(sd, 1e-12) / math.sqrt(T), (max(high, top) - min(low, bottom)) / MOST_GRID_POINTS)
    window = (int(math.floor(low / step)), int(math.ceil(high / step)) + 1)
    power = one.pmf(step, optimistic=optimistic)
    result, n = None, T
    while n:
        if n & 1:
            result = power if result is None else _convolve(result, power, window, optimistic=optimistic)
        n >>= 1
        if n:
            power = _convolve(power, power, window, optimistic=optimistic)
    first, kept = result
    index = first + np.arange(kept.size, dtype=np.int64)
    return LossDistribution(step=step, index=index, a=kept, optimistic=optimistic)


def _lowest_per_x(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((ys, xs))
    xs, ys = xs[order], ys[order]
    first = np.concatenate([[True], xs[1:] != xs[:-1]])
    return xs[first], ys[first]


def _upper_envelope(one: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray]):
    """Vertices of max(f, g) of two piecewise-linear functions on [0, 1] (crossings included)."""
    f, g = _lowest_per_x(*one), _lowest_per_x(*other)
    xs = np.union1d(f[0], g[0])
    yf, yg = np.interp(xs, *f), np.interp(xs, *g)
    gap = yf - yg
    cross = np.flatnonzero(gap[:-1] * gap[1:] < 0)
    t = gap[cross] / (gap[cross] - gap[cross + 1])
    cx = xs[cross] + t * (xs[cross + 1] - xs[cross])
    cy = yf[cross] + t * (yf[cross + 1] - yf[cross])
    return _lowest_per_x(np.concatenate([xs, cx]), np.concatenate([np.maximum(yf, yg), cy]))


@functools.lru_cache(maxsize=1024)
def tradeoff_points(mechanism: SubsampledGaussian) -> tuple[np.ndarray, np.ndarray]:
    """The vertices (α ascending, β descending) of the symmetrised, pessimistic trade-off curve
    (module docstring, 3): g = max(T̃(P, Q), T̃(Q, P)⁻¹), two lower bounds on T(P, Q), each exact
    at one end (T̃(P, Q) from the loss seen from Q, T̃(Q, P) from the loss seen from P), then the
    lower convex envelope of min(g, g⁻¹)."""
    rem = loss_distribution(mechanism, remove=False).tradeoff()  # T(P, Q): A = Q, B = P
    add = loss_distribution(mechanism, remove=True).tradeoff()  # T(Q, P): A = P, B = Q
    xs, ys = _upper_envelope(rem, (add[1], add[0]))
    return _lower_hull(np.concatenate([xs, ys]), np.concatenate([ys, xs]))  # g's vertices and their reflections


def _lower_hull(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lower convex hull of points: qhull's hull, walked counter-clockwise from its lowest
    vertex at the smallest x to its lowest vertex at the largest x."""
    from scipy.spatial import ConvexHull

    xs, ys = _lowest_per_x(xs, ys)
    points = np.column_stack([xs, ys])
    if points.shape[0] < 3:
        return xs, ys
    try:
        vertices = ConvexHull(points).vertices  # counter-clockwise
    except Exception:  # all points on one line: that line is the hull
        return xs[[0, -1]], ys[[0, -1]]
    hx, hy = xs[vertices], ys[vertices]
    start = int(np.lexsort((hy, hx))[0])  # the lowest vertex at the smallest x
    walk = np.roll(vertices, -start)
    wx, wy = xs[walk], ys[walk]
    end = int(np.lexsort((wy, -wx))[0])  # the lowest vertex at the largest x
    chain = walk[: end + 1]
    return xs[chain], ys[chain]


@functools.lru_cache(maxsize=512)
def _blow_up_table(mechanism: SubsampledGaussian) -> tuple[list[float], list[float]]:
    """(β ascending, α descending) of the curve's strictly decreasing part, for B⁻¹ lookups."""
    alpha, beta = tradeoff_points(mechanism)
    end = int(np.argmax(beta <= 0.0)) if (beta <= 0.0).any() else beta.size - 1
    return beta[: end + 1][::-1].tolist(), alpha[: end + 1][::-1].tolist()


def blow_up_inverse(mechanism: SubsampledGaussian):
    """B⁻¹(y) = inf{x : f(x) <= 1 - y} of the mechanism's curve f: exact G_μ for q = 1
    (`audit.stats.fdp.gaussian_blow_up_inverse`), else read off `tradeoff_points`."""
    if mechanism.full_batch:
        return fdp.gaussian_blow_up_inverse(mechanism.mu)
    betas, alphas = _blow_up_table(mechanism)

    def inverse(y: float) -> float:
        target = 1.0 - y
        if target <= betas[0]:
            return min(1.0, alphas[0])  # f reaches 0 (or below the target) there: the smallest such x
        if target >= betas[-1]:
            return 0.0
        i = bisect.bisect_left(betas, target)
        b0, b1, a0, a1 = betas[i - 1], betas[i], alphas[i - 1], alphas[i]
        return min(1.0, a0 + (a1 - a0) * (target - b0) / (b1 - b0))

    return inverse


def rejects(mechanism: SubsampledGaussian, *, m: int, guesses: int, correct: int, alpha: float) -> bool:
    """Whether `correct` right guesses of `guesses` among `m` canaries reject, at level `alpha`, that
    the output is f-DP for the mechanism's own curve (the f-DP test of `audit.stats.fdp`)."""
    if mechanism.full_batch:
        return fdp.gaussian_rejects(mechanism.mu, m=m, guesses=guesses, correct=correct, alpha=alpha)
    return fdp.fdp_rejects(blow_up_inverse(mechanism), m=m, guesses=guesses, correct=correct, alpha=alpha)


EPSILON_SIDES = ("upper", "lower")


@functools.lru_cache(maxsize=4096)
def epsilon_at(mechanism: SubsampledGaussian, delta: float, *, side: str = "upper") -> float:
    """The mechanism's ε at δ: exact for q = 1 (`gaussian_dp_epsilon`); else the smallest ε with max(H_{e^ε}(P‖Q),
    H_{e^ε}(Q‖P)) <= δ, from the `side` asked: "upper" (pessimistic, never below the true ε) or "lower" (optimistic,
    never above it; `LossDistribution`), within the grid's resolution of each other."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if side not in EPSILON_SIDES:
        raise ValueError(f"side must be one of {EPSILON_SIDES}, got {side!r}")
    if mechanism.full_batch:
        return float(gaussian_dp_epsilon(mechanism.mu, delta))
    optimistic = side == "lower"
    from_p = loss_distribution(mechanism, remove=True, optimistic=optimistic)
    from_q = loss_distribution(mechanism, remove=False, optimistic=optimistic)

    def delta_of(epsilon: float) -> float:
        return max(from_p.hockey_stick(epsilon), from_q.hockey_stick(epsilon))

    if delta_of(0.0) <= delta:
        return 0.0
    low, high = 0.0, 1.0
    while delta_of(high) > delta:
        low, high = high, 2.0 * high
        if high > 1e4:
            return math.inf
    for _ in range(50):  # delta_of(low) > delta >= delta_of(high) throughout
        middle = (low + high) / 2
        low, high = (low, middle) if delta_of(middle) <= delta else (middle, high)
    return low if optimistic else high


@functools.lru_cache(maxsize=65536)
def smallest_rejected_noise(
    sample_rate: float,
    steps: int,
    *,
    m: int,
    guesses: int,
    correct: int,
    alpha: float,
    claimed_noise: float | None = None,
) -> float | None:
    """The smallest σ* of `NOISE_GRID` (plus `claimed_noise` when given) whose mechanism (σ*, `sample_rate`, `steps`)
    the guesses reject at `alpha` (every larger σ is rejected too); None if not even the largest is. For q = 1, exactly:
    σ* = √T / μ* for the largest rejected μ* (`audit.stats.fdp.gaussian_one_run_mu`). With the claim on the grid, "the
    claim is rejected" is σ* <= the claim's σ (`claim_rejected`), so the two cannot disagree. Cached."""
    if sample_rate == 1.0:
        mu = fdp.gaussian_one_run_mu(m=m, guesses=guesses, correct=correct, alpha=alpha)
        return None if mu == 0.0 else (0.0 if math.isinf(mu) else math.sqrt(steps) / mu)
    grid = NOISE_GRID if claimed_noise is None else tuple(sorted({*NOISE_GRID, float(claimed_noise)}))

    def rejected(i: int) -> bool:
        mechanism = SubsampledGaussian(grid[i], sample_rate, steps)
        return rejects(mechanism, m=m, guesses=guesses, correct=correct, alpha=alpha)

    top = len(grid) - 1
    if not rejected(top):
        return None
    if rejected(0):
        return grid[0]
    low, high = 0, top  # not rejected at low, rejected at high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if rejected(middle) else (middle, high)
    return grid[high]


def claim_rejected(noise_rejected: float | None, mechanism: SubsampledGaussian) -> bool:
    """Whether the claimed mechanism is rejected, read off the family search with the claim on its grid
    (`smallest_rejected_noise(..., claimed_noise=σ)`): σ* <= σ, the same as `rejects` on the claim wherever rejection is
    monotone in σ (module docstring 4)."""
    return noise_rejected is not None and noise_rejected <= mechanism.noise_multiplier
