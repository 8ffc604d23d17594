"""Every attack an audit can run, registered once: its name, what it needs from the run store,
how many runs it needs, and its scoring function.

Evaluation (`audit.evaluate`), the command lines (`audit.lira`, `audit.ganleak`,
`audit.release`) and the report loop over `REGISTRY`; a new attack is one entry here and a test
in the contract suite (tests/contracts/test_registry.py), which holds every entry to the audit's
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


@dataclass(frozen=True, kw_only=True)
class Attack:
    """One registered attack, built from named fields."""

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
        name="loss",
        family="model",
        needs=None,
        min_runs=1,
        calibrated=False,
        score=lambda runs, targets, shadows, variance: -runs.loss[targets],
        about="minus the cross-entropy of the target's model on the example",
    ),
    Attack(
        name="lira_online",
        family="model",
        needs=None,
        min_runs=4,
        calibrated=True,
        score=lambda runs, targets, shadows, variance: lira_online(
            runs.confidence, runs.keep, targets, shadows=shadows, variance=variance
        ),
        about="LiRA: likelihood ratio of the logit-scaled confidence under Gaussians fitted on IN and OUT shadows",
        query_views=True,
    ),
    Attack(
        name="lira_offline",
        family="model",
        needs=None,
        min_runs=4,
        calibrated=True,
        score=lambda runs, targets, shadows, variance: lira_offline(
            runs.confidence, runs.keep, targets, shadows=shadows, variance=variance
        ),
        about="LiRA offline: how far the confidence lies above the OUT shadows' Gaussian",
        query_views=True,
    ),
    Attack(
        name="rmia",
        family="model",
        needs=None,
        min_runs=2,
        calibrated=True,
        score=lambda runs, targets, shadows, variance: rmia_online(
            runs.confidence, runs.keep, targets, shadows=shadows
        ),
        about="RMIA: the target's p_y over the reference runs' mean, ranked against the whole pool's ratios",
        query_views=True,
    ),
    Attack(
        name="rmia_offline",
        family="model",
        needs=None,
        min_runs=2,
        calibrated=True,
        score=lambda runs, targets, shadows, variance: rmia_offline(
            runs.confidence, runs.keep, targets, shadows=shadows
        ),
        about="RMIA offline: Pr(x) from the OUT references only, with a fitted on the references",
        query_views=True,
    ),
    Attack(
        name="dcr",
        family="release",
        needs=RELEASE,
        min_runs=1,
        calibrated=False,
        score=lambda runs, targets, shadows, variance: runs.dcr[targets],
        about="minus the distance to the nearest released image of the same class",
    ),
    Attack(
        name="dcr_lira",
        family="release",
        needs=RELEASE,
        min_runs=4,
        calibrated=True,
        score=_dcr_lira,
        about="that distance calibrated on the OUT shadows (offline LiRA on the DCR statistic)",
    ),
    Attack(
        name="ganleak_fbb",
        family="generator",
        needs="fbb",
        min_runs=1,
        calibrated=False,
        score=lambda runs, targets, shadows, variance: reconstruction_scores(runs.recon["fbb"][targets]),
        about="minus the distance to the nearest generated sample (full black-box)",
    ),
    Attack(
        name="ganleak_pbb",
        family="generator",
        needs="pbb",
        min_runs=1,
        calibrated=False,
        score=lambda runs, targets, shadows, variance: reconstruction_scores(runs.recon["pbb"][targets]),
        about="minus the Powell-search reconstruction loss (partial black-box; NaN where not reconstructed)",
    ),
    Attack(
        name="ganleak_wb",
        family="generator",
        needs="wb",
        min_runs=1,
        calibrated=False,
        score=lambda runs, targets, shadows, variance: reconstruction_scores(runs.recon["wb"][targets]),
        about="minus the gradient-search reconstruction loss (white-box)",
    ),
    Attack(
        name="ganleak_cal",
        family="generator",
        needs="wb",
        min_runs=4,
        calibrated=True,
        score=lambda runs, targets, shadows, variance: calibrated_scores(
            runs.recon["wb"], runs.keep, targets, shadows=shadows
        ),
        about="the white-box loss minus the example's mean loss under the target's OUT shadow generators",
    ),
    Attack(
        name="ganleak_lira",
        family="generator",
        needs="wb",
        min_runs=4,
        calibrated=True,
        score=lambda runs, targets, shadows, variance: lira_online(
            log_loss_statistic(runs.recon["wb"]), runs.keep, targets, shadows=shadows, variance=variance
        ),
        about="online LiRA with minus the log white-box loss as the statistic, IN and OUT shadow generators",
    ),
    Attack(
        name="whitebox",
        family="mechanism",
        needs=WHITEBOX,
        min_runs=1,
        calibrated=False,
        score=_whitebox(lambda o, mechanism: likelihood_ratio(o, **mechanism)),
        about="white-box: the log likelihood ratio of the canary's step projections under the claimed "
        "subsampled Gaussian",
    ),
    Attack(
        name="whitebox_sum",
        family="mechanism",
        needs=WHITEBOX,
        min_runs=1,
        calibrated=False,
        score=_whitebox(lambda o, mechanism: summed_projection(o)),
        about="white-box: the canary's step projections summed",
    ),
    Attack(
        name="whitebox_steps",
        family="mechanism",
        needs=WHITEBOX,
        min_runs=1,
        calibrated=False,
        score=_whitebox(lambda o, mechanism: step_changes(o)),
        about="white-box: the summed absolute changes of the canary's projection between steps (reused noise cancels)",
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
