"""How much a release leaks, and whether less than a random real subset of the same size, measured
as an attacker who knows the pipeline would: thresholds and the strongest attack are fixed on the
reference runs as pseudo-targets, never on the custodian's membership or the release's scores; the
subset comparison is a two-sided Student-t prediction test; a figure is at chance by a one-sided
Fisher exact test. What each step promises: docs/contracts.md, "audit.release", "What it does".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from attacks.registry import get_attack
from audit.evaluate import StoredRuns, attack_scores, can_choose_on_references, pseudo_target_scores
from audit.reporting.verdict import rate_words
from audit.stats.significance import prediction_test

#: the false-positive rates at which the attacker's thresholds are set: 1 in 100, 1 in 1,000
FPRS = (0.01, 0.001)
#: the rate whose TPR is compared with the random subsets
COMPARED_FPR = 0.01
STRONGEST_RULE = "the largest TPR at the reference runs' own 1% threshold, then at 0.1%, then registry order"


def prediction_test_name(n_subsets: int) -> str:
    """The test's name as summary.json records it, with its degrees of freedom, S - 1."""
    freedom = "degree" if n_subsets == 2 else "degrees"
    return f"two-sided Student-t prediction test against the random subsets ({n_subsets - 1} {freedom} of freedom)"


#: reference non-member scores expected above a threshold for it to pin its false-positive rate (`runs_needed`)
PINNING_COUNT = 10
GUESSING_TEST = (
    "one-sided Fisher exact test of the members found against the non-members wrongly flagged at the same threshold"
)


def runs_needed(fpr: float, *, n_pool: int, inclusion_rate: float) -> int:
    """The reference runs whose pooled non-member scores pin a threshold at false-positive rate `fpr`:
    with N·f >= `PINNING_COUNT` scores expected above it (Binomial(N, f), relative spread below
    1 / sqrt(N·f): within 32% at 10), so ⌈10 / (f·n_pool·(1 - ρ))⌉ runs, each a pseudo-target with
    about n_pool·(1 - ρ) non-members (docs/contracts.md "What it does", "Too few runs")."""
    per_run = n_pool * (1 - inclusion_rate)
    return max(1, math.ceil(PINNING_COUNT / (fpr * per_run) - 1e-9))


def choice_runs_needed(attacks) -> int:
    """The reference runs the choice of the strongest attack among `attacks` needs: max(2, each
    attack's `min_runs`), since a pseudo-target is scored against the other R - 1."""
    return max(max(2, get_attack(a).min_runs) for a in attacks)


def few_runs_warnings(n_runs: int, *, n_pool: int, inclusion_rate: float, attacks) -> tuple[dict, list[str]]:
    """({"0.01": runs, "0.001": runs, "attack_choice": runs}: what each figure needs, the warnings
    for those that `n_runs` reference runs fall short of), by `runs_needed` and `choice_runs_needed`."""
    needed = {str(f): runs_needed(f, n_pool=n_pool, inclusion_rate=inclusion_rate) for f in FPRS}
    needed["attack_choice"] = choice_runs_needed(attacks)
    per_run = n_pool * (1 - inclusion_rate)
    warnings = []
    for fpr in FPRS:
        if n_runs < needed[str(fpr)]:
            pinning = math.ceil(PINNING_COUNT / fpr - 1e-9)
            warnings.append(
                f"--n-shadow {n_runs} is too few for the {rate_words(fpr)} figure: its threshold is set on about "
                f"{n_runs * per_run:,.0f} reference non-member scores ({per_run:,.0f} per run: {n_pool:,} examples at "
                f"inclusion rate {inclusion_rate:g}), and pinning its rate takes {pinning:,} ({PINNING_COUNT} "
                f"expected above it); {needed[str(fpr)]} runs would do"
            )
    if n_runs < needed["attack_choice"]:
        short = [a for a in attacks if n_runs < max(2, get_attack(a).min_runs)]
        warnings.append(
            f"--n-shadow {n_runs} is too few to choose the strongest attack: each reference run is scored against "
            f"the other {n_runs - 1}, and {', '.join(short)} need {needed['attack_choice']} runs; "
            f"{needed['attack_choice']} runs would do"
        )
    return needed, warnings


