"""Run victims over many seeds, as Ray tasks (local, or a cluster by address) or inline; `execute`
yields each finished run as it completes, so a run killed half-way costs only itself."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from victims.base import Observations, RunError, resolve_device
from victims.compiled import COMPILE_MODES, compiled_steps, resolve_compile, runs_per_worker
from victims.pool import DataError, Pool
from victims.precision import PRECISIONS
from victims.precision import precision as numerics

EXECUTORS = ("ray", "inline")


@dataclass(frozen=True)
class ExecutorConfig:
    kind: str = "ray"  # "ray" or "inline" (in this process, for debugging)
    workers: int | None = None  # local Ray: concurrent runs, one CPU each (None: every core)
    address: str | None = None  # an existing Ray cluster ("auto" or host:port); None starts one here
    gpus_per_run: float | None = None  # e.g. 0.25 puts four tasks on a GPU; None: `audit.placement`'s rule (0 on a CPU)
    max_retries: int = 3  # re-runs of a task whose worker died
    device: str = "auto"  # where a run trains: "auto", "cpu", "cuda"
    runs_per_task: int | None = None  # K runs per task, packed where the victim packs; None: the rule's (1 on a CPU)
    compile: str = "auto"  # --compile: the training steps through torch.compile, per worker (`victims.compiled`)
    precision: str = "fp32"  # --precision: the training's arithmetic (`victims.precision`)

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ValueError(f"--executor must be one of {EXECUTORS}, got {self.kind!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        share = self.gpus_per_run
        if share is not None and (share < 0 or (share > 1 and not float(share).is_integer())):
            raise ValueError(f"--gpus-per-run must be a fraction in [0, 1] or a whole number, got {share}")
        if self.runs_per_task is not None and self.runs_per_task < 1:
            raise ValueError(f"--runs-per-task must be >= 1, got {self.runs_per_task}")
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"--compile must be one of {COMPILE_MODES}, got {self.compile!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"--precision must be one of {PRECISIONS}, got {self.precision!r}")

    @property
    def gpu_share(self) -> float:
        return self.gpus_per_run or 0.0

    @property
    def pack_size(self) -> int:
        return self.runs_per_task or 1


class RunFailed(ValueError):
    """Bad input a run (or pack) met (`RunError`, `DataError`): one line naming the run, seed and the victim's line."""


class RayUnavailable(RunFailed):
    """Ray that cannot start or join its cluster, in one line that suggests `--executor inline`."""


@dataclass(frozen=True, eq=False)
class RunTask:
    run: int
    seed: int
    keep: np.ndarray  # bool [n_pool]
    inclusion_rate: float = 0.5  # the plan's public coin probability: DP victims calibrate to inclusion_rate * n_pool


