"""Where an audit's runs train: the layout the executor flags leave open, filled by one rule (docs/performance.md, "The
layout and the arithmetic"). With GPUs and `--device auto|cuda`, a victim that packs runs one task per GPU, each a pack
of ceil(runs / (GPUs x PACKS_PER_GPU)) runs, capped by MEMORY_SHARE of the smallest GPU at MIB_PER_RUN; one that does
not pack, one task per core sharing the GPUs. Without a GPU or with `--device cpu`: one task per core, one run each (a
batched command: K runs a task). A flag given (`--gpus-per-run`, `--runs-per-task`, `--workers`) is kept.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from typing import Any

from audit.executor import ExecutorConfig, victim_packs

#: packs per GPU the rule aims at: a killed pack costs at most a quarter of a GPU's runs
PACKS_PER_GPU = 4
#: the share of a GPU's memory the packs may fill (the rest: CUDA's context, workspaces, allocator slack)
MEMORY_SHARE = 0.5
#: MiB a run adds to a pack, by victim and image pixels (h x w), measured at 8x8 (docs/performance.md
#: "A second H100"); larger images scaled by their pixels until measured
MIB_PER_RUN = {
    "psg": {64: 12.6},
    "real": {64: 12.4},
}


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int


def local_gpus() -> list[Gpu]:
    """This machine's GPUs, from nvidia-smi (no CUDA context in the driver), else torch."""
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run(
            [smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode == 0:
            rows = [line.rsplit(",", 1) for line in out.stdout.strip().splitlines() if "," in line]
            return [Gpu(name.strip(), int(float(mib))) for name, mib in rows]
    import torch

    if not torch.cuda.is_available():
        return []
    return [
        Gpu(props.name, props.total_memory // 2**20)
        for props in map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))
    ]


def cluster_gpus() -> list[Gpu]:
    """Every GPU of the Ray cluster this process is connected to, as each node reports its own."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(local_gpus)
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) > 0]
    found = ray.get(
        [
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in nodes
        ]
    )
    return [gpu for gpus in found for gpu in gpus]


def mib_per_run(victim: Any, pixels: int) -> float:
    """The victim's footprint per packed run at `pixels` (MIB_PER_RUN: the nearest size measured at or
    above; above them all, the largest size's scaled by the pixels); an unmeasured victim: the largest."""
    measured = MIB_PER_RUN.get(getattr(victim, "name", ""))
    if measured is None:
        return max(_footprint(sizes, pixels) for sizes in MIB_PER_RUN.values())
    return _footprint(measured, pixels)


def _footprint(measured: dict[int, float], pixels: int) -> float:
    above = [size for size in sorted(measured) if size >= pixels]
    if above:
        return measured[above[0]]
    largest = max(measured)
    return measured[largest] * pixels / largest


@dataclass(frozen=True)
class Layout:
    config: ExecutorConfig  # every field set
    line: str | None  # what the rule chose, in one line; None where no GPU was in play


def place(
    config: ExecutorConfig,
    *,
    gpus: list[Gpu],
    packs: bool,
    n_runs: int,
    mib_per_run: float,
    cores: int,
    calls: int | None = None,
) -> Layout:
    """The rule for `gpus`, a victim that `packs` or not, and `n_runs`; `calls`: a batched command's runs per task."""
    if calls or config.device == "cpu" or not gpus:  # a batched command trains in its own environment
        if config.device == "cuda" and not gpus and not calls:
            raise ValueError("--device cuda: no GPU is visible here (nvidia-smi and torch see none)")
        per_task = config.runs_per_task or calls or 1
        return Layout(replace(config, gpus_per_run=config.gpus_per_run or 0.0, runs_per_task=per_task), None)
    n = len(gpus)
    if packs:
        share = config.gpus_per_run or 1.0
        workers = config.workers or max(1, int(n / share))
        memory = min(g.memory_mib for g in gpus) * min(share, 1.0) * MEMORY_SHARE
        fits = max(1, int(memory // mib_per_run))
        per_pack = config.runs_per_task or max(1, min(fits, math.ceil(n_runs / (workers * PACKS_PER_GPU))))
    else:
        workers = config.workers or cores
        share = config.gpus_per_run or min(1.0, n / workers)
        per_pack = config.runs_per_task or 1
    chosen = replace(config, workers=workers, gpus_per_run=share, runs_per_task=per_pack, device="cuda")
    kind = f"{n} GPU{'s' if n > 1 else ''} ({gpus[0].name}, {gpus[0].memory_mib / 1024:.0f} GiB)"
    what = "packs of" if packs else "runs of"
    line = (
        f"device: {kind}: {workers} task{'s' if workers > 1 else ''} at a time, {share:g} GPU each, "
        f"{what} {per_pack} per task{'' if packs else ' (the victim does not pack)'}; "
        "--workers, --gpus-per-run and --runs-per-task override"
    )
    return Layout(chosen, line)


def layout(config: ExecutorConfig, *, victim: Any, pixels: int, n_runs: int) -> Layout:
    """`place` for this machine's GPUs, or the cluster's where `config.address` joins one (Ray running)."""
    if config.device == "cpu":
        gpus = []
    elif config.address is not None and config.kind == "ray":
        gpus = cluster_gpus()
    else:
        gpus = local_gpus()
    return place(
        config,
        gpus=gpus,
        packs=victim_packs(victim),
        n_runs=n_runs,
        mib_per_run=mib_per_run(victim, pixels),
        cores=os.cpu_count() or 1,
        calls=getattr(victim, "runs_per_call", None),
    )