def threshold_at(nonmember: np.ndarray, fpr: float) -> float:
    """The threshold t that at most ⌊fpr·n⌋ of the n (non-NaN) `nonmember` scores exceed (flag: score > t)."""
    scores = np.sort(nonmember[~np.isnan(nonmember)])[::-1]
    if scores.size == 0:
        raise ValueError("no non-member score to set a threshold on")
    k = int(np.floor(fpr * scores.size + 1e-9))
    return float(scores[k]) if k < scores.size else -np.inf


@dataclass(frozen=True)
class Flagged:
    """What one attack at one threshold flags on one run: members found and non-members wrongly flagged."""

    fpr: float  # the rate the threshold was set for, on the reference runs
    threshold: float
    members_flagged: int
    members: int
    nonmembers_flagged: int
    nonmembers: int

    @property
    def tpr(self) -> float:
        return self.members_flagged / self.members if self.members else float("nan")

    @property
    def realised_fpr(self) -> float:
        return self.nonmembers_flagged / self.nonmembers if self.nonmembers else float("nan")

    def to_json(self) -> dict:
        return {
            "fpr": self.fpr,
            "threshold": self.threshold,
            "members_flagged": self.members_flagged,
            "members": self.members,
            "tpr": self.tpr,
            "nonmembers_flagged": self.nonmembers_flagged,
            "nonmembers": self.nonmembers,
            "realised_fpr": self.realised_fpr,
            "p_guessing": guessing_p(self),
        }


def flag(scores: np.ndarray, member: np.ndarray, *, threshold: float, fpr: float) -> Flagged:
    """Count the examples of one run above `threshold` (NaN scores count nowhere)."""
    scored = ~np.isnan(scores)
    above = scored & (np.where(scored, scores, -np.inf) > threshold)
    return Flagged(
        fpr=fpr,
        threshold=threshold,
        members_flagged=int((above & member).sum()),
        members=int((scored & member).sum()),
        nonmembers_flagged=int((above & ~member).sum()),
        nonmembers=int((scored & ~member).sum()),
    )


def guessing_p(found: Flagged) -> float:
    """How far the members found (x of m) are above guessing, against the non-members flagged at the
    same threshold (y of n, the realised FPR): p = P(H ≥ x), H ~ Hypergeometric(m + n, x + y, m), a
    one-sided Fisher exact test (GUESSING_TEST). NaN without members or non-members."""
    m, n, x, y = found.members, found.nonmembers, found.members_flagged, found.nonmembers_flagged
    if not m or not n:
        return float("nan")
    return float(stats.hypergeom.sf(x - 1, m + n, x + y, m))


def at_chance(found: Flagged, *, alpha: float) -> bool:
    """Whether a figure is no better than guessing: TPR ≤ the realised FPR, or `guessing_p` ≥ `alpha`."""
    p = guessing_p(found)
    return bool(found.tpr <= found.realised_fpr or not p < alpha)


@dataclass(frozen=True)
class AttackerChoice:
    """What the reference runs fix before a release is judged: the strongest attack and, per attack
    and false-positive rate, the threshold; with the pseudo-targets' own TPR for the record."""

    strongest: str
    thresholds: dict  # attack -> {fpr: threshold}
    reference_tpr: dict  # attack -> {fpr: pooled TPR of the pseudo-targets at that threshold}
    n_pseudo: int


def choose_attacker(pseudo: dict[str, tuple[np.ndarray, np.ndarray]]) -> AttackerChoice:
    """`pseudo`: attack -> (scores [P, n], membership [P, n]) of the pseudo-targets, in registry
    order. Thresholds at each of FPRS and the strongest attack by STRONGEST_RULE."""
    thresholds, tprs, ranking = {}, {}, []
    for order, (attack, (scores, keep)) in enumerate(pseudo.items()):
        thresholds[attack], tprs[attack] = {}, {}
        for fpr in FPRS:
            t = threshold_at(scores[~keep], fpr)
            thresholds[attack][fpr] = t
            tprs[attack][fpr] = flag(scores.ravel(), keep.ravel(), threshold=t, fpr=fpr).tpr
        ranking.append((tprs[attack][FPRS[0]], tprs[attack][FPRS[1]], -order, attack))
    n_pseudo = len(next(iter(pseudo.values()))[0])
    return AttackerChoice(max(ranking)[3], thresholds, tprs, n_pseudo)


