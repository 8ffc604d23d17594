"""GPU check of the condensation victims: accuracy, seconds per run, same-seed determinism."""

import time
import torch
import numpy as np
from victims import load_pool, get_victim
from shadow_runs.plan import membership_matrix

pool = load_pool("digits")
keep = membership_matrix(pool.y, n_runs=4, master_seed=0)
for name in ("dm", "dsa", "kip"):
    for init in ("real", "random"):
        v = get_victim(name)(init=init)
        times, accs = [], []
        for s in range(3):
            torch.cuda.synchronize()
            t = time.perf_counter()
            o = v.run(pool, keep[s], s, device="cuda")
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            accs.append(o.test_accuracy)
        again = v.run(pool, keep[2], 2, device="cuda")
        same = np.array_equal(again.release_x, o.release_x) and np.array_equal(again.logits, o.logits)
        diff = float(np.abs(again.release_x - o.release_x).max())
        print(
            f"{name} {init}: acc {np.mean(accs):.3f} {[round(a, 3) for a in accs]}  s/run {times}  "
            f"same-seed identical {same} (max release diff {diff:.2e})",
            flush=True,
        )
