"""Benchmark and comparison table of the PSG victim on the embedded digits dataset.

python bench/psg.py headline [--n-shadow 256] [extra audit flags]
    Times the headline command `python -m audit.lira --victim psg --n-shadow 256` from an empty
    runs directory: wall time of the whole command and seconds per shadow run in its worker.

python bench/psg.py table [--n-shadow 64] [--runs-dir runs/psg-table]
    PSG at epsilon 1 and 10 with 1 and 10 samples per class, beside `subset` at the same spc
    (the naive baseline) and `dpsgd` at the same epsilon, one markdown row each. Every row is
    a full audit in its own directory under --runs-dir, so a second call re-scores from there.

python bench/psg.py steps [--restarts 4 8 16 32 64] [--epsilons 10 1 0] [--seeds 3] [--spc 10]
    Downstream test accuracy against the number of noisy steps R*T*K (R restarts of the digits
    preset's T = 4, K = 2, J = 5), at each epsilon (0: without noise, sigma = 0, the same
    Poisson batches and clipping), one run per seed on the members of that row of the plan,
    one torch thread; prints mean, sd and seconds per run.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from timing import audit_into, timed_audit, verdict_cells

ROWS = [  # (label, audit flags)
    *[
        (f"psg eps={e} spc={s}", ["--victim", "psg", "--epsilon", str(e), "--spc", str(s)])
        for e in (1, 10)
        for s in (1, 10)
    ],
    *[(f"subset spc={s}", ["--victim", "subset", "--ipc", str(s)]) for s in (1, 10)],
    *[(f"dpsgd eps={e}", ["--victim", "dpsgd", "--epsilon", str(e)]) for e in (1, 10)],
]


def headline(n_shadow: int, extra: list[str]) -> None:
    done = timed_audit(["--victim", "psg", "--n-shadow", str(n_shadow), *extra])
    result, wall, per_run = done.result, done.wall_s, done.run_seconds
    lira = result.attacks["lira_online"]
    print(f"python -m audit.lira --victim psg --n-shadow {n_shadow} {' '.join(extra)}".rstrip())
    print(
        f"wall {wall:.1f} s ({wall / 60:.2f} min); {statistics.mean(per_run):.2f} s per shadow run in its worker "
        f"(median {statistics.median(per_run):.2f}, max {max(per_run):.2f})"
    )
    print(
        f"formal epsilon {result.formal_epsilon:.3f}, test accuracy {result.utility['test_accuracy']:.3f}, "
        f"LiRA online AUC {lira['auc']:.3f}, eps_hat {lira['eps_hat']:.2f}, eps_lower {lira['eps_lower']:.2f}, "
        f"eps_ceiling {lira['eps_ceiling']:.2f}; verdict {' / '.join(verdict_cells(result))}"
    )


def table(n_shadow: int, runs_dir: Path, extra: list[str]) -> None:
    print(
        "| victim | formal eps | test acc (sd over runs) | LiRA AUC | TPR@0.1% FPR (FP) | eps_hat "
        "| verdict's eps_lower (attack, rule) | its eps_ceiling | eps verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, flags in ROWS:
        where = runs_dir / label.replace(" ", "_").replace("=", "")
        s = audit_into(where, [*flags, "--n-shadow", str(n_shadow), *extra]).result
        lira = s.attacks["lira_online"]
        bound, ceiling, verdict = verdict_cells(s)  # the verdict's paid-for bound, not a max over attacks
        formal = "-" if s.formal_epsilon is None else f"{s.formal_epsilon:.2f}"
        print(
            f"| {label} | {formal} | {s.utility['test_accuracy']:.3f} ({s.utility['test_accuracy_std']:.3f}) "
            f"| {lira['auc']:.3f} | {lira['tpr_at_fpr']['0.001']:.4f} ({lira['fp_at_fpr']['0.001']}) "
            f"| {lira['eps_hat']:.2f} | {bound} | {ceiling} | {verdict} |",
            flush=True,
        )


def steps(restarts: list[int], epsilons: list[float], n_seeds: int, spc: int) -> None:
    import time

    import numpy as np
    import torch

    from shadow_runs.plan import membership_matrix, run_seed
    from victims import load_pool
    from victims.base import seeded
    from victims.pipelines.psg import PSGVictim
    from victims.train import fit, to_model_space

    torch.set_num_threads(1)
    pool = load_pool("digits")
    keep = membership_matrix(pool.y, n_runs=n_seeds, master_seed=0)
    print("| epsilon | restarts R | noisy steps R*T*K | sigma | test acc mean (sd) | s per run |")
    print("|---|---|---|---|---|---|")
    for epsilon in epsilons:
        for r in restarts:
            victim = PSGVictim(epsilon=epsilon or 10.0, spc=spc, restarts=r)
            sigma, rate, _ = victim.privacy(pool)
            sigma = sigma if epsilon else 0.0
            accuracies, walls = [], []
            for s in range(n_seeds):
                start = time.perf_counter()
                idx = np.flatnonzero(keep[s])
                x = to_model_space(pool.x[idx], mean=pool.mean, std=pool.std)
                y = torch.as_tensor(pool.y[idx])
                with seeded(run_seed(master_seed=0, run=s)) as generator:  # as PSGVictim.run, sigma given
                    images, labels = victim.generate(
                        x, y, pool=pool, sigma=sigma, sample_rate=rate, generator=generator
                    )
                    model = fit(
                        images,
                        labels,
                        n_classes=pool.n_classes,
                        config=victim.train,
                        flip_ok=pool.flip_ok,
                        generator=generator,
                    )
                x_test = to_model_space(pool.x_test, mean=pool.mean, std=pool.std)
                with torch.no_grad():
                    accuracies.append(float((model(x_test).argmax(1).numpy() == pool.y_test).mean()))
                walls.append(time.perf_counter() - start)
            print(
                f"| {epsilon or 'none'} | {r} | {victim.noisy_steps} | {sigma:.3f} | {np.mean(accuracies):.3f} "
                f"({np.std(accuracies):.3f}) | {np.mean(walls):.1f} |",
                flush=True,
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("headline", "table", "steps"))
    p.add_argument("--restarts", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    p.add_argument("--epsilons", type=float, nargs="+", default=[10.0, 1.0, 0.0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--spc", type=int, default=10)
    p.add_argument("--n-shadow", type=int, default=None, help="default: 256 for headline, 64 for table")
    p.add_argument("--runs-dir", type=Path, default=Path("runs/psg-table"))
    args, extra = p.parse_known_args()
    if args.what == "steps":
        steps(args.restarts, args.epsilons, args.seeds, args.spc)
    elif args.what == "headline":
        headline(args.n_shadow or 256, extra)
    else:
        table(args.n_shadow or 64, args.runs_dir, extra)


if __name__ == "__main__":
    main()
