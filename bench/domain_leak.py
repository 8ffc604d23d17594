"""A one-column domain leak against its schema twin, on the worst-case pair, over master seeds
(docs/results/third-party.md, "A one-column domain leak"): dpmm 0.1.9's MST with column a's categories
read from the rows (thirdparty/pipelines/dpmm-mst-pair-leak-a.toml, a bug planted on purpose) and the
same pipeline given the schema (dpmm-mst-pair.toml), each audited at the claim (1, 1e-5) with the
verdict on `support_cal`, declared before the audit.

    python bench/domain_leak.py run [--seeds 10] [--n-shadow 128] [--runs-dir runs/domain-leak]
    python bench/domain_leak.py table [--runs-dir runs/domain-leak]

`run` audits each pipeline at master seeds 0 .. seeds-1 (`--dataset pair-3bin --plan fixed-remainder
--canaries 1 --canary-kind record`, `--n-shadow` runs, half of them targets), one audit at a time under
the suite's interpreter, writing each audit's terminal output and its CPU seconds (the audit and its
commands: user, system) and wall to RUNS_DIR/<pipeline>-seed<s>.log; a second call re-scores the stores.
dpmm's noise comes from the operating system (OpenDP), so a seed fixes the coins, not the fits.
Needs thirdparty/envs/dpmm (bash thirdparty/build_envs.sh dpmm). About 3 minutes and 45 CPU-seconds an
audit of 128 runs on 2 cores shared with other jobs.

`table` prints one row per pipeline and seed from the stores and logs: the verdict, its bound, the
raw `support`'s own bound beside `support_cal`'s, the target runs where a = 1 was released with the
target IN and OUT, and the CPU seconds.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import time
from pathlib import Path

import numpy as np

from timing import audited_stores, command_line

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ("dpmm-mst-pair-leak-a", "dpmm-mst-pair")
CPU = re.compile(r"cpu_user=([\d.]+) cpu_sys=([\d.]+) wall=([\d.]+)")


def audit_flags(pipeline: str, seed: int, n_shadow: int, runs_dir: Path) -> list[str]:
    return [
        *("--victim", "command", "--pipeline", str(ROOT / "thirdparty" / "pipelines" / f"{pipeline}.toml")),
        *("--epsilon", "1", "--delta", "1e-5", "--claimed-epsilon", "1", "--dataset", "pair-3bin"),
        *("--plan", "fixed-remainder", "--canaries", "1", "--canary-kind", "record", "--n-shadow", str(n_shadow)),
        *("--classifier-iterations", "5", "--verdict-attack", "support_cal", "--seed", str(seed)),
        *("--runs-dir", str(runs_dir / pipeline), "--executor", "inline", "--quiet"),
    ]


def run(args: argparse.Namespace) -> None:
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    for seed in range(args.seeds):
        for pipeline in PIPELINES:
            before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
            found = subprocess.run(
                command_line("lira", audit_flags(pipeline, seed, args.n_shadow, args.runs_dir)),
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = f"cpu_user={after.ru_utime - before.ru_utime:.2f} cpu_sys={after.ru_stime - before.ru_stime:.2f}"
            log = f"{found.stdout}{found.stderr}{cpu} wall={time.monotonic() - start:.2f}\n"
            (args.runs_dir / f"{pipeline}-seed{seed}.log").write_text(log)
            print(f"{pipeline} seed {seed}: exit {found.returncode}; {cpu}", flush=True)


def leak_counts(store: Path, target_runs) -> tuple[int, int, int, int]:
    """(target runs with a = 1 released and the target IN, target runs IN, the same OUT, target runs OUT)."""
    keep = np.load(store / "keep.npy")[:, -1]  # the target record, the pool's last row
    released = []
    for r in target_runs:
        with np.load(store / "runs" / f"{r:05d}.npz") as z:
            released.append(bool((z["release_x"][:, 0] == 1).any()))  # column a
    released, coins = np.array(released), keep[list(target_runs)]
    return int((released & coins).sum()), int(coins.sum()), int((released & ~coins).sum()), int((~coins).sum())


def table(args: argparse.Namespace) -> None:
    print("| pipeline | seed | runs | verdict | ε ≥ (support_cal, verdict) | support's own bound | "
          "a = 1 released, target IN | a = 1 released, target OUT | CPU s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    totals: dict[str, list] = {}
    for pipeline in PIPELINES:
        for store, result in sorted(
            audited_stores(args.runs_dir / pipeline), key=lambda found: found[1].evaluation["master_seed"]
        ):
            seed, verdict = result.evaluation["master_seed"], result.bound
            log = args.runs_dir / f"{pipeline}-seed{seed}.log"
            found = CPU.search(log.read_text()) if log.exists() else None
            cpu = float(found[1]) + float(found[2]) if found else float("nan")
            tp, n_in, fp, n_out = leak_counts(store, result.target_runs)
            violated = verdict["kind"] == "epsilon_violated"
            totals.setdefault(pipeline, []).append((violated, cpu))
            print(
                f"| {pipeline} | {seed} | {result.n_shadow} | {'**violated**' if violated else verdict['kind']} | "
                f"{verdict['eps_lower']:.2f} | {result.attacks['support']['eps_lower_fdp']:.2f} | "
                f"{tp} of {n_in} | {fp} of {n_out} | {cpu:.0f} |"
            )
    for pipeline, rows in totals.items():
        cpu = sum(c for _, c in rows)
        print(f"{pipeline}: violated on {sum(v for v, _ in rows)} of {len(rows)} seeds; {cpu:.0f} CPU-seconds in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["run", "table"])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-shadow", type=int, default=128)
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "domain-leak")
    args = parser.parse_args()
    (run if args.what == "run" else table)(args)


if __name__ == "__main__":
    main()
