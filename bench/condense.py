"""Benchmarks and the comparison grid of the dataset-condensation victims on the embedded digits.

python bench/condense.py speed [--repeats 8] [--ipc 10]
    Seconds per shadow run of dm, dsa and kip (and subset for scale) on one torch thread, as a
    Ray worker runs it: median and range over --repeats runs with different seeds and members.

python bench/condense.py headline [--n-shadow 256] [extra audit flags]
    Times `python -m audit.lira --victim dm --n-shadow 256` from an empty runs directory.

python bench/condense.py grid [--n-shadow 64] [--runs-dir runs/condense-grid] [--ipc 1 10]
    Audits dm, dsa and kip with real and random initialisation, `subset` at the same ipc (the
    naive baseline) and `real`, each in its own directory under --runs-dir (a second call
    re-scores from there), then prints `python -m audit.compare` of each ipc against its subset
    (loss, LiRA online and calibrated DCR; all members, init points, other members) and of
    `real` against it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from timing import audit_into, audited_stores, run, timed_audit

CONDENSATION = ("dm", "dsa", "kip")
ATTACKS = ("loss", "lira_online", "dcr_lira")  # compared: the model attacks and the strongest release attack


def speed(repeats: int, ipc: int) -> None:
    import torch

    from shadow_runs.plan import membership_matrix, run_seed
    from victims import get_victim, load_pool

    torch.set_num_threads(1)
    pool = load_pool("digits")
    keep = membership_matrix(pool.y, n_runs=repeats, master_seed=0)
    print(f"seconds per shadow run, ipc {ipc}, one torch thread, {repeats} runs each (median, min-max), test accuracy")
    for name in (*CONDENSATION, "subset"):
        victim = get_victim(name)(ipc=ipc)
        seconds, accuracy = [], []
        for r in range(repeats):
            start = time.perf_counter()
            obs = victim.run(pool, keep[r], run_seed(master_seed=0, run=r))
            seconds.append(time.perf_counter() - start)
            accuracy.append(obs.test_accuracy)
        print(
            f"  {name:<7} {statistics.median(seconds):5.2f} s  ({min(seconds):.2f}-{max(seconds):.2f})   "
            f"accuracy {statistics.mean(accuracy):.3f} (sd {statistics.stdev(accuracy):.3f})",
            flush=True,
        )


def headline(n_shadow: int, extra: list[str]) -> None:
    done = timed_audit(["--victim", "dm", "--n-shadow", str(n_shadow), *extra])
    result, wall, per_run = done.result, done.wall_s, done.run_seconds
    print(f"python -m audit.lira --victim dm --n-shadow {n_shadow} {' '.join(extra)}".rstrip())
    print(
        f"wall {wall:.1f} s ({wall / 60:.2f} min); {statistics.mean(per_run):.2f} s per shadow run in its worker "
        f"(median {statistics.median(per_run):.2f}, max {max(per_run):.2f}); "
        f"test accuracy {result.utility['test_accuracy']:.3f}"
    )
    for name, a in result.attacks.items():
        init = a.get("subgroups", {}).get("init")
        print(
            f"  {name:<13} AUC {a['auc']:.3f}  eps_lower {a['eps_lower']:.2f} (ceiling {a['eps_ceiling']:.2f})"
            + (
                f"   init: AUC {init['auc']:.3f} TPR@1% {init['tpr_at_fpr']['0.01']:.3f} "
                f"TPR@0.1% {init['tpr_at_fpr']['0.001']:.3f}"
                if init
                else ""
            )
        )


def grid(n_shadow: int, runs_dir: Path, ipcs: list[int], extra: list[str]) -> None:
    def audit(label: str, flags: list[str]) -> Path:
        done = audit_into(runs_dir / label, [*flags, "--n-shadow", str(n_shadow), *extra])
        print(f"# {label}: {done.wall_s:.0f} s", file=sys.stderr, flush=True)
        return done.store

    real = audit("real", ["--victim", "real"])
    for ipc in ipcs:
        baseline = audit(f"subset_ipc{ipc}", ["--victim", "subset", "--ipc", str(ipc)])
        victims = [
            audit(f"{name}_{init}_ipc{ipc}", ["--victim", name, "--init", init, "--ipc", str(ipc)])
            for name in CONDENSATION
            for init in ("real", "random")
        ]
        print(f"\n## ipc {ipc}: against subset ipc {ipc}\n", flush=True)
        groups = ["--group", "all", "init", "other_members"]
        out = ["--out", runs_dir / f"compare_ipc{ipc}.json"]
        run("compare", [*victims, "--baseline", baseline, "--attack", *ATTACKS, *groups, *out])
        print(f"\n## real (every member, no release) against subset ipc {ipc}\n", flush=True)
        run("compare", [real, "--baseline", baseline, "--attack", "loss", "lira_online"])


def _cell(attack: dict | None, group: str) -> str:
    """'AUC / TPR@0.1% / eps_lower' of an attack on all members, 'AUC / TPR@1% / TPR@0.1%' on a
    sub-group (which carries no epsilon); '-' where the group is absent."""
    if attack is None:
        return "-"
    if group == "all":
        return f"{attack['auc']:.3f} / {attack['tpr_at_fpr']['0.001']:.4f} / {attack['eps_lower']:.2f}"
    m = attack.get("subgroups", {}).get(group)
    if m is None:
        return "-"
    return f"{m['auc']:.3f} / {m['tpr_at_fpr']['0.01']:.4f} / {m['tpr_at_fpr']['0.001']:.4f}"


def overview(runs_dir: Path) -> None:
    """One markdown row per audited experiment under `runs_dir`: accuracy, the strongest model
    attack (LiRA online) on all members, and the loss and calibrated-DCR attacks per group."""
    print(
        "| release | test acc (sd) | LiRA online, all | loss, init | dcr_lira, init | dcr_lira, other members "
        "| dcr_lira, all |"
    )
    print("|---|---|---|---|---|---|---|")
    for store, s in audited_stores(runs_dir, "*/*"):
        a = s.attacks
        print(
            f"| {store.parent.name} | {s.utility['test_accuracy']:.3f} ({s.utility['test_accuracy_std']:.3f}) "
            f"| {_cell(a['lira_online'], 'all')} | {_cell(a['loss'], 'init')} | {_cell(a.get('dcr_lira'), 'init')} "
            f"| {_cell(a.get('dcr_lira'), 'other_members')} | {_cell(a.get('dcr_lira'), 'all')} |"
        )
    print(
        "\ncells: all members AUC / TPR at 0.1% FPR / eps_lower (one-run bound, 95%); "
        "sub-groups (init, other members) AUC / TPR at 1% FPR / TPR at 0.1% FPR (no epsilon)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("speed", "headline", "grid"))
    p.add_argument("--n-shadow", type=int, default=None, help="default: 256 for headline, 64 for grid")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--ipc", type=int, nargs="+", default=None, help="default: 10 for speed, 1 and 10 for grid")
    p.add_argument("--runs-dir", type=Path, default=Path("runs/condense-grid"))
    args, extra = p.parse_known_args()
    if args.what == "speed":
        speed(args.repeats, (args.ipc or [10])[0])
    elif args.what == "headline":
        headline(args.n_shadow or 256, extra)
    else:
        grid(args.n_shadow or 64, args.runs_dir, args.ipc or [1, 10], extra)
        overview(args.runs_dir)


if __name__ == "__main__":
    main()
