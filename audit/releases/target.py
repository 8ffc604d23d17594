"""The user's release as the one target of `audit.release`: the victim that made it, the
downstream model trained on it as a shadow run would be, and the audit directory it goes to."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import socket
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from victims.overrides import build_victim
from audit.evaluate import StoredRuns, TablePool
from audit.releases.inputs import ReleaseError, ReleaseInputs
from audit.results import SIZE_KEYS
from audit.summary import RELEASE_TARGET
from victims import get_victim
from shadow_runs.store import differences

TARGET_STREAM = 7  # SeedSequence stream of the downstream training on the user's release


def size_field(victim_name: str) -> str | None:
    """The victim's images-per-class field (`ipc`, `spc`), if it has one."""
    names = {f.name for f in dataclasses.fields(get_victim(victim_name))}
    return next((k for k in SIZE_KEYS if k in names), None)


def victim_for(name: str, overrides: Mapping[str, Any], inputs: ReleaseInputs):
    """The victim `name` with `overrides` (`audit.cli.victim_flags.victim_overrides`), its images
    per class (a table's: its `rows`) set from the release when not given."""
    cls = get_victim(name)
    if getattr(cls, "tabular", False) or inputs.pool.tabular:
        return _table_victim_for(name, cls, overrides, inputs)
    if not callable(getattr(cls, "observe_release", None)):
        raise ReleaseError(
            f"--victim {name} trains no downstream model on a released data set, so audit.release cannot train "
            "one on yours; a generator of your own derives from victims.synthetic.SyntheticDataVictim "
            "(README, 'Audit your own generator')"
        )
    overrides = dict(overrides)
    key = size_field(name)
    if key is not None:
        counts = inputs.per_class
        if len(set(counts.tolist())) != 1:
            raise ReleaseError(
                f"the release holds {counts.tolist()} images per class; --victim {name} "
                f"releases the same number of every class"
            )
        given = overrides.get(key)
        if given is not None and given != counts[0]:
            raise ReleaseError(f"--{key} {given} does not match the release's {counts[0]} images per class")
        overrides[key] = int(counts[0])
    return build_victim(name, overrides)


def _table_victim_for(name: str, cls, overrides: Mapping[str, Any], inputs: ReleaseInputs):
    """A tabular victim for a table's release, its `rows` the release's row count (a flag given must
    agree); ReleaseError for a victim and a pool of different kinds."""
    if not inputs.pool.tabular:
        raise ReleaseError(f"--victim {name} releases a table; give the table as --dataset with --members")
    if not getattr(cls, "tabular", False):
        raise ReleaseError(f"--victim {name} releases images, and --dataset {inputs.pool.name} is a table")
    overrides, rows = dict(overrides), len(inputs.release_y)
    if overrides.get("rows") is not None and overrides["rows"] != rows:
        raise ReleaseError(f"--rows {overrides['rows']} does not match the release's {rows} rows")
    return build_victim(name, {**overrides, "rows": rows})


# -- the audit ------------------------------------------------------------------------------------
def target_run(victim, inputs: ReleaseInputs, *, seed: int, device: str):
    """Observations of the downstream model trained on the user's release, as a shadow run makes them
    (`victim.observe_release`; a table's, `victims.tabular.release.observe_release`)."""
    from victims.base import resolve_device

    device = resolve_device(device)
    run_seed = int(np.random.SeedSequence([seed, TARGET_STREAM]).generate_state(1)[0] >> 1)
    start = time.perf_counter()
    if inputs.pool.tabular:
        from victims.tabular.release import Released, observe_release

        released = Released(inputs.release_x, inputs.release_y, {"init_idx": inputs.init_idx})
        obs = observe_release(inputs.pool, released, seed=run_seed, iterations=victim.classifier_iterations)
    else:
        obs = victim.observe_release(
            inputs.pool, inputs.release_x, inputs.release_y, seed=run_seed, device=device, init_idx=inputs.init_idx
        )
    meta = {
        "run": 0,
        "seed": run_seed,
        "wall_s": round(time.perf_counter() - start, 3),
        "host": socket.gethostname(),
        "device": device,
        "target": RELEASE_TARGET,
    }
    return obs, meta


def with_target(shadows: StoredRuns, obs, inputs: ReleaseInputs, meta: dict) -> StoredRuns:
    """The shadow runs plus the user's release as one more run (the last), for `attack_scores`."""
    from attacks import cross_entropy, dcr_scores, logit_confidence

    pool = inputs.pool
    init = np.zeros(pool.n_pool, dtype=bool)
    init[inputs.init_idx] = True
    dcr = density = counts = None
    if shadows.dcr is not None and pool.schema is not None:  # a table: Gower's DCR, its density and query counts
        found = TablePool.of(pool.schema, pool.x, pool.y).statistics(inputs.release_x, inputs.release_y)
        dcr = np.vstack([shadows.dcr, found.dcr[None]])
        if shadows.release_density is not None and shadows.release_counts is not None:
            density = np.vstack([shadows.release_density, found.log_density[None]])
            counts = np.concatenate([shadows.release_counts, found.counts[None]])
    elif shadows.dcr is not None:
        dcr = np.vstack([shadows.dcr, dcr_scores(pool.x, pool.y, inputs.release_x, inputs.release_y)[None]])
    return StoredRuns(
        keep=np.vstack([shadows.keep, inputs.member[None]]),
        confidence=np.concatenate([shadows.confidence, logit_confidence(obs.logits, pool.y)[None]]),
        loss=np.vstack([shadows.loss, cross_entropy(obs.logits[:, 0, :], pool.y)[None]]),
        init_mask=np.vstack([shadows.init_mask, init[None]]),
        meta=(*shadows.meta, meta),
        dcr=dcr,
        release_density=density,
        release_counts=counts,
    )


def release_id(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_out_dir(out: Path, record: dict) -> None:
    """Refuse an --out that is not a directory, or that holds the audit of another release or pool."""
    if out.exists() and not out.is_dir():
        raise ReleaseError(f"--out {out} is not a directory")
    meta_path = out / "experiment.json"
    if meta_path.exists():
        try:
            stored = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            raise ReleaseError(f"{meta_path} is not valid JSON; refusing to overwrite it") from None
        keys = (
            "victim",
            "config",
            "dataset_fingerprint",
            "release_sha256",
            "master_seed",
            "n_shadow",
            "membership_sha256",
            "plan",
            "inclusion_rate",
            "membership_rate",
            "membership_seed",
        )
        changes = [
            c for k in keys if stored.get(k) != record.get(k) for c in differences(k, stored.get(k), record.get(k))
        ]
        if changes:
            raise ReleaseError(
                f"--out {out} holds another release audit (stored -> asked: {'; '.join(changes)}); "
                f"refusing to overwrite it: pass another --out, or move {out} away"
            )
    elif out.is_dir() and any(out.iterdir()):
        raise ReleaseError(f"--out {out} is a non-empty directory that is no release audit; refusing to write there")
