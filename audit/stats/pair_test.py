"""The exact test of a privacy claim's trade-off curve from many runs of one neighbour pair.

Each run trains on D or D ∪ {target} (a fair coin); a threshold fixed beforehand gives TP ~ Binomial(n_in, t) and FP ~
Binomial(n_out, f), independent. A mechanism meeting the claim has t <= T(f) for every test, T its curve, and every
point of T is some mechanism's: the null is exactly {t <= T(f)}. The statistic (`Statistic`, fixed on the reference
runs) is a signed distance in variance-stabilised coordinates from a pilot curve's region, rising with TP and falling
with FP, so p = sup_f P_{f, T(f)}[statistic >= observed] is an exact p-value (P[p <= α] <= α), and the nulls are nested.
The supremum is bounded on cells [a, b] of f by P_{a, T(b)}: a rejection is always by the upper bound, and a test
undecided within `MAX_CELLS` is not rejected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special

Curve = Callable[[np.ndarray], np.ndarray]
#: the supremum's cells: the first ones' width in standardised units, how a cell is split, the most cells one test
#: evaluates, and how many of the largest corners' cells give the lower bound
FIRST_CELL, SPLIT, MAX_CELLS, LOWER_CELLS = 1.0, 4, 5_000, 8
#: the pilot curve's sampling step in the standardised x
PILOT_STEP = 0.05
_SEARCH_TOLERANCE = 5e-4  # the bisections' resolution, in μ or ε


def gaussian_curve(mu: float) -> Curve:
    """The largest TPR at FPR f of a μ-GDP mechanism (Dong, Roth and Su 2019, G_μ): Φ(Φ⁻¹(f) + μ)."""
    if not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu must be finite and >= 0, got {mu}")
    return lambda f: special.ndtr(special.ndtri(f) + mu)


def eps_delta_curve(epsilon: float, delta: float) -> Curve:
    """The largest TPR at FPR f of an (ε, δ)-DP mechanism (Kairouz, Oh and Viswanath 2015, the (ε, δ)
    trade-off region): min(1, e^ε f + δ, 1 - e^-ε (1 - δ - f))."""
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    up, down = math.exp(epsilon), math.exp(-epsilon)
    return lambda f: np.minimum(1.0, np.minimum(up * f + delta, 1.0 - down * (1.0 - delta - f)))


def _check_counts(*, tp: int, n_in: int, fp: int, n_out: int) -> None:
    if n_in < 1 or n_out < 1 or not (0 <= tp <= n_in and 0 <= fp <= n_out):
        raise ValueError(f"need 0 <= tp <= n_in, 0 <= fp <= n_out, n_in, n_out >= 1; got {tp}, {n_in}, {fp}, {n_out}")


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def _stabilised(rate, n: int):
    return 2.0 * math.sqrt(n) * np.arcsin(np.sqrt(rate))


@dataclass(frozen=True, eq=False)
class Statistic:
    """The signed distance of (FP, TP) from a pilot curve's region grown by the half-planes right of
    `right` and below `bottom`; `least_tp` is its rejection region."""

    n_in: int
    n_out: int
    xs: np.ndarray  # the pilot's samples, standardised, x increasing
    ys: np.ndarray  # their y, non-decreasing
    right: float  # every x >= right is in the region
    bottom: float  # every y <= bottom is in the region

    @classmethod
    def of(cls, pilot: Curve, *, n_in: int, n_out: int, centre: tuple[float, float], reach: float) -> Statistic:
        """The statistic of `pilot`, its region grown by every point more than `reach` standardised
        units right of or below `centre` = (FPR, TPR)."""
        top = math.pi * math.sqrt(n_out)
        xs = np.append(np.arange(0.0, top, PILOT_STEP), top)
        f = np.sin(xs / (2.0 * math.sqrt(n_out))) ** 2
        ys = np.maximum.accumulate(_stabilised(np.clip(pilot(f), 0.0, 1.0), n_in))
        x, y = float(_stabilised(centre[0], n_out)), float(_stabilised(centre[1], n_in))
        return cls(n_in, n_out, xs, ys, x + reach, y - reach)

    def x(self, fp):
        return _stabilised((np.asarray(fp, dtype=float) + 0.375) / (self.n_out + 0.75), self.n_out)

    def y(self, tp):
        return _stabilised((np.asarray(tp, dtype=float) + 0.375) / (self.n_in + 0.75), self.n_in)

    def top(self, x):
        """The pilot region's top at x: the largest y_i with x_i <= x."""
        return self.ys[np.searchsorted(self.xs, x, side="right") - 1]

    def value(self, tp: float, fp: float) -> float:
        """The statistic at (TP, FP): the least of the pilot's signed distance, right - x and y - bottom."""
        x, y = float(self.x(fp)), float(self.y(tp))
        top = float(self.top(x))
        if y <= top:
            pilot = y - top
        else:
            pilot = float(np.sqrt(np.min(np.maximum(self.xs - x, 0.0) ** 2 + np.maximum(y - self.ys, 0.0) ** 2)))
        return min(pilot, self.right - x, y - self.bottom)

    def boundary(self, x: np.ndarray, s: float) -> np.ndarray:
        """The least y whose statistic at x is >= s (inf: none): at least bottom + s, left of right - s
        only, and for the pilot top(x) + s when s <= 0, else the top of its region grown by a disc of
        radius s (the samples within s right of x, and top(x) + s)."""
        least = np.maximum(self.top(x) + s, self.bottom + s)
        if s > 0.0:
            first = np.searchsorted(self.xs, x, side="right")
            for step in range(int(math.ceil(s / PILOT_STEP)) + 2):
                i = np.minimum(first + step, self.xs.size - 1)
                gap = self.xs[i] - x
                lift = np.sqrt(np.maximum(s * s - gap * gap, 0.0))
                least = np.maximum(least, np.where(gap < s, self.ys[i] + lift, -np.inf))
        return np.where(x <= self.right - s + 1e-9, least, np.inf)

    def least_tp(self, s: float) -> np.ndarray:
        """[n_out + 1]: per FP the least TP whose statistic is >= s (n_in + 1: none). A 1e-9 slack
        can only add points to the region (a larger p-value): rounding never rejects."""
        need = self.boundary(self.x(np.arange(self.n_out + 1)), s)
        return np.searchsorted(self.y(np.arange(self.n_in + 1)), need - 1e-9, side="left")


