"""Run victims over many seeds: as Ray tasks (local by default, a cluster by address) or inline.

`execute` yields each finished run as it completes, so the driver can store it at once; a run
that is killed half-way therefore costs only itself.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from victims.base import Observations, resolve_device
from victims.data import Pool

EXECUTORS = ("ray", "inline")


@dataclass(frozen=True)
class ExecutorConfig:
    kind: str = "ray"  # "ray" or "inline" (in this process, for debugging)
    workers: int | None = None  # local Ray: concurrent runs, one CPU each (None: every core)
    address: str | None = None  # an existing Ray cluster ("auto" or host:port); None starts one here
    gpus_per_run: float = 0.0  # e.g. 0.25 packs four runs per GPU
    max_retries: int = 3  # re-runs of a task whose worker died
    device: str = "auto"  # where a run trains: "auto", "cpu", "cuda"

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ValueError(f"--executor must be one of {EXECUTORS}, got {self.kind!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.gpus_per_run < 0 or (self.gpus_per_run > 1 and not float(self.gpus_per_run).is_integer()):
            raise ValueError(f"--gpus-per-run must be a fraction in [0, 1] or a whole number, got {self.gpus_per_run}")


@dataclass(frozen=True, eq=False)
class RunTask:
    run: int
    seed: int
    keep: np.ndarray  # bool [n_pool]
    inclusion_rate: float = 0.5  # the plan's public coin probability: DP victims calibrate to inclusion_rate * n_pool


def run_victim(victim: Any, pool: Pool, task: RunTask, *, device: str) -> tuple[Observations, dict]:
    """One run of `victim` on one torch thread, with the metadata stored beside it.

    One thread per run: concurrent runs do not fight over the cores, and a run's floating-point
    results do not depend on the executor or on how many cores the machine has.
    """
    import torch

    device = resolve_device(device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    try:
        obs = victim.run(pool, task.keep, task.seed, device=device, inclusion_rate=task.inclusion_rate)
    finally:
        torch.set_num_threads(threads)
    meta = {"run": task.run, "seed": task.seed, "wall_s": round(time.perf_counter() - start, 3),
            "host": socket.gethostname(), "device": device}
    return obs, meta


def execute(tasks: Sequence[RunTask], *, victim: Any, pool: Pool, config: ExecutorConfig) -> Iterator[tuple[RunTask, Observations, dict]]:
    """Yield (task, observations, metadata) for every task, in completion order."""
    if not tasks:
        return
    if config.kind == "inline":
        for task in tasks:
            yield (task, *run_victim(victim, pool, task, device=config.device))
        return
    yield from _execute_ray(tasks, victim=victim, pool=pool, config=config)


def _execute_ray(tasks, *, victim, pool, config: ExecutorConfig):
    import ray

    started_here = not ray.is_initialized()
    if started_here:
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
    try:
        remote = ray.remote(run_victim).options(
            num_cpus=1, num_gpus=config.gpus_per_run, max_retries=config.max_retries
        )
        device = "cuda" if config.gpus_per_run > 0 else config.device
        victim_ref, pool_ref = ray.put(victim), ray.put(pool)  # shipped once, shared by every task
        slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        max_pending = 2 * (config.workers or slots)
        queue, pending = list(tasks), {}
        while queue or pending:
            while queue and len(pending) < max_pending:
                task = queue.pop(0)
                pending[remote.remote(victim_ref, pool_ref, task, device=device)] = task
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                task = pending.pop(ref)
                yield (task, *ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()
