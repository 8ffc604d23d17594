"""Benchmarks of the conditional-GAN victims and the GAN-Leaks attacks on digits (one CPU thread).

python bench/ganleak.py speed [--runs 3] [victim flags as KEY=VALUE ...]
    Seconds per `cgan` shadow run on the full digits pool (training, release, downstream
    ConvNet and all three reconstructions; mean and sd over --runs seeds), then seconds per
    1,000 reconstructions of each kind with a generator trained as in a run.

python bench/ganleak.py audit [--per-class 20] [--n-shadow 16] [--runs-dir DIR] [audit flags ...]
    Writes a small digits pool (the first --per-class pool images of each class, so a run's GAN
    trains on about half of them; `victims.data.write_class_balanced_subset`) to
    DIR/digits-<k>.npz and runs
    `python -m audit.ganleak --dataset DIR/digits-<k>.npz --n-shadow R [audit flags]`
    (default `--victim cgan`), then prints AUC, TPR at 1% and 0.1% FPR with the false
    positives behind them, eps_lower and eps_ceiling, one line per attack.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from timing import audit_into

from shadow_runs.plan import membership_matrix
from victims import get_victim, load_pool
from victims.base import seeded
from victims.condensation.condense import Members
from victims.data import write_class_balanced_subset
from victims.pipelines.cgan import fbb_losses, pbb_losses, wb_losses


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def speed(runs: int, overrides: dict) -> None:
    torch.set_num_threads(1)
    pool = load_pool("digits")
    keep = membership_matrix(pool.y, n_runs=2, master_seed=0)[0]
    victim = get_victim("cgan")(**overrides)
    seconds = []
    for seed in range(runs):
        start = time.perf_counter()
        victim.run(pool, keep, seed)
        seconds.append(time.perf_counter() - start)
    sd = statistics.stdev(seconds) if runs > 1 else 0.0
    print(
        f"cgan shadow run on digits ({pool.n_pool} pool images, {keep.sum()} members), one thread: "
        f"{statistics.mean(seconds):.2f} s (sd {sd:.2f}, {runs} runs)"
    )

    members = Members.of(pool, keep, device="cpu")
    with seeded(0) as generator:
        gen, critic = victim.networks(pool)
        start = time.perf_counter()
        victim.train_gan(gen, critic, members.x, members.y, pool=pool, generator=generator)
        train = time.perf_counter() - start
        gen.eval()
        x, y = torch.tensor(pool.x[:1000]), torch.tensor(pool.y[:1000])
        start = time.perf_counter()
        _, codes = fbb_losses(victim, gen, x, y, n_classes=pool.n_classes, generator=generator)
        fbb = time.perf_counter() - start
        start = time.perf_counter()
        wb_losses(victim, gen, x, y, codes)
        wb = time.perf_counter() - start
        few = 20
        start = time.perf_counter()
        pbb_losses(victim, gen, x[:few], y[:few], codes[:few])
        pbb = (time.perf_counter() - start) * 1000 / few
    print(f"GAN training ({victim.steps} steps): {train:.2f} s")
    print(
        f"seconds per 1,000 reconstructions: fbb {fbb:.2f} ({victim.fbb_samples} samples per class), "
        f"wb {wb:.2f} ({victim.wb_steps} {victim.wb_optimizer} steps, batched), "
        f"pbb {pbb:.1f} ({codes.shape[1]} Powell searches of {victim.pbb_evaluations} evaluations each; "
        f"from {few} examples)"
    )


def audit(per_class: int, n_shadow: int, runs_dir: Path, extra: list[str]) -> None:
    data = write_class_balanced_subset(load_pool("digits"), per_class, runs_dir / f"digits-{per_class}.npz")
    if "--victim" not in extra:
        extra = ["--victim", "cgan", *extra]
    done = audit_into(runs_dir, ["--dataset", data, "--n-shadow", n_shadow, *extra], command="ganleak")
    result = done.result
    print(" ".join(done.argv))
    print(
        f"wall {done.wall_s:.1f} s; {statistics.mean(done.run_seconds):.2f} s per run in its worker; test accuracy "
        f"{result.utility['test_accuracy']:.3f}; formal epsilon {result.formal_epsilon}"
    )
    print("| attack | AUC | TPR@1% FPR (FP) | TPR@0.1% FPR (FP) | members / non-members | eps_lower | eps_ceiling |")
    print("|---|---|---|---|---|---|---|")
    for name, a in result.attacks.items():
        print(
            f"| {name} | {a['auc']:.3f} | {a['tpr_at_fpr']['0.01']:.4f} ({a['fp_at_fpr']['0.01']}) "
            f"| {a['tpr_at_fpr']['0.001']:.4f} ({a['fp_at_fpr']['0.001']}) | {a['n_members']} / {a['n_nonmembers']} "
            f"| {a['eps_lower']:.2f} | {a['eps_ceiling']:.2f} |"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("speed", "audit"))
    p.add_argument("--runs", type=int, default=3, help="speed: timed runs")
    p.add_argument("--per-class", type=int, default=20, help="audit: pool images per class")
    p.add_argument("--n-shadow", type=int, default=16)
    p.add_argument("--runs-dir", type=Path, default=Path("runs/ganleak-bench"))
    args, extra = p.parse_known_args()
    if args.what == "speed":
        speed(args.runs, {k.replace("-", "_"): _value(v) for k, v in (item.split("=", 1) for item in extra)})
    else:
        audit(args.per_class, args.n_shadow, args.runs_dir, extra)


if __name__ == "__main__":
    main()
