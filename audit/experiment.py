"""An audited experiment's numbers in memory, checked for consistent shapes (`Experiment`), and the
labels that name experiments side by side; nothing here touches the disk."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from audit.result import AuditResult
from shadow_runs.plan import NATURAL_FIXED, PLAN, natural_coins
from shadow_runs.records import CanaryColumns


class ExperimentError(ValueError):
    """An experiment directory that cannot be read; the message is one line naming the path."""


HEADLINE_KEYS = ("epsilon", "ipc", "spc", "init")


@dataclass(frozen=True, eq=False)
class Experiment:
    """What an audited experiment directory holds, checked for consistent shapes: `membership`, `init`
    and `scores` [T, n], one row per target run; `test_accuracy` one value per audited run; `result`
    the audit's result (its summary.json)."""

    path: Path
    result: AuditResult
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
        if not isinstance(self.result, AuditResult) or not isinstance(self.result.victim, str):
            raise ExperimentError(f"{self.path}: summary has no victim name")
        canaries = self.result.canaries
        bound_columns = CanaryColumns.from_entry(canaries).scored if canaries else None
        if bound_columns is None or bound_columns.shape[0] != membership.shape[1]:
            bound_columns = slice(None)  # no canaries, or a view of some columns only (the natural examples)
        for name, array in scores.items():
            # NaN marks an example the attack did not score: allowed only outside the canaries of a
            # canary audit (a white-box attack scores the canaries alone)
            if np.isinf(array).any() or np.isnan(array[:, bound_columns]).any():
                raise ExperimentError(f"{self.path}: scores of {name} are not all finite")
        if not (membership.any(axis=1) & (~membership).any(axis=1)).all():
            raise ExperimentError(f"{self.path}: every target needs members and non-members")
        accuracy = np.asarray(self.test_accuracy, dtype=float).ravel()
        if accuracy.size == 0 or not np.isfinite(accuracy).all():
            raise ExperimentError(f"{self.path}: test accuracies must be finite and non-empty")
        for name, value in (("membership", membership), ("init", init), ("test_accuracy", accuracy)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "path", Path(self.path))

    @property
    def victim(self) -> str:
        return self.result.victim

    @property
    def dataset(self) -> str | None:
        return self.result.dataset

    @property
    def config(self) -> Mapping:
        return self.result.config

    @property
    def delta(self) -> float:
        """The victim's delta, 0 for non-DP victims: what eps_lower is computed with."""
        return float(self.result.delta or 0.0)

    @property
    def confidence(self) -> float:
        """The confidence level of the experiment's eps_lower."""
        return float(self.result.confidence)

    @property
    def n_targets(self) -> int:
        return self.membership.shape[0]

    @property
    def plan(self) -> str:
        """The membership plan summary.json records (`shadow_runs.plan`; independent coins where it records none)."""
        return self.result.evaluation.get("plan") or PLAN

    def epsilon_applies(self, attack: str) -> bool:
        """Whether `attack` has an ε lower bound (null in summary.json where coins were unfair or members chosen)."""
        entry = self.result.attacks.get(attack)
        return not (isinstance(entry, Mapping) and "eps_lower" in entry and entry["eps_lower"] is None)

    def natural_examples(self) -> Experiment:
        """This experiment seen through its natural examples (with `--canaries`: the first n_natural columns and the
        per-attack `natural` entries); ExperimentError under the fixed remainder."""
        canaries = self.result.canaries
        if not canaries:
            return self
        if not natural_coins(self.plan):
            raise ExperimentError(
                f"{self.path}: its natural examples cannot be compared ({NATURAL_FIXED}; {self.plan})"
            )
        n = int(canaries["n_natural"])
        attacks = {
            a: entry["natural"]
            for a, entry in self.result.attacks.items()
            if isinstance(entry, Mapping) and "natural" in entry
        }
        return dataclasses.replace(
            self,
            result=dataclasses.replace(self.result, attacks=attacks),
            membership=self.membership[:, :n],
            init=self.init[:, :n],
            scores={k: v[:, :n] for k, v in self.scores.items()},
        )

    def group_masks(self) -> dict[str, np.ndarray]:
        """Member masks [T, n] of the groups this experiment has (sub-groups only with >= 2 members)."""
        masks = {"all": self.membership}
        if self.init.any():
            subgroups = {"init": self.membership & self.init, "other_members": self.membership & ~self.init}
            masks.update({name: mask for name, mask in subgroups.items() if mask.sum() >= 2})
        return masks


def experiment_labels(experiments: Sequence[Experiment]) -> list[str]:
    """`result_labels` of the experiments' results, their directory names breaking ties."""
    return result_labels([e.result for e in experiments], [e.path.name for e in experiments])


def result_labels(results: Sequence[AuditResult], names: Sequence[str]) -> list[str]:
    """Short names of audits side by side: the victim, its headline config keys, and the keys that
    differ between audits of the same victim ("dm ipc=10 init=real"); where two are alike, each
    followed by its name in `names` (its directory's, "dm ipc=10 (dm-digits-4dfc0c6028)")."""
    flat = [_flatten(r.config) for r in results]
    labels = []
    for result, config in zip(results, flat):
        same_victim = [c for r, c in zip(results, flat) if r.victim == result.victim]
        varying = sorted(
            k for k in config if k not in HEADLINE_KEYS and len({_format_value(c.get(k)) for c in same_victim}) > 1
        )
        keys = [k for k in HEADLINE_KEYS if k in config] + varying
        labels.append(" ".join([result.victim, *(f"{k}={_format_value(config[k])}" for k in keys)]))
    counts = Counter(labels)
    return [f"{label} ({name})" if counts[label] > 1 else label for label, name in zip(labels, names)]


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
