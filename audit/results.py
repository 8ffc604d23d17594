"""One reader of audited experiment directories, for `audit.compare`, `audit.report`,
`audit.release` and the notebooks.

An audited directory is what `python -m audit.lira` (or `audit.release`) leaves:
`experiment.json`, `audit/summary.json`, `audit/scores.npz`, `runs/<r:05d>.json|npz`
(docs/contracts.md, "The run store"). `load_experiment` reads the numbers (`Experiment`),
`load_audited` adds experiment.json and the runs' metadata (`Audited`); both raise
`ExperimentError`, one line naming the path, on anything unusable. Only directories made with
the membership plan of independent coins (`shadow_runs.plan.PLAN`) are read: an earlier plan's
bounds came from a relation the plan no longer has.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from shadow_runs.records import CanaryColumns

SIZE_KEYS = ("ipc", "spc")  # config keys giving a release's images per class


class ExperimentError(ValueError):
    """An experiment directory that cannot be read; the message is one line naming the path."""


HEADLINE_KEYS = ("epsilon", "ipc", "spc", "init")
_SCORES_META = ("target_runs", "membership", "init")
_RUN_FILE = re.compile(r"^\d{5}\.json$")


@dataclass(frozen=True, eq=False)
class Experiment:
    """What an audited experiment directory holds, checked for consistent shapes.

    `membership`, `init` and each array of `scores` are [T, n]: one row per target run.
    `test_accuracy` has one value per audited run (`audited_runs`: targets and references alike,
    the release alone for a release audit), so its mean is summary.json's `utility.test_accuracy`.
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
        canaries = (self.summary.get("evaluation") or {}).get("canaries") if isinstance(self.summary, Mapping) else None
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
        attacks = {
            a: entry["natural"]
            for a, entry in (self.summary.get("attacks") or {}).items()
            if isinstance(entry, Mapping) and "natural" in entry
        }
        return dataclasses.replace(
            self,
            summary={**self.summary, "attacks": attacks},
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


def load_experiment(path: str | os.PathLike) -> Experiment:
    """Read an experiment directory; ExperimentError (one line naming the path) if it is unusable."""
    path = Path(path)
    if not path.is_dir():
        raise ExperimentError(f"{path}: no such experiment directory")
    summary = _read_json(path / "audit" / "summary.json")
    check_plan(path, summary)
    arrays = _read_npz(path / "audit" / "scores.npz")
    membership = arrays["membership"]
    return Experiment(
        path=path,
        summary=summary,
        membership=membership,
        init=arrays.get("init", np.zeros_like(membership, dtype=bool)),
        scores={k: v for k, v in arrays.items() if k not in _SCORES_META},
        test_accuracy=_read_accuracies(run_files(path, summary)),
    )


def audited_runs(summary: Mapping) -> list[int] | None:
    """The runs an audit used, by summary.json: runs 0..n_shadow-1 of an audit of shadow runs (the
    store may hold more, left by a larger or interrupted --n-shadow before); the release, run 0, of a
    release audit (`audit.release`, whose n_shadow reference runs live in their own store); None,
    every stored run, where summary.json records no n_shadow."""
    if (summary.get("evaluation") or {}).get("target"):
        return [int(r) for r in summary.get("target_runs", [0])]
    n_shadow = summary.get("n_shadow")
    return None if n_shadow is None else list(range(int(n_shadow)))


def run_files(path: Path, summary: Mapping) -> list[Path]:
    """runs/<r:05d>.json of the audited runs (`audited_runs`), in run order; ExperimentError if there are none."""
    runs_dir = Path(path) / "runs"
    runs = audited_runs(summary)
    if runs is not None:
        return [runs_dir / f"{r:05d}.json" for r in runs]  # a missing one is named when read
    files = sorted(p for p in runs_dir.glob("*.json") if _RUN_FILE.match(p.name)) if runs_dir.is_dir() else []
    if not files:
        raise ExperimentError(f"{runs_dir}: no run files (<r:05d>.json)")
    return files


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
        raise ExperimentError(
            f"{path}: made with an earlier membership plan ({why}); this version reads only "
            f"{PLAN!r} audits: re-run the audit (python -m audit.lira) into a new --runs-dir"
        )


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


def _read_accuracies(files: Sequence[Path]) -> np.ndarray:
    accuracies = []
    for file in files:
        value = _read_json(file).get("test_accuracy")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ExperimentError(f"{file}: test_accuracy must be a finite number, got {value!r}")
        accuracies.append(float(value))
    return np.array(accuracies)


def experiment_labels(experiments: Sequence[Experiment]) -> list[str]:
    """Short names: the victim, its headline config keys, and the keys that differ between
    experiments of the same victim ("dm ipc=10 init=real"); the directory name breaks ties."""
    flat = [_flatten(e.config) for e in experiments]
    labels = []
    for exp, config in zip(experiments, flat):
        same_victim = [c for e, c in zip(experiments, flat) if e.victim == exp.victim]
        varying = sorted(
            k for k in config if k not in HEADLINE_KEYS and len({_format_value(c.get(k)) for c in same_victim}) > 1
        )
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


def _one_line(message) -> str:
    return " ".join(str(message).split())


@dataclass(frozen=True, eq=False)
class Audited:
    """An audited experiment directory: `audit.compare`'s view of it plus experiment.json and the runs' metadata."""

    experiment: Experiment
    meta: Mapping  # experiment.json ({} if absent)
    runs: tuple[Mapping, ...]  # runs/<r>.json of the audited runs (`audited_runs`), in run order
    label: str

    @property
    def path(self) -> Path:
        return self.experiment.path

    @property
    def summary(self) -> Mapping:
        return self.experiment.summary

    @property
    def victim(self) -> str:
        return self.experiment.victim

    @property
    def attacks(self) -> tuple[str, ...]:
        return tuple(self.experiment.scores)

    @property
    def size(self) -> int | None:
        """Released images per class, if the victim releases a set of a fixed size."""
        return next((self.experiment.config[k] for k in SIZE_KEYS if k in self.experiment.config), None)

    def scores(self, attack: str, group: str = "all") -> tuple[np.ndarray, np.ndarray]:
        """(member scores, non-member scores) of `attack`, pooled over the targets."""
        masks = self.experiment.group_masks()
        if group not in masks:
            raise ValueError(f"{self.path}: no group {group!r} (has: {', '.join(masks)})")
        s = self.experiment.scores[attack]
        return s[masks[group]], s[~self.experiment.membership]

    @property
    def canaries(self) -> Mapping | None:
        """summary.json's canary entry (`victims.canaries`) for an audit with inserted canaries, else None."""
        return (self.summary.get("evaluation") or {}).get("canaries") or None

    def group_scores(self, attack: str, group: str) -> tuple[np.ndarray, np.ndarray]:
        """(member, non-member) scores of an audit with canaries, pooled over the targets: group
        "canaries" (each canary record on its first row: the ε bound's guesses) or "natural"."""
        canaries = CanaryColumns.from_entry(self.canaries)
        columns = canaries.scored if group == "canaries" else canaries.natural
        s, m = self.experiment.scores[attack][:, columns], self.experiment.membership[:, columns]
        scored = ~np.isnan(s)  # a white-box attack scores the canaries only (NaN on natural examples)
        return s[m & scored], s[~m & scored]

    def bound_scores(self, attack: str) -> tuple[np.ndarray, np.ndarray]:
        """The scores the ε bound is on: the canary records when the audit inserted canaries, else every example."""
        return self.group_scores(attack, "canaries") if self.canaries else self.scores(attack)

    def release(self) -> tuple[int, np.ndarray, np.ndarray] | None:
        """(run, release_x, release_y) of the first target run, if it stored a release."""
        run = int(self.summary["target_runs"][0])
        path = self.path / "runs" / f"{run:05d}.npz"
        if not path.is_file():
            return None
        with np.load(path) as z:
            if "release_x" not in z.files:
                return None
            return run, z["release_x"], z["release_y"]


def load_audited(path: str | os.PathLike, *, label: str | None = None) -> Audited:
    """One audited experiment directory; `ExperimentError` (one line) if unusable."""
    exp = load_experiment(path)
    meta_path = exp.path / "experiment.json"
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        runs = tuple(json.loads(p.read_text()) for p in run_files(exp.path, exp.summary))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExperimentError(f"{exp.path}: unreadable metadata ({' '.join(str(e).split())})") from None
    return Audited(experiment=exp, meta=meta, runs=runs, label=label or experiment_labels([exp])[0])


def experiment_dirs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Each path itself if it is an audited experiment, else the audited experiments directly under it."""
    found = []
    for path in map(Path, paths):
        if (path / "audit" / "summary.json").is_file() or (path / "experiment.json").is_file():
            found.append(path)
            continue
        inside = sorted(p for p in path.iterdir() if (p / "audit" / "summary.json").is_file()) if path.is_dir() else []
        if not inside:
            raise ExperimentError(
                f"{path}: not an audited experiment directory (no audit/summary.json), nor a folder of them"
            )
        found.extend(inside)
    return found


def load_many(paths: Sequence[str | os.PathLike]) -> list[Audited]:
    """Every experiment `experiment_dirs` finds, labelled so that the labels tell them apart."""
    experiments = [load_experiment(p) for p in experiment_dirs(paths)]
    labels = experiment_labels(experiments)
    return [load_audited(e.path, label=label) for e, label in zip(experiments, labels)]


def pool_images(audited: Audited, *, data_root: str | None = None) -> np.ndarray | None:
    """The pool images [n, c, h, w] of a built-in dataset (checked against the experiment's
    fingerprint) or of the user's pool file `audit.release` recorded; None if unavailable."""
    from victims import DataError, load_pool
    from victims.data import dataset_names

    meta = audited.meta
    if meta.get("pool_file"):
        return _release_pool_images(audited)
    if meta.get("dataset") not in dataset_names():
        return None
    try:
        pool = load_pool(meta["dataset"], data_root=data_root)
    except DataError:
        return None
    if meta.get("canaries"):  # the canary rows follow the natural ones (victims.canaries)
        from victims.canaries import CanaryConfig, add_canaries

        try:
            pool = add_canaries(pool, CanaryConfig.from_entry(meta["canaries"]))
        except (KeyError, TypeError, ValueError):
            return None
    if meta.get("dataset_fingerprint") not in (None, pool.fingerprint):
        return None
    return pool.x


def _release_pool_images(audited: Audited) -> np.ndarray | None:
    from audit.releases.inputs import read_pool_images

    try:
        return read_pool_images(Path(audited.meta["pool_file"]), audited.path / "audit" / "pool_index.npy")
    except (OSError, ValueError, KeyError):
        return None