def _log_pmf(k: np.ndarray, n: int, rate: np.ndarray, log_factorial: np.ndarray) -> np.ndarray:
    """ln Binomial(k; n, rate), rate broadcast against k (0 ln 0 = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        hits = np.where(k > 0, k * np.log(rate), 0.0)
        misses = np.where(k < n, (n - k) * np.log1p(-rate), 0.0)
    return log_factorial[n] - log_factorial[k] - log_factorial[n - k] + hits + misses


def _window(n: int, rate: np.ndarray) -> tuple[np.ndarray, int]:
    """Per rate the first of the counts within 9 standard deviations (and 2) of n·rate, and their number."""
    sd = np.sqrt(n * rate * (1.0 - rate))
    low = np.clip(np.floor(n * rate - 9.0 * sd) - 2, 0, n).astype(int)
    return low, int(min(n + 1, np.max(np.ceil(n * rate + 9.0 * sd) + 3 - low)))


@dataclass(frozen=True, eq=False)
class Region:
    """A rejection region {TP >= least_tp[FP]} at n_in and n_out runs, and its probability."""

    n_in: int
    least_tp: np.ndarray  # [n_out + 1], n_in + 1 where no TP rejects
    log_factorial: np.ndarray  # ln k! for k = 0..max(n_in, n_out)

    @classmethod
    def of(cls, n_in: int, least_tp: np.ndarray) -> Region:
        return cls(n_in, least_tp, special.gammaln(np.arange(max(n_in, least_tp.size - 1) + 1) + 1.0))

    @property
    def n_out(self) -> int:
        return self.least_tp.size - 1

    def box(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:
        """A cheap upper bound on `probability`: the region lies in {FP <= the largest FP it holds} x
        {TP >= the least TP it holds}, whose probability is a product of two binomial tails."""
        holds = np.flatnonzero(self.least_tp <= self.n_in)
        if holds.size == 0:
            return np.zeros_like(f)
        least = int(self.least_tp[holds].min())
        tp_tail = 1.0 if least <= 0 else special.bdtrc(least - 1, self.n_in, t)
        return special.bdtr(int(holds.max()), self.n_out, f) * tp_tail

    def probability(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:
        """An upper bound, exact to about 1e-15, on P[TP >= least_tp[FP]] for FP ~ Binomial(n_out, f[i])
        and TP ~ Binomial(n_in, t[i]), per i: central counts summed, the mass outside them counted whole."""
        n, m, lf = self.n_out, self.n_in, self.log_factorial
        if f.size == 0:
            return np.zeros(0)
        low, width = _window(n, f)
        k = np.minimum(low[:, None] + np.arange(width)[None, :], n)
        first = low[:, None] + np.arange(width)[None, :] <= n
        fp_mass = np.where(first, np.exp(_log_pmf(k, n, f[:, None], lf)), 0.0)
        t_low, t_width = _window(m, t)
        j = np.minimum(t_low[:, None] + np.arange(t_width)[None, :], m)
        j_first = t_low[:, None] + np.arange(t_width)[None, :] <= m
        tp_mass = np.where(j_first, np.exp(_log_pmf(j, m, t[:, None], lf)), 0.0)
        t_high = np.minimum(t_low + t_width - 1, m)
        above = np.where(t_high < m, special.bdtrc(t_high, m, t), 0.0)  # P[TP > the window]
        at_least = above[:, None] + np.cumsum(tp_mass[:, ::-1], axis=1)[:, ::-1]  # P[TP >= j], j in the window
        need = self.least_tp[k]
        offset = need - t_low[:, None]
        reach = np.take_along_axis(at_least, np.clip(offset, 0, t_width - 1), axis=1)
        reach = np.where(offset <= 0, 1.0, np.where(offset >= t_width, above[:, None], reach))
        reach = np.where(need > m, 0.0, reach)
        high = low + width - 1
        outside = np.where(low > 0, special.bdtr(np.maximum(low - 1, 0), n, f), 0.0)
        outside += np.where(high < n, special.bdtrc(np.minimum(high, n), n, f), 0.0)
        return np.minimum(1.0, np.sum(fp_mass * reach, axis=1) + outside)


def supremum(
    curve: Curve, region: Region, *, alpha: float | None = None, tolerance: float = 1e-6
) -> tuple[float, float]:
    """(lower, upper) bounds on sup_f P_{f, curve(f)}[region], refined until within `tolerance`, or
    (with `alpha`) until one side of alpha decides the test, or `MAX_CELLS` cells are spent."""
    scale = 2.0 * math.sqrt(region.n_out)
    edges = np.linspace(0.0, math.pi / 2, int(math.ceil(math.pi * scale / 2 / FIRST_CELL)) + 1)
    a, b = edges[:-1], edges[1:]  # cells in asin√f
    box = region.box(np.sin(a) ** 2, curve(np.sin(b) ** 2))
    best = int(np.argmax(box))
    lower = float(region.probability(np.sin(a[[best]]) ** 2, curve(np.sin(a[[best]]) ** 2))[0])
    dropped, spent = 0.0, 0  # dropped: the largest bound of a cell no longer refined
    while True:
        cut = alpha if alpha is not None else lower + tolerance
        summed = box > cut
        dropped = max(dropped, float(np.max(box[~summed], initial=0.0)))
        a, b = a[summed], b[summed]
        left, right = np.sin(a) ** 2, np.sin(b) ** 2
        corner = region.probability(left, curve(right))
        top = np.argsort(corner)[-LOWER_CELLS:]  # the lower bound from the cells of the largest corners
        lower = max(lower, float(np.max(region.probability(left[top], curve(left[top])), initial=0.0)))
        upper = max(dropped, float(np.max(corner, initial=0.0)))
        spent += a.size
        if alpha is not None and (upper <= alpha or lower > alpha):
            return lower, upper
        if upper - lower <= tolerance or spent >= MAX_CELLS:
            return lower, upper
        live = corner > (lower + tolerance if alpha is None else alpha)
        dropped = max(dropped, float(np.max(corner[~live], initial=0.0)))
        split = a[live, None] + (b - a)[live, None] * np.linspace(0.0, 1.0, SPLIT + 1)[None, :]
        a, b = split[:, :-1].ravel(), split[:, 1:].ravel()
        box = region.box(np.sin(a) ** 2, curve(np.sin(b) ** 2))


def p_value(curve: Curve, *, tp: int, fp: int, statistic: Statistic, tolerance: float = 1e-6) -> float:
    """The exact p-value of (TP, FP) against t <= curve(f) by `statistic`: an upper bound on the
    supremum, within `tolerance` of it unless `MAX_CELLS` ran out first."""
    _check_counts(tp=tp, n_in=statistic.n_in, fp=fp, n_out=statistic.n_out)
    region = Region.of(statistic.n_in, statistic.least_tp(statistic.value(tp, fp)))
    return supremum(curve, region, tolerance=tolerance)[1]


def rejects(curve: Curve, *, tp: int, fp: int, statistic: Statistic, alpha: float) -> bool:
    """Whether the exact test by `statistic` rejects t <= curve(f) at level `alpha`."""
    _check_counts(tp=tp, n_in=statistic.n_in, fp=fp, n_out=statistic.n_out)
    _check_alpha(alpha)
    region = Region.of(statistic.n_in, statistic.least_tp(statistic.value(tp, fp)))
    return supremum(curve, region, alpha=alpha)[1] <= alpha


def largest_rejected(
    family: Callable[[float], Curve], *, tp: int, fp: int, statistic: Statistic, alpha: float
) -> float:
    """The largest parameter whose curve `family(p)` the exact test rejects at level `alpha` (to 5e-4
    below, by bisection: the nulls are nested); 0 if `family(0)` is not rejected, inf past 1,000."""
    _check_counts(tp=tp, n_in=statistic.n_in, fp=fp, n_out=statistic.n_out)
    _check_alpha(alpha)
    region = Region.of(statistic.n_in, statistic.least_tp(statistic.value(tp, fp)))

    def rejected(parameter: float) -> bool:
        return supremum(family(parameter), region, alpha=alpha)[1] <= alpha

    if not rejected(0.0):
        return 0.0
    low, high = 0.0, 0.5
    while rejected(high):
        low, high = high, 2.0 * high
        if high > 1e3:
            return math.inf
    while high - low > _SEARCH_TOLERANCE:
        middle = (low + high) / 2
        low, high = (middle, high) if rejected(middle) else (low, middle)
    return low


def pilot_parameter(
    family: Callable[[float], Curve], *, tpr: float, fpr: float, n_in: int, n_out: int, distance: float
) -> float:
    """The parameter whose curve passes `distance` standardised units below the point (fpr, tpr) at
    n_in and n_out runs (the distance of `Statistic`; bisection to 1e-3, 0 if the curve at 0 is
    closer): the claim a point that far from the judged one would sit at the edge of rejecting."""
    target = distance
    tp, fp = tpr * n_in, fpr * n_out  # fractional counts: only the point matters here

    def distance(parameter: float) -> float:
        pilot = Statistic.of(family(parameter), n_in=n_in, n_out=n_out, centre=(fpr, tpr), reach=math.inf)
        return pilot.value(tp, fp)

    if distance(0.0) <= target:
        return 0.0
    low, high = 0.0, 1.0
    while distance(high) > target and high < 1e3:
        low, high = high, 2.0 * high
    while high - low > 1e-3:
        middle = (low + high) / 2
        low, high = (middle, high) if distance(middle) > target else (low, middle)
    return low
