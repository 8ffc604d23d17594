"""Is a victim measurably more private than the naive baseline, and at what utility cost?

    python -m audit.compare EXP_DIR [EXP_DIR ...] --baseline EXP_DIR [--attack A ...]
        [--group all|init|other_members ...] [--out FILE.json] [--seed 0] [--n-boot 1000]
        [--n-boot-eps 0] [--confidence 0.95] [--alpha 0.05]

Reads experiment directories as the audit CLI leaves them (`experiment.json`,
`audit/summary.json`, `audit/scores.npz`, `runs/<r>.json`) and answers with intervals and tests.
Only directories made with the membership plan of independent coins (`shadow_runs.plan.PLAN`,
recorded in experiment.json, and a summary.json with `eps_ceiling`) are read; one made with an
earlier plan is refused, naming its plan: its bounds came from a relation the plan no longer has.

Protocol
--------
* Units. The target runs are the independent units; the examples of one target are not
  (they share one trained model). Every interval and test on attack metrics therefore
  resamples whole targets: a cluster bootstrap draws T of the T targets with replacement,
  pools their (score, membership) pairs and recomputes the metric.
* Estimates, per experiment, attack and group (`all`: all members against all non-members;
  `init`: the real images the target's release contains or was initialised from, against all
  non-members; `other_members`: the remaining members against all non-members; the two
  sub-groups exist when the experiment has init images and, as in summary.json, when they
  hold at least two members). The point estimates are those of summary.json: AUC and TPR at
  1% and 0.1% FPR by `audit.metrics` on the scores pooled over the targets, and for the `all`
  group of an experiment whose membership coins are fair, `eps_lower` as summary.json reports it
  (recomputed by `audit.epsilon.epsilon_lower_bound`, the one-run bound, with the experiment's
  delta or 0 and its confidence, when summary.json lacks it) beside the design's `eps_ceiling`
  (a number fixed by the design, not estimated). Sub-groups have no `eps_lower`: the mechanism
  itself picked them among the members, so conditioning on them is no ε bound; an experiment
  with coins of another rate has none either. An audit with `--canaries` is compared through its
  natural examples (`Experiment.natural_examples`): the canaries' own numbers are in its summary.json. The intervals are percentile intervals of the
  bootstrap replicates at `confidence` (0.95). With T targets the cluster bootstrap's variance
  is (T-1)/T of the truth, so intervals are slightly narrow with few targets: with 16, a 95% AUC
  interval covered the true AUC in 91% of 300 simulations, and a 5% test of equal AUCs
  rejected in 6.3%.
* Replicates. AUC and TPRs use `n_boot` = 1000 replicates; they are computed from per-target
  count tables (`resampled_metrics`), equal to `audit.metrics` on the explicitly resampled pool
  (the tests check this) and about 200 times faster (0.04 ms against 7 ms per replicate on
  24,000 pooled scores). `eps_lower` has no such shortcut: each replicate is one call of the
  one-run bound, about 7 ms on 24,000 pooled scores of `bench/compare.py`'s weak signal at
  δ = 0 but about 0.1-0.25 s at δ = 1e-5 (one core; the earlier split bound took 3.5 ms), and more
  with a strong signal. Its bootstrap is therefore off by default (`n_boot_eps` = 0):
  `eps_lower` is shown as summary.json's point, without an interval, and is not tested. With
  `--n-boot-eps B` it uses the first B target draws of the same bootstrap, and its difference
  joins the tests. Note that `eps_lower` is itself a lower confidence bound; its interval
  describes how the bound varies over targets and tie-breaking, it is not an interval for the
  true epsilon, and a resample that draws a target twice counts its coins twice. Cost, measured
  on `bench/compare.py`'s experiments (8 experiments x 3 attacks, 16 targets x 1500 examples,
  group `all`, imports included): 4.4 s by default; with 200 eps_lower replicates 35 s at
  δ = 0 (16.5 s with the split bound), and 20 replicates already take 125 s at δ = 1e-5.
* Test accuracy: the mean over all runs of the experiment with a Student t-interval.
* Comparison of a victim with the baseline (same attack, same group, same metric): the
  difference victim - baseline, its percentile interval from the differences of independent
  replicates of the two sides, and a two-sided Wald p-value with the bootstrap standard error,
  p = 2 Phi(-|d| / sd(d*)) (p = 1 when d and every d* are 0; p = 0 when the replicates agree
  exactly on a non-zero difference). A count-based bootstrap p-value, 2 #{d* on the other
  side of 0} / (B + 1), cannot go below 2/(B + 1), which a Holm correction over a family of
  dozens of tests multiplies past any alpha: with 1000 replicates and the 28 tests of a
  3-attack, 3-group comparison (31 with eps_lower resampled) no difference could be
  significant, however large. Test
  accuracy: Welch's t-test over the runs of the two sides.
* Multiplicity. All p-values of one comparison (every attack x group x metric, plus test
  accuracy) form one family, adjusted by Holm-Bonferroni; `significant` means adjusted
  p < alpha (0.05).
* Randomness: everything comes from `np.random.default_rng(seed)`; in `compare_experiments`
  the baseline and each experiment get their own child stream, so the two sides of a
  comparison are resampled independently.

Bad input on the command line (a missing directory or file, an attack an experiment did not
score, --n-boot < 1, ...) exits with status 2 and one line on stderr; nothing is written.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import zlib
from collections import Counter
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

from audit.arguments import ArgumentParser, int_at_least, probability
from audit.epsilon import epsilon_ceiling, epsilon_lower_bound
from audit.metrics import auc, tpr_at_fpr

GROUPS = ("all", "init", "other_members")
METRICS = ("auc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001", "eps_lower")
TPR_LEVELS = {"tpr_at_fpr_0.01": 0.01, "tpr_at_fpr_0.001": 0.001}
N_BOOT = 1000
N_BOOT_EPS = 0  # the one-run bound costs 0.1-2 s per replicate with signal: opt in with --n-boot-eps
#: config keys that name an experiment in tables (when present), before the keys that vary
HEADLINE_KEYS = ("epsilon", "ipc", "spc", "init")
_SCORES_META = ("target_runs", "membership", "init")
_RUN_FILE = re.compile(r"^\d{5}\.json$")


class ExperimentError(ValueError):
    """An experiment directory that cannot be read; the message is one line naming the path."""


# -- results ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A point estimate with an interval (NaN bounds where none can be computed)."""

    point: float
    low: float
    high: float

    def to_json(self) -> dict:
        return {"point": _json_float(self.point), "low": _json_float(self.low), "high": _json_float(self.high)}


