"""The steps an audit of shadow runs shares with `audit.release`: the experiment's record, the
plan's missing runs trained and stored as they arrive, and the canary coins checked first."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np

from audit.executor import ExecutorConfig, RunFailed, RunTask, execute, ray_session
from audit.placement import layout
from audit.provenance import provenance
from shadow_runs import RunStore, run_seed
from shadow_runs.plan import PLAN
from victims import victim_config
from shadow_runs.records import CanaryColumns
from victims.pool import Pool
from victims.source import victim_source


def experiment_record(
    victim,
    pool: Pool,
    *,
    dataset: str,
    seed: int,
    inclusion_rate: float,
    plan: str = PLAN,
    canaries: dict | None = None,
    threat_model: str = "black-box",
    pool_per_class: int | None = None,
    pool_unheld: int | None = None,
) -> dict:
    """experiment.json of `victim` on `pool` (docs/contracts.md "Experiment identity"): `dataset` its name (with
    `-N-per-class`, `-unheld-K` for those pools), `canaries` and `threat_model` only where they apply; `victim_source`,
    the code's hash, is provenance."""
    label = Path(dataset).stem if dataset.endswith((".npz", ".json")) else dataset
    if pool_per_class:
        label = f"{label}-{pool_per_class}-per-class"
    if pool_unheld:
        label = f"{label}-unheld-{pool_unheld}"
    return {
        "victim": victim.name,
        "dataset": label,
        "dataset_fingerprint": pool.fingerprint,
        "config": victim_config(victim),
        "n_pool": pool.n_pool,
        "master_seed": seed,
        "plan": plan,
        "inclusion_rate": inclusion_rate,
        **({"canaries": canaries} if canaries else {}),
        **({"threat_model": threat_model} if threat_model != "black-box" else {}),
        "victim_source": victim_source(type(victim), environment=_environment(victim)),
        **provenance(),
    }


def _environment(victim) -> dict | None:
    """What the victim's runs execute outside Python's modules (`environment()`), hashed into `victim_source`."""
    environment = getattr(victim, "environment", None)
    return environment() if callable(environment) else None


def train_missing_runs(
    store: RunStore,
    *,
    victim,
    pool: Pool,
    keep: np.ndarray,
    seed: int,
    inclusion_rate: float,
    executor: ExecutorConfig,
    quiet: bool,
) -> None:
    """Train every run of the plan `keep` the store lacks, storing each as it arrives (after a victim's `prepare(pool,
    directory, quiet=)`, once). Ctrl-C exits 130 with one line, the command that resumes: every stored run is complete.
    """
    from tqdm import tqdm

    finished = store.finished_runs()
    tasks = [
        RunTask(run=r, seed=run_seed(master_seed=seed, run=r), keep=row, inclusion_rate=inclusion_rate)
        for r, row in enumerate(keep)
        if r not in finished
    ]
    if tasks and hasattr(victim, "prepare"):  # work every run shares, once per store (dpsgd's pretrained start)
        try:
            victim = victim.prepare(pool, store.root, quiet=quiet)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
    try:
        with contextlib.ExitStack() as session:
            if tasks and executor.address is not None:  # the layout asks the cluster for its GPUs
                session.enter_context(ray_session(executor))
            try:
                placed = layout(executor, victim=victim, pixels=int(np.prod(pool.image_shape[1:])), n_runs=len(tasks))
            except ValueError as e:  # --device cuda with no GPU in sight
                raise RunFailed(str(e)) from None
            if tasks:  # a local Ray started for the layout's workers (a no-op where one runs already)
                session.enter_context(ray_session(placed.config))
            if placed.line and tasks and not quiet:
                print(placed.line, file=sys.stderr, flush=True)
            with tqdm(
                total=len(keep),
                initial=len(keep) - len(tasks),
                unit="run",
                desc=victim.name,
                disable=quiet,
                file=sys.stderr,
            ) as bar:
                for task, obs, meta in execute(tasks, victim=victim, pool=pool, config=placed.config):
                    store.write_run(task.run, *obs.to_store(meta))
                    bar.update(1)
    except KeyboardInterrupt:
        print(resume_line(store, len(keep)), file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except RunFailed as e:  # bad input met by a run: one line, exit 2, the runs stored so far kept
        kept = len(store.finished_runs() & set(range(len(keep))))
        print(f"{_prog()}: error: {e}; {kept} of {len(keep)} runs are stored in {store.root} and kept", file=sys.stderr)
        raise SystemExit(2) from None


def resume_line(store: RunStore, n_runs: int) -> str:
    """The one line an interrupted training prints: the runs kept, where, and the command that resumes."""
    kept = len(store.finished_runs() & set(range(n_runs)))
    return (
        f"interrupted: {kept} of {n_runs} runs are stored in {store.root} and kept; to train the other "
        f"{n_runs - kept} and audit, run {resume_command()}"
    )


def _prog() -> str:
    """ "python -m audit.lira" where this process was started so, else "error" lines' plain prefix."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return f"python -m {spec.name}" if spec is not None and spec.name.startswith("audit.") else "audit"


def resume_command() -> str:
    """The command this process was started with ("python -m audit.lira ..."), else "the same command"."""
    import shlex

    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or not spec.name.startswith("audit."):
        return "the same command"
    return shlex.join(["python", "-m", spec.name, *sys.argv[1:]])


def check_canary_coins(membership: np.ndarray, canaries: CanaryColumns) -> None:
    """ValueError, before any training, unless the target runs hold at least two IN and two OUT canary coins."""
    n_in, n_out = canaries.coins_scored(membership)
    if min(n_in, n_out) < 2:
        n = int(canaries.scored.sum())
        raise ValueError(
            f"--canaries {n} over {len(membership)} target runs draws {n_in} IN and {n_out} OUT "
            "canary coins; the canary group needs at least 2 of each (more --canaries or --n-targets)"
        )
