"""Time `python -m audit.compare` on fake experiments of the size of a real audit.

    python bench/compare.py [--experiments 8] [--targets 16] [--n 1500] [extra audit.compare flags]

Writes that many fake experiment directories (3 attacks, member scores shifted by a small
per-experiment amount, a `subset`-like init group) into a temporary directory, then times
`python -m audit.compare` on them with the first as the baseline: wall and CPU time of the
whole command, imports included.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from pathlib import Path

import numpy as np

from audit.outputs import write_audit
from audit.result import AuditResult
from shadow_runs.plan import PLAN
from timing import run

ATTACKS = ("loss", "lira_online", "lira_offline")


def write_fake(where: Path, *, index: int, targets: int, n: int, runs: int) -> Path:
    rng = np.random.default_rng(index)
    exp = where / f"fake{index}-digits-{index:06x}"
    (exp / "audit").mkdir(parents=True)
    (exp / "runs").mkdir()
    membership = rng.random((targets, n)) < 0.5
    init = membership & (rng.random((targets, n)) < 0.07)
    shift = 0.05 * index
    scores = {a: rng.normal(size=(targets, n)) + shift * membership + 2.0 * init for a in ATTACKS}
    result = AuditResult(
        victim="subset" if index == 0 else "fake",
        dataset="digits",
        config={"ipc": 10, "shift": shift},
        n_shadow=runs,
        target_runs=tuple(range(targets)),
        formal_epsilon=None,
        delta=None,
        claim=None,
        utility={},
        evaluation={"confidence": 0.95, "plan": PLAN, "inclusion_rate": 0.5},
        attacks={},
        bound=None,
    )
    write_audit(exp / "audit", result=result, scores=scores, membership=membership, init_mask=init)
    for r in range(runs):
        (exp / "runs" / f"{r:05d}.json").write_text(json.dumps({"test_accuracy": 0.9 + 0.01 * rng.normal()}))
    return exp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiments", type=int, default=8)
    p.add_argument("--targets", type=int, default=16)
    p.add_argument("--n", type=int, default=1500)
    p.add_argument("--runs", type=int, default=64)
    args, extra = p.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [
            write_fake(Path(tmp), index=i, targets=args.targets, n=args.n, runs=args.runs)
            for i in range(args.experiments)
        ]
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = run("compare", [*dirs[1:], "--baseline", dirs[0], *extra], show=False)
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    print(
        f"{args.experiments} experiments x {args.targets} targets x {args.n} examples x {len(ATTACKS)} attacks "
        f"{' '.join(extra)}: {wall:.1f} s wall, {cpu:.1f} s CPU"
    )


if __name__ == "__main__":
    main()