@dataclass(frozen=True, eq=False)
class GroupEstimate:
    """The metrics of one attack on one group of one experiment, with their bootstrap replicates."""

    attack: str
    group: str
    n_members: int
    n_nonmembers: int
    metrics: Mapping[str, Interval]  # the METRICS it has: no eps_lower for a sub-group or unfair coins
    replicates: Mapping[str, np.ndarray] = field(repr=False)  # only metrics that were resampled
    eps_ceiling: float | None = None  # what a perfect attack would certify with this design (with eps_lower)


@dataclass(frozen=True, eq=False)
class ExperimentSummary:
    """Intervals for one experiment: test accuracy, and every (attack, group) estimated."""

    experiment: Experiment
    label: str
    test_accuracy: Interval
    estimates: Mapping[tuple[str, str], GroupEstimate]
    confidence: float
    n_boot: int
    n_boot_eps: int


@dataclass(frozen=True)
class MetricComparison:
    """victim - baseline for one metric; attack and group are None for test accuracy."""

    attack: str | None
    group: str | None
    metric: str
    difference: Interval
    p_value: float
    p_adjusted: float
    significant: bool

    def to_json(self) -> dict:
        return {"attack": self.attack, "group": self.group, "metric": self.metric,
                "difference": self.difference.to_json(), "p_value": _json_float(self.p_value),
                "p_adjusted": _json_float(self.p_adjusted), "significant": self.significant}


@dataclass(frozen=True, eq=False)
class Comparison:
    """One victim against one baseline: every test, Holm-adjusted together."""

    victim: ExperimentSummary
    baseline: ExperimentSummary
    alpha: float
    tests: tuple[MetricComparison, ...]

    def get(self, metric: str, attack: str | None = None, group: str | None = None) -> MetricComparison:
        for test in self.tests:
            if (test.metric, test.attack, test.group) == (metric, attack, group):
                return test
        raise KeyError((metric, attack, group))


@dataclass(frozen=True, eq=False)
class Report:
    """What `python -m audit.compare` prints and writes."""

    baseline: ExperimentSummary
    experiments: tuple[ExperimentSummary, ...]
    comparisons: tuple[Comparison, ...]  # one per experiment, same order
    seed: int
    alpha: float


# -- loading ------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Experiment:
    """What an audited experiment directory holds, checked for consistent shapes.

    `membership`, `init` and each array of `scores` are [T, n]: one row per target run.
    `test_accuracy` has one value per run (targets and shadows alike).
    """

    path: Path
    summary: Mapping
    membership: np.ndarray
    init: np.ndarray
    scores: Mapping[str, np.ndarray]
    test_accuracy: np.ndarray

    def __post_init__(self) -> None:
        membership = np.asarray(self.membership, dtype=bool)
        if membership.ndim != 2 or membership.shape[0] < 1:
            raise ExperimentError(f"{self.path}: membership must be [targets, n], got shape {membership.shape}")
        init = np.asarray(self.init, dtype=bool)
        scores = {name: np.asarray(s, dtype=float) for name, s in self.scores.items()}
        for name, array in {"init": init, **scores}.items():
            if array.shape != membership.shape:
                raise ExperimentError(f"{self.path}: {name} has shape {array.shape}, membership {membership.shape}")
        for name, array in scores.items():
            if not np.isfinite(array).all():
                raise ExperimentError(f"{self.path}: scores of {name} are not all finite")
        if not (membership.any(axis=1) & (~membership).any(axis=1)).all():
            raise ExperimentError(f"{self.path}: every target needs members and non-members")
        accuracy = np.asarray(self.test_accuracy, dtype=float).ravel()
        if accuracy.size == 0 or not np.isfinite(accuracy).all():
            raise ExperimentError(f"{self.path}: test accuracies must be finite and non-empty")
        if not isinstance(self.summary, Mapping) or not isinstance(self.summary.get("victim"), str):
            raise ExperimentError(f"{self.path}: summary has no victim name")
        for name, value in (("membership", membership), ("init", init), ("test_accuracy", accuracy)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "path", Path(self.path))

    @property
    def victim(self) -> str:
        return self.summary["victim"]

    @property
    def dataset(self) -> str | None:
        return self.summary.get("dataset")

    @property
    def config(self) -> Mapping:
        return self.summary.get("config") or {}

    @property
    def delta(self) -> float:
        """The victim's delta, 0 for non-DP victims: what eps_lower is computed with."""
        return float(self.summary.get("delta") or 0.0)

    @property
    def confidence(self) -> float:
        """The confidence level of the experiment's eps_lower."""
        return float((self.summary.get("evaluation") or {}).get("confidence", 0.95))

    @property
    def n_targets(self) -> int:
        return self.membership.shape[0]

    def epsilon_applies(self, attack: str) -> bool:
        """Whether `attack` has an ε lower bound: summary.json does not record it as null (null where
        the plan's coins were not fair, or a release's members were chosen)."""
        entry = (self.summary.get("attacks") or {}).get(attack)
        return not (isinstance(entry, Mapping) and "eps_lower" in entry and entry["eps_lower"] is None)

    def natural_examples(self) -> Experiment:
        """This experiment seen through its natural examples: itself without canaries; with them
        (`--canaries`), the first n_natural columns of every [T, n] array and summary.json's
        per-attack `natural` entries in place of the canaries' (so `eps_lower` and `eps_ceiling`
        are the natural examples' too). A comparison with a baseline is about the pool's own
        records; the canaries' numbers stay in summary.json and the report."""
        canaries = (self.summary.get("evaluation") or {}).get("canaries")
        if not canaries:
            return self
        n = int(canaries["n_natural"])
        attacks = {a: entry["natural"] for a, entry in (self.summary.get("attacks") or {}).items()
                   if isinstance(entry, Mapping) and "natural" in entry}
        return dataclasses.replace(self, summary={**self.summary, "attacks": attacks}, membership=self.membership[:, :n],
                                   init=self.init[:, :n], scores={k: v[:, :n] for k, v in self.scores.items()})

    def group_masks(self) -> dict[str, np.ndarray]:
        """Member masks [T, n] of the groups this experiment has (sub-groups only with >= 2 members)."""
        masks = {"all": self.membership}
        if self.init.any():
            subgroups = {"init": self.membership & self.init, "other_members": self.membership & ~self.init}
            masks.update({name: mask for name, mask in subgroups.items() if mask.sum() >= 2})
        return masks


