"""Every attack an audit can run, registered once: its name, what it needs from the run store,
how many runs it needs, and its scoring function.

Evaluation (`audit.evaluate`), the command lines (`audit.lira`, `audit.ganleak`,
`audit.release`) and the report loop over `REGISTRY`; a new attack is one entry here and a test
in the contract suite (tests/attacks/test_registry.py), which holds every entry to the audit's
rule: an attack scores each target run [T, n] from that target's outputs and the reference runs
(`shadows`, bool [T, R]) alone, so no guess depends on a target's own coins.

`score(runs, targets, shadows, variance)` reads the per-run arrays of an `audit.evaluate.StoredRuns`
(`keep` [R, n], `confidence` [R, n, Q], `loss` [R, n], `dcr` [R, n] or None, `recon` kind ->
[R, n] or None); `shadows` is None for an attack that calibrates on no reference run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from attacks.ganleak import calibrated_scores, log_loss_statistic, reconstruction_scores
from attacks.lira import lira_offline, lira_online
from attacks.rmia import rmia_offline, rmia_online
from attacks.whitebox import likelihood_ratio, run_scores, step_changes, summed_projection

#: families: what an attack observes. "model": the downstream model trained on the victim's
#: output (its logits on the pool); "release": the released synthetic set itself (distances);
#: "generator": a generator's reconstruction losses (GAN-Leaks); "mechanism": every noisy sum of a
#: DP victim's Gaussian mechanism, through the canaries' projections (white-box audits)
FAMILIES = ("model", "release", "generator", "mechanism")
RELEASE = "release"  # `needs` of an attack on the released set: every run stored release_x, release_y
WHITEBOX = "whitebox"  # `needs` of a white-box attack: every run stored its canaries' step observations
HEADLINE_ATTACK = "lira_online"  # the attack whose examples at highest risk the report shows, when scored


@dataclass(frozen=True)
class Attack:
    """One registered attack."""

    name: str
    family: str  # one of FAMILIES
    needs: str | None  # beyond the logits every run stores: RELEASE, or a GAN-Leaks reconstruction kind
    min_runs: int  # runs (targets and references) an audit needs for it
    calibrated: bool  # whether it calibrates on the reference runs (then `score` gets `shadows`)
    score: Callable[[Any, np.ndarray, np.ndarray | None, str], np.ndarray]
    about: str  # what the score is, in one line
    query_views: bool = False  # whether it averages per-view confidences (`runs.confidence` [R, n, Q]) over query views

    def available(self, runs) -> bool:
        """Whether `runs` (a StoredRuns) hold what this attack needs."""
        if self.needs is None:
            return True
        if self.needs == RELEASE:
            return runs.dcr is not None
        if self.needs == WHITEBOX:
            return runs.whitebox is not None
        return self.needs in (runs.recon or {})

    def missing(self) -> str:
        """Why it cannot be scored on runs that lack what it needs (one line)."""
        if self.needs == RELEASE:
            return f"{self.name} needs the released synthetic set, and these runs stored none"
        if self.needs == WHITEBOX:
            return (
                f"{self.name} needs the white-box canary observations (--threat-model white-box), "
                "and these runs stored none"
            )
        return f"{self.name} needs the {self.needs} reconstruction losses of a generator, and these runs stored none"


def _dcr_lira(runs, targets, shadows, variance):
    # DCR calibrated per example: how far the target's distance falls below the distances of the
    # same example in the OUT shadows (offline LiRA on the DCR statistic). Offline, because an IN
    # example is in or behind the release of only some of its IN shadows, so its IN distribution
    # is a mixture that one Gaussian describes badly.
    return lira_offline(runs.dcr[..., None], runs.keep, targets, shadows=shadows, variance=variance)


def _whitebox(statistic):  # statistic(observations [steps, m], the run's whitebox_mechanism) -> [m]
    def score(runs, targets, shadows, variance):
        return run_scores(
            statistic,
            runs.whitebox,
            [m["whitebox_mechanism"] for m in runs.meta],
            runs.whitebox_rows,
            runs.keep.shape[1],
            targets,
        )

    return score


REGISTRY: tuple[Attack, ...] = (
    Attack(
        "loss",
        "model",
        None,
        1,
        False,
        lambda runs, targets, shadows, variance: -runs.loss[targets],
        "minus the cross-entropy of the target's model on the example",
    ),
    Attack(
        "lira_online",
        "model",
        None,
        4,
        True,
        lambda runs, targets, shadows, variance: lira_online(
            runs.confidence, runs.keep, targets, shadows=shadows, variance=variance
        ),
        "LiRA: likelihood ratio of the logit-scaled confidence under Gaussians fitted on IN and OUT shadows",
        query_views=True,
    ),
    Attack(
        "lira_offline",
        "model",
        None,
        4,
        True,
        lambda runs, targets, shadows, variance: lira_offline(
            runs.confidence, runs.keep, targets, shadows=shadows, variance=variance
        ),
        "LiRA offline: how far the confidence lies above the OUT shadows' Gaussian",
        query_views=True,
    ),
    Attack(
        "rmia",
        "model",
        None,
        2,
        True,
        lambda runs, targets, shadows, variance: rmia_online(runs.confidence, runs.keep, targets, shadows=shadows),
        "RMIA: the target's p_y over the reference runs' mean, ranked against the whole pool's ratios",
        query_views=True,
    ),
    Attack(
        "rmia_offline",
        "model",
        None,
        2,
        True,
        lambda runs, targets, shadows, variance: rmia_offline(runs.confidence, runs.keep, targets, shadows=shadows),
        "RMIA offline: Pr(x) from the OUT references only, with a fitted on the references",
        query_views=True,
    ),
    Attack(
        "dcr",
        "release",
        RELEASE,
        1,
        False,
        lambda runs, targets, shadows, variance: runs.dcr[targets],
        "minus the distance to the nearest released image of the same class",
    ),
    Attack(
        "dcr_lira",
        "release",
        RELEASE,
        4,
        True,
        _dcr_lira,
        "that distance calibrated on the OUT shadows (offline LiRA on the DCR statistic)",
    ),
    Attack(
        "ganleak_fbb",
        "generator",
        "fbb",
        1,
        False,
        lambda runs, targets, shadows, variance: reconstruction_scores(runs.recon["fbb"][targets]),
        "minus the distance to the nearest generated sample (full black-box)",
    ),
    Attack(
        "ganleak_pbb",
        "generator",
        "pbb",
        1,
        False,
        lambda runs, targets, shadows, variance: reconstruction_scores(runs.recon["pbb"][targets]),
        "minus the Powell-search reconstruction loss (partial black-box; NaN where not reconstructed)",
    ),
    Attack(
        "ganleak_wb",
        "generator",
        "wb",
        1,
        False,
        lambda runs, targets, shadows, variance: reconstruction_scores(runs.recon["wb"][targets]),
        "minus the gradient-search reconstruction loss (white-box)",
    ),
    Attack(
        "ganleak_cal",
        "generator",
        "wb",
        4,
        True,
        lambda runs, targets, shadows, variance: calibrated_scores(
            runs.recon["wb"], runs.keep, targets, shadows=shadows
        ),
        "the white-box loss minus the example's mean loss under the target's OUT shadow generators",
    ),
    Attack(
        "ganleak_lira",
        "generator",
        "wb",
        4,
        True,
        lambda runs, targets, shadows, variance: lira_online(
            log_loss_statistic(runs.recon["wb"]), runs.keep, targets, shadows=shadows, variance=variance
        ),
        "online LiRA with minus the log white-box loss as the statistic, IN and OUT shadow generators",
    ),
    Attack(
        "whitebox",
        "mechanism",
        WHITEBOX,
        1,
        False,
        _whitebox(lambda o, mechanism: likelihood_ratio(o, **mechanism)),
        "white-box: the log likelihood ratio of the canary's step projections under the claimed subsampled Gaussian",
    ),
    Attack(
        "whitebox_sum",
        "mechanism",
        WHITEBOX,
        1,
        False,
        _whitebox(lambda o, mechanism: summed_projection(o)),
        "white-box: the canary's step projections summed",
    ),
    Attack(
        "whitebox_steps",
        "mechanism",
        WHITEBOX,
        1,
        False,
        _whitebox(lambda o, mechanism: step_changes(o)),
        "white-box: the summed absolute changes of the canary's projection between steps (reused noise cancels)",
    ),
)


def attack_names(*families: str) -> tuple[str, ...]:
    """The registered attacks' names in registry order, of the given families (default: all)."""
    return tuple(a.name for a in REGISTRY if not families or a.family in families)


def get_attack(name: str) -> Attack:
    """The registered attack `name`; ValueError naming it (and the known ones) otherwise."""
    for attack in REGISTRY:
        if attack.name == name:
            return attack
    raise ValueError(f"unknown attack {name!r} (known: {', '.join(attack_names())})")
