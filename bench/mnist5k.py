"""Every victim on mnist5k at the papers' resolution (28x28, the reference ConvNet's padding): the
downstream test accuracy of one run at 10 images per class, beside the seeds' MNIST figures.

    python bench/mnist5k.py [--rows subset dm ...] [--seeds 1] [--compile on|off]

One run per row and seed: the members of row `seed` of `membership_matrix(pool.y, master_seed=0)`
(half the 4,000-image pool, ~2,000 members), run seed `seed`, each victim at its defaults but for
the flags of its row, on one torch thread, with `--compile` as given (on: the steps a worker
compiles, `victims.compiled`; auto turns it on at 28x28 from 3 runs per worker). Prints a markdown
table: test accuracy on mnist5k's 1,000 test images and the wall time of the run (the first
compiled run of a victim includes its compilation).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

#: row label -> (victim, its fields); 10 per class wherever the victim releases a set
ROWS = {
    "real (all members)": ("real", {}),
    "subset ipc=10": ("subset", {"ipc": 10}),
    "dm ipc=10": ("dm", {"ipc": 10}),
    "dsa ipc=10": ("dsa", {"ipc": 10}),
    "kip ipc=10": ("kip", {"ipc": 10}),
    **{f"psg faithful spc=10 eps={e}": ("psg", {"spc": 10, "preset": "faithful", "epsilon": e}) for e in (10.0, 1.0)},
    **{f"dpsgd eps={e}": ("dpsgd", {"epsilon": e}) for e in (10.0, 1.0)},
    **{f"dpcgan ipc=10 eps={e}": ("dpcgan", {"ipc": 10, "epsilon": e}) for e in (10.0, 1.0)},
    **{
        f"dpcgan ipc=10 eps={e} latent=32 steps=1000": (
            "dpcgan",
            {"ipc": 10, "epsilon": e, "latent_dim": 32, "steps": 1000},
        )
        for e in (10.0, 1.0)
    },
    **{f"dpkernel ipc=10 eps={e}": ("dpkernel", {"ipc": 10, "epsilon": e}) for e in (10.0, 1.0)},
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS), metavar="ROW")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--compile", choices=("on", "off"), default="on")
    args = p.parse_args()
    torch.set_num_threads(1)

    from shadow_runs.plan import membership_matrix
    from victims import get_victim, load_pool
    from victims.compiled import compiled_steps

    pool = load_pool("mnist5k")
    keeps = membership_matrix(pool.y, n_runs=max(2, args.seeds), master_seed=0)
    print(f"mnist5k: {pool.n_pool} pool, {len(pool.y_test)} test, {pool.image_shape}; compile {args.compile}")
    print("| row | test accuracy | seconds per run |\n|---|---|---|")
    for label in args.rows:
        name, fields = ROWS[label]
        victim = get_victim(name)(**fields)
        accuracies, seconds = [], []
        for seed in range(args.seeds):
            start = time.perf_counter()
            with compiled_steps(args.compile == "on"):
                observations = victim.run(pool, keeps[seed], seed)
            seconds.append(time.perf_counter() - start)
            accuracies.append(observations.test_accuracy)
        accuracy = ", ".join(f"{a:.3f}" for a in accuracies)
        print(f"| {label} | {accuracy} | {statistics.median(seconds):.0f} |", flush=True)


if __name__ == "__main__":
    main()