def load_experiment(path: str | os.PathLike) -> Experiment:
    """Read an experiment directory; ExperimentError (one line naming the path) if it is unusable."""
    path = Path(path)
    if not path.is_dir():
        raise ExperimentError(f"{path}: no such experiment directory")
    summary = _read_json(path / "audit" / "summary.json")
    check_plan(path, summary)
    arrays = _read_npz(path / "audit" / "scores.npz")
    membership = arrays["membership"]
    return Experiment(path=path, summary=summary, membership=membership,
                      init=arrays.get("init", np.zeros_like(membership, dtype=bool)),
                      scores={k: v for k, v in arrays.items() if k not in _SCORES_META},
                      test_accuracy=_read_accuracies(path / "runs"))


def check_plan(path: Path, summary: Mapping) -> None:
    """ExperimentError unless the experiment was made with the plan of independent coins: its
    experiment.json (or, without one, summary.json's evaluation) records `PLAN`, and summary.json
    carries `eps_ceiling` for every attack. An earlier plan's bounds are not one-run bounds."""
    from shadow_runs.plan import PLAN

    meta_path = path / "experiment.json"
    plan = (_read_json(meta_path) if meta_path.is_file() else (summary.get("evaluation") or {})).get("plan")
    attacks = summary.get("attacks") or {}
    lacking = [a for a, entry in attacks.items() if not isinstance(entry, Mapping) or "eps_ceiling" not in entry]
    if plan != PLAN or lacking:
        named = "no recorded plan" if plan is None else f"plan {plan!r}"
        why = f"it has {named}" if plan != PLAN else f"its summary.json has no eps_ceiling for {lacking[0]}"
        raise ExperimentError(f"{path}: made with an earlier membership plan ({why}); this version reads only "
                              f"{PLAN!r} audits: re-run the audit (python -m audit.lira) into a new --runs-dir")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ExperimentError(f"{path}: missing (audit the experiment first, e.g. python -m audit.lira)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExperimentError(f"{path}: unreadable JSON ({_one_line(e)})") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"{path}: expected a JSON object")
    return data


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ExperimentError(f"{path}: missing (audit the experiment first, e.g. python -m audit.lira)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:  # a truncated or foreign file: zipfile, ValueError, OSError, ...
        raise ExperimentError(f"{path}: unreadable ({_one_line(e)})") from None
    if "membership" not in arrays:
        raise ExperimentError(f"{path}: no membership array")
    if not set(arrays) - set(_SCORES_META):
        raise ExperimentError(f"{path}: no attack scores")
    return arrays


def _read_accuracies(runs_dir: Path) -> np.ndarray:
    files = sorted(p for p in runs_dir.glob("*.json") if _RUN_FILE.match(p.name)) if runs_dir.is_dir() else []
    if not files:
        raise ExperimentError(f"{runs_dir}: no run files (<r:05d>.json)")
    accuracies = []
    for file in files:
        value = _read_json(file).get("test_accuracy")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ExperimentError(f"{file}: test_accuracy must be a finite number, got {value!r}")
        accuracies.append(float(value))
    return np.array(accuracies)


# -- estimates ----------------------------------------------------------------------------------
def summarise_experiment(
    exp: Experiment,
    *,
    attacks: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    confidence: float = 0.95,
    n_boot: int = N_BOOT,
    n_boot_eps: int = N_BOOT_EPS,
    rng: np.random.Generator | int | Sequence[int] | None = None,
    label: str | None = None,
) -> ExperimentSummary:
    """Point estimates and `confidence` percentile intervals of one experiment.

    `attacks` default to every attack in scores.npz, `groups` to every group the experiment
    has (a requested sub-group it lacks is skipped). The T targets are drawn with replacement
    max(n_boot, n_boot_eps) times from `rng`; AUC and TPRs use the first `n_boot` draws,
    eps_lower (group `all` of an attack with fair coins only) the first `n_boot_eps`, none if 0.
    """
    _check_positive("n_boot", n_boot)
    _check_positive("n_boot_eps", n_boot_eps, least=0)
    _check_level("confidence", confidence)
    exp = exp.natural_examples()
    attacks = list(exp.scores) if attacks is None else list(attacks)
    for attack in attacks:
        if attack not in exp.scores:
            raise ValueError(f"attack {attack!r} is not in {exp.path} (has: {', '.join(exp.scores)})")
    groups = _check_groups(GROUPS if groups is None else groups)
    generator = np.random.default_rng(rng)
    picks = generator.integers(exp.n_targets, size=(max(n_boot, n_boot_eps), exp.n_targets))
    weights = target_weights(picks[:n_boot], exp.n_targets)
    eps_seed = int(generator.integers(2**63))
    masks = exp.group_masks()
    estimates = {
        (attack, group): _estimate(exp, attack, group, masks[group], weights=weights, picks=picks[:n_boot_eps],
                                   confidence=confidence, eps_rng=_child(eps_seed, attack, group))
        for attack in attacks
        for group in GROUPS
        if group in groups and group in masks
    }
    return ExperimentSummary(experiment=exp, label=label or experiment_labels([exp])[0],
                             test_accuracy=t_interval(exp.test_accuracy, confidence=confidence),
                             estimates=estimates, confidence=confidence, n_boot=n_boot, n_boot_eps=n_boot_eps)


def _child(seed: int, attack: str, group: str) -> np.random.Generator:
    """The eps_lower tie-breaking of one (attack, group), independent of which others are estimated."""
    return np.random.default_rng([seed, zlib.crc32(f"{attack}/{group}".encode())])


def _estimate(exp: Experiment, attack: str, group: str, member_mask: np.ndarray, *, weights: np.ndarray,
              picks: np.ndarray, confidence: float, eps_rng: np.random.Generator) -> GroupEstimate:
    scores, nonmember_mask = exp.scores[attack], ~exp.membership
    member, nonmember = scores[member_mask], scores[nonmember_mask]  # pooled over targets, row-major
    points = {"auc": auc(member, nonmember),
              **{key: tpr_at_fpr(member, nonmember, fpr)[0] for key, fpr in TPR_LEVELS.items()}}
    replicates = resampled_metrics(scores, member_mask, nonmember_mask, weights)
    ceiling = None
    if group == "all" and exp.epsilon_applies(attack):
        points["eps_lower"] = _eps_point(exp, attack, member, nonmember, rng=eps_rng)
        ceiling = _eps_ceiling(exp, attack, member.size + nonmember.size)
        if len(picks):
            replicates["eps_lower"] = _eps_replicates(exp, scores, member_mask, nonmember_mask, picks, rng=eps_rng)
    metrics = {key: percentile_interval(points[key], replicates.get(key, ()), confidence=confidence)
               for key in METRICS if key in points}
    return GroupEstimate(attack=attack, group=group, n_members=member.size, n_nonmembers=nonmember.size,
                         metrics=metrics, replicates=replicates, eps_ceiling=ceiling)


def _eps_point(exp: Experiment, attack: str, member, nonmember, *, rng) -> float:
    """summary.json's eps_lower when it has one (the audit's own tie-breaking), else a fresh bound."""
    entry = (exp.summary.get("attacks") or {}).get(attack) or {}
    if isinstance(entry.get("eps_lower"), (int, float)):
        return float(entry["eps_lower"])
    return epsilon_lower_bound(member, nonmember, delta=exp.delta, confidence=exp.confidence, rng=rng)


def _eps_ceiling(exp: Experiment, attack: str, m: int) -> float:
    """summary.json's eps_ceiling when it has one, else the ceiling of m canaries at the experiment's δ and confidence."""
    entry = (exp.summary.get("attacks") or {}).get(attack) or {}
    if isinstance(entry.get("eps_ceiling"), (int, float)):
        return float(entry["eps_ceiling"])
    return epsilon_ceiling(m, delta=exp.delta, confidence=exp.confidence)


def _eps_replicates(exp: Experiment, scores, member_mask, nonmember_mask, picks, *, rng) -> np.ndarray:
    """The one-run bound on each replicate (every canary of each drawn target; m is T x n each time)."""
    members = [s[m] for s, m in zip(scores, member_mask)]
    nonmembers = [s[m] for s, m in zip(scores, nonmember_mask)]
    out = np.full(len(picks), np.nan)
    for b, pick in enumerate(picks):
        member = np.concatenate([members[t] for t in pick])
        nonmember = np.concatenate([nonmembers[t] for t in pick])
        if member.size and nonmember.size:
            out[b] = epsilon_lower_bound(member, nonmember, delta=exp.delta, confidence=exp.confidence, rng=rng)
    return out


def target_weights(picks: np.ndarray, n_targets: int) -> np.ndarray:
    """[B, T] draw counts: how often each target appears in each row of `picks` [B, T]."""
    picks = np.asarray(picks)
    rows = np.repeat(np.arange(picks.shape[0]), picks.shape[1])
    flat = np.bincount(rows * n_targets + picks.ravel(), minlength=picks.shape[0] * n_targets)
    return flat.reshape(picks.shape[0], n_targets).astype(float)


def resampled_metrics(scores: np.ndarray, member_mask: np.ndarray, nonmember_mask: np.ndarray,
                      weights: np.ndarray) -> dict[str, np.ndarray]:
    """AUC and TPR at 1% and 0.1% FPR of bootstrap replicates, without building them.

    Replicate b is the pool of `weights[b, t]` copies of each target t's scores [T, n]
    (members where `member_mask`, non-members where `nonmember_mask`). The result equals
    `audit.metrics.auc` / `tpr_at_fpr` on that pool (all counts are exact in float64), but
    costs O(T^2) per replicate for the AUC (pairwise win counts between targets, computed
    once) and O(T x the thresholds that can reach the FPR) for the TPRs. NaN where a
    replicate has no members.
    """
    weights = np.asarray(weights, dtype=float)
    members = [np.sort(s[m]) for s, m in zip(scores, member_mask)]
    nonmembers = [np.sort(s[m]) for s, m in zip(scores, nonmember_mask)]
    n_member = weights @ np.array([x.size for x in members], dtype=float)
    n_nonmember = weights @ np.array([x.size for x in nonmembers], dtype=float)
    wins = _pairwise_wins(members, nonmembers)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"auc": np.einsum("bt,ts,bs->b", weights, wins, weights) / (n_member * n_nonmember)}
        for key, fpr in TPR_LEVELS.items():
            out[key] = _resampled_true_positives(members, nonmembers, weights, n_nonmember, fpr) / n_member
    return out


def _pairwise_wins(members: list[np.ndarray], nonmembers: list[np.ndarray]) -> np.ndarray:
    """[T, T]: entry (t, s) counts pairs (member of t, non-member of s) the member wins, ties 1/2."""
    owner = np.repeat(np.arange(len(members)), [x.size for x in members])
    pooled = np.concatenate(members)
    wins = np.empty((len(members), len(nonmembers)))
    for s, sorted_nonmember in enumerate(nonmembers):
        below = np.searchsorted(sorted_nonmember, pooled, side="left")
        at_or_below = np.searchsorted(sorted_nonmember, pooled, side="right")
        wins[:, s] = np.bincount(owner, weights=below + at_or_below, minlength=len(members)) / 2
    return wins


def _resampled_true_positives(members, nonmembers, weights, n_nonmember, fpr: float) -> np.ndarray:
    """True positives at the largest TPR whose pooled FPR is <= fpr, per replicate (as tpr_at_fpr).

    Only thresholds at or above `low` are considered: below it every target alone has more than
    fpr * n_t false positives, so every weighted pool does too (one spare rank guards rounding).
    """
    spare = [min(int(math.floor(fpr * x.size)) + 2, x.size) for x in nonmembers]
    low = min(x[x.size - k] for x, k in zip(nonmembers, spare))
    pooled = np.concatenate(members + nonmembers)
    thresholds = np.unique(pooled[pooled >= low])  # ascending: true and false positives decrease
    true_pos = np.stack([x.size - np.searchsorted(x, thresholds, side="left") for x in members]).astype(float)
    false_pos = np.stack([x.size - np.searchsorted(x, thresholds, side="left") for x in nonmembers]).astype(float)
    out = np.zeros(len(weights))
    chunk = max(1, 2**22 // max(thresholds.size, 1))
    for start in range(0, len(weights), chunk):
        w = weights[start : start + chunk]
        with np.errstate(invalid="ignore", divide="ignore"):
            feasible = _weighted(w, false_pos) / n_nonmember[start : start + chunk, None] <= fpr
        first = feasible.argmax(axis=1)  # the lowest feasible threshold has the most true positives
        best = _weighted(w, true_pos)[np.arange(len(w)), first]
        out[start : start + chunk] = np.where(feasible.any(axis=1), best, 0.0)  # else only t = +inf
    return out


def _weighted(weights: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """weights [B, T] @ counts [T, V] by einsum: tiny products, where a multi-threaded BLAS
    only adds thread start-up (and spins on a busy machine); exact on integer counts."""
    return np.einsum("bt,tv->bv", weights, counts)


def percentile_interval(point: float, replicates: np.ndarray, *, confidence: float = 0.95) -> Interval:
    """Percentile bootstrap interval around `point` (NaN replicates ignored; NaN bounds if none)."""
    finite = np.asarray(replicates, dtype=float)
    finite = finite[~np.isnan(finite)]
    if finite.size == 0:
        return Interval(float(point), math.nan, math.nan)
    low, high = np.quantile(finite, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Interval(float(point), float(low), float(high))


def t_interval(values, *, confidence: float = 0.95) -> Interval:
    """Mean with a Student t-interval (NaN bounds for a single value, the mean when all are equal)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if values.size < 2:
        return Interval(mean, math.nan, math.nan)
    if np.ptp(values) == 0:
        return Interval(mean, mean, mean)
    low, high = stats.t.interval(confidence, df=values.size - 1, loc=mean, scale=stats.sem(values))
    return Interval(mean, float(low), float(high))


# -- comparisons --------------------------------------------------------------------------------
def compare(victim: ExperimentSummary, baseline: ExperimentSummary, *, alpha: float = 0.05) -> Comparison:
    """Every metric of `victim` minus `baseline` (attack and group estimated in both), tested.

    Bootstrap differences pair the i-th replicates of the two sides, which were drawn
    independently; test accuracy by Welch's t-test over runs. All p-values, test accuracy
    included, are Holm-adjusted as one family. Needs at least two targets per side (with one,
    every replicate equals the point and the bootstrap says nothing about variability).
    """
    _check_level("alpha", alpha)
    for side in (victim, baseline):
        if side.experiment.n_targets < 2:
            raise ValueError(f"{side.experiment.path}: {side.experiment.n_targets} target run; "
                             "a comparison needs at least 2 per side")
    confidence = victim.confidence
    accuracy, accuracy_p = welch_test(victim.experiment.test_accuracy, baseline.experiment.test_accuracy,
                                      confidence=confidence)
    raw = [(None, None, "test_accuracy", accuracy, accuracy_p)]
    for key, estimate in victim.estimates.items():
        other = baseline.estimates.get(key)
        if other is None:
            continue
        for metric in METRICS:
            if metric not in estimate.replicates or metric not in other.replicates:
                continue  # eps_lower: not resampled (--n-boot-eps 0), a sub-group, or coins not fair
            difference, p = bootstrap_difference(estimate.metrics[metric].point, estimate.replicates[metric],
                                                 other.metrics[metric].point, other.replicates[metric],
                                                 confidence=confidence)
            raw.append((*key, metric, difference, p))
    adjusted = holm([p for *_, p in raw])
    tests = tuple(MetricComparison(attack=a, group=g, metric=m, difference=d, p_value=p, p_adjusted=float(q),
                                   significant=bool(q < alpha))
                  for (a, g, m, d, p), q in zip(raw, adjusted))
    return Comparison(victim=victim, baseline=baseline, alpha=alpha, tests=tests)


def bootstrap_difference(victim_point: float, victim_replicates, baseline_point: float, baseline_replicates, *,
                         confidence: float = 0.95) -> tuple[Interval, float]:
    """victim - baseline with a percentile interval and a two-sided Wald p-value whose standard
    error is the bootstrap's.

    d* = victim replicate i - baseline replicate i (independent draws; pairs with a NaN are
    dropped); p = 2 Phi(-|d| / sd(d*)) for d = victim_point - baseline_point. With sd(d*) = 0,
    p = 1 when d = 0 and p = 0 otherwise; p = 1 with NaN bounds when fewer than two pairs are usable.
    """
    n = min(len(victim_replicates), len(baseline_replicates))
    diffs = np.asarray(victim_replicates[:n], dtype=float) - np.asarray(baseline_replicates[:n], dtype=float)
    diffs = diffs[~np.isnan(diffs)]
    difference = victim_point - baseline_point
    interval = percentile_interval(difference, diffs, confidence=confidence)
    if diffs.size < 2:
        return interval, 1.0
    se = float(np.std(diffs, ddof=1))
    if se == 0:
        return interval, 1.0 if difference == 0 else 0.0
    return interval, float(2 * stats.norm.sf(abs(difference) / se))


def welch_test(victim, baseline, *, confidence: float = 0.95) -> tuple[Interval, float]:
    """mean(victim) - mean(baseline) with Welch's t-interval and two-sided p (scipy.stats).

    Degenerate cases: fewer than two values on a side -> NaN bounds and p = 1 (no variance
    estimate); no variance on either side -> the exact difference, p = 1 if it is 0 else 0.
    """
    victim, baseline = np.asarray(victim, dtype=float), np.asarray(baseline, dtype=float)
    point = float(victim.mean() - baseline.mean())
    if victim.size < 2 or baseline.size < 2:
        return Interval(point, math.nan, math.nan), 1.0
    if np.ptp(victim) == 0 and np.ptp(baseline) == 0:
        return Interval(point, point, point), 1.0 if point == 0 else 0.0
    result = stats.ttest_ind(victim, baseline, equal_var=False)
    ci = result.confidence_interval(confidence_level=confidence)
    return Interval(point, float(ci.low), float(ci.high)), float(result.pvalue)


def holm(p_values) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values, in the input order.

    Sorted ascending, the i-th smallest (i = 1..m) becomes max over j <= i of
    min(1, (m - j + 1) p_(j)); rejecting where adjusted < alpha is Holm's step-down test.
    """
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    steps = np.maximum.accumulate((p.size - np.arange(p.size)) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, steps)
    return adjusted


def compare_experiments(
    experiments: Sequence[Experiment],
    baseline: Experiment,
    *,
    attacks: Sequence[str] | None = None,
    groups: Sequence[str] = ("all",),
    confidence: float = 0.95,
    alpha: float = 0.05,
    n_boot: int = N_BOOT,
    n_boot_eps: int = N_BOOT_EPS,
    seed: int = 0,
) -> Report:
    """Summarise the baseline and each experiment, and compare each with the baseline.

    `attacks` default to those every experiment scored (in the baseline's order). An
    experiment that is the baseline's directory is not compared with itself. The baseline
    and the experiments draw from independent child streams of `default_rng(seed)`, in the
    order given. ValueError on an attack missing from an experiment, a different dataset
    than the baseline's, or fewer than two targets.
    """
    experiments = [e for e in experiments if e.path.resolve() != baseline.path.resolve()]
    everything = [baseline, *experiments]
    if attacks is None:
        attacks = [a for a in baseline.scores if all(a in e.scores for e in everything)]
        if not attacks:
            raise ValueError("no attack was scored in every experiment")
    for exp in everything:
        missing = [a for a in attacks if a not in exp.scores]
        if missing:
            raise ValueError(f"attack {missing[0]!r} is not in {exp.path} (has: {', '.join(exp.scores)})")
        if exp.dataset != baseline.dataset:
            raise ValueError(f"{exp.path}: dataset {exp.dataset!r} differs from the baseline's {baseline.dataset!r}")
        if exp.n_targets < 2:
            raise ValueError(f"{exp.path}: {exp.n_targets} target run; a comparison needs at least 2")
    labels = experiment_labels(everything)
    streams = np.random.default_rng(seed).spawn(len(everything))
    summaries = [summarise_experiment(exp, attacks=attacks, groups=groups, confidence=confidence, n_boot=n_boot,
                                      n_boot_eps=n_boot_eps, rng=stream, label=label)
                 for exp, stream, label in zip(everything, streams, labels)]
    comparisons = tuple(compare(s, summaries[0], alpha=alpha) for s in summaries[1:])
    return Report(baseline=summaries[0], experiments=tuple(summaries[1:]), comparisons=comparisons, seed=seed,
                  alpha=alpha)


# -- labels and rendering -----------------------------------------------------------------------
def experiment_labels(experiments: Sequence[Experiment]) -> list[str]:
    """Short names: the victim, its headline config keys, and the keys that differ between
    experiments of the same victim ("dm ipc=10 init=real"); the directory name breaks ties."""
    flat = [_flatten(e.config) for e in experiments]
    labels = []
    for exp, config in zip(experiments, flat):
        same_victim = [c for e, c in zip(experiments, flat) if e.victim == exp.victim]
        varying = sorted(k for k in config if k not in HEADLINE_KEYS
                         and len({_format_value(c.get(k)) for c in same_victim}) > 1)
        keys = [k for k in HEADLINE_KEYS if k in config] + varying
        labels.append(" ".join([exp.victim, *(f"{k}={_format_value(config[k])}" for k in keys)]))
    counts = Counter(labels)
    return [f"{label} ({exp.path.name})" if counts[label] > 1 else label for label, exp in zip(labels, experiments)]


def _flatten(config: Mapping, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


_DIGITS = {"auc": 3, "tpr_at_fpr_0.01": 3, "tpr_at_fpr_0.001": 4, "eps_lower": 2, "test_accuracy": 3}
_TITLES = {"test_accuracy": "test acc", "auc": "AUC", "tpr_at_fpr_0.01": "TPR@1% FPR",
           "tpr_at_fpr_0.001": "TPR@0.1% FPR", "eps_lower": "eps_lower"}


def markdown_table(report: Report) -> str:
    """Two markdown tables (estimates with the ΔAUC against the baseline; every difference
    with its Holm-adjusted p) and a legend of the protocol."""
    baseline = report.baseline
    head = ["experiment", "attack", "group", *(_TITLES[m] for m in ("test_accuracy", *METRICS)), "eps_ceiling",
            f"vs {baseline.label}"]
    lines = [_row(head), _row(["---"] * len(head))]
    for summary, comparison in [(baseline, None), *zip(report.experiments, report.comparisons)]:
        for (attack, group), estimate in summary.estimates.items():
            versus = "baseline" if comparison is None else _versus(comparison, attack, group)
            lines.append(_row([summary.label, attack, group, _estimate_cell(summary.test_accuracy, "test_accuracy"),
                               *(_estimate_cell(estimate.metrics.get(m), m) for m in METRICS),
                               "-" if estimate.eps_ceiling is None else f"{estimate.eps_ceiling:.2f}", versus]))
    lines += ["", _row(["experiment", "attack", "group", *(f"Δ{_TITLES[m]}" for m in ("test_accuracy", *METRICS))]),
              _row(["---"] * (4 + len(METRICS)))]
    for summary, comparison in zip(report.experiments, report.comparisons):
        accuracy = _difference_cell(comparison.get("test_accuracy"))
        for attack, group in summary.estimates:
            if (attack, group) in baseline.estimates:
                cells = [_difference_cell(_tested(comparison, m, attack, group)) for m in METRICS]
                lines.append(_row([summary.label, attack, group, accuracy, *cells]))
    lines += ["", _legend(report)]
    return "\n".join(lines)


def _tested(comparison: Comparison, metric: str, attack: str, group: str) -> MetricComparison | None:
    try:
        return comparison.get(metric, attack, group)
    except KeyError:  # eps_lower not resampled, or absent on a side
        return None


def _versus(comparison: Comparison, attack: str, group: str) -> str:
    if (attack, group) not in comparison.baseline.estimates:
        return f"no {group} group in the baseline"
    return f"ΔAUC {_difference_cell(comparison.get('auc', attack, group))}"


def _legend(report: Report) -> str:
    s = report.baseline
    sizes = [len(c.tests) for c in report.comparisons]
    family = f"the {sizes[0]} tests" if sizes and len(set(sizes)) == 1 else "all tests"
    eps = (f"eps_lower {s.n_boot_eps}" if s.n_boot_eps else "eps_lower: summary.json's point, not resampled "
           "(--n-boot-eps) nor tested")
    return (f"Intervals: {s.confidence:.0%} percentile, cluster bootstrap over target runs ({s.n_boot} replicates; "
            f"{eps}); test accuracy: t-interval over runs, Δ by Welch's t-test. eps_lower: one-run lower bound on "
            f"the pooled targets' canaries (group all, fair coins only; sub-groups have none), eps_ceiling: what a "
            f"perfect attack would certify with that design. "
            f"Δ = experiment - baseline; p: two-sided Wald test with the bootstrap standard error, Holm-adjusted "
            f"over {family} of each comparison; * adjusted p < {report.alpha:g}. Seed {report.seed}.")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _estimate_cell(interval: Interval | None, metric: str) -> str:
    if interval is None:
        return "-"
    d = _DIGITS[metric]
    if metric == "eps_lower" and math.isnan(interval.low) and math.isnan(interval.high):
        return f"{interval.point:.{d}f}"  # not resampled (--n-boot-eps 0)
    return f"{interval.point:.{d}f} [{_bound(interval.low, d)}, {_bound(interval.high, d)}]"


def _difference_cell(test: MetricComparison | None) -> str:
    if test is None:
        return "-"
    d = _DIGITS[test.metric]
    iv = test.difference
    p = "p<0.001" if test.p_adjusted < 0.001 else f"p={test.p_adjusted:.3f}"
    return f"{_bound(iv.point, d, sign=True)} [{_bound(iv.low, d, sign=True)}, {_bound(iv.high, d, sign=True)}] {p}" + (
        " *" if test.significant else "")


def _bound(value: float, digits: int, *, sign: bool = False) -> str:
    if math.isnan(value):
        return "-"
    value = value if round(value, digits) != 0 else 0.0  # no "-0.000"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def to_json(report: Report) -> dict:
    """The report as JSON-able data (NaN as null)."""
    first = report.baseline
    return {
        "seed": report.seed, "alpha": report.alpha, "confidence": first.confidence,
        "n_boot": first.n_boot, "n_boot_eps": first.n_boot_eps,
        "baseline": _summary_json(first),
        "experiments": [_summary_json(s) for s in report.experiments],
        "comparisons": [{"experiment": str(c.victim.experiment.path), "baseline": str(c.baseline.experiment.path),
                         "n_tests": len(c.tests), "tests": [t.to_json() for t in c.tests]}
                        for c in report.comparisons],
    }


def _summary_json(summary: ExperimentSummary) -> dict:
    exp = summary.experiment
    attacks: dict[str, dict] = {}
    for (attack, group), estimate in summary.estimates.items():
        attacks.setdefault(attack, {})[group] = {
            **{m: estimate.metrics[m].to_json() if m in estimate.metrics else None for m in METRICS},
            "eps_ceiling": estimate.eps_ceiling, "n_members": estimate.n_members, "n_nonmembers": estimate.n_nonmembers}
    return {"path": str(exp.path), "label": summary.label, "victim": exp.victim, "dataset": exp.dataset,
            "n_targets": exp.n_targets, "n_runs": int(exp.test_accuracy.size), "delta": exp.delta,
            "eps_confidence": exp.confidence, "test_accuracy": summary.test_accuracy.to_json(), "attacks": attacks}


def _json_float(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


# -- command line -------------------------------------------------------------------------------
def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m audit.compare",
                        description="Compare audited experiments with the naive baseline (a random real subset "
                                    "of the same size): intervals by a cluster bootstrap over target runs, "
                                    "differences with Holm-adjusted p-values.")
    p.add_argument("experiments", nargs="+", metavar="EXP_DIR", help="audited experiment directories")
    p.add_argument("--baseline", required=True, metavar="EXP_DIR", help="the baseline, e.g. a `subset` experiment")
    p.add_argument("--attack", action="extend", nargs="+", default=None,
                   help="attacks to compare (default: those every experiment scored)")
    p.add_argument("--group", action="extend", nargs="+", choices=GROUPS, default=None,
                   help="groups of members (default: all)")
    p.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON here")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the bootstrap")
    p.add_argument("--n-boot", type=int_at_least(1), default=N_BOOT, help="replicates for AUC and TPR")
    p.add_argument("--n-boot-eps", type=int_at_least(0), default=N_BOOT_EPS,
                   help="replicates for eps_lower (default 0: its point only, untested; each costs 0.1-2 s per attack)")
    p.add_argument("--confidence", type=probability, default=0.95, help="level of the intervals")
    p.add_argument("--alpha", type=probability, default=0.05, help="significance level after Holm's adjustment")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        baseline = load_experiment(args.baseline)
        experiments = [load_experiment(path) for path in args.experiments]
        if args.out is not None and not args.out.parent.is_dir():
            raise ValueError(f"--out {args.out}: no such directory {args.out.parent}")
        if args.out is not None and args.out.is_dir():
            raise ValueError(f"--out {args.out} is a directory")
        report = compare_experiments(experiments, baseline, attacks=args.attack, groups=args.group or ("all",),
                                     confidence=args.confidence, alpha=args.alpha, n_boot=args.n_boot,
                                     n_boot_eps=args.n_boot_eps, seed=args.seed)
    except ValueError as e:  # ExperimentError included
        parser.error(str(e))
    print(markdown_table(report))
    if args.out is not None:
        _write_atomic(args.out, json.dumps(to_json(report), indent=1) + "\n")
    return 0


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- checks -------------------------------------------------------------------------------------
def _check_positive(name: str, value: int, *, least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


def _check_level(name: str, value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value}")


def _check_groups(groups: Sequence[str]) -> list[str]:
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown group {unknown[0]!r} (known: {', '.join(GROUPS)})")
    return list(groups)


def _one_line(message) -> str:
    return " ".join(str(message).split())


if __name__ == "__main__":
    sys.exit(main())