def run_victims(
    victim: Any,
    pool: Pool,
    tasks: Sequence[RunTask],
    *,
    device: str,
    compiled: bool = False,
    precision: str = "fp32",
) -> list[tuple[Observations, dict]]:
    """The runs of `tasks` in this task with their metadata, on one torch thread (so a run's results
    do not depend on the executor or the cores); with `compiled` through torch.compile, at
    `precision` (each recorded). A victim that packs trains them together (`victims.packed`), each
    keeping its own seed, members and result; `wall_s` is then the pack's time over its runs."""
    import torch

    device = resolve_device(device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    extra = {**({"compiled": True} if compiled else {}), **({"precision": precision} if precision != "fp32" else {})}
    try:
        with compiled_steps(compiled), numerics(precision):
            return [(obs, {**meta, **extra}) for obs, meta in _run_all(victim, pool, tasks, device=device)]
    finally:
        torch.set_num_threads(threads)


def _run_all(victim: Any, pool: Pool, tasks: Sequence[RunTask], *, device: str) -> list[tuple[Observations, dict]]:
    """`_run_tasks`, a run's bad input raised as `RunFailed` naming the run; any other error as it is (a bug)."""
    try:
        return _run_tasks(victim, pool, tasks, device=device)
    except (RunError, DataError) as e:
        named = [tasks[i] for i in e.runs] if getattr(e, "runs", None) else tasks
        which = ", ".join(f"{t.run} (seed {t.seed})" for t in named)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise RunFailed(f"run{'s' if len(named) > 1 else ''} {which}: {first}") from None


def _run_tasks(victim: Any, pool: Pool, tasks: Sequence[RunTask], *, device: str) -> list[tuple[Observations, dict]]:
    if len(tasks) > 1 and victim_packs(victim):
        start = time.perf_counter()
        observations = victim.run_packed(
            pool,
            np.stack([t.keep for t in tasks]),
            [t.seed for t in tasks],
            device=device,
            inclusion_rate=tasks[0].inclusion_rate,
        )
        wall = (time.perf_counter() - start) / len(tasks)
        return [
            (obs, {**_meta(task, wall, device), "runs_in_task": len(tasks)}) for task, obs in zip(tasks, observations)
        ]
    done = []
    for task in tasks:
        start = time.perf_counter()
        obs = victim.run(pool, task.keep, task.seed, device=device, inclusion_rate=task.inclusion_rate)
        done.append((obs, _meta(task, time.perf_counter() - start, device)))
    return done


def victim_packs(victim: Any) -> bool:
    """Whether the victim trains a task's runs together: it offers `run_packed` and does not say `packs =
    False` (a command whose pipeline declares no `batch`)."""
    return hasattr(victim, "run_packed") and getattr(victim, "packs", True)


def _meta(task: RunTask, wall_s: float, device: str) -> dict:
    return {
        "run": task.run,
        "seed": task.seed,
        "wall_s": round(wall_s, 3),
        "host": socket.gethostname(),
        "device": device,
    }


def execute(
    tasks: Sequence[RunTask], *, victim: Any, pool: Pool, config: ExecutorConfig
) -> Iterator[tuple[RunTask, Observations, dict]]:
    """Yield (task, observations, metadata) for every task, in completion order; `config.runs_per_task`
    consecutive tasks go to one worker together (a pack's runs arrive together)."""
    if not tasks:
        return
    if len({t.inclusion_rate for t in tasks}) > 1:
        raise ValueError("every task of one execution has the plan's one inclusion rate")
    k = config.pack_size
    packs = [tuple(tasks[i : i + k]) for i in range(0, len(tasks), k)]
    inline = config.kind == "inline"
    compiled = resolve_compile(
        config.compile,
        runs_per_worker=runs_per_worker(len(packs), 1 if inline else (config.workers or os.cpu_count() or 1)),
        pixels=int(np.prod(pool.image_shape[1:])),
        inline=inline,
        break_even=getattr(victim, "compile_break_even", None),
        device="cuda" if config.gpu_share > 0 else resolve_device(config.device),
    )
    if inline:
        for pack in packs:
            for task, (obs, meta) in zip(
                pack,
                run_victims(victim, pool, pack, device=config.device, compiled=compiled, precision=config.precision),
            ):
                yield task, obs, meta
        return
    yield from _execute_ray(packs, victim=victim, pool=pool, config=config, compiled=compiled)


@contextlib.contextmanager
def ray_session(config: ExecutorConfig) -> Iterator[None]:
    """Ray started for what runs inside (unless running, or inline) and shut down after; shared by every `execute`."""
    if config.kind == "inline":
        yield
        return
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(
                # "local": a new Ray here even when another one runs on this machine (address None
                # would join the cluster a `ray start` last recorded, or RAY_ADDRESS's)
                address=config.address or "local",
                num_cpus=(config.workers or os.cpu_count()) if config.address is None else None,
                include_dashboard=False,
                logging_level="ERROR",
                log_to_driver=False,
                configure_logging=True,
            )
        except Exception as e:  # noqa: BLE001 - Ray's own failures (a node that timed out, no cluster at the address)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            where = f"join the Ray cluster at {config.address}" if config.address else "start Ray here"
            raise RayUnavailable(f"could not {where}: {first}; --executor inline runs without Ray") from None
    try:
        yield
    finally:
        if started_here:
            ray.shutdown()


def _execute_ray(packs, *, victim, pool, config: ExecutorConfig, compiled: bool):
    import ray

    with ray_session(config):
        remote = ray.remote(run_victims).options(num_cpus=1, num_gpus=config.gpu_share, max_retries=config.max_retries)
        device = "cuda" if config.gpu_share > 0 else config.device
        victim_ref, pool_ref = ray.put(victim), ray.put(pool)  # shipped once, shared by every task
        slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        max_pending = 2 * (config.workers or slots)
        queue, pending = list(packs), {}
        while queue or pending:
            while queue and len(pending) < max_pending:
                pack = queue.pop(0)
                pending[
                    remote.remote(
                        victim_ref, pool_ref, pack, device=device, compiled=compiled, precision=config.precision
                    )
                ] = pack
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                pack = pending.pop(ref)
                try:
                    finished = ray.get(ref)
                except ray.exceptions.RayTaskError as e:  # the run's own error, not Ray's wrapping of it
                    if isinstance(e.cause, RunFailed):
                        raise e.cause from None
                    raise
                for task, (obs, meta) in zip(pack, finished):
                    yield task, obs, meta