def pseudo_scores(
    runs: StoredRuns, attacks: list[str], target: int, *, variance: str, views: dict[str, str] | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """attack -> (scores, membership) of every run but `target` scored as a pseudo-target against the
    others but `target`, with the views `target` was scored with (default "all")."""
    out = {}
    for attack in attacks:
        view = (views or {}).get(attack, "all")
        pseudo, scores = pseudo_target_scores(
            runs, attack, np.array([target]), variance=variance, views=view, most=len(runs.keep)
        )
        out[attack] = (scores, runs.keep[pseudo])
    return out


def release_leakage(
    runs: StoredRuns,
    scores: dict,
    choices: dict,
    member: np.ndarray,
    *,
    variance: str,
    inclusion_rate: float,
    alpha: float,
) -> tuple[dict, Flagged]:
    """summary.json's `release_leakage` of the release, the last run of `runs` (`scores` [1, n] per attack): what the
    strongest attack flags at COMPARED_FPR, thresholds and attack fixed on the reference runs, counted against the
    custodian's `member`, with `at_chance` at `alpha` and the warnings of too few reference runs."""
    target = len(runs.keep) - 1
    views = {a: (c.views if c is not None else "all") for a, c in choices.items()}
    pseudo = pseudo_scores(runs, list(scores), target, variance=variance, views=views)
    attacker = choose_attacker(pseudo)
    needed, warnings = few_runs_warnings(
        target, n_pool=runs.keep.shape[1], inclusion_rate=inclusion_rate, attacks=list(scores)
    )
    pseudo_scored, pseudo_keep = pseudo[attacker.strongest]
    flagged = {
        a: {fpr: flag(scores[a][0], member, threshold=attacker.thresholds[a][fpr], fpr=fpr) for fpr in FPRS}
        for a in scores
    }
    as_json = {a: {str(fpr): f.to_json() for fpr, f in by_rate.items()} for a, by_rate in flagged.items()}
    entry = {
        "strongest": attacker.strongest,
        "rule": STRONGEST_RULE,
        "pseudo_targets": attacker.n_pseudo,
        "reference_tpr": {a: {str(f): t for f, t in v.items()} for a, v in attacker.reference_tpr.items()},
        "reference_nonmembers": int((~pseudo_keep & ~np.isnan(pseudo_scored)).sum()),
        "release": as_json[attacker.strongest],
        "attacks": as_json,
        "guessing_test": GUESSING_TEST,
        "alpha": alpha,
        "at_chance": [str(f) for f in FPRS if at_chance(flagged[attacker.strongest][f], alpha=alpha)],
        "runs_needed": needed,
        "warnings": warnings,
    }
    return entry, flagged[attacker.strongest][COMPARED_FPR]


def leave_one_out(runs: StoredRuns, attacks: list[str], *, variance: str) -> list[Flagged]:
    """Each of the S subset runs measured as a release is: attack and threshold at COMPARED_FPR chosen
    on the other S - 1 as pseudo-targets, then scored with them as its shadows."""
    out = []
    for run in range(len(runs.keep)):
        target = np.array([run])
        usable = [a for a in runs.available(tuple(attacks)) if can_choose_on_references(runs, a, target)]
        choice = choose_attacker(pseudo_scores(runs, usable, run, variance=variance))
        scores = attack_scores(runs, choice.strongest, target, variance=variance)[0]
        threshold = choice.thresholds[choice.strongest][COMPARED_FPR]
        out.append(flag(scores, runs.keep[run], threshold=threshold, fpr=COMPARED_FPR))
    return out


def compare_with_subsets(release: Flagged, subsets: list[Flagged], *, alpha: float) -> dict:
    """The release's TPR at COMPARED_FPR against the subset runs' (summary.json's `subset_baseline`)."""
    values = np.array([f.tpr for f in subsets])
    t, p_less, p_more = prediction_test(release.tpr, values)
    p_two = min(1.0, 2 * min(p_less, p_more))
    outcome = "no measurable difference"
    if p_two < alpha:
        outcome = "less" if release.tpr < values.mean() else "more"
    return {
        "statistic": f"TPR at the {COMPARED_FPR:.0%} threshold of each release's strongest attack",
        "release_tpr": release.tpr,
        "subset_tpr": values.tolist(),
        "subset_median": float(np.median(values)),
        "subset_p5": float(np.percentile(values, 5)),
        "subset_p95": float(np.percentile(values, 95)),
        "subsets_below_release": int((values < release.tpr).sum()),
        "test": prediction_test_name(len(values)),
        "t": t,
        "p": p_two,
        "alpha": alpha,
        "outcome": outcome,
    }
