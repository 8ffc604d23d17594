"""Every attack an audit can run, registered once: its name, what it needs from the run store, how many runs it needs,
and its scoring function.

`attack_names()` lists the built-in attacks of `REGISTRY`, then those of entry-point group `ATTACK_GROUP`; `--attack`
also takes `module:function` (docs/contracts.md, "Your own attack"). `score(runs, targets, shadows, variance)` scores
each target run [T, n] from the `audit.evaluate.StoredRuns` of that target and its reference runs (`shadows`, bool [T,
R], None for an attack without any) alone, so no guess depends on a target's own coins
(tests/contracts/test_registry.py).
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import attacks.lira
import attacks.rmia
from attacks.ganleak import calibrated_scores, log_loss_statistic, reconstruction_scores
from attacks.tabular import calibrated_counts, domias_scores, query_scores
from attacks.whitebox import likelihood_ratio, run_scores, step_changes, summed_projection
from extensions import entry_points, load_entry_point, load_path

#: families: what an attack observes. "model": the downstream model's logits on the pool; "release": the released set
#: itself (distances); "generator": a generator's reconstruction losses (GAN-Leaks); "mechanism": every noisy sum of a
#: DP victim's Gaussian mechanism, through the canaries' projections (white-box audits)
FAMILIES = ("model", "release", "generator", "mechanism")
RELEASE = "release"  # `needs` of an attack on the released set: every run stored release_x, release_y
TABLE = "table"  # `needs` of an attack on a released table: every run released a table of a tabular pool
WHITEBOX = "whitebox"  # `needs` of a white-box attack: every run stored its canaries' step observations
HEADLINE_ATTACK = "lira_online"  # the attack whose examples at highest risk the report shows, when scored


@dataclass(frozen=True, kw_only=True)
class Attack:
    """One registered attack, built from named fields."""

    name: str
    family: str  # one of FAMILIES
    needs: str | None  # beyond the logits every run stores: RELEASE, TABLE, WHITEBOX or a GAN-Leaks reconstruction kind
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
        if self.needs == TABLE:
            return (
                getattr(runs, "release_density", None) is not None
                and getattr(runs, "release_counts", None) is not None
                and getattr(runs, "release_support", None) is not None
                and getattr(runs, "release_pair_support", None) is not None
            )
        return self.needs in (runs.recon or {})

    def missing(self) -> str:
        """Why it cannot be scored on runs that lack what it needs (one line)."""
        if self.needs == RELEASE:
            return f"{self.name} needs the released synthetic set, and these runs stored none"
        if self.needs == TABLE:
            return f"{self.name} needs the released table of a tabular victim, and these runs stored none"
        if self.needs == WHITEBOX:
            return (
                f"{self.name} needs the white-box canary observations (--threat-model white-box), "
                "and these runs stored none"
            )
        return f"{self.name} needs the {self.needs} reconstruction losses of a generator, and these runs stored none"


def attack(
    *,
    family: str,
    min_runs: int,
    calibrated: bool,
    about: str | None = None,
    needs: str | None = None,
    query_views: bool = False,
    name: str | None = None,
) -> Callable[[Callable], Attack]:
    """Decorator: the score function `score(runs, targets, shadows, variance)` as an `Attack` named `name` (default: the
    function's name), `about` what the score is (default: its docstring, on one line). A built-in attack is one in this
    module; one of your own is named by an entry point of `ATTACK_GROUP` or a `module:function` given to `--attack`."""

    def decorate(score: Callable) -> Attack:
        return Attack(
            name=name or score.__name__,
            family=family,
            needs=needs,
            min_runs=min_runs,
            calibrated=calibrated,
            score=score,
            about=about or " ".join((score.__doc__ or "").split()),
            query_views=query_views,
        )

    return decorate


@attack(family="model", min_runs=1, calibrated=False)
def loss(runs, targets, shadows, variance):
    """minus the cross-entropy of the target's model on the example"""
    return -runs.loss[targets]


@attack(family="model", min_runs=4, calibrated=True, query_views=True)
def lira_online(runs, targets, shadows, variance):
    """LiRA: likelihood ratio of the logit-scaled confidence under Gaussians fitted on IN and OUT shadows"""
    return attacks.lira.lira_online(runs.confidence, runs.keep, targets, shadows=shadows, variance=variance)


@attack(family="model", min_runs=4, calibrated=True, query_views=True)
def lira_offline(runs, targets, shadows, variance):
    """LiRA offline: how far the confidence lies above the OUT shadows' Gaussian"""
    return attacks.lira.lira_offline(runs.confidence, runs.keep, targets, shadows=shadows, variance=variance)


@attack(family="model", min_runs=2, calibrated=True, query_views=True)
def rmia(runs, targets, shadows, variance):
    """RMIA: the target's p_y over the reference runs' mean, ranked against the whole pool's ratios"""
    return attacks.rmia.rmia_online(runs.confidence, runs.keep, targets, shadows=shadows)


@attack(family="model", min_runs=2, calibrated=True, query_views=True)
def rmia_offline(runs, targets, shadows, variance):
    """RMIA offline: Pr(x) from the OUT references only, with a fitted on the references"""
    return attacks.rmia.rmia_offline(runs.confidence, runs.keep, targets, shadows=shadows)


@attack(family="release", needs=RELEASE, min_runs=1, calibrated=False)
def dcr(runs, targets, shadows, variance):
    """minus the distance to the nearest released image of the same class (a table: to the closest
    released record, on Gower's distance with the label a column)"""
    return runs.dcr[targets]


@attack(family="release", needs=RELEASE, min_runs=4, calibrated=True)
def dcr_lira(runs, targets, shadows, variance):
    """that distance calibrated on the OUT shadows (offline LiRA on the DCR statistic)"""
    # Offline, because an IN example is in or behind the release of only some of its IN shadows, so
    # its IN distribution is a mixture that one Gaussian describes badly.
    return attacks.lira.lira_offline(runs.dcr[..., None], runs.keep, targets, shadows=shadows, variance=variance)


@attack(family="release", needs=TABLE, min_runs=2, calibrated=True)
def domias(runs, targets, shadows, variance):
    """DOMIAS: log of the released table's density at the record over the mean density of the
    reference runs' releases"""
    return domias_scores(runs.release_density, targets, shadows=shadows)


@attack(family="release", needs=TABLE, min_runs=4, calibrated=True)
def queries(runs, targets, shadows, variance):
    """TAPAS-style counting queries: released records matching the record in full and on each pair
    of columns, online LiRA on their square roots"""
    return query_scores(runs.release_counts, runs.keep, targets, shadows=shadows, variance=variance)


@attack(family="release", needs=TABLE, min_runs=1, calibrated=False)
def support(runs, targets, shadows, variance):
    """domain extension: released records where only the record could have opened the domain (a
    category no other pool record holds, a number beyond every other's)"""
    return runs.release_support[targets].sum(axis=-1)


@attack(family="release", needs=TABLE, min_runs=4, calibrated=True)
def support_cal(runs, targets, shadows, variance):
    """domain extension calibrated per record: each column's released records where only the record could have opened
    the domain, against the same record's counts in its OUT reference runs, the largest over its columns"""
    return calibrated_counts(runs.release_support, runs.keep, targets, shadows=shadows)


@attack(family="release", needs=TABLE, min_runs=4, calibrated=True)
def queries_cal(runs, targets, shadows, variance):
    """the counting queries calibrated per record: each query's released records matching the record,
    against the same record's counts in its OUT reference runs, the largest over the queries"""
    return calibrated_counts(runs.release_counts, runs.keep, targets, shadows=shadows)


@attack(family="release", needs=TABLE, min_runs=1, calibrated=False)
def pairs(runs, targets, shadows, variance):
    """released records holding a value combination, on a pair of columns, that no other pool record
    holds, summed over the record's such pairs (its own count through the noise of a marginal-based release)"""
    return runs.release_pair_support[targets].astype(np.float64)


@attack(family="generator", needs="fbb", min_runs=1, calibrated=False)
def ganleak_fbb(runs, targets, shadows, variance):
    """minus the distance to the nearest generated sample (full black-box)"""
    return reconstruction_scores(runs.recon["fbb"][targets])


@attack(family="generator", needs="pbb", min_runs=1, calibrated=False)
def ganleak_pbb(runs, targets, shadows, variance):
    """minus the Powell-search reconstruction loss (partial black-box; NaN where not reconstructed)"""
    return reconstruction_scores(runs.recon["pbb"][targets])


@attack(family="generator", needs="wb", min_runs=1, calibrated=False)
def ganleak_wb(runs, targets, shadows, variance):
    """minus the gradient-search reconstruction loss (white-box)"""
    return reconstruction_scores(runs.recon["wb"][targets])


@attack(family="generator", needs="wb", min_runs=4, calibrated=True)
def ganleak_cal(runs, targets, shadows, variance):
    """the white-box loss minus the example's mean loss under the target's OUT shadow generators"""
    return calibrated_scores(runs.recon["wb"], runs.keep, targets, shadows=shadows)


@attack(family="generator", needs="wb", min_runs=4, calibrated=True)
def ganleak_lira(runs, targets, shadows, variance):
    """online LiRA with minus the log white-box loss as the statistic, IN and OUT shadow generators"""
    statistic = log_loss_statistic(runs.recon["wb"])
    return attacks.lira.lira_online(statistic, runs.keep, targets, shadows=shadows, variance=variance)


def _mechanism_scores(runs, targets, statistic):  # statistic(observations [steps, m], the run's mechanism) -> [m]
    mechanisms = [m["whitebox_mechanism"] for m in runs.meta]
    return run_scores(statistic, runs.whitebox, mechanisms, runs.whitebox_rows, runs.keep.shape[1], targets)


@attack(family="mechanism", needs=WHITEBOX, min_runs=1, calibrated=False)
def whitebox(runs, targets, shadows, variance):
    """white-box: the log likelihood ratio of the canary's step projections under the claimed subsampled Gaussian"""
    return _mechanism_scores(runs, targets, lambda o, mechanism: likelihood_ratio(o, **mechanism))


@attack(family="mechanism", needs=WHITEBOX, min_runs=1, calibrated=False)
def whitebox_sum(runs, targets, shadows, variance):
    """white-box: the canary's step projections summed"""
    return _mechanism_scores(runs, targets, lambda o, mechanism: summed_projection(o))


@attack(family="mechanism", needs=WHITEBOX, min_runs=1, calibrated=False)
def whitebox_steps(runs, targets, shadows, variance):
    """white-box: the summed absolute changes of the canary's projection between steps (reused noise cancels)"""
    return _mechanism_scores(runs, targets, lambda o, mechanism: step_changes(o))


#: the built-in attacks, in the order summary.json lists them
REGISTRY: tuple[Attack, ...] = (
    *(loss, lira_online, lira_offline, rmia, rmia_offline),
    *(dcr, dcr_lira, domias, queries, support, pairs, support_cal, queries_cal),
    *(ganleak_fbb, ganleak_pbb, ganleak_wb, ganleak_cal, ganleak_lira),
    *(whitebox, whitebox_sum, whitebox_steps),
)


#: entry-point group of installed attack plugins: `name = "package.module:function"` (a function
#: decorated with `@attack`) in a package's metadata adds that attack to every audit of its family
ATTACK_GROUP = "membership_audit.attacks"
_BUILT_IN = {a.name: a for a in REGISTRY}
_LOADED: dict[str, Attack] = {}  # attacks loaded from an entry point or a module:function path, by name
_PATH_FORM = "an attack path is module:function, e.g. my_package.attacks:my_attack"


def installed_attacks() -> tuple[Attack, ...]:
    """The attacks of `ATTACK_GROUP`'s entry points, by name; ValueError for one that does not load or fit."""
    return tuple(get_attack(name) for name in sorted(entry_points(ATTACK_GROUP)))


def attack_names(*families: str) -> tuple[str, ...]:
    """The attacks' names, of the given families (default: all): the built-in ones in registry
    order, then the installed ones (`ATTACK_GROUP`) by name."""
    return tuple(a.name for a in (*REGISTRY, *installed_attacks()) if not families or a.family in families)


def get_attack(name: str) -> Attack:
    """The attack `name`: built-in, installed (entry point of `ATTACK_GROUP`), a `module:function` path, or one loaded
    before. ValueError (one line naming the value) for an unknown name, a failed import, or no attack."""
    if name in _BUILT_IN:
        return _BUILT_IN[name]
    if name in _LOADED:
        return _LOADED[name]
    plugins = entry_points(ATTACK_GROUP)
    if name in plugins:
        found = check_attack(load_entry_point(plugins[name], label="attack"), label=name)
        if found.name != name:
            raise ValueError(f"attack {name}: its entry point names an attack called {found.name!r}")
        return _LOADED.setdefault(name, found)
    if ":" in name:
        found = check_attack(load_path(name, label="attack", form=_PATH_FORM), label=name)
        if _LOADED.setdefault(found.name, found) is not found:
            raise ValueError(f"attack {name}: another attack named {found.name!r} was loaded before")
        return found
    known = [*_BUILT_IN, *sorted(plugins)]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}; or a module:function path"
    raise ValueError(f"unknown attack {name!r} ({hint})")


def check_attack(found: Any, *, label: str) -> Attack:
    """`found` if it is an attack of your own (an `Attack` of a known family, not named as a built-in, whose score takes
    (runs, targets, shadows, variance)); else ValueError naming what breaks it."""

    def broken(why: str) -> ValueError:
        return ValueError(f"attack {label} does not follow the attack protocol: {why}")

    if not isinstance(found, Attack):
        raise broken("not an Attack (decorate its score function with attacks.registry.attack)")
    if found.family not in FAMILIES:
        raise broken(f"its family {found.family!r} is none of {', '.join(FAMILIES)}")
    if found.name in _BUILT_IN:
        raise broken(f"its name {found.name!r} is a built-in attack's")
    if not found.min_runs >= (2 if found.calibrated else 1):
        raise broken(
            f"min_runs {found.min_runs} is too few ({'2 for a calibrated' if found.calibrated else '1 for an'} attack)"
        )
    try:
        inspect.signature(found.score).bind(None, None, None, None)
    except (TypeError, ValueError):
        raise broken("its score cannot be called as score(runs, targets, shadows, variance)") from None
    return found
