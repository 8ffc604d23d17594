"""FLOPs per shadow run of the packing victims, counted by torch's own counter, and the time that
arithmetic takes at a GPU's peak: the physical limit a run's measured time is set against.

    python bench/flops.py [--victims psg psg:preset=faithful real] [--datasets digits mnist5k] [--pack 2]
                          [--restarts-fit 1 2]

torch's FLOP formulas (`torch.utils.flop_counter.flop_registry`, what its `FlopCounterMode` sums;
that mode's module tracker breaks PSG's `autograd.grad` on a leaf, so `Flops` applies the same
formulas without it) count the matrix products and convolutions (forward and backward) of one pack
of K runs through the victim's `run_packed` (`audit.executor.run_victims`, as a task runs it),
divided by K; the elementwise work it does not count is memory-bound. A victim whose
generation repeats R restarts (`psg`) is counted at R of `--restarts-fit` and extrapolated linearly to
its own R where that is larger (each restart is the same computation up to its Poisson batch sizes);
`--direct` counts it whole instead. The limit is FLOPs / peak at the precision used: PEAK_TFLOPS.
Prints one JSON line per victim and dataset.
"""

from __future__ import annotations

import argparse
import json

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

#: NVIDIA H200 SXM datasheet, dense (no sparsity), TFLOP/s
PEAK_TFLOPS = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}


class Flops(TorchDispatchMode):
    """Sums torch's FLOP formula of every operator that has one, while the block runs."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += formula(*args, **kwargs, out_val=out)
        return out


def count(spec: str, dataset: str, k: int, **fields) -> float:
    """FLOPs per run of a pack of K runs of the victim `spec` (bench/gpu.py's name:field=value)."""
    from audit.executor import RunTask, run_victims
    from gpu import victim_fields
    from shadow_runs.plan import membership_matrix, run_seed
    from victims import load_pool
    from victims.overrides import build_victim

    name, given = victim_fields(spec)
    victim = build_victim(name, {**given, **fields})
    pool = load_pool(dataset)
    keeps = membership_matrix(pool.y, n_runs=k, master_seed=0)
    tasks = [RunTask(run=r, seed=run_seed(master_seed=0, run=r), keep=keeps[r]) for r in range(k)]
    with Flops() as counter:
        run_victims(victim, pool, tasks, device="cpu")
    return counter.total / k


def per_run(spec: str, dataset: str, *, k: int, fit: tuple[int, int], direct: bool) -> dict:
    from gpu import victim_fields
    from victims.overrides import build_victim

    name, given = victim_fields(spec)
    restarts = getattr(build_victim(name, given), "restarts", None)
    if restarts is None or direct or restarts <= max(fit):
        return {"flops": count(spec, dataset, k), "counted": "whole"}
    a, b = (count(spec, dataset, k, restarts=r) for r in fit)
    slope = (b - a) / (fit[1] - fit[0])
    return {"flops": a + slope * (restarts - fit[0]), "counted": f"restarts {fit[0]} and {fit[1]}, to {restarts}"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victims", nargs="+", default=["psg", "psg:preset=faithful", "real"])
    p.add_argument("--datasets", nargs="+", default=["digits", "mnist5k"])
    p.add_argument("--pack", type=int, default=2, help="K runs counted as one pack")
    p.add_argument("--restarts-fit", type=int, nargs=2, default=[1, 2])
    p.add_argument("--direct", action="store_true", help="count every restart rather than extrapolate")
    args = p.parse_args()
    for dataset in args.datasets:
        for spec in args.victims:
            row = per_run(spec, dataset, k=args.pack, fit=tuple(args.restarts_fit), direct=args.direct)
            limits = {f"limit_ms_{p}": round(row["flops"] / (t * 1e12) * 1e3, 3) for p, t in PEAK_TFLOPS.items()}
            print(
                json.dumps(
                    {
                        "victim": spec,
                        "dataset": dataset,
                        "gflop_per_run": round(row["flops"] / 1e9, 2),
                        "counted": row["counted"],
                        **limits,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
