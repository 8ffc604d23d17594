"""How much a release leaks, and whether it leaks less than a random real subset of the same size,
measured as an attacker who knows the pipeline would measure it.

**The attacker's threshold is fixed before the release is judged.** For every attack, the
reference runs of the release's pipeline (shadow runs, whose coins are public) are scored as
pseudo-targets, each against the other references (`audit.evaluate.pseudo_target_scores`); the
threshold at a false-positive rate α is the score that at most ⌊α·n⌋ of their n pooled
non-member scores exceed (`threshold_at`; an example is flagged when its score is strictly
greater). The strongest attack is chosen on the same pseudo-targets, by the rule
`STRONGEST_RULE`. Neither the custodian's membership nor the release's scores enter either
choice. On the release, the chosen attack flags the examples above its thresholds: the members it
finds (TPR) and the non-members it wrongly flags (the realised FPR) are counted against the
custodian's membership. A threshold set on other runs is what a real attacker would use; the
realised FPR can therefore differ from α, and the report prints both counts.

**The random-subset baseline.** The same measurement is made on S `subset` runs of the same size on
the same pool, each in turn in the release's place with the other S − 1 as its reference runs
(strongest attack and thresholds chosen on those alone: `leave_one_out`). The release's TPR at
`COMPARED_FPR` is then set against the S subset values by a two-sided Student-t prediction test
(`audit.stats.significance.prediction_test`): under the hypothesis that the release's TPR is one
more draw from the (normal) distribution of a random subset's TPR, t = (x − mean) / (s·√(1 + 1/S))
follows Student's t with S − 1 degrees of freedom. The verdict is "less" or "more" when p < α on
that side, else "no measurable difference". It is a statement about this release against the
subset releases of this pool, not about the pipeline in general.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audit.evaluate import StoredRuns, attack_scores, can_choose_on_references, pseudo_target_scores
from audit.stats.significance import prediction_test

#: the false-positive rates at which the attacker's thresholds are set: 1 in 100, 1 in 1,000
FPRS = (0.01, 0.001)
#: the rate whose TPR is compared with the random subsets
COMPARED_FPR = 0.01
STRONGEST_RULE = "the largest TPR at the reference runs' own 1% threshold, then at 0.1%, then registry order"
PREDICTION_TEST = "two-sided Student-t prediction test against the random subsets (S - 1 degrees of freedom)"


def threshold_at(nonmember: np.ndarray, fpr: float) -> float:
    """The threshold t that at most ⌊fpr·n⌋ of the n (non-NaN) `nonmember` scores exceed (flag: score > t):
    the (⌊fpr·n⌋ + 1)-th largest score. E.g. 250 scores at fpr 0.01: ⌊2.5⌋ = 2, t is the 3rd largest."""
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
    """attack -> (scores, membership) of every run of `runs` but `target` scored as a pseudo-target
    against the others but `target` (`audit.evaluate.pseudo_target_scores`), with the views
    `target` was scored with (default "all")."""
    out = {}
    for attack in attacks:
        view = (views or {}).get(attack, "all")
        pseudo, scores = pseudo_target_scores(
            runs, attack, np.array([target]), variance=variance, views=view, most=len(runs.keep)
        )
        out[attack] = (scores, runs.keep[pseudo])
    return out


def release_leakage(
    runs: StoredRuns, scores: dict, choices: dict, member: np.ndarray, *, variance: str
) -> tuple[dict, Flagged]:
    """(summary.json's `release_leakage`, what the strongest attack flags at COMPARED_FPR) of the
    release, the last run of `runs` with `scores` [1, n] per attack: thresholds and the strongest
    attack fixed on the reference runs, then counted against the custodian's `member`."""
    target = len(runs.keep) - 1
    views = {a: (c.views if c is not None else "all") for a, c in choices.items()}
    attacker = choose_attacker(pseudo_scores(runs, list(scores), target, variance=variance, views=views))
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
        "release": as_json[attacker.strongest],
        "attacks": as_json,
    }
    return entry, flagged[attacker.strongest][COMPARED_FPR]


def leave_one_out(runs: StoredRuns, attacks: list[str], *, variance: str) -> list[Flagged]:
    """Each of the S runs (a random subset's release) measured as a release is: the strongest
    attack and its threshold at COMPARED_FPR chosen on the other S - 1 runs as pseudo-targets (each
    against the remaining S - 2), then that attack scored on the run with the other S - 1 as its
    shadows. An attack takes part where those pseudo-targets have enough references
    (`audit.evaluate.can_choose_on_references`)."""
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
        "test": PREDICTION_TEST,
        "t": t,
        "p": p_two,
        "alpha": alpha,
        "outcome": outcome,
    }
