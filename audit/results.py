"""One reader of audited experiment directories (docs/contracts.md, "The run store"), for
`audit.compare`, `audit.report`, `audit.release` and the notebooks.

`load_experiment` and `load_audited` raise `ExperimentError`, one line naming the path, on anything
unusable. Only membership plans of this version (`shadow_runs.plan.PLANS`) are read: an earlier
plan's bounds came from a relation the plan no longer has.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from audit.experiment import Experiment, ExperimentError, experiment_labels  # re-exported: read here, defined there
from audit.result import AuditResult
from shadow_runs.records import CanaryColumns

SIZE_KEYS = ("ipc", "spc")  # config keys giving a release's images per class
_SCORES_META = ("target_runs", "membership", "init")
_RUN_FILE = re.compile(r"^\d{5}\.json$")


def load_experiment(path: str | os.PathLike) -> Experiment:
    """Read an experiment directory; ExperimentError (one line naming the path) if it is unusable."""
    path = Path(path)
    if not path.is_dir():
        raise ExperimentError(f"{path}: no such experiment directory")
    try:
        result = AuditResult.from_json(_read_json(path / "audit" / "summary.json"))
    except ValueError as e:  # a recorded claim that is no claim
        raise ExperimentError(f"{path}: {e}") from None
    check_plan(path, result)
    arrays = _read_npz(path / "audit" / "scores.npz")
    membership = arrays["membership"]
    return Experiment(
        path=path,
        result=result,
        membership=membership,
        init=arrays.get("init", np.zeros_like(membership, dtype=bool)),
        scores={k: v for k, v in arrays.items() if k not in _SCORES_META},
        test_accuracy=_read_accuracies(run_files(path, result)),
    )


def audited_runs(result: AuditResult) -> list[int] | None:
    """The runs an audit used, by summary.json: runs 0..n_shadow-1 of a shadow-run audit (the store may hold more); run
    0, the release, of a release audit; None (every stored run) where no n_shadow is recorded."""
    if result.evaluation.get("target"):
        return [int(r) for r in result.target_runs or (0,)]
    return None if result.n_shadow is None else list(range(int(result.n_shadow)))


def run_files(path: Path, result: AuditResult) -> list[Path]:
    """runs/<r:05d>.json of the audited runs (`audited_runs`), in run order; ExperimentError if there are none."""
    runs_dir = Path(path) / "runs"
    runs = audited_runs(result)
    if runs is not None:
        return [runs_dir / f"{r:05d}.json" for r in runs]  # a missing one is named when read
    files = sorted(p for p in runs_dir.glob("*.json") if _RUN_FILE.match(p.name)) if runs_dir.is_dir() else []
    if not files:
        raise ExperimentError(f"{runs_dir}: no run files (<r:05d>.json)")
    return files


def check_plan(path: Path, result: AuditResult) -> None:
    """ExperimentError unless the experiment was made with a plan of this version: its
    experiment.json (or, without one, summary.json's evaluation) records one of `PLANS`, and
    summary.json carries `eps_ceiling` for every attack. An earlier plan's bounds are not one-run bounds."""
    from shadow_runs.plan import PLANS

    meta_path = path / "experiment.json"
    plan = (_read_json(meta_path) if meta_path.is_file() else result.evaluation).get("plan")
    lacking = [a for a, entry in result.attacks.items() if not isinstance(entry, Mapping) or "eps_ceiling" not in entry]
    known = plan in PLANS.values()
    if not known or lacking:
        named = "no recorded plan" if plan is None else f"plan {plan!r}"
        why = f"it has {named}" if not known else f"its summary.json has no eps_ceiling for {lacking[0]}"
        raise ExperimentError(
            f"{path}: made with an earlier membership plan ({why}); this version reads only "
            f"{' and '.join(map(repr, PLANS.values()))} audits: re-run the audit (python -m audit.lira) into a "
            "new --runs-dir"
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
    def result(self) -> AuditResult:
        return self.experiment.result

    @property
    def victim(self) -> str:
        return self.experiment.victim

    @property
    def attacks(self) -> tuple[str, ...]:
        return tuple(self.experiment.scores)

    @property
    def table(self) -> bool:
        """Whether the victim released a table: its runs' utility holds the release's marginal distances."""
        return "marginal_tv_1way" in self.result.utility

    @property
    def size(self) -> int | None:
        """Released images per class, or a table's released records, if the victim releases a set of a fixed size."""
        keys = ("rows",) if self.table else SIZE_KEYS
        return next((self.experiment.config[k] for k in keys if k in self.experiment.config), None)

    @property
    def baseline(self) -> str:
        """The naive baseline's victim, a random real subset of the same size: `tabular-subset` for a table."""
        return "tabular-subset" if self.table else "subset"

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
        return self.result.canaries or None

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
        run = int(self.result.target_runs[0])
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
        runs = tuple(json.loads(p.read_text()) for p in run_files(exp.path, exp.result))
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
    fingerprint); None if unavailable, and for an audited release, whose pool file the release's
    own reader reads (`audit.releases.inputs.audited_pool_images`, which `audit.report` passes on)."""
    from victims import DataError, load_pool
    from victims.data import dataset_names

    meta = audited.meta
    if meta.get("pool_file"):
        return None
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
