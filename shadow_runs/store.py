"""The run store: one directory per experiment, one file pair per run (docs/contracts.md, "The run
store"). Every file is written to a temporary name and renamed into place, so a file that exists is
complete; a run is finished once its .json (written after its .npz) exists."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from shadow_runs.atomic_files import atomic_write, write_json, write_npy
from shadow_runs.plan import DEFAULT_INCLUSION_RATE, FIXED_REMAINDER

#: experiment.json keys that identify the configuration; the others are provenance
IDENTITY_KEYS = (
    "victim",
    "dataset",
    "dataset_fingerprint",
    "config",
    "n_pool",
    "master_seed",
    "plan",
    "inclusion_rate",
)
#: identity keys experiment.json holds only away from their default (`_HASH_DEFAULTS`): `canaries` (victims.canaries)
#: with canaries, `threat_model` (victims.dp.whitebox_canaries) for a white-box experiment
OPTIONAL_IDENTITY_KEYS = ("canaries", "threat_model")
#: identity keys left out of the directory's hash: keys at their default (a key added later renames no older store),
#: and the plan unless one of `_HASHED_PLANS` (a store of another plan under the same name is refused, naming it)
_HASH_DEFAULTS = {"inclusion_rate": DEFAULT_INCLUSION_RATE, "canaries": None, "threat_model": None}
_HASHED_PLANS = (FIXED_REMAINDER,)
_ALL_IDENTITY_KEYS = IDENTITY_KEYS + OPTIONAL_IDENTITY_KEYS


class StoreError(ValueError):
    """The store cannot be used as asked; the message is one line naming the offending path or value."""


def experiment_id(experiment: dict) -> str:
    """`victim-dataset-<10 hex chars of the identity's hash>`."""
    identity = {
        k: experiment.get(k)
        for k in _ALL_IDENTITY_KEYS
        if (k != "plan" or experiment.get(k) in _HASHED_PLANS)
        and not (k in _HASH_DEFAULTS and experiment.get(k, _HASH_DEFAULTS[k]) == _HASH_DEFAULTS[k])
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
    return f"{experiment['victim']}-{experiment['dataset']}-{digest}"


def differences(key: str, stored, asked, *, most: int = 60) -> list[str]:
    """Where `stored` and `asked` differ, one `dotted.key: stored -> asked` each (a missing key shows as
    `(none)`), each value as JSON cut to `most` characters."""
    if isinstance(stored, dict) and isinstance(asked, dict):
        return [
            change
            for k in sorted(stored.keys() | asked.keys(), key=str)
            if stored.get(k, _ABSENT) != asked.get(k, _ABSENT)
            for change in differences(f"{key}.{k}", stored.get(k, _ABSENT), asked.get(k, _ABSENT), most=most)
        ]

    def shown(value) -> str:
        text = "(none)" if value is _ABSENT else json.dumps(value, sort_keys=True)
        return text if len(text) <= most else text[: most - 3] + "..."

    return [f"{key}: {shown(stored)} -> {shown(asked)}"]


_ABSENT = object()


class RunStore:
    """An experiment directory: checked or created by `open`, then filled run by run."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def open(
        cls, runs_dir: str | os.PathLike, *, experiment: dict, pool_labels: np.ndarray, keep_other_code: bool = False
    ) -> RunStore:
        """The store for `experiment` under `runs_dir`, created if new; refused if it holds another configuration, or
        runs of other victim code (`victim_source`, see `check_source`) unless `keep_other_code`."""
        runs_dir = Path(runs_dir)
        if (runs_dir / "experiment.json").exists():
            raise StoreError(f"--runs-dir {runs_dir} is an experiment directory; pass its parent")
        if runs_dir.exists() and not runs_dir.is_dir():
            raise StoreError(f"--runs-dir {runs_dir} is not a directory")
        store = cls(runs_dir / experiment_id(experiment))
        meta_path = store.root / "experiment.json"
        if meta_path.exists():
            try:
                stored = json.loads(meta_path.read_text())
            except json.JSONDecodeError as e:
                raise StoreError(f"{meta_path} is not valid JSON ({e.msg}); refusing to use it") from None
            differing = [
                k
                for k in _ALL_IDENTITY_KEYS
                if stored.get(k, _HASH_DEFAULTS.get(k)) != experiment.get(k, _HASH_DEFAULTS.get(k))
            ]
            if "plan" in differing:
                raise StoreError(
                    f"{store.root} was made with membership plan {stored.get('plan')!r}, not "
                    f"{experiment.get('plan')!r}; refusing to mix (use a new --runs-dir)"
                )
            if differing:
                default = _HASH_DEFAULTS.get
                changes = [
                    c
                    for k in differing
                    for c in differences(k, stored.get(k, default(k)), experiment.get(k, default(k)))
                ]
                raise StoreError(
                    f"{store.root} holds another configuration (stored -> asked: {'; '.join(changes)}); refusing "
                    f"to mix: pass another --runs-dir, or move {store.root} away"
                )
            labels_path = store.root / "pool_labels.npy"
            if not labels_path.exists() or not np.array_equal(np.load(labels_path), pool_labels):
                raise StoreError(f"{labels_path} does not match the pool; refusing to mix")
            store.check_source(stored, experiment, keep_other_code=keep_other_code)
        else:
            write_npy(store.root / "pool_labels.npy", np.asarray(pool_labels, dtype=np.int64))
            write_json(meta_path, experiment)
        return store

    def check_source(self, stored: dict, experiment: dict, *, keep_other_code: bool) -> None:
        """Refuse a store whose runs came from other victim code (`victim_source.sha256` differs), naming
        both hashes. With `keep_other_code` it is kept: experiment.json records the new hash and, under
        `earlier_victim_sources`, the old one with its runs. A store without a hash is used as it is."""
        old = (stored.get("victim_source") or {}).get("sha256")
        new = (experiment.get("victim_source") or {}).get("sha256")
        if old is None or new is None or old == new:
            return
        if not keep_other_code:
            raise StoreError(
                f"{self.root} holds runs of other victim code (source {old[:12]}, this code {new[:12]}); "
                f"refusing to mix: move it away to retrain, or pass --keep-runs-of-other-code to keep its runs"
            )
        earlier = [*stored.get("earlier_victim_sources", []), {"sha256": old, "runs": len(self.finished_runs())}]
        write_json(
            self.root / "experiment.json",
            {**stored, "victim_source": experiment["victim_source"], "earlier_victim_sources": earlier},
        )

    # -- the membership plan ------------------------------------------------------------------
    def keep(self) -> np.ndarray | None:
        path = self.root / "keep.npy"
        return np.load(path) if path.exists() else None

    def extend_plan(self, keep: np.ndarray) -> None:
        """Store `keep` if it extends (or equals) the stored plan; a plan with other rows is refused."""
        stored = self.keep()
        if stored is not None:
            rows = min(len(stored), len(keep))
            if stored.shape[1:] != keep.shape[1:] or not np.array_equal(stored[:rows], keep[:rows]):
                raise StoreError(f"{self.root / 'keep.npy'} holds another membership plan; refusing to mix")
            if len(stored) >= len(keep):
                return
        write_npy(self.root / "keep.npy", keep)

    # -- runs ---------------------------------------------------------------------------------
    def _run_path(self, run: int, suffix: str) -> Path:
        return self.root / "runs" / f"{run:05d}{suffix}"

    def finished_runs(self) -> set[int]:
        runs = self.root / "runs"
        if not runs.is_dir():
            return set()
        return {int(p.stem) for p in runs.glob("[0-9]" * 5 + ".json") if p.with_suffix(".npz").exists()}

    def write_run(self, run: int, arrays: Mapping[str, np.ndarray], meta: dict) -> None:
        """Store run `run`: `arrays` as runs/<run>.npz, then `meta` as runs/<run>.json (last: the run is
        finished once it exists). The store imports no victim type (`Observations.to_store`)."""
        atomic_write(self._run_path(run, ".npz"), lambda f: np.savez(f, **arrays))
        write_json(self._run_path(run, ".json"), meta)

    def load_run(self, run: int) -> tuple[dict[str, np.ndarray], dict]:
        with np.load(self._run_path(run, ".npz")) as z:
            arrays = {k: z[k] for k in z.files}
        return arrays, self.load_meta(run)

    def load_meta(self, run: int) -> dict:
        """runs/<run>.json alone: its seed, ε, δ, the mechanism it records, ..."""
        return json.loads(self._run_path(run, ".json").read_text())

    @property
    def audit_dir(self) -> Path:
        return self.root / "audit"
