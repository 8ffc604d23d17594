"""Which canaries an audit guesses on, and every one-run bound of one set of guesses.

A one-run bound holds for guesses by a rule that never sees the coins it is judged on: the k₊ highest scores guessed IN,
the k₋ lowest OUT (ties by a coin-independent order), the counts chosen by ``"tuned"`` (one count chosen on the
reference runs as pseudo-targets, at the full level) or ``"grid"`` (every count of `audit.stats.epsilon.guess_grid` at
Bonferroni's level). `bounds_of` reports every bound of `audit.stats.bounds` beside the ceiling of a perfect attack;
`verdict_bound` is the one a verdict rests on (`audit.stats.bounds.VERDICT_BOUND`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy import stats

from audit.stats import epsilon as steinke
from audit.stats import fdp
from audit.stats.bounds import BOUNDS, FDP, GAUSSIAN, MECHANISM, VERDICT_BOUND, get_bound
from audit.stats.epsilon import Guesses, RankedGuesses, guess_grid
from audit.stats import mechanism as claimed
from audit.stats.mechanism import SubsampledGaussian

RULES = ("tuned", "grid")
#: total guesses r a tuned rule may choose, as r = round(m · 2^(-j/2)), j = 0, 1, ...; share of IN guesses
TUNED_STEPS_PER_HALVING = 2
TUNED_IN_SHARES = (1.0, 0.5)
#: the one-sided level of the lower limit on the pseudo-targets' precision a tuned count is predicted from
TUNING_PRECISION_LEVEL = 0.84
#: the count fixed in advance (`fixed_count`) guesses about this many times √m canaries
FIXED_GUESSES_PER_ROOT_M = 4


def check_analysis(analysis: str) -> str:
    get_bound(analysis)
    return analysis


def bound_at(
    analysis: str,
    *,
    m: int,
    guesses: int,
    correct: int,
    delta: float,
    alpha: float,
    at_least: float = 0.0,
    mechanism: SubsampledGaussian | None = None,
) -> float:
    """One count's bound at level `alpha` by the registered bound `analysis` (`audit.stats.bounds`:
    ε, or μ for a μ bound). With `at_least` > 0 a count that cannot beat it returns 0 after a
    single test. A bound that tests a claimed mechanism (`Bound.needs_mechanism`) needs `mechanism`."""
    bound = get_bound(analysis)
    kwargs = dict(m=m, guesses=guesses, correct=correct, delta=delta, alpha=alpha, at_least=at_least)
    if bound.needs_mechanism:
        if mechanism is None:
            raise ValueError(f"bound {analysis!r} tests a claimed mechanism: pass mechanism=")
        return bound.test(**kwargs, mechanism=mechanism)
    return bound.test(**kwargs)


def applicable(mechanism: SubsampledGaussian | None, delta: float, rule: str = "tuned") -> tuple[str, ...]:
    """The analyses an audit computes under `rule`: every registered bound, less those that test a
    claimed mechanism when the runs record none or δ = 0 (a Gaussian mechanism has no pure ε), and
    under "grid" less those too (a family search per grid count would build its curves by the
    hundred; the verdict's grid fallback tests the mechanism itself, `mechanism_verdict`)."""
    return tuple(
        b.name for b in BOUNDS if not b.needs_mechanism or (mechanism is not None and delta > 0.0 and rule == "tuned")
    )


#: the tests a verdict's one decision rests on (summary.json `verdict.levels`, `verdict.rejected_by`)
EPS_TEST, OWN_CURVE = "eps_verdict", "own_curve"


def verdict_levels(mechanism: SubsampledGaussian | None, delta: float, confidence: float) -> dict[str, float]:
    """The tests of a verdict's one decision at total `confidence`, each with its level: the f_{ε,δ} test alone at
    `confidence`, or, where the runs record a mechanism whose own curve is tested (`applicable`), both at 1 - (1 -
    confidence) / 2, the claim rejected if either rejects. A pipeline meeting its claim satisfies both nulls, so
    P[either rejects] <= 1 - confidence (Bonferroni). Which tests run is fixed by the runs' metadata, never by a score.
    """
    tests = (EPS_TEST, OWN_CURVE) if MECHANISM.name in applicable(mechanism, delta) else (EPS_TEST,)
    return {test: 1.0 - (1.0 - confidence) / len(tests) for test in tests}


class BoundCache:
    """`bound_at` with its answers remembered, to share work across `tune`, `ceiling` and `bounds_of` calls on the same
    designs; same results. bound_at(..., at_least=a) returns the bound v if the claim at a is rejected (v >= a), else 0.
    Per key (analysis, m, guesses, correct, δ, α) it keeps the exact v once returned, or else the smallest a the bound
    was found below, and answers from that when it can (rejection is monotone)."""

    def __init__(self) -> None:
        self.exact: dict[tuple, float] = {}
        self.below: dict[tuple, float] = {}

    def bound(
        self,
        analysis: str,
        *,
        m: int,
        guesses: int,
        correct: int,
        delta: float,
        alpha: float,
        at_least: float = 0.0,
        mechanism: SubsampledGaussian | None = None,
    ) -> float:
        key = (analysis, m, guesses, correct, delta, alpha, mechanism if get_bound(analysis).needs_mechanism else None)
        if key in self.exact:
            value = self.exact[key]
            return value if value >= at_least else 0.0
        if key in self.below and at_least >= self.below[key]:
            return 0.0
        value = bound_at(
            analysis,
            m=m,
            guesses=guesses,
            correct=correct,
            delta=delta,
            alpha=alpha,
            at_least=at_least,
            mechanism=mechanism,
        )
        if value > 0.0 or at_least == 0.0:
            self.exact[key] = value
        else:
            self.below[key] = min(at_least, self.below.get(key, math.inf))
        return value


def _bound(cache: BoundCache | None, analysis: str, **kwargs) -> float:
    return bound_at(analysis, **kwargs) if cache is None else cache.bound(analysis, **kwargs)


def grid_counts(m: int, confidence: float) -> tuple[tuple[Guesses, ...], float]:
    """The grid's counts (`audit.stats.epsilon.guess_grid`) and the Bonferroni level of each."""
    grid = tuple(Guesses(*pair) for pair in guess_grid(m))
    return grid, (1.0 - confidence) / len(grid)


def best_count(
    ranked: RankedGuesses,
    counts,
    *,
    analysis: str,
    delta: float,
    alpha: float,
    cache: BoundCache | None = None,
    mechanism: SubsampledGaussian | None = None,
) -> tuple[float, Guesses, int]:
    """(bound, count, correct guesses) of the count among `counts` whose bound at level `alpha` is
    largest; the first count (bound 0) if none rejects anything."""
    value, chosen = 0.0, counts[0]
    for count in counts:
        found = _bound(
            cache,
            analysis,
            m=ranked.m,
            guesses=count.total,
            correct=ranked.correct(count),
            delta=delta,
            alpha=alpha,
            at_least=value,
            mechanism=mechanism,
        )
        if found > value:
            value, chosen = found, count
    return value, chosen, ranked.correct(chosen)


@functools.lru_cache(maxsize=256)
def tuned_candidates(m: int) -> tuple[Guesses, ...]:
    """The counts a tuned rule chooses among, fixed by m: r = round(m 2^(-j/2)) down to 1, all IN
    or half IN (top) and half OUT (bottom). Remembered per m (every `tune` and `ceiling` asks)."""
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    totals, j = [], 0
    while True:
        r = max(1, int(round(m * 2.0 ** (-j / TUNED_STEPS_PER_HALVING))))
        if r not in totals:
            totals.append(r)
        if r == 1:
            break
        j += 1
    candidates = []
    for r in totals:
        for share in TUNED_IN_SHARES:
            k_in = max(1, int(round(share * r)))
            pair = Guesses(k_in, r - k_in)
            if pair not in candidates:
                candidates.append(pair)
    return tuple(candidates)


def fixed_count(m: int) -> Guesses:
    """The guess count fixed before any run, for when the reference runs cannot tell counts apart (every predicted bound
    0): the half-IN candidate of `tuned_candidates(m)` whose total is nearest `FIXED_GUESSES_PER_ROOT_M` √m (the larger
    on a tie). A function of m alone, so any test at it holds at its full level (why 4√m: docs/results/tightness.md).
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    target = FIXED_GUESSES_PER_ROOT_M * math.sqrt(m)
    halves = [g for g in tuned_candidates(m) if g.k_out > 0 or g.total == 1]
    return min(halves, key=lambda g: (abs(g.total - target), -g.total))


@dataclass(frozen=True)
class TunedChoice:
    """The count a tuned rule chose for one analysis, with the bound it predicted at the real m."""

    guesses: Guesses
    predicted: float  # the predicted bound (ε, or μ for a μ bound) at the real m
    z: float  # how far the pseudo-targets' correct count lies above chance at that count (tie-break)


@functools.lru_cache(maxsize=65536)
def cautious_precision(hits: int, total: int, *, level: float = TUNING_PRECISION_LEVEL) -> float:
    """A one-sided Clopper-Pearson lower limit at `level` on the precision behind `hits` right guesses of `total` on the
    pseudo-targets: a count perfect on a few reference guesses is not trusted to be perfect on the targets. Cached
    (`tune` asks it for every candidate of every analysis)."""
    if hits <= 0:
        return 0.0
    return float(stats.beta.ppf(1.0 - level, hits, total - hits + 1))


def tune(
    pseudo: RankedGuesses,
    *,
    m: int,
    analysis: str,
    delta: float,
    confidence: float,
    cache: BoundCache | None = None,
) -> TunedChoice:
    """The candidate count (`tuned_candidates(m)`) whose bound at the real m, predicted from the pseudo-targets'
    cautious precision at the same fractions of their m, is largest; ties go to the most standard deviations above
    chance. `pseudo` must rank the reference runs' scores against their public coins only. A claimed mechanism's test
    takes the Gaussian family's count (`GAUSSIAN`)."""
    if get_bound(analysis).needs_mechanism:
        return tune(pseudo, m=m, analysis=GAUSSIAN.name, delta=delta, confidence=confidence, cache=cache)
    check_analysis(analysis)
    steinke._check_confidence(confidence)
    alpha = 1.0 - confidence
    best: TunedChoice | None = None
    for candidate in tuned_candidates(m):
        small = candidate.scaled(m, pseudo.m)
        if small.total > pseudo.m:
            continue
        hits = pseudo.correct(small)
        precision = cautious_precision(hits, small.total)
        correct = min(candidate.total, int(math.floor(precision * candidate.total)))
        z = (hits / small.total - 0.5) * math.sqrt(small.total) / 0.5
        at_least = best.predicted if best is not None else 0.0
        value = _bound(
            cache,
            analysis,
            m=m,
            guesses=candidate.total,
            correct=correct,
            delta=delta,
            alpha=alpha,
            at_least=at_least,
        )
        if best is None or value > best.predicted or (value == best.predicted and z > best.z):
            best = TunedChoice(candidate, value, z)
    if best is None:
        raise ValueError(f"no candidate count fits {pseudo.m} pseudo-target canaries")
    return best


def ceiling(
    m: int,
    *,
    analysis: str,
    rule: str,
    delta: float,
    confidence: float,
    cache: BoundCache | None = None,
    mechanism: SubsampledGaussian | None = None,
) -> float:
    """What a perfect attack (every guess right) certifies under `rule`: "grid", the best grid count at (1 -
    confidence)/|grid|; "tuned", the best candidate count at 1 - confidence. ε, or μ for a μ bound; for a claimed
    mechanism's curve, at the Gaussian family's peak total only. Without a `cache`, remembered per arguments."""
    check_analysis(analysis)
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    steinke._check_confidence(confidence)
    if cache is None:
        return _remembered_ceiling(m, analysis, rule, delta, confidence, mechanism)
    return _ceiling(m, analysis, rule, delta, confidence, cache, mechanism)


@functools.lru_cache(maxsize=4096)
def _remembered_ceiling(
    m: int, analysis: str, rule: str, delta: float, confidence: float, mechanism: SubsampledGaussian | None
) -> float:
    return _ceiling(m, analysis, rule, delta, confidence, None, mechanism)


def _ceiling(
    m: int,
    analysis: str,
    rule: str,
    delta: float,
    confidence: float,
    cache: BoundCache | None,
    mechanism: SubsampledGaussian | None,
) -> float:
    """`ceiling`'s search, its arguments checked."""
    if rule == "grid":
        counts, alpha = grid_counts(m, confidence)
        totals = sorted({g.total for g in counts})
    else:
        totals, alpha = sorted({g.total for g in tuned_candidates(m)}), 1.0 - confidence
    if get_bound(analysis).needs_mechanism:
        # one family search, at the total where a perfect attack certifies the most μ (the same test
        # at q = 1): a search per total would build curves by the hundred. A lower estimate of the max.
        mu_best = [
            (_bound(cache, GAUSSIAN.name, m=m, guesses=r, correct=r, delta=delta, alpha=alpha), r) for r in totals
        ]
        totals = [max(mu_best)[1]]
    best = 0.0
    for r in totals:
        best = max(
            best,
            _bound(
                cache, analysis, m=m, guesses=r, correct=r, delta=delta, alpha=alpha, at_least=best, mechanism=mechanism
            ),
        )
    return best


def bounds_of(
    member_scores,
    nonmember_scores,
    *,
    delta: float,
    confidence: float,
    rng=None,
    tuned: dict[str, Guesses] | None = None,
    cache: BoundCache | None = None,
    mechanism: SubsampledGaussian | None = None,
) -> dict:
    """Every registered bound (`audit.stats.bounds.BOUNDS`) of one group of canaries (member = coin IN) under "tuned"
    (each analysis's count in `tuned`) or "grid"; a claimed mechanism's bound under "tuned" only, else null. Returns
    summary.json keys (`audit.stats.bounds.SUMMARY_KEYS`)."""
    steinke._check_delta(delta)
    steinke._check_confidence(confidence)
    ranked = RankedGuesses.of(member_scores, nonmember_scores, rng=rng)
    m = ranked.m
    rule = "grid" if tuned is None else "tuned"
    values, used = {}, {}
    names = applicable(mechanism, delta, rule)
    computed = [b for b in BOUNDS if b.name in names and (tuned is None or b.name in tuned)]
    for bound in computed:
        if tuned is not None:
            counts, alpha = (tuned[bound.name],), 1.0 - confidence
        else:
            counts, alpha = grid_counts(m, confidence)
        value, guesses, correct = best_count(
            ranked, counts, analysis=bound.name, delta=delta, alpha=alpha, cache=cache, mechanism=mechanism
        )
        values[bound.name] = value
        used[bound.name] = {"k_in": guesses.k_in, "k_out": guesses.k_out, "correct": correct}
    entry = {"guess_rule": rule}
    for bound in BOUNDS:  # the ceilings after every bound: a shared `cache` sees the calls in the same order
        if bound not in computed:
            entry.update({key: None for key in bound.keys})
            continue
        entry[bound.lower_key] = float(values[bound.name])
        entry[bound.ceiling_key] = float(
            ceiling(
                m, analysis=bound.name, rule=rule, delta=delta, confidence=confidence, cache=cache, mechanism=mechanism
            )
        )
        if bound.epsilon_key:
            entry[bound.epsilon_key] = bound.to_epsilon(values[bound.name], delta)
    return {**entry, "guesses": used}


def fdp_epsilon_lower_bound(
    member_scores,
    nonmember_scores,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    tradeoff: str = "eps-delta",
    rng=None,
    guesses: Guesses | None = None,
) -> float:
    """The largest ε that the f-DP one-run test (`audit.stats.fdp`) rejects at `confidence`.

    `tradeoff` "eps-delta": the largest ε whose f_{ε,δ} is rejected; "gaussian": the ε at `delta` (> 0) of the largest
    rejected μ (valid only for a Gaussian trade-off). Guesses: the grid with Bonferroni, or `guesses` at the full level
    if fixed without these coins. Scores must be canaries' under independent fair coins; without signal it returns 0
    with probability >= `confidence`.
    """
    steinke._check_delta(delta)
    steinke._check_confidence(confidence)
    fdp.check_tradeoff(tradeoff)
    if tradeoff == "gaussian" and delta == 0.0:
        raise ValueError(
            f"the gaussian trade-off needs delta > 0, got {delta} (mu-GDP with mu > 0 implies no pure epsilon)"
        )
    bound = FDP if tradeoff == "eps-delta" else GAUSSIAN
    ranked = RankedGuesses.of(member_scores, nonmember_scores, rng=rng)
    counts, alpha = ((guesses,), 1.0 - confidence) if guesses is not None else grid_counts(ranked.m, confidence)
    best, _, _ = best_count(ranked, counts, analysis=bound.name, delta=delta, alpha=alpha)
    return best if bound.unit == "eps" else float(bound.to_epsilon(best, delta))


def verdict_bound(
    groups: dict, *, chosen: str | None, guesses: Guesses | None, delta: float, confidence: float, rng_of
) -> dict:
    """The one ε lower bound a verdict rests on (`audit.stats.bounds.VERDICT_BOUND`, the f-DP test of f_{ε,δ}), paid
    for: `groups` maps each attack to its canaries' (member, non-member) scores. With `chosen` and `guesses` (from the
    reference runs) one test at the full `confidence`; else every attack on the grid at Bonferroni's level. Returns
    summary.json's `verdict` keys."""
    steinke._check_delta(delta)
    steinke._check_confidence(confidence)
    if not groups:
        raise ValueError("verdict_bound needs at least one attack")
    analysis = VERDICT_BOUND.name
    if chosen is not None:
        if chosen not in groups or guesses is None:
            raise ValueError(f"the chosen attack {chosen!r} needs its scores and its guess count")
        member, nonmember = groups[chosen]
        ranked = RankedGuesses.of(member, nonmember, rng=rng_of(chosen))
        value, _, correct = best_count(ranked, (guesses,), analysis=analysis, delta=delta, alpha=1.0 - confidence)
        bounds = {chosen: float(value)}
        ceilings = {
            chosen: float(ceiling(ranked.m, analysis=analysis, rule="tuned", delta=delta, confidence=confidence))
        }
        each, rule = confidence, "tuned"
        used = {"k_in": guesses.k_in, "k_out": guesses.k_out, "correct": correct}
    else:
        each, rule, used = 1.0 - (1.0 - confidence) / len(groups), "grid", None
        bounds, ceilings = {}, {}
        for attack, (member, nonmember) in groups.items():
            ranked = RankedGuesses.of(member, nonmember, rng=rng_of(attack))
            counts, alpha = grid_counts(ranked.m, each)
            bounds[attack] = float(best_count(ranked, counts, analysis=analysis, delta=delta, alpha=alpha)[0])
            m = len(member) + len(nonmember)
            ceilings[attack] = float(ceiling(m, analysis=analysis, rule="grid", delta=delta, confidence=each))
    best = max(bounds, key=lambda a: bounds[a])
    return {
        "analysis": VERDICT_BOUND.about,
        "rule": rule,
        "attack": chosen if chosen is not None else best,
        "eps_lower": bounds[best],
        "eps_ceiling": max(ceilings.values()),
        "confidence": float(confidence),
        "per_attack_confidence": float(each),
        "delta": float(delta),
        "guesses": used,
        "bounds": bounds,
        "ceilings": ceilings,
    }


def mechanism_verdict(
    groups: dict,
    *,
    chosen: str | None,
    guesses: Guesses | None,
    mechanism: SubsampledGaussian,
    delta: float,
    confidence: float,
    rng_of,
) -> dict:
    """summary.json's `verdict.mechanism`: the f-DP test of the claimed mechanism's own curve (`audit.stats.mechanism`):
    with `chosen` and `guesses` one test at the full `confidence`, else every attack on the grid at Bonferroni's share.
    `rejected`: the claimed (σ, q, T) is rejected (`audit.stats.mechanism.claim_rejected`). `noise_rejected` (σ*) and
    `eps_lower`: the strongest family member ruled out and its ε at `delta`, bracketed from below (0 when none).
    `eps_claimed`: the claimed mechanism's ε at `delta`, bracketed from above."""
    if chosen is not None and guesses is not None:
        member, nonmember = groups[chosen]
        ranked = RankedGuesses.of(member, nonmember, rng=rng_of(chosen))
        each, rule = confidence, "tuned"
        trials = [(chosen, ranked, (guesses,), 1.0 - confidence)]
    else:
        each, rule = 1.0 - (1.0 - confidence) / len(groups), "grid"
        trials = []
        for attack, (member, nonmember) in groups.items():
            ranked = RankedGuesses.of(member, nonmember, rng=rng_of(attack))
            trials.append((attack, ranked, *grid_counts(ranked.m, each)))
    best = None  # (σ*, attack, count, correct); the claim on the searched grid, so σ* decides `rejected`
    for attack, ranked, counts, alpha in trials:
        for count in counts:
            test = dict(m=ranked.m, guesses=count.total, correct=ranked.correct(count), alpha=alpha)
            sigma = claimed.smallest_rejected_noise(
                mechanism.sample_rate, mechanism.steps, **test, claimed_noise=mechanism.noise_multiplier
            )
            if sigma is not None and (best is None or sigma < best[0]):
                best = (sigma, attack, count, test["correct"])
    rejected = claimed.claim_rejected(None if best is None else best[0], mechanism)
    m = trials[0][1].m
    ceiling_value = ceiling(m, analysis=MECHANISM.name, rule=rule, delta=delta, confidence=each, mechanism=mechanism)
    if best is None:
        lower, attack, used = 0.0, chosen if rule == "tuned" else None, None
    else:
        sigma, attack, count, correct = best
        lower = math.inf if sigma == 0.0 else claimed.epsilon_at(mechanism.with_noise(sigma), delta, side="lower")
        used = {"k_in": count.k_in, "k_out": count.k_out, "correct": correct}
    return {
        "analysis": MECHANISM.about,
        "claimed": mechanism.to_json(),
        "eps_claimed": float(claimed.epsilon_at(mechanism, delta)),
        "rejected": bool(rejected),
        "noise_rejected": None if best is None else float(best[0]),
        "eps_lower": float(lower),
        "eps_ceiling": float(ceiling_value),
        "rule": rule,
        "attack": attack,
        "confidence": float(confidence),
        "per_attack_confidence": float(each),
        "delta": float(delta),
        "guesses": used,
    }


def _rising_ceilings(*, analysis: str, rule: str, delta: float, confidence: float, most: int):
    """(m, ceiling) for m = 1, 2, 4, ... up to `most`, stopping once the ceiling falls (with δ > 0
    Steinke et al.'s ceiling peaks, then falls: past the peak more canaries do not help)."""
    m, previous = 1, -1.0
    while m <= most:
        value = ceiling(m, analysis=analysis, rule=rule, delta=delta, confidence=confidence)
        if value < previous:
            return
        yield m, value
        m, previous = 2 * m, value


def canaries_needed(
    claimed_epsilon: float,
    *,
    analysis: str = VERDICT_BOUND.name,
    rule: str = "tuned",
    delta: float = 0.0,
    confidence: float = 0.95,
    most: int = steinke.MOST_CANARIES,
) -> int | None:
    """The fewest canaries (a power of 2) whose ceiling under `analysis` and `rule` exceeds
    `claimed_epsilon`; None if none up to `most`, or up to the ceiling's peak, does."""
    return next(
        (
            m
            for m, value in _rising_ceilings(
                analysis=analysis, rule=rule, delta=delta, confidence=confidence, most=most
            )
            if value > claimed_epsilon
        ),
        None,
    )


def most_certifiable(
    *,
    analysis: str = VERDICT_BOUND.name,
    rule: str = "tuned",
    delta: float,
    confidence: float,
    most: int = steinke.MOST_CANARIES,
) -> float:
    """The largest ceiling over m = 1, 2, 4, ... canaries (up to its peak or `most`)."""
    return max(
        value
        for _, value in _rising_ceilings(analysis=analysis, rule=rule, delta=delta, confidence=confidence, most=most)
    )
